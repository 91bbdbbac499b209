package store

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Garbage collection of the value log. Values over the value threshold
// (64 KiB) live in badger's value log, and the tables hold only pointers to
// them. An overwritten value's space comes back only when a compaction
// has dropped its old pointer, which tells badger how much of each
// value-log file is garbage (its discard statistics), and a value-log GC
// then rewrites a file that is mostly garbage. Pointers are small, so the
// memtable of a store that overwrites a few large values rarely fills and
// is rarely flushed: left alone, such a store would grow by every value
// written. The collector therefore also flushes the memtable, and compacts
// level 0, each time the value log has gained a file since it last did.

// Defaults of StartGC.
const (
	// DefaultGCInterval is how often the collector runs.
	DefaultGCInterval = time.Minute
	// DefaultGCDiscardRatio is the share of garbage in a value-log file
	// above which the collector rewrites it: the files it keeps are then
	// at least half live, so the value log holds at most about twice the
	// live large values, plus the file being written.
	DefaultGCDiscardRatio = 0.5
)

// maxRewrites bounds the value-log files one collection rewrites, so that
// Close never waits long for it.
const maxRewrites = 16

// gcPrefix holds the key that a collection writes and drops to flush the
// memtable (flushMemtable). It is a node's own, like the applied index:
// neither in the digest nor in a snapshot.
var gcPrefix = []byte("g/")

// GCStats says what one collection did.
type GCStats struct {
	// Rewritten is the number of value-log files rewritten and removed.
	Rewritten int
	// Flushed tells that the memtable was flushed and level 0 compacted,
	// so that the space of overwritten values could be counted.
	Flushed bool
}

// collector runs CollectGarbage on a schedule, in a goroutine that StartGC
// starts and Close stops.
type collector struct {
	mu   sync.Mutex    // guards quit and done
	quit chan struct{} // closed to stop the goroutine
	done chan struct{} // closed when it has ended

	run sync.Mutex // serializes collections; guards files
	// files is the number of value-log files after the last flush, or 1:
	// the memtable is flushed again once there are more.
	files int
}

// StartGC starts the value-log garbage collector: every interval (0:
// DefaultGCInterval) it runs CollectGarbage with discardRatio (0:
// DefaultGCDiscardRatio), logging failures to the store's logger. Close
// stops it and waits for it. The store's owner calls it once, after Open;
// a read-only store refuses it.
func (b *Badger) StartGC(interval time.Duration, discardRatio float64) error {
	if interval <= 0 {
		interval = DefaultGCInterval
	}
	if discardRatio == 0 {
		discardRatio = DefaultGCDiscardRatio
	}
	if b.opts.ReadOnly {
		return errors.New("store: no garbage collection on a read-only store")
	}
	if discardRatio <= 0 || discardRatio >= 1 {
		return fmt.Errorf("store: discard ratio %v: want it between 0 and 1", discardRatio)
	}
	b.gc.mu.Lock()
	defer b.gc.mu.Unlock()
	if b.gc.quit != nil {
		return errors.New("store: the garbage collector runs already")
	}
	b.mu.RLock()
	closed := b.closed
	b.mu.RUnlock()
	if closed {
		return ErrClosed
	}
	b.gc.quit, b.gc.done = make(chan struct{}), make(chan struct{})
	go b.collect(interval, discardRatio, b.gc.quit, b.gc.done)
	return nil
}

// collect is the collector's goroutine.
func (b *Badger) collect(interval time.Duration, ratio float64, quit, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case <-t.C:
		}
		if _, err := b.CollectGarbage(ratio); err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrFailed) {
			b.opts.Logger.Warningf("value-log garbage collection: %v", err)
		}
	}
}

// stop stops the collector's goroutine, if it runs, and waits for it.
func (c *collector) stop() {
	c.mu.Lock()
	quit, done := c.quit, c.done
	c.quit, c.done = nil, nil
	c.mu.Unlock()
	if quit != nil {
		close(quit)
		<-done
	}
}

