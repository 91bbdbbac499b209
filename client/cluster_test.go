package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/server"
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
	ev := newEvents()
	c := dialAddr(t, cl.Addrs[follower]+","+cl.Endpoints(), cl.CAFile, client.Config{OnEvent: ev.on, MaxReconnectDelay: 100 * time.Millisecond})
	v1 := mustPut(t, c, "k", "v1")
	if it := mustGet(t, c, "k"); !it.Cached || it.Version != v1 {
		t.Fatalf("read after the write: %s", fmtItem(it))
	}
	// Only a follower alone: the dial fails and names the leader.
	_, err := client.Dial(stepCtx(t), cl.Addrs[follower], client.Config{CAFile: cl.CAFile, Logger: discardLogger()})
	if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), cl.Addrs[first]) {
		t.Errorf("dial of a follower alone: %v; want ErrUnavailable naming the leader %s", err, cl.Addrs[first])
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
		c, err := client.Dial(ctx, cl.Endpoints(), client.Config{CAFile: cl.CAFile, Logger: discardLogger()})
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
