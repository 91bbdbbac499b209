package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	badgeroptions "github.com/dgraph-io/badger/v4/options"
)

// Badger is the Store on disk: a badger database with synchronous writes.
// One Apply is one transaction and one fsync, or several when the batch is
// larger than a transaction takes.
type Badger struct {
	dir  string
	opts badger.Options

	amu sync.Mutex // serializes Apply, Reopen and Close; guards ct, applied and failed
	ct  counters   // as of the last committed transaction
	// applied is the applied index (ApplyEntry) as of the last committed
	// transaction, kept here so that an entry need not read it back.
	applied uint64
	failed  bool         // an Apply or a Reopen failed; Reopen clears it
	mu      sync.RWMutex // guards db and closed: held shared while db is used, exclusively to change them
	db      *badger.DB   // nil after Close, or after a Reopen that failed
	closed  bool
	// clients caches client records for the write path (clientcache.go).
	clients clientCache
	// gc is the value-log collector that StartGC starts (gc.go); Close
	// stops it.
	gc collector
	// broken is failed, for the value-log collector, which reads it
	// without amu.
	broken atomic.Bool
}

// Option changes how Open opens the database.
type Option func(*badger.Options)

// NoSync makes commits durable only at Sync, Snapshot and Close, not at
// every commit: for the state a replicated log applies, where the log is
// what is durable, and a restart applies again the entries past the
// applied index (see ApplyEntry). Apply then no longer means durable.
func NoSync() Option { return func(o *badger.Options) { o.SyncWrites = false } }

// Open opens, or creates, the database in dir. logger receives badger's
// log lines (badgerLogger; nil means slog.Default()), and nothing of
// badger's reaches stderr itself.
func Open(dir string, logger *slog.Logger, options ...Option) (*Badger, error) {
	if logger == nil {
		logger = slog.Default()
	}
	opts := badger.DefaultOptions(dir).
		WithSyncWrites(true).
		// Not WithLoggingLevel: it replaces the logger with badger's
		// own, which writes to stderr.
		WithLogger(badgerLogger{logger}).
		WithMetricsEnabled(false).
		WithNumVersionsToKeep(1).
		WithMemTableSize(memTableSize).
		WithValueLogFileSize(valueLogFileSize).
		WithBlockCacheSize(32 << 20).
		WithIndexCacheSize(16 << 20).
		// Values over 64 KiB go to the value log, so that a transaction of
		// many large values still fits badger's batch limit.
		WithValueThreshold(64 << 10).
		// Verify every table block and every value-log entry read, so that
		// damaged files give an error, never a key that reads as absent
		// or a wrong value (ErrDamaged; BenchmarkBadgerGet measures the
		// cost).
		WithChecksumVerificationMode(badgeroptions.OnBlockRead).
		WithVerifyValueChecksum(true)
	for _, o := range options {
		o(&opts)
	}
	b := &Badger{dir: dir, opts: opts}
	if err := b.open(); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Badger) open() error {
	if err := checkFiles(b.dir); err != nil {
		return err
	}
	db, err := badger.Open(b.opts)
	if err != nil {
		if damagedOnOpen(err) {
			return fmt.Errorf("%w: open database in %s: %v", ErrDamaged, b.dir, err)
		}
		return fmt.Errorf("open database in %s: %w", b.dir, err)
	}
	if !b.opts.ReadOnly {
		if err := countRecords(db); err != nil {
			db.Close()
			return fmt.Errorf("count the records in %s: %w", b.dir, err)
		}
	}
	err = db.View(func(t *badger.Txn) error {
		var err error
		if b.ct, err = loadCounters(badgerTxn{t}); err != nil {
			return err
		}
		b.applied, err = getUint(badgerTxn{t}, metaApplied)
		return err
	})
	if err != nil {
		db.Close()
		return fmt.Errorf("read database metadata in %s: %w", b.dir, err)
	}
	b.db = db
	return nil
}

// Get returns the committed record of key. After a failed Apply, and until
// Reopen, it may return what the failed transaction wrote: badger can make a
// transaction whose fsync failed visible. Its writer was told the outcome
// is unknown, as for a lost reply; Reopen settles it.
func (b *Badger) Get(key []byte) (Record, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.usable(); err != nil {
		return Record{}, err
	}
	var r Record
	err := b.view(func(t *badger.Txn) error {
		var err error
		r, err = getRecord(badgerTxn{t}, prefixed(dataPrefix, key))
		return err
	})
	return r, err
}

// WriteLease returns the write lease recorded on key. See Store.
func (b *Badger) WriteLease(key []byte) (wl WriteLease, ok bool, err error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.usable(); err != nil {
		return WriteLease{}, false, err
	}
	err = b.view(func(t *badger.Txn) error {
		wl, ok, err = getWriteLease(badgerTxn{t}, key)
		return err
	})
	return wl, ok, err
}

