package node

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/core"
	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// host is a Host that records what the node tells it.
type host struct {
	mu      sync.Mutex
	dropped []*core.Core
	stopped []error
}

func (*host) Invalidate(core.SessionID, []string)         {}
func (*host) Recall(core.SessionID, string, uint64)       {}
func (*host) InvalidatePrefixes(core.SessionID, []string) {}
func (*host) ClientAddr() string                          { return "127.0.0.1:7400" }
func (h *host) Drop(c *core.Core, _ error) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.dropped = append(h.dropped, c)
	return 0
}
func (h *host) Stop(why error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = append(h.stopped, why)
}

func coreConfig(dir string) core.Config {
	return core.Config{LeaseTerm: time.Second, HorizonStep: time.Second, BootFile: dir + "/boot"}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// open makes the node of cfg and opens it with h, as package server does.
func open(cfg Config, h Host) (*Node, error) {
	n, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := n.Open(h); err != nil {
		return nil, err
	}
	return n, nil
}

// closeCounter is a store that counts its Close calls.
type closeCounter struct {
	*store.Memory
	mu     sync.Mutex
	closed int
}

func (c *closeCounter) Close() error {
	c.mu.Lock()
	c.closed++
	c.mu.Unlock()
	return c.Memory.Close()
}

// TestNodeOverStore: a node over a given store leads from Open on, with a
// core that serves, reports itself as the leader of a cluster of one,
// takes no snapshot, and closes the store once, in Close, after its core.
func TestNodeOverStore(t *testing.T) {
	dir := t.TempDir()
	st := &closeCounter{Memory: store.NewMemory()}
	h := &host{}
	n, err := open(Config{Dir: dir, Core: coreConfig(dir), Store: st, Logger: quiet()}, h)
	if err != nil {
		t.Fatal(err)
	}
	n.Start()
	c := n.Core()
	if c == nil || !n.Leads() {
		t.Fatal("a node alone does not serve after Open")
	}
	if _, _, err := c.Read(1, []byte("k")); err != nil {
		t.Fatalf("read through the node's core: %v", err)
	}
	if st := n.Status(); st.Name != soloName || st.Role != replica.RoleLeader || st.Leader != soloName || st.LeaderAddr != "127.0.0.1:7400" {
		t.Fatalf("status of a node alone: %+v", st)
	}
	if ms, err := n.Members(); err != nil || len(ms) != 1 || !ms[0].Leads || !ms[0].Voter {
		t.Fatalf("members of a node alone: %+v, %v", ms, err)
	}
	if _, err := n.Snapshot(); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("snapshot of a node over a given store: %v, want ErrInvalidArgument", err)
	}
	if err := n.AddMember(context.Background(), "n2", "127.0.0.1:1"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("add a member to a node alone: %v, want ErrInvalidArgument", err)
	}
	if err := n.Health(); err != nil {
		t.Fatalf("health of a node alone: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if st.closed != 1 {
		t.Fatalf("the store was closed %d times, want once, by the node", st.closed)
	}
	if n.Core() != nil {
		t.Fatal("a closed node still has a core")
	}
	if len(h.dropped) != 0 || len(h.stopped) != 0 {
		t.Fatalf("a node alone dropped %d cores and stopped %d times", len(h.dropped), len(h.stopped))
	}
}

// TestNodeAloneOnReplica: a node alone keeps its state in a replica in its
// data folder, serves at once, takes a snapshot of what it wrote, and
// after Close and a new Open serves the same state; a second node on the
// same folder is refused while the first runs.
func TestNodeAloneOnReplica(t *testing.T) {
	dir := t.TempDir()
	reopen := func() *Node {
		t.Helper()
		n, err := open(Config{Dir: dir, Core: coreConfig(dir), QuotaBytes: -1, ReserveBytes: -1, Logger: quiet()}, &host{})
		if err != nil {
			t.Fatal(err)
		}
		n.Start()
		return n
	}
	n := reopen()
	if _, err := New(Config{Dir: dir, Core: coreConfig(dir), QuotaBytes: -1, ReserveBytes: -1, Logger: quiet()}); err == nil {
		t.Fatal("a second node took a data folder in use")
	}
	done := make(chan error, 1)
	req := &core.Request{Session: 1, Key: []byte("k"), Value: []byte("v"), Op: store.OpPut,
		Done: func(o core.Outcome) { done <- o.Err }}
	n.Core().OpenSession(1)
	if err := n.Core().Submit(req); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("put: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("put did not commit")
	}
	snap, err := n.Snapshot()
	if err != nil {
		t.Fatalf("snapshot of a node alone: %v", err)
	}
	snap.Release()
	if rs, ok := n.RaftStatus(); !ok || rs.Role != replica.RoleLeader || rs.AppliedIndex == 0 {
		t.Fatalf("raft status of a node alone: %+v, %v", rs, ok)
	}
	if used, ok := n.DiskUsed(); !ok || used <= 0 {
		t.Fatalf("disk used: %d, %v", used, ok)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	n = reopen()
	defer n.Close()
	rec, _, err := n.Core().Read(2, []byte("k"))
	if err != nil || !rec.Found || string(rec.Value) != "v" {
		t.Fatalf("read after a restart: %+v, %v", rec, err)
	}
}

// TestNodeClosesWhatItOwns: from New on, the node owns the peer listener
// and a given store: a node closed before Open (its host could not bind its
// socket) closes them, and so does a New that fails (here on a data folder
// another node holds).
func TestNodeClosesWhatItOwns(t *testing.T) {
	dir := t.TempDir()
	cluster := func() (*Cluster, net.Listener) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return &Cluster{Name: "n1", PeerAddr: ln.Addr().String(), PeerListener: ln}, ln
	}
	cl, ln := cluster()
	n, err := New(Config{Dir: dir, Core: coreConfig(dir), Cluster: cl, QuotaBytes: -1, ReserveBytes: -1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	cl2, ln2 := cluster()
	if _, err := New(Config{Dir: dir, Core: coreConfig(dir), Cluster: cl2, QuotaBytes: -1, ReserveBytes: -1, Logger: quiet()}); err == nil {
		t.Fatal("a second node took a data folder in use")
	}
	if _, err := ln2.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the peer listener of a New that failed is open: Accept = %v", err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("the peer listener of a node closed before Open is open: Accept = %v", err)
	}
	st := &closeCounter{Memory: store.NewMemory()}
	n, err = New(Config{Dir: t.TempDir(), Core: coreConfig(dir), Store: st, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	if st.closed != 1 {
		t.Errorf("a node closed before Open closed its store %d times, want once", st.closed)
	}
}
