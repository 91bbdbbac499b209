//go:build linux

package client_test

// Linearizability under faults, in the manner of Jepsen: a real leased
// process and several clients of this library run random operations on a
// few shared keys, with short terms, while a nemesis injects faults, and
// holders of TTL leases attach keys of their own to short leases
// (lincheck_ttl_test.go). The history of every run is checked with
// porcupine (internal/testkit/lincheck).
//
// The short form runs in `go test`: TestLinearizable checks at least 20
// histories across the fault kinds, and TestLinearizableNegative shows that
// the checker finds the violations of a client that ignores invalidations,
// of a clock that drifts beyond ε, of TTL leases whose acknowledged
// renewals are lost, and of clients whose machines sleep past their
// leases without noticing it. The long form runs histories of
// every kind, one after another, for as long as -lincheck.duration says:
//
//	go test ./client -run '^TestLinearizableLong$' -lincheck.duration=30m -timeout 0 -v
//
// Each history logs its scenario and seed; -lincheck.scenario and
// -lincheck.seed replay its random choices, though not the timing of the
// network and the scheduler.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/netfault"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/lincheck"
)

var (
	linDuration = flag.Duration("lincheck.duration", 0, "TestLinearizableLong: how long to run histories of every fault kind (0: skip)")
	linHistory  = flag.Duration("lincheck.history", 2500*time.Millisecond, "how long the clients run operations in one history")
	linSeed     = flag.Uint64("lincheck.seed", 0, "seed of the first history (0: from the time)")
	linOut      = flag.String("lincheck.out", os.TempDir(), "folder for the visualisations of violations")
	linScenario = flag.String("lincheck.scenario", "", "TestLinearizableLong: run only this scenario (with -lincheck.seed, to replay a history's random choices)")
)

// Binaries for the tests that need a leased process, built on first use
// (linBinaries) and removed by TestMain.
var (
	binOnce sync.Once
	binDir  string
	bins    clitest.Binaries
	binErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// linBinaries builds leased and leasectl once per test binary.
func linBinaries(t *testing.T) clitest.Binaries {
	t.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "leased-bin-"); binErr == nil {
			bins, binErr = clitest.Build(binDir)
		}
	})
	if binErr != nil {
		t.Fatalf("build: %v", binErr)
	}
	return bins
}

// faultKind names a fault the nemesis injects.
type faultKind string

const (
	faultNetwork   faultKind = "network"   // delay, jitter (reordering), loss and duplication on every client
	faultPartition faultKind = "partition" // one client cut off from the server, in one or both directions
	faultPause     faultKind = "pause"     // one client's packets held both ways for longer than its term, as for a stopped process
	faultDrift     faultKind = "drift"     // clients' clocks run slow or fast, within ε
	faultCrash     faultKind = "crash"     // leased killed with SIGKILL and restarted
	faultSuspend   faultKind = "suspend"   // one client's machine asleep for longer than its term: its clock stands still, its boot clock runs on, its packets stop both ways
)

// scenario describes one history.
type scenario struct {
	name    string
	clients int
	keys    int
	term    time.Duration
	eps     time.Duration
	faults  []faultKind
	// partitionDir: "in", "out" or "both" for faultPartition; empty: any.
	partitionDir string
	// drift is the clock rate of client 0 (others run true); 0: 1.
	drift float64
	// cutDrifter: partitions always cut client 0 off, for longer than a
	// term; otherwise they cut a random client off.
	cutDrifter bool
	// ignore: client 0 is a liar (liar_test.go): it acknowledges
	// invalidations but keeps serving its entries.
	ignore bool
	// readMostly: the writers mostly read too, so that leases live long
	// enough to be renewed.
	readMostly bool
	// opTimeout bounds one operation of a worker; 0: opTimeout.
	opTimeout time.Duration
	// holders is how many keys of TTL leases there are, each with a
	// holder (lincheck_ttl_test.go) on a client of its own; workers and
	// readers read those keys too. phantom: the holders' keep-alives
	// never reach the server (the negative control of TTL leases).
	holders int
	phantom bool
	// blind: the clients' suspending clocks hide their boot clock, so
	// that no client notices a suspend (the negative control of the
	// suspend check).
	blind bool
	// rare is how many keys there are in rareDir, which a writer of
	// their own creates and deletes a few times a term (runRareWriter),
	// so that the readers' listings of it are mostly cached under prefix
	// leases; workers do not write them, readers read and list them.
	rare int
	// noPrefixRecall starts the server with --unsafe-no-prefix-recall:
	// prefix leases that no write recalls (the negative control of
	// prefix leases).
	noPrefixRecall bool
}

// opLimit returns how long one operation of a worker may take.
func (s scenario) opLimit() time.Duration {
	if s.opTimeout > 0 {
		return s.opTimeout
	}
	return opTimeout
}

func (s scenario) has(f faultKind) bool {
	for _, g := range s.faults {
		if g == f {
			return true
		}
	}
	return false
}

// Positive scenarios: every history must be linearizable. With a term of
// 300 ms and ε of 100 ms, a client clock may run as slow as 0.75 of the
// server's: it trusts a lease for term/rate = 400 ms of real time at most.
// Three holders of TTL leases run in each, and a writer of rareDir.
func positiveScenarios() []scenario {
	base := scenario{clients: 5, keys: 3, holders: 3, rare: 3, term: 300 * time.Millisecond, eps: 100 * time.Millisecond}
	with := func(name string, f func(*scenario)) scenario {
		s := base
		s.name = name
		f(&s)
		return s
	}
	return []scenario{
		with("none", func(s *scenario) {}),
		with("network", func(s *scenario) { s.faults = []faultKind{faultNetwork} }),
		with("partition-in", func(s *scenario) { s.faults, s.partitionDir = []faultKind{faultPartition}, "in" }),
		with("partition-out", func(s *scenario) { s.faults, s.partitionDir = []faultKind{faultPartition}, "out" }),
		with("partition-both", func(s *scenario) { s.faults, s.partitionDir = []faultKind{faultPartition}, "both" }),
		with("pause", func(s *scenario) { s.faults = []faultKind{faultPause} }),
		// Drift matters only when invalidations do not arrive, so the
		// drifting client is also partitioned now and then.
		// They mirror the negative control drift-beyond-epsilon, whose
		// rate alone differs.
		with("drift-slow", func(s *scenario) {
			s.faults, s.drift, s.partitionDir, s.cutDrifter, s.readMostly = []faultKind{faultDrift, faultPartition}, 0.8, "both", true, true
		}),
		with("drift-fast", func(s *scenario) {
			s.faults, s.drift, s.partitionDir, s.cutDrifter, s.readMostly = []faultKind{faultDrift, faultPartition}, 1.25, "both", true, true
		}),
		with("crash", func(s *scenario) { s.faults = []faultKind{faultCrash} }),
		with("suspend", func(s *scenario) { s.faults = []faultKind{faultSuspend} }),
		with("renewals", func(s *scenario) {
			s.faults, s.readMostly = []faultKind{faultPartition, faultPause, faultCrash}, true
		}),
		with("all", func(s *scenario) {
			s.faults, s.drift = []faultKind{faultNetwork, faultPartition, faultPause, faultDrift, faultCrash, faultSuspend}, 0.8
		}),
	}
}

