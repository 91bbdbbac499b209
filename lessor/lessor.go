// Package lessor is the leader's in-memory tracking of TTL leases (DESIGN
// §14): when each lease expires, when its remaining TTL is due to be
// checkpointed, and which keep-alives must be made durable before they are
// acknowledged.
//
// It does no I/O, owns no timers and starts no goroutines. Every method takes
// the current time (from the leader's monotonic clock) and returns decisions:
// the leases renewed, the keep-alives to mark in the log, the leases to
// revoke, the checkpoints to write. Two heaps (by expiry, by checkpoint due
// time) with an index in each lease make every renewal O(log n), with no
// scan and no timer per lease. The server's core owns the one Lessor of the
// leader, guards it with its lock, writes what it returns through the log,
// and keeps one timer for NextDeadline. A Lessor is not safe for concurrent
// use. The Lessor decides when a lease expires; what happens then (the
// readers of its keys invalidated, the keys deleted in one revocation
// through the log) the core carries out, in core/ttlexpiry.go.
//
// # Promises, in the holder's favour
//
// A holder counts its TTL from when it sent its grant or keep-alive, so the
// Lessor never expires a lease before ttl + ε after the last renewal it
// made. Across a failover or a restart, a new leader resumes each lease from
// its durable records (Resume):
//
//   - A lease kept alive since its last checkpoint (or its grant) resumes
//     with its whole TTL from the takeover, and is checkpointed at once, so
//     that the next failover resumes it from that checkpoint. The old leader acknowledged that
//     keep-alive only after its mark was in the log (see KeepAlive), and
//     before the takeover, so the holder believes in no more than ttl from
//     before the takeover.
//   - A lease not kept alive since resumes with the remaining TTL that record
//     states, counted from when this node applied the record (or from its
//     start, if it applied it before a restart). The record was applied after
//     the old leader computed the remaining time, so the new expiry is no
//     earlier than the old leader's; and the lease is never reset to its
//     whole TTL, so a dead holder's lease does not survive failover after
//     failover (etcd issue #9395).
//
// # Checkpoints
//
// Only leases whose TTL exceeds Config.CheckpointInterval are checkpointed,
// as in etcd, every interval while their remaining TTL exceeds the interval.
// A shorter lease that was kept alive after its grant is resumed with its
// whole TTL from the takeover, so a failover lengthens it by at most its TTL
// (less than one interval); checkpointing it would cost two log records per
// TTL for every live short lease. A failover cannot shorten any lease.
//
// # The caller's part
//
// The promises hold if the caller (1) calls Grant after the grant record is
// applied; (2) acknowledges a keep-alive only after the mark record KeepAlive
// asked for is applied, then calls Marked, and calls Unmark if it cannot be
// written; (3) writes
// mark and checkpoint records to the log in the order the Lessor handed them
// out, so that a mark never lands before a checkpoint of the same lease
// handed out earlier (which would clear it); (4) calls Revoke once a
// revocation is applied; and (5) on a new leader, calls Resume before it
// answers any keep-alive.
package lessor

import (
	"container/heap"
	"errors"
	"fmt"
	"iter"
	"math"
	"time"
)

// Defaults for the zero fields of Config.
const (
	DefaultCheckpointInterval  = 5 * time.Minute
	DefaultMaxRevokesPerSecond = 1000
	DefaultRevokeRetry         = 3 * time.Second
)

// MaxRevokesPerSecond is the highest Config.MaxRevokesPerSecond.
const MaxRevokesPerSecond = 1_000_000_000

// Errors returned by the Lessor.
var (
	// ErrExists: Grant of an id the Lessor already tracks.
	ErrExists = errors.New("lease already tracked")
	// ErrInvalidTTL: a TTL that is zero or negative.
	ErrInvalidTTL = errors.New("lease TTL must be positive")
	// ErrInvalidConfig: a Config field out of range (see Config.Validate).
	ErrInvalidConfig = errors.New("invalid lessor config")
)

