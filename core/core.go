// Package core is the one apply path of leased. A Core owns the lease table
// and the write barrier, and is the only code that calls them; it persists
// every state change as a deterministic store.Command through one Store,
// in one place (writeLog, log.go, which lists its callers). The Store is
// its caller's, who closes it after the Core (New).
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
	// ErrLocked: an acquisition that would not wait (leasetable.Try)
	// found the key's write lease held by another client, or others
	// waiting for it.
	ErrLocked = errors.New("locked: another client holds the write lease, or acquisitions wait for it")
	// ErrLeaseLimit: the session holds Config.MaxLeasesPerSession read
	// leases, and a read would need another. Package server reports it as
	// resource exhausted.
	ErrLeaseLimit = errors.New("the session holds its maximum of read leases")
)

// Notifier carries the core's notices to sessions. The core calls it
// without holding its locks, from the goroutine of whatever call decided
// the notice; it must not block.
type Notifier interface {
	// Invalidate asks session id to drop keys and acknowledge.
	Invalidate(id SessionID, keys []string)
	// InvalidatePrefixes asks session id to drop its listings of
	// prefixes, which it holds prefix leases on, and acknowledge
	// (Core.RelinquishPrefixes).
	InvalidatePrefixes(id SessionID, prefixes []string)
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
	// held maps the keys of Config.Inherited, and the holds recorded
	// with the stored horizon (store.State.Holds), whose bound plus ε had
	// not passed at the start to that time; set in restore, and read-only
	// after New returns.
	held map[string]time.Time

	// The store's health; see commit.go.
	down downState
	// doubt maps the keys that writes of unknown outcome may have changed
	// to the count of failed Applies when the last of them failed
	// (downState.fails); guarded by mu. Reads of them fail until the
	// store is reopened after that (doubtWrites).
	doubt map[string]uint64
	// copies counts, by Client and ID, the writes with a Client between
	// Submit and their outcome (Core.track), so that Admit does not
	// refuse a retry whose first copy may yet commit.
	copiesMu sync.Mutex
	copies   map[retryKey]int
	// revision is the revision of the last committed change, as the store
	// reported it.
	revision atomic.Uint64
	// compactMu serializes the compactions of the history (compact.go),
	// the loop's and Compact's; history is its state as last read.
	compactMu sync.Mutex
	history   historyStats
	// revCh is closed, under revMu, when the revision moves (Revisions);
	// nil until someone waits.
	revMu sync.Mutex
	revCh chan struct{}

	// ttl tracks the TTL leases (ttl.go).
	ttl ttlState

	queue commitQueue
	wake  chan struct{} // pokes the timer loop; capacity 1
	loops sync.WaitGroup

	closeOnce sync.Once
}

// New returns a Core over st. The caller owns st: it must keep st open
// until Close returns, and closes it after (or after New failed); the core
// never closes it. If cfg.LeaderName is set, New first records through st
// that this node leads (Config.LeaderName). It reads what an earlier run
// left in st: the lease horizon, whose remaining part holds writes back
// (reads are served at once), and the write leases, which it restores until
// then. If it holds reads of keys for an earlier leader (Config.Inherited,
// store.State.Holds), it records them with a horizon before it returns, and
// fails if it cannot. It refuses a Config that Validate refuses.
func New(cfg Config, st store.Store, notify Notifier) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("core: %w", err)
	}
	cfg = cfg.withDefaults()
	c := &Core{
		cfg:    cfg,
		log:    cfg.Logger,
		clock:  cfg.Clock,
		store:  st,
		notify: notify,
		table: leasetable.New(leasetable.Config{Epsilon: cfg.Epsilon, MaxLeasesPerSession: cfg.MaxLeasesPerSession,
			MaxWriteLeasesPerSession: cfg.MaxWriteLeasesPerSession, MaxLeases: cfg.MaxLeases,
			HotPrefixWrites: cfg.HotPrefixWrites, UnsafeNoPrefixRecall: cfg.UnsafeNoPrefixRecall,
			Unlisted: store.ReservedPrefix, UnsafeLockSteal: cfg.UnsafeLockSteal}),
		clients:     make(map[SessionID]uint64),
		copies:      make(map[retryKey]int),
		handed:      make(map[uint64]SessionID),
		life:        cfg.MaxTerm() + cfg.Epsilon,
		boot:        clock.OrRealBoot(cfg.BootClock),
		horizonKick: make(chan struct{}, 1),
		wake:        make(chan struct{}, 1),
	}
	c.queue.init()
	c.table.AddSession(lockSession)
	if err := c.recordLeader(); err != nil {
		return nil, err
	}
	if err := c.restore(); err != nil {
		return nil, err
	}
	if err := c.recordHolds(); err != nil {
		return nil, err
	}
	if err := c.newTTL(); err != nil {
		return nil, err
	}
	if st, err := c.store.State(); err == nil {
		c.history.set(st.History)
	}
	if cfg.History.Interval > 0 {
		c.loops.Add(1)
		go c.compactLoop()
	}
	c.loops.Add(4)
	go c.timerLoop()
	go c.commitLoop()
	go c.horizonLoop()
	go c.collectLoop(c.revision.Load())
	if cfg.RetryWindow > 0 {
		c.loops.Add(1)
		go c.forgetLoop()
	}
	return c, nil
}

