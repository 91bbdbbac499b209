package client_test

// Config.OnInvalidate and Item.Lease, end to end on the in-memory
// server (internal/testkit). Most tests run on real time with a lease term
// of a minute, far longer than any of them waits, so a write that another
// client's lease holds back is released only by that client's
// acknowledgement, never by the lease running out. TestItemLeaseRunsOut
// runs in a synctest bubble (leasetime_test.go's bubble), where leases do
// run out, on the fake clock.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/server"
)

// hookTerm is the lease term of these tests.
const hookTerm = time.Minute

// invCall is one call of a Config.OnInvalidate hook.
type invCall struct {
	keys, prefixes []string
	at             time.Time
}

// invHook records the calls of a Config.OnInvalidate hook. If hold is
// set, the first call it matches closes entered and then waits until
// release is closed (or testTimeout passes, so that a failed test never
// hangs a client's notice reader).
type invHook struct {
	mu    sync.Mutex
	calls []invCall

	hold    func(invCall) bool
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	held    bool // guarded by mu
}

func newInvHook() *invHook { return &invHook{} }

// newHoldingHook returns a hook that holds the first call that hold
// matches until unblock is called.
func newHoldingHook(hold func(invCall) bool) *invHook {
	return &invHook{hold: hold, entered: make(chan struct{}), release: make(chan struct{})}
}

func withKey(k string) func(invCall) bool {
	return func(c invCall) bool { return slices.Contains(c.keys, k) }
}

func withPrefix(p string) func(invCall) bool {
	return func(c invCall) bool { return slices.Contains(c.prefixes, p) }
}

// unblock releases a held call; it may be called more than once.
func (h *invHook) unblock() { h.once.Do(func() { close(h.release) }) }

func (h *invHook) on(keys, prefixes []string) {
	c := invCall{keys: slices.Clone(keys), prefixes: slices.Clone(prefixes), at: time.Now()}
	h.mu.Lock()
	h.calls = append(h.calls, c)
	hold := h.hold != nil && !h.held && h.hold(c)
	if hold {
		h.held = true
	}
	h.mu.Unlock()
	if !hold {
		return
	}
	close(h.entered)
	select {
	case <-h.release:
	case <-time.After(testTimeout):
	}
}

func (h *invHook) snapshot() []invCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

// firstWith returns the first recorded call that satisfies match.
func (h *invHook) firstWith(match func(invCall) bool) (invCall, bool) {
	for _, c := range h.snapshot() {
		if match(c) {
			return c, true
		}
	}
	return invCall{}, false
}

// checkNoCalls fails t if h was called, except for the whole-cache drop
// after a suspend of the machine (prefixes [""]), which no test here can
// rule out on real time; that one is logged.
func checkNoCalls(t *testing.T, who string, h *invHook) {
	t.Helper()
	for _, c := range h.snapshot() {
		if len(c.keys) == 0 && slices.Equal(c.prefixes, []string{""}) {
			t.Logf("%s: the cache was dropped after a suspend of the machine", who)
			continue
		}
		t.Errorf("%s: OnInvalidate called with keys %q, prefixes %q; want no call", who, c.keys, c.prefixes)
	}
}

// heldPut is the outcome of a Put that a holder's hook held back.
type heldPut struct {
	v        uint64
	err      error
	at       time.Time // when the Put returned
	released time.Time // when the hook was released
	rep      client.WriteResult
}

