package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leased/leased/protocol"
)

// WriteResult describes a committed write, as the server reported it.
type WriteResult struct {
	Version uint64
	// Waited is how long the server held the write before it could commit:
	// for its turn on the key, and for holders to drop their leases or for
	// those leases to run out. The commit itself (the disk write) is not
	// counted.
	Waited time.Duration
	// Holders is how many read leases the write invalidated, plus one if it
	// recalled a write lease.
	Holders int
	// Term is the term of the read lease the write gave the writer on the
	// key's new value: the key's term, or 0 if it is not cached.
	Term time.Duration
	// Replayed says that the write was sent again after its connection
	// was lost (a failover), and had committed before: Version is that
	// commit's, and the writer got no lease (Term 0).
	Replayed bool
}

// WriteOption modifies a write.
type WriteOption func(*writeOptions)

type writeOptions struct {
	result *WriteResult
	// leaseUntil, if not zero, is when the write lease the write is made
	// under could have run out on the server, on the client's clock: a
	// write begun while disconnected waits for the next session until
	// then at most. WriteLease sets it.
	leaseUntil time.Time
	// lease is the TTL lease to attach the key to, if withLease is set
	// (WithLease).
	lease     LeaseID
	withLease bool
	// guard is the lock the write commits under (WithGuard), or nil.
	guard *protocol.Guard
	// under is the TTL lease of a resumed lock the write is made under
	// (WriteLease.under); 0: none.
	under LeaseID
}

// WithGuard makes a write commit only if the write lease on lock is held
// with token when it commits (a lock's Token, Mutex.Token): once the lock
// has ended, or was granted again since, the write fails with ErrFenced and
// changes nothing. It fences a key that the lock's holder does not hold,
// as a lock fences the resource it guards (DESIGN §5.1). In a
// transaction, the guard of its ops' options does not apply: give the
// transaction's (Txn.Guard).
func WithGuard(lock string, token uint64) WriteOption {
	return func(o *writeOptions) { o.guard = &protocol.Guard{Key: []byte(lock), Token: token} }
}

// checkGuard checks a write's guard.
func (o *writeOptions) checkGuard() error {
	if o.guard == nil {
		return nil
	}
	if err := checkKey(string(o.guard.Key)); err != nil {
		return fmt.Errorf("guard: %w", err)
	}
	if o.guard.Token == 0 {
		return fmt.Errorf("%w: guard with token 0, which no lock is held with", ErrInvalidArgument)
	}
	return nil
}

// Result makes a write fill r with the server's report when it commits.
func Result(r *WriteResult) WriteOption {
	return func(o *writeOptions) { o.result = r }
}

// Put sets key to value and returns the version it committed. It returns
// after every other holder of a lease on key has dropped it or its lease
// has run out. With WithLease it attaches key to a TTL lease; without, it
// detaches key from any.
func (c *Client) Put(ctx context.Context, key string, value []byte, opts ...WriteOption) (uint64, error) {
	v, _, err := c.write(ctx, protocol.OpPut, key, value, 0, 0, opts)
	return v, err
}

// DeleteResult is what a delete did.
type DeleteResult struct {
	// Deleted is how many keys the delete removed (etcd's deleted): 1, or
	// 0 if the key did not exist, or was deleted already. A delete that
	// removes nothing changes nothing and spends no revision.
	Deleted int
	// Version is the version of the deletion; for a delete that removed
	// nothing, the key's current version: that of its last deletion, or
	// 0 if it never existed or that deletion's record was collected.
	Version uint64
}

// Delete removes key, and says whether it was there (DeleteResult). Like
// Put, it returns after every other holder of a lease on key has dropped it
// or its lease has run out, whether or not the key exists.
func (c *Client) Delete(ctx context.Context, key string, opts ...WriteOption) (DeleteResult, error) {
	return deleteResult(c.write(ctx, protocol.OpDelete, key, nil, 0, 0, opts))
}

// deleteResult makes the DeleteResult of a delete's write.
func deleteResult(version uint64, unchanged bool, err error) (DeleteResult, error) {
	if err != nil {
		return DeleteResult{}, err
	}
	r := DeleteResult{Version: version, Deleted: 1}
	if unchanged {
		r.Deleted = 0
	}
	return r, nil
}

// CompareAndSwap sets key to value if its version is still oldVersion (0:
// the key does not exist), and returns the new version. Otherwise it
// returns ErrVersionMismatch and changes nothing. Like Put, it attaches key
// to the TTL lease of WithLease, or detaches it from any.
func (c *Client) CompareAndSwap(ctx context.Context, key string, oldVersion uint64, value []byte, opts ...WriteOption) (uint64, error) {
	v, _, err := c.write(ctx, protocol.OpCAS, key, value, oldVersion, 0, opts)
	return v, err
}

