package server

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/protocol"
)

// BenchmarkRenew: renewals of batch read leases a message, 64 in flight
// over 8 sessions, each goroutine renewing the leases its session took on
// keys of its own (absent keys: a read of one is cached too); leases/s
// counts the leases given a new term. It is peerbench's leased.renew.b1
// and .b1000 in the process, over real QUIC and badger on disk.
func BenchmarkRenew(b *testing.B) {
	for _, batch := range []int{1, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			const conc = 64
			srv := benchTTLServer(b, 0)
			cs := benchSessions(b, srv, 8)
			keys := make([][][]byte, conc)
			for g := range keys {
				for i := range batch {
					keys[g] = append(keys[g], fmt.Appendf(nil, "renew/%02d/%04d", g, i))
				}
			}
			// Each goroutine's session takes its leases, sessions in
			// parallel.
			var wg sync.WaitGroup
			errs := make(chan error, len(cs))
			for s, c := range cs {
				wg.Go(func() {
					for g := s; g < conc; g += len(cs) {
						for _, k := range keys[g] {
							if err := takeLease(c, k); err != nil {
								errs <- err
								return
							}
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			start := time.Now()
			fail := make(chan string, conc)
			for g := range conc {
				c := cs[g%len(cs)]
				n := b.N/conc + min(1, max(0, b.N%conc-g)) // b.N calls in all
				wg.Go(func() {
					for range n {
						m, err := c.Call(context.Background(), &protocol.Renew{Keys: keys[g]})
						r, ok := m.(*protocol.RenewReply)
						if err != nil || !ok || len(r.Terms) != batch || slices.Contains(r.Terms, 0) {
							fail <- fmt.Sprintf("renewal by goroutine %d: %#v, %v", g, m, err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			close(fail)
			if f, ok := <-fail; ok {
				b.Fatal(f)
			}
			b.ReportMetric(float64(b.N*batch)/elapsed.Seconds(), "leases/s")
		})
	}
}

// takeLease reads key on c and checks that the read was granted a lease.
func takeLease(c *protoclient.Client, key []byte) error {
	m, err := c.Call(context.Background(), &protocol.Get{Key: key})
	if r, ok := m.(*protocol.GetReply); err != nil || !ok || r.Term == 0 {
		return fmt.Errorf("read of %s: %#v, %v; want a lease", key, m, err)
	}
	return nil
}
