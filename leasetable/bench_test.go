package leasetable

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkGrantRenew grants and renews read leases across many sessions and
// keys: one Grant and one single-key Renew per iteration.
func BenchmarkGrantRenew(b *testing.B) {
	const sessions, keys = 1000, 10000
	tab := New(Config{Epsilon: eps})
	for id := range SessionID(sessions) {
		tab.AddSession(id + 1)
	}
	names := make([]string, keys)
	for i := range names {
		names[i] = "key/" + strconv.Itoa(i)
	}
	batch := make([][]string, keys)
	for i := range batch {
		batch[i] = names[i : i+1]
	}
	now := t0
	// Warm up: every session holds some leases.
	for i := range keys * 4 {
		tab.Grant(SessionID(1+i%sessions), names[(i*7)%keys], term, now)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		now = now.Add(time.Microsecond)
		id, k := SessionID(1+i%sessions), (i*31)%keys
		if tab.Grant(id, names[k], term, now) != term {
			b.Fatal("Grant refused")
		}
		if renewUniform(tab, id, batch[k], term, now)[0] != term {
			b.Fatal("Renew refused")
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(tab.Stats().Leases), "leases")
}

// BenchmarkWriteWithHolders is one write on a key 10 sessions hold: the
// grants, the invalidations, the 10 acknowledgements, and the commit.
func BenchmarkWriteWithHolders(b *testing.B) {
	const holders = 10
	tab := New(Config{Epsilon: eps})
	for id := range SessionID(holders + 1) {
		tab.AddSession(id + 1)
	}
	writer := SessionID(holders + 1)
	keys := []string{"k"}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		for id := range SessionID(holders) {
			tab.Grant(id+1, "k", term, now)
		}
		op := &Op{Kind: OpWrite, Session: writer, Key: "k"}
		eff, err := tab.Submit(op, now)
		if err != nil || len(eff.Invalidate) != holders {
			b.Fatalf("Submit: %v, %d invalidations", err, len(eff.Invalidate))
		}
		for _, n := range eff.Invalidate {
			eff = tab.Relinquish(n.Session, keys, now)
		}
		if len(eff.Ready) != 1 {
			b.Fatal("write not ready after the last ack")
		}
		tab.Done(op, true, term, now)
	}
}
