package client_test

// Linearizability of a cluster whose leader inherits writes (DESIGN §13,
// "Inherited keys" and "Writes of unknown outcome"), in the harness of
// lincheck_cluster_test.go. The leader is cut off from its peers while the
// workers write, so that writes it appended may be committed by the next
// leader, and its own commits fail with an unknown outcome; then, inside
// the old leader's horizon, the next leader is replaced by a node that
// knows of those writes only from its database:
//
//   - cut-restart: every node but the cut-off one is killed and restarted
//     as soon as one of them leads, and one of them leads again;
//   - cut-snapshot: a follower is killed first, the leader is cut off, the
//     next leader commits and snapshots (small snapshot thresholds) while
//     the follower is down, and the follower, caught up by a snapshot,
//     takes the lead (Admin.TransferLead).
//
// TestLinearizableHolds checks a history of each; TestLinearizableHoldsNegative
// runs cut-restart with --unsafe-skip-horizon-wait, which holds nothing,
// and must find a violation; TestLinearizableHoldsLong, with
// -lincheck.holds.duration, runs both in turn:
//
//	go test ./client -run '^TestLinearizableHoldsLong$' -lincheck.holds.duration=30m -timeout 0 -v

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/proccluster"
)

var linHoldsDuration = flag.Duration("lincheck.holds.duration", 0, "TestLinearizableHoldsLong: how long to run cluster histories of the inherited-write faults (0: skip)")

const (
	faultCutRestart  clusterFault = "cut-restart"
	faultCutSnapshot clusterFault = "cut-snapshot"
	// holdsTerm is long enough that the restarted nodes, or the node that
	// caught up, lead again while the cut-off leader's horizon (a term,
	// ε and a step after its last grant) still lasts.
	holdsTerm = 4 * time.Second
)

// holdFaults are the faults of this file, which runClusterNemesis injects
// through its hook for fault kinds it does not know.
var holdFaults = map[clusterFault]func(t *testing.T, cs clusterScenario, rng *rand.Rand, c *proccluster.Cluster, faults map[string]int, wait func(time.Duration) bool){
	faultCutRestart:  cutRestart,
	faultCutSnapshot: cutSnapshot,
}

// holdScenarios are the positive scenarios of this file.
func holdScenarios() []clusterScenario {
	base := clusterScenario{
		scenario: scenario{clients: 5, keys: 3, holders: 3, term: holdsTerm, eps: clusterEpsilon, opTimeout: 3 * holdsTerm},
		nodes:    3,
		history:  2 * holdsTerm,
	}
	restart := base
	restart.name, restart.nemesis = string(faultCutRestart), []clusterFault{faultCutRestart}
	snapshot := base
	snapshot.name, snapshot.nemesis, snapshot.nodes = string(faultCutSnapshot), []clusterFault{faultCutSnapshot}, 5
	snapshot.flags = []string{"--snapshot-threshold", "2", "--snapshot-trailing-logs", "1",
		"--snapshot-interval", "50ms", "--wal-segment-size", "65536"}
	return []clusterScenario{restart, snapshot}
}

// cutRestart cuts the leader off, waits for another node to lead, kills
// every node but the cut-off one and restarts them, and heals the cut-off
// one a term later.
func cutRestart(t *testing.T, cs clusterScenario, rng *rand.Rand, c *proccluster.Cluster, faults map[string]int, wait func(time.Duration) bool) {
	lead := c.Leader()
	others := c.Others(lead.Name)
	faults["leader-cuts"]++
	cut := time.Now()
	c.CutOff(lead.Name)
	c.Leader(others...)
	for _, nd := range others {
		c.Kill(nd.Name)
	}
	for _, nd := range others {
		faults["follower-restarts"]++
		c.Restart(nd.Name)
	}
	noteHolds(t, c.Leader(others...), time.Since(cut))
	wait(cs.term)
	c.Heal(lead.Name)
}

