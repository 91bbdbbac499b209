package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/leased/leased/protocol"
)

// WriteLease is an exclusive write lease on one key. While it is held, no
// other client caches the key or writes it without first recalling the
// lease. Writes made through it carry its fencing token; the server refuses
// them with ErrFenced once the lease is gone, so a holder that was paused
// past its lease cannot overwrite newer data.
//
// A WriteLease is safe for concurrent use. The client renews it in the
// background, on its next session too if it loses its connection (the
// server gives that session its leases, DESIGN §6); it is lost when the
// server recalls it or when it is not renewed by its deadline.
type WriteLease struct {
	c     *Client
	key   string
	token uint64
	term  time.Duration
	lease LeaseID // the TTL lease it is bound to (AcquireUnder); 0: none
	// under is the TTL lease a lock acquired elsewhere was resumed by
	// (ResumeLock): its writes and release name it, so that the server
	// lets this client use the lock; 0: none.
	under LeaseID

	mu       sync.Mutex // guards deadline, lost and writes; after Client.wmu, a leaf
	deadline time.Time
	lost     bool
	writes   sync.WaitGroup // writes in flight under the lease
	done     chan struct{}  // closed when the lease is lost or released
}

// AcquireWriteLease acquires the write lease on key. It waits until every
// read lease on the key has been dropped or has run out, and until another
// holder of the write lease has released it or its lease has run out,
// recalling it; opts change that (AcquireWait, AcquireTry), or bind the
// lease to a TTL lease (AcquireUnder).
func (c *Client) AcquireWriteLease(ctx context.Context, key string, opts ...AcquireOption) (*WriteLease, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if isLockRecord(key) {
		return nil, fmt.Errorf("%w: %q is a lock's record, which is read-only", ErrInvalidArgument, key)
	}
	var o acquireOptions
	for _, opt := range opts {
		opt(&o)
	}
	cn, err := c.conn()
	if err != nil {
		return nil, err
	}
	if o.delay != 0 && o.lease == 0 {
		return nil, fmt.Errorf("%w: a lock delay needs a TTL lease (AcquireUnder): it starts when the lease expires", ErrInvalidArgument)
	}
	req := &protocol.Acquire{Key: []byte(key), Mode: o.mode, Lease: uint64(o.lease), LockDelay: o.delay}
	if dl, ok := ctx.Deadline(); ok {
		if req.Timeout = time.Until(dl); req.Timeout <= 0 {
			return nil, fmt.Errorf("%w: %w", ErrCanceled, context.DeadlineExceeded)
		}
	}
	c.wmu.Lock()
	c.acquiring[key]++
	c.wmu.Unlock()
	var (
		f    *fetch
		sent time.Time
		m    protocol.Message
		lost bool // the last session was lost with the acquisition on it
	)
	for {
		var id uint64
		var ch chan protocol.Message
		f, sent, id, ch, err = c.send(cn, key, req, true)
		if err == nil {
			m, lost, err = cn.awaitWrite(ctx, id, ch)
		} else {
			select {
			case <-cn.done:
				lost = true // the session was lost before it was sent
			default:
			}
		}
		if !lost || ctx.Err() != nil {
			break
		}
		// The session was lost while the acquisition waited: ask again on
		// the next one, which the server gives the lost one's leases,
		// and where a waiting acquisition keeps its place in line (DESIGN
		// §5.1). A grant the lost session got is this client's: the
		// next asks again for its own lease, and gets a new token.
		next, cerr := c.nextConn(ctx, cn, c.clock.Now().Add(c.retryWindow()/2))
		if cerr != nil {
			break
		}
		c.endFetch(key, f)
		cn, req.ID = next, 0
		if dl, ok := ctx.Deadline(); ok {
			if req.Timeout = time.Until(dl); req.Timeout <= 0 {
				break
			}
		}
	}
	r, ok := m.(*protocol.AcquireReply)
	if err == nil && !ok {
		err = unexpected(m)
	}
	c.wmu.Lock()
	if c.acquiring[key]--; c.acquiring[key] == 0 {
		delete(c.acquiring, key)
	}
	if err != nil {
		// A grant this client never learned of (its answer was lost)
		// may have been recalled already: give it up, so that the writer
		// waiting for it need not wait it out.
		token, recalled := c.earlyRecalls[key]
		alone := c.acquiring[key] == 0
		release := recalled && alone
		if release {
			delete(c.earlyRecalls, key)
		}
		c.wmu.Unlock()
		c.endFetch(key, f)
		if release {
			c.releaseUnknown(key, token)
		}
		if lost && o.lease != 0 && alone {
			// A lock its lost session may have been granted is never
			// recalled, and the client's next session holds it: give it
			// up, as nobody here will.
			c.releaseBoundUnknown(key, o.lease)
			if ctx.Err() != nil {
				err = fmt.Errorf("%w: %w; a lock the lost session may have been granted is being released", ErrCanceled, err)
			}
		}
		return nil, err
	}
	wl := &WriteLease{c: c, key: key, token: r.Token, term: r.Term, lease: o.lease, deadline: sent.Add(r.Term), done: make(chan struct{})}
	if o.lease != 0 {
		wl.deadline = never // it lives as long as its TTL lease (Valid)
	}
	if old := c.wleases[key]; old != nil {
		old.markLost()
	}
	c.wleases[key] = wl
	recalled := c.earlyRecalls[key] == wl.token
	delete(c.earlyRecalls, key)
	c.wmu.Unlock()
	// Nobody else may read the key from cache or change it while the lease
	// lasts, so the holder caches the value under the write lease itself.
	c.fill(key, f, r.Value, r.Version, r.Found, sent.Add(r.Term), r.Term, c.monoNow())
	if recalled {
		// The recall overtook this reply on its own stream.
		c.recall(key, wl.token)
	}
	return wl, nil
}

