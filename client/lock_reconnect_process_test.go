//go:build linux

package client_test

// A waiting acquisition keeps its place in line across a reconnect of its
// client (DESIGN §5.1), on a real leased process.

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/netfault"
	"github.com/leased/leased/internal/testkit/clitest"
)

// TestE2EWaiterKeepsItsPlaceAcrossAReconnect: b waits for a's lock, then
// c; b's packets are cut until it gives its connection up and comes back
// on a new one; when a releases, b gets the lock, not c.
func TestE2EWaiterKeepsItsPlaceAcrossAReconnect(t *testing.T) {
	srv := clitest.StartServer(t, linBinaries(t), t.TempDir(), t.TempDir(), "--lease-term", "5s")
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc := netfault.Wrap(udp, 1)
	defer pc.Close()
	ev := newEvents()
	named := func(name string) client.Config {
		cfg := srv.ClientConfig()
		cfg.Name = name
		return cfg
	}
	bcfg := named("b")
	bcfg.PacketConn, bcfg.OnEvent, bcfg.MaxReconnectDelay = pc, ev.on, 100*time.Millisecond
	a := dialAddr(t, srv.Addr, srv.CA, named("a"))
	b := dialAddr(t, srv.Addr, srv.CA, bcfg)
	c := dialAddr(t, srv.Addr, srv.CA, named("c"))
	ctx, cancel := context.WithTimeout(context.Background(), 4*testTimeout)
	defer cancel()

	held, err := a.AcquireWriteLease(ctx, "lock", client.AcquireWait())
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		who string
		wl  *client.WriteLease
		err error
	}
	grants := make(chan grant, 2)
	wait := func(who string, cl *client.Client) {
		wl, err := cl.AcquireWriteLease(ctx, "lock", client.AcquireWait())
		grants <- grant{who, wl, err}
	}
	go wait("b", b)
	time.Sleep(200 * time.Millisecond) // b is in line before c
	go wait("c", c)
	time.Sleep(200 * time.Millisecond)

	first, _ := b.Connection()
	pc.Partition(true, true)
	ev.wait(t, client.EventDisconnected, testTimeout, nil)
	pc.Partition(false, false)
	ev.wait(t, client.EventReconnected, testTimeout, nil)
	if s, _ := b.Connection(); s.ID == first.ID {
		t.Fatalf("still session %d after the reconnection", s.ID)
	}
	time.Sleep(200 * time.Millisecond) // b asks again on its new session
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	g := <-grants
	if g.err != nil || g.who != "b" {
		t.Fatalf("first grant after the release: %s (%v), want b, which was in line first", g.who, g.err)
	}
	if err := g.wl.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if g := <-grants; g.err != nil || g.who != "c" {
		t.Fatalf("second grant: %s (%v), want c", g.who, g.err)
	} else if err := g.wl.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
