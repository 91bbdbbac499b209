//go:build linux

package client_test

// How a client notices that its server is gone (DESIGN §6, Config.IdleTimeout),
// against a real leased process: a client whose own process keeps every
// core busy keeps its session, and a server stopped with SIGSTOP is noticed
// within about a second.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/helperproc"
)

const (
	idleHelper       = "saturated-reader"
	idlePausedHelper = "paused-client"
	idleEnvIdle      = "LEASED_E2E_IDLE"
	idleEnvDuration  = "LEASED_E2E_DURATION"
	idleEnvWorkers   = "LEASED_E2E_WORKERS"
	// idleMeasureEnv, set, makes TestIdleMeasure run: the measurement of
	// false disconnects and detection time behind Config.IdleTimeout's
	// default (several minutes).
	idleMeasureEnv = "LEASED_IDLE_MEASURE"
)

// TestIdleHelperProcess is not a test: it is the body of the saturated
// client that runSaturated starts, which re-executes the test binary with
// only this test selected and helperEnv set. It dials the server with the
// IdleTimeout in idleEnvIdle, caches eight keys, and then reads them from
// its cache with idleEnvWorkers goroutines for idleEnvDuration, keeping
// every core of its process busy. It prints one line: "result" and the
// disconnects it saw, the reads done, the reads that failed, and the
// longest time a goroutine of the process waited for a core past a 10 ms
// tick (its starvation).
func TestIdleHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != idleHelper {
		t.Skip("helper process for the saturated-client tests")
	}
	err := func() error {
		idle, err := time.ParseDuration(os.Getenv(idleEnvIdle))
		if err != nil {
			return err
		}
		dur, err := time.ParseDuration(os.Getenv(idleEnvDuration))
		if err != nil {
			return err
		}
		workers, err := strconv.Atoi(os.Getenv(idleEnvWorkers))
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), dur+testTimeout)
		defer cancel()
		var disconnects atomic.Int64
		var whyMu sync.Mutex
		var why []string
		c, err := client.Dial(ctx, os.Getenv(helperAddr), client.Config{
			CAFile: os.Getenv(helperCA), Name: "saturated", IdleTimeout: idle, Logger: testkit.Discard(),
			OnEvent: func(e client.Event) {
				if e.Kind == client.EventDisconnected {
					disconnects.Add(1)
					whyMu.Lock()
					why = append(why, fmt.Sprint(e.Err))
					whyMu.Unlock()
				}
			},
		})
		if err != nil {
			return err
		}
		defer c.Close()
		keys := make([]string, 8)
		for i := range keys {
			keys[i] = fmt.Sprintf("hot/%d", i)
			if _, err := c.Put(ctx, keys[i], []byte("v")); err != nil {
				return err
			}
			if _, err := c.Get(ctx, keys[i]); err != nil {
				return err
			}
		}

		// The probe: a goroutine that asks to run every 10 ms and notes
		// how late it ran.
		var maxLag atomic.Int64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			tk := time.NewTicker(10 * time.Millisecond)
			defer tk.Stop()
			last := time.Now()
			for {
				select {
				case <-stop:
					return
				case now := <-tk.C:
					if lag := int64(time.Since(last) - 10*time.Millisecond); lag > maxLag.Load() {
						maxLag.Store(lag)
					}
					last = now
				}
			}
		})
		var gets, fails atomic.Int64
		deadline := time.Now().Add(dur)
		for w := range workers {
			wg.Go(func() {
				for i := w; time.Now().Before(deadline); i++ {
					if _, err := c.Get(ctx, keys[i%len(keys)]); err != nil {
						fails.Add(1)
					}
					gets.Add(1)
				}
			})
		}
		time.Sleep(time.Until(deadline)) // the run's length, not lease time
		close(stop)
		wg.Wait()
		whyMu.Lock()
		defer whyMu.Unlock()
		fmt.Printf("result disconnects=%d gets=%d fails=%d maxlag=%v why=%q\n",
			disconnects.Load(), gets.Load(), fails.Load(), time.Duration(maxLag.Load()).Round(time.Millisecond), why)
		return nil
	}()
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// deafFor is how long the paused client drops the server's packets before
// it is stopped: longer than QUIC's keep-alive interval (IdleTimeout/4,
// and IdleTimeout/3 before the watchdog), so that its PING is out
// unanswered, and short enough that the silence the watchdog counts
// before the stop, plus at most a late look, stays under IdleTimeout.
const deafFor = 400 * time.Millisecond

