package core

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/store"
)

// job is one entry of the commit queue: a ready write or acquisition, or
// the end of a write lease to make durable.
type job struct {
	req  *Request
	end  leasetable.Notice // when req, rev and ttl are nil
	done func()            // an end's: called once it is durable, or failed
	// rev is a revocation whose keys are all ready (ttlexpiry.go).
	rev *revocation
	// ttl is a mark (OpKeptAliveTTL) or checkpoint record of TTL leases;
	// marks, a mark's, is the keep-alive waiting for it.
	ttl   *store.Command
	marks *markBatch
	// step is the op on the lock record of a grant or an end (lock.go),
	// once the lease table has it; done with the job.
	step *leasetable.Op
}

// command returns the store command that carries out j.
func (c *Core) command(j job) store.Command {
	r := j.req
	switch {
	case j.rev != nil:
		c.ttl.mu.Lock()
		expired := j.rev.expiry
		c.ttl.mu.Unlock()
		return store.Command{Op: store.OpRevokeTTL, Lease: j.rev.id, Expect: j.rev.gen, Expired: expired, At: c.clock.Now()}
	case j.ttl != nil:
		return *j.ttl
	case r == nil:
		return store.Command{Op: store.OpEndWriteLease, Key: []byte(j.end.Key), Token: j.end.Token}
	case r.acquires():
		return store.Command{Op: store.OpGrantWriteLease, Key: r.Key, Session: uint64(r.Session), Client: r.holder, Term: c.cfg.WriteTermFor(string(r.Key)), Lease: r.Lease, LockDelay: r.LockDelay}
	case r.Op == store.OpTxn:
		cmd := store.Command{Op: store.OpTxn, Txn: r.Txn, Guard: r.Guard}
		if r.Client != 0 {
			cmd.Client, cmd.Request, cmd.Acked, cmd.At = r.Client, r.ID, r.Acked, c.clock.Now()
		}
		return cmd
	case r.Op == store.OpGrantTTL:
		cmd := store.Command{Op: store.OpGrantTTL, Term: r.TTL, Owner: r.Owner}
		if r.Client != 0 {
			cmd.Client, cmd.Request, cmd.Acked, cmd.At = r.Client, r.ID, r.Acked, c.clock.Now()
		}
		return cmd
	}
	cmd := store.Command{Op: r.Op, Key: r.Key, Value: r.Value, Expect: r.Expect, Lease: r.Lease, Guard: r.Guard}
	if r.Client != 0 {
		cmd.Client, cmd.Request, cmd.Acked, cmd.At = r.Client, r.ID, r.Acked, c.clock.Now()
	}
	return cmd
}