// linParallel is how many histories run at once. Each history lasts a
// fixed time and waits on it far more than it computes, so running three
// side by side cuts the tests' wall time to about a third; a correct server
// stays linearizable under the load.
const linParallel = 3

// runHistories runs one subtest per name, linParallel at a time. Worker
// goroutines start the subtests, which do not call t.Parallel, so that
// -test.parallel (GOMAXPROCS by default, 2 on a small machine) does not cap
// them.
func runHistories(t *testing.T, names []string, run func(t *testing.T, i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range linParallel {
		wg.Go(func() {
			for i := range next {
				t.Run(names[i], func(t *testing.T) { run(t, i) })
			}
		})
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
}

// TestLinearizable is the short form: 23 histories across the fault kinds,
// each of which must be linearizable. They run linParallel at a time.
func TestLinearizable(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and real time")
	}
	leaktest.Check(t) // once every history has ended
	runs := map[string]int{"none": 2, "network": 2, "partition-both": 2, "pause": 2, "drift-slow": 2, "crash": 2, "suspend": 2, "renewals": 2, "all": 4}
	first := firstSeed(t)
	var names []string
	var scs []scenario
	for _, sc := range positiveScenarios() {
		for i := range max(runs[sc.name], 1) {
			names = append(names, fmt.Sprintf("%s/%d", sc.name, i))
			scs = append(scs, sc)
		}
	}
	if len(names) < 20 {
		t.Fatalf("only %d histories", len(names))
	}
	var (
		mu       sync.Mutex
		listings = make(map[string]listingCount)
	)
	checkHistories(t, names, first, func(t *testing.T, i int, seed uint64) historyResult {
		res := runHistory(t, scs[i], seed)
		mu.Lock()
		for dir, c := range res.listings {
			tot := listings[dir]
			tot.listings, tot.cached, tot.absentGets = tot.listings+c.listings, tot.cached+c.cached, tot.absentGets+c.absentGets
			listings[dir] = tot
		}
		mu.Unlock()
		return res
	})
	t.Logf("listings of every history: %s", formatListings(listings))
	// The histories check cached listings only if there are some: those
	// of rareDir, written a few times a term, are mostly leased (about
	// half of them cached on a 2-core machine; workDir's, written all the
	// time, seldom are).
	if c := listings[rareDir]; c.cached*10 < c.listings {
		t.Errorf("only %d of the %d listings of %s were cached: the histories hardly check prefix leases", c.cached, c.listings, rareDir)
	}
}

// checkHistories runs the history of each name with runHistories, the
// i-th with seed first+i+1, and fails each that is not linearizable.
func checkHistories(t *testing.T, names []string, first uint64, run func(t *testing.T, i int, seed uint64) historyResult) {
	runHistories(t, names, func(t *testing.T, i int) {
		seed := first + uint64(i+1)
		res := run(t, i, seed)
		if res.err != nil {
			t.Fatalf("seed %d: %v", seed, res.err)
		}
		if res.verdict != porcupine.Ok {
			t.Fatalf("seed %d: history is %s: %s", seed, res.verdict, res.viz)
		}
	})
}

// negativeTries is how many histories a single-node negative control gets
// to show its violation: on CI (an idle machine) the suspended client once
// went three histories, with three or four suspends each, without one.
// suspendTries is suspend-unnoticed's: it shows one in a quarter to a
// third of its histories (4 of 12 and 4 of 17 in two sittings), so six
// miss it about one run in ten; fifteen, about one in two hundred.
const (
	negativeTries = 6
	suspendTries  = 15
)

// TestLinearizableNegative runs the negative controls: broken clients
// whose histories must not be linearizable: a client that ignores
// invalidations, a clock that drifts beyond ε, holders of TTL leases
// whose renewals are lost (phantomScenario), clients whose machines
// sleep past their leases without noticing it (their clocks hide the
// boot clock), and a server that grants prefix leases that no write
// recalls (noPrefixRecallScenario). If the checker passes one of them, it
// could not have caught the bug either, and the test fails.
func TestLinearizableNegative(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and real time")
	}
	leaktest.Check(t) // once every history has ended
	base := scenario{clients: 5, keys: 3, term: 300 * time.Millisecond, eps: 100 * time.Millisecond}
	ignore := base
	ignore.name, ignore.ignore = "ignores-invalidations", true
	drift := base
	// At 0.3 the client trusts a 300 ms lease for a second, where the
	// server waits 400 ms; the partitions keep invalidations from it.
	drift.name, drift.drift, drift.faults, drift.partitionDir, drift.cutDrifter = "drift-beyond-epsilon", 0.3, []faultKind{faultDrift, faultPartition}, "both", true
	drift.readMostly = true // so that client 0 holds leases when it is cut off, as in drift-slow
	phantom := phantomScenario()
	suspend := base
	suspend.name, suspend.faults, suspend.blind = "suspend-unnoticed", []faultKind{faultSuspend}, true
	noRecall := noPrefixRecallScenario()
	first := firstSeed(t)
	scs := []scenario{ignore, drift, phantom, suspend, noRecall}
	names := make([]string, len(scs))
	for i, sc := range scs {
		names[i] = sc.name
	}
	runHistories(t, names, func(t *testing.T, i int) {
		// A violation is expected; its visualisation goes to the test's
		// folder, and the test checks that it was written. The faults are
		// drawn at random and land in real time, so a history may miss
		// the window where they bite (a drifting client cut off while it
		// holds a lease that a write then needs): a control gets up to
		// six histories, of seeds len(scs) apart, to show its violation.
		var (
			seed uint64
			out  string
			res  historyResult
		)
		tries := negativeTries
		if scs[i].blind {
			tries = suspendTries
		}
		for try := range uint64(tries) {
			seed = first + uint64(i) + try*uint64(len(scs))
			out = t.TempDir()
			res = runHistoryIn(t, scs[i], seed, out)
			if res.err != nil {
				t.Fatalf("seed %d: %v", seed, res.err)
			}
			if res.verdict == porcupine.Illegal {
				break
			}
			t.Logf("seed %d: negative control is %s (%s); another seed", seed, res.verdict, res.summary)
		}
		if res.verdict != porcupine.Illegal {
			t.Fatalf("seed %d: negative control is %s after %d histories, want a violation (%s)", seed, res.verdict, tries, res.summary)
		}
		if st, err := os.Stat(res.viz); err != nil || st.Size() == 0 {
			t.Fatalf("visualisation %q: %v", res.viz, err)
		}
		if scs[i].phantom {
			// The violation must lie in the keys of the TTL leases.
			res.viz = checkTTLViolation(t, res, seed, out)
		}
		if scs[i].noPrefixRecall {
			// It must lie in rareDir, whose keys only listings and
			// prefix leases make stale: their read leases are recalled.
			res.viz = checkDirViolation(t, res, seed, out, rareDir)
		}
		t.Logf("violation found as expected: %s; %s", res.summary, res.viz)
	})
}