// TestIdlePausedHelperProcess is not a test: it is the body of the client
// that TestIdlePausedClientKeepsSession stops with SIGSTOP. It dials the
// server with the default IdleTimeout and prints "ready" and its session's
// id. Then it obeys its stdin, a line at a time, and answers each with a
// line: "busy" starts writing a key over and over (so that a pause catches
// a write in flight: the client has sent since it last heard the server);
// "idle" stops those writes and waits for the last to end (so that nothing
// is in flight, and the server has nothing to send); "deaf" does too, then
// drops every packet from the server (deafConn) for deafFor, so that the
// client's keep-alive PING is unanswered when it stops, and its answer,
// lost, is not waiting in the socket when it wakes; "woken" hears again,
// writes another
// key (a round trip to the server) and prints "result", the disconnects it
// saw and its session's id.
func TestIdlePausedHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != idlePausedHelper {
		t.Skip("helper process for TestIdlePausedClientKeepsSession")
	}
	err := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 4*testTimeout)
		defer cancel()
		var disconnects atomic.Int64
		udp, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		pc := &deafConn{PacketConn: udp}
		defer pc.Close()
		c, err := client.Dial(ctx, os.Getenv(helperAddr), client.Config{
			CAFile: os.Getenv(helperCA), Name: "paused", Logger: testkit.Discard(), PacketConn: pc,
			OnEvent: func(e client.Event) {
				if e.Kind == client.EventDisconnected {
					disconnects.Add(1)
				}
			},
		})
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Put(ctx, "paused/before", []byte("v")); err != nil {
			return err
		}
		s, _ := c.Connection()
		fmt.Printf("ready session=%d\n", s.ID)
		var (
			stop   context.CancelFunc = func() {}
			writes chan error
		)
		idle := func() error {
			stop()
			if writes == nil {
				return nil
			}
			err := <-writes
			writes = nil
			return err
		}
		defer idle()
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			switch sc.Text() {
			case "busy":
				if err := idle(); err != nil {
					return err
				}
				wctx, cancelWrites := context.WithCancel(ctx)
				stop = cancelWrites
				writes = make(chan error, 1)
				go func(writes chan<- error) {
					for wctx.Err() == nil {
						if _, err := c.Put(wctx, "paused/loop", []byte("v")); err != nil && wctx.Err() == nil {
							writes <- err
							return
						}
					}
					writes <- nil
				}(writes)
				fmt.Println("busy")
			case "idle":
				if err := idle(); err != nil {
					return err
				}
				fmt.Println("idle")
			case "deaf":
				if err := idle(); err != nil {
					return err
				}
				pc.deaf.Store(true)
				time.Sleep(deafFor)
				fmt.Println("deaf")
			case "woken":
				pc.deaf.Store(false)
				if _, err := c.Put(ctx, "paused/after", []byte("v")); err != nil {
					return err
				}
				s, _ = c.Connection()
				fmt.Printf("result disconnects=%d session=%d\n", disconnects.Load(), s.ID)
			default:
				return fmt.Errorf("unknown command %q", sc.Text())
			}
		}
		return idle()
	}()
	if err != nil {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// TestIdlePausedClientKeepsSession: a client whose process is stopped,
// six times, for three times its IdleTimeout (SIGSTOP, as a long GC
// pause, a debugger or a starved virtual machine would) keeps its session
// when it wakes: it does not count the time it did not run as the
// server's silence, and the server, to which it offers a longer QUIC idle
// timeout as a backstop, kept the session meanwhile.
//
// Two of the pauses find the client deaf, its keep-alive unanswered: QUIC's
// idle timer alone, which counts wall time, then drops the session as soon
// as the process wakes, every time (before the watchdog, QUIC's idle
// timeout was the IdleTimeout, and the test failed so); the watchdog counts
// the time before the stop and at most a late look of the stop itself, and
// the client hears the server again before the silence reaches its
// IdleTimeout.
//
// Two of the pauses find the client idle: nothing in flight, so no packet
// from the server waits in its socket when it wakes, and a detection that
// counts wall time (QUIC's idle timer alone, as before the watchdog) drops
// the session at once, every time but when a keep-alive's
// acknowledgement happened to arrive in the moment before the stop. The
// other two catch a write in flight, whose answer waits in the socket.
func TestIdlePausedClientKeepsSession(t *testing.T) {
	srv := clitest.StartServer(t, linBinaries(t), t.TempDir(), t.TempDir())
	// The whole exchange, pauses included, is bounded by one deadline.
	deadline := time.Now().Add(4 * testTimeout)
	p := helperproc.Start(t, "TestIdlePausedHelperProcess", helperEnv+"="+idlePausedHelper, helperAddr+"="+srv.Addr, helperCA+"="+srv.CA)
	p.Name = "paused client"
	next := func() string {
		t.Helper()
		return p.Next(time.Until(deadline))
	}
	var before int64
	if l := next(); !strings.HasPrefix(l, "ready") {
		t.Fatalf("paused client: %q", l)
	} else if _, err := fmt.Sscanf(l, "ready session=%d", &before); err != nil {
		t.Fatalf("paused client: %q: %v", l, err)
	}
	for i, mode := range []string{"deaf", "idle", "busy", "deaf", "idle", "busy"} {
		p.Say(mode)
		if l := next(); l != mode {
			t.Fatalf("paused client: %q, want %q", l, mode)
		}
		if err := p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		clitest.WaitStopped(t, p.Cmd.Process.Pid, testTimeout)
		// The pause itself: real time, in which the client's process
		// does not run while the server's does.
		time.Sleep(3 * client.DefaultIdleTimeout)
		if err := p.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		p.Say("woken")
		var disconnects, after int64
		l := next()
		if _, err := fmt.Sscanf(l, "result disconnects=%d session=%d", &disconnects, &after); err != nil {
			t.Fatalf("paused client: %q: %v", l, err)
		}
		t.Logf("pause %d (%s): paused client: %s (session %d before)", i, mode, l, before)
		if disconnects != 0 || after != before {
			t.Fatalf("after pause %d (%s) of %v the client saw %d disconnects and has session %d, was %d; want its session kept",
				i, mode, 3*client.DefaultIdleTimeout, disconnects, after, before)
		}
	}
	p.CloseStdin()
}

// TestIdleSaturatedClientKeepsSession: a client whose process keeps both
// cores busy with 64 goroutines reading from its cache keeps its session
// for the whole run. (With QUIC's idle timer as the detection, a run of 20 s
// on a loaded 2-core machine lost it once or twice: see TestIdleMeasure.)
//
// It keeps both cores busy for 10 s, which would starve the clusters of the
// tests that run beside it in the suite: like TestIdleMeasure, it runs only
// with LEASED_IDLE_MEASURE set.
func TestIdleSaturatedClientKeepsSession(t *testing.T) {
	if os.Getenv(idleMeasureEnv) == "" {
		t.Skip("keeps both cores busy: set " + idleMeasureEnv + " (any duration) to run it")
	}
	srv := clitest.StartServer(t, linBinaries(t), t.TempDir(), t.TempDir())
	r := runSaturated(t, srv, client.DefaultIdleTimeout, 10*time.Second, 64)
	t.Logf("saturated client: %s", r.line)
	if r.disconnects != 0 || r.fails != 0 {
		t.Errorf("a saturated client lost its session %d times (%d reads failed): %s", r.disconnects, r.fails, r.line)
	}
}

// TestIdleStoppedServerNoticed: a client notices within about its
// IdleTimeout that its server stopped (SIGSTOP: the process is there, its
// socket open, and it answers nothing), although QUIC's idle timeout of
// the session is ten times longer.
func TestIdleStoppedServerNoticed(t *testing.T) {
	srv := clitest.StartServer(t, linBinaries(t), t.TempDir(), t.TempDir())
	d := detectStopped(t, srv, client.DefaultIdleTimeout)
	t.Logf("the stopped server was noticed after %v", d)
	// About a second; the bound leaves room for a loaded machine, and is
	// far below the backstop.
	if limit := 3 * client.DefaultIdleTimeout; d > limit {
		t.Errorf("the stopped server was noticed after %v; want within %v", d, limit)
	}
}

// saturatedRun is what one run of the saturated client reports.
type saturatedRun struct {
	disconnects, gets, fails int
	maxLag                   time.Duration
	line                     string
}

// runSaturated runs the saturated client (TestIdleHelperProcess) against
// srv for dur with the given workers and idle timeout, and returns its
// report.
func runSaturated(t *testing.T, srv *clitest.Server, idle, dur time.Duration, workers int) saturatedRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dur+4*testTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestIdleHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(),
		helperEnv+"="+idleHelper,
		helperAddr+"="+srv.Addr,
		helperCA+"="+srv.CA,
		idleEnvIdle+"="+idle.String(),
		idleEnvDuration+"="+dur.String(),
		idleEnvWorkers+"="+strconv.Itoa(workers))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	var line string
	for l := range strings.Lines(string(out)) {
		if strings.HasPrefix(l, "result") || strings.HasPrefix(l, "error") {
			line = strings.TrimSpace(l)
		}
	}
	if err != nil || !strings.HasPrefix(line, "result") {
		t.Fatalf("saturated client: %v: %q", err, out)
	}
	var r saturatedRun
	r.line = line
	var lag string
	if _, err := fmt.Sscanf(line, "result disconnects=%d gets=%d fails=%d maxlag=%s", &r.disconnects, &r.gets, &r.fails, &lag); err != nil {
		t.Fatalf("saturated client's report %q: %v", line, err)
	}
	if r.maxLag, err = time.ParseDuration(lag); err != nil {
		t.Fatalf("saturated client's report %q: %v", line, err)
	}
	return r
}

