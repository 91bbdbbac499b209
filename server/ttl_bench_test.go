package server

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/protocol"
)

// Benchmarks of TTL leases over real QUIC against a server with its badger
// store on disk, on the real clock:
//
//	go test ./server -run '^$' -bench 'TTL' -benchtime 3s
//
// The mass expiry takes about two minutes with its default -ttl.leases
// 100000 (the revocations alone take 100 s at 1,000 a second);
// -ttl.leases 10000 is a quick look.

var ttlBenchLeases = flag.Int("ttl.leases", 100_000, "leases that expire together in BenchmarkTTLPutDuringMassExpiry")

// benchTTLServer starts a server whose TTL leases may be as short as
// minTTL (0: the default).
func benchTTLServer(b *testing.B, minTTL time.Duration) *Server {
	b.Helper()
	srv, err := New(Config{Dir: b.TempDir(), Addr: "127.0.0.1:0", Logger: quietLogger(), MaxInflight: 4096,
		TTL: core.TTLConfig{MinTTL: minTTL, MaxLeases: 10_000_000}})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	b.Cleanup(func() {
		srv.Close()
		<-done
	})
	return srv
}

// benchSessions opens n raw sessions to srv.
func benchSessions(b *testing.B, srv *Server, n int) []*protoclient.Client {
	b.Helper()
	cs := make([]*protoclient.Client, n)
	for i := range cs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := protoclient.Dial(ctx, srv.Addr().String(), protoclient.Options{CAFile: CAPath(srv.cfg.Dir)})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		cs[i] = c
	}
	return cs
}

// parallelCalls makes n calls, conc at a time spread over cs, with the
// request mk(i) returns for the i-th, and checks each reply with ok.
func parallelCalls(b *testing.B, cs []*protoclient.Client, n, conc int, mk func(i int) protocol.Message, ok func(i int, m protocol.Message) bool) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var failed atomic.Value
	for g := range conc {
		c := cs[g%len(cs)]
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || failed.Load() != nil {
					return
				}
				m, err := c.Call(context.Background(), mk(i))
				if err != nil || !ok(i, m) {
					failed.Store(fmt.Sprintf("call %d: %#v, %v", i, m, err))
					return
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f != nil {
		b.Fatal(f)
	}
}

// grantAll grants n leases of ttl and returns their ids.
func grantAll(b *testing.B, cs []*protoclient.Client, n int, ttl time.Duration) []uint64 {
	b.Helper()
	ids := make([]uint64, n)
	parallelCalls(b, cs, n, 64, func(int) protocol.Message { return &protocol.LeaseGrant{TTL: ttl} }, func(i int, m protocol.Message) bool {
		r, ok := m.(*protocol.LeaseGrantReply)
		if ok {
			ids[i] = r.Lease
		}
		return ok
	})
	return ids
}

// attachAll puts one key for each lease of ids, attached to it.
func attachAll(b *testing.B, cs []*protoclient.Client, ids []uint64) {
	b.Helper()
	parallelCalls(b, cs, len(ids), 64, func(i int) protocol.Message {
		return &protocol.Write{Op: protocol.OpPut, Key: fmt.Appendf(nil, "svc/%07d", i), Value: []byte("up"), Lease: ids[i]}
	}, func(_ int, m protocol.Message) bool { _, ok := m.(*protocol.WriteReply); return ok })
}

// BenchmarkTTLGrant: TTL lease grants, 64 in flight over 8 sessions.
func BenchmarkTTLGrant(b *testing.B) {
	srv := benchTTLServer(b, 0)
	cs := benchSessions(b, srv, 8)
	b.ResetTimer()
	start := time.Now()
	grantAll(b, cs, b.N, time.Hour)
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "grants/s")
}

