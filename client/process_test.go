//go:build linux

package client_test

// A lease holder in a real, separate process that the test stops with
// SIGSTOP: the paused-client case of DESIGN.md §4.6 and §5 ("a holder that
// was paused past its lease"), with the real client library on both sides.

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/helperproc"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/server"
)

const (
	helperEnv    = "LEASED_E2E_HELPER"
	helperAddr   = "LEASED_E2E_ADDR"
	helperCA     = "LEASED_E2E_CA"
	helperKey    = "LEASED_E2E_KEY"
	helperHolder = "holder"
)

// TestHelperProcess is not a test: it is the body of the holder process
// started by TestE2EStoppedHolderProcess, which re-executes the test binary
// with only this test selected and helperEnv set. It dials the server with
// the real library, reads the key twice (so that it holds a lease, and the
// second read comes from its cache), prints "ready" and then waits until its
// stdin closes.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != helperHolder {
		t.Skip("helper process for TestE2EStoppedHolderProcess")
	}
	err := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		c, err := client.Dial(ctx, os.Getenv(helperAddr), client.Config{CAFile: os.Getenv(helperCA), Name: "holder-process", Logger: testkit.Discard()})
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Get(ctx, os.Getenv(helperKey)); err != nil {
			return err
		}
		it, err := c.Get(ctx, os.Getenv(helperKey)) // from the cache, under the lease
		if err != nil {
			return err
		}
		fmt.Printf("ready value=%s version=%d cached=%v\n", it.Value, it.Version, it.Cached)
		// The parent kills the process; if the parent dies instead, stdin
		// reaches EOF and the helper ends on its own.
		io.Copy(io.Discard, os.Stdin)
		return nil
	}()
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// startHolderProcess starts the holder process and waits for its "ready"
// line. It returns the process and the time the line arrived: the holder
// was granted its lease before then. The process is killed in t.Cleanup.
func startHolderProcess(t *testing.T, srv *testServer, key string) (*os.Process, time.Time) {
	t.Helper()
	p := helperproc.Start(t, "TestHelperProcess",
		helperEnv+"="+helperHolder,
		helperAddr+"="+srv.Addr().String(),
		helperCA+"="+srv.CA(),
		helperKey+"="+key)
	p.Name = "holder process"
	// Starting a race-instrumented binary, its QUIC handshake and one read
	// take well under a second; the bound only turns a broken helper into a
	// failure.
	l := p.Next(2 * testTimeout)
	if !strings.HasPrefix(l, "ready") || !strings.Contains(l, "cached=true") {
		t.Fatalf("holder process: %q", l)
	}
	t.Logf("holder process says %q", l)
	return p.Cmd.Process, time.Now()
}

func TestE2EStoppedHolderProcess(t *testing.T) {
	leaktest.Check(t)
	const term = time.Second
	srv := startServer(t, server.Config{LeaseTerm: term})
	b := dial(t, srv, client.Config{Name: "writer"})
	c := dial(t, srv, client.Config{Name: "bystander"})
	mustPut(t, b, "k", "old")

	st0 := srv.Stats()
	proc, ready := startHolderProcess(t, srv, "k")
	if st := srv.Stats(); st.Sessions != st0.Sessions+1 || st.Leases != st0.Leases+1 {
		t.Fatalf("with the holder process: %d sessions, %d leases; want %d and %d", st.Sessions, st.Leases, st0.Sessions+1, st0.Leases+1)
	}
	if err := proc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	clitest.WaitStopped(t, proc.Pid, testTimeout)
	// The holder's grant came before "ready" and after its request was
	// sent, which the test cannot see; that request took a round trip of
	// well under the slack, so count the grant from "ready" - slack.
	w := writeAgainstSilentHolder(t, srv, b, c, "k", "new", ready.Add(-slack), ready)
	if it := mustGet(t, c, "k"); string(it.Value) != "new" || it.Version != w.version {
		t.Fatalf("after the write: %s", fmtItem(it))
	}
	if err := proc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// The woken holder acknowledges a lease the server has already
	// expired; the server takes that in its stride.
	if _, took := timedPut(t, b, "k", "after"); took > term/4 {
		t.Errorf("a write after the holder woke took %v", took)
	}
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
}
