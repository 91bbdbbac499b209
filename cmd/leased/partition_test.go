package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/proccluster"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/store"
)

// partitionFlags are the flags of every node of the partition tests: a
// short lease term keeps the failover waits short.
var partitionFlags = []string{"--lease-term", "1s", "--epsilon", "50ms"}

// opTimeout bounds one client call of these tests. A write may wait out a
// failover: an election and the old leader's horizon, about 1.5 s here.
const opTimeout = 20 * time.Second

// dialCluster returns a client of the nodes given (every node if none),
// closed in the test's cleanup. It tries again while no node leads, for
// at most opTimeout.
func dialCluster(t *testing.T, c *proccluster.Cluster, nodes ...*proccluster.Node) *client.Client {
	t.Helper()
	var cl *client.Client
	var err error
	if !wait.Until(opTimeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cl, err = client.Dial(ctx, c.Endpoints(nodes...), c.ClientConfig())
		return err == nil
	}) {
		t.Fatalf("dial %s: %v", c.Endpoints(nodes...), err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// put writes key and returns its version, failing the test on an error.
// A write that fails with ErrUnavailable or ErrInternal, as when the lead
// moves while it commits (raft's LAN timeouts can move it on a loaded
// machine), is tried again until opTimeout: the tests compare values, and
// the version of the write that was acknowledged, which a second try of
// the same value does not undo.
func put(t *testing.T, cl *client.Client, key, value string) uint64 {
	t.Helper()
	deadline := time.Now().Add(opTimeout)
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		v, err := cl.Put(ctx, key, []byte(value))
		cancel()
		if err == nil {
			return v
		}
		retry := errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrInternal)
		if !retry || time.Now().After(deadline) {
			t.Fatalf("put %s: %v", key, err)
		}
		t.Logf("put %s: %v; trying again", key, err)
		time.Sleep(50 * time.Millisecond)
	}
}

// written is what the test wrote and the cluster acknowledged.
type written struct {
	value   string
	version uint64
}

// partitionFollower runs the common part of the follower tests: it cuts a
// follower off, calls during (which writes on the leader through cl), heals
// it, and makes the follower needed: it cuts the other follower off, so
// that the two writes after that commit only once the healed follower
// holds the whole log. It returns the follower, the leader, and the keys
// written, those two writes included.
func partitionFollower(t *testing.T, c *proccluster.Cluster, during func(cl *client.Client, lead, f *proccluster.Node, w map[string]written), healed func(f *proccluster.Node)) (f, lead *proccluster.Node, w map[string]written) {
	t.Helper()
	lead = c.Leader()
	cl := dialCluster(t, c)
	w = map[string]written{}
	w["before"] = written{"b", put(t, cl, "before", "b")}
	f = c.Others(lead.Name)[0]
	c.CutOff(f.Name)
	during(cl, lead, f, w)
	// The others went on trying to reach the follower, and the proxies
	// turned them away: the follower was cut off, not merely idle.
	refused := 0
	for _, nd := range c.Others(f.Name) {
		refused += c.Proxy(nd.Name, f.Name).Stats().Refused
	}
	if refused == 0 {
		t.Errorf("no connection to %s was refused while it was cut off", f.Name)
	}
	c.Heal(f.Name)
	if healed != nil {
		healed(f)
	}
	other := c.Others(lead.Name, f.Name)[0]
	c.CutOff(other.Name)
	// Two writes: the follower's ack of the second means it was told that
	// the first committed, so it applies the first before it stops.
	for _, k := range []string{"sentinel1", "sentinel2"} {
		w[k] = written{k, put(t, cl, k, k)}
	}
	t.Logf("follower %s cut off and healed; %s led; %d keys written", f.Name, lead.Name, len(w))
	cl.Close()
	// Stop every node gracefully, the follower first, and read their
	// databases.
	c.Stop(f.Name)
	for _, nd := range c.Others(f.Name, other.Name) {
		c.Stop(nd.Name)
	}
	c.Heal(other.Name)
	c.Stop(other.Name)
	return f, lead, w
}

