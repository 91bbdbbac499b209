// A raft snapshot written and restored: the FSM streams its badger database into raft's snapshot store
// (store.Snapshot) and replaces it with a snapshot raft hands it (store.Badger.Restore); and the view of
// the applied state that a backup streams (Node.Snapshot).

package replica

import (
	"io"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/store"
)

// Snapshot makes what is applied durable and takes a view of it, which
// raft persists while later entries are applied.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	if err := f.stoppedErr(); err != nil {
		return nil, err
	}
	s, err := f.db.Snapshot()
	if err != nil {
		return nil, err
	}
	// Called between two entries: the snapshot holds every byte counted.
	f.sinceSnapshot.Store(0)
	f.entriesSince.Store(0)
	return fsmSnapshot{s}, nil
}

// Restore replaces the database with a snapshot, unless the database
// already holds the snapshot's index or a later one (as after a restart,
// when raft restores its last snapshot to a database that is ahead of it).
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	idx, r, err := store.SnapshotIndex(rc)
	if err != nil {
		return err
	}
	if cur := f.applied.Load(); idx <= cur {
		f.log.Info("snapshot skipped: the database is at or past it", "snapshot_index", idx, "applied_index", cur)
		return nil
	}
	if err := f.db.Restore(r); err != nil {
		f.applied.Store(0)
		return err
	}
	f.applied.Store(idx)
	f.sinceSnapshot.Store(0)
	f.entriesSince.Store(0)
	f.log.Info("restored a snapshot", "snapshot_index", idx)
	st, err := f.db.State()
	if err != nil {
		return err
	}
	now := f.clock.Now()
	f.mu.Lock()
	f.stopped = nil // the database is whole again
	f.horizonApplied, f.span = now, st.Span
	f.mu.Unlock()
	return nil
}

// fsmSnapshot streams a store snapshot into raft's snapshot sink.
type fsmSnapshot struct{ s *store.Snapshot }

func (s fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := s.s.WriteTo(sink); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s fsmSnapshot) Release() { s.s.Release() }

// Snapshot makes the node's applied state durable and returns a view of it
// as it is now, at its applied index, which the caller streams
// (store.Snapshot.WriteTo) while the node goes on applying entries, and
// must Release. A node whose state machine stopped has no consistent state
// to give.
func (n *Node) Snapshot() (*store.Snapshot, error) {
	if err := n.fsm.stoppedErr(); err != nil {
		return nil, err
	}
	return n.db.Snapshot()
}