// Key returns the key the lease covers.
func (wl *WriteLease) Key() string { return wl.key }

// Token returns the lease's fencing token. Tokens grow with every grant,
// across server restarts.
func (wl *WriteLease) Token() uint64 { return wl.token }

// Term returns the lease's term as granted; the client renews it in the
// background. A lease bound to a TTL lease (AcquireUnder) has none: 0.
func (wl *WriteLease) Term() time.Duration { return wl.term }

// Lease returns the TTL lease the write lease is bound to (AcquireUnder),
// 0 if none.
func (wl *WriteLease) Lease() LeaseID { return wl.lease }

// Done returns a channel that is closed when the lease is released,
// recalled or lost.
func (wl *WriteLease) Done() <-chan struct{} { return wl.done }

// Valid reports whether the lease is held and has not run out on the
// client's clock. A suspend of the machine, which that clock does not
// count, loses every lease the client holds (DESIGN §8): Valid checks for
// one first. A lease bound to a TTL lease (AcquireUnder) is valid while
// this client keeps that lease alive (NewSession, KeepAlive), until a
// tenth of its TTL before it could run out: the send of its last answered
// keep-alive plus its TTL.
func (wl *WriteLease) Valid() bool {
	now := wl.c.checkedNow()
	if wl.lease != 0 {
		if d, ok := wl.c.keptDeadline(wl.lease); !ok || !now.Before(d) {
			return false
		}
	}
	wl.mu.Lock()
	defer wl.mu.Unlock()
	return !wl.lost && now.Before(wl.deadline)
}

// beginWrite registers a write under the lease, unless it is lost.
func (wl *WriteLease) beginWrite() bool {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	if wl.lost {
		return false
	}
	wl.writes.Add(1)
	return true
}

// Put writes value under the lease and returns the committed version. It
// returns ErrFenced if the lease is no longer held.
func (wl *WriteLease) Put(ctx context.Context, value []byte, opts ...WriteOption) (uint64, error) {
	v, _, err := wl.write(ctx, protocol.OpPut, value, opts)
	return v, err
}

// Delete deletes the key under the lease, and says whether it was there
// (DeleteResult). It returns ErrFenced if the lease is no longer held.
func (wl *WriteLease) Delete(ctx context.Context, opts ...WriteOption) (DeleteResult, error) {
	return deleteResult(wl.write(ctx, protocol.OpDelete, nil, opts))
}

func (wl *WriteLease) write(ctx context.Context, op protocol.WriteOp, value []byte, opts []WriteOption) (uint64, bool, error) {
	// A write after the lease was lost still goes to the server, which
	// refuses it with ErrFenced: the token, not the client's view, decides.
	if wl.beginWrite() {
		defer wl.writes.Done()
	}
	// Made while the client is disconnected, the write waits for the next
	// session only while the lease may live on the server.
	until := wl.until()
	opts = append(opts[:len(opts):len(opts)], func(o *writeOptions) { o.leaseUntil, o.under = until, wl.under })
	return wl.c.write(ctx, op, wl.key, value, 0, wl.token, opts)
}

