//go:build linux

package client_test

// Linearizability of a replicated cluster (DESIGN §13) under node faults:
// three real leased processes (internal/testkit/proccluster), five clients
// of this library that take the list of every node's address and follow
// the leader, and the workers and readers of lincheck_test.go. A nemesis
// kills, stops, cuts off or hands off the leader, restarts a follower, or
// puts a client's machine to sleep, and porcupine checks every history.
//
// The short form runs in `go test`: TestLinearizableCluster checks a
// history of every fault kind and two that mix them, and
// TestLinearizableClusterNegative shows that the checker finds the stale
// reads of a cluster whose new leader writes without waiting for the old
// leader's leases (leased --unsafe-skip-horizon-wait), and
// TestLinearizableClusterSuspendNegative those of clients that do not
// notice that their machines slept. The long form runs
// histories of every kind in turn for as long as -lincheck.cluster.duration
// says (make lincheck-cluster-long):
//
//	go test ./client -run '^TestLinearizableClusterLong$' -lincheck.cluster.duration=30m -timeout 0 -v
//
// -lincheck.scenario and -lincheck.seed replay a history's random choices,
// though not the timing of the processes, the network and the scheduler.

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/lincheck"
	"github.com/leased/leased/internal/testkit/proccluster"
)

var linClusterDuration = flag.Duration("lincheck.cluster.duration", 0, "TestLinearizableClusterLong: how long to run cluster histories of every fault kind (0: skip)")

// clusterFault names a fault the cluster nemesis injects.
type clusterFault string

const (
	faultKillLeader      clusterFault = "kill"             // the leader killed with SIGKILL, restarted a while later
	faultStopLeader      clusterFault = "stop"             // the leader stopped with SIGSTOP for longer than a term, then resumed
	faultCutLeader       clusterFault = "cut"              // the leader cut off from its peers, not from its clients, then healed
	faultRestartFollower clusterFault = "follower-restart" // a follower killed with SIGKILL and restarted
	faultTransfer        clusterFault = "transfer"         // the lead handed to a random follower (Admin.TransferLead)
	faultSuspendClient   clusterFault = "suspend"          // a client's machine asleep for about a term or two (suspendClient); no node fault
)

// clusterFaultKinds are the fault kinds of scenario "all".
var clusterFaultKinds = []clusterFault{faultKillLeader, faultStopLeader, faultCutLeader, faultRestartFollower, faultTransfer}

// clusterScenario describes one history of a cluster.
type clusterScenario struct {
	// scenario is what the workers and readers see; its faults (of the
	// clients' network) stay empty: the node faults are the point here.
	scenario
	// nodes is the size of the cluster.
	nodes int
	// nemesis are the fault kinds injected: one at a time, or, with
	// overlap, up to overlap node faults at once on distinct nodes.
	nemesis []clusterFault
	overlap int
	// unsafe starts the nodes with --unsafe-skip-horizon-wait: the
	// negative control of the failover rule. (blind, in scenario, is
	// that of the suspend check.)
	unsafe bool
	// history is how long the clients run operations; 0: -lincheck.history.
	history time.Duration
	// flags are more flags of every node.
	flags []string
}

// Cluster timing. The term is long enough that a client still holds
// leases of the old leader when a new one has been elected (raft's
// timeouts below, and the clients' idle timeout to notice a dead leader),
// so that the failover rule matters: without it, the negative control
// reads stale values. A write may wait an election and then the old
// leader's horizon, term + ε and a horizon step, so operations get longer
// than on one node.
const (
	clusterTerm        = time.Second
	clusterEpsilon     = 100 * time.Millisecond
	clusterOpTimeout   = 5 * time.Second
	clusterIdleTimeout = 500 * time.Millisecond
	// killTerm is the term of scenario kill and of the negative control.
	// Clients renew at 2/3 of a term, so when the leader dies their
	// leases have a third of a term to a term left. The new leader is
	// elected, and the quickest clients reach it, within about
	// 300–800 ms; with a term of a second the slow clients' leases have
	// mostly run out by then, and the negative control seldom finds a
	// stale read.
	killTerm = 2 * time.Second
)

// clusterRaftFlags relax raft's LAN timeouts, under which a leader steps
// down now and then on a loaded 2-core machine running the race detector;
// a failover still takes well under a term.
var clusterRaftFlags = []string{"--heartbeat-timeout", "300ms", "--election-timeout", "300ms", "--leader-lease-timeout", "150ms"}

