package client_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/proccluster"
	"github.com/leased/leased/internal/testkit/wait"
)

// TestOneEndpointFollowsAndLearns runs five real leased processes. A
// client given the address of one follower alone reaches the leader (the
// follower names it), reads and writes there, and learns every member's
// client address from the cluster (Config.MemberSyncInterval). Then the
// follower it was given and the leader are both killed: the client knows
// no live address but those it learned, and through them it finds the
// new leader and goes on writing.
//
// Real processes and a real network: waits are bounded by deadlines, no
// lease time is slept through.
func TestOneEndpointFollowsAndLearns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts five leased processes")
	}
	cl := proccluster.Start(t, proccluster.Config{Bins: linBinaries(t), Nodes: 5, Direct: true, Flags: []string{"--lease-term", "1s"}})
	lead := cl.Leader()
	given := cl.Others(lead.Name)[0]

	cfg := cl.ClientConfig()
	cfg.MemberSyncInterval = 200 * time.Millisecond
	cfg.MaxReconnectDelay = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), proccluster.LeaderTimeout)
	c, err := client.Dial(ctx, given.Addr, cfg)
	cancel()
	if err != nil {
		t.Fatalf("dial of follower %s alone: %v; want a session with the leader %s", given.Name, err, lead.Name)
	}
	defer c.Close()
	v1 := mustPut(t, c, "k", "v1")
	if it := mustGet(t, c, "k"); string(it.Value) != "v1" || it.Version != v1 {
		t.Fatalf("read after the write: %s", fmtItem(it))
	}

	// Every node serves the member list with each member's client address.
	wait.For(t, proccluster.LeaderTimeout, "every member's client address in the leader's member list", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		adm, err := client.DialAdmin(ctx, lead.Addr, cl.ClientConfig())
		if err != nil {
			return false
		}
		defer adm.Close()
		ms, err := adm.Members(ctx)
		if err != nil || len(ms) != len(cl.Nodes) {
			return false
		}
		for _, m := range ms {
			if m.ClientAddr != cl.Node(m.Name).Addr {
				return false
			}
		}
		return true
	})

	// The client learns them: after a sync it can reach the survivors.
	survivors := cl.Others(lead.Name, given.Name)
	wait.For(t, proccluster.LeaderTimeout, "the client to learn the members", func() bool {
		learned := client.LearnedAddrs(c)
		for _, nd := range survivors {
			if !slices.Contains(learned, nd.Addr) {
				return false
			}
		}
		return true
	})

	cl.Kill(given.Name)
	cl.Kill(lead.Name)
	killed := time.Now()
	v2 := mustPutWithin(t, c, "k", "v2", proccluster.LeaderTimeout+10*time.Second)
	next := cl.Leader(survivors...)
	if it := mustGet(t, c, "k"); string(it.Value) != "v2" || it.Version != v2 || v2 <= v1 {
		t.Fatalf("read on the new leader: %s, after versions %d and %d", fmtItem(it), v1, v2)
	}
	t.Logf("given %s alone; %s led, then %s; wrote again %v after both were killed", given.Name, lead.Name, next.Name, time.Since(killed).Round(time.Millisecond))
}
