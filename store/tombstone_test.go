package store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/store"
)

func collect(through uint64) store.Command {
	return store.Command{Op: store.OpCollectTombstones, Through: through}
}

// checkBadger runs Badger.Check on s if it is a Badger.
func checkBadger(t *testing.T, s store.Store) {
	t.Helper()
	if b, ok := s.(*store.Badger); ok {
		if err := b.Check(); err != nil {
			t.Fatalf("Check: %v", err)
		}
	}
}

// tombstoneContract is what OpCollectTombstones does, on every store.
var tombstoneContract = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"only deletions up to the revision are collected", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"), put("b", "2"), put("c", "3"), del("a"), del("b")) // a at 4, b at 5
		// Before it is collected, a deleted key is at the version of
		// its deletion, which a compare-and-swap may expect.
		wantRecord(t, s, "a", nil, 4)
		if r := mustApply(t, s, collect(4))[0]; r.Err != nil || r.Version != 0 || r.More {
			t.Fatalf("collect = %+v", r)
		}
		wantRecord(t, s, "a", nil, 0)
		wantRecord(t, s, "b", nil, 5)
		wantRecord(t, s, "c", str("3"), 3)
		if st := mustState(t, s); st.Revision != 5 {
			t.Errorf("revision %d after a collection, want 5: it takes none", st.Revision)
		}
		// A collected key is one that never existed: version 0 matches,
		// the deletion's version no longer does.
		wantMismatch(t, mustApply(t, s, cas("a", 4, "x"))[0], 0)
		rs := mustApply(t, s, cas("b", 5, "y"), collect(5), cas("a", 0, "z"))
		wantVersions(t, rs[2:], 7)
		wantRecord(t, s, "b", str("y"), 6)
		wantRecord(t, s, "a", str("z"), 7)
		checkBadger(t, s)
	}},
	{"a key written or deleted again keeps its record", func(t *testing.T, s store.Store) {
		// k: put at 1, deleted at 2, put at 3; j: put at 4, deleted at
		// 5, put at 6, deleted at 7.
		mustApply(t, s, put("k", "x"), del("k"), put("k", "v"), put("j", "x"), del("j"), put("j", "y"), del("j"), collect(5))
		wantRecord(t, s, "k", str("v"), 3)
		wantRecord(t, s, "j", nil, 7)
		mustApply(t, s, collect(7))
		wantRecord(t, s, "j", nil, 0)
		wantRecord(t, s, "k", str("v"), 3)
		mustApply(t, s, put("j", "again"))
		wantRecord(t, s, "j", str("again"), 8)
		checkBadger(t, s)
	}},
	{"the deletions of a revocation are collected", func(t *testing.T, s store.Store) {
		mustApply(t, s, grantTTL(time.Minute), withLease(put("a", "1"), 1), withLease(put("b", "2"), 1))
		r := mustApply(t, s, revokeTTL(1))[0]
		wantRecord(t, s, "a", nil, r.Version)
		mustApply(t, s, collect(r.Version))
		wantRecord(t, s, "a", nil, 0)
		wantRecord(t, s, "b", nil, 0)
		checkBadger(t, s)
	}},
	{"a collection stops at its bounds and says so", func(t *testing.T, s store.Store) {
		n := store.MaxTombstonesPerCommand + 10
		cmds := make([]store.Command, 0, 2*n)
		for i := range n {
			cmds = append(cmds, put(fmt.Sprint("k", i), "v"), del(fmt.Sprint("k", i)))
		}
		mustApply(t, s, cmds...)
		last := uint64(2 * n)
		if r := mustApply(t, s, collect(last))[0]; !r.More {
			t.Fatalf("first collection of %d = %+v, want More", n, r)
		}
		wantRecord(t, s, fmt.Sprint("k", store.MaxTombstonesPerCommand-1), nil, 0)
		wantRecord(t, s, fmt.Sprint("k", n-1), nil, last)
		if r := mustApply(t, s, collect(last))[0]; r.More {
			t.Fatalf("second collection = %+v, want the rest", r)
		}
		wantRecord(t, s, fmt.Sprint("k", n-1), nil, 0)
		checkBadger(t, s)
	}},
	{"the largest collection is one step", func(t *testing.T, s store.Store) {
		// MaxTombstoneKeyBytes of keys: the most one collection visits,
		// which store.Cost counts, and one transaction must take.
		per := store.MaxTombstoneKeyBytes / store.MaxTombstonesPerCommand
		cmds := make([]store.Command, 0, 2*store.MaxTombstonesPerCommand)
		for i := range store.MaxTombstonesPerCommand {
			k := fmt.Sprintf("%04d%s", i, strings.Repeat("k", per-4))
			cmds = append(cmds, put(k, ""), del(k))
		}
		mustApply(t, s, cmds...)
		if r := mustApply(t, s, collect(uint64(len(cmds))))[0]; r.More || r.Err != nil {
			t.Fatalf("collection = %+v", r)
		}
		wantRecord(t, s, string(cmds[len(cmds)-1].Key), nil, 0)
		checkBadger(t, s)
	}},
}

func TestCollectTombstones(t *testing.T) {
	for _, im := range impls {
		for _, c := range tombstoneContract {
			t.Run(im.name+"/"+c.name, func(t *testing.T) { c.run(t, im.open(t)) })
		}
	}
}

// TestCollectTombstonesSurvivesRestart: a collection is durable, and the
// deletions left to collect are still found after a restart.
func TestCollectTombstonesSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	b := openBadger(t, dir)
	mustApply(t, b, put("a", "1"), put("b", "2"), del("a"), del("b"), collect(3)) // a at 3, b at 4
	b = reopenBadger(t, b, dir)
	wantRecord(t, b, "a", nil, 0)
	wantRecord(t, b, "b", nil, 4)
	mustApply(t, b, collect(4))
	b = reopenBadger(t, b, dir)
	wantRecord(t, b, "b", nil, 0)
	// Through 0 collects nothing.
	mustApply(t, b, put("c", "3"), del("c"), collect(0))
	wantRecord(t, b, "c", nil, 6)
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
}
