package core

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/store"
)

// Request is a write or a write-lease acquisition on one key, or the grant
// or revocation of a TTL lease, from its submission until its outcome: its
// Op, the store.Op that carries it out, says which. The caller fills the
// exported fields and hands it to Submit; the core owns it from then until
// it calls Done.
type Request struct {
	Session SessionID
	// Op is what it does: a write (store.OpPut, OpDelete or OpCAS), a
	// write-lease acquisition (store.OpGrantWriteLease), or the grant or
	// revocation of a TTL lease (store.OpGrantTTL or OpRevokeTTL).
	Op     store.Op
	Key    []byte
	Value  []byte
	Expect uint64 // OpCAS: the expected version (0: absent)
	Token  uint64 // a write under a write lease: its fencing token, or 0
	// Lease is the TTL lease of an Op of store.OpRevokeTTL (the lease to
	// revoke), or of an OpPut or OpCAS (attach Key to it; 0 detaches).
	Lease uint64
	// TTL is the TTL of an Op of store.OpGrantTTL, which grants a TTL
	// lease; Client, ID and Acked make it idempotent as for a write.
	TTL time.Duration
	// Owner is the owner a grant records with its lease (store.TTLLease
	// Owner, 0: none); see Core.TTLOwner.
	Owner uint64
	// Mode is an acquisition's: what it does if another client holds the
	// key's write lease (DESIGN §5.1). With a Lease, an acquisition binds
	// the write lease to that TTL lease: a lock, with no term, that ends
	// with the TTL lease.
	Mode leasetable.Mode
	// LockDelay, on an acquisition with a Lease, is how long the key stays
	// unavailable to acquisitions after the lock ends by its TTL lease's
	// expiry (DESIGN §5.1).
	LockDelay time.Duration
	// Under, on a write or transaction with fencing tokens, is a TTL lease
	// that the caller has found its session may use: the session may then
	// write under a write lease bound to that lease (a lock) whoever holds
	// it, and takes it over (leasetable.Op.Lease).
	Under uint64
	// Guard makes a write or transaction commit only if the lock it names
	// is held with its token (store.Guard); else ErrFenced, and nothing
	// changes.
	Guard *store.Guard
	// Txn is the transaction of an Op of store.OpTxn (Key and Value are
	// then unused), and Fence its writes' fencing tokens, by key: a
	// transaction's write of a key under a write lease carries its token,
	// as a single write does (Token).
	Txn   *store.Txn
	Fence map[string]uint64
	// Client, ID and Acked make a write idempotent: with a Client, the
	// write is applied once per (Client, ID), and a retry gets the first
	// outcome back (Outcome.Duplicate). Acked says that the client has
	// the outcomes of its writes with lower IDs. See store.Command.
	Client, ID, Acked uint64
	// Timeout abandons the request if it has not started to commit by then;
	// 0 means never.
	Timeout time.Duration
	// NoReadLease gives the writer of a put, delete or compare-and-swap no
	// read lease on its key (Outcome.Term 0): the server sets it when the
	// writer may not read the key, so that it cannot cache the value nor
	// hear of later writes through invalidations.
	NoReadLease bool
	// Authorize, if set on a revocation (store.OpRevokeTTL), is asked
	// whether its requester may delete the keys attached to the lease:
	// with the keys the revocation deletes, before it deletes any, and
	// again if keys are attached meanwhile. An error fails the request
	// with that error and nothing of it applied. It is called under the
	// core's locks and must not call the core.
	Authorize func(keys []string) error
	// Done receives the outcome, exactly once, unless Submit returned an
	// error. The core calls it from one of its goroutines or the caller's,
	// without its locks; it must not block.
	Done func(Outcome)

	op       leasetable.Op
	holder   uint64 // an acquisition's: its session's client identity, recorded with the lease
	received time.Time
	ready    time.Time // when the table let it commit
	once     sync.Once
	counted  *Core       // the core that counts r among the copies on their way (Core.track), until r ends
	heldBy   *revocation // the revocation of r.Lease that r waits for (Core.afterRevocation); guarded by ttlState.mu
	parked   *lockStep   // an acquisition's grant, waiting for the readers of its lock record (lock.go); guarded by c.mu
	// copied is set when r is a retry an earlier copy of which was
	// applied, is on its way, or may have been applied: abandoning r then
	// does not show that nothing changed (abandon).
	copied bool
	txn    *txnState // a transaction's ops (txn.go)
}

