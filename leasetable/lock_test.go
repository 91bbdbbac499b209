package leasetable

import (
	"errors"
	"testing"
	"time"
)

// Acquisition modes and write leases bound to TTL leases (DESIGN §5.1).

func (h *harness) acquireMode(id SessionID, key string, mode Mode, lease uint64) (*Op, Effects, error) {
	h.tb.Helper()
	op := &Op{Kind: OpAcquire, Session: id, Key: key, Mode: mode, Lease: lease}
	eff, err := h.tab.Submit(op, h.now)
	return op, h.record(eff), err
}

func TestWaitNeverRecalls(t *testing.T) {
	h := newHarness(t, sA, sB, sC)
	h.mustAcquire(sA, "k", 1)
	wait, _, err := h.acquireMode(sB, "k", Wait, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.recalls) != 0 {
		t.Fatalf("a waiting acquisition recalled: %v", h.recalls)
	}
	h.wantReady(wait, false)
	// A second waiter lines up behind it; a try fails at once.
	wait2, _, _ := h.acquireMode(sC, "k", Wait, 0)
	if _, _, err := h.acquireMode(sC, "other", Try, 0); err != nil {
		t.Fatalf("try of a free key: %v", err)
	}
	if _, _, err := h.acquireMode(sC, "k", Try, 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("try of a held key: %v, want ErrLocked", err)
	}
	// The holder renews: still no recall, no grant.
	h.at(5 * time.Second)
	if terms := h.renew(sA, "k"); terms[0] != term {
		t.Fatalf("holder's renewal while a waiter waits = %v, want %v", terms, term)
	}
	h.tick()
	h.wantReady(wait, false)
	// Its release lets the first waiter in, and only it.
	if _, err := h.release(sA, "k", 1); err != nil {
		t.Fatal(err)
	}
	h.wantReady(wait, true)
	h.wantReady(wait2, false)
	h.doneAcquire(wait, 2)
	h.wantReady(wait2, false)
	// The second waits for the first's term to run out, never recalls.
	h.at(5*time.Second + term + eps)
	h.tick()
	h.wantReady(wait2, true)
	if len(h.recalls) != 0 {
		t.Fatalf("recalls %v, want none", h.recalls)
	}
}

func TestTryAcquire(t *testing.T) {
	h := newHarness(t, sA, sB)
	op, _, err := h.acquireMode(sA, "k", Try, 0)
	if err != nil {
		t.Fatal(err)
	}
	h.wantReady(op, true)
	h.doneAcquire(op, 1)
	// The holder itself may try again: it holds the key already.
	if _, _, err := h.acquireMode(sA, "k", Try, 0); err != nil {
		t.Fatalf("holder's try: %v", err)
	}
	if _, _, err := h.acquireMode(sB, "k", Try, 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("try of a held key = %v, want ErrLocked", err)
	}
	// A waiter ahead makes a try fail too, even once the key is free.
	h2 := newHarness(t, sA, sB, sC)
	h2.mustAcquire(sA, "k", 1)
	h2.acquireMode(sB, "k", Wait, 0)
	h2.release(sA, "k", 1)
	if _, _, err := h2.acquireMode(sC, "k", Try, 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("try behind a waiter = %v, want ErrLocked", err)
	}
}

func TestBoundWriteLease(t *testing.T) {
	h := newHarness(t, sA, sB, sW)
	op, _, _ := h.acquireMode(sA, "k", Wait, 9)
	h.wantReady(op, true)
	h.doneAcquire(op, 5)
	if _, ok := h.tab.NextDeadline(); ok {
		t.Fatalf("a bound lease set a deadline")
	}
	if !h.tab.LatestExpiry().IsZero() {
		t.Errorf("LatestExpiry = %v with a bound lease alone, want none", h.tab.LatestExpiry())
	}
	if got := h.tab.Stats().WriteLeases; got != 1 {
		t.Errorf("Stats().WriteLeases = %d, want 1", got)
	}
	// Neither a write nor a recalling acquisition recalls it.
	w, _ := h.write(sW, "k")
	rec, _, _ := h.acquireMode(sB, "k", Recall, 0)
	h.at(time.Hour)
	h.tick()
	h.wantReady(w, false)
	h.wantReady(rec, false)
	if len(h.recalls) != 0 {
		t.Fatalf("a bound lease was recalled: %v", h.recalls)
	}
	// Its holder writes at once; a graceful close leaves it.
	hw, _, err := h.tokenWrite(sA, "k", 5)
	if err != nil {
		t.Fatal(err)
	}
	h.wantReady(hw, true)
	h.done(hw, true)
	h.close(sA, true)
	if tok, _, ok := h.tab.WriteLease("k"); !ok || tok != 5 {
		t.Fatalf("after a graceful close: WriteLease = %d, %v; want 5 held", tok, ok)
	}
	// Its TTL lease ends: the waiters go in order.
	h.record(h.tab.EndLock("k", 4, h.now)) // not its token: nothing
	h.wantReady(w, false)
	h.record(h.tab.EndLock("k", 5, h.now))
	h.wantReady(w, true)
	if _, _, ok := h.tab.WriteLease("k"); ok {
		t.Fatal("EndLock left the lease")
	}
	if got := h.tab.Stats().WriteLeases; got != 0 {
		t.Errorf("Stats().WriteLeases = %d after EndLock, want 0", got)
	}
	h.done(w, true)
	h.wantReady(rec, true)
}