// commitLoop persists queued jobs in batches, one Apply each, and ends
// them. While the store is down it wakes when a retry is due, so that the
// store comes back even when no write asks for it.
func (c *Core) commitLoop() {
	defer c.loops.Done()
	for {
		if batch := c.queue.take(256); batch != nil {
			c.commit(batch)
			continue
		}
		if c.queue.isShut() {
			return
		}
		var retry <-chan time.Time
		var timer clock.Timer
		if at, down := c.down.retryTime(); down {
			timer = c.clock.NewTimer(max(at.Sub(c.clock.Now()), 0))
			retry = timer.Chan()
		}
		select {
		case <-c.queue.wake:
		case <-retry:
			c.recover(c.clock.Now())
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// commit applies a batch of jobs and ends each: the table learns what
// committed, writers and acquirers get their outcome, and write-lease ends
// take effect.
func (c *Core) commit(batch []job) {
	defer c.queue.done(len(batch))
	if batch = c.admit(batch); len(batch) == 0 {
		return
	}
	if batch = c.stepLocks(batch); len(batch) == 0 {
		return
	}
	cmds := make([]store.Command, len(batch))
	for i, j := range batch {
		cmds[i] = c.command(j)
	}
	results, failed := c.apply(cmds)
	now := c.clock.Now()
	// A writer gets a fresh read lease, and an acquirer its write lease,
	// only under the horizon.
	var horizonErr error
	for _, j := range batch[:len(results)] {
		if r := j.req; r != nil && r.Op != store.OpGrantTTL && r.Op != store.OpTxn && (r.acquires() || c.cfg.TermFor(string(r.Key)) > 0) {
			horizonErr = c.ensureHorizon(now)
			break
		}
	}
	outs := make([]Outcome, len(batch))
	var effs []leasetable.Effects
	var orphans []leasetable.Notice // write leases granted durably but not in the table
	type settled struct {
		j   job
		res store.Result
		err error
	}
	var ttls []settled // revocations and marks, settled once c.mu is released
	c.mu.Lock()
	if failed != nil {
		c.doubtWrites(batch[len(results):], failed)
	}
	for i, j := range batch {
		var res store.Result
		err := failed
		if i < len(results) {
			res, err = results[i], nil
		}
		r := j.req
		var eff leasetable.Effects
		switch {
		case j.rev != nil:
			effs = append(effs, c.revoked(j.rev, res, err, now)...)
			ttls = append(ttls, settled{j, res, err})
		case j.ttl != nil:
			if err == nil && res.Err != nil {
				err = fmt.Errorf("%w: %s: %v", ErrInternal, j.ttl.Op, res.Err)
			}
			if j.marks != nil {
				ttls = append(ttls, settled{j, res, err})
			}
		case r == nil && err != nil:
			c.down.keepEnd(j.end) // ended again once the store is back
			effs = append(effs, c.stepDone(j, false, now))
		case r == nil:
			eff = c.table.EndWriteLease(j.end.Key, j.end.Token, now)
			effs = append(effs, c.stepDone(j, true, now))
		case r.Op == store.OpGrantTTL:
			outs[i] = c.granted(r, res, err, now)
		case r.Op == store.OpTxn:
			var teffs []leasetable.Effects
			outs[i], teffs = c.txnDone(r, res, err, now)
			effs = append(effs, teffs...)
		case r.acquires():
			key, term := string(r.Key), c.cfg.WriteTermFor(string(r.Key))
			if err == nil && horizonErr != nil {
				err = horizonErr
			}
			if err == nil && res.Err != nil {
				err = res.Err // its TTL lease is gone or full: nothing granted
			}
			token := res.Token
			if err != nil {
				token = 0
			}
			eff = c.table.DoneAcquire(&r.op, token, term, now)
			effs = append(effs, c.stepDone(j, token != 0, now))
			if live, _, ok := c.table.WriteLease(key); res.Token != 0 && (!ok || live != res.Token) {
				// Granted in the store, but not to anyone: the horizon
				// failed, or the acquirer's session closed meanwhile.
				orphans = append(orphans, leasetable.Notice{Session: r.Session, Key: key, Token: res.Token})
				if err == nil {
					err = fmt.Errorf("%w: the session closed before its write lease was granted", ErrClosed)
				}
			}
			if errors.Is(err, store.ErrLeaseNotFound) || errors.Is(err, store.ErrLeaseFull) {
				err = fmt.Errorf("write lease on %q under TTL lease %016x: %w", r.Key, r.Lease, err)
			}
			if r.Lease != 0 {
				term = 0 // a lock has no term: it lives as long as its TTL lease
			}
			outs[i] = Outcome{Err: err, Token: token, Term: term}
		default:
			if err == nil {
				err = res.Err
			}
			if r.Lease != 0 && (errors.Is(err, store.ErrLeaseNotFound) || errors.Is(err, store.ErrLeaseFull)) {
				err = fmt.Errorf("write to %q with TTL lease %016x: %w", r.Key, r.Lease, err)
			}
			term := c.cfg.TermFor(string(r.Key))
			if horizonErr != nil || res.Duplicate || c.handingOff.Load() || r.NoReadLease {
				term = 0
			}
			if err == nil { // a TTL lease's keys, and its writer's read lease (ttl.go)
				c.attachedWrite(string(r.Key), r.Lease)
				term = c.writerTerm(r.Lease, term, now)
			}
			o := Outcome{Err: err, Version: res.Version, Waited: max(0, r.ready.Sub(r.received)), Holders: r.op.Holders, Duplicate: res.Duplicate, Unchanged: res.Unchanged}
			o.Term, eff = c.table.Done(&r.op, err == nil, term, now)
			outs[i] = o
		}
		c.enqueueReady(eff)
		effs = append(effs, eff)
	}
	c.mu.Unlock()
	for _, n := range orphans {
		c.queue.push(job{end: n})
	}
	for _, eff := range effs {
		c.carryOut(eff)
	}
	for _, s := range ttls {
		if s.j.rev != nil {
			c.afterRevoke(s.j.rev, s.res, s.err)
		} else {
			c.marked(s.j.marks, s.j.ttl.Leases, s.err)
		}
	}
	for i, j := range batch {
		r := j.req
		if r == nil {
			if j.done != nil {
				j.done()
			}
			continue
		}
		if r.acquires() && outs[i].Err == nil {
			rec, err := c.store.Get(r.Key)
			if err != nil {
				outs[i].Err = fmt.Errorf("%w: read after grant: %v", ErrInternal, err)
			}
			outs[i].Record = rec
		}
		r.finish(outs[i])
	}
}

// doubtWrites notes the keys that the writes and revocations of jobs,
// whose commit failed with err, may have changed, if another node may yet
// commit them: in a replicated store, a failed commit may still be
// committed by the next leader, and this core, which may no longer lead,
// could not tell. Until the store is reopened, which shows every committed
// entry, reads of those keys fail (doubted): else a deposed leader would
// serve their old values after the new ones may have been read elsewhere,
// until its horizon (DESIGN §13). The caller holds c.mu.
func (c *Core) doubtWrites(jobs []job, err error) {
	if !c.cfg.Replicated || errors.As(err, new(notApplied)) {
		return
	}
	fails := c.down.failures()
	doubt := func(k string) {
		if c.doubt == nil {
			c.doubt = make(map[string]uint64)
		}
		c.doubt[k] = fails
	}
	for _, j := range jobs {
		switch r := j.req; {
		case j.rev != nil:
			for i := range j.rev.ops {
				doubt(j.rev.ops[i].Key)
			}
		case r != nil && (r.Op == store.OpPut || r.Op == store.OpDelete || r.Op == store.OpCAS || r.Op == store.OpTxn):
			for _, k := range r.writtenKeys() {
				doubt(k)
			}
		case changesLock(j):
			doubt(store.LockRecordKey(lockKey(j)))
		}
	}
	if len(c.doubt) > 0 {
		c.log.Warn("reads of the keys of writes of unknown outcome fail until the store is reopened", "keys", len(c.doubt), "err", err)
	}
}

// doubted reports whether a write of unknown outcome may have changed key
// since the store was last reopened (doubtWrites). The caller holds c.mu.
func (c *Core) doubted(key string) bool {
	fails, ok := c.doubt[key]
	if !ok {
		return false
	}
	if fails <= c.down.settledFailures() {
		delete(c.doubt, key)
		return false
	}
	return true
}

// admit asks Config.Admit about every write, acquisition and transaction
// of batch, ends those it refuses with its error, nothing of them applied,
// and returns the rest. It lets through a write that an earlier copy may
// have been applied (mayBeApplied) whatever Admit says: applying it gives
// it that copy's outcome, and writes nothing. It also ends, unapplied, a
// transaction whose fenced write's lease ended while it waited (txnReady):
// that one no copy of may have been applied, as a retry's first copy is
// applied, or not, before the retry's ops are ready.
func (c *Core) admit(batch []job) []job {
	if c.cfg.Admit == nil && !slices.ContainsFunc(batch, fencedTxn) {
		return batch
	}
	admitted := make([]job, 0, len(batch))
	type refusal struct {
		r   *Request
		err error
	}
	var refused []refusal
	var through map[retryKey]bool // the writes with a Client let through so far
	for _, j := range batch {
		if r := j.req; r != nil {
			if fencedTxn(j) {
				refused = append(refused, refusal{r, r.txn.fenced})
				continue
			}
			if c.cfg.Admit != nil {
				if err := c.cfg.Admit(r.admitOp(), r.Size()); err != nil && !c.mayBeApplied(r, through) {
					refused = append(refused, refusal{r, fmt.Errorf("%s refused: %w", r.what(), err)})
					continue
				}
			}
			if r.Client != 0 && !r.acquires() {
				if through == nil {
					through = make(map[retryKey]bool)
				}
				through[retryKey{r.Client, r.ID}] = true
			}
		}
		admitted = append(admitted, j)
	}
	if len(refused) == 0 {
		return batch
	}
	now := c.clock.Now()
	var effs []leasetable.Effects
	holders := make([]int, len(refused))
	c.mu.Lock()
	for i, f := range refused {
		holders[i] = f.r.op.Holders
		switch {
		case f.r.Op == store.OpGrantTTL:
			c.granted(f.r, store.Result{}, f.err, now)
		case f.r.acquires():
			eff := c.table.DoneAcquire(&f.r.op, 0, c.cfg.WriteTermFor(string(f.r.Key)), now)
			c.enqueueReady(eff)
			effs = append(effs, eff)
		case f.r.Op == store.OpTxn:
			for _, op := range f.r.txn.ops {
				holders[i] += op.Holders
			}
			effs = append(effs, c.endTxnOps(f.r, false, now)...)
		default:
			_, eff := c.table.Done(&f.r.op, false, 0, now)
			c.enqueueReady(eff)
			effs = append(effs, eff)
		}
	}
	c.mu.Unlock()
	for _, eff := range effs {
		c.carryOut(eff)
	}
	for i, f := range refused {
		f.r.finish(Outcome{Err: f.err, Waited: max(0, f.r.ready.Sub(f.r.received)), Holders: holders[i]})
	}
	return admitted
}

// fencedTxn reports whether j is a transaction whose fenced write's lease
// ended while it waited (txnReady).
func fencedTxn(j job) bool { return j.req != nil && j.req.txn != nil && j.req.txn.fenced != nil }

// mayBeApplied reports whether r is a write with a Client an earlier copy
// of which (same Client and ID) may have been applied, so that Admit must
// not refuse it (Config.Admit): the store keeps its outcome, or cannot
// tell it (Core.kept), or a copy of it was let through before it in the
// same batch (through). The committer calls it; the copies that reached
// the table before r on its key have ended, or are in r's batch.
func (c *Core) mayBeApplied(r *Request, through map[retryKey]bool) bool {
	if r.Client == 0 || r.acquires() {
		return false
	}
	if through[retryKey{r.Client, r.ID}] {
		return true
	}
	_, ok, unknown := c.kept(r)
	return ok || unknown
}

// recover brings the store back if it is down and its retry is due: it
// reopens it, which settles what the failed commit left, and ends again the
// write leases whose ends failed. It returns nil if the store is up.
func (c *Core) recover(now time.Time) error {
	ends, err := c.down.recover(c, now)
	for _, n := range ends {
		c.queue.push(job{end: n})
	}
	return err
}

// downState is the store's health. After a failed Apply the store refuses
// writes until it is reopened; the core tries that every retry interval,
// and meanwhile refuses writes, and leases past the horizon, at once.
type downState struct {
	mu      sync.Mutex // guards the rest, and serializes reopening
	err     error      // why the store is down; nil when it is up
	retryAt time.Time
	ends    []leasetable.Notice // write-lease ends to apply once it is up
	// fails counts the failed Applies, and settled is what it was when
	// the store was last reopened: the outcomes of the failures up to
	// then are settled.
	fails, settled uint64
}

// failures returns how many Applies have failed so far.
func (d *downState) failures() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.fails
}

// settledFailures returns how many of the failed Applies a reopening of
// the store has settled since.
func (d *downState) settledFailures() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.settled
}

// retryInterval is how long after a failure the core tries to reopen the
// store again.
func (c *Core) retryInterval() time.Duration { return max(c.cfg.HorizonStep/2, 10*time.Millisecond) }

// fail records that an Apply failed with cause, and returns the error its
// commands end with.
func (d *downState) fail(c *Core, cause error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	err := fmt.Errorf("%w: storage failed to persist the change, which is not acknowledged: %v", ErrInternal, cause)
	switch {
	case d.err != nil:
	case errors.Is(cause, store.ErrNotLeader):
		// Not a fault of the disk: the node was deposed, and its core
		// ends with its lead.
		c.log.Warn("this node lost the lead while committing; it refuses writes until it leads again", "err", cause)
	default:
		c.log.Error("storage failed; writes, and leases past the horizon, are refused until it is reopened", "err", cause, "retry_in", c.retryInterval())
	}
	d.fails++
	d.err = fmt.Errorf("%w: storage is down since a failed commit (%v); writes resume once it is reopened", ErrInternal, cause)
	if errors.Is(cause, store.ErrNotWritable) {
		// Not a fault of the store: its folder cannot be written, and
		// the change was refused before it reached the log
		// (replica.Node.Apply looks first). The writer is told so, as
		// the disk guard's READONLY alarm tells it, and not of an
		// internal error.
		err = fmt.Errorf("READONLY: %w; the change is not acknowledged", cause)
		d.err = fmt.Errorf("READONLY: %w; writes resume once it can be written", cause)
	}
	d.retryAt = c.clock.Now().Add(c.retryInterval())
	return err
}

func (d *downState) keepEnd(n leasetable.Notice) {
	d.mu.Lock()
	d.ends = append(d.ends, n)
	d.mu.Unlock()
}

// StoreErr returns why the store takes no change, since a commit failed,
// until it is reopened; nil while it is up. For health checks.
func (c *Core) StoreErr() error {
	c.down.mu.Lock()
	defer c.down.mu.Unlock()
	return c.down.err
}

// retryTime reports when the next reopen is due, if the store is down.
func (d *downState) retryTime() (time.Time, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.retryAt, d.err != nil
}

// recover reopens the store if it is down and the retry is due. It returns
// the write-lease ends to apply again, and nil if the store is up.
func (d *downState) recover(c *Core, now time.Time) ([]leasetable.Notice, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.err == nil:
		return nil, nil
	case now.Before(d.retryAt):
		return nil, d.err
	}
	if err := c.store.Reopen(); err != nil {
		d.retryAt = now.Add(c.retryInterval())
		c.log.Warn("storage cannot be reopened yet", "err", err, "retry_in", c.retryInterval())
		return nil, d.err
	}
	if st, err := c.store.State(); err == nil {
		c.revision.Store(st.Revision) // the failed commit may have been replayed
		c.revisionMoved()
	}
	c.log.Info("storage reopened; writes and leases resume")
	// A grant whose commit failed may have been applied: the Lessor
	// tracks every TTL lease the store holds, from now.
	if _, err := c.resumeTTL(now, time.Time{}); err != nil {
		c.log.Warn("cannot resume the TTL leases after reopening the store", "err", err)
	}
	d.err, d.settled = nil, d.fails
	ends := d.ends
	d.ends = nil
	return ends, nil
}

