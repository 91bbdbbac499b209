package leasetable

import (
	"runtime"
	"strconv"
	"testing"
)

// heapInUse returns the bytes of heap spans in use after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
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
// over 100 sessions and reports the live heap they take, key names
// included, per lease (live-B/lease). An op is the whole run.
func BenchmarkReadLeaseMemory(b *testing.B) {
	const sessions, leases = 100, 1_000_000
	var perLease float64
	for b.Loop() {
		tab := New(Config{Epsilon: eps})
		for id := range SessionID(sessions) {
			tab.AddSession(id + 1)
		}
		before := heapInUse()
		var buf []byte
		var key string
		for i := range leases {
			s := i % sessions
			buf, key = memKey(buf, s, i)
			if tab.Grant(SessionID(s+1), key, term, t0) != term {
				b.Fatalf("Grant %d refused", i)
			}
		}
		after := heapInUse()
		if st := tab.Stats(); st.Leases != leases || st.Keys != leases {
			b.Fatalf("Stats %+v", st)
		}
		perLease = float64(after-before) / leases
		memBenchTable = tab
	}
	b.ReportMetric(perLease, "live-B/lease")
}
