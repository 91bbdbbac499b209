package client_test

// Helpers of the end-to-end tests: an in-process server on a real QUIC
// socket with verified TLS and badger on disk, clients of the real library,
// and a raw protocol-level lease holder that never answers its notices.
//
// These tests run on real time: the network, badger's fsync and a stopped
// process cannot be driven by a fake clock. Terms are therefore short (about
// a second or less) and every wait is bounded by a deadline, so a bug shows
// as a failure with a message and never as a hung test.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

const (
	// testTimeout bounds any single step of a test that talks to the
	// server: dialling, a read, a write that is not expected to wait for a
	// lease. It is generous because the race detector on a loaded 2-core
	// machine can stall goroutines for a long time; a healthy step takes
	// milliseconds. It is testkit's StepTimeout, which is fake time in a
	// synctest bubble.
	testTimeout = testkit.StepTimeout
	// slack is the allowance for scheduling, the network, fsync and timer
	// lateness on top of a lease wait that the protocol promises. It is wide
	// because the machine is noisy; the figures logged by the tests show the
	// real overhead.
	slack = 250 * time.Millisecond
)

// testServer is an in-process server started by startServer.
type testServer struct {
	*server.Server
	Dir  string
	Cfg  server.Config // as given, with Dir, Addr and Logger filled in
	stop func()        // closes the server and waits for Serve to return
}

// Close closes the server and waits for Serve to return. It may be called
// more than once.
func (s *testServer) Close() { s.stop() }

// CA returns the path of the CA file clients trust.
func (s *testServer) CA() string { return server.CAPath(s.Dir) }

// startServer starts a server with cfg; zero Dir means a new temporary
// folder and zero Addr an ephemeral port on 127.0.0.1. The server is closed
// in t.Cleanup.
func startServer(t testing.TB, cfg server.Config) *testServer {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = testkit.Discard()
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			if err := srv.Close(); err != nil {
				t.Errorf("server Close: %v", err)
			}
			// Serve returns as soon as the listener is closed; bound the
			// wait so that a stuck accept loop fails the test.
			select {
			case err := <-served:
				if err != server.ErrServerClosed {
					t.Errorf("Serve returned %v, want ErrServerClosed", err)
				}
			case <-time.After(testTimeout):
				t.Errorf("Serve did not return within %v of Close", testTimeout)
			}
		})
	}
	t.Cleanup(stop)
	return &testServer{Server: srv, Dir: cfg.Dir, Cfg: cfg, stop: stop}
}

// dial connects a client of the real library to srv, trusting srv's CA. It
// is closed in t.Cleanup.
func dial(t testing.TB, srv *testServer, cfg client.Config) *client.Client {
	t.Helper()
	return dialAddr(t, srv.Addr().String(), srv.CA(), cfg)
}

func dialAddr(t testing.TB, addr, caFile string, cfg client.Config) *client.Client {
	t.Helper()
	if cfg.CAFile == "" && cfg.TLSConfig == nil {
		cfg.CAFile = caFile
	}
	if cfg.Logger == nil {
		cfg.Logger = testkit.Discard()
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := client.Dial(ctx, addr, cfg)
	if err != nil {
		t.Fatalf("client.Dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stepCtx returns a context for one step that should not wait for a lease.
func stepCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func mustGet(t *testing.T, c *client.Client, key string) client.Item {
	t.Helper()
	it, err := c.Get(stepCtx(t), key)
	if err != nil {
		t.Fatalf("Get %q: %v", key, err)
	}
	return it
}

func mustPut(t *testing.T, c *client.Client, key, value string) uint64 {
	t.Helper()
	v, err := c.Put(stepCtx(t), key, []byte(value))
	if err != nil {
		t.Fatalf("Put %q: %v", key, err)
	}
	return v
}

// timedPut puts and returns how long it took.
func timedPut(t *testing.T, c *client.Client, key, value string) (uint64, time.Duration) {
	t.Helper()
	start := time.Now()
	v := mustPut(t, c, key, value)
	return v, time.Since(start)
}

// msgsIn is the server's count of received messages of type name ("get",
// "renew", ...), of a real server (startServer) or an in-memory one
// (internal/testkit).
func msgsIn(srv interface{ Stats() *protocol.StatsReply }, name string) uint64 {
	return srv.Stats().MessagesIn[name]
}

// sumIn is the server's count of all received messages.
func sumIn(srv *testServer) uint64 {
	var n uint64
	for _, v := range srv.Stats().MessagesIn {
		n += v
	}
	return n
}

// events records the events a client emits through Config.OnEvent.
type events struct {
	mu  sync.Mutex
	all []client.Event
	ch  chan client.Event
}

func newEvents() *events { return &events{ch: make(chan client.Event, 1024)} }

func (e *events) on(ev client.Event) {
	e.mu.Lock()
	e.all = append(e.all, ev)
	e.mu.Unlock()
	select {
	case e.ch <- ev:
	default:
	}
}

// wait returns the first event of kind that satisfies match (nil: any),
// received within the bound.
func (e *events) wait(t *testing.T, kind client.EventKind, within time.Duration, match func(client.Event) bool) client.Event {
	t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case ev := <-e.ch:
			if ev.Kind == kind && (match == nil || match(ev)) {
				return ev
			}
		case <-timer.C:
			t.Fatalf("no %v event within %v", kind, within)
		}
	}
}

// snapshot returns the events seen so far.
func (e *events) snapshot() []client.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]client.Event(nil), e.all...)
}

