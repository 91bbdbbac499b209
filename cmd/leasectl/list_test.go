package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/server"
)

// TestGetListings: get --prefix, get KEY END, --keys-only and --limit list
// keys in order against a real server, in table and JSON, paging past the
// server's page; an empty listing prints nothing and exits 0.
func TestGetListings(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	ctl := func(args ...string) clitest.Result { t.Helper(); return srv.Ctl(t, args...) }
	for _, k := range []string{"/d/b", "/d/a", "/d/c", "/e", "/d0"} {
		ok(t, ctl("put", k, "v"+k))
	}

	rows := table(t, ok(t, ctl("get", "--prefix", "/d/")).Stdout)
	if got := fmt.Sprint(rows); got != "[[KEY VALUE VERSION] [/d/a v/d/a 2] [/d/b v/d/b 1] [/d/c v/d/c 3]]" {
		t.Fatalf("get --prefix /d/: %s", got)
	}
	rows = table(t, ok(t, ctl("get", "--keys-only", "/d/a", "/d/c")).Stdout)
	if got := fmt.Sprint(rows); got != "[[KEY VERSION] [/d/a 2] [/d/b 1]]" {
		t.Fatalf("get --keys-only /d/a /d/c: %s", got)
	}
	var lj listJSON
	decode(t, ctl("-o", "json", "get", "--prefix", "--limit", "2", "/d/"), &lj)
	if lj.Count != 2 || !lj.More || lj.Revision != 5 || lj.KVs[1].Key != "/d/b" || lj.KVs[1].Value == nil || *lj.KVs[1].Value != "v/d/b" {
		t.Fatalf("get --prefix --limit 2 -o json: %+v", lj)
	}
	if r := ok(t, ctl("get", "--prefix", "/none/")); r.Stdout != "" {
		t.Fatalf("an empty listing printed %q", r.Stdout)
	}
	decode(t, ctl("-o", "json", "get", "--prefix", "/none/"), &lj)
	if lj.Count != 0 || lj.KVs == nil || lj.More {
		t.Fatalf("an empty listing in JSON: %+v; want count 0 and an empty kvs", lj)
	}

	// More keys than a server page: leasectl reads every page.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr, srv.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = server.MaxListKeys + 100
	for i := range n {
		if _, err := c.Put(ctx, fmt.Sprintf("/many/%04d", i), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	decode(t, ctl("-o", "json", "get", "--prefix", "--keys-only", "/many/"), &lj)
	if lj.Count != n || lj.More || lj.KVs[n-1].Key != fmt.Sprintf("/many/%04d", n-1) || lj.KVs[0].Value != nil {
		t.Fatalf("a listing of %d keys: count %d, more %v", n, lj.Count, lj.More)
	}
	decode(t, ctl("-o", "json", "get", "--prefix", "--limit", fmt.Sprint(n-50), "/many/"), &lj)
	if lj.Count != n-50 || !lj.More {
		t.Fatalf("a listing of %d keys with --limit %d: count %d, more %v", n, n-50, lj.Count, lj.More)
	}
}
