package leasetable

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestGrant(t *testing.T) {
	tests := []struct {
		name  string
		setup func(h *harness)
		id    SessionID
		term  time.Duration
		want  time.Duration
	}{
		{name: "plain", id: sA, term: term, want: term},
		{name: "zero term", id: sA, term: 0, want: 0},
		{name: "negative term", id: sA, term: -time.Second, want: 0},
		{name: "unknown session", id: 99, term: term, want: 0},
		{
			name:  "closed session",
			setup: func(h *harness) { h.close(sA, true) },
			id:    sA, term: term, want: 0,
		},
		{
			name:  "closed session that still holds leases",
			setup: func(h *harness) { h.grant(sA, "k"); h.close(sA, false) },
			id:    sA, term: term, want: 0,
		},
		{
			name:  "already held: extended",
			setup: func(h *harness) { h.grant(sA, "k") },
			id:    sA, term: term, want: term,
		},
		{
			name: "write waiting for a holder",
			setup: func(h *harness) {
				h.grant(sB, "k")
				h.write(sW, "k")
			},
			id: sA, term: term, want: 0,
		},
		{
			name: "write waiting: the holder asked to drop it",
			setup: func(h *harness) {
				h.grant(sA, "k")
				h.write(sW, "k")
			},
			id: sA, term: term, want: 0,
		},
		{
			name: "write waiting: the writer",
			setup: func(h *harness) {
				h.grant(sB, "k")
				h.write(sW, "k")
			},
			id: sW, term: term, want: 0,
		},
		{
			name: "write queued behind a ready write",
			setup: func(h *harness) {
				h.write(sW, "k")
				h.write(sB, "k")
			},
			id: sA, term: term, want: 0,
		},
		{
			name:  "write ready, not done",
			setup: func(h *harness) { h.write(sW, "k") },
			id:    sA, term: term, want: 0,
		},
		{
			name:  "write ready, not done: the writer",
			setup: func(h *harness) { h.write(sW, "k") },
			id:    sW, term: term, want: 0,
		},
		{
			name:  "acquire ready, not done",
			setup: func(h *harness) { h.acquire(sW, "k") },
			id:    sA, term: term, want: 0,
		},
		{
			name:  "write lease held by another session",
			setup: func(h *harness) { h.mustAcquire(sB, "k", 7) },
			id:    sA, term: term, want: 0,
		},
		{
			name:  "write lease held by the session itself",
			setup: func(h *harness) { h.mustAcquire(sA, "k", 7) },
			id:    sA, term: term, want: term,
		},
		{
			name: "write lease holder while its own write is in flight",
			setup: func(h *harness) {
				h.mustAcquire(sA, "k", 7)
				if _, _, err := h.tokenWrite(sA, "k", 7); err != nil {
					h.tb.Fatal(err)
				}
			},
			id: sA, term: term, want: 0,
		},
		{
			name: "write lease released while its holder's write is in flight",
			setup: func(h *harness) {
				h.mustAcquire(sB, "k", 7)
				if _, _, err := h.tokenWrite(sB, "k", 7); err != nil {
					h.tb.Fatal(err)
				}
				if _, err := h.release(sB, "k", 7); err != nil {
					h.tb.Fatal(err)
				}
			},
			id: sA, term: term, want: 0,
		},
		{
			name: "other key pending",
			setup: func(h *harness) {
				h.grant(sB, "other")
				h.write(sW, "other")
				h.mustAcquire(sB, "third", 1)
			},
			id: sA, term: term, want: term,
		},
		{
			name: "write done",
			setup: func(h *harness) {
				op, _ := h.write(sW, "k")
				h.done(op, true)
			},
			id: sA, term: term, want: term,
		},
		{
			name: "write abandoned",
			setup: func(h *harness) {
				h.grant(sB, "k")
				op, _ := h.write(sW, "k")
				h.abandon(op)
			},
			id: sA, term: term, want: term,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, sA, sB, sW)
			if tt.setup != nil {
				tt.setup(h)
			}
			h.at(time.Second)
			if got := h.tab.Grant(tt.id, "k", tt.term, h.now); got != tt.want {
				t.Fatalf("Grant = %v, want %v", got, tt.want)
			}
			checkInvariants(t, h.tab)
		})
	}
}

func TestLeaseExpiry(t *testing.T) {
	for _, e := range []time.Duration{0, eps, 2 * time.Second} {
		t.Run(e.String(), func(t *testing.T) {
			tab := New(Config{Epsilon: e})
			tab.AddSession(sA)
			tab.AddSession(sB)
			if _, ok := tab.NextDeadline(); ok {
				t.Fatal("empty table has a deadline")
			}
			tab.Grant(sA, "a", term, t0)
			tab.Grant(sB, "b", 2*term, t0)
			expiry := t0.Add(term + e)
			if next, ok := tab.NextDeadline(); !ok || !next.Equal(expiry) {
				t.Fatalf("NextDeadline = %v, %v; want grant+term+ε = %v", next, ok, expiry)
			}
			tab.Tick(expiry.Add(-time.Nanosecond))
			if s := tab.Stats(); s.Leases != 2 {
				t.Fatalf("1ns before expiry: Leases = %d, want 2", s.Leases)
			}
			tab.Tick(expiry)
			if s := tab.Stats(); s.Leases != 1 {
				t.Fatalf("at expiry: Leases = %d, want 1", s.Leases)
			}
			if _, ok := readExpiry(tab, sA, "a"); ok {
				t.Fatal("A's lease survived its expiry")
			}
			if next, _ := tab.NextDeadline(); !next.Equal(t0.Add(2*term + e)) {
				t.Fatalf("NextDeadline = %v, want B's expiry", next)
			}
			tab.Tick(t0.Add(time.Hour))
			if s := tab.Stats(); s.Leases != 0 {
				t.Fatalf("Leases = %d after all expired", s.Leases)
			}
			if _, ok := tab.NextDeadline(); ok {
				t.Fatal("deadline left after every lease expired")
			}
			checkInvariants(t, tab)
		})
	}
}

func TestGrantExtendsNeverShortens(t *testing.T) {
	h := newHarness(t, sA)
	h.grant(sA, "k") // expires at t0+term+ε
	h.at(3 * time.Second)
	if got := h.tab.Grant(sA, "k", time.Second, h.now); got != time.Second {
		t.Fatalf("Grant = %v", got)
	}
	h.wantNextDeadline(t0.Add(term + eps))
	h.grant(sA, "k")
	h.wantNextDeadline(t0.Add(3*time.Second + term + eps))
	if s := h.tab.Stats(); s.Leases != 1 {
		t.Fatalf("Leases = %d, want 1", s.Leases)
	}
}

func TestWriteNoHolders(t *testing.T) {
	h := newHarness(t, sA, sW)
	h.at(time.Second)
	op, eff := h.write(sW, "k")
	if len(eff.Ready) != 1 || eff.Ready[0] != op {
		t.Fatalf("Ready = %v, want the write at once", eff.Ready)
	}
	if len(eff.Invalidate)+len(eff.Recall)+len(eff.Abandoned) != 0 {
		t.Fatalf("unexpected effects %+v", eff)
	}
	if op.Holders != 0 || !op.Started.Equal(h.now) || op.Wait(h.now) != 0 {
		t.Fatalf("Holders = %d, Started = %v", op.Holders, op.Started)
	}
	if _, err := h.tab.Submit(op, h.now); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("second Submit: %v, want ErrDuplicate", err)
	}
	if _, err := h.tab.Submit(&Op{Kind: OpWrite, Session: 99, Key: "k"}, h.now); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("Submit from unknown session: %v", err)
	}
}

func TestWriteDropsWritersOwnLease(t *testing.T) {
	h := newHarness(t, sA, sW)
	h.grant(sW, "k")
	h.grant(sA, "other")
	op, eff := h.write(sW, "k")
	h.wantReady(op, true)
	if len(eff.Invalidate) != 0 {
		t.Fatalf("writer was sent an invalidation for its own lease: %v", eff.Invalidate)
	}
	s := h.tab.Stats()
	if s.Leases != 1 || s.InvalidationsSent != 0 {
		t.Fatalf("Stats = %+v; want the writer's lease gone, nothing sent", s)
	}
}

