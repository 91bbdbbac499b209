package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// The durable state of TTL leases (DESIGN §14). Each lease has one record
// under ttlPrefix and its id, 8 bytes big-endian (encodeTTLLease). A key
// attached to a lease has two index records: attachPrefix, the lease's id
// and the key, with no value, which lists a lease's keys in key order;
// and keyLeasePrefix and the key, whose value is the lease's id, which
// finds a key's lease. The data record of the key (dataPrefix) is the same
// as any key's. The counter metaTTL holds the last id issued.
var (
	ttlPrefix      = []byte("t/")
	attachPrefix   = []byte("a/")
	keyLeasePrefix = []byte("l/")
	metaTTL        = []byte("m/ttl")
)

func ttlKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte{}, ttlPrefix...), id)
}

// attachKey is the index record of key attached to lease id; with key
// nil, the prefix of every key attached to it.
func attachKey(id uint64, key []byte) []byte {
	b := make([]byte, 0, len(attachPrefix)+8+len(key))
	b = binary.BigEndian.AppendUint64(append(b, attachPrefix...), id)
	return append(b, key...)
}

// ttlLeaseLen is the length of a lease record without an owner, and
// ttlOwnedLen of one with an owner.
const (
	ttlLeaseLen = 33
	ttlOwnedLen = ttlLeaseLen + 8
)

// encodeTTLLease lays a TTL lease out as its TTL and remaining TTL (ns, 8
// bytes each), the number of its keys and their bytes (4 bytes each), its
// attachment generation (8 bytes), a flag byte (1: kept alive), and then
// its owner, 8 bytes, if it has one. A lease without an owner has the
// layout of the records written before leases had one.
func encodeTTLLease(l TTLLease) []byte {
	b := make([]byte, 0, ttlOwnedLen)
	b = binary.BigEndian.AppendUint64(b, uint64(l.TTL))
	b = binary.BigEndian.AppendUint64(b, uint64(l.Remaining))
	b = binary.BigEndian.AppendUint32(b, uint32(l.Keys))
	b = binary.BigEndian.AppendUint32(b, uint32(l.KeyBytes))
	b = binary.BigEndian.AppendUint64(b, l.Gen)
	var f byte
	if l.KeptAlive {
		f = 1
	}
	b = append(b, f)
	if l.Owner != 0 {
		b = binary.BigEndian.AppendUint64(b, l.Owner)
	}
	return b
}

// decodeTTLLease decodes the record of lease id. It does not hold the
// counts of keys to MaxTTLKeys and MaxTTLKeyBytes: a lease filled under
// higher limits than today's is no corruption.
func decodeTTLLease(id uint64, b []byte) (TTLLease, error) {
	if len(b) != ttlLeaseLen && len(b) != ttlOwnedLen {
		return TTLLease{}, fmt.Errorf("corrupt TTL lease %016x: %d bytes, want %d or %d", id, len(b), ttlLeaseLen, ttlOwnedLen)
	}
	l := TTLLease{
		ID:        id,
		TTL:       time.Duration(binary.BigEndian.Uint64(b)),
		Remaining: time.Duration(binary.BigEndian.Uint64(b[8:])),
		Keys:      int(binary.BigEndian.Uint32(b[16:])),
		KeyBytes:  int(binary.BigEndian.Uint32(b[20:])),
		Gen:       binary.BigEndian.Uint64(b[24:]),
		KeptAlive: b[32] == 1,
	}
	if l.TTL <= 0 || l.Remaining < 0 || l.Gen == 0 || b[32] > 1 {
		return TTLLease{}, fmt.Errorf("corrupt TTL lease %016x: ttl %v, remaining %v, generation %d, flag %d", id, l.TTL, l.Remaining, l.Gen, b[32])
	}
	if len(b) == ttlOwnedLen {
		if l.Owner = binary.BigEndian.Uint64(b[ttlLeaseLen:]); l.Owner == 0 {
			return TTLLease{}, fmt.Errorf("corrupt TTL lease %016x: owner 0 written out", id)
		}
	}
	return l, nil
}

// decodeLeaseID decodes the value of a key's keyLeasePrefix record.
func decodeLeaseID(key, b []byte) (uint64, error) {
	if len(b) != 8 || binary.BigEndian.Uint64(b) == 0 {
		return 0, fmt.Errorf("corrupt lease of key %q: %x", key, b)
	}
	return binary.BigEndian.Uint64(b), nil
}

