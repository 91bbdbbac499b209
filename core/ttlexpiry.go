package core

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/store"
)

// What happens when a TTL lease expires (DESIGN §14): package lessor
// decides when, and this file carries out what follows, which a client's
// revocation (submitRevoke) goes through too. The timer loop's ttlTick
// takes the expired lease from the Lessor and records its revocation
// (revocationLocked), so that from then on keep-alives of the lease, and
// writes that attach keys to it, wait for the revocation to end. launch
// reads the keys attached to the lease and submits a delete of each to the
// lease table: as for any write, the keys' readers are invalidated, their
// write leases recalled, and the deletes wait until the holders let go or
// their leases run out. Once every key is ready (opReady), one OpRevokeTTL
// through the commit queue deletes them all at one revision and the Lessor
// forgets the lease (endRevocation); if keys were attached meanwhile, it
// starts again with them (afterRevoke), and if it failed, the Lessor hands
// the lease out again later (lessor Config.RevokeRetry).

// revocation is the revocation of one lease, from its start until it is
// applied or abandoned. Its ops, one per attached key, wait in the lease
// table as deletes do; rev is queued once all are ready. Guarded by c.mu
// once its ops are submitted, except id, which never changes.
type revocation struct {
	id      uint64
	gen     uint64 // the attachment generation its keys were read at
	ops     []leasetable.Op
	ready   int
	started time.Time // when its ops were submitted
	readyAt time.Time // when the last became ready
	queued  bool      // its OpRevokeTTL is queued: it can no longer be abandoned
	expiry  bool      // expiry started it
	// stalled: an expiry's revocation failed or was abandoned; it stays
	// recorded, its lease still being revoked, until the Lessor hands the
	// lease out again (lessor Config.RevokeRetry) and it is launched
	// again. Keep-alives and writes that name the lease wait meanwhile, as
	// its keys are still there.
	stalled bool
	// waiters are the revocations clients asked for, answered with its
	// outcome. after are what waits for it to end, applied or abandoned:
	// keep-alives and writes naming the lease, run again then. Both are
	// guarded by ttlState.mu.
	waiters []*Request
	after   []func()
	// timeout, if not 0, abandons it if its keys are not all ready that
	// long after it started: the first waiter's Timeout.
	timeout time.Duration
	// launched: its keys have been read, and are keys; a waiter that
	// joins from then on is authorized against them at once (see
	// Request.Authorize). Guarded by ttlState.mu.
	launched bool
	keys     []string
}

// submitRevoke starts the revocation of lease r.Lease that a client asked
// for, or joins the one under way.
func (c *Core) submitRevoke(r *Request) error {
	if c.stopping.Load() {
		return fmt.Errorf("%w: the server is shutting down; no new revocations", ErrClosed)
	}
	r.received = c.clock.Now()
	return c.revoke(r.Lease, r)
}

// revoke starts the revocation of lease id for r, or adds r to the
// waiters of the one under way; or returns why r may not join it
// (Request.Authorize).
func (c *Core) revoke(id uint64, r *Request) error {
	c.ttl.mu.Lock()
	rv, err := c.revocationLocked(id, r)
	c.ttl.mu.Unlock()
	if rv != nil {
		c.launch(rv)
	}
	return err
}

// revocationLocked records the revocation of lease id for r (nil: it
// expired) and returns it, for the caller to launch once it has released
// ttl.mu; or adds r to the revocation under way, and returns nil. From
// then on, the lease is being revoked for keep-alives, writes and
// TTLLease. A request that joins a revocation whose keys have been read
// is authorized against them at once: if it is refused, nothing changes
// and the error says why. The caller holds ttl.mu.
func (c *Core) revocationLocked(id uint64, r *Request) (*revocation, error) {
	if rv := c.ttl.revoking[id]; rv != nil {
		if r != nil {
			if rv.launched && !rv.stalled && r.Authorize != nil {
				if err := r.Authorize(rv.keys); err != nil {
					return nil, err
				}
			}
			rv.waiters = append(rv.waiters, r)
		} else {
			rv.expiry = true
		}
		if !rv.stalled {
			return nil, nil
		}
		rv.stalled, rv.timeout = false, 0
		if r != nil {
			rv.timeout = r.Timeout
		}
		return rv, nil
	}
	rv := &revocation{id: id, expiry: r == nil}
	if r != nil {
		rv.waiters = []*Request{r}
		rv.timeout = r.Timeout
	}
	c.ttl.revoking[id] = rv
	return rv, nil
}