func TestRestoredBoundLease(t *testing.T) {
	h := newHarness(t, sA)
	h.tab.SetClient(sA, 7)
	h.tab.RestoreWriteLease("k", 3, 7, t0.Add(time.Second), 9)
	h.at(time.Hour)
	h.tick()
	if tok, _, ok := h.tab.WriteLease("k"); !ok || tok != 3 {
		t.Fatalf("a restored bound lease expired: %d, %v", tok, ok)
	}
	// Its client takes it over at its hello, and releases it.
	h.record(func() Effects { eff, _ := h.tab.AdoptClient(sA, h.now); return eff }())
	if _, holder, _ := h.tab.WriteLease("k"); holder != sA {
		t.Fatalf("holder %d after AdoptClient, want %d", holder, sA)
	}
	if _, err := h.release(sA, "k", 3); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := h.tab.WriteLease("k"); ok {
		t.Fatal("release left the lease")
	}
}

func TestUnlistedKeysLeavePrefixLeases(t *testing.T) {
	h := newHarness(t, sA, sW)
	h.tab = New(Config{Epsilon: eps, Unlisted: "\xff\xff"})
	h.tab.AddSession(sA)
	h.tab.AddSession(sW)
	if got := h.grantPrefix(sA, ""); got != term {
		t.Fatalf("prefix lease on everything: %v", got)
	}
	op, _ := h.write(sW, "\xff\xfflock\x00k")
	h.wantReady(op, true)
	if len(h.pinvalid) != 0 {
		t.Fatalf("an unlisted key's write invalidated listings: %v", h.pinvalid)
	}
	if got := h.grantPrefix(sA, ""); got != term {
		t.Errorf("prefix lease while an unlisted key is written = %v, want %v", got, term)
	}
	h.done(op, true)
}

// A client that may use a lock's TTL lease takes the lock over at its
// first write under it, which waits for the read lease the earlier
// holder's session kept on the key; a session whose TTL lease is another
// is fenced.
func TestTakeoverByTTLLease(t *testing.T) {
	h := newHarness(t, sA, sB, sC)
	h.tab.SetClient(sA, 1)
	h.tab.SetClient(sB, 2)
	h.tab.SetClient(sC, 3)
	op, _, _ := h.acquireMode(sA, "k", Wait, 9)
	h.doneAcquire(op, 5)
	h.grant(sA, "k") // the holder caches the key
	other := &Op{Kind: OpWrite, Session: sC, Key: "k", Token: 5, Lease: 8}
	if _, err := h.tab.Submit(other, h.now); !errors.Is(err, ErrFenced) {
		t.Fatalf("write under another TTL lease = %v, want ErrFenced", err)
	}
	w := &Op{Kind: OpWrite, Session: sB, Key: "k", Token: 5, Lease: 9}
	h.submit(w)
	if _, holder, _ := h.tab.WriteLease("k"); holder != sB {
		t.Fatalf("holder %d after the takeover, want %d", holder, sB)
	}
	h.wantReady(w, false)
	if n := len(h.invalid); n != 1 || h.invalid[0] != (Notice{Session: sA, Key: "k"}) {
		t.Fatalf("invalidations %v, want one to the earlier holder", h.invalid)
	}
	h.relinquish(sA, "k")
	h.wantReady(w, true)
	h.done(w, true)
	// The earlier holder may no longer write under it, nor release it.
	if _, err := h.tab.Submit(&Op{Kind: OpWrite, Session: sA, Key: "k", Token: 5}, h.now); !errors.Is(err, ErrFenced) {
		t.Fatalf("the earlier holder's write = %v, want ErrFenced", err)
	}
	if _, err := h.release(sA, "k", 5); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the earlier holder's release = %v, want ErrNotFound", err)
	}
	// A takeover write whose lease ends while it waits is abandoned.
	h2 := newHarness(t, sA, sB)
	h2.tab.SetClient(sA, 1)
	h2.tab.SetClient(sB, 2)
	op2, _, _ := h2.acquireMode(sA, "k", Wait, 9)
	h2.doneAcquire(op2, 5)
	h2.grant(sA, "k")
	w2 := &Op{Kind: OpWrite, Session: sB, Key: "k", Token: 5, Lease: 9}
	h2.submit(w2)
	h2.record(h2.tab.EndLock("k", 5, h2.now))
	h2.relinquish(sA, "k")
	if !h2.abandoned[w2] {
		t.Fatal("a takeover write whose lock ended was not abandoned")
	}
}

