package client_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/server"
)

// keysOf returns the keys of a listing's page.
func keysOf(r client.ListResult) []string {
	out := make([]string, len(r.KVs))
	for i, kv := range r.KVs {
		out[i] = kv.Key
	}
	return out
}

// TestList: List reads the live keys under a prefix in key order, with
// their values and versions, at the revision of the last change; no
// deleted key, none outside the prefix; KeysOnly leaves values out; Limit
// and StartAfter page through it; ListRange reads [start, end); bad
// ranges and keys get their errors.
func TestList(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	c := dial(t, srv, client.Config{})
	ctx := stepCtx(t)
	vers := map[string]uint64{}
	for _, k := range []string{"/d/b", "/d/a", "/d/c/x", "/d/gone", "/c", "/d", "/d0", "/e/x", "/d/\xff"} {
		vers[k] = mustPut(t, c, k, "v"+k)
	}
	if _, err := c.Delete(ctx, "/d/gone"); err != nil {
		t.Fatal(err)
	}
	r, err := c.List(ctx, "/d/")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/d/a", "/d/b", "/d/c/x", "/d/\xff"}
	if got := keysOf(r); !slices.Equal(got, want) || r.More || r.Revision != srv.Stats().Revision {
		t.Fatalf("List(/d/) = %q, more %v, revision %d; want %q, no more, revision %d", got, r.More, r.Revision, want, srv.Stats().Revision)
	}
	for _, kv := range r.KVs {
		if string(kv.Value) != "v"+kv.Key || kv.Version != vers[kv.Key] {
			t.Errorf("%q: value %q version %d; want %q at %d", kv.Key, kv.Value, kv.Version, "v"+kv.Key, vers[kv.Key])
		}
	}

	r, err = c.List(ctx, "/d/", client.KeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range r.KVs {
		if kv.Value != nil || kv.Version != vers[kv.Key] {
			t.Errorf("keys only: %q value %q version %d; want no value, version %d", kv.Key, kv.Value, kv.Version, vers[kv.Key])
		}
	}

	// Pages of two: the second starts after the first's last key.
	p1, err := c.List(ctx, "/d/", client.Limit(2))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := c.List(ctx, "/d/", client.Limit(2), client.StartAfter(p1.KVs[len(p1.KVs)-1].Key))
	if err != nil {
		t.Fatal(err)
	}
	if got := append(keysOf(p1), keysOf(p2)...); !slices.Equal(got, want) || !p1.More || p2.More {
		t.Fatalf("pages of 2: %q (more %v) then %q (more %v); want %q, more only after the first", keysOf(p1), p1.More, keysOf(p2), p2.More, want)
	}

	r, err = c.ListRange(ctx, "/c", "/d/b")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keysOf(r), []string{"/c", "/d", "/d/a"}; !slices.Equal(got, want) {
		t.Fatalf("ListRange(/c, /d/b) = %q, want %q", got, want)
	}
	r, err = c.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(r.KVs); got != len(vers)-1 {
		t.Fatalf("List of every key: %q, want the %d live keys", keysOf(r), len(vers)-1)
	}
	r, err = c.List(ctx, "/nothing/")
	if err != nil || len(r.KVs) != 0 || r.More {
		t.Fatalf("List of an empty prefix: %+v, %v; want no keys", r, err)
	}

	if _, err := c.ListRange(ctx, "/b", "/a"); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("ListRange(/b, /a): %v, want ErrInvalidArgument", err)
	}
	if _, err := c.List(ctx, strings.Repeat("k", 5000)); !errors.Is(err, client.ErrTooLarge) {
		t.Errorf("List of a 5000-byte prefix: %v, want ErrTooLarge", err)
	}
}

