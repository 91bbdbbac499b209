package client_test

// End-to-end tests: a real server (QUIC on 127.0.0.1, verified TLS, badger on
// disk) and clients of the real library, checked against DESIGN.md. They run
// on real time (see helpers_e2e_test.go); each wait is bounded and says why.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/netfault"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// A miss, then a hit served locally without a message to the server; a put
// by another client is seen by the next read, never the old value.
func TestE2EReadCacheAndInvalidation(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Second})
	a := dial(t, srv, client.Config{Name: "a"})
	b := dial(t, srv, client.Config{Name: "b"})

	it := mustGet(t, a, "k")
	if it.Cached || it.Found {
		t.Fatalf("first read: %s, want an uncached miss", fmtItem(it))
	}
	gets, all := msgsIn(srv, "get"), sumIn(srv)
	for range 100 {
		it = mustGet(t, a, "k")
		if !it.Cached || it.Found {
			t.Fatalf("repeat read: %s, want a cached miss", fmtItem(it))
		}
	}
	if g, n := msgsIn(srv, "get"), sumIn(srv); g != gets || n != all {
		t.Fatalf("cached reads reached the server: get %d -> %d, all messages %d -> %d", gets, g, all, n)
	}

	v := mustPut(t, b, "k", "from-b")
	it = mustGet(t, a, "k")
	if it.Cached || !it.Found || string(it.Value) != "from-b" || it.Version != v {
		t.Fatalf("read after B's put (version %d): %s", v, fmtItem(it))
	}
	if it = mustGet(t, a, "k"); !it.Cached || string(it.Value) != "from-b" {
		t.Fatalf("second read after B's put: %s, want cached", fmtItem(it))
	}

	// Many rounds: every read after an acknowledged put sees that put. A
	// holds a lease on k at each put (it read k from the server in the
	// previous round), so each round needs an invalidation and its ack.
	st0 := srv.Stats()
	const rounds = 200
	for i := range rounds {
		want := fmt.Sprintf("v%d", i)
		v := mustPut(t, b, "k", want)
		it := mustGet(t, a, "k")
		if string(it.Value) != want || it.Version != v || it.Cached {
			t.Fatalf("round %d: read %s after the put of %q at version %d", i, fmtItem(it), want, v)
		}
		if it := mustGet(t, a, "k"); string(it.Value) != want || !it.Cached {
			t.Fatalf("round %d: second read %s, want cached %q", i, fmtItem(it), want)
		}
	}
	st := srv.Stats()
	if sent, acked := st.InvalidationsSent-st0.InvalidationsSent, st.InvalidationsAcked-st0.InvalidationsAcked; sent != rounds || acked != rounds {
		t.Errorf("over %d rounds: %d invalidations sent and %d acknowledged, want %d each", rounds, sent, acked, rounds)
	}
	if st.InvalidationsExpired != 0 {
		t.Errorf("InvalidationsExpired = %d with responsive holders", st.InvalidationsExpired)
	}
}

