package core

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/faultstore"
	"github.com/leased/leased/store"
)

// ttl is the TTL of the leases of these tests.
const ttl = 3 * time.Second

// newTTLCore returns a core over st, as newCore does, whose TTL leases
// may be as short as a second and are checkpointed every interval.
func newTTLCore(t *testing.T, st store.Store, cfg TTLConfig) (*Core, *notices) {
	t.Helper()
	if cfg.MinTTL == 0 {
		cfg.MinTTL = time.Second
	}
	n := &notices{}
	c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, TTL: cfg,
		BootFile: bootFile(t, st), BootClock: clock.NewFakeBoot(nil),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, n)
	if err != nil {
		t.Fatal(err)
	}
	return c, n
}

// grant grants a TTL lease of d by session s and returns its id.
func grant(t *testing.T, c *Core, s SessionID, d time.Duration) uint64 {
	t.Helper()
	o := submit(t, c, &Request{Session: s, Op: store.OpGrantTTL, TTL: d}).must(t)
	if o.Lease == 0 || o.TTL != d {
		t.Fatalf("grant of %v: lease %d, TTL %v", d, o.Lease, o.TTL)
	}
	return o.Lease
}

// putWith puts key attached to lease id.
func putWith(t *testing.T, c *Core, s SessionID, key string, id uint64) uint64 {
	t.Helper()
	r := put(s, key, "v")
	r.Lease = id
	return submit(t, c, r).must(t).Version
}

// keepAlive renews ids and returns the outcome.
func keepAlive(t *testing.T, c *Core, ids ...uint64) KeepAliveOutcome {
	t.Helper()
	out := make(chan KeepAliveOutcome, 1)
	c.KeepAlive(ids, func(o KeepAliveOutcome) { out <- o })
	synctest.Wait()
	select {
	case o := <-out:
		return o
	default:
		t.Fatalf("keep-alive of %v: no outcome", ids)
		return KeepAliveOutcome{}
	}
}

// exists reports whether key has a value in st.
func exists(t *testing.T, st store.Store, key string) bool {
	t.Helper()
	rec, err := st.Get([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return rec.Found
}

// TestTTLLeaseExpiryDeletesItsKeys: a lease that is not kept alive ends no
// sooner than ttl + ε after its grant, and its keys are deleted through the
// write path: a session that caches one is asked to drop it, and the
// delete waits for its acknowledgement. The lease is gone for keep-alives.
func TestTTLLeaseExpiryDeletesItsKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, n := newTTLCore(t, st, TTLConfig{})
		defer c.Close()
		c.OpenSession(1)
		c.OpenSession(2)
		start := time.Now()
		id := grant(t, c, 1, ttl)
		putWith(t, c, 1, "svc/a", id)
		putWith(t, c, 1, "svc/b", id)
		c.Relinquish(1, []string{"svc/a", "svc/b"})
		time.Sleep(ttl - time.Second) // session 2's lease lasts past the TTL lease
		if _, lt, err := c.Read(2, []byte("svc/a")); err != nil || lt != term {
			t.Fatalf("read by session 2: term %v, %v", lt, err)
		}
		time.Sleep(time.Until(start.Add(ttl + eps - time.Millisecond)))
		synctest.Wait()
		if !exists(t, st, "svc/a") || !exists(t, st, "svc/b") {
			t.Fatalf("a key of the lease was deleted %v after its grant, before ttl + ε", time.Since(start))
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if got := n.inv[2]; len(got) != 1 || got[0] != "svc/a" {
			t.Fatalf("invalidations to the caching session %v, want [svc/a]", got)
		}
		if !exists(t, st, "svc/a") {
			t.Fatal("svc/a deleted before its reader acknowledged the invalidation")
		}
		c.Relinquish(2, []string{"svc/a"})
		synctest.Wait()
		if exists(t, st, "svc/a") || exists(t, st, "svc/b") {
			t.Fatal("keys of the expired lease still there after the reader acknowledged")
		}
		if o := keepAlive(t, c, id); o.Err != nil || len(o.Renewed) != 0 || len(o.Unknown) != 1 {
			t.Fatalf("keep-alive of the expired lease: %+v, want it unknown", o)
		}
		if _, _, _, ok, _ := c.TTLLease(id, false); ok {
			t.Fatal("TTLLease finds the expired lease")
		}
		st2 := c.Stats().TTL
		if st2.Revoked != 1 || st2.Expired != 1 || st2.KeysDeleted != 2 || st2.Holders != 1 || st2.Leases != 0 {
			t.Fatalf("stats %+v, want one expiry of two keys that invalidated one holder", st2)
		}
	})
}

