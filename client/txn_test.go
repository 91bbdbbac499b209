package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/server"
)

// TestTxnRename: a rename is one transaction. Another client that cached
// the source and the absent destination sees both changed at once, at one
// revision, after the rename; a second rename of the same source takes the
// Else branch; and a cached entry of the renaming client's own is dropped.
func TestTxnRename(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	fs := dial(t, srv, client.Config{})
	other := dial(t, srv, client.Config{})
	ctx := stepCtx(t)
	mustPut(t, fs, "/d/a", "inode7")
	if it := mustGet(t, other, "/d/a"); !it.Found {
		t.Fatal("source not found")
	}
	if it := mustGet(t, other, "/d/b"); it.Found {
		t.Fatal("destination found before the rename")
	}
	mustGet(t, fs, "/d/b") // the renamer caches the absent destination too
	if it := mustGet(t, other, "/d/b"); !it.Cached {
		t.Fatal("the absent destination is not cached")
	}
	rename := func() (client.TxnResult, error) {
		return fs.Txn(ctx).If(client.Exists("/d/a"), client.Absent("/d/b")).
			Then(client.PutOp("/d/b", []byte("inode7")), client.DeleteOp("/d/a")).
			Else(client.PutOp("/d/conflict", []byte("1"))).Commit()
	}
	r, err := rename()
	if err != nil {
		t.Fatal(err)
	}
	if !r.Succeeded || r.Revision != srv.Stats().Revision || r.Holders != 2 {
		t.Fatalf("rename = %+v; want succeeded at revision %d after invalidating the other client's 2 leases (the renamer dropped its own)", r, srv.Stats().Revision)
	}
	for _, c := range []*client.Client{other, fs} {
		a, b := mustGet(t, c, "/d/a"), mustGet(t, c, "/d/b")
		if a.Found || !b.Found || string(b.Value) != "inode7" || a.Version != r.Revision || b.Version != r.Revision {
			t.Errorf("after the rename: /d/a %+v, /d/b %+v; want gone and present at revision %d", a, b, r.Revision)
		}
	}
	r2, err := rename()
	if err != nil || r2.Succeeded || r2.Revision != r.Revision+1 {
		t.Fatalf("rename again = %+v, %v; want the else branch at revision %d", r2, err, r.Revision+1)
	}
	if it := mustGet(t, other, "/d/conflict"); !it.Found {
		t.Error("the else branch's put is not there")
	}
}

// TestTxnCompares: each compare, through the wire, on a present and an
// absent key; an empty transaction holds and changes nothing.
func TestTxnCompares(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	c := dial(t, srv, client.Config{})
	ctx := stepCtx(t)
	v := mustPut(t, c, "k", "val")
	for _, tc := range []struct {
		cmp  client.Compare
		want bool
	}{
		{client.Exists("k"), true}, {client.Absent("k"), false}, {client.Absent("none"), true},
		{client.VersionIs("k", v), true}, {client.VersionIs("none", 0), true}, {client.VersionIsNot("k", v), false},
		{client.VersionAbove("k", v-1), true}, {client.VersionBelow("k", v), false},
		{client.ValueIs("k", []byte("val")), true}, {client.ValueIs("none", nil), false},
		{client.ValueIsNot("k", []byte("x")), true}, {client.ValueIsNot("none", []byte("x")), false},
	} {
		r, err := c.Txn(ctx).If(tc.cmp).Commit()
		if err != nil || r.Succeeded != tc.want || r.Revision != v {
			t.Errorf("%+v: %+v, %v; want succeeded %v at revision %d", tc.cmp, r, err, tc.want, v)
		}
	}
}