// BenchmarkTTLKeepAlive: keep-alives of batch leases each, 64 in flight
// over 8 sessions; leases/s counts the leases renewed.
func BenchmarkTTLKeepAlive(b *testing.B) {
	for _, batch := range []int{1, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			srv := benchTTLServer(b, 0)
			cs := benchSessions(b, srv, 8)
			ids := grantAll(b, cs, 64*batch, time.Hour)
			b.ResetTimer()
			start := time.Now()
			parallelCalls(b, cs, b.N, 64, func(i int) protocol.Message {
				g := i % 64
				return &protocol.LeaseKeepAlive{Leases: ids[g*batch : (g+1)*batch]}
			}, func(_ int, m protocol.Message) bool {
				r, ok := m.(*protocol.LeaseKeepAliveReply)
				return ok && len(r.Renewed) == batch
			})
			b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "leases/s")
		})
	}
}

// BenchmarkTTLLeaseMemory: the server's heap per TTL lease after a
// garbage collection: the leader's tracking and what the store holds of
// the leases in memory. It runs once, whatever b.N.
func BenchmarkTTLLeaseMemory(b *testing.B) {
	const n = 100_000
	srv := benchTTLServer(b, 0)
	cs := benchSessions(b, srv, 8)
	before := heapInUse()
	grantAll(b, cs, n, time.Hour)
	after := heapInUse()
	if got := srv.Stats().TTLLeases; got != n {
		b.Fatalf("%d leases, want %d", got, n)
	}
	for b.Loop() {
	}
	b.ReportMetric(float64(after-before)/n, "B/lease")
}

// heapInUse returns the bytes of the heap in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// BenchmarkTTLPutDuringMassExpiry: the latency of Puts to keys of their
// own, one at a time, while -ttl.leases leases, each with a key attached,
// expire together and are revoked at the default pace (1,000 a second);
// then the same Puts on the same server once every lease is gone.
// p50-µs and p99-µs are of the Puts measured.
func BenchmarkTTLPutDuringMassExpiry(b *testing.B) {
	n := *ttlBenchLeases
	srv := benchTTLServer(b, time.Second)
	cs := benchSessions(b, srv, 8)
	// Long enough for every key to be attached before the first lease
	// expires: setting up takes under 150 µs a lease here.
	ttl := 5*time.Second + time.Duration(n)*150*time.Microsecond
	attachAll(b, cs, grantAll(b, cs, n, ttl))
	// The writers go, and with them their read leases on the keys, so
	// that the revocations wait for nobody, as for a dead holder's keys.
	for _, c := range cs {
		c.Close()
	}
	if got := srv.Stats().TTLExpired; got != 0 {
		b.Fatalf("%d leases expired while their keys were attached: lengthen the TTL", got)
	}
	writer := benchSessions(b, srv, 1)[0]
	measure := func(b *testing.B) {
		var lat []time.Duration
		i := 0
		for b.Loop() {
			start := time.Now()
			m, err := writer.Call(context.Background(), &protocol.Write{Op: protocol.OpPut, Key: fmt.Appendf(nil, "other/%d", i%64), Value: []byte("v")})
			if _, ok := m.(*protocol.WriteReply); err != nil || !ok {
				b.Fatalf("put: %#v, %v", m, err)
			}
			lat = append(lat, time.Since(start))
			i++
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	limit := time.Now().Add(ttl + time.Duration(n)*2*time.Millisecond + time.Minute)
	for srv.Stats().TTLExpired == 0 && time.Now().Before(limit) {
		time.Sleep(10 * time.Millisecond)
	}
	b.Run("expiring", func(b *testing.B) {
		measure(b)
		if got := srv.Stats().TTLExpired; got >= uint64(n) {
			b.Logf("the expiry ended before the measurement did")
		}
	})
	for srv.Stats().TTLExpired < uint64(n) && time.Now().Before(limit) {
		time.Sleep(100 * time.Millisecond)
	}
	if got := srv.Stats().TTLExpired; got != uint64(n) {
		b.Fatalf("%d of %d leases expired", got, n)
	}
	b.Run("quiet", measure)
}
