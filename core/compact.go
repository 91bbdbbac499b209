package core

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leased/leased/store"
)

// The history's retention (DESIGN §16): the leader compacts the event
// history (store.OpCompact) so that it holds no revision older than Age,
// no more than Revisions revisions, and no more than Bytes, whichever
// bound is met first; an operator may compact further by hand (Compact).
// Compaction goes through the log like any command, so every replica
// compacts identically.

// Defaults of HistoryRetention.
const (
	DefaultHistoryAge       = time.Hour
	DefaultHistoryRevisions = 1_000_000
	DefaultHistoryBytes     = 256 << 20
	// DefaultCompactInterval is how often the leader looks at the
	// history's bounds.
	DefaultCompactInterval = 5 * time.Second
)

// HistoryRetention bounds the event history the leader keeps. For each
// field, zero means its default and a negative value no bound.
type HistoryRetention struct {
	// Age is how long, on the leader's clock, a revision is kept after it
	// was committed (DefaultHistoryAge). A leader counts the revisions
	// before its start as committed at its start, so a failover keeps
	// them longer, never shorter.
	Age time.Duration
	// Revisions is how many of the newest revisions are kept
	// (DefaultHistoryRevisions).
	Revisions int64
	// Bytes is how many bytes of events, keys and values, the history
	// holds at most (DefaultHistoryBytes); the oldest revisions go first.
	// The bytes of the values that the history keeps for the previous
	// values of what it holds (store's bases) count too.
	Bytes int64
	// Interval is how often the leader looks at the bounds
	// (DefaultCompactInterval); negative: never, only Compact compacts.
	Interval time.Duration
}

// withDefaults returns r with its zero fields set to their defaults.
func (r HistoryRetention) withDefaults() HistoryRetention {
	if r.Age == 0 {
		r.Age = DefaultHistoryAge
	}
	if r.Revisions == 0 {
		r.Revisions = DefaultHistoryRevisions
	}
	if r.Bytes == 0 {
		r.Bytes = DefaultHistoryBytes
	}
	if r.Interval == 0 {
		r.Interval = DefaultCompactInterval
	}
	return r
}

// historyStats holds the history's state as the core last read it, for
// Stats without a read of the store.
type historyStats struct {
	compacted, bytes, events atomic.Uint64
}

func (h *historyStats) set(st store.HistoryState) {
	h.compacted.Store(st.Compacted)
	h.bytes.Store(st.Bytes)
	h.events.Store(st.Events)
}

func (h *historyStats) get() store.HistoryState {
	return store.HistoryState{Compacted: h.compacted.Load(), Bytes: h.bytes.Load(), Events: h.events.Load()}
}

// revSample is the revision committed at a time on the core's clock.
type revSample struct {
	at  time.Time
	rev uint64
}

// compactLoop looks at the history's bounds every Interval and compacts
// what passes them (compactBounds). It samples the revision each time,
// so that it knows, to within an Interval, which revisions are older
// than Age. New starts it; Close stops it.
func (c *Core) compactLoop() {
	defer c.loops.Done()
	r := c.cfg.History
	samples := []revSample{{c.started, c.revision.Load()}}
	for {
		t := c.clock.NewTimer(r.Interval)
		select {
		case <-c.queue.closed:
			t.Stop()
			return
		case <-t.Chan():
		}
		now := c.clock.Now()
		samples = append(samples, revSample{now, c.revision.Load()})
		// Keep the newest sample that Age has passed, and those after.
		cut := 0
		for i, s := range samples {
			if r.Age > 0 && !s.at.After(now.Add(-r.Age)) {
				cut = i
			}
		}
		samples = samples[cut:]
		var aged uint64
		if r.Age > 0 && !samples[0].at.After(now.Add(-r.Age)) {
			aged = samples[0].rev
		}
		c.compactBounds(aged)
	}
}

// compactBounds compacts the history through aged, and through the
// revision Revisions back, and then down to Bytes; a failure is logged,
// and the next round tries again.
func (c *Core) compactBounds(aged uint64) {
	c.compactMu.Lock()
	defer c.compactMu.Unlock()
	r := c.cfg.History
	st, err := c.store.State()
	if err != nil {
		return
	}
	c.history.set(st.History)
	through := aged
	if r.Revisions > 0 && st.Revision > uint64(r.Revisions) {
		through = max(through, st.Revision-uint64(r.Revisions))
	}
	if through > st.History.Compacted {
		if err := c.compactThrough(store.Command{Op: store.OpCompact, Through: through}); err != nil {
			c.log.Warn("cannot compact the history; trying again later", "through", through, "err", err)
			return
		}
	}
	if r.Bytes > 0 && c.history.get().Bytes > uint64(r.Bytes) {
		if err := c.compactThrough(store.Command{Op: store.OpCompact, Through: st.Revision, KeepBytes: uint64(r.Bytes)}); err != nil {
			c.log.Warn("cannot compact the history to its size bound; trying again later", "bytes", r.Bytes, "err", err)
		}
	}
}

// compactThrough applies cmd, an OpCompact, a command at a time until it
// is done (with a KeepBytes, until the history holds no more), or until
// one moves the compaction point no further, and notes the history's
// state. The caller holds compactMu.
func (c *Core) compactThrough(cmd store.Command) error {
	for {
		before := c.history.get().Compacted
		rs, err := c.apply([]store.Command{cmd})
		if err != nil {
			return err
		}
		st, err := c.store.State()
		if err != nil {
			return err
		}
		c.history.set(st.History)
		// A bound of bytes stops at a guess of what the revisions it
		// drops weigh; what stays below the point for the previous
		// values may leave it over: then it goes on.
		more := rs[0].More || cmd.KeepBytes > 0 && st.History.Bytes > cmd.KeepBytes
		if !more || st.History.Compacted == before {
			return nil
		}
	}
}

// ErrFutureRevision is Compact's error for a revision above the one
// committed.
var ErrFutureRevision = errors.New("the revision is in the future")

// Compact compacts the event history through revision rev, at once: a
// read of the history from rev or below fails with store.ErrCompacted from
// then on. A revision at or below the compaction point changes nothing; one
// above the revision committed is refused with ErrFutureRevision. It
// returns the history's state after it. An operator's compaction
// (leasectl compaction) calls it.
func (c *Core) Compact(rev uint64) (store.HistoryState, error) {
	c.compactMu.Lock()
	defer c.compactMu.Unlock()
	if cur := c.revision.Load(); rev > cur {
		return c.history.get(), fmt.Errorf("%w: compaction through %d, but the revision is %d", ErrFutureRevision, rev, cur)
	}
	if err := c.compactThrough(store.Command{Op: store.OpCompact, Through: rev}); err != nil {
		return c.history.get(), err
	}
	return c.history.get(), nil
}

// History reads a page of the event history of the committed state
// (store.Store.History).
func (c *Core) History(opts store.HistoryOptions) (store.HistoryPage, error) {
	return c.store.History(opts)
}