// putHeldByHook has writer put value to key, which another client holds a
// lease on (of the key or of a listing over it) and whose hook, hook,
// holds the call that its invalidation makes. It checks that the hook is
// called before the Put returns, that the Put does not return while the
// hook is held, and that it returns, without error and reporting a holder,
// within 5 s once the hook is released: the write waited for the
// acknowledgement that follows the hook, not for the lease (a minute) to
// run out.
func putHeldByHook(t *testing.T, writer *client.Client, key, value string, hook *invHook) heldPut {
	t.Helper()
	done := make(chan heldPut, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		var rep client.WriteResult
		v, err := writer.Put(ctx, key, []byte(value), client.Result(&rep))
		done <- heldPut{v: v, err: err, at: time.Now(), rep: rep}
	}()
	select {
	case <-hook.entered:
	case r := <-done:
		t.Fatalf("the Put of %s returned (version %d, %v) before the holder's hook was called for it; calls %+v", key, r.v, r.err, hook.snapshot())
	case <-time.After(testTimeout):
		t.Fatalf("the holder's hook was not called for %s within %v of the Put; calls %+v", key, testTimeout, hook.snapshot())
	}
	// The hook is held: the write waits for the holder's acknowledgement,
	// which comes only after the hook returns.
	select {
	case r := <-done:
		t.Fatalf("the Put of %s returned (version %d, %v) while the holder's hook was still running", key, r.v, r.err)
	case <-time.After(300 * time.Millisecond):
	}
	released := time.Now()
	hook.unblock()
	var r heldPut
	select {
	case r = <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("the Put of %s did not return within 5s of the holder's hook returning", key)
	}
	r.released = released
	if r.err != nil {
		t.Fatalf("the Put of %s: %v", key, r.err)
	}
	if r.at.Before(released) {
		t.Errorf("the Put of %s returned %v before the holder's hook was released", key, released.Sub(r.at))
	}
	if r.rep.Version != r.v || r.rep.Holders < 1 {
		t.Errorf("the write report %+v; want version %d and at least one holder", r.rep, r.v)
	}
	return r
}

// TestOnInvalidateBeforeWriteCommits: a client's OnInvalidate hook is
// called with a key it holds a lease on when another client writes the key,
// and the write does not commit until the hook has returned: while the hook
// is held, the writer's Put does not return; once it is released, the Put
// returns promptly. The writer's own hook is not called for its own write.
func TestOnInvalidateBeforeWriteCommits(t *testing.T) {
	leaktest.Check(t)
	srv := testkit.NewServer(t, server.Config{LeaseTerm: hookTerm})
	hookA := newHoldingHook(withKey("/k"))
	hookB := newInvHook()
	b := srv.Dial(client.Config{Name: "writer", OnInvalidate: hookB.on})
	a := srv.Dial(client.Config{Name: "holder", OnInvalidate: hookA.on})
	// Registered after the dials, so it runs before the clients close.
	t.Cleanup(hookA.unblock)

	mustPut(t, b, "/k", "v1")
	if it := mustGet(t, a, "/k"); !it.Found || string(it.Value) != "v1" {
		t.Fatalf("A's Get of /k: %s; want v1", fmtItem(it))
	}
	if it := mustGet(t, a, "/k"); !it.Cached {
		t.Fatalf("A's second Get of /k: %s; want it from the cache, under a lease", fmtItem(it))
	}
	// B holds a lease on /k too: its own write must not call its hook.
	mustGet(t, b, "/k")

	r := putHeldByHook(t, b, "/k", "v2", hookA)

	call, ok := hookA.firstWith(withKey("/k"))
	if !ok {
		t.Fatalf("A's hook calls %+v; want one with /k in keys", hookA.snapshot())
	}
	if !call.at.Before(r.at) {
		t.Errorf("A's hook was called at %v, not before B's Put returned at %v", call.at, r.at)
	}
	if it := mustGet(t, a, "/k"); string(it.Value) != "v2" || it.Version != r.v {
		t.Errorf("A's Get of /k after B's write: %s; want v2 at version %d", fmtItem(it), r.v)
	}
	checkNoCalls(t, "B (the writer)", hookB)
}

