// Write leases as locks (DESIGN §5.1): a write lease bound to a TTL lease,
// which lives exactly as long as that lease, and the guard that makes a
// write commit only under a given lock's current token.
//
// A write lease is recorded under wleasPrefix and its key (exec.go). One
// bound to a TTL lease records the lease's id too, and an index record
// under boundPrefix, the lease's id (8 bytes) and the key, whose value is
// the lock's token, finds the locks a lease holds: OpRevokeTTL ends them
// with the keys it deletes.

package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

var (
	boundPrefix = []byte("b/")
	// delayPrefix and a key hold the end of the key's lock delay, Unix
	// nanoseconds of the wall clock (State.LockDelays).
	delayPrefix = []byte("y/")
)

// LockRecordPrefix begins the name of every lock record: the record of the
// write lease on key K is read as the key LockRecordPrefix + K, whose value
// is the lease's token and TTL lease (EncodeLockRecord), and whose version
// is its token (0: not held). No such key is stored, nor may a client write
// one (keys that begin with ReservedPrefix are the server's); a read of it
// takes a read lease like any key's, invalidated when the lock is granted
// or ends (DESIGN §5.1). Package protocol names the same bytes.
const (
	ReservedPrefix   = "\xff\xff"
	LockRecordPrefix = ReservedPrefix + "lock\x00"
)

// LockRecordKey returns the name of the record of the write lease on key.
func LockRecordKey(key string) string { return LockRecordPrefix + key }

// EncodeLockRecord returns the record of write lease wl, held (ok) or not,
// as a read of its LockRecordKey returns it: its token and its TTL lease,
// 8 bytes each, at version token; not found at version 0 when not held.
func EncodeLockRecord(wl WriteLease, ok bool) Record {
	if !ok {
		return Record{}
	}
	v := binary.BigEndian.AppendUint64(make([]byte, 0, 16), wl.Token)
	return Record{Version: wl.Token, Found: true, Value: binary.BigEndian.AppendUint64(v, wl.Lease)}
}

// MaxTTLLocks bounds the write leases bound to one TTL lease, so that its
// revocation, which ends them all in one step, stays small.
const MaxTTLLocks = 1000

// ErrFenced is the outcome of a write whose Guard failed: the lock it
// names is not held with the token it gives. Nothing changed. Like
// ErrVersionMismatch, it is part of the command's deterministic outcome.
var ErrFenced = errors.New("guard failed: the lock is not held with that token")

// Guard makes a write (OpPut, OpDelete, OpCAS) or a transaction commit
// only if the write lease on Key is held with Token, as the store records
// it when the command applies; otherwise the outcome is ErrFenced and
// nothing changes. A lock that has ended, or was granted again since with
// a newer token, fails the guard.
type Guard struct {
	Key   []byte
	Token uint64
}

// BoundLock is a write lease bound to a TTL lease: one that Store.TTLLease
// lists (TTLLease.Locks), or that an OpRevokeTTL ended with its lease
// (Result.Locks).
type BoundLock struct {
	Key   string
	Token uint64
	// Delay is the lock delay that an expiry's OpRevokeTTL started on the
	// key (WriteLease.LockDelay), 0 if none.
	Delay time.Duration
}

// boundKey is the index record of the lock on key bound to lease id; with
// key nil, the prefix of every lock bound to it.
func boundKey(id uint64, key []byte) []byte {
	b := make([]byte, 0, len(boundPrefix)+8+len(key))
	b = binary.BigEndian.AppendUint64(append(b, boundPrefix...), id)
	return append(b, key...)
}

// fenced is the outcome of a guard that failed: the lock is not held
// (held false) or is held with token cur.
func fenced(g *Guard, cur uint64, held bool) error {
	if !held {
		return fmt.Errorf("%w: %q is not locked (token %d given)", ErrFenced, g.Key, g.Token)
	}
	return fmt.Errorf("%w: %q is held with token %d, not %d", ErrFenced, g.Key, cur, g.Token)
}

// checkGuard returns the outcome of a write whose guard g fails, or a
// zero Result if g holds (or is nil): ErrFenced, with the lock's current
// token as its Version (0: not held).
func checkGuard(tx txn, g *Guard) (Result, error) {
	if g == nil {
		return Result{}, nil
	}
	wl, ok, err := getWriteLease(tx, g.Key)
	if err != nil {
		return Result{}, err
	}
	if !ok || wl.Token != g.Token {
		return Result{Version: wl.Token, Err: fenced(g, wl.Token, ok)}, nil
	}
	return Result{}, nil
}

// getWriteLease reads the write lease recorded on key.
func getWriteLease(tx txn, key []byte) (WriteLease, bool, error) {
	b, ok, err := tx.get(prefixed(wleasPrefix, key))
	if err != nil || !ok {
		return WriteLease{}, false, err
	}
	wl, err := decodeWriteLease(key, b)
	return wl, err == nil, err
}

