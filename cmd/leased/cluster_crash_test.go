package main

// TestCrashCluster: three real leased processes form a cluster; writers
// using the real client library with the endpoint list work while random
// nodes, the leader most often, are SIGKILLed and restarted on the same data
// folder and ports. It checks what TestCrashKill checks, across failovers,
// and at the end that every node holds the same state.
//
// Replay a failure with the seed it logs:
//
//	go test ./cmd/leased -run '^TestCrashCluster$' -count=1 -v -crashcluster.seed=N
//
// The seed fixes the writers' choices, the victims and the delays, not the
// interleaving, so a replay is likely, not certain, to fail the same way.
// `make crash-cluster-long` runs many more cycles.

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/proccluster"
	"github.com/leased/leased/internal/testkit/wait"
)

var (
	crashClusterCycles = flag.Int("crashcluster.cycles", 5, "TestCrashCluster: how many times to kill and restart a node")
	crashClusterSeed   = flag.Uint64("crashcluster.seed", 0, "TestCrashCluster: seed of the random choices (0: from the clock)")
)

const (
	// Short terms, so that the hold after a leader's death (the old
	// leader's horizon: a term, a horizon step and ε) is short.
	clusterCrashTerm    = 500 * time.Millisecond
	clusterCrashEpsilon = 50 * time.Millisecond
	// clusterCrashOpTimeout bounds one operation. After a leader is killed
	// a write waits for the clients to notice (crashIdleTimeout), an
	// election (raft's timeouts, seconds on a loaded machine) and the new
	// leader's hold.
	clusterCrashOpTimeout = 15 * time.Second
	// clusterCrashResumeTimeout bounds the wait, after a kill, for the
	// first write acknowledged after it: the same steps as an operation.
	clusterCrashResumeTimeout = 30 * time.Second
	// clusterLeaderKills is the percentage of kills that take the leader.
	clusterLeaderKills = 70
	// How long the cluster serves between kills, and how long a victim
	// stays down.
	minClusterServe = 300 * time.Millisecond
	maxClusterServe = 1500 * time.Millisecond
	maxClusterDown  = time.Second
)