// TestOnInvalidatePrefix: a client that holds a leased listing of a prefix
// has its hook called with the prefix when another client creates a key
// under it, and that client's Put waits for the hook; the listing the
// holder sees next has the key. Then, with a hook that does not hold, the
// call is already recorded when a writer's Put returns.
func TestOnInvalidatePrefix(t *testing.T) {
	leaktest.Check(t)
	srv := testkit.NewServer(t, server.Config{LeaseTerm: hookTerm})
	hookA, hookB, hookC := newHoldingHook(withPrefix("/d/")), newInvHook(), newInvHook()
	a := srv.Dial(client.Config{Name: "holder", OnInvalidate: hookA.on})
	b := srv.Dial(client.Config{Name: "writer", OnInvalidate: hookB.on})
	c := srv.Dial(client.Config{Name: "second holder", OnInvalidate: hookC.on})
	t.Cleanup(hookA.unblock) // after the dials: runs before the clients close
	ctx := stepCtx(t)

	mustPut(t, b, "/d/a", "1")
	mustPut(t, b, "/e", "1")
	for _, h := range []*client.Client{a, c} {
		if _, err := h.List(ctx, "/d/", client.Leased()); err != nil {
			t.Fatalf("List /d/: %v", err)
		}
		if r, err := h.List(ctx, "/d/", client.Leased()); err != nil || !r.Cached {
			t.Fatalf("second List /d/: cached %v, %v; want it from memory, under a lease", r.Cached, err)
		}
	}
	if calls := hookA.snapshot(); len(calls) != 0 {
		t.Fatalf("A's hook was called before any write under /d/: %+v", calls)
	}

	r := putHeldByHook(t, b, "/d/x", "x", hookA)
	call, ok := hookA.firstWith(withPrefix("/d/"))
	if !ok || !call.at.Before(r.at) {
		t.Fatalf("A's hook calls %+v; want one with /d/ in prefixes before B's Put returned at %v", hookA.snapshot(), r.at)
	}
	// The holder C's hook does not hold: its call is recorded by the time
	// the Put returns, since the write waited for C's acknowledgement.
	if call, ok := hookC.firstWith(withPrefix("/d/")); !ok || !call.at.Before(r.at) {
		t.Errorf("when B's Put of /d/x returned, C's hook calls were %+v; want one with /d/ in prefixes", hookC.snapshot())
	}
	if r.rep.Holders < 2 {
		t.Errorf("B's write report %+v; want two holders (A's and C's listings)", r.rep)
	}
	for _, h := range []*invHook{hookA, hookC} {
		for _, c := range h.snapshot() {
			if slices.Contains(c.keys, "/e") || slices.Contains(c.prefixes, "/e") || slices.Contains(c.prefixes, "") {
				t.Errorf("a holder's hook was called with %+v, naming /e, which nobody wrote, or everything", c)
			}
		}
	}
	for _, h := range []*client.Client{a, c} {
		l, err := h.List(ctx, "/d/", client.Leased())
		if err != nil || !slices.Equal(keysOf(l), []string{"/d/a", "/d/x"}) {
			t.Fatalf("List /d/ after B's write: %q, %v; want /d/a and /d/x", keysOf(l), err)
		}
		if it := mustGet(t, h, "/d/x"); !it.Found || it.Version != r.v {
			t.Errorf("Get of /d/x after B's write: %s; want found at version %d", fmtItem(it), r.v)
		}
	}

	// A second write under the prefix, now relisted by both: the hooks are
	// called again, before the Put returns, without holding it up. (The
	// relisting was leased: one write under a prefix within its term does
	// not make it hot, server.Config.HotPrefixWrites.)
	nA, nC := len(hookA.snapshot()), len(hookC.snapshot())
	mustPut(t, b, "/d/y", "y")
	for who, got := range map[string][]invCall{"A": hookA.snapshot()[nA:], "C": hookC.snapshot()[nC:]} {
		if !slices.ContainsFunc(got, withPrefix("/d/")) {
			t.Errorf("when B's Put of /d/y returned, %s's new hook calls were %+v; want one with /d/", who, got)
		}
	}
	checkNoCalls(t, "B (the writer)", hookB)
}

// fmtLeased is fmtItem with the answer's Lease.
func fmtLeased(it client.Item) string {
	return fmt.Sprintf("%s lease=%v", fmtItem(it), it.Lease)
}

