package main

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/server"
)

// TestValidateMembership checks --initial-cluster-state and the raft
// timeout flags, and that they reach server.Cluster.
func TestValidateMembership(t *testing.T) {
	good := func() *options {
		return &options{
			listen: server.DefaultAddr, data: server.DefaultDir,
			leaseTerm: time.Second, epsilon: time.Millisecond,
			maxValueSize: 1, maxSessions: 1, shutdownTimeout: time.Second,
			maxSessionsPerAddr: 1, maxLeasesPerSession: 1, maxLeases: 1, maxWriteLeases: 1, maxTotalInflightBytes: 1 << 20, maxFrameBytesPerAddr: 1 << 20, frameTimeout: time.Second, retryHandshakes: 1,
			ttlMax: time.Hour, maxTTLLeases: 1, ttlCheckpoint: time.Minute, ttlRevokeRate: 1,
			initialClusterState: clusterStateNew, raftTimeouts: defaultRaftTimeouts,
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*options)
		want   string // "" for valid
	}{
		{"defaults alone", func(o *options) {}, ""},
		{"existing node", func(o *options) { cluster(o); o.initialClusterState = clusterStateExisting }, ""},
		{"raft timeouts of a node", func(o *options) {
			cluster(o)
			o.raftTimeouts = raftTimeouts{heartbeat: time.Second, election: 2 * time.Second, leaderLease: 500 * time.Millisecond, commit: 50 * time.Millisecond}
		}, ""},
		{"lease equal to heartbeat", func(o *options) { cluster(o); o.raftTimeouts.leaderLease = o.raftTimeouts.heartbeat }, ""},
		{"unknown state", func(o *options) { cluster(o); o.initialClusterState = "old" }, "want new or existing"},
		{"existing alone", func(o *options) { o.initialClusterState = clusterStateExisting }, "give --peer-listen"},
		{"existing with initial cluster", func(o *options) {
			cluster(o)
			o.initialClusterState, o.initialCluster = clusterStateExisting, "n1=127.0.0.1:7501"
		}, "drop --initial-cluster"},
		{"timeouts without a cluster", func(o *options) { o.raftTimeouts.heartbeat = time.Second }, "for a node of a cluster"},
		{"zero heartbeat", func(o *options) { cluster(o); o.raftTimeouts.heartbeat = 0 }, "--heartbeat-timeout 0s: must be at least"},
		{"negative election", func(o *options) { cluster(o); o.raftTimeouts.election = -time.Second }, "--election-timeout"},
		{"tiny leader lease", func(o *options) { cluster(o); o.raftTimeouts.leaderLease = time.Millisecond }, "--leader-lease-timeout: Cluster.Replica.LeaderLeaseTimeout 1ms is outside 5ms..1m0s"},
		{"zero commit", func(o *options) { cluster(o); o.raftTimeouts.commit = 0 }, "--commit-timeout"},
		{"lease over heartbeat", func(o *options) {
			cluster(o)
			o.raftTimeouts.leaderLease = o.raftTimeouts.heartbeat + time.Millisecond
		}, "--leader-lease-timeout, --heartbeat-timeout: Cluster.Replica.LeaderLeaseTimeout 201ms is longer than HeartbeatTimeout 200ms"},
		{"election under heartbeat", func(o *options) {
			cluster(o)
			o.raftTimeouts.election = o.raftTimeouts.heartbeat - time.Millisecond
		}, "--election-timeout, --heartbeat-timeout: Cluster.Replica.ElectionTimeout 199ms is shorter than HeartbeatTimeout 200ms"},
		{"commit over heartbeat", func(o *options) {
			cluster(o)
			o.raftTimeouts.commit = o.raftTimeouts.heartbeat + time.Millisecond
		}, "--commit-timeout, --heartbeat-timeout: Cluster.Replica.CommitTimeout 201ms is longer than HeartbeatTimeout 200ms"},
		{"largest timeouts", func(o *options) {
			cluster(o)
			o.raftTimeouts = raftTimeouts{heartbeat: time.Minute, election: time.Minute, leaderLease: time.Minute, commit: time.Minute}
		}, ""},
		{"huge election", func(o *options) { cluster(o); o.raftTimeouts.election = 2562047 * time.Hour }, "--election-timeout: Cluster.Replica.ElectionTimeout 2562047h0m0s is outside 5ms..1m0s"},
		{"heartbeat over a minute", func(o *options) {
			cluster(o)
			o.raftTimeouts.heartbeat, o.raftTimeouts.election = time.Minute+time.Millisecond, 2*time.Minute
		}, "--heartbeat-timeout: Cluster.Replica.HeartbeatTimeout 1m0.001s is outside 5ms..1m0s"},
		{"huge leader lease", func(o *options) { cluster(o); o.raftTimeouts.leaderLease = time.Hour }, "--leader-lease-timeout: Cluster.Replica.LeaderLeaseTimeout 1h0m0s is outside 5ms..1m0s"},
		{"huge commit", func(o *options) { cluster(o); o.raftTimeouts.commit = time.Hour }, "--commit-timeout: Cluster.Replica.CommitTimeout 1h0m0s is outside 1ms..1m0s"},
	} {
		o := good()
		tc.change(o)
		err := o.validate()
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a usage error about %q", tc.name, err, tc.want)
		}
	}

	o := good()
	cluster(o)
	o.initialClusterState = clusterStateExisting
	o.raftTimeouts = raftTimeouts{heartbeat: time.Second, election: 2 * time.Second, leaderLease: 500 * time.Millisecond, commit: 50 * time.Millisecond}
	var cl server.Cluster
	o.applyMembership(&cl)
	r := cl.Replica
	if !cl.Join || r.HeartbeatTimeout != time.Second || r.ElectionTimeout != 2*time.Second || r.LeaderLeaseTimeout != 500*time.Millisecond || r.CommitTimeout != 50*time.Millisecond {
		t.Errorf("flags gave Join %v and %+v", cl.Join, r)
	}
}