// Range returns the live keys opts names, in key order, and the revision
// they were read at. It reads them and the revision in one badger
// transaction, so it needs no lock against Apply: the revision is the one
// its transaction committed with them. Like Get, after a failed Apply and
// until Reopen it may read what the failed transaction wrote. See Store.
func (b *Badger) Range(opts RangeOptions) (Range, error) {
	if err := opts.check(); err != nil {
		return Range{}, err
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.usable(); err != nil {
		return Range{}, err
	}
	var r Range
	err := b.view(func(t *badger.Txn) error {
		var err error
		r, err = readRange(badgerTxn{t}, opts)
		return err
	})
	return r, err
}

// History reads a page of the event history, as of one moment. See
// Store.
func (b *Badger) History(opts HistoryOptions) (HistoryPage, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.usable(); err != nil {
		return HistoryPage{}, err
	}
	var p HistoryPage
	err := b.view(func(t *badger.Txn) error {
		tx := badgerTxn{t}
		ct, err := loadCounters(tx)
		if err != nil {
			return err
		}
		p, err = readHistory(tx, ct, opts)
		return err
	})
	return p, err
}

// State returns the counters, horizon and write leases.
func (b *Badger) State() (State, error) {
	b.amu.Lock()
	defer b.amu.Unlock()
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.usable(); err != nil {
		return State{}, err
	}
	st := State{Revision: b.ct.rev, Fence: b.ct.fence, TTLLeaseID: b.ct.ttl, History: b.ct.historyState()}
	err := b.view(func(t *badger.Txn) error {
		if err := loadMeta(badgerTxn{t}, &st); err != nil {
			return err
		}
		it := t.NewIterator(badger.IteratorOptions{Prefix: wleasPrefix, PrefetchValues: true, PrefetchSize: 16})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			key := item.KeyCopy(nil)[len(wleasPrefix):]
			err := item.Value(func(v []byte) error {
				wl, err := decodeWriteLease(key, v)
				st.WriteLeases = append(st.WriteLeases, wl)
				return err
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return st, err
}

// TTLLease returns TTL lease id and its keys. See Store.
func (b *Badger) TTLLease(id uint64) (l TTLLease, keys []string, ok bool, err error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.usable(); err != nil {
		return TTLLease{}, nil, false, err
	}
	err = b.view(func(t *badger.Txn) error {
		tx := badgerTxn{t}
		if l, ok, err = getTTLLease(tx, id); err != nil || !ok {
			return err
		}
		if keys, err = ttlKeys(tx, id); err != nil {
			return err
		}
		l.Locks, err = boundLocks(tx, id)
		return err
	})
	return l, keys, ok, err
}

// TTLLeases calls fn with every TTL lease, in id order, reading them a
// page at a time. See Store.
func (b *Badger) TTLLeases(fn func(TTLLease) error) error {
	return eachTTLLease(func(from uint64) (ls []TTLLease, err error) {
		b.mu.RLock()
		defer b.mu.RUnlock()
		if err := b.usable(); err != nil {
			return nil, err
		}
		err = b.view(func(t *badger.Txn) error {
			var err error
			ls, err = ttlPage(badgerTxn{t}, from)
			return err
		})
		return ls, err
	}, fn)
}

// Kept returns the kept outcome of the write or grant c. See Store.
func (b *Badger) Kept(c Command) (r Result, ok bool, err error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.usable(); err != nil {
		return Result{}, false, err
	}
	err = b.view(func(t *badger.Txn) error {
		var err error
		r, ok, _, err = kept(cachedReader{badgerTxn{t}, &b.clients}, c)
		return err
	})
	return r, ok, err
}

// IdleClients returns up to limit clients whose last write was before
// cutoff. See Store.
func (b *Badger) IdleClients(cutoff time.Time, limit int) ([]uint64, error) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.usable(); err != nil {
		return nil, err
	}
	var ids []uint64
	err := b.view(func(t *badger.Txn) error {
		it := t.NewIterator(badger.IteratorOptions{Prefix: clientPrefix, PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid() && len(ids) < limit; it.Next() {
			item := it.Item()
			err := item.Value(func(v []byte) error {
				if id, ok := idleClient(item.Key(), v, cutoff); ok {
					ids = append(ids, id)
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	return ids, err
}

// Apply applies cmds in as few transactions as badger takes, one fsync
// each. See Store.
func (b *Badger) Apply(cmds []Command) ([]Result, error) {
	unlock, err := b.lockChange()
	defer unlock()
	if err != nil {
		return nil, err
	}
	results := make([]Result, 0, len(cmds))
	for len(results) < len(cmds) {
		rs, err := b.step(cmds[len(results):])
		if err != nil {
			b.fail()
			return results, err
		}
		results = append(results, rs...)
	}
	return results, nil
}

// step commits, in one transaction, as long a prefix of cmds as fits, and
// returns its results. When badger finds the transaction too big, it tries
// again, in a new transaction, with the commands that fitted; a single
// command that does not fit is an error.
func (b *Badger) step(cmds []Command) ([]Result, error) {
	for {
		rs, ct, err := b.try(cmds)
		if errors.Is(err, badger.ErrTxnTooBig) && len(rs) > 1 {
			// Full at the last command, or after it: the counters or
			// the commit did not fit. Leave it for the next
			// transaction. With one command left there is no shorter
			// prefix to try.
			cmds = cmds[:len(rs)-1]
			continue
		}
		if err != nil {
			return nil, err
		}
		b.ct = ct
		return rs, nil
	}
}

// try executes cmds in one transaction and commits them. On error nothing
// is committed; rs then holds the results up to the command being executed
// when it struck. A command the transaction did not take whole may have
// made some of its writes in it, so that the transaction must not be
// committed.
func (b *Badger) try(cmds []Command) (rs []Result, ct counters, err error) {
	t := b.db.NewTransaction(true)
	defer t.Discard()
	tx := newCachingTxn(badgerTxn{t}, &b.clients)
	ct = b.ct
	for _, c := range cmds {
		r, err := exec(tx, &ct, c)
		rs = append(rs, r)
		if err != nil {
			return rs, ct, err
		}
	}
	if err := saveCounters(tx, b.ct, ct); err != nil {
		return rs, ct, err
	}
	if err := t.Commit(); err != nil {
		return rs, ct, err
	}
	tx.committed()
	return rs, ct, nil
}

// fail marks the store failed until Reopen, and forgets the cached client
// records, which a failed commit may leave out of step with badger. b.amu
// must be held.
func (b *Badger) fail() {
	b.failed = true
	b.broken.Store(true)
	b.clients.clear()
}

// Reopen closes the database and opens it again, which replays what badger
// finds durable, then commits the counters once more with an fsync, so that
// whatever the reopened database shows is durable.
func (b *Badger) Reopen() error {
	b.amu.Lock()
	defer b.amu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return ErrClosed
	}
	if err := folderWritable(b.dir); err != nil {
		// Closing would hang: badger retries for ever to write its
		// memtable out to a table it cannot create.
		return err
	}
	b.fail() // until the database is open and persisted again
	if b.db != nil {
		b.db.Close() // its error is the failure being recovered from
		b.db = nil
	}
	if err := b.open(); err != nil {
		return err
	}
	t := b.db.NewTransaction(true)
	defer t.Discard()
	if err := setUint(badgerTxn{t}, metaRev, b.ct.rev); err != nil {
		return err
	}
	if err := t.Commit(); err != nil {
		return fmt.Errorf("persist after reopening: %w", err)
	}
	b.failed = false
	b.broken.Store(false)
	return nil
}

// Close stops the garbage collector (StartGC), waits for it, and closes
// the database. A database whose folder cannot be written is left open,
// and Close returns ErrNotWritable: badger's close would retry for ever to
// write its memtable out to a table; the process that owns it exits, and
// its next start replays the memtable's log, as after a crash.
func (b *Badger) Close() error {
	b.gc.stop()
	b.amu.Lock()
	defer b.amu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.clients.clear()
	if b.db == nil {
		return nil
	}
	if err := folderWritable(b.dir); err != nil && !b.opts.ReadOnly {
		b.db = nil
		return fmt.Errorf("database in %s left open: %w", b.dir, err)
	}
	err := b.db.Close()
	b.db = nil
	return err
}

// badgerTxn is a badger transaction as a txn.
type badgerTxn struct{ t *badger.Txn }

func (x badgerTxn) get(key []byte) ([]byte, bool, error) {
	item, err := x.t.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	v, err := item.ValueCopy(nil)
	return v, err == nil, err
}

func (x badgerTxn) has(key []byte) (bool, error) {
	_, err := x.t.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// scan reads the transaction's own writes too: badger's iterators of a
// write transaction merge them in.
func (x badgerTxn) scan(prefix, from []byte, fn func(key, value []byte) error) error {
	it := x.t.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: false})
	defer it.Close()
	if from == nil {
		it.Rewind()
	} else {
		it.Seek(from)
	}
	for ; it.Valid(); it.Next() {
		item := it.Item()
		if err := item.Value(func(v []byte) error { return fn(item.Key(), v) }); err != nil {
			return err
		}
	}
	return nil
}

func (x badgerTxn) set(key, value []byte) error { return x.t.Set(key, value) }
func (x badgerTxn) del(key []byte) error        { return x.t.Delete(key) }

// badgerLogger sends badger's log lines to slog, each as one record with
// component=badger. Badger's info lines (tables opened, files replayed,
// compactions) are routine: they are at debug level, and its debug lines
// below it; its warnings and errors keep their level.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.log(slog.LevelError, f, a) }
func (b badgerLogger) Warningf(f string, a ...any) { b.log(slog.LevelWarn, f, a) }
func (b badgerLogger) Infof(f string, a ...any)    { b.log(slog.LevelDebug, f, a) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.log(slog.LevelDebug-4, f, a) }

func (b badgerLogger) log(level slog.Level, f string, a []any) {
	ctx := context.Background()
	if !b.l.Enabled(ctx, level) {
		return
	}
	b.l.Log(ctx, level, strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}
