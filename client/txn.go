package client

import (
	"context"
	"fmt"
	"time"

	"github.com/leased/leased/protocol"
)

// Compare is one condition of a transaction (Txn.If) on the committed
// state of a key. A key's version is the revision of its last write, and
// 0 while it is absent (never written, or deleted), as for
// CompareAndSwap. Make one with Exists, Absent, VersionIs, VersionIsNot,
// VersionAbove, VersionBelow, ValueIs or ValueIsNot.
type Compare struct {
	key     string
	op      protocol.CompareOp
	version uint64
	value   []byte
}

// Exists holds if key is present.
func Exists(key string) Compare { return Compare{key: key, op: protocol.CmpExists} }

// Absent holds if key is absent: never written, or deleted.
func Absent(key string) Compare { return Compare{key: key, op: protocol.CmpAbsent} }

// VersionIs holds if key's version is version (0: the key is absent).
func VersionIs(key string, version uint64) Compare {
	return Compare{key: key, op: protocol.CmpVersionEqual, version: version}
}

// VersionIsNot holds if key's version is not version.
func VersionIsNot(key string, version uint64) Compare {
	return Compare{key: key, op: protocol.CmpVersionNotEqual, version: version}
}

// VersionAbove holds if key's version is greater than version.
func VersionAbove(key string, version uint64) Compare {
	return Compare{key: key, op: protocol.CmpVersionGreater, version: version}
}

// VersionBelow holds if key's version is less than version (an absent
// key's is 0).
func VersionBelow(key string, version uint64) Compare {
	return Compare{key: key, op: protocol.CmpVersionLess, version: version}
}

// ValueIs holds if key is present with value.
func ValueIs(key string, value []byte) Compare {
	return Compare{key: key, op: protocol.CmpValueEqual, value: append([]byte(nil), value...)}
}

// ValueIsNot holds if key is present with another value than value; it
// does not hold for an absent key.
func ValueIsNot(key string, value []byte) Compare {
	return Compare{key: key, op: protocol.CmpValueNotEqual, value: append([]byte(nil), value...)}
}

// TxnOp is one write of a transaction's branch: PutOp or DeleteOp.
type TxnOp struct {
	op    protocol.WriteOp
	key   string
	value []byte
	opts  writeOptions
	wl    *WriteLease // Under
}

// PutOp sets key to value. With WithLease it attaches key to a TTL lease;
// without, it detaches key from any.
func PutOp(key string, value []byte, opts ...WriteOption) TxnOp {
	t := TxnOp{op: protocol.OpPut, key: key, value: append([]byte(nil), value...)}
	for _, o := range opts {
		o(&t.opts)
	}
	return t
}

// DeleteOp deletes key; it changes nothing if key is absent.
func DeleteOp(key string) TxnOp { return TxnOp{op: protocol.OpDelete, key: key} }

// Under makes the op a write under write lease w, which must be on the
// op's key: the server checks its fencing token, as for WriteLease.Put,
// and refuses the transaction with ErrFenced if the lease is no longer
// held when every key of the transaction is ready. Release waits for the
// transaction, as for the lease's own writes.
func (t TxnOp) Under(w *WriteLease) TxnOp {
	t.wl = w
	return t
}

// TxnResult is the outcome of a committed transaction.
type TxnResult struct {
	// Succeeded says that every compare held and Then was applied;
	// false, that Else was.
	Succeeded bool
	// Revision is the version of every key the transaction wrote, or, if
	// its branch changed nothing, the revision of the store when it was
	// applied.
	Revision uint64
	// Waited and Holders are as for a write (WriteResult), over all the
	// keys the transaction may write.
	Waited  time.Duration
	Holders int
	// Replayed says that the transaction was sent again after its
	// connection was lost, and had committed before: this is that
	// outcome.
	Replayed bool
}

// Txn is a transaction being built: Client.Txn starts one, If, Then and
// Else add to it, and Commit sends it. It is not safe for concurrent use.
type Txn struct {
	c         *Client
	ctx       context.Context
	ifs       []Compare
	then, els []TxnOp
	guard     *protocol.Guard
	sent      bool
}

// Txn starts a transaction: if every compare of If holds, it applies the
// ops of Then, else those of Else, all of them at one revision, or none.
// Each key it may write, in either branch, goes through the lease rules of
// a write: it commits once every other holder of a lease on any of them
// has dropped it or its lease has run out. Two transactions never wait
// for each other, whatever order they name their keys in. A file system's
// rename of src to dst is
//
//	c.Txn(ctx).If(client.Exists(src), client.Absent(dst)).
//		Then(client.PutOp(dst, inode), client.DeleteOp(src)).Commit()
//
// The server bounds a transaction to 128 compares and 128 ops in each
// branch, and its values in all to its largest value (ErrTooLarge past
// them); a branch writes a key once at most. Like a write, a transaction
// lost with its connection is sent again on the next session and applied
// once, unless one of its ops is Under a write lease.
func (c *Client) Txn(ctx context.Context) *Txn { return &Txn{c: c, ctx: ctx} }