// authorizeRevokers records keys as the keys rv deletes, and fails each
// of its waiters that may not delete them (Request.Authorize), with
// nothing applied. If that leaves rv with no waiter, and expiry did not
// start it, it ends rv and returns false: the lease stays as it was.
// launch calls it with ttl.mu not held.
func (c *Core) authorizeRevokers(rv *revocation, keys []string) bool {
	type refusal struct {
		r   *Request
		err error
	}
	var refused []refusal
	var after []func()
	c.ttl.mu.Lock()
	rv.launched, rv.keys = true, keys
	kept := rv.waiters[:0]
	for _, r := range rv.waiters {
		if r.Authorize != nil {
			if err := r.Authorize(keys); err != nil {
				refused = append(refused, refusal{r, err})
				continue
			}
		}
		kept = append(kept, r)
	}
	clear(rv.waiters[len(kept):])
	rv.waiters = kept
	ended := len(refused) > 0 && len(kept) == 0 && !rv.expiry
	if ended {
		delete(c.ttl.revoking, rv.id)
		after, rv.after = rv.after, nil
	}
	c.ttl.mu.Unlock()
	now := c.clock.Now()
	for _, f := range refused {
		f.r.finish(Outcome{Err: f.err, Waited: max(0, now.Sub(f.r.received))})
	}
	for _, f := range after {
		f()
	}
	return !ended
}

// launch reads the keys attached to rv's lease and submits a delete of
// each to the lease table; once all are ready, enqueueReady queues the
// OpRevokeTTL. A lease with no keys is queued at once.
func (c *Core) launch(rv *revocation) {
	l, keys, ok, err := c.store.TTLLease(rv.id)
	switch {
	case err != nil:
		c.endRevocation(rv, store.Result{}, fmt.Errorf("%w: read TTL lease %016x: %v", ErrInternal, rv.id, err))
		return
	case !ok:
		c.endRevocation(rv, store.Result{Err: store.ErrLeaseNotFound}, nil)
		return
	case !c.authorizeRevokers(rv, keys):
		return
	}
	now := c.clock.Now()
	rv.gen = l.Gen
	// Its locks end with it: their records' readers let go first (lock.go).
	for _, lk := range l.Locks {
		keys = append(keys, store.LockRecordKey(lk.Key))
	}
	rv.ops = make([]leasetable.Op, len(keys))
	var effs []leasetable.Effects
	c.mu.Lock()
	rv.started, rv.ready, rv.queued = now, 0, false
	if len(keys) == 0 {
		rv.queued = true
		c.queue.push(job{rev: rv})
	}
	// Every op is submitted under one hold of mu, so that on every key
	// the ops of two revocations are queued in the same order, and
	// neither waits for a key the other is ready on.
	for i, k := range keys {
		op := &rv.ops[i]
		*op = leasetable.Op{Kind: leasetable.OpWrite, Session: revokerSession, Key: k, Data: rv}
		if rv.timeout > 0 {
			op.Deadline = now.Add(rv.timeout)
		}
		eff, err := c.table.Submit(op, now)
		if err != nil {
			// Only a closed session or a reused op fail; neither can
			// happen to the revoker's.
			c.log.Error("revocation op refused by the lease table", "lease", fmt.Sprintf("%016x", rv.id), "key", k, "err", err)
		}
		c.enqueueReady(eff)
		effs = append(effs, eff)
	}
	c.mu.Unlock()
	for _, eff := range effs {
		c.carryOut(eff)
	}
}

// opReady notes that an op of rv is ready to commit, and queues its
// OpRevokeTTL once all are. The caller holds c.mu (enqueueReady).
func (c *Core) opReady(rv *revocation, now time.Time) {
	rv.ready++
	if rv.ready == len(rv.ops) && !rv.queued {
		rv.queued = true
		rv.readyAt = now
		c.queue.push(job{rev: rv})
	}
}

