package store

import (
	"io"
	"log/slog"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// unchangedSince reports whether the range of prefix "d/" is Unchanged
// since revision n.
func unchangedSince(t *testing.T, s Store, n uint64) bool {
	t.Helper()
	r, err := s.Range(RangeOptions{Start: []byte("d/"), End: []byte("d0"), Known: n})
	if err != nil {
		t.Fatal(err)
	}
	return r.Unchanged
}

func mustApplyCmds(t *testing.T, s Store, cmds ...Command) {
	t.Helper()
	if _, err := s.Apply(cmds); err != nil {
		t.Fatal(err)
	}
}

func putCmd(k string) Command { return Command{Op: OpPut, Key: []byte(k), Value: []byte("v")} }

// TestForgottenOfAnOlderDatabase: a database with a revision and no record
// of what it forgot (metaForgotten), as a version before it wrote, may
// have collected any deletion: no range is Unchanged until a collection
// records the revision then, after which a range is as for any store.
func TestForgottenOfAnOlderDatabase(t *testing.T) {
	b, err := Open(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mustApplyCmds(t, b, putCmd("d/a"), putCmd("d/b"), putCmd("e")) // d/ at 2, the store at 3
	if !unchangedSince(t, b, 2) {
		t.Fatal("a range of a new database, known at its last change: not unchanged")
	}
	if err := b.db.Update(func(t *badger.Txn) error { return t.Delete(metaForgotten) }); err != nil {
		t.Fatal(err)
	}
	if unchangedSince(t, b, 2) || unchangedSince(t, b, 3) {
		t.Fatal("a range of a database that does not record what it forgot: unchanged")
	}
	mustApplyCmds(t, b, putCmd("f")) // 4: a revision records nothing on its own
	if unchangedSince(t, b, 4) {
		t.Fatal("a range of a database that does not record what it forgot, after a write: unchanged")
	}
	mustApplyCmds(t, b, Command{Op: OpCollectTombstones, Through: 1})
	if unchangedSince(t, b, 3) || !unchangedSince(t, b, 4) {
		t.Errorf("after a collection: unchanged since 3 %v, since 4 %v; want since 4 only", unchangedSince(t, b, 3), unchangedSince(t, b, 4))
	}
}

// TestForgottenAfterBump: a restore's Bump forgets the history up to the
// new revision: a copy of a range read before it is never Unchanged.
func TestForgottenAfterBump(t *testing.T) {
	b, err := Open(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mustApplyCmds(t, b, putCmd("d/a"), putCmd("e")) // the store at 2
	if err := b.Bump(100); err != nil {
		t.Fatal(err)
	}
	if unchangedSince(t, b, 2) || unchangedSince(t, b, 101) || !unchangedSince(t, b, 102) {
		t.Errorf("after a bump to 102: unchanged since 2 %v, 101 %v, 102 %v; want since 102 only",
			unchangedSince(t, b, 2), unchangedSince(t, b, 101), unchangedSince(t, b, 102))
	}
}

// TestForgottenWhateverTheBatches: what a store forgot is the same whether
// its commands came in one batch or one at a time, as the rest of its
// state is (Digest): the first revision and the collections are noted per
// command.
func TestForgottenWhateverTheBatches(t *testing.T) {
	cmds := []Command{
		{Op: OpCollectTombstones, Through: 5},
		putCmd("d/a"), putCmd("x"), {Op: OpDelete, Key: []byte("x")}, putCmd("e"), // x deleted at 3
		{Op: OpCollectTombstones, Through: 4},
		putCmd("d/b"),
	}
	one, each := NewMemory(), NewMemory()
	defer one.Close()
	defer each.Close()
	mustApplyCmds(t, one, cmds...)
	for _, c := range cmds {
		mustApplyCmds(t, each, c)
	}
	so, err := one.Summarize()
	if err != nil {
		t.Fatal(err)
	}
	se, err := each.Summarize()
	if err != nil {
		t.Fatal(err)
	}
	if so.Digest != se.Digest {
		t.Errorf("digests %v in one batch, %v one at a time", so.Digest, se.Digest)
	}
	for name, m := range map[string]*Memory{"one batch": one, "one at a time": each} {
		if n, known, err := loadForgotten(memTxn{m: m}, m.ct.rev); err != nil || !known || n != 3 {
			t.Errorf("%s: forgotten %d, known %v, %v; want 3", name, n, known, err)
		}
	}
}
