package client

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leased/leased/protocol"
)

// TTL leases (DESIGN §14). A TTL lease is a liveness lease: its holder
// keeps it alive, and keys attached to it (WithLease) are deleted when it
// is revoked or runs out. It is not tied to the session that granted it:
// any session of the client may keep alive, attach keys to, or revoke it,
// as in etcd. Under an access policy (DESIGN §15) a lease belongs to the
// client certificate that granted it, and another client may use it only
// with the admin right.

// LeaseID names a TTL lease. The server never grants 0 and never reuses an
// id. It prints as 16 lowercase hexadecimal digits, as leasectl shows it.
type LeaseID uint64

// String returns id as 16 lowercase hexadecimal digits.
func (id LeaseID) String() string {
	return fmt.Sprintf("%016x", uint64(id))
}

// ParseLeaseID parses a lease id of 1 to 16 hexadecimal digits, in either
// case, with no prefix or sign. An empty or malformed id, and 0, are errors
// wrapping ErrInvalidArgument.
func ParseLeaseID(s string) (LeaseID, error) {
	if s == "" || len(s) > 16 || strings.TrimLeft(s, "0123456789abcdefABCDEF") != "" {
		return 0, fmt.Errorf("%w: lease id %q: want 1 to 16 hexadecimal digits, such as 694d71ddacfda227", ErrInvalidArgument, s)
	}
	n, err := strconv.ParseUint(s, 16, 64)
	if err != nil { // not reached: 16 hex digits always fit
		return 0, fmt.Errorf("%w: lease id %q: %v", ErrInvalidArgument, s, err)
	}
	if n == 0 {
		return 0, fmt.Errorf("%w: lease id %q: 0 names no lease", ErrInvalidArgument, s)
	}
	return LeaseID(n), nil
}

// check returns an error wrapping ErrInvalidArgument for the id 0, which
// names no lease.
func (id LeaseID) check() error {
	if id == 0 {
		return fmt.Errorf("%w: lease id 0 names no lease", ErrInvalidArgument)
	}
	return nil
}

// leaseError returns err, naming lease id if its text does not already.
func leaseError(id LeaseID, err error) error {
	if err == nil || strings.Contains(err.Error(), id.String()) {
		return err
	}
	return fmt.Errorf("lease %s: %w", id, err)
}

// errLeaseNotFound is the error of a request about lease id that does not
// exist: never granted, revoked, or expired.
func errLeaseNotFound(id LeaseID) error {
	return fmt.Errorf("%w: TTL lease %s not found", ErrNotFound, id)
}

// LeaseGrantResult is a lease Grant got.
type LeaseGrantResult struct {
	ID LeaseID
	// TTL is the lease's TTL, as the server granted it: it lives for TTL
	// from when the client sent the grant, unless it is kept alive.
	TTL time.Duration
}

// Grant asks the server for a TTL lease of ttl. The server refuses a ttl
// below its minimum or above its maximum (ErrInvalidArgument, its message
// says which) and grants past its limits on leases (ErrResourceExhausted).
//
// Like a write, a grant begun while the client is disconnected waits for
// the next session, and one whose connection is lost before its reply is
// sent again on the next session with the same request ID, so the server
// grants it once; both waits last at most half the server's retry window.
// If ctx ends first, Grant returns the error, and a lease the server may
// have granted meanwhile runs out after its TTL.
func (c *Client) Grant(ctx context.Context, ttl time.Duration) (LeaseGrantResult, error) {
	r, _, err := c.grant(ctx, ttl)
	return r, err
}