// abandonRevocation abandons rv if its OpRevokeTTL is not queued: a waiter
// gave up, or one of its ops passed its deadline. Nothing of it is
// applied; a lease that has expired is revoked again later (lessor
// Config.RevokeRetry). It reports whether rv was abandoned.
func (c *Core) abandonRevocation(rv *revocation, why error) bool {
	now := c.clock.Now()
	var effs []leasetable.Effects
	c.mu.Lock()
	if rv.queued {
		c.mu.Unlock()
		return false
	}
	rv.queued = true // nothing queues it any more
	for i := range rv.ops {
		op := &rv.ops[i]
		ok, eff := c.table.Abandon(op, now)
		if !ok {
			_, eff = c.table.Done(op, false, 0, now)
		}
		c.enqueueReady(eff)
		effs = append(effs, eff)
	}
	c.mu.Unlock()
	waiters, after := c.settleRevocation(rv, false)
	for _, eff := range effs {
		c.carryOut(eff)
	}
	for _, r := range waiters {
		r.finish(Outcome{Err: why, Waited: max(0, now.Sub(r.received))})
	}
	for _, f := range after {
		f()
	}
	return true
}

// settleRevocation ends rv's part in the revocations under way, applied
// (gone: its lease is no more) or not, and returns its waiters and what
// waits for it to end. An expiry's revocation that was not applied stays
// recorded, stalled (see revocation), and what waits for it goes on
// waiting. The caller holds no lock.
func (c *Core) settleRevocation(rv *revocation, gone bool) (waiters []*Request, after []func()) {
	c.ttl.mu.Lock()
	defer c.ttl.mu.Unlock()
	waiters, rv.waiters = rv.waiters, nil
	if rv.expiry && !gone {
		rv.stalled = true
		return waiters, nil
	}
	delete(c.ttl.revoking, rv.id)
	after, rv.after = rv.after, nil
	if gone {
		c.ttl.ls.Revoke(rv.id)
		delete(c.ttl.owners, rv.id)
		c.forgetHolder(rv.id)
	}
	return waiters, after
}

// cancelRevoke abandons the revocation r waits for, if r is its only
// waiter, expiry did not start it, and it is not queued; otherwise r gets
// its outcome when it is applied.
func (c *Core) cancelRevoke(r *Request, why error) {
	c.ttl.mu.Lock()
	rv := c.ttl.revoking[r.Lease]
	alone := rv != nil && !rv.expiry && len(rv.waiters) == 1 && rv.waiters[0] == r
	c.ttl.mu.Unlock()
	if alone {
		c.abandonRevocation(rv, why)
	}
}

// revoked ends the ops of rv after its OpRevokeTTL was applied (res) or
// failed (err), hands the ops they let go to the committer, and returns
// their effects for the caller to carry out. The committer calls it under
// c.mu.
func (c *Core) revoked(rv *revocation, res store.Result, err error, now time.Time) []leasetable.Effects {
	committed := err == nil && res.Err == nil
	effs := make([]leasetable.Effects, len(rv.ops))
	for i := range rv.ops {
		_, effs[i] = c.table.Done(&rv.ops[i], committed, 0, now)
		c.enqueueReady(effs[i])
	}
	if committed {
		for _, l := range res.Locks {
			if l.Delay > 0 {
				c.table.DelayLock(l.Key, now.Add(l.Delay))
			}
			eff := c.table.EndLock(l.Key, l.Token, now)
			c.enqueueReady(eff)
			effs = append(effs, eff)
		}
	}
	return effs
}

// afterRevoke settles rv once its ops are done: a lease that had keys
// attached since its keys were read is revoked again with the new keys;
// any other outcome ends rv.
func (c *Core) afterRevoke(rv *revocation, res store.Result, err error) {
	if err == nil && errors.Is(res.Err, store.ErrLeaseChanged) {
		c.launch(rv)
		return
	}
	c.endRevocation(rv, res, err)
}