// leaseNotFound is the outcome of a command naming lease id, which does
// not exist.
func leaseNotFound(id uint64) error { return fmt.Errorf("%w: %016x", ErrLeaseNotFound, id) }

// leaseChanged is the outcome of a revocation of lease id that expected
// its attachment generation to be expect, which is gen.
func leaseChanged(id, gen, expect uint64) error {
	return fmt.Errorf("%w: lease %016x is at attachment generation %d, not %d", ErrLeaseChanged, id, gen, expect)
}

// invalidTTL is the outcome of a grant of a TTL of ttl, 0 or less.
func invalidTTL(ttl time.Duration) error { return fmt.Errorf("%w: TTL %v", ErrInvalidCommand, ttl) }

func leaseFull(id uint64) error {
	return fmt.Errorf("%w: lease %016x holds %d keys or %d bytes of them", ErrLeaseFull, id, MaxTTLKeys, MaxTTLKeyBytes)
}

// getTTLLease reads lease id, if it exists.
func getTTLLease(tx txn, id uint64) (TTLLease, bool, error) {
	b, ok, err := tx.get(ttlKey(id))
	if err != nil || !ok {
		return TTLLease{}, false, err
	}
	l, err := decodeTTLLease(id, b)
	return l, err == nil, err
}

// ttlKeys returns the keys attached to lease id, in key order.
func ttlKeys(tx txn, id uint64) ([]string, error) {
	prefix := attachKey(id, nil)
	var keys []string
	err := tx.scan(prefix, nil, func(k, _ []byte) error {
		keys = append(keys, string(k[len(prefix):]))
		return nil
	})
	return keys, err
}

// keyLease returns the id of the lease key is attached to, 0 if none.
func keyLease(tx txn, key []byte) (uint64, error) {
	b, ok, err := tx.get(prefixed(keyLeasePrefix, key))
	if err != nil || !ok {
		return 0, err
	}
	return decodeLeaseID(key, b)
}

// checkAttach tells whether the write c, an OpPut or OpCAS, may attach
// its key to c.Lease: if not, it returns the write's outcome, whose Err
// says why (ErrLeaseNotFound, ErrLeaseFull).
func checkAttach(tx txn, c Command) (Result, error) {
	if c.Lease == 0 {
		return Result{}, nil
	}
	l, ok, err := getTTLLease(tx, c.Lease)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return Result{Err: leaseNotFound(c.Lease)}, nil
	}
	cur, err := keyLease(tx, c.Key)
	if err != nil || cur == c.Lease {
		return Result{}, err
	}
	if l.Keys+1 > MaxTTLKeys || l.KeyBytes+len(c.Key) > MaxTTLKeyBytes {
		return Result{Err: leaseFull(c.Lease)}, nil
	}
	return Result{}, nil
}

// attach attaches key to lease id (0: to none), after a write of key
// applied, detaching it from the lease it was attached to. checkAttach has
// found that it may.
func attach(tx txn, key []byte, id uint64) error {
	cur, err := keyLease(tx, key)
	if err != nil || cur == id {
		return err
	}
	if cur != 0 {
		if err := moveKey(tx, cur, key, -1); err != nil {
			return err
		}
		if err := tx.del(attachKey(cur, key)); err != nil {
			return err
		}
	}
	lk := prefixed(keyLeasePrefix, key)
	if id == 0 {
		return tx.del(lk)
	}
	if err := moveKey(tx, id, key, 1); err != nil {
		return err
	}
	if err := tx.set(attachKey(id, key), nil); err != nil {
		return err
	}
	return tx.set(lk, binary.BigEndian.AppendUint64(nil, id))
}

// moveKey counts key in (delta 1) or out of (delta -1) lease id's record;
// counting it in raises the lease's attachment generation (TTLLease.Gen).
func moveKey(tx txn, id uint64, key []byte, delta int) error {
	l, ok, err := getTTLLease(tx, id)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("corrupt: key %q is attached to TTL lease %016x, which does not exist", key, id)
	}
	l.Keys += delta
	l.KeyBytes += delta * len(key)
	if delta > 0 {
		l.Gen++
	}
	if l.Keys < 0 || l.KeyBytes < 0 {
		return fmt.Errorf("corrupt: TTL lease %016x counts fewer keys than are attached to it", id)
	}
	return tx.set(ttlKey(id), encodeTTLLease(l))
}