// noPrefixRecallScenario is the negative control of prefix leases that
// TestLinearizableNegative runs: a server that grants them, but lets
// writes under their directories commit without recalling them or
// waiting for them (leased --unsafe-no-prefix-recall). The writer of
// rareDir creates and deletes its keys several times a term, while the
// readers list rareDir, mostly under a prefix lease of a term, and read
// its keys: they serve the listing, and Gets of keys without an entry of
// their own, from memory after a write under it has returned, a created
// key absent or a deleted one present, and the checker must find that.
func noPrefixRecallScenario() scenario {
	return scenario{name: "no-prefix-recall", clients: 5, keys: 3, rare: 3, noPrefixRecall: true,
		term: 300 * time.Millisecond, eps: 100 * time.Millisecond}
}

// checkDirViolation fails the test unless the operations of res's history
// on the keys under dir alone are not linearizable; their visualisation
// goes to the folder out. It returns its path.
func checkDirViolation(t *testing.T, res historyResult, seed uint64, out, dir string) string {
	t.Helper()
	var ops []porcupine.Operation
	for _, op := range res.history {
		if strings.HasPrefix(op.Input.(lincheck.Input).Key, dir) {
			ops = append(ops, op)
		}
	}
	viz := filepath.Join(out, fmt.Sprintf("lincheck-dir-%s-seed%d.html", strings.TrimSuffix(dir, "/"), seed))
	if verdict, _ := lincheck.Check(ops, 2*time.Minute, viz); verdict != porcupine.Illegal {
		t.Fatalf("seed %d: the %d operations on the keys under %s are %s, want a violation", seed, len(ops), dir, verdict)
	}
	return viz
}

// TestLinearizableLong is the long form: with -lincheck.duration set, it
// runs histories of every positive scenario in turn until the time is up,
// and prints what it checked.
func TestLinearizableLong(t *testing.T) {
	if *linDuration <= 0 {
		t.Skip("long form: set -lincheck.duration")
	}
	runLongForm(t, positiveScenarios(), func(sc scenario) string { return sc.name }, *linDuration,
		func(t *testing.T, sc scenario, seed uint64) historyResult { return runHistory(t, sc, seed) })
}

// runLongForm runs histories of each of scs whose name (-lincheck.scenario)
// is chosen, in turn, with run, until d is up, and logs the totals: the
// long form of the single-node and the cluster harnesses.
func runLongForm[S any](t *testing.T, scs []S, name func(S) string, d time.Duration, run func(*testing.T, S, uint64) historyResult) {
	var chosen []S
	for _, sc := range scs {
		if *linScenario == "" || name(sc) == *linScenario {
			chosen = append(chosen, sc)
		}
	}
	if len(chosen) == 0 {
		t.Fatalf("no scenario %q", *linScenario)
	}
	seed := firstSeed(t)
	end := time.Now().Add(d)
	var tot linTotals
	for i := 0; time.Now().Before(end); i++ {
		sc := chosen[i%len(chosen)]
		s := seed + uint64(i)
		var res historyResult
		t.Run(fmt.Sprintf("%s/%d", name(sc), i), func(t *testing.T) {
			leaktest.Check(t)
			res = run(t, sc, s)
			if res.err != nil {
				t.Errorf("seed %d: %v", s, res.err)
			} else if res.verdict != porcupine.Ok {
				t.Errorf("seed %d: history is %s: %s", s, res.verdict, res.viz)
			}
		})
		tot.add(name(sc), s, res)
	}
	tot.log(t, d)
}

// linTotals adds up the histories of a long form.
type linTotals struct {
	histories, ops, violations, unknown int
	faults                              map[string]int
	ttl                                 map[string]int // what the holders of TTL leases did
	failed                              []string       // scenario, seed and visualisation of each violation
}

// add counts one history of scenario name, run with seed.
func (tot *linTotals) add(name string, seed uint64, res historyResult) {
	if tot.faults == nil {
		tot.faults, tot.ttl = make(map[string]int), make(map[string]int)
	}
	tot.histories++
	tot.ops += res.summary.Ops
	for k, n := range res.faults {
		tot.faults[k] += n
	}
	for k, n := range res.ttl {
		tot.ttl[k] += n
	}
	switch res.verdict {
	case porcupine.Illegal:
		tot.violations++
		tot.failed = append(tot.failed, fmt.Sprintf("%s seed %d: %s", name, seed, res.viz))
	case porcupine.Unknown:
		tot.unknown++
	}
}

// log prints the totals of a long form that ran for d.
func (tot *linTotals) log(t *testing.T, d time.Duration) {
	t.Logf("long form: %v, %d histories checked, %d operations, %d violations, %d undecided", d, tot.histories, tot.ops, tot.violations, tot.unknown)
	t.Logf("faults injected: %s", formatCounts(tot.faults))
	t.Logf("TTL leases: %s", formatTTL(tot.ttl))
	for _, f := range tot.failed {
		t.Logf("violation: %s", f)
	}
}

func firstSeed(t *testing.T) uint64 {
	s := *linSeed
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("first seed %d (-lincheck.seed to repeat)", s)
	return s
}