// TestTxnRefused: every bad transaction gets its error, and nothing of it
// is applied.
func TestTxnRefused(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute, MaxValueSize: 1000})
	c := dial(t, srv, client.Config{})
	ctx := stepCtx(t)
	rev := mustPut(t, c, "k", "v")
	many := make([]client.TxnOp, server.MaxTxnOps+1)
	for i := range many {
		many[i] = client.PutOp(fmt.Sprintf("m%d", i), nil)
	}
	lease, err := c.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		txn  *client.Txn
		want error
		msg  string
	}{
		{"too many ops", c.Txn(ctx).Then(many...), client.ErrTooLarge, "at most 128"},
		{"values past the limit", c.Txn(ctx).Then(client.PutOp("a", make([]byte, 600)), client.PutOp("b", make([]byte, 600))), client.ErrTooLarge, "1200 bytes"},
		{"a key written twice", c.Txn(ctx).Then(client.PutOp("a", nil), client.DeleteOp("a")), client.ErrInvalidArgument, `writes "a" twice`},
		{"an empty key", c.Txn(ctx).If(client.Exists("")), client.ErrInvalidArgument, "empty key"},
		{"a TTL lease that does not exist", c.Txn(ctx).Then(client.PutOp("a", nil), client.PutOp("c", nil, client.WithLease(lease.ID+99))), client.ErrNotFound, "TTL lease"},
	} {
		_, err := tc.txn.Commit()
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: %v; want %v saying %q", tc.name, err, tc.want, tc.msg)
		}
	}
	if got := srv.Stats().Revision; got != rev {
		t.Errorf("revision %d after refused transactions; want %d", got, rev)
	}
	tx := c.Txn(ctx)
	if _, err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(); !errors.Is(err, client.ErrInvalidArgument) {
		t.Errorf("a second Commit: %v, want ErrInvalidArgument", err)
	}
}

// TestTxnUnderWriteLease: a transaction's write under a write lease goes
// through with its token; once the lease is released, the same
// transaction is fenced, and nothing of it applies.
func TestTxnUnderWriteLease(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	c := dial(t, srv, client.Config{})
	ctx := stepCtx(t)
	wl, err := c.AcquireWriteLease(ctx, "owned")
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.Txn(ctx).Then(client.PutOp("owned", []byte("1")).Under(wl), client.PutOp("free", []byte("1"))).Commit()
	if err != nil || !r.Succeeded {
		t.Fatalf("under the lease: %+v, %v", r, err)
	}
	if _, err := c.Txn(ctx).Then(client.PutOp("free", nil).Under(wl)).Commit(); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("an op under the lease of another key: %v, want ErrInvalidArgument", err)
	}
	if err := wl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = c.Txn(ctx).Then(client.PutOp("owned", []byte("2")).Under(wl), client.PutOp("free", []byte("2"))).Commit()
	if !errors.Is(err, client.ErrFenced) {
		t.Fatalf("after the release: %v, want ErrFenced", err)
	}
	if it := mustGet(t, c, "free"); string(it.Value) != "1" {
		t.Errorf("free = %q after the fenced transaction", it.Value)
	}
}

// TestTxnUnderPolicy: a transaction needs the read right on every key it
// compares and the write right on every key of both branches.
func TestTxnUnderPolicy(t *testing.T) {
	srv, issue := startPolicyServer(t, `clients:
  app:
    keys:
      - prefix: app/
        rights: [read, write]
      - prefix: ro/
        rights: [read]
      - prefix: wo/
        rights: [write]
`)
	cert, key := issue("app")
	app := dial(t, srv, client.Config{CertFile: cert, KeyFile: key})
	ctx := stepCtx(t)
	if _, err := app.Txn(ctx).If(client.Absent("ro/x")).Then(client.PutOp("app/a", nil)).Else(client.PutOp("wo/b", nil)).Commit(); err != nil {
		t.Fatalf("allowed: %v", err)
	}
	for name, tx := range map[string]*client.Txn{
		"compare without read": app.Txn(ctx).If(client.Exists("wo/b")),
		"else without write":   app.Txn(ctx).Then(client.PutOp("app/a", nil)).Else(client.PutOp("ro/x", nil)),
		"outside every grant":  app.Txn(ctx).Then(client.DeleteOp("other")),
	} {
		if _, err := tx.Commit(); !errors.Is(err, client.ErrPermissionDenied) {
			t.Errorf("%s: %v; want ErrPermissionDenied", name, err)
		}
	}
}
