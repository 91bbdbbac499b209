package server_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/server"
)

// BenchmarkClusterPut: puts per second on a cluster of three nodes on this
// machine, each committed through raft, from 16 writers on keys of their
// own (no holder to wait for).
func BenchmarkClusterPut(b *testing.B) {
	cl := testkit.NewCluster(b, 3, server.Config{Cluster: testkit.RelaxedRaft(), LeaseTerm: time.Second})
	cl.Leader()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, cl.Endpoints(), client.Config{CAFile: cl.CAFile, Logger: testkit.Discard()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	const writers = 16
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("bench/%d", w)
			for next.Add(1) <= int64(b.N) {
				if _, err := c.Put(ctx, key, []byte("v")); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "puts/s")
}
