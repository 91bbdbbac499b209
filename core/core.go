// Package core is the one apply path of leased. A Core owns the lease table
// and the write barrier, and is the only code that calls them; it persists
// every state change as a deterministic store.Command through one Store.
// Sessions (package server) hand it reads, writes, write-lease
// acquisitions, renewals, releases, cancels and session closes, and get
// decisions back: replies, and through a Notifier the invalidations and
// recalls to send.
//
// Locks, in the order they are taken: readMu (held shared by reads while
// they run; HandOff takes it to wait for them), horizonMu (serializes
// persisting the horizon), mu (guards the lease table), then the commit
// queue's lock, the store health's lock (down.mu) and the count of writes
// on their way (copiesMu), which take no other. The lock of TTL leases
// (ttlState.mu, ttl.go) is taken alone or under mu, and under it only the
// commit queue's.
// mu is never held while calling out (the Store, a Notifier, a Request's
// Done); readMu, horizonMu and down.mu may be held across Store calls (a
// read, persisting the horizon, reopening the store). The store takes
// none of the core's locks.
package core

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/store"
)

// SessionID names a client session.
type SessionID = leasetable.SessionID

// Errors of the core. Package server maps them to wire codes.
var (
	// ErrCanceled: a write was abandoned before it committed; nothing
	// changed.
	ErrCanceled = errors.New("write abandoned before it committed; nothing changed")
	// ErrClosed: the core is stopping and takes no new writes.
	ErrClosed = errors.New("closed")
	// ErrInternal: the store failed.
	ErrInternal = errors.New("internal error")
	// ErrUnavailable: a replicated core cannot show that it still leads
	// (it cannot persist a horizon, and the last one has passed), so it
	// serves no read: another node may lead and have changed the value.
	ErrUnavailable = errors.New("unavailable: this node cannot show that it still leads")
	// ErrNotLeader: the node stopped leading while the change was being
	// committed. It may or may not take effect: the next leader may still
	// apply it.
	ErrNotLeader = errors.New("this node stopped leading the cluster; the change may or may not take effect")
	// ErrInvalidArgument: a request no server would take, such as a
	// keep-alive of too many leases.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrLeaseLimit: the session holds Config.MaxLeasesPerSession read
	// leases, and a read would need another. Package server reports it as
	// resource exhausted.
	ErrLeaseLimit = errors.New("the session holds its maximum of read leases")
)

// PrefixTerm sets the lease term of the keys that start with Prefix.
type PrefixTerm struct {
	Prefix string
	// Term is the term of read leases on those keys. 0 means they are never
	// cached: every read of them goes to the server. Write leases on them
	// get Term, or the default term if Term is 0.
	Term time.Duration
}

// Bounds of Config's durations. They are far beyond what a lease server
// needs, and they keep every sum the core forms from them (the longest
// term plus ε plus the horizon step, added to a monotonic time) far from
// time.Duration's limit of about 292 years, past which a sum would wrap
// around and the core would drop a lease its holder still trusts.
const (
	// MaxLeaseTerm is the longest term of a lease: of LeaseTerm and of
	// every PrefixTerms term. A write waits up to a term plus ε for a
	// holder that does not answer, and writes after a crash wait up to
	// the longest term plus ε plus the horizon step, so an hour is already
	// far longer than a cache should trust a value unasked.
	MaxLeaseTerm = time.Hour
	// MaxEpsilon is the largest clock allowance ε. ε covers the drift of
	// the client's clock against the server's over one term: even a drift
	// of 1% over MaxLeaseTerm is 36 s. It is not bounded by the term: an ε
	// longer than a short term only makes the server wait longer.
	MaxEpsilon = time.Minute
	// MaxHorizonStep is the longest HorizonStep: writes after a crash may
	// wait for it on top of the longest lease.
	MaxHorizonStep = time.Hour
	// MaxRetryWindow is the longest RetryWindow. A client retries a write
	// within seconds or minutes; a day covers a long outage.
	MaxRetryWindow = 24 * time.Hour
)