func hasKey(ev client.Event, key string) bool {
	for _, k := range ev.Keys {
		if k == key {
			return true
		}
	}
	return false
}

// dialRaw opens a session of a raw protocol client
// (internal/testkit/protoclient) that sends requests one at a time and
// never reads its notices: it never acknowledges an invalidation, so it is
// an unresponsive lease holder whose connection is nevertheless alive (QUIC
// still acknowledges packets underneath). It is closed in t.Cleanup.
func dialRaw(t *testing.T, srv *testServer) *protoclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := protoclient.Dial(ctx, srv.Addr().String(), protoclient.Options{CAFile: srv.CA(), Name: "raw-holder"})
	if err != nil {
		t.Fatalf("raw dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawCall sends m from a raw client with a fresh ID and returns its reply,
// within testTimeout.
func rawCall(t *testing.T, c *protoclient.Client, m protocol.Message) protocol.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	reply, err := c.Call(ctx, m)
	if err != nil {
		t.Fatalf("raw %s: %v", m.Type(), err)
	}
	return reply
}

// holdLease makes a raw holder that reads key, holds its lease and then
// never answers.
func holdLease(t *testing.T, srv *testServer, key string) *protoclient.Client {
	t.Helper()
	h := dialRaw(t, srv)
	g, ok := rawCall(t, h, &protocol.Get{Key: []byte(key)}).(*protocol.GetReply)
	if !ok || g.Term <= 0 {
		t.Fatalf("raw holder's read of %q: %+v, want a lease", key, g)
	}
	return h
}

// blockedWrite is the outcome of a write that had to wait for an
// unresponsive holder.
type blockedWrite struct {
	version   uint64
	latency   time.Duration // of the write, as its caller saw it
	otherKey  time.Duration // a write to another key made during the wait
	otherSame time.Duration // the same, from the blocked writer's own client
}

// writeAgainstSilentHolder has writer put value to key, whose lease a holder
// that does not answer was granted between grantLo and grantHi. While the
// write waits it has bystander and writer put to other keys. It checks the promise of DESIGN.md §4.6: the write commits
// no earlier than the holder's lease can have run out on the holder's own
// clock plus ε, and no later than the rest of the lease (term + ε after the
// grant) plus slack; and writes to other keys are not held up meanwhile.
func writeAgainstSilentHolder(t *testing.T, srv *testServer, writer, bystander *client.Client, key, value string,
	grantLo, grantHi time.Time) blockedWrite {
	t.Helper()
	term, eps := srv.Cfg.LeaseTerm, srv.Stats().Epsilon
	before := srv.Stats()
	type result struct {
		v   uint64
		err error
		at  time.Time
		rep client.WriteResult
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		// Bounded well past the longest wait the protocol allows, so that a
		// write that never commits fails the test instead of hanging it.
		ctx, cancel := context.WithTimeout(context.Background(), term+eps+testTimeout)
		defer cancel()
		var rep client.WriteResult
		v, err := writer.Put(ctx, key, []byte(value), client.Result(&rep))
		done <- result{v, err, time.Now(), rep}
	}()
	var out blockedWrite
	stillWaiting := func() bool {
		select {
		case r := <-done:
			done <- r
			return false
		default:
			return true
		}
	}
	// The write is waiting once the server has sent its invalidation. On a
	// loaded machine the write may be slow to get there; the bound only
	// turns a write that never reaches the server into a failure.
	wait.For(t, testTimeout, "the write to start waiting for the holder", func() bool {
		st := srv.Stats()
		return !stillWaiting() || (st.WritesWaiting >= 1 && st.InvalidationsSent > before.InvalidationsSent)
	})
	waitedFrom := time.Since(start)
	_, out.otherKey = timedPut(t, bystander, key+"-other", "x")
	_, out.otherSame = timedPut(t, writer, key+"-other2", "y")
	if !stillWaiting() {
		// Only possible if this goroutine was held up for the whole lease;
		// the bounds below still tell a bug from a slow machine.
		t.Logf("the write finished before the test could observe its wait (seen waiting after %v)", waitedFrom)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(term + eps + testTimeout):
		t.Fatalf("the write to %q did not return", key)
	}
	if r.err != nil {
		t.Fatalf("blocked Put %q: %v", key, r.err)
	}
	out.version, out.latency = r.v, r.at.Sub(start)
	// The server's own report: it waited for at least the one silent holder,
	// and no longer than the caller saw.
	if r.rep.Version != r.v || r.rep.Holders < 1 || r.rep.Waited <= 0 || r.rep.Waited > out.latency {
		t.Errorf("write report %+v; want version %d, at least one holder, and a wait within the %v the caller saw",
			r.rep, r.v, out.latency)
	}

	// Safety: the holder trusts its entry for term from when it sent its
	// request (grantLo or later), and the server waits term + ε from the
	// grant. Both clocks are this machine's monotonic clock, so the commit
	// can come no earlier than grantLo + term + ε: no margin is needed.
	if earliest := grantLo.Add(term + eps); r.at.Before(earliest) {
		t.Errorf("the write committed %v before the holder's lease (+ε) ran out", earliest.Sub(r.at))
	}
	// Liveness: no later than the rest of the holder's lease, plus slack.
	rest := grantHi.Add(term + eps).Sub(start)
	if out.latency > rest+slack {
		t.Errorf("the write waited %v; the rest of the holder's lease was %v (+%v slack)", out.latency, rest, slack)
	}
	if out.latency > term+eps+slack {
		t.Errorf("the write waited %v, more than term+ε+slack = %v", out.latency, term+eps+slack)
	}
	// Other keys are not delayed by the wait.
	if out.otherKey > term/4 || out.otherSame > term/4 {
		t.Errorf("writes to other keys took %v (other client) and %v (same client) during the wait; want well under the term %v",
			out.otherKey, out.otherSame, term)
	}
	after := srv.Stats()
	if got := after.InvalidationsExpired - before.InvalidationsExpired; got != 1 {
		t.Errorf("InvalidationsExpired grew by %d, want 1", got)
	}
	if t.Failed() {
		t.Logf("server before the write: %+v", *before)
		t.Logf("server after the write: %+v", *after)
	}
	t.Logf("write waited %v (rest of lease %v, term+ε %v); other-key writes %v / %v meanwhile",
		out.latency, rest, term+eps, out.otherKey, out.otherSame)
	return out
}

func fmtItem(it client.Item) string {
	return fmt.Sprintf("{found=%v value=%q version=%d cached=%v stale=%v}", it.Found, it.Value, it.Version, it.Cached, it.Stale)
}

// mustPutWithin puts value to key within d: for a write that may wait
// for leases, such as the first one after a failover.
func mustPutWithin(t *testing.T, c *client.Client, key, value string, d time.Duration) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	v, err := c.Put(ctx, key, []byte(value))
	if err != nil {
		t.Fatalf("Put %q: %v", key, err)
	}
	return v
}
