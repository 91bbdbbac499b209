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
// deletions of through or earlier left.
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
		}
		if err := tx.del(tombstoneKey(v.rev, v.key)); err != nil {
			return Result{}, err
		}
	}
	return Result{More: more}, nil
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
