package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/store"
)

// Transactions (DESIGN §4.7). A transaction writes several keys at one
// revision, each under the lease rules of a write: submitTxn submits one
// lease-table op per key it may write (in either branch), and once every
// one is ready (its key's holders have let go or their leases have run
// out, and no other write is ahead of it), one OpTxn goes through the
// commit queue and ends them all.
//
// Two transactions never wait for each other: all the ops of one are
// submitted under one hold of c.mu, and every key's queue is FIFO, so any
// two requests on several keys are queued in the same order on every key
// they share, and the later one never holds a key that the earlier one
// waits for. A transaction's fenced writes wait their turn too
// (leasetable.Op.InOrder), instead of going ahead as a single fenced write
// does: a write that went ahead could hold a key that a transaction
// queued before it waits for. Their tokens are checked again once every
// op is ready (txnReady).

// txnState is a transaction's ops, from submitTxn until it ends. Guarded by
// c.mu.
type txnState struct {
	ops   []leasetable.Op
	ready int
	// queued: its OpTxn is queued, or it was refused or abandoned; it can
	// no longer be abandoned, and no op of it queues it again.
	queued bool
	// fenced is the error of a fenced write whose write lease ended while
	// it waited: the committer ends it with it, nothing applied.
	fenced error
}

// txnKeys returns the keys of r, a transaction, each once.
func (r *Request) txnKeys() [][]byte { return r.Txn.Keys() }

// writtenKeys returns the keys r may write: its key, or a transaction's.
func (r *Request) writtenKeys() []string {
	if r.Op != store.OpTxn {
		return []string{string(r.Key)}
	}
	keys := r.txnKeys()
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = string(k)
	}
	return out
}

// Size is the bytes of keys and values r carries: what Config.Admit is
// told, and what the server counts against its budgets of waiting writes.
func (r *Request) Size() int {
	if r.Op != store.OpTxn || r.Txn == nil {
		return len(r.Key) + len(r.Value)
	}
	n := 0
	for _, c := range r.Txn.If {
		n += len(c.Key) + len(c.Value)
	}
	for _, ops := range [2][]store.TxnOp{r.Txn.Then, r.Txn.Else} {
		for _, op := range ops {
			n += len(op.Key) + len(op.Value)
		}
	}
	return n
}

// admitOp returns the op Config.Admit is asked about for r: its own, but
// store.OpDelete for a transaction that puts nothing in either branch,
// which frees room as a delete does and is let through a full disk as one
// is.
func (r *Request) admitOp() store.Op {
	if r.Op != store.OpTxn || r.Txn == nil {
		return r.Op
	}
	for _, ops := range [2][]store.TxnOp{r.Txn.Then, r.Txn.Else} {
		for _, op := range ops {
			if op.Op == store.OpPut {
				return store.OpTxn
			}
		}
	}
	return store.OpDelete
}

// txnLeases returns the TTL leases that the puts of t attach keys to.
func txnLeases(t *store.Txn) []uint64 {
	var ls []uint64
	for _, ops := range [2][]store.TxnOp{t.Then, t.Else} {
		for _, op := range ops {
			if op.Op == store.OpPut && op.Lease != 0 {
				ls = append(ls, op.Lease)
			}
		}
	}
	return ls
}