// If adds compares; all of them must hold for Then to apply.
func (t *Txn) If(cmps ...Compare) *Txn { t.ifs = append(t.ifs, cmps...); return t }

// Then adds ops to apply if every compare holds.
func (t *Txn) Then(ops ...TxnOp) *Txn { t.then = append(t.then, ops...); return t }

// Guard makes the whole transaction apply only if the write lease on lock
// is held with token when it commits; otherwise Commit fails with
// ErrFenced and nothing changes (WithGuard).
func (t *Txn) Guard(lock string, token uint64) *Txn {
	t.guard = &protocol.Guard{Key: []byte(lock), Token: token}
	return t
}

// Else adds ops to apply if a compare does not hold.
func (t *Txn) Else(ops ...TxnOp) *Txn { t.els = append(t.els, ops...); return t }

// Commit sends the transaction and returns its outcome once it has
// committed. The client drops its cached entries of the keys it may
// write before it is sent. Errors are as for Put; a TTL lease that does
// not exist is ErrLeaseNotFound, and nothing changed.
func (t *Txn) Commit() (TxnResult, error) {
	if t.sent {
		return TxnResult{}, fmt.Errorf("%w: a transaction is committed once; start another with Client.Txn", ErrInvalidArgument)
	}
	t.sent = true
	if err := (&writeOptions{guard: t.guard}).checkGuard(); err != nil {
		return TxnResult{}, err
	}
	req := &protocol.Txn{If: make([]protocol.Compare, len(t.ifs)), Guard: t.guard}
	for i, cmp := range t.ifs {
		if err := checkKey(cmp.key); err != nil {
			return TxnResult{}, fmt.Errorf("compare %d: %w", i, err)
		}
		req.If[i] = protocol.Compare{Key: []byte(cmp.key), Op: cmp.op, Version: cmp.version, Value: cmp.value}
	}
	var keys []string
	seen := make(map[string]bool)
	fenced := false
	var under []*WriteLease  // the write leases it writes under
	var leaseUntil time.Time // the first of them could have run out then
	values := 0
	branch := func(ops []TxnOp) ([]protocol.TxnOp, error) {
		out := make([]protocol.TxnOp, len(ops))
		for i, op := range ops {
			if err := checkKey(op.key); err != nil {
				return nil, fmt.Errorf("op %d: %w", i, err)
			}
			if err := op.opts.checkLease(op.op); err != nil {
				return nil, err
			}
			out[i] = protocol.TxnOp{Op: op.op, Key: []byte(op.key), Value: op.value, Lease: uint64(op.opts.lease)}
			if wl := op.wl; wl != nil {
				if wl.key != op.key {
					return nil, fmt.Errorf("%w: op %d writes %q under the write lease on %q", ErrInvalidArgument, i, op.key, wl.key)
				}
				under = append(under, wl)
				if wl.under != 0 {
					if req.Under != 0 && req.Under != uint64(wl.under) {
						return nil, fmt.Errorf("%w: op %d writes under a lock resumed by TTL lease %v, another op under one resumed by %v", ErrInvalidArgument, i, wl.under, LeaseID(req.Under))
					}
					req.Under = uint64(wl.under)
				}
				if until := wl.until(); leaseUntil.IsZero() || until.Before(leaseUntil) {
					leaseUntil = until
				}
				out[i].Token, fenced = wl.token, true
			}
			values += len(op.value)
			if !seen[op.key] {
				seen[op.key] = true
				keys = append(keys, op.key)
			}
		}
		return out, nil
	}
	var err error
	if req.Then, err = branch(t.then); err != nil {
		return TxnResult{}, fmt.Errorf("then %w", err)
	}
	if req.Else, err = branch(t.els); err != nil {
		return TxnResult{}, fmt.Errorf("else %w", err)
	}
	for _, wl := range under {
		// As for WriteLease.write: a write after the lease was lost
		// still goes, and the server refuses it.
		if wl.beginWrite() {
			defer wl.writes.Done()
		}
	}
	check := func(h *protocol.HelloReply) error {
		if max := h.MaxValueSize; max > 0 && values > max {
			return fmt.Errorf("%w: a transaction of %d bytes of values, limit %d", ErrTooLarge, values, max)
		}
		return nil
	}
	stamp := func(id uint64, timeout time.Duration, acked uint64) {
		req.ID, req.Timeout, req.Acked = id, timeout, acked
	}
	m, fs, _, err := t.c.change(t.ctx, keys, fenced, leaseUntil, req, check, stamp)
	if err != nil {
		return TxnResult{}, err
	}
	for i, k := range keys {
		t.c.endFetch(k, fs[i])
	}
	r, ok := m.(*protocol.TxnReply)
	if !ok {
		return TxnResult{}, unexpected(m)
	}
	return TxnResult{Succeeded: r.Succeeded, Revision: r.Revision, Waited: r.Waited, Holders: r.Holders, Replayed: r.Duplicate}, nil
}
