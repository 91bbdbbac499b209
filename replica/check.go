package replica

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/store"
)

// What a node checks at start, before raft runs, so that a damaged data
// folder is refused instead of served: the database against itself
// (store.Badger.Check: checksums, versions within the revision), and the
// database against the log and the snapshots. The database may be behind
// the log, as after a crash (it is written without sync): raft applies the
// missing entries again, or restores the newest snapshot if the database
// is behind it. But it must not be ahead of every entry the log and the
// snapshots hold, or the log would number new entries as the ones the
// database holds, and the node would skip them as applied; and the entries
// between what the database and the newest snapshot hold and the log's
// first must not be missing.

// recovery says how to recover from a damaged data folder; dbRecovery
// from a damaged database whose log and snapshots may be whole, which
// rebuild it.
const (
	recovery = "this node must not serve from it. To recover, restore the data folder from a snapshot " +
		"with \"leased restore\"; or, for a node of a cluster whose other nodes are healthy, stop it, " +
		"delete the folders db and raft of its data folder (keep tls, its certificates) and start it again " +
		"with the same flags: it catches up from its peers (docs/OPERATING.md, \"A damaged data folder\")"
	dbRecovery = "this node must not serve from it. To recover, stop it, delete the folder db of its data folder " +
		"(keep raft and tls) and start it again with the same flags: it rebuilds its database from its log " +
		"and snapshots in raft, which it checks then. If they are damaged too, restore the data folder from a " +
		"snapshot with \"leased restore\", or, for a node of a cluster whose other nodes are healthy, delete " +
		"its folders db and raft too (docs/OPERATING.md, \"A damaged data folder\")"
)

// damaged adds to err, if it reports a damaged data folder
// (store.ErrDamaged), the data folder and how to recover.
func damaged(dir string, err error) error {
	if !errors.Is(err, store.ErrDamaged) {
		return err
	}
	return fmt.Errorf("the data folder %s is damaged: %w; %s", dir, err, recovery)
}

// DamagedDatabase adds to err, if it reports a damaged database
// (store.ErrDamaged) in the data folder dir, the folder and how to recover:
// delete the database, which the log and the snapshots rebuild. For tools
// that read a stopped node's database, such as leased inspect.
func DamagedDatabase(dir string, err error) error { return damagedDB(dir, err) }

// damagedDB is damaged for a damaged database: the log and the snapshots
// rebuild it.
func damagedDB(dir string, err error) error {
	if !errors.Is(err, store.ErrDamaged) {
		return err
	}
	return fmt.Errorf("the data folder %s is damaged: %w; %s", dir, err, dbRecovery)
}

// checkAgainstLog checks the database db against the log and the
// snapshots, and reads every entry of the log, which must pass its
// checksum. A failure is store.ErrDamaged.
func checkAgainstLog(db *store.Badger, logs raft.LogStore, snaps raft.SnapshotStore) error {
	applied, err := db.AppliedIndex()
	if err != nil {
		return err
	}
	st, err := db.State()
	if err != nil {
		return err
	}
	first, err := logs.FirstIndex()
	if err != nil {
		return fmt.Errorf("%w: read the log: %v", store.ErrDamaged, err)
	}
	last, err := logs.LastIndex()
	if err != nil {
		return fmt.Errorf("%w: read the log: %v", store.ErrDamaged, err)
	}
	metas, err := snaps.List()
	if err != nil {
		return fmt.Errorf("%w: list the snapshots: %v", store.ErrDamaged, err)
	}
	var snap uint64
	if len(metas) > 0 {
		snap = metas[0].Index
	}
	switch {
	case applied == 0 && snap == 0 && (st.Revision > 0 || st.Fence > 0):
		return fmt.Errorf("%w: the database is at revision %d but records no applied log entry, and no snapshot replaces it",
			store.ErrDamaged, st.Revision)
	case applied > max(last, snap):
		return fmt.Errorf("%w: the database holds log entry %d but the log ends at entry %d and the newest snapshot at %d: the log lost entries, and would number new ones as the database's",
			store.ErrDamaged, applied, last, snap)
	}
	if base := max(applied, snap); last > base && first > base+1 {
		return fmt.Errorf("%w: the database holds log entries up to %d and the newest snapshot up to %d, but the log begins at entry %d: entries %d to %d are lost",
			store.ErrDamaged, applied, snap, first, base+1, first-1)
	}
	for i := first; i > 0 && i <= last; i++ {
		var l raft.Log
		if err := logs.GetLog(i, &l); err != nil {
			return fmt.Errorf("%w: log entry %d: %v", store.ErrDamaged, i, err)
		}
		if l.Index != i {
			return fmt.Errorf("%w: log entry %d reads as entry %d", store.ErrDamaged, i, l.Index)
		}
		if l.Type == raft.LogCommand {
			if err := checkEntry(l.Data); err != nil {
				return fmt.Errorf("%w: log entry %d: %v", store.ErrDamaged, i, err)
			}
		}
	}
	return nil
}

// replacedAtStart reports whether raft replaces the database db as the node
// starts: it has applied no log entry, and a snapshot exists, which raft
// restores into it (Badger.Restore drops what it holds first). Such a
// database is what a restore cut short by a crash leaves (the applied
// index is written last), with some of the snapshot's keys and not yet its
// counters: it is not checked (Badger.Check would find its keys above its
// revision), since none of it is used.
func replacedAtStart(db *store.Badger, snaps raft.SnapshotStore) (bool, error) {
	applied, err := db.AppliedIndex()
	if err != nil || applied != 0 {
		return false, err
	}
	metas, err := snaps.List()
	if err != nil {
		return false, fmt.Errorf("%w: list the snapshots: %v", store.ErrDamaged, err)
	}
	return len(metas) > 0, nil
}
