package client

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/protocol"
)

// Keep-alives of TTL leases. One loop per Client (keepAlives) renews every
// lease the client keeps alive, whoever asked for it (KeepAlive, Session),
// in one LeaseKeepAlive message: a lease is due a third of its TTL after
// its last keep-alive was sent, and when one is due, every lease due within
// the next sixth of its own TTL goes along, so that leases of like TTLs
// fall into step and share every message after their first.

const (
	// keepAliveBuffer is the room in a KeepAlive channel: renewals that
	// find it full are dropped, so a slow reader never holds up the loop.
	keepAliveBuffer = 16
	// maxKeepAliveLeases bounds the leases of one LeaseKeepAlive message
	// (the most the server takes in one command); a client keeping more
	// alive sends several at once.
	maxKeepAliveLeases = 1000
	// keepAliveRetryMin and keepAliveRetryMax bound the backoff after a
	// keep-alive that failed on a live connection (an error reply, no
	// reply in time). A new session ends the backoff at once.
	keepAliveRetryMin = 50 * time.Millisecond
	keepAliveRetryMax = time.Second
	// keepAliveAttemptMin bounds below how long the loop waits for the
	// reply to one keep-alive.
	keepAliveAttemptMin = 50 * time.Millisecond
)

// keptLease is a TTL lease that the client keeps alive, for the
// subscriptions that asked. Its fields are guarded by Client.kmu.
type keptLease struct {
	id LeaseID
	// ttl is the TTL of the last grant or renewal; 0 until the client
	// has one.
	ttl time.Duration
	// deadline is when the lease runs out on the client's clock: ttl
	// after the send of its last successful grant or keep-alive. Zero
	// until the client has one: then only the server can say the lease
	// is gone.
	deadline time.Time
	// next is when its next keep-alive is due.
	next time.Time
	subs []*keepAliveSub
}

// keepAliveSub is one request to keep a lease alive: a KeepAlive call or a
// Session. Its fields are guarded by Client.kmu.
type keepAliveSub struct {
	lease *keptLease
	ch    chan KeepAliveResponse // the renewals; nil for a Session
	done  chan struct{}          // closed when the subscription ends
	ended bool
	stop  func() bool // stops the end at the subscriber's context; nil: none
}

