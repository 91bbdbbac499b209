package core

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/store"
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
// with defaults applied, and package node adds what it knows of the node:
// Admit, Replicated, Clockname, Inherited, LeaderName and LeaderAddr.
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
	// LeaderName and LeaderAddr name the node this core leads for: when
	// LeaderName is set, New records through the store, as its first
	// command, that the node LeaderName leads and serves clients at
	// LeaderAddr (store.OpSetLeader), so that the other nodes can send
	// clients to it, before it reads the state; an error fails New.
	// Empty: New records no leader (a store of one node alone).
	LeaderName, LeaderAddr string
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
	// HotPrefixWrites is how many writes under a prefix within a term stop
	// its leasing for a term (leasetable.Config.HotPrefixWrites): zero
	// means 2, negative never.
	HotPrefixWrites int
	// UnsafeNoPrefixRecall grants prefix leases but never recalls them:
	// a write under a leased prefix commits without invalidating or
	// waiting for its holders (leasetable.Config.UnsafeNoPrefixRecall).
	// It exists for the negative control of the linearizability tests,
	// which must find the stale listings it causes. Never set it otherwise.
	UnsafeNoPrefixRecall bool
	// UnsafeLockSteal grants an acquisition at the head of its key's
	// queue over a write lease bound to a TTL lease that is still held,
	// as if its TTL lease had run out: the negative control of the lock
	// checks of the linearizability tests
	// (leasetable.Config.UnsafeLockSteal). Never set it otherwise.
	UnsafeLockSteal bool
	// Admit, if set, decides whether a write (op store.OpPut, OpDelete
	// or OpCAS; a transaction is OpTxn, or OpDelete if it puts nothing in
	// either branch) or a write-lease acquisition (OpGrantWriteLease) of
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
	// History bounds the event history the leader keeps (DESIGN §16).
	History HistoryRetention
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
		return fmt.Errorf("LeaseTerm %v is not positive", c.LeaseTerm)
	case c.LeaseTerm > MaxLeaseTerm:
		return fmt.Errorf("LeaseTerm %v is longer than %v, the longest allowed", c.LeaseTerm, MaxLeaseTerm)
	}
	for _, p := range c.PrefixTerms {
		switch {
		case p.Term < 0:
			return fmt.Errorf("PrefixTerms: term %v for prefix %q is negative", p.Term, p.Prefix)
		case p.Term > MaxLeaseTerm:
			return fmt.Errorf("PrefixTerms: term %v for prefix %q is longer than %v, the longest allowed", p.Term, p.Prefix, MaxLeaseTerm)
		}
	}
	switch {
	case c.Epsilon < 0:
		//lint:ignore ST1005 the error begins with the name of the field
		return fmt.Errorf("Epsilon %v is negative", c.Epsilon)
	case c.Epsilon > MaxEpsilon:
		//lint:ignore ST1005 the error begins with the name of the field
		return fmt.Errorf("Epsilon %v is longer than %v, the longest allowed", c.Epsilon, MaxEpsilon)
	case c.HorizonStep <= 0:
		return fmt.Errorf("HorizonStep %v is not positive", c.HorizonStep)
	case c.HorizonStep > MaxHorizonStep:
		return fmt.Errorf("HorizonStep %v is longer than %v, the longest allowed", c.HorizonStep, MaxHorizonStep)
	case c.RetryWindow < 0:
		return fmt.Errorf("RetryWindow %v is negative", c.RetryWindow)
	case c.RetryWindow > MaxRetryWindow:
		return fmt.Errorf("RetryWindow %v is longer than %v, the longest allowed", c.RetryWindow, MaxRetryWindow)
	}
	return c.TTL.validate()
}

// withDefaults returns c with its nil and zero fields that have a
// default set to it: Clock, Logger, TTL's fields and History's. New
// calls it.
func (c Config) withDefaults() Config {
	c.Clock = clock.OrReal(c.Clock)
	c.TTL = c.TTL.WithDefaults()
	c.History = c.History.withDefaults()
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
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