// until returns when the lease could have run out on the server, on the
// client's clock: its deadline, plus ε of the last session if the client
// had one.
func (wl *WriteLease) until() time.Time {
	wl.mu.Lock()
	until := wl.deadline
	wl.mu.Unlock()
	if h := wl.c.lastHello.Load(); h != nil {
		until = until.Add(h.Epsilon)
	}
	return until
}

// Release gives the lease up after the writes in flight under it finish.
// Releasing a lease that is already lost returns nil.
func (wl *WriteLease) Release(ctx context.Context) error {
	if !wl.markLost() {
		return nil
	}
	return wl.relinquish(ctx)
}

// markLost stops new writes from counting as in flight, and reports
// whether the lease was still held.
func (wl *WriteLease) markLost() bool {
	wl.mu.Lock()
	defer wl.mu.Unlock()
	if wl.lost {
		return false
	}
	wl.lost = true
	close(wl.done)
	return true
}

// relinquish waits for writes in flight, drops the cached entry, and tells
// the server.
func (wl *WriteLease) relinquish(ctx context.Context) error {
	c := wl.c
	wl.writes.Wait()
	c.wmu.Lock()
	if c.wleases[wl.key] == wl {
		delete(c.wleases, wl.key)
	}
	c.wmu.Unlock()
	// A recall may come on a new session before the client has installed
	// it: wait for it, no longer than the lease could live.
	cn, err := c.awaitConn(ctx, wl.until())
	// Under smu, so that a read begun after the entry is dropped reaches
	// the server after the release, and gets a lease of its own.
	c.smu.Lock()
	c.imu.Lock()
	if f := c.fetches[wl.key]; f != nil {
		f.poisoned = true
		delete(c.fetches, wl.key)
	}
	c.cache.Remove(wl.key)
	c.imu.Unlock()
	var id uint64
	var ch chan protocol.Message
	if err == nil {
		id, ch, err = cn.start(&protocol.ReleaseWrite{Key: []byte(wl.key), Token: wl.token, Under: uint64(wl.under)})
	}
	c.smu.Unlock()
	if err != nil {
		return err
	}
	m, err := cn.await(ctx, id, ch)
	if err != nil {
		return err
	}
	if _, ok := m.(*protocol.OK); !ok {
		return unexpected(m)
	}
	return nil
}

// extend moves the lease's deadline after a renewal, unless the lease ran
// out before the renewal's reply came at now.
func (wl *WriteLease) extend(now, deadline time.Time) {
	wl.mu.Lock()
	if now.Before(wl.deadline) && deadline.After(wl.deadline) {
		wl.deadline = deadline
	}
	wl.mu.Unlock()
}

// recall handles the server's recall of the write lease on key: the holder
// finishes its writes in flight and releases. The notice reader calls it;
// the work happens on a goroutine of its own so other notices are not held
// up.
//
// A recall can overtake the reply that grants the lease, since the two come
// on different streams: a recall of a token newer than any lease held on the
// key is kept until AcquireWriteLease registers that lease.
func (c *Client) recall(key string, token uint64) {
	c.wmu.Lock()
	wl := c.wleases[key]
	if wl == nil || wl.token != token {
		newer := wl == nil || wl.token < token
		waiting := c.acquiring[key] > 0
		if newer && waiting {
			c.earlyRecalls[key] = token
		}
		c.wmu.Unlock()
		if newer && !waiting {
			// No acquisition of the key is in flight: the grant's answer
			// was lost. Give the lease up rather than let it run out.
			c.releaseUnknown(key, token)
		}
		return
	}
	c.wmu.Unlock()
	if !wl.markLost() {
		return
	}
	c.emit(Event{Kind: EventWriteLeaseLost, Keys: []string{key}})
	c.background(func(ctx context.Context) {
		if err := wl.relinquish(ctx); err != nil {
			c.log.Debug("release after recall failed", "key", key, "err", err)
		}
	})
}

// releaseUnknown relinquishes, in the background, a write lease this client
// was granted but never learned of.
func (c *Client) releaseUnknown(key string, token uint64) {
	cn, err := c.conn()
	if err != nil {
		return
	}
	c.background(func(ctx context.Context) {
		if _, err := cn.call(ctx, &protocol.ReleaseWrite{Key: []byte(key), Token: token}); err != nil {
			c.log.Debug("release of an unknown write lease failed", "key", key, "err", err)
		}
	})
}

