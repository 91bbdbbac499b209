// Package proccluster runs a cluster of real leased processes on 127.0.0.1
// for tests that crash, pause and partition its nodes: the fault tests of
// cmd/leased and the cluster linearizability tests of package client.
//
// Every node reaches every other through a faultproxy.Proxy of its own, one
// per ordered pair of nodes: node X dials node Y through the proxy X→Y
// (leased --peer-route Y=ADDR), so cutting every proxy from and to X cuts X
// off from its peers while its clients still reach it. Clients talk to the
// nodes directly.
//
// Every wait is bounded by a deadline, so a broken binary fails a test
// instead of hanging it.
package proccluster

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/faultproxy"
	"github.com/leased/leased/internal/testkit/wait"
)

// LeaderTimeout bounds the wait for one node to lead: an election takes
// well under a second, but a loaded machine may start processes slowly.
const LeaderTimeout = 30 * time.Second

// Config configures a Cluster.
type Config struct {
	// Bins are the leased and leasectl binaries (clitest.Build).
	Bins clitest.Binaries
	// Nodes is how many nodes to start, named n1, n2, ...; 0 means 3.
	Nodes int
	// Flags are given to every node, beside the ones the cluster sets:
	// --listen, --data, --name, --peer-listen, --initial-cluster, --ca-dir
	// and --peer-route. Such as --lease-term 1s.
	Flags []string
	// Direct makes the nodes dial each other at their --peer-listen
	// addresses, with the flags an operator gives and no --peer-route:
	// there are then no proxies, and Proxy, CutOff and Heal fail the test.
	Direct bool
	// Clients, if set, are the names of client certificates to issue from
	// the cluster CA (ClientCert); ClientConfig and Leader present the
	// first. For a cluster whose nodes require client certificates.
	Clients []string
}

// Cluster is a running cluster of leased processes. Its methods are for
// the test's goroutine; they fail the test on errors. The processes and
// the proxies end in the test's cleanup.
type Cluster struct {
	// CAFile is the cluster CA that clients trust.
	CAFile string
	// CADir is the folder of the cluster CA, with its key.
	CADir string
	// Nodes are the nodes in order: n1, n2, ...
	Nodes []*Node

	t       testing.TB
	bins    clitest.Binaries
	proxies map[[2]string]*faultproxy.Proxy // by [from, to]
	certs   string                          // the client certificates' folder
	clients []string                        // Config.Clients
}

// Node is one node of a Cluster.
type Node struct {
	// Name is its name in the cluster: n1, n2, ...
	Name string
	// Addr is its client address (UDP), and PeerAddr its raft address
	// (TCP) in the cluster's configuration, which only the proxies dial.
	Addr, PeerAddr string
	// Data is its data folder.
	Data string
	// Proc is its current process; Restart replaces it.
	Proc *clitest.Proc

	args   []string
	paused bool
}

// Args returns a copy of the flags the node is started with, for a test
// that runs its binary itself, as to see it refuse to start.
func (n *Node) Args() []string { return append([]string(nil), n.args...) }

// Running reports whether the node's process has not exited and is not
// paused.
func (n *Node) Running() bool {
	select {
	case <-n.Proc.Exited():
		return false
	default:
		return !n.paused
	}
}

// Start starts the nodes of a new cluster, with a CA of its own from
// leased cert create-ca, and waits until each has started (not until one
// leads: see Leader). The ports it gives the nodes were free when it chose
// them; if another process takes one before its node binds it, Start
// starts the whole cluster again on new ports, a few times.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	const attempts = 3
	for attempt := 1; ; attempt++ {
		c, taken := start(t, cfg)
		if c != nil {
			return c
		}
		if attempt == attempts {
			t.Fatalf("a port given to a node was taken before it bound it, %d times:\n%s", attempts, taken)
		}
		t.Logf("a port given to a node was taken before it bound it; starting the cluster again on new ports:\n%s", taken)
	}
}