func formatCounts(m map[string]int) string {
	var parts []string
	for _, k := range []string{"network-clients", "partitions", "pauses", "suspends", "drifting-clients", "crashes",
		"leader-kills", "leader-stops", "leader-cuts", "follower-restarts", "transfers", "transfers-refused", "overlapping", "packets-dropped", "packets-duplicated", "packets-delayed"} {
		if n, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	return strings.Join(parts, ", ")
}

// historyResult is what one history came to.
type historyResult struct {
	verdict porcupine.CheckResult
	summary lincheck.Summary
	history []porcupine.Operation // what was checked
	viz     string                // the visualisation, if one was written
	faults  map[string]int        // faults injected, by kind
	ttl     map[string]int        // what the holders of TTL leases did (ttlTally)
	// listings counts the listings of the history, by directory
	// (countListings).
	listings map[string]listingCount
	err      error // the harness failed: no verdict
	// watch is the first broken promise the watch checker found
	// (lincheck_watch_test.go), which makes the verdict Illegal; and
	// watched what it checked.
	watch   error
	watched watchSummary
}

// listingCount counts the listings of one directory in a history: those
// recorded, those served from a client's cache under a prefix lease, and
// the cached Gets of its keys that found no key at version 0, which a
// cached listing answers (or a key entry of a key never written).
type listingCount struct {
	listings, cached, absentGets int
}

// countListings counts the listings of history by directory (the key of
// their reads up to its first '/').
func countListings(history []porcupine.Operation) map[string]listingCount {
	type listingID struct {
		client    int
		call, ret int64
	}
	seen := make(map[listingID]bool)
	m := make(map[string]listingCount)
	for _, op := range history {
		in, out := op.Input.(lincheck.Input), op.Output.(lincheck.Output)
		if in.Kind != lincheck.Get || out.Outcome != lincheck.OK {
			continue
		}
		dir := in.Key[:strings.IndexByte(in.Key, '/')+1]
		c := m[dir]
		switch l := (listingID{op.ClientId, op.Call, op.Return}); {
		case in.Listed && !seen[l]:
			seen[l] = true
			c.listings++
			if out.Cached {
				c.cached++
			}
		case !in.Listed && out.Cached && !out.Found && out.Version == 0:
			c.absentGets++
		}
		m[dir] = c
	}
	return m
}

// formatListings prints the listing counts of the directories that the
// readers list.
func formatListings(m map[string]listingCount) string {
	var parts []string
	for _, dir := range []string{workDir, rareDir} {
		if c, ok := m[dir]; ok && c.listings > 0 {
			parts = append(parts, fmt.Sprintf("%s %d listings, %d cached (%.0f%%), %d cached Gets absent at v0", dir, c.listings, c.cached, 100*float64(c.cached)/float64(c.listings), c.absentGets))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

func runHistory(t *testing.T, sc scenario, seed uint64) historyResult {
	return runHistoryIn(t, sc, seed, *linOut)
}

// linClient is one client of a history and its faults.
type linClient struct {
	id  int
	kv  linKV          // what the workers call: c, or a liar
	c   *client.Client // nil for a liar
	pc  *netfault.Conn
	clk *suspendClock // the client's clock, in a history that suspends clients; else nil
}

// linKV is what a history's workers call: the methods of *client.Client
// that a liar also has.
type linKV interface {
	Get(ctx context.Context, key string) (client.Item, error)
	Put(ctx context.Context, key string, value []byte, opts ...client.WriteOption) (uint64, error)
	Delete(ctx context.Context, key string, opts ...client.WriteOption) (client.DeleteResult, error)
	CompareAndSwap(ctx context.Context, key string, oldVersion uint64, value []byte, opts ...client.WriteOption) (uint64, error)
	Close() error
}

// runHistoryIn runs one history of sc and checks it. A visualisation of a
// violation goes to the folder out.
//
// It leaves the leak check to its caller: histories that run side by side
// share the process's goroutines.
func runHistoryIn(t *testing.T, sc scenario, seed uint64, out string) historyResult {
	t.Helper()
	b := linBinaries(t)
	rng := rand.New(rand.NewPCG(seed, 0x1ea5ed))
	dir := t.TempDir()
	// Every write under a directory recalls its prefix leases, however
	// hot it is (--prefix-hot-writes=-1): a listing is leased whenever no
	// write is pending under its directory, even workDir's.
	flags := []string{"--lease-term", sc.term.String(), "--epsilon", sc.eps.String(), "--ttl-min", holderTTL.String(), "--log-level", "error",
		"--prefix-hot-writes=-1"}
	if sc.noPrefixRecall {
		flags = append(flags, "--unsafe-no-prefix-recall")
	}
	srv := clitest.StartServer(t, b, "", filepath.Join(dir, "data"), flags...)
	t.Cleanup(func() {
		select {
		case <-srv.Exited():
		default:
			srv.Kill(t)
		}
	})

	res := historyResult{faults: make(map[string]int)}
	clients := make([]*linClient, sc.clients)
	for i := range clients {
		lc, cfg := newLinClient(t, i, seed, srv.ClientConfig())
		if i == 0 && sc.drift != 0 && sc.drift != 1 {
			cfg.Clock = netfault.Drift(clock.Real(), sc.drift)
			res.faults["drifting-clients"]++
		}
		if sc.has(faultSuspend) {
			cfg.Clock = lc.suspendable(cfg.Clock, sc.blind)
		}
		if sc.has(faultNetwork) {
			f := netfault.Faults{Delay: time.Millisecond, Jitter: 4 * time.Millisecond, Drop: 0.03, Duplicate: 0.03}
			lc.pc.SetFaults(f, f)
			res.faults["network-clients"]++
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if i == 0 && sc.ignore {
			l, err := dialLiar(ctx, srv.Addr, srv.CA, lc.pc, cfg.Name)
			cancel()
			if err != nil {
				lc.pc.Close()
				t.Fatalf("dial the liar: %v", err)
			}
			lc.kv = l
		} else {
			c, err := client.Dial(ctx, srv.Addr, cfg)
			cancel()
			if err != nil {
				lc.pc.Close()
				t.Fatalf("dial client %d: %v", i, err)
			}
			lc.kv, lc.c = c, c
		}
		clients[i] = lc
		// Also closed at the end of the history, before a server started
		// during it (after a crash) is stopped by its own cleanup.
		t.Cleanup(func() { lc.kv.Close(); lc.pc.Close() })
	}

	rec := lincheck.NewRecorder()
	// The nemesis runs on the test's goroutine, since a failed restart
	// fails the test.
	res.ttl = runClients(clients, sc, rec, seed, func() {
		runNemesis(t, sc, rng, clients, res.faults, time.Now().Add(*linHistory), &srv)
	})
	served := serverSummary(clients)
	closeClients(clients, res.faults)
	checked := checkHistory(t, &res, rec, seed, out)
	t.Logf("scenario %s seed %d: %s: %s, checked in %v; listings: %s; faults: %s; TTL: %s; server since its last start: %s",
		sc.name, seed, res.verdict, res.summary, checked, formatListings(res.listings), formatCounts(res.faults), formatTTL(res.ttl), served)
	return res
}

// runClients runs a worker and a reader on every client, sc.holders
// holders of TTL leases, each on a client of its own from the last one on
// (liars excepted), and, if sc.rare > 0, the writer of rareDir on the
// first client that is not a liar (runRareWriter), recording their
// operations in rec, until nemesis returns; then it stops them, waits for
// them, and returns what the holders did. nemesis runs on the caller's
// goroutine and may fail the test.
func runClients(clients []*linClient, sc scenario, rec *lincheck.Recorder, seed uint64, nemesis func()) map[string]int {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, lc := range clients {
		wg.Go(func() { runWorker(lc, sc, rec, seed, stop) })
		wg.Go(func() { runReader(lc, sc, rec, seed, stop) })
	}
	tally := newTTLTally()
	if sc.holders > 0 {
		tally.add("holders", sc.holders)
	}
	var real []*linClient
	for i := len(clients) - 1; i >= 0; i-- {
		if clients[i].c != nil {
			real = append(real, clients[i])
		}
	}
	for i := range sc.holders {
		lc := real[i%len(real)]
		wg.Go(func() { runHolder(lc, i, len(clients), sc, rec, seed, tally, stop) })
	}
	if sc.rare > 0 {
		// On the first client that is not a liar, far from the holders.
		lc := real[len(real)-1]
		wg.Go(func() { runRareWriter(lc, sc, rec, seed, 2*len(clients)+2*sc.holders, stop) })
	}
	// Every operation is bounded (sc.opLimit, and the client's wait for an
	// answer to a cancellation), so the workers end soon after stop.
	stopWorkers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWorkers() // also when nemesis fails the test
	nemesis()
	stopWorkers()
	return tally.counts()
}

// closeClients closes the clients and adds their packet faults to faults.
func closeClients(clients []*linClient, faults map[string]int) {
	for _, lc := range clients {
		lc.kv.Close()
	}
	for _, lc := range clients {
		st := lc.pc.Stats()
		faults["packets-dropped"] += int(st.Dropped)
		faults["packets-duplicated"] += int(st.Duplicated)
		faults["packets-delayed"] += int(st.Delayed)
	}
}

// checkBudget bounds the check of one history. Most take seconds; a
// history with many writes of unknown outcome on few keys (a leader cut
// off and its peers restarted, lincheck_hold_test.go) can take minutes,
// more while other histories run beside it on two cores, and one that the
// budget cuts short is undecided, which fails the test. (The test command
// gives go test the time for it: -timeout 30m.)
const checkBudget = 5 * time.Minute

// checkHistory checks the history recorded in rec and sets res's verdict,
// summary, visualisation (written to the folder out unless the history is
// linearizable) and, if the history is too thin to mean anything, err. It
// returns how long the check took.
func checkHistory(t *testing.T, res *historyResult, rec *lincheck.Recorder, seed uint64, out string) time.Duration {
	t.Helper()
	history, summary := rec.History()
	res.summary, res.history, res.listings = summary, history, countListings(history)
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	res.viz = filepath.Join(out, fmt.Sprintf("lincheck-%s-seed%d.html", name, seed))
	start := time.Now()
	verdict, err := lincheck.Check(history, checkBudget, res.viz)
	res.verdict = verdict
	if res.verdict == porcupine.Ok {
		res.viz = ""
	} else {
		t.Log(err) // names the visualisation, or why it could not be written
	}
	if summary.Reads == 0 || summary.Writes == 0 {
		res.err = fmt.Errorf("history too thin to mean anything: %s", summary)
	}
	if res.ttl != nil && res.ttl["holders"] > 0 && res.ttl["grants"] == 0 {
		res.err = fmt.Errorf("no TTL lease granted in the history: %s", formatTTL(res.ttl))
	}
	return time.Since(start).Round(time.Millisecond)
}

// serverSummary describes what the server did since it last started: the
// lease traffic the history exercised.
func serverSummary(clients []*linClient) string {
	for _, lc := range clients {
		if lc.c == nil {
			continue // a liar
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := lc.c.ServerStats(ctx)
		cancel()
		if err == nil {
			return fmt.Sprintf("%d invalidations (%d acknowledged, %d expired), %d recalls, %d renewals; TTL leases: %d revoked, %d of them on expiry, %d keys deleted, %d renewed, %d live",
				st.InvalidationsSent, st.InvalidationsAcked, st.InvalidationsExpired, st.Recalls, st.MessagesIn["renew"],
				st.TTLRevoked, st.TTLExpired, st.TTLKeysDeleted, st.TTLKeepAlives, st.TTLLeases)
		}
	}
	return "no answer"
}

// opTimeout bounds one operation. A write may wait for a partitioned or
// paused holder's lease, and after a crash for the restarted server's
// horizon, which are all under a second here.
const opTimeout = 2 * time.Second

// pace waits a random few milliseconds between operations, so that a
// history stays small enough to check: cached reads alone would make
// millions of operations. It reports false once stop is closed.
func pace(rng *rand.Rand, stop <-chan struct{}) bool {
	select {
	case <-stop:
		return false
	case <-time.After(time.Duration(rng.IntN(3000)) * time.Microsecond):
		return true
	}
}

// runReader reads random keys through client lc until stop is closed, and
// records the reads, as history client 2·id+1. One time in five, a client
// of the library (not a liar) lists a directory instead: workDir, or, half
// the time if sc has rare keys, rareDir; four listings in five ask for a
// prefix lease (client.Leased), and are served from the client's memory
// while it lasts, as are its Gets of keys under the directory that have
// no entry of their own. One read in four of the others is of a key of
// rareDir, if sc has rare keys. Its reads give up after a quarter of a
// term, so that while its client is cut off it goes on reading what its
// cache holds.
func runReader(lc *linClient, sc scenario, rec *lincheck.Recorder, seed uint64, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, uint64(2*lc.id+2)))
	id := 2*lc.id + 1
	for pace(rng, stop) {
		ctx, cancel := context.WithTimeout(context.Background(), sc.term/4)
		switch {
		case lc.c != nil && rng.IntN(5) == 0:
			dir, keys := workDir, linKeys(workKey, sc.keys)
			if sc.rare > 0 && rng.IntN(2) == 0 {
				dir, keys = rareDir, linKeys(rareKey, sc.rare)
			}
			listKeys(ctx, id, lc.c, rec, dir, keys, rng.IntN(5) != 0)
		case sc.rare > 0 && rng.IntN(4) == 0:
			readKey(ctx, id, lc.kv, rec, rareKey(rng.IntN(sc.rare)))
		default:
			readKey(ctx, id, lc.kv, rec, sc.readKeyOf(rng))
		}
		cancel()
	}
}

// workDir is the directory of the workers' keys, workKey(0) …
// workKey(n-1), which the readers list.
const workDir = "d/"

// workKey returns the workers' key i.
func workKey(i int) string { return fmt.Sprintf("%sk%d", workDir, i) }

// rareDir is the directory of the keys that runRareWriter alone writes,
// rareKey(0) … rareKey(n-1), which the readers list.
const rareDir = "e/"

// rareKey returns the key i of rareDir.
func rareKey(i int) string { return fmt.Sprintf("%s%d", rareDir, i) }

// linKeys returns key(0) … key(n-1).
func linKeys(key func(int) string, n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = key(i)
	}
	return ks
}

// runRareWriter creates and deletes the keys of rareDir through client
// lc, one write every 50–250 ms, until stop is closed, and records the
// writes as history client id: it deletes a key it last found present,
// and puts one it last found absent (or whose last write's outcome it
// does not know), so that its writes mostly create or remove a key, a
// few times a term. Between them, the listings of rareDir are mostly
// leased: each write recalls them, and the next listing is leased again.
func runRareWriter(lc *linClient, sc scenario, rec *lincheck.Recorder, seed uint64, id int, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, 0xe1e))
	present := make(map[string]bool)
	seq := 0
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(50+rng.IntN(200)) * time.Millisecond):
		}
		key := rareKey(rng.IntN(sc.rare))
		ctx, cancel := context.WithTimeout(context.Background(), sc.opLimit())
		if present[key] {
			call := rec.Begin(id, lincheck.Input{Kind: lincheck.Delete, Key: key})
			r, err := lc.kv.Delete(ctx, key)
			out := deleteOutput(r, err)
			rec.End(call, out)
			if out.Outcome == lincheck.OK {
				present[key] = false
			}
		} else {
			seq++
			in := lincheck.Input{Kind: lincheck.Put, Key: key, Value: fmt.Sprintf("%s-%d", key, seq)}
			call := rec.Begin(id, in)
			v, err := lc.kv.Put(ctx, key, []byte(in.Value))
			out := writeOutput(v, err)
			rec.End(call, out)
			if out.Outcome == lincheck.OK {
				present[key] = true
			}
		}
		cancel()
	}
}