// CompareAndSwap with a stale version changes nothing; with the current one
// it commits.
func TestE2ECompareAndSwap(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Second})
	a := dial(t, srv, client.Config{})
	b := dial(t, srv, client.Config{})
	ctx := stepCtx(t)

	// Version 0 means "does not exist".
	v1, err := a.CompareAndSwap(ctx, "k", 0, []byte("one"))
	if err != nil {
		t.Fatalf("create with CAS 0: %v", err)
	}
	if _, err := b.CompareAndSwap(ctx, "k", 0, []byte("again")); !errors.Is(err, client.ErrVersionMismatch) {
		t.Fatalf("CAS 0 on an existing key: %v, want ErrVersionMismatch", err)
	}
	v2 := mustPut(t, b, "k", "two")
	// A caches version 2 (and B too).
	if it := mustGet(t, a, "k"); it.Version != v2 {
		t.Fatalf("read: %s", fmtItem(it))
	}
	rev := srv.Stats().Revision
	for _, stale := range []uint64{v1, v2 + 100} {
		_, err := a.CompareAndSwap(ctx, "k", stale, []byte("bad"))
		if !errors.Is(err, client.ErrVersionMismatch) {
			t.Fatalf("CAS with version %d (current %d): %v, want ErrVersionMismatch", stale, v2, err)
		}
		var se *client.ServerError
		if !errors.As(err, &se) || se.Code != protocol.CodeVersionMismatch {
			t.Errorf("CAS mismatch error %v is not a ServerError with its code", err)
		}
	}
	if got := srv.Stats().Revision; got != rev {
		t.Fatalf("failed CAS moved the revision %d -> %d", rev, got)
	}
	for _, cl := range []*client.Client{a, b} {
		it := mustGet(t, cl, "k")
		if string(it.Value) != "two" || it.Version != v2 {
			t.Fatalf("after failed CAS: %s, want %q at %d", fmtItem(it), "two", v2)
		}
	}
	v3, err := a.CompareAndSwap(ctx, "k", v2, []byte("three"))
	if err != nil || v3 <= v2 {
		t.Fatalf("CAS with the current version: %d, %v", v3, err)
	}
	if got := srv.Stats().Revision; got != v3 {
		t.Errorf("revision %d after the CAS, want %d", got, v3)
	}
	for _, cl := range []*client.Client{a, b} {
		if it := mustGet(t, cl, "k"); string(it.Value) != "three" || it.Version != v3 {
			t.Fatalf("after CAS: %s, want %q at %d", fmtItem(it), "three", v3)
		}
	}
	// CAS on a deleted key: the deletion's version is the key's version.
	d, err := b.Delete(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	vd := d.Version
	if d.Deleted != 1 {
		t.Fatalf("delete of k: %+v, want 1 key deleted", d)
	}
	if it := mustGet(t, a, "k"); it.Found || it.Version != vd {
		t.Fatalf("after delete: %s, want missing at %d", fmtItem(it), vd)
	}
	if _, err := a.CompareAndSwap(ctx, "k", vd, []byte("back")); err != nil {
		t.Fatalf("CAS on the deletion's version: %v", err)
	}
}

// DESIGN.md §5: a write lease keeps others from caching the key, is recalled
// by a conflicting write, fences its holder's late writes, and its tokens
// grow.
func TestE2EWriteLease(t *testing.T) {
	leaktest.Check(t)
	const term = time.Second
	srv := startServer(t, server.Config{LeaseTerm: term})
	evA := newEvents()
	a := dial(t, srv, client.Config{Name: "a", OnEvent: evA.on})
	b := dial(t, srv, client.Config{Name: "b"})
	ctx := stepCtx(t)
	mustPut(t, b, "k", "start")
	if it := mustGet(t, b, "k"); !it.Cached {
		// B caches k now, so A's acquisition must invalidate it.
		t.Fatalf("B's second read is not cached: %s", fmtItem(it))
	}

	wl, err := a.AcquireWriteLease(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	t1 := wl.Token()
	if t1 == 0 || !wl.Valid() {
		t.Fatalf("write lease token %d valid %v", t1, wl.Valid())
	}
	if st := srv.Stats(); st.WriteLeases != 1 {
		t.Errorf("WriteLeases = %d, want 1", st.WriteLeases)
	}
	vA, err := wl.Put(ctx, []byte("by-a"))
	if err != nil {
		t.Fatal(err)
	}
	if it := mustGet(t, a, "k"); !it.Cached || string(it.Value) != "by-a" {
		t.Errorf("holder's read: %s, want its own write from cache", fmtItem(it))
	}
	for i := range 3 {
		it := mustGet(t, b, "k")
		if it.Cached || string(it.Value) != "by-a" || it.Version != vA {
			t.Fatalf("B's read %d under A's write lease: %s, want %q at %d uncached", i, fmtItem(it), "by-a", vA)
		}
	}

	recalls := srv.Stats().Recalls
	vB, took := timedPut(t, b, "k", "by-b")
	select {
	case <-wl.Done():
	default:
		t.Fatal("A's write lease is not done after B's put committed")
	}
	if wl.Valid() {
		t.Error("A's write lease is still valid after the recall")
	}
	if got := srv.Stats().Recalls; got != recalls+1 {
		t.Errorf("Recalls %d -> %d, want one more", recalls, got)
	}
	if took > term/4 {
		t.Errorf("B's put took %v though A answered the recall", took)
	}
	evA.wait(t, client.EventWriteLeaseLost, testTimeout, func(ev client.Event) bool { return hasKey(ev, "k") })

	if _, err := wl.Put(ctx, []byte("late")); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("A's write with the old token: %v, want ErrFenced", err)
	}
	for _, cl := range []*client.Client{a, b} {
		if it := mustGet(t, cl, "k"); string(it.Value) != "by-b" || it.Version != vB {
			t.Fatalf("after the fenced write: %s, want %q at %d", fmtItem(it), "by-b", vB)
		}
	}

	wl2, err := b.AcquireWriteLease(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if wl2.Token() <= t1 {
		t.Fatalf("new token %d is not above the old %d", wl2.Token(), t1)
	}
	if _, err := wl.Put(ctx, []byte("later")); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("old token under a new lease: %v, want ErrFenced", err)
	}
	if err := wl2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Once released, others cache the key again.
	mustGet(t, a, "k")
	if it := mustGet(t, a, "k"); !it.Cached {
		t.Errorf("read after release is not cached: %s", fmtItem(it))
	}
}