// TestItemLease: a Cached answer of Get carries the time left, when Get
// answered, on the lease behind it (Item.Lease): the key's own entry's, or
// a cached listing's that answers it (an absent key under it too). An
// answer fetched from the server has Lease 0, even though it is cached
// for the next Get: the first read of a key, one another client's write
// invalidated, one outside every listing, and a present key under a
// listing of keys only (which Get cannot answer).
func TestItemLease(t *testing.T) {
	leaktest.Check(t)
	srv := testkit.NewServer(t, server.Config{LeaseTerm: hookTerm})
	a := srv.Dial(client.Config{Name: "reader"})
	b := srv.Dial(client.Config{Name: "writer"})
	ctx := stepCtx(t)
	term := srv.Config.LeaseTerm

	// cached checks that it came from the cache under a live lease no
	// longer than the term, and returns the lease's time left.
	cached := func(what string, it client.Item) time.Duration {
		t.Helper()
		if !it.Cached || it.Lease <= 0 || it.Lease > term {
			t.Errorf("%s: %s; want it from the cache, with a lease in (0, %v]", what, fmtLeased(it), term)
		}
		return it.Lease
	}
	// fetched checks that it came from the server: not Cached, Lease 0.
	fetched := func(what string, it client.Item) {
		t.Helper()
		if it.Cached || it.Lease != 0 {
			t.Errorf("%s: %s; want it from the server, with lease 0", what, fmtLeased(it))
		}
	}
	// timedGet is mustGet, with readings of the clock just before and
	// after it.
	timedGet := func(key string) (it client.Item, asked, answered time.Time) {
		t.Helper()
		asked = time.Now()
		it = mustGet(t, a, key)
		answered = time.Now()
		return it, asked, answered
	}
	// leaseBetween checks that the lease of it, the answer of a Get
	// between asked and answered, runs a term from a read or a listing
	// sent between sent and got.
	leaseBetween := func(what string, it client.Item, sent, got, asked, answered time.Time) {
		t.Helper()
		if least, most := sent.Add(term).Sub(answered), got.Add(term).Sub(asked); it.Lease < least || it.Lease > most {
			t.Errorf("%s: lease %v; want within [%v, %v], a term from the read", what, it.Lease, least, most)
		}
	}

	mustPut(t, b, "/k", "v1")
	fetched("A's first Get of /never", mustGet(t, a, "/never"))
	it := mustGet(t, a, "/never")
	if cached("A's second Get of /never", it); it.Found {
		t.Errorf("A's second Get of /never: %s; want not found", fmtLeased(it))
	}

	// The lease runs a term from when A sent the read, which was between
	// sent and got; the cached Get reads the client's clock between asked
	// and answered.
	it, sent, got := timedGet("/k")
	if fetched("A's first Get of /k", it); !it.Found || string(it.Value) != "v1" {
		t.Errorf("A's first Get of /k: %s; want v1", fmtLeased(it))
	}
	it, asked, answered := timedGet("/k")
	left := cached("A's second Get of /k", it)
	if string(it.Value) != "v1" {
		t.Errorf("A's second Get of /k: %s; want v1", fmtLeased(it))
	}
	leaseBetween("A's second Get of /k", it, sent, got, asked, answered)
	// Time passes on the lease: at least the 20ms slept since the last
	// Get read the clock.
	time.Sleep(20 * time.Millisecond)
	if later := cached("A's Get of /k 20ms later", mustGet(t, a, "/k")); later > left-20*time.Millisecond {
		t.Errorf("A's Get of /k 20ms after one with %v left: lease %v; want at most %v", left, later, left-20*time.Millisecond)
	}

	// B's write invalidates A's lease; A has acknowledged by the time the
	// Put returns.
	mustPut(t, b, "/k", "v2")
	it, sent, got = timedGet("/k")
	if fetched("A's Get of /k after B wrote it", it); string(it.Value) != "v2" {
		t.Errorf("A's Get of /k after B's write: %s; want v2", fmtLeased(it))
	}
	it, asked, answered = timedGet("/k")
	cached("A's Get of /k after A read it again", it)
	leaseBetween("A's Get of /k after A read it again", it, sent, got, asked, answered)

	// A leased listing answers every key under it, present or absent,
	// under its own lease: the three answers count down the same one.
	mustPut(t, b, "/d/a", "1")
	mustPut(t, b, "/e", "1")
	listSent := time.Now()
	if r, err := a.List(ctx, "/d/", client.Leased()); err != nil || !slices.Equal(keysOf(r), []string{"/d/a"}) {
		t.Fatalf("A's List /d/: %q, %v", keysOf(r), err)
	}
	listGot := time.Now()
	var prev time.Duration
	for _, k := range []string{"/d/absent", "/d/a", "/d/sub/absent"} {
		what := "A's Get of " + k + " under the listing"
		it, asked, answered := timedGet(k)
		left := cached(what, it)
		leaseBetween(what, it, listSent, listGot, asked, answered)
		if want := k == "/d/a"; it.Found != want || (want && string(it.Value) != "1") {
			t.Errorf("%s: %s; want found %v", what, fmtLeased(it), want)
		}
		if prev > 0 && left > prev {
			t.Errorf("%s: lease %v, more than the %v of the Get before it under the same listing", what, left, prev)
		}
		prev = left
	}
	fetched("A's Get of /e, outside the listing", mustGet(t, a, "/e"))
	fetched("A's Get of /dx, outside the listing", mustGet(t, a, "/dx"))
	cached("A's Get of /e after A read it", mustGet(t, a, "/e"))

	// A key created under the listing ends its lease: the listing's keys,
	// present or absent, are fetched again, until A lists again.
	mustPut(t, b, "/d/new", "n")
	fetched("A's Get of /d/absent after B wrote under /d/", mustGet(t, a, "/d/absent"))
	it = mustGet(t, a, "/d/new")
	if fetched("A's Get of /d/new after B created it", it); string(it.Value) != "n" {
		t.Errorf("A's Get of /d/new: %s; want n", fmtLeased(it))
	}
	cached("A's Get of /e, untouched by B's write under /d/", mustGet(t, a, "/e"))

	// A listing of keys only answers absent keys, but not present ones,
	// whose values it does not hold.
	mustPut(t, b, "/f/a", "1")
	listSent = time.Now()
	if r, err := a.List(ctx, "/f/", client.Leased(), client.KeysOnly()); err != nil || !slices.Equal(keysOf(r), []string{"/f/a"}) {
		t.Fatalf("A's keys-only List /f/: %q, %v", keysOf(r), err)
	}
	listGot = time.Now()
	it, asked, answered = timedGet("/f/absent")
	if cached("A's Get of /f/absent under a keys-only listing", it); it.Found {
		t.Errorf("A's Get of /f/absent: %s; want not found", fmtLeased(it))
	}
	leaseBetween("A's Get of /f/absent under a keys-only listing", it, listSent, listGot, asked, answered)
	it = mustGet(t, a, "/f/a")
	if fetched("A's Get of /f/a, present under a keys-only listing", it); string(it.Value) != "1" {
		t.Errorf("A's Get of /f/a: %s; want 1", fmtLeased(it))
	}
	cached("A's Get of /f/a after A read it", mustGet(t, a, "/f/a"))
}

