package client_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/server"
)

// benchTerm is the lease term of the benchmark servers: long enough that no
// lease runs out, or falls due for renewal, while a benchmark runs.
const benchTerm = 60 * time.Second

// benchParallelism makes RunParallel start 32 goroutines per GOMAXPROCS.
const benchParallelism = 32

// benchServer starts a server of term benchTerm (startServer), closed when
// the benchmark ends.
func benchServer(b *testing.B) *testServer {
	return startServer(b, server.Config{LeaseTerm: benchTerm})
}

// benchGet reads key and fails the benchmark unless the answer's Cached is
// wantCached.
func benchGet(b *testing.B, c *client.Client, key string, wantCached bool) client.Item {
	b.Helper()
	it, err := c.Get(b.Context(), key)
	if err != nil {
		b.Fatalf("get %q: %v", key, err)
	}
	if it.Cached != wantCached {
		b.Fatalf("get %q: Cached = %v, want %v", key, it.Cached, wantCached)
	}
	return it
}

// benchP50 reports the median of samples in µs.
func benchP50(b *testing.B, samples []time.Duration) {
	b.Helper()
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2])/float64(time.Microsecond), "p50-µs")
}

// benchHoldWriteLease makes a second client hold the write lease on key, so
// that the server grants no read lease on it to anyone else: every read of
// it goes to the server.
func benchHoldWriteLease(b *testing.B, env *testServer, key string) {
	b.Helper()
	owner := dial(b, env, client.Config{Name: "owner"})
	if _, err := owner.Put(b.Context(), key, []byte("value")); err != nil {
		b.Fatal(err)
	}
	// The lease is renewed in the background and given up when owner closes.
	if _, err := owner.AcquireWriteLease(b.Context(), key); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkCachedGet(b *testing.B) {
	env := benchServer(b)
	ctx := b.Context()
	const key = "cached-key"
	if _, err := dial(b, env, client.Config{Name: "writer"}).Put(ctx, key, []byte("value")); err != nil {
		b.Fatal(err)
	}
	c := dial(b, env, client.Config{Name: "reader"})
	benchGet(b, c, key, false) // fills the cache under a lease
	benchGet(b, c, key, true)
	b.ReportAllocs()
	for b.Loop() {
		it, err := c.Get(ctx, key)
		if err != nil || !it.Cached {
			b.Fatalf("get: %+v, %v", it, err)
		}
	}
}

func BenchmarkCachedGetParallel(b *testing.B) {
	env := benchServer(b)
	c := dial(b, env, client.Config{Name: "reader"})
	ctx := b.Context()
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%02d", i)
		benchGet(b, c, keys[i], false) // not found: cached negatively
		benchGet(b, c, keys[i], true)
	}
	var next atomic.Uint32
	var misses atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := next.Add(1)
		for pb.Next() {
			it, err := c.Get(ctx, keys[i%uint32(len(keys))])
			if err != nil || !it.Cached {
				misses.Add(1)
			}
			i++
		}
	})
	b.StopTimer()
	if n := misses.Load(); n > 0 {
		b.Fatalf("%d of %d gets were not answered from the cache", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mops/s")
}

func BenchmarkUncachedGet(b *testing.B) {
	env := benchServer(b)
	const key = "contended-key"
	benchHoldWriteLease(b, env, key)
	c := dial(b, env, client.Config{Name: "reader"})
	ctx := b.Context()
	benchGet(b, c, key, false)
	var samples []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		it, err := c.Get(ctx, key)
		samples = append(samples, time.Since(start))
		if err != nil || it.Cached || !it.Found {
			b.Fatalf("get: %+v, %v", it, err)
		}
	}
	benchP50(b, samples)
}

func BenchmarkUncachedGetParallel(b *testing.B) {
	env := benchServer(b)
	const key = "contended-key"
	benchHoldWriteLease(b, env, key)
	c := dial(b, env, client.Config{Name: "reader"})
	ctx := b.Context()
	benchGet(b, c, key, false)
	var bad atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			it, err := c.Get(ctx, key)
			if err != nil || it.Cached || !it.Found {
				bad.Add(1)
			}
		}
	})
	b.StopTimer()
	if n := bad.Load(); n > 0 {
		b.Fatalf("%d of %d gets failed or came from the cache", n, b.N)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func BenchmarkPutHolders(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("holders=%d", n), func(b *testing.B) {
			benchPutHolders(b, n)
		})
	}
}

