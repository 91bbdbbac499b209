package testkit

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/internal/tlsfiles"
	"github.com/leased/leased/replica"
	"github.com/leased/leased/server"
)

// Cluster is a cluster of servers in this process, on 127.0.0.1: real QUIC
// for clients, raft over TCP with mutual TLS between the nodes, badger and
// the raft log on disk, and certificates from one CA for clients and peers
// alike. It runs on real time: raft's timers and the network cannot be
// faked here. Its fields are set by NewCluster and must not be changed.
type Cluster struct {
	// CAFile is the CA that clients trust.
	CAFile string
	// Nodes are the servers by name (n1, n2, ...); a stopped one is gone
	// from the map.
	Nodes map[string]*server.Server
	// Addrs are the client addresses of every node, stopped ones too.
	Addrs map[string]string

	t      testing.TB
	served map[string]chan error
	caDir  string
	cfg    server.Config
	// configs are the configurations each node started with, for Restart.
	configs map[string]server.Config
}

// RelaxedRaft returns a server.Cluster whose raft timeouts a loaded
// machine under -race keeps: there the defaults' 100 ms leader lease lapses
// now and then, and the lead would move in the middle of a test. Give it
// as Config.Cluster to NewCluster.
func RelaxedRaft() *server.Cluster {
	return &server.Cluster{Replica: replica.Config{HeartbeatTimeout: 500 * time.Millisecond,
		ElectionTimeout: 500 * time.Millisecond, LeaderLeaseTimeout: 250 * time.Millisecond}}
}

// NewCluster starts n nodes, each with cfg (Dir, Addr, TLSConfig and
// Cluster are set per node, but cfg.Cluster.Replica, if cfg.Cluster is
// set, tunes every node's raft; nil Logger means one that discards), and
// stops them in t.Cleanup.
func NewCluster(t testing.TB, n int, cfg server.Config) *Cluster {
	t.Helper()
	caDir := t.TempDir()
	if err := tlsfiles.CreateCA(caDir); err != nil {
		t.Fatal(err)
	}
	if cfg.Logger == nil {
		cfg.Logger = Discard()
	}
	c := &Cluster{CAFile: filepath.Join(caDir, tlsfiles.CAFileName), Nodes: map[string]*server.Server{},
		Addrs: map[string]string{}, t: t, served: map[string]chan error{}, caDir: caDir, cfg: cfg,
		configs: map[string]server.Config{}}
	lns := map[string]net.Listener{}
	var peers []server.Peer
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("n%d", i)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[name] = ln
		peers = append(peers, server.Peer{Name: name, Addr: ln.Addr().String()})
	}
	for _, p := range peers {
		c.start(p.Name, lns[p.Name], peers)
	}
	t.Cleanup(func() {
		for name := range c.Nodes {
			c.Stop(name)
		}
	})
	return c
}

// start starts node name on peer listener ln, with the initial cluster
// peers, or, if peers is nil, as a node that joins a running cluster.
func (c *Cluster) start(name string, ln net.Listener, peers []server.Peer) {
	t := c.t
	t.Helper()
	cert, key, err := tlsfiles.IssueNode(c.caDir, t.TempDir(), name, nil)
	if err != nil {
		t.Fatal(err)
	}
	peerSrv, peerCli, err := tlsfiles.PeerTLS(c.CAFile, cert, key)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	nc := c.cfg
	nc.Dir, nc.Addr = t.TempDir(), "127.0.0.1:0"
	nc.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pair}}
	nc.Cluster = &server.Cluster{Name: name, PeerAddr: ln.Addr().String(), PeerListener: ln, Peers: peers,
		PeerTLS: peerSrv, PeerClientTLS: peerCli, Join: peers == nil}
	if c.cfg.Cluster != nil {
		nc.Cluster.Replica = c.cfg.Cluster.Replica
	}
	c.run(name, nc)
}

// run starts node name with configuration nc.
func (c *Cluster) run(name string, nc server.Config) {
	c.t.Helper()
	srv, err := server.New(nc)
	if err != nil {
		c.t.Fatalf("node %s: %v", name, err)
	}
	c.configs[name] = nc
	c.Nodes[name], c.Addrs[name] = srv, srv.Addr().String()
	c.served[name] = make(chan error, 1)
	go func(srv *server.Server, done chan error) { done <- srv.Serve(context.Background()) }(srv, c.served[name])
}

// Restart starts node name again, after Stop, on its data folder and its
// peer address; its client address changes.
func (c *Cluster) Restart(name string) {
	c.t.Helper()
	nc, ok := c.configs[name]
	if !ok || c.Nodes[name] != nil {
		c.t.Fatalf("node %s: Restart wants a node that was started and stopped", name)
	}
	ln, err := net.Listen("tcp", nc.Cluster.PeerAddr)
	if err != nil {
		c.t.Fatalf("node %s: listen again on its peer address: %v", name, err)
	}
	cl := *nc.Cluster
	cl.PeerListener = ln
	nc.Cluster = &cl
	c.run(name, nc)
}

// StartJoining starts a new node name that joins the running cluster once
// its leader adds it (server.Cluster.Join), and returns its peer address,
// for leasectl member add (node.Node.AddMember). The cluster stops it in t.Cleanup.
func (c *Cluster) StartJoining(name string) string {
	c.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		c.t.Fatal(err)
	}
	c.start(name, ln, nil)
	return ln.Addr().String()
}

// Served waits, at most d, until node name's Serve returns of its own
// accord (for instance with server.ErrRemoved), and returns what it
// returned; the node is then closed and gone from Nodes. It fails the test
// if Serve does not return within d.
func (c *Cluster) Served(name string, d time.Duration) error {
	c.t.Helper()
	srv := c.Nodes[name]
	if srv == nil {
		c.t.Fatalf("node %s is not running", name)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-c.served[name]:
		delete(c.Nodes, name)
		srv.Close()
		return err
	case <-t.C:
		c.t.Fatalf("node %s: Serve did not return within %v", name, d)
		return nil
	}
}

// Endpoints is every node's client address, separated by commas, for
// client.Dial.
func (c *Cluster) Endpoints() string {
	var out []string
	for i := 1; i <= len(c.Addrs); i++ {
		out = append(out, c.Addrs[fmt.Sprintf("n%d", i)])
	}
	return strings.Join(out, ",")
}

// Leader waits until one running node leads and serves, and returns its
// name.
func (c *Cluster) Leader() string {
	c.t.Helper()
	var name string
	wait.For(c.t, 20*time.Second, "a node to lead", func() bool {
		for n, s := range c.Nodes {
			if s.Leads() {
				name = n
				return true
			}
		}
		return false
	})
	return name
}

// Stop closes node name, as a crash would for its clients (their
// connections end), and waits for it to be gone.
func (c *Cluster) Stop(name string) {
	c.t.Helper()
	srv := c.Nodes[name]
	if srv == nil {
		return
	}
	delete(c.Nodes, name)
	srv.Close()
	if err := <-c.served[name]; err != server.ErrServerClosed {
		c.t.Errorf("node %s: Serve returned %v, want ErrServerClosed", name, err)
	}
}
