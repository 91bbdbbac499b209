package lessor

import (
	"runtime"
	"testing"
	"time"
)

const benchLeases = 1_000_000

// filled returns a Lessor tracking n leases of TTL 1 hour (checkpointed),
// granted a microsecond apart.
func filled(b *testing.B, n int) (*Lessor, time.Time) {
	ls := newLessor(b, Config{Epsilon: eps})
	now := t0
	for id := range uint64(n) {
		now = now.Add(time.Microsecond)
		grant(b, ls, id+1, time.Hour, now)
	}
	return ls, now
}

// BenchmarkGrant grants one lease into a Lessor of a million.
func BenchmarkGrant(b *testing.B) {
	ls, now := filled(b, benchLeases)
	id := uint64(benchLeases)
	b.ReportAllocs()
	for b.Loop() {
		id++
		now = now.Add(time.Microsecond)
		if err := ls.Grant(id, time.Hour, now); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKeepAlive1000 renews 1,000 leases, one keep-alive message's
// worth, out of a million, each renewal moving its lease to the end of the
// expiry heap.
func BenchmarkKeepAlive1000(b *testing.B) {
	ls, now := filled(b, benchLeases)
	ids := make([]uint64, 1000)
	next := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		for i := range ids {
			ids[i] = next%benchLeases + 1
			next += 997 // spread over the heap
		}
		now = now.Add(time.Millisecond)
		if renewed, _, _ := ls.KeepAlive(ids, now); len(renewed) != len(ids) {
			b.Fatalf("%d renewed of %d", len(renewed), len(ids))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(ids)), "ns/lease")
}

// BenchmarkExpired hands out 100 expired leases (a tenth of a second's
// budget) and revokes them, from a million expired at once. Each iteration
// then grants 100 more, outside the timer, so the heap stays a million
// strong.
func BenchmarkExpired(b *testing.B) {
	ls, now := filled(b, benchLeases)
	now = now.Add(2 * time.Hour)
	id := uint64(benchLeases)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(100 * time.Millisecond)
		ids := ls.Expired(now, 0)
		if len(ids) != 100 {
			b.Fatalf("%d expired, want 100", len(ids))
		}
		for _, id := range ids {
			ls.Revoke(id)
		}
		b.StopTimer()
		for range 100 {
			id++
			grant(b, ls, id, time.Nanosecond, now)
		}
		b.StartTimer()
	}
}

// BenchmarkMemoryPerLease reports the heap bytes a Lessor holds per lease
// with a million leases tracked, checkpoints scheduled.
func BenchmarkMemoryPerLease(b *testing.B) {
	var perLease float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		ls, _ := filled(b, benchLeases)
		runtime.GC()
		runtime.ReadMemStats(&after)
		perLease = float64(after.HeapAlloc-before.HeapAlloc) / benchLeases
		runtime.KeepAlive(ls)
	}
	b.ReportMetric(perLease, "bytes/lease")
}