// benchPutHolders times a Put of a key on which n other clients hold read
// leases: the Put returns once every holder has acknowledged its
// invalidation and the write is durable.
func benchPutHolders(b *testing.B, n int) {
	env := benchServer(b)
	ctx := b.Context()
	const key = "hot-key"
	writer := dial(b, env, client.Config{Name: "writer"})
	if _, err := writer.Put(ctx, key, []byte("v0")); err != nil {
		b.Fatal(err)
	}
	holders := make([]*client.Client, n)
	for i := range holders {
		holders[i] = dial(b, env, client.Config{Name: fmt.Sprintf("holder-%d", i)})
	}
	// lease makes every holder read the key from the server, which grants
	// it a lease; a second read checks that the answer was cached.
	var errs atomic.Int64
	lease := func() {
		var wg sync.WaitGroup
		for _, h := range holders {
			wg.Go(func() {
				it, err := h.Get(ctx, key)
				if err != nil || it.Cached {
					errs.Add(1)
					return
				}
				if it, err := h.Get(ctx, key); err != nil || !it.Cached {
					errs.Add(1)
				}
			})
		}
		wg.Wait()
		if e := errs.Load(); e > 0 {
			b.Fatalf("%d holders failed to take a lease", e)
		}
	}
	before, err := writer.ServerStats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	value := []byte("value")
	var samples []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		lease()
		b.StartTimer()
		start := time.Now()
		_, err := writer.Put(ctx, key, value)
		samples = append(samples, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
	}
	after, err := writer.ServerStats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	sent := after.InvalidationsSent - before.InvalidationsSent
	if want := uint64(n) * uint64(b.N); sent != want {
		b.Fatalf("%d invalidations sent, want %d", sent, want)
	}
	if expired := after.InvalidationsExpired - before.InvalidationsExpired; expired > 0 {
		b.Fatalf("%d invalidations expired instead of being acknowledged", expired)
	}
	benchP50(b, samples)
}

func BenchmarkPutNoHolders(b *testing.B) {
	env := benchServer(b)
	ctx := b.Context()
	writer := dial(b, env, client.Config{Name: "writer"})
	const key = "cold-key"
	value := []byte("value")
	var samples []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		_, err := writer.Put(ctx, key, value)
		samples = append(samples, time.Since(start))
		if err != nil {
			b.Fatal(err)
		}
	}
	benchP50(b, samples)
}

// BenchmarkList lists a prefix of n keys with 100-byte values, uncached,
// from the server over QUIC on loopback, with the values and keys only.
func BenchmarkList(b *testing.B) {
	for _, n := range []int{100, 1000} {
		for _, keysOnly := range []bool{false, true} {
			b.Run(fmt.Sprintf("keys=%d/keys-only=%v", n, keysOnly), func(b *testing.B) {
				env := benchServer(b)
				c := dial(b, env, client.Config{Name: "lister"})
				ctx := b.Context()
				value := make([]byte, 100)
				for i := range n {
					if _, err := c.Put(ctx, fmt.Sprintf("/dir/%04d", i), value); err != nil {
						b.Fatal(err)
					}
				}
				var opts []client.ListOption
				if keysOnly {
					opts = append(opts, client.KeysOnly())
				}
				var samples []time.Duration
				b.ReportAllocs()
				for b.Loop() {
					start := time.Now()
					r, err := c.List(ctx, "/dir/", opts...)
					samples = append(samples, time.Since(start))
					if err != nil || len(r.KVs) != n || r.More {
						b.Fatalf("list: %d keys, more %v, %v; want %d", len(r.KVs), r.More, err, n)
					}
				}
				benchP50(b, samples)
			})
		}
	}
}

// BenchmarkTxn writes two keys that no other client holds, 100-byte
// values: as one transaction whose compares check both keys' versions
// (txn), and as two plain Puts in a row (two-puts), the cost of doing it
// without a transaction.
func BenchmarkTxn(b *testing.B) {
	value := make([]byte, 100)
	b.Run("txn", func(b *testing.B) {
		env := benchServer(b)
		c := dial(b, env, client.Config{Name: "txn"})
		ctx := b.Context()
		var va, vb uint64
		var samples []time.Duration
		b.ReportAllocs()
		for b.Loop() {
			start := time.Now()
			r, err := c.Txn(ctx).If(client.VersionIs("/t/a", va), client.VersionIs("/t/b", vb)).
				Then(client.PutOp("/t/a", value), client.PutOp("/t/b", value)).Commit()
			samples = append(samples, time.Since(start))
			if err != nil || !r.Succeeded {
				b.Fatalf("txn: %+v, %v", r, err)
			}
			va, vb = r.Revision, r.Revision
		}
		benchP50(b, samples)
	})
	b.Run("two-puts", func(b *testing.B) {
		env := benchServer(b)
		c := dial(b, env, client.Config{Name: "puts"})
		ctx := b.Context()
		var samples []time.Duration
		b.ReportAllocs()
		for b.Loop() {
			start := time.Now()
			_, err := c.Put(ctx, "/t/a", value)
			if err == nil {
				_, err = c.Put(ctx, "/t/b", value)
			}
			samples = append(samples, time.Since(start))
			if err != nil {
				b.Fatal(err)
			}
		}
		benchP50(b, samples)
	})
}

