package store

// A database whose folder can no longer be written. badger creates a file
// for each new memtable, table and value-log file; when it cannot, the
// write that needed it fails, and badger is left without a memtable: its
// next read or write dereferences it and the process dies (badger v4.9.6,
// DB.ensureRoomForWrite). So a change is refused before it reaches badger
// while the folder cannot be written, and after a change failed in badger,
// reads that meet such a panic return an error instead.

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"

	"github.com/leased/leased/internal/diskguard"
)

// ErrNotWritable is why a change is refused, before badger sees it, while
// the database's folder cannot be written (its permissions were taken
// away, or its file system is read-only). Nothing of the change is
// applied, and the store is not failed: changes go through again once the
// folder can be written.
var ErrNotWritable = errors.New("the database folder cannot be written")

// folderWritable returns ErrNotWritable, with why, if badger could not
// create a file in dir now.
func folderWritable(dir string) error {
	if err := diskguard.Writable(dir); err != nil {
		return fmt.Errorf("%w: %v", ErrNotWritable, err)
	}
	return nil
}

// view runs fn in a read transaction of b.db. A panic of badger's, which
// a database whose write failed may raise on a read (see above), is
// returned as ErrFailed. b.mu must be held, and b.db usable.
func (b *Badger) view(fn func(t *badger.Txn) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: the database cannot be read since a write failed (%v); restart the server", ErrFailed, r)
		}
	}()
	return b.db.View(fn)
}

// gcUsable reports why the value-log collector must not run now: the
// database cannot be read (usable), a change failed and Reopen has not
// settled it (the collector's rewrites are writes), or its folder cannot
// be written. b.mu must be held.
func (b *Badger) gcUsable() error {
	if err := b.usable(); err != nil {
		return err
	}
	if b.broken.Load() {
		return ErrFailed
	}
	return folderWritable(b.dir)
}