// listKeys lists directory dir, whose keys may be keys, through c, leased
// (client.Leased) or not, and records the listing as history client id:
// one read of each of keys (lincheck.Input.Listed), found with the value
// and version the listing gave it, or absent, and cached if the listing
// came from the client's memory. Each read spans the whole listing
// (Recorder.EndListing). The model checks the reads of keys that
// transactions join into one part at one point; that all the keys are of
// one revision is otherwise the store's to check (store.Range's tests).
func listKeys(ctx context.Context, id int, c *client.Client, rec *lincheck.Recorder, dir string, keys []string, leased bool) {
	calls := make([]lincheck.Call, len(keys))
	for i, k := range keys {
		calls[i] = rec.Begin(id, lincheck.Input{Kind: lincheck.Get, Key: k, Listed: true})
	}
	var opts []client.ListOption
	if leased {
		opts = append(opts, client.Leased())
	}
	r, err := c.List(ctx, dir, opts...)
	found := make(map[string]client.KV, len(r.KVs))
	for _, kv := range r.KVs {
		found[kv.Key] = kv
	}
	outs := make([]lincheck.Output, len(keys))
	for i, k := range keys {
		if err != nil {
			outs[i] = lincheck.Output{Outcome: lincheck.NoEffect, Err: err.Error()}
			continue
		}
		kv, ok := found[k]
		outs[i] = lincheck.Output{Outcome: lincheck.OK, Found: ok, Value: string(kv.Value), Version: kv.Version, Cached: r.Cached}
	}
	rec.EndListing(calls, outs)
}