// TestTTLKeepAliveExtends: a keep-alive renews the lease for its TTL from
// then; after the last one it ends ttl + ε later, not before.
func TestTTLKeepAliveExtends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, _ := newTTLCore(t, st, TTLConfig{})
		defer c.Close()
		c.OpenSession(1)
		id := grant(t, c, 1, ttl)
		putWith(t, c, 1, "k", id)
		var last time.Time
		for range 5 {
			time.Sleep(ttl / 3)
			last = time.Now()
			o := keepAlive(t, c, id)
			if o.Err != nil || len(o.Renewed) != 1 || o.Renewed[0].TTL != ttl {
				t.Fatalf("keep-alive: %+v", o)
			}
		}
		time.Sleep(time.Until(last.Add(ttl + eps - time.Millisecond)))
		synctest.Wait()
		if !exists(t, st, "k") {
			t.Fatal("key deleted before ttl + ε after the last keep-alive")
		}
		if left, granted, _, ok, _ := c.TTLLease(id, false); !ok || granted != ttl || left > time.Millisecond {
			t.Fatalf("TTLLease = %v of %v (%v), want under 1ms of %v left", left, granted, ok, ttl)
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if exists(t, st, "k") {
			t.Fatal("key still there after ttl + ε past the last keep-alive")
		}
	})
}

// TestTTLRevoke: a revocation deletes every attached key at one revision
// and reports it; a key put again without the lease was detached and
// stays; a revoked or unknown lease is not found, by id.
func TestTTLRevoke(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, _ := newTTLCore(t, st, TTLConfig{})
		defer c.Close()
		c.OpenSession(1)
		id := grant(t, c, 1, time.Hour)
		for _, k := range []string{"a", "b", "c"} {
			putWith(t, c, 1, k, id)
		}
		submit(t, c, put(1, "c", "detached")).must(t)
		// The writer's own read leases on its keys are invalidated as any
		// other: it lets them go.
		c.Relinquish(1, []string{"a", "b", "c"})
		_, _, keys, ok, err := c.TTLLease(id, true)
		if err != nil || !ok || strings.Join(keys, ",") != "a,b" {
			t.Fatalf("TTLLease keys %v (%v, %v), want [a b]", keys, ok, err)
		}
		o := submit(t, c, &Request{Session: 1, Op: store.OpRevokeTTL, Lease: id}).must(t)
		if o.Keys != 2 {
			t.Fatalf("revocation deleted %d keys, want 2", o.Keys)
		}
		for _, k := range []string{"a", "b"} {
			rec, _ := st.Get([]byte(k))
			if rec.Found || rec.Version != o.Version {
				t.Fatalf("%s after the revocation: %+v, want deleted at revision %d", k, rec, o.Version)
			}
		}
		if !exists(t, st, "c") {
			t.Fatal("the detached key was deleted")
		}
		again := submit(t, c, &Request{Session: 1, Op: store.OpRevokeTTL, Lease: id})
		o2, _ := again.outcome()
		if want := fmt.Sprintf("%016x", id); !errors.Is(o2.Err, store.ErrLeaseNotFound) || !strings.Contains(o2.Err.Error(), want) {
			t.Fatalf("second revocation: %v, want not found naming %s", o2.Err, want)
		}
		w := put(1, "d", "v")
		w.Lease = id
		if o3, _ := submit(t, c, w).outcome(); !errors.Is(o3.Err, store.ErrLeaseNotFound) {
			t.Fatalf("put with the revoked lease: %v, want ErrLeaseNotFound", o3.Err)
		}
	})
}