// cutSnapshot kills a follower, writes past it (fill), cuts the leader
// off, waits for another node to lead and snapshot, restarts the follower,
// which that snapshot catches up, and hands it the lead; it heals the
// cut-off leader a term later.
func cutSnapshot(t *testing.T, cs clusterScenario, rng *rand.Rand, c *proccluster.Cluster, faults map[string]int, wait func(time.Duration) bool) {
	lead := c.Leader()
	others := c.Others(lead.Name)
	lag := others[rng.IntN(len(others))]
	c.Kill(lag.Name)
	fill(t, c, lead)
	faults["leader-cuts"]++
	cut := time.Now()
	c.CutOff(lead.Name)
	next := c.Leader(c.Others(lead.Name, lag.Name)...)
	// Its first entries, the leader and the holds, make it snapshot and
	// drop the log before them (holdScenarios' flags).
	wait(300 * time.Millisecond)
	faults["follower-restarts"]++
	c.Restart(lag.Name)
	if err := transferLead(c, next, lag.Name); err != nil {
		faults["transfers-refused"]++
		t.Logf("transfer %s → %s: %v", next.Name, lag.Name, err)
	} else {
		faults["transfers"]++
		noteHolds(t, c.Leader(lag), time.Since(cut))
	}
	wait(cs.term)
	c.Heal(lead.Name)
}

// noteHolds logs whether lead, which took the lead after its node
// restarted or caught up, restored a snapshot and held keys for an
// earlier leader, as its log says; after is how long after the cut it led.
func noteHolds(t *testing.T, lead *proccluster.Node, after time.Duration) {
	log := lead.Proc.Stderr.String()
	held := strings.Contains(log, "holding reads of keys an earlier leader was writing")
	snap := strings.Contains(log, "restored a snapshot")
	t.Logf("%s leads %v after the cut; restored a snapshot: %v; holds keys for an earlier leader: %v", lead.Name, after.Round(time.Millisecond), snap, held)
}

// fill writes, through lead, entries of a key that no history reads,
// enough to fill a few segments of the log (holdScenarios' flags), which
// the nodes drop once they snapshot: a node that lags behind them must be
// sent a snapshot.
func fill(t *testing.T, c *proccluster.Cluster, lead *proccluster.Node) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := c.ClientConfig()
	cfg.MemberSyncInterval = -1
	cl, err := client.Dial(ctx, lead.Addr, cfg)
	if err != nil {
		t.Logf("fill: %v", err)
		return
	}
	defer cl.Close()
	value := make([]byte, 8<<10)
	for i := range 32 {
		if _, err := cl.Put(ctx, "filler", value); err != nil {
			t.Logf("fill %d: %v", i, err)
			return
		}
	}
}

// TestLinearizableHolds is the short form: a history of each scenario of
// this file, which must be linearizable.
func TestLinearizableHolds(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and real time")
	}
	leaktest.Check(t)
	css := holdScenarios()
	names := make([]string, len(css))
	for i, cs := range css {
		names[i] = cs.name
	}
	checkHistories(t, names, firstSeed(t), func(t *testing.T, i int, seed uint64) historyResult {
		return runClusterHistory(t, css[i], seed, *linOut)
	})
}

// TestLinearizableHoldsNegative runs cut-restart on nodes that wait for
// no earlier leader's leases and hold no key (--unsafe-skip-horizon-wait):
// the checker must find stale reads.
func TestLinearizableHoldsNegative(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and real time")
	}
	cs := holdScenarios()[0]
	cs.name, cs.unsafe = "cut-restart-unsafe", true
	findViolation(t, cs, firstSeed(t))
}

// TestLinearizableHoldsLong is the long form: with -lincheck.holds.duration
// set, it runs histories of the scenarios of this file in turn until the
// time is up, and prints what it checked.
func TestLinearizableHoldsLong(t *testing.T) {
	if *linHoldsDuration <= 0 {
		t.Skip("long form: set -lincheck.holds.duration")
	}
	runLongForm(t, holdScenarios(), func(cs clusterScenario) string { return cs.name }, *linHoldsDuration,
		func(t *testing.T, cs clusterScenario, seed uint64) historyResult {
			res := runClusterHistory(t, cs, seed, *linOut)
			if res.err == nil && res.verdict == porcupine.Ok && res.faults["leader-cuts"] == 0 {
				res.err = fmt.Errorf("scenario %s: no fault injected", cs.name)
			}
			return res
		})
}