// Config configures a Core. Package server fills it from its own Config,
// with defaults applied.
type Config struct {
	// LeaseTerm is the term of read and write leases on keys that no
	// PrefixTerms entry covers. It must be positive and at most
	// MaxLeaseTerm.
	LeaseTerm time.Duration
	// PrefixTerms set other terms for keys under some prefixes; the longest
	// matching prefix wins. Each term is 0 to MaxLeaseTerm.
	PrefixTerms []PrefixTerm
	// Epsilon is the clock allowance ε: a lease of term t is live until
	// t+ε after it was granted. It is 0 to MaxEpsilon.
	Epsilon time.Duration
	// HorizonStep is how far past the longest lease the lease horizon moves
	// each time it is persisted. It must be positive and at most
	// MaxHorizonStep.
	HorizonStep time.Duration
	// MaxLeasesPerSession caps the read leases one session holds at once
	// (leasetable.Config.MaxLeasesPerSession): a read that would need
	// another fails with ErrLeaseLimit, and a writer past it gets no fresh
	// lease. Zero means no cap.
	MaxLeasesPerSession int
	// MaxWriteLeasesPerSession caps the write leases one session holds
	// (leasetable.Config.MaxWriteLeasesPerSession): an acquisition past
	// it fails with leasetable.ErrWriteLeaseLimit. Zero means no cap.
	MaxWriteLeasesPerSession int
	// MaxLeases caps the read leases of all sessions together
	// (leasetable.Config.MaxLeases), in the same way. Zero means no cap.
	MaxLeases int
	// Replicated says that the store is replicated, so that another node
	// may come to lead while this one still believes it does. Every read
	// then needs a horizon this core persisted that covers it: once none
	// can be persisted and the last one has passed, reads fail with
	// ErrUnavailable instead of being served without a lease, because a
	// new leader writes only after that horizon (DESIGN §13). A store of
	// one node alone may leave it false: reads then go on, without
	// leases, while the store is down.
	Replicated bool
	// RetryWindow is how long the outcomes of a client's writes are kept
	// after its last write, so that a write it retries within that time is
	// applied once (Request.Client). Every quarter of it, the core forgets
	// the clients idle for longer. 0 means they are never forgotten; it is
	// at most MaxRetryWindow.
	RetryWindow time.Duration
	// Inherited are the keys that writes of an earlier leader's term
	// changed as this node applied them in a later one
	// (replica.Node.Inherited), each with a bound, on this core's clock
	// and without ε, on the leases that leader may have granted on the
	// key's old value: raft committed the writes with a later leader's
	// first entry, but their writers may not have been told, and the
	// leader that appended them may have taken them for failed and may
	// serve the keys' old values, cached or not, until its horizon. Until
	// its bound plus ε, reads of such a key fail with ErrUnavailable, and
	// every write waits (the write barrier reaches that far).
	Inherited map[string]time.Time
	// Clockname names this node's clock, so that a later core of the
	// same node knows the horizons this one records (store.State.HorizonBy):
	// it may count them on the boot clock by its BootFile, rather than
	// from when it applied them. It must differ from every other node's
	// (replica.Node.Clockname). Empty: only a store of one node alone
	// (Replicated false) takes the horizons it holds with no clock name
	// for its own.
	Clockname string
	// BootFile is a file of this node's own, in its data folder, where the
	// core records, with each horizon it persists, when it passes on the
	// machine's boot clock (horizon.go): a later core of the same node, in
	// the same boot of the machine, waits for that horizon until then and
	// no longer, whatever the wall clock says. Empty: no record is kept,
	// and a restart waits the whole span of the stored horizon.
	BootFile string
	// BootClock reads the machine's boot clock for BootFile. Nil means the
	// system's (clock.RealBoot).
	BootClock clock.Boot
	// UnsafeSkipHorizonWait lets a new core write at once, without waiting
	// for the leases an earlier run or leader may have granted: it breaks
	// the promise of every such lease. It exists for the negative control
	// of the linearizability tests, which must find the stale reads it
	// causes. Never set it otherwise.
	UnsafeSkipHorizonWait bool
	// Admit, if set, decides whether a write (op store.OpPut, OpDelete
	// or OpCAS) or a write-lease acquisition (OpGrantWriteLease) of
	// bytes bytes of key and value may be written: for instance a guard
	// of the disk's free space (package diskguard). Submit asks it with
	// bytes 0 before the request invalidates anyone, and the committer
	// asks it again, with the request's bytes, just before it commits;
	// an error refuses the request with that error, and nothing of it is
	// applied.
	// That refusal is definite, so the core never lets it reach a write
	// with a Client (Request.Client) that an earlier copy, of the same
	// Client and ID, may have applied: a retry must not be told that a
	// write that committed failed. A write whose outcome the store keeps
	// gets it (Outcome.Duplicate) even while Admit refuses writes; on a
	// key held for an earlier leader (Inherited), once the hold ends.
	// Submit does not ask Admit about one whose earlier copy is still on
	// its way through the core, or whose outcome the store cannot tell
	// (it is down): it waits its turn on the key behind that copy, and
	// the committer asks again and refuses it only if no earlier copy was
	// applied. A duplicate writes nothing, so this costs no room; only
	// one let through while the store could not tell, and that turns out
	// new, is applied although Admit refused it.
	// Lease horizons, write-lease ends and the forgetting of
	// idle clients are never asked about: renewals and releases go on.
	// It is called without the core's locks, and must not block. Nil
	// admits everything.
	Admit func(op store.Op, bytes int) error
	// TTL bounds and paces TTL leases (DESIGN §14).
	TTL TTLConfig
	// Clock reads time for every lease decision. Nil means the system
	// clock.
	Clock clock.Clock
	// Logger receives the core's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// Validate checks c's durations against their bounds and returns an error
// that names the first bad field, its value and the bound. New calls it;
// package server calls it on its own configuration.
func (c Config) Validate() error {
	// The terms first: the server derives its default horizon step from
	// them.
	switch {
	case c.LeaseTerm <= 0:
		return fmt.Errorf("lease term %v is not positive", c.LeaseTerm)
	case c.LeaseTerm > MaxLeaseTerm:
		return fmt.Errorf("lease term %v is longer than %v, the longest allowed", c.LeaseTerm, MaxLeaseTerm)
	}
	for _, p := range c.PrefixTerms {
		switch {
		case p.Term < 0:
			return fmt.Errorf("term %v for prefix %q is negative", p.Term, p.Prefix)
		case p.Term > MaxLeaseTerm:
			return fmt.Errorf("term %v for prefix %q is longer than %v, the longest allowed", p.Term, p.Prefix, MaxLeaseTerm)
		}
	}
	switch {
	case c.Epsilon < 0:
		return fmt.Errorf("epsilon %v is negative", c.Epsilon)
	case c.Epsilon > MaxEpsilon:
		return fmt.Errorf("epsilon %v is longer than %v, the longest allowed", c.Epsilon, MaxEpsilon)
	case c.HorizonStep <= 0:
		return fmt.Errorf("horizon step %v is not positive", c.HorizonStep)
	case c.HorizonStep > MaxHorizonStep:
		return fmt.Errorf("horizon step %v is longer than %v, the longest allowed", c.HorizonStep, MaxHorizonStep)
	case c.RetryWindow < 0:
		return fmt.Errorf("retry window %v is negative", c.RetryWindow)
	case c.RetryWindow > MaxRetryWindow:
		return fmt.Errorf("retry window %v is longer than %v, the longest allowed", c.RetryWindow, MaxRetryWindow)
	}
	return c.TTL.validate()
}

// TermFor returns the read-lease term of key.
func (c Config) TermFor(key string) time.Duration {
	term, best := c.LeaseTerm, -1
	for _, p := range c.PrefixTerms {
		if len(p.Prefix) > best && strings.HasPrefix(key, p.Prefix) {
			term, best = p.Term, len(p.Prefix)
		}
	}
	return term
}

// WriteTermFor returns the write-lease term of key.
func (c Config) WriteTermFor(key string) time.Duration {
	if t := c.TermFor(key); t > 0 {
		return t
	}
	return c.LeaseTerm
}

// MaxTerm returns the longest term any lease may have.
func (c Config) MaxTerm() time.Duration {
	m := c.LeaseTerm
	for _, p := range c.PrefixTerms {
		m = max(m, p.Term)
	}
	return m
}

// Notifier carries the core's notices to sessions. The core calls it
// without holding its locks, from the goroutine of whatever call decided
// the notice; it must not block.
type Notifier interface {
	// Invalidate asks session id to drop keys and acknowledge.
	Invalidate(id SessionID, keys []string)
	// Recall asks session id to release its write lease on key.
	Recall(id SessionID, key string, token uint64)
}

// Core is the apply path. See the package comment. Its methods are safe for
// concurrent use.
type Core struct {
	cfg    Config
	log    *slog.Logger
	clock  clock.Clock
	store  store.Store
	notify Notifier

	mu    sync.Mutex // guards table, clients and handed; see the package comment
	table *leasetable.Table
	// clients maps open sessions to the client identities they gave
	// (SetClient), and handed maps client identities to the closed
	// sessions that hold the leases an earlier leader handed over for
	// them (handoff.go).
	clients map[SessionID]uint64
	handed  map[uint64]SessionID
	// handingOff is set, under mu and readMu, while HandOff holds grants,
	// reads and writes; it is read without. Reads hold readMu for reading
	// while they run, so that HandOff can wait for the ones in progress.
	handingOff atomic.Bool
	readMu     sync.RWMutex
	// stopping is set, under mu, when the core begins to stop; Submit
	// refuses new writes from then on.
	stopping atomic.Bool

	// The lease horizon (DESIGN §7); see horizon.go.
	life        time.Duration // the longest a lease lives: the longest term plus ε
	horizon     atomic.Int64  // the persisted horizon this run trusts, in ns past started on the monotonic clock; 0: none
	horizonMu   sync.Mutex    // serializes persisting it
	horizonKick chan struct{} // asks horizonLoop to move it ahead; capacity 1
	boot        clock.Boot    // the machine's boot clock (Config.BootClock)
	bootKept    *bootRecord   // the boot record of the horizon the store holds, if known; guarded by horizonMu
	// bootHorizon is the time since boot at which the horizon passes,
	// by its boot record (bootRecord.BootHorizon); 0 if it has none. See
	// bootBehind.
	bootHorizon atomic.Int64
	barrier     time.Time // the bound of an earlier run's leases; writes wait for it
	inherited   time.Time // the end of the leases handed over by an earlier leader
	started     time.Time
	// held maps the keys of Config.Inherited whose bound plus ε had not
	// passed at the start to that time; set in restore, and read-only
	// after New returns.
	held map[string]time.Time

	// The store's health; see commit.go.
	down downState
	// copies counts, by Client and ID, the writes with a Client between
	// Submit and their outcome (Core.track), so that Admit does not
	// refuse a retry whose first copy may yet commit.
	copiesMu sync.Mutex
	copies   map[retryKey]int
	// revision is the revision of the last committed change, as the store
	// reported it.
	revision atomic.Uint64

	// ttl tracks the TTL leases (ttl.go).
	ttl ttlState

	queue commitQueue
	wake  chan struct{} // pokes the timer loop; capacity 1
	loops sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// New returns a Core over st, which it owns from then on and closes in
// Close. It reads what an earlier run left in st: the lease horizon, whose
// remaining part holds writes back (reads are served at once), and the
// write leases, which it restores until then. It refuses a Config that
// Validate refuses.
func New(cfg Config, st store.Store, notify Notifier) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("core: %w", err)
	}
	cfg.Clock = clock.OrReal(cfg.Clock)
	cfg.TTL = cfg.TTL.WithDefaults()
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Core{
		cfg:    cfg,
		log:    cfg.Logger,
		clock:  cfg.Clock,
		store:  st,
		notify: notify,
		table: leasetable.New(leasetable.Config{Epsilon: cfg.Epsilon, MaxLeasesPerSession: cfg.MaxLeasesPerSession,
			MaxWriteLeasesPerSession: cfg.MaxWriteLeasesPerSession, MaxLeases: cfg.MaxLeases}),
		clients:     make(map[SessionID]uint64),
		copies:      make(map[retryKey]int),
		handed:      make(map[uint64]SessionID),
		life:        cfg.MaxTerm() + cfg.Epsilon,
		boot:        clock.OrRealBoot(cfg.BootClock),
		horizonKick: make(chan struct{}, 1),
		wake:        make(chan struct{}, 1),
	}
	c.queue.init()
	if err := c.restore(); err != nil {
		return nil, err
	}
	if err := c.newTTL(); err != nil {
		return nil, err
	}
	c.loops.Add(3)
	go c.timerLoop()
	go c.commitLoop()
	go c.horizonLoop()
	if cfg.RetryWindow > 0 {
		c.loops.Add(1)
		go c.forgetLoop()
	}
	return c, nil
}