func TestWriteWithHolders(t *testing.T) {
	h := newHarness(t, sA, sB, sC, sW)
	h.grant(sA, "k")
	h.grant(sB, "k")
	h.grant(sC, "other")
	h.grant(sW, "k")
	h.at(time.Second)
	op, eff := h.write(sW, "k")
	if got := sessionsOf(eff.Invalidate); !slices.Equal(got, []SessionID{sA, sB}) {
		t.Fatalf("Invalidate %v, want exactly A and B", eff.Invalidate)
	}
	for _, n := range eff.Invalidate {
		if n.Key != "k" {
			t.Fatalf("invalidation for key %q", n.Key)
		}
	}
	if op.Holders != 2 || !op.Started.Equal(h.now) {
		t.Fatalf("Holders = %d, Started = %v", op.Holders, op.Started)
	}
	h.wantReady(op, false)
	if s := h.tab.Stats(); s.WritesWaiting != 1 {
		t.Fatalf("WritesWaiting = %d", s.WritesWaiting)
	}

	h.at(2 * time.Second)
	h.relinquish(sA, "k")
	h.wantReady(op, false)
	h.at(3 * time.Second)
	eff = h.relinquish(sB, "k")
	if len(eff.Ready) != 1 || eff.Ready[0] != op {
		t.Fatalf("B's ack: Ready = %v, want the write", eff.Ready)
	}
	if got := op.Wait(h.now); got != 2*time.Second {
		t.Fatalf("Wait = %v, want 2s", got)
	}
	s := h.tab.Stats()
	if s.InvalidationsSent != 2 || s.InvalidationsAcked != 2 || s.InvalidationsExpired != 0 || s.WritesWaiting != 0 {
		t.Fatalf("Stats = %+v", s)
	}
	if got, _ := h.done(op, true); got != term {
		t.Fatalf("Done granted %v, want a fresh lease", got)
	}
	if len(h.invalid) != 2 {
		t.Fatalf("%d invalidations in all, want 2", len(h.invalid))
	}
}

func TestWriteWaitsForUnansweredHolder(t *testing.T) {
	h := newHarness(t, sA, sB, sW)
	h.grant(sA, "k")
	h.at(time.Second)
	h.grant(sB, "k")
	expiryB := h.now.Add(term + eps)
	h.at(2 * time.Second)
	op, _ := h.write(sW, "k")
	h.relinquish(sA, "k")
	h.wantNextDeadline(expiryB)

	h.now = expiryB.Add(-time.Nanosecond)
	h.tick()
	h.wantReady(op, false)
	if r := h.renew(sB, "k"); r[0] != 0 {
		t.Fatalf("invalidated lease renewed: %v", r)
	}
	h.now = expiryB
	eff := h.tick()
	if len(eff.Ready) != 1 || eff.Ready[0] != op {
		t.Fatalf("at B's expiry: Ready = %v", eff.Ready)
	}
	if got := op.Wait(h.now); got != expiryB.Sub(t0.Add(2*time.Second)) {
		t.Fatalf("Wait = %v", got)
	}
	s := h.tab.Stats()
	if s.InvalidationsSent != 2 || s.InvalidationsAcked != 1 || s.InvalidationsExpired != 1 {
		t.Fatalf("Stats = %+v", s)
	}
}

// TestNoLeaseOnPendingKey is property 2, directly: while an op is queued,
// waiting or ready but not done on a key, nobody gets or renews a read lease
// on it.
func TestNoLeaseOnPendingKey(t *testing.T) {
	h := newHarness(t, sA, sB, sC, sW)
	h.grant(sA, "k")
	h.grant(sA, "free")
	h.grant(sB, "k")
	op1, _ := h.write(sW, "k")
	op2, _ := h.write(sC, "k")
	check := func(stage string) {
		t.Helper()
		for _, id := range []SessionID{sA, sB, sC, sW} {
			if got := h.grant(id, "k"); got != 0 {
				t.Fatalf("%s: Grant(%d) = %v, want 0", stage, id, got)
			}
		}
		if got := h.renew(sA, "k", "free"); got[0] != 0 || got[1] != term {
			t.Fatalf("%s: Renew(A) = %v, want [0 %v]", stage, got, term)
		}
	}
	check("waiting, one queued")
	h.relinquish(sB, "k")
	check("waiting for A alone")
	h.relinquish(sA, "k")
	h.wantReady(op1, true)
	check("first ready")
	h.done(op1, true)
	h.wantReady(op2, true)
	check("second ready")
	h.done(op2, false)
	if got := h.grant(sA, "k"); got != term {
		t.Fatalf("after the writes: Grant = %v", got)
	}
}

func TestFencingTokens(t *testing.T) {
	var tokens tokenIssuer
	h := newHarness(t, sA, sB, sC)

	// No write lease: any token is fenced.
	if _, _, err := h.tokenWrite(sA, "k", 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("token without a write lease: %v, want ErrFenced", err)
	}
	if _, _, ok := h.tab.WriteLease("k"); ok {
		t.Fatal("WriteLease reports a lease nobody acquired")
	}

	tokA := tokens.next()
	h.mustAcquire(sA, "k", tokA)
	op, eff, err := h.tokenWrite(sA, "k", tokA)
	if err != nil || len(eff.Ready) != 1 || eff.Ready[0] != op {
		t.Fatalf("holder's write: %v, %+v; want ready at once", err, eff)
	}
	if got, _ := h.done(op, true); got != term {
		t.Fatalf("holder's Done granted %v, want a read lease", got)
	}
	if _, _, err := h.tokenWrite(sA, "k", tokA+1); !errors.Is(err, ErrFenced) {
		t.Fatalf("future token: %v", err)
	}

	// B asks for the write lease: A is recalled, and its read lease asked.
	h.at(time.Second)
	acqB, eff := h.acquire(sB, "k")
	if len(eff.Recall) != 1 || eff.Recall[0] != (Notice{Session: sA, Key: "k", Token: tokA}) {
		t.Fatalf("Recall = %v", eff.Recall)
	}
	if len(eff.Invalidate) != 1 || eff.Invalidate[0] != (Notice{Session: sA, Key: "k"}) {
		t.Fatalf("Invalidate = %v", eff.Invalidate)
	}
	h.relinquish(sA, "k")
	// The holder still writes under its lease while the recall is pending,
	// bypassing B's queued acquire.
	opA, eff, err := h.tokenWrite(sA, "k", tokA)
	if err != nil || len(eff.Ready) != 1 || eff.Ready[0] != opA {
		t.Fatalf("holder's write during recall: %v, %+v", err, eff)
	}
	if _, err := h.release(sA, "k", tokA); err != nil {
		t.Fatal(err)
	}
	h.wantReady(acqB, false) // A's write is still in flight
	h.done(opA, true)
	h.wantReady(acqB, true)
	tokB := tokens.next()
	h.doneAcquire(acqB, tokB)
	if tok, holder, ok := h.tab.WriteLease("k"); !ok || tok != tokB || holder != sB {
		t.Fatalf("WriteLease = %d, %d, %v", tok, holder, ok)
	}
	expiryB := h.now.Add(term + eps)

	// A, paused past its lease, writes with its old token.
	if _, _, err := h.tokenWrite(sA, "k", tokA); !errors.Is(err, ErrFenced) {
		t.Fatalf("old token: %v, want ErrFenced", err)
	}
	// B's token, one nanosecond before B's lease expires: ready at once.
	h.now = expiryB.Add(-time.Nanosecond)
	op, eff, err = h.tokenWrite(sB, "k", tokB)
	if err != nil || len(eff.Ready) != 1 {
		t.Fatalf("current token: %v, %+v", err, eff)
	}
	h.done(op, true)
	// At the expiry, even before Tick drops the lease: fenced.
	h.now = expiryB
	if _, _, err := h.tokenWrite(sB, "k", tokB); !errors.Is(err, ErrFenced) {
		t.Fatalf("token at expiry: %v, want ErrFenced", err)
	}
	h.tick()
	if _, _, ok := h.tab.WriteLease("k"); ok {
		t.Fatal("WriteLease after expiry")
	}
	if _, _, err := h.tokenWrite(sB, "k", tokB); !errors.Is(err, ErrFenced) {
		t.Fatalf("token after expiry: %v, want ErrFenced", err)
	}
}