// Config sets the Lessor's parameters. The zero value is valid: every zero
// field takes its default. Which TTLs a client may ask for (the minimum and
// maximum) is the server's business, not the Lessor's.
type Config struct {
	// Epsilon is the clock allowance ε: a lease renewed at now with TTL ttl
	// expires at now + ttl + ε. Zero means no allowance.
	Epsilon time.Duration
	// CheckpointInterval is how often the remaining TTL of a lease whose
	// TTL exceeds it is recorded in the log. Zero means
	// DefaultCheckpointInterval (5 minutes).
	CheckpointInterval time.Duration
	// MaxRevokesPerSecond caps the expired leases Expired hands out per
	// second, so that a mass expiry does not stall other writes. Zero means
	// DefaultMaxRevokesPerSecond (1,000).
	MaxRevokesPerSecond int
	// RevokeRetry is how long an expired lease handed out by Expired waits
	// for its Revoke before Expired hands it out again (its revocation
	// failed, or was lost). Zero means DefaultRevokeRetry (3 seconds).
	RevokeRetry time.Duration
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = DefaultCheckpointInterval
	}
	if c.MaxRevokesPerSecond == 0 {
		c.MaxRevokesPerSecond = DefaultMaxRevokesPerSecond
	}
	if c.RevokeRetry == 0 {
		c.RevokeRetry = DefaultRevokeRetry
	}
	return c
}

// Validate reports a field out of range: any negative field, or more than
// one revocation per nanosecond.
func (c Config) Validate() error {
	switch {
	case c.Epsilon < 0:
		return fmt.Errorf("%w: negative epsilon %v", ErrInvalidConfig, c.Epsilon)
	case c.CheckpointInterval < 0:
		return fmt.Errorf("%w: negative checkpoint interval %v", ErrInvalidConfig, c.CheckpointInterval)
	case c.MaxRevokesPerSecond < 0 || c.MaxRevokesPerSecond > MaxRevokesPerSecond:
		return fmt.Errorf("%w: max revokes per second %d not in [0, %d]", ErrInvalidConfig, c.MaxRevokesPerSecond, MaxRevokesPerSecond)
	case c.RevokeRetry < 0:
		return fmt.Errorf("%w: negative revoke retry %v", ErrInvalidConfig, c.RevokeRetry)
	}
	return nil
}

// Renewal is a lease a keep-alive renewed, and the TTL it was renewed for.
type Renewal struct {
	ID  uint64
	TTL time.Duration
}

// Checkpoint is the remaining TTL of a lease, as its holder should see it, to
// be recorded in the log.
type Checkpoint struct {
	ID        uint64
	Remaining time.Duration
}

// Persisted is the durable state of a lease, which Resume starts from.
type Persisted struct {
	ID  uint64
	TTL time.Duration // as granted
	// Remaining is the TTL left when the last checkpoint was taken; the
	// whole TTL if the lease was never checkpointed.
	Remaining time.Duration
	// KeptAlive: a keep-alive was marked in the log after the last
	// checkpoint (or the grant).
	KeptAlive bool
	// AppliedAt is when this node applied the last checkpoint or grant
	// record, read from the same clock as Resume's now; or when this
	// process started, if it applied the record before.
	AppliedAt time.Time
	// KeptSince, for a lease KeptAlive, is the earliest time, on the same
	// clock, from which no earlier leader can still acknowledge a
	// keep-alive of it: after the horizon of the last leader, which
	// acknowledges keep-alives only under its horizon. The lease then has
	// its whole TTL from the later of it and Resume's now. Zero: now.
	KeptSince time.Time
}

// lease is one tracked lease. Times are nanoseconds since Lessor.base, to
// keep it at 48 bytes.
type lease struct {
	id         uint64
	ttl        time.Duration
	expiry     int64 // when it expires; once revoking, when Expired hands it out again
	checkpoint int64 // when its next checkpoint is due, if cpIndex >= 0
	expIndex   int32 // in Lessor.expiries
	cpIndex    int32 // in Lessor.checkpoints, or -1
	kept       bool  // renewed since its last checkpoint was handed out (or its grant or Resume)
	marked     bool  // kept, and its mark record is applied (Marked), or it was resumed kept
	revoking   bool  // expired and handed out by Expired
}

// Lessor tracks the TTL leases of the leader. See the package comment. The
// zero value is not usable; call New.
type Lessor struct {
	eps         int64
	interval    int64
	retry       int64
	batch       int // revocations NextDeadline waits for when the budget is spent
	leases      map[uint64]*lease
	expiries    leaseHeap // by expiry
	checkpoints leaseHeap // by checkpoint due time
	budget      tokenBucket
	base        time.Time // the first now the Lessor was given
	based       bool
}

// New returns an empty Lessor, or ErrInvalidConfig.
func New(cfg Config) (*Lessor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	rate := cfg.MaxRevokesPerSecond
	return &Lessor{
		eps:         int64(cfg.Epsilon),
		interval:    int64(cfg.CheckpointInterval),
		retry:       int64(cfg.RevokeRetry),
		batch:       max(1, rate/100),
		leases:      make(map[uint64]*lease),
		expiries:    leaseHeap{},
		checkpoints: leaseHeap{byCheckpoint: true},
		budget:      newTokenBucket(rate, max(1, rate/10)),
	}, nil
}