// TestListServerBoundsPages: the server returns at most its page of keys
// (server.MaxListKeys) and says there is more; paging reads every key once.
func TestListServerBoundsPages(t *testing.T) {
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	c := dial(t, srv, client.Config{})
	ctx := stepCtx(t)
	const n = server.MaxListKeys + 5
	for i := range n {
		if _, err := c.Put(ctx, fmt.Sprintf("/many/%05d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	r, err := c.List(ctx, "/many/", client.KeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if len(r.KVs) != server.MaxListKeys || !r.More {
		t.Fatalf("first page: %d keys, more %v; want %d and more", len(r.KVs), r.More, server.MaxListKeys)
	}
	r2, err := c.List(ctx, "/many/", client.KeysOnly(), client.StartAfter(r.KVs[len(r.KVs)-1].Key))
	if err != nil {
		t.Fatal(err)
	}
	if len(r2.KVs) != 5 || r2.More || r2.KVs[0].Key != fmt.Sprintf("/many/%05d", server.MaxListKeys) {
		t.Fatalf("second page: %q, more %v; want the last 5 keys", keysOf(r2), r2.More)
	}
}

// TestListPagesAcrossWrites: pages read with StartAfter while other keys
// are created and deleted between them return every key that exists
// throughout exactly once, in order.
func TestListPagesAcrossWrites(t *testing.T) {
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	c := dial(t, srv, client.Config{})
	w := dial(t, srv, client.Config{})
	ctx := stepCtx(t)
	var stable []string
	for i := range 20 {
		k := fmt.Sprintf("/p/%02d", 2*i)
		mustPut(t, c, k, "v")
		stable = append(stable, k)
	}
	var got []string
	after := ""
	for page := 0; ; page++ {
		opts := []client.ListOption{client.Limit(3), client.KeysOnly()}
		if after != "" {
			opts = append(opts, client.StartAfter(after))
		}
		r, err := c.List(ctx, "/p/", opts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, kv := range r.KVs {
			if !strings.HasSuffix(kv.Key, "x") && !strings.Contains(kv.Key, "odd") {
				got = append(got, kv.Key)
			}
		}
		if !r.More {
			break
		}
		after = r.KVs[len(r.KVs)-1].Key
		// Between pages: a key before the cursor, one after it, and the
		// deletion of one created earlier.
		mustPut(t, w, fmt.Sprintf("/p/%02dx", page), "new")
		mustPut(t, w, fmt.Sprintf("/p/odd%02d", page), "new")
		if page > 0 {
			if _, err := w.Delete(ctx, fmt.Sprintf("/p/odd%02d", page-1)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !slices.Equal(got, stable) {
		t.Fatalf("the keys present throughout, paged across writes: %q; want each of %q once, in order", got, stable)
	}
}

// TestListUnderPolicy: a listing needs the read right on every key its
// range may hold: a prefix the client may read lists; a range that reaches
// past its grants is refused whole, naming the client, though every key
// it holds now is readable; a client without the right lists nothing.
func TestListUnderPolicy(t *testing.T) {
	srv, issue := startPolicyServer(t, `clients:
  app:
    keys:
      - prefix: app/
        rights: [read, write]
  reader:
    keys:
      - prefix: app/pub/
        rights: [read]
`)
	cert, key := issue("app")
	app := dial(t, srv, client.Config{CertFile: cert, KeyFile: key})
	rcert, rkey := issue("reader")
	reader := dial(t, srv, client.Config{CertFile: rcert, KeyFile: rkey})
	ctx := stepCtx(t)
	for _, k := range []string{"app/a", "app/pub/x", "app/pub/y"} {
		mustPut(t, app, k, "v")
	}
	if r, err := app.List(ctx, "app/"); err != nil || len(r.KVs) != 3 {
		t.Fatalf("app lists app/: %q, %v; want its 3 keys", keysOf(r), err)
	}
	if r, err := reader.List(ctx, "app/pub/"); err != nil || len(r.KVs) != 2 {
		t.Fatalf("reader lists app/pub/: %q, %v; want 2 keys", keysOf(r), err)
	}
	for _, tc := range []struct {
		c          *client.Client
		start, end string
		who        string
	}{
		{app, "", "", `client "app"`},
		{app, "app/", "b", `client "app"`},          // app0... is not granted, though no key is there
		{reader, "app/", "app0", `client "reader"`}, // app/a is not the reader's
		{reader, "app/pub/x", "app/pub0", ""},       // inside its grant: allowed
	} {
		_, err := tc.c.ListRange(ctx, tc.start, tc.end)
		if tc.who == "" {
			if err != nil {
				t.Errorf("ListRange(%q, %q): %v, want it allowed", tc.start, tc.end, err)
			}
			continue
		}
		if !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), tc.who) || !strings.Contains(err.Error(), "read right") {
			t.Errorf("ListRange(%q, %q): %v; want ErrPermissionDenied naming %s and the read right", tc.start, tc.end, err, tc.who)
		}
	}
}
