package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// Regression tests for races found in review. Each failed before its fix.

// TestReleaseAfterReRead: an evicted key's batched release must not end
// the lease of the answer the client cached when it read the key again;
// otherwise another client's write commits without asking, and the old
// value is served from cache.
func TestReleaseAfterReRead(t *testing.T) {
	leaktest.Check(t)
	const term = 3 * time.Second
	srv := startServer(t, server.Config{LeaseTerm: term})
	a := dial(t, srv, client.Config{CacheEntries: 1})
	b := dial(t, srv, client.Config{})
	mustPut(t, b, "k1", "old")
	mustGet(t, a, "k1")
	releases := msgsIn(srv, "release")
	mustGet(t, a, "k2") // evicts k1: its release is queued
	if it := mustGet(t, a, "k1"); it.Cached {
		t.Fatal("k1 was served from cache after its eviction")
	}
	if it := mustGet(t, a, "k1"); !it.Cached {
		t.Fatal("k1 is not cached after it was read again")
	}
	// The next flush of releases sends k2's (evicted when k1 came back),
	// and must leave out k1's, which is cached again.
	wait.For(t, testTimeout, "the batched release", func() bool { return msgsIn(srv, "release") > releases })
	var rep client.WriteResult
	if _, err := b.Put(stepCtx(t), "k1", []byte("new"), client.Result(&rep)); err != nil {
		t.Fatal(err)
	}
	if rep.Holders != 1 {
		t.Errorf("B's write invalidated %d holders, want 1 (A, which caches k1)", rep.Holders)
	}
	if rep.Term != term {
		t.Errorf("B's write gave it a lease of %v, want the term %v", rep.Term, term)
	}
	if it := mustGet(t, a, "k1"); string(it.Value) != "new" {
		t.Errorf("stale read: A serves %s after B's put of \"new\" was acknowledged", fmtItem(it))
	}
}

// TestAckAfterReRead: when a write that invalidated a holder is abandoned,
// the holder's acknowledgement must not end the lease of a read it began
// after dropping the entry. A's clock holds its notice reader where it
// reads the clock between dropping the entries and acknowledging, while
// such a read is made.
func TestAckAfterReRead(t *testing.T) {
	leaktest.Check(t)
	const term = 5 * time.Second
	srv := startServer(t, server.Config{LeaseTerm: term})
	clk := newStallClock("(*Client).invalidate")
	a := dial(t, srv, client.Config{Clock: clk})
	c := dial(t, srv, client.Config{})
	raw := dialRaw(t, srv)
	mustPut(t, c, "k", "v1")
	mustGet(t, a, "k")
	if it := mustGet(t, a, "k"); !it.Cached {
		t.Fatal("A does not cache k")
	}
	reread := make(chan client.Item, 1)
	stalled, abandoned := make(chan struct{}), make(chan struct{})
	markAbandoned := sync.OnceFunc(func() { close(abandoned) })
	defer markAbandoned() // on failure, so that the notice reader goes on
	var once sync.Once
	clk.stallWith(func() {
		once.Do(func() {
			close(stalled)
			// The read is made once the write is abandoned, so that the
			// server grants it a lease.
			select {
			case <-abandoned:
			case <-time.After(testTimeout):
			}
			returned := make(chan struct{})
			go func() {
				defer close(returned)
				it, err := a.Get(context.Background(), "k")
				if err != nil {
					t.Errorf("re-read: %v", err)
				}
				reread <- it
			}()
			// Give the read every chance to overtake the acknowledgement:
			// hold it until the read has returned, which it can only do
			// if it is not ordered behind the acknowledgement, or for a
			// while if it is. This wait keeps the test on real time: a
			// read ordered behind the acknowledgement waits for c.smu, a
			// sync.Mutex, which synctest does not count as durably
			// blocked, so in a bubble the fake clock would never reach
			// the bound and the passing case would hang.
			select {
			case <-returned:
			case <-time.After(250 * time.Millisecond):
			}
		})
	})
	// A write that invalidates A and is abandoned at once, before A's
	// acknowledgement arrives.
	if e, ok := rawCall(t, raw, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("zzz"), Timeout: 1}).(*protocol.Error); !ok || e.Code != protocol.CodeCanceled {
		t.Fatalf("the raw write was not abandoned: %+v", e)
	}
	markAbandoned()
	wait.Chan(t, stalled, testTimeout, "a clock read at the acknowledgement of an invalidation (has the point the test holds moved?)")
	select {
	case it := <-reread:
		if string(it.Value) != "v1" {
			t.Fatalf("re-read during the abandoned write: %s", fmtItem(it))
		}
	case <-time.After(testTimeout):
		t.Fatal("the re-read did not return")
	}
	// C holds a lease on k too (its own write's), so A's acknowledgement
	// is in once every invalidation sent is acknowledged.
	wait.For(t, testTimeout, "A's acknowledgement", func() bool {
		st := srv.Stats()
		return st.InvalidationsSent == 2 && st.MessagesIn["ack"] == st.InvalidationsSent
	})
	// Whatever A caches now must be covered by a lease the server knows of,
	// so C's write asks A first.
	mustPut(t, c, "k", "v2")
	if it := mustGet(t, a, "k"); string(it.Value) != "v2" {
		t.Fatalf("stale read: A serves %s after C's put of \"v2\" was acknowledged", fmtItem(it))
	}
}

