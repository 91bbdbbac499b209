package client_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/netfault"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/server"
)

// TestSuspendDropsLeases: a suspend of the machine longer than the slack
// (a tenth of ε), which the client's monotonic clock does not count, drops
// every cached lease before the next cached read, reports them expired,
// and the read goes to the server; a shorter one does not.
func TestSuspendDropsLeases(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	clk := newSuspendClock(nil)
	ev := newEvents()
	a := dial(t, srv, client.Config{Clock: clk, OnEvent: ev.on})
	b := dial(t, srv, client.Config{})
	mustPut(t, b, "k", "v1")
	mustPut(t, b, "j", "v1")
	for _, k := range []string{"k", "j"} {
		mustGet(t, a, k)
		if it := mustGet(t, a, k); !it.Cached {
			t.Fatalf("A does not cache %s: %s", k, fmtItem(it))
		}
	}
	clk.sleep(server.DefaultEpsilon / 20) // half the slack
	if it := mustGet(t, a, "k"); !it.Cached {
		t.Fatalf("after a suspend within the slack, the read went to the server: %s", fmtItem(it))
	}
	clk.sleep(time.Hour)
	if it := mustGet(t, a, "k"); it.Cached {
		t.Fatalf("after a suspend of an hour, a read served from the cache: %s", fmtItem(it))
	}
	if _, _, ok := client.CachedEntry(a, "j"); ok {
		t.Fatal("after a suspend of an hour, j is still cached")
	}
	e := ev.wait(t, client.EventLeasesExpired, testTimeout, func(e client.Event) bool { return hasKey(e, "j") })
	if !hasKey(e, "k") {
		t.Fatalf("leases expired event %v: want k and j", e.Keys)
	}
	if it := mustGet(t, a, "k"); !it.Cached {
		t.Fatalf("the read after the suspend cached nothing: %s", fmtItem(it))
	}
}

// TestSuspendStaleRead: a client whose machine sleeps past its lease, its
// network down as well, wakes to find that a write committed meanwhile
// (the server waited out the lease, unacknowledged): the read it makes
// before its network is back must not serve the old value from its cache,
// though the monotonic clock says the lease still lasts.
func TestSuspendStaleRead(t *testing.T) {
	leaktest.Check(t)
	const term = 500 * time.Millisecond
	srv := startServer(t, server.Config{LeaseTerm: term})
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc := netfault.Wrap(udp, 1)
	defer pc.Close()
	clk := newSuspendClock(nil)
	a := dial(t, srv, client.Config{Clock: clk, PacketConn: pc, MaxReconnectDelay: 100 * time.Millisecond})
	b := dial(t, srv, client.Config{})
	mustPut(t, b, "k", "v1")
	mustGet(t, a, "k")
	if it := mustGet(t, a, "k"); !it.Cached {
		t.Fatalf("A does not cache k: %s", fmtItem(it))
	}

	clk.suspend()
	pc.Pause()
	// The server waits out A's lease, term + ε at most, before the write
	// commits: real time, as a sleeping machine's server sees it.
	start := time.Now()
	mustPutWithin(t, b, "k", "v2", term+server.DefaultEpsilon+testTimeout)
	t.Logf("the write committed %v after A fell asleep", time.Since(start).Round(time.Millisecond))
	slept := clk.resume()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	it, err := a.Get(ctx, "k")
	cancel()
	if err == nil && string(it.Value) != "v2" {
		t.Fatalf("after a suspend of %v, with the network still down, A read %s; the write of v2 had committed", slept, fmtItem(it))
	}
	pc.Resume()
	wait.For(t, testTimeout, "A reads v2 once its network is back", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		it, err := a.Get(ctx, "k")
		return err == nil && string(it.Value) == "v2"
	})
}

// TestSuspendPoisonsFetchInFlight: a read sent before a suspend whose
// answer comes after it carries a deadline that does not count the
// suspend either: once a suspend has been found, it is not cached. A's
// clock holds the read where its answer has arrived, while the machine
// sleeps and another read finds the suspend.
func TestSuspendPoisonsFetchInFlight(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	stall := newStallClock("(*Client).fetch")
	clk := newSuspendClock(stall)
	a := dial(t, srv, client.Config{Clock: clk})
	b := dial(t, srv, client.Config{})
	mustPut(t, b, "k", "v1")
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	stall.stallWith(func() {
		once.Do(func() {
			close(arrived)
			<-release
		})
	})
	got := make(chan error, 1)
	go func() {
		_, err := a.Get(context.Background(), "k")
		got <- err
	}()
	wait.Chan(t, arrived, testTimeout, "the answer to A's read (has the point the test holds moved?)")
	stall.stallWith(nil)
	clk.sleep(time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if it, err := a.Get(ctx, "other"); err != nil || it.Cached {
		close(release)
		t.Fatalf("the read that finds the suspend: %s, %v", fmtItem(it), err)
	}
	close(release)
	if err := wait.Chan(t, got, testTimeout, "A's read"); err != nil {
		t.Fatalf("A's read: %v", err)
	}
	if _, _, ok := client.CachedEntry(a, "k"); ok {
		t.Fatal("the answer of a read sent before the suspend was cached after it was found")
	}
}

// TestSuspendLosesWriteLeases: a suspend longer than the slack loses the
// write leases too: their deadlines do not count it, and the server may
// have granted the key to another client meanwhile. The lease is no longer
// Valid, its Done channel closes, it is reported lost, and it is
// relinquished, so that another client acquires the key at once rather
// than after the term. A suspend within the slack keeps it.
func TestSuspendLosesWriteLeases(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	clk := newSuspendClock(nil)
	ev := newEvents()
	a := dial(t, srv, client.Config{Clock: clk, OnEvent: ev.on})
	b := dial(t, srv, client.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	wl, err := a.AcquireWriteLease(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	clk.sleep(server.DefaultEpsilon / 20) // half the slack
	if !wl.Valid() {
		t.Fatal("after a suspend within the slack, the write lease is not valid")
	}
	clk.sleep(time.Hour)
	if wl.Valid() {
		t.Fatal("after a suspend of an hour, the write lease is still valid")
	}
	select {
	case <-wl.Done():
	default:
		t.Fatal("after a suspend of an hour, the write lease's Done is open")
	}
	ev.wait(t, client.EventWriteLeaseLost, testTimeout, func(e client.Event) bool { return hasKey(e, "w") })
	// A relinquished it: B need not wait out the term of a minute.
	wb, err := b.AcquireWriteLease(ctx, "w")
	if err != nil {
		t.Fatalf("B could not acquire the lease A lost to its suspend within %v: %v", testTimeout, err)
	}
	if wb.Token() <= wl.Token() {
		t.Fatalf("B's token %d is not after A's %d", wb.Token(), wl.Token())
	}
	if _, err := wl.Put(ctx, []byte("late")); err == nil {
		t.Fatal("a write under the lease lost to the suspend succeeded")
	}
}