// readKey reads key through c and records the read as history client id.
func readKey(ctx context.Context, id int, c linKV, rec *lincheck.Recorder, key string) (client.Item, bool) {
	call := rec.Begin(id, lincheck.Input{Kind: lincheck.Get, Key: key})
	it, err := c.Get(ctx, key)
	if err != nil {
		rec.End(call, lincheck.Output{Outcome: lincheck.NoEffect, Err: err.Error()})
		return it, false
	}
	rec.End(call, lincheck.Output{Outcome: lincheck.OK, Found: it.Found, Value: string(it.Value), Version: it.Version, Cached: it.Cached})
	return it, true
}

// runWorker runs random operations on client lc until stop is closed, and
// records them, as history client 2·id. It is the only one to write
// through lc: a plain write by a client that holds the key's write lease
// does not recall it, which the model does not allow for. One write in
// eight is a transaction on two keys (runTxn). A liar takes no write
// leases and runs no transactions: it puts instead.
func runWorker(lc *linClient, sc scenario, rec *lincheck.Recorder, seed uint64, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, uint64(2*lc.id+1)))
	id := 2 * lc.id
	seq := 0
	value := func() string { seq++; return fmt.Sprintf("c%d-%d", lc.id, seq) }
	seen := make(map[string]uint64) // key → last version this worker saw
	for pace(rng, stop) {
		key := workKey(rng.IntN(sc.keys))
		ctx, cancel := context.WithTimeout(context.Background(), sc.opLimit())
		p := rng.IntN(100)
		if sc.readMostly && rng.IntN(10) != 0 {
			p = 0
		}
		if p >= 88 && lc.c == nil {
			p = 40
		}
		switch {
		case p >= 40 && lc.c != nil && sc.keys > 1 && rng.IntN(8) == 0:
			runTxn(ctx, id, lc.c, rec, rng, sc.keys, key, value, seen)
		case p < 40:
			if sc.holders > 0 && rng.IntN(3) == 0 {
				// The holders' keys are theirs to write; the
				// workers only read them.
				readKey(ctx, id, lc.kv, rec, ttlKey(rng.IntN(sc.holders)))
			} else if it, ok := readKey(ctx, id, lc.kv, rec, key); ok {
				seen[key] = it.Version
			}
		case p < 64:
			in := lincheck.Input{Kind: lincheck.Put, Key: key, Value: value()}
			call := rec.Begin(id, in)
			v, err := lc.kv.Put(ctx, key, []byte(in.Value))
			rec.End(call, writeOutput(v, err))
		case p < 70:
			in := lincheck.Input{Kind: lincheck.Delete, Key: key}
			call := rec.Begin(id, in)
			r, err := lc.kv.Delete(ctx, key)
			rec.End(call, deleteOutput(r, err))
		case p < 88:
			expect := seen[key]
			if rng.IntN(4) == 0 {
				expect = 0
			}
			in := lincheck.Input{Kind: lincheck.CAS, Key: key, Value: value(), Expect: expect}
			call := rec.Begin(id, in)
			v, err := lc.kv.CompareAndSwap(ctx, key, expect, []byte(in.Value))
			rec.End(call, writeOutput(v, err))
		default:
			writeLeaseSession(ctx, id, lc, rec, rng, sc.keys, key, value)
		}
		cancel()
	}
}

