package core

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leased/leased/lessor"
	"github.com/leased/leased/store"
)

// TTL leases (DESIGN §14). The leader's core tracks them in a
// lessor.Lessor, guarded by ttlState.mu, and writes everything the Lessor
// decides through its one commit queue, in the order the Lessor hands it
// out: grants, the marks of keep-alives, checkpoints and revocations. A
// revocation is a write: each key attached to the lease goes through the
// lease table as a delete would (its readers are invalidated, its write
// lease recalled), and once every key is ready, one OpRevokeTTL deletes
// them all at one revision: ttlexpiry.go, which carries out what happens
// when a lease expires or is revoked.
//
// Locks: ttlState.mu is taken with no other lock of the core held, or
// under mu (enqueueReady); under it the core takes only the commit queue's
// lock. The Lessor's promises hold because the core keeps the caller's
// part of its contract (package lessor): Grant after the grant is applied;
// a keep-alive acknowledged only once its mark is applied; marks and
// checkpoints queued, under ttlState.mu, in the order the Lessor hands them
// out; Revoke once a revocation is applied; and Resume before the core
// answers anything.

// Bounds and defaults of TTLConfig.
const (
	// DefaultMinTTL is the shortest TTL a grant may ask for, unless
	// TTLConfig.MinTTL says otherwise. A TTL lease must outlive a
	// failover: its holder renews it at a third of its TTL, and while the
	// cluster elects a new leader no renewal gets through.
	DefaultMinTTL = 5 * time.Second
	// DefaultMaxTTL is the longest TTL a grant may ask for, unless
	// TTLConfig.MaxTTL says otherwise.
	DefaultMaxTTL = 24 * time.Hour
	// MaxTTL bounds TTLConfig.MaxTTL, far from time.Duration's limit.
	MaxTTL = 30 * 24 * time.Hour
	// DefaultMaxTTLLeases is the most TTL leases a server holds at once,
	// unless TTLConfig.MaxLeases says otherwise: about 100 MB of tracking
	// on the leader.
	DefaultMaxTTLLeases = 1_000_000
	// MaxKeepAliveLeases is the most leases one keep-alive may renew.
	MaxKeepAliveLeases = 10_000
)

// revokerSession is the lease table session of revocations: their ops
// invalidate every client session's leases on the keys they delete. It is
// below handedBase and above any session ID a server gives.
const revokerSession SessionID = handedBase - 1

// Errors of TTL leases.
var (
	// ErrTTLOutOfRange: a grant's TTL below TTLConfig.MinTTL or above
	// MaxTTL. Package server reports it as an invalid argument.
	ErrTTLOutOfRange = errors.New("TTL out of range")
	// ErrTTLLeaseLimit: the server holds TTLConfig.MaxLeases TTL leases.
	// Package server reports it as resource exhausted.
	ErrTTLLeaseLimit = errors.New("the server holds its maximum of TTL leases")
)

// TTLConfig sets the bounds and pace of TTL leases. Zero fields take
// their defaults.
type TTLConfig struct {
	// MinTTL and MaxTTL bound the TTL of a grant (DefaultMinTTL,
	// DefaultMaxTTL). MinTTL must exceed the time a failover takes.
	MinTTL, MaxTTL time.Duration
	// MaxLeases caps the TTL leases held at once (DefaultMaxTTLLeases);
	// a grant past it fails with ErrTTLLeaseLimit. Leases outlive the
	// sessions that granted them, so the cap is the server's, not a
	// session's: a session's grants are bounded by its requests in
	// flight.
	MaxLeases int
	// CheckpointInterval and MaxRevokesPerSecond are the Lessor's
	// (lessor.Config).
	CheckpointInterval  time.Duration
	MaxRevokesPerSecond int
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c TTLConfig) WithDefaults() TTLConfig {
	if c.MinTTL == 0 {
		c.MinTTL = DefaultMinTTL
	}
	if c.MaxTTL == 0 {
		c.MaxTTL = max(DefaultMaxTTL, c.MinTTL)
	}
	if c.MaxLeases == 0 {
		c.MaxLeases = DefaultMaxTTLLeases
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = lessor.DefaultCheckpointInterval
	}
	if c.MaxRevokesPerSecond == 0 {
		c.MaxRevokesPerSecond = lessor.DefaultMaxRevokesPerSecond
	}
	return c
}