// grantWriteLease carries out an OpGrantWriteLease: the next fencing
// token, recorded as the write lease of c.Session (c.Client) on c.Key in
// place of any earlier one, bound to TTL lease c.Lease if it is not 0.
// Binding raises the TTL lease's attachment generation, so that a
// revocation that read its locks before does not end this one unseen
// (OpRevokeTTL's Expect). A lease that does not exist (ErrLeaseNotFound)
// or binds MaxTTLLocks locks (ErrLeaseFull) fails the grant: no token is
// taken and nothing changes.
func grantWriteLease(tx txn, ct *counters, c Command) (Result, error) {
	if c.Lease != 0 {
		l, ok, err := getTTLLease(tx, c.Lease)
		if err != nil {
			return Result{}, err
		}
		if !ok {
			return Result{Err: leaseNotFound(c.Lease)}, nil
		}
		n := 0
		err = tx.scan(boundKey(c.Lease, nil), nil, func(k, _ []byte) error {
			if n++; n >= MaxTTLLocks {
				return errStopScan
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopScan) {
			return Result{}, err
		}
		if n >= MaxTTLLocks {
			return Result{Err: fmt.Errorf("%w: TTL lease %016x holds %d locks, at most %d", ErrLeaseFull, c.Lease, n, MaxTTLLocks)}, nil
		}
		l.Gen++
		if err := tx.set(ttlKey(c.Lease), encodeTTLLease(l)); err != nil {
			return Result{}, err
		}
	}
	if err := unbind(tx, c.Key); err != nil {
		return Result{}, err
	}
	if err := tx.del(prefixed(delayPrefix, c.Key)); err != nil {
		return Result{}, err
	}
	ct.fence++
	wl := WriteLease{Key: string(c.Key), Token: ct.fence, Session: c.Session, Term: c.Term, Client: c.Client, Lease: c.Lease}
	if c.Lease != 0 {
		wl.LockDelay = max(c.LockDelay, 0)
	}
	if err := tx.set(prefixed(wleasPrefix, c.Key), encodeWriteLease(wl)); err != nil {
		return Result{}, err
	}
	if c.Lease != 0 {
		if err := tx.set(boundKey(c.Lease, c.Key), binary.BigEndian.AppendUint64(nil, wl.Token)); err != nil {
			return Result{}, err
		}
	}
	return Result{Token: ct.fence}, nil
}

// unbind removes the index record of the write lease on key, if it is
// bound to a TTL lease.
func unbind(tx txn, key []byte) error {
	wl, ok, err := getWriteLease(tx, key)
	if err != nil || !ok || wl.Lease == 0 {
		return err
	}
	return tx.del(boundKey(wl.Lease, key))
}

// endWriteLease carries out an OpEndWriteLease: it removes the write lease
// on c.Key if its token is c.Token.
func endWriteLease(tx txn, c Command) (Result, error) {
	wl, ok, err := getWriteLease(tx, c.Key)
	if err != nil || !ok || wl.Token != c.Token {
		return Result{}, err
	}
	if err := unbind(tx, c.Key); err != nil {
		return Result{}, err
	}
	return Result{}, tx.del(prefixed(wleasPrefix, c.Key))
}

// endBoundLocks ends every write lease bound to TTL lease id, for its
// revocation, and returns them by key. If the lease expired, a lock with a
// lock delay leaves its key unavailable until at plus that delay.
func endBoundLocks(tx txn, id uint64, expired bool, at time.Time) ([]BoundLock, error) {
	locks, err := boundLocks(tx, id)
	if err != nil {
		return nil, err
	}
	for i, l := range locks {
		key := []byte(l.Key)
		if err := tx.del(boundKey(id, key)); err != nil {
			return nil, err
		}
		wl, ok, err := getWriteLease(tx, key)
		if err != nil {
			return nil, err
		}
		if !ok || wl.Token != l.Token {
			continue
		}
		if err := tx.del(prefixed(wleasPrefix, key)); err != nil {
			return nil, err
		}
		if expired && wl.LockDelay > 0 {
			locks[i].Delay = wl.LockDelay
			until := binary.BigEndian.AppendUint64(nil, uint64(at.Add(wl.LockDelay).UnixNano()))
			if err := tx.set(prefixed(delayPrefix, key), until); err != nil {
				return nil, err
			}
		}
	}
	return locks, nil
}

// loadLockDelays reads the lock delays recorded into st.
func loadLockDelays(tx txn, st *State) error {
	return tx.scan(delayPrefix, nil, func(k, v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("corrupt lock delay of %d bytes on %q", len(v), k[len(delayPrefix):])
		}
		st.LockDelays = append(st.LockDelays, LockDelay{Key: string(k[len(delayPrefix):]), Until: time.Unix(0, int64(binary.BigEndian.Uint64(v)))})
		return nil
	})
}

// boundLocks returns the write leases bound to TTL lease id, by key.
func boundLocks(tx txn, id uint64) ([]BoundLock, error) {
	prefix := boundKey(id, nil)
	var locks []BoundLock
	err := tx.scan(prefix, nil, func(k, v []byte) error {
		if len(v) != 8 {
			return fmt.Errorf("corrupt lock index record of %d bytes", len(v))
		}
		locks = append(locks, BoundLock{Key: string(k[len(prefix):]), Token: binary.BigEndian.Uint64(v)})
		return nil
	})
	return locks, err
}