// Shutdown abandons writes still waiting for holders and tells their
// writers, who get ErrCanceled; nothing changes.
func TestE2EShutdownAbandonsWaitingWrite(t *testing.T) {
	leaktest.Check(t)
	const term = time.Second
	dir := t.TempDir()
	srv := startServer(t, server.Config{Dir: dir, LeaseTerm: term})
	b := dial(t, srv, client.Config{})
	v0 := mustPut(t, b, "k", "old")
	h := holdLease(t, srv, "k")
	errc := make(chan error, 1)
	go func() {
		_, err := b.Put(context.Background(), "k", []byte("new"))
		errc <- err
	}()
	wait.For(t, testTimeout, "the write to wait", func() bool { return srv.Stats().WritesWaiting == 1 })
	// The holder goes away without a goodbye: the server keeps its lease,
	// so the write still waits, but no silent client is left for Shutdown
	// to wait for.
	h.Close()
	wait.For(t, testTimeout, "the holder's session to end", func() bool { return srv.Stats().Sessions == 1 })
	if srv.Stats().WritesWaiting != 1 {
		t.Fatal("the write stopped waiting when the holder's connection was lost")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout) // bounds Shutdown
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	srv.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, client.ErrCanceled) {
			t.Errorf("write waiting at shutdown: %v, want ErrCanceled", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("the waiting write did not return after Shutdown")
	}
	srv2 := startServer(t, server.Config{Dir: dir, LeaseTerm: term})
	c := dial(t, srv2, client.Config{})
	if it := mustGet(t, c, "k"); string(it.Value) != "old" || it.Version != v0 {
		t.Fatalf("after restart: %s, want %q at %d", fmtItem(it), "old", v0)
	}
}

// DESIGN.md §6: a graceful close frees the session's leases at once.
func TestE2EGracefulCloseFreesLeases(t *testing.T) {
	leaktest.Check(t)
	const term = time.Second
	srv := startServer(t, server.Config{LeaseTerm: term})
	a := dial(t, srv, client.Config{Name: "a"})
	b := dial(t, srv, client.Config{Name: "b"})
	mustPut(t, b, "k", "old") // B holds a lease on k too, from its own write
	base := srv.Stats().Leases
	for _, k := range []string{"k", "k2", "k3"} {
		mustGet(t, a, k)
	}
	wl, err := a.AcquireWriteLease(stepCtx(t), "wk")
	if err != nil {
		t.Fatal(err)
	}
	_ = wl
	if st := srv.Stats(); st.Leases != base+3 || st.WriteLeases != 1 {
		t.Fatalf("before close: %d leases (want %d), %d write leases", st.Leases, base+3, st.WriteLeases)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	st0 := srv.Stats()
	if st0.Leases != base || st0.WriteLeases != 0 {
		t.Errorf("after A's close the server counts %d leases (want %d) and %d write leases", st0.Leases, base, st0.WriteLeases)
	}
	_, took := timedPut(t, b, "k", "new")
	_, took2 := timedPut(t, b, "wk", "new")
	st := srv.Stats()
	if took > term/4 || took2 > term/4 {
		t.Errorf("writes after the holder closed took %v and %v; want far below the term %v", took, took2, term)
	}
	if st.InvalidationsSent != st0.InvalidationsSent || st.Recalls != st0.Recalls {
		t.Errorf("writes after a graceful close sent invalidations (%d -> %d) or recalls (%d -> %d)",
			st0.InvalidationsSent, st.InvalidationsSent, st0.Recalls, st.Recalls)
	}
	if _, err := a.Get(stepCtx(t), "k"); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Get on a closed client: %v, want ErrClosed", err)
	}
	t.Logf("writes after graceful close: %v, %v", took, took2)
}

