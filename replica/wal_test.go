package replica_test

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
)

// TestLogTailTruncationSurvivesReopen: raft deletes the tail of a
// follower's log when a new leader's log differs from it, as after a leader
// was killed with entries it had not replicated. The log store must open
// again afterwards and serve every entry it kept. raft-wal v0.4.0 sealed the
// segment without its index block on such a truncation, and the node's next
// start panicked in raft.NewRaft ("sealed segment has no index block",
// hashicorp/raft-wal#31); TestCrashCluster in cmd/leased found it.
func TestLogTailTruncationSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	open := func() (*wal.WAL, *metadb.BoltMetaDB) {
		meta := &metadb.BoltMetaDB{}
		w, err := wal.Open(dir, wal.WithMetaStore(meta))
		if err != nil {
			t.Fatal(err)
		}
		return w, meta
	}
	w, meta := open()
	var logs []*raft.Log
	for i := uint64(1); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: fmt.Appendf(nil, "entry %d", i)})
	}
	if err := w.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := w.DeleteRange(8, 10); err != nil {
		t.Fatal(err)
	}
	if err := w.StoreLogs([]*raft.Log{{Index: 8, Term: 2, Type: raft.LogCommand, Data: []byte("new 8")}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	meta.Close()

	w, meta = open()
	defer meta.Close()
	defer w.Close()
	for i := uint64(1); i <= 8; i++ {
		var l raft.Log
		if err := w.GetLog(i, &l); err != nil {
			t.Fatalf("after a reopen, entry %d: %v", i, err)
		}
		if i == 8 && (l.Term != 2 || string(l.Data) != "new 8") {
			t.Errorf("entry 8 is term %d %q, want the one written after the truncation", l.Term, l.Data)
		}
	}
	if last, err := w.LastIndex(); err != nil || last != 8 {
		t.Errorf("LastIndex = %d, %v; want 8", last, err)
	}
}
