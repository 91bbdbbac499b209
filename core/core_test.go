package core

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/faultstore"
	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/store"
)

// These tests run the core under testing/synctest: its goroutines and
// timers live in a bubble whose clock moves only when every goroutine in it
// is blocked, so lease time passes at once and exactly.

const (
	term = 2 * time.Second
	eps  = 100 * time.Millisecond
)

// notices records what the core asks of sessions.
type notices struct {
	mu      sync.Mutex
	inv     map[SessionID][]string
	pinv    map[SessionID][]string // prefix invalidations
	recalls []leasetable.Notice
}

func (n *notices) Invalidate(id SessionID, keys []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.inv == nil {
		n.inv = make(map[SessionID][]string)
	}
	n.inv[id] = append(n.inv[id], keys...)
}

func (n *notices) InvalidatePrefixes(id SessionID, prefixes []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pinv == nil {
		n.pinv = make(map[SessionID][]string)
	}
	n.pinv[id] = append(n.pinv[id], prefixes...)
}

func (n *notices) Recall(id SessionID, key string, token uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.recalls = append(n.recalls, leasetable.Notice{Session: id, Key: key, Token: token})
}

// owned closes st when the test ends, after the cores over it have
// closed, and returns it: the test owns its stores, as a server does, and
// a core never closes one (New). A store outlives the cores over it, as a
// disk outlives a process.
func owned[S store.Store](t testing.TB, st S) S {
	t.Cleanup(func() {
		if err := st.Close(); err != nil {
			t.Errorf("close the store: %v", err)
		}
	})
	return st
}

// newMemory returns a new store.Memory that the test owns (owned).
func newMemory(t testing.TB) *store.Memory { return owned(t, store.NewMemory()) }

// bootFiles maps each store of a test to the boot file (Config.BootFile)
// of the node it stands for: like the store, it outlives the cores over it.
var bootFiles sync.Map

// bootFile returns the boot file of the node whose store is st.
func bootFile(t *testing.T, st store.Store) string {
	p, _ := bootFiles.LoadOrStore(st, filepath.Join(t.TempDir(), "horizon.boot"))
	return p.(string)
}

// newCore returns a core over st on the bubble's clock, whose boot clock
// follows it: the machine is neither rebooted nor its wall clock stepped.
func newCore(t *testing.T, st store.Store) (*Core, *notices) {
	t.Helper()
	n := &notices{}
	c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second,
		BootFile: bootFile(t, st), BootClock: clock.NewFakeBoot(nil),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, n)
	if err != nil {
		t.Fatal(err)
	}
	return c, n
}

// pending is a submitted request and its outcome, once it has one.
type pending struct {
	r   *Request
	out chan Outcome
}

func submit(t *testing.T, c *Core, r *Request) *pending {
	t.Helper()
	p := &pending{r: r, out: make(chan Outcome, 1)}
	r.Done = func(o Outcome) { p.out <- o }
	if err := c.Submit(r); err != nil {
		t.Fatalf("Submit(%s %q by %d): %v", r.Op, r.Key, r.Session, err)
	}
	return p
}

// outcome returns p's outcome once the core has nothing left to do at
// this instant, and false if it has none.
func (p *pending) outcome() (Outcome, bool) {
	synctest.Wait()
	select {
	case o := <-p.out:
		return o, true
	default:
		return Outcome{}, false
	}
}

func (p *pending) must(t *testing.T) Outcome {
	t.Helper()
	o, ok := p.outcome()
	if !ok {
		t.Fatalf("%s %q by %d: no outcome", p.r.Op, p.r.Key, p.r.Session)
	}
	if o.Err != nil {
		t.Fatalf("%s %q by %d: %v", p.r.Op, p.r.Key, p.r.Session, o.Err)
	}
	return o
}

// holderClient is the client identity of the session that acquires the
// write lease in runWithWriteLease; otherClient is another client's.
const holderClient, otherClient = 0xa11ce, 0xb0b

// runWithWriteLease runs a core over st in which session 1, of client
// holderClient, acquires the write lease on "k", then stops it with the
// lease live, and returns the outcome of the acquisition.
func runWithWriteLease(t *testing.T, st store.Store) Outcome {
	t.Helper()
	a, _ := newCore(t, st)
	a.OpenSession(1)
	a.SetClient(1, holderClient)
	acq := submit(t, a, &Request{Session: 1, Op: store.OpGrantWriteLease, Key: []byte("k")}).must(t)
	a.Close() // the lease is live: the horizon stays past it
	return acq
}