// start is one attempt of Start. If a node could not bind a port it was
// given, it kills the nodes it started and returns nil and that node's
// error output.
func start(t testing.TB, cfg Config) (*Cluster, string) {
	t.Helper()
	n := cfg.Nodes
	if n == 0 {
		n = 3
	}
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	if r := (clitest.Cmd{}).Run(t, cfg.Bins.Leased, "cert", "create-ca", "--dir", caDir); r.Code != 0 {
		t.Fatalf("leased cert create-ca: status %d\n%s", r.Code, r.Stderr)
	}
	c := &Cluster{CAFile: filepath.Join(caDir, "ca.pem"), CADir: caDir, t: t, bins: cfg.Bins, proxies: map[[2]string]*faultproxy.Proxy{},
		certs: filepath.Join(dir, "clients"), clients: cfg.Clients}
	for _, name := range cfg.Clients {
		if r := (clitest.Cmd{}).Run(t, cfg.Bins.Leased, "cert", "create-client", "--ca-dir", caDir, "--name", name, "--out", c.certs); r.Code != 0 {
			t.Fatalf("leased cert create-client %s: status %d\n%s", name, r.Code, r.Stderr)
		}
	}
	// The proxies outlive the processes: this cleanup runs after theirs.
	t.Cleanup(func() {
		for _, p := range c.proxies {
			p.Close()
		}
	})
	// On failure, the nodes' logs tell what the cluster did.
	t.Cleanup(func() {
		if t.Failed() {
			for _, nd := range c.Nodes {
				if nd.Proc != nil {
					t.Logf("%s stderr:\n%s", nd.Name, tail(nd.Proc.Stderr.String(), 60))
				}
			}
		}
	})
	var initial []string
	for i := 1; i <= n; i++ {
		udp, err := clitest.FreeUDPPort()
		if err != nil {
			t.Fatal(err)
		}
		nd := &Node{Name: fmt.Sprintf("n%d", i), Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(udp)),
			PeerAddr: freeTCPAddr(t), Data: filepath.Join(dir, fmt.Sprintf("n%d", i))}
		c.Nodes = append(c.Nodes, nd)
		initial = append(initial, nd.Name+"="+nd.PeerAddr)
	}
	for _, from := range c.Nodes {
		for _, to := range c.Nodes {
			if from == to || cfg.Direct {
				continue
			}
			p, err := faultproxy.New(to.PeerAddr)
			if err != nil {
				t.Fatal(err)
			}
			c.proxies[[2]string{from.Name, to.Name}] = p
		}
	}
	for _, nd := range c.Nodes {
		nd.args = []string{"--listen", nd.Addr, "--data", nd.Data, "--name", nd.Name, "--peer-listen", nd.PeerAddr,
			"--initial-cluster", strings.Join(initial, ","), "--ca-dir", caDir}
		for _, to := range c.Nodes {
			if to != nd && !cfg.Direct {
				nd.args = append(nd.args, "--peer-route", to.Name+"="+c.Proxy(nd.Name, to.Name).Addr())
			}
		}
		nd.args = append(nd.args, cfg.Flags...)
		nd.Proc = clitest.Cmd{}.Start(t, cfg.Bins.Leased, nd.args...)
	}
	for _, nd := range c.Nodes {
		if taken := c.waitStarted(nd); taken {
			for _, other := range c.Nodes {
				select {
				case <-other.Proc.Exited():
				default:
					other.Proc.Signal(t, syscall.SIGKILL)
					other.Proc.Wait(t, clitest.ExitTimeout)
				}
			}
			for _, p := range c.proxies {
				p.Close()
			}
			return nil, nd.Name + ": " + nd.Proc.Stderr.String()
		}
	}
	return c, ""
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"..."}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// freeTCPAddr returns an address of 127.0.0.1 with a TCP port that was
// free a moment ago.
func freeTCPAddr(t testing.TB) string {
	t.Helper()
	port, err := clitest.FreeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}