// writeLeaseSession acquires the write lease on key, writes under it,
// reads it from the cache, and releases it. One write in four is a
// transaction that writes key under the lease and another of the n
// workers' keys without: it deletes the other key if it exists, and puts
// it otherwise.
func writeLeaseSession(ctx context.Context, id int, lc *linClient, rec *lincheck.Recorder, rng *rand.Rand, n int, key string, value func() string) {
	call := rec.Begin(id, lincheck.Input{Kind: lincheck.Acquire, Key: key})
	wl, err := lc.c.AcquireWriteLease(ctx, key)
	if err != nil {
		o := lincheck.Output{Outcome: lincheck.Unknown, Err: err.Error()}
		if errors.Is(err, client.ErrCanceled) {
			o.Outcome = lincheck.NoEffect
		}
		rec.End(call, o)
		return
	}
	rec.End(call, lincheck.Output{Outcome: lincheck.OK, Token: wl.Token()})
	for range 1 + rng.IntN(3) {
		if n > 1 && rng.IntN(4) == 0 {
			other, v := otherKey(rng, n, key), value()
			in := lincheck.Input{Kind: lincheck.Txn,
				If:   []lincheck.Compare{{Key: other, Op: lincheck.Exists}},
				Then: []lincheck.TxnOp{{Key: key, Value: v, Token: wl.Token()}, {Key: other, Delete: true}},
				Else: []lincheck.TxnOp{{Key: key, Value: v, Token: wl.Token()}, {Key: other, Value: v}}}
			call := rec.Begin(id, in)
			r, err := commitTxn(ctx, lc.c, in, wl)
			rec.End(call, txnOutput(r, err))
		} else if rng.IntN(5) == 0 {
			in := lincheck.Input{Kind: lincheck.FencedDelete, Key: key, Token: wl.Token()}
			call := rec.Begin(id, in)
			r, err := wl.Delete(ctx)
			rec.End(call, deleteOutput(r, err))
		} else {
			in := lincheck.Input{Kind: lincheck.FencedPut, Key: key, Value: value(), Token: wl.Token()}
			call := rec.Begin(id, in)
			v, err := wl.Put(ctx, []byte(in.Value))
			rec.End(call, writeOutput(v, err))
		}
		readKey(ctx, id, lc.c, rec, key)
	}
	wl.Release(ctx)
}

// otherKey returns one of the n workers' keys workKey(0) … workKey(n-1)
// other than key, at random.
func otherKey(rng *rand.Rand, n int, key string) string {
	if k := workKey(rng.IntN(n - 1)); k != key {
		return k
	}
	return workKey(n - 1)
}

// runTxn runs a transaction through c on key a and another b of the n
// workers' keys, and records it as history client id: a rename of a to b
// (if a exists and b does not, b is put and a deleted; else a is put), or
// a compare-and-swap of both, at the versions it reads of them just
// before (0 if absent; those this worker last saw, seen, if a read
// fails), which does nothing if either moved meanwhile. It notes in seen
// the versions the transaction gave the keys it wrote.
func runTxn(ctx context.Context, id int, c *client.Client, rec *lincheck.Recorder, rng *rand.Rand, n int, a string, value func() string, seen map[string]uint64) {
	b, v := otherKey(rng, n, a), value()
	in := lincheck.Input{Kind: lincheck.Txn,
		If:   []lincheck.Compare{{Key: a, Op: lincheck.Exists}, {Key: b, Op: lincheck.Absent}},
		Then: []lincheck.TxnOp{{Key: b, Value: v}, {Key: a, Delete: true}},
		Else: []lincheck.TxnOp{{Key: a, Value: v}}}
	if rng.IntN(2) == 0 {
		version := func(k string) uint64 {
			it, ok := readKey(ctx, id, c, rec, k)
			switch {
			case !ok:
				return seen[k]
			case !it.Found:
				return 0
			}
			return it.Version
		}
		va, vb := version(a), version(b)
		in = lincheck.Input{Kind: lincheck.Txn,
			If:   []lincheck.Compare{{Key: a, Op: lincheck.VersionIs, Version: va}, {Key: b, Op: lincheck.VersionIs, Version: vb}},
			Then: []lincheck.TxnOp{{Key: a, Value: v}, {Key: b, Value: v}}}
	}
	call := rec.Begin(id, in)
	r, err := commitTxn(ctx, c, in, nil)
	rec.End(call, txnOutput(r, err))
	if err != nil {
		return
	}
	ops := in.Then
	if !r.Succeeded {
		ops = in.Else
	}
	for _, op := range ops {
		seen[op.Key] = r.Revision
		if op.Delete {
			seen[op.Key] = 0
		}
	}
}

// commitTxn sends the transaction in through c, its ops with a fencing
// token under wl, and returns its outcome.
func commitTxn(ctx context.Context, c *client.Client, in lincheck.Input, wl *client.WriteLease) (client.TxnResult, error) {
	cmps := make([]client.Compare, len(in.If))
	for i, cmp := range in.If {
		switch cmp.Op {
		case lincheck.Exists:
			cmps[i] = client.Exists(cmp.Key)
		case lincheck.Absent:
			cmps[i] = client.Absent(cmp.Key)
		case lincheck.VersionIs:
			cmps[i] = client.VersionIs(cmp.Key, cmp.Version)
		case lincheck.VersionIsNot:
			cmps[i] = client.VersionIsNot(cmp.Key, cmp.Version)
		case lincheck.VersionAbove:
			cmps[i] = client.VersionAbove(cmp.Key, cmp.Version)
		case lincheck.VersionBelow:
			cmps[i] = client.VersionBelow(cmp.Key, cmp.Version)
		case lincheck.ValueIs:
			cmps[i] = client.ValueIs(cmp.Key, []byte(cmp.Value))
		case lincheck.ValueIsNot:
			cmps[i] = client.ValueIsNot(cmp.Key, []byte(cmp.Value))
		default:
			return client.TxnResult{}, fmt.Errorf("%w: compare %s", client.ErrInvalidArgument, cmp.Op)
		}
	}
	ops := func(ops []lincheck.TxnOp) []client.TxnOp {
		out := make([]client.TxnOp, len(ops))
		for i, op := range ops {
			out[i] = client.PutOp(op.Key, []byte(op.Value))
			if op.Delete {
				out[i] = client.DeleteOp(op.Key)
			}
			if op.Token != 0 {
				out[i] = out[i].Under(wl)
			}
		}
		return out
	}
	return c.Txn(ctx).If(cmps...).Then(ops(in.Then)...).Else(ops(in.Else)...).Commit()
}