// TestCrashCluster: writers put, delete, compare-and-swap, read, write
// under write leases and commit transactions through clients that know
// every node, while a killer SIGKILLs a node (the leader in
// clusterLeaderKills percent of the cycles) and restarts it on the same
// folder and ports. After every restart, and at the end, the checks of
// TestCrashKill hold (crashCheckAt and the model's checks as the writers
// go): no acknowledged write is lost or overtaken by an older one, versions
// and fencing tokens never go back, every transaction is applied whole or
// not at all. At the end every node is stopped gracefully, and leased
// inspect must find the same digest and the same revision in every node's
// folder.
func TestCrashCluster(t *testing.T) {
	t.Parallel()
	seed := *crashClusterSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -crashcluster.seed=%d); %d cycles", seed, seed, *crashClusterCycles)
	begin := time.Now()
	cl := proccluster.Start(t, proccluster.Config{Bins: bins, Direct: true,
		Flags: []string{"--lease-term", clusterCrashTerm.String(), "--epsilon", clusterCrashEpsilon.String()}})
	cl.Leader()
	killer := rand.New(rand.NewPCG(seed, 1<<32))

	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	m := newCrashModel(t, stop)
	writers := make([]*crashWriter, crashWriters)
	for i := range writers {
		var fillSeed [32]byte
		binary.LittleEndian.PutUint64(fillSeed[:], seed)
		fillSeed[8] = byte(i)
		w := &crashWriter{
			id:        i,
			m:         m,
			rng:       rand.New(rand.NewPCG(seed, uint64(i))),
			fill:      rand.NewChaCha8(fillSeed),
			seen:      make(map[string]uint64),
			opTimeout: clusterCrashOpTimeout,
		}
		cfg := cl.ClientConfig()
		cfg.Name = fmt.Sprintf("writer-%d", i)
		cfg.IdleTimeout = crashIdleTimeout
		cfg.MaxReconnectDelay = 100 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
		var err error
		w.c, err = client.Dial(ctx, cl.Endpoints(), cfg)
		cancel()
		if err != nil {
			t.Fatalf("writer %d: dial: %v", i, err)
		}
		t.Cleanup(func() { w.c.Close() })
		writers[i] = w
	}
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(func() { w.run(runCtx) })
	}
	stopWriters := func() {
		stop()
		wait.Chan(t, waitGroupDone(&wg), 2*clusterCrashOpTimeout, "the writers to stop")
	}
	defer stopWriters()

	var rev uint64
	var resumes []time.Duration // after each leader kill: the first acknowledged write
	leaderKills := 0
	for cycle := 1; cycle <= *crashClusterCycles && runCtx.Err() == nil; cycle++ {
		serve := minClusterServe + time.Duration(killer.Int64N(int64(maxClusterServe-minClusterServe)))
		select {
		case <-time.After(serve):
		case <-runCtx.Done():
		}
		lead := cl.Leader()
		victim := lead
		if killer.IntN(100) >= clusterLeaderKills {
			others := cl.Others(lead.Name)
			victim = others[killer.IntN(len(others))]
		}
		down := time.Duration(killer.Int64N(int64(maxClusterDown)))
		cl.Kill(victim.Name)
		killed := time.Now()
		// Counted once the victim is gone: an acknowledgement after this
		// is of a write that another leader committed, or, when a follower
		// was killed, that the leader committed without it.
		acked := m.nAcked.Load()
		m.killed()
		resumed := firstAckAfter(m, acked, killed, clusterCrashResumeTimeout)
		select {
		case <-time.After(down):
		case <-runCtx.Done():
		}
		cl.Restart(victim.Name)
		d, ok := wait.Recv(resumed, clusterCrashResumeTimeout+time.Second)
		if !ok || d < 0 {
			t.Fatalf("cycle %d: no write was acknowledged within %v of killing %s (leader: %v)", cycle, clusterCrashResumeTimeout, victim.Name, victim == lead)
		}
		role := "follower"
		if victim == lead {
			role = "leader"
			leaderKills++
			resumes = append(resumes, d)
		}
		now := cl.Leader()
		rev, _ = crashCheckAt(t, cl.ClientConfig(), cl.Endpoints(), m, rev, fmt.Sprintf("after restart %d", cycle), true)
		t.Logf("cycle %d: served %v, killed the %s %s, down %v; first write acknowledged %v after the kill; %s leads (it held writes for %s when it took over); revision %d; acked %d, unknown %d; transactions acked %d, unknown %d",
			cycle, serve.Round(time.Millisecond), role, victim.Name, down.Round(time.Millisecond), d.Round(time.Millisecond),
			now.Name, now.WritesHeldAtTakeover(), rev, m.nAcked.Load(), m.nUnknown.Load(), m.nTxnAcked.Load(), m.nTxnUnknown.Load())
	}

	stopWriters()
	rev, _ = crashCheckAt(t, cl.ClientConfig(), cl.Endpoints(), m, rev, "at the end", true)
	ins := stopSettled(t, cl)
	for i, in := range ins {
		nd := cl.Nodes[i]
		t.Logf("%s: applied index %d, revision %d, fencing token %d, %d keys, %d write leases, leader %s, digest %s",
			nd.Name, in.AppliedIndex, in.Revision, in.FencingToken, in.Keys, in.WriteLeases, in.Leader, in.Digest)
		if in.Revision < rev {
			t.Errorf("%s: revision %d, below the %d the cluster served", nd.Name, in.Revision, rev)
		}
		if in.Digest != ins[0].Digest || in.Revision != ins[0].Revision || in.FencingToken != ins[0].FencingToken {
			t.Errorf("%s holds another state than %s at the same applied index %d: revision %d, token %d, digest %s; %s: revision %d, token %d, digest %s",
				nd.Name, cl.Nodes[0].Name, in.AppliedIndex, in.Revision, in.FencingToken, in.Digest, cl.Nodes[0].Name, ins[0].Revision, ins[0].FencingToken, ins[0].Digest)
		}
	}
	slices.Sort(resumes)
	var median time.Duration
	if len(resumes) > 0 {
		median = resumes[len(resumes)/2]
	}
	t.Logf("crash cluster: seed %d, %d kill cycles (%d of the leader), %d acked writes, %d unknown, %d refused, %d lost, %d reads (%d cached), %d fencing tokens; first write after a leader kill: median %v of %v; revision %d, elapsed %v",
		seed, len(m.barriers), leaderKills, m.nAcked.Load(), m.nUnknown.Load(), m.nRefused.Load(), m.nLost.Load(), m.nReads.Load(), m.nCached.Load(), m.nTokens.Load(),
		median.Round(time.Millisecond), roundAll(resumes), rev, time.Since(begin).Round(time.Millisecond))
	logTxns(t, m)
}

