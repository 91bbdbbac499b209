package replica_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/replica"
)

// logBuffer collects the logs of the nodes of a test.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestFollowerRefuses: a follower whose Config.Refuse says no appends
// nothing the leader sends and installs no snapshot, while the leader
// commits with the other follower; it keeps its log as it was, stays a
// follower, and once it takes entries again catches up, through a
// snapshot, to the same state as the others.
func TestFollowerRefuses(t *testing.T) {
	t.Parallel()
	var refusing sync.Map // raft.ServerID → *atomic.Bool
	var refusals atomic.Int64
	logs := map[raft.ServerID]*raft.InmemStore{}
	out := &logBuffer{}
	c := newRealTimeCluster(t, 3, func(cfg *replica.Config) {
		cfg.SnapshotThreshold, cfg.TrailingLogs = 16, 4
		id := raft.ServerID(cfg.ID)
		if logs[id] == nil {
			logs[id] = raft.NewInmemStore()
		}
		cfg.LogStore, cfg.StableStore = logs[id], logs[id]
		cfg.Logger = slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}))
		on, _ := refusing.LoadOrStore(id, &atomic.Bool{})
		cfg.Refuse = func() error {
			if on.(*atomic.Bool).Load() {
				refusals.Add(1)
				return errors.New("NOSPACE: test")
			}
			return nil
		}
	})
	l := c.leader()
	mustApply(t, l, put("first", "1"))
	c.converge(l)
	var f *replica.Node
	var fid raft.ServerID
	for id, n := range c.nodes {
		if n != l {
			f, fid = n, id
		}
	}
	on, _ := refusing.Load(fid)
	on.(*atomic.Bool).Store(true)
	applied := f.AppliedIndex()
	last, err := logs[fid].LastIndex()
	if err != nil {
		t.Fatal(err)
	}

	// The leader commits without it.
	for i := range 10 {
		mustApply(t, l, put(fmt.Sprintf("k%d", i), fmt.Sprint(i)))
	}
	wait.For(t, waitLimit, "the follower to refuse entries", func() bool { return refusals.Load() > 0 })
	if got := f.AppliedIndex(); got != applied {
		t.Errorf("the refusing follower applied up to %d, from %d", got, applied)
	}
	if got, _ := logs[fid].LastIndex(); got != last {
		t.Errorf("the refusing follower's log ends at %d, was %d", got, last)
	}

	// The leader compacts its log past the follower: it must send a
	// snapshot, which the follower refuses too.
	if err := replica.RaftOf(l).Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	for i := range 40 {
		mustApply(t, l, put(fmt.Sprintf("k%d", i%10), fmt.Sprint(i)))
	}
	if err := replica.RaftOf(l).Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	wait.For(t, waitLimit, "the follower to refuse a snapshot", func() bool {
		return strings.Contains(out.String(), "failed to create snapshot to install")
	})
	if got := f.AppliedIndex(); got != applied {
		t.Errorf("the refusing follower applied up to %d, from %d", got, applied)
	}
	if first, _ := logs[fid].FirstIndex(); first == 0 {
		t.Errorf("the refusing follower's log is empty")
	}
	snaps, err := raft.NewFileSnapshotStore(filepath.Join(c.dirs[fid], layout.RaftDir), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if list, _ := snaps.List(); len(list) != 0 {
		t.Errorf("the refusing follower wrote %d snapshots", len(list))
	}
	if !l.IsLeader() || f.IsLeader() {
		t.Errorf("the lead moved while a follower refused")
	}

	on.(*atomic.Bool).Store(false)
	mustApply(t, l, put("after", "x"))
	c.converge(l)
	c.wantSame(l, "first", "k0", "k9", "after")
	if list, _ := snaps.List(); len(list) == 0 {
		t.Errorf("the follower caught up without the leader's snapshot")
	}
}
