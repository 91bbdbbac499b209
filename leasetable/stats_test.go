package leasetable

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"time"
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

// TestStatsCountersMatchWalk drives a Table with random sequences of calls
// at made-up, advancing times, as a server would make them (ready ops are
// finished, ended write leases are ended in the store, leases are restored
// and handed over at the start and adopted later), and checks after every
// call that the counters Stats keeps as it goes equal what a walk of the
// whole Table counts.
func TestStatsCountersMatchWalk(t *testing.T) {
	seeds, steps := 200, 500
	if testing.Short() {
		seeds, steps = 40, 300
	}
	var reached Stats
	for seed := range uint64(seeds) {
		r := newStatsRun(t, seed)
		for range steps {
			r.step()
			r.check()
			if t.Failed() {
				return
			}
		}
		r.drain()
		r.check()
		st := r.tab.Stats()
		if st.Sessions != 0 || st.Leases != 0 || st.WriteLeases != 0 || st.WritesWaiting != 0 || st.Keys != 0 {
			t.Fatalf("seed %d: Stats %+v after every session closed and every lease ran out", seed, st)
		}
		reached.Sessions = max(reached.Sessions, r.peak.Sessions)
		reached.Leases = max(reached.Leases, r.peak.Leases)
		reached.WriteLeases = max(reached.WriteLeases, r.peak.WriteLeases)
		reached.WritesWaiting = max(reached.WritesWaiting, r.peak.WritesWaiting)
		reached.Keys = max(reached.Keys, r.peak.Keys)
	}
	// The runs must reach tables worth counting.
	if reached.Sessions < 3 || reached.Leases < 5 || reached.WriteLeases < 2 || reached.WritesWaiting < 2 || reached.Keys < 4 {
		t.Fatalf("the runs stayed too small: peaks %+v", reached)
	}
}

// statsRun is one random run of TestStatsCountersMatchWalk.
type statsRun struct {
	t      *testing.T
	rng    *rand.Rand
	seed   uint64
	tab    *Table
	now    time.Time
	nextID SessionID
	open   []SessionID
	handed []SessionID // closed holders of handed-over read leases
	ready  []*Op       // ready ops the server has not finished
	ops    []*Op       // ops submitted and not finished
	ends   []Notice    // write leases ended, not yet ended in the store
	tokens uint64      // the last fencing token issued
	peak   Stats
}

var statsKeys = []string{"a", "b", "c", "d", "e"}

func newStatsRun(t *testing.T, seed uint64) *statsRun {
	r := &statsRun{t: t, rng: rand.New(rand.NewPCG(seed, 11)), seed: seed, tab: New(Config{Epsilon: eps}), now: t0, nextID: 1}
	// What a new core restores before any session opens: write leases of
	// an earlier run, read leases handed over by an earlier leader.
	for _, key := range statsKeys {
		switch r.rng.IntN(4) {
		case 0:
			r.tokens++
			r.tab.RestoreWriteLease(key, r.tokens, uint64(1+r.rng.IntN(3)), r.now.Add(r.pickTerm()), 0)
		case 1:
			holder := 1<<63 + SessionID(r.rng.IntN(3))
			r.tab.RestoreReadLease(holder, key, r.now.Add(r.pickTerm()))
			if !slices.Contains(r.handed, holder) {
				r.handed = append(r.handed, holder)
			}
		}
	}
	r.tab.SetWriteBarrier(r.now.Add(time.Duration(r.rng.IntN(3)) * time.Second))
	return r
}

func (r *statsRun) pickKey() string { return statsKeys[r.rng.IntN(len(statsKeys))] }

func (r *statsRun) pickTerm() time.Duration { return time.Duration(1+r.rng.IntN(4)) * time.Second }

func (r *statsRun) pickOpen() (SessionID, bool) {
	if len(r.open) == 0 {
		return 0, false
	}
	return r.open[r.rng.IntN(len(r.open))], true
}

// apply does what the server does with a call's effects: it keeps the
// ready ops to finish later, forgets the abandoned ones, and keeps the
// ended write leases to end in the store later.
func (r *statsRun) apply(eff Effects) {
	r.ready = append(r.ready, eff.Ready...)
	for _, op := range eff.Abandoned {
		r.ops = slices.DeleteFunc(r.ops, func(o *Op) bool { return o == op })
	}
	r.ends = append(r.ends, eff.EndWrite...)
}