// firstAckAfter returns a channel that receives how long after killed the
// model first counted more acknowledged writes than acked, or -1 if none
// came within timeout. Its goroutine ends by then.
func firstAckAfter(m *crashModel, acked int64, killed time.Time, timeout time.Duration) <-chan time.Duration {
	ch := make(chan time.Duration, 1)
	go func() {
		for m.nAcked.Load() == acked {
			if time.Since(killed) > timeout {
				ch <- -1
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		ch <- time.Since(killed)
	}()
	return ch
}

// clusterSettle is how long a cluster with no clients is left alone before
// it is stopped, so that every node has applied every committed entry: the
// write leases left behind run out (a term, and the entry that ends them),
// and followers learn the last commit within raft's commit timeout (50 ms).
// A node that stopped before that shows a lower applied index, and
// stopSettled tries again.
const clusterSettle = 2*clusterCrashTerm + 300*time.Millisecond

// stopSettled stops every node gracefully, the followers before the leader
// so that nothing is committed after a node stopped, and returns what
// leased inspect finds in each node's folder, in the order of cl.Nodes. If
// a node stopped before it applied the last committed entry (the applied
// indexes differ), it restarts the cluster and tries again, a few times.
func stopSettled(t *testing.T, cl *proccluster.Cluster) []inspection {
	t.Helper()
	const attempts = 3
	for attempt := 1; ; attempt++ {
		lead := cl.Leader()
		time.Sleep(clusterSettle) // a bounded wait for the cluster to go quiet; see clusterSettle
		followers := cl.Others(lead.Name)
		// Every follower gets SIGTERM before any has exited, so that none
		// sees another leave and calls an election.
		for _, nd := range followers {
			nd.Proc.Signal(t, syscall.SIGTERM)
		}
		for _, nd := range followers {
			if code := nd.Proc.Wait(t, clitest.ExitTimeout); code != 0 {
				t.Errorf("%s exited with %d after SIGTERM\nstderr: %s", nd.Name, code, nd.Proc.Stderr.String())
			}
		}
		cl.Stop(lead.Name)
		var ins []inspection
		var applied []uint64
		for _, nd := range cl.Nodes {
			in := runInspect(t, nd.Data)
			ins = append(ins, in)
			applied = append(applied, in.AppliedIndex)
		}
		if slices.Min(applied) == slices.Max(applied) {
			return ins
		}
		if attempt == attempts {
			t.Errorf("after %d attempts the nodes still stopped at different applied indexes %v: their digests cannot be compared", attempts, applied)
			return ins
		}
		t.Logf("the nodes stopped at applied indexes %v: restarting them to let them catch up", applied)
		for _, nd := range cl.Nodes {
			cl.Restart(nd.Name)
		}
	}
}

// waitGroupDone returns a channel closed when wg's goroutines have ended.
func waitGroupDone(wg *sync.WaitGroup) <-chan struct{} {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return done
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