// grant is Grant; it also returns when the granting request was sent, from
// which the lease's TTL counts.
func (c *Client) grant(ctx context.Context, ttl time.Duration) (LeaseGrantResult, time.Time, error) {
	if ttl <= 0 {
		return LeaseGrantResult{}, time.Time{}, fmt.Errorf("%w: lease TTL %v: want a positive duration", ErrInvalidArgument, ttl)
	}
	cn, err := c.changeConn(ctx, "grant")
	if err != nil {
		return LeaseGrantResult{}, time.Time{}, err
	}
	id := c.newWriteID()
	req := &protocol.LeaseGrant{ID: id, TTL: ttl}
	defer c.endWrite(id)
	var retryUntil time.Time // set once the grant may have reached a server
	for {
		req.Acked = c.beginWrite(id)
		sent := c.clock.Now()
		m, lost, err := cn.callLosable(ctx, req)
		if e, ok := m.(*protocol.Error); ok && e.Code == protocol.CodeNotLeader {
			// As in write: the next leader may have the grant or not,
			// and the next session is with it.
			err = fmt.Errorf("%w: %s; the lease may or may not have been granted", ErrUnavailable, e.Message)
			cn.fail(err)
			m, lost = nil, true
		}
		if err != nil {
			if retryUntil.IsZero() {
				retryUntil = c.clock.Now().Add(cn.hello.RetryWindow / 2)
			}
			if !lost || cn.hello.RetryWindow == 0 || ctx.Err() != nil {
				if lost {
					err = fmt.Errorf("%w; the lease may or may not have been granted, and runs out after its TTL if it was", err)
				}
				return LeaseGrantResult{}, time.Time{}, err
			}
			c.log.Debug("grant lost with its connection; sending it again on the next session", "id", id, "err", err)
			if cn, err = c.awaitConn(ctx, retryUntil); err != nil {
				return LeaseGrantResult{}, time.Time{}, fmt.Errorf("%w; the grant was sent before: a lease it got runs out after its TTL", err)
			}
			continue
		}
		r, ok := m.(*protocol.LeaseGrantReply)
		if !ok {
			return LeaseGrantResult{}, time.Time{}, unexpected(m)
		}
		if r.Lease == 0 || r.TTL <= 0 {
			return LeaseGrantResult{}, time.Time{}, fmt.Errorf("%w: grant of lease %s with TTL %v", ErrProtocol, LeaseID(r.Lease), r.TTL)
		}
		return LeaseGrantResult{ID: LeaseID(r.Lease), TTL: r.TTL}, sent, nil
	}
}

// changeConn returns the connection for a request that changes state (a
// grant or a revocation). While the client is disconnected it waits for
// the next session, within ctx and at most half the last session's retry
// window, as write does; what names the request in the error.
func (c *Client) changeConn(ctx context.Context, what string) (*conn, error) {
	cn, err := c.conn()
	if err == nil || errors.Is(err, ErrClosed) {
		return cn, err
	}
	cn, err = c.awaitConn(ctx, c.clock.Now().Add(c.retryWindow()/2))
	if err != nil && !errors.Is(err, ErrClosed) {
		err = fmt.Errorf("%w; the %s was not sent: nothing changed", err, what)
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", ErrCanceled, err)
		}
	}
	return cn, err
}

// WithLease makes a Put or CompareAndSwap attach its key to TTL lease id
// (moving it from any other lease), so that the key is deleted when the
// lease is revoked or runs out. The write fails with ErrNotFound if the
// lease does not exist. A write without WithLease detaches its key from any
// lease, as in etcd. WithLease on a Delete, or with the id 0, is an error
// wrapping ErrInvalidArgument.
func WithLease(id LeaseID) WriteOption {
	return func(o *writeOptions) { o.lease, o.withLease = id, true }
}

// checkLease checks the lease option of a write of op.
func (o *writeOptions) checkLease(op protocol.WriteOp) error {
	switch {
	case !o.withLease:
		return nil
	case op == protocol.OpDelete:
		return fmt.Errorf("%w: WithLease on a Delete: a deleted key is detached from its lease; attach keys with Put or CompareAndSwap", ErrInvalidArgument)
	default:
		return o.lease.check()
	}
}

// RevokeResult reports a revocation, as the server did it.
type RevokeResult struct {
	// Revision is the revision at which the lease's keys were deleted, or
	// 0 if it had none.
	Revision uint64
	// Keys is how many keys were deleted.
	Keys int
	// Waited is how long the revocation waited for the keys' holders, as
	// a write does (WriteResult.Waited), and Holders how many leases it
	// had to invalidate or recall.
	Waited  time.Duration
	Holders int
}

