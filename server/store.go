package server

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/leased/leased/protocol"
)

// Keys of the badger database. Data keys are prefixed so that metadata can
// never collide with a user key.
var (
	dataPrefix  = []byte("d/")
	metaRev     = []byte("m/rev")
	metaFence   = []byte("m/fence")
	metaStarted = []byte("m/started")
	// The restart hold: the term+ε of the run that last opened the
	// database, and the wall-clock time (Unix ns) until which that run held
	// writes, with the length of that hold. See openStore.
	metaLeaseWait = []byte("m/leasewait")
	metaHorizon   = []byte("m/horizon")
	metaHoldSpan  = []byte("m/holdspan")
)

// record is the committed state of one key. A missing key has Version 0, or
// the revision of its deletion.
type record struct {
	Value   []byte
	Version uint64
	Found   bool
}

// mutation is one write or token grant handed to the store by the
// committer.
type mutation struct {
	op     protocol.WriteOp // 0: issue a fencing token
	key    []byte
	value  []byte
	expect uint64

	// results
	version uint64 // the committed version, or the current one on a mismatch
	token   uint64 // the fencing token issued
	err     error
}

// store keeps committed values, the revision counter and the fencing token
// counter in badger, with synchronous writes.
type store struct {
	db *badger.DB

	mu    sync.Mutex // guards rev and fence, and serializes commits
	rev   uint64
	fence uint64

	restarted bool          // the folder held a database before this open
	hold      time.Duration // restarted: how long after now (given to openStore) writes must wait
}

// openStore opens the database in dir. wait is the term+ε of the leases
// this run grants, and now the wall-clock time.
//
// On a restart, leases granted before it may still be live: those of the
// previous run for its own term+ε (recorded at its open, so a restart with
// a shorter term does not shorten the wait), and, if the previous run ended
// before its own hold was over, those that hold protected. hold is the
// longer of the two; the carried part is bounded by its original length, so
// a wall clock that stepped back cannot stretch it.
func openStore(dir string, logger *slog.Logger, wait time.Duration, now time.Time) (*store, error) {
	opts := badger.DefaultOptions(dir).
		WithSyncWrites(true).
		WithLogger(badgerLogger{logger}).
		WithLoggingLevel(badger.WARNING).
		WithMetricsEnabled(false).
		WithNumVersionsToKeep(1).
		WithMemTableSize(16 << 20).
		WithValueLogFileSize(64 << 20).
		WithBlockCacheSize(32 << 20).
		WithIndexCacheSize(16 << 20).
		// Values over 64 KiB go to the value log, so that a transaction of
		// many large values still fits badger's batch limit.
		WithValueThreshold(64 << 10)
	db, err := badger.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("open database in %s: %w", dir, err)
	}
	s := &store{db: db}
	err = db.Update(func(txn *badger.Txn) error {
		var err error
		if s.rev, err = getUint(txn, metaRev); err != nil {
			return err
		}
		if s.fence, err = getUint(txn, metaFence); err != nil {
			return err
		}
		switch _, err := txn.Get(metaStarted); {
		case err == nil:
			s.restarted = true
		case !errors.Is(err, badger.ErrKeyNotFound):
			return err
		}
		prevWait, err := getUint(txn, metaLeaseWait)
		if err != nil {
			return err
		}
		prevHorizon, err := getUint(txn, metaHorizon)
		if err != nil {
			return err
		}
		prevSpan, err := getUint(txn, metaHoldSpan)
		if err != nil {
			return err
		}
		if s.restarted {
			if prevWait == 0 {
				prevWait = uint64(wait) // written before the wait was recorded
			}
			s.hold = time.Duration(prevWait)
			if prevHorizon > 0 {
				carry := time.Duration(int64(prevHorizon) - now.UnixNano())
				s.hold = max(s.hold, min(carry, time.Duration(prevSpan)))
			}
			if err := putUint(txn, metaHorizon, uint64(now.UnixNano()+int64(s.hold))); err != nil {
				return err
			}
			if err := putUint(txn, metaHoldSpan, uint64(s.hold)); err != nil {
				return err
			}
		}
		if err := putUint(txn, metaLeaseWait, uint64(wait)); err != nil {
			return err
		}
		return txn.Set(metaStarted, []byte{1})
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("read database metadata in %s: %w", dir, err)
	}
	return s, nil
}

func (s *store) close() error { return s.db.Close() }

func (s *store) revision() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev
}

func getUint(txn *badger.Txn, key []byte) (uint64, error) {
	item, err := txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var v uint64
	err = item.Value(func(b []byte) error {
		if len(b) != 8 {
			return fmt.Errorf("metadata %s: %d bytes, want 8", key, len(b))
		}
		v = binary.BigEndian.Uint64(b)
		return nil
	})
	return v, err
}

func putUint(txn *badger.Txn, key []byte, v uint64) error {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return txn.Set(key, b[:])
}

