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

// freeTCPPort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// node is one leased process of a cluster.
type node struct {
	name, addr string
	proc       *clitest.Proc
}

// TestClusterOfThreeProcesses: three leased processes started with
// --name, --peer-listen, --initial-cluster and one --ca-dir form a cluster.
// Only the leader takes a session; the others refuse it and name the
// leader. When the leader is killed, another node leads and serves what the
// old one committed.
func TestClusterOfThreeProcesses(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	if r := (clitest.Cmd{}).Run(t, bins.Leased, "cert", "create-ca", "--dir", caDir); r.Code != 0 {
		t.Fatalf("create-ca: %d %s", r.Code, r.Stderr)
	}
	var nodes []*node
	var initial []string
	peers := map[string]string{}
	for i := 1; i <= 3; i++ {
		udp, err := clitest.FreeUDPPort()
		if err != nil {
			t.Fatal(err)
		}
		n := &node{name: fmt.Sprintf("n%d", i), addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(udp))}
		peers[n.name] = net.JoinHostPort("127.0.0.1", strconv.Itoa(freeTCPPort(t)))
		initial = append(initial, n.name+"="+peers[n.name])
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		n.proc = clitest.Cmd{}.Start(t, bins.Leased, "--listen", n.addr, "--data", filepath.Join(dir, n.name),
			"--name", n.name, "--peer-listen", peers[n.name], "--initial-cluster", strings.Join(initial, ","),
			"--ca-dir", caDir, "--lease-term", "1s")
	}
	for _, n := range nodes {
		wait.For(t, clitest.ReadyTimeout, n.name+" to start", func() bool {
			return strings.Contains(n.proc.Stderr.String(), "leased started")
		})
	}
	cfg := client.Config{CAFile: filepath.Join(caDir, "ca.pem"), Logger: slog.New(slog.DiscardHandler)}
	// leader waits until exactly one of the running nodes takes a session,
	// and checks that the others name it.
	leader := func(running []*node) (*node, *client.Client) {
		t.Helper()
		var lead *node
		var c *client.Client
		wait.For(t, 20*time.Second, "one node to lead and the others to name it", func() bool {
			lead, c = nil, nil
			var refusals []error
			for _, n := range running {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				cl, err := client.Dial(ctx, n.addr, cfg)
				cancel()
				if err == nil {
					if lead != nil {
						cl.Close()
						c.Close()
						t.Fatalf("both %s and %s took a session", lead.name, n.name)
					}
					lead, c = n, cl
					continue
				}
				refusals = append(refusals, err)
			}
			if lead == nil {
				return false
			}
			for _, err := range refusals {
				if !errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), lead.addr) {
					c.Close()
					return false // not every follower knows the leader yet
				}
			}
			return true
		})
		t.Cleanup(func() { c.Close() })
		return lead, c
	}
	first, c := leader(nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := c.Put(ctx, "k", []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// A client that stays connected to the leader through the crash.
	var all []string
	for _, n := range nodes {
		all = append(all, n.addr)
	}
	lost, back := make(chan time.Time, 1), make(chan time.Time, 1)
	lcfg := cfg
	lcfg.OnEvent = func(e client.Event) {
		ch := map[client.EventKind]chan time.Time{client.EventDisconnected: lost, client.EventReconnected: back}[e.Kind]
		if ch != nil {
			select {
			case ch <- time.Now():
			default:
			}
		}
	}
	lived, err := client.Dial(ctx, strings.Join(all, ","), lcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer lived.Close()
	first.proc.Signal(t, syscall.SIGKILL)
	killed := time.Now()
	first.proc.Wait(t, clitest.ExitTimeout)
	// No connection close comes from a killed process: the client notices
	// the silence within its idle timeout.
	noticed := wait.Chan(t, lost, 10*time.Second, "the client to notice the killed leader")
	if d := noticed.Sub(killed); d > client.DefaultIdleTimeout+2*time.Second {
		t.Errorf("the client noticed the killed leader after %v, want within its idle timeout %v", d, client.DefaultIdleTimeout)
	}
	// Writes fail at once while it is disconnected; it reconnects to the
	// new leader by itself.
	wait.Chan(t, back, 20*time.Second, "the client to reconnect to the new leader")
	lctx, lcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer lcancel()
	if _, err := lived.Put(lctx, "lived", []byte("x")); err != nil {
		t.Errorf("the connected client's write after the failover: %v", err)
	}
	t.Logf("the client noticed the killed leader after %v; wrote on the new leader %v after the kill", noticed.Sub(killed), time.Since(killed))
	var rest []*node
	for _, n := range nodes {
		if n != first {
			rest = append(rest, n)
		}
	}
	second, c2 := leader(rest)
	it, err := c2.Get(ctx, "k")
	if err != nil || string(it.Value) != "v1" || it.Version != v {
		t.Fatalf("after the leader %s was killed, %s reads %+v, %v", first.name, second.name, it, err)
	}
	if v2, err := c2.Put(ctx, "k", []byte("v2")); err != nil || v2 <= v {
		t.Fatalf("write on the new leader: %d, %v", v2, err)
	}
	for _, n := range rest {
		n.proc.Signal(t, syscall.SIGTERM)
		if code := n.proc.Wait(t, clitest.ExitTimeout); code != 0 {
			t.Errorf("%s exited with %d after SIGTERM\nstderr: %s", n.name, code, n.proc.Stderr.String())
		}
	}
}