// endRevocation ends rv with its outcome: applied, not found, or failed.
func (c *Core) endRevocation(rv *revocation, res store.Result, err error) {
	holders := 0
	for i := range rv.ops {
		holders += rv.ops[i].Holders
	}
	waited := time.Duration(0)
	if !rv.readyAt.IsZero() {
		waited = max(0, rv.readyAt.Sub(rv.started))
	}
	gone := err == nil && (res.Err == nil || errors.Is(res.Err, store.ErrLeaseNotFound))
	waiters, after := c.settleRevocation(rv, gone)
	c.ttl.mu.Lock()
	if err == nil && res.Err == nil {
		c.ttl.stats.Revoked++
		if rv.expiry {
			c.ttl.stats.Expired++
		}
		c.ttl.stats.KeysDeleted += uint64(len(res.Keys))
		c.ttl.stats.Waited += waited
		c.ttl.stats.Holders += uint64(holders)
	}
	c.ttl.mu.Unlock()
	if err == nil {
		err = res.Err
	}
	if errors.Is(err, store.ErrLeaseNotFound) {
		err = fmt.Errorf("TTL lease %016x: %w", rv.id, err)
	}
	if err != nil && rv.expiry && !errors.Is(err, store.ErrLeaseNotFound) {
		c.log.Warn("revocation of an expired TTL lease failed; retrying later", "lease", fmt.Sprintf("%016x", rv.id), "err", err)
	}
	for _, r := range waiters {
		r.finish(Outcome{Err: err, Version: res.Version, Keys: len(res.Keys), Waited: waited, Holders: holders})
	}
	for _, f := range after {
		f()
	}
}

// ttlTick hands out what the Lessor has due at now: it queues the due
// checkpoints and starts the revocation of expired leases. The timer loop
// calls it without the core's locks.
func (c *Core) ttlTick(now time.Time) {
	c.ttl.mu.Lock()
	due := c.ttl.ls.DueCheckpoints(now, 0)
	if len(due) > 0 {
		var jobs []job
		for chunk := range slices.Chunk(due, store.MaxTTLLeasesPerCommand) {
			cps := make([]store.TTLCheckpoint, len(chunk))
			for i, cp := range chunk {
				cps[i] = store.TTLCheckpoint{ID: cp.ID, Remaining: cp.Remaining}
			}
			jobs = append(jobs, job{ttl: &store.Command{Op: store.OpCheckpointTTL, Checkpoints: cps}})
		}
		c.queue.push(jobs...)
	}
	// Recorded as being revoked under the same hold of ttl.mu as Expired
	// hands them out: the Lessor refuses their keep-alives from then on,
	// and those must wait for the revocation, as the keys are still
	// there.
	var start []*revocation
	for _, id := range c.ttl.ls.Expired(now, 0) {
		if rv, _ := c.revocationLocked(id, nil); rv != nil {
			start = append(start, rv)
		}
	}
	c.ttl.mu.Unlock()
	for _, rv := range start {
		c.launch(rv)
	}
}

// ttlDeadline returns when the Lessor next has something to hand out.
func (c *Core) ttlDeadline(now time.Time) (time.Time, bool) {
	c.ttl.mu.Lock()
	defer c.ttl.mu.Unlock()
	return c.ttl.ls.NextDeadline(now)
}

// afterRevocation holds r, a write that attaches its key to lease (or a
// transaction that attaches one of its keys to it), if lease is being
// revoked, until the revocation ends, and then submits it again:
// its lease is then gone (and the write fails), or live again if the
// revocation was abandoned. It reports false if the lease is not being
// revoked. Cancel ends a write held so, and it is not submitted again.
func (c *Core) afterRevocation(r *Request, lease uint64) bool {
	c.ttl.mu.Lock()
	defer c.ttl.mu.Unlock()
	rv := c.ttl.revoking[lease]
	if rv == nil {
		return false
	}
	r.heldBy = rv
	rv.after = append(rv.after, func() {
		c.ttl.mu.Lock()
		held := r.heldBy == rv
		r.heldBy = nil
		c.ttl.mu.Unlock()
		if !held {
			return // canceled meanwhile
		}
		if err := c.Submit(r); err != nil {
			r.finish(Outcome{Err: err})
		}
	})
	return true
}

// cancelHeld ends r with why if afterRevocation holds it, and reports
// whether it did.
func (c *Core) cancelHeld(r *Request, why error) bool {
	c.ttl.mu.Lock()
	held := r.heldBy != nil
	r.heldBy = nil
	c.ttl.mu.Unlock()
	if held {
		r.finish(Outcome{Err: why})
	}
	return held
}
