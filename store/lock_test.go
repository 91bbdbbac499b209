package store_test

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/leased/leased/store"
)

// Locks: write leases bound to TTL leases, and guards (DESIGN §5.1).

func grantWL(key string, session, client, lease uint64) store.Command {
	return store.Command{Op: store.OpGrantWriteLease, Key: []byte(key), Session: session, Client: client, Term: 10 * time.Second, Lease: lease}
}

func endWL(key string, token uint64) store.Command {
	return store.Command{Op: store.OpEndWriteLease, Key: []byte(key), Token: token}
}

func guarded(c store.Command, lock string, token uint64) store.Command {
	c.Guard = &store.Guard{Key: []byte(lock), Token: token}
	return c
}

// wantWriteLeases fails t unless the store's write leases are want.
func wantWriteLeases(t *testing.T, s store.Store, want ...store.WriteLease) {
	t.Helper()
	st := mustState(t, s)
	if len(st.WriteLeases) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(st.WriteLeases, want) {
		t.Errorf("write leases %+v\nwant         %+v", st.WriteLeases, want)
	}
}

// wantLocks fails t unless lease id binds the locks want.
func wantLocks(t *testing.T, s store.Store, id uint64, want ...store.BoundLock) {
	t.Helper()
	l, _, ok, err := s.TTLLease(id)
	if err != nil || !ok {
		t.Fatalf("TTLLease(%d) = %v, %v", id, ok, err)
	}
	if len(l.Locks) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(l.Locks, want) {
		t.Errorf("lease %d binds %+v, want %+v", id, l.Locks, want)
	}
}