// Outcome is how a Request ended.
type Outcome struct {
	// Err is why it failed: ErrCanceled if it was abandoned before it
	// committed (nothing changed), a store.ErrVersionMismatch for a
	// compare-and-swap that did not match, ErrInternal if the store
	// failed, or ErrClosed.
	Err error
	// Version is a write's committed version, or on a version mismatch the
	// key's current one.
	Version uint64
	// Waited is how long a write waited before it could commit: for its
	// turn on the key, and for holders to drop their leases or for those
	// leases to run out. Holders is how many leases it invalidated or
	// recalled.
	Waited  time.Duration
	Holders int
	// Term is, for a write, the term of the read lease it gave the writer
	// on the new value (0: none); for an acquisition, the write lease's
	// term.
	Term time.Duration
	// Token is an acquisition's fencing token, and Record the key's
	// committed value when it was granted.
	Token  uint64
	Record store.Record
	// Duplicate says that the write had been applied before, under the
	// same Client and ID, and that this is that outcome: nothing changed
	// now, and the writer gets no lease (Term 0), because the key may
	// have changed since.
	Duplicate bool
	// Unchanged says that a delete found no key to remove: nothing
	// changed, no revision was spent, and Version is the key's current
	// version (that of its deletion, or 0).
	Unchanged bool
	// Lease and TTL are a TTL lease grant's lease and TTL. Keys is how
	// many keys a revocation deleted, at revision Version.
	Lease uint64
	TTL   time.Duration
	Keys  int
	// Succeeded says that a transaction's compares held and it applied
	// its Then branch; false, its Else branch. Version is then the
	// revision of its writes, or the store's if they changed nothing.
	Succeeded bool
}

// acquires reports whether r is a write-lease acquisition.
func (r *Request) acquires() bool { return r.Op == store.OpGrantWriteLease }

func (r *Request) finish(o Outcome) {
	r.once.Do(func() {
		r.uncount()
		r.Done(o)
	})
}

// abandon ends r, which left its key's queue before it could commit, with
// why, which wraps ErrCanceled: nothing changed. A retry an earlier copy of
// which was applied, or may be (Request.copied), ends instead with
// ErrUnavailable: the write may or may not have committed, and its writer
// must not be told that nothing changed.
func (r *Request) abandon(why error) {
	if r.copied {
		why = fmt.Errorf("%w: this write was sent before, and that copy may or may not have committed; this one was abandoned (%v)", ErrUnavailable, why)
	}
	r.finish(Outcome{Err: why})
}

// retryKey names the copies of a write with a Client: its Client and ID.
type retryKey struct{ client, id uint64 }

// track counts r, a write with a Client, among the copies of it on their
// way through c until r ends, and reports whether another copy was on its
// way already. Only Submit calls it.
func (c *Core) track(r *Request) (another bool) {
	k := retryKey{r.Client, r.ID}
	c.copiesMu.Lock()
	defer c.copiesMu.Unlock()
	another = c.copies[k] > 0
	c.copies[k]++
	r.counted = c
	return another
}

// uncount undoes track, once r has ended or Submit refused it.
func (r *Request) uncount() {
	c := r.counted
	if c == nil {
		return
	}
	r.counted = nil
	k := retryKey{r.Client, r.ID}
	c.copiesMu.Lock()
	defer c.copiesMu.Unlock()
	if c.copies[k]--; c.copies[k] <= 0 {
		delete(c.copies, k)
	}
}

// kept returns the outcome the store keeps of r, a write with a Client,
// if an earlier copy of it (same Client and ID) was applied (store.Store.Kept),
// and reports as unknown whether such a copy may have been applied
// although the store does not say so: the store is down, so that the
// outcome of its failed commit is unknown until it is reopened, or it
// cannot read the outcomes it keeps.
func (c *Core) kept(r *Request) (res store.Result, ok, unknown bool) {
	// Down first: a copy whose commit failed takes the store down before
	// it ends, and Kept is definite again once the store is reopened.
	_, down := c.down.retryTime()
	res, ok, err := c.store.Kept(c.command(job{req: r}))
	if err != nil {
		return store.Result{}, false, true
	}
	return res, ok, down && !ok
}

// Submit hands r to the lease table. A write carrying a fencing token must
// match the live write lease on its key, and come from its holder's
// session or from a session of its holder's client (SetClient);
// leasetable.ErrFenced otherwise, and nothing changes.
// A write by the write lease's holder is ready at once; any other request
// waits its turn on the key, invalidates the other sessions' read leases
// and recalls another session's write lease, and commits when they are
// gone. Its outcome comes later, through r.Done.
func (c *Core) Submit(r *Request) error {
	switch {
	case r.Op == store.OpGrantTTL:
		return c.submitGrant(r)
	case r.Op == store.OpRevokeTTL:
		return c.submitRevoke(r)
	case r.Op == store.OpTxn:
		return c.submitTxn(r)
	case r.Lease != 0 && (r.Op == store.OpPut || r.Op == store.OpCAS || r.acquires()) && c.afterRevocation(r, r.Lease):
		// Its lease is being revoked: it waits for the revocation to end.
		return nil
	}
	if done, err := c.precheck(r); done || err != nil {
		return err
	}
	now := c.clock.Now()
	r.received = now
	r.op = leasetable.Op{Kind: leasetable.OpWrite, Session: r.Session, Key: string(r.Key), Token: r.Token, Data: r}
	if r.acquires() {
		r.op.Kind = leasetable.OpAcquire
		r.op.Mode, r.op.Lease = r.Mode, r.Lease
	} else if r.Token != 0 {
		r.op.Lease = r.Under
	}
	if r.Timeout > 0 {
		r.op.Deadline = now.Add(r.Timeout)
	}
	c.mu.Lock()
	if c.stopping.Load() {
		c.mu.Unlock()
		r.uncount()
		return fmt.Errorf("%w: the server is shutting down; no new writes", ErrClosed)
	}
	if r.acquires() {
		r.holder = c.clients[r.Session]
	}
	eff, err := c.table.Submit(&r.op, now)
	c.enqueueReady(eff)
	c.mu.Unlock()
	if err != nil {
		r.uncount()
		switch {
		case errors.Is(err, leasetable.ErrFenced):
			err = fmt.Errorf("write to %q with token %d: %w", r.Key, r.Token, err)
		case errors.Is(err, leasetable.ErrLocked):
			err = fmt.Errorf("write lease on %q: %w", r.Key, ErrLocked)
		case errors.Is(err, leasetable.ErrWriteLeaseLimit):
			err = fmt.Errorf("write lease on %q: %w, %d (MaxWriteLeasesPerSession): release some", r.Key, err, c.cfg.MaxWriteLeasesPerSession)
		}
		return err
	}
	c.carryOut(eff)
	return nil
}

