package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/server"
)

func TestSmoke(t *testing.T) {
	dir := t.TempDir()
	log := testkit.Discard()
	srv, err := server.New(server.Config{Dir: dir, Addr: "127.0.0.1:0", LeaseTerm: time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(context.Background())
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := client.Config{CAFile: server.CAPath(dir), Logger: log}
	a, err := client.Dial(ctx, srv.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := client.Dial(ctx, srv.Addr().String(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	it, err := a.Get(ctx, "k")
	if err != nil || it.Found || it.Cached {
		t.Fatalf("first get: %+v %v", it, err)
	}
	it, err = a.Get(ctx, "k")
	if err != nil || !it.Cached {
		t.Fatalf("second get: %+v %v", it, err)
	}
	v, err := b.Put(ctx, "k", []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	it, err = a.Get(ctx, "k")
	if err != nil || !it.Found || string(it.Value) != "hello" || it.Version != v || it.Cached {
		t.Fatalf("after put: %+v %v (v=%d)", it, err, v)
	}
	if _, err := b.CompareAndSwap(ctx, "k", v-1, []byte("x")); !errors.Is(err, client.ErrVersionMismatch) {
		t.Fatalf("cas: %v", err)
	}
	wl, err := a.AcquireWriteLease(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wl.Put(ctx, []byte("mine")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put(ctx, "k", []byte("theirs")); err != nil {
		t.Fatal(err)
	}
	if _, err := wl.Put(ctx, []byte("late")); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("fenced: %v", err)
	}
	st, err := a.ServerStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st)
}