// commitQueue is the unbounded FIFO of jobs between the lease table and the
// committer. push never blocks, so it may be called with Core.mu held.
type commitQueue struct {
	mu     sync.Mutex // guards jobs, busy and shut
	cond   *sync.Cond // broadcast when jobs end, for drain
	jobs   []job
	busy   int // jobs taken and not done
	shut   bool
	wake   chan struct{} // capacity 1: a job was pushed, or the queue shut
	closed chan struct{} // closed by close
	once   sync.Once
}

func (q *commitQueue) init() {
	q.cond = sync.NewCond(&q.mu)
	q.wake = make(chan struct{}, 1)
	q.closed = make(chan struct{})
}

func (q *commitQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *commitQueue) push(jobs ...job) {
	q.mu.Lock()
	q.jobs = append(q.jobs, jobs...)
	q.mu.Unlock()
	q.signal()
}

// pushOpen queues jobs unless the queue is shut, which it reports: the
// committer takes every job queued before it is shut, and none after.
func (q *commitQueue) pushOpen(jobs ...job) bool {
	q.mu.Lock()
	if q.shut {
		q.mu.Unlock()
		return false
	}
	q.jobs = append(q.jobs, jobs...)
	q.mu.Unlock()
	q.signal()
	return true
}

// take returns up to max queued jobs, or nil if none is queued.
func (q *commitQueue) take(max int) []job {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.jobs) == 0 {
		return nil
	}
	n := min(len(q.jobs), max)
	batch := append([]job(nil), q.jobs[:n]...)
	q.jobs = q.jobs[n:]
	q.busy += n
	return batch
}

func (q *commitQueue) done(n int) {
	q.mu.Lock()
	q.busy -= n
	q.mu.Unlock()
	q.cond.Broadcast()
}

func (q *commitQueue) isShut() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.shut
}

// drain waits until no job is queued or being committed.
func (q *commitQueue) drain() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for (len(q.jobs) > 0 || q.busy > 0) && !q.shut {
		q.cond.Wait()
	}
}

// close lets the committer finish what is queued, then stop.
func (q *commitQueue) close() {
	q.once.Do(func() {
		q.mu.Lock()
		q.shut = true
		q.mu.Unlock()
		q.cond.Broadcast()
		close(q.closed)
		q.signal()
	})
}