// Revoke ends TTL lease id at once: the server deletes every key attached
// to it, at one revision, through the write path (their cached readers are
// invalidated first, this client's own entries included). Keep-alives of
// the lease by this client stop, and their channels close. A lease that
// does not exist (never granted, revoked, or expired) is an error wrapping
// ErrNotFound that names it. Under an access policy, revoking another
// client's lease (without the admin right), or one with a key this client
// lacks the write or ttl-lease right on, is an error wrapping
// ErrPermissionDenied, and deletes nothing.
//
// Like a write, it waits for the next session while the client is
// disconnected, and if ctx ends before the revocation commits, the server
// abandons it (ErrCanceled) if it can. It is never sent twice: if its
// connection is lost before the reply, its outcome is unknown
// (ErrUnavailable).
func (c *Client) Revoke(ctx context.Context, id LeaseID) (RevokeResult, error) {
	if err := id.check(); err != nil {
		return RevokeResult{}, err
	}
	cn, err := c.changeConn(ctx, "revocation")
	if err != nil {
		return RevokeResult{}, leaseError(id, err)
	}
	req := &protocol.LeaseRevoke{Lease: uint64(id)}
	if dl, ok := ctx.Deadline(); ok {
		if req.Timeout = time.Until(dl); req.Timeout <= 0 {
			return RevokeResult{}, leaseError(id, fmt.Errorf("%w: %w", ErrCanceled, context.DeadlineExceeded))
		}
	}
	rid, ch, err := cn.start(req)
	var m protocol.Message
	if err == nil {
		m, _, err = cn.awaitWrite(ctx, rid, ch)
	}
	if e, ok := m.(*protocol.Error); ok && e.Code == protocol.CodeNotLeader {
		err = fmt.Errorf("%w: %s; the revocation may or may not have committed", ErrUnavailable, e.Message)
		cn.fail(err)
	}
	if err != nil {
		return RevokeResult{}, leaseError(id, err)
	}
	r, ok := m.(*protocol.LeaseRevokeReply)
	if !ok {
		err := unexpected(m)
		if errors.Is(err, ErrNotFound) {
			c.loseKept(id, "not found when revoked")
		}
		return RevokeResult{}, leaseError(id, err)
	}
	c.loseKept(id, "revoked")
	return RevokeResult{Revision: r.Revision, Keys: r.Keys, Waited: r.Waited, Holders: r.Holders}, nil
}

// TimeToLiveResult is a TTL lease's state, as TimeToLive returns it.
type TimeToLiveResult struct {
	ID LeaseID
	// TTL is the time the lease has left, as its holder should count it,
	// or -1 if the lease has expired or never existed.
	TTL time.Duration
	// GrantedTTL is the TTL the lease was granted with (0 if it is gone).
	GrantedTTL time.Duration
	// Keys are the keys attached to the lease, sorted, if asked for.
	Keys []string
}

// TimeToLive returns the time lease id has left and the TTL it was
// granted with, and, if withKeys is set, the keys attached to it. A lease
// that has expired or never existed is not an error: its TTL is -1.
// Under an access policy, another client's lease (without the admin
// right), or one with a key this client lacks the ttl-lease right on (and
// read, withKeys), is an error wrapping ErrPermissionDenied.
// It fails with ErrUnavailable while the client is disconnected.
func (c *Client) TimeToLive(ctx context.Context, id LeaseID, withKeys bool) (TimeToLiveResult, error) {
	if err := id.check(); err != nil {
		return TimeToLiveResult{}, err
	}
	m, err := c.callNow(ctx, &protocol.LeaseTimeToLive{Lease: uint64(id), Keys: withKeys})
	if err != nil {
		return TimeToLiveResult{}, leaseError(id, err)
	}
	r, ok := m.(*protocol.LeaseTimeToLiveReply)
	if !ok {
		return TimeToLiveResult{}, leaseError(id, unexpected(m))
	}
	res := TimeToLiveResult{ID: id, TTL: r.TTL, GrantedTTL: r.GrantedTTL}
	if res.TTL < 0 {
		res.TTL = -1
	}
	for _, k := range r.Keys {
		res.Keys = append(res.Keys, string(k))
	}
	return res, nil
}

// LeaseStatus is a live TTL lease and the time it has left, as Leases
// lists it.
type LeaseStatus struct {
	ID  LeaseID
	TTL time.Duration
}