// recordLeader records, as the first command of the core's term, that the
// node Config.LeaderName leads and serves clients at Config.LeaderAddr;
// nothing if LeaderName is empty. New calls it before it reads the state.
func (c *Core) recordLeader() error {
	if c.cfg.LeaderName == "" {
		return nil
	}
	cmd := store.Command{Op: store.OpSetLeader, Key: []byte(c.cfg.LeaderName), Value: []byte(c.cfg.LeaderAddr)}
	if _, err := c.writeLog([]store.Command{cmd}); err != nil {
		return fmt.Errorf("core: record that %s leads: %w", c.cfg.LeaderName, err)
	}
	return nil
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
// session holds Config.MaxLeasesPerSession fails with ErrLeaseLimit. A read
// of a key held for an earlier leader (Config.Inherited), or of one that a
// write of unknown outcome may have changed in a replicated store
// (doubtWrites), fails with ErrUnavailable.
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
	term = c.holderTerm(id, k, term, now) // a TTL lease's holder, on its keys (ttl.go)
	c.mu.Lock()
	if c.doubted(k) {
		c.mu.Unlock()
		return store.Record{}, 0, fmt.Errorf("%w: read %q: a write to it failed with an unknown outcome, which another node may decide", ErrUnavailable, key)
	}
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
	if lock, ok := strings.CutPrefix(k, store.LockRecordPrefix); ok {
		rec, err := c.readLockRecord([]byte(lock))
		return rec, term, err
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
		c.holderTerms(id, keys, terms, now) // a TTL lease's holder, on its keys (ttl.go)
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
//
// With under not 0, a TTL lease the caller has found the session may use,
// the session may release a write lease bound to that lease (a lock),
// whoever holds it (leasetable.Table.ReleaseWriteLease).
func (c *Core) ReleaseWriteLease(id SessionID, key string, token, under uint64, done func()) error {
	c.mu.Lock()
	eff, err := c.table.ReleaseWriteLease(id, key, token, under, c.clock.Now())
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
	// History is the event history's state, as the core last read it
	// (within HistoryRetention.Interval, and after each compaction).
	History store.HistoryState
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
	st.History = c.history.get()
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
// its goroutines, and lowers the lease horizon to the leases still live (so
// that the next run holds writes no longer than they need). It does not
// close the store: its owner does, once Close has returned (New). Sessions
// must have ended before. Close waits for the core's goroutines to end. It
// returns nil; a horizon it cannot lower is logged.
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
	})
	return nil
}

// heldUntil reports until when reads of key are held at now (isHeld),
// zero if they are not.
func (c *Core) heldUntil(key string, now time.Time) time.Time {
	if until, ok := c.held[key]; ok && now.Before(until) {
		return until
	}
	return time.Time{}
}

// isHeld reports whether key is one of Config.Inherited, or of the holds
// recorded with the stored horizon, and its bound, plus ε, has not passed
// at now.
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

// bySession groups the keys of notices by the session they go to; nil for
// none.
func bySession(notices []leasetable.Notice) map[SessionID][]string {
	if len(notices) == 0 {
		return nil
	}
	m := make(map[SessionID][]string)
	for _, n := range notices {
		m[n.Session] = append(m[n.Session], n.Key)
	}
	return m
}

// carryOut carries out the table's decisions other than ready ops: it
// sends invalidations and recalls, tells the writers of abandoned ops, and
// queues the durable end of write leases. The caller must not hold c.mu.
func (c *Core) carryOut(eff leasetable.Effects) {
	for id, keys := range bySession(eff.Invalidate) {
		c.notify.Invalidate(id, keys)
	}
	for id, prefixes := range bySession(eff.InvalidatePrefix) {
		c.notify.InvalidatePrefixes(id, prefixes)
	}
	for _, n := range eff.Recall {
		c.notify.Recall(n.Session, n.Key, n.Token)
	}
	for _, op := range eff.Abandoned {
		switch d := op.Data.(type) {
		case *Request:
			if d.Op == store.OpTxn {
				// One op passed its deadline, or its session closed:
				// the others leave too.
				c.cancelTxn(d, ErrCanceled)
				continue
			}
			d.abandon(ErrCanceled)
		case *revocation:
			c.abandonRevocation(d, fmt.Errorf("%w: revocation of TTL lease %016x: its keys' holders did not let it commit within its timeout", ErrCanceled, d.id))
		}
	}
	for _, n := range eff.EndWrite {
		c.queue.push(job{end: n})
	}
	c.poke()
}