// TestRecallBeforeGrantReply: the recall that follows a grant at once can
// overtake the grant's reply on its own stream; the holder must still
// release, so the waiting writer does not wait out the write lease.
func TestRecallBeforeGrantReply(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		a := srv.Dial(client.Config{})
		b := srv.Dial(client.Config{})
		// A silent reader, so that A's acquisition waits for its lease.
		h := srv.Raw(protoclient.Options{Name: "silent"})
		if g, ok := rawCall(t, h, &protocol.Get{Key: []byte("k")}).(*protocol.GetReply); !ok || g.Term != timeTerm {
			t.Fatalf("silent holder's read: %+v", g)
		}
		type result struct {
			wl  *client.WriteLease
			err error
		}
		acquired := make(chan result, 1)
		go func() {
			wl, err := a.AcquireWriteLease(context.Background(), "k")
			acquired <- result{wl, err}
		}()
		synctest.Wait()
		if n := srv.Stats().WritesWaiting; n != 1 {
			t.Fatalf("WritesWaiting = %d, want A's acquisition waiting", n)
		}
		put := make(chan error, 1)
		go func() {
			_, err := b.Put(context.Background(), "k", []byte("b"))
			put <- err
		}()
		synctest.Wait()
		if n := srv.Stats().WritesWaiting; n != 2 {
			t.Fatalf("WritesWaiting = %d, want B's write queued behind A's acquisition", n)
		}
		r := <-acquired
		if r.err != nil {
			t.Fatal(r.err)
		}
		granted := time.Now()
		if err := <-put; err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(granted); waited != 0 {
			t.Errorf("B waited %v after A's grant: the recall was lost and the write lease ran out (term %v)", waited, timeTerm)
		}
		select {
		case <-r.wl.Done():
		default:
			t.Error("A's write lease is not marked lost after its recall")
		}
	})
}

// TestServeEndsWithItsContext: Serve returns, and the server closes, when
// Serve's context ends.
func TestServeEndsWithItsContext(t *testing.T) {
	leaktest.Check(t)
	srv, err := server.New(server.Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: testkit.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) && !errors.Is(err, server.ErrServerClosed) {
			t.Errorf("Serve returned %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Serve did not return after its context ended")
	}
	if err := srv.Close(); err != nil {
		t.Errorf("Close after Serve ended: %v", err)
	}
}

// TestLargeRenewalBatches: renewing more keys than fit in one frame splits
// the batch instead of losing the session.
func TestLargeRenewalBatches(t *testing.T) {
	// Frames of about 6 KiB.
	bubble(t, func(c *server.Config) { c.MaxValueSize = 1024 }, func(t *testing.T, srv *testkit.Server) {
		ev := newEvents()
		a := srv.Dial(client.Config{OnEvent: ev.on})
		pad := strings.Repeat("x", 200)
		keys := make([]string, 60) // 12 KB of keys to renew
		for i := range keys {
			keys[i] = fmt.Sprintf("%s%d", pad, i)
			mustGet(t, a, keys[i])
		}
		// Read every key through two terms: the client renews them all
		// twice (two thirds into each term), each time in more than one
		// message, and every read is served from the cache.
		for end := time.Now().Add(2 * timeTerm); time.Now().Before(end); time.Sleep(timeTerm / 20) {
			for _, k := range keys {
				if it := mustGet(t, a, k); !it.Cached {
					t.Fatalf("%q is not cached %v after its first read", k[len(pad):], 2*timeTerm-time.Until(end))
				}
			}
		}
		for _, e := range ev.snapshot() {
			switch e.Kind {
			case client.EventDisconnected:
				t.Fatalf("the session was lost while renewing: %v", e.Err)
			case client.EventLeasesExpired:
				t.Fatalf("leases expired while renewed: %d keys", len(e.Keys))
			}
		}
		if n := msgsIn(srv, "renew"); n < 4 {
			t.Fatalf("%d renew messages for two renewals, want each batch split in several", n)
		}
	})
}

