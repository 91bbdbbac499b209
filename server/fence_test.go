package server_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// TestFencedWriteByAnotherClient, on the wire: a client holds the write
// lease on a key through the client library. Another connection takes a
// write lease of its own, so it learns the counter all fencing tokens come
// from, and presents the holder's token, one below its own. Its write is
// fenced and its release is not found, whether or not it gives a client
// identity, and neither changes anything: the value, the holder's lease
// (no recall, no loss), the counters. The holder goes on writing under its
// lease.
func TestFencedWriteByAnotherClient(t *testing.T) {
	for _, guesser := range []struct {
		name string
		id   uint64
	}{{"with a client identity", 0xbad}, {"without one", 0}} {
		t.Run(guesser.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := testkit.NewServer(t, server.Config{LeaseTerm: wlTerm, Epsilon: wlEps})
				ctx, cancel := context.WithTimeout(context.Background(), testkit.StepTimeout)
				defer cancel()
				lost := make(chan client.Event, 8)
				a := srv.Dial(client.Config{OnEvent: func(e client.Event) {
					if e.Kind == client.EventWriteLeaseLost {
						lost <- e
					}
				}})
				wl, err := a.AcquireWriteLease(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				v1, err := wl.Put(ctx, []byte("v1"))
				if err != nil {
					t.Fatal(err)
				}

				b := srv.Raw(protoclient.Options{Name: "guesser", ClientID: guesser.id})
				own, ok := call(t, b, &protocol.Acquire{Key: []byte("mine")}, testkit.StepTimeout).(*protocol.AcquireReply)
				if !ok || own.Token != wl.Token()+1 {
					t.Fatalf("the guesser's own acquisition: %#v; want token %d", own, wl.Token()+1)
				}
				guess := own.Token - 1
				before := srv.Stats()
				if e, ok := call(t, b, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("stolen"), Token: guess}, testkit.StepTimeout).(*protocol.Error); !ok || e.Code != protocol.CodeFenced {
					t.Fatalf("the guesser's write with the holder's token: %#v, want CodeFenced", e)
				}
				if e, ok := call(t, b, &protocol.Write{Op: protocol.OpDelete, Key: []byte("k"), Token: guess}, testkit.StepTimeout).(*protocol.Error); !ok || e.Code != protocol.CodeFenced {
					t.Fatalf("the guesser's delete with the holder's token: %#v, want CodeFenced", e)
				}
				if e, ok := call(t, b, &protocol.ReleaseWrite{Key: []byte("k"), Token: guess}, testkit.StepTimeout).(*protocol.Error); !ok || e.Code != protocol.CodeNotFound {
					t.Fatalf("the guesser's release of the holder's lease: %#v, want CodeNotFound", e)
				}
				after := srv.Stats()
				if after.Revision != before.Revision || after.WriteLeases != 2 || after.Recalls != before.Recalls || after.WritesWaiting != 0 {
					t.Fatalf("stats after the guesser's attempts: revision %d -> %d, %d write leases, recalls %d -> %d, %d writes waiting; want nothing changed, 2 write leases",
						before.Revision, after.Revision, after.WriteLeases, before.Recalls, after.Recalls, after.WritesWaiting)
				}
				if g, ok := call(t, b, &protocol.Get{Key: []byte("k")}, testkit.StepTimeout).(*protocol.GetReply); !ok || string(g.Value) != "v1" || g.Version != v1 || g.Term != 0 {
					t.Fatalf("the guesser reads %#v; want v1 at version %d, uncached under the holder's lease", g, v1)
				}

				// The holder keeps its lease, and writes under it.
				synctest.Wait()
				select {
				case e := <-lost:
					t.Fatalf("the holder was told %v", e)
				default:
				}
				if !wl.Valid() {
					t.Fatal("the holder's write lease is not valid after the guesser's attempts")
				}
				v2, err := wl.Put(ctx, []byte("v2"))
				if err != nil || v2 <= v1 {
					t.Fatalf("the holder's write after the guesser's attempts: version %d, %v", v2, err)
				}
				if it, err := a.Get(ctx, "k"); err != nil || string(it.Value) != "v2" || it.Version != v2 {
					t.Fatalf("the holder reads %+v, %v; want v2 at version %d", it, err, v2)
				}
				if err := wl.Release(ctx); err != nil {
					t.Fatal(err)
				}
				// Once the holder has released it, the token is simply
				// stale.
				if e, ok := call(t, b, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("late"), Token: guess}, testkit.StepTimeout).(*protocol.Error); !ok || e.Code != protocol.CodeFenced {
					t.Fatalf("the guesser's write after the release: %#v, want CodeFenced", e)
				}
				if _, err := wl.Put(ctx, []byte("v3")); !errors.Is(err, client.ErrFenced) {
					t.Fatalf("the holder's write after its release: %v, want ErrFenced", err)
				}
			})
		})
	}
}