// TestItemLeaseRunsOut: the Lease of a Cached answer counts down with the
// clock, for an entry and for a listing, and once the lease has run out
// Get asks the server again (not Cached, Lease 0); and the lapse calls no
// OnInvalidate (nothing was invalidated). On the in-memory server under
// synctest, where the network takes no time, the figures are exact.
//
// A cached Get marks its entry as read during the term, which the client
// renews before it runs out (DESIGN §3.5), so the entries that lapse here
// are of keys that were fetched and never read from the cache; the key
// whose countdown is watched (/k) is renewed instead. A listing's lease is
// not renewed, however often it answers.
func TestItemLeaseRunsOut(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		hook := newInvHook()
		a := srv.Dial(client.Config{OnInvalidate: hook.on})
		b := srv.Dial(client.Config{})
		ctx := stepCtx(t)
		for _, k := range []string{"/k", "/j1", "/j2", "/d/a"} {
			mustPut(t, b, k, "v")
		}
		for _, k := range []string{"/k", "/j1", "/j2"} {
			if it := mustGet(t, a, k); it.Cached || it.Lease != 0 {
				t.Errorf("A's first Get of %s: %s; want it from the server, with lease 0", k, fmtLeased(it))
			}
		}
		if _, err := a.List(ctx, "/d/", client.Leased()); err != nil {
			t.Fatalf("List /d/: %v", err)
		}
		// watched are the keys whose countdown the test reads.
		watched := []string{"/k", "/d/a", "/d/absent"}
		for _, k := range watched {
			if it := mustGet(t, a, k); !it.Cached || it.Lease != timeTerm {
				t.Errorf("A's Get of %s just after the read: %s; want it from the cache, with the term %v", k, fmtLeased(it), timeTerm)
			}
		}
		time.Sleep(timeTerm / 4)
		for _, k := range watched {
			if it, want := mustGet(t, a, k), timeTerm-timeTerm/4; !it.Cached || it.Lease != want {
				t.Errorf("A's Get of %s a quarter of a term after the read: %s; want it from the cache, with %v", k, fmtLeased(it), want)
			}
		}
		time.Sleep(timeTerm - timeTerm/4)
		// At the term, the leases of the listing and of /j1, which no Get
		// read from the cache, have run out: Get asks the server.
		for _, k := range []string{"/j1", "/d/a"} {
			if it := mustGet(t, a, k); it.Cached || it.Lease != 0 || !it.Found {
				t.Errorf("A's Get of %s a term after the read: %s; want it from the server, with lease 0", k, fmtLeased(it))
			}
		}
		// /k, read from the cache during its term, was renewed: still
		// cached, under a new lease that ends within a term.
		if it := mustGet(t, a, "/k"); !it.Cached || it.Lease <= 0 || it.Lease > timeTerm {
			t.Errorf("A's Get of /k, renewed, a term after the read: %s; want it from the cache, with a lease in (0, %v]", fmtLeased(it), timeTerm)
		}
		// A moment later it is the same, not a negative lease: the lapsed
		// entry of /j2 may still be in the cache, until the client's next
		// sweep.
		time.Sleep(time.Millisecond)
		for _, k := range []string{"/j2", "/d/absent"} {
			if it := mustGet(t, a, k); it.Cached || it.Lease != 0 || it.Found != (k == "/j2") {
				t.Errorf("A's Get of %s a term and a millisecond after the read: %s; want it from the server, with lease 0", k, fmtLeased(it))
			}
		}
		for _, k := range []string{"/j2", "/d/absent"} {
			if it := mustGet(t, a, k); !it.Cached || it.Lease != timeTerm {
				t.Errorf("A's Get of %s after reading it again: %s; want it from the cache, with the term %v", k, fmtLeased(it), timeTerm)
			}
		}
		checkNoCalls(t, "A, whose leases ran out", hook)
	})
}