// DESIGN.md §2: the answer "missing" is leased and cached too.
func TestE2ENegativeCaching(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Second})
	a := dial(t, srv, client.Config{})
	b := dial(t, srv, client.Config{})
	if it := mustGet(t, a, "nope"); it.Found || it.Cached {
		t.Fatalf("first read: %s", fmtItem(it))
	}
	gets := msgsIn(srv, "get")
	if it := mustGet(t, a, "nope"); it.Found || !it.Cached || it.Version != 0 {
		t.Fatalf("second read: %s, want a cached miss", fmtItem(it))
	}
	if g := msgsIn(srv, "get"); g != gets {
		t.Fatalf("the cached miss reached the server")
	}
	v := mustPut(t, b, "nope", "now")
	it := mustGet(t, a, "nope")
	if !it.Found || string(it.Value) != "now" || it.Version != v || it.Cached {
		t.Fatalf("after the put: %s", fmtItem(it))
	}
	// A deletion is cached as a miss at the deletion's version.
	d, err := b.Delete(stepCtx(t), "nope")
	if err != nil {
		t.Fatal(err)
	}
	vd := d.Version
	if it := mustGet(t, a, "nope"); it.Found || it.Version != vd {
		t.Fatalf("after delete: %s", fmtItem(it))
	}
	if it := mustGet(t, a, "nope"); it.Found || !it.Cached {
		t.Fatalf("after delete, second read: %s", fmtItem(it))
	}
}

// DESIGN.md §6: the client reconnects in the background, over its own UDP
// socket, to a server that comes back on the same address, and its next
// requests go to the new server. What becomes of the entries of the old
// session is TestReconnectedEntryRunsOut's, on fake time.
func TestE2EReconnect(t *testing.T) {
	leaktest.Check(t)
	dir := t.TempDir()
	srv := startServer(t, server.Config{Dir: dir, LeaseTerm: time.Second})
	addr := srv.Addr().String()
	ev := newEvents()
	// A short backoff keeps the reconnection within the test's bound.
	a := dial(t, srv, client.Config{OnEvent: ev.on, MaxReconnectDelay: 200 * time.Millisecond})
	v := mustPut(t, a, "k", "kept")
	srv.Close()
	ev.wait(t, client.EventDisconnected, testTimeout, nil)

	srv2 := startServer(t, server.Config{Dir: dir, Addr: addr, LeaseTerm: time.Second})
	// Reconnection is retried with a backoff capped at 200 ms; a QUIC
	// handshake started while the port was closed may need its own retries.
	ev.wait(t, client.EventReconnected, testTimeout, nil)
	if s, ok := a.Connection(); !ok || s.ID == 0 {
		t.Fatalf("no session after EventReconnected")
	}
	if n := srv2.Stats().Sessions; n != 1 {
		t.Errorf("sessions after reconnect: %d", n)
	}
	// A read the cache cannot answer goes to the new server, which kept k.
	gets := msgsIn(srv2, "get")
	if it := mustGet(t, a, "never-read"); it.Cached || it.Found {
		t.Fatalf("uncached read after reconnect: %s", fmtItem(it))
	}
	if g := msgsIn(srv2, "get"); g != gets+1 {
		t.Errorf("the uncached read after reconnect: get %d -> %d on the new server, want one more", gets, g)
	}
	b := dial(t, srv2, client.Config{})
	if it := mustGet(t, b, "k"); string(it.Value) != "kept" || it.Version != v {
		t.Fatalf("after reconnect: %s", fmtItem(it))
	}
}