// CollectGarbage rewrites the value-log files whose share of garbage is
// above discardRatio, and, if it found none to rewrite and the value log
// has gained a file since the last flush, flushes the memtable and
// compacts level 0, which counts the garbage, and tries again. The
// collector calls it on its schedule; tests and tools may call it at any
// time, from any goroutine.
func (b *Badger) CollectGarbage(discardRatio float64) (GCStats, error) {
	b.gc.run.Lock()
	defer b.gc.run.Unlock()
	var st GCStats
	if err := b.rewrite(discardRatio, &st); err != nil || st.Rewritten > 0 {
		return st, err
	}
	files, err := b.valueLogFiles()
	if err != nil {
		return st, err
	}
	if files <= max(b.gc.files, 1) {
		return st, nil
	}
	if err := b.flushMemtable(); err != nil {
		return st, err
	}
	st.Flushed = true
	err = b.rewrite(discardRatio, &st)
	if b.gc.files, _ = b.valueLogFiles(); b.gc.files == 0 {
		b.gc.files = files
	}
	return st, err
}

// rewrite runs badger's value-log GC until it finds no file to rewrite.
func (b *Badger) rewrite(ratio float64, st *GCStats) error {
	for st.Rewritten < maxRewrites {
		if gcExcludesChanges {
			b.amu.Lock()
		}
		b.mu.RLock()
		err := b.gcUsable()
		if err == nil {
			err = b.rewriteOne(ratio)
		}
		b.mu.RUnlock()
		if gcExcludesChanges {
			b.amu.Unlock()
		}
		switch {
		case errors.Is(err, badger.ErrNoRewrite), errors.Is(err, badger.ErrRejected):
			return nil
		case err != nil:
			return fmt.Errorf("value-log GC: %w", err)
		}
		st.Rewritten++
	}
	return nil
}

// rewriteOne runs badger's value-log GC once, and makes the values it moved
// durable before the file they came from is deleted: the store of a
// replicated log commits without syncing (NoSync), and badger deletes a
// rewritten file as soon as the moved values are written, so that a power
// loss could leave them nowhere. While an iterator is open, badger keeps
// the files it rewrote until the last one closes; so one is held open
// across the GC and the sync. b.mu must be held.
func (b *Badger) rewriteOne(ratio float64) error {
	t := b.db.NewTransaction(false)
	defer t.Discard()
	it := t.NewIterator(badger.IteratorOptions{Prefix: gcPrefix})
	err := b.db.RunValueLogGC(ratio)
	if err == nil {
		if serr := b.db.Sync(); serr != nil {
			err = fmt.Errorf("sync the values moved: %w", serr)
		}
	}
	it.Close() // deletes the rewritten file, once nothing else holds one open
	return err
}

// flushMemtable writes the memtable out to a table and compacts level 0,
// which drops the old versions of overwritten keys and records the space
// of their values as garbage. badger flushes the memtable, and compacts
// level 0, when it drops a prefix that holds keys: so it writes a key
// under gcPrefix and drops that prefix. Dropping a prefix refuses writes
// while it runs, so it holds amu, which keeps every change out meanwhile.
func (b *Badger) flushMemtable() error {
	unlock, err := b.lockChange()
	defer unlock()
	if err != nil {
		return err
	}
	key := append(append([]byte{}, gcPrefix...), "flush"...)
	if err := b.db.Update(func(t *badger.Txn) error { return t.Set(key, nil) }); err != nil {
		return fmt.Errorf("flush the memtable: %w", err)
	}
	if err := b.db.DropPrefix(gcPrefix); err != nil {
		return fmt.Errorf("flush the memtable: %w", err)
	}
	return nil
}

// valueLogFiles counts the files of the value log.
func (b *Badger) valueLogFiles() (int, error) {
	ents, err := os.ReadDir(b.dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".vlog") {
			n++
		}
	}
	return n, nil
}
