//go:build linux

package main

// Shutdown and restart of the real leased binary with lease holders in real,
// separate processes: this test binary, re-executed to run only
// TestHelperHolderProcess (as client/process_test.go does). A holder that
// must not answer its invalidations is stopped with SIGSTOP; the server is
// stopped with SIGTERM or killed with SIGKILL.
//
// These tests run on real time, since a killed process cannot be driven by
// a fake clock. Every wait is bounded by a deadline that says why.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/helperproc"
	"github.com/leased/leased/internal/testkit/wait"
)

const (
	// abandonBound bounds how long after SIGTERM a writer waiting for a
	// holder learns that its write was abandoned: the server abandons it at
	// once, so this is only scheduling and the network, far below the term.
	abandonBound = 5 * time.Second
	// secondSignalBound bounds how long leased takes to exit after the
	// second signal, which closes it at once.
	secondSignalBound = 3 * time.Second
)

// Environment of the holder process.
const (
	helperHolder  = "holder"
	holderAddrEnv = "LEASED_HOLDER_ADDR"
	holderCAEnv   = "LEASED_HOLDER_CA"
	holderKeyEnv  = "LEASED_HOLDER_KEY"
	holderIdleEnv = "LEASED_HOLDER_IDLE" // client.Config.IdleTimeout; empty: the default
)

// holderReport is one line the holder process prints on stdout, as JSON.
type holderReport struct {
	Event string `json:"event"` // ready, got, closed, error
	// ready: the wall-clock times (Unix ns) just before the holder sent its
	// first read and just after the answer came. The holder trusts the
	// answer for a term from Sent.
	Sent    int64  `json:"sent,omitempty"`
	Replied int64  `json:"replied,omitempty"`
	Found   bool   `json:"found,omitempty"`
	Value   string `json:"value,omitempty"`
	Version uint64 `json:"version,omitempty"`
	Cached  bool   `json:"cached,omitempty"`
	Err     string `json:"err,omitempty"`
}

// TestHelperHolderProcess is not a test: it is the body of the holder
// process that startHolder starts. It dials the server with the real
// client library, reads its key (and again, from its cache, to show that it
// holds a lease), reports "ready", and then obeys lines on stdin: "get"
// reads the key again and reports "got"; "close" closes the client, which
// relinquishes every lease, and reports "closed". It exits when stdin
// closes, and so when the parent test dies.
func TestHelperHolderProcess(t *testing.T) {
	if os.Getenv(clitest.HelperEnv) != helperHolder {
		t.Skip("helper process of the shutdown tests; it runs only when a test re-executes the binary")
	}
	os.Exit(runHolder(os.Stdin, os.Stdout, os.Stderr))
}

func runHolder(stdin io.Reader, stdout, stderr io.Writer) int {
	enc := json.NewEncoder(stdout)
	fail := func(err error) int {
		enc.Encode(holderReport{Event: "error", Err: err.Error()})
		return 1
	}
	cfg := client.Config{
		CAFile:            os.Getenv(holderCAEnv),
		Name:              "holder-process",
		MaxReconnectDelay: 100 * time.Millisecond,
		Logger:            slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if s := os.Getenv(holderIdleEnv); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return fail(err)
		}
		cfg.IdleTimeout = d
	}
	key := os.Getenv(holderKeyEnv)
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	c, err := client.Dial(ctx, os.Getenv(holderAddrEnv), cfg)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	sent := time.Now()
	it, err := c.Get(ctx, key)
	replied := time.Now()
	if err != nil {
		return fail(err)
	}
	again, err := c.Get(ctx, key) // from the cache, under the lease
	if err != nil {
		return fail(err)
	}
	enc.Encode(holderReport{Event: "ready", Sent: sent.UnixNano(), Replied: replied.UnixNano(),
		Found: it.Found, Value: string(it.Value), Version: it.Version, Cached: again.Cached})
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		switch sc.Text() {
		case "get":
			ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
			it, err := c.Get(ctx, key)
			cancel()
			if err != nil {
				enc.Encode(holderReport{Event: "error", Err: err.Error()})
				continue
			}
			enc.Encode(holderReport{Event: "got", Found: it.Found, Value: string(it.Value), Version: it.Version, Cached: it.Cached})
		case "close":
			c.Close()
			enc.Encode(holderReport{Event: "closed"})
		}
	}
	return 0
}