// benchLeasedListing writes n keys /dir/0000... with 100-byte values from a
// writer, and returns a second client that holds the listing of /dir/
// cached under a prefix lease: its first List goes to the server, its
// second must be answered from memory.
func benchLeasedListing(b *testing.B, n int) *client.Client {
	b.Helper()
	env := benchServer(b)
	ctx := b.Context()
	writer := dial(b, env, client.Config{Name: "writer"})
	value := make([]byte, 100)
	for i := range n {
		if _, err := writer.Put(ctx, fmt.Sprintf("/dir/%04d", i), value); err != nil {
			b.Fatal(err)
		}
	}
	c := dial(b, env, client.Config{Name: "lister"})
	for i, want := range []bool{false, true} {
		r, err := c.List(ctx, "/dir/", client.Leased())
		if err != nil || len(r.KVs) != n || r.More || r.Cached != want {
			b.Fatalf("list %d: %d keys, more %v, cached %v, %v; want %d keys, cached %v", i+1, len(r.KVs), r.More, r.Cached, err, n, want)
		}
	}
	return c
}

// BenchmarkCachedList lists a prefix of 100 keys with 100-byte values that
// the client holds under a prefix lease: every List is answered from
// memory. Each answer is a copy of the cached slice of KVs (one
// allocation; the keys and values are shared with the cache).
func BenchmarkCachedList(b *testing.B) {
	const n = 100
	c := benchLeasedListing(b, n)
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		r, err := c.List(ctx, "/dir/", client.Leased())
		if err != nil || !r.Cached || len(r.KVs) != n {
			b.Fatalf("list: %d keys, cached %v, %v", len(r.KVs), r.Cached, err)
		}
	}
}

// BenchmarkCachedListGet reads a key under a prefix whose listing (100 keys)
// the client holds under a prefix lease, the key having no cache entry of
// its own: a key of the listing (present) and one it does not have
// (absent). Both are answered from the listing.
func BenchmarkCachedListGet(b *testing.B) {
	for _, tc := range []struct {
		name, key string
		found     bool
	}{
		{"present", "/dir/0042", true},
		{"absent", "/dir/none", false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c := benchLeasedListing(b, 100)
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				it, err := c.Get(ctx, tc.key)
				if err != nil || !it.Cached || it.Found != tc.found || (tc.found && len(it.Value) != 100) {
					b.Fatalf("get %q: %+v, %v", tc.key, it, err)
				}
			}
		})
	}
}

// BenchmarkIdleWatches opens b.N watches of distinct keys on one session
// and reports the memory each costs while idle (watch-bytes: the heap
// and stacks in use of this process, which holds the server and the
// client, over the watches), once every watch has reported its start.
func BenchmarkIdleWatches(b *testing.B) {
	env := benchServer(b)
	c := dial(b, env, client.Config{})
	ctx, cancel := context.WithCancel(b.Context())
	defer cancel()
	inUse := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse + m.StackInuse
	}
	n := min(b.N, server.MaxWatchesPerSession)
	before := inUse()
	b.ResetTimer()
	ws := make([]*client.Watcher, n)
	for i := range n {
		ws[i] = c.Watch(ctx, fmt.Sprintf("idle/%d", i), client.WithProgressNotify(-1))
	}
	// Each watch has begun once it answers a request for progress.
	for _, w := range ws {
		w.RequestProgress()
		select {
		case r := <-w.C:
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		case <-time.After(time.Minute):
			b.Fatal("a watch did not start within a minute")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(inUse()-min(before, inUse()))/float64(n), "watch-bytes")
}

// BenchmarkHistoryBytes puts b.N values of 100 bytes to 1,000 keys and
// reports the bytes the event history holds for each event
// (history-bytes/event: its key and value, the previous revision, and the
// key's head).
func BenchmarkHistoryBytes(b *testing.B) {
	env := benchServer(b)
	c := dial(b, env, client.Config{})
	val := make([]byte, 100)
	for i := 0; b.Loop(); i++ {
		if _, err := c.Put(b.Context(), fmt.Sprintf("h/%04d", i%1000), val); err != nil {
			b.Fatal(err)
		}
	}
	for range 100 {
		if st := env.Stats(); st.HistoryEvents > 0 {
			b.ReportMetric(float64(st.HistoryBytes)/float64(st.HistoryEvents), "history-bytes/event")
			return
		}
		time.Sleep(100 * time.Millisecond) // the leader reads its history's state every few seconds
	}
	b.Fatal("the history's state was never read")
}