func put(s SessionID, key, value string) *Request {
	return &Request{Session: s, Op: store.OpPut, Key: []byte(key), Value: []byte(value)}
}

// TestWriteLeaseSurvivesRestart: a write lease is persisted with its
// token and its holder's client identity. After a restart its holder's
// client, on a new session, takes it over at its hello, and writes under
// it at once, before the write
// barrier; another client's session that presents the token is fenced,
// and may not release it; other sessions get no read lease on the key,
// and their writes wait until the holder releases it and the barrier has
// passed.
func TestWriteLeaseSurvivesRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		acq := runWithWriteLease(t, st)
		if acq.Token != 1 || acq.Term != term {
			t.Fatalf("acquire: token %d term %v, want 1 and %v", acq.Token, acq.Term, term)
		}

		b, n := newCore(t, st)
		defer b.Close()
		barrier := time.Now().Add(b.Stats().WritesAllowedIn)
		if left := b.Stats().WritesAllowedIn; left < term || left > term+eps {
			t.Fatalf("writes held for %v after a restart with a live write lease of term %v", left, term)
		}
		if s, _ := st.State(); len(s.WriteLeases) != 1 || s.WriteLeases[0].Client != holderClient {
			t.Fatalf("stored write leases %+v, want one recording client %#x", s.WriteLeases, holderClient)
		}
		for _, s := range []SessionID{11, 12} {
			b.OpenSession(s)
		}
		b.SetClient(11, holderClient)
		b.SetClient(12, otherClient)
		if _, got, _ := b.Read(12, []byte("k")); got != 0 {
			t.Fatalf("read lease %v on a key whose write lease was restored", got)
		}
		if err := b.Submit(&Request{Session: 12, Op: store.OpPut, Key: []byte("k"), Token: 2, Done: func(Outcome) {}}); !errors.Is(err, leasetable.ErrFenced) {
			t.Fatalf("write with a token never granted: %v, want ErrFenced", err)
		}
		stolen := put(12, "k", "stolen")
		stolen.Token = acq.Token
		stolen.Done = func(o Outcome) { t.Errorf("another client's write with the live token has an outcome: %+v", o) }
		if err := b.Submit(stolen); !errors.Is(err, leasetable.ErrFenced) {
			t.Fatalf("another client's write with the live token: %v, want ErrFenced", err)
		}
		if err := b.ReleaseWriteLease(12, "k", acq.Token, 0, nil); !errors.Is(err, leasetable.ErrNotFound) {
			t.Fatalf("another client's release with the live token: %v, want ErrNotFound", err)
		}
		// The holder's client took it over at its hello (SetClient).
		if tok, holder, ok := b.table.WriteLease("k"); !ok || tok != acq.Token || holder != 11 {
			t.Fatalf("write lease %d held by %d (%v) after another client's attempts; want %d, held by the holder's new session 11", tok, holder, ok, acq.Token)
		}
		other := submit(t, b, put(12, "k", "other"))
		fenced := put(11, "k", "holder")
		fenced.Token = acq.Token
		w := submit(t, b, fenced).must(t)
		if w.Version != 1 {
			t.Fatalf("holder's write after the restart: version %d, want 1", w.Version)
		}
		if _, ok := other.outcome(); ok {
			t.Fatal("another session's write committed while the restored write lease was held")
		}
		// The recall went to session 11, which took the lease over.
		if len(n.recalls) != 1 || n.recalls[0] != (leasetable.Notice{Session: 11, Key: "k", Token: acq.Token}) {
			t.Fatalf("recalls %+v, want one to session 11", n.recalls)
		}
		if err := b.ReleaseWriteLease(11, "k", acq.Token, 0, nil); err != nil {
			t.Fatalf("the new session releases the restored lease: %v", err)
		}
		if _, ok := other.outcome(); ok {
			t.Fatal("a write committed before the write barrier")
		}
		time.Sleep(time.Until(barrier))
		if o := other.must(t); o.Version != 2 {
			t.Fatalf("the other write: version %d, want 2", o.Version)
		}
		if s, _ := st.State(); len(s.WriteLeases) != 0 {
			t.Fatalf("write leases stored after the release: %+v", s.WriteLeases)
		}
	})
}

