package core

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/store"
)

// newRetainingCore is newCore with the history's retention r.
func newRetainingCore(t *testing.T, st store.Store, r HistoryRetention) *Core {
	t.Helper()
	c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second,
		BootFile: bootFile(t, st), BootClock: clock.NewFakeBoot(nil), History: r,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, &notices{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// putN commits n puts of key, each of size bytes, through session 1, and
// returns the revision of the last.
func putN(t *testing.T, c *Core, key string, n, size int) uint64 {
	t.Helper()
	var rev uint64
	for i := range n {
		v := fmt.Appendf(nil, "%0*d", size, i)
		rev = submit(t, c, &Request{Session: 1, Op: store.OpPut, Key: []byte(key), Value: v}).must(t).Version
	}
	return rev
}

// TestHistoryRetention: the leader compacts the history, on its own and
// within an Interval, through the newest revision older than Age, to the
// newest Revisions revisions, and down to Bytes; Stats tells the state
// after each.
func TestHistoryRetention(t *testing.T) {
	t.Run("age", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newRetainingCore(t, newMemory(t), HistoryRetention{Age: time.Minute, Revisions: -1, Bytes: -1, Interval: time.Second})
			c.OpenSession(1)
			old := putN(t, c, "k", 5, 8)
			time.Sleep(30 * time.Second)
			recent := putN(t, c, "k", 5, 8)
			time.Sleep(31 * time.Second) // old is a minute old, recent half that
			synctest.Wait()
			if got := c.Stats().History.Compacted; got < old || got >= recent-4 {
				t.Fatalf("compaction point %d after a minute; want the revisions up to %d compacted, those from %d kept", got, old, recent-4)
			}
			time.Sleep(31 * time.Second)
			synctest.Wait()
			if got := c.Stats().History.Compacted; got != recent {
				t.Fatalf("compaction point %d a minute after the last write; want %d", got, recent)
			}
		})
	})
	t.Run("revisions", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newRetainingCore(t, newMemory(t), HistoryRetention{Age: -1, Revisions: 10, Bytes: -1, Interval: time.Second})
			c.OpenSession(1)
			rev := putN(t, c, "k", 25, 8)
			time.Sleep(time.Second)
			synctest.Wait()
			if got := c.Stats().History.Compacted; got != rev-10 {
				t.Fatalf("compaction point %d at revision %d, keeping 10; want %d", got, rev, rev-10)
			}
		})
	})
	t.Run("bytes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const bound = 4000
			c := newRetainingCore(t, newMemory(t), HistoryRetention{Age: -1, Revisions: -1, Bytes: bound, Interval: time.Second})
			c.OpenSession(1)
			rev := putN(t, c, "k", 100, 100)
			before := c.Stats().History
			time.Sleep(time.Second)
			synctest.Wait()
			h := c.Stats().History
			if h.Bytes > bound || h.Compacted == 0 || h.Compacted >= rev {
				t.Fatalf("history %+v at revision %d (before: %+v); want at most %d bytes, some revisions kept", h, rev, before, bound)
			}
		})
	})
}

// TestCompact: an operator's compaction compacts through the revision it
// names at once; one at or below the compaction point changes nothing, and
// one in the future is refused.
func TestCompact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c := newRetainingCore(t, st, HistoryRetention{Interval: -1})
		c.OpenSession(1)
		rev := putN(t, c, "k", 10, 8)
		if _, err := c.Compact(rev + 1); !errors.Is(err, ErrFutureRevision) {
			t.Fatalf("compaction through %d at revision %d: %v, want ErrFutureRevision", rev+1, rev, err)
		}
		h, err := c.Compact(rev - 3)
		if err != nil || h.Compacted != rev-3 {
			t.Fatalf("compaction through %d: %+v, %v", rev-3, h, err)
		}
		if _, err := c.History(store.HistoryOptions{From: rev - 3}); !errors.Is(err, store.ErrCompacted) {
			t.Fatalf("a read from the compaction point: %v, want ErrCompacted", err)
		}
		if h, err := c.Compact(2); err != nil || h.Compacted != rev-3 {
			t.Fatalf("compaction through 2, below the point: %+v, %v; want nothing changed", h, err)
		}
		if got := c.Stats().History; got.Compacted != rev-3 {
			t.Fatalf("Stats' history %+v, want compacted through %d", got, rev-3)
		}
	})
}