// execTTL applies the TTL lease command c (OpGrantTTL, OpRevokeTTL,
// OpCheckpointTTL, OpKeptAliveTTL).
func execTTL(tx txn, ct *counters, c Command) (Result, error) {
	switch c.Op {
	case OpGrantTTL:
		if c.Term <= 0 {
			return Result{Err: invalidTTL(c.Term)}, nil
		}
		ct.ttl++
		l := TTLLease{ID: ct.ttl, TTL: c.Term, Remaining: c.Term, Gen: 1, Owner: c.Owner}
		return Result{Lease: l.ID}, tx.set(ttlKey(l.ID), encodeTTLLease(l))
	case OpRevokeTTL:
		return revokeTTL(tx, ct, c.Lease, c.Expect, c.Expired, c.At)
	case OpCheckpointTTL:
		if len(c.Checkpoints) > MaxTTLLeasesPerCommand {
			return Result{Err: fmt.Errorf("%w: %d checkpoints, at most %d", ErrInvalidCommand, len(c.Checkpoints), MaxTTLLeasesPerCommand)}, nil
		}
		for _, cp := range c.Checkpoints {
			if cp.Remaining < 0 {
				return Result{Err: fmt.Errorf("%w: lease %016x has %v remaining", ErrInvalidCommand, cp.ID, cp.Remaining)}, nil
			}
		}
		for _, cp := range c.Checkpoints {
			err := updateTTL(tx, cp.ID, func(l *TTLLease) { l.Remaining, l.KeptAlive = cp.Remaining, false })
			if err != nil {
				return Result{}, err
			}
		}
		return Result{}, nil
	case OpKeptAliveTTL:
		if len(c.Leases) > MaxTTLLeasesPerCommand {
			return Result{Err: fmt.Errorf("%w: %d leases, at most %d", ErrInvalidCommand, len(c.Leases), MaxTTLLeasesPerCommand)}, nil
		}
		for _, id := range c.Leases {
			if err := updateTTL(tx, id, func(l *TTLLease) { l.KeptAlive = true }); err != nil {
				return Result{}, err
			}
		}
		return Result{}, nil
	}
	return Result{}, fmt.Errorf("unknown command %v", c.Op)
}

// updateTTL changes lease id with fn, if it exists.
func updateTTL(tx txn, id uint64, fn func(*TTLLease)) error {
	l, ok, err := getTTLLease(tx, id)
	if err != nil || !ok {
		return err
	}
	was := l
	if fn(&l); l.Remaining == was.Remaining && l.KeptAlive == was.KeptAlive {
		return nil // what fn may change (a checkpoint, a mark) is as it was
	}
	return tx.set(ttlKey(id), encodeTTLLease(l))
}

// revokeTTL deletes the keys attached to lease id at one revision, and
// the lease, if its attachment generation is expect (0: whatever it is);
// their events say that the lease expired if expired says so.
func revokeTTL(tx txn, ct *counters, id, expect uint64, expired bool, at time.Time) (Result, error) {
	l, ok, err := getTTLLease(tx, id)
	if err != nil {
		return Result{}, err
	}
	if !ok {
		return Result{Err: leaseNotFound(id)}, nil
	}
	if expect != 0 && l.Gen != expect {
		return Result{Err: leaseChanged(id, l.Gen, expect)}, nil
	}
	keys, err := ttlKeys(tx, id)
	if err != nil {
		return Result{}, err
	}
	if len(keys) != l.Keys {
		return Result{}, fmt.Errorf("corrupt: TTL lease %016x counts %d keys, but %d are attached", id, l.Keys, len(keys))
	}
	// Every attached key holds a value (a deletion detaches): each
	// deletion replaces a record, and the count of records stays.
	del := encodeRecord(Record{Version: ct.rev + 1})
	kind := EventDelete
	if expired {
		kind = EventExpire
	}
	for _, k := range keys {
		key := []byte(k)
		if err := recordEvent(tx, ct, ct.rev+1, kind, key, nil, id); err != nil {
			return Result{}, err
		}
		for _, err := range []error{
			tx.set(prefixed(dataPrefix, key), del),
			noteDeletion(tx, ct.rev+1, key),
			tx.del(prefixed(keyLeasePrefix, key)),
			tx.del(attachKey(id, key)),
		} {
			if err != nil {
				return Result{}, err
			}
		}
	}
	locks, err := endBoundLocks(tx, id, expired, at)
	if err != nil {
		return Result{}, err
	}
	if err := tx.del(ttlKey(id)); err != nil {
		return Result{}, err
	}
	if len(keys) == 0 {
		return Result{Locks: locks}, nil
	}
	ct.rev++
	return Result{Version: ct.rev, Keys: keys, Locks: locks}, nil
}

