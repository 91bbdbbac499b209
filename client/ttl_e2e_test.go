package client_test

// End-to-end tests of TTL leases (DESIGN §14): a real server (QUIC on
// 127.0.0.1, verified TLS, badger on disk) and clients of the real library.
// They run on real time (see helpers_e2e_test.go), with the shortest TTL
// the server grants, and every wait is bounded.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/server"
)

// A lease's life: grant, attach keys, TimeToLive with its keys, one
// keep-alive, the list of leases, and revocation, which deletes the keys
// (a reader that cached one sees it gone) and leaves a lease that every
// call reports gone.
func TestE2ETTLLeaseLifecycle(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Second})
	a := dial(t, srv, client.Config{Name: "a"})
	b := dial(t, srv, client.Config{Name: "b"})
	ctx := stepCtx(t)

	const ttl = time.Minute
	g, err := a.Grant(ctx, ttl)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	if g.ID == 0 || g.TTL != ttl {
		t.Fatalf("Grant = %+v", g)
	}
	for _, k := range []string{"svc/b", "svc/a"} {
		if _, err := a.Put(ctx, k, []byte("up"), client.WithLease(g.ID)); err != nil {
			t.Fatalf("Put %s with the lease: %v", k, err)
		}
	}
	if it := mustGet(t, b, "svc/a"); !it.Found {
		t.Fatalf("svc/a after its put: %s", fmtItem(it))
	}

	tl, err := a.TimeToLive(ctx, g.ID, true)
	if err != nil || tl.ID != g.ID || tl.GrantedTTL != ttl || tl.TTL <= 0 || tl.TTL > ttl || !slices.Equal(tl.Keys, []string{"svc/a", "svc/b"}) {
		t.Fatalf("TimeToLive = %+v, %v; want about %v left of %v, keys svc/a and svc/b", tl, err, ttl, ttl)
	}
	if tl, err := a.TimeToLive(ctx, g.ID, false); err != nil || tl.Keys != nil {
		t.Fatalf("TimeToLive without keys = %+v, %v", tl, err)
	}
	if r, err := b.KeepAliveOnce(ctx, g.ID); err != nil || r.ID != g.ID || r.TTL != ttl {
		t.Fatalf("KeepAliveOnce from another client = %+v, %v", r, err)
	}
	ls, err := a.Leases(ctx)
	if err != nil {
		t.Fatalf("Leases: %v", err)
	}
	i := slices.IndexFunc(ls, func(l client.LeaseStatus) bool { return l.ID == g.ID })
	if i < 0 || ls[i].TTL <= 0 || ls[i].TTL > ttl {
		t.Fatalf("Leases = %+v; want %v with up to %v left", ls, g.ID, ttl)
	}

	rv, err := a.Revoke(ctx, g.ID)
	if err != nil || rv.Keys != 2 || rv.Revision == 0 {
		t.Fatalf("Revoke = %+v, %v; want two keys deleted", rv, err)
	}
	if it := mustGet(t, b, "svc/a"); it.Found {
		t.Fatalf("svc/a after the revocation: %s; want deleted", fmtItem(it))
	}
	if it := mustGet(t, a, "svc/b"); it.Found {
		t.Fatalf("svc/b after the revocation: %s; want deleted", fmtItem(it))
	}
	if tl, err := a.TimeToLive(ctx, g.ID, true); err != nil || tl.TTL != -1 || len(tl.Keys) != 0 {
		t.Fatalf("TimeToLive after Revoke = %+v, %v; want TTL -1", tl, err)
	}
	if ls, err := a.Leases(ctx); err != nil || slices.ContainsFunc(ls, func(l client.LeaseStatus) bool { return l.ID == g.ID }) {
		t.Fatalf("Leases after Revoke = %+v, %v; want it gone", ls, err)
	}
	notFound := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), g.ID.String()) {
			t.Errorf("%s of a revoked lease: %v; want ErrNotFound naming %v", what, err, g.ID)
		}
	}
	_, err = a.KeepAliveOnce(ctx, g.ID)
	notFound("KeepAliveOnce", err)
	_, err = a.Revoke(ctx, g.ID)
	notFound("Revoke", err)
	_, err = a.Put(ctx, "svc/c", []byte("up"), client.WithLease(g.ID))
	notFound("Put WithLease", err)
}

