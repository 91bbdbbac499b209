// Restore a data folder from a snapshot stream (leased restore): a new node's database and raft snapshot.
// Node.Snapshot, the view a backup streams, and raft's own snapshots are in snapshot.go.

package replica

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/store"
)

// ErrNotEmpty is returned by Restore for a data folder that holds
// something already.
var ErrNotEmpty = errors.New("the data folder is not empty")

// restoredTerm is the raft term of the snapshot Restore places: the new
// cluster's first term. Its first election is of term 1 too (a restored
// node has no current term), which is not below it.
const restoredTerm = 1

// Restore makes dir, which must be missing or empty, the data folder of a
// node of a new cluster whose state is the snapshot stream r (as
// store.Snapshot.WriteTo writes it): the database in dir/db holds every
// key, version, counter, write lease and lease horizon of the snapshot,
// with the revision and fencing-token counters raised by bump
// (store.Badger.Bump), at the snapshot's applied index; and raft's
// snapshot store in dir/raft holds the same state as raft's snapshot at
// that index, with servers as the cluster's configuration. The node,
// opened with Open, starts from that snapshot and bootstraps nothing: every
// node of the new cluster must be restored from the same stream, with the
// same servers and bump. Its log is empty; its clock name is new, so it
// counts the snapshot's horizon from its own start.
//
// A stream that is cut short or corrupt is ErrCorruptSnapshot; a dir that
// holds anything is ErrNotEmpty. On any error, Restore leaves dir as it
// found it (missing, or empty). It returns the summary of the restored
// database.
func Restore(dir string, r io.Reader, servers []Member, bump uint64, log *slog.Logger) (_ store.Summary, err error) {
	if len(servers) == 0 {
		return store.Summary{}, errors.New("replica: restore: no servers in the new cluster's configuration")
	}
	if log == nil {
		log = slog.Default()
	}
	created, err := emptyDir(dir)
	if err != nil {
		return store.Summary{}, err
	}
	defer func() {
		if err == nil {
			return
		}
		if created {
			os.RemoveAll(dir)
			return
		}
		for _, d := range []string{layout.DBDir, layout.RaftDir} {
			os.RemoveAll(filepath.Join(dir, d))
		}
	}()
	dbDir := filepath.Join(dir, layout.DBDir)
	if err := os.MkdirAll(dbDir, 0o700); err != nil {
		return store.Summary{}, fmt.Errorf("replica: restore: %w", err)
	}
	db, err := store.Open(dbDir, log, store.NoSync())
	if err != nil {
		return store.Summary{}, fmt.Errorf("replica: restore: %w", err)
	}
	sum, err := restoreDB(db, r, bump)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("replica: restore: close the database: %w", cerr)
	}
	if err != nil {
		return store.Summary{}, err
	}
	// The same state, from the database, as raft's snapshot: a follower
	// of the new cluster that lags is sent it.
	if db, err = store.Open(dbDir, log, store.NoSync()); err != nil {
		return store.Summary{}, fmt.Errorf("replica: restore: %w", err)
	}
	err = placeSnapshot(dir, db, sum.Applied, raftServers(servers), log)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("replica: restore: close the database: %w", cerr)
	}
	if err != nil {
		return store.Summary{}, err
	}
	return sum, nil
}

// restoreDB loads the stream r into the empty database db, bumps its
// counters, and summarizes it.
func restoreDB(db *store.Badger, r io.Reader, bump uint64) (store.Summary, error) {
	if err := db.Restore(r); err != nil {
		return store.Summary{}, fmt.Errorf("replica: %w", err)
	}
	idx, err := db.AppliedIndex()
	if err != nil {
		return store.Summary{}, fmt.Errorf("replica: restore: %w", err)
	}
	if idx == 0 {
		// Every node applies at least the entry that names its leader
		// before it serves; a snapshot at index 0 holds nothing raft can
		// start after.
		return store.Summary{}, fmt.Errorf("replica: restore: %w: applied index 0", store.ErrCorruptSnapshot)
	}
	if bump > 0 {
		if err := db.Bump(bump); err != nil {
			return store.Summary{}, fmt.Errorf("replica: restore: %w", err)
		}
	}
	sum, err := db.Summarize()
	if err != nil {
		return store.Summary{}, fmt.Errorf("replica: restore: %w", err)
	}
	return sum, nil
}

// placeSnapshot writes the state of db, at applied index idx, into the
// raft snapshot store of dir, with servers as the configuration.
func placeSnapshot(dir string, db *store.Badger, idx uint64, servers []raft.Server, log *slog.Logger) error {
	snaps, err := raft.NewFileSnapshotStoreWithLogger(filepath.Join(dir, layout.RaftDir), 2, HCLogger(log))
	if err != nil {
		return fmt.Errorf("replica: restore: %w", err)
	}
	// The store encodes the peers with a transport for raft's versions
	// before configurations; every transport encodes an address as is.
	_, trans := raft.NewInmemTransport("")
	defer trans.Close()
	sink, err := snaps.Create(raft.SnapshotVersionMax, idx, restoredTerm, raft.Configuration{Servers: servers}, idx, trans)
	if err != nil {
		return fmt.Errorf("replica: restore: %w", err)
	}
	s, err := db.Snapshot()
	if err != nil {
		sink.Cancel()
		return fmt.Errorf("replica: restore: %w", err)
	}
	defer s.Release()
	if _, err := s.WriteTo(sink); err != nil {
		sink.Cancel()
		return fmt.Errorf("replica: restore: write raft's snapshot: %w", err)
	}
	if err := sink.Close(); err != nil {
		return fmt.Errorf("replica: restore: write raft's snapshot: %w", err)
	}
	return nil
}

// emptyDir makes sure dir is an empty folder: it creates it if missing,
// and reports whether it did. A folder that holds anything is ErrNotEmpty.
func emptyDir(dir string) (created bool, err error) {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return false, fmt.Errorf("replica: restore: %w", err)
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("replica: restore: %w", err)
	case len(entries) > 0:
		return false, fmt.Errorf("replica: restore into %s: %w (it holds %s); restore makes a new node's folder", dir, ErrNotEmpty, entries[0].Name())
	}
	return false, nil
}