// write performs a write. The client's own cached entry is dropped before
// the request is sent, so that no goroutine of this client reads the old
// value after another client could have read the new one; the committed
// value is cached afterwards under the fresh lease the reply carries.
//
// While the client is disconnected, the write waits for it to reconnect,
// within ctx. A write whose connection is lost before its reply is sent
// again on the next session, with the same request ID, so the server
// applies it once (protocol.Hello.ClientID). Both waits last at most half
// the server's retry window, which bounds a wait with a context that
// never ends.
//
// A write under a write lease (token not 0) is never sent twice: if its
// connection is lost before the reply, it fails and its outcome is
// unknown. One begun while the client is disconnected waits for the next
// session while the lease may still live on the server, which keeps it
// about its term past its last renewal: until the lease's deadline plus ε
// on the client's clock (writeOptions.leaseUntil), if that comes before
// the retry bound. (A restarted server keeps it until the restart's
// horizon, which may be later; the client does not know it.) The server
// then decides by the token: the write commits if the lease is still the
// live one, and fails with ErrFenced otherwise.
//
// If ctx ends before the write commits, the write is abandoned and the
// error wraps ErrCanceled; if the server cannot say, the error wraps
// ErrUnavailable and the outcome is unknown. A write that was never sent
// changed nothing, and its error says so.
func (c *Client) write(ctx context.Context, op protocol.WriteOp, key string, value []byte, expect, token uint64, opts []WriteOption) (version uint64, unchanged bool, err error) {
	if err := checkKey(key); err != nil {
		return 0, false, err
	}
	var o writeOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.checkLease(op); err != nil {
		return 0, false, err
	}
	if err := o.checkGuard(); err != nil {
		return 0, false, err
	}
	value = append([]byte(nil), value...)
	req := &protocol.Write{Op: op, Key: []byte(key), Value: value, Expect: expect, Token: token, Lease: uint64(o.lease), Guard: o.guard, Under: uint64(o.under)}
	check := func(h *protocol.HelloReply) error {
		if max := h.MaxValueSize; max > 0 && len(value) > max {
			return fmt.Errorf("%w: value of %d bytes, limit %d", ErrTooLarge, len(value), max)
		}
		return nil
	}
	stamp := func(id uint64, timeout time.Duration, acked uint64) {
		req.ID, req.Timeout, req.Acked = id, timeout, acked
	}
	m, fs, sent, err := c.change(ctx, []string{key}, token != 0, o.leaseUntil, req, check, stamp)
	if err != nil {
		return 0, false, err
	}
	r, ok := m.(*protocol.WriteReply)
	if !ok {
		c.endFetch(key, fs[0])
		return 0, false, unexpected(m)
	}
	c.fill(key, fs[0], value, r.Version, op != protocol.OpDelete, sent.Add(r.Term), r.Term, c.monoNow())
	if o.result != nil {
		*o.result = WriteResult{Version: r.Version, Waited: r.Waited, Holders: r.Holders, Term: r.Term, Replayed: r.Duplicate}
	}
	return r.Version, r.Unchanged, nil
}