// TestRestoredWriteLeaseExpires: when the holder of a restored write lease
// never comes back, a conflicting write waits until the lease has expired
// at the barrier, and the lease's end is persisted.
func TestRestoredWriteLeaseExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		runWithWriteLease(t, st)

		b, _ := newCore(t, st)
		defer b.Close()
		b.OpenSession(2)
		barrier := time.Now().Add(b.Stats().WritesAllowedIn)
		w := submit(t, b, put(2, "k", "v"))
		time.Sleep(time.Until(barrier) - time.Nanosecond)
		if _, ok := w.outcome(); ok {
			t.Fatal("a write committed over a restored write lease before it expired")
		}
		time.Sleep(time.Nanosecond)
		o := w.must(t)
		if o.Waited < term || o.Waited > term+eps {
			t.Fatalf("the write waited %v, want the lease's term %v plus at most ε", o.Waited, term)
		}
		if o.Holders != 1 {
			t.Fatalf("the write counted %d holders, want the restored lease", o.Holders)
		}
		if s, _ := st.State(); len(s.WriteLeases) != 0 {
			t.Fatalf("write leases stored after expiry: %+v", s.WriteLeases)
		}
	})
}

// TestExpiredWriteLeasesEndAtStart: write leases of an earlier run whose
// horizon has passed are ended in the store when the next run starts.
func TestExpiredWriteLeasesEndAtStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		runWithWriteLease(t, st)
		time.Sleep(time.Minute)
		b, _ := newCore(t, st)
		defer b.Close()
		if s, _ := st.State(); len(s.WriteLeases) != 0 {
			t.Fatalf("write leases left after the horizon passed: %+v", s.WriteLeases)
		}
		if left := b.Stats().WritesAllowedIn; left != 0 {
			t.Fatalf("writes held for %v", left)
		}
	})
}

// TestFailedCommitLeavesNoTrace: a commit the store failed changes nothing
// that a replica applying the same successful commands would not have:
// after the store is reopened, versions and tokens go on from what is
// durable, exactly as on a store that never saw the failed commands.
func TestFailedCommitLeavesNoTrace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := owned(t, faultstore.New(store.NewMemory()))
		c, _ := newCore(t, fs)
		defer c.Close()
		c.OpenSession(1)
		if o := submit(t, c, put(1, "a", "1")).must(t); o.Version != 1 {
			t.Fatalf("first put: version %d", o.Version)
		}
		fs.Fail(syscall.ENOSPC)
		o, _ := submit(t, c, put(1, "b", "1")).outcome()
		if !errors.Is(o.Err, ErrInternal) || !strings.Contains(o.Err.Error(), syscall.ENOSPC.Error()) {
			t.Fatalf("put under the fault: %+v, want ErrInternal naming the fault", o)
		}
		// Until the retry is due, writes are refused without reaching the
		// store.
		faults := fs.Faults()
		o, _ = submit(t, c, put(1, "c", "1")).outcome()
		if !errors.Is(o.Err, ErrInternal) || fs.Faults() != faults {
			t.Fatalf("put before the retry: %+v after %d more faults", o, fs.Faults()-faults)
		}
		fs.Heal()
		time.Sleep(c.retryInterval())
		synctest.Wait()
		if o := submit(t, c, put(1, "d", "1")).must(t); o.Version != 2 {
			t.Fatalf("put after the store came back: version %d, want 2", o.Version)
		}
		if o := submit(t, c, &Request{Session: 1, Op: store.OpGrantWriteLease, Key: []byte("w")}).must(t); o.Token != 1 {
			t.Fatalf("acquire after the store came back: token %d, want 1", o.Token)
		}
		for _, k := range []string{"b", "c"} {
			if rec, _, _ := c.Read(1, []byte(k)); rec.Found {
				t.Fatalf("the failed put of %q is visible: %+v", k, rec)
			}
		}
	})
}

