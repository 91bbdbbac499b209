package leasetable

import (
	"slices"
	"testing"
	"time"
)

// TestAdoptClient: a client that lost its connection and came back on a
// new session (DESIGN §6) takes its read and write leases over, by its
// client identity: the new session renews them, answers the
// invalidation and the recall its lost session missed, and releases the
// write lease, so the writers waiting for them go at once instead of
// waiting the leases out. A session of another client takes nothing.
func TestAdoptClient(t *testing.T) {
	const client, other = 41, 42
	// setup: sA, of client, holds a read lease on r and the write lease on
	// w; sW's write on r and sB's acquisition of w wait for them, and their
	// invalidation and recall went to sA.
	setup := func(t *testing.T) (h *harness, write, acquire *Op) {
		h = newHarness(t, sA, sB, sW)
		h.tab.SetClient(sA, client)
		h.grant(sA, "r")
		h.mustAcquire(sA, "w", 7)
		write, _ = h.write(sW, "r")
		acquire, _ = h.acquire(sB, "w")
		h.wantReady(write, false)
		h.wantReady(acquire, false)
		if !slices.Equal(sessionsOf(h.invalid), []SessionID{sA}) || !slices.Equal(sessionsOf(h.recalls), []SessionID{sA}) {
			t.Fatalf("invalidations %+v, recalls %+v; want one each to sA", h.invalid, h.recalls)
		}
		return h, write, acquire
	}
	// comeBack opens sC for id and has it adopt.
	comeBack := func(h *harness, id uint64) (Effects, SessionID) {
		h.tab.AddSession(sC)
		h.tab.SetClient(sC, id)
		eff, superseded := h.tab.AdoptClient(sC, h.now)
		return h.record(eff), superseded
	}
	// answers checks that sC now holds both leases, renews them and
	// answers for them, and that the writers go at once.
	answers := func(t *testing.T, h *harness, eff Effects, write, acquire *Op) {
		if !slices.Equal(eff.Invalidate, []Notice{{Session: sC, Key: "r"}}) || !slices.Equal(eff.Recall, []Notice{{Session: sC, Key: "w", Token: 7}}) {
			t.Fatalf("adoption: invalidations %+v, recalls %+v; want r and w again, to sC", eff.Invalidate, eff.Recall)
		}
		if _, holder, _ := h.tab.WriteLease("w"); holder != sC {
			t.Fatalf("write lease on w held by %d, want sC", holder)
		}
		if _, ok := h.tab.sessions[sA]; ok {
			t.Error("sA still tracked with nothing left")
		}
		// The recalled lease is not renewed; a write lease of sC's that
		// was not recalled would be (the one on x, below).
		h.relinquish(sC, "r")
		h.wantReady(write, true)
		if _, err := h.release(sC, "w", 7); err != nil {
			t.Fatalf("release of the adopted write lease: %v", err)
		}
		h.wantReady(acquire, true)
	}

	t.Run("lost session closed", func(t *testing.T) {
		h, write, acquire := setup(t)
		h.close(sA, false)
		eff, superseded := comeBack(h, client)
		if superseded != 0 {
			t.Errorf("superseded %d; sA was closed already", superseded)
		}
		answers(t, h, eff, write, acquire)
	})

	t.Run("lost session still open", func(t *testing.T) {
		// The server has not noticed the loss: sA is open, with an op of
		// its own queued. sC's adoption closes it, abandons the op, and
		// says so.
		h, write, acquire := setup(t)
		queued, _ := h.write(sA, "r") // behind sW's
		eff, superseded := comeBack(h, client)
		if superseded != sA {
			t.Fatalf("superseded %d, want sA", superseded)
		}
		if !h.abandoned[queued] {
			t.Error("sA's queued write not abandoned")
		}
		if d := h.grant(sA, "z"); d != 0 {
			t.Errorf("the superseded session was granted a lease for %v", d)
		}
		if st := h.tab.Stats(); st.Sessions != 3 {
			t.Errorf("Stats.Sessions %d; want 3 open: sB, sW and sC", st.Sessions)
		}
		answers(t, h, eff, write, acquire)
	})

	t.Run("renewed on the new session", func(t *testing.T) {
		h := newHarness(t, sA)
		h.tab.SetClient(sA, client)
		h.grant(sA, "r")
		h.mustAcquire(sA, "x", 9)
		h.close(sA, false)
		h.at(time.Second)
		comeBack(h, client)
		got := h.renew(sC, "r", "x")
		if got[0] != term || got[1] != term {
			t.Fatalf("renewals on the new session: %v, want %v each", got, term)
		}
		if e, _ := readExpiry(h.tab, sC, "r"); !e.Equal(h.now.Add(term + eps)) {
			t.Errorf("read lease on r ends %v, want %v", e, h.now.Add(term+eps))
		}
	})

	t.Run("another client takes nothing", func(t *testing.T) {
		for _, id := range []uint64{other, 0} {
			h, write, acquire := setup(t)
			eff, superseded := comeBack(h, id)
			if superseded != 0 || !eff.empty() {
				t.Fatalf("client %d: superseded %d, effects %+v; want nothing", id, superseded, eff)
			}
			if _, holder, _ := h.tab.WriteLease("w"); holder != sA {
				t.Errorf("client %d: write lease held by %d, want sA", id, holder)
			}
			if got := h.renew(sC, "r", "w"); got[0] != 0 || got[1] != 0 {
				t.Errorf("client %d renewed sA's leases: %v", id, got)
			}
			if _, err := h.release(sC, "w", 7); err == nil {
				t.Errorf("client %d released sA's write lease", id)
			}
			h.wantReady(write, false)
			h.wantReady(acquire, false)
		}
	})

	t.Run("twice", func(t *testing.T) {
		// The client loses its second session too: the third adopts from
		// the second what the second adopted from the first.
		h := newHarness(t, sA)
		h.tab.SetClient(sA, client)
		h.grant(sA, "r")
		h.close(sA, false)
		comeBack(h, client)
		h.close(sC, false)
		h.tab.AddSession(sD)
		h.tab.SetClient(sD, client)
		eff, superseded := h.tab.AdoptClient(sD, h.now)
		h.record(eff)
		if superseded != 0 {
			t.Errorf("superseded %d", superseded)
		}
		if got := h.renew(sD, "r"); got[0] != term {
			t.Errorf("renewal on the third session: %v", got)
		}
	})
}

