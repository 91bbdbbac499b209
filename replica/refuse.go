// This file lets a follower short of disk space refuse what its leader
// sends (Config.Refuse): a log that appends nothing and a snapshot store
// that writes nothing while it refuses, both as raft sees them.

package replica

import (
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// refusal decides, for the log and the snapshot store of one node, whether
// they refuse to grow now: while the node does not lead and Config.Refuse
// says so. Its methods are called from raft's goroutines.
type refusal struct {
	refuse func() error
	// follows reports whether the node does not lead; nil until raft
	// runs.
	follows atomic.Pointer[func() bool]
}

// check returns why the node refuses to write to its log or its snapshots
// now, nil if it does not. A node that leads never refuses (its own
// writes are refused before they reach raft: DESIGN §7), and neither does
// one whose raft has not started: its start only reads.
func (r *refusal) check() error {
	follows := r.follows.Load()
	if follows == nil || !(*follows)() {
		return nil
	}
	if err := r.refuse(); err != nil {
		return fmt.Errorf("replica: this follower refuses the leader's entries: %w", err)
	}
	return nil
}

// started tells r that raft runs.
func (r *refusal) started(rf *raft.Raft) {
	follows := func() bool { return rf.State() != raft.Leader }
	r.follows.Store(&follows)
}

// refusingLog is the raft.LogStore of a node with Config.Refuse: while
// the node refuses, it appends nothing and drops no entry at the log's
// tail, so raft rejects the leader's AppendEntries, which the leader sends
// again later, and the log keeps every entry it had. Dropping entries at
// the head (a compaction after a snapshot) goes on: it frees space.
type refusingLog struct {
	raft.LogStore
	r *refusal
}

func (l refusingLog) StoreLog(log *raft.Log) error {
	return l.StoreLogs([]*raft.Log{log})
}

func (l refusingLog) StoreLogs(logs []*raft.Log) error {
	if err := l.r.check(); err != nil {
		return err
	}
	return l.LogStore.StoreLogs(logs)
}

// DeleteRange refuses, while the node refuses, to drop the log's tail
// behind its head: a follower drops it only to replace it with the
// leader's entries (raft's appendEntries), and raft does not undo the drop
// when the append that follows fails, so the log would lack entries raft
// takes it to hold. Dropping the whole log (after a snapshot is
// installed) or a head (a compaction) goes on.
func (l refusingLog) DeleteRange(min, max uint64) error {
	first, ferr := l.FirstIndex()
	last, lerr := l.LastIndex()
	if ferr == nil && lerr == nil && min > first && max >= last {
		if err := l.r.check(); err != nil {
			return err
		}
	}
	return l.LogStore.DeleteRange(min, max)
}

// IsMonotonic is the log's (raft.MonotonicLogStore): raft-wal takes no
// gap between entries, so raft drops its whole log after installing a
// snapshot.
func (l refusingLog) IsMonotonic() bool {
	m, ok := l.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

// refusingSnapshots is the raft.SnapshotStore of a node with
// Config.Refuse: while the node refuses, it creates no snapshot, neither
// one the leader sends (raft then fails its InstallSnapshot, and the
// leader sends it again later) nor one of the node's own (raft tries again
// at its next interval). A snapshot written whole on a nearly full disk
// would leave no room for the database that restores it.
type refusingSnapshots struct {
	raft.SnapshotStore
	r *refusal
}

func (s refusingSnapshots) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	if err := s.r.check(); err != nil {
		return nil, err
	}
	return s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
}

var (
	_ raft.LogStore          = refusingLog{}
	_ raft.MonotonicLogStore = refusingLog{}
	_ raft.SnapshotStore     = refusingSnapshots{}
)