// A waiting acquisition keeps its place in line across a reconnect of the
// same client: its next session asks again and takes the place; a waiter
// that came later stays behind it.
func TestWaiterKeepsItsPlaceAcrossAReconnect(t *testing.T) {
	h := newHarness(t, sA, sB, sC)
	h.tab.SetClient(sA, 1)
	h.tab.SetClient(sB, 2)
	h.tab.SetClient(sC, 3)
	h.mustAcquire(sA, "k", 1)
	first, _, _ := h.acquireMode(sB, "k", Wait, 0)
	later, _, _ := h.acquireMode(sC, "k", Wait, 0)
	h.close(sB, false) // B's connection is lost
	if h.abandoned[first] {
		t.Fatal("a lost session's waiting acquisition was abandoned")
	}
	const sB2 SessionID = 42
	h.tab.AddSession(sB2)
	h.tab.SetClient(sB2, 2)
	eff, _ := h.tab.AdoptClient(sB2, h.now)
	h.record(eff)
	again, _, err := h.acquireMode(sB2, "k", Wait, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !h.abandoned[first] {
		t.Fatal("the kept acquisition was not replaced")
	}
	h.release(sA, "k", 1)
	h.wantReady(again, true)
	h.wantReady(later, false)
	h.doneAcquire(again, 2)
	if _, holder, _ := h.tab.WriteLease("k"); holder != sB2 {
		t.Fatalf("holder %d, want the reconnected session %d", holder, sB2)
	}
	// A graceful close keeps nothing.
	h.close(sC, true)
	if !h.abandoned[later] {
		t.Fatal("a graceful close kept a waiting acquisition")
	}
}

// A kept acquisition that reaches the head while its client is away is
// granted to nobody: the next waiter goes on.
func TestKeptWaiterOfAnAbsentClient(t *testing.T) {
	h := newHarness(t, sA, sB, sC)
	h.tab.SetClient(sB, 2)
	h.mustAcquire(sA, "k", 1)
	kept, _, _ := h.acquireMode(sB, "k", Wait, 0)
	next, _, _ := h.acquireMode(sC, "k", Wait, 0)
	h.close(sB, false)
	h.release(sA, "k", 1)
	h.wantReady(kept, true)
	h.doneAcquire(kept, 2)
	if _, _, ok := h.tab.WriteLease("k"); ok {
		t.Fatal("a closed session was granted the lease")
	}
	h.wantReady(next, true)
}

// A lock delay holds acquisitions of its key, not writes, until it ends.
func TestLockDelay(t *testing.T) {
	h := newHarness(t, sA, sB, sW)
	h.tab.DelayLock("k", t0.Add(3*time.Second))
	if _, _, err := h.acquireMode(sA, "k", Try, 0); !errors.Is(err, ErrLocked) {
		t.Fatalf("try during a lock delay = %v, want ErrLocked", err)
	}
	wait, _, _ := h.acquireMode(sA, "k", Wait, 0)
	h.wantReady(wait, false)
	if at, ok := h.tab.NextDeadline(); !ok || !at.Equal(t0.Add(3*time.Second)) {
		t.Fatalf("NextDeadline = %v, %v; want the delay's end", at, ok)
	}
	w, _ := h.write(sW, "other")
	h.wantReady(w, true)
	h.at(3 * time.Second)
	h.tick()
	h.wantReady(wait, true)
}
