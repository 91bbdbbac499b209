package main

import (
	"context"
	"errors"
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
	"github.com/leased/leased/internal/testkit/wait"
)

// procCluster is a cluster of real leased processes on 127.0.0.1, each with
// a data folder of its own, made with one --ca-dir and --initial-cluster.
// Any node can be killed and restarted on the same folder and ports. Tests
// that need real processes and failures (TestCrashCluster) use it from the
// test goroutine only.
type procCluster struct {
	caDir string
	nodes []*procNode
}

// procNode is one node of a procCluster.
type procNode struct {
	name string
	addr string // client address (UDP)
	data string
	args []string // every flag, the same at each start
	proc *clitest.Proc
}

// startProcCluster starts n nodes with extra flags beside the cluster's,
// and waits until each has started (not until one leads: see leader).
func startProcCluster(t *testing.T, n int, extra ...string) *procCluster {
	t.Helper()
	dir := t.TempDir()
	c := &procCluster{caDir: filepath.Join(dir, "ca")}
	if r := (clitest.Cmd{}).Run(t, bins.Leased, "cert", "create-ca", "--dir", c.caDir); r.Code != 0 {
		t.Fatalf("create-ca: %d %s", r.Code, r.Stderr)
	}
	peers := make([]string, n)
	var initial []string
	for i := range n {
		udp, err := clitest.FreeUDPPort()
		if err != nil {
			t.Fatal(err)
		}
		name := fmt.Sprintf("n%d", i+1)
		peers[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(freeTCPPort(t)))
		initial = append(initial, name+"="+peers[i])
		c.nodes = append(c.nodes, &procNode{
			name: name,
			addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(udp)),
			data: filepath.Join(dir, name),
		})
	}
	for i, nd := range c.nodes {
		nd.args = append([]string{"--listen", nd.addr, "--data", nd.data, "--name", nd.name,
			"--peer-listen", peers[i], "--initial-cluster", strings.Join(initial, ","), "--ca-dir", c.caDir}, extra...)
		nd.proc = clitest.Cmd{}.Start(t, bins.Leased, nd.args...)
	}
	for _, nd := range c.nodes {
		nd.waitStarted(t)
	}
	return c
}

// waitStarted waits, at most clitest.ReadyTimeout, for the node's start-up
// log line, and fails the test if the node exits first.
func (nd *procNode) waitStarted(t *testing.T) {
	t.Helper()
	wait.For(t, clitest.ReadyTimeout, nd.name+" to start", func() bool {
		select {
		case <-nd.proc.Exited():
			t.Fatalf("%s exited at start\nstderr: %s", nd.name, nd.proc.Stderr.String())
		default:
		}
		return strings.Contains(nd.proc.Stderr.String(), "leased started")
	})
}

// heldAtTakeover returns how long the node said, when it last came to
// lead, that it would hold writes for the leases of the leader before it
// (the writes_held_for of its "leading the cluster" log line), or "?".
func (nd *procNode) heldAtTakeover() string {
	held := "?"
	for _, line := range strings.Split(nd.proc.Stderr.String(), "\n") {
		if !strings.Contains(line, "leading the cluster") {
			continue
		}
		if _, v, ok := strings.Cut(line, "writes_held_for="); ok {
			held, _, _ = strings.Cut(v, " ")
		}
	}
	return held
}

// running reports whether the node's process has not exited.
func (nd *procNode) running() bool {
	select {
	case <-nd.proc.Exited():
		return false
	default:
		return true
	}
}

// kill SIGKILLs the node and waits for it to be gone.
func (nd *procNode) kill(t *testing.T) {
	t.Helper()
	if !nd.running() {
		t.Fatalf("%s exited before it was killed\nstderr: %s", nd.name, nd.proc.Stderr.String())
	}
	nd.proc.Signal(t, syscall.SIGKILL)
	nd.proc.Wait(t, clitest.ExitTimeout)
}

// restart starts the node again, with the same flags, on the same data
// folder and ports, and waits until it has started.
func (nd *procNode) restart(t *testing.T) {
	t.Helper()
	if nd.running() {
		t.Fatalf("restart of %s while it is still running", nd.name)
	}
	nd.proc = clitest.Cmd{}.Start(t, bins.Leased, nd.args...)
	nd.waitStarted(t)
}

// stop sends SIGTERM and requires a clean exit.
func (nd *procNode) stop(t *testing.T) {
	t.Helper()
	nd.proc.Signal(t, syscall.SIGTERM)
	if code := nd.proc.Wait(t, clitest.ExitTimeout); code != 0 {
		t.Errorf("%s exited with %d after SIGTERM\nstderr: %s", nd.name, code, nd.proc.Stderr.String())
	}
}

// endpoints is the client endpoint list of every node.
func (c *procCluster) endpoints() string {
	var all []string
	for _, nd := range c.nodes {
		all = append(all, nd.addr)
	}
	return strings.Join(all, ",")
}

// clientConfig trusts the cluster's CA and discards the client's logs.
func (c *procCluster) clientConfig() client.Config {
	return client.Config{CAFile: filepath.Join(c.caDir, "ca.pem"), Logger: slog.New(slog.DiscardHandler)}
}

// leader waits, at most within, until a running node takes a session, and
// returns it. A follower that names a running node sends the probe there
// first.
func (c *procCluster) leader(t *testing.T, within time.Duration) *procNode {
	t.Helper()
	byAddr := make(map[string]*procNode)
	for _, nd := range c.nodes {
		byAddr[nd.addr] = nd
	}
	cfg := c.clientConfig()
	cfg.Name = "leader-probe"
	var lead *procNode
	wait.For(t, within, "a running node to lead", func() bool {
		todo := append([]*procNode(nil), c.nodes...)
		tried := make(map[*procNode]bool)
		for len(todo) > 0 {
			nd := todo[0]
			todo = todo[1:]
			if tried[nd] || !nd.running() {
				continue
			}
			tried[nd] = true
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			cl, err := client.Dial(ctx, nd.addr, cfg)
			cancel()
			if err == nil {
				cl.Close()
				lead = nd
				return true
			}
			var se *client.ServerError
			if errors.As(err, &se) && byAddr[se.Leader] != nil {
				todo = append([]*procNode{byAddr[se.Leader]}, todo...)
			}
		}
		return false
	})
	return lead
}