// forgetLoop forgets, every quarter of the retry window, the write
// outcomes of the clients that have not written for a whole window.
func (c *Core) forgetLoop() {
	defer c.loops.Done()
	for {
		t := c.clock.NewTimer(c.cfg.RetryWindow / 4)
		select {
		case <-c.queue.closed:
			t.Stop()
			return
		case <-t.Chan():
		}
		c.forgetIdleClients(c.clock.Now())
	}
}

// forgetBatch is the most clients one OpForgetClients names.
const forgetBatch = 1024

// forgetIdleClients forgets the clients whose last write was more than the
// retry window before now.
func (c *Core) forgetIdleClients(now time.Time) {
	cutoff := now.Add(-c.cfg.RetryWindow)
	for {
		ids, err := c.store.IdleClients(cutoff, forgetBatch)
		if err == nil && len(ids) > 0 {
			_, err = c.apply([]store.Command{{Op: store.OpForgetClients, Clients: ids, At: cutoff}})
		}
		if err != nil {
			c.log.Warn("cannot forget idle clients; trying again later", "err", err)
			return
		}
		if len(ids) < forgetBatch {
			return
		}
	}
}

// OpenSession registers a session.
func (c *Core) OpenSession(id SessionID) {
	c.mu.Lock()
	c.table.AddSession(id)
	c.mu.Unlock()
}