func dataKey(key []byte) []byte {
	k := make([]byte, 0, len(dataPrefix)+len(key))
	return append(append(k, dataPrefix...), key...)
}

// encodeRecord lays a record out as an 8-byte version, a flag byte (1:
// found) and the value.
func encodeRecord(r record) []byte {
	b := make([]byte, 9+len(r.Value))
	binary.BigEndian.PutUint64(b, r.Version)
	if r.Found {
		b[8] = 1
	}
	copy(b[9:], r.Value)
	return b
}

func decodeRecord(b []byte) (record, error) {
	if len(b) < 9 || b[8] > 1 {
		return record{}, fmt.Errorf("corrupt record of %d bytes", len(b))
	}
	r := record{Version: binary.BigEndian.Uint64(b), Found: b[8] == 1}
	if r.Found {
		r.Value = append([]byte{}, b[9:]...)
	}
	return r, nil
}

func readRecord(txn *badger.Txn, dk []byte) (record, error) {
	item, err := txn.Get(dk)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return record{}, nil
	}
	if err != nil {
		return record{}, err
	}
	var r record
	err = item.Value(func(b []byte) error {
		r, err = decodeRecord(b)
		return err
	})
	return r, err
}

// get returns the committed record of key.
func (s *store) get(key []byte) (record, error) {
	var r record
	err := s.db.View(func(txn *badger.Txn) error {
		var err error
		r, err = readRecord(txn, dataKey(key))
		return err
	})
	return r, err
}

// apply commits a batch of mutations in order, and fills in their results.
// It uses one transaction and one fsync for as much of the batch as badger
// takes in one transaction, and more transactions for the rest. A
// CompareAndSwap whose expectation fails gets errVersionMismatch and changes
// nothing. If a transaction fails, each of its mutations gets the error and
// none of them changes anything; mutations committed by earlier
// transactions of the batch stand.
func (s *store) apply(batch []*mutation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(batch) > 0 {
		batch = batch[s.applyTxn(batch):]
	}
}

// applyTxn commits a prefix of batch in one transaction and returns its
// length, at least 1. When badger finds the transaction too big, it tries
// again with a shorter prefix.
func (s *store) applyTxn(batch []*mutation) int {
	for {
		n, err := s.tryTxn(batch)
		if errors.Is(err, badger.ErrTxnTooBig) && n > 1 {
			// Full after the last mutation: the metadata or the commit
			// did not fit. Leave that mutation for the next transaction.
			batch = batch[:n-1]
			continue
		}
		if err != nil {
			err = fmt.Errorf("%w: storage: %v", errInternal, err)
			for _, m := range batch[:n] {
				m.err, m.version, m.token = err, 0, 0
			}
		}
		return n
	}
}

// tryTxn commits, in one transaction, as long a prefix of batch as fits,
// and returns its length. On error nothing is committed and the results of
// that prefix are not set.
func (s *store) tryTxn(batch []*mutation) (int, error) {
	rev, fence := s.rev, s.fence
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	n := len(batch)
	for i, m := range batch {
		m.err, m.version, m.token = nil, 0, 0
		if m.op == 0 {
			fence++
			m.token = fence
			continue
		}
		dk := dataKey(m.key)
		cur, err := readRecord(txn, dk)
		if err != nil {
			return i + 1, err
		}
		// Version 0 means "absent": a deleted key matches it too.
		if m.op == protocol.OpCAS && cur.Version != m.expect && (m.expect != 0 || cur.Found) {
			m.version = cur.Version
			m.err = fmt.Errorf("%w: key is at version %d, not %d", errVersionMismatch, cur.Version, m.expect)
			continue
		}
		r := record{Version: rev + 1, Found: m.op != protocol.OpDelete, Value: m.value}
		if err := txn.Set(dk, encodeRecord(r)); err != nil {
			if errors.Is(err, badger.ErrTxnTooBig) && i > 0 {
				n = i // the rest goes in the next transaction
				break
			}
			return i + 1, err
		}
		rev++
		m.version = rev
	}
	if rev != s.rev {
		if err := putUint(txn, metaRev, rev); err != nil {
			return n, err
		}
	}
	if fence != s.fence {
		if err := putUint(txn, metaFence, fence); err != nil {
			return n, err
		}
	}
	if err := txn.Commit(); err != nil {
		return n, err
	}
	s.rev, s.fence = rev, fence
	return n, nil
}

// badgerLogger sends badger's log lines to slog.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any) {
	b.l.Error(fmt.Sprintf(f, a...), "component", "badger")
}
func (b badgerLogger) Warningf(f string, a ...any) {
	b.l.Warn(fmt.Sprintf(f, a...), "component", "badger")
}
func (b badgerLogger) Infof(f string, a ...any) {
	b.l.Info(fmt.Sprintf(f, a...), "component", "badger")
}
func (b badgerLogger) Debugf(f string, a ...any) {
	b.l.Debug(fmt.Sprintf(f, a...), "component", "badger")
}