// shortGrant grants the shortest of a few short TTLs that the server
// accepts, so that a test that waits for expiry waits little.
func shortGrant(t *testing.T, c *client.Client) client.LeaseGrantResult {
	t.Helper()
	var errs []error
	for _, ttl := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second} {
		g, err := c.Grant(stepCtx(t), ttl)
		if err == nil {
			return g
		}
		if !errors.Is(err, client.ErrInvalidArgument) {
			t.Fatalf("Grant(%v): %v", ttl, err)
		}
		errs = append(errs, err)
	}
	t.Fatalf("the server refuses every short TTL: %v", errors.Join(errs...))
	return client.LeaseGrantResult{}
}

// A lease kept alive keeps its keys for several TTLs; once nobody keeps it
// alive it expires, no earlier than its TTL after the last keep-alive was
// sent, and its keys are deleted as by a write (a reader that cached one
// sees it gone). A Session whose lease another client revokes is done
// within a third of the TTL.
func TestE2ETTLLeaseExpires(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Second})
	a := dial(t, srv, client.Config{Name: "a"})
	b := dial(t, srv, client.Config{Name: "b"})

	g := shortGrant(t, a)
	ttl := g.TTL
	t.Logf("shortest TTL granted: %v", ttl)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := a.KeepAlive(ctx, g.ID)
	if err != nil {
		t.Fatalf("KeepAlive: %v", err)
	}
	if _, err := a.Put(stepCtx(t), "svc/x", []byte("up"), client.WithLease(g.ID)); err != nil {
		t.Fatalf("Put with the lease: %v", err)
	}
	// Kept alive for three TTLs: the key stays, and renewals come.
	until := time.Now().Add(3 * ttl)
	renewals := 0
	for time.Now().Before(until) {
		if it := mustGet(t, b, "svc/x"); !it.Found {
			t.Fatalf("svc/x deleted while its lease was kept alive")
		}
		select {
		case r, ok := <-ch:
			if !ok {
				t.Fatalf("KeepAlive channel closed while kept alive")
			}
			if r.ID != g.ID || r.TTL != ttl {
				t.Fatalf("renewal %+v", r)
			}
			renewals++
		case <-time.After(10 * time.Millisecond):
		}
	}
	if renewals < 6 {
		t.Errorf("%d renewals in three TTLs, want one every third of the TTL", renewals)
	}

	// Nobody keeps it alive from the last keep-alive on.
	cancel()
	deadline := time.After(testTimeout)
	for closed := false; !closed; {
		select {
		case _, ok := <-ch: // renewals still buffered, then the close
			closed = !ok
		case <-deadline:
			t.Fatal("KeepAlive channel open after its ctx ended")
		}
	}
	sent := time.Now()
	if _, err := a.KeepAliveOnce(stepCtx(t), g.ID); err != nil {
		t.Fatalf("KeepAliveOnce: %v", err)
	}
	wait.For(t, ttl+testTimeout, "the lease to expire and its key to be deleted", func() bool {
		return !mustGet(t, b, "svc/x").Found
	})
	if gone := time.Since(sent); gone < ttl {
		t.Errorf("key deleted %v after the last keep-alive was sent, before the TTL of %v", gone, ttl)
	}
	if tl, err := a.TimeToLive(stepCtx(t), g.ID, false); err != nil || tl.TTL != -1 {
		t.Errorf("TimeToLive of the expired lease = %+v, %v; want -1", tl, err)
	}

	// A session whose lease another client revokes is done.
	s, err := client.NewSession(stepCtx(t), a, ttl)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	defer s.Close()
	if _, err := b.Revoke(stepCtx(t), s.Lease()); err != nil {
		t.Fatalf("Revoke by another client: %v", err)
	}
	select {
	case <-s.Done():
	case <-time.After(ttl/3 + slack):
		t.Fatalf("session not done within a third of the TTL of its lease's revocation")
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close of a session whose lease is gone: %v", err)
	}
}

// TestE2ETTLLeasesAllPages: Leases lists every lease, though the server
// sends them a page at a time (a small frame limit makes several pages).
func TestE2ETTLLeasesAllPages(t *testing.T) {
	srv := startServer(t, server.Config{LeaseTerm: time.Second, MaxValueSize: 1024})
	c := dial(t, srv, client.Config{Name: "lister"})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	const n = 600 // about three pages with a frame of 1 KiB of value
	want := map[client.LeaseID]bool{}
	for range n {
		g, err := c.Grant(ctx, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		want[g.ID] = true
	}
	ls, err := c.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) != n {
		t.Fatalf("Leases listed %d, want %d", len(ls), n)
	}
	for i, l := range ls {
		if !want[l.ID] || i > 0 && l.ID <= ls[i-1].ID {
			t.Fatalf("lease %d (%s) not granted, or out of order", i, l.ID)
		}
	}
}