func TestFencingTokensOnlyGrow(t *testing.T) {
	var tokens tokenIssuer
	h := newHarness(t, sA, sB, sC)
	var seen []uint64
	granted := func(op *Op, id SessionID) {
		t.Helper()
		h.wantReady(op, true)
		h.doneAcquire(op, tokens.next())
		tok, holder, ok := h.tab.WriteLease("k")
		if !ok || holder != id || tok != tokens.last {
			t.Fatalf("WriteLease = %d, %d, %v; want %d, %d", tok, holder, ok, tokens.last, id)
		}
		seen = append(seen, tok)
	}

	op, _ := h.acquire(sA, "k")
	granted(op, sA)
	// B's acquire recalls A's lease; A never answers.
	h.at(time.Second)
	op, _ = h.acquire(sB, "k")
	h.at(term + eps)
	h.tick()
	granted(op, sB)
	// C's acquire recalls B's; B releases.
	op, _ = h.acquire(sC, "k")
	if _, err := h.release(sB, "k", seen[1]); err != nil {
		t.Fatal(err)
	}
	granted(op, sC)
	// C's lease expires with nobody waiting; A acquires again.
	h.at(time.Hour)
	h.tick()
	op, _ = h.acquire(sA, "k")
	granted(op, sA)
	// A acquires again while it holds the lease.
	op, _ = h.acquire(sA, "k")
	granted(op, sA)
	// A failed grant (token 0) leaves A's lease as it was.
	op, _ = h.acquire(sA, "k")
	h.doneAcquire(op, 0)
	if tok, holder, ok := h.tab.WriteLease("k"); !ok || tok != seen[len(seen)-1] || holder != sA {
		t.Fatalf("after failed grant: WriteLease = %d, %d, %v", tok, holder, ok)
	}

	if len(seen) != 5 {
		t.Fatalf("tokens %v", seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("fencing tokens went backwards: %v", seen)
		}
	}
}

// TestReacquireKeepsWriteLease: a holder acquiring the write lease it holds
// gets the new token, and the lease stays exclusive.
func TestReacquireKeepsWriteLease(t *testing.T) {
	h := newHarness(t, sA, sB)
	h.mustAcquire(sA, "k", 1)
	op, _ := h.acquire(sA, "k")
	h.wantReady(op, true)
	h.doneAcquire(op, 2)
	if tok, holder, ok := h.tab.WriteLease("k"); !ok || tok != 2 || holder != sA {
		t.Fatalf("WriteLease = %d, %d, %v; want 2, A", tok, holder, ok)
	}
	if got := h.grant(sB, "k"); got != 0 {
		t.Fatalf("B got a read lease on a key A holds the write lease of: %v", got)
	}
	if _, _, err := h.tokenWrite(sA, "k", 1); !errors.Is(err, ErrFenced) {
		t.Fatalf("old token: %v", err)
	}
	if op, _, err := h.tokenWrite(sA, "k", 2); err != nil || !h.ready[op] {
		t.Fatalf("new token: %v, ready %v", err, h.ready[op])
	}
	if s := h.tab.Stats(); s.WriteLeases != 1 {
		t.Fatalf("WriteLeases = %d", s.WriteLeases)
	}
}

func TestFIFOPerKey(t *testing.T) {
	h := newHarness(t, sA, sB, sC, sD)
	h.grant(sD, "k")
	op1, _ := h.write(sA, "k")
	op2, _ := h.write(sB, "k")
	op3, _ := h.write(sC, "k")
	if s := h.tab.Stats(); s.WritesWaiting != 3 {
		t.Fatalf("WritesWaiting = %d", s.WritesWaiting)
	}
	// Another key does not wait for k.
	other, _ := h.write(sB, "other")
	h.wantReady(other, true)

	h.relinquish(sD, "k")
	h.wantReady(op1, true)
	h.wantReady(op2, false)
	h.wantReady(op3, false)
	_, eff := h.done(op1, true)
	if len(eff.Ready) != 1 || eff.Ready[0] != op2 {
		t.Fatalf("after op1: Ready = %v, want op2", eff.Ready)
	}
	h.wantReady(op3, false)
	_, eff = h.done(op2, true)
	if len(eff.Ready) != 1 || eff.Ready[0] != op3 {
		t.Fatalf("after op2: Ready = %v, want op3", eff.Ready)
	}
	h.done(op3, true)
	if s := h.tab.Stats(); s.WritesWaiting != 0 {
		t.Fatalf("WritesWaiting = %d", s.WritesWaiting)
	}
}

func TestFIFOAllReadyOpsWithoutHolders(t *testing.T) {
	h := newHarness(t, sA, sB, sC)
	ops := make([]*Op, 3)
	for i, id := range []SessionID{sA, sB, sC} {
		ops[i], _ = h.write(id, "k")
	}
	for i, op := range ops {
		for j, o := range ops {
			want := j <= i
			if h.ready[o] != want {
				t.Fatalf("before Done of op %d: op %d ready = %v", i, j, h.ready[o])
			}
		}
		h.done(op, false)
	}
}

func TestDoneGrantsFreshLease(t *testing.T) {
	t.Run("committed, nobody waiting", func(t *testing.T) {
		h := newHarness(t, sW)
		op, _ := h.write(sW, "k")
		h.at(time.Second)
		got, eff := h.done(op, true)
		if got != term || !eff.empty() {
			t.Fatalf("Done = %v, %+v", got, eff)
		}
		h.wantNextDeadline(h.now.Add(term + eps))
		if s := h.tab.Stats(); s.Leases != 1 {
			t.Fatalf("Leases = %d", s.Leases)
		}
		// Done twice does nothing.
		if got, _ := h.done(op, true); got != 0 {
			t.Fatalf("second Done = %v", got)
		}
	})
	t.Run("not committed", func(t *testing.T) {
		h := newHarness(t, sW)
		op, _ := h.write(sW, "k")
		if got, _ := h.done(op, false); got != 0 {
			t.Fatalf("Done = %v", got)
		}
		if s := h.tab.Stats(); s.Leases != 0 || h.tab.index.n != 0 {
			t.Fatalf("Stats %+v, %d keys", s, h.tab.index.n)
		}
	})
	t.Run("next op queued", func(t *testing.T) {
		h := newHarness(t, sA, sB, sW)
		h.grant(sA, "k")
		op, _ := h.write(sW, "k")
		next, _ := h.acquire(sB, "k")
		h.relinquish(sA, "k")
		h.wantReady(op, true)
		got, eff := h.done(op, true)
		if got != 0 {
			t.Fatalf("Done granted %v with an op queued", got)
		}
		// The writer holds nothing, so the acquire has nobody to ask.
		if len(eff.Invalidate) != 0 || len(eff.Ready) != 1 || eff.Ready[0] != next {
			t.Fatalf("Done effects %+v, want the acquire ready", eff)
		}
	})
	t.Run("next op invalidates a holder left by an abandoned op", func(t *testing.T) {
		h := newHarness(t, sA, sB, sW)
		h.grant(sA, "k")
		op1, _ := h.write(sW, "k")
		op2, _ := h.write(sB, "k")
		if ok, eff := h.abandon(op1); !ok || len(eff.Invalidate) != 0 {
			t.Fatalf("Abandon = %v, %+v; A was invalidated already", ok, eff)
		}
		if op2.Holders != 1 {
			t.Fatalf("op2.Holders = %d, want A", op2.Holders)
		}
		h.wantReady(op2, false)
		h.relinquish(sA, "k")
		h.wantReady(op2, true)
		if s := h.tab.Stats(); s.InvalidationsSent != 1 || s.InvalidationsAcked != 1 {
			t.Fatalf("Stats %+v", s)
		}
	})
	t.Run("wrong kind", func(t *testing.T) {
		h := newHarness(t, sW)
		op, _ := h.acquire(sW, "k")
		if got, _ := h.done(op, true); got != 0 || op.state != opReady {
			t.Fatalf("Done on an acquire = %v", got)
		}
		wr, _ := h.write(sW, "other")
		h.doneAcquire(wr, 5)
		if wr.state != opReady {
			t.Fatal("DoneAcquire finished a write")
		}
	})
}