// TestTTLRevokeSeesKeysAttachedMeanwhile: a key attached while the
// revocation waits for a holder of another key is deleted too: the
// revocation that read the keys before is not applied as it was, but
// done again with the new keys.
func TestTTLRevokeSeesKeysAttachedMeanwhile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, _ := newTTLCore(t, st, TTLConfig{})
		defer c.Close()
		c.OpenSession(1)
		c.OpenSession(2)
		id := grant(t, c, 1, time.Hour)
		putWith(t, c, 1, "a", id)
		submit(t, c, put(1, "b", "unattached")).must(t)
		c.Relinquish(1, []string{"a", "b"})
		for _, k := range []string{"a", "b"} {
			if _, _, err := c.Read(2, []byte(k)); err != nil {
				t.Fatal(err)
			}
		}
		// The attaching write waits for session 2's lease on b; the
		// revocation reads the keys meanwhile, and waits for its lease on a.
		w := put(1, "b", "attached")
		w.Lease = id
		attach := submit(t, c, w)
		rv := submit(t, c, &Request{Session: 1, Op: store.OpRevokeTTL, Lease: id})
		c.Relinquish(2, []string{"b"})
		attach.must(t)
		c.Relinquish(1, []string{"b"})
		if _, ok := rv.outcome(); ok {
			t.Fatal("revocation applied before the reader of a key let go")
		}
		c.Relinquish(2, []string{"a"})
		o := rv.must(t)
		if o.Keys != 2 || exists(t, st, "a") || exists(t, st, "b") {
			t.Fatalf("revocation deleted %d keys; a there %v, b there %v; want both deleted", o.Keys, exists(t, st, "a"), exists(t, st, "b"))
		}
	})
}

// TestTTLGrantBounds: a TTL outside the bounds, or a grant past the
// server's cap, is refused with a reason and grants nothing.
func TestTTLGrantBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, _ := newTTLCore(t, st, TTLConfig{MinTTL: time.Second, MaxTTL: time.Minute, MaxLeases: 2})
		defer c.Close()
		c.OpenSession(1)
		for _, d := range []time.Duration{0, time.Second - 1, time.Minute + 1} {
			err := c.Submit(&Request{Session: 1, Op: store.OpGrantTTL, TTL: d, Done: func(Outcome) { t.Error("refused grant ended") }})
			if !errors.Is(err, ErrTTLOutOfRange) {
				t.Fatalf("grant of %v: %v, want ErrTTLOutOfRange", d, err)
			}
		}
		grant(t, c, 1, time.Second)
		grant(t, c, 1, time.Minute)
		err := c.Submit(&Request{Session: 1, Op: store.OpGrantTTL, TTL: time.Second, Done: func(Outcome) { t.Error("refused grant ended") }})
		if !errors.Is(err, ErrTTLLeaseLimit) {
			t.Fatalf("third grant with a cap of 2: %v, want ErrTTLLeaseLimit", err)
		}
		if s, _ := st.State(); s.TTLLeaseID != 2 {
			t.Fatalf("lease counter %d after two grants, want 2", s.TTLLeaseID)
		}
	})
}

// TestTTLGrantRetriedOnce: a grant with a client identity sent again is
// granted once, and the retry names the first grant's lease.
func TestTTLGrantRetriedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, _ := newTTLCore(t, st, TTLConfig{})
		defer c.Close()
		c.OpenSession(1)
		first := submit(t, c, &Request{Session: 1, Op: store.OpGrantTTL, TTL: ttl, Client: 7, ID: 1}).must(t)
		retry := submit(t, c, &Request{Session: 1, Op: store.OpGrantTTL, TTL: ttl, Client: 7, ID: 1}).must(t)
		if !retry.Duplicate || retry.Lease != first.Lease {
			t.Fatalf("retry: %+v, want a duplicate of lease %d", retry, first.Lease)
		}
		if n := c.Stats().TTL.Leases; n != 1 {
			t.Fatalf("%d leases tracked after a grant and its retry, want 1", n)
		}
	})
}

