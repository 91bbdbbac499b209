package core

import (
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/store"
)

// Locks (DESIGN §5.1): acquisition modes, write leases bound to TTL
// leases, lock records and guards.

func acquire(s SessionID, key string, mode leasetable.Mode, lease uint64) *Request {
	return &Request{Session: s, Op: store.OpGrantWriteLease, Key: []byte(key), Mode: mode, Lease: lease}
}

// TestLockLivesAsLongAsItsTTLLease: a write lease bound to a TTL lease
// has no term; a waiter and a conflicting write wait for it and recall
// nothing; it ends when its TTL lease expires, and the waiter gets it.
func TestLockLivesAsLongAsItsTTLLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, n := newTTLCore(t, st, TTLConfig{})
		defer c.Close()
		for _, s := range []SessionID{1, 2, 3} {
			c.OpenSession(s)
		}
		id := grant(t, c, 1, ttl)
		held := submit(t, c, acquire(1, "lock", leasetable.Wait, id)).must(t)
		if held.Token == 0 || held.Term != 0 {
			t.Fatalf("bound acquisition = %+v; want a token and no term", held)
		}
		waiter := submit(t, c, acquire(2, "lock", leasetable.Wait, 0))
		write := submit(t, c, put(3, "lock", "x"))
		if _, err := c.submitTry(acquire(3, "lock", leasetable.Try, 0)); !errors.Is(err, ErrLocked) {
			t.Fatalf("try of a held lock = %v, want ErrLocked", err)
		}
		// Kept alive past many terms, it stays.
		for range 5 {
			time.Sleep(ttl / 2)
			if o := keepAlive(t, c, id); len(o.Renewed) != 1 {
				t.Fatalf("keep-alive: %+v", o)
			}
		}
		if _, ok := waiter.outcome(); ok {
			t.Fatal("the waiter got the lock while its holder kept its TTL lease alive")
		}
		if _, ok := write.outcome(); ok {
			t.Fatal("a write committed under a held lock")
		}
		if len(n.recalls) != 0 {
			t.Fatalf("recalls %+v: a lock is never recalled", n.recalls)
		}
		// Its holder writes under it at once.
		w := put(1, "lock", "mine")
		w.Token = held.Token
		submit(t, c, w).must(t)
		// Left to expire, it ends with its TTL lease, not before.
		lastKept := time.Now()
		time.Sleep(ttl)
		if _, ok := waiter.outcome(); ok {
			t.Fatalf("the waiter got the lock %v after the last keep-alive, before the TTL %v and ε", time.Since(lastKept), ttl)
		}
		time.Sleep(time.Second)
		got := waiter.must(t)
		if got.Token <= held.Token {
			t.Fatalf("the waiter's token %d, want above %d", got.Token, held.Token)
		}
		if s, _ := st.State(); len(s.WriteLeases) != 1 || s.WriteLeases[0].Token != got.Token {
			t.Fatalf("stored write leases %+v, want the waiter's alone", s.WriteLeases)
		}
		// The old holder's write under its token is fenced now.
		if err := c.Submit(&Request{Session: 1, Op: store.OpPut, Key: []byte("lock"), Token: held.Token, Done: func(Outcome) {}}); !errors.Is(err, leasetable.ErrFenced) {
			t.Fatalf("the old holder's write = %v, want ErrFenced", err)
		}
	})
}

// submitTry submits r and returns Submit's error; an outcome is an error
// of the test.
func (c *Core) submitTry(r *Request) (Outcome, error) {
	r.Done = func(o Outcome) {}
	return Outcome{}, c.Submit(r)
}

// TestLockRecordLeaseIsRecalledWhenTheLockChanges: a read of a lock's
// record takes a lease on it; the record's readers are invalidated, and
// acknowledged, before a release ends the lock and before the next grant.
func TestLockRecordLeaseIsRecalledWhenTheLockChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, n := newCore(t, st)
		defer c.Close()
		for _, s := range []SessionID{1, 2, 9} {
			c.OpenSession(s)
		}
		rk := []byte(store.LockRecordKey("lock"))
		rec, lease, err := c.Read(9, rk)
		if err != nil || rec.Found || lease != term {
			t.Fatalf("record of a free lock: %+v, lease %v, %v", rec, lease, err)
		}
		acq := submit(t, c, acquire(1, "lock", leasetable.Recall, 0))
		if _, ok := acq.outcome(); ok {
			t.Fatal("granted before the record's reader let go")
		}
		if inv := n.inv[9]; !slices.Equal(inv, []string{string(rk)}) {
			t.Fatalf("invalidations to the reader: %q", inv)
		}
		c.Relinquish(9, []string{string(rk)})
		held := acq.must(t)
		rec, lease, err = c.Read(9, rk)
		if err != nil || !rec.Found || rec.Version != held.Token || lease != term {
			t.Fatalf("record of the held lock: %+v, lease %v, %v; want token %d", rec, lease, err, held.Token)
		}
		// The release waits for the reader too.
		released := make(chan struct{})
		if err := c.ReleaseWriteLease(1, "lock", held.Token, 0, func() { close(released) }); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		select {
		case <-released:
			t.Fatal("the release was durable before the record's reader let go")
		default:
		}
		if s, _ := st.State(); len(s.WriteLeases) != 1 {
			t.Fatalf("stored write leases %+v: the lock ended before its reader let go", s.WriteLeases)
		}
		// The reader does not answer: its lease runs out.
		time.Sleep(term + eps)
		synctest.Wait()
		select {
		case <-released:
		default:
			t.Fatal("the release never ended the lock")
		}
		if rec, _, _ := c.Read(9, rk); rec.Found {
			t.Fatalf("record after the release: %+v", rec)
		}
	})
}