// clusterScenarios are the positive scenarios: every history must be
// linearizable.
func clusterScenarios() []clusterScenario {
	base := clusterScenario{
		scenario: scenario{clients: 5, keys: 3, holders: 3, rare: 3, term: clusterTerm, eps: clusterEpsilon, opTimeout: clusterOpTimeout},
		nodes:    3,
	}
	with := func(name string, faults ...clusterFault) clusterScenario {
		s := base
		s.name, s.nemesis = name, faults
		return s
	}
	// kill is the negative control's scenario with the failover rule
	// kept: a term long enough that slow clients still hold the dead
	// leader's leases when the new leader could write, and a history long
	// enough for several kills.
	kill := with(string(faultKillLeader), faultKillLeader)
	kill.term, kill.history = killTerm, 5*time.Second
	// together runs every fault kind at once: five nodes, so that two
	// node faults at a time leave a quorum, and a new fault every quarter
	// to half a term while fewer than two are on, so that faults overlap.
	together := with("together", clusterFaultKinds...)
	together.nodes, together.overlap, together.history = 5, 2, 6*time.Second
	// suspend puts clients to sleep while the leader is killed now and
	// then, so that a sleeping client may wake to a new leader; "all"
	// mixes suspends in with the node faults.
	suspend := with(string(faultSuspendClient), faultSuspendClient, faultSuspendClient, faultKillLeader)
	return []clusterScenario{
		kill,
		with(string(faultStopLeader), faultStopLeader),
		with(string(faultCutLeader), faultCutLeader),
		with(string(faultRestartFollower), faultRestartFollower),
		with(string(faultTransfer), faultTransfer),
		suspend,
		with("all", append(clusterFaultKinds[:len(clusterFaultKinds):len(clusterFaultKinds)], faultSuspendClient)...),
		together,
	}
}

// TestLinearizableCluster is the short form: a history of every fault kind
// and two of "all", each of which must be linearizable; in the history of
// "together", at least one fault must begin while another lasts. They run
// linParallel at a time, each on a cluster of its own.
func TestLinearizableCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and real time")
	}
	leaktest.Check(t) // once every history has ended
	runs := map[string]int{"all": 2}
	first := firstSeed(t)
	var names []string
	var css []clusterScenario
	for _, cs := range clusterScenarios() {
		for i := range max(runs[cs.name], 1) {
			names = append(names, fmt.Sprintf("%s/%d", cs.name, i))
			css = append(css, cs)
		}
	}
	checkHistories(t, names, first, func(t *testing.T, i int, seed uint64) historyResult {
		cs := css[i]
		res := runClusterHistory(t, cs, seed, *linOut)
		// Scenario together is there to overlap faults: a history of it
		// in which none began while another lasted tested nothing more
		// than "all" does. A violation, if any, is reported instead.
		if cs.overlap > 1 && res.err == nil && res.verdict == porcupine.Ok && res.faults["overlapping"] == 0 {
			res.err = fmt.Errorf("scenario %s: no fault began while another lasted (faults: %s)", cs.name, formatCounts(res.faults))
		}
		return res
	})
}

// TestLinearizableClusterNegative runs the negative control: a cluster
// whose new leader writes at once, without waiting out the horizon of the
// old leader's leases. Killing the leader while the clients hold leases
// from it must then yield stale cached reads that the checker finds.
//
// Whether a kill yields one depends on timing: a client that is slow to
// notice the dead leader must hold a lease on a key that a faster client
// then writes through the new leader, and read it from its cache before
// the lease runs out. About two histories in three find one, so the test
// runs up to negativeAttempts histories and fails if none does: if the
// checker passes them all, it could not have caught the bug either.
func TestLinearizableClusterNegative(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and real time")
	}
	// Scenario kill, whose kills are each a chance for a client to read a
	// value that the new leader has overwritten while the client's lease
	// lasts, with more of them.
	cs := clusterScenarios()[0]
	cs.name, cs.unsafe, cs.history = "unsafe-skip-horizon-wait", true, 8*time.Second
	findViolation(t, cs, firstSeed(t))
}

// TestLinearizableClusterSuspendNegative runs the negative control of the
// suspend check on a cluster: clients whose machines sleep past their
// leases, and whose clocks hide the boot clock, so that none notices, must
// serve stale reads that the checker finds. They sleep for a term or two
// each time, which is mostly time enough for a write to wait out their
// leases and commit while their readers read on from their caches.
func TestLinearizableClusterSuspendNegative(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and real time")
	}
	i := slices.IndexFunc(clusterScenarios(), func(cs clusterScenario) bool { return cs.name == string(faultSuspendClient) })
	cs := clusterScenarios()[i]
	cs.name, cs.blind, cs.nemesis = "suspend-unnoticed", true, []clusterFault{faultSuspendClient}
	findViolation(t, cs, firstSeed(t))
}

