package replica_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// waitLimit bounds every wait for the cluster: an election, replication,
// a snapshot install. A healthy one takes milliseconds.
const waitLimit = 10 * time.Second

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// cluster is a set of nodes on raft's in-memory transport, each with its
// log and state on disk.
type cluster struct {
	t      *testing.T
	dirs   map[raft.ServerID]string
	nodes  map[raft.ServerID]*replica.Node
	trans  map[raft.ServerID]*raft.InmemTransport
	change func(*replica.Config)
}

func ids(n int) []raft.ServerID {
	out := make([]raft.ServerID, n)
	for i := range out {
		out[i] = raft.ServerID(fmt.Sprintf("n%d", i+1))
	}
	return out
}

// newCluster starts n nodes that bootstrap one cluster. change, if not nil,
// adjusts every node's config.
func newCluster(t *testing.T, n int, change func(*replica.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, dirs: map[raft.ServerID]string{}, nodes: map[raft.ServerID]*replica.Node{},
		trans: map[raft.ServerID]*raft.InmemTransport{}, change: change}
	var servers []replica.Member
	for _, id := range ids(n) {
		c.dirs[id] = t.TempDir()
		servers = append(servers, replica.Member{ID: string(id), Address: string(id)})
	}
	for _, id := range ids(n) {
		c.start(id, servers)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.Close()
		}
	})
	return c
}

// newRealTimeCluster is newCluster for tests that run on the real clock.
// Raft's timeouts are relaxed there: on the in-memory transport a follower
// takes heartbeats in turn with entries, so a 1 MiB entry under -race on a
// busy machine can hold one past the LAN lease timeout, and the leader
// would step down in the middle of a test about something else.
func newRealTimeCluster(t *testing.T, n int, change func(*replica.Config)) *cluster {
	t.Helper()
	return newCluster(t, n, func(cfg *replica.Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout = time.Second, time.Second
		cfg.LeaderLeaseTimeout = 500 * time.Millisecond
		if change != nil {
			change(cfg)
		}
	})
}

// start opens node id on its folder with a fresh transport connected to
// every other running node.
func (c *cluster) start(id raft.ServerID, bootstrap []replica.Member) *replica.Node {
	c.t.Helper()
	n := c.open(id, bootstrap)
	c.connect(id)
	return n
}

// open opens node id on a transport of its own that no other node reaches
// yet (connect).
func (c *cluster) open(id raft.ServerID, bootstrap []replica.Member) *replica.Node {
	c.t.Helper()
	_, tr := raft.NewInmemTransport(raft.ServerAddress(id))
	c.trans[id] = tr
	cfg := replica.Config{Dir: c.dirs[id], ID: string(id), Transport: tr, Bootstrap: bootstrap, Logger: quiet()}
	if c.change != nil {
		c.change(&cfg)
	}
	n, err := replica.Open(cfg)
	if err != nil {
		c.t.Fatalf("open %s: %v", id, err)
	}
	c.nodes[id] = n
	return n
}

// connect connects node id's transport with the others', both ways.
func (c *cluster) connect(id raft.ServerID) {
	tr := c.trans[id]
	for other, otr := range c.trans {
		if other == id {
			continue
		}
		tr.Connect(raft.ServerAddress(other), otr)
		otr.Connect(raft.ServerAddress(id), tr)
	}
}

// stop closes node id and cuts it off.
func (c *cluster) stop(id raft.ServerID) {
	c.t.Helper()
	for other, otr := range c.trans {
		if other != id {
			otr.Disconnect(raft.ServerAddress(id))
		}
	}
	if err := c.nodes[id].Close(); err != nil {
		c.t.Errorf("close %s: %v", id, err)
	}
	delete(c.nodes, id)
	delete(c.trans, id)
}

// leader waits for a node to lead and returns it.
func (c *cluster) leader() *replica.Node {
	c.t.Helper()
	var l *replica.Node
	wait.For(c.t, waitLimit, "a leader", func() bool {
		for _, n := range c.nodes {
			if n.IsLeader() {
				l = n
				return true
			}
		}
		return false
	})
	return l
}

// converge waits until every running node has applied what the leader has.
func (c *cluster) converge(leader *replica.Node) {
	c.t.Helper()
	want := leader.AppliedIndex()
	wait.For(c.t, waitLimit, fmt.Sprintf("every node to apply index %d", want), func() bool {
		for _, n := range c.nodes {
			if n.AppliedIndex() < want {
				return false
			}
		}
		return true
	})
}

func put(key, value string) store.Command {
	return store.Command{Op: store.OpPut, Key: []byte(key), Value: []byte(value)}
}