// validate reports a field out of range.
func (c TTLConfig) validate() error {
	d := c.WithDefaults()
	switch {
	case c.MinTTL < 0:
		return fmt.Errorf("TTL.MinTTL %v is negative", c.MinTTL)
	case c.MaxTTL < 0:
		return fmt.Errorf("TTL.MaxTTL %v is negative", c.MaxTTL)
	case d.MaxTTL > MaxTTL:
		return fmt.Errorf("TTL.MaxTTL %v is longer than %v, the longest allowed", d.MaxTTL, MaxTTL)
	case d.MinTTL > d.MaxTTL:
		return fmt.Errorf("TTL.MinTTL %v is above MaxTTL %v", d.MinTTL, d.MaxTTL)
	case c.MaxLeases < 0:
		return fmt.Errorf("TTL.MaxLeases %d is negative", c.MaxLeases)
	case c.CheckpointInterval < 0:
		return fmt.Errorf("TTL.CheckpointInterval %v is negative", c.CheckpointInterval)
	case c.MaxRevokesPerSecond < 0 || c.MaxRevokesPerSecond > lessor.MaxRevokesPerSecond:
		return fmt.Errorf("TTL.MaxRevokesPerSecond %d is outside 0..%d", c.MaxRevokesPerSecond, lessor.MaxRevokesPerSecond)
	}
	return nil // every field the lessor takes (lessor.New checks them again)
}

// ttlState is the core's part of TTL leases.
type ttlState struct {
	mu sync.Mutex
	ls *lessor.Lessor
	// revoking holds the revocations under way, by lease.
	revoking map[uint64]*revocation
	// granting counts the grants queued and not yet applied, which
	// count against MaxLeases.
	granting int
	// owners holds the owner of each lease the Lessor tracks that has
	// one (store.TTLLease.Owner).
	owners map[uint64]uint64
	// holders maps a lease to the client identity of its holder: the
	// client that granted it or kept it alive last, as far as this core
	// has seen; held maps a client to the leases it holds. keysOf maps
	// the leases whose holders read their keys to those keys (loaded
	// from the store on the first read, kept by the writes that commit:
	// attachedWrite), and attached each such key to its lease. See
	// holderTerms.
	holders  map[uint64]uint64
	holding  atomic.Int64 // len(holders), read without mu
	held     map[uint64]map[uint64]struct{}
	keysOf   map[uint64]map[string]struct{}
	attached map[string]uint64
	stats    TTLStats
}

// TTLStats are the counters of TTL leases.
type TTLStats struct {
	// Leases is the number of TTL leases the leader tracks.
	Leases int
	// Revoked counts the revocations applied, Expired those of them that
	// expiry started, and KeysDeleted the keys they deleted.
	Revoked, Expired, KeysDeleted uint64
	// Waited sums how long revocations waited for the holders of their
	// keys' read and write leases, and Holders how many they invalidated
	// or recalled, as a write's Outcome counts them.
	Waited  time.Duration
	Holders uint64
	// KeepAlives counts the leases renewed.
	KeepAlives uint64
}

// markBatch is one keep-alive until it is answered: the mark records it
// needs applied before its renewals are acknowledged, and the parts of it
// that wait for the revocations of their leases to end.
type markBatch struct {
	mu      sync.Mutex
	left    int // parts not yet ended: mark records, waits, and the call itself
	err     error
	renewed []lessor.Renewal
	unknown []uint64
	done    func(KeepAliveOutcome)
}

// end ends one part of b, with its renewals and unknown leases or its
// error, and answers b once every part has ended.
func (c *Core) endPart(b *markBatch, o KeepAliveOutcome) {
	b.mu.Lock()
	if o.Err != nil && b.err == nil {
		b.err = o.Err
	}
	b.renewed = append(b.renewed, o.Renewed...)
	b.unknown = append(b.unknown, o.Unknown...)
	b.left--
	last := b.left == 0
	b.mu.Unlock()
	if last {
		c.acknowledge(b)
	}
}