// TestTTLRestartResumes: across a restart, a lease kept alive since its
// last checkpoint gets its whole TTL from when the new run may act (the
// end of the old run's horizon), and one that was not, only what its
// record says is left; the lease counter goes on.
func TestTTLRestartResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		a, _ := newTTLCore(t, st, TTLConfig{})
		a.OpenSession(1)
		kept := grant(t, a, 1, ttl)
		idle := grant(t, a, 1, ttl)
		putWith(t, a, 1, "kept", kept)
		putWith(t, a, 1, "idle", idle)
		time.Sleep(time.Second)
		if o := keepAlive(t, a, kept); len(o.Renewed) != 1 {
			t.Fatalf("keep-alive: %+v", o)
		}
		idleEnd := time.Now().Add(ttl + eps - time.Second) // granted a second ago
		a.Close()
		time.Sleep(100 * time.Millisecond)

		b, _ := newTTLCore(t, st, TTLConfig{})
		defer b.Close()
		from := time.Now().Add(b.Stats().WritesAllowedIn)
		b.OpenSession(2)
		// The idle lease counts its TTL from the restart: later than its
		// holder believes, never earlier.
		time.Sleep(time.Until(idleEnd))
		synctest.Wait()
		if !exists(t, st, "idle") {
			t.Fatal("the idle lease's key was deleted before ttl + ε after its grant")
		}
		keptEnd := from.Add(ttl + eps)
		time.Sleep(time.Until(keptEnd.Add(-time.Millisecond)))
		synctest.Wait()
		if !exists(t, st, "kept") {
			t.Fatal("the kept lease's key was deleted before its whole TTL had passed after the old run's horizon")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if exists(t, st, "kept") || exists(t, st, "idle") {
			t.Fatal("keys still there after both leases ran out")
		}
		if id := grant(t, b, 2, ttl); id != 3 {
			t.Fatalf("first grant after the restart: lease %d, want 3", id)
		}
	})
}

// TestTTLMassExpiryIsPaced: when many leases expire at once, they are
// revoked at the configured rate, not all at once.
func TestTTLMassExpiryIsPaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, _ := newTTLCore(t, st, TTLConfig{MaxRevokesPerSecond: 100})
		defer c.Close()
		c.OpenSession(1)
		const n = 300
		for range n {
			grant(t, c, 1, ttl)
		}
		time.Sleep(ttl + eps + time.Second)
		synctest.Wait()
		got := c.Stats().TTL.Expired
		// A tenth of a second's burst, then 100 a second.
		if got < 100 || got > 120 {
			t.Fatalf("%d leases revoked one second after %d expired at a rate of 100/s", got, n)
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if got := c.Stats().TTL.Expired; got != n {
			t.Fatalf("%d leases revoked after four seconds, want all %d", got, n)
		}
	})
}

// TestTTLRevokeCanceled: a revocation whose caller gives up while it waits
// for a holder is abandoned whole: nothing is deleted, and the lease lives
// on.
func TestTTLRevokeCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, _ := newTTLCore(t, st, TTLConfig{})
		defer c.Close()
		c.OpenSession(1)
		c.OpenSession(2)
		id := grant(t, c, 1, time.Hour)
		putWith(t, c, 1, "a", id)
		putWith(t, c, 1, "b", id)
		if _, _, err := c.Read(2, []byte("a")); err != nil {
			t.Fatal(err)
		}
		r := &Request{Session: 1, Op: store.OpRevokeTTL, Lease: id}
		p := submit(t, c, r)
		c.Cancel(r, ErrCanceled)
		o, ok := p.outcome()
		if !ok || !errors.Is(o.Err, ErrCanceled) {
			t.Fatalf("canceled revocation: %+v (%v), want ErrCanceled", o, ok)
		}
		c.Relinquish(2, []string{"a"})
		synctest.Wait()
		if !exists(t, st, "a") || !exists(t, st, "b") {
			t.Fatal("a canceled revocation deleted keys")
		}
		if o := keepAlive(t, c, id); len(o.Renewed) != 1 {
			t.Fatalf("keep-alive after a canceled revocation: %+v, want renewed", o)
		}
		// A write on the key no longer waits behind the revocation.
		submit(t, c, put(1, "b", "w")).must(t)
	})
}

