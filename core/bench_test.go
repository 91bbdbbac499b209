package core

import (
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/memtest"
	"github.com/leased/leased/store"
)

// BenchmarkReadDuringStatsFlood measures one read (a lease grant and a
// store read) on a core whose table holds a million read leases, alone and
// while another goroutine asks for the core's counters without pause, as a
// flood of stats requests does. Besides the mean, it reports the median
// and the 99th and 99.9th percentiles of the reads' latencies.
func BenchmarkReadDuringStatsFlood(b *testing.B) {
	const sessions, leases = 1000, 1_000_000
	c, err := New(Config{LeaseTerm: time.Hour, Epsilon: eps, HorizonStep: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, newMemory(b), &notices{})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for id := range SessionID(sessions) {
		c.OpenSession(id + 1)
	}
	for i := range leases {
		if _, term, err := c.Read(SessionID(1+i%sessions), []byte("key/"+strconv.Itoa(i/4))); err != nil || term == 0 {
			b.Fatalf("read %d: term %v, %v", i, term, err)
		}
	}
	if st := c.Stats(); st.Leases != leases {
		b.Fatalf("Stats %+v; want %d leases", st.Stats, leases)
	}
	for _, flood := range []bool{false, true} {
		b.Run("flood="+strconv.FormatBool(flood), func(b *testing.B) {
			stop := make(chan struct{})
			var wg sync.WaitGroup
			if flood {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
							c.Stats()
						}
					}
				})
			}
			var took []time.Duration
			key := []byte("hot")
			for b.Loop() {
				start := time.Now()
				if _, _, err := c.Read(1, key); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			close(stop)
			wg.Wait()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(took[len(took)*99/100].Nanoseconds()), "p99-ns")
			b.ReportMetric(float64(took[len(took)*999/1000].Nanoseconds()), "p99.9-ns")
		})
	}
}

// BenchmarkReadLeaseMemory takes 1,000,000 read leases on distinct keys
// that do not exist (negative answers are leased too) over 100 sessions
// through Core.Read, and reports per lease the live Go heap they take
// (heap-B/lease) and the growth of the process's resident memory
// (rss-B/lease; 0 where it cannot be read): the lease table keeps a large
// table's storage outside the Go heap. An op is the whole run.
func BenchmarkReadLeaseMemory(b *testing.B) {
	const sessions, leases = 100, 1_000_000
	var heapPer, rssPer float64
	for b.Loop() {
		st := store.NewMemory()
		c, err := New(Config{LeaseTerm: time.Hour, Epsilon: eps, HorizonStep: time.Hour,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, &notices{})
		if err != nil {
			b.Fatal(err)
		}
		for id := range SessionID(sessions) {
			c.OpenSession(id + 1)
		}
		rss0, before := memtest.RSS(), memtest.HeapInUse()
		var key []byte
		for i := range leases {
			s := i % sessions
			key = append(key[:0], "/long/mem/"...)
			key = strconv.AppendInt(key, int64(s), 10)
			key = append(key, '/')
			key = strconv.AppendInt(key, int64(i), 10)
			if _, term, err := c.Read(SessionID(s+1), key); err != nil || term == 0 {
				b.Fatalf("read %d: term %v, %v", i, term, err)
			}
		}
		after, rss1 := memtest.HeapInUse(), memtest.RSS()
		if st := c.Stats(); st.Leases != leases {
			b.Fatalf("Stats %+v; want %d leases", st.Stats, leases)
		}
		heapPer = float64(after-before) / leases
		rssPer = float64(rss1-rss0) / leases
		c.Close()
		st.Close()
	}
	b.ReportMetric(heapPer, "heap-B/lease")
	b.ReportMetric(rssPer, "rss-B/lease")
}