// waitStarted waits until nd's process logs that it started.
// It reports whether the node exited because a port it was given was
// taken (only Start's first start of a node may see that); it fails the
// test if the node exited for another reason, or did not start in time.
func (c *Cluster) waitStarted(nd *Node) (taken bool) {
	c.t.Helper()
	deadline := time.Now().Add(clitest.ReadyTimeout)
	for !strings.Contains(nd.Proc.Stderr.String(), "leased started") {
		select {
		case <-nd.Proc.Exited():
			if strings.Contains(nd.Proc.Stderr.String(), "address already in use") {
				return true
			}
			c.t.Fatalf("%s exited before it started\nstderr: %s", nd.Name, nd.Proc.Stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s did not start within %v\nstderr: %s", nd.Name, clitest.ReadyTimeout, nd.Proc.Stderr.String())
		}
	}
	return false
}

// WritesHeldAtTakeover returns how long the node said, when it last came
// to lead, that it would hold writes for the leases of the leader before
// it (the writes_held_for of its "leading the cluster" log line), or "?".
func (n *Node) WritesHeldAtTakeover() string {
	held := "?"
	for _, line := range strings.Split(n.Proc.Stderr.String(), "\n") {
		if !strings.Contains(line, "leading the cluster") {
			continue
		}
		if _, v, ok := strings.Cut(line, "writes_held_for="); ok {
			held, _, _ = strings.Cut(v, " ")
		}
	}
	return held
}

// Node returns the node named name, and fails the test if there is none.
func (c *Cluster) Node(name string) *Node {
	c.t.Helper()
	for _, nd := range c.Nodes {
		if nd.Name == name {
			return nd
		}
	}
	c.t.Fatalf("no node %q", name)
	return nil
}

// Others returns every node but the ones named.
func (c *Cluster) Others(names ...string) []*Node {
	var out []*Node
	for _, nd := range c.Nodes {
		skip := false
		for _, n := range names {
			skip = skip || nd.Name == n
		}
		if !skip {
			out = append(out, nd)
		}
	}
	return out
}

// Endpoints returns the client addresses of the nodes, of every node if
// none is given, separated by commas, for client.Dial.
func (c *Cluster) Endpoints(nodes ...*Node) string {
	if len(nodes) == 0 {
		nodes = c.Nodes
	}
	addrs := make([]string, len(nodes))
	for i, nd := range nodes {
		addrs[i] = nd.Addr
	}
	return strings.Join(addrs, ",")
}

// ClientConfig returns a client.Config that trusts the cluster's CA,
// presents the first of Config.Clients' certificates if any, and discards
// the client's logs.
func (c *Cluster) ClientConfig() client.Config {
	cfg := client.Config{CAFile: c.CAFile, Logger: slog.New(slog.DiscardHandler)}
	if len(c.clients) > 0 {
		cfg.CertFile, cfg.KeyFile = c.ClientCert(c.clients[0])
	}
	return cfg
}

// ClientCert returns the certificate and key files of the client name,
// one of Config.Clients.
func (c *Cluster) ClientCert(name string) (cert, key string) {
	return filepath.Join(c.certs, name+".pem"), filepath.Join(c.certs, name+"-key.pem")
}

// Leader waits, at most LeaderTimeout, until exactly one of the nodes
// (every running node if none is given) serves clients itself, as its
// status says, and takes a client session, and returns it. (A client
// dialled to a follower follows the leader it names, so a session alone
// does not tell.) A node that is cut off may still believe it leads for
// a moment; Leader waits until it has stopped.
func (c *Cluster) Leader(among ...*Node) *Node {
	c.t.Helper()
	if len(among) == 0 {
		for _, nd := range c.Nodes {
			if nd.Running() {
				among = append(among, nd)
			}
		}
	}
	cfg := c.ClientConfig()
	var lead *Node
	wait.For(c.t, LeaderTimeout, "exactly one node to lead", func() bool {
		var leads []*Node
		for _, nd := range among {
			if c.serves(nd, cfg) {
				leads = append(leads, nd)
			}
		}
		if len(leads) != 1 {
			return false
		}
		lead = leads[0]
		return true
	})
	return lead
}

// serves reports whether nd says it serves clients, and takes a client
// session that stays with it.
func (c *Cluster) serves(nd *Node, cfg client.Config) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	adm, err := client.DialAdmin(ctx, nd.Addr, cfg)
	if err != nil {
		return false
	}
	st, err := adm.Status(ctx)
	adm.Close()
	if err != nil || !st.Serving {
		return false
	}
	cfg.MemberSyncInterval = -1
	cl, err := client.Dial(ctx, nd.Addr, cfg)
	if err != nil {
		return false
	}
	defer cl.Close()
	sess, ok := cl.Connection()
	return ok && sess.Addr == nd.Addr
}