func TestWriteLease(t *testing.T) {
	h := newHarness(t, sA, sB, sC, sD)
	h.grant(sA, "k")
	h.grant(sB, "k")
	acq, eff := h.acquire(sC, "k")
	if got := sessionsOf(eff.Invalidate); !slices.Equal(got, []SessionID{sA, sB}) {
		t.Fatalf("Invalidate %v", eff.Invalidate)
	}
	h.relinquish(sA, "k")
	h.wantReady(acq, false)
	h.relinquish(sB, "k")
	h.wantReady(acq, true)
	h.at(time.Second)
	h.doneAcquire(acq, 10)
	var expiryC time.Time
	if s := h.tab.Stats(); s.WriteLeases != 1 || s.Leases != 0 {
		t.Fatalf("Stats %+v", s)
	}
	for _, id := range []SessionID{sA, sB, sD} {
		if got := h.grant(id, "k"); got != 0 {
			t.Fatalf("Grant(%d) = %v while C holds the write lease", id, got)
		}
	}
	if got := h.grant(sC, "k"); got != term {
		t.Fatalf("holder's Grant = %v", got)
	}

	// Renew extends the write lease.
	h.at(3 * time.Second)
	if got := h.renew(sC, "k"); got[0] != term {
		t.Fatalf("Renew = %v", got)
	}
	expiryC = h.now.Add(term + eps)
	if l := h.tab.sessions[sC].wrlses["k"]; !l.expiry.Equal(expiryC) {
		t.Fatalf("write lease expiry %v, want %v", l.expiry, expiryC)
	}

	// D's write recalls C's write lease and invalidates its read lease.
	h.at(4 * time.Second)
	wr, eff := h.write(sD, "k")
	if len(eff.Recall) != 1 || eff.Recall[0] != (Notice{Session: sC, Key: "k", Token: 10}) {
		t.Fatalf("Recall %v", eff.Recall)
	}
	if got := sessionsOf(eff.Invalidate); !slices.Equal(got, []SessionID{sC}) {
		t.Fatalf("Invalidate %v", eff.Invalidate)
	}
	if wr.Holders != 2 {
		t.Fatalf("Holders = %d", wr.Holders)
	}
	if s := h.tab.Stats(); s.Recalls != 1 {
		t.Fatalf("Recalls = %d", s.Recalls)
	}
	// A recalled lease is not renewed.
	h.at(5 * time.Second)
	if got := h.renew(sC, "k"); got[0] != 0 {
		t.Fatalf("recalled lease renewed: %v", got)
	}
	h.wantNextDeadline(expiryC)
	// The holder's tokened write goes at once.
	cw, _, err := h.tokenWrite(sC, "k", 10)
	if err != nil || !h.ready[cw] {
		t.Fatalf("holder write during recall: %v", err)
	}
	h.done(cw, true)
	if _, err := h.release(sC, "k", 9); !errors.Is(err, ErrNotFound) {
		t.Fatalf("release with wrong token: %v", err)
	}
	if _, err := h.release(sA, "k", 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("release by non-holder: %v", err)
	}
	if _, err := h.release(99, "k", 10); !errors.Is(err, ErrUnknownSession) {
		t.Fatalf("release by unknown session: %v", err)
	}
	h.relinquish(sC, "k")
	h.wantReady(wr, false)
	eff, err = h.release(sC, "k", 10)
	if err != nil || len(eff.Ready) != 1 || eff.Ready[0] != wr {
		t.Fatalf("release: %v, %+v", err, eff)
	}
	if _, _, ok := h.tab.WriteLease("k"); ok {
		t.Fatal("write lease still reported after release")
	}
	if _, err := h.release(sC, "k", 10); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second release: %v", err)
	}
}

func TestWriteLeaseUnansweredRecall(t *testing.T) {
	h := newHarness(t, sA, sB)
	h.mustAcquire(sA, "k", 1)
	expiry := h.now.Add(term + eps)
	h.at(time.Second)
	acq, eff := h.acquire(sB, "k")
	if len(eff.Recall) != 1 {
		t.Fatalf("Recall %v", eff.Recall)
	}
	h.wantNextDeadline(expiry)
	h.now = expiry.Add(-time.Nanosecond)
	h.tick()
	h.wantReady(acq, false)
	h.now = expiry
	h.tick()
	h.wantReady(acq, true)
	h.doneAcquire(acq, 2)
	if tok, holder, _ := h.tab.WriteLease("k"); tok != 2 || holder != sB {
		t.Fatalf("WriteLease = %d, %d", tok, holder)
	}
	s := h.tab.Stats()
	if s.Recalls != 1 || s.WriteLeases != 1 {
		t.Fatalf("Stats %+v", s)
	}
}

func TestWriteLeaseHolderWritesWithoutToken(t *testing.T) {
	h := newHarness(t, sA, sB)
	h.mustAcquire(sA, "k", 3)
	op, _ := h.write(sA, "k")
	h.wantReady(op, true)
	if op.Holders != 0 {
		t.Fatalf("Holders = %d", op.Holders)
	}
	h.done(op, true)
	// Someone else's write without a token waits for a recall.
	wr, eff := h.write(sB, "k")
	h.wantReady(wr, false)
	if len(eff.Recall) != 1 || eff.Recall[0].Token != 3 {
		t.Fatalf("Recall %v", eff.Recall)
	}
	// And a write without a token by the holder goes first: it holds the key.
	op, _ = h.write(sA, "k")
	h.wantReady(op, true)
}

func TestAbandon(t *testing.T) {
	t.Run("queued op", func(t *testing.T) {
		h := newHarness(t, sA, sB, sC, sD)
		h.grant(sD, "k")
		op1, _ := h.write(sA, "k")
		op2, _ := h.write(sB, "k")
		op3, _ := h.write(sC, "k")
		ok, eff := h.abandon(op2)
		if !ok || !eff.empty() {
			t.Fatalf("Abandon = %v, %+v", ok, eff)
		}
		if s := h.tab.Stats(); s.WritesWaiting != 2 {
			t.Fatalf("WritesWaiting = %d", s.WritesWaiting)
		}
		if ok, _ := h.abandon(op2); ok {
			t.Fatal("abandoned twice")
		}
		h.relinquish(sD, "k")
		h.wantReady(op1, true)
		_, eff = h.done(op1, true)
		if len(eff.Ready) != 1 || eff.Ready[0] != op3 {
			t.Fatalf("Ready = %v, want op3", eff.Ready)
		}
		h.wantReady(op2, false)
	})
	t.Run("waiting head lets the next start", func(t *testing.T) {
		h := newHarness(t, sA, sB)
		h.grant(sA, "k")
		op1, _ := h.write(sB, "k")
		op2, _ := h.write(sA, "k") // by the holder itself
		ok, eff := h.abandon(op1)
		if !ok || len(eff.Ready) != 1 || eff.Ready[0] != op2 {
			t.Fatalf("Abandon = %v, %+v; want A's write ready (its own lease is no obstacle)", ok, eff)
		}
	})
	t.Run("ready op", func(t *testing.T) {
		h := newHarness(t, sA)
		op, _ := h.write(sA, "k")
		if ok, _ := h.abandon(op); ok {
			t.Fatal("abandoned a ready op")
		}
		h.done(op, true)
		if ok, _ := h.abandon(op); ok {
			t.Fatal("abandoned a done op")
		}
		if ok, _ := h.abandon(&Op{Kind: OpWrite, Session: sA, Key: "k"}); ok {
			t.Fatal("abandoned an op never submitted")
		}
	})
	t.Run("deadline", func(t *testing.T) {
		h := newHarness(t, sA, sB, sC)
		h.grant(sA, "k")
		op1 := &Op{Kind: OpWrite, Session: sB, Key: "k", Deadline: t0.Add(2 * time.Second)}
		op2 := &Op{Kind: OpWrite, Session: sC, Key: "k", Deadline: t0.Add(time.Second)}
		h.submit(op1)
		h.submit(op2)
		h.wantNextDeadline(t0.Add(time.Second))
		h.at(time.Second - time.Nanosecond)
		if eff := h.tick(); len(eff.Abandoned) != 0 {
			t.Fatalf("Abandoned early: %v", eff.Abandoned)
		}
		h.at(time.Second)
		if eff := h.tick(); len(eff.Abandoned) != 1 || eff.Abandoned[0] != op2 {
			t.Fatalf("Abandoned %v, want the queued op2", eff.Abandoned)
		}
		h.wantNextDeadline(t0.Add(2 * time.Second))
		h.at(5 * time.Second)
		if eff := h.tick(); len(eff.Abandoned) != 1 || eff.Abandoned[0] != op1 {
			t.Fatalf("Abandoned %v, want the waiting op1", eff.Abandoned)
		}
		if s := h.tab.Stats(); s.WritesWaiting != 0 {
			t.Fatalf("WritesWaiting = %d", s.WritesWaiting)
		}
		h.wantNextDeadline(t0.Add(term + eps))
		if got := h.grant(sB, "k"); got != term {
			t.Fatalf("Grant after the writes left = %v", got)
		}
	})
	t.Run("deadline of a ready op is forgotten", func(t *testing.T) {
		h := newHarness(t, sA)
		op := &Op{Kind: OpWrite, Session: sA, Key: "k", Deadline: t0.Add(time.Second)}
		h.submit(op)
		h.wantReady(op, true)
		if d, ok := h.tab.NextDeadline(); ok {
			t.Fatalf("NextDeadline = %v for a ready op", d)
		}
		h.at(time.Hour)
		if eff := h.tick(); len(eff.Abandoned) != 0 {
			t.Fatalf("ready op abandoned by its deadline")
		}
	})
	t.Run("invalidated lease of an abandoned op", func(t *testing.T) {
		h := newHarness(t, sA, sB)
		h.grant(sA, "k")
		op, _ := h.write(sB, "k")
		h.abandon(op)
		if got := h.renew(sA, "k"); got[0] != 0 {
			t.Fatalf("Renew of an invalidated lease = %v", got)
		}
		if got := h.grant(sA, "k"); got != term {
			t.Fatalf("Grant = %v", got)
		}
		if got := h.renew(sA, "k"); got[0] != term {
			t.Fatalf("Renew after a fresh grant = %v", got)
		}
	})
}