// DESIGN.md §3.6: evicted entries are released in a batch, so writes to
// them need not wait or invalidate.
func TestE2EEvictionReleasesLeases(t *testing.T) {
	leaktest.Check(t)
	const term = 2 * time.Second
	srv := startServer(t, server.Config{LeaseTerm: term})
	a := dial(t, srv, client.Config{CacheEntries: 2})
	b := dial(t, srv, client.Config{})
	for i := range 5 {
		mustGet(t, a, fmt.Sprintf("e%d", i))
	}
	// The client releases in a batch every eighth of a term; the leases
	// would only expire after a full term, so seeing them gone well before
	// shows the release.
	start := time.Now()
	wait.For(t, term/2, "the evicted leases to be released", func() bool { return srv.Stats().Leases <= 2 })
	if n := srv.Stats().Leases; n != 2 {
		t.Errorf("server holds %d leases, want the 2 still cached", n)
	}
	if msgsIn(srv, "release") == 0 {
		t.Error("no release message")
	}
	t.Logf("evicted leases released after %v", time.Since(start))
	sent := srv.Stats().InvalidationsSent
	// CLOCK eviction of unreferenced entries is FIFO: e0 went first.
	if _, took := timedPut(t, b, "e0", "x"); took > term/4 {
		t.Errorf("put to an evicted key took %v", took)
	}
	if s := srv.Stats().InvalidationsSent; s != sent {
		t.Errorf("put to an evicted key sent %d invalidations", s-sent)
	}
	// A key still cached is invalidated, as a check of the check.
	if _, took := timedPut(t, b, "e4", "x"); took > term/4 {
		t.Errorf("put to a cached key with a responsive holder took %v", took)
	}
	if s := srv.Stats().InvalidationsSent; s != sent+1 {
		t.Errorf("put to a cached key sent %d invalidations, want 1", s-sent)
	}
}

// Many goroutines on two clients read and write overlapping keys. Every
// read returns a value that was written, with the version it was written
// at, and no goroutine sees a key go back in time.
func TestE2EConcurrentClients(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"four keys", []string{"c0", "c1", "c2", "c3"}},
		// One hot key: many reads and writes of the same key in flight on
		// the same connection at once.
		{"one key", []string{"hot"}},
	} {
		t.Run(tc.name, func(t *testing.T) { testConcurrentClients(t, tc.keys) })
	}
}