// detectStopped dials srv with the idle timeout idle, stops the server
// with SIGSTOP, and returns how long the client took to report the
// connection lost. It wakes the server again before it returns.
func detectStopped(t *testing.T, srv *clitest.Server, idle time.Duration) time.Duration {
	t.Helper()
	ev := newEvents()
	cfg := srv.ClientConfig()
	cfg.Name, cfg.IdleTimeout, cfg.OnEvent = "detector", idle, ev.on
	c := dialAddr(t, srv.Addr, srv.CA, cfg)
	defer c.Close()
	mustGet(t, c, "detect")
	srv.Signal(t, syscall.SIGSTOP)
	clitest.WaitStopped(t, srv.Cmd.Process.Pid, testTimeout)
	stopped := time.Now()
	defer srv.Signal(t, syscall.SIGCONT)
	// A real stopped process and a real network: the wait is bounded
	// only to turn a client that never notices into a failure.
	ev.wait(t, client.EventDisconnected, 4*idle+4*testTimeout, nil)
	return time.Since(stopped)
}

// TestIdleMeasure measures, on this machine, the false disconnects of a
// saturated client and the time a client takes to notice a stopped server,
// at several idle timeouts. It runs only with LEASED_IDLE_MEASURE set (to
// the run's length, such as 20s; 1 means 20s): it takes minutes. Build the
// test binary without -race to measure what a program sees.
func TestIdleMeasure(t *testing.T) {
	v := os.Getenv(idleMeasureEnv)
	if v == "" {
		t.Skip("set " + idleMeasureEnv + " to measure (minutes)")
	}
	dur, err := time.ParseDuration(v)
	if err != nil {
		dur = 20 * time.Second
	}
	reps := 3
	if n, err := strconv.Atoi(os.Getenv("LEASED_IDLE_REPS")); err == nil {
		reps = n
	}
	idles := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 5 * time.Second}
	if s := os.Getenv("LEASED_IDLE_LIST"); s != "" {
		idles = nil
		for f := range strings.SplitSeq(s, ",") {
			d, err := time.ParseDuration(f)
			if err != nil {
				t.Fatal(err)
			}
			idles = append(idles, d)
		}
	}
	srv := clitest.StartServer(t, linBinaries(t), t.TempDir(), t.TempDir())
	for _, idle := range idles {
		var drops, detects []time.Duration
		for range reps {
			r := runSaturated(t, srv, idle, dur, 64)
			t.Logf("idle %v: %s", idle, r.line)
			drops = append(drops, time.Duration(r.disconnects))
			d := detectStopped(t, srv, idle)
			t.Logf("idle %v: stopped server noticed after %v", idle, d.Round(time.Millisecond))
			detects = append(detects, d)
		}
		fmt.Fprintf(os.Stderr, "MEASURE idle=%v disconnects=%v (median %d) detection=%v (median %v)\n",
			idle, ints(drops), median(drops), rounded(detects), median(detects).Round(time.Millisecond))
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func ints(ds []time.Duration) []int64 {
	var out []int64
	for _, d := range ds {
		out = append(out, int64(d))
	}
	return out
}

func rounded(ds []time.Duration) []time.Duration {
	var out []time.Duration
	for _, d := range ds {
		out = append(out, d.Round(time.Millisecond))
	}
	return out
}