func TestCloseSession(t *testing.T) {
	t.Run("relinquish frees leases at once", func(t *testing.T) {
		h := newHarness(t, sA, sB, sW)
		h.grant(sA, "k")
		h.grant(sA, "j")
		h.mustAcquire(sA, "wl", 1)
		h.grant(sB, "j")
		op, _ := h.write(sW, "k")
		acq, _ := h.acquire(sW, "wl")
		h.wantReady(op, false)
		h.wantReady(acq, false)
		h.at(time.Second)
		eff := h.close(sA, true)
		if len(eff.Ready) != 2 {
			t.Fatalf("Ready = %v, want both", eff.Ready)
		}
		s := h.tab.Stats()
		if s.Sessions != 2 || s.Leases != 1 || s.WriteLeases != 0 {
			t.Fatalf("Stats %+v", s)
		}
		if _, ok := h.tab.sessions[sA]; ok {
			t.Fatal("closed session kept")
		}
		if got := h.grant(sA, "k2"); got != 0 {
			t.Fatalf("Grant after close = %v", got)
		}
		if eff := h.close(sA, true); !eff.empty() {
			t.Fatalf("second close: %+v", eff)
		}
	})
	t.Run("lost connection keeps leases until expiry", func(t *testing.T) {
		h := newHarness(t, sA, sW)
		h.grant(sA, "k")
		h.mustAcquire(sA, "wl", 1)
		expiry := h.now.Add(term + eps)
		h.at(time.Second)
		op, _ := h.write(sW, "k")
		if eff := h.close(sA, false); !eff.empty() {
			t.Fatalf("close: %+v", eff)
		}
		if s := h.tab.Stats(); s.Sessions != 1 || s.Leases != 1 || s.WriteLeases != 1 {
			t.Fatalf("Stats %+v", s)
		}
		if _, err := h.tab.Submit(&Op{Kind: OpWrite, Session: sA, Key: "x"}, h.now); !errors.Is(err, ErrUnknownSession) {
			t.Fatalf("Submit after close: %v", err)
		}
		if got := h.grant(sW, "wl"); got != 0 {
			t.Fatalf("the closed session's write lease still excludes others: Grant = %v", got)
		}
		if got := renewUniform(h.tab, sA, []string{"k", "wl"}, term, h.now); got[0] != 0 || got[1] != 0 {
			t.Fatalf("Renew after close = %v", got)
		}
		h.now = expiry.Add(-time.Nanosecond)
		h.tick()
		h.wantReady(op, false)
		h.now = expiry
		h.tick()
		h.wantReady(op, true)
		if _, ok := h.tab.sessions[sA]; ok {
			t.Fatal("closed session kept after its last lease expired")
		}
	})
	t.Run("queued ops are abandoned", func(t *testing.T) {
		h := newHarness(t, sA, sB, sC)
		h.grant(sC, "k")
		h.grant(sC, "j")
		opA, _ := h.write(sA, "k") // waiting for C
		opB, _ := h.write(sB, "k") // queued behind A's
		h.write(sB, "j")           // waiting for C
		opA2, _ := h.write(sA, "j")
		eff := h.close(sA, false)
		if len(eff.Abandoned) != 2 || !slices.Contains(eff.Abandoned, opA) || !slices.Contains(eff.Abandoned, opA2) {
			t.Fatalf("Abandoned %v", eff.Abandoned)
		}
		if s := h.tab.Stats(); s.WritesWaiting != 2 {
			t.Fatalf("WritesWaiting = %d", s.WritesWaiting)
		}
		h.wantReady(opB, false)
		h.relinquish(sC, "k")
		h.wantReady(opB, true)
	})
	t.Run("no op of the closed session becomes ready", func(t *testing.T) {
		// A has two ops on a key, the first held only by a write barrier
		// that has passed, with no Tick since. Abandoning the first must not
		// hand out the second. Map order varies, so try many times.
		for range 50 {
			h := newHarness(t, sA, sC)
			h.tab.SetWriteBarrier(t0.Add(time.Second))
			op1, _ := h.write(sA, "k")
			op2, _ := h.acquire(sA, "k")
			op3, _ := h.write(sA, "k")
			h.at(2 * time.Second)
			eff := h.close(sA, true)
			if len(eff.Ready) != 0 {
				t.Fatalf("ops of a closed session became ready: %v", eff.Ready)
			}
			for _, op := range []*Op{op1, op2, op3} {
				if !h.abandoned[op] {
					t.Fatal("op not abandoned")
				}
			}
			if s := h.tab.Stats(); s.WritesWaiting != 0 || s.Sessions != 1 || h.tab.index.n != 0 {
				t.Fatalf("Stats %+v, %d keys", s, h.tab.index.n)
			}
		}
	})
	t.Run("ready op of a closed session still finishes", func(t *testing.T) {
		h := newHarness(t, sA, sC)
		h.grant(sC, "k")
		op1, _ := h.write(sA, "k")
		op2, _ := h.write(sA, "k")
		h.relinquish(sC, "k")
		h.wantReady(op1, true)
		eff := h.close(sA, true)
		if len(eff.Abandoned) != 1 || eff.Abandoned[0] != op2 || len(eff.Ready) != 0 {
			t.Fatalf("close: %+v", eff)
		}
		if got, eff := h.done(op1, true); got != 0 || !eff.empty() {
			t.Fatalf("Done after close = %v, %+v", got, eff)
		}
		if h.tab.index.n != 0 || len(h.tab.sessions) != 1 {
			t.Fatalf("%d keys, %d sessions left", h.tab.index.n, len(h.tab.sessions))
		}
	})
	t.Run("ready acquire of a closed session grants nothing", func(t *testing.T) {
		h := newHarness(t, sA, sB)
		op, _ := h.acquire(sA, "k")
		h.close(sA, false)
		h.doneAcquire(op, 4)
		if _, _, ok := h.tab.WriteLease("k"); ok {
			t.Fatal("closed session got a write lease")
		}
		if got := h.grant(sB, "k"); got != term {
			t.Fatalf("Grant = %v", got)
		}
	})
	t.Run("unknown session", func(t *testing.T) {
		h := newHarness(t)
		if eff := h.close(42, true); !eff.empty() {
			t.Fatalf("%+v", eff)
		}
	})
}

func TestRelinquish(t *testing.T) {
	h := newHarness(t, sA, sB)
	h.grant(sA, "a")
	h.grant(sB, "b")
	for _, tc := range []struct {
		id   SessionID
		keys []string
	}{
		{sA, []string{"never"}},
		{sA, []string{"b"}}, // held by B, not A
		{sA, nil},
		{99, []string{"a"}},
	} {
		if eff := h.relinquish(tc.id, tc.keys...); !eff.empty() {
			t.Fatalf("Relinquish(%d, %v) = %+v", tc.id, tc.keys, eff)
		}
	}
	if s := h.tab.Stats(); s.Leases != 2 {
		t.Fatalf("Leases = %d", s.Leases)
	}
	h.relinquish(sA, "a", "a", "never")
	if s := h.tab.Stats(); s.Leases != 1 || s.InvalidationsAcked != 0 {
		t.Fatalf("Stats %+v", s)
	}
	if tracked(h.tab, "a") {
		t.Fatal("idle key kept")
	}
	// Relinquish does not touch a write lease.
	h.mustAcquire(sA, "w", 1)
	h.relinquish(sA, "w")
	if _, _, ok := h.tab.WriteLease("w"); !ok {
		t.Fatal("Relinquish freed a write lease")
	}
}

