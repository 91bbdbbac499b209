package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Mutex is a distributed lock on one key that lives as long as a Session's
// TTL lease, with a fencing token (DESIGN §5.1), after etcd's
// concurrency.Mutex. Lock waits in line, first in first out; the lock is
// never recalled: it ends when Unlock releases it, or when the session's
// lease is revoked or runs out (its holder died, or was cut off longer
// than its TTL). Its Token grows with every grant: give it to the
// resources the lock guards, which check it (WithGuard, CheckToken), so
// that a holder that was paused past its lease cannot act on them.
//
// A Mutex is safe for concurrent use; one Mutex holds the lock at most
// once at a time.
type Mutex struct {
	s    *Session
	key  string
	opts []AcquireOption

	mu  sync.Mutex // guards wl and ctx
	wl  *WriteLease
	ctx *lockContext
}

// NewMutex returns a Mutex on key under session s. Of opts, only
// AcquireLockDelay applies: the Mutex chooses the mode and the TTL lease.
func NewMutex(s *Session, key string, opts ...AcquireOption) *Mutex {
	return &Mutex{s: s, key: key, opts: opts}
}

// Key returns the key the Mutex locks.
func (m *Mutex) Key() string { return m.key }

// ErrLockHeld: Lock or TryLock of a Mutex that holds its lock already.
var ErrLockHeld = errors.New("leased: the mutex holds its lock already")

// Lock acquires the lock, waiting in line behind its holder and those who
// asked before, until ctx ends (ErrCanceled: the acquisition is abandoned
// and nothing was granted).
func (m *Mutex) Lock(ctx context.Context) error { return m.lock(ctx, AcquireWait()) }

// TryLock acquires the lock if nobody holds it nor waits for it, and
// fails at once with ErrLocked otherwise.
func (m *Mutex) TryLock(ctx context.Context) error { return m.lock(ctx, AcquireTry()) }

func (m *Mutex) lock(ctx context.Context, mode AcquireOption) error {
	m.mu.Lock()
	held := m.wl != nil && m.ctx.Err() == nil
	m.mu.Unlock()
	if held {
		return fmt.Errorf("%w: %q", ErrLockHeld, m.key)
	}
	if isDone(m.s.Done()) {
		return fmt.Errorf("%w: lock %q", ErrSessionDone, m.key)
	}
	// The acquisition ends with the session: a lock under a lease that
	// is gone cannot be granted.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-m.s.Done():
			cancel()
		case <-actx.Done():
		}
	}()
	opts := append(append([]AcquireOption{}, m.opts...), mode, AcquireUnder(m.s.Lease()))
	wl, err := m.s.c.AcquireWriteLease(actx, m.key, opts...)
	if err != nil {
		if ctx.Err() == nil && isDone(m.s.Done()) {
			return fmt.Errorf("%w: lock %q: %w", ErrSessionDone, m.key, err)
		}
		return err
	}
	m.mu.Lock()
	m.wl = wl
	m.ctx = newLockContext(m.s.c, m.s.Lease(), m.s.Done(), wl)
	m.mu.Unlock()
	return nil
}

// Unlock releases the lock, after the writes in flight under it. Unlock of
// a Mutex that does not hold it returns nil.
func (m *Mutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	wl, lc := m.wl, m.ctx
	m.wl, m.ctx = nil, nil
	m.mu.Unlock()
	if wl == nil {
		return nil
	}
	lc.end(context.Canceled)
	return wl.Release(ctx)
}

// Token returns the fencing token of the lock held, 0 if none.
func (m *Mutex) Token() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.wl == nil {
		return 0
	}
	return m.wl.Token()
}

// WriteLease returns the write lease that is the lock, nil if it is not
// held: its holder writes the key under it.
func (m *Mutex) WriteLease() *WriteLease {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.wl
}

// Context returns a context that is cancelled when the lock is lost, or
// released, and at its local safe deadline: a tenth of the session's TTL
// before its lease could run out on the client's clock (the send of its
// last answered keep-alive plus its TTL), since the server may end the
// lease, and grant the lock to another, from then on. Its Err checks the
// clock itself, so a holder that was paused past the deadline finds it
// cancelled as soon as it asks. Work done under the lock should stop when
// it is; it is a context that has ended already if the lock is not held.
func (m *Mutex) Context() context.Context {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx == nil {
		lc := &lockContext{done: make(chan struct{})}
		lc.end(context.Canceled)
		return lc
	}
	return m.ctx
}

// lockContext is the context of a held lock (Mutex.Context): lock wl,
// bound to TTL lease lease, which client c keeps alive until sdone is
// closed (a Session's Done; nil: never).
type lockContext struct {
	c     *Client
	lease LeaseID
	sdone <-chan struct{}
	wl    *WriteLease
	done  chan struct{}
	stop  chan struct{} // closed by end: the watcher returns

	mu  sync.Mutex
	err error
}

func newLockContext(c *Client, lease LeaseID, sdone <-chan struct{}, wl *WriteLease) *lockContext {
	lc := &lockContext{c: c, lease: lease, sdone: sdone, wl: wl, done: make(chan struct{}), stop: make(chan struct{})}
	go lc.watch()
	return lc
}

// watch ends lc when the lock is lost, the session ends, or the safe
// deadline passes.
func (lc *lockContext) watch() {
	c := lc.c
	for {
		d, ok := c.keptDeadline(lc.lease)
		if !ok {
			lc.end(context.Canceled)
			return
		}
		wait := d.Sub(c.clock.Now())
		if wait <= 0 {
			lc.end(context.DeadlineExceeded)
			return
		}
		t := c.clock.NewTimer(wait)
		select {
		case <-t.Chan():
		case <-lc.wl.Done():
			t.Stop()
			lc.end(context.Canceled)
			return
		case <-lc.sdone:
			t.Stop()
			lc.end(context.Canceled)
			return
		case <-lc.stop:
			t.Stop()
			return
		}
	}
}

// end ends lc with err, once.
func (lc *lockContext) end(err error) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.err != nil {
		return
	}
	lc.err = err
	close(lc.done)
	if lc.stop != nil {
		close(lc.stop)
	}
}

// Deadline returns the lock's local safe deadline, as the client knows it
// now: a renewal of the session moves it later.
func (lc *lockContext) Deadline() (time.Time, bool) {
	if lc.c == nil {
		return time.Time{}, false
	}
	return lc.c.keptDeadline(lc.lease)
}

// Done returns a channel closed when the lock is lost.
func (lc *lockContext) Done() <-chan struct{} { return lc.done }

// Err returns context.Canceled once the lock is lost or released, and
// context.DeadlineExceeded once its safe deadline has passed, which it
// checks on the clock itself.
func (lc *lockContext) Err() error {
	if c := lc.c; c != nil {
		if d, ok := c.keptDeadline(lc.lease); !ok || !c.checkedNow().Before(d) || !lc.wl.Valid() {
			lc.end(context.DeadlineExceeded)
		}
	}
	lc.mu.Lock()
	defer lc.mu.Unlock()
	return lc.err
}

// Value returns nil: a lock's context carries no values.
func (lc *lockContext) Value(any) any { return nil }