// findViolation runs up to negativeAttempts histories of the negative
// control cs, from seed on, until the checker finds one not linearizable,
// and fails the test if it finds none: a checker that passes them all
// could not have caught the bug either.
func findViolation(t *testing.T, cs clusterScenario, seed uint64) {
	t.Helper()
	for i := range negativeAttempts {
		var res historyResult
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			leaktest.Check(t)
			// A violation is expected; its visualisation goes to the
			// test's folder, and the test checks that it was written.
			res = runClusterHistory(t, cs, seed+uint64(i), t.TempDir())
			if res.err != nil {
				t.Fatalf("seed %d: %v", seed+uint64(i), res.err)
			}
			if res.verdict == porcupine.Illegal && res.watch == nil {
				if st, err := os.Stat(res.viz); err != nil || st.Size() == 0 {
					t.Fatalf("visualisation %q: %v", res.viz, err)
				}
			}
		})
		if t.Failed() {
			return
		}
		if res.verdict == porcupine.Illegal {
			t.Logf("violation found as expected in history %d: %s; %s", i+1, res.summary, res.viz)
			return
		}
		t.Logf("history %d is %s; trying another", i+1, res.verdict)
	}
	t.Fatalf("negative control %s: %d histories without a violation", cs.name, negativeAttempts)
}

// negativeAttempts is how many histories a negative control of the
// cluster runs at most to find a violation (findViolation).
const negativeAttempts = 3

// TestLinearizableClusterLong is the long form: with
// -lincheck.cluster.duration set, it runs histories of every positive
// cluster scenario in turn until the time is up, and prints what it
// checked.
func TestLinearizableClusterLong(t *testing.T) {
	if *linClusterDuration <= 0 {
		t.Skip("long form: set -lincheck.cluster.duration")
	}
	runLongForm(t, clusterScenarios(), func(cs clusterScenario) string { return cs.name }, *linClusterDuration,
		func(t *testing.T, cs clusterScenario, seed uint64) historyResult {
			return runClusterHistory(t, cs, seed, *linOut)
		})
}

// runClusterHistory runs one history of cs on a cluster of its own and
// checks it. A visualisation of a violation goes to the folder out.
//
// It leaves the leak check to its caller, as runHistoryIn does.
func runClusterHistory(t *testing.T, cs clusterScenario, seed uint64, out string) historyResult {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 0xc1a57e7))
	// As on one node (runHistoryIn): listings are leased whenever no write
	// is pending under their directory.
	flags := append([]string{"--lease-term", cs.term.String(), "--epsilon", cs.eps.String(), "--ttl-min", holderTTL.String(),
		"--prefix-hot-writes=-1"}, clusterRaftFlags...)
	if cs.unsafe {
		flags = append(flags, "--unsafe-skip-horizon-wait")
	}
	flags = append(flags, cs.flags...)
	c := proccluster.Start(t, proccluster.Config{Bins: linBinaries(t), Nodes: cs.nodes, Flags: flags})
	c.Leader()
	hw := startHistoryWatch(t, c)

	res := historyResult{faults: make(map[string]int)}
	clients := make([]*linClient, cs.clients)
	suspends := slices.Contains(cs.nemesis, faultSuspendClient)
	for i := range clients {
		clients[i] = dialClusterClient(t, c, i, seed, suspends, cs.blind)
	}
	rec := lincheck.NewRecorder()
	d := cs.history
	if d == 0 {
		d = *linHistory
	}
	res.ttl = runClients(clients, cs.scenario, rec, seed, func() {
		if cs.overlap > 1 {
			runOverlappingNemesis(t, cs, rng, c, res.faults, time.Now().Add(d))
		} else {
			runClusterNemesis(t, cs, rng, c, clients, res.faults, time.Now().Add(d))
		}
	})
	served := serverSummary(clients)
	closeClients(clients, res.faults)
	checked := checkHistory(t, &res, rec, seed, out)
	res.watched, res.watch = hw.check(t, c, rec)
	if res.watch != nil {
		t.Logf("watch: %v", res.watch)
		res.verdict = porcupine.Illegal
	}
	t.Logf("scenario %s seed %d: %s: %s, checked in %v; listings: %s; faults: %s; TTL: %s; leader since its last start: %s; watch: %d events, %d writes known to have taken effect, up to revision %d",
		cs.name, seed, res.verdict, res.summary, checked, formatListings(res.listings), formatCounts(res.faults), formatTTL(res.ttl), served,
		res.watched.events, res.watched.writesOK, res.watched.revision)
	return res
}

