package core

import (
	"fmt"
	"slices"
	"time"

	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/store"
)

// Lock records (DESIGN §5.1). Every write lease has a record, read as the
// key store.LockRecordKey(K): its token, or not found when K is not held.
// Nothing stores it; a read of it reads the write lease the store records
// (Read), and takes a read lease on its name like any read, so that a
// service that checks tokens (the client's CheckToken) answers from its
// cache. Whatever changes the record, the grant of a write lease and the
// end of one, first goes through the lease table as a write of the record
// would, from lockSession: its readers are invalidated, and the change
// commits once they let go or their leases run out. stepLocks sends those
// jobs through the table on their way to the store; the end of a lock by
// the revocation of its TTL lease goes through it with the revocation's
// ops (launch). Ops on records leave prefix leases alone: no listing holds
// a record (leasetable.Config.Unlisted).

// lockSession is the lease table session of the ops on lock records. It
// is below revokerSession and above any session ID a server gives.
const lockSession SessionID = revokerSession - 1

// lockStep is the Data of an op on a lock record: the job that changes the
// record, which commits once the op is ready.
type lockStep struct {
	j      job
	parked bool // the op waits for readers; enqueueReady queues j once it is ready
}

// changesLock reports whether j grants a write lease or ends one.
func changesLock(j job) bool {
	if r := j.req; r != nil {
		return r.acquires()
	}
	return j.rev == nil && j.ttl == nil
}

// lockKey is the key of the write lease that j, a grant or an end, changes.
func lockKey(j job) string {
	if j.req != nil {
		return string(j.req.Key)
	}
	return j.end.Key
}

// stepLocks sends each job of batch that changes a lock, and has not been
// through the table yet, through the lease table as a write of its lock
// record, and returns the jobs that may commit now: the others wait there
// for the record's readers, and enqueueReady queues them again once they
// may. The committer calls it without locks.
func (c *Core) stepLocks(batch []job) []job {
	if !slices.ContainsFunc(batch, func(j job) bool { return j.step == nil && changesLock(j) }) {
		return batch
	}
	now := c.clock.Now()
	var effs []leasetable.Effects
	kept := make([]job, 0, len(batch))
	c.mu.Lock()
	for _, j := range batch {
		if j.step != nil || !changesLock(j) {
			kept = append(kept, j)
			continue
		}
		st := &lockStep{j: j}
		op := &leasetable.Op{Kind: leasetable.OpWrite, Session: lockSession, Key: store.LockRecordKey(lockKey(j)), Data: st}
		st.j.step = op
		eff, err := c.table.Submit(op, now)
		if err != nil {
			// Only a closed session or a reused op fail; neither can
			// happen to lockSession's.
			c.log.Error("lock record op refused by the lease table", "key", lockKey(j), "err", err)
			j.step = nil
			kept = append(kept, j)
			continue
		}
		n := len(eff.Ready)
		eff.Ready = slices.DeleteFunc(eff.Ready, func(o *leasetable.Op) bool { return o == op })
		if len(eff.Ready) < n {
			kept = append(kept, st.j)
		} else {
			st.parked = true
			if r := j.req; r != nil {
				r.parked = st
			}
		}
		c.enqueueReady(eff)
		effs = append(effs, eff)
	}
	c.mu.Unlock()
	for _, eff := range effs {
		c.carryOut(eff)
	}
	return kept
}

// stepReady queues the job of st, whose op on its lock record is ready.
// The caller holds c.mu (enqueueReady).
func (c *Core) stepReady(st *lockStep) []job {
	if !st.parked {
		return nil
	}
	st.parked = false
	if r := st.j.req; r != nil {
		r.parked = nil
	}
	return []job{st.j}
}

// stepDone finishes the op on the lock record of j, once j committed or
// failed, and returns its effects. The caller holds c.mu.
func (c *Core) stepDone(j job, committed bool, now time.Time) leasetable.Effects {
	if j.step == nil {
		return leasetable.Effects{}
	}
	_, eff := c.table.Done(j.step, committed, 0, now)
	c.enqueueReady(eff)
	return eff
}

// cancelParked ends r, an acquisition whose grant waits for the readers of
// its lock record, with why: the op on the record leaves the table, and so
// does r's own, granted nothing. It reports whether r was parked.
func (c *Core) cancelParked(r *Request, why error) bool {
	now := c.clock.Now()
	c.mu.Lock()
	st := r.parked
	if st == nil || !st.parked {
		c.mu.Unlock()
		return false
	}
	st.parked = false
	r.parked = nil
	_, eff1 := c.table.Abandon(st.j.step, now)
	eff2 := c.table.DoneAcquire(&r.op, 0, 0, now)
	c.enqueueReady(eff1)
	c.enqueueReady(eff2)
	c.mu.Unlock()
	c.carryOut(eff1)
	c.carryOut(eff2)
	r.abandon(why)
	return true
}

// readLockRecord reads the record of the write lease on key (without the
// prefix), as store.EncodeLockRecord lays it out.
func (c *Core) readLockRecord(key []byte) (store.Record, error) {
	wl, ok, err := c.store.WriteLease(key)
	if err != nil {
		return store.Record{}, fmt.Errorf("%w: read the lock record of %q: %v", ErrInternal, key, err)
	}
	return store.EncodeLockRecord(wl, ok), nil
}