func (r *statsRun) step() {
	switch r.rng.IntN(16) {
	case 0: // a session opens, and gives a client identity or none
		id := r.nextID
		r.nextID++
		r.tab.AddSession(id)
		r.open = append(r.open, id)
		if c := uint64(r.rng.IntN(4)); c != 0 {
			r.tab.SetClient(id, c)
		}
	case 1: // an open session is added again: nothing changes
		if id, ok := r.pickOpen(); ok {
			r.tab.AddSession(id)
		}
	case 2: // a session closes, gracefully or not
		if id, ok := r.pickOpen(); ok {
			r.open = slices.DeleteFunc(r.open, func(o SessionID) bool { return o == id })
			r.apply(r.tab.CloseSession(id, r.rng.IntN(2) == 0, r.now))
			r.ops = slices.DeleteFunc(r.ops, func(o *Op) bool { return o.Session == id && o.state == opAbandoned })
		}
	case 3, 4: // a read
		if id, ok := r.pickOpen(); ok {
			r.tab.Grant(id, r.pickKey(), r.pickTerm(), r.now)
		}
	case 5: // a renewal
		if id, ok := r.pickOpen(); ok {
			keys := []string{r.pickKey(), r.pickKey()}
			r.tab.Renew(id, keys, []time.Duration{r.pickTerm(), r.pickTerm()}, nil, r.now)
		}
	case 6: // an eviction or an acknowledgement
		if id, ok := r.pickOpen(); ok {
			r.apply(r.tab.Relinquish(id, []string{r.pickKey()}, r.now))
		}
	case 7: // a write, perhaps with a token that may or may not be live
		if id, ok := r.pickOpen(); ok {
			op := &Op{Kind: OpWrite, Session: id, Key: r.pickKey()}
			if r.rng.IntN(3) == 0 {
				op.Token = 1 + r.rng.Uint64N(r.tokens+1)
			}
			if r.rng.IntN(2) == 0 {
				op.Deadline = r.now.Add(r.pickTerm())
			}
			if eff, err := r.tab.Submit(op, r.now); err == nil {
				r.ops = append(r.ops, op)
				r.apply(eff)
			}
		}
	case 8: // an acquisition
		if id, ok := r.pickOpen(); ok {
			op := &Op{Kind: OpAcquire, Session: id, Key: r.pickKey()}
			if eff, err := r.tab.Submit(op, r.now); err == nil {
				r.ops = append(r.ops, op)
				r.apply(eff)
			}
		}
	case 9, 10: // the committer finishes a ready op
		if len(r.ready) == 0 {
			return
		}
		i := r.rng.IntN(len(r.ready))
		op := r.ready[i]
		r.ready = slices.Delete(r.ready, i, i+1)
		r.ops = slices.DeleteFunc(r.ops, func(o *Op) bool { return o == op })
		if op.Kind == OpAcquire {
			var token uint64
			if r.rng.IntN(5) != 0 {
				r.tokens++
				token = r.tokens
			}
			r.apply(r.tab.DoneAcquire(op, token, r.pickTerm(), r.now))
		} else {
			_, eff := r.tab.Done(op, r.rng.IntN(5) != 0, r.pickTerm(), r.now)
			r.apply(eff)
		}
	case 11: // a writer gives up
		if len(r.ops) > 0 {
			op := r.ops[r.rng.IntN(len(r.ops))]
			if ok, eff := r.tab.Abandon(op, r.now); ok {
				r.ops = slices.DeleteFunc(r.ops, func(o *Op) bool { return o == op })
				r.apply(eff)
			}
		}
	case 12: // a release, perhaps with a token the session may not use
		if id, ok := r.pickOpen(); ok {
			eff, _ := r.tab.ReleaseWriteLease(id, r.pickKey(), 1+r.rng.Uint64N(r.tokens+1), 0, r.now)
			r.apply(eff)
		}
	case 13: // the store has ended a write lease
		if len(r.ends) > 0 {
			n := r.ends[0]
			r.ends = r.ends[1:]
			r.apply(r.tab.EndWriteLease(n.Key, n.Token, r.now))
		}
	case 14: // a client of handed-over leases comes back
		if id, ok := r.pickOpen(); ok && len(r.handed) > 0 {
			r.apply(r.tab.AdoptSession(r.handed[r.rng.IntN(len(r.handed))], id, r.now))
		}
	case 15: // time passes, and the timer fires
		r.now = r.now.Add(time.Duration(r.rng.IntN(1500)) * time.Millisecond)
		if next, ok := r.tab.NextDeadline(); ok && !r.now.Before(next) {
			r.apply(r.tab.Tick(r.now))
		}
	}
}

// drain closes every session, lets every op finish and every lease run
// out.
func (r *statsRun) drain() {
	for _, id := range r.open {
		r.apply(r.tab.CloseSession(id, false, r.now))
	}
	r.open = nil
	for first := true; first || len(r.ready) > 0 || len(r.ends) > 0; first = false {
		for len(r.ready) > 0 {
			op := r.ready[0]
			r.ready = r.ready[1:]
			if op.Kind == OpAcquire {
				r.apply(r.tab.DoneAcquire(op, 0, term, r.now))
			} else {
				_, eff := r.tab.Done(op, true, term, r.now)
				r.apply(eff)
			}
		}
		for len(r.ends) > 0 {
			n := r.ends[0]
			r.ends = r.ends[1:]
			r.apply(r.tab.EndWriteLease(n.Key, n.Token, r.now))
		}
		r.now = r.now.Add(time.Hour)
		r.apply(r.tab.Tick(r.now))
	}
}

// check compares the counters with a walk of every key and session.
func (r *statsRun) check() {
	r.t.Helper()
	checkInvariants(r.t, r.tab)
	var walk Stats
	for _, s := range r.tab.sessions {
		if !s.closed {
			walk.Sessions++
		}
	}
	for _, v := range r.tab.index.slots {
		if v != 0 {
			walk.Leases += int(r.tab.recs.at(v - 1).n)
		}
	}
	for _, k := range keyStates(r.tab) {
		if k.wlease != nil && !k.wlease.ending {
			walk.WriteLeases++
		}
		for _, op := range k.queue {
			if op.state == opQueued || op.state == opWaiting {
				walk.WritesWaiting++
			}
		}
	}
	walk.Keys = r.tab.index.n
	got := r.tab.Stats()
	if got.Sessions != walk.Sessions || got.Leases != walk.Leases || got.WriteLeases != walk.WriteLeases ||
		got.WritesWaiting != walk.WritesWaiting || got.Keys != walk.Keys {
		r.t.Fatalf("seed %d at t0%+v: Stats %+v, but a walk counts %+v", r.seed, r.now.Sub(t0), got, walk)
	}
	r.peak.Sessions = max(r.peak.Sessions, got.Sessions)
	r.peak.Leases = max(r.peak.Leases, got.Leases)
	r.peak.WriteLeases = max(r.peak.WriteLeases, got.WriteLeases)
	r.peak.WritesWaiting = max(r.peak.WritesWaiting, got.WritesWaiting)
	r.peak.Keys = max(r.peak.Keys, got.Keys)
}