// TestJoinAndRemoveProcesses: a node started with --initial-cluster-state
// existing waits until `leasectl member add` adds it, then follows; when
// `leasectl member remove` removes it, its leased exits with status 1 and
// says why.
func TestJoinAndRemoveProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	if r := (clitest.Cmd{}).Run(t, bins.Leased, "cert", "create-ca", "--dir", caDir); r.Code != 0 {
		t.Fatalf("create-ca: %d %s", r.Code, r.Stderr)
	}
	start := func(name string, extra ...string) (*clitest.Proc, string, string) {
		udp, err := clitest.FreeUDPPort()
		if err != nil {
			t.Fatal(err)
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(udp))
		port, err := clitest.FreeTCPPort()
		if err != nil {
			t.Fatal(err)
		}
		peer := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		p := clitest.Cmd{}.Start(t, bins.Leased, append([]string{"--listen", addr, "--data", filepath.Join(dir, name),
			"--name", name, "--peer-listen", peer, "--ca-dir", caDir, "--lease-term", "1s"}, extra...)...)
		wait.For(t, clitest.ReadyTimeout, name+" to start", func() bool {
			return strings.Contains(p.Stderr.String(), "leased started")
		})
		return p, addr, peer
	}
	p1, addr1, _ := start("n1")
	p2, addr2, peer2 := start("n2", "--initial-cluster-state", "existing")
	ctl := func(args ...string) clitest.Result {
		return clitest.Cmd{}.Run(t, bins.Leasectl, append([]string{"--endpoints", addr1 + "," + addr2,
			"--cacert", filepath.Join(caDir, "ca.pem"), "--timeout", "5s"}, args...)...)
	}
	// n1 leads the cluster of itself; n2 waits, in no cluster.
	wait.For(t, 20*time.Second, "n1 to lead", func() bool {
		return strings.Contains(p1.Stderr.String(), "leading the cluster")
	})
	if r := ctl("member", "add", "n2", peer2); r.Code != 0 {
		t.Fatalf("member add: %d\n%s", r.Code, r.Stderr)
	}
	wait.For(t, 20*time.Second, "n2 to follow n1", func() bool {
		r := ctl("-o", "json", "endpoint", "status")
		return r.Code == 0 && strings.Contains(r.Stdout, `"name":"n2","client_addr":"`+addr2+`","peer_addr":"`+peer2+`","role":"follower"`) &&
			strings.Contains(r.Stdout, `"leader":"n1","leader_addr":"`+addr1+`"`)
	})
	if r := ctl("member", "remove", "n2"); r.Code != 0 {
		t.Fatalf("member remove: %d\n%s", r.Code, r.Stderr)
	}
	if code := p2.Wait(t, clitest.ExitTimeout); code != exitError {
		t.Errorf("the removed node exited with %d, want %d", code, exitError)
	}
	if !strings.Contains(p2.Stderr.String(), "this node was removed from the cluster") {
		t.Errorf("the removed node's log does not say why it stopped:\n%s", p2.Stderr.String())
	}
	p1.Signal(t, syscall.SIGTERM)
	if code := p1.Wait(t, clitest.ExitTimeout); code != 0 {
		t.Errorf("n1 exited with %d after SIGTERM\nstderr: %s", code, p1.Stderr.String())
	}
}