func TestRenew(t *testing.T) {
	h := newHarness(t, sA, sB, sW)
	for _, k := range []string{"a", "b", "c", "pending"} {
		h.grant(sA, k)
	}
	h.grant(sB, "pending")
	h.write(sW, "pending")
	h.mustAcquire(sA, "wl", 1)
	h.mustAcquire(sB, "other-wl", 2)
	h.at(2 * time.Second)
	got := h.renew(sA, "c", "missing", "pending", "a", "wl", "other-wl")
	want := []time.Duration{term, 0, 0, term, term, 0}
	if !slices.Equal(got, want) {
		t.Fatalf("Renew = %v, want %v", got, want)
	}
	if n := h.tab.Stats().Renewed; n != 3 {
		t.Fatalf("Stats().Renewed = %d after renewing c, a and wl, want 3", n)
	}
	newExpiry := h.now.Add(term + eps)
	s := h.tab.sessions[sA]
	for key, want := range map[string]time.Time{
		"a": newExpiry, "c": newExpiry, "b": t0.Add(term + eps), "pending": t0.Add(term + eps),
	} {
		if expiry, _ := readExpiry(h.tab, sA, key); !expiry.Equal(want) {
			t.Fatalf("lease %q expires t0%+v, want t0%+v", key, expiry.Sub(t0), want.Sub(t0))
		}
	}
	if l := s.wrlses["wl"]; !l.expiry.Equal(newExpiry) {
		t.Fatalf("write lease not renewed")
	}
	// A shorter renewal does not shorten a lease.
	if got := renewUniform(h.tab, sA, []string{"a"}, time.Second, h.now); got[0] != time.Second {
		t.Fatalf("Renew = %v", got)
	}
	if expiry, _ := readExpiry(h.tab, sA, "a"); !expiry.Equal(newExpiry) {
		t.Fatal("lease shortened by a shorter renewal")
	}
	for _, tc := range []struct {
		id   SessionID
		term time.Duration
	}{{99, term}, {sA, 0}, {sA, -1}} {
		if got := renewUniform(h.tab, tc.id, []string{"a", "b"}, tc.term, h.now); !slices.Equal(got, []time.Duration{0, 0}) {
			t.Fatalf("Renew(%d, %v) = %v", tc.id, tc.term, got)
		}
	}
	if got := h.renew(sA); len(got) != 0 {
		t.Fatalf("empty Renew = %v", got)
	}
	if n := h.tab.Stats().Renewed; n != 4 {
		t.Fatalf("Stats().Renewed = %d, want 4: only the shorter renewal of a counts since", n)
	}
}

func TestWriteBarrier(t *testing.T) {
	h := newHarness(t, sA, sB)
	barrier := t0.Add(5 * time.Second)
	h.tab.SetWriteBarrier(barrier)
	if got := h.grant(sA, "read"); got != term {
		t.Fatalf("Grant under the barrier = %v", got)
	}
	op, eff := h.write(sB, "k")
	if len(eff.Ready) != 0 {
		t.Fatalf("write ready before the barrier: %+v", eff)
	}
	acq, _ := h.acquire(sB, "j")
	h.wantReady(acq, false)
	if s := h.tab.Stats(); s.WritesWaiting != 2 {
		t.Fatalf("WritesWaiting = %d", s.WritesWaiting)
	}
	h.wantNextDeadline(barrier)
	if got := h.grant(sA, "k"); got != 0 {
		t.Fatalf("Grant on a key with a held write = %v", got)
	}
	h.now = barrier.Add(-time.Nanosecond)
	h.tick()
	h.wantReady(op, false)
	h.now = barrier
	eff = h.tick()
	if len(eff.Ready) != 2 {
		t.Fatalf("at the barrier: Ready = %v", eff.Ready)
	}
	h.wantNextDeadline(t0.Add(term + eps))
	// After the barrier, writes go at once.
	op2, _ := h.write(sA, "x")
	h.wantReady(op2, true)
}

// TestRestoredWriteLease: a write lease brought back from an earlier run
// keeps other sessions' leases and writes off its key until it expires, and
// a session of its holder's client that presents its token writes under it
// at once, before the write barrier, gets the recall sent meanwhile, and
// may release it. Another client's session with the token is fenced.
func TestRestoredWriteLease(t *testing.T) {
	const holder, other = 100, 200
	h := newHarness(t, sA, sB)
	h.tab.SetClient(sA, holder)
	h.tab.SetClient(sB, other)
	barrier := t0.Add(time.Second)
	h.tab.SetWriteBarrier(barrier)
	h.tab.RestoreWriteLease("k", 7, holder, barrier, 0)
	checkInvariants(t, h.tab)
	if tok, holder, ok := h.tab.WriteLease("k"); !ok || tok != 7 || holder != RestoredSession {
		t.Fatalf("WriteLease(k) = %d, %d, %v; want 7 held by the restored session", tok, holder, ok)
	}
	if d := h.grant(sB, "k"); d != 0 {
		t.Fatalf("read lease on a key with a restored write lease: %v", d)
	}
	if _, _, err := h.tokenWrite(sB, "k", 6); !errors.Is(err, ErrFenced) {
		t.Fatalf("write with an older token: %v, want ErrFenced", err)
	}
	if _, _, err := h.tokenWrite(sB, "k", 7); !errors.Is(err, ErrFenced) {
		t.Fatalf("another client's write with the live token: %v, want ErrFenced", err)
	}
	if _, err := h.release(sB, "k", 7); !errors.Is(err, ErrNotFound) {
		t.Fatalf("another client's release with the live token: %v, want ErrNotFound", err)
	}
	otherOp, eff := h.write(sB, "k")
	h.wantReady(otherOp, false)
	if got := sessionsOf(eff.Recall); len(got) != 1 || got[0] != RestoredSession {
		t.Fatalf("recalls %v, want one to the restored session", eff.Recall)
	}
	// The holder, on a new session, writes with its token before the
	// barrier, and is told of the recall nobody received.
	op, eff, err := h.tokenWrite(sA, "k", 7)
	if err != nil {
		t.Fatal(err)
	}
	h.wantReady(op, true)
	if len(eff.Recall) != 1 || eff.Recall[0] != (Notice{Session: sA, Key: "k", Token: 7}) {
		t.Fatalf("recalls at the takeover %+v, want the lease's to the holder's new session", eff.Recall)
	}
	if _, holder, _ := h.tab.WriteLease("k"); holder != sA {
		t.Fatalf("the lease is held by %d after its token was presented by %d", holder, sA)
	}
	h.done(op, true)
	// Its release ends the lease; the other write still waits for the
	// barrier.
	eff, err = h.release(sA, "k", 7)
	if err != nil || len(eff.EndWrite) != 1 {
		t.Fatalf("release: %v, %+v", err, eff)
	}
	h.wantReady(otherOp, false)
	h.wantNextDeadline(barrier)
	h.now = barrier
	h.tick()
	h.wantReady(otherOp, true)
}

// TestRestoredWriteLeaseExpires: unclaimed, a restored write lease ends at
// its expiry, through EndWrite, like any other.
func TestRestoredWriteLeaseExpires(t *testing.T) {
	h := newHarness(t, sB)
	h.tab.RestoreWriteLease("k", 3, 100, t0.Add(time.Second), 0)
	h.wantNextDeadline(t0.Add(time.Second))
	h.now = t0.Add(time.Second)
	eff := h.tick()
	if len(eff.EndWrite) != 1 || eff.EndWrite[0] != (Notice{Session: RestoredSession, Key: "k", Token: 3}) {
		t.Fatalf("EndWrite = %+v", eff.EndWrite)
	}
	if _, _, ok := h.tab.WriteLease("k"); ok {
		t.Fatal("the expired restored lease is still there")
	}
	if d := h.grant(sB, "k"); d != term {
		t.Fatalf("read lease after the restored lease ended: %v", d)
	}
}

