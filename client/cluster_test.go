package client_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/server"
	"github.com/quic-go/quic-go"
)

// TestClusterFollowsTheLeader: a client given every node of a three-node
// cluster finds the leader, whichever node it tries first; when the leader
// stops, the client keeps serving its cached entries while their leases
// last, reconnects to the new leader by itself, and its writes go on there.
func TestClusterFollowsTheLeader(t *testing.T) {
	leaktest.Check(t)
	const term = 2 * time.Second
	cl := testkit.NewCluster(t, 3, server.Config{LeaseTerm: term})
	first := cl.Leader()
	// A client that knows only a follower is sent to the leader.
	var follower string
	for name := range cl.Nodes {
		if name != first {
			follower = name
		}
	}
	// Only a follower alone: the dial follows the leader it names.
	alone, err := client.Dial(stepCtx(t), cl.Addrs[follower], client.Config{CAFile: cl.CAFile, Logger: testkit.Discard()})
	if err != nil {
		t.Fatalf("dial of a follower alone: %v; want a session with the leader %s", err, cl.Addrs[first])
	}
	mustPut(t, alone, "alone", "v")
	alone.Close()
	ev := newEvents()
	c := dialAddr(t, cl.Addrs[follower]+","+cl.Endpoints(), cl.CAFile, client.Config{OnEvent: ev.on, MaxReconnectDelay: 100 * time.Millisecond})
	v1 := mustPut(t, c, "k", "v1")
	if it := mustGet(t, c, "k"); !it.Cached || it.Version != v1 {
		t.Fatalf("read after the write: %s", fmtItem(it))
	}

	cl.Stop(first)
	stopped := time.Now()
	ev.wait(t, client.EventDisconnected, testTimeout, nil)
	// The cached entry is served while its lease lasts.
	if it, err := c.Get(stepCtx(t), "k"); err != nil && time.Since(stopped) < term/2 {
		t.Errorf("cached read right after the leader stopped: %v", err)
	} else if err == nil && string(it.Value) != "v1" {
		t.Errorf("cached read right after the leader stopped: %s", fmtItem(it))
	}
	// A write made while the client has no leader waits for it to find
	// the new one, and commits there.
	v2 := mustPutWithin(t, c, "k", "v2", 20*time.Second+3*term)
	second := cl.Leader()
	if second == first {
		t.Fatalf("%s still leads after it stopped", first)
	}
	ev.wait(t, client.EventReconnected, testTimeout, nil)
	if v2 <= v1 {
		t.Errorf("version %d after %d", v2, v1)
	}
	if it := mustGet(t, c, "k"); string(it.Value) != "v2" {
		t.Errorf("read on the new leader: %s", fmtItem(it))
	}
	t.Logf("%s led, then %s; reconnected and wrote %v after the stop", first, second, time.Since(stopped))
}

// TestDialWaitsForALeader: while no node of the cluster leads (two of
// three are down), Dial with every endpoint keeps trying, within its
// context, and opens a session once a node leads again.
func TestDialWaitsForALeader(t *testing.T) {
	leaktest.Check(t)
	cl := testkit.NewCluster(t, 3, server.Config{LeaseTerm: time.Second})
	first := cl.Leader()
	var down []string
	for name := range cl.Nodes {
		if name != first {
			cl.Stop(name)
			down = append(down, name)
		}
	}
	// The leader alone has no quorum: it steps down, and nobody leads.
	wait.For(t, testTimeout, first+" to stop leading", func() bool { return !cl.Nodes[first].Leads() })
	type result struct {
		c   *client.Client
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := client.Dial(ctx, cl.Endpoints(), client.Config{CAFile: cl.CAFile, Logger: testkit.Discard()})
		done <- result{c, err}
	}()
	time.Sleep(300 * time.Millisecond) // a few rounds of the dial, with nobody leading
	select {
	case r := <-done:
		t.Fatalf("Dial returned while no node led: %v", r.err)
	default:
	}
	cl.Restart(down[0])
	r := <-done
	if r.err != nil {
		t.Fatalf("Dial after a node came back: %v", r.err)
	}
	defer r.c.Close()
	mustPutWithin(t, r.c, "k", "v", 3*time.Second+testTimeout)
}

// TestDialDoesNotWaitForASilentEndpoint: an endpoint that completes the
// QUIC handshake but never answers the hello, as a node stopped right
// after it, does not hold up Dial once another endpoint took the session:
// the losing dials end at once instead of at their timeout (2 s).
func TestDialDoesNotWaitForASilentEndpoint(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Second})
	tlsConf, err := server.LoadOrCreateTLS(srv.Dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(tlsConf, nil)
	if err != nil {
		t.Fatal(err)
	}
	silent, accepted := make(chan *quic.Conn, 8), make(chan struct{}) // room for every attempt
	go func() {
		defer close(accepted)
		for {
			qc, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			silent <- qc // holds the connection open, and answers nothing
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-accepted
		for len(silent) > 0 {
			(<-silent).CloseWithError(0, "")
		}
		tr.Close()
		udp.Close()
	})
	// The two handshakes race; an attempt counts once the silent endpoint
	// has taken its connection, which it almost always has by the time the
	// live one answers.
	for attempt := 1; ; attempt++ {
		before := len(silent)
		start := time.Now()
		c, err := client.Dial(stepCtx(t), ln.Addr().String()+","+srv.Addr().String(), client.Config{CAFile: srv.CA(), Logger: testkit.Discard()})
		took := time.Since(start)
		if err != nil {
			t.Fatal(err)
		}
		mustPut(t, c, "k", "v")
		c.Close()
		if len(silent) > before {
			if took >= time.Second {
				t.Errorf("Dial took %v with a silent endpoint beside a live one; the silent one held it up", took)
			}
			return
		}
		if attempt == 5 {
			t.Fatalf("the silent endpoint took no connection in %d dials", attempt)
		}
	}
}
