package server

import (
	"testing"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
)

// TestRevalidateCollectedDeletion: once the record a deletion left is
// collected (a minute or two after it, on the server's clock), the key
// reads as one that never existed. A client that cached the key as
// deleted, at the deletion's version, revalidates it and gets the whole
// answer, still not found, at version 0; one that knew it absent at
// version 0 gets Unchanged; a compare-and-swap expecting the deletion's
// version no longer matches, one expecting 0 does.
func TestRevalidateCollectedDeletion(t *testing.T) {
	fc := clock.NewFake()
	srv := startServer(t, t.TempDir(), fc, time.Second)
	c := dialRaw(t, srv)
	if r, ok := writeOp(t, c, protocol.OpPut, "k", "v", 0).(*protocol.WriteReply); !ok || r.Version != 1 {
		t.Fatalf("put: %#v", r)
	}
	r, ok := writeOp(t, c, protocol.OpDelete, "k", "", 0).(*protocol.WriteReply)
	if !ok || r.Version != 2 {
		t.Fatalf("delete: %#v", r)
	}
	deleted := r.Version
	if g := get(t, c, "k"); g.Found || g.Version != deleted {
		t.Fatalf("read after the delete: %+v, want not found at version %d", g, deleted)
	}
	revalidate := func(known uint64) *protocol.GetReply {
		t.Helper()
		g, ok := call(t, c, &protocol.Get{Key: []byte("k"), Revalidate: true, Known: known}).(*protocol.GetReply)
		if !ok {
			t.Fatalf("revalidate %d: %#v", known, g)
		}
		return g
	}
	if g := revalidate(deleted); !g.Unchanged || g.Found || g.Version != deleted {
		t.Fatalf("revalidation before the collection: %+v, want unchanged at version %d", g, deleted)
	}
	// The clock moves until the collection has come: each step fires the
	// timers due, the collector's among them.
	wait.For(t, testTimeout, "the deletion's record to be collected", func() bool {
		fc.Advance(10 * time.Second)
		return get(t, c, "k").Version == 0
	})
	if g := revalidate(deleted); g.Unchanged || g.Found || g.Version != 0 || g.Term == 0 {
		t.Errorf("revalidation of the collected deletion: %+v, want not found at version 0 under a lease", g)
	}
	if g := revalidate(0); !g.Unchanged || g.Found || g.Version != 0 {
		t.Errorf("revalidation of a key known absent: %+v, want unchanged at version 0", g)
	}
	cas := func(expect uint64) protocol.Message {
		return call(t, c, &protocol.Write{Op: protocol.OpCAS, Key: []byte("k"), Value: []byte("w"), Expect: expect})
	}
	wantCode(t, "compare-and-swap expecting the collected deletion's version", cas(deleted), protocol.CodeVersionMismatch)
	if w, ok := cas(0).(*protocol.WriteReply); !ok || w.Version != deleted+1 {
		t.Errorf("compare-and-swap expecting absent: %#v, want version %d", w, deleted+1)
	}
}
