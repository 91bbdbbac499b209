package node

// Backups: the leader takes a snapshot of its applied state for an admin
// session to stream (package server), and a new data folder is restored
// from such a stream (`leased restore`).

import (
	"fmt"
	"io"
	"log/slog"
	"slices"

	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// Snapshot takes a consistent view of the applied state, for a backup:
// on the leader of a cluster or on a node alone. A follower returns the
// NotLeaderError that names the leader, a node over Config.Store
// ErrInvalidArgument (it takes none), and a replica that cannot take one
// ErrUnavailable. The caller releases the snapshot.
func (n *Node) Snapshot() (*store.Snapshot, error) {
	switch {
	case n.rep == nil:
		return nil, fmt.Errorf("%w: this server's store (Config.Store) takes no snapshots", ErrInvalidArgument)
	case n.cfg.Cluster != nil && !n.rep.IsLeader():
		return nil, n.NotLeader()
	}
	snap, err := n.rep.Snapshot()
	if err != nil {
		return nil, fmt.Errorf("%w: take a snapshot: %v", ErrUnavailable, err)
	}
	return snap, nil
}

// Restore makes dir, which must be missing or empty, the data folder of a
// new node from a snapshot stream (leasectl snapshot save), with the
// revision and fencing-token counters raised by bump: of a node alone if
// peers is nil, or of node name of a new cluster whose initial members are
// peers, every one of which is restored from the same snapshot with the
// same peers and bump. The node started on dir starts from the snapshot
// (replica.Restore). It returns the summary of the restored state. A
// stream that is not a whole snapshot is store.ErrCorruptSnapshot, and a
// dir that holds anything replica.ErrNotEmpty; either way dir is left as
// it was.
func Restore(dir string, snapshot io.Reader, name string, peers []Peer, bump uint64, log *slog.Logger) (store.Summary, error) {
	if peers == nil {
		peers = []Peer{{Name: soloName, Addr: soloName}}
	} else if !slices.ContainsFunc(peers, func(p Peer) bool { return p.Name == name }) {
		return store.Summary{}, fmt.Errorf("%w: the initial members do not name this node %q", ErrInvalidArgument, name)
	}
	return replica.Restore(dir, snapshot, members(peers), bump, log)
}