// TestTTLDeposedLeaderStopsAcknowledging: a leader that can no longer
// persist a horizon (it was deposed) acknowledges keep-alives only while
// its last horizon lasts, and the next leader gives every lease kept alive
// its whole TTL from the end of that horizon: so no lease ends while its
// holder, told by the old leader that it was renewed, still believes in
// it.
func TestTTLDeposedLeaderStopsAcknowledging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := store.NewMemory()
		fs := owned(t, faultstore.New(mem))
		newReplicated := func(st store.Store, name string) *Core {
			c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Replicated: true, Clockname: name,
				TTL: TTLConfig{MinTTL: time.Second}, BootFile: bootFile(t, st), BootClock: clock.NewFakeBoot(nil),
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, &notices{})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		a := newReplicated(fs, "a")
		a.OpenSession(1)
		id := grant(t, a, 1, ttl)
		putWith(t, a, 1, "k", id)
		a.Relinquish(1, []string{"k"})
		if o := keepAlive(t, a, id); len(o.Renewed) != 1 {
			t.Fatalf("keep-alive on the leader: %+v", o)
		}
		// Another node takes over; a cannot write any more, but does not
		// know it yet.
		fs.Fail(fmt.Errorf("%w: deposed", store.ErrNotLeader))
		b := newReplicated(mem, "b")
		defer b.Close()
		horizon := a.started.Add(time.Duration(a.horizon.Load()))
		time.Sleep(time.Until(horizon.Add(-time.Millisecond)))
		acked := time.Now()
		if o := keepAlive(t, a, id); o.Err != nil || len(o.Renewed) != 1 {
			t.Fatalf("keep-alive on the deposed leader within its horizon: %+v", o)
		}
		time.Sleep(2 * time.Millisecond)
		if o := keepAlive(t, a, id); !errors.Is(o.Err, ErrUnavailable) {
			t.Fatalf("keep-alive on the deposed leader past its horizon: %+v, want ErrUnavailable", o)
		}
		a.Close()
		time.Sleep(time.Until(acked.Add(ttl + eps - time.Millisecond)))
		synctest.Wait()
		if !exists(t, mem, "k") {
			t.Fatal("the new leader deleted the key of a lease its holder was told was renewed, before ttl + ε")
		}
		if left, _, _, ok, _ := b.TTLLease(id, false); !ok || left <= 0 {
			t.Fatalf("the new leader's lease: %v left (%v)", left, ok)
		}
	})
}