// KeepAlive keeps TTL lease id alive until ctx ends or the lease is lost,
// and returns a channel that receives each renewal. The channel is closed
// when ctx ends, when the lease is lost, or when the client is closed.
// The lease is lost when the server says it does not exist (it was
// revoked, or expired) or that this client may not keep it alive (another
// client's, under an access policy), or when its TTL runs out on the
// client's clock, counted from the send of its last successful
// keep-alive, without a renewal (for instance while the client cannot
// reach any server).
//
// The client renews a lease a third of its TTL after its last keep-alive,
// and every lease it keeps alive, for all callers, goes in one message
// (see the package comment). A renewal that finds the channel full is
// dropped: read it, or the application misses renewals, though the lease
// is renewed all the same. A keep-alive that fails with the connection is
// sent again as soon as the client has a new session, across reconnections
// and failovers. The first keep-alive of a lease the client does not keep
// yet is sent at once; until it succeeds, only the server can say the lease
// is gone. Two KeepAlive calls for one lease share its renewals: each
// channel receives each of them, and the lease is kept alive while either
// call's ctx lasts.
//
// The id 0 is an error wrapping ErrInvalidArgument, a closed client
// ErrClosed, and a ctx already ended its error.
func (c *Client) KeepAlive(ctx context.Context, id LeaseID) (<-chan KeepAliveResponse, error) {
	if err := id.check(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sub, err := c.keep(ctx, id, time.Time{}, 0, true)
	if err != nil {
		return nil, err
	}
	return sub.ch, nil
}

// keep subscribes to keep-alives of lease id, until ctx ends (never, if
// it cannot end) or endSub. If the client does not keep the lease yet and
// ttl is 0, its first keep-alive is due at once; otherwise it was granted
// or renewed for ttl by a request sent at sent, which sets its deadline.
// With renewals, the subscription gets a channel of them.
func (c *Client) keep(ctx context.Context, id LeaseID, sent time.Time, ttl time.Duration, renewals bool) (*keepAliveSub, error) {
	now := c.clock.Now()
	sub := &keepAliveSub{done: make(chan struct{})}
	if renewals {
		sub.ch = make(chan KeepAliveResponse, keepAliveBuffer)
	}
	c.kmu.Lock()
	if c.kclosed {
		c.kmu.Unlock()
		return nil, ErrClosed
	}
	kl := c.kept[id]
	if kl == nil {
		kl = &keptLease{id: id, next: now}
		c.kept[id] = kl
	}
	if ttl > 0 {
		kl.renewed(sent, ttl)
	}
	sub.lease = kl
	kl.subs = append(kl.subs, sub)
	if ctx.Done() != nil {
		sub.stop = context.AfterFunc(ctx, func() { c.endSub(sub) })
	}
	c.kmu.Unlock()
	c.wakeKeepAlives()
	return sub, nil
}

// wakeKeepAlives tells the keep-alive loop that a lease was added.
func (c *Client) wakeKeepAlives() {
	select {
	case c.kwake <- struct{}{}:
	default:
	}
}

// renewed records a grant or renewal for ttl by a request sent at sent.
// A later one recorded already stands. It must be called with Client.kmu
// held.
func (kl *keptLease) renewed(sent time.Time, ttl time.Duration) {
	if d := sent.Add(ttl); d.After(kl.deadline) {
		kl.ttl, kl.deadline, kl.next = ttl, d, sent.Add(ttl/3)
	}
}

// endSub ends a subscription: its channel and done are closed, and the
// lease is no longer kept alive if it was the last. It may be called more
// than once.
func (c *Client) endSub(sub *keepAliveSub) {
	c.kmu.Lock()
	defer c.kmu.Unlock()
	c.endSubLocked(sub)
}

// endSubLocked is endSub, with Client.kmu held.
func (c *Client) endSubLocked(sub *keepAliveSub) {
	if sub.ended {
		return
	}
	sub.ended = true
	if sub.stop != nil {
		sub.stop()
	}
	if sub.ch != nil {
		close(sub.ch)
	}
	close(sub.done)
	kl := sub.lease
	kl.subs = slices.DeleteFunc(kl.subs, func(s *keepAliveSub) bool { return s == sub })
	if len(kl.subs) == 0 && c.kept[kl.id] == kl {
		delete(c.kept, kl.id)
		// Its locks can no longer be vouched for (AcquireUnder).
		go c.loseBound(kl.id) // not under kmu: it takes wmu
	}
}

// loseKept ends every subscription to lease id, which is gone for the
// reason why.
func (c *Client) loseKept(id LeaseID, why string) {
	c.kmu.Lock()
	defer c.kmu.Unlock()
	if kl := c.kept[id]; kl != nil {
		c.loseLocked(kl, why)
	}
}

// loseLocked ends every subscription to kl. It must be called with
// Client.kmu held.
func (c *Client) loseLocked(kl *keptLease, why string) {
	c.log.Info("TTL lease lost", "lease", kl.id.String(), "why", why)
	for _, sub := range slices.Clone(kl.subs) {
		c.endSubLocked(sub)
	}
}

// renewedKept records a renewal of lease id, if the client keeps it
// alive, by a keep-alive sent at sent.
func (c *Client) renewedKept(id LeaseID, sent time.Time, ttl time.Duration) {
	c.kmu.Lock()
	defer c.kmu.Unlock()
	if kl := c.kept[id]; kl != nil {
		kl.renewed(sent, ttl)
	}
}

// endKept ends every subscription, and refuses new ones: the client is
// closed. Close calls it.
func (c *Client) endKept() {
	c.kmu.Lock()
	defer c.kmu.Unlock()
	c.kclosed = true
	for _, kl := range c.kept {
		for _, sub := range slices.Clone(kl.subs) {
			c.endSubLocked(sub)
		}
	}
}

// keepAlives is the keep-alive loop: it sends each lease's keep-alive when
// it falls due, with every lease due soon after, over the current session;
// retries a keep-alive that failed as soon as the client has a session
// again (or, on a live one, after a short backoff); and reports leases
// lost. It ends at Close.
func (c *Client) keepAlives() {
	defer c.wg.Done()
	var delay time.Duration // the backoff after a failed keep-alive; 0 after a success
	var retryAt time.Time
	for {
		c.ncmu.Lock()
		changed := c.newConn
		c.ncmu.Unlock()
		now := c.clock.Now()
		due, wake := c.keepAlivesDue(now)
		cn := c.cur.Load()
		if len(due) > 0 && cn != nil {
			if !now.Before(retryAt) {
				if c.sendKeepAlives(cn, due) {
					delay, retryAt = 0, time.Time{}
				} else {
					delay = min(max(2*delay, keepAliveRetryMin), keepAliveRetryMax)
					retryAt = c.clock.Now().Add(delay)
				}
				continue
			}
			if wake.IsZero() || retryAt.Before(wake) {
				wake = retryAt
			}
		}
		var timer <-chan time.Time
		var t clock.Timer
		if !wake.IsZero() {
			ct := c.clock.NewTimer(wake.Sub(now))
			timer, t = ct.Chan(), ct
		}
		select {
		case <-c.ctx.Done():
		case <-c.kwake:
		case <-changed:
			retryAt = time.Time{} // a new session: retry at once
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if c.ctx.Err() != nil {
			return
		}
	}
}

// keepAlivesDue ends the leases whose TTL has run out at now, and returns
// the leases whose keep-alives are to be sent now and when the loop must
// wake next (zero: only when woken): for the next lease due, or the next
// deadline. When a lease is due, every lease due within a sixth of its own
// TTL goes with it.
func (c *Client) keepAlivesDue(now time.Time) (due []LeaseID, wake time.Time) {
	c.kmu.Lock()
	defer c.kmu.Unlock()
	earliest := func(t time.Time) {
		if !t.IsZero() && (wake.IsZero() || t.Before(wake)) {
			wake = t
		}
	}
	var first time.Time // the earliest keep-alive due
	for _, kl := range c.kept {
		if !kl.deadline.IsZero() && !now.Before(kl.deadline) {
			c.loseLocked(kl, fmt.Sprintf("its TTL of %v ran out without a renewal", kl.ttl))
			continue
		}
		if first.IsZero() || kl.next.Before(first) {
			first = kl.next
		}
	}
	if first.IsZero() {
		return nil, time.Time{}
	}
	if first.After(now) {
		earliest(first)
		for _, kl := range c.kept {
			earliest(kl.deadline)
		}
		return nil, wake
	}
	for _, kl := range c.kept {
		if !kl.next.After(now.Add(kl.ttl / 6)) {
			due = append(due, kl.id)
		} else {
			earliest(kl.next)
		}
		earliest(kl.deadline)
	}
	slices.Sort(due)
	return due, wake
}

// sendKeepAlives renews the leases due over cn, and reports whether every
// one of them got an answer: renewed, or not found (lost).
func (c *Client) sendKeepAlives(cn *conn, due []LeaseID) bool {
	ctx, cancel := context.WithTimeout(c.ctx, c.keepAliveAttempt(due))
	defer cancel()
	type call struct {
		batch []LeaseID
		sent  time.Time
		id    uint64
		ch    chan protocol.Message
	}
	var calls []call
	for batch := range slices.Chunk(due, maxKeepAliveLeases) {
		ids := make([]uint64, len(batch))
		for i, id := range batch {
			ids[i] = uint64(id)
		}
		sent := c.clock.Now()
		id, ch, err := cn.start(&protocol.LeaseKeepAlive{Leases: ids})
		if err != nil {
			c.log.Debug("keep-alive not sent", "leases", len(batch), "err", err)
			return false
		}
		calls = append(calls, call{batch, sent, id, ch})
	}
	ok := true
	for _, cl := range calls {
		m, err := cn.await(ctx, cl.id, cl.ch)
		if err != nil {
			c.log.Debug("keep-alive failed", "leases", len(cl.batch), "err", err)
			ok = false
			continue
		}
		r, isReply := m.(*protocol.LeaseKeepAliveReply)
		if !isReply {
			if e, isErr := m.(*protocol.Error); isErr && e.Code == protocol.CodeNotLeader {
				// The next leader has the leases; the next session is
				// with it.
				cn.fail(fmt.Errorf("%w: %s", ErrUnavailable, e.Message))
			}
			c.log.Warn("keep-alive refused", "leases", len(cl.batch), "err", unexpected(m))
			ok = false
			continue
		}
		if !c.keepAliveAnswered(cl.batch, cl.sent, r) {
			ok = false
		}
	}
	return ok
}

// keepAliveAttempt is how long the loop waits for the replies to a
// keep-alive of due: a third of the shortest TTL among them, when it is
// known, so that a server that does not answer leaves time to try again;
// otherwise the idle timeout, within which a server that is gone is
// noticed.
func (c *Client) keepAliveAttempt(due []LeaseID) time.Duration {
	c.kmu.Lock()
	defer c.kmu.Unlock()
	d := c.cfg.IdleTimeout
	for _, id := range due {
		if kl := c.kept[id]; kl != nil && kl.ttl > 0 {
			d = min(d, kl.ttl/3)
		}
	}
	return max(d, keepAliveAttemptMin)
}

// keepAliveAnswered records the reply r to a keep-alive of batch sent at
// sent: renewals go to the subscribers, and leases the server does not
// know, or that this client may not keep alive, are lost. It reports
// false if r leaves a lease of batch out.
func (c *Client) keepAliveAnswered(batch []LeaseID, sent time.Time, r *protocol.LeaseKeepAliveReply) bool {
	c.kmu.Lock()
	defer c.kmu.Unlock()
	answered := make(map[LeaseID]bool, len(batch))
	for _, l := range r.Renewed {
		id := LeaseID(l.Lease)
		answered[id] = true
		kl := c.kept[id]
		if kl == nil {
			continue // no longer kept alive
		}
		if l.TTL <= 0 {
			c.loseLocked(kl, fmt.Sprintf("renewed with TTL %v", l.TTL))
			continue
		}
		kl.renewed(sent, l.TTL)
		for _, sub := range kl.subs {
			if sub.ch == nil {
				continue
			}
			select {
			case sub.ch <- KeepAliveResponse{ID: id, TTL: l.TTL}:
			default:
				c.log.Debug("keep-alive response dropped: its channel is full", "lease", id.String())
			}
		}
	}
	for _, u := range r.Unknown {
		id := LeaseID(u)
		answered[id] = true
		if kl := c.kept[id]; kl != nil {
			why := "not found: revoked, or expired"
			if slices.Contains(r.Denied, u) {
				why = "permission denied: " + c.who() + " may not keep it alive"
			}
			c.loseLocked(kl, why)
		}
	}
	for _, id := range batch {
		if !answered[id] {
			c.log.Warn("keep-alive reply leaves a lease out", "lease", id.String())
			return false
		}
	}
	return true
}
