package replica

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
)

// TestRefusingLogKeepsItsEntries: while a follower refuses, its log
// appends nothing and keeps its tail, but drops its head (a compaction)
// or all of it (after a snapshot is installed); a leader, or a node whose
// raft has not started, never refuses.
func TestRefusingLogKeepsItsEntries(t *testing.T) {
	no := errors.New("NOSPACE")
	mk := func(n int) []*raft.Log {
		var ls []*raft.Log
		for i := 1; i <= n; i++ {
			ls = append(ls, &raft.Log{Index: uint64(i), Term: 1, Data: []byte(fmt.Sprint(i))})
		}
		return ls
	}
	for _, tc := range []struct {
		name             string
		started, follows bool
		refuse           error
		op               func(l raft.LogStore) error
		wantErr          bool
		first, last      uint64
	}{
		{"append, refused", true, true, no, func(l raft.LogStore) error { return l.StoreLogs(mk(12)[10:]) }, true, 1, 10},
		{"append one, refused", true, true, no, func(l raft.LogStore) error { return l.StoreLog(mk(11)[10]) }, true, 1, 10},
		{"tail dropped, refused", true, true, no, func(l raft.LogStore) error { return l.DeleteRange(6, 10) }, true, 1, 10},
		{"head dropped", true, true, no, func(l raft.LogStore) error { return l.DeleteRange(1, 4) }, false, 5, 10},
		{"all dropped", true, true, no, func(l raft.LogStore) error { return l.DeleteRange(1, 10) }, false, 0, 0},
		{"append, not refused", true, true, nil, func(l raft.LogStore) error { return l.StoreLogs(mk(12)[10:]) }, false, 1, 12},
		{"tail dropped, not refused", true, true, nil, func(l raft.LogStore) error { return l.DeleteRange(6, 10) }, false, 1, 5},
		{"append on the leader", true, false, no, func(l raft.LogStore) error { return l.StoreLogs(mk(12)[10:]) }, false, 1, 12},
		{"append before raft runs", false, false, no, func(l raft.LogStore) error { return l.StoreLogs(mk(12)[10:]) }, false, 1, 12},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inner := raft.NewInmemStore()
			if err := inner.StoreLogs(mk(10)); err != nil {
				t.Fatal(err)
			}
			r := &refusal{refuse: func() error { return tc.refuse }}
			if tc.started {
				follows := func() bool { return tc.follows }
				r.follows.Store(&follows)
			}
			err := tc.op(refusingLog{LogStore: inner, r: r})
			if (err != nil) != tc.wantErr || (err != nil && !errors.Is(err, no)) {
				t.Errorf("error %v, want one: %v", err, tc.wantErr)
			}
			first, _ := inner.FirstIndex()
			last, _ := inner.LastIndex()
			if first != tc.first || last != tc.last {
				t.Errorf("log holds %d..%d, want %d..%d", first, last, tc.first, tc.last)
			}
		})
	}
}

// TestRefusingLogIsMonotonic: the wrapper keeps raft-wal's
// raft.MonotonicLogStore, so that raft drops the whole log after it
// installs a snapshot: raft-wal takes no gap.
func TestRefusingLogIsMonotonic(t *testing.T) {
	w, err := wal.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r := &refusal{refuse: func() error { return nil }}
	if !(refusingLog{LogStore: w, r: r}).IsMonotonic() {
		t.Error("over raft-wal: not monotonic")
	}
	if (refusingLog{LogStore: raft.NewInmemStore(), r: r}).IsMonotonic() {
		t.Error("over an in-memory store: monotonic")
	}
}