func testConcurrentClients(t *testing.T, keys []string) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Second})
	clients := []*client.Client{dial(t, srv, client.Config{}), dial(t, srv, client.Config{})}
	const goroutines, ops = 16, 150

	var mu sync.Mutex
	written := map[string]bool{}     // every value ever put
	versionOf := map[uint64]string{} // committed version -> value
	keyOf := map[uint64]string{}     // committed version -> key
	type obs struct {
		key     string
		version uint64
		value   string
		found   bool
	}
	var observed []obs

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // bounds the whole run
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[g%2]
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			seen := map[string]uint64{} // highest version this goroutine has seen per key
			for i := range ops {
				key := keys[rng.IntN(len(keys))]
				if rng.IntN(10) < 3 {
					val := fmt.Sprintf("g%d-%d", g, i)
					mu.Lock()
					written[val] = true // before the put: a read may see it before Put returns
					mu.Unlock()
					v, err := c.Put(ctx, key, []byte(val))
					if err != nil {
						errs <- fmt.Errorf("goroutine %d put: %w", g, err)
						return
					}
					mu.Lock()
					versionOf[v], keyOf[v] = val, key
					mu.Unlock()
					if v <= seen[key] {
						errs <- fmt.Errorf("goroutine %d: put %q committed at %d, but it had seen version %d", g, key, v, seen[key])
						return
					}
					seen[key] = v
					continue
				}
				it, err := c.Get(ctx, key)
				if err != nil {
					errs <- fmt.Errorf("goroutine %d get: %w", g, err)
					return
				}
				if it.Version < seen[key] {
					errs <- fmt.Errorf("goroutine %d: read %q at version %d (cached %v) after seeing version %d",
						g, key, it.Version, it.Cached, seen[key])
					return
				}
				seen[key] = it.Version
				mu.Lock()
				observed = append(observed, obs{key, it.Version, string(it.Value), it.Found})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	for _, o := range observed {
		if !o.found {
			if o.version != 0 {
				t.Errorf("read of %q: missing at version %d, but nothing deletes", o.key, o.version)
			}
			continue
		}
		if !written[o.value] {
			t.Errorf("read of %q returned %q, which nobody wrote", o.key, o.value)
		}
		if v, ok := versionOf[o.version]; !ok || v != o.value || keyOf[o.version] != o.key {
			t.Errorf("read of %q returned %q at version %d, but that version holds %q of %q", o.key, o.value, o.version, v, keyOf[o.version])
		}
	}
	// At the end, both clients agree with the last write of each key.
	last := map[string]uint64{}
	for v, k := range keyOf {
		last[k] = max(last[k], v)
	}
	for _, c := range clients {
		for _, k := range keys {
			it := mustGet(t, c, k)
			if last[k] != 0 && (it.Version != last[k] || string(it.Value) != versionOf[last[k]]) {
				t.Errorf("final read of %q: %s, want %q at %d", k, fmtItem(it), versionOf[last[k]], last[k])
			}
		}
	}
	t.Logf("%d reads checked, %d writes", len(observed), len(versionOf))
}

