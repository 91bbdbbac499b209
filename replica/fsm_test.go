package replica

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

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

// A node whose database fails to apply a committed entry stops its state
// machine: the write fails, later ones fail at once, and Failure says why,
// so that the server stops serving and another node leads.
func TestFailureStopsTheStateMachine(t *testing.T) {
	_, tr := raft.NewInmemTransport("n1")
	n, err := Open(Config{Dir: t.TempDir(), ID: "n1", Transport: tr, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		LogStore: raft.NewInmemStore(), StableStore: raft.NewInmemStore(),
		Bootstrap: []raft.Server{{ID: "n1", Address: "n1"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.WaitLeading(ctx); err != nil {
		t.Fatal(err)
	}
	put := store.Command{Op: store.OpPut, Key: []byte("k"), Value: []byte("v")}
	if _, err := n.Apply([]store.Command{put}); err != nil {
		t.Fatal(err)
	}
	if err := n.Failure(); err != nil {
		t.Fatalf("Failure before any failure: %v", err)
	}
	applied := n.AppliedIndex()
	n.db.Close() // the database fails every later apply
	if _, err := n.Apply([]store.Command{put}); err == nil {
		t.Fatal("a write the database could not apply succeeded")
	}
	if err := n.Failure(); !errors.Is(err, ErrStopped) {
		t.Fatalf("Failure = %v, want ErrStopped", err)
	}
	if _, err := n.Apply([]store.Command{put}); !errors.Is(err, ErrStopped) {
		t.Errorf("a later write: %v, want ErrStopped", err)
	}
	if got := n.AppliedIndex(); got != applied {
		t.Errorf("applied index %d after the failure, want %d", got, applied)
	}
}