// TestTTLRevocationInProgress: while a revocation waits for the holders of
// its keys, the lease still exists, as its keys do: a keep-alive and a
// write that names it wait for the revocation to end, and then find the
// lease gone; its time to live is zero, with its keys. A keep-alive that
// waited for a revocation that was abandoned renews the lease.
func TestTTLRevocationInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, _ := newTTLCore(t, st, TTLConfig{})
		defer c.Close()
		c.OpenSession(1)
		c.OpenSession(2)
		id := grant(t, c, 1, time.Hour)
		putWith(t, c, 1, "a", id)
		c.Relinquish(1, []string{"a"})
		if _, _, err := c.Read(2, []byte("a")); err != nil {
			t.Fatal(err)
		}
		rv := submit(t, c, &Request{Session: 1, Op: store.OpRevokeTTL, Lease: id})
		kaOut := make(chan KeepAliveOutcome, 1)
		c.KeepAlive([]uint64{id}, func(o KeepAliveOutcome) { kaOut <- o })
		w := put(1, "b", "v")
		w.Lease = id
		pw := submit(t, c, w)
		synctest.Wait()
		select {
		case o := <-kaOut:
			t.Fatalf("keep-alive answered while the revocation waits: %+v", o)
		default:
		}
		if _, ok := pw.outcome(); ok {
			t.Fatal("a write naming the lease ended while its revocation waits")
		}
		left, granted, keys, ok, err := c.TTLLease(id, true)
		if err != nil || !ok || left != 0 || granted != time.Hour || len(keys) != 1 || keys[0] != "a" {
			t.Fatalf("TTLLease during the revocation: %v of %v, keys %v, %v, %v; want 0 of 1h with [a]", left, granted, keys, ok, err)
		}
		c.Relinquish(2, []string{"a"})
		rv.must(t)
		synctest.Wait()
		if o := <-kaOut; o.Err != nil || len(o.Renewed) != 0 || len(o.Unknown) != 1 {
			t.Fatalf("keep-alive after the revocation: %+v, want the lease unknown", o)
		}
		if o, _ := pw.outcome(); !errors.Is(o.Err, store.ErrLeaseNotFound) {
			t.Fatalf("write naming the revoked lease: %+v, want ErrLeaseNotFound", o)
		}
		if exists(t, st, "b") {
			t.Fatal("the write naming the revoked lease wrote its key")
		}

		// Abandoned: the waiting keep-alive renews the lease.
		id2 := grant(t, c, 1, time.Hour)
		putWith(t, c, 1, "c", id2)
		c.Relinquish(1, []string{"c"})
		if _, _, err := c.Read(2, []byte("c")); err != nil {
			t.Fatal(err)
		}
		r := &Request{Session: 1, Op: store.OpRevokeTTL, Lease: id2}
		submit(t, c, r)
		c.KeepAlive([]uint64{id2}, func(o KeepAliveOutcome) { kaOut <- o })
		c.Cancel(r, ErrCanceled)
		synctest.Wait()
		if o := <-kaOut; o.Err != nil || len(o.Renewed) != 1 {
			t.Fatalf("keep-alive after an abandoned revocation: %+v, want renewed", o)
		}
	})
}

// TestTTLExpiredLeaseLivesUntilRevoked: leases past their expiry that the
// revocation budget holds back still exist, as their keys do: their time
// to live is zero, a keep-alive renews them, and a write may attach to
// them. A lease reported gone while its keys are still served would tell
// its holder a falsehood.
func TestTTLExpiredLeaseLivesUntilRevoked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, _ := newTTLCore(t, st, TTLConfig{MaxRevokesPerSecond: 1})
		defer c.Close()
		c.OpenSession(1)
		ids := make([]uint64, 3)
		for i := range ids {
			ids[i] = grant(t, c, 1, time.Second)
			putWith(t, c, 1, fmt.Sprintf("k%d", i), ids[i])
		}
		c.Relinquish(1, []string{"k0", "k1", "k2"})
		time.Sleep(time.Second + eps + time.Millisecond)
		synctest.Wait()
		if n := c.Stats().TTL.Expired; n != 1 {
			t.Fatalf("%d leases revoked at once with a budget of one a second, want 1", n)
		}
		var held []int
		for i, id := range ids {
			left, _, _, ok, _ := c.TTLLease(id, false)
			if !exists(t, st, fmt.Sprintf("k%d", i)) {
				if ok {
					t.Fatalf("lease %d revoked, yet TTLLease finds it", id)
				}
				continue
			}
			held = append(held, i)
			if !ok || left != 0 {
				t.Fatalf("lease %d held back, its key there: TTLLease %v left (%v), want 0 left", id, left, ok)
			}
		}
		if len(held) != 2 {
			t.Fatalf("%d leases held back, want 2", len(held))
		}
		renewed, key := ids[held[1]], fmt.Sprintf("k%d", held[1])
		if o := keepAlive(t, c, renewed); o.Err != nil || len(o.Renewed) != 1 {
			t.Fatalf("keep-alive of a lease past its expiry, not yet revoked: %+v, want renewed", o)
		}
		w := put(1, key, "again")
		w.Lease = renewed
		submit(t, c, w).must(t)
		c.Relinquish(1, []string{key})
		// The budget's next token revokes the other one; the renewed one
		// lives its TTL + ε from the keep-alive.
		time.Sleep(time.Second)
		synctest.Wait()
		if n := c.Stats().TTL.Expired; n != 2 {
			t.Fatalf("%d leases revoked a second later, want 2", n)
		}
		if _, _, _, ok, _ := c.TTLLease(renewed, false); !ok || !exists(t, st, key) {
			t.Fatal("the lease renewed past its expiry was revoked before its TTL had passed again")
		}
	})
}