// Proxy returns the proxy through which node from dials node to.
func (c *Cluster) Proxy(from, to string) *faultproxy.Proxy {
	c.t.Helper()
	p := c.proxies[[2]string{from, to}]
	if p == nil {
		c.t.Fatalf("no proxy from %q to %q", from, to)
	}
	return p
}

// CutOff cuts node name off from every peer, both ways: its raft
// connections drop and no new ones get through until Heal. Its clients
// still reach it.
func (c *Cluster) CutOff(name string) {
	c.t.Helper()
	for _, p := range c.links(name) {
		p.Cut()
	}
}

// Heal undoes CutOff: node name reaches its peers again, and they it.
func (c *Cluster) Heal(name string) {
	c.t.Helper()
	for _, p := range c.links(name) {
		p.Heal()
	}
}

// HealAll heals every link of the cluster.
func (c *Cluster) HealAll() {
	for _, p := range c.proxies {
		p.Heal()
	}
}

// links returns the proxies from and to node name.
func (c *Cluster) links(name string) []*faultproxy.Proxy {
	c.t.Helper()
	c.Node(name)
	var out []*faultproxy.Proxy
	for k, p := range c.proxies {
		if k[0] == name || k[1] == name {
			out = append(out, p)
		}
	}
	return out
}

// Kill kills node name with SIGKILL, as a crash would, and waits for it to
// be gone.
func (c *Cluster) Kill(name string) {
	c.t.Helper()
	nd := c.Node(name)
	select {
	case <-nd.Proc.Exited():
		c.t.Fatalf("%s exited before it was killed\nstderr: %s", name, nd.Proc.Stderr.String())
	default:
	}
	nd.Proc.Signal(c.t, syscall.SIGKILL)
	nd.Proc.Wait(c.t, clitest.ExitTimeout)
	nd.paused = false
}

// Stop stops node name gracefully with SIGTERM and checks that it exits
// with status 0.
func (c *Cluster) Stop(name string) {
	c.t.Helper()
	nd := c.Node(name)
	if nd.paused {
		c.Cont(name)
	}
	nd.Proc.Signal(c.t, syscall.SIGTERM)
	if code := nd.Proc.Wait(c.t, clitest.ExitTimeout); code != 0 {
		c.t.Fatalf("%s exited with status %d after SIGTERM\nstderr: %s", name, code, nd.Proc.Stderr.String())
	}
}

// Pause stops node name's process with SIGSTOP and waits until every
// thread of it has stopped: it neither answers nor sends, but its
// connections stay open.
func (c *Cluster) Pause(name string) {
	c.t.Helper()
	nd := c.Node(name)
	nd.Proc.Signal(c.t, syscall.SIGSTOP)
	clitest.WaitStopped(c.t, nd.Proc.Cmd.Process.Pid, 5*time.Second)
	nd.paused = true
}

// Cont resumes a paused node with SIGCONT.
func (c *Cluster) Cont(name string) {
	c.t.Helper()
	nd := c.Node(name)
	nd.Proc.Signal(c.t, syscall.SIGCONT)
	nd.paused = false
}

// Restart starts node name again, on the same addresses, data folder and
// flags, after it exited (Kill or Stop), and waits until it has started.
func (c *Cluster) Restart(name string) {
	c.t.Helper()
	nd := c.Node(name)
	select {
	case <-nd.Proc.Exited():
	default:
		c.t.Fatalf("restart of %s while it runs", name)
	}
	nd.Proc = clitest.Cmd{}.Start(c.t, c.bins.Leased, nd.args...)
	if c.waitStarted(nd) {
		c.t.Fatalf("%s could not bind its addresses again: another process took one while it was down\nstderr: %s", name, nd.Proc.Stderr.String())
	}
}