// at converts t to nanoseconds since the base, which the first call sets.
func (ls *Lessor) at(t time.Time) int64 {
	if !ls.based {
		ls.base, ls.based = t, true
	}
	return int64(t.Sub(ls.base))
}

// time converts nanoseconds since the base back to a time.
func (ls *Lessor) time(n int64) time.Time { return ls.base.Add(time.Duration(n)) }

// add returns a + b, saturated at the largest int64.
func add(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Len returns how many leases the Lessor tracks, expired ones not yet revoked
// included.
func (ls *Lessor) Len() int { return len(ls.leases) }

// Grant starts tracking lease id, newly granted with ttl at now (when its
// grant record was applied): it expires at now + ttl + ε. It returns
// ErrInvalidTTL for ttl <= 0 and ErrExists for an id already tracked, and
// then changes nothing.
func (ls *Lessor) Grant(id uint64, ttl time.Duration, now time.Time) error {
	if ttl <= 0 {
		return fmt.Errorf("%w: lease %016x: %v", ErrInvalidTTL, id, ttl)
	}
	if _, ok := ls.leases[id]; ok {
		return fmt.Errorf("%w: %016x", ErrExists, id)
	}
	n := ls.at(now)
	ls.track(&lease{id: id, ttl: ttl, expiry: add(add(n, int64(ttl)), ls.eps), cpIndex: -1}, n)
	return nil
}

// track adds l to the map and the heaps.
func (ls *Lessor) track(l *lease, now int64) {
	ls.leases[l.id] = l
	heap.Push(&ls.expiries, l)
	ls.schedule(l, now)
}

// schedule puts l's next checkpoint in the heap, one interval from now, if
// it needs one: its TTL exceeds the interval, none is scheduled yet, and it
// is live for more than an interval (else it ends, unless renewed, before
// that checkpoint would be due).
func (ls *Lessor) schedule(l *lease, now int64) {
	if int64(l.ttl) <= ls.interval || l.cpIndex >= 0 || l.revoking || l.expiry-ls.eps-now <= ls.interval {
		return
	}
	l.checkpoint = add(now, ls.interval)
	heap.Push(&ls.checkpoints, l)
}

// KeepAlive renews each lease in ids to now + ttl + ε, now being when the
// keep-alive arrived. It returns the leases renewed; the ids it does not
// track, or that Expired has handed out (their revocation is under way:
// a keep-alive cannot revive them, and the server answers them as not
// found once the revocation is applied); and mark, the renewed leases
// whose mark since their last checkpoint is not known to be applied (see
// Marked). A lease past its expiry that Expired has not handed out yet
// (the revocation budget holds it back) is renewed: it lives, and its keys
// exist, until it is revoked, and ending it earlier in the answers to a
// keep-alive than in the store would tell its holder its keys are gone
// while they are still served.
//
// The caller must write a mark record for the leases in mark (one record
// for all of them), acknowledge their renewals only after it is applied,
// and then call Marked: a new leader resumes a lease marked since its last
// checkpoint with its whole TTL, and one not marked with the checkpoint's
// remaining time. Once Marked, later keep-alives of the lease need no mark
// until its next checkpoint. The
// mark record must follow in the log every checkpoint record the caller
// wrote from an earlier DueCheckpoints: the caller writes records in the
// order the Lessor hands them out. If the mark record fails, the caller
// calls Unmark.
func (ls *Lessor) KeepAlive(ids []uint64, now time.Time) (renewed []Renewal, unknown, mark []uint64) {
	n := ls.at(now)
	renewed = make([]Renewal, 0, len(ids))
	for _, id := range ids {
		l := ls.leases[id]
		if l == nil || l.revoking {
			unknown = append(unknown, id)
			continue
		}
		if e := add(add(n, int64(l.ttl)), ls.eps); e > l.expiry {
			l.expiry = e
			heap.Fix(&ls.expiries, int(l.expIndex))
		}
		if !l.marked {
			// Its mark is not applied yet, though it may be on its way:
			// this renewal too waits for one.
			l.kept = true
			mark = append(mark, id)
		}
		ls.schedule(l, n)
		renewed = append(renewed, Renewal{ID: id, TTL: l.ttl})
	}
	return renewed, unknown, mark
}

// Unmark forgets that the leases in ids were kept alive, so that their next
// keep-alive is marked again. The caller calls it when a mark record that
// KeepAlive asked for could not be written, and acknowledges none of those
// renewals.
func (ls *Lessor) Unmark(ids []uint64) {
	for _, id := range ids {
		if l := ls.leases[id]; l != nil {
			l.kept, l.marked = false, false
		}
	}
}

// Marked records that the mark record of the leases in ids, which
// KeepAlive asked for, is applied: their later keep-alives need no mark
// until their next checkpoint. Until it is called, every keep-alive of such
// a lease is in mark again, since an earlier mark may still be on its way
// and may be lost with this leader. A lease whose checkpoint was handed out
// since it was marked stays unmarked: that checkpoint clears the mark.
func (ls *Lessor) Marked(ids []uint64) {
	for _, id := range ids {
		if l := ls.leases[id]; l != nil && l.kept {
			l.marked = true
		}
	}
}

// Revoke stops tracking lease id, after its revocation (by its holder, or
// after Expired) was applied. It reports whether the Lessor tracked it.
func (ls *Lessor) Revoke(id uint64) bool {
	l := ls.leases[id]
	if l == nil {
		return false
	}
	delete(ls.leases, id)
	heap.Remove(&ls.expiries, int(l.expIndex))
	if l.cpIndex >= 0 {
		heap.Remove(&ls.checkpoints, int(l.cpIndex))
	}
	return true
}

// Expired returns up to limit leases (limit <= 0: no cap) whose expiry is at or
// before now, earliest expiry first, within the revocation budget:
// Config.MaxRevokesPerSecond, with a burst of a tenth of a second's worth.
// The caller writes their revocations through the log and calls Revoke for
// each once applied. A lease handed out stays expired (KeepAlive refuses it)
// and is handed out again after Config.RevokeRetry if Revoke has not been
// called by then.
func (ls *Lessor) Expired(now time.Time, limit int) []uint64 {
	n := ls.at(now)
	if b := ls.budget.available(n); limit <= 0 || b < limit {
		limit = b
	}
	var ids []uint64
	for len(ids) < limit && ls.expiries.Len() > 0 {
		l := ls.expiries.items[0]
		if l.expiry > n {
			break
		}
		ids = append(ids, l.id)
		l.revoking = true
		l.expiry = add(n, ls.retry)
		heap.Fix(&ls.expiries, 0)
		if l.cpIndex >= 0 {
			heap.Remove(&ls.checkpoints, int(l.cpIndex))
		}
	}
	ls.budget.take(len(ids))
	return ids
}

// DueCheckpoints returns up to limit leases (limit <= 0: no cap) whose checkpoint
// is due at now, earliest first, with their remaining TTL as the holder
// should see it: expiry - now - ε, never negative. The caller writes them in
// one checkpoint record. From now on a keep-alive of these leases is marked
// again (see KeepAlive); their next checkpoint is due one interval from now
// if they stay live that long. If the record fails, nothing needs undoing:
// the durable state is as it was, and the next checkpoint retries.
func (ls *Lessor) DueCheckpoints(now time.Time, limit int) []Checkpoint {
	n := ls.at(now)
	var due []Checkpoint
	for (limit <= 0 || len(due) < limit) && ls.checkpoints.Len() > 0 {
		l := ls.checkpoints.items[0]
		if l.checkpoint > n {
			break
		}
		heap.Pop(&ls.checkpoints)
		if n >= l.expiry {
			// Expired: it is waiting for its revocation, not a checkpoint.
			continue
		}
		due = append(due, Checkpoint{ID: l.id, Remaining: time.Duration(max(l.expiry-ls.eps-n, 0))})
		l.kept, l.marked = false, false
		ls.schedule(l, n)
	}
	return due
}

// Resume starts tracking leases from their durable records, on a new leader
// or a restarted one, at now: a lease kept alive since its last checkpoint
// expires at now (or its KeptSince, if later) + TTL + ε, and its checkpoint
// is due at once
// (checkpointNow); any other at AppliedAt + Remaining + ε, AppliedAt being
// now if it is zero or later (see the package comment for why both are
// safe). A lease the Lessor tracks already
// keeps the later of the two expiries. Resume returns ErrInvalidTTL, and
// tracks none of them, if a record has a TTL <= 0.
func (ls *Lessor) Resume(leases []Persisted, now time.Time) error {
	for _, p := range leases {
		if p.TTL <= 0 {
			return fmt.Errorf("%w: lease %016x: %v", ErrInvalidTTL, p.ID, p.TTL)
		}
	}
	n := ls.at(now)
	for _, p := range leases {
		from := n
		if p.KeptSince.After(now) {
			from = ls.at(p.KeptSince)
		}
		expiry := add(add(from, int64(p.TTL)), ls.eps)
		if !p.KeptAlive {
			// A record applied at no known time, or later than now, counts
			// from now: later than its holder's belief, never earlier.
			applied := p.AppliedAt
			if applied.IsZero() || applied.After(now) {
				applied = now
			}
			expiry = add(add(ls.at(applied), max(int64(p.Remaining), 0)), ls.eps)
		}
		l := ls.leases[p.ID]
		if l != nil {
			if expiry > l.expiry && !l.revoking {
				l.expiry = expiry
				heap.Fix(&ls.expiries, int(l.expIndex))
			}
			l.kept = l.kept || p.KeptAlive
			l.marked = l.marked || p.KeptAlive
			ls.schedule(l, n)
		} else {
			l = &lease{id: p.ID, ttl: p.TTL, expiry: expiry, kept: p.KeptAlive, marked: p.KeptAlive, cpIndex: -1}
			ls.track(l, n)
		}
		if p.KeptAlive {
			ls.checkpointNow(l, n)
		}
	}
	return nil
}

// checkpointNow makes the checkpoint of l due at now, whatever its TTL:
// Resume gives a lease kept alive since its last checkpoint its whole TTL
// from the takeover, and without a checkpoint soon after, every later
// failover would do so again, and a dead holder's lease would live as
// long as the failovers came within its TTL (etcd issue #9395).
func (ls *Lessor) checkpointNow(l *lease, now int64) {
	if l.revoking {
		return
	}
	l.checkpoint = now
	if l.cpIndex >= 0 {
		heap.Fix(&ls.checkpoints, int(l.cpIndex))
		return
	}
	heap.Push(&ls.checkpoints, l)
}

// TimeToLive returns the remaining TTL of lease id as its holder should see
// it (expiry - now - ε, never negative) and its granted TTL. ok is false if
// the Lessor does not track it or Expired has handed it out; a lease past
// its expiry that waits for the revocation budget has 0 left.
func (ls *Lessor) TimeToLive(id uint64, now time.Time) (remaining, granted time.Duration, ok bool) {
	n := ls.at(now)
	l := ls.leases[id]
	if l == nil || l.revoking {
		return 0, 0, false
	}
	return time.Duration(max(l.expiry-ls.eps-n, 0)), l.ttl, true
}

// Leases yields the id and the granted TTL of every lease that Expired has
// not handed out, in no particular order. The Lessor must not change while
// it runs.
func (ls *Lessor) Leases() iter.Seq2[uint64, time.Duration] {
	return func(yield func(uint64, time.Duration) bool) {
		for id, l := range ls.leases {
			if !l.revoking && !yield(id, l.ttl) {
				return
			}
		}
	}
}

// NextDeadline returns the earliest time at which Expired or DueCheckpoints
// has something to hand out: the next expiry or checkpoint; while expired
// leases wait for the revocation budget, the time when a hundredth of a
// second's worth of it is back. ok is false if the Lessor tracks nothing.
func (ls *Lessor) NextDeadline(now time.Time) (next time.Time, ok bool) {
	n := ls.at(now)
	at := int64(math.MaxInt64)
	if ls.expiries.Len() > 0 {
		at = ls.expiries.items[0].expiry
		if at <= n && ls.budget.available(n) == 0 {
			at = ls.budget.when(n, ls.batch)
		}
		ok = true
	}
	if ls.checkpoints.Len() > 0 {
		at = min(at, ls.checkpoints.items[0].checkpoint)
		ok = true
	}
	if !ok {
		return time.Time{}, false
	}
	return ls.time(at), true
}

// leaseHeap is a container/heap min-heap of leases by expiry, or by
// checkpoint due time, that keeps each lease's index in it current, so that
// a lease can be fixed or removed in O(log n). Ties go to the lower id, so
// that the order is deterministic.
type leaseHeap struct {
	items        []*lease
	byCheckpoint bool
}

func (h *leaseHeap) Len() int { return len(h.items) }

func (h *leaseHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	ta, tb := a.expiry, b.expiry
	if h.byCheckpoint {
		ta, tb = a.checkpoint, b.checkpoint
	}
	return ta < tb || ta == tb && a.id < b.id
}

func (h *leaseHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.setIndex(i)
	h.setIndex(j)
}

func (h *leaseHeap) setIndex(i int) {
	if h.byCheckpoint {
		h.items[i].cpIndex = int32(i)
	} else {
		h.items[i].expIndex = int32(i)
	}
}

func (h *leaseHeap) Push(x any) {
	h.items = append(h.items, x.(*lease))
	h.setIndex(len(h.items) - 1)
}

func (h *leaseHeap) Pop() any {
	n := len(h.items) - 1
	l := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	if h.byCheckpoint {
		l.cpIndex = -1
	} else {
		l.expIndex = -1
	}
	return l
}
