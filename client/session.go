package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// sessionCloseWait bounds how long Session.Close waits for its
// revocation, on top of the lease's TTL bound: a revocation waits for the
// holders of the lease's keys, as a write does.
const sessionCloseWait = 30 * time.Second

// Session is a TTL lease that the client keeps alive for as long as the
// application holds it, after etcd's concurrency.Session: a process
// attaches keys to it (WithLease(s.Lease())) to announce that it is alive,
// and watches Done to learn when it no longer is. A Session is safe for
// concurrent use.
type Session struct {
	c   *Client
	id  LeaseID
	ttl time.Duration
	sub *keepAliveSub

	closeOnce sync.Once
	closeErr  error
}

// NewSession grants a TTL lease of ttl and keeps it alive until Close or
// Orphan, or until it is lost (see KeepAlive). ctx bounds the grant only.
// Its errors are Grant's.
func NewSession(ctx context.Context, c *Client, ttl time.Duration) (*Session, error) {
	g, sent, err := c.grant(ctx, ttl)
	if err != nil {
		return nil, err
	}
	sub, err := c.keep(context.Background(), g.ID, sent, g.TTL, false)
	if err != nil {
		return nil, err
	}
	return &Session{c: c, id: g.ID, ttl: g.TTL, sub: sub}, nil
}

// Lease returns the session's lease.
func (s *Session) Lease() LeaseID { return s.id }

// TTL returns the TTL the lease was granted with.
func (s *Session) TTL() time.Duration { return s.ttl }

// Done returns a channel that is closed when the session ends: its lease
// was lost (the server says it is gone, or its TTL ran out on the client's
// clock without a renewal), the session was closed or orphaned, or the
// client was closed. Once it is closed, the keys attached to the lease may
// be gone.
func (s *Session) Done() <-chan struct{} { return s.sub.done }

// Orphan stops keeping the lease alive, without revoking it: the lease
// runs out after its TTL, unless something else keeps it alive (another
// KeepAlive of it). Done is closed. Orphan may be called more than once.
func (s *Session) Orphan() { s.c.endSub(s.sub) }

// Close stops keeping the lease alive and revokes it, which deletes its
// keys at once. It waits for the revocation at most the lease's TTL (after
// which the lease would have run out anyway) and at most 30 s. A lease that
// is gone already is not an error. Close may be called more than once; it
// returns the first call's error.
func (s *Session) Close() error {
	s.closeOnce.Do(func() {
		s.Orphan()
		ctx, cancel := context.WithTimeout(context.Background(), min(s.ttl, sessionCloseWait))
		defer cancel()
		if _, err := s.c.Revoke(ctx, s.id); err != nil && !errors.Is(err, ErrNotFound) {
			s.closeErr = fmt.Errorf("close session: %w", err)
		}
	})
	return s.closeErr
}
