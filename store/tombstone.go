// Tombstones: the record a deletion leaves, and its collection (OpCollectTombstones).

package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// A deletion leaves its key a record (a tombstone) that holds no value and
// the revision of the deletion as its version: a read of the key answers
// "not found, at that version", and a compare-and-swap expecting that
// version matches. Nothing needs it for long: version 0 means "absent" to
// a compare-and-swap as well, a revalidation of a cached answer compares
// versions for equality only, so that a version changed from the
// deletion's to 0 costs the reader the whole answer (still "not found"),
// and no lease, write lease or TTL lease keeps a record of a version. So
// OpCollectTombstones removes the tombstones of old deletions, and the key
// then reads as one that never existed, at version 0. (A watch from a
// revision, when it is built, will need the deletions of the history it
// keeps: collection must then stop at the oldest revision it serves.)
//
// Every deletion also writes an index record, under tombstonePrefix, of
// the revision of the deletion (8 bytes, big-endian) and the key, with no
// value, so that collection finds the oldest deletions first without
// reading every key. A key written again keeps its old index record until
// collection comes to it and finds the key's record of another version.
var tombstonePrefix = []byte("x/")

// metaForgotten is the revision up to which the store may have forgotten
// changes (8 bytes, big-endian): the newest deletion whose tombstone
// OpCollectTombstones removed, or the revision a restore's Bump raised the
// counters to, whichever is higher. A range whose records are all of
// revision n or earlier, for n at or above it, is as it was at n: no
// deletion after n left it unseen (Range.Unchanged). The first command that
// takes a revision records it as 0 (startHistory); a database whose
// revision is above 0 without it was written before it was kept, and may
// have forgotten anything: until its next collection records it, no range
// is Unchanged. Every store that applies the same commands holds the same.
var metaForgotten = []byte("m/forgotten")

// loadForgotten returns the revision up to which changes may be forgotten
// (metaForgotten) in a store at revision rev, and whether it is known.
func loadForgotten(tx txn, rev uint64) (uint64, bool, error) {
	if ok, err := tx.has(metaForgotten); err != nil || !ok {
		return 0, rev == 0, err
	}
	n, err := getUint(tx, metaForgotten)
	return n, err == nil, err
}

// forget raises the revision up to which changes may be forgotten to n,
// in a store at revision rev; if it was not known, to rev, which every
// change forgotten before is at or below.
func forget(tx txn, rev, n uint64) error {
	old, known, err := loadForgotten(tx, rev)
	switch {
	case err != nil:
		return err
	case !known:
		n = max(n, rev)
	case n <= old:
		return nil
	}
	return setUint(tx, metaForgotten, n)
}

// startHistory records, for the first command that takes a revision, that
// nothing is forgotten yet (metaForgotten), unless something is: a
// collection or a Bump before any revision.
func startHistory(tx txn) error {
	if ok, err := tx.has(metaForgotten); err != nil || ok {
		return err
	}
	return setUint(tx, metaForgotten, 0)
}

// Bounds of one OpCollectTombstones: the index records it visits, and the
// bytes of their keys. Like MaxTTLKeys, they keep its transaction small.
const (
	MaxTombstonesPerCommand = 1000
	MaxTombstoneKeyBytes    = 256 << 10
)

// tombstoneKey is the index record of key deleted at revision rev.
func tombstoneKey(rev uint64, key []byte) []byte {
	b := make([]byte, 0, len(tombstonePrefix)+8+len(key))
	b = binary.BigEndian.AppendUint64(append(b, tombstonePrefix...), rev)
	return append(b, key...)
}

// noteDeletion writes the index record of key, deleted at revision rev.
func noteDeletion(tx txn, rev uint64, key []byte) error {
	return tx.set(tombstoneKey(rev, key), nil)
}

// collectTombstones applies OpCollectTombstones: it removes, oldest first,
// the tombstones of deletions at revision through or earlier, within the
// bounds above, and the index records it visits. A key's record goes only
// if it is still the tombstone the index record names: a key written or
// deleted again since keeps its record. It takes no revision: no key
// changes its value. Result.More says that it stopped at a bound with
// deletions of through or earlier left. It raises metaForgotten to the
// newest deletion whose tombstone it removed.
func collectTombstones(tx txn, ct *counters, through uint64) (Result, error) {
	type visit struct {
		rev uint64
		key []byte
	}
	var visits []visit
	var more bool
	keyBytes := 0
	err := tx.scan(tombstonePrefix, nil, func(k, _ []byte) error {
		if len(k) <= len(tombstonePrefix)+8 {
			return fmt.Errorf("corrupt tombstone index key %x", k)
		}
		rev := binary.BigEndian.Uint64(k[len(tombstonePrefix):])
		if rev > through {
			return errStopScan
		}
		key := k[len(tombstonePrefix)+8:]
		if len(visits) == MaxTombstonesPerCommand || keyBytes+len(key) > MaxTombstoneKeyBytes {
			more = true
			return errStopScan
		}
		keyBytes += len(key)
		visits = append(visits, visit{rev, bytes.Clone(key)})
		return nil
	})
	if err != nil && !errors.Is(err, errStopScan) {
		return Result{}, err
	}
	var gone uint64 // the newest deletion whose tombstone goes
	for _, v := range visits {
		dk := prefixed(dataPrefix, v.key)
		r, err := getRecord(tx, dk)
		if err != nil {
			return Result{}, err
		}
		if !r.Found && r.Version == v.rev {
			if err := tx.del(dk); err != nil {
				return Result{}, err
			}
			ct.records--
			gone = max(gone, v.rev)
		}
		if err := tx.del(tombstoneKey(v.rev, v.key)); err != nil {
			return Result{}, err
		}
	}
	return Result{More: more}, forget(tx, ct.rev, gone)
}

// checkTombstoneItem checks one index record of a deletion against the
// counters: a key, a revision not above the revision, and no value.
func checkTombstoneItem(key, v []byte, ct counters) error {
	if !bytes.HasPrefix(key, tombstonePrefix) {
		return nil
	}
	if len(key) <= len(tombstonePrefix)+8 || len(v) != 0 {
		return fmt.Errorf("%w: tombstone index record of %d bytes with a value of %d", ErrDamaged, len(key), len(v))
	}
	if rev := binary.BigEndian.Uint64(key[len(tombstonePrefix):]); rev > ct.rev {
		return fmt.Errorf("%w: a deletion at revision %d is above the revision %d", ErrDamaged, rev, ct.rev)
	}
	return nil
}
