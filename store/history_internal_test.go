package store

import (
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// TestHistoryOfAnOlderDatabase: a database at a revision above 0 with no
// history, as a version before the history wrote, starts its history
// after that revision: a read from it or below fails with ErrCompacted,
// and the first change of a key gives the value its record held as the
// previous one.
func TestHistoryOfAnOlderDatabase(t *testing.T) {
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	b, err := Open(dir, logger)
	if err != nil {
		t.Fatal(err)
	}
	mustApplyCmds(t, b, putCmd("a"), putCmd("b")) // the store at 2
	err = b.db.Update(func(t *badger.Txn) error {
		for _, k := range [][]byte{metaHistory, eventKey(1, []byte("a")), eventKey(2, []byte("b")),
			prefixed(headPrefix, []byte("a")), prefixed(headPrefix, []byte("b"))} {
			if err := t.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = b.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	if b, err = Open(dir, logger); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Check(); err != nil {
		t.Fatalf("Check of a database with no history: %v", err)
	}
	st, err := b.State()
	if err != nil || st.History.Compacted != 2 {
		t.Fatalf("State: %+v, %v; want the history compacted through 2", st.History, err)
	}
	var ce *CompactedError
	if _, err := b.History(HistoryOptions{From: 2}); !errors.As(err, &ce) || ce.Compacted != 2 {
		t.Fatalf("a read from 2: %v, want a CompactedError naming 2", err)
	}
	mustApplyCmds(t, b, Command{Op: OpPut, Key: []byte("a"), Value: []byte("w")})
	p, err := b.History(HistoryOptions{From: 3, Prev: true})
	if err != nil || len(p.Events) != 1 {
		t.Fatalf("History from 3: %+v, %v; want one event", p, err)
	}
	if e := p.Events[0]; e.Revision != 3 || string(e.Value) != "w" || !e.PrevFound || string(e.PrevValue) != "v" || e.PrevRevision != 1 {
		t.Fatalf("the first event: %+v, want a put at 3 whose previous value is v, of revision 1", e)
	}
	if st, _ := b.State(); st.History.Compacted != 2 {
		t.Fatalf("after the first change: compaction point %d, want 2", st.History.Compacted)
	}
}
