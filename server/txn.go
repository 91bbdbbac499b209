package server

import (
	"fmt"

	"github.com/leased/leased/auth"
	"github.com/leased/leased/core"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// Multi-key transactions (DESIGN §4.7): the checks at the edge, and the
// hand-over to the core, which runs each key through the lease rules of a
// write and applies the transaction as one command.

// MaxTxnOps bounds a transaction's compares, and the ops of each of its
// branches: past it, ErrTooLarge. The values of a transaction total at
// most Config.MaxValueSize, as one put's value does.
const MaxTxnOps = store.MaxTxnOps

// authorizeTxn returns nil if the session's client may make transaction m:
// read each key it compares (a compare tells what the key holds), and
// write each key it may write, with the TTL lease right on a put that
// attaches its key to a TTL lease, whichever branch the compares choose.
func (ss *session) authorizeTxn(m *protocol.Txn) error {
	if ss.srv.policy.Load() == nil {
		return nil
	}
	for _, c := range m.If {
		if err := ss.allowed(c.Key, auth.Read); err != nil {
			return err
		}
	}
	for _, ops := range [2][]protocol.TxnOp{m.Then, m.Else} {
		for _, op := range ops {
			need := auth.Write
			if op.Lease != 0 && op.Op == protocol.OpPut {
				need |= auth.TTLLease
			}
			if err := ss.allowed(op.Key, need); err != nil {
				return err
			}
		}
	}
	if m.Guard != nil {
		// A guard tells whether the lock is held with its token.
		return ss.allowed(m.Guard.Key, auth.Read)
	}
	return nil
}

// submitTxn checks transaction m and hands it to the core.
func (ss *session) submitTxn(m *protocol.Txn) error {
	tx, fence, err := ss.checkTxn(m)
	if err != nil {
		return err
	}
	guard, err := ss.guardOf(m.Guard)
	if err != nil {
		return err
	}
	if m.Under != 0 {
		if err := ss.mayUseLease(m.Under); err != nil {
			return err
		}
	}
	for _, ops := range [2][]store.TxnOp{tx.Then, tx.Else} {
		for _, op := range ops {
			if op.Lease != 0 {
				if err := ss.mayUseLease(op.Lease); err != nil {
					return err
				}
			}
		}
	}
	return ss.submit(m.ID, &core.Request{Op: store.OpTxn, Txn: tx, Fence: fence, Timeout: m.Timeout,
		Client: ss.client, ID: m.ID, Acked: m.Acked, Guard: guard, Under: m.Under})
}

// checkTxn checks the bounds and the form of m (store.Txn.Check), and
// returns it as the store's transaction, with its fencing tokens by key.
func (ss *session) checkTxn(m *protocol.Txn) (*store.Txn, map[string]uint64, error) {
	switch {
	case len(m.If) > MaxTxnOps || len(m.Then) > MaxTxnOps || len(m.Else) > MaxTxnOps:
		return nil, nil, fmt.Errorf("%w: a transaction of %d compares and %d and %d ops; at most %d of each (MaxTxnOps)",
			errTooLarge, len(m.If), len(m.Then), len(m.Else), MaxTxnOps)
	case m.Timeout < 0:
		return nil, nil, fmt.Errorf("%w: negative timeout", errInvalidArgument)
	}
	tx := &store.Txn{If: make([]store.Compare, len(m.If))}
	values := 0
	for i, c := range m.If {
		if err := ss.checkKey(c.Key); err != nil {
			return nil, nil, fmt.Errorf("compare %d: %w", i, err)
		}
		values += len(c.Value)
		tx.If[i] = store.Compare{Key: c.Key, Op: store.CompareOp(c.Op), Version: c.Version, Value: c.Value}
	}
	var fence map[string]uint64
	for b, ops := range [2][]protocol.TxnOp{m.Then, m.Else} {
		branch := [2]string{"then", "else"}[b]
		out := make([]store.TxnOp, len(ops))
		for i, op := range ops {
			if err := ss.checkWriteKey(op.Key); err != nil {
				return nil, nil, fmt.Errorf("%s op %d: %w", branch, i, err)
			}
			if op.Token != 0 {
				if fence == nil {
					fence = make(map[string]uint64)
				}
				if t, ok := fence[string(op.Key)]; ok && t != op.Token {
					return nil, nil, fmt.Errorf("%w: %q is written with tokens %d and %d", errInvalidArgument, op.Key, t, op.Token)
				}
				fence[string(op.Key)] = op.Token
			}
			values += len(op.Value)
			out[i] = store.TxnOp{Op: storeOps[op.Op], Key: op.Key, Value: op.Value, Lease: op.Lease}
		}
		if b == 0 {
			tx.Then = out
		} else {
			tx.Else = out
		}
	}
	if values > ss.srv.cfg.MaxValueSize {
		return nil, nil, fmt.Errorf("%w: a transaction of %d bytes of values, limit %d (MaxValueSize)", errTooLarge, values, ss.srv.cfg.MaxValueSize)
	}
	// Its form (kinds of compares and ops, a delete with a value or a
	// lease, a key twice in a branch) is the store's to define.
	if err := tx.Check(); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", errInvalidArgument, err)
	}
	return tx, fence, nil
}