// A write retried under the same client and request ID, as a client does
// after its connection to a leader was lost, is applied once: the retry
// gets the first outcome back, marked Duplicate, with no lease, because
// the key may have changed since. Clients idle for a retry window are
// forgotten, and their request IDs are new writes again.
func TestRetriedWriteAppliedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const window = time.Minute
		st := newMemory(t)
		c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, RetryWindow: window,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, &notices{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.OpenSession(1)
		c.OpenSession(2)
		put := func(session SessionID, value string, client, id uint64) Outcome {
			return submit(t, c, &Request{Session: session, Op: store.OpPut, Key: []byte("k"), Value: []byte(value), Client: client, ID: id, Acked: id}).must(t)
		}
		first := put(1, "v1", 42, 7)
		if first.Duplicate || first.Term != term {
			t.Fatalf("first write: %+v", first)
		}
		c.Relinquish(1, []string{"k"})
		put(2, "v2", 0, 1) // another writer changes k
		// The retry comes on another session, as after a reconnection, and
		// gets its outcome at once: it does not wait for session 1, which
		// holds a lease on k and never answers invalidations.
		if _, _, err := c.Read(1, []byte("k")); err != nil {
			t.Fatal(err)
		}
		retry := put(2, "v1-again", 42, 7)
		if !retry.Duplicate || retry.Version != first.Version || retry.Term != 0 {
			t.Errorf("retry: %+v; want a duplicate of version %d with no lease", retry, first.Version)
		}
		if rec, _ := st.Get([]byte("k")); string(rec.Value) != "v2" {
			t.Errorf("k = %q after the retry, want v2", rec.Value)
		}
		// Idle for a window and a quarter: forgotten.
		time.Sleep(window + window/4 + time.Second)
		synctest.Wait()
		if ids, err := st.IdleClients(time.Now(), 10); err != nil || len(ids) != 0 {
			t.Errorf("clients kept after the retry window: %v, %v", ids, err)
		}
		if o := put(1, "v3", 42, 7); o.Duplicate {
			t.Errorf("request 7 after the client was forgotten: %+v, want a new write", o)
		}
	})
}

// The unsafe option skips the wait for an earlier run's leases, which a
// core otherwise holds writes for.
func TestUnsafeSkipHorizonWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		now := time.Now()
		if _, err := st.Apply([]store.Command{{Op: store.OpSetHorizon, Horizon: now.Add(5 * time.Second), Span: 5 * time.Second}}); err != nil {
			t.Fatal(err)
		}
		for _, unsafe := range []bool{false, true} {
			c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, UnsafeSkipHorizonWait: unsafe,
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, &notices{})
			if err != nil {
				t.Fatal(err)
			}
			if held := c.Stats().WritesAllowedIn; (held == 0) != unsafe {
				t.Errorf("unsafe %v: writes held for %v", unsafe, held)
			}
			c.BeginStop() // keep the horizon as it is for the next core
			c.Close()
		}
	})
}

// A write whose store reports that the node stopped leading has an unknown
// outcome, ErrNotLeader, not a storage failure.
func TestLostLeadOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fs := owned(t, faultstore.New(store.NewMemory()))
		c, _ := newCore(t, fs)
		defer c.Close()
		c.OpenSession(1)
		fs.Fail(fmt.Errorf("replica: %w: leadership lost while committing log", store.ErrNotLeader))
		p := submit(t, c, &Request{Session: 1, Op: store.OpPut, Key: []byte("k"), Value: []byte("v")})
		o, ok := p.outcome()
		if !ok || !errors.Is(o.Err, ErrNotLeader) || errors.Is(o.Err, ErrInternal) {
			t.Fatalf("outcome %+v, %v; want ErrNotLeader, not ErrInternal", o, ok)
		}
	})
}