// KeepAliveOutcome is how a keep-alive ended: the leases it renewed, with
// their TTL, and those it did not know (never granted, revoked or
// expired); or, with Err, nothing is acknowledged.
type KeepAliveOutcome struct {
	Renewed []lessor.Renewal
	Unknown []uint64
	Err     error
}

// newTTL sets up the core's Lessor and resumes it from the leases in the
// store. restore calls it once the write barrier is known.
func (c *Core) newTTL() error {
	ls, err := lessor.New(lessor.Config{Epsilon: c.cfg.Epsilon, CheckpointInterval: c.cfg.TTL.CheckpointInterval,
		MaxRevokesPerSecond: c.cfg.TTL.MaxRevokesPerSecond})
	if err != nil {
		return fmt.Errorf("core: %w", err)
	}
	c.ttl.ls = ls
	c.ttl.revoking = make(map[uint64]*revocation)
	c.ttl.owners = make(map[uint64]uint64)
	c.ttl.holders = make(map[uint64]uint64)
	c.ttl.held = make(map[uint64]map[uint64]struct{})
	c.ttl.keysOf = make(map[uint64]map[string]struct{})
	c.ttl.attached = make(map[string]uint64)
	c.table.AddSession(revokerSession)
	n, err := c.resumeTTL(c.started, c.keptSince())
	if err != nil {
		return err
	}
	if n > 0 {
		c.log.Info("resumed the TTL leases", "leases", n)
	}
	return nil
}

// keptSince is the time from which no earlier leader or run of this node
// can still acknowledge a keep-alive: the write barrier, which waits out
// the newest horizon or the handed-over leases. A lease kept alive since
// its last checkpoint resumes with its whole TTL from then.
func (c *Core) keptSince() time.Time { return maxTime(c.barrier, c.inherited) }