// Leases lists the live TTL leases of the server in id order, with the
// time each has left: every client's without an access policy; under one,
// this client's own and those granted without a certificate, or every
// lease for a client with the admin right. The server sends them a page at a
// time, as many as fit in a frame; Leases asks for every page. It fails
// with ErrUnavailable while the client is disconnected.
func (c *Client) Leases(ctx context.Context) ([]LeaseStatus, error) {
	var out []LeaseStatus
	var after uint64
	for {
		m, err := c.callNow(ctx, &protocol.LeaseList{After: after})
		if err != nil {
			return nil, err
		}
		r, ok := m.(*protocol.LeaseListReply)
		if !ok {
			return nil, unexpected(m)
		}
		for _, l := range r.Leases {
			out = append(out, LeaseStatus{ID: LeaseID(l.Lease), TTL: l.TTL})
		}
		if !r.More || len(r.Leases) == 0 || r.Leases[len(r.Leases)-1].Lease <= after {
			return out, nil
		}
		after = r.Leases[len(r.Leases)-1].Lease
	}
}

// KeepAliveResponse is one renewal of a TTL lease.
type KeepAliveResponse struct {
	ID LeaseID
	// TTL is the lease's TTL after the renewal, counted from when the
	// client sent the keep-alive.
	TTL time.Duration
}

// KeepAliveOnce renews lease id once, for its granted TTL from now, and
// returns the renewal. A lease that does not exist (never granted,
// revoked, or expired) is an error wrapping ErrNotFound that names it, and
// one that this client may not keep alive (another client's, under an
// access policy) one wrapping ErrPermissionDenied. It
// fails with ErrUnavailable while the client is disconnected. If the
// client keeps the lease alive (KeepAlive, Session), the renewal counts
// for that too.
func (c *Client) KeepAliveOnce(ctx context.Context, id LeaseID) (KeepAliveResponse, error) {
	if err := id.check(); err != nil {
		return KeepAliveResponse{}, err
	}
	sent := c.clock.Now()
	m, err := c.callNow(ctx, &protocol.LeaseKeepAlive{Leases: []uint64{uint64(id)}})
	if err != nil {
		return KeepAliveResponse{}, leaseError(id, err)
	}
	r, ok := m.(*protocol.LeaseKeepAliveReply)
	if !ok {
		return KeepAliveResponse{}, leaseError(id, unexpected(m))
	}
	for _, l := range r.Renewed {
		if LeaseID(l.Lease) == id && l.TTL > 0 {
			c.renewedKept(id, sent, l.TTL)
			return KeepAliveResponse{ID: id, TTL: l.TTL}, nil
		}
	}
	if slices.Contains(r.Denied, uint64(id)) {
		c.loseKept(id, "permission denied")
		return KeepAliveResponse{}, fmt.Errorf("%w: %s may not keep TTL lease %s alive: it belongs to another client, or has a key this one lacks the ttl-lease right on", ErrPermissionDenied, c.who(), id)
	}
	for _, u := range r.Unknown {
		if LeaseID(u) == id {
			c.loseKept(id, "not found")
			return KeepAliveResponse{}, errLeaseNotFound(id)
		}
	}
	return KeepAliveResponse{}, fmt.Errorf("%w: keep-alive reply does not name lease %s", ErrProtocol, id)
}

// callNow sends req on the current session and waits for its reply, or
// fails with ErrUnavailable at once while the client is disconnected.
func (c *Client) callNow(ctx context.Context, req protocol.Message) (protocol.Message, error) {
	cn, err := c.conn()
	if err != nil {
		return nil, err
	}
	return cn.call(ctx, req)
}

// who names the client in its errors as the server's access policy knows
// it, as the server's own permission errors do: by the CommonName of the
// certificate it presents (client "app"); "this client" when it presents
// none, or one chosen per connection (TLSConfig.GetClientCertificate).
// Any goroutine may call it.
func (c *Client) who() string {
	if c.tlsConf == nil || len(c.tlsConf.Certificates) == 0 || len(c.tlsConf.Certificates[0].Certificate) == 0 {
		return "this client"
	}
	leaf := c.tlsConf.Certificates[0].Leaf
	if leaf == nil {
		var err error
		if leaf, err = x509.ParseCertificate(c.tlsConf.Certificates[0].Certificate[0]); err != nil {
			return "this client"
		}
	}
	if leaf.Subject.CommonName == "" {
		return "this client"
	}
	return fmt.Sprintf("client %q", leaf.Subject.CommonName)
}
