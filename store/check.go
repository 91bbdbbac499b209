package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dgraph-io/badger/v4"
)

// ErrDamaged is the error of a database whose files are damaged, or whose
// content contradicts itself: a table or value that fails its checksum,
// a record that does not decode, a key whose version is above the
// revision, table files without the MANIFEST that lists them. Nothing
// read from such a database can be trusted: a key may read as absent, and
// a version number may be handed out again.
var ErrDamaged = errors.New("the database is damaged")

// checkFiles refuses a folder that holds badger's data files but no
// MANIFEST: badger would open it as a new, empty database and delete the
// tables it does not know; and a folder with a table file whose footer or
// index is damaged (checkTables, tables.go), on which badger would panic.
func checkFiles(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, badger.ManifestFilename)); err == nil || !errors.Is(err, os.ErrNotExist) {
		return checkTables(dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	for _, e := range ents {
		switch filepath.Ext(e.Name()) {
		case ".sst", ".vlog", ".mem":
			return fmt.Errorf("%w: %s holds %s but no %s", ErrDamaged, dir, e.Name(), badger.ManifestFilename)
		}
	}
	return nil
}

// Check reads the whole database and checks it against itself: every
// table block and value passes its checksum, the keys that hold a record,
// and the events of the history, are as many as counted, every record decodes, no key's version is above
// the revision, no write lease's fencing token above the fencing counter
// and no TTL lease's id above the TTL lease counter, and the keys attached
// to TTL leases agree with their leases: each of the two index records of
// an attachment has the other, its lease exists and counts it, and its key
// holds a value. A failure is
// ErrDamaged. The owner calls it before it serves from the database, such
// as at start; it takes as long as reading every key and value.
func (b *Badger) Check() error {
	b.amu.Lock() // no change meanwhile
	defer b.amu.Unlock()
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.usable(); err != nil {
		return err
	}
	if err := verifyTables(b.db); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrDamaged, b.dir, err)
	}
	ct := b.ct
	err := b.db.View(func(t *badger.Txn) error {
		it := t.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 16})
		defer it.Close()
		var records, events uint64
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			key := item.Key()
			if bytes.HasPrefix(key, dataPrefix) {
				records++
			}
			if bytes.HasPrefix(key, eventPrefix) {
				events++
			}
			err := item.Value(func(v []byte) error {
				if err := checkItem(key, v, ct); err != nil {
					return err
				}
				if err := checkTombstoneItem(key, v, ct); err != nil {
					return err
				}
				if err := checkHistoryItem(key, v, ct); err != nil {
					return err
				}
				return checkTTLItem(badgerTxn{t}, key, v, ct)
			})
			if err != nil {
				return fmt.Errorf("key %q: %w", key, err)
			}
		}
		if records != ct.records {
			return fmt.Errorf("%w: %d keys hold a record, but the database counted %d: keys were lost", ErrDamaged, records, ct.records)
		}
		if ct.history.known && events != ct.history.events {
			return fmt.Errorf("%w: the history holds %d events, but the database counted %d: events were lost", ErrDamaged, events, ct.history.events)
		}
		return nil
	})
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrDamaged) {
		return fmt.Errorf("%s: %w", b.dir, err)
	}
	// badger reports a checksum that does not match, and a file cut
	// short, as errors of its own kinds: anything that stops a read of
	// the whole database is damage.
	return fmt.Errorf("%w: %s: %v", ErrDamaged, b.dir, err)
}

// damagedOnOpen tells whether err, of badger.Open, reports damaged files:
// a checksum that fails, a table that cannot be read or is missing, a
// MANIFEST or value log that does not parse. badger reports them as text.
func damagedOnOpen(err error) bool {
	msg := err.Error()
	for _, s := range []string{"checksum", "Opening table", "MANIFEST", "manifest", "corrupt", "Corrupt", "truncat", "no such file"} {
		if strings.Contains(msg, s) {
			return !strings.Contains(msg, "Cannot acquire directory lock")
		}
	}
	return false
}

// verifyTables runs badger's verification of the checksum of every table
// block. It must come before any iteration: a badger iterator that meets a
// block that fails its checksum ends as if the keys ended there, and a
// read of a key in it finds nothing. badger v4.9.6 dereferences a nil
// block when a checksum fails in table.VerifyChecksum (it formats its error
// with the block it did not get); that panic, in this goroutine and with no
// lock held, is the failure, and is returned as an error.
func verifyTables(db *badger.DB) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("a table block fails its checksum (%v)", r)
		}
	}()
	return db.VerifyChecksum()
}

// countRecords writes the number of keys that hold a record, for a
// database written before the count was kept: one whose revision is above
// 0 with no count. The store's open calls it, before anyone uses the
// database.
func countRecords(db *badger.DB) error {
	return db.Update(func(t *badger.Txn) error {
		tx := badgerTxn{t}
		if _, ok, err := tx.get(metaRecords); err != nil || ok {
			return err
		}
		if rev, err := getUint(tx, metaRev); err != nil || rev == 0 {
			return err
		}
		it := t.NewIterator(badger.IteratorOptions{Prefix: dataPrefix})
		var n uint64
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		it.Close()
		return setUint(tx, metaRecords, n)
	})
}

// checkItem checks one stored key and its value against the counters.
func checkItem(key, v []byte, ct counters) error {
	switch {
	case bytes.HasPrefix(key, dataPrefix):
		r, err := decodeRecord(v)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrDamaged, err)
		}
		if r.Version > ct.rev {
			return fmt.Errorf("%w: version %d is above the revision %d", ErrDamaged, r.Version, ct.rev)
		}
	case bytes.HasPrefix(key, wleasPrefix):
		wl, err := decodeWriteLease(key[len(wleasPrefix):], v)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrDamaged, err)
		}
		if wl.Token > ct.fence {
			return fmt.Errorf("%w: write lease token %d is above the fencing counter %d", ErrDamaged, wl.Token, ct.fence)
		}
	}
	return nil
}