// TestGuardedWrite: a write with a guard commits only under the lock's
// current token.
func TestGuardedWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := newCore(t, newMemory(t))
		defer c.Close()
		c.OpenSession(1)
		c.OpenSession(2)
		held := submit(t, c, acquire(1, "lock", leasetable.Recall, 0)).must(t)
		w := put(2, "data", "1")
		w.Guard = &store.Guard{Key: []byte("lock"), Token: held.Token}
		submit(t, c, w).must(t)
		stale := put(2, "data", "2")
		stale.Guard = &store.Guard{Key: []byte("lock"), Token: held.Token + 1}
		o, _ := submit(t, c, stale).outcome()
		if !errors.Is(o.Err, store.ErrFenced) {
			t.Fatalf("write under a wrong token: %+v, want ErrFenced", o)
		}
	})
}

// TestLockDelay: a lock with a lock delay that ends by its TTL lease's
// expiry keeps its key from acquisitions for the delay, across a restart
// too; one released ends with no delay.
func TestLockDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const delay = 10 * time.Second
		st := newMemory(t)
		c, _ := newTTLCore(t, st, TTLConfig{})
		for _, s := range []SessionID{1, 2} {
			c.OpenSession(s)
		}
		id := grant(t, c, 1, ttl)
		r := acquire(1, "lock", leasetable.Wait, id)
		r.LockDelay = delay
		held := submit(t, c, r).must(t)
		// Released: the next acquisition goes at once.
		released := make(chan struct{})
		if err := c.ReleaseWriteLease(1, "lock", held.Token, 0, func() { close(released) }); err != nil {
			t.Fatal(err)
		}
		<-released
		submit(t, c, acquire(2, "free", leasetable.Wait, 0)).must(t)
		r = acquire(1, "lock", leasetable.Wait, id)
		r.LockDelay = delay
		submit(t, c, r).must(t)
		// Left to expire: the waiter waits the TTL, then the delay.
		start := time.Now()
		waiter := submit(t, c, acquire(2, "lock", leasetable.Wait, 0))
		time.Sleep(ttl + time.Second)
		if _, ok := waiter.outcome(); ok {
			t.Fatal("the waiter got the lock before the lock delay")
		}
		if _, err := c.submitTry(acquire(2, "lock", leasetable.Try, 0)); !errors.Is(err, ErrLocked) {
			t.Fatalf("try during the lock delay = %v, want ErrLocked", err)
		}
		// A restart keeps the delay.
		c.Close()
		c2, _ := newTTLCore(t, st, TTLConfig{})
		defer c2.Close()
		c2.OpenSession(3)
		if _, err := c2.submitTry(acquire(3, "lock", leasetable.Try, 0)); !errors.Is(err, ErrLocked) {
			t.Fatalf("try after a restart within the lock delay = %v, want ErrLocked", err)
		}
		again := submit(t, c2, acquire(3, "lock", leasetable.Wait, 0))
		time.Sleep(delay)
		o := again.must(t)
		if since := time.Since(start); since < ttl+delay {
			t.Fatalf("granted %v after the holder stopped, before its TTL and lock delay (%v)", since, ttl+delay)
		}
		if o.Token == 0 {
			t.Fatalf("acquisition after the delay: %+v", o)
		}
		if s, _ := st.State(); len(s.LockDelays) != 0 {
			t.Fatalf("lock delays after the grant: %+v", s.LockDelays)
		}
	})
}

// TestLockSurvivesRestart: a lock bound to a TTL lease is restored by a
// restart with no expiry: its holder's client takes it over and writes
// under it past the restart's barrier, a conflicting acquisition waits,
// and the lock ends when its TTL lease, no longer kept alive, expires.
func TestLockSurvivesRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		a, _ := newTTLCore(t, st, TTLConfig{})
		a.OpenSession(1)
		a.SetClient(1, holderClient)
		id := grant(t, a, 1, ttl)
		held := submit(t, a, acquire(1, "lock", leasetable.Wait, id)).must(t)
		a.Close()

		b, _ := newTTLCore(t, st, TTLConfig{})
		defer b.Close()
		b.OpenSession(11)
		b.SetClient(11, holderClient)
		b.OpenSession(12)
		if tok, holder, ok := b.table.WriteLease("lock"); !ok || tok != held.Token || holder != 11 {
			t.Fatalf("after the restart: lock %d held by %d (%v); want %d, taken over by the holder's session 11", tok, holder, ok, held.Token)
		}
		waiter := submit(t, b, acquire(12, "lock", leasetable.Wait, 0))
		time.Sleep(b.Stats().WritesAllowedIn + time.Millisecond)
		// Kept alive past the barrier and more, it stays.
		for range 4 {
			if o := keepAlive(t, b, id); len(o.Renewed) != 1 {
				t.Fatalf("keep-alive after the restart: %+v", o)
			}
			time.Sleep(ttl / 2)
		}
		w := put(11, "lock", "after")
		w.Token = held.Token
		submit(t, b, w).must(t)
		if _, ok := waiter.outcome(); ok {
			t.Fatal("the waiter got a lock whose TTL lease was kept alive")
		}
		time.Sleep(ttl + time.Second)
		if o := waiter.must(t); o.Token <= held.Token {
			t.Fatalf("the waiter's token %d, want above %d", o.Token, held.Token)
		}
	})
}
