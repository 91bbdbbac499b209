package server

import (
	"errors"
	"fmt"
	"slices"

	"github.com/leased/leased/auth"
	"github.com/leased/leased/core"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// leaseListEntry bounds the bytes of one lease in a LeaseListReply: a
// msgpack map of two keys of one letter, a uint64 and an int64.
const leaseListEntry = 24

// handleTTL serves the requests of TTL leases (DESIGN §14). Grants and
// revocations are ops, like writes: they count against the session's
// requests in flight, and a revocation may be canceled. A keep-alive
// counts too, until its renewals are acknowledged.
func (ss *session) handleTTL(m protocol.Message) {
	switch m := m.(type) {
	case *protocol.LeaseGrant:
		if m.TTL <= 0 {
			ss.replies.send(errorReply(m.ID, fmt.Errorf("%w: TTL %v is not positive", errInvalidArgument, m.TTL)))
			return
		}
		req := &core.Request{Op: store.OpGrantTTL, TTL: m.TTL, Owner: ss.owner, Client: ss.client, ID: m.ID, Acked: m.Acked}
		if err := ss.submit(m.ID, req); err != nil {
			ss.replies.send(errorReply(m.ID, err))
		}
	case *protocol.LeaseRevoke:
		switch {
		case m.Lease == 0:
			ss.replies.send(errorReply(m.ID, fmt.Errorf("%w: TTL lease 0 does not exist", errInvalidArgument)))
			return
		case m.Timeout < 0:
			ss.replies.send(errorReply(m.ID, fmt.Errorf("%w: negative timeout", errInvalidArgument)))
			return
		}
		if err := ss.mayUseLease(m.Lease); err != nil {
			ss.replies.send(errorReply(m.ID, err))
			return
		}
		req := &core.Request{Op: store.OpRevokeTTL, Lease: m.Lease, Timeout: m.Timeout}
		if ss.srv.policy.Load() != nil {
			// Revoking deletes the lease's keys: the client needs the
			// right to write each, and to use it with TTL leases.
			lease := m.Lease
			req.Authorize = func(keys []string) error {
				if err := ss.allowedKeys(keys, auth.TTLLease|auth.Write); err != nil {
					return fmt.Errorf("revoke TTL lease %016x: %w", lease, err)
				}
				return nil
			}
		}
		if err := ss.submit(m.ID, req); err != nil {
			ss.replies.send(errorReply(m.ID, err))
		}
	case *protocol.LeaseKeepAlive:
		ss.keepAlive(m)
	case *protocol.LeaseTimeToLive:
		switch err := ss.mayUseLease(m.Lease); {
		case errors.Is(err, store.ErrLeaseNotFound):
			ss.replies.send(&protocol.LeaseTimeToLiveReply{ID: m.ID, Lease: m.Lease, TTL: -1})
			return
		case err != nil:
			ss.replies.send(errorReply(m.ID, err))
			return
		}
		policy := ss.srv.policy.Load() != nil
		left, granted, keys, ok, err := ss.core.TTLLease(m.Lease, m.Keys || policy)
		if err == nil && policy {
			// Its keys are what the lease is about: the client needs
			// the TTL lease right on each, and to list them, the read
			// right too.
			need := auth.TTLLease
			if m.Keys {
				need |= auth.Read
			}
			if err = ss.allowedKeys(keys, need); err != nil {
				err = fmt.Errorf("TTL lease %016x: %w", m.Lease, err)
			}
		}
		if err != nil {
			ss.replies.send(errorReply(m.ID, err))
			return
		}
		if !m.Keys {
			keys = nil
		}
		r := &protocol.LeaseTimeToLiveReply{ID: m.ID, Lease: m.Lease, TTL: -1}
		if ok {
			r.TTL, r.GrantedTTL = left, granted
			for _, k := range keys {
				r.Keys = append(r.Keys, []byte(k))
			}
		}
		ss.replies.send(r)
	case *protocol.LeaseList:
		// A page fits in a frame, with room for the reply's own fields.
		page := max((ss.srv.cfg.maxFrameSize()-1024)/leaseListEntry, 1)
		var owner uint64 // 0: every lease
		if !ss.listsAllLeases() {
			owner = ss.owner
		}
		infos, more := ss.core.TTLLeases(m.After, page, owner)
		r := &protocol.LeaseListReply{ID: m.ID, Leases: make([]protocol.LeaseTTL, len(infos)), More: more}
		for i, l := range infos {
			r.Leases[i] = protocol.LeaseTTL{Lease: l.ID, TTL: l.Remaining}
		}
		ss.replies.send(r)
	}
}

// keepAlive renews the leases of m; the reply comes once the core has
// acknowledged the renewals.
func (ss *session) keepAlive(m *protocol.LeaseKeepAlive) {
	if len(m.Leases) > core.MaxKeepAliveLeases {
		ss.replies.send(errorReply(m.ID, fmt.Errorf("%w: %d leases in one keep-alive, the limit is %d", errInvalidArgument, len(m.Leases), core.MaxKeepAliveLeases)))
		return
	}
	// Each lease is renewed only if the client may use it and has the
	// TTL lease right on each of its keys, as keeping it alive keeps its
	// keys; one it may not keep alive is answered as unknown, and denied,
	// and the others are renewed still.
	keep, denied, unknown, err := ss.keepable(m.Leases)
	if err != nil {
		ss.replies.send(errorReply(m.ID, err))
		return
	}
	p := &pendingOp{reqID: m.ID}
	ss.mu.Lock()
	switch {
	case ss.ops[m.ID] != nil:
		ss.mu.Unlock()
		ss.replies.send(errorReply(m.ID, fmt.Errorf("%w: request id %d is already in flight", errProtocol, m.ID)))
		return
	case len(ss.ops) >= ss.srv.cfg.MaxInflight:
		n := len(ss.ops)
		ss.mu.Unlock()
		ss.replies.send(errorReply(m.ID, fmt.Errorf("%w: %d requests in flight, limit %d", errResourceExhausted, n, ss.srv.cfg.MaxInflight)))
		return
	}
	ss.addOpLocked(p)
	ss.mu.Unlock()
	id := m.ID
	ss.core.KeepAliveFor(ss.client, keep, func(o core.KeepAliveOutcome) {
		if o.Err != nil {
			ss.finishOp(p, errorReply(id, o.Err))
			return
		}
		r := &protocol.LeaseKeepAliveReply{ID: id, Renewed: make([]protocol.LeaseTTL, len(o.Renewed)),
			Unknown: slices.Concat(o.Unknown, unknown, denied), Denied: denied}
		for i, rn := range o.Renewed {
			r.Renewed[i] = protocol.LeaseTTL{Lease: rn.ID, TTL: rn.TTL}
		}
		ss.finishOp(p, r)
	})
}
