package replica

import (
	"fmt"
	"path/filepath"

	wal "github.com/hashicorp/raft-wal"

	"github.com/leased/leased/internal/diskguard"
	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/store"
)

// LogSegmentBytes returns the size of a segment of the log on disk with
// Config.WALSegmentSize zero: raft-wal preallocates a whole segment at
// once when the last one is full, which takes that much of the file
// system's free space between two measurements of a disk guard.
func LogSegmentBytes() int64 { return int64(wal.DefaultSegmentSize) }

// writable returns store.ErrNotWritable, with why, if the folder of the
// node's database or of its log cannot be written now. Apply asks it
// before it appends an entry, and Reopen before it settles a failure: an
// entry committed to the log and then refused by the database would stop
// the state machine until a restart (store/folder.go), and a log that
// cannot create its next segment fails raft's appends. A node whose log
// is given (Config.LogStore) checks the database's folder alone.
func (n *Node) writable() error {
	dirs := []string{filepath.Join(n.cfg.Dir, layout.DBDir)}
	if n.wal != nil {
		dirs = append(dirs, filepath.Join(n.cfg.Dir, layout.RaftDir, "wal"))
	}
	for _, d := range dirs {
		if err := diskguard.Writable(d); err != nil {
			return fmt.Errorf("replica: %w: %v", store.ErrNotWritable, err)
		}
	}
	return nil
}