// CloseSession ends a session. Its writes that are not committing are
// abandoned. If relinquish is true (the client said goodbye), its leases
// are freed at once, its write leases once their end is durable; otherwise
// they stay until they expire, because its client may still trust its
// cache. done, if not nil, is called once every lease the close freed is
// free for other sessions.
func (c *Core) CloseSession(id SessionID, relinquish bool, done func()) {
	c.mu.Lock()
	delete(c.clients, id)
	eff := c.table.CloseSession(id, relinquish, c.clock.Now())
	c.enqueueReady(eff)
	c.mu.Unlock()
	c.endWrites(&eff, done)
	c.carryOut(eff)
}

// Read grants session id a read lease on key and returns the key's committed
// record with the term granted: the key's term, or 0 when the key must not
// be cached now (a write is pending on it, another session holds its write
// lease, its prefix is never cached, or the horizon cannot be persisted).
// The lease is recorded before the value is read, so a write that commits
// in between must invalidate it. A read that needs a new lease while the
// session holds Config.MaxLeasesPerSession fails with ErrLeaseLimit.
func (c *Core) Read(id SessionID, key []byte) (store.Record, time.Duration, error) {
	c.readMu.RLock()
	defer c.readMu.RUnlock()
	if c.handingOff.Load() {
		// The next leader may write as soon as it leads: no read here
		// may see the value before its write after that.
		return store.Record{}, 0, fmt.Errorf("%w: read %q: this node is handing the lead over", ErrUnavailable, key)
	}
	now := c.clock.Now()
	k := string(key)
	if until := c.heldUntil(k, now); !until.IsZero() {
		return store.Record{}, 0, fmt.Errorf("%w: read %q: a write of an earlier leader's term is settling on this key until %v", ErrUnavailable, key, until.Format(time.RFC3339Nano))
	}
	term := c.cfg.TermFor(k)
	if (term > 0 || c.cfg.Replicated) && c.ensureHorizon(now) != nil {
		if c.cfg.Replicated && c.sinceStart(now) >= c.horizon.Load() {
			return store.Record{}, 0, fmt.Errorf("%w: read %q", ErrUnavailable, key)
		}
		term = 0 // served, but not cached
	}
	c.mu.Lock()
	if c.handingOff.Load() {
		term = 0
	}
	if c.table.AtLeaseLimit(id, k, term) {
		total := c.table.Stats().Leases
		c.mu.Unlock()
		if c.cfg.MaxLeases > 0 && total >= c.cfg.MaxLeases {
			return store.Record{}, 0, fmt.Errorf("%w: read %q needs a new lease, and the server holds %d read leases, its limit (MaxLeases): retry once some have ended, or cache fewer keys",
				ErrLeaseLimit, key, total)
		}
		return store.Record{}, 0, fmt.Errorf("%w: read %q needs a new lease, and this session holds %d read leases, the limit (MaxLeasesPerSession): release some, or cache fewer keys",
			ErrLeaseLimit, key, c.cfg.MaxLeasesPerSession)
	}
	term = c.table.Grant(id, k, term, now)
	c.mu.Unlock()
	if term > 0 {
		c.poke()
	}
	rec, err := c.store.Get(key)
	if err != nil {
		return store.Record{}, 0, fmt.Errorf("%w: read %q: %v", ErrInternal, key, err)
	}
	return rec, term, nil
}

