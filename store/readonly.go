package store

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"
)

// ErrLocked is returned by OpenReadOnly for a database that a running
// process, such as a leased serving from it, holds open.
var ErrLocked = errors.New("the database is in use by a running process")

// ErrNotClosed is returned by OpenReadOnly for a database that its last
// writer did not close, such as one of a killed process: its last writes
// are still to be replayed, which a read-only open cannot do.
var ErrNotClosed = errors.New("the database was not closed cleanly")

// lockFile is the file badger writes the holder's process id to.
const lockFile = "LOCK"

// OpenReadOnly opens the existing database in dir for reading only: it
// writes nothing, not even a recovery, and refuses (ErrLocked) while another
// process has the database open for writing. Apply and the other changes
// fail on it. leased inspect calls it on a stopped node's folder.
func OpenReadOnly(dir string, logger *slog.Logger) (*Badger, error) {
	if _, err := os.Stat(filepath.Join(dir, badger.ManifestFilename)); err != nil {
		return nil, fmt.Errorf("no database in %s: %w", dir, err)
	}
	locked, err := lockedByOther(dir)
	if err != nil {
		return nil, fmt.Errorf("open database in %s: %w", dir, err)
	}
	if locked {
		return nil, fmt.Errorf("%w: %s%s", ErrLocked, dir, holder(dir))
	}
	b, err := Open(dir, logger, func(o *badger.Options) { o.ReadOnly = true })
	switch {
	case err == nil:
		return b, nil
	// badger wraps its errors as text: match the text of its sentinels.
	case strings.Contains(err.Error(), "Cannot acquire directory lock"):
		// Taken between the check and the open.
		return nil, fmt.Errorf("%w: %s%s", ErrLocked, dir, holder(dir))
	case strings.Contains(err.Error(), badger.ErrTruncateNeeded.Error()):
		return nil, fmt.Errorf("%w: %s: %v", ErrNotClosed, dir, err)
	}
	return nil, err
}

// holder names the process that holds the database in dir, as badger
// recorded it, or returns "".
func holder(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, lockFile))
	if pid := strings.TrimSpace(string(b)); err == nil && pid != "" {
		return " (process " + pid + ")"
	}
	return ""
}
