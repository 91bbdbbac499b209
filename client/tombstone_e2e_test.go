package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// TestRevalidateCollectedDeletion: a client that cached a key as deleted,
// at the revision of its deletion, revalidates it once its lease has run
// out, after the server collected the deletion's record: it gets the key
// as not found, at version 0, caches that, and a compare-and-swap
// expecting absence succeeds. Server and client share a fake clock, which
// the test moves until the collection has come (a minute or two).
func TestRevalidateCollectedDeletion(t *testing.T) {
	fc := clock.NewFake()
	srv := startServer(t, server.Config{LeaseTerm: time.Second, Clock: fc})
	c := dial(t, srv, client.Config{Clock: fc})
	ctx := stepCtx(t)
	if _, err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	d, err := c.Delete(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	deleted := d.Version
	if it := mustGet(t, c, "k"); it.Found || it.Version != deleted {
		t.Fatalf("read after the delete: %+v, want not found at version %d", it, deleted)
	}
	if it := mustGet(t, c, "k"); !it.Cached {
		t.Fatalf("second read: %+v, want it from the cache", it)
	}
	// Another session watches the server's answer for the collection.
	raw, err := protoclient.Dial(ctx, srv.Addr().String(), protoclient.Options{CAFile: srv.CA()})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	wait.For(t, testTimeout, "the deletion's record to be collected", func() bool {
		fc.Advance(10 * time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		m, err := raw.Call(ctx, &protocol.Get{Key: []byte("k")})
		g, ok := m.(*protocol.GetReply)
		return err == nil && ok && !g.Found && g.Version == 0
	})
	it := mustGet(t, c, "k") // the cached entry's lease ran out: a revalidation
	if it.Cached || it.Found || it.Version != 0 {
		t.Fatalf("revalidation after the collection: %+v, want not found at version 0 from the server", it)
	}
	if it := mustGet(t, c, "k"); !it.Cached || it.Found || it.Version != 0 {
		t.Fatalf("read after the revalidation: %+v, want the cached answer, not found at version 0", it)
	}
	// The watching session lets go of its lease, which it would never
	// give up by itself: it answers no invalidation.
	if m, err := raw.Call(stepCtx(t), &protocol.Release{Keys: [][]byte{[]byte("k")}}); err != nil {
		t.Fatalf("release: %v, %v", m, err)
	}
	if _, err := c.CompareAndSwap(stepCtx(t), "k", deleted, []byte("x")); !errors.Is(err, client.ErrVersionMismatch) {
		t.Fatalf("compare-and-swap expecting the collected deletion's version %d: %v, want a version mismatch", deleted, err)
	}
	if v, err := c.CompareAndSwap(stepCtx(t), "k", 0, []byte("y")); err != nil || v != deleted+1 {
		t.Fatalf("compare-and-swap expecting absence: %d, %v; want version %d", v, err, deleted+1)
	}
}