// submitTxn hands the transaction r to the lease table: one op for each key
// it may write, all under one hold of c.mu. If the table refuses one (a
// fencing token that is not the live one), none of them stays.
func (c *Core) submitTxn(r *Request) error {
	if err := r.Txn.Check(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	for _, l := range txnLeases(r.Txn) {
		if c.afterRevocation(r, l) {
			return nil // a TTL lease it names is being revoked: it waits
		}
	}
	if done, err := c.precheck(r); done || err != nil {
		return err
	}
	now := c.clock.Now()
	r.received = now
	keys := r.txnKeys()
	st := &txnState{ops: make([]leasetable.Op, len(keys))}
	var effs []leasetable.Effects
	c.mu.Lock()
	if c.stopping.Load() {
		c.mu.Unlock()
		r.uncount()
		return fmt.Errorf("%w: the server is shutting down; no new writes", ErrClosed)
	}
	r.txn = st
	if len(keys) == 0 {
		// Compares alone, or branches with no op: nothing to wait for.
		st.queued, r.ready = true, now
		c.queue.push(job{req: r})
	}
	var err error
	for i, k := range keys {
		op := &st.ops[i]
		*op = leasetable.Op{Kind: leasetable.OpWrite, Session: r.Session, Key: string(k), Token: r.Fence[string(k)], InOrder: true, Data: r}
		if op.Token != 0 {
			op.Lease = r.Under
		}
		if r.Timeout > 0 {
			op.Deadline = now.Add(r.Timeout)
		}
		var eff leasetable.Effects
		if eff, err = c.table.Submit(op, now); err != nil {
			if errors.Is(err, leasetable.ErrFenced) {
				err = fmt.Errorf("write to %q with token %d: %w", k, op.Token, err)
			}
			st.ops = st.ops[:i]
			break
		}
		c.enqueueReady(eff)
		effs = append(effs, eff)
	}
	if err != nil {
		// Its ops already submitted leave again; those are ready at most,
		// as st.ready cannot have reached len(keys).
		st.queued = true
		effs = append(effs, c.endTxnOps(r, false, now)...)
	}
	c.mu.Unlock()
	for _, eff := range effs {
		c.carryOut(eff)
	}
	if err != nil {
		r.uncount()
		return err
	}
	return nil
}

// txnReady notes that an op of r, a transaction, is ready, and reports
// whether r is ready to commit: every op is. A fenced write whose write
// lease ended meanwhile makes it ready too, to be refused by the
// committer. The caller holds c.mu (enqueueReady).
func (c *Core) txnReady(r *Request, now time.Time) bool {
	st := r.txn
	st.ready++
	if st.ready < len(st.ops) || st.queued {
		return false
	}
	st.queued = true
	r.ready = now
	for i := range st.ops {
		if op := &st.ops[i]; c.table.Fenced(op, now) {
			st.fenced = fmt.Errorf("write to %q with token %d: %w: the write lease ended while the transaction waited", op.Key, op.Token, leasetable.ErrFenced)
			break
		}
	}
	return true
}

// endTxnOps takes the ops of r, a transaction, out of the lease table:
// ready ones as done (committed or not), the others as abandoned. It
// returns their effects, whose ready ops it has queued, for the caller to
// carry out. The caller holds c.mu.
func (c *Core) endTxnOps(r *Request, committed bool, now time.Time) []leasetable.Effects {
	effs := make([]leasetable.Effects, 0, len(r.txn.ops))
	for i := range r.txn.ops {
		op := &r.txn.ops[i]
		ok, eff := c.table.Abandon(op, now)
		if !ok {
			_, eff = c.table.Done(op, committed, 0, now)
		}
		c.enqueueReady(eff)
		effs = append(effs, eff)
	}
	return effs
}

// cancelTxn abandons r, a transaction, unless its OpTxn is queued (it then
// commits, and reports that), and ends it with why.
func (c *Core) cancelTxn(r *Request, why error) {
	c.mu.Lock()
	if r.txn == nil || r.txn.queued {
		c.mu.Unlock()
		return
	}
	r.txn.queued = true
	effs := c.endTxnOps(r, false, c.clock.Now())
	c.mu.Unlock()
	for _, eff := range effs {
		c.carryOut(eff)
	}
	r.abandon(why)
}

// txnDone ends the ops of r, a transaction the committer applied (res) or
// failed to (err), and returns its outcome and the ops' effects. The
// committer calls it under c.mu.
func (c *Core) txnDone(r *Request, res store.Result, err error, now time.Time) (Outcome, []leasetable.Effects) {
	if err == nil {
		err = res.Err
	}
	if err == nil {
		ops := r.Txn.Then
		if !res.Succeeded {
			ops = r.Txn.Else
		}
		for _, op := range ops {
			c.attachedWrite(string(op.Key), op.Lease)
		}
	}
	holders := 0
	for i := range r.txn.ops {
		holders += r.txn.ops[i].Holders
	}
	o := Outcome{Err: err, Version: res.Version, Succeeded: res.Succeeded, Duplicate: res.Duplicate,
		Waited: max(0, r.ready.Sub(r.received)), Holders: holders}
	return o, c.endTxnOps(r, err == nil, now)
}