// dialClusterClient returns client i of a history on cluster c, which
// takes every node's address. Its packets go through a netfault.Conn with
// no faults, which only counts them. With suspends, its clock is a
// suspendClock, blind or not (linClient.suspendable), for the nemesis to
// suspend. It is closed at the end of the history, and in the test's
// cleanup, before the cluster stops.
func dialClusterClient(t *testing.T, c *proccluster.Cluster, i int, seed uint64, suspends, blind bool) *linClient {
	t.Helper()
	lc, cfg := newLinClient(t, i, seed, c.ClientConfig())
	if suspends {
		cfg.Clock = lc.suspendable(nil, blind)
	}
	// A killed leader sends nothing more: the clients notice it by their
	// idle timeouts, and then follow the new leader. The timeouts differ,
	// so that some clients still serve the old leader's leases from their
	// caches while others already write through the new one.
	cfg.IdleTimeout = clusterIdleTimeout * time.Duration(1+i)
	// Under the race detector on a loaded machine, a young cluster's
	// leaders may step down for several seconds in a row (its raft
	// timeouts are short, clusterRaftFlags): the dial waits them out.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	cl, err := client.Dial(ctx, c.Endpoints(), cfg)
	cancel()
	if err != nil {
		lc.pc.Close()
		t.Fatalf("dial client %d: %v", i, err)
	}
	lc.kv, lc.c = cl, cl
	t.Cleanup(func() { lc.kv.Close(); lc.pc.Close() })
	return lc
}

// runClusterNemesis injects faults of cs's kinds into cluster c, or into
// one of its clients, until end, one at a time: it waits for a leader,
// injects a fault, and heals it (restart, SIGCONT, heal, wake) before the
// next. It counts what it injected in faults. It runs on the test's
// goroutine: the cluster's methods fail the test on errors.
func runClusterNemesis(t *testing.T, cs clusterScenario, rng *rand.Rand, c *proccluster.Cluster, clients []*linClient, faults map[string]int, end time.Time) {
	// wait sleeps d of real time, how long a fault lasts or the gap
	// between two, or until end. It reports false if end came first.
	wait := func(d time.Duration) bool {
		if left := time.Until(end); left < d {
			time.Sleep(max(left, 0))
			return false
		}
		time.Sleep(d)
		return true
	}
	// about returns a random duration between d and 2d.
	about := func(d time.Duration) time.Duration { return d + time.Duration(rng.Int64N(int64(d))) }
	if len(cs.nemesis) == 0 {
		wait(time.Until(end))
		return
	}
	for wait(about(150 * time.Millisecond)) {
		kind := cs.nemesis[rng.IntN(len(cs.nemesis))]
		lead := c.Leader()
		if time.Now().After(end) {
			return // finding the leader took the rest of the history
		}
		switch kind {
		case faultKillLeader:
			faults["leader-kills"]++
			c.Kill(lead.Name)
			wait(about(cs.term / 2))
			c.Restart(lead.Name)
		case faultStopLeader:
			// Longer than a term: the others elect a leader, which waits
			// out the stopped one's leases; on resume the old leader
			// still believes it leads, for a moment.
			faults["leader-stops"]++
			c.Pause(lead.Name)
			wait(about(cs.term))
			c.Cont(lead.Name)
		case faultCutLeader:
			// Its clients still reach it; it steps down when it misses a
			// quorum (--leader-lease-timeout), and they follow the new
			// leader.
			faults["leader-cuts"]++
			c.CutOff(lead.Name)
			wait(about(cs.term))
			c.Heal(lead.Name)
		case faultRestartFollower:
			faults["follower-restarts"]++
			f := c.Others(lead.Name)
			name := f[rng.IntN(len(f))].Name
			c.Kill(name)
			wait(about(cs.term / 2))
			c.Restart(name)
		case faultTransfer:
			f := c.Others(lead.Name)
			to := f[rng.IntN(len(f))].Name
			if err := transferLead(c, lead, to); err != nil {
				// The lead may have moved meanwhile, or raft may not
				// manage it in time: no fault then, and no failure.
				faults["transfers-refused"]++
				t.Logf("transfer %s → %s: %v", lead.Name, to, err)
			} else {
				faults["transfers"]++
			}
		case faultSuspendClient:
			// Longer than a term plus ε: the leader waits out the
			// sleeping client's leases and lets writes commit.
			faults["suspends"]++
			suspendClient(clients[rng.IntN(len(clients))], about(cs.term), wait)
		default:
			inject := holdFaults[kind] // lincheck_hold_test.go
			if inject == nil {
				t.Fatalf("unknown cluster fault %q", kind)
			}
			inject(t, cs, rng, c, faults, wait)
		}
	}
}