// DESIGN.md §9: bad input gets a clear sentinel error, never a hang or a
// half-applied write.
func TestE2EBadInput(t *testing.T) {
	leaktest.Check(t)
	const term = time.Second
	srv := startServer(t, server.Config{LeaseTerm: term, MaxValueSize: 1024})
	a := dial(t, srv, client.Config{})
	b := dial(t, srv, client.Config{})
	ctx := stepCtx(t)
	v0 := mustPut(t, a, "k", "old")
	bigKey := strings.Repeat("x", 4097)
	maxKey := strings.Repeat("y", 4096)
	cases := []struct {
		name string
		do   func() error
		want error
	}{
		{"get empty key", func() error { _, err := a.Get(ctx, ""); return err }, client.ErrInvalidArgument},
		{"put empty key", func() error { _, err := a.Put(ctx, "", []byte("v")); return err }, client.ErrInvalidArgument},
		{"delete empty key", func() error { _, err := a.Delete(ctx, ""); return err }, client.ErrInvalidArgument},
		{"acquire empty key", func() error { _, err := a.AcquireWriteLease(ctx, ""); return err }, client.ErrInvalidArgument},
		{"get key too large", func() error { _, err := a.Get(ctx, bigKey); return err }, client.ErrTooLarge},
		{"put key too large", func() error { _, err := a.Put(ctx, bigKey, nil); return err }, client.ErrTooLarge},
		{"cas key too large", func() error { _, err := a.CompareAndSwap(ctx, bigKey, 0, nil); return err }, client.ErrTooLarge},
		{"put value too large", func() error { _, err := a.Put(ctx, "k", make([]byte, 1025)); return err }, client.ErrTooLarge},
		{"cas value too large", func() error { _, err := a.CompareAndSwap(ctx, "k", v0, make([]byte, 4096)); return err }, client.ErrTooLarge},
		{"put max key", func() error { _, err := a.Put(ctx, maxKey, []byte("ok")); return err }, nil},
		{"get max key", func() error { _, err := a.Get(ctx, maxKey); return err }, nil},
		{"put max value", func() error { _, err := a.Put(ctx, "max", make([]byte, 1024)); return err }, nil},
		{"put empty value", func() error { _, err := a.Put(ctx, "empty", nil); return err }, nil},
	}
	for _, tc := range cases {
		err := tc.do()
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// The server enforces the same limits on its own, for clients that do
	// not check; the session goes on after each refusal.
	raw := dialRaw(t, srv)
	for _, w := range []*protocol.Write{
		{Op: protocol.OpPut, Key: []byte("k"), Value: make([]byte, 1025)},
		{Op: protocol.OpPut, Key: []byte(bigKey), Value: []byte("v")},
		{Op: protocol.OpPut, Key: nil, Value: []byte("v")},
		{Op: 99, Key: []byte("k")},
	} {
		m := rawCall(t, raw, w)
		e, ok := m.(*protocol.Error)
		if !ok || (e.Code != protocol.CodeTooLarge && e.Code != protocol.CodeInvalidArgument) {
			t.Errorf("raw write of a %d-byte key, %d-byte value, op %d: %T %+v", len(w.Key), len(w.Value), w.Op, m, m)
		}
	}
	if m := rawCall(t, raw, &protocol.Stats{}); m.Type() != protocol.TypeStatsReply {
		t.Errorf("raw session after refusals: %T %+v", m, m)
	}
	if it := mustGet(t, b, "k"); string(it.Value) != "old" || it.Version != v0 {
		t.Fatalf("after refused writes: %s", fmtItem(it))
	}
	if it := mustGet(t, b, "max"); len(it.Value) != 1024 {
		t.Errorf("max value read back with %d bytes", len(it.Value))
	}
	if it := mustGet(t, b, "empty"); !it.Found || len(it.Value) != 0 {
		t.Errorf("empty value read back as %s", fmtItem(it))
	}

	// A write whose context ends while it waits on a silent holder is
	// abandoned: it reports ErrCanceled and nothing changes.
	rev := srv.Stats().Revision
	mustGet(t, b, "k") // b holds a lease too, and acknowledges
	holdLease(t, srv, "k")
	wctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := a.Put(wctx, "k", []byte("abandoned"))
	took := time.Since(start)
	if !errors.Is(err, client.ErrCanceled) {
		t.Fatalf("write past its deadline: %v, want ErrCanceled", err)
	}
	if took > 300*time.Millisecond+slack {
		t.Errorf("abandoned write returned after %v, deadline was 300ms", took)
	}
	if st := srv.Stats(); st.Revision != rev || st.WritesWaiting != 0 {
		t.Errorf("after the abandoned write: revision %d -> %d, %d writes waiting", rev, st.Revision, st.WritesWaiting)
	}
	for _, cl := range []*client.Client{a, b} {
		if it := mustGet(t, cl, "k"); string(it.Value) != "old" || it.Version != v0 {
			t.Fatalf("after the abandoned write: %s, want %q at %d", fmtItem(it), "old", v0)
		}
	}
	// Canceled by the caller rather than by a deadline: the same. A fresh
	// silent holder, so that the first one's lease cannot run out meanwhile.
	holdLease(t, srv, "k")
	cctx, ccancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, ccancel)
	if _, err := a.Put(cctx, "k", []byte("abandoned2")); !errors.Is(err, client.ErrCanceled) {
		t.Fatalf("write canceled while waiting: %v, want ErrCanceled", err)
	}
	ccancel()
	if it := mustGet(t, b, "k"); string(it.Value) != "old" || srv.Stats().Revision != rev {
		t.Fatalf("after the canceled write: %s, revision %d", fmtItem(it), srv.Stats().Revision)
	}
	if !bytes.Equal(mustGet(t, a, "k").Value, []byte("old")) {
		t.Fatal("writer sees a changed value")
	}
}

// One client writes a key while its other goroutines keep reading it. The
// write drops the cached entry, so the readers' next Gets go to the server
// at the same moment as the write, some just before it on the stream and
// some just after. Once the write has returned, no read of that client may
// return an older version: no reply to those reads may be cached over it.
func TestE2EReadsRacingOwnWrite(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Second})
	a := dial(t, srv, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // bounds the run
	defer cancel()
	const rounds, readers = 200, 4
	for i := range rounds {
		var written atomic.Uint64 // the version of this round's write, once it returned
		var wg sync.WaitGroup
		for range readers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Read until one read has begun after the write returned.
				for {
					floor := written.Load()
					it, err := a.Get(ctx, "k")
					if err != nil {
						t.Error(err)
						return
					}
					if it.Version < floor {
						t.Errorf("round %d: a read begun after the client's write at version %d returned %s", i, floor, fmtItem(it))
						return
					}
					if floor != 0 {
						return
					}
				}
			}()
		}
		v, err := a.Put(ctx, "k", []byte(fmt.Sprint(i)))
		if err != nil {
			t.Fatal(err)
		}
		written.Store(v)
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}