// checkState opens the database of a stopped node and checks that it holds
// every key of w, sentinel2 aside, at the version the cluster acknowledged,
// and a revision at least sentinel1's. It logs the applied index.
func checkState(t *testing.T, nd *proccluster.Node, w map[string]written) {
	t.Helper()
	db, err := store.Open(filepath.Join(nd.Data, layout.DBDir), testkit.Discard())
	if err != nil {
		t.Fatalf("%s: open the database: %v", nd.Name, err)
	}
	defer db.Close()
	bad := 0
	for k, want := range w {
		if k == "sentinel2" {
			continue // the follower may have stopped before it heard that it committed
		}
		rec, err := db.Get([]byte(k))
		if err != nil || !rec.Found || string(rec.Value) != want.value || rec.Version != want.version {
			if bad++; bad <= 5 {
				t.Errorf("%s: %s = %q version %d found %v (%v), want %q version %d", nd.Name, k, rec.Value, rec.Version, rec.Found, err, want.value, want.version)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d keys wrong in all", nd.Name, bad)
	}
	st, err := db.State()
	if err != nil {
		t.Fatal(err)
	}
	if st.Revision < w["sentinel1"].version {
		t.Errorf("%s: revision %d, want at least %d", nd.Name, st.Revision, w["sentinel1"].version)
	}
	applied, err := db.AppliedIndex()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: applied index %d, revision %d", nd.Name, applied, st.Revision)
}

// TestPartitionedFollowerCatchesUpByLog: a follower cut off from both
// peers while the leader goes on writing, then healed, is caught up from
// the leader's log: once stopped, its database holds every value the
// cluster acknowledged, at the same version as the leader's.
func TestPartitionedFollowerCatchesUpByLog(t *testing.T) {
	t.Parallel()
	c := proccluster.Start(t, proccluster.Config{Bins: bins, Flags: partitionFlags})
	f, lead, w := partitionFollower(t, c, func(cl *client.Client, _, _ *proccluster.Node, w map[string]written) {
		for i := range 40 {
			k := fmt.Sprintf("k%02d", i)
			w[k] = written{fmt.Sprint("v", i), put(t, cl, k, fmt.Sprint("v", i))}
		}
	}, nil)
	if strings.Contains(f.Proc.Stderr.String(), "restored a snapshot") {
		t.Errorf("%s was caught up by a snapshot, not by the log", f.Name)
	}
	checkState(t, lead, w)
	checkState(t, f, w)
}

// snapshotFlags make a leader snapshot and compact its log after a few
// entries, and drop the compacted entries soon (small log segments), so
// that a lagging follower must be sent a snapshot.
var snapshotFlags = []string{"--snapshot-threshold", "16", "--snapshot-trailing-logs", "4",
	"--snapshot-interval", "50ms", "--wal-segment-size", "65536"}

// walSegmentBase matches the name of a segment of raft-wal's log, whose
// first number is the index of the segment's first entry.
var walSegmentBase = regexp.MustCompile(`^(\d{20})-[0-9a-f]{16}\.wal$`)

// TestPartitionedFollowerCatchesUpBySnapshot: a follower cut off while the
// leader writes so much that it compacts away the entries the follower
// lacks is caught up by a snapshot, which it restores (it logs that and
// keeps the snapshot), and goes on from there.
func TestPartitionedFollowerCatchesUpBySnapshot(t *testing.T) {
	t.Parallel()
	c := proccluster.Start(t, proccluster.Config{Bins: bins, Flags: append(append([]string(nil), partitionFlags...), snapshotFlags...)})
	value := strings.Repeat("x", 1024)
	f, lead, w := partitionFollower(t, c, func(cl *client.Client, _, f *proccluster.Node, w map[string]written) {
		// 200 entries of 1 KiB fill three segments of 64 KiB.
		for i := range 200 {
			k := fmt.Sprintf("k%03d", i)
			w[k] = written{value + k, put(t, cl, k, value+k)}
		}
		// Wait until the other two nodes (either may lead by now) have
		// dropped their first log segment, which holds every entry the
		// follower had: their snapshots run every 50 to 100 ms.
		wait.For(t, 20*time.Second, "the other nodes to drop the log entries the follower lacks", func() bool {
			for _, nd := range c.Others(f.Name) {
				segs, _ := filepath.Glob(filepath.Join(nd.Data, layout.RaftDir, "wal", "*.wal"))
				if len(segs) == 0 {
					return false
				}
				for _, s := range segs {
					if m := walSegmentBase.FindStringSubmatch(filepath.Base(s)); m != nil && strings.TrimLeft(m[1], "0") == "1" {
						return false
					}
				}
			}
			return true
		})
	}, func(f *proccluster.Node) {
		wait.For(t, 20*time.Second, f.Name+" to restore a snapshot from the leader", func() bool {
			return strings.Contains(f.Proc.Stderr.String(), "restored a snapshot")
		})
	})
	snaps, err := raft.NewFileSnapshotStore(filepath.Join(f.Data, layout.RaftDir), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if list, err := snaps.List(); err != nil || len(list) == 0 {
		t.Errorf("%s holds no snapshot (%v)", f.Name, err)
	}
	checkState(t, lead, w)
	checkState(t, f, w)
}

// writeXY writes x = v1 and y = v1 once a node of c leads.
func writeXY(t *testing.T, c *proccluster.Cluster) {
	t.Helper()
	c.Leader()
	cl := dialCluster(t, c)
	put(t, cl, "x", "v1")
	put(t, cl, "y", "v1")
	cl.Close()
}

// leaderClient returns the leader and a client, with cfg, of the leader
// alone, which has just read x = v1 and holds a read lease on it, and when
// that read was sent: the leader's lease on x runs out no sooner than a
// term after it. The lead may move before the read on a loaded machine;
// then it starts over with the new leader.
func leaderClient(t *testing.T, c *proccluster.Cluster, cfg client.Config) (*proccluster.Node, *client.Client, time.Time) {
	t.Helper()
	var lead *proccluster.Node
	var cl *client.Client
	var sent time.Time
	wait.For(t, opTimeout, "a client of the leader alone to read x", func() bool {
		lead = c.Leader()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		var err error
		if cl, err = client.Dial(ctx, lead.Addr, cfg); err != nil {
			return false
		}
		sent = time.Now()
		if it, err := cl.Get(ctx, "x"); err != nil || string(it.Value) != "v1" || it.Cached {
			t.Logf("read x on %s: %+v, %v", lead.Name, it, err)
			cl.Close()
			return false
		}
		return true
	})
	t.Cleanup(func() { cl.Close() })
	return lead, cl, sent
}

// read is one read of the client connected to the old leader alone.
type read struct {
	key        string
	start, end time.Time
	item       client.Item
	err        error
}

// TestCutOffLeaderServesNoStaleRead: a leader cut off from both peers is
// replaced by a new one, whose first write commits only after the lease
// the old leader granted on the key has run out. A client connected to the
// old leader alone never reads the old value after the new one committed:
// once its cached lease and the old leader's horizon have passed, its reads
// fail with ErrUnavailable.
func TestCutOffLeaderServesNoStaleRead(t *testing.T) {
	t.Parallel()
	c := proccluster.Start(t, proccluster.Config{Bins: bins, Flags: partitionFlags})
	writeXY(t, c)
	old, stuck, granted := leaderClient(t, c, c.ClientConfig())
	c.CutOff(old.Name)
	cut := time.Now()

	// The stuck client reads x and y (which it never cached) every 20 ms
	// until 3 s after the new value committed.
	var mu sync.Mutex // guards reads and stop
	var reads []read
	var stop time.Time
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for i := 0; ; i++ {
			mu.Lock()
			done := !stop.IsZero() && time.Now().After(stop)
			mu.Unlock()
			if done {
				return
			}
			key := []string{"x", "y"}[i%2]
			rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
			r := read{start: time.Now()}
			r.item, r.err = stuck.Get(rctx, key)
			r.end = time.Now()
			rcancel()
			if key == "y" {
				r.item.Version = 0 // y is not written again; only x's reads are judged
			}
			mu.Lock()
			reads = append(reads, r)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
		}
	}()

	rest := c.Others(old.Name)
	lead := c.Leader(rest...)
	elected := time.Now()
	fresh := dialCluster(t, c, rest...)
	v2 := put(t, fresh, "x", "v2")
	committed := time.Now()
	mu.Lock()
	stop = committed.Add(3 * time.Second)
	mu.Unlock()
	readers.Wait()

	t.Logf("cut off leader %s; %s leads %v after the cut; its first write committed %v after the cut (%v after the read lease on x was asked for)",
		old.Name, lead.Name, elected.Sub(cut), committed.Sub(cut), committed.Sub(granted))
	if m := regexp.MustCompile(`leading the cluster.*writes_held_for=(\S+)`).FindStringSubmatch(lead.Proc.Stderr.String()); m != nil {
		t.Logf("%s held writes for %s after it took the lead", lead.Name, m[1])
	}
	if committed.Before(granted.Add(time.Second)) {
		t.Errorf("the new leader committed x=v2 %v after the old leader was asked for a 1s lease on x: before the lease ran out", committed.Sub(granted))
	}
	if m := regexp.MustCompile(`time=(\S+) .*no longer leading the cluster`).FindStringSubmatch(old.Proc.Stderr.String()); m != nil {
		if at, err := time.Parse(time.RFC3339Nano, m[1]); err == nil {
			t.Logf("%s stepped down %v after the cut", old.Name, at.Sub(cut))
		}
	}

	// No read that began after x=v2 committed returned v1; reads of the
	// old leader's value end once its horizon has passed.
	var served, cached, unavailable, other int
	var firstUnavailable time.Duration
	for _, r := range reads {
		switch {
		case r.err == nil:
			served++
			if r.item.Cached {
				cached++
			}
			if r.start.After(committed) && string(r.item.Value) == "v1" && r.item.Version != 0 {
				t.Errorf("stale read: x = v1 (cached %v) read from %v to %v after the cut; x = v2 (version %d) committed %v after the cut",
					r.item.Cached, r.start.Sub(cut), r.end.Sub(cut), v2, committed.Sub(cut))
			}
		case errors.Is(r.err, client.ErrUnavailable):
			if unavailable == 0 {
				firstUnavailable = r.start.Sub(cut)
			}
			if unavailable < 3 {
				t.Logf("read from %v to %v after the cut: %v", r.start.Sub(cut), r.end.Sub(cut), r.err)
			}
			unavailable++
		default:
			other++
			t.Logf("read at %v after the cut: %v", r.start.Sub(cut), r.err)
		}
	}
	t.Logf("the stuck client's %d reads: %d served (%d from its cache), %d ErrUnavailable (the first began %v after the cut), %d other errors",
		len(reads), served, cached, unavailable, firstUnavailable, other)
	if unavailable == 0 {
		t.Errorf("the client connected to the cut-off leader never got ErrUnavailable")
	}
	last := reads[len(reads)-1]
	if !errors.Is(last.err, client.ErrUnavailable) {
		t.Errorf("the stuck client's last read, %v after x=v2 committed: %+v, %v; want ErrUnavailable", last.start.Sub(committed), last.item, last.err)
	}
	c.Heal(old.Name)
}

// TestPausedCutOffLeaderServesNoStaleRead: a leader that is paused
// (SIGSTOP) and cut off while a new leader is elected and commits x = v2
// wakes up past its horizon still believing, for a moment, that it leads.
// Reads that its client sent while it slept, of x whose lease the client
// no longer holds and of y that it never read, must not return x = v1:
// the old leader cannot persist a new horizon, so it answers
// ErrUnavailable, or it has stepped down and closed the session. The client
// waits longer than the pause before it gives up on a silent server.
func TestPausedCutOffLeaderServesNoStaleRead(t *testing.T) {
	t.Parallel()
	c := proccluster.Start(t, proccluster.Config{Bins: bins, Flags: partitionFlags})
	writeXY(t, c)
	cfg := c.ClientConfig()
	cfg.IdleTimeout = 30 * time.Second
	old, stuck, granted := leaderClient(t, c, cfg)
	c.Pause(old.Name)
	c.CutOff(old.Name)
	paused := time.Now()
	rest := c.Others(old.Name)
	lead := c.Leader(rest...)
	fresh := dialCluster(t, c, rest...)
	v2 := put(t, fresh, "x", "v2")
	committed := time.Now()
	t.Logf("paused and cut off leader %s; %s leads; x = v2 (version %d) committed %v after the pause, %v after the read lease on x was asked for",
		old.Name, lead.Name, v2, committed.Sub(paused), committed.Sub(granted))
	if committed.Before(granted.Add(time.Second)) {
		t.Errorf("x = v2 committed %v after a 1s lease on x was asked for: before the lease ran out", committed.Sub(granted))
	}
	results := make(chan read, 2)
	for _, k := range []string{"x", "y"} {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			r := read{key: k, start: time.Now()}
			r.item, r.err = stuck.Get(ctx, k)
			r.end = time.Now()
			results <- r
		}()
	}
	// Not lease time: a moment for the client to send both reads, so
	// that they wait in the paused server's socket and are the first
	// thing it handles when it wakes.
	time.Sleep(100 * time.Millisecond)
	c.Cont(old.Name)
	woke := time.Now()
	for range 2 {
		r := <-results
		t.Logf("read %s sent %v before the wake-up, answered %v after it: %+v, %v", r.key, woke.Sub(r.start), r.end.Sub(woke), r.item, r.err)
		switch {
		case r.err == nil && r.key == "x" && string(r.item.Value) == "v1":
			t.Errorf("stale read: x = v1 (cached %v) from the old leader %s, read after x = v2 committed on %s", r.item.Cached, old.Name, lead.Name)
		case r.err == nil && r.key == "x":
			t.Errorf("the cut-off old leader read x = %q: it cannot know v2", r.item.Value)
		case r.err != nil && !errors.Is(r.err, client.ErrUnavailable):
			t.Errorf("read %s: %v, want ErrUnavailable", r.key, r.err)
		}
	}
	c.Heal(old.Name)
}