// txnOutput classifies a transaction's result, as writeOutput a write's.
func txnOutput(r client.TxnResult, err error) lincheck.Output {
	out := writeOutput(r.Revision, err)
	out.Succeeded = err == nil && r.Succeeded
	return out
}

// writeOutput classifies a write's result.
func writeOutput(v uint64, err error) lincheck.Output {
	switch {
	case err == nil:
		return lincheck.Output{Outcome: lincheck.OK, Version: v}
	case errors.Is(err, client.ErrVersionMismatch):
		return lincheck.Output{Outcome: lincheck.Mismatch, Err: err.Error()}
	case errors.Is(err, client.ErrFenced):
		return lincheck.Output{Outcome: lincheck.Fenced, Err: err.Error()}
	case errors.Is(err, client.ErrCanceled):
		return lincheck.Output{Outcome: lincheck.NoEffect, Err: err.Error()}
	}
	// Lost connections, timeouts without an answer to the cancellation,
	// server errors: the write may or may not have committed.
	return lincheck.Output{Outcome: lincheck.Unknown, Err: err.Error()}
}

// deleteOutput is writeOutput for a delete, which says whether it removed
// the key.
func deleteOutput(r client.DeleteResult, err error) lincheck.Output {
	out := writeOutput(r.Version, err)
	out.Found = err == nil && r.Deleted == 1
	return out
}

// runNemesis injects sc's faults until end, and heals each before it
// injects the next. It counts what it injected in faults. A crash replaces
// *srv with the restarted server.
func runNemesis(t *testing.T, sc scenario, rng *rand.Rand, clients []*linClient, faults map[string]int, end time.Time, srv **clitest.Server) {
	var kinds []faultKind
	for _, f := range sc.faults {
		if f == faultPartition || f == faultPause || f == faultCrash || f == faultSuspend {
			kinds = append(kinds, f)
		}
	}
	// wait sleeps d of real time, which is how long a fault lasts, or
	// until end. It reports false if end came first.
	wait := func(d time.Duration) bool {
		if left := time.Until(end); left < d {
			time.Sleep(max(left, 0))
			return false
		}
		time.Sleep(d)
		return true
	}
	if len(kinds) == 0 {
		wait(time.Until(end))
		return
	}
	crashes := 0
	for wait(time.Duration(100+rng.IntN(300)) * time.Millisecond) {
		switch kinds[rng.IntN(len(kinds))] {
		case faultPartition:
			lc, d := clients[rng.IntN(len(clients))], sc.term/2
			if sc.cutDrifter {
				lc, d = clients[0], sc.term
			}
			dir := sc.partitionDir
			if dir == "" {
				dir = []string{"in", "out", "both"}[rng.IntN(3)]
			}
			lc.pc.Partition(dir != "in", dir != "out")
			faults["partitions"]++
			wait(d + time.Duration(rng.Int64N(int64(2*sc.term))))
			lc.pc.Partition(false, false)
		case faultPause:
			// From the server's side, a stopped process is one whose
			// packets stop both ways: its leases run out unacknowledged,
			// and what it sent or was sent meanwhile arrives on resume.
			// The client's goroutines go on, and serve cached reads
			// while the leases last by its own clock, which is their
			// right.
			lc := clients[rng.IntN(len(clients))]
			lc.pc.Pause()
			faults["pauses"]++
			wait(sc.term + time.Duration(rng.Int64N(int64(2*sc.term))))
			lc.pc.Resume()
		case faultSuspend:
			lc := clients[rng.IntN(len(clients))]
			if lc.c == nil {
				continue // a liar, which reads no clock of the test's
			}
			faults["suspends"]++
			suspendClient(lc, sc.term+time.Duration(rng.Int64N(int64(2*sc.term))), wait)
		case faultCrash:
			if crashes >= 2 {
				continue
			}
			crashes++
			faults["crashes"]++
			(*srv).Kill(t)
			wait(time.Duration(50+rng.IntN(250)) * time.Millisecond)
			*srv = (*srv).Restart(t)
		}
	}
}

// newLinClient returns client i of a history with seed, before it dials:
// its packets go through a netfault.Conn of their own, faultless until the
// history sets faults, and cfg, based on base, sends them there and names
// the client. The caller dials, and closes lc.pc if the dial fails.
func newLinClient(t *testing.T, i int, seed uint64, base client.Config) (*linClient, client.Config) {
	t.Helper()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lc := &linClient{id: i, pc: netfault.Wrap(udp, int64(seed)+int64(i))}
	cfg := base
	cfg.Name = fmt.Sprintf("lin-%d", i)
	cfg.PacketConn = lc.pc
	cfg.MaxReconnectDelay = 100 * time.Millisecond
	return lc, cfg
}

// suspendable gives lc a suspendClock over base (nil: the system clock),
// for the nemesis to suspend, and returns the clock for its Config: blind,
// one that hides the boot clock, so that the client notices no suspend.
func (lc *linClient) suspendable(base clock.Clock, blind bool) clock.Clock {
	lc.clk = newSuspendClock(base)
	if blind {
		return blindClock{lc.clk}
	}
	return lc.clk
}

// suspendClient has lc's machine sleep for d (wait sleeps, and reports
// false if the history ended first): its clock stands still while its boot
// clock runs on, and its packets stop both ways, as for a laptop closed or
// a virtual machine suspended, so that the server waits out its leases
// unacknowledged and lets writes commit. The client's goroutines go on,
// unlike a sleeping machine's: its readers read from the cache
// meanwhile, and would serve stale values, by a clock that says the
// leases last, unless the client notices that the machine sleeps. On
// waking, the clock runs again from where it stood, and the packets held
// meanwhile arrive.
func suspendClient(lc *linClient, d time.Duration, wait func(time.Duration) bool) {
	lc.clk.suspend()
	lc.pc.Pause()
	wait(d)
	lc.clk.resume()
	lc.pc.Resume()
}