// precheck settles what Submit settles before r, a write, acquisition or
// transaction, reaches the lease table: a retry whose outcome the store
// keeps ends at once (done), and Config.Admit may refuse a request no copy
// of which may have been applied (its error).
func (c *Core) precheck(r *Request) (done bool, err error) {
	// Whether Admit may refuse r: its refusal tells the writer that nothing
	// was applied, which must not be said of a write an earlier copy of
	// which may have committed (Config.Admit).
	admit := c.cfg.Admit != nil
	if r.Client != 0 && !r.acquires() {
		// Counted before the store is asked, so that a retry either sees
		// this copy on its way or finds its outcome kept.
		another := admit && c.track(r)
		res, kept, unknown := c.kept(r)
		switch {
		case kept && !c.heldAny(r.writtenKeys(), c.clock.Now()):
			// A retry of a write that was applied gets its outcome at
			// once, even while Admit refuses writes: it must not wait for
			// holders, such as the session it was sent on first, whose
			// client has given it up.
			r.finish(Outcome{Err: res.Err, Version: res.Version, Duplicate: true, Unchanged: res.Unchanged, Succeeded: res.Succeeded})
			return true, nil
		case kept:
			// One that a new leader inherited waits for the barrier, as
			// its key's readers do (Config.Inherited), and gets its
			// outcome when it is applied (store.Command).
			admit, r.copied = false, true
		case another || unknown:
			// Nor is one refused here whose first copy is still on its
			// way, or may have been applied: it waits its turn on the key
			// behind that copy, and the committer asks Admit about it
			// once that copy's outcome is settled (Core.admit).
			admit, r.copied = false, true
		}
	}
	if admit {
		if err := c.cfg.Admit(r.admitOp(), 0); err != nil {
			r.uncount()
			return false, fmt.Errorf("%s refused: %w", r.what(), err)
		}
	}
	return false, nil
}

// what names r in errors: a write to its key, or a transaction.
func (r *Request) what() string {
	if r.Op == store.OpTxn {
		return fmt.Sprintf("transaction on %d keys", len(r.txnKeys()))
	}
	return fmt.Sprintf("write to %q", r.Key)
}

// heldAny reports whether reads of any of keys are held at now (isHeld).
func (c *Core) heldAny(keys []string, now time.Time) bool {
	for _, k := range keys {
		if c.isHeld(k, now) {
			return true
		}
	}
	return false
}

// Cancel abandons r if it has not started to commit, and then ends it with
// why; one that has started commits, and reports that. Cancelling a request
// twice, or one that has ended, does nothing.
func (c *Core) Cancel(r *Request, why error) {
	switch {
	case r.Op == store.OpRevokeTTL:
		c.cancelRevoke(r, why)
		return
	case r.Op == store.OpGrantTTL:
		return // queued to commit at once
	case c.cancelHeld(r, why):
		return
	case r.acquires() && c.cancelParked(r, why):
		return
	case r.Op == store.OpTxn:
		c.cancelTxn(r, why)
		return
	}
	c.mu.Lock()
	ok, eff := c.table.Abandon(&r.op, c.clock.Now())
	c.enqueueReady(eff)
	c.mu.Unlock()
	if ok {
		r.abandon(why)
	}
	c.carryOut(eff)
}

// enqueueReady hands ready ops to the committer, noting when they became
// ready. The caller holds c.mu, so that ops reach the committer in the
// order the table made them ready.
func (c *Core) enqueueReady(eff leasetable.Effects) {
	if len(eff.Ready) == 0 {
		return
	}
	now := c.clock.Now()
	jobs := make([]job, 0, len(eff.Ready))
	for _, op := range eff.Ready {
		switch d := op.Data.(type) {
		case *Request:
			if d.Op == store.OpTxn {
				if c.txnReady(d, now) {
					jobs = append(jobs, job{req: d})
				}
				continue
			}
			d.ready = now
			jobs = append(jobs, job{req: d})
		case *revocation:
			c.opReady(d, now)
		case *lockStep:
			jobs = append(jobs, c.stepReady(d)...)
		}
	}
	c.queue.push(jobs...)
}