// Renew extends session id's leases on keys and returns the term granted
// to each, 0 where a lease was not renewed. A write lease the session holds
// on keys[i] is renewed too, unless readOnly[i] (readOnly nil: none is);
// readOnly, if not nil, has the length of keys.
func (c *Core) Renew(id SessionID, keys []string, readOnly []bool) []time.Duration {
	now := c.clock.Now()
	terms := make([]time.Duration, len(keys))
	if c.ensureHorizon(now) == nil {
		for i, k := range keys {
			terms[i] = c.cfg.TermFor(k)
		}
	}
	c.mu.Lock()
	if c.handingOff.Load() {
		clear(terms)
	}
	c.table.Renew(id, keys, terms, readOnly, now)
	c.mu.Unlock()
	c.poke()
	return terms
}

// Relinquish frees session id's read leases on keys: after an eviction, or
// as the acknowledgement of an invalidation.
func (c *Core) Relinquish(id SessionID, keys []string) {
	c.mu.Lock()
	eff := c.table.Relinquish(id, keys, c.clock.Now())
	c.enqueueReady(eff)
	c.mu.Unlock()
	c.carryOut(eff)
}

// ReleaseWriteLease ends session id's write lease on key granted with
// token, or one of its client's other sessions (SetClient). It fails with
// leasetable.ErrNotFound if there is no such lease.
// Other sessions may lease the key once the end is durable; then, or when
// the store fails to make it durable (it is ended again once the store is
// back), done is called, unless ReleaseWriteLease failed.
func (c *Core) ReleaseWriteLease(id SessionID, key string, token uint64, done func()) error {
	c.mu.Lock()
	eff, err := c.table.ReleaseWriteLease(id, key, token, c.clock.Now())
	c.enqueueReady(eff)
	c.mu.Unlock()
	if err == nil {
		c.endWrites(&eff, done)
	}
	c.carryOut(eff)
	return err
}

