package replica

import (
	"errors"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// Compaction of the log by bytes. raft takes a snapshot after a number of
// entries (SnapshotThreshold) and keeps a number behind it (TrailingLogs):
// with entries of a megabyte, 8192 of them would be 8 GiB on disk before a
// snapshot. The compactor takes a snapshot as soon as the entries applied
// since the last one hold SnapshotBytes, or as many bytes as the newest
// snapshot if it is larger, and first lowers TrailingLogs so that the
// entries kept behind it hold about TrailingBytes. Scaling with the
// snapshot keeps what snapshots cost in writes to at most about as much
// again as the log: a database of gigabytes is not written out whole for
// every 64 MiB of entries; its log then holds up to about its size.

// compactor is the goroutine of a Node that takes the snapshots
// SnapshotBytes calls for. The state machine pokes it; it never blocks the
// state machine.
type compactor struct {
	// limit is how many bytes of entries since the last snapshot call
	// for one: SnapshotBytes, or the newest snapshot's size if larger.
	limit atomic.Uint64
	poke  chan struct{} // one pending request, from the state machine
	quit  chan struct{} // closed by stop
	done  chan struct{} // closed when the goroutine ends
	snaps raft.SnapshotStore
}

// setCompactLimit sets the compactor's limit from the newest snapshot.
func (n *Node) setCompactLimit() {
	limit := n.cfg.SnapshotBytes
	if metas, err := n.compactor.snaps.List(); err == nil && len(metas) > 0 && metas[0].Size > 0 {
		limit = max(limit, uint64(metas[0].Size))
	}
	n.compactor.limit.Store(limit)
}

// prepareCompactor sets up the compactor, and has the state machine poke
// it when the bytes since the last snapshot pass its limit. Open calls it
// before raft starts, with the node's snapshot store.
func (n *Node) prepareCompactor(snaps raft.SnapshotStore) {
	n.compactor.poke, n.compactor.quit, n.compactor.done = make(chan struct{}, 1), make(chan struct{}), make(chan struct{})
	n.compactor.snaps = snaps
	n.setCompactLimit()
	n.fsm.onBytes = func(since uint64) {
		if since >= n.compactor.limit.Load() {
			select {
			case n.compactor.poke <- struct{}{}:
			default:
			}
		}
	}
}

// startCompactor starts the compactor's goroutine, once raft runs.
func (n *Node) startCompactor() { go n.compact() }

// compact takes a snapshot each time it is poked, until stop.
func (n *Node) compact() {
	defer close(n.compactor.done)
	for {
		select {
		case <-n.compactor.quit:
			return
		case <-n.compactor.poke:
		}
		n.setCompactLimit() // the newest snapshot may be raft's own
		if n.fsm.sinceSnapshot.Load() < n.compactor.limit.Load() {
			continue // raft took one meanwhile, or the limit grew with it
		}
		n.boundTrailing()
		err := n.raft.Snapshot().Error()
		if err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) && !errors.Is(err, raft.ErrRaftShutdown) {
			n.log.Warn("snapshot by log size failed", "err", err)
		}
		n.setCompactLimit()
	}
}

// boundTrailing sets raft's TrailingLogs, for the snapshot about to be
// taken, to the number of entries of the average size since the last
// snapshot that TrailingBytes holds, and at most Config.TrailingLogs.
func (n *Node) boundTrailing() {
	bytes := n.fsm.sinceSnapshot.Load()
	entries := n.fsm.entriesSince.Load()
	keep := n.cfg.TrailingLogs
	if bytes > 0 && entries > 0 {
		avg := max(bytes/entries, 1)
		keep = max(min(keep, n.cfg.TrailingBytes/avg), 1)
	}
	rc := n.raft.ReloadableConfig()
	if rc.TrailingLogs == keep {
		return
	}
	rc.TrailingLogs = keep
	if err := n.raft.ReloadConfig(rc); err != nil {
		n.log.Warn("could not bound the trailing log entries", "err", err)
	}
}

// stop asks the goroutine to end; wait waits for it. Close calls stop
// before raft shuts down, which ends a snapshot in progress, and wait
// after.
func (c *compactor) stop() {
	if c.quit != nil {
		close(c.quit)
	}
}

func (c *compactor) wait() {
	if c.done != nil {
		<-c.done
	}
}