// TestAdoptClientRestoredWriteLeases: a client that comes back after a
// restart or a failover takes over, at hello, the write leases restored
// for it: the recall a writer sent while nobody answered for them reaches
// its new session at once, and it renews and releases them. A lease
// restored for another client stays where it is.
func TestAdoptClientRestoredWriteLeases(t *testing.T) {
	const client, other = 41, 42
	h := newHarness(t, sA, sB)
	expiry := t0.Add(10 * time.Second)
	h.tab.RestoreWriteLease("k", 7, client, expiry, 0)
	h.tab.RestoreWriteLease("j", 8, client, expiry, 0)
	h.tab.RestoreWriteLease("o", 9, other, expiry, 0)
	h.tab.SetClient(sB, other+1)
	write, eff := h.write(sB, "k")
	h.wantReady(write, false)
	if got := sessionsOf(eff.Recall); !slices.Equal(got, []SessionID{RestoredSession}) {
		t.Fatalf("recalls %+v, want one to the restored session, which nobody reads", eff.Recall)
	}
	h.tab.SetClient(sA, client)
	eff, superseded := h.tab.AdoptClient(sA, h.now)
	h.record(eff)
	checkInvariants(t, h.tab)
	if superseded != 0 {
		t.Errorf("superseded %d; there was no earlier session", superseded)
	}
	if !slices.Equal(eff.Recall, []Notice{{Session: sA, Key: "k", Token: 7}}) {
		t.Fatalf("adoption recalls %+v, want k's again, to sA", eff.Recall)
	}
	for key, want := range map[string]SessionID{"k": sA, "j": sA, "o": RestoredSession} {
		if _, holder, _ := h.tab.WriteLease(key); holder != want {
			t.Errorf("write lease on %s held by %d, want %d", key, holder, want)
		}
	}
	if _, err := h.release(sA, "k", 7); err != nil {
		t.Fatalf("release of the adopted lease: %v", err)
	}
	h.wantReady(write, true)
}