// holder is a lease holder in a process of its own.
type holder struct {
	proc   *helperproc.Proc
	stderr *clitest.SyncBuffer
	ready  holderReport
}

// startHolder starts a holder process that reads key from srv, and waits
// for it to report that it holds a lease. idle is its client's idle
// timeout (0: the default). The process is killed in t.Cleanup.
func startHolder(t *testing.T, srv *clitest.Server, key string, idle time.Duration) *holder {
	t.Helper()
	env := []string{
		clitest.HelperEnv + "=" + helperHolder,
		holderAddrEnv + "=" + srv.Addr,
		holderCAEnv + "=" + srv.CA,
		holderKeyEnv + "=" + key,
	}
	if idle > 0 {
		env = append(env, holderIdleEnv+"="+idle.String())
	}
	h := &holder{proc: helperproc.Command("TestHelperHolderProcess"), stderr: &clitest.SyncBuffer{}}
	h.proc.Name = "holder process"
	h.proc.Cmd.Env = clitest.Env(env...)
	h.proc.Cmd.Stderr = h.stderr
	// Registered first, so that it runs after the process is killed and
	// reaped.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("holder process stderr:\n%s", h.stderr.String())
		}
	})
	h.proc.Start(t)
	h.ready = h.next(t, "ready")
	if !h.ready.Cached {
		t.Fatalf("holder process: its second read did not come from its cache: %+v", h.ready)
	}
	return h
}

// next waits for the holder's next report, which must be of kind event.
// Starting a race-instrumented binary, its handshake and one read take well
// under a second; the bound only turns a broken helper into a failure.
func (h *holder) next(t *testing.T, event string) holderReport {
	t.Helper()
	timeout := time.NewTimer(2 * stepTimeout)
	defer timeout.Stop()
	for {
		select {
		case l, ok := <-h.proc.Lines():
			if !ok {
				t.Fatalf("holder process exited before it reported %q\nstderr: %s", event, h.stderr.String())
			}
			var r holderReport
			if json.Unmarshal([]byte(l), &r) != nil || r.Event == "" {
				continue
			}
			if r.Event != event {
				t.Fatalf("holder process reported %+v, want %q", r, event)
			}
			return r
		case <-timeout.C:
			t.Fatalf("holder process did not report %q within %v\nstderr: %s", event, 2*stepTimeout, h.stderr.String())
		}
	}
}

// do sends a command to the holder and waits for its report.
func (h *holder) do(t *testing.T, command, event string) holderReport {
	t.Helper()
	h.proc.Say(command)
	return h.next(t, event)
}

// sentAt and repliedAt are the wall-clock times around the holder's read.
func (h *holder) sentAt() time.Time    { return time.Unix(0, h.ready.Sent) }
func (h *holder) repliedAt() time.Time { return time.Unix(0, h.ready.Replied) }

// stop stops the holder with SIGSTOP, so that it answers nothing, and
// waits until every thread of it has stopped.
func (h *holder) stop(t *testing.T) {
	t.Helper()
	if err := h.proc.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	clitest.WaitStopped(t, h.proc.Cmd.Process.Pid, stepTimeout)
}

// resume lets a stopped holder run again.
func (h *holder) resume(t *testing.T) {
	t.Helper()
	if err := h.proc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
}