// change sends req, a write or a transaction of keys, and returns its
// reply, the fetch records of keys, which the caller ends (fill or
// endFetch), and when the reply's copy of req was sent. check, if not nil,
// checks req against the session's settings before it is sent; stamp sets
// req's ID, timeout and Acked for each copy sent. fenced says that req
// writes under a write lease, and leaseUntil, if not zero, when that
// lease could have run out on the server. See write.
func (c *Client) change(ctx context.Context, keys []string, fenced bool, leaseUntil time.Time, req protocol.Message,
	check func(*protocol.HelloReply) error, stamp func(id uint64, timeout time.Duration, acked uint64)) (protocol.Message, []*fetch, time.Time, error) {
	cn, err := c.conn()
	if err != nil && !errors.Is(err, ErrClosed) {
		// Wait for the client to reconnect; the last session's settings
		// bound the wait, and so does the write lease the write is made
		// under, if any.
		until, why := c.clock.Now().Add(c.retryWindow()/2), "not sent"
		if !leaseUntil.IsZero() && leaseUntil.Before(until) {
			until, why = leaseUntil, "not sent before the write lease could have run out"
		}
		cn, err = c.awaitConn(ctx, until)
		if err != nil && !errors.Is(err, ErrClosed) {
			err = fmt.Errorf("%w; the write was %s: nothing changed", err, why)
			if ctx.Err() != nil {
				err = fmt.Errorf("%w: %w", ErrCanceled, err)
			}
		}
	}
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	if check != nil {
		if err := check(cn.hello); err != nil {
			return nil, nil, time.Time{}, err
		}
	}
	id := c.newWriteID()
	defer c.endWrite(id)
	var retryUntil time.Time // set once the write may have reached a server
	for {
		var timeout time.Duration
		if dl, ok := ctx.Deadline(); ok {
			if timeout = time.Until(dl); timeout <= 0 {
				err := fmt.Errorf("%w: %w", ErrCanceled, context.DeadlineExceeded)
				if !retryUntil.IsZero() {
					err = fmt.Errorf("%w: the write was sent before its connection was lost and may or may not have committed: %w", ErrUnavailable, context.DeadlineExceeded)
				}
				return nil, nil, time.Time{}, err
			}
		}
		stamp(id, timeout, c.beginWrite(id))
		fs, sent, _, ch, err := c.sendChange(cn, keys, req)
		var m protocol.Message
		lost := err != nil
		if err == nil {
			m, lost, err = cn.awaitWrite(ctx, id, ch)
		}
		if e, ok := m.(*protocol.Error); ok && e.Code == protocol.CodeNotLeader {
			// The node stopped leading while it committed the write: the
			// next leader may apply it or not. The session is of no more
			// use; the next one is with the new leader.
			err = fmt.Errorf("%w: %s; the write may or may not have committed", ErrUnavailable, e.Message)
			cn.fail(err)
			m, lost = nil, true
		}
		if err == nil {
			return m, fs, sent, nil
		}
		for i, k := range keys {
			c.endFetch(k, fs[i])
		}
		if retryUntil.IsZero() {
			retryUntil = c.clock.Now().Add(cn.hello.RetryWindow / 2)
		} else if errors.Is(err, ErrCanceled) {
			// This attempt was abandoned, but an earlier one may have
			// committed: the error must not wrap ErrCanceled, which says
			// that nothing changed.
			err = unknownOutcome(err)
		}
		if !lost || fenced || cn.hello.RetryWindow == 0 || ctx.Err() != nil {
			return nil, nil, time.Time{}, err
		}
		c.log.Debug("write lost with its connection; sending it again on the next session", "keys", keys, "id", id, "err", err)
		if cn, err = c.awaitConn(ctx, retryUntil); err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("%w; the write was sent before and may or may not have committed", err)
		}
	}
}

// retryWindow returns the retry window of the client's last session.
func (c *Client) retryWindow() time.Duration {
	if h := c.lastHello.Load(); h != nil {
		return h.RetryWindow
	}
	return 0
}

// newWriteID returns the ID of a new write (or TTL lease grant), recorded
// at once as having no outcome yet. The ID is taken under the same lock
// that records it: a write whose ID was taken but not yet recorded could
// otherwise be below another write's Acked, which would tell the server
// that its outcome is known, and the server would refuse it as answered
// already.
func (c *Client) newWriteID() uint64 {
	c.xmu.Lock()
	defer c.xmu.Unlock()
	id := c.nextID.Add(1)
	c.writing[id] = struct{}{}
	if c.lowest == 0 || id < c.lowest {
		c.lowest = id
	}
	return id
}

// beginWrite records that write id, from newWriteID, has no outcome yet,
// and returns the least ID of such writes: the client has the outcomes of
// its writes below it.
func (c *Client) beginWrite(id uint64) uint64 {
	c.xmu.Lock()
	defer c.xmu.Unlock()
	c.writing[id] = struct{}{}
	if c.lowest == 0 || id < c.lowest {
		c.lowest = id
	}
	return c.lowest
}

// endWrite records that write id has its outcome, or will never be sent
// again.
func (c *Client) endWrite(id uint64) {
	c.xmu.Lock()
	defer c.xmu.Unlock()
	delete(c.writing, id)
	if id != c.lowest {
		return
	}
	c.lowest = 0
	for w := range c.writing {
		if c.lowest == 0 || w < c.lowest {
			c.lowest = w
		}
	}
}

// unknownOutcome returns the error of a write whose last copy was
// abandoned (err wraps ErrCanceled) after an earlier copy was sent on a
// connection since lost: it may or may not have committed. The error
// wraps ErrUnavailable, and the context's error if err has one, but not
// ErrCanceled.
func unknownOutcome(err error) error {
	const msg = "%w: the write was sent before its connection was lost and may or may not have committed; the last copy was abandoned (%v)"
	for _, cause := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, cause) {
			return fmt.Errorf(msg+": %w", ErrUnavailable, err, cause)
		}
	}
	return fmt.Errorf(msg, ErrUnavailable, err)
}
