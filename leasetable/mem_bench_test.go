package leasetable

import (
	"strconv"
	"testing"

	"github.com/leased/leased/internal/testkit/memtest"
)

// mapped returns the bytes tab keeps in memory it mapped.
func mapped(tab *Table) int64 {
	n := 0
	for _, b := range tab.mem.mapped {
		n += len(b)
	}
	return int64(n)
}

// unmapAll gives back the memory tab mapped, at once rather than when the
// collector finds it garbage, so that it does not leave the process
// while a later measurement runs. tab must not be used after.
func unmapAll(tab *Table) {
	for k, b := range tab.mem.mapped {
		delete(tab.mem.mapped, k)
		unmap(b)
	}
}

// memKey returns the name of key i of session s as a fresh string, the way
// the server makes one from the bytes of a request.
func memKey(buf []byte, s, i int) ([]byte, string) {
	buf = append(buf[:0], "/long/mem/"...)
	buf = strconv.AppendInt(buf, int64(s), 10)
	buf = append(buf, '/')
	buf = strconv.AppendInt(buf, int64(i), 10)
	return buf, string(buf)
}

// memBenchTable keeps the last table of BenchmarkReadLeaseMemory live, so
// that a -memprofile written at the end of the run shows its storage.
var memBenchTable *Table

// BenchmarkReadLeaseMemory grants 1,000,000 read leases on distinct keys
// over 100 sessions and reports, per lease, the live Go heap they take
// (heap-B/lease), the memory the Table mapped for them (mapped-B/lease),
// and the growth of the process's resident memory (rss-B/lease: 0 where
// it cannot be read), key names included. An op is the whole run.
func BenchmarkReadLeaseMemory(b *testing.B) {
	const sessions, leases = 100, 1_000_000
	var heapPer, mappedPer, rssPer float64
	for b.Loop() {
		if memBenchTable != nil {
			unmapAll(memBenchTable)
			memBenchTable = nil
		}
		tab := New(Config{Epsilon: eps})
		for id := range SessionID(sessions) {
			tab.AddSession(id + 1)
		}
		rss0, before := memtest.RSS(), memtest.HeapInUse()
		var buf []byte
		var key string
		for i := range leases {
			s := i % sessions
			buf, key = memKey(buf, s, i)
			if tab.Grant(SessionID(s+1), key, term, t0) != term {
				b.Fatalf("Grant %d refused", i)
			}
		}
		after, rss1 := memtest.HeapInUse(), memtest.RSS()
		if st := tab.Stats(); st.Leases != leases || st.Keys != leases {
			b.Fatalf("Stats %+v", st)
		}
		heapPer = float64(after-before) / leases
		mappedPer = float64(mapped(tab)) / leases
		rssPer = float64(rss1-rss0) / leases
		memBenchTable = tab
	}
	b.ReportMetric(heapPer, "heap-B/lease")
	b.ReportMetric(mappedPer, "mapped-B/lease")
	b.ReportMetric(rssPer, "rss-B/lease")
}
