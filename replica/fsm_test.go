package replica

import (
	"io"
	"log/slog"
	"slices"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/store"
)

// The machine notes the keys that writes of an earlier term change when
// the node applies them in a later one: those a new leader inherits.
func TestFSMInherited(t *testing.T) {
	db, err := store.Open(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)), store.NoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f, err := NewFSM(db, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var term uint64 = 3
	f.SetTerm(func() uint64 { return term })
	index := uint64(0)
	apply := func(entryTerm uint64, cmds ...store.Command) {
		t.Helper()
		data, err := encodeEntry(cmds)
		if err != nil {
			t.Fatal(err)
		}
		index++
		if a, ok := f.Apply(&raft.Log{Index: index, Term: entryTerm, Type: raft.LogCommand, Data: data}).(Applied); !ok || a.Err != nil {
			t.Fatalf("apply: %+v", a)
		}
	}
	put := func(k string) store.Command {
		return store.Command{Op: store.OpPut, Key: []byte(k), Value: []byte("v")}
	}
	apply(3, put("own")) // of the node's own term
	apply(2, put("a"), store.Command{Op: store.OpDelete, Key: []byte("b")}, store.Command{Op: store.OpSetLeader, Key: []byte("n1")})
	keys, got := f.Inherited()
	slices.Sort(keys)
	if got != 3 || !slices.Equal(keys, []string{"a", "b"}) {
		t.Errorf("Inherited = %v in term %d; want [a b] in term 3", keys, got)
	}
	// A later term starts afresh.
	term = 5
	apply(4, put("c"))
	if keys, got := f.Inherited(); got != 5 || !slices.Equal(keys, []string{"c"}) {
		t.Errorf("Inherited = %v in term %d; want [c] in term 5", keys, got)
	}
}
