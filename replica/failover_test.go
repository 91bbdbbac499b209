package replica_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// The failover rule of DESIGN §13, on an in-process cluster under
// testing/synctest: the nodes, raft and the cores share the bubble's fake
// clock, so the waits are checked to the tick.

const (
	foTerm = 10 * time.Second
	foEps  = 100 * time.Millisecond
	foStep = 2 * time.Second
)

// isolate cuts node id off from every other node, both ways.
func (c *cluster) isolate(id raft.ServerID) {
	for other, otr := range c.trans {
		if other == id {
			continue
		}
		otr.Disconnect(raft.ServerAddress(id))
		c.trans[id].Disconnect(raft.ServerAddress(other))
	}
}

// id returns the ID of node n.
func (c *cluster) id(n *replica.Node) raft.ServerID {
	for id, m := range c.nodes {
		if m == n {
			return id
		}
	}
	c.t.Fatal("the node is not in the cluster")
	return ""
}

// leaderOtherThan waits, on the bubble's clock, until a node other than
// id leads, and returns it; it fails the test if none does within a
// minute.
func (c *cluster) leaderOtherThan(id raft.ServerID) *replica.Node {
	c.t.Helper()
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
		for other, n := range c.nodes {
			if other != id && n.IsLeader() {
				return n
			}
		}
	}
	c.t.Fatalf("no node other than %s leads after a minute", id)
	return nil
}

// nobody is a core.Notifier for sessions that never answer.
type nobody struct{}

func (nobody) Invalidate(core.SessionID, []string)         {}
func (nobody) Recall(core.SessionID, string, uint64)       {}
func (nobody) InvalidatePrefixes(core.SessionID, []string) {}