// runOverlappingNemesis injects the fault kinds of cs until end, a new one
// every quarter to half a term, on a node that no fault holds, while up to
// cs.overlap earlier ones last: a new leader is killed, stopped or cut off
// while the one before it is still down, a follower restarts meanwhile, or
// the lead is handed over while another node is down. Each fault ends on
// its own time; those still on at end are undone then. faults counts the
// faults, and in "overlapping" those that began while another lasted.
func runOverlappingNemesis(t *testing.T, cs clusterScenario, rng *rand.Rand, c *proccluster.Cluster, faults map[string]int, end time.Time) {
	type ongoing struct {
		node  string
		until time.Time
		undo  func()
	}
	var active []ongoing
	held := func(name string) bool {
		for _, a := range active {
			if a.node == name {
				return true
			}
		}
		return false
	}
	// settle undoes the faults due by now, or every fault if all.
	settle := func(now time.Time, all bool) {
		kept := active[:0]
		for _, a := range active {
			if all || !now.Before(a.until) {
				a.undo()
			} else {
				kept = append(kept, a)
			}
		}
		active = kept
	}
	defer func() { settle(time.Time{}, true) }()
	about := func(d time.Duration) time.Duration { return d + time.Duration(rng.Int64N(int64(d))) }
	// free returns a node other than lead that no fault holds and that
	// runs, or nil.
	free := func(lead *proccluster.Node) *proccluster.Node {
		var fs []*proccluster.Node
		for _, nd := range c.Others(lead.Name) {
			if !held(nd.Name) && nd.Running() {
				fs = append(fs, nd)
			}
		}
		if len(fs) == 0 {
			return nil
		}
		return fs[rng.IntN(len(fs))]
	}
	next := time.Now().Add(about(150 * time.Millisecond))
	for {
		now := time.Now()
		if !now.Before(end) {
			return
		}
		settle(now, false)
		wake := next
		for _, a := range active {
			if a.until.Before(wake) {
				wake = a.until
			}
		}
		if end.Before(wake) {
			wake = end
		}
		if now.Before(wake) {
			time.Sleep(wake.Sub(now))
			continue
		}
		if now.Before(next) {
			continue
		}
		next = now.Add(about(cs.term / 4))
		if len(active) >= cs.overlap {
			continue
		}
		kind := cs.nemesis[rng.IntN(len(cs.nemesis))]
		lead := c.Leader()
		now = time.Now()
		if !now.Before(end) {
			return
		}
		if held(lead.Name) {
			continue
		}
		// began counts a fault injected while another lasts; it is
		// called only once the fault is really on.
		others := len(active)
		began := func() {
			if others > 0 {
				faults["overlapping"]++
			}
		}
		// hold injects a node fault on node, counts it, and has it
		// undone after d.
		hold := func(counter, node string, inject, undo func(string), d time.Duration) {
			faults[counter]++
			inject(node)
			began()
			active = append(active, ongoing{node, now.Add(d), func() { undo(node) }})
		}
		switch kind {
		case faultKillLeader:
			hold("leader-kills", lead.Name, c.Kill, c.Restart, about(cs.term/2))
		case faultStopLeader:
			hold("leader-stops", lead.Name, c.Pause, c.Cont, about(cs.term))
		case faultCutLeader:
			hold("leader-cuts", lead.Name, c.CutOff, c.Heal, about(cs.term))
		case faultRestartFollower:
			f := free(lead)
			if f == nil {
				continue
			}
			hold("follower-restarts", f.Name, c.Kill, c.Restart, about(cs.term/2))
		case faultTransfer:
			f := free(lead)
			if f == nil {
				continue
			}
			if err := transferLead(c, lead, f.Name); err != nil {
				faults["transfers-refused"]++
				t.Logf("transfer %s → %s: %v", lead.Name, f.Name, err)
			} else {
				faults["transfers"]++
				began()
			}
		default:
			t.Fatalf("unknown cluster fault %q", kind)
		}
	}
}

// transferLead asks leader lead of c to hand the lead to node to, through
// an admin session, and waits for its answer, at most 10 s.
func transferLead(c *proccluster.Cluster, lead *proccluster.Node, to string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := client.DialAdmin(ctx, lead.Addr, c.ClientConfig())
	if err != nil {
		return err
	}
	defer a.Close()
	return a.TransferLead(ctx, to)
}