// Config.PacketConn: every packet of the session, and of the session after
// a reconnection, goes through the given conn, which the client leaves
// open for its owner.
func TestE2EPacketConn(t *testing.T) {
	leaktest.Check(t)
	dir := t.TempDir()
	srv := startServer(t, server.Config{Dir: dir, LeaseTerm: 500 * time.Millisecond})
	addr := srv.Addr().String()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc := netfault.Wrap(udp, 1)
	defer pc.Close()
	ev := newEvents()
	a := dialAddr(t, addr, srv.CA(), client.Config{PacketConn: pc, OnEvent: ev.on, MaxReconnectDelay: 200 * time.Millisecond})
	if s, ok := a.Connection(); !ok || s.ID == 0 {
		t.Fatalf("no session")
	}
	v := mustPut(t, a, "k", "through the conn")
	if it := mustGet(t, a, "k"); string(it.Value) != "through the conn" || it.Version != v || !it.Cached {
		t.Fatalf("read back: %s", fmtItem(it))
	}
	before := pc.Stats()
	if before.Sent == 0 || before.Received == 0 {
		t.Fatalf("no packets through the conn: %+v", before)
	}

	srv.Close()
	ev.wait(t, client.EventDisconnected, testTimeout, nil)
	startServer(t, server.Config{Dir: dir, Addr: addr, LeaseTerm: 500 * time.Millisecond})
	ev.wait(t, client.EventReconnected, testTimeout, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := a.Put(ctx, "k", []byte("after reconnect")); err != nil {
		t.Fatalf("put after reconnect: %v", err)
	}
	after := pc.Stats()
	if after.Sent <= before.Sent || after.Received <= before.Received {
		t.Fatalf("the new session did not use the conn: %+v, then %+v", before, after)
	}

	a.Close()
	if _, err := pc.WriteTo([]byte("still open"), pc.LocalAddr()); err != nil {
		t.Fatalf("the client closed the caller's conn: %v", err)
	}
}

// TestDeleteReportsWhatItRemoved: a delete says how many keys it removed
// (etcd's deleted). One of a key that never existed, or that is deleted
// already, removes nothing, spends no revision, and answers with the key's
// version, at which the writer and other readers see it absent.
func TestDeleteReportsWhatItRemoved(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	a := dial(t, srv, client.Config{})
	b := dial(t, srv, client.Config{})
	ctx := stepCtx(t)
	rev := func() uint64 { return srv.Stats().Revision }
	d, err := a.Delete(ctx, "never")
	if err != nil {
		t.Fatal(err)
	}
	if d.Deleted != 0 || d.Version != 0 || rev() != 0 {
		t.Fatalf("delete of a key that never existed: %+v, revision %d; want 0 deleted at version 0, revision 0", d, rev())
	}
	if it := mustGet(t, a, "never"); it.Found || it.Version != 0 || !it.Cached {
		t.Fatalf("the writer's read after it: %s, want a cached miss at version 0", fmtItem(it))
	}
	v1 := mustPut(t, b, "k", "v")
	d, err = a.Delete(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if d.Deleted != 1 || d.Version != v1+1 || rev() != v1+1 {
		t.Fatalf("delete of k: %+v, revision %d; want 1 deleted at version %d", d, rev(), v1+1)
	}
	again, err := b.Delete(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if again.Deleted != 0 || again.Version != d.Version || rev() != d.Version {
		t.Fatalf("second delete of k: %+v, revision %d; want 0 deleted at the first deletion's version %d, no revision spent", again, rev(), d.Version)
	}
	if it := mustGet(t, b, "k"); it.Found || it.Version != d.Version {
		t.Fatalf("read after the deletes: %s, want missing at %d", fmtItem(it), d.Version)
	}
}
