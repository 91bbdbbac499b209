package client_test

// End-to-end tests of locks (DESIGN §5.1): acquisition modes, write leases
// bound to a TTL lease, lock records and guards, on a real server.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/server"
)

func TestE2ELockModesAndRecords(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: 2 * time.Second})
	a := dial(t, srv, client.Config{Name: "a"})
	b := dial(t, srv, client.Config{Name: "b"})
	checker := dial(t, srv, client.Config{Name: "checker"})
	ctx := stepCtx(t)

	s, err := client.NewSession(ctx, a, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	lock, err := a.AcquireWriteLease(ctx, "locks/db", client.AcquireUnder(s.Lease()))
	if err != nil {
		t.Fatalf("acquire under the session: %v", err)
	}
	if lock.Term() != 0 || lock.Lease() != s.Lease() || !lock.Valid() {
		t.Fatalf("lock: term %v, lease %v, valid %v", lock.Term(), lock.Lease(), lock.Valid())
	}
	// The checker answers from its cache once it has read the record.
	if ok, err := checker.CheckToken(ctx, "locks/db", lock.Token()); err != nil || !ok {
		t.Fatalf("CheckToken of the holder's token = %v, %v", ok, err)
	}
	r, err := checker.Lock(ctx, "locks/db")
	if err != nil || !r.Held || r.Token != lock.Token() || r.Lease != s.Lease() || !r.Cached {
		t.Fatalf("Lock record = %+v, %v; want held with token %d under %v, cached", r, err, lock.Token(), s.Lease())
	}
	if ok, _ := checker.CheckToken(ctx, "locks/db", lock.Token()+1); ok {
		t.Fatal("CheckToken of another token = true")
	}
	// A try fails at once; a write by another client waits (and here
	// times out); nothing recalls the lock.
	if _, err := b.AcquireWriteLease(ctx, "locks/db", client.AcquireTry()); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("try of the held lock = %v, want ErrLocked", err)
	}
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = b.Put(short, "locks/db", []byte("x"))
	cancel()
	if !errors.Is(err, client.ErrCanceled) {
		t.Fatalf("a write to the held lock = %v, want it to wait until its context ended", err)
	}
	if !lock.Valid() {
		t.Fatal("the lock was lost to a conflicting write")
	}
	// A guarded write commits under the token, not under another.
	if _, err := b.Put(ctx, "data", []byte("1"), client.WithGuard("locks/db", lock.Token())); err != nil {
		t.Fatalf("guarded put under the token: %v", err)
	}
	if _, err := b.Put(ctx, "data", []byte("2"), client.WithGuard("locks/db", lock.Token()+1)); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("guarded put under another token = %v, want ErrFenced", err)
	}
	// A waiter gets it once the holder releases; the checker's cached
	// answer is invalidated first.
	got := make(chan *client.WriteLease, 1)
	go func() {
		wl, err := b.AcquireWriteLease(ctx, "locks/db", client.AcquireWait())
		if err != nil {
			t.Errorf("waiting acquisition: %v", err)
		}
		got <- wl
	}()
	select {
	case <-got:
		t.Fatal("the waiter got the lock while it was held")
	case <-time.After(500 * time.Millisecond):
	}
	if err := lock.Release(ctx); err != nil {
		t.Fatal(err)
	}
	next := <-got
	if next == nil || next.Token() <= lock.Token() {
		t.Fatalf("the waiter's lock %v", next)
	}
	if ok, _ := checker.CheckToken(ctx, "locks/db", lock.Token()); ok {
		t.Fatal("CheckToken of the released token = true")
	}
	if ok, _ := checker.CheckToken(ctx, "locks/db", next.Token()); !ok {
		t.Fatal("CheckToken of the new holder's token = false")
	}
	if _, err := b.Put(ctx, "data", []byte("3"), client.WithGuard("locks/db", lock.Token())); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("guarded put under the released token = %v, want ErrFenced", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := checker.Lock(ctx, "locks/db"); err != nil || r.Held {
		t.Fatalf("record after the release = %+v, %v", r, err)
	}
	// The records are read-only.
	if _, err := a.Put(ctx, "\xff\xfflock\x00locks/db", []byte("x")); !errors.Is(err, client.ErrInvalidArgument) {
		t.Fatalf("write of a lock record = %v, want ErrInvalidArgument", err)
	}
}

// A lock under a session that stops being kept alive ends with its TTL
// lease, not before; a waiter gets it then.
func TestE2ELockEndsWithItsSession(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Second})
	a := dial(t, srv, client.Config{Name: "a"})
	b := dial(t, srv, client.Config{Name: "b"})
	ctx := stepCtx(t)
	const ttl = 5 * time.Second
	s, err := client.NewSession(ctx, a, ttl)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := a.AcquireWriteLease(ctx, "l", client.AcquireUnder(s.Lease()))
	if err != nil {
		t.Fatal(err)
	}
	s.Orphan() // stops keeping it alive, as a dead holder would
	stopped := time.Now()
	wctx, cancel := context.WithTimeout(context.Background(), ttl+10*time.Second)
	defer cancel()
	next, err := b.AcquireWriteLease(wctx, "l", client.AcquireWait())
	if err != nil {
		t.Fatalf("the waiter: %v", err)
	}
	if d := time.Since(stopped); d < ttl-time.Second {
		t.Fatalf("the waiter got the lock %v after its holder stopped keeping its session alive, before the TTL %v", d, ttl)
	}
	if next.Token() <= lock.Token() {
		t.Fatalf("tokens %d then %d", lock.Token(), next.Token())
	}
	if lock.Valid() {
		t.Error("the old holder's lock is still valid")
	}
	if _, err := lock.Put(ctx, []byte("late")); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("the old holder's write = %v, want ErrFenced", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