// TestTTLStalledExpiryKeepsTheLeaseRevoking: an expiry whose revocation
// fails (the store is down) stays under way: keep-alives wait rather than
// hear that a lease whose keys are still there is gone, and once the store
// is back the revocation is made again and answers them.
func TestTTLStalledExpiryKeepsTheLeaseRevoking(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem := store.NewMemory()
		fs := owned(t, faultstore.New(mem))
		c, _ := newTTLCore(t, fs, TTLConfig{})
		defer c.Close()
		c.OpenSession(1)
		id := grant(t, c, 1, time.Second)
		putWith(t, c, 1, "k", id)
		c.Relinquish(1, []string{"k"})
		fs.Fail(errors.New("disk on fire"))
		time.Sleep(time.Second + eps + time.Millisecond)
		synctest.Wait()
		if !exists(t, mem, "k") {
			t.Fatal("key deleted while the store was failing")
		}
		out := make(chan KeepAliveOutcome, 1)
		c.KeepAlive([]uint64{id}, func(o KeepAliveOutcome) { out <- o })
		synctest.Wait()
		select {
		case o := <-out:
			t.Fatalf("keep-alive answered while the failed revocation's keys are there: %+v", o)
		default:
		}
		fs.Heal()
		time.Sleep(5 * time.Second) // the store reopens, and the Lessor hands the lease out again
		synctest.Wait()
		select {
		case o := <-out:
			if o.Err != nil || len(o.Unknown) != 1 {
				t.Fatalf("keep-alive after the revocation: %+v, want the lease unknown", o)
			}
		default:
			t.Fatal("keep-alive still unanswered after the store came back")
		}
		if exists(t, mem, "k") {
			t.Fatal("key still there after the revocation was made again")
		}
	})
}

// TestTTLOwner: a grant records its Owner with the lease, in the store
// and for TTLOwner; a restart reads it back; TTLLeases lists an owner's
// leases and those with none; a revoked lease has no owner and does not
// exist.
func TestTTLOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		a, _ := newTTLCore(t, st, TTLConfig{})
		a.OpenSession(1)
		owned := submit(t, a, &Request{Session: 1, Op: store.OpGrantTTL, TTL: time.Hour, Owner: 7}).must(t).Lease
		other := submit(t, a, &Request{Session: 1, Op: store.OpGrantTTL, TTL: time.Hour, Owner: 8}).must(t).Lease
		none := grant(t, a, 1, time.Hour)
		check := func(c *Core, when string) {
			t.Helper()
			for id, want := range map[uint64]uint64{owned: 7, other: 8, none: 0} {
				if owner, ok := c.TTLOwner(id); !ok || owner != want {
					t.Errorf("%s: TTLOwner(%d) = %d, %v; want %d", when, id, owner, ok, want)
				}
			}
			if l, _, _, _ := st.TTLLease(owned); l.Owner != 7 {
				t.Errorf("%s: stored lease %+v, want owner 7", when, l)
			}
			var ids []uint64
			infos, _ := c.TTLLeases(0, 0, 7)
			for _, l := range infos {
				ids = append(ids, l.ID)
			}
			if fmt.Sprint(ids) != fmt.Sprint([]uint64{owned, none}) {
				t.Errorf("%s: owner 7 lists %v, want [%d %d]", when, ids, owned, none)
			}
			if all, _ := c.TTLLeases(0, 0, 0); len(all) != 3 {
				t.Errorf("%s: %d leases listed to all, want 3", when, len(all))
			}
		}
		check(a, "after the grants")
		a.Close()

		b, _ := newTTLCore(t, st, TTLConfig{})
		defer b.Close()
		b.OpenSession(2)
		check(b, "after a restart")
		submit(t, b, &Request{Session: 2, Op: store.OpRevokeTTL, Lease: owned}).must(t)
		if owner, ok := b.TTLOwner(owned); ok || owner != 0 {
			t.Fatalf("TTLOwner of a revoked lease = %d, %v; want 0, false", owner, ok)
		}
	})
}
