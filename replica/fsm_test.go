package replica

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/store"
)

// The machine notes the keys that writes of an earlier term change when
// the node applies them in a later one, those a later leader inherits, each
// with the bound of the leases of the leader that appended them: when the
// node applied the newest horizon entry before them plus its span. A later
// term keeps them; they are dropped a minute after their bound.
func TestFSMInherited(t *testing.T) {
	db, err := store.Open(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)), store.NoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	clk := clock.NewFake()
	f, err := NewFSM(db, clk, slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	const span = 10 * time.Second
	horizon := func(entryTerm uint64) {
		apply(entryTerm, store.Command{Op: store.OpSetHorizon, Horizon: clk.Now().Add(span), Span: span})
	}
	h0 := clk.Now()
	horizon(2)
	apply(3, put("own")) // of the node's own term
	clk.Advance(time.Second)
	apply(2, put("a"), store.Command{Op: store.OpDelete, Key: []byte("b")}, store.Command{Op: store.OpSetLeader, Key: []byte("n1")})
	want := map[string]time.Time{"a": h0.Add(span), "b": h0.Add(span)}
	if got := f.Inherited(); !maps.Equal(got, want) {
		t.Errorf("Inherited = %v, want %v", got, want)
	}
	// A later term keeps them, and adds its own.
	term = 5
	clk.Advance(time.Second)
	apply(4, put("c"))
	want["c"] = h0.Add(span)
	if got := f.Inherited(); !maps.Equal(got, want) {
		t.Errorf("Inherited in a later term = %v, want %v", got, want)
	}
	// A minute past their bound, the next inherited write drops them; its
	// own bound counts from the newest horizon.
	clk.Advance(span + time.Minute)
	h1 := clk.Now()
	horizon(4)
	clk.Advance(time.Second)
	apply(4, put("d"))
	if got := f.Inherited(); !maps.Equal(got, map[string]time.Time{"d": h1.Add(span)}) {
		t.Errorf("Inherited a minute after the bounds = %v, want only d until %v", got, h1.Add(span))
	}
	// A revocation of a TTL lease deletes the keys attached to it: they
	// are inherited too, named by its result.
	apply(5, store.Command{Op: store.OpGrantTTL, Term: time.Minute})
	apply(5, store.Command{Op: store.OpPut, Key: []byte("e1"), Value: []byte("v"), Lease: 1},
		store.Command{Op: store.OpPut, Key: []byte("e2"), Value: []byte("v"), Lease: 1})
	apply(4, store.Command{Op: store.OpRevokeTTL, Lease: 1})
	want = map[string]time.Time{"d": h1.Add(span), "e1": h1.Add(span), "e2": h1.Add(span)}
	if got := f.Inherited(); !maps.Equal(got, want) {
		t.Errorf("Inherited after a revocation of an earlier term = %v, want %v", got, want)
	}
}

// A node whose database fails to apply a committed entry stops its state
// machine: the write fails, later ones fail at once, and Failure says why,
// so that the server stops serving and another node leads.
func TestFailureStopsTheStateMachine(t *testing.T) {
	_, tr := raft.NewInmemTransport("n1")
	n, err := Open(Config{Dir: t.TempDir(), ID: "n1", Transport: tr, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		LogStore: raft.NewInmemStore(), StableStore: raft.NewInmemStore(),
		Bootstrap: []Member{{ID: "n1", Address: "n1", Voter: true}}})
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

// TestEntryCarriesTTLCommands: the TTL lease commands, a grant's owner and
// a write's lease go through a log entry unchanged, and a command without
// them encodes as before they existed, so that older entries still decode
// the same.
func TestEntryCarriesTTLCommands(t *testing.T) {
	cmds := []store.Command{
		{Op: store.OpGrantTTL, Term: 10 * time.Second},
		{Op: store.OpGrantTTL, Term: 10 * time.Second, Owner: 0xa11ce},
		{Op: store.OpPut, Key: []byte("k"), Value: []byte("v"), Lease: 7},
		{Op: store.OpRevokeTTL, Lease: 7},
		{Op: store.OpCheckpointTTL, Checkpoints: []store.TTLCheckpoint{{ID: 7, Remaining: time.Second}}},
		{Op: store.OpKeptAliveTTL, Leases: []uint64{7, 8}},
	}
	data, err := encodeEntry(cmds)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeEntry(data)
	if err != nil || !reflect.DeepEqual(got, cmds) {
		t.Errorf("decodeEntry = %+v, %v\nwant %+v", got, err, cmds)
	}
	plain, err := encodeEntry([]store.Command{{Op: store.OpPut, Key: []byte("k"), Value: []byte("v")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"Lease", "Owner", "Checkpoints", "Leases"} {
		if bytes.Contains(plain, []byte(field)) {
			t.Errorf("a put without a lease encodes field %s: %q", field, plain)
		}
	}
}