// resumeTTL tracks the TTL leases of the store in the Lessor, at now
// (lessor.Resume), and returns how many it read. Besides New, the
// committer calls it once the store is back after a failure, for the
// grants whose commits failed and may have been applied.
func (c *Core) resumeTTL(now, keptSince time.Time) (int, error) {
	var ps []lessor.Persisted
	owners := make(map[uint64]uint64)
	err := c.store.TTLLeases(func(l store.TTLLease) error {
		ps = append(ps, lessor.Persisted{ID: l.ID, TTL: l.TTL, Remaining: l.Remaining, KeptAlive: l.KeptAlive, KeptSince: keptSince})
		if l.Owner != 0 {
			owners[l.ID] = l.Owner
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("core: read the TTL leases: %w", err)
	}
	c.ttl.mu.Lock()
	defer c.ttl.mu.Unlock()
	if err := c.ttl.ls.Resume(ps, now); err != nil {
		return 0, fmt.Errorf("core: resume the TTL leases: %w", err)
	}
	maps.Copy(c.ttl.owners, owners)
	c.poke()
	return len(ps), nil
}

// submitGrant queues the grant of a TTL lease of r.TTL.
func (c *Core) submitGrant(r *Request) error {
	cfg := c.cfg.TTL
	switch {
	case r.TTL < cfg.MinTTL:
		return fmt.Errorf("%w: TTL %v is below the minimum of %v, which a TTL lease needs to outlive a failover", ErrTTLOutOfRange, r.TTL, cfg.MinTTL)
	case r.TTL > cfg.MaxTTL:
		return fmt.Errorf("%w: TTL %v is above the maximum of %v", ErrTTLOutOfRange, r.TTL, cfg.MaxTTL)
	}
	if r.Client != 0 {
		if res, kept, _ := c.kept(r); kept {
			r.finish(Outcome{Err: res.Err, Lease: res.Lease, TTL: r.TTL, Duplicate: true})
			return nil
		}
	}
	if c.cfg.Admit != nil {
		if err := c.cfg.Admit(store.OpGrantTTL, 0); err != nil {
			return fmt.Errorf("TTL lease grant refused: %w", err)
		}
	}
	if c.handingOff.Load() {
		return fmt.Errorf("%w: TTL lease grant: this node is handing the lead over", ErrUnavailable)
	}
	c.ttl.mu.Lock()
	if n := c.ttl.ls.Len() + c.ttl.granting; n >= cfg.MaxLeases {
		c.ttl.mu.Unlock()
		return fmt.Errorf("%w: %d TTL leases are held or being granted, the limit (MaxTTLLeases): revoke some, or retry once some have expired", ErrTTLLeaseLimit, n)
	}
	c.ttl.granting++
	c.ttl.mu.Unlock()
	r.received = c.clock.Now()
	c.mu.Lock()
	if c.stopping.Load() {
		c.mu.Unlock()
		c.ttl.mu.Lock()
		c.ttl.granting--
		c.ttl.mu.Unlock()
		return fmt.Errorf("%w: the server is shutting down; no new TTL leases", ErrClosed)
	}
	c.queue.push(job{req: r})
	c.mu.Unlock()
	return nil
}

// granted ends a grant that the committer applied, or failed to: the
// Lessor tracks the lease from now, counted from after it was applied,
// which is later than its holder counts it from.
func (c *Core) granted(r *Request, res store.Result, err error, now time.Time) Outcome {
	c.ttl.mu.Lock()
	c.ttl.granting--
	if err == nil {
		err = res.Err
	}
	if err == nil && !res.Duplicate {
		if gerr := c.ttl.ls.Grant(res.Lease, r.TTL, now); gerr != nil && !errors.Is(gerr, lessor.ErrExists) {
			err = fmt.Errorf("%w: track TTL lease %016x: %v", ErrInternal, res.Lease, gerr)
		} else {
			if r.Owner != 0 {
				c.ttl.owners[res.Lease] = r.Owner
			}
			c.setHolder(res.Lease, r.Client)
			c.ttl.keysOf[res.Lease] = make(map[string]struct{}) // none yet; the writes that attach keys add them
		}
	}
	c.ttl.mu.Unlock()
	c.poke() // the timer loop waits for the Lessor's next deadline too
	return Outcome{Err: err, Lease: res.Lease, TTL: r.TTL, Duplicate: res.Duplicate}
}

// KeepAlive is KeepAliveFor a client that gave no identity.
func (c *Core) KeepAlive(ids []uint64, done func(KeepAliveOutcome)) { c.KeepAliveFor(0, ids, done) }

// KeepAliveFor renews the TTL leases ids for client (its client
// identity, 0: none), who becomes their holder (holderTerms), and calls
// done once with the outcome: at once, or once the marks that make the renewals survive a
// failover are applied. Leases that do not exist are Unknown. A lease
// being revoked is neither renewed nor unknown until its revocation ends:
// its keys still exist until it is applied (then the lease is Unknown),
// and an abandoned revocation leaves it live. A replicated core acknowledges no renewal unless its
// horizon covers the moment of the acknowledgement: a new leader counts
// the leases kept alive from the end of that horizon (keptSince). done is
// called from a goroutine of the core or the caller's, without its locks;
// it must not block.
func (c *Core) KeepAliveFor(client uint64, ids []uint64, done func(KeepAliveOutcome)) {
	if len(ids) > MaxKeepAliveLeases {
		done(KeepAliveOutcome{Err: fmt.Errorf("%w: %d leases in one keep-alive, the limit is %d", ErrInvalidArgument, len(ids), MaxKeepAliveLeases)})
		return
	}
	if err := c.mayAcknowledge(c.clock.Now()); err != nil {
		done(KeepAliveOutcome{Err: err})
		return
	}
	now := c.clock.Now()
	b := &markBatch{done: done, left: 1} // 1: this call, ended last
	c.ttl.mu.Lock()
	live := ids
	var waits map[*revocation][]uint64
	for i, id := range ids {
		if rv := c.ttl.revoking[id]; rv != nil {
			if waits == nil {
				live = slices.Clone(ids[:i])
				waits = make(map[*revocation][]uint64)
			}
			waits[rv] = append(waits[rv], id)
		} else if waits != nil {
			live = append(live, id)
		}
	}
	for rv, wait := range waits {
		b.left++
		rv.after = append(rv.after, func() {
			c.KeepAliveFor(client, wait, func(o KeepAliveOutcome) { c.endPart(b, o) })
		})
	}
	renewed, unknown, mark := c.ttl.ls.KeepAlive(live, now)
	c.ttl.stats.KeepAlives += uint64(len(renewed))
	for _, r := range renewed {
		c.setHolder(r.ID, client)
	}
	var jobs []job
	for chunk := range slices.Chunk(mark, store.MaxTTLLeasesPerCommand) {
		jobs = append(jobs, job{ttl: &store.Command{Op: store.OpKeptAliveTTL, Leases: chunk}, marks: b})
	}
	b.mu.Lock()
	b.left += len(jobs)
	b.mu.Unlock()
	// Queued under ttl.mu: after every checkpoint handed out before,
	// which would clear the marks (see lessor.Lessor.KeepAlive).
	if len(jobs) > 0 && !c.queue.pushOpen(jobs...) {
		c.ttl.ls.Unmark(mark)
		c.ttl.mu.Unlock()
		b.mu.Lock()
		b.left -= len(jobs)
		b.mu.Unlock()
		c.endPart(b, KeepAliveOutcome{Err: fmt.Errorf("%w: the server is shutting down", ErrClosed)})
		return
	}
	c.ttl.mu.Unlock()
	c.poke()
	c.endPart(b, KeepAliveOutcome{Renewed: renewed, Unknown: unknown})
}

// mayAcknowledge returns an error if the core must not acknowledge a
// renewal at now: it is handing the lead over, or, replicated, its
// horizon does not cover now (it may have been deposed).
func (c *Core) mayAcknowledge(now time.Time) error {
	if c.handingOff.Load() {
		return fmt.Errorf("%w: keep-alive: this node is handing the lead over", ErrUnavailable)
	}
	if !c.cfg.Replicated {
		return nil
	}
	if err := c.ensureHorizon(now); err != nil && c.sinceStart(now) >= c.horizon.Load() {
		return fmt.Errorf("%w: keep-alive", ErrUnavailable)
	}
	return nil
}

// marked ends one mark record of b, applied (err nil) or failed.
func (c *Core) marked(b *markBatch, leases []uint64, err error) {
	c.ttl.mu.Lock()
	if err != nil {
		c.ttl.ls.Unmark(leases)
	} else {
		c.ttl.ls.Marked(leases)
	}
	c.ttl.mu.Unlock()
	c.endPart(b, KeepAliveOutcome{Err: err})
}

// acknowledge answers a keep-alive whose marks are all applied.
func (c *Core) acknowledge(b *markBatch) {
	err := b.err
	if err == nil {
		err = c.mayAcknowledge(c.clock.Now())
	}
	if err != nil {
		b.done(KeepAliveOutcome{Err: err})
		return
	}
	b.done(KeepAliveOutcome{Renewed: b.renewed, Unknown: b.unknown})
}

// TTLLease returns the remaining TTL of lease id, as its holder should
// count it, and its granted TTL; with keys, also its attached keys,
// sorted. ok is false if it does not exist or has expired. A lease being
// revoked exists, with no time left, until its revocation is applied,
// as its keys do.
func (c *Core) TTLLease(id uint64, keys bool) (remaining, granted time.Duration, attached []string, ok bool, err error) {
	c.ttl.mu.Lock()
	remaining, granted, ok = c.ttl.ls.TimeToLive(id, c.clock.Now())
	revoking := c.ttl.revoking[id] != nil
	c.ttl.mu.Unlock()
	if !ok && !revoking || !keys && !revoking {
		return remaining, granted, nil, ok, nil
	}
	l, attached, found, err := c.store.TTLLease(id)
	if err != nil {
		return 0, 0, nil, false, fmt.Errorf("%w: read TTL lease %016x: %v", ErrInternal, id, err)
	}
	if revoking {
		remaining, granted = 0, l.TTL
	}
	return remaining, granted, attached, found, nil
}

// TTLOwner returns the owner that the grant of TTL lease id recorded (0:
// none), and whether the lease exists: live, or being revoked. A lease's
// owner never changes, and its id is never reused, so what it returns for
// a lease that exists stays true. Any goroutine may call it.
func (c *Core) TTLOwner(id uint64) (owner uint64, ok bool) {
	c.ttl.mu.Lock()
	defer c.ttl.mu.Unlock()
	_, _, ok = c.ttl.ls.TimeToLive(id, c.clock.Now())
	return c.ttl.owners[id], ok || c.ttl.revoking[id] != nil
}

// TTLLeaseInfo is a live TTL lease and its remaining TTL.
type TTLLeaseInfo struct {
	ID        uint64
	Remaining time.Duration
}

// TTLLeases returns the live TTL leases with an id above after, in id
// order, at most limit of them (limit <= 0: all), and whether there were
// more. With an owner other than 0, it lists only the leases that owner
// owns and those with no owner (see TTLOwner).
func (c *Core) TTLLeases(after uint64, limit int, owner uint64) ([]TTLLeaseInfo, bool) {
	now := c.clock.Now()
	c.ttl.mu.Lock()
	listed := func(id uint64) bool {
		o := c.ttl.owners[id]
		return id > after && (owner == 0 || o == 0 || o == owner)
	}
	var out []TTLLeaseInfo
	for id := range c.ttl.ls.Leases() {
		if listed(id) && c.ttl.revoking[id] == nil {
			left, _, _ := c.ttl.ls.TimeToLive(id, now)
			out = append(out, TTLLeaseInfo{ID: id, Remaining: left})
		}
	}
	// A lease being revoked is listed, with no time left, until its
	// revocation is applied (TTLLease).
	for id := range c.ttl.revoking {
		if listed(id) {
			out = append(out, TTLLeaseInfo{ID: id})
		}
	}
	c.ttl.mu.Unlock()
	slices.SortFunc(out, func(a, b TTLLeaseInfo) int { return cmp.Compare(a.ID, b.ID) })
	if limit > 0 && len(out) > limit {
		return out[:limit], true
	}
	return out, false
}

// TTLStats returns the counters of TTL leases.
func (c *Core) TTLStats() TTLStats {
	c.ttl.mu.Lock()
	defer c.ttl.mu.Unlock()
	st := c.ttl.stats
	st.Leases = c.ttl.ls.Len()
	return st
}

// A TTL lease's holder and its own reads of the lease's keys (DESIGN §14).
// A holder that dies must not keep its lease's keys alive past the lease:
// the expiry's delete waits for the read leases on them, so a read lease
// that the holder takes on a key attached to its lease ends no later than
// the lease could (its remaining TTL as the holder counts it), and the
// expiry waits only for other readers. The writer of a put or
// compare-and-swap that attaches its key gets such a read lease too
// (writerTerm); a session whose client holds the lease gets one when it
// reads or renews a key attached to it (holderTerms).

// setHolder records client (0: none, and nothing is recorded) as the
// holder of lease id. The caller holds c.ttl.mu.
func (c *Core) setHolder(id, client uint64) {
	old, ok := c.ttl.holders[id]
	if client == 0 || (ok && old == client) {
		return
	}
	if ok {
		c.unhold(id, old)
	}
	c.ttl.holders[id] = client
	c.ttl.holding.Store(int64(len(c.ttl.holders)))
	m := c.ttl.held[client]
	if m == nil {
		m = make(map[uint64]struct{})
		c.ttl.held[client] = m
	}
	m[id] = struct{}{}
}

// unhold forgets that client holds lease id. The caller holds c.ttl.mu.
func (c *Core) unhold(id, client uint64) {
	if m := c.ttl.held[client]; m != nil {
		delete(m, id)
		if len(m) == 0 {
			delete(c.ttl.held, client)
		}
	}
}

// forgetHolder forgets the holder and the tracked keys of lease id, which
// is revoked. The caller holds c.ttl.mu.
func (c *Core) forgetHolder(id uint64) {
	if client, ok := c.ttl.holders[id]; ok {
		c.unhold(id, client)
		delete(c.ttl.holders, id)
		c.ttl.holding.Store(int64(len(c.ttl.holders)))
	}
	for k := range c.ttl.keysOf[id] {
		if c.ttl.attached[k] == id {
			delete(c.ttl.attached, k)
		}
	}
	delete(c.ttl.keysOf, id)
}

// attachedWrite keeps the tracked keys (keysOf) in step with a write of
// key that committed: a put or compare-and-swap that attached it to lease
// (0: a write that detached it, or a delete). The committer calls it
// under c.mu.
func (c *Core) attachedWrite(key string, lease uint64) {
	c.ttl.mu.Lock()
	defer c.ttl.mu.Unlock()
	old := c.ttl.attached[key]
	if old == lease {
		return
	}
	if old != 0 {
		delete(c.ttl.keysOf[old], key)
		delete(c.ttl.attached, key)
	}
	if keys := c.ttl.keysOf[lease]; keys != nil {
		keys[key] = struct{}{}
		c.ttl.attached[key] = lease
	}
}

// writerTerm returns the term of the read lease that the writer of a
// key it attached to lease at now gets: term, or less, so that the read
// lease ends no later than the lease could; 0 if the lease is gone or
// being revoked. The committer calls it under c.mu.
func (c *Core) writerTerm(lease uint64, term time.Duration, now time.Time) time.Duration {
	if lease == 0 || term <= 0 {
		return term
	}
	c.ttl.mu.Lock()
	defer c.ttl.mu.Unlock()
	return c.boundTerm(lease, term, now)
}

// boundTerm returns term, bounded by the time lease has left at now, as
// its holder counts it; 0 if the lease is being revoked or is not
// tracked. The caller holds c.ttl.mu.
func (c *Core) boundTerm(lease uint64, term time.Duration, now time.Time) time.Duration {
	left, _, ok := c.ttl.ls.TimeToLive(lease, now)
	if !ok {
		return 0
	}
	return min(term, left)
}

// holderTerm is holderTerms for one key.
func (c *Core) holderTerm(id SessionID, key string, term time.Duration, now time.Time) time.Duration {
	if term <= 0 || c.ttl.holding.Load() == 0 {
		return term
	}
	keys, terms := [1]string{key}, [1]time.Duration{term}
	c.holderTerms(id, keys[:], terms[:], now)
	return terms[0]
}

// holderTerms bounds terms[i], the term of a read lease that session id
// is to get or renew on keys[i] at now, for every key attached to a TTL
// lease that the session's client holds: the read lease then ends no
// later than the TTL lease could (boundTerm). While no client holds a
// TTL lease it costs an atomic load; otherwise a session whose client
// holds none costs two map lookups. The first time a holder reads,
// the keys of its leases are read from the store; a lease whose keys
// cannot be read is not bounded (its holder's reads are served as any
// other's). Read and Renew call it without the core's locks.
func (c *Core) holderTerms(id SessionID, keys []string, terms []time.Duration, now time.Time) {
	if c.ttl.holding.Load() == 0 {
		return
	}
	c.mu.Lock()
	client := c.clients[id]
	c.mu.Unlock()
	if client == 0 {
		return
	}
	c.ttl.mu.Lock()
	var load []uint64
	for l := range c.ttl.held[client] {
		if c.ttl.keysOf[l] == nil {
			// Tracked from now on, so that a write that attaches a key
			// meanwhile is not missed; the store's keys are added below.
			c.ttl.keysOf[l] = make(map[string]struct{})
			load = append(load, l)
		}
	}
	c.ttl.mu.Unlock()
	for _, l := range load {
		_, ks, ok, err := c.store.TTLLease(l)
		c.ttl.mu.Lock()
		tracked := c.ttl.keysOf[l]
		switch {
		case tracked == nil:
			// Revoked meanwhile.
		case err != nil || !ok:
			delete(c.ttl.keysOf, l) // tried again on the next read
		default:
			for _, k := range ks {
				if _, ok := c.ttl.attached[k]; !ok {
					c.ttl.attached[k] = l
					tracked[k] = struct{}{}
				}
			}
		}
		c.ttl.mu.Unlock()
		if err != nil {
			c.log.Warn("cannot read the keys of a TTL lease; its holder's read leases on them are not bounded by it", "lease", fmt.Sprintf("%016x", l), "err", err)
		}
	}
	c.ttl.mu.Lock()
	defer c.ttl.mu.Unlock()
	for i, k := range keys {
		if l := c.ttl.attached[k]; l != 0 && terms[i] > 0 && c.ttl.holders[l] == client {
			terms[i] = c.boundTerm(l, terms[i], now)
		}
	}
}