func newCore(t *testing.T, n *replica.Node) *core.Core {
	t.Helper()
	c, err := core.New(core.Config{LeaseTerm: foTerm, Epsilon: foEps, HorizonStep: foStep, Replicated: true, Logger: quiet()}, n, nobody{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// done is a request's outcome and when it came.
type done struct {
	core.Outcome
	at time.Time
}

// submitPut submits a put through c and returns a channel of its outcome.
func submitPut(t *testing.T, c *core.Core, session core.SessionID, key, value string) <-chan done {
	t.Helper()
	out := make(chan done, 1)
	r := &core.Request{Session: session, Op: store.OpPut, Key: []byte(key), Value: []byte(value),
		Done: func(o core.Outcome) { out <- done{o, time.Now()} }}
	if err := c.Submit(r); err != nil {
		t.Fatal(err)
	}
	return out
}

// stallable is a log store whose writes block while it is stalled: a disk
// that stops answering.
type stallable struct {
	*raft.InmemStore
	gate chan struct{} // closed: writes go through
}

func newStallable() *stallable {
	s := &stallable{InmemStore: raft.NewInmemStore(), gate: make(chan struct{})}
	close(s.gate)
	return s
}

func (s *stallable) stall()  { s.gate = make(chan struct{}) }
func (s *stallable) resume() { close(s.gate) }
func (s *stallable) StoreLog(l *raft.Log) error {
	<-s.gate
	return s.InmemStore.StoreLog(l)
}
func (s *stallable) StoreLogs(ls []*raft.Log) error {
	<-s.gate
	return s.InmemStore.StoreLogs(ls)
}

// TestFailoverWaitsOutTheOldLeader: a leader grants a lease and is cut
// off, with its disk working or stalled. It grants no lease and serves no
// read past the horizon it persisted; the new leader serves reads at once
// and holds its first write until exactly the newest horizon, counted from
// when it applied it, plus ε: after the old leader's last lease has run
// out on any clock within ε, and after its last read.
func TestFailoverWaitsOutTheOldLeader(t *testing.T) {
	t.Parallel()
	for _, stall := range []bool{false, true} {
		name := "cut off"
		if stall {
			name = "cut off, disk stalled"
		}
		t.Run(name, func(t *testing.T) { testFailover(t, stall) })
	}
}

func testFailover(t *testing.T, stall bool) {
	synctest.Test(t, func(t *testing.T) {
		logs := map[raft.ServerID]*stallable{}
		c := newCluster(t, 3, func(cfg *replica.Config) {
			logs[raft.ServerID(cfg.ID)] = newStallable()
			cfg.LogStore, cfg.StableStore = logs[raft.ServerID(cfg.ID)], logs[raft.ServerID(cfg.ID)]
		})
		old := c.leader()
		oc := newCore(t, old)
		oc.OpenSession(1)
		o := <-submitPut(t, oc, 1, "k", "v1")
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		oc.OpenSession(2)
		granted := time.Now()
		if _, term, err := oc.Read(2, []byte("k")); err != nil || term != foTerm {
			t.Fatalf("read on the old leader: term %v, %v", term, err)
		}
		c.converge(old)
		// When each follower applied the horizon entry.
		applied := map[*replica.Node]time.Time{}
		for _, n := range c.nodes {
			st, err := n.State()
			if err != nil || st.HorizonApplied.Before(granted) {
				t.Fatalf("state %+v, %v: the horizon entry is not applied after the grant at %v", st, err, granted)
			}
			applied[n] = st.HorizonApplied
		}
		st, _ := old.State()
		oldID := c.id(old)
		if stall {
			logs[oldID].stall()
			// Let raft shut down once the test is over.
			t.Cleanup(logs[oldID].resume)
		}
		c.isolate(oldID)
		nl := c.leaderOtherThan(oldID)
		start := time.Now()
		nc := newCore(t, nl)
		nc.OpenSession(3)
		nc.OpenSession(4)
		rec, _, err := nc.Read(3, []byte("k"))
		if err != nil || string(rec.Value) != "v1" {
			t.Fatalf("read on the new leader: %+v, %v", rec, err)
		}
		if time.Since(start) > time.Second {
			t.Errorf("the new leader's first read took %v", time.Since(start))
		}
		out := submitPut(t, nc, 4, "k", "v2")
		// The old leader, cut off, grants leases and serves reads until its
		// horizon, and then fails every read.
		lastLease, lastRead := granted.Add(foTerm+foEps), granted
		for {
			now := time.Now()
			_, term, err := oc.Read(2, []byte("k"))
			if errors.Is(err, core.ErrUnavailable) {
				break
			}
			if err != nil {
				t.Fatalf("read on the old leader: %v", err)
			}
			lastRead = now
			if exp := now.Add(term + foEps); term > 0 && exp.After(lastLease) {
				lastLease = exp
			}
			if now.Sub(granted) > 10*foTerm {
				t.Fatal("the old leader still serves reads ten terms after it was cut off")
			}
			time.Sleep(time.Second)
		}
		o = <-out
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		committed := o.at
		span := st.Span
		if want := applied[nl].Add(span + foEps); !committed.Equal(want) {
			t.Errorf("the new leader's first write committed %v after it applied the horizon, want exactly span+ε = %v",
				committed.Sub(applied[nl]), span+foEps)
		}
		if !committed.After(lastLease) {
			t.Errorf("the new leader wrote %v before the old leader's last lease (+ε) ran out", lastLease.Sub(committed))
		}
		if !committed.After(lastRead) {
			t.Errorf("the old leader served a read %v after the new leader's first write", lastRead.Sub(committed))
		}
		t.Logf("old leader's last lease ran out %v after its first grant; new leader wrote %v after it", lastLease.Sub(granted), committed.Sub(lastLease))
	})
}

// TestRestartOfEveryNodeWaitsOutTheHorizon: when every node stops at once
// (a crash: the cores do not lower the horizon) and the cluster starts
// again, each node counts the newest horizon entry as applied at its
// start. A new leader that recorded the horizon itself, in the same boot
// of its machine, holds its first write until exactly the horizon passes
// on its boot clock (here, which follows the bubble's time, the persisted
// wall-clock horizon); one whose machine rebooted, or that did not record
// it, trusts neither its own record nor another node's wall clock, and
// holds the write until the horizon's span plus ε after its start. Either
// way the lease granted before the stop has run out by then.
func TestRestartOfEveryNodeWaitsOutTheHorizon(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		own, rebooted bool
	}{
		{name: "recorded by the new leader", own: true},
		{name: "recorded by the new leader, machine rebooted", own: true, rebooted: true},
		{name: "recorded by another node"},
	} {
		t.Run(tc.name, func(t *testing.T) { testRestartOfEveryNode(t, tc.own, tc.rebooted) })
	}
}

func testRestartOfEveryNode(t *testing.T, own, rebooted bool) {
	synctest.Test(t, func(t *testing.T) {
		logs := map[raft.ServerID]*raft.InmemStore{}
		c := newCluster(t, 3, func(cfg *replica.Config) {
			if logs[raft.ServerID(cfg.ID)] == nil {
				logs[raft.ServerID(cfg.ID)] = raft.NewInmemStore()
			}
			cfg.LogStore, cfg.StableStore = logs[raft.ServerID(cfg.ID)], logs[raft.ServerID(cfg.ID)]
		})
		// The machines' boot clocks follow the bubble's time.
		boot := clock.NewFakeBoot(nil)
		l := c.leader()
		recorder := c.id(l)
		oc, err := core.New(core.Config{LeaseTerm: foTerm, Epsilon: foEps, HorizonStep: foStep, Replicated: true,
			Clockname: l.Clockname(), BootFile: filepath.Join(c.dirs[recorder], "horizon.boot"), BootClock: boot,
			Logger: quiet()}, l, nobody{})
		if err != nil {
			t.Fatal(err)
		}
		oc.OpenSession(1)
		granted := time.Now()
		if _, term, err := oc.Read(1, []byte("k")); err != nil || term != foTerm {
			t.Fatalf("read: term %v, %v", term, err)
		}
		c.converge(l)
		st, err := l.State()
		if err != nil || st.Horizon.IsZero() || st.HorizonBy != l.Clockname() {
			t.Fatalf("state %+v, %v: no horizon by the leader's clock %q", st, err, l.Clockname())
		}
		time.Sleep(time.Second)
		for _, id := range ids(3) {
			c.stop(id)
		}
		oc.Close() // after the stop: it cannot lower the horizon any more
		if rebooted {
			boot.Reboot("another-boot")
		}

		restarted := time.Now()
		for _, id := range ids(3) {
			if own || id != recorder {
				c.start(id, nil)
			}
		}
		nl := c.leader()
		if own && nl != c.nodes[recorder] {
			if err := replica.RaftOf(nl).LeadershipTransferToServer(recorder, raft.ServerAddress(recorder)).Error(); err != nil {
				t.Fatal(err)
			}
			nl = c.leader()
		}
		if isRecorder := nl == c.nodes[recorder]; isRecorder != own {
			t.Fatalf("the new leader recorded the horizon: %v, want %v", isRecorder, own)
		}
		if err := nl.WaitLeading(context.Background()); err != nil {
			t.Fatal(err)
		}
		got, err := nl.State()
		if err != nil || !got.HorizonApplied.Equal(restarted) {
			t.Fatalf("the restarted leader counts the horizon as applied at %v (%v), want at its start %v", got.HorizonApplied, err, restarted)
		}
		nc, err := core.New(core.Config{LeaseTerm: foTerm, Epsilon: foEps, HorizonStep: foStep, Replicated: true,
			Clockname: nl.Clockname(), BootFile: filepath.Join(c.dirs[c.id(nl)], "horizon.boot"), BootClock: boot,
			Logger: quiet()}, nl, nobody{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		nc.OpenSession(2)
		o := <-submitPut(t, nc, 2, "k", "v")
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		want := st.Horizon
		if !own || rebooted {
			want = restarted.Add(st.Span + foEps)
		}
		if !o.at.Equal(want) {
			t.Errorf("the first write after the restart committed at %v, want %v", o.at, want)
		}
		if exp := granted.Add(foTerm + foEps); o.at.Before(exp) {
			t.Errorf("the first write after the restart committed %v before the lease granted before it ran out", exp.Sub(o.at))
		}
	})
}

// notices records the invalidations a core sends.
type notices struct{ ch chan core.SessionID }

func (n notices) Invalidate(id core.SessionID, _ []string)  { n.ch <- id }
func (notices) Recall(core.SessionID, string, uint64)       {}
func (notices) InvalidatePrefixes(core.SessionID, []string) {}

// TestHandoffWaitsForNoHorizon: a leader that hands its leases over
// before it transfers the lead lets the next one write at once. Keys with
// no lease commit at once; a handed-over lease whose client comes back to
// the new leader is invalidated there, and its acknowledgement lets the
// write go; one whose client does not come back holds writes on its key,
// and only on its key, until it runs out, counted from when the new
// leader applied the handoff.
func TestHandoffWaitsForNoHorizon(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, func(cfg *replica.Config) {
			s := raft.NewInmemStore()
			cfg.LogStore, cfg.StableStore = s, s
		})
		l := c.leader()
		oc := newCore(t, l)
		for id, client := range map[core.SessionID]uint64{1: 100, 2: 200} {
			oc.OpenSession(id)
			oc.SetClient(id, client)
		}
		oc.OpenSession(3) // gives no client identity
		for id, key := range map[core.SessionID]string{1: "a", 2: "b", 3: "c"} {
			if _, term, err := oc.Read(id, []byte(key)); err != nil || term != foTerm {
				t.Fatalf("read %s: term %v, %v", key, term, err)
			}
		}
		// Client 200 caches the listing of d/ too: a prefix lease.
		if _, term, err := oc.List(2, store.RangeOptions{Start: []byte("d/"), End: []byte("d0")}, true); err != nil || term != foTerm {
			t.Fatalf("list d/: term %v, %v", term, err)
		}
		granted := time.Now()
		time.Sleep(time.Second)

		if err := oc.HandOff(); err != nil {
			t.Fatal(err)
		}
		if _, _, err := oc.Read(1, []byte("z")); !errors.Is(err, core.ErrUnavailable) {
			t.Errorf("a read on the old leader after the handoff: %v, want ErrUnavailable", err)
		}
		var next raft.ServerID
		for _, id := range ids(3) {
			if c.nodes[id] != l {
				next = id
				break
			}
		}
		if err := replica.RaftOf(l).LeadershipTransferToServer(next, raft.ServerAddress(next)).Error(); err != nil {
			t.Fatal(err)
		}
		nl := c.leader()
		if nl != c.nodes[next] {
			t.Fatalf("the lead went elsewhere than %s", next)
		}
		oc.Close()
		// As a server does before its core starts: every committed entry
		// is applied here.
		if err := nl.WaitLeading(context.Background()); err != nil {
			t.Fatal(err)
		}
		st, err := nl.State()
		if err != nil || !st.HandedOff || len(st.Handoff) != 4 {
			t.Fatalf("the new leader's state: %+v, %v; want the four leases handed over", st, err)
		}
		applied := st.HorizonApplied
		n := notices{ch: make(chan core.SessionID, 8)}
		nc, err := core.New(core.Config{LeaseTerm: foTerm, Epsilon: foEps, HorizonStep: foStep, Replicated: true, Logger: quiet()}, nl, n)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if held := nc.Stats().WritesAllowedIn; held != 0 {
			t.Errorf("writes held for %v after a handoff", held)
		}
		start := time.Now()
		nc.OpenSession(11)
		nc.SetClient(11, 100) // client 100 comes back
		if o := <-submitPut(t, nc, 11, "z", "v"); o.Err != nil || !o.at.Equal(start) {
			t.Errorf("write of a key with no lease: %v, %v after the new leader started; want at once", o.Err, o.at.Sub(start))
		}
		// a: held by client 100, now on session 11; b: client 200, gone.
		nc.OpenSession(12)
		wa := submitPut(t, nc, 12, "a", "v")
		if got := <-n.ch; got != 11 {
			t.Fatalf("the invalidation of a went to session %d, want 11", got)
		}
		nc.Relinquish(11, []string{"a"})
		if o := <-wa; o.Err != nil || !o.at.Equal(start) {
			t.Errorf("write of a: %v, %v after the new leader started; want at once, after the holder's acknowledgement", o.Err, o.at.Sub(start))
		}
		wb, wc := submitPut(t, nc, 12, "b", "v"), submitPut(t, nc, 12, "c", "v")
		// A key created under d/, which client 200's listing covers.
		wd := submitPut(t, nc, 12, "d/new", "v")
		for key, w := range map[string]<-chan done{"b": wb, "c": wc, "d/": wd} {
			o := <-w
			var h store.HandedLease
			for _, l := range st.Handoff {
				if l.Key == key && l.Prefix == (key == "d/") {
					h = l
				}
			}
			if h.Left == 0 {
				t.Fatalf("no lease of %q handed over: %+v", key, st.Handoff)
			}
			if want := applied.Add(h.Left + foEps); o.Err != nil || !o.at.Equal(want) {
				t.Errorf("write of %s: %v at %v; want when its handed-over lease ran out, %v", key, o.Err, o.at, want)
			}
			if o.at.Before(granted.Add(foTerm + foEps)) {
				t.Errorf("write of %s committed %v before the old leader's lease ran out", key, granted.Add(foTerm+foEps).Sub(o.at))
			}
		}
	})
}

// TestHandoffWhileHoldingWaitsOutTheOldLeader: a leader that took the
// lead in a failover, and still holds writes for the leases the cut-off
// leader before it granted, hands the lead over. Those leases are not in
// its table, so it hands none over: the next leader holds its first write
// until exactly the newest horizon it applied, plus ε, and so after the
// last lease of both earlier leaders has run out.
func TestHandoffWhileHoldingWaitsOutTheOldLeader(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, func(cfg *replica.Config) {
			s := raft.NewInmemStore()
			cfg.LogStore, cfg.StableStore = s, s
		})
		first := c.leader()
		fc := newCore(t, first)
		fc.OpenSession(1)
		granted := time.Now()
		if _, term, err := fc.Read(1, []byte("j")); err != nil || term != foTerm {
			t.Fatalf("read on the first leader: term %v, %v", term, err)
		}
		c.converge(first)
		firstID := c.id(first)
		c.isolate(firstID)
		second := c.leaderOtherThan(firstID)
		sc := newCore(t, second)
		if held := sc.Stats().WritesAllowedIn; held <= 0 {
			t.Fatalf("the second leader holds no write after a failover")
		}
		// The second leader grants a lease of its own, on another key,
		// while it holds: a handoff would carry that one, but not the
		// first leader's.
		sc.OpenSession(2)
		time.Sleep(time.Second)
		secondGrant := time.Now()
		if _, term, err := sc.Read(2, []byte("k")); err != nil || term != foTerm {
			t.Fatalf("read on the second leader: term %v, %v", term, err)
		}
		if err := sc.HandOff(); err != nil {
			t.Fatal(err)
		}
		var thirdID raft.ServerID
		for id, n := range c.nodes {
			if id != firstID && n != second {
				thirdID = id
			}
		}
		if err := replica.RaftOf(second).LeadershipTransferToServer(thirdID, raft.ServerAddress(thirdID)).Error(); err != nil {
			t.Fatal(err)
		}
		third := c.nodes[thirdID]
		if err := third.WaitLeading(context.Background()); err != nil {
			t.Fatal(err)
		}
		st, err := third.State()
		if err != nil {
			t.Fatal(err)
		}
		if st.HandedOff {
			t.Errorf("the third leader's state: %+v; want no handoff", st)
		}
		tc := newCore(t, third)
		if held := tc.Stats().WritesAllowedIn; held <= 0 {
			t.Errorf("the third leader holds no write after a handoff from a leader that held them")
		}
		tc.OpenSession(3)
		o := <-submitPut(t, tc, 3, "j", "v")
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if want := st.HorizonApplied.Add(st.Span + foEps); !o.at.Equal(want) {
			t.Errorf("the third leader's first write committed at %v, want exactly the newest horizon applied plus span and ε, %v", o.at, want)
		}
		if exp := granted.Add(foTerm + foEps); o.at.Before(exp) {
			t.Errorf("the third leader wrote j %v before the first leader's lease on it ran out", exp.Sub(o.at))
		}
		if exp := secondGrant.Add(foTerm + foEps); o.at.Before(exp) {
			t.Errorf("the third leader's first write came %v before the second leader's lease ran out", exp.Sub(o.at))
		}
	})
}
