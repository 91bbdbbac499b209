package replica_test

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/replica"
)

// Inherited keys (DESIGN §13) on an in-process cluster under
// testing/synctest, with real badger databases: a leader that inherits a
// write of an earlier term records the keys it holds with its horizon, so
// that a later leader holds them too although it learnt of the write only
// from the log, after a restart or from a snapshot.

// TestInheritedHoldsSurviveRestartAndSnapshot: the old leader appends a
// write of k and is cut off at once, before any follower learns that the
// write committed; the next leader applies it in its own term and holds
// k. Then, inside one span of the old leader's horizon, the next
// leader after it is a node that knows of the write only from its
// database: every node restarted, or the node restored a snapshot. It
// holds reads of k until the hold recorded with the horizon has run out,
// counted from when it applied that horizon, and so past the old leader's
// horizon; other keys are read at once.
func TestInheritedHoldsSurviveRestartAndSnapshot(t *testing.T) {
	t.Parallel()
	for _, snapshot := range []bool{false, true} {
		name := "restart of every node"
		if snapshot {
			name = "snapshot installed"
		}
		t.Run(name, func(t *testing.T) { testInheritedHolds(t, snapshot) })
	}
}

func testInheritedHolds(t *testing.T, snapshot bool) {
	synctest.Test(t, func(t *testing.T) {
		nodes := 3
		if snapshot {
			nodes = 5 // a quorum without the cut-off leader and the node that lags
		}
		logs := map[raft.ServerID]*raft.InmemStore{}
		c := newCluster(t, nodes, func(cfg *replica.Config) {
			id := raft.ServerID(cfg.ID)
			if logs[id] == nil {
				logs[id] = raft.NewInmemStore()
			}
			cfg.LogStore, cfg.StableStore = logs[id], logs[id]
			cfg.TrailingLogs = 4 // a snapshot drops the entries a lagging node needs
		})
		old := c.leader()
		oldID := c.id(old)
		var lag raft.ServerID
		if snapshot {
			for _, id := range ids(nodes) {
				if id != oldID {
					lag = id
					break
				}
			}
			c.stop(lag) // it misses the write and the hold
		}
		oc := newCore(t, old)
		oc.OpenSession(1)
		if _, term, err := oc.Read(1, []byte("x")); err != nil || term != foTerm {
			t.Fatalf("read on the old leader: term %v, %v", term, err)
		}
		c.converge(old)
		ost, err := old.State()
		if err != nil || ost.Horizon.IsZero() {
			t.Fatalf("the old leader's state: %+v, %v; want a horizon", ost, err)
		}
		// The write: the old leader is cut off as soon as it is committed,
		// before the followers learn so, and the next leader applies it in
		// its own term, as it does a write whose commit the old leader
		// could not see.
		mustApply(t, old, put("k", "new"))
		c.isolate(oldID)
		nl := c.leaderOtherThan(oldID)
		if err := nl.WaitLeading(t.Context()); err != nil {
			t.Fatal(err)
		}
		inh := nl.Inherited()
		if _, ok := inh["k"]; !ok {
			t.Fatalf("the next leader inherited %v, not k: the test did not set up an inherited write", inh)
		}
		nc, err := core.New(core.Config{LeaseTerm: foTerm, Epsilon: foEps, HorizonStep: foStep, Replicated: true, Inherited: inh, Logger: quiet()}, nl, nobody{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		c.stop(oldID)
		oc.Close()
		c.converge(nl)

		var next *replica.Node
		if snapshot {
			for i := range 10 {
				mustApply(t, nl, put(fmt.Sprintf("f%d", i), "v"))
			}
			if err := replica.RaftOf(nl).Snapshot().Error(); err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			c.start(lag, nil)
			c.converge(nl)
			snaps, err := raft.NewFileSnapshotStore(filepath.Join(c.dirs[lag], layout.RaftDir), 2, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if list, err := snaps.List(); err != nil || len(list) == 0 {
				t.Fatalf("the lagging node holds no snapshot (%v): it was not caught up by one", err)
			}
			if err := replica.RaftOf(nl).LeadershipTransferToServer(lag, raft.ServerAddress(lag)).Error(); err != nil {
				t.Fatal(err)
			}
			if next = c.leader(); next != c.nodes[lag] {
				t.Fatalf("the lead went elsewhere than %s", lag)
			}
		} else {
			running := make([]raft.ServerID, 0, len(c.nodes))
			for id := range c.nodes {
				running = append(running, id)
			}
			for _, id := range running {
				c.stop(id)
			}
			for _, id := range running {
				c.start(id, nil)
			}
			next = c.leader()
		}
		if err := next.WaitLeading(t.Context()); err != nil {
			t.Fatal(err)
		}
		if inh := next.Inherited(); len(inh) != 0 {
			t.Fatalf("the last leader noted %v itself: the test must show a leader that did not", inh)
		}
		lc, err := core.New(core.Config{LeaseTerm: foTerm, Epsilon: foEps, HorizonStep: foStep, Replicated: true, Inherited: next.Inherited(), Logger: quiet()}, next, nobody{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lc.Close() })
		lc.OpenSession(2)
		if _, _, err := lc.Read(2, []byte("x")); err != nil {
			t.Errorf("read of a key not held: %v", err)
		}
		if !time.Now().Before(ost.Horizon) {
			t.Fatalf("the last leader started %v after the old leader's horizon: the test took too long", time.Since(ost.Horizon))
		}
		if _, _, err := lc.Read(2, []byte("k")); !errors.Is(err, core.ErrUnavailable) {
			t.Fatalf("read of k on the last leader, inside the old leader's horizon: %v, want ErrUnavailable", err)
		}
		// How long: the hold recorded with the newest horizon, counted
		// from when this node applied it.
		st, err := next.State()
		if err != nil {
			t.Fatal(err)
		}
		var left time.Duration = -1
		for _, h := range st.Holds {
			if h.Key == "k" {
				left = h.Left
			}
		}
		if left < 0 {
			t.Fatalf("the state records holds %+v, not k", st.Holds)
		}
		release := st.HorizonApplied.Add(left + foEps)
		if release.Before(ost.Horizon) {
			t.Errorf("k is held until %v, before the old leader's horizon %v", release, ost.Horizon)
		}
		t.Logf("the last leader started %v before the old leader's horizon, and holds k %v past it", time.Until(ost.Horizon), release.Sub(ost.Horizon))
		time.Sleep(time.Until(release) - time.Nanosecond)
		if _, _, err := lc.Read(2, []byte("k")); !errors.Is(err, core.ErrUnavailable) {
			t.Errorf("read of k just before the hold ran out: %v, want ErrUnavailable", err)
		}
		time.Sleep(time.Nanosecond)
		if rec, _, err := lc.Read(2, []byte("k")); err != nil || string(rec.Value) != "new" {
			t.Errorf("read of k once the hold ran out: %q, %v; want the inherited write's value", rec.Value, err)
		}
	})
}

// TestDeposedLeaderRefusesUnknownWrites: a leader cut off from its peers
// appends a write, which fails once it steps down, with an outcome it
// cannot know (another leader may commit it). From then on its core
// refuses reads of that key, though it still serves other keys under its
// horizon.
func TestDeposedLeaderRefusesUnknownWrites(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, func(cfg *replica.Config) {
			s := raft.NewInmemStore()
			cfg.LogStore, cfg.StableStore = s, s
		})
		old := c.leader()
		oc := newCore(t, old)
		oc.OpenSession(1)
		oc.OpenSession(2)
		for _, k := range []string{"k", "x"} {
			if o := <-submitPut(t, oc, 1, k, "old"); o.Err != nil {
				t.Fatal(o.Err)
			}
		}
		if _, term, err := oc.Read(1, []byte("x")); err != nil || term != foTerm {
			t.Fatalf("read: term %v, %v", term, err)
		}
		c.isolate(c.id(old))
		o := <-submitPut(t, oc, 2, "k", "new")
		if !errors.Is(o.Err, core.ErrNotLeader) {
			t.Fatalf("the cut-off leader's write: %v, want ErrNotLeader", o.Err)
		}
		if rec, term, err := oc.Read(1, []byte("k")); !errors.Is(err, core.ErrUnavailable) {
			t.Errorf("read of the key of the write of unknown outcome: %q, term %v, %v; want ErrUnavailable", rec.Value, term, err)
		}
		if rec, _, err := oc.Read(1, []byte("x")); err != nil || string(rec.Value) != "old" {
			t.Errorf("read of another key under the horizon: %q, %v", rec.Value, err)
		}
	})
}