// endWrites queues the durable end of eff's ended write leases, and takes
// them out of eff, so that done is called once they are all ended (at once
// if there are none).
func (c *Core) endWrites(eff *leasetable.Effects, done func()) {
	if done == nil {
		return
	}
	ends := eff.EndWrite
	eff.EndWrite = nil
	if len(ends) == 0 {
		done()
		return
	}
	var left atomic.Int32
	left.Store(int32(len(ends)))
	one := func() {
		if left.Add(-1) == 0 {
			done()
		}
	}
	jobs := make([]job, len(ends))
	for i, n := range ends {
		jobs[i] = job{end: n, done: one}
	}
	c.queue.push(jobs...)
}

// Stats are the core's counters.
type Stats struct {
	leasetable.Stats
	// Revision is the revision of the last committed change.
	Revision uint64
	// WritesAllowedIn is how long writes are still held for the leases of
	// an earlier run; 0 when they are not.
	WritesAllowedIn time.Duration
	// Uptime is how long the core has run.
	Uptime time.Duration
	// TTL are the counters of TTL leases.
	TTL TTLStats
}

// Stats returns the core's counters. It holds the lease table's lock only
// to copy its counters, which costs the same however many leases there
// are, so a flood of stats requests does not hold up reads and writes.
func (c *Core) Stats() Stats {
	now := c.clock.Now()
	c.mu.Lock()
	st := Stats{Stats: c.table.Stats()}
	c.mu.Unlock()
	st.Revision = c.revision.Load()
	st.Uptime = now.Sub(c.started)
	st.WritesAllowedIn = c.writesAllowedIn(now)
	st.TTL = c.TTLStats()
	return st
}

// WritesAllowedIn returns how long writes are still held for the leases of
// an earlier run or leader (Stats.WritesAllowedIn), without taking the
// lease table's lock.
func (c *Core) WritesAllowedIn() time.Duration { return c.writesAllowedIn(c.clock.Now()) }

// writesAllowedIn returns how long after now the write barrier ends, 0 if
// it has. The barrier is set before New returns and never changes.
func (c *Core) writesAllowedIn(now time.Time) time.Duration {
	if left := c.barrier.Sub(now); !c.barrier.IsZero() && left > 0 {
		return left
	}
	return 0
}

// NextDeadline returns when the lease table next has something to do: for
// tests that advance a fake clock step by step.
func (c *Core) NextDeadline() (time.Time, bool) {
	c.mu.Lock()
	next, ok := c.table.NextDeadline()
	c.mu.Unlock()
	if at, tok := c.ttlDeadline(c.clock.Now()); tok && (!ok || at.Before(next)) {
		next, ok = at, true
	}
	return next, ok
}

