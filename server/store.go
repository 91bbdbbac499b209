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
	dataPrefix = []byte("d/")
	metaRev    = []byte("m/rev")
	metaFence  = []byte("m/fence")
	// The lease horizon (DESIGN §7): a wall-clock time (Unix ns) after
	// which no lease granted by an earlier run can still be live, and how
	// far past the moment it was written it reached (ns), which bounds the
	// wait when the wall clock has stepped back since.
	metaHorizon     = []byte("m/horizon")
	metaHorizonSpan = []byte("m/horizonspan")
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

// store keeps committed values, the revision counter, the fencing token
// counter and the lease horizon in badger, with synchronous writes.
type store struct {
	db *badger.DB

	mu    sync.Mutex // guards rev, fence, usedRev and usedFence, and serializes commits
	rev   uint64     // the revision persisted: of the last committed write, or a number skipped after it
	fence uint64     // the last fencing token issued
	// usedRev and usedFence are the highest revision and token handed to a
	// transaction whose commit failed. Its outcome is unknown: badger may
	// still replay it after a restart. Later writes never reuse them, so a
	// version always names one value.
	usedRev, usedFence uint64

	faultMu sync.Mutex // guards fault
	// fault, if set, is called before every commit and its error fails the
	// commit: tests inject storage faults with it.
	fault func() error

	// horizon is the lease horizon found when the store was opened, and
	// hold how long after the open (its now) writes must wait for it; 0 if
	// it had passed or none was recorded.
	horizon time.Time
	hold    time.Duration
}

// openStore opens the database in dir, and reads the lease horizon an
// earlier run left, with now the wall-clock time. The wait for it is
// bounded by how far ahead it reached when it was written, so a wall clock
// that stepped back cannot stretch it.
func openStore(dir string, logger *slog.Logger, now time.Time) (*store, error) {
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
	err = db.View(func(txn *badger.Txn) error {
		var err error
		if s.rev, err = getUint(txn, metaRev); err != nil {
			return err
		}
		if s.fence, err = getUint(txn, metaFence); err != nil {
			return err
		}
		horizon, err := getUint(txn, metaHorizon)
		if err != nil || horizon == 0 {
			return err
		}
		span, err := getUint(txn, metaHorizonSpan)
		if err != nil {
			return err
		}
		s.horizon = time.Unix(0, int64(horizon))
		s.hold = min(s.horizon.Sub(now), time.Duration(span))
		s.hold = max(s.hold, 0)
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("read database metadata in %s: %w", dir, err)
	}
	return s, nil
}

// setHorizon persists the lease horizon h, written at now, and returns
// once it is durable.
func (s *store) setHorizon(h, now time.Time) error {
	txn := s.db.NewTransaction(true)
	defer txn.Discard()
	if err := putUint(txn, metaHorizon, uint64(h.UnixNano())); err != nil {
		return err
	}
	if err := putUint(txn, metaHorizonSpan, uint64(max(h.Sub(now), 0))); err != nil {
		return err
	}
	return s.commit(txn)
}

// commit commits txn, unless an injected fault fails it first.
func (s *store) commit(txn *badger.Txn) error {
	s.faultMu.Lock()
	fault := s.fault
	s.faultMu.Unlock()
	if fault != nil {
		if err := fault(); err != nil {
			return err
		}
	}
	return txn.Commit()
}

// injectFault makes every later commit call f first and fail with its
// error, if any; nil removes the fault. Tests call it.
func (s *store) injectFault(f func() error) {
	s.faultMu.Lock()
	s.fault = f
	s.faultMu.Unlock()
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
// none of them is acknowledged or visible while the server runs; mutations
// committed by earlier transactions of the batch stand. A failed commit may
// still have reached the disk, to be replayed after a restart: like a write
// whose reply was lost, its outcome is unknown to its writer. Its versions
// and tokens are never reused.
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
			err = fmt.Errorf("%w: storage failed to persist the change, which is not acknowledged: %v", errInternal, err)
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
	rev, fence := max(s.rev, s.usedRev), max(s.fence, s.usedFence)
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
	// The counters are persisted whenever they pass what is persisted, also
	// when they only skip the numbers of a failed commit.
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
	if err := s.commit(txn); err != nil {
		s.usedRev, s.usedFence = rev, fence
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
