package leasetable

import (
	"slices"
	"testing"
	"time"
)

func (h *harness) grantPrefix(id SessionID, prefix string) time.Duration {
	h.tb.Helper()
	d := h.tab.GrantPrefix(id, prefix, term, h.now)
	checkInvariants(h.tb, h.tab)
	return d
}

func (h *harness) relinquishPrefix(id SessionID, prefixes ...string) Effects {
	h.tb.Helper()
	return h.record(h.tab.RelinquishPrefixes(id, prefixes, h.now))
}

// TestPrefixLeaseHoldsCreate: a write of a key that no one holds, a
// create under a leased prefix, invalidates the prefix's holders and
// waits for them, and the prefix gets no lease while it is pending.
func TestPrefixLeaseHoldsCreate(t *testing.T) {
	h := newHarness(t, sA, sB, sW)
	if got := h.grantPrefix(sA, "dir/"); got != term {
		t.Fatalf("GrantPrefix = %v, want %v", got, term)
	}
	op, _ := h.write(sW, "dir/new")
	h.wantReady(op, false)
	if want := []Notice{{Session: sA, Key: "dir/"}}; !slices.Equal(h.pinvalid, want) {
		t.Fatalf("prefix invalidations %v, want %v", h.pinvalid, want)
	}
	if op.Holders != 1 {
		t.Fatalf("the create counted %d holders, want 1", op.Holders)
	}
	if got := h.grantPrefix(sB, "dir/"); got != 0 {
		t.Fatalf("a prefix lease of %v while a write under it is pending", got)
	}
	h.relinquishPrefix(sA, "dir/")
	h.wantReady(op, true)
	h.done(op, true)
	st := h.tab.Stats()
	if st.PrefixLeases != 0 || st.InvalidationsSent != 1 || st.InvalidationsAcked != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPrefixLeaseAncestors: a write invalidates the leases of every
// leasable prefix of its key, the empty one included, and only those; a
// prefix that does not end with the separator is not leased.
func TestPrefixLeaseAncestors(t *testing.T) {
	h := newHarness(t, sA, sB, sC, sD, sW)
	for id, p := range map[SessionID]string{sA: "", sB: "a/", sC: "a/b/", sD: "a/c/"} {
		if got := h.grantPrefix(id, p); got != term {
			t.Fatalf("GrantPrefix(%q) = %v", p, got)
		}
	}
	for _, p := range []string{"a", "a/b", "x/y"} {
		if got := h.grantPrefix(sA, p); got != 0 {
			t.Fatalf("GrantPrefix(%q) = %v; want 0: not separator-bounded", p, got)
		}
	}
	op, _ := h.write(sW, "a/b/c")
	got := sessionsOf(h.pinvalid)
	slices.Sort(got)
	if want := []SessionID{sA, sB, sC}; !slices.Equal(got, want) {
		t.Fatalf("invalidated the prefix leases of %v, want %v (not a/c/'s)", got, want)
	}
	for _, id := range []SessionID{sA, sB} {
		h.relinquishPrefix(id, map[SessionID]string{sA: "", sB: "a/"}[id])
		h.wantReady(op, false)
	}
	h.relinquishPrefix(sC, "a/b/")
	h.wantReady(op, true)
}

// TestPrefixLeaseSilentHolder: a holder that never answers holds a write
// under its prefix back until its lease has run out: term + ε after the
// grant.
func TestPrefixLeaseSilentHolder(t *testing.T) {
	h := newHarness(t, sA, sW)
	h.grantPrefix(sA, "d/")
	h.at(time.Second)
	op, _ := h.write(sW, "d/x")
	h.wantNextDeadline(t0.Add(term + eps))
	h.at(term + eps - 1).tick()
	h.wantReady(op, false)
	h.at(term + eps).tick()
	h.wantReady(op, true)
	if st := h.tab.Stats(); st.InvalidationsExpired != 1 || st.PrefixLeases != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestPrefixLeaseWriterOwn: the writer's own prefix lease is dropped
// without asking (its library dropped the listing first), and a write
// lease on a key under a prefix keeps the prefix from being leased while
// it lasts, since its holder writes without waiting.
func TestPrefixLeaseWriterOwn(t *testing.T) {
	h := newHarness(t, sA, sW)
	h.grantPrefix(sW, "d/")
	op, _ := h.write(sW, "d/x")
	h.wantReady(op, true)
	if len(h.pinvalid) != 0 {
		t.Fatalf("the writer was asked to drop its own listing: %v", h.pinvalid)
	}
	h.done(op, true)

	h.grantPrefix(sA, "d/")
	acq, _ := h.acquire(sW, "d/y")
	h.wantReady(acq, false)
	h.relinquishPrefix(sA, "d/")
	h.wantReady(acq, true)
	h.doneAcquire(acq, 1)
	h.at(2 * term) // past the hot window of the writes above
	if got := h.grantPrefix(sA, "d/"); got != 0 {
		t.Fatalf("a prefix lease of %v over a write lease on a key under it", got)
	}
	if _, err := h.release(sW, "d/y", 1); err != nil {
		t.Fatal(err)
	}
	if got := h.grantPrefix(sA, "d/"); got != term {
		t.Fatalf("after the write lease ended: %v", got)
	}
}

// TestPrefixLeaseHot: a prefix written twice within a term gets no lease
// for a term after the second write.
func TestPrefixLeaseHot(t *testing.T) {
	h := newHarness(t, sA, sW)
	h.grantPrefix(sA, "d/")
	op, _ := h.write(sW, "d/1")
	h.relinquishPrefix(sA, "d/")
	h.done(op, true)
	if got := h.grantPrefix(sA, "d/"); got != term {
		t.Fatalf("after one write: %v", got)
	}
	h.at(time.Second)
	op, _ = h.write(sW, "d/2")
	h.relinquishPrefix(sA, "d/")
	h.done(op, true)
	if got := h.grantPrefix(sA, "d/"); got != 0 {
		t.Fatalf("after a second write within a term: %v, want 0", got)
	}
	h.at(time.Second + term).tick()
	if got := h.grantPrefix(sA, "d/"); got != term {
		t.Fatalf("a term after the last write: %v", got)
	}
}

// TestPrefixLeaseCapsAndClose: prefix leases count against the session's
// and the server's lease caps; a graceful close drops them, a lost
// connection keeps them until they run out.
func TestPrefixLeaseCapsAndClose(t *testing.T) {
	h := newHarness(t)
	h.tab = New(Config{Epsilon: eps, MaxLeasesPerSession: 2, MaxLeases: 3})
	for _, id := range []SessionID{sA, sB, sW} {
		h.tab.AddSession(id)
	}
	h.grant(sA, "k")
	h.grantPrefix(sA, "p/")
	if got := h.grantPrefix(sA, "q/"); got != 0 {
		t.Fatalf("a third lease of a session capped at 2: %v", got)
	}
	h.grantPrefix(sB, "q/")
	if got := h.grantPrefix(sB, "r/"); got != 0 {
		t.Fatalf("a fourth lease of a server capped at 3: %v", got)
	}
	h.close(sA, true)
	if st := h.tab.Stats(); st.PrefixLeases != 1 || st.Leases != 0 {
		t.Fatalf("after a graceful close: %+v", st)
	}
	h.close(sB, false)
	op, _ := h.write(sW, "q/x")
	h.wantReady(op, false)
	h.at(term + eps).tick()
	h.wantReady(op, true)
}

// TestPrefixLeaseHandOver: the leases of a table, prefix leases among
// them, restored in another are waited for as their own.
func TestPrefixLeaseHandOver(t *testing.T) {
	h := newHarness(t, sA)
	h.grantPrefix(sA, "d/")
	var infos []LeaseInfo
	for _, l := range h.tab.Leases() {
		if l.Prefix {
			infos = append(infos, l)
		}
	}
	if len(infos) != 1 || infos[0].Key != "d/" || !infos[0].Expiry.Equal(t0.Add(term+eps)) {
		t.Fatalf("Leases() = %+v", infos)
	}
	if !h.tab.LatestExpiry().Equal(t0.Add(term + eps)) {
		t.Fatalf("LatestExpiry %v", h.tab.LatestExpiry())
	}
	n := newHarness(t, sW)
	n.tab.RestorePrefixLease(100, "d/", infos[0].Expiry)
	op, _ := n.write(sW, "d/x")
	n.wantReady(op, false)
	n.at(term + eps).tick()
	n.wantReady(op, true)
}