// BeginStop makes Submit refuse new writes. The caller then cancels the
// writes it has submitted (Cancel) and may wait for the committing ones
// with Drain.
func (c *Core) BeginStop() {
	c.mu.Lock() // Submit checks stopping under c.mu: no op slips past the caller's cancels
	c.stopping.Store(true)
	c.mu.Unlock()
}

// Drain waits until no write is queued or committing.
func (c *Core) Drain() { c.queue.drain() }

// Close stops the core: it lets the committer finish what is queued, stops
// its goroutines, lowers the lease horizon to the leases still live (so
// that the next run holds writes no longer than they need), and closes the
// store. Sessions must have ended before. Close waits for the core's
// goroutines to end.
func (c *Core) Close() error {
	c.closeOnce.Do(func() {
		c.BeginStop()
		c.queue.close()
		c.loops.Wait()
		if c.handingOff.Load() {
			// The handoff is the last word on this core's leases: a lower
			// horizon after it would clear it.
		} else if err := c.lowerHorizon(); err != nil {
			c.log.Warn("cannot lower the lease horizon; the next start holds writes until it", "err", err)
		}
		c.closeErr = c.store.Close()
	})
	return c.closeErr
}

// heldUntil reports until when reads of key are held at now (isHeld),
// zero if they are not.
func (c *Core) heldUntil(key string, now time.Time) time.Time {
	if until, ok := c.held[key]; ok && now.Before(until) {
		return until
	}
	return time.Time{}
}

// isHeld reports whether key is one of Config.Inherited and its bound,
// plus ε, has not passed at now.
func (c *Core) isHeld(key string, now time.Time) bool { return !c.heldUntil(key, now).IsZero() }

// poke tells the timer loop that the next deadline may have moved.
func (c *Core) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// timerLoop is the one timer of the lease table: it sleeps until the
// table's next deadline and ticks it.
func (c *Core) timerLoop() {
	defer c.loops.Done()
	for {
		next, ok := c.NextDeadline()
		var timer clock.Timer
		var fire <-chan time.Time
		if ok {
			now := c.clock.Now()
			timer = c.clock.NewTimer(next.Sub(now))
			fire = timer.Chan()
			// The timer counts from when it was made, not from now: if the
			// clock jumped in between (a fake clock advanced by a test),
			// it would fire late by the jump. Make it again.
			if c.clock.Now().Sub(now) >= time.Millisecond {
				timer.Stop()
				continue
			}
		}
		select {
		case <-c.queue.closed:
			if timer != nil {
				timer.Stop()
			}
			return
		case <-c.wake:
			if timer != nil {
				timer.Stop()
			}
			continue
		case <-fire:
		}
		c.mu.Lock()
		eff := c.table.Tick(c.clock.Now())
		c.enqueueReady(eff)
		// The durable ends of expired write leases are queued under
		// c.mu too: whoever sees the tick (NextDeadline) and then waits
		// for the committer (Drain) waits for them, and for the writes
		// they let go.
		for _, n := range eff.EndWrite {
			c.queue.push(job{end: n})
		}
		eff.EndWrite = nil
		c.mu.Unlock()
		c.carryOut(eff)
		c.ttlTick(c.clock.Now())
	}
}

// carryOut carries out the table's decisions other than ready ops: it
// sends invalidations and recalls, tells the writers of abandoned ops, and
// queues the durable end of write leases. The caller must not hold c.mu.
func (c *Core) carryOut(eff leasetable.Effects) {
	if len(eff.Invalidate) > 0 {
		bySession := make(map[SessionID][]string)
		for _, n := range eff.Invalidate {
			bySession[n.Session] = append(bySession[n.Session], n.Key)
		}
		for id, keys := range bySession {
			c.notify.Invalidate(id, keys)
		}
	}
	for _, n := range eff.Recall {
		c.notify.Recall(n.Session, n.Key, n.Token)
	}
	for _, op := range eff.Abandoned {
		switch d := op.Data.(type) {
		case *Request:
			d.finish(Outcome{Err: ErrCanceled})
		case *revocation:
			c.abandonRevocation(d, fmt.Errorf("%w: revocation of TTL lease %016x: its keys' holders did not let it commit within its timeout", ErrCanceled, d.id))
		}
	}
	for _, n := range eff.EndWrite {
		c.queue.push(job{end: n})
	}
	c.poke()
}
