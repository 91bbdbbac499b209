package leasetable

import (
	"strconv"
	"testing"
)

// BenchmarkStats reads the counters of a table with a million leases: a
// thousand sessions holding 999,000 read leases on 249,750 keys and 1,000
// write leases. Stats runs under the core's lock, so its cost is what
// every other client waits for during a flood of stats requests.
func BenchmarkStats(b *testing.B) {
	const sessions, perKey, writes = 1000, 4, 1000
	const reads = 1_000_000 - writes
	tab := New(Config{Epsilon: eps})
	for id := range SessionID(sessions) {
		tab.AddSession(id + 1)
	}
	now := t0
	for i := range reads {
		key := "key/" + strconv.Itoa(i/perKey)
		if tab.Grant(SessionID(1+i%sessions), key, term, now) != term {
			b.Fatal("Grant refused")
		}
	}
	for i := range writes {
		op := &Op{Kind: OpAcquire, Session: SessionID(1 + i%sessions), Key: "lock/" + strconv.Itoa(i)}
		if eff, err := tab.Submit(op, now); err != nil || len(eff.Ready) != 1 {
			b.Fatalf("acquire: %v, %+v", err, eff)
		}
		tab.DoneAcquire(op, uint64(i+1), term, now)
	}
	if s := tab.Stats(); s.Leases != reads || s.WriteLeases != writes || s.Sessions != sessions {
		b.Fatalf("Stats %+v; want %d read leases, %d write leases, %d sessions", s, reads, writes, sessions)
	}
	b.ReportAllocs()
	var s Stats
	for b.Loop() {
		s = tab.Stats()
	}
	b.StopTimer()
	b.ReportMetric(float64(s.Leases+s.WriteLeases), "leases")
}