func mustApply(t *testing.T, n *replica.Node, cmds ...store.Command) []store.Result {
	t.Helper()
	rs, err := n.Apply(cmds)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(rs) != len(cmds) {
		t.Fatalf("Apply returned %d results for %d commands", len(rs), len(cmds))
	}
	return rs
}

// wantSame checks that every running node holds the same state and the
// same records of keys as the leader.
func (c *cluster) wantSame(leader *replica.Node, keys ...string) {
	c.t.Helper()
	want, err := leader.State()
	if err != nil {
		c.t.Fatal(err)
	}
	for id, n := range c.nodes {
		st, err := n.State()
		if err != nil {
			c.t.Fatal(err)
		}
		if st.Revision != want.Revision || st.Fence != want.Fence || !st.Horizon.Equal(want.Horizon) || len(st.WriteLeases) != len(want.WriteLeases) {
			c.t.Errorf("%s: state %+v, leader's %+v", id, st, want)
		}
		for _, k := range keys {
			a, _ := leader.Get([]byte(k))
			b, err := n.Get([]byte(k))
			if err != nil || string(a.Value) != string(b.Value) || a.Version != b.Version || a.Found != b.Found {
				c.t.Errorf("%s: %q is %+v (%v), leader's %+v", id, k, b, err, a)
			}
		}
		a, _ := leader.Range(store.RangeOptions{KeysOnly: true})
		b, err := n.Range(store.RangeOptions{KeysOnly: true})
		if err != nil || b.Revision != want.Revision || !reflect.DeepEqual(a, b) {
			c.t.Errorf("%s: range %+v (%v), leader's %+v at revision %d", id, b, err, a, want.Revision)
		}
	}
}

// TestReplicates: a three-node cluster elects a leader; the leader's
// batches are committed, applied on every node with the same results, and
// split into entries when large; a follower cannot append.
func TestReplicates(t *testing.T) {
	t.Parallel()
	c := newRealTimeCluster(t, 3, func(cfg *replica.Config) { cfg.MaxEntryBytes = 4 << 10 })
	l := c.leader()
	rs := mustApply(t, l, put("a", "1"), put("b", "2"),
		store.Command{Op: store.OpCAS, Key: []byte("a"), Expect: 1, Value: []byte("3")},
		store.Command{Op: store.OpCAS, Key: []byte("a"), Expect: 1, Value: []byte("4")},
		store.Command{Op: store.OpGrantWriteLease, Key: []byte("w"), Session: 7, Term: time.Second},
		store.Command{Op: store.OpSetHorizon, Horizon: time.Unix(2000000000, 0), Span: time.Minute})
	if rs[0].Version != 1 || rs[1].Version != 2 || rs[2].Version != 3 || rs[3].Err == nil || rs[4].Token != 1 {
		t.Errorf("results %+v", rs)
	}
	// 40 commands of 1 KiB, in entries of 4 KiB.
	var big []store.Command
	for i := range 40 {
		big = append(big, put(fmt.Sprintf("big%d", i), string(make([]byte, 1<<10))))
	}
	before := l.AppliedIndex()
	rs = mustApply(t, l, big...)
	for i, r := range rs {
		if r.Version != uint64(4+i) {
			t.Fatalf("command %d of the large batch: version %d, want %d", i, r.Version, 4+i)
		}
	}
	// As many commands to an entry as their costs (store.Cost) fit in 4 KiB.
	per := max((4<<10)/store.Cost(big[0]), 1)
	want := uint64((len(big) + per - 1) / per)
	if entries := l.AppliedIndex() - before; entries+2 < want || entries > want+4 {
		t.Errorf("40 KiB in %d entries, want about %d of %d commands (4 KiB)", entries, want, per)
	}
	c.converge(l)
	c.wantSame(l, "a", "b", "w", "big0", "big39")
	for id, n := range c.nodes {
		if n == l {
			continue
		}
		if _, err := n.Apply([]store.Command{put("x", "y")}); err == nil {
			t.Errorf("follower %s appended", id)
		}
	}
}

// TestRestartAppliesOnlyNewEntries: a node that restarts keeps its state,
// applies only what it missed, and the counters agree with the others;
// a one-node restart goes on from its own state.
func TestRestartAppliesOnlyNewEntries(t *testing.T) {
	t.Parallel()
	c := newRealTimeCluster(t, 3, nil)
	l := c.leader()
	for i := range 20 {
		mustApply(t, l, put(fmt.Sprintf("k%d", i), "v"))
	}
	c.converge(l)
	var follower raft.ServerID
	for id, n := range c.nodes {
		if n != l {
			follower = id
		}
	}
	old := c.nodes[follower]
	c.stop(follower)
	// Read once the node is closed: until then it may still apply
	// entries that were on their way.
	held := old.AppliedIndex()
	for i := range 5 {
		mustApply(t, l, put(fmt.Sprintf("late%d", i), "v"))
	}
	// Cut off until its starting index is read: the leader would send it
	// the late entries at once.
	n := c.open(follower, nil)
	if got := n.AppliedIndex(); got != held {
		t.Errorf("restarted node starts at applied index %d, want %d from its database", got, held)
	}
	c.connect(follower)
	c.converge(l)
	c.wantSame(l, "k0", "k19", "late0", "late4")
}

