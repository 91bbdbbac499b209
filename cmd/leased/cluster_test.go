package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/proccluster"
	"github.com/leased/leased/internal/testkit/wait"
)

// TestClusterOfThreeProcesses: three leased processes started with
// --name, --peer-listen, --initial-cluster and one --ca-dir form a cluster.
// Only the leader takes a session; the others refuse it and name the
// leader. When the leader is killed, another node leads and serves what the
// old one committed. The killed node restarts and catches up, and no node
// logs an ERROR for any of it.
func TestClusterOfThreeProcesses(t *testing.T) {
	t.Parallel()
	cl := proccluster.Start(t, proccluster.Config{Bins: bins, Direct: true, Flags: []string{"--lease-term", "1s"}})
	nodes := cl.Nodes
	cfg := cl.ClientConfig()
	// leader waits until a client given any one running node reaches the
	// same node, which leads: a follower names it and the client follows.
	leader := func(running []*proccluster.Node) (*proccluster.Node, *client.Client) {
		t.Helper()
		var lead *proccluster.Node
		var c *client.Client
		wait.For(t, 20*time.Second, "one node to lead and the others to lead the client to it", func() bool {
			lead, c = nil, nil
			reached := map[string]bool{}
			var sessions []*client.Client
			defer func() {
				for _, s := range sessions {
					if s != c {
						s.Close()
					}
				}
			}()
			for _, n := range running {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				c1, err := client.Dial(ctx, n.Addr, cfg)
				cancel()
				if err != nil {
					return false
				}
				sessions = append(sessions, c1)
				info, ok := c1.Connection()
				if !ok {
					return false
				}
				reached[info.Addr] = true
				if info.Addr == n.Addr {
					lead, c = n, c1
				}
			}
			if len(reached) != 1 || lead == nil {
				c = nil
				return false // not every follower knows the leader yet
			}
			return true
		})
		t.Cleanup(func() { c.Close() })
		return lead, c
	}
	first, c := leader(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.Put(ctx, "k", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// A client that stays connected to the leader through the crash.
	lost, back := make(chan time.Time, 1), make(chan time.Time, 1)
	lcfg := cfg
	lcfg.OnEvent = func(e client.Event) {
		ch := map[client.EventKind]chan time.Time{client.EventDisconnected: lost, client.EventReconnected: back}[e.Kind]
		if ch != nil {
			select {
			case ch <- time.Now():
			default:
			}
		}
	}
	lived, err := client.Dial(ctx, cl.Endpoints(), lcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lived.Close()
	cl.Kill(first.Name)
	killed := time.Now()
	// No connection close comes from a killed process: the client notices
	// the silence within its idle timeout.
	noticed := wait.Chan(t, lost, 10*time.Second, "the client to notice the killed leader")
	if d := noticed.Sub(killed); d > client.DefaultIdleTimeout+2*time.Second {
		t.Errorf("the client noticed the killed leader after %v, want within its idle timeout %v", d, client.DefaultIdleTimeout)
	}
	// Writes fail at once while it is disconnected; it reconnects to the
	// new leader by itself.
	wait.Chan(t, back, 20*time.Second, "the client to reconnect to the new leader")
	lctx, lcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer lcancel()
	if _, err := lived.Put(lctx, "lived", []byte("x")); err != nil {
		t.Errorf("the connected client's write after the failover: %v", err)
	}
	t.Logf("the client noticed the killed leader after %v; wrote on the new leader %v after the kill", noticed.Sub(killed), time.Since(killed))
	rest := cl.Others(first.Name)
	second, c2 := leader(rest)
	it, err := c2.Get(ctx, "k")
	if err != nil || string(it.Value) != "v1" || it.Version != v {
		t.Fatalf("after the leader %s was killed, %s reads %+v, %v", first.Name, second.Name, it, err)
	}
	if v2, err := c2.Put(ctx, "k", []byte("v2")); err != nil || v2 <= v {
		t.Fatalf("write on the new leader: %d, %v", v2, err)
	}
	// The killed node restarts and catches up as a follower.
	logs := map[string]string{first.Name + " before the kill": first.Proc.Stderr.String()}
	lst, err := nodeStatus(context.Background(), cl, second.Addr)
	if err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	cl.Restart(first.Name)
	wait.For(t, 30*time.Second, first.Name+" to catch up", func() bool {
		st, err := nodeStatus(context.Background(), cl, first.Addr)
		return err == nil && st.AppliedIndex >= lst.CommitIndex
	})
	t.Logf("%s restarted and caught up in %v", first.Name, time.Since(restarted))
	for _, n := range cl.Nodes {
		cl.Stop(n.Name)
		logs[n.Name] = n.Proc.Stderr.String()
	}
	// A peer killed, restarted and caught up, and the nodes stopped, are
	// routine: no ERROR, and each line one record in leased's format.
	for name, log := range logs {
		if bad := routineLogProblems(log); len(bad) > 0 {
			t.Errorf("%s's log:\n%s", name, strings.Join(bad, "\n"))
		}
	}
}