// TestHotKeyCachedAgain: after invalidations, a key read by many goroutines
// at once is cached again, rather than every reader sharing a poisoned
// fetch forever.
func TestHotKeyCachedAgain(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: 5 * time.Second})
	a := dial(t, srv, client.Config{})
	b := dial(t, srv, client.Config{})
	mustPut(t, b, "hot", "v1")
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if _, err := a.Get(context.Background(), "hot"); err != nil {
					return
				}
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	for i := range 20 {
		mustPut(t, b, "hot", fmt.Sprintf("v%d", i+2))
	}
	wait.For(t, testTimeout, "the hot key to be cached again", func() bool {
		it, err := a.Get(context.Background(), "hot")
		return err == nil && it.Cached && string(it.Value) == "v21"
	})
}

// TestHerdAnswersDoNotQueue: when many reads of a key miss at once, the
// answers after the first one cached bring nothing new. They must neither
// replace the entry (a replacement counts the lease from its own, earlier
// request, and so undoes a renewal) nor wait in turn for the lock that
// fills, acknowledgements, releases and new requests share: while readers
// kept the CPUs busy on the cached entry, each turn of that queue waited
// for a scheduling round, so the queue outlasted the term and held up the
// renewals, the hot key expired with every term, and all its readers missed
// together again (the flakiness of TestHotKeyCachedAgain). A's clock holds
// the answers of three such reads where each reads the clock on arrival,
// until all have arrived, then lets them fill one at a time, the second
// while that lock is held.
func TestHerdAnswersDoNotQueue(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: 5 * time.Second})
	clk := newStallClock("(*Client).fetch")
	a := dial(t, srv, client.Config{Clock: clk})
	b := dial(t, srv, client.Config{})
	mustPut(t, b, "k", "v1")
	const readers = 3
	arrived := make(chan struct{}, readers)
	var turns [readers]chan struct{}
	for i := range turns {
		turns[i] = make(chan struct{})
	}
	var next atomic.Int32
	// A reads nothing else through the server meanwhile: the first three
	// answers to arrive are those of the reads of k.
	clk.stallWith(func() {
		if i := next.Add(1) - 1; i < readers {
			arrived <- struct{}{}
			<-turns[i]
		}
	})
	var released int
	release := func() { close(turns[released]); released++ }
	defer func() {
		for released < readers { // on failure, so that no read is left waiting
			release()
		}
	}()
	done := make(chan error, readers)
	for range readers {
		go func() {
			_, err := a.Get(context.Background(), "k")
			done <- err
		}()
	}
	for range readers {
		wait.Chan(t, arrived, testTimeout, "a clock read at the arrival of the three reads' answers (has the point the test holds moved?)")
	}
	// Each read missed (no answer is cached yet) and went to the server.
	returned := func(what string) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(testTimeout):
			t.Fatalf("%s did not return", what)
		}
	}
	release()
	returned("the first read")
	e, deadline, ok := client.CachedEntry(a, "k")
	if !ok || string(e.Value) != "v1" {
		t.Fatalf("the first answer is not cached")
	}
	unlock := client.LockFills(a)
	release()
	select {
	case err := <-done:
		unlock()
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(testTimeout):
		unlock()
		t.Fatal("the second read, whose answer is already cached under a live lease, waited for the fill lock")
	}
	release()
	returned("the third read")
	if e2, deadline2, ok := client.CachedEntry(a, "k"); !ok || e2 != e || !deadline2.Equal(deadline) {
		t.Errorf("a later answer of the same version replaced the cached entry (deadline %v, was %v)", deadline2, deadline)
	}
	if client.FetchInFlight(a, "k") {
		t.Error("the reads' fetch record outlived them")
	}
	if it := mustGet(t, a, "k"); !it.Cached {
		t.Errorf("k is not served from cache after the reads: %s", fmtItem(it))
	}
}