// errStopScan ends a scan early; it is no failure.
var errStopScan = errors.New("stop the scan")

// ttlPageSize is how many leases TTLLeases reads at a time.
const ttlPageSize = 1024

// ttlPage reads up to ttlPageSize leases with an id at or above from.
func ttlPage(tx txn, from uint64) ([]TTLLease, error) {
	var ls []TTLLease
	err := tx.scan(ttlPrefix, binary.BigEndian.AppendUint64(append([]byte(nil), ttlPrefix...), from), func(k, v []byte) error {
		if len(k) != len(ttlPrefix)+8 {
			return fmt.Errorf("corrupt TTL lease key %x", k)
		}
		l, err := decodeTTLLease(binary.BigEndian.Uint64(k[len(ttlPrefix):]), v)
		if err != nil {
			return err
		}
		if ls = append(ls, l); len(ls) == ttlPageSize {
			return errStopScan
		}
		return nil
	})
	if errors.Is(err, errStopScan) {
		err = nil
	}
	return ls, err
}

// eachTTLLease calls fn with every lease, reading them a page at a time
// with page, which holds the store's lock while it runs.
func eachTTLLease(page func(from uint64) ([]TTLLease, error), fn func(TTLLease) error) error {
	for from := uint64(1); ; {
		ls, err := page(from)
		if err != nil {
			return err
		}
		for _, l := range ls {
			if err := fn(l); err != nil {
				return err
			}
		}
		if len(ls) < ttlPageSize || ls[len(ls)-1].ID == ^uint64(0) {
			return nil
		}
		from = ls[len(ls)-1].ID + 1
	}
}

// checkTTLItem checks one stored key of the TTL lease layout and its value
// against the counters and the records it implies, which it reads in tx.
func checkTTLItem(tx txn, key, v []byte, ct counters) error {
	switch {
	case bytes.HasPrefix(key, ttlPrefix):
		if len(key) != len(ttlPrefix)+8 {
			return fmt.Errorf("%w: TTL lease key of %d bytes", ErrDamaged, len(key))
		}
		id := binary.BigEndian.Uint64(key[len(ttlPrefix):])
		l, err := decodeTTLLease(id, v)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrDamaged, err)
		}
		if id == 0 || id > ct.ttl {
			return fmt.Errorf("%w: TTL lease %016x is above the lease counter %d", ErrDamaged, id, ct.ttl)
		}
		keys, err := ttlKeys(tx, id)
		if err != nil {
			return err
		}
		n, nb := len(keys), 0
		for _, k := range keys {
			nb += len(k)
		}
		if n != l.Keys || nb != l.KeyBytes {
			return fmt.Errorf("%w: TTL lease %016x counts %d keys of %d bytes, but %d of %d bytes are attached", ErrDamaged, id, l.Keys, l.KeyBytes, n, nb)
		}
	case bytes.HasPrefix(key, attachPrefix):
		if len(key) < len(attachPrefix)+8 {
			return fmt.Errorf("%w: attachment key of %d bytes", ErrDamaged, len(key))
		}
		id := binary.BigEndian.Uint64(key[len(attachPrefix):])
		k := key[len(attachPrefix)+8:]
		if _, ok, err := tx.get(ttlKey(id)); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: key %q is attached to TTL lease %016x, which does not exist", ErrDamaged, k, id)
		}
		b, ok, err := tx.get(prefixed(keyLeasePrefix, k))
		if err != nil {
			return err
		}
		if got, _ := decodeLeaseID(k, b); !ok || got != id {
			return fmt.Errorf("%w: key %q is listed under TTL lease %016x, but names lease %x", ErrDamaged, k, id, b)
		}
	case bytes.HasPrefix(key, keyLeasePrefix):
		k := key[len(keyLeasePrefix):]
		id, err := decodeLeaseID(k, v)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrDamaged, err)
		}
		if _, ok, err := tx.get(attachKey(id, k)); err != nil {
			return err
		} else if !ok {
			return fmt.Errorf("%w: key %q names TTL lease %016x, which does not list it", ErrDamaged, k, id)
		}
		b, ok, err := tx.get(prefixed(dataPrefix, k))
		if err != nil {
			return err
		}
		if r, err := decodeRecord(b); !ok || err != nil || !r.Found {
			return fmt.Errorf("%w: key %q is attached to TTL lease %016x but holds no value", ErrDamaged, k, id)
		}
	}
	return nil
}