// TestOnInvalidateSuspend: a suspend of the machine longer than the slack
// drops every lease, which the next look at the clock notices, Get's
// included: a Get that would have been answered from the cache asks the
// server (Lease 0), and the hook is called once with no keys and the
// prefix "" (everything), before that Get returns.
func TestOnInvalidateSuspend(t *testing.T) {
	leaktest.Check(t)
	srv := testkit.NewServer(t, server.Config{LeaseTerm: hookTerm})
	clk := newSuspendClock(nil)
	hook := newInvHook()
	a := srv.Dial(client.Config{Clock: clk, OnInvalidate: hook.on})
	b := srv.Dial(client.Config{})
	ctx := stepCtx(t)
	mustPut(t, b, "/k", "v")
	mustGet(t, a, "/k")
	if _, err := a.List(ctx, "/d/", client.Leased()); err != nil {
		t.Fatalf("List /d/: %v", err)
	}
	for _, k := range []string{"/k", "/d/absent"} {
		if it := mustGet(t, a, k); !it.Cached || it.Lease <= 0 || it.Lease > hookTerm {
			t.Fatalf("A's Get of %s before the suspend: %s; want it from the cache, with a lease in (0, %v]", k, fmtLeased(it), hookTerm)
		}
	}
	if calls := hook.snapshot(); len(calls) != 0 {
		t.Fatalf("hook called before the suspend: %+v", calls)
	}
	clk.sleep(time.Hour)
	if it := mustGet(t, a, "/k"); it.Cached || it.Lease != 0 || string(it.Value) != "v" {
		t.Errorf("A's Get of /k after a suspend of an hour: %s; want v from the server, with lease 0", fmtLeased(it))
	}
	calls := hook.snapshot()
	if len(calls) != 1 || len(calls[0].keys) != 0 || !slices.Equal(calls[0].prefixes, []string{""}) {
		t.Fatalf("hook calls after the suspend %+v; want one, with no keys and the prefix \"\"", calls)
	}
	if it := mustGet(t, a, "/d/absent"); it.Cached || it.Lease != 0 || it.Found {
		t.Errorf("A's Get of /d/absent after a suspend of an hour: %s; want it absent, from the server, with lease 0", fmtLeased(it))
	}
	// The cache works again after the drop, under the new leases.
	if it := mustGet(t, a, "/k"); !it.Cached || it.Lease <= 0 || it.Lease > hookTerm {
		t.Errorf("A's Get of /k after reading it again: %s; want it from the cache, with a lease in (0, %v]", fmtLeased(it), hookTerm)
	}
	if n := len(hook.snapshot()); n != 1 {
		t.Errorf("hook called %d times; want once, for the one suspend", n)
	}
}