// releaseBoundUnknown relinquishes, in the background, the lock on key if
// it is held under TTL lease id, which this client acquired with it: an
// acquisition whose session was lost, and that the client gave up, may
// have been granted there.
func (c *Client) releaseBoundUnknown(key string, id LeaseID) {
	c.background(func(ctx context.Context) {
		r, err := c.fetchLock(ctx, key)
		if err != nil || !r.Held || r.Lease != id {
			return
		}
		c.wmu.Lock()
		mine := c.wleases[key] != nil && c.wleases[key].token == r.Token
		c.wmu.Unlock()
		if mine {
			return // another acquisition of this client got it since
		}
		wl, err := c.ResumeLock(key, r.Token, id)
		if err == nil {
			err = wl.Release(ctx)
		}
		if err != nil {
			c.log.Debug("release of a lock a lost session may have been granted failed", "key", key, "err", err)
		}
	})
}

// background runs f on a goroutine that Close waits for, with a context
// that ends at Close or after 10 s. Once the client is closed it does
// nothing: Close relinquishes every lease itself.
func (c *Client) background(f func(ctx context.Context)) {
	c.imu.Lock()
	if c.closed {
		c.imu.Unlock()
		return
	}
	c.wg.Add(1) // under imu, before closed is set: never concurrent with Close's Wait
	c.imu.Unlock()
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		defer cancel()
		f(ctx)
	}()
}

// writeLeasesDue returns the held write leases that run out before horizon.
func (c *Client) writeLeasesDue(horizon time.Time) []*WriteLease {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var due []*WriteLease
	for _, wl := range c.wleases {
		wl.mu.Lock()
		if !wl.lost && wl.deadline.Before(horizon) {
			due = append(due, wl)
		}
		wl.mu.Unlock()
	}
	return due
}

// sessionLost is called when the session is lost. The write leases stay
// held until their deadlines: the server keeps them, and gives them to
// the client's next session (DESIGN §6), which renews them and hears
// their recalls, those sent meanwhile included. A lease not renewed by
// its deadline is lost then (expireWriteLeases). Recalls that came before
// their grant are forgotten: their acquisitions fail with the session,
// and a recall of such a grant comes again on the next session.
func (c *Client) sessionLost() {
	c.wmu.Lock()
	clear(c.earlyRecalls)
	c.wmu.Unlock()
}

// expireWriteLeases marks lost, and forgets, the write leases whose
// deadline is not after now: they were not renewed in time (the client
// was disconnected, or the server renewed them no more). The
// maintenance loop calls it.
func (c *Client) expireWriteLeases(now time.Time) {
	c.wmu.Lock()
	var gone []*WriteLease
	for key, wl := range c.wleases {
		wl.mu.Lock()
		out := !now.Before(wl.deadline)
		wl.mu.Unlock()
		if out {
			delete(c.wleases, key)
			gone = append(gone, wl)
		}
	}
	c.wmu.Unlock()
	for _, wl := range gone {
		if wl.markLost() {
			c.emit(Event{Kind: EventWriteLeaseLost, Keys: []string{wl.key}})
		}
	}
}

// loseWriteLeases treats every write lease as lost after the machine
// slept longer than the suspend slack: their deadlines, on the monotonic
// clock, do not count the time slept, and the server may have let them run
// out and granted the key to another client meanwhile. Each is reported
// lost and relinquished in the background, after its writes in flight
// (which the server fences if the lease is gone). The suspend watch calls
// it, through dropAfterSuspend.
func (c *Client) loseWriteLeases() {
	c.wmu.Lock()
	wls := make([]*WriteLease, 0, len(c.wleases))
	for _, wl := range c.wleases {
		wls = append(wls, wl)
	}
	c.wmu.Unlock()
	for _, wl := range wls {
		if !wl.markLost() {
			continue
		}
		c.emit(Event{Kind: EventWriteLeaseLost, Keys: []string{wl.key}})
		c.background(func(ctx context.Context) {
			if err := wl.relinquish(ctx); err != nil {
				c.log.Debug("release after a suspend failed", "key", wl.key, "err", err)
			}
		})
	}
}

// dropWriteLeases forgets every write lease when the client closes.
func (c *Client) dropWriteLeases() {
	c.wmu.Lock()
	wls := c.wleases
	c.wleases = make(map[string]*WriteLease)
	clear(c.earlyRecalls)
	c.wmu.Unlock()
	for key, wl := range wls {
		if wl.markLost() {
			c.emit(Event{Kind: EventWriteLeaseLost, Keys: []string{key}})
		}
	}
}