// dialServer dials srv with the real library; the client is closed in
// t.Cleanup.
func dialServer(t *testing.T, srv *clitest.Server, name string) *client.Client {
	t.Helper()
	cfg := srv.ClientConfig()
	cfg.Name = name
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr, cfg)
	if err != nil {
		t.Fatalf("dial %s: %v", srv.Addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustPut(t *testing.T, c *client.Client, key string, value []byte) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	ver, err := c.Put(ctx, key, value)
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return ver
}

// mustHave checks that key holds value at version ver.
func mustHave(t *testing.T, c *client.Client, key string, value []byte, ver uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	it, err := c.Get(ctx, key)
	switch {
	case err != nil:
		t.Errorf("get %s: %v", key, err)
	case !it.Found || !bytes.Equal(it.Value, value) || it.Version != ver:
		t.Errorf("%s: found=%v version %d, %d bytes %.40q; want version %d, %d bytes %.40q",
			key, it.Found, it.Version, len(it.Value), it.Value, ver, len(value), value)
	}
}

func mustStats(t *testing.T, c *client.Client) *client.Stats {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	st, err := c.ServerStats(ctx)
	if err != nil {
		t.Fatalf("stats: %v", err)
	}
	return st
}

// waitWriteWaiting waits until the server reports n writes waiting.
func waitWriteWaiting(t *testing.T, c *client.Client, n int) {
	t.Helper()
	wait.For(t, stepTimeout, fmt.Sprintf("%d writes waiting on the server", n), func() bool {
		return mustStats(t, c).WritesWaiting >= n
	})
}

// putResult is the outcome of a Put run in the background.
type putResult struct {
	ver  uint64
	err  error
	done time.Time
}

// putAsync starts c.Put(key, value) with a context bounded by within.
func putAsync(c *client.Client, key string, value []byte, within time.Duration) <-chan putResult {
	ch := make(chan putResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		ver, err := c.Put(ctx, key, value)
		ch <- putResult{ver, err, time.Now()}
	}()
	return ch
}

// TestSIGTERMAbandonsPendingWrite: a write that waits for a holder who does
// not answer is abandoned when leased gets SIGTERM. The writer learns so
// with ErrCanceled at once, not when the holder's term runs out; leased
// exits 0; and after a restart the key still holds its old value and
// version, while an earlier acknowledged write is there.
func TestSIGTERMAbandonsPendingWrite(t *testing.T) {
	t.Parallel()
	// The term is long, so that only the shutdown can end the wait within
	// the bounds below.
	const term = 30 * time.Second
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", term.String())
	w := dialServer(t, srv, "writer")
	earlier := mustPut(t, w, "earlier", []byte("acknowledged"))
	old := mustPut(t, w, "k", []byte("old"))

	h := startHolder(t, srv, "k", 0)
	h.stop(t)
	pending := putAsync(w, "k", []byte("new"), 2*term)
	waitWriteWaiting(t, w, 1)
	rev := mustStats(t, w).Revision

	srv.Signal(t, syscall.SIGTERM)
	signalled := time.Now()
	var r putResult
	select {
	case r = <-pending:
	case <-time.After(abandonBound):
		t.Fatalf("the pending write did not end within %v of SIGTERM (the holder's term is %v)", abandonBound, term)
	}
	if !errors.Is(r.err, client.ErrCanceled) {
		t.Fatalf("the pending write returned version %d, %v; want ErrCanceled", r.ver, r.err)
	}
	t.Logf("pending write abandoned %v after SIGTERM: %v", r.done.Sub(signalled), r.err)

	// The stopped holder cannot read the end of its session, so the
	// graceful shutdown waits for it; let it run, and it closes the session.
	h.resume(t)
	if code := srv.Wait(t, clitest.ExitTimeout); code != 0 {
		t.Fatalf("leased exited with status %d after SIGTERM\nstderr: %s", code, srv.Stderr.String())
	}
	t.Logf("leased exited %v after SIGTERM", time.Since(signalled))
	if strings.Contains(srv.Stderr.String(), "took too long") {
		t.Errorf("the graceful shutdown ran out of time:\n%s", srv.Stderr.String())
	}

	srv = srv.Restart(t)
	c := dialServer(t, srv, "checker")
	mustHave(t, c, "k", []byte("old"), old)
	mustHave(t, c, "earlier", []byte("acknowledged"), earlier)
	if got := mustStats(t, c).Revision; got != rev {
		t.Errorf("revision %d after the restart, %d before SIGTERM: the abandoned write changed it", got, rev)
	}
	srv.Stop(t)
}

// TestSecondSIGTERMKeepsAcknowledgedWrites: while a graceful shutdown waits
// for a client that keeps its session open (a stopped holder), a second
// SIGTERM makes leased exit at once, with status 0, and every write it
// acknowledged is there after a restart.
func TestSecondSIGTERMKeepsAcknowledgedWrites(t *testing.T) {
	t.Parallel()
	const (
		term            = 30 * time.Second
		shutdownTimeout = time.Minute
	)
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"),
		"--lease-term", term.String(), "--shutdown-timeout", shutdownTimeout.String())

	// 50 acknowledged writes from 5 clients at once, each rewriting 4 keys
	// of its own, so that the last write of each key is known. Every tenth
	// is large enough to go to badger's value log.
	type acked struct {
		value []byte
		ver   uint64
	}
	const writers, writesEach, keysEach = 5, 10, 4
	var mu sync.Mutex
	last := make(map[string]acked)
	var wg sync.WaitGroup
	for g := range writers {
		c := dialServer(t, srv, fmt.Sprintf("writer-%d", g))
		wg.Go(func() {
			for i := range writesEach {
				key := fmt.Sprintf("ack/%d/%d", g, i%keysEach)
				value := []byte(fmt.Sprintf("%s write %d;", key, i))
				if i%10 == 9 {
					value = bytes.Repeat(value, (100<<10)/len(value))
				}
				ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
				ver, err := c.Put(ctx, key, value)
				cancel()
				if err != nil {
					t.Errorf("put %s: %v", key, err)
					return
				}
				mu.Lock()
				last[key] = acked{value, ver}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// A holder that keeps its session open and does not answer, and a
	// write waiting for it.
	w := dialServer(t, srv, "writer")
	heldVer := mustPut(t, w, "held", []byte("old"))
	h := startHolder(t, srv, "held", 0)
	h.stop(t)
	pending := putAsync(w, "held", []byte("new"), 2*term)
	waitWriteWaiting(t, w, 1)

	srv.Signal(t, syscall.SIGTERM)
	wait.For(t, stepTimeout, "leased to log that it is shutting down", func() bool {
		return strings.Contains(srv.Stderr.String(), "shutting down")
	})
	select {
	case r := <-pending:
		if !errors.Is(r.err, client.ErrCanceled) {
			t.Errorf("the pending write returned version %d, %v; want ErrCanceled", r.ver, r.err)
		}
	case <-time.After(abandonBound):
		t.Fatalf("the pending write did not end within %v of SIGTERM", abandonBound)
	}
	select {
	case <-srv.Exited():
		t.Fatalf("leased exited although the stopped holder never closed its session\nstderr: %s", srv.Stderr.String())
	default:
	}

	srv.Signal(t, syscall.SIGTERM)
	second := time.Now()
	if code := srv.Wait(t, secondSignalBound); code != 0 {
		t.Fatalf("leased exited with status %d after a second SIGTERM\nstderr: %s", code, srv.Stderr.String())
	}
	t.Logf("leased exited %v after the second SIGTERM", time.Since(second))
	if !strings.Contains(srv.Stderr.String(), "second signal") {
		t.Errorf("leased did not log the second signal:\n%s", srv.Stderr.String())
	}

	srv = srv.Restart(t)
	c := dialServer(t, srv, "checker")
	if len(last) != writers*keysEach {
		t.Fatalf("%d keys written, want %d", len(last), writers*keysEach)
	}
	for key, a := range last {
		mustHave(t, c, key, a.value, a.ver)
	}
	mustHave(t, c, "held", []byte("old"), heldVer)
	srv.Stop(t)
}

// TestKillRestartHoldsWriteForLease: a holder in a separate process reads a
// key and so holds a read lease; leased is killed with SIGKILL right after
// the read returns, and restarted on the same port and data. Read leases
// are soft state, so the restarted server does not know of the lease; it
// persisted a lease horizon before it granted it (DESIGN §7), and a write
// must not commit before the holder could stop trusting its copy.
//
// The holder trusts its answer for a term from when it sent the read, so a
// write that commits before sent+term breaks linearizability. The server
// waits term+ε from the grant, which is later than the send and at most a
// one-way trip before the reply: so the test also asserts the write returns
// no earlier than (reply − grantAllowance) + term. A second client polls the
// key throughout and must not see the new value before then either.
//
// The wait is bounded too: the horizon is at most the longest lease (term +
// ε) plus the horizon step past the last grant, so the write returns within
// term + ε + step (+ slack) of the restart.
//
// Cases:
//   - holder live: the holder keeps its cache (and reconnects by itself).
//     After the write, its read must miss its cache and get the new value.
//   - shorter term after the restart: the same, with the restarted server
//     configured with a much shorter term, which must not shorten the wait.
//   - holder released: the holder closes its client (saying goodbye, which
//     relinquishes its leases) before the kill. The server did not persist
//     the release, so the write may still wait for the horizon: the test
//     asserts only the upper bound, and logs the wait.
//   - horizon passed: the server stays down until the horizon has passed;
//     then the write does not wait for any lease at all.
func TestKillRestartHoldsWriteForLease(t *testing.T) {
	t.Parallel()
	const (
		epsilon = 100 * time.Millisecond
		// grantAllowance covers the grant being earlier than the reply the
		// holder saw: a one-way trip on loopback and the server's
		// processing. It is below ε, which the server adds on top.
		grantAllowance = 50 * time.Millisecond
		// slack is scheduling, process start-up, fsync and timer lateness
		// on top of the longest wait the design allows.
		slack = time.Second
	)
	// horizonStep mirrors server.Config.HorizonStep's default (leased has no
	// flag for it): a quarter of the longest lease, at least 100 ms.
	horizonStep := func(term time.Duration) time.Duration {
		return max((term+epsilon)/4, 100*time.Millisecond)
	}
	for _, tc := range []struct {
		name          string
		term          time.Duration
		restartTerm   time.Duration // 0: term
		release       bool          // the holder relinquishes its lease before the kill
		horizonPassed bool          // restart only once the horizon has passed
	}{
		{name: "holder live", term: 2 * time.Second},
		{name: "shorter term after restart", term: 2 * time.Second, restartTerm: 200 * time.Millisecond},
		{name: "holder released", term: 2 * time.Second, release: true},
		{name: "horizon passed", term: 500 * time.Millisecond, horizonPassed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			flags := func(term time.Duration) []string {
				return []string{"--lease-term", term.String(), "--epsilon", epsilon.String()}
			}
			data := filepath.Join(t.TempDir(), "data")
			srv := clitest.StartServer(t, bins, "", data, flags(tc.term)...)
			w := dialServer(t, srv, "writer")
			old := mustPut(t, w, "k", []byte("old"))
			w.Close() // it holds a lease on k under its own write; give it up

			// The holder's client notices the killed server after a second
			// of silence, rather than the default 30 s, and reconnects.
			h := startHolder(t, srv, "k", time.Second)
			if !h.ready.Found || h.ready.Value != "old" || h.ready.Version != old {
				t.Fatalf("holder read %+v, want old at version %d", h.ready, old)
			}
			if tc.release {
				h.do(t, "close", "closed")
			}
			srv.Kill(t)
			killed := time.Now()
			if id, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
				// The restart counts the time it was down on this boot's
				// clock, by the boot record the server left beside its
				// horizon; after the horizon passed, it holds no write.
				rec, err := os.ReadFile(filepath.Join(data, "horizon.boot"))
				if err != nil || !strings.Contains(string(rec), strings.TrimSpace(string(id))) {
					t.Errorf("boot record %s (%v), want one of this boot, %s", rec, err, id)
				}
			}
			// The latest the persisted horizon can be: the last grant or
			// renewal, which came before the kill, plus a lease and a step.
			latestHorizon := killed.Add(tc.term + epsilon + horizonStep(tc.term))
			if tc.horizonPassed {
				// Stay down until the horizon has passed: a bounded wait,
				// of at most term + ε + step.
				time.Sleep(time.Until(latestHorizon) + 10*time.Millisecond)
			}
			restartTerm := tc.term
			if tc.restartTerm > 0 {
				restartTerm = tc.restartTerm
			}
			restarted := time.Now()
			srv = srv.RestartWith(t, flags(restartTerm)...)

			w = dialServer(t, srv, "writer after restart")
			held := mustStats(t, w).WritesAllowedIn
			// A bystander polls k until the write has returned, and notes
			// when it first saw the new value.
			watcher := dialServer(t, srv, "watcher")
			stopWatch := make(chan struct{})
			var firstSeen time.Time
			var watchErr error
			watched := make(chan struct{})
			go func() {
				defer close(watched)
				for {
					select {
					case <-stopWatch:
						return
					case <-time.After(5 * time.Millisecond):
					}
					ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
					it, err := watcher.Get(ctx, "k")
					cancel()
					at := time.Now()
					if err != nil {
						watchErr = err
						return
					}
					if string(it.Value) == "new" {
						firstSeen = at
						return
					}
				}
			}()

			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), tc.term+stepTimeout)
			var res client.WriteResult
			ver, err := w.Put(ctx, "k", []byte("new"), client.Result(&res))
			done := time.Now()
			cancel()
			close(stopWatch)
			<-watched
			if err != nil {
				t.Fatalf("put after the restart: %v", err)
			}
			if watchErr != nil {
				t.Errorf("watcher: %v", watchErr)
			}
			t.Logf("holder read sent %v before the kill, replied %v before; restart took %v; writes held %v at the restart; the write took %v (server: waited %v, %d holders), returned %v after the holder's sent+term",
				killed.Sub(h.sentAt()), killed.Sub(h.repliedAt()), start.Sub(restarted), held,
				done.Sub(start), res.Waited, res.Holders, done.Sub(h.sentAt().Add(tc.term)))

			if !tc.release && !tc.horizonPassed {
				// The holder's copy is trusted until sent+term: no earlier
				// commit. And the server waits term+ε from the grant.
				trusted := h.sentAt().Add(tc.term)
				granted := h.repliedAt().Add(-grantAllowance)
				required := trusted
				if granted.Add(tc.term).After(required) {
					required = granted.Add(tc.term)
				}
				if done.Before(required) {
					t.Errorf("the write returned %v before the holder's lease could have expired", required.Sub(done))
				}
				if !firstSeen.IsZero() && firstSeen.Before(required) {
					t.Errorf("the watcher saw the new value %v before the holder's lease could have expired", required.Sub(firstSeen))
				}
				// The holder's lease has run out: its read goes to the
				// server and sees the write.
				got := h.do(t, "get", "got")
				if !got.Found || got.Value != "new" || got.Version != ver || got.Cached {
					t.Errorf("the holder read %+v after the write; want new at version %d, not from its cache", got, ver)
				}
			}
			if bound := tc.term + epsilon + horizonStep(tc.term) + slack; done.Sub(restarted) > bound {
				t.Errorf("the write returned %v after the restart began; the horizon allows at most %v (term %v + ε %v + step %v + slack %v)",
					done.Sub(restarted), bound, tc.term, epsilon, horizonStep(tc.term), slack)
			}
			if tc.horizonPassed {
				if held > 0 {
					t.Errorf("the server held writes for %v after a restart past the horizon", held)
				}
				if res.Waited > slack {
					t.Errorf("the write waited %v after a restart past the horizon", res.Waited)
				}
			}
			mustHave(t, w, "k", []byte("new"), ver)
			srv.Stop(t)
		})
	}
}