// TestEndingWriteLease: a write lease that ended stays in place until
// EndWriteLease: its holder's writes are fenced, no renewal extends it, and
// other sessions get no lease and no ready op on its key meanwhile.
func TestEndingWriteLease(t *testing.T) {
	for _, how := range []string{"release", "graceful close", "expiry"} {
		t.Run(how, func(t *testing.T) {
			tab := New(Config{Epsilon: eps})
			tab.AddSession(sA)
			tab.AddSession(sB)
			acq := &Op{Kind: OpAcquire, Session: sA, Key: "k"}
			eff, err := tab.Submit(acq, t0)
			if err != nil || len(eff.Ready) != 1 {
				t.Fatalf("acquire: %v %+v", err, eff)
			}
			tab.DoneAcquire(acq, 1, term, t0)
			now := t0
			switch how {
			case "release":
				eff, err = tab.ReleaseWriteLease(sA, "k", 1, 0, now)
			case "graceful close":
				eff = tab.CloseSession(sA, true, now)
			case "expiry":
				now = t0.Add(term + eps)
				eff = tab.Tick(now)
			}
			if err != nil || len(eff.EndWrite) != 1 || eff.EndWrite[0] != (Notice{Session: sA, Key: "k", Token: 1}) {
				t.Fatalf("end: %v, EndWrite %+v", err, eff.EndWrite)
			}
			checkInvariants(t, tab)
			if how != "graceful close" {
				if _, err := tab.Submit(&Op{Kind: OpWrite, Session: sA, Key: "k", Token: 1}, now); !errors.Is(err, ErrFenced) {
					t.Fatalf("holder's write after the end: %v, want ErrFenced", err)
				}
				if terms := renewUniform(tab, sA, []string{"k"}, term, now); terms[0] != 0 {
					t.Fatalf("renewal of an ended write lease: %v", terms)
				}
				if _, err := tab.ReleaseWriteLease(sA, "k", 1, 0, now); !errors.Is(err, ErrNotFound) {
					t.Fatalf("second release: %v, want ErrNotFound", err)
				}
			}
			if d := tab.Grant(sB, "k", term, now); d != 0 {
				t.Fatalf("read lease while the end is not durable: %v", d)
			}
			w := &Op{Kind: OpWrite, Session: sB, Key: "k"}
			eff, err = tab.Submit(w, now)
			if err != nil || len(eff.Ready) != 0 || len(eff.Recall) != 0 {
				t.Fatalf("write while the end is not durable: %v, %+v; want it waiting, with no recall", err, eff)
			}
			if eff := tab.EndWriteLease("k", 2, now); len(eff.Ready) != 0 {
				t.Fatal("EndWriteLease with another token ended the lease")
			}
			eff = tab.EndWriteLease("k", 1, now)
			if len(eff.Ready) != 1 || eff.Ready[0] != w {
				t.Fatalf("after EndWriteLease: Ready %v, want the waiting write", eff.Ready)
			}
			checkInvariants(t, tab)
		})
	}
}

func TestWriteBarrierAndHolders(t *testing.T) {
	// The barrier and a holder: ready only when both are past.
	h := newHarness(t, sA, sB)
	h.grant(sA, "k")
	h.tab.SetWriteBarrier(t0.Add(time.Hour))
	op, _ := h.write(sB, "k")
	h.wantNextDeadline(t0.Add(term + eps))
	h.relinquish(sA, "k")
	h.wantReady(op, false)
	h.wantNextDeadline(t0.Add(time.Hour))
	h.at(time.Hour)
	h.tick()
	h.wantReady(op, true)
}

func TestStats(t *testing.T) {
	h := newHarness(t, sA, sB, sC)
	want := func(stage string, leases, wleases, waiting, sessions int) {
		t.Helper()
		s := h.tab.Stats()
		if s.Leases != leases || s.WriteLeases != wleases || s.WritesWaiting != waiting || s.Sessions != sessions {
			t.Fatalf("%s: Stats %+v; want Leases %d WriteLeases %d WritesWaiting %d Sessions %d",
				stage, s, leases, wleases, waiting, sessions)
		}
	}
	want("empty", 0, 0, 0, 3)
	h.tab.AddSession(sA) // no-op
	want("re-add", 0, 0, 0, 3)
	h.grant(sA, "a")
	h.grant(sA, "b")
	h.grant(sB, "a")
	h.grant(sB, "a")
	want("grants", 3, 0, 0, 3)
	h.mustAcquire(sC, "w", 1)
	h.grant(sC, "w")
	want("write lease", 4, 1, 0, 3)
	h.write(sC, "a")
	h.write(sB, "a")
	h.write(sA, "w")
	want("writes", 4, 1, 3, 3)
	h.close(sC, false)
	// C's write was abandoned, so B's write started: B's own (invalidated)
	// lease was dropped, A's was asked already.
	want("C lost", 3, 1, 2, 2)
	h.at(term + eps)
	h.tick()
	want("expired", 0, 0, 0, 2)
	if s := h.tab.Stats(); s.InvalidationsSent != 3 || s.InvalidationsAcked != 1 || s.InvalidationsExpired != 2 || s.Recalls != 1 {
		t.Fatalf("Stats %+v; want 3 invalidations sent (A, B on a; C on w), 1 dropped by its own write, 2 expired, 1 recall", s)
	}
}

// TestInvalidationOutcomesAddUp: every invalidation sent ends counted
// once, as acknowledged, expired or cancelled, or is still outstanding: a
// fresh grant after the write that sent it was abandoned cancels it, and so
// does an adoption that merges an invalidated handed-over lease into the
// adopting session's own invalidated lease on the key, while one merged
// into a lease not invalidated carries on in it.
func TestInvalidationOutcomesAddUp(t *testing.T) {
	want := func(h *harness, stage string, sent, acked, expired, cancelled uint64) {
		t.Helper()
		s := h.tab.Stats()
		if s.InvalidationsSent != sent || s.InvalidationsAcked != acked || s.InvalidationsExpired != expired || s.InvalidationsCancelled != cancelled {
			t.Fatalf("%s: Stats %+v; want sent %d acked %d expired %d cancelled %d", stage, s, sent, acked, expired, cancelled)
		}
	}
	t.Run("regrant after abandon", func(t *testing.T) {
		h := newHarness(t, sA, sW)
		h.grant(sA, "k")
		op, _ := h.write(sW, "k")
		h.abandon(op)
		if h.grant(sA, "k") == 0 {
			t.Fatal("no fresh grant once the write was abandoned")
		}
		want(h, "regrant", 1, 0, 0, 1)
		h.at(2 * term)
		h.tick()
		want(h, "expiry", 1, 0, 0, 1)
	})
	t.Run("adoption merges", func(t *testing.T) {
		const handed SessionID = 1 << 62
		h := newHarness(t, sA, sB, sW)
		// On both keys the handed-over lease and sA's own are invalidated by
		// a write that is abandoned; then sA is granted j afresh.
		for _, key := range []string{"j", "k"} {
			h.grant(sA, key)
			h.tab.RestoreReadLease(handed, key, t0.Add(term))
			op := &Op{Kind: OpWrite, Session: sW, Key: key, Deadline: t0.Add(time.Second)}
			h.submit(op)
		}
		want(h, "invalidated", 4, 0, 0, 0)
		h.at(time.Second)
		h.tick() // both writes abandoned
		h.grant(sA, "j")
		want(h, "regrant", 4, 0, 0, 1)
		// j: the handed-over invalidation carries on in sA's lease; k: the
		// two merge, and one is cancelled.
		eff := h.record(h.tab.AdoptSession(handed, sA, h.now))
		if len(eff.Invalidate) != 2 {
			t.Fatalf("adoption: invalidations %+v, want j and k on sA", eff.Invalidate)
		}
		want(h, "adopted", 4, 0, 0, 2)
		h.relinquish(sA, "j", "k")
		want(h, "acknowledged", 4, 2, 0, 2)
	})
}

// TestLatestExpiry: the latest end of any outstanding lease, read or
// write, ε included; none once they are relinquished.
func TestLatestExpiry(t *testing.T) {
	h := newHarness(t, sA, sB)
	if got := h.tab.LatestExpiry(); !got.IsZero() {
		t.Fatalf("empty table: %v", got)
	}
	h.grant(sA, "a")
	h.at(time.Second).grant(sB, "b")
	if got, want := h.tab.LatestExpiry(), t0.Add(time.Second+term+eps); !got.Equal(want) {
		t.Fatalf("two read leases: %v, want %v", got, want)
	}
	h.at(2*time.Second).mustAcquire(sA, "w", 1)
	if got, want := h.tab.LatestExpiry(), t0.Add(2*time.Second+term+eps); !got.Equal(want) {
		t.Fatalf("with a write lease: %v, want %v", got, want)
	}
	h.close(sA, true)
	h.close(sB, true)
	if got := h.tab.LatestExpiry(); !got.IsZero() {
		t.Fatalf("after every lease was relinquished: %v", got)
	}
}

