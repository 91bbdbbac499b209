package client_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/server"
)

// TestListLeased: a leased listing is answered from memory afterwards, and
// so are Gets of keys under it, present or absent; a key another client
// creates under it is there at once after that client's Put returns, from
// the next List and Get; this client's own write under it drops the
// listing; a listing that is not a directory, or too large for its page,
// is not cached.
func TestListLeased(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	fs := dial(t, srv, client.Config{})
	other := dial(t, srv, client.Config{})
	ctx := stepCtx(t)
	for _, k := range []string{"/d/a", "/d/b", "/d/sub/c", "/e"} {
		mustPut(t, other, k, "v"+k)
	}
	r, err := fs.List(ctx, "/d/", client.Leased())
	if err != nil || r.Cached || len(r.KVs) != 3 {
		t.Fatalf("first listing: %q, cached %v, %v", keysOf(r), r.Cached, err)
	}
	r2, err := fs.List(ctx, "/d/", client.Leased())
	if err != nil || !r2.Cached || !slices.Equal(keysOf(r2), keysOf(r)) || r2.Revision != r.Revision {
		t.Fatalf("second listing: %q, cached %v, revision %d, %v; want the first, from memory", keysOf(r2), r2.Cached, r2.Revision, err)
	}
	if r3, _ := fs.List(ctx, "/d/", client.Leased(), client.KeysOnly()); !r3.Cached || r3.KVs[0].Value != nil {
		t.Fatalf("keys only from a cached listing: cached %v, %+v", r3.Cached, r3.KVs)
	}
	if it := mustGet(t, fs, "/d/b"); !it.Cached || string(it.Value) != "v/d/b" {
		t.Fatalf("Get of a listed key: %+v; want it from the listing", it)
	}
	if it := mustGet(t, fs, "/d/none"); !it.Cached || it.Found {
		t.Fatalf("Get of an absent key under the listing: %+v; want not found, from the listing", it)
	}
	if it := mustGet(t, fs, "/e"); it.Cached {
		t.Fatalf("Get of a key outside the listing: %+v; want it from the server", it)
	}

	// Another client creates keys: once its Put returns, the listing
	// shows them, and the absent answer is gone.
	for i := range 5 {
		k := fmt.Sprintf("/d/new%d", i)
		mustPut(t, other, k, "x")
		if it := mustGet(t, fs, k); !it.Found {
			t.Fatalf("Get(%q) after another client created it: not found", k)
		}
		r, err := fs.List(ctx, "/d/", client.Leased())
		if err != nil || !slices.Contains(keysOf(r), k) {
			t.Fatalf("listing after another client created %q: %q, %v", k, keysOf(r), err)
		}
	}

	// Its own write drops the listing at once.
	mustPut(t, fs, "/d/mine", "m")
	if r, err := fs.List(ctx, "/d/", client.Leased()); err != nil || !slices.Contains(keysOf(r), "/d/mine") {
		t.Fatalf("listing after its own write: %q, %v", keysOf(r), err)
	}

	// A prefix that does not end with '/' is not cached.
	for range 2 {
		if r, err := fs.List(ctx, "/d", client.Leased()); err != nil || r.Cached {
			t.Fatalf("listing of /d: cached %v, %v; want it from the server", r.Cached, err)
		}
	}
	mustPut(t, other, "/f/1", "1")
	mustPut(t, other, "/f/2", "1")
	fs.List(ctx, "/f/", client.Leased(), client.Limit(1))
	if r, err := fs.List(ctx, "/f/", client.Leased(), client.Limit(1)); err != nil || r.Cached || !r.More {
		t.Errorf("an incomplete listing: cached %v, more %v, %v; want uncached", r.Cached, r.More, err)
	}
}

// TestListLeasedPhantom: a key created under a prefix that another client
// holds a lease on is never missed: as soon as the creator's Put returns,
// the holder's cached List and its Get of the key (which it had cached as
// absent, through the listing) show it. Many creates, each checked at once.
func TestListLeasedPhantom(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	holder := dial(t, srv, client.Config{})
	creator := dial(t, srv, client.Config{})
	ctx := stepCtx(t)
	invalidated := 0
	for i := range 40 {
		dir := fmt.Sprintf("/p%d/", i)
		k := dir + "phantom"
		if _, err := holder.List(ctx, dir, client.Leased()); err != nil {
			t.Fatal(err)
		}
		if it := mustGet(t, holder, k); it.Found || !it.Cached {
			t.Fatalf("%s before the create: %+v; want absent, from the listing", k, it)
		}
		var res client.WriteResult
		if _, err := creator.Put(ctx, k, []byte("boo"), client.Result(&res)); err != nil {
			t.Fatal(err)
		}
		invalidated += res.Holders
		if it := mustGet(t, holder, k); !it.Found {
			t.Fatalf("%s: the holder missed a key created under its listing", k)
		}
		r, err := holder.List(ctx, dir, client.Leased())
		if err != nil || !slices.Equal(keysOf(r), []string{k}) {
			t.Fatalf("%s: the holder's listing %q, %v; want the created key", dir, keysOf(r), err)
		}
	}
	if invalidated != 40 {
		t.Errorf("the creates invalidated %d listings; want each its one", invalidated)
	}
}
