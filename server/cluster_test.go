package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// stepTimeout bounds one step against the cluster that waits for no lease.
const stepTimeout = 10 * time.Second

// hello opens a session with the node at addr, or returns the error its
// hello got.
func hello(t *testing.T, cl *testkit.Cluster, addr string) (*protoclient.Client, *protocol.Error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	c, err := protoclient.Dial(ctx, addr, protoclient.Options{CAFile: cl.CAFile, NoHello: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Send(&protocol.Hello{Version: protocol.Version}); err != nil {
		t.Fatal(err)
	}
	m, err := c.Recv(ctx)
	if err != nil {
		t.Fatalf("hello to %s: %v", addr, err)
	}
	if e, ok := m.(*protocol.Error); ok {
		return nil, e
	}
	if _, ok := m.(*protocol.HelloReply); !ok {
		t.Fatalf("hello to %s answered with %s", addr, m.Type())
	}
	return c, nil
}

func call(t *testing.T, c *protoclient.Client, m protocol.Message, within time.Duration) protocol.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	r, err := c.Call(ctx, m)
	if err != nil {
		t.Fatalf("%s: %v", m.Type(), err)
	}
	return r
}

// TestClusterServesOnlyOnTheLeader: of three nodes, only the leader
// serves; the others answer a hello with CodeNotLeader and the leader's
// client address. When the leader stops, another node leads, holds its
// first write until the old leader's leases can have run out, and serves
// the values the old one committed.
func TestClusterServesOnlyOnTheLeader(t *testing.T) {
	leaktest.Check(t)
	const term = time.Second
	cl := testkit.NewCluster(t, 3, server.Config{LeaseTerm: term, Epsilon: 100 * time.Millisecond})
	first := cl.Leader()
	leaderAddr := cl.Addrs[first]
	for n := range cl.Nodes {
		if n == first {
			continue
		}
		// A follower names the leader once it has applied the leader's
		// record.
		var e *protocol.Error
		wait.For(t, stepTimeout, "follower "+n+" to name the leader", func() bool {
			var c *protoclient.Client
			c, e = hello(t, cl, cl.Addrs[n])
			return c == nil && e.Leader != ""
		})
		if e.Code != protocol.CodeNotLeader || e.Leader != leaderAddr {
			t.Errorf("hello to follower %s: %+v, want CodeNotLeader naming %s", n, e, leaderAddr)
		}
	}
	c, e := hello(t, cl, leaderAddr)
	if e != nil {
		t.Fatalf("hello to the leader %s: %+v", first, e)
	}
	w1, ok := call(t, c, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v1")}, stepTimeout).(*protocol.WriteReply)
	if !ok {
		t.Fatal("put on the leader failed")
	}
	if g, ok := call(t, c, &protocol.Get{Key: []byte("k")}, stepTimeout).(*protocol.GetReply); !ok || g.Term != term {
		t.Fatalf("get on the leader: %+v", g)
	}
	leaseFrom := time.Now()

	cl.Stop(first)
	second := cl.Leader()
	c2, e := hello(t, cl, cl.Addrs[second])
	if e != nil {
		t.Fatalf("hello to the new leader %s: %+v", second, e)
	}
	if g, ok := call(t, c2, &protocol.Get{Key: []byte("k")}, stepTimeout).(*protocol.GetReply); !ok || string(g.Value) != "v1" || g.Version != w1.Version {
		t.Fatalf("get on the new leader: %+v", g)
	}
	w2, ok := call(t, c2, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v2")}, stepTimeout+2*term).(*protocol.WriteReply)
	if !ok {
		t.Fatal("put on the new leader failed")
	}
	if since := time.Since(leaseFrom); since < term {
		t.Errorf("the new leader wrote %v after the old leader's lease was granted, within its term %v", since, term)
	}
	if w2.Version <= w1.Version {
		t.Errorf("version %d after %d", w2.Version, w1.Version)
	}
	t.Logf("%s led, then %s; the first write on %s committed %v after the last lease on %s", first, second, second, time.Since(leaseFrom), first)
}

// TestLeadLostAnswersEveryWrite: when the leader loses the lead, every
// write its sessions had waiting gets an answer, and the bytes they held
// against MaxTotalInflightBytes return, even a write that becomes ready
// only as another session ends: the core of the lost term outlives its
// sessions. Session b holds a read lease on k and does not answer the
// invalidation, a's write waits for it, and b's own write waits behind
// a's; when the lead moves, a's session ends first, and b's write is
// ready at once.
func TestLeadLostAnswersEveryWrite(t *testing.T) {
	leaktest.Check(t)
	cl := testkit.NewCluster(t, 3, server.Config{LeaseTerm: 5 * time.Second, Epsilon: 100 * time.Millisecond,
		Cluster: testkit.RelaxedRaft()})
	first := cl.Leader()
	srv := cl.Nodes[first]
	a, e := hello(t, cl, cl.Addrs[first])
	if e != nil {
		t.Fatalf("hello a: %+v", e)
	}
	b, e := hello(t, cl, cl.Addrs[first])
	if e != nil {
		t.Fatalf("hello b: %+v", e)
	}
	if g, ok := call(t, b, &protocol.Get{Key: []byte("k")}, stepTimeout).(*protocol.GetReply); !ok || g.Term == 0 {
		t.Fatalf("b's read got no lease: %+v", g)
	}
	if err := a.Send(&protocol.Write{ID: 1, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("from a")}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, stepTimeout, "a's write to wait for b", func() bool {
		st := srv.Stats()
		return st.WritesWaiting == 1 && st.InvalidationsSent == 1
	})
	if err := b.Send(&protocol.Write{ID: 2, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("from b")}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, stepTimeout, "b's write to wait behind a's", func() bool { return srv.Stats().WritesWaiting == 2 })
	if got := srv.Stats().InflightBytes; got == 0 {
		t.Fatal("no bytes counted for the waiting writes")
	}

	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if err := srv.TransferLead(ctx, ""); err != nil {
		t.Fatal(err)
	}
	wait.For(t, stepTimeout, "the old leader to hold no bytes of waiting writes", func() bool {
		return srv.Stats().InflightBytes == 0
	})
	if st := srv.Stats(); st.WritesWaiting != 0 {
		t.Errorf("%d writes still waiting on the old leader", st.WritesWaiting)
	}
}
