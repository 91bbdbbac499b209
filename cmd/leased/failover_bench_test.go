package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/proccluster"
)

// BenchmarkFailover measures, on three leased processes, what clients see
// when the leader goes: by SIGKILL, or by a graceful transfer (which hands
// the leases over), with the default term and with a 1 s term. Each
// iteration reports when, after the leader went, a client given every
// endpoint was first served an uncached read (read-ms) and first had a
// write committed (write-ms), and how many reads of its cached entries
// failed while their leases lasted (cached-fails, of cached-reads).
// Medians over the iterations:
//
//	go test ./cmd/leased -run '^$' -bench BenchmarkFailover -benchtime 3x -timeout 30m
func BenchmarkFailover(b *testing.B) {
	for _, tc := range []struct {
		how  string
		term time.Duration
	}{
		{"kill", 10 * time.Second},
		{"kill", time.Second},
		{"transfer", 10 * time.Second},
		{"transfer", time.Second},
	} {
		b.Run(fmt.Sprintf("%s/term=%v", tc.how, tc.term), func(b *testing.B) { benchFailover(b, tc.how, tc.term) })
	}
}

func benchFailover(b *testing.B, how string, term time.Duration) {
	c := proccluster.Start(b, proccluster.Config{Bins: bins, Flags: []string{"--lease-term", term.String()}})
	cfg := c.ClientConfig()
	cfg.MaxReconnectDelay = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	cl, err := client.Dial(ctx, c.Endpoints(), cfg)
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = fmt.Sprintf("cached%d", i)
	}
	var reads, writes []float64
	var cachedReads, cachedFails int64
	b.ResetTimer()
	for i := range b.N {
		lead := c.Leader()
		// Fresh leases on the cached keys, then a reader that goes on
		// reading them for half a term after the leader goes.
		for _, k := range keys {
			must(b, func(ctx context.Context) error { _, err := cl.Put(ctx, k, []byte("v")); return err })
			must(b, func(ctx context.Context) error {
				it, err := cl.Get(ctx, k)
				if err == nil && !it.Cached {
					_, err = cl.Get(ctx, k)
				}
				return err
			})
		}
		start := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() {
			for time.Since(start) < term/2 {
				for _, k := range keys {
					it, err := cl.Get(context.Background(), k)
					atomic.AddInt64(&cachedReads, 1)
					if err != nil || !it.Cached {
						atomic.AddInt64(&cachedFails, 1)
					}
				}
				time.Sleep(time.Millisecond)
			}
		})
		switch how {
		case "kill":
			c.Kill(lead.Name)
		case "transfer":
			must(b, func(ctx context.Context) error {
				a, err := client.DialAdmin(ctx, lead.Addr, c.ClientConfig())
				if err != nil {
					return err
				}
				defer a.Close()
				return a.TransferLead(ctx, "")
			})
		}
		probe := fmt.Sprintf("probe%d", i)
		must(b, func(ctx context.Context) error {
			for {
				_, err := cl.Get(ctx, probe)
				if err == nil || ctx.Err() != nil {
					return err
				}
				time.Sleep(time.Millisecond)
			}
		})
		reads = append(reads, float64(time.Since(start).Microseconds())/1000)
		must(b, func(ctx context.Context) error { _, err := cl.Put(ctx, "w", []byte(probe)); return err })
		writes = append(writes, float64(time.Since(start).Microseconds())/1000)
		wg.Wait()
		if how == "kill" {
			c.Restart(lead.Name)
		}
	}
	b.StopTimer()
	b.ReportMetric(median(reads), "read-ms")
	b.ReportMetric(median(writes), "write-ms")
	b.ReportMetric(float64(cachedFails), "cached-fails")
	b.ReportMetric(float64(cachedReads), "cached-reads")
	b.Logf("%s, term %v: read-ms %v, write-ms %v", how, term, reads, writes)
}

// must runs f with a context of a minute and fails b on an error.
func must(b *testing.B, f func(context.Context) error) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f(ctx); err != nil {
		b.Fatal(err)
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