// TestKillRestartResetsConnections: leased keeps its QUIC stateless reset
// key in the data folder, so after a crash and a restart on the same
// address a client with the default idle timeout (30 s) learns at once
// that its connection is gone, reconnects, and its next write succeeds
// within seconds, not after the idle timeout.
func TestKillRestartResetsConnections(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	srv := clitest.StartServer(t, bins, "", data, "--lease-term", "200ms")
	c := dialServer(t, srv, "writer") // the default client.Config idle timeout
	mustPut(t, c, "k", []byte("before"))
	srv.Kill(t)
	srv.Restart(t) // on the same address; stopped in t.Cleanup
	restarted := time.Now()
	// The first operation may fail fast with ErrUnavailable while the
	// client learns of the reset; it must then reconnect by itself.
	const within = 5 * time.Second // far below the 30 s idle timeout
	var ver uint64
	wait.For(t, within, "a put after the restart to succeed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		v, err := c.Put(ctx, "k", []byte("after"))
		ver = v
		return err == nil
	})
	t.Logf("first put after the restart succeeded %v after it, at version %d", time.Since(restarted), ver)
	mustHave(t, c, "k", []byte("after"), ver)
	key, err := os.ReadFile(filepath.Join(data, "stateless-reset.key"))
	if err != nil || len(key) != 32 {
		t.Fatalf("stateless reset key in the data folder: %d bytes, %v", len(key), err)
	}
}
