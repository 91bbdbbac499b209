package leasetable

import (
	"errors"
	"testing"
	"time"
)

// A fencing token is a fence, not a credential: tokens come from one
// counter, so a session that took any write lease can guess the live token
// of another key. These tests check that only the holder, or a session of
// the holder's client, writes or releases under a write lease.

// TestFencedWriteFromAnotherSession: B guesses A's live token. B's fenced
// write and B's release are refused, whether or not the sessions gave a
// client identity, and change nothing: no op is queued, no recall is sent,
// the lease stays A's. A's own fenced write is ready at once.
func TestFencedWriteFromAnotherSession(t *testing.T) {
	for _, c := range []struct {
		name   string
		ca, cb uint64 // client identities of A and B
	}{
		{"no identities", 0, 0},
		{"holder without identity", 0, 2},
		{"guesser without identity", 1, 0},
		{"two clients", 1, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, sA, sB)
			h.tab.SetClient(sA, c.ca)
			h.tab.SetClient(sB, c.cb)
			h.mustAcquire(sA, "k", 1)
			h.mustAcquire(sA, "j", 2)
			before := h.tab.Stats()
			op, eff, err := h.tokenWrite(sB, "k", 1)
			if !errors.Is(err, ErrFenced) {
				t.Fatalf("B's write with A's live token: %v, want ErrFenced", err)
			}
			if !eff.empty() || h.ready[op] {
				t.Fatalf("B's fenced write had effects %+v", eff)
			}
			eff, err = h.release(sB, "k", 1)
			if !errors.Is(err, ErrNotFound) || !eff.empty() {
				t.Fatalf("B's release with A's live token: %v, %+v; want ErrNotFound and no effects", err, eff)
			}
			if tok, holder, ok := h.tab.WriteLease("k"); !ok || tok != 1 || holder != sA {
				t.Fatalf("WriteLease(k) = %d, %d, %v after B's attempts; want 1 held by A", tok, holder, ok)
			}
			if after := h.tab.Stats(); after != before {
				t.Fatalf("Stats %+v after B's attempts, want unchanged %+v", after, before)
			}
			if len(h.recalls) != 0 {
				t.Fatalf("recalls %+v, want none", h.recalls)
			}
			if got := h.renew(sA, "k"); got[0] != term {
				t.Fatalf("A renews its write lease after B's attempts: %v", got)
			}
			op, eff, err = h.tokenWrite(sA, "k", 1)
			if err != nil || len(eff.Ready) != 1 || eff.Ready[0] != op {
				t.Fatalf("A's fenced write: %v, %+v; want ready at once", err, eff)
			}
			h.done(op, true)
			if _, err := h.release(sA, "k", 1); err != nil {
				t.Fatalf("A's release: %v", err)
			}
		})
	}
}

// TestWriteLeaseTakenOverBySameClient: a client whose connection was lost
// comes back on a new session with the same client identity. Its fenced
// write takes the write lease over, and the new session renews and
// releases it; another client's session with the same token is fenced
// before and after.
func TestWriteLeaseTakenOverBySameClient(t *testing.T) {
	const client = 7
	h := newHarness(t, sA, sB, sC)
	h.tab.SetClient(sA, client)
	h.tab.SetClient(sB, client+1)
	h.mustAcquire(sA, "k", 4)
	h.close(sA, false) // lost: the lease stays until it expires
	h.tab.SetClient(sC, client)
	h.at(time.Second)
	if _, _, err := h.tokenWrite(sB, "k", 4); !errors.Is(err, ErrFenced) {
		t.Fatalf("another client's write with the token: %v, want ErrFenced", err)
	}
	op, eff, err := h.tokenWrite(sC, "k", 4)
	if err != nil || len(eff.Ready) != 1 {
		t.Fatalf("the holder's client's write from its new session: %v, %+v; want ready at once", err, eff)
	}
	if _, holder, _ := h.tab.WriteLease("k"); holder != sC {
		t.Fatalf("the lease is held by %d, want the new session %d", holder, sC)
	}
	h.done(op, true)
	if got := h.renew(sC, "k"); got[0] != term {
		t.Fatalf("the new session renews the lease: %v", got)
	}
	if _, _, err := h.tokenWrite(sB, "k", 4); !errors.Is(err, ErrFenced) {
		t.Fatalf("another client's write with the token after the takeover: %v, want ErrFenced", err)
	}
	if eff, err := h.release(sC, "k", 4); err != nil || len(eff.EndWrite) != 1 {
		t.Fatalf("the new session's release: %v, %+v", err, eff)
	}
}

// TestRestoredWriteLeaseWithoutClient: a write lease restored without a
// client identity (recorded by an older version, or granted to a client
// that gave none) is taken over by nobody; it ends at its expiry.
func TestRestoredWriteLeaseWithoutClient(t *testing.T) {
	h := newHarness(t, sA, sB)
	h.tab.SetClient(sB, 9)
	h.tab.RestoreWriteLease("k", 5, 0, t0.Add(time.Second), 0)
	for _, id := range []SessionID{sA, sB} {
		if _, _, err := h.tokenWrite(id, "k", 5); !errors.Is(err, ErrFenced) {
			t.Errorf("session %d's write with the token of a lease restored without client: %v, want ErrFenced", id, err)
		}
		if _, err := h.release(id, "k", 5); !errors.Is(err, ErrNotFound) {
			t.Errorf("session %d's release of a lease restored without client: %v, want ErrNotFound", id, err)
		}
	}
	h.now = t0.Add(time.Second)
	if eff := h.tick(); len(eff.EndWrite) != 1 {
		t.Fatalf("the restored lease did not end at its expiry: %+v", eff)
	}
}