// A new leader's core holds the keys it inherited writes on: until their
// bound plus ε, reads of them fail, and every write, a retry of such a write
// too although its outcome is kept, waits until then; other keys are read
// at once.
func TestInheritedKeysHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		now := time.Now()
		// The old leader's horizon, and its last write, whose writer was
		// not told.
		_, err := st.Apply([]store.Command{
			{Op: store.OpSetHorizon, Horizon: now.Add(3 * time.Second), Span: 3 * time.Second},
			{Op: store.OpPut, Key: []byte("k"), Value: []byte("new"), Client: 7, Request: 1, Acked: 1, At: now},
		})
		if err != nil {
			t.Fatal(err)
		}
		c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Replicated: true, Inherited: map[string]time.Time{"k": now.Add(3 * time.Second), "gone": now.Add(-eps)},
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, &notices{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		barrier := now.Add(3*time.Second + eps) // the key's bound plus ε, past the horizon
		if left := c.Stats().WritesAllowedIn; left != barrier.Sub(now) {
			t.Errorf("writes held for %v, want until the inherited key's bound plus ε, %v", left, barrier.Sub(now))
		}
		c.OpenSession(1)
		if _, _, err := c.Read(1, []byte("k")); !errors.Is(err, ErrUnavailable) {
			t.Errorf("read of an inherited key before the barrier: %v, want ErrUnavailable", err)
		}
		for _, k := range []string{"other", "gone"} {
			if _, _, err := c.Read(1, []byte(k)); err != nil {
				t.Errorf("read of %s, not held: %v", k, err)
			}
		}
		// A listing of a range that holds the key is refused as its read
		// is; one past it, or past it by After, is not.
		if _, _, err := c.List(1, store.RangeOptions{Start: []byte("a"), End: []byte("z")}, false); !errors.Is(err, ErrUnavailable) {
			t.Errorf("list of a range holding an inherited key: %v, want ErrUnavailable", err)
		}
		for _, o := range []store.RangeOptions{{Start: []byte("l"), End: []byte("z")}, {Start: []byte("a"), After: []byte("k")}} {
			if _, _, err := c.List(1, o, false); err != nil {
				t.Errorf("list of %+v, no held key in it: %v", o, err)
			}
		}
		retry := submit(t, c, &Request{Session: 1, Op: store.OpPut, Key: []byte("k"), Value: []byte("new"), Client: 7, ID: 1, Acked: 1})
		if o, ok := retry.outcome(); ok {
			t.Fatalf("the retry of the inherited write ended before the barrier: %+v", o)
		}
		time.Sleep(time.Until(barrier) - time.Nanosecond)
		if _, _, err := c.Read(1, []byte("k")); !errors.Is(err, ErrUnavailable) {
			t.Errorf("read of an inherited key just before the barrier: %v, want ErrUnavailable", err)
		}
		time.Sleep(time.Nanosecond)
		o := retry.must(t)
		if !o.Duplicate || !time.Now().Equal(barrier) {
			t.Errorf("retry: %+v at %v; want the kept outcome, at the barrier %v", o, time.Now(), barrier)
		}
		if rec, _, err := c.Read(1, []byte("k")); err != nil || string(rec.Value) != "new" {
			t.Errorf("read after the barrier: %q, %v", rec.Value, err)
		}
		if r, _, err := c.List(1, store.RangeOptions{Start: []byte("a"), End: []byte("z")}, false); err != nil || len(r.KVs) != 1 || string(r.KVs[0].Value) != "new" {
			t.Errorf("list after the barrier: %+v, %v; want k = new", r, err)
		}
	})
}

// applied is a store whose state says that its newest horizon entry was
// applied at a given time, as a replica's does (store.State.HorizonApplied).
type applied struct {
	store.Store
	at time.Time
}

func (a applied) State() (store.State, error) {
	st, err := a.Store.State()
	st.HorizonApplied = a.at
	return st, err
}

// TestLongestLeaseLasts: a read lease of the longest term allowed, with
// the largest ε and horizon step, is live on the core until exactly term
// + ε after it was granted: a write to its key waits that long for a
// holder that does not answer, and not a nanosecond less. Before the
// bounds, a term near time.Duration's limit made the sums the core forms
// from it (term + ε + the horizon step) wrap around.
func TestLongestLeaseLasts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, err := New(Config{LeaseTerm: MaxLeaseTerm, Epsilon: MaxEpsilon, HorizonStep: MaxHorizonStep,
			RetryWindow: MaxRetryWindow, Logger: slog.New(slog.DiscardHandler)}, newMemory(t), &notices{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.OpenSession(1)
		c.OpenSession(2)
		if _, got, err := c.Read(1, []byte("k")); err != nil || got != MaxLeaseTerm {
			t.Fatalf("read: term %v, %v; want %v", got, err, MaxLeaseTerm)
		}
		w := submit(t, c, put(2, "k", "v"))
		time.Sleep(MaxLeaseTerm + MaxEpsilon - time.Nanosecond)
		if _, ok := w.outcome(); ok {
			t.Fatal("a write committed before the longest lease on its key had run out")
		}
		time.Sleep(time.Nanosecond)
		if o := w.must(t); o.Waited != MaxLeaseTerm+MaxEpsilon || o.Holders != 1 {
			t.Fatalf("the write waited %v for %d holders, want %v for 1", o.Waited, o.Holders, MaxLeaseTerm+MaxEpsilon)
		}
	})
}