// TestClockname: each node's clock name is its own, and a restart of the
// node, which reads its log again, keeps it.
func TestClockname(t *testing.T) {
	t.Parallel()
	c := newRealTimeCluster(t, 3, nil)
	names := map[string]raft.ServerID{}
	for id, n := range c.nodes {
		name := n.Clockname()
		if name == "" {
			t.Fatalf("%s has no clock name", id)
		}
		if other, ok := names[name]; ok {
			t.Fatalf("%s and %s share the clock name %q", id, other, name)
		}
		names[name] = id
	}
	id := ids(3)[0]
	before := c.nodes[id].Clockname()
	c.stop(id)
	if got := c.start(id, nil).Clockname(); got != before {
		t.Errorf("clock name %q after a restart, want %q", got, before)
	}
}

// TestLaggingFollowerGetsSnapshot: a follower that missed entries the
// leader has compacted away is caught up with a snapshot of the leader's
// state, TTL leases and their owners included. The logs are raft's in-memory store, kept across a node's restart:
// the WAL drops compacted entries only a segment at a time, so a leader on
// it may still hold them and catch the follower up from its log instead.
func TestLaggingFollowerGetsSnapshot(t *testing.T) {
	t.Parallel()
	logs := map[raft.ServerID]*raft.InmemStore{}
	c := newRealTimeCluster(t, 3, func(cfg *replica.Config) {
		cfg.SnapshotThreshold, cfg.TrailingLogs = 16, 4
		if logs[raft.ServerID(cfg.ID)] == nil {
			logs[raft.ServerID(cfg.ID)] = raft.NewInmemStore()
		}
		cfg.LogStore, cfg.StableStore = logs[raft.ServerID(cfg.ID)], logs[raft.ServerID(cfg.ID)]
	})
	l := c.leader()
	mustApply(t, l, put("first", "1"))
	c.converge(l)
	var follower raft.ServerID
	for id, n := range c.nodes {
		if n != l {
			follower = id
		}
	}
	c.stop(follower)
	lease := mustApply(t, l, store.Command{Op: store.OpGrantTTL, Term: time.Minute, Owner: 0xa11ce})[0].Lease
	for i := range 100 {
		mustApply(t, l, put(fmt.Sprintf("k%d", i%10), fmt.Sprint(i)))
	}
	if err := replica.RaftOf(l).Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	n := c.start(follower, nil)
	c.converge(l)
	c.wantSame(l, "first", "k0", "k9")
	if n.AppliedIndex() != l.AppliedIndex() {
		t.Errorf("follower at %d, leader at %d", n.AppliedIndex(), l.AppliedIndex())
	}
	// It was caught up by a snapshot, which its own snapshot store keeps.
	snaps, err := raft.NewFileSnapshotStore(filepath.Join(c.dirs[follower], layout.RaftDir), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if list, err := snaps.List(); err != nil || len(list) == 0 {
		t.Errorf("the follower holds no snapshot (%v): it was not caught up by one", err)
	}
	if ttl, _, ok, err := n.TTLLease(lease); err != nil || !ok || ttl.Owner != 0xa11ce {
		t.Errorf("the follower's TTL lease %d: %+v, %v, %v; want owner 0xa11ce", lease, ttl, ok, err)
	}
	// It goes on applying entries after the snapshot.
	mustApply(t, l, put("after", "x"))
	c.converge(l)
	c.wantSame(l, "after")
}

// TestSingleNode: a node with no Bootstrap is a cluster of itself, leads
// at once, and after a restart goes on from its state with its log on disk.
func TestSingleNode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := func() *replica.Node {
		_, tr := raft.NewInmemTransport("solo")
		n, err := replica.Open(replica.Config{Dir: dir, ID: "solo", Transport: tr, Logger: quiet()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := n.WaitLeading(ctx); err != nil {
			t.Fatalf("the node alone does not lead: %v", err)
		}
		return n
	}
	n := open()
	rs := mustApply(t, n, put("a", "1"), store.Command{Op: store.OpGrantWriteLease, Key: []byte("a"), Term: time.Second})
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = open()
	defer n.Close()
	if rec, err := n.Get([]byte("a")); err != nil || string(rec.Value) != "1" || rec.Version != rs[0].Version {
		t.Fatalf("after restart: %+v, %v", rec, err)
	}
	rs2 := mustApply(t, n, put("b", "2"), store.Command{Op: store.OpGrantWriteLease, Key: []byte("b"), Term: time.Second})
	if rs2[0].Version != 2 || rs2[1].Token != rs[1].Token+1 {
		t.Errorf("counters after restart: %+v", rs2)
	}
}

// TestLargeValueReplicates: a value of 1 MiB, the server's default limit
// and twice raft's suggested entry size, goes in an entry of its own, is
// committed and applied on every node, and the commands beside it keep
// their order.
func TestLargeValueReplicates(t *testing.T) {
	t.Parallel()
	c := newRealTimeCluster(t, 3, nil)
	l := c.leader()
	big := strings.Repeat("x", 1<<20)
	rs := mustApply(t, l, put("a", "1"), put("big", big), put("b", "2"))
	if rs[0].Version != 1 || rs[1].Version != 2 || rs[2].Version != 3 {
		t.Errorf("results %+v", rs)
	}
	c.converge(l)
	c.wantSame(l, "a", "big", "b")
	for id, n := range c.nodes {
		if rec, err := n.Get([]byte("big")); err != nil || len(rec.Value) != 1<<20 {
			t.Errorf("%s: the large value has %d bytes, %v", id, len(rec.Value), err)
		}
	}
}

// TestOpenRefusesBadTimeouts: raft timeouts past their bounds, or that
// raft would refuse or misuse together, are refused by Open before it
// opens anything, with an error naming the field.
func TestOpenRefusesBadTimeouts(t *testing.T) {
	for _, tc := range []struct {
		cfg  replica.Config
		want string
	}{
		{replica.Config{HeartbeatTimeout: time.Second}, "ElectionTimeout 200ms is shorter than HeartbeatTimeout 1s"},
		{replica.Config{LeaderLeaseTimeout: time.Second}, "LeaderLeaseTimeout 1s is longer than HeartbeatTimeout 200ms"},
		{replica.Config{CommitTimeout: time.Second}, "CommitTimeout 1s is longer than HeartbeatTimeout 200ms"},
		{replica.Config{ElectionTimeout: 2562047 * time.Hour}, "ElectionTimeout 2562047h0m0s is outside 5ms..1m0s"},
		{replica.Config{HeartbeatTimeout: -time.Second}, "HeartbeatTimeout -1s is outside 5ms..1m0s"},
		{replica.Config{ApplyTimeout: time.Hour}, "ApplyTimeout 1h0m0s is outside 1ms..10m0s"},
		{replica.Config{SnapshotInterval: time.Millisecond}, "SnapshotInterval 1ms is outside 5ms..24h0m0s"},
	} {
		dir := filepath.Join(t.TempDir(), "data")
		_, tr := raft.NewInmemTransport("solo")
		tc.cfg.Dir, tc.cfg.ID, tc.cfg.Transport, tc.cfg.Logger = dir, "solo", tr, quiet()
		if _, err := replica.Open(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open: %v, want an error containing %q", err, tc.want)
		}
		if _, err := os.Stat(dir); err == nil {
			t.Errorf("Open with a bad timeout (%s) made the data folder", tc.want)
		}
	}
	largest := replica.Config{HeartbeatTimeout: replica.MaxRaftTimeout, ElectionTimeout: replica.MaxRaftTimeout,
		LeaderLeaseTimeout: replica.MaxRaftTimeout, CommitTimeout: replica.MaxRaftTimeout,
		ApplyTimeout: replica.MaxApplyTimeout, SnapshotInterval: replica.MaxSnapshotInterval}
	if err := largest.Validate(); err != nil {
		t.Errorf("the largest timeouts: %v", err)
	}
}

// TestOpenClosesThePeerListener: the node owns its peer port's listener
// from Open on, so an Open that fails, here on a config it refuses, closes
// it: the port is free for the next try.
func TestOpenClosesThePeerListener(t *testing.T) {
	for name, cfg := range map[string]replica.Config{
		"no ID":           {Dir: t.TempDir()},
		"a bad timeout":   {Dir: t.TempDir(), ID: "n1", HeartbeatTimeout: time.Hour},
		"a bad advertise": {Dir: t.TempDir(), ID: "n1"},
	} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		adv := ln.Addr().String()
		if name == "a bad advertise" {
			adv = "no port"
		}
		cfg.Network = &replica.Network{Listener: ln, Advertise: adv}
		if _, err := replica.Open(cfg); err == nil {
			t.Fatalf("%s: Open succeeded", name)
		}
		if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s: the listener is open after Open failed: Accept = %v", name, err)
		}
	}
}