// A read lease handed over from another node is held by a closed session
// until its client comes back: a write waits for it to run out, or, once
// a session of its client adopts it, for that session's acknowledgement.
func TestHandedOverReadLease(t *testing.T) {
	const handed SessionID = 1 << 63
	h := newHarness(t, sA, sB, sW)
	h.tab.RestoreReadLease(handed, "k", t0.Add(time.Second))
	h.tab.RestoreReadLease(handed, "j", t0.Add(2*time.Second))
	checkInvariants(t, h.tab)
	if st := h.tab.Stats(); st.Leases != 2 || st.Sessions != 3 {
		t.Errorf("stats %+v; want 2 leases, the handed-over holder not counted as a session", st)
	}
	// Nobody answers for k: the write waits until the lease runs out.
	op, eff := h.write(sW, "k")
	h.wantReady(op, false)
	if got := sessionsOf(eff.Invalidate); len(got) != 1 || got[0] != handed {
		t.Fatalf("invalidations %v, want one to the handed-over holder", eff.Invalidate)
	}
	h.wantNextDeadline(t0.Add(time.Second))
	h.now = t0.Add(time.Second)
	h.tick()
	h.wantReady(op, true)
	h.done(op, true)
	// j: the client comes back as sA and adopts the lease; a write that
	// invalidated it before is invalidated again on sA, whose
	// acknowledgement frees the key before the lease would run out.
	op, _ = h.write(sW, "j")
	h.wantReady(op, false)
	eff = h.record(h.tab.AdoptSession(handed, sA, h.now))
	checkInvariants(t, h.tab)
	if len(eff.Invalidate) != 1 || eff.Invalidate[0] != (Notice{Session: sA, Key: "j"}) {
		t.Fatalf("adoption: invalidations %+v, want j on sA", eff.Invalidate)
	}
	h.relinquish(sA, "j")
	h.wantReady(op, true)
	h.done(op, true)
	for _, l := range h.tab.Leases() {
		if l.Session != sW {
			t.Errorf("lease %+v after the adoption; want only the writer's, on k and j", l)
		}
	}
	// Adopting into a closed or unknown session, or from an open one, does
	// nothing.
	h.tab.RestoreReadLease(handed, "m", t0.Add(3*time.Second))
	for _, to := range []SessionID{99, sB} {
		if to == sB {
			h.close(sB, true)
		}
		if eff := h.tab.AdoptSession(handed, to, h.now); len(eff.Invalidate) != 0 {
			t.Errorf("adoption into %d: %+v", to, eff)
		}
	}
	if eff := h.tab.AdoptSession(sA, sW, h.now); len(eff.Invalidate) != 0 {
		t.Errorf("adoption from an open session: %+v", eff)
	}
	if ls := h.tab.Leases(); len(ls) != 3 {
		t.Errorf("leases %+v; want m still with the handed-over holder, and the writer's two", ls)
	}
}

// TestMaxLeasesPerSession: past its cap, a session gets no new read lease
// (Grant returns 0 and AtLeaseLimit says why), while the leases it holds
// are still extended and renewed, a writer's fresh lease is simply not
// given, other sessions are not affected, and a relinquished lease makes
// room again.
func TestMaxLeasesPerSession(t *testing.T) {
	const max = 3
	h := newHarness(t, sA, sB, sW)
	h.tab = New(Config{Epsilon: eps, MaxLeasesPerSession: max})
	for _, id := range []SessionID{sA, sB, sW} {
		h.tab.AddSession(id)
	}
	for _, k := range []string{"k0", "k1", "k2"} {
		if h.tab.AtLeaseLimit(sA, k, term) {
			t.Fatalf("AtLeaseLimit(%q) with %d of %d leases", k, h.tab.sessions[sA].nreads, max)
		}
		if got := h.grant(sA, k); got != term {
			t.Fatalf("Grant(%q) = %v under the cap", k, got)
		}
	}
	if !h.tab.AtLeaseLimit(sA, "k3", term) {
		t.Fatal("AtLeaseLimit(k3) = false at the cap")
	}
	if got := h.grant(sA, "k3"); got != 0 {
		t.Fatalf("Grant(k3) = %v past the cap, want 0", got)
	}
	if s := h.tab.Stats(); s.Leases != max || h.tab.index.n != max {
		t.Fatalf("Stats %+v, %d keys: the refused grant left state behind", s, h.tab.index.n)
	}
	// What it holds is extended and renewed.
	if h.tab.AtLeaseLimit(sA, "k0", term) || h.grant(sA, "k0") != term {
		t.Fatal("a held lease was not extended at the cap")
	}
	if got := h.renew(sA, "k0", "k1", "k2"); !slices.Equal(got, []time.Duration{term, term, term}) {
		t.Fatalf("Renew at the cap = %v", got)
	}
	// A zero term needs no lease, so it is not at the limit.
	if h.tab.AtLeaseLimit(sA, "k3", 0) {
		t.Fatal("AtLeaseLimit with term 0")
	}
	// A key whose lease would be refused anyway (a write pending) is not
	// at the limit either: the read is served with term 0.
	h.grant(sB, "busy")
	h.write(sW, "busy")
	if h.tab.AtLeaseLimit(sA, "busy", term) {
		t.Fatal("AtLeaseLimit on a key with a write pending")
	}
	// Other sessions are not affected.
	if got := h.grant(sB, "k3"); got != term {
		t.Fatalf("another session's Grant = %v", got)
	}
	// A write of a session at its cap commits, without a fresh lease.
	op, _ := h.write(sA, "w")
	h.wantReady(op, true)
	if got, _ := h.done(op, true); got != 0 {
		t.Fatalf("Done gave the writer at its cap a lease of %v", got)
	}
	// Relinquishing makes room.
	h.relinquish(sA, "k1")
	if h.tab.AtLeaseLimit(sA, "k3", term) || h.grant(sA, "k3") != term {
		t.Fatal("no room after a relinquish")
	}
}

// TestMaxLeases: past Config.MaxLeases, the leases of all sessions
// together, no session gets a new lease, whatever it holds itself; leases
// held are extended, and a lease that ends makes room.
func TestMaxLeases(t *testing.T) {
	const max = 3
	h := newHarness(t, sA, sB, sW)
	h.tab = New(Config{Epsilon: eps, MaxLeasesPerSession: 10, MaxLeases: max})
	for _, id := range []SessionID{sA, sB, sW} {
		h.tab.AddSession(id)
	}
	for _, g := range []struct {
		s SessionID
		k string
	}{{sA, "k0"}, {sA, "k1"}, {sB, "k2"}} {
		if h.tab.AtLeaseLimit(g.s, g.k, term) || h.grant(g.s, g.k) != term {
			t.Fatalf("no lease on %s under the server's cap", g.k)
		}
	}
	for _, s := range []SessionID{sA, sB, sW} {
		if !h.tab.AtLeaseLimit(s, "k3", term) {
			t.Fatalf("AtLeaseLimit(%v, k3) = false with %d leases, the server's cap", s, max)
		}
		if got := h.grant(s, "k3"); got != 0 {
			t.Fatalf("Grant(%v, k3) = %v past the server's cap, want 0", s, got)
		}
	}
	if s := h.tab.Stats(); s.Leases != max {
		t.Fatalf("Stats %+v: the refused grants left state behind", s)
	}
	// What a session holds is extended; another session's key is not its.
	if h.tab.AtLeaseLimit(sB, "k2", term) || h.grant(sB, "k2") != term {
		t.Fatal("a held lease was not extended at the server's cap")
	}
	if !h.tab.AtLeaseLimit(sB, "k0", term) {
		t.Fatal("sB could lease k0, which only sA holds, at the server's cap")
	}
	// A relinquished lease makes room.
	h.tab.Relinquish(sA, []string{"k0"}, h.now)
	if h.tab.AtLeaseLimit(sW, "k3", term) || h.grant(sW, "k3") != term {
		t.Fatal("no room after a lease ended")
	}
}

// TestMaxWriteLeasesPerSession: past Config.MaxWriteLeasesPerSession, a
// session's acquisition of another key is refused with ErrWriteLeaseLimit
// and changes nothing; other sessions are not affected, and a release
// makes room.
func TestMaxWriteLeasesPerSession(t *testing.T) {
	h := newHarness(t, sA, sB)
	h.tab = New(Config{Epsilon: eps, MaxWriteLeasesPerSession: 2})
	h.tab.AddSession(sA)
	h.tab.AddSession(sB)
	h.mustAcquire(sA, "w0", 1)
	h.mustAcquire(sA, "w1", 2)
	before := h.tab.Stats()
	op := &Op{Kind: OpAcquire, Session: sA, Key: "w2"}
	if eff, err := h.tab.Submit(op, h.now); !errors.Is(err, ErrWriteLeaseLimit) || !eff.empty() {
		t.Fatalf("a third acquisition: %v, %+v; want ErrWriteLeaseLimit and no effects", err, eff)
	}
	if after := h.tab.Stats(); after != before || tracked(h.tab, "w2") {
		t.Fatalf("the refused acquisition changed the table: %+v, then %+v", before, after)
	}
	h.mustAcquire(sB, "w2", 3)
	if _, err := h.release(sA, "w0", 1); err != nil {
		t.Fatal(err)
	}
	h.tab.EndWriteLease("w0", 1, h.now)
	h.mustAcquire(sA, "w3", 4)
}