// TestConfigBounds: New refuses each duration past its bound with an
// error naming it, its value and the bound.
func TestConfigBounds(t *testing.T) {
	good := Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second}
	for _, tc := range []struct {
		change func(*Config)
		want   string
	}{
		{func(c *Config) { c.LeaseTerm = 2562047 * time.Hour }, "LeaseTerm 2562047h0m0s is longer than 1h0m0s"},
		{func(c *Config) { c.LeaseTerm = 0 }, "LeaseTerm 0s is not positive"},
		{func(c *Config) { c.PrefixTerms = []PrefixTerm{{"/a", MaxLeaseTerm + 1}} }, `term 1h0m0.000000001s for prefix "/a" is longer than 1h0m0s`},
		{func(c *Config) { c.PrefixTerms = []PrefixTerm{{"/a", -1}} }, `term -1ns for prefix "/a" is negative`},
		{func(c *Config) { c.Epsilon = MaxEpsilon + 1 }, "Epsilon 1m0.000000001s is longer than 1m0s"},
		{func(c *Config) { c.Epsilon = -1 }, "Epsilon -1ns is negative"},
		{func(c *Config) { c.HorizonStep = MaxHorizonStep + 1 }, "HorizonStep 1h0m0.000000001s is longer than 1h0m0s"},
		{func(c *Config) { c.HorizonStep = 0 }, "HorizonStep 0s is not positive"},
		{func(c *Config) { c.RetryWindow = MaxRetryWindow + 1 }, "RetryWindow 24h0m0.000000001s is longer than 24h0m0s"},
		{func(c *Config) { c.RetryWindow = -1 }, "RetryWindow -1ns is negative"},
	} {
		cfg := good
		tc.change(&cfg)
		if _, err := New(cfg, newMemory(t), &notices{}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New: %v, want an error containing %q", err, tc.want)
		}
	}
}

// called is a store that records which of its methods were called, in
// order, and with which op each Apply began.
type called struct {
	store.Store
	mu    sync.Mutex
	calls []string
}

func (c *called) note(call string) {
	c.mu.Lock()
	c.calls = append(c.calls, call)
	c.mu.Unlock()
}

func (c *called) Apply(cmds []store.Command) ([]store.Result, error) {
	c.note("apply " + cmds[0].Op.String())
	return c.Store.Apply(cmds)
}

func (c *called) State() (store.State, error) {
	c.note("state")
	return c.Store.State()
}

// TestNewRecordsTheLeader: a core given Config.LeaderName records, as its
// first command and before it reads the state, that the node leads and
// where it serves clients; a store that cannot record it fails New. A core
// without it records no leader.
func TestNewRecordsTheLeader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Logger: slog.New(slog.DiscardHandler),
			LeaderName: "n1", LeaderAddr: "10.0.0.1:7000"}
		st := &called{Store: newMemory(t)}
		c, err := New(cfg, st, &notices{})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		if len(st.calls) < 2 || st.calls[0] != "apply set leader" || st.calls[1] != "state" {
			t.Errorf("calls of the store: %q; want the set leader first, then the state read", st.calls)
		}
		if s, err := st.State(); err != nil || s.Leader != "n1" || s.LeaderAddr != "10.0.0.1:7000" {
			t.Errorf("state: leader %q at %q, %v; want n1 at 10.0.0.1:7000", s.Leader, s.LeaderAddr, err)
		}

		fs := owned(t, faultstore.New(store.NewMemory()))
		fs.Fail(syscall.EIO)
		if _, err := New(cfg, fs, &notices{}); err == nil || !strings.Contains(err.Error(), "record that n1 leads") || !strings.Contains(err.Error(), syscall.EIO.Error()) {
			t.Errorf("New over a store that fails: %v; want an error naming the leader and the fault", err)
		}

		cfg.LeaderName, cfg.LeaderAddr = "", ""
		alone := &called{Store: newMemory(t)}
		c, err = New(cfg, alone, &notices{})
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		for _, call := range alone.calls {
			if call == "apply set leader" {
				t.Errorf("a core without a leader name recorded a leader: %q", alone.calls)
			}
		}
	})
}

// TestCloseLeavesTheStoreOpen: Close does not close the store, which its
// owner closes after: what the core applied can still be read, and
// applied to, and a new core can run over it.
func TestCloseLeavesTheStoreOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, _ := newCore(t, st)
		c.OpenSession(1)
		submit(t, c, put(1, "k", "v")).must(t)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
		if rec, err := st.Get([]byte("k")); err != nil || string(rec.Value) != "v" {
			t.Fatalf("the store after Close: %q, %v; want the value the core wrote", rec.Value, err)
		}
		if _, err := st.Apply([]store.Command{{Op: store.OpPut, Key: []byte("k2"), Value: []byte("w")}}); err != nil {
			t.Fatalf("apply after the core closed: %v", err)
		}
		b, _ := newCore(t, st)
		defer b.Close()
		b.OpenSession(1)
		if rec, _, err := b.Read(1, []byte("k2")); err != nil || string(rec.Value) != "w" {
			t.Fatalf("read on a second core over the store: %q, %v", rec.Value, err)
		}
	})
}