var lockContract = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a write lease bound to a TTL lease ends with it", func(t *testing.T, s store.Store) {
		const ttl = 5 * time.Second
		mustApply(t, s, grantTTL(ttl), withLease(put("a", "1"), 1))
		gen := func() uint64 {
			l, _, _, err := s.TTLLease(1)
			if err != nil {
				t.Fatal(err)
			}
			return l.Gen
		}
		g := gen()
		rs := mustApply(t, s, grantWL("lock", 7, 70, 1), grantWL("free", 8, 80, 0))
		if rs[0].Err != nil || rs[0].Token != 1 || rs[1].Token != 2 {
			t.Fatalf("grants = %+v; want tokens 1 and 2", rs)
		}
		if gen() != g+1 {
			t.Errorf("binding a lock left the attachment generation at %d, want %d", gen(), g+1)
		}
		wantLocks(t, s, 1, store.BoundLock{Key: "lock", Token: 1})
		wantWriteLeases(t, s,
			store.WriteLease{Key: "free", Token: 2, Session: 8, Term: 10 * time.Second, Client: 80},
			store.WriteLease{Key: "lock", Token: 1, Session: 7, Term: 10 * time.Second, Client: 70, Lease: 1})
		r := mustApply(t, s, revokeTTL(1))[0]
		if r.Err != nil || !reflect.DeepEqual(r.Locks, []store.BoundLock{{Key: "lock", Token: 1}}) || len(r.Keys) != 1 {
			t.Fatalf("revoke = %+v; want a deleted and the lock ended", r)
		}
		wantWriteLeases(t, s, store.WriteLease{Key: "free", Token: 2, Session: 8, Term: 10 * time.Second, Client: 80})
	}},
	{"a lease with locks and no keys ends them without a revision", func(t *testing.T, s store.Store) {
		mustApply(t, s, grantTTL(5*time.Second), grantWL("l", 1, 0, 1))
		rev := mustState(t, s).Revision
		r := mustApply(t, s, revokeTTL(1))[0]
		if r.Err != nil || r.Version != 0 || len(r.Locks) != 1 {
			t.Fatalf("revoke = %+v; want the lock ended, no revision", r)
		}
		if st := mustState(t, s); st.Revision != rev || len(st.WriteLeases) != 0 {
			t.Errorf("after the revoke: revision %d (want %d), write leases %+v", st.Revision, rev, st.WriteLeases)
		}
	}},
	{"a bound grant needs its TTL lease, and a free slot", func(t *testing.T, s store.Store) {
		r := mustApply(t, s, grantWL("l", 1, 0, 9))[0]
		if !errors.Is(r.Err, store.ErrLeaseNotFound) || r.Token != 0 {
			t.Fatalf("grant under a missing lease = %+v; want ErrLeaseNotFound, no token", r)
		}
		if st := mustState(t, s); st.Fence != 0 || len(st.WriteLeases) != 0 {
			t.Fatalf("a refused grant took token %d, left %+v", st.Fence, st.WriteLeases)
		}
		mustApply(t, s, grantTTL(5*time.Second))
		cmds := make([]store.Command, store.MaxTTLLocks)
		for i := range cmds {
			cmds[i] = grantWL(fmt.Sprintf("l%04d", i), 1, 0, 1)
		}
		mustApply(t, s, cmds...)
		r = mustApply(t, s, grantWL("one-more", 1, 0, 1))[0]
		if !errors.Is(r.Err, store.ErrLeaseFull) || r.Token != 0 {
			t.Fatalf("grant past MaxTTLLocks = %+v; want ErrLeaseFull", r)
		}
		// A release frees a slot; a grant again on a bound key keeps one.
		mustApply(t, s, endWL("l0000", 1), grantWL("l0001", 1, 0, 1))
		if r := mustApply(t, s, grantWL("one-more", 1, 0, 1))[0]; r.Err != nil {
			t.Fatalf("grant after a release = %+v", r)
		}
		l, _, _, _ := s.TTLLease(1)
		if len(l.Locks) != store.MaxTTLLocks {
			t.Errorf("lease binds %d locks, want %d", len(l.Locks), store.MaxTTLLocks)
		}
	}},
	{"a release unbinds; a grant again moves the binding", func(t *testing.T, s store.Store) {
		mustApply(t, s, grantTTL(5*time.Second), grantTTL(5*time.Second))
		mustApply(t, s, grantWL("a", 1, 0, 1), grantWL("b", 1, 0, 1))
		// Released with the wrong token: nothing ends.
		mustApply(t, s, endWL("a", 9))
		wantLocks(t, s, 1, store.BoundLock{Key: "a", Token: 1}, store.BoundLock{Key: "b", Token: 2})
		mustApply(t, s, endWL("a", 1), grantWL("b", 1, 0, 2))
		wantLocks(t, s, 1)
		wantLocks(t, s, 2, store.BoundLock{Key: "b", Token: 3})
		// Revoking lease 1 ends nothing now.
		if r := mustApply(t, s, revokeTTL(1))[0]; r.Err != nil || len(r.Locks) != 0 {
			t.Fatalf("revoke of a lease whose locks moved = %+v", r)
		}
		wantWriteLeases(t, s, store.WriteLease{Key: "b", Token: 3, Session: 1, Term: 10 * time.Second, Lease: 2})
		mustApply(t, s, grantWL("b", 1, 0, 0))
		wantLocks(t, s, 2)
	}},
	{"an expiry leaves a lock delay; a revocation does not; a grant clears it", func(t *testing.T, s store.Store) {
		const delay = 15 * time.Second
		at := time.Unix(1000, 0)
		mustApply(t, s, grantTTL(5*time.Second), grantTTL(5*time.Second))
		d1, d2 := grantWL("a", 1, 0, 1), grantWL("b", 1, 0, 2)
		d1.LockDelay, d2.LockDelay = delay, delay
		mustApply(t, s, d1, d2)
		st := mustState(t, s)
		if len(st.WriteLeases) != 2 || st.WriteLeases[0].LockDelay != delay {
			t.Fatalf("write leases %+v, want the lock delay recorded", st.WriteLeases)
		}
		exp := revokeTTL(1)
		exp.Expired, exp.At = true, at
		r := mustApply(t, s, exp, store.Command{Op: store.OpRevokeTTL, Lease: 2, At: at})
		if len(r[0].Locks) != 1 || r[0].Locks[0].Delay != delay || len(r[1].Locks) != 1 || r[1].Locks[0].Delay != 0 {
			t.Fatalf("revocations = %+v; want the expiry's lock delayed, the revocation's not", r)
		}
		st = mustState(t, s)
		if len(st.LockDelays) != 1 || st.LockDelays[0].Key != "a" || !st.LockDelays[0].Until.Equal(at.Add(delay)) {
			t.Fatalf("lock delays %+v, want a's until %v", st.LockDelays, at.Add(delay))
		}
		mustApply(t, s, grantWL("a", 2, 0, 0))
		if st := mustState(t, s); len(st.LockDelays) != 0 {
			t.Fatalf("lock delays after a grant: %+v", st.LockDelays)
		}
	}},
	{"a guarded write commits only under the lock's current token", func(t *testing.T, s store.Store) {
		mustApply(t, s, grantWL("lock", 1, 0, 0))
		rs := mustApply(t, s,
			guarded(put("x", "1"), "lock", 1),
			guarded(put("x", "2"), "lock", 2),
			guarded(del("x"), "nolock", 1),
			guarded(cas("x", 1, "3"), "lock", 1))
		if rs[0].Err != nil || rs[3].Err != nil || rs[3].Version != 2 {
			t.Fatalf("guarded writes under the token = %+v", rs)
		}
		for i, want := range map[int]uint64{1: 1, 2: 0} {
			if !errors.Is(rs[i].Err, store.ErrFenced) || rs[i].Version != want {
				t.Errorf("write %d = %+v; want ErrFenced naming token %d", i, rs[i], want)
			}
		}
		wantRecord(t, s, "x", str("3"), 2)
		// Once the lock ends, or is granted again, the old token fails.
		mustApply(t, s, endWL("lock", 1))
		if r := mustApply(t, s, guarded(put("x", "4"), "lock", 1))[0]; !errors.Is(r.Err, store.ErrFenced) {
			t.Errorf("write after the lock ended = %+v; want ErrFenced", r)
		}
		mustApply(t, s, grantWL("lock", 2, 0, 0))
		txn := store.Command{Op: store.OpTxn, Txn: &store.Txn{Then: []store.TxnOp{{Op: store.OpPut, Key: []byte("y"), Value: []byte("1")}}}}
		rs = mustApply(t, s, guarded(txn, "lock", 1), guarded(txn, "lock", 2))
		if !errors.Is(rs[0].Err, store.ErrFenced) || rs[1].Err != nil || !rs[1].Succeeded {
			t.Errorf("guarded transactions = %+v; want the first fenced, the second applied", rs)
		}
		wantRecord(t, s, "x", str("3"), 2)
		wantRecord(t, s, "y", str("1"), 3)
	}},
	{"a fenced write retried gets the same outcome", func(t *testing.T, s store.Store) {
		mustApply(t, s, grantWL("lock", 1, 0, 0))
		w := guarded(put("x", "1"), "lock", 5)
		w.Client, w.Request, w.At = 42, 1, time.Unix(1, 0)
		first := mustApply(t, s, w)[0]
		// The lock moves to token 5's holder meanwhile; the retry is
		// still the write that was fenced.
		mustApply(t, s, endWL("lock", 1), grantWL("lock", 2, 0, 0), grantWL("lock", 2, 0, 0), grantWL("lock", 2, 0, 0), grantWL("lock", 2, 0, 0))
		again := mustApply(t, s, w)[0]
		if !errors.Is(first.Err, store.ErrFenced) || !errors.Is(again.Err, store.ErrFenced) || !again.Duplicate || again.Version != first.Version {
			t.Errorf("fenced write %+v, retried %+v; want ErrFenced twice, the second a duplicate", first, again)
		}
		wantRecord(t, s, "x", nil, 0)
	}},
}
