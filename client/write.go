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
	cn, err := c.conn()
	if err != nil && !errors.Is(err, ErrClosed) {
		// Wait for the client to reconnect; the last session's settings
		// bound the wait, and so does the write lease the write is made
		// under, if any.
		until, why := c.clock.Now().Add(c.retryWindow()/2), "not sent"
		if !o.leaseUntil.IsZero() && o.leaseUntil.Before(until) {
			until, why = o.leaseUntil, "not sent before the write lease could have run out"
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
		return 0, false, err
	}
	if max := cn.hello.MaxValueSize; max > 0 && len(value) > max {
		return 0, false, fmt.Errorf("%w: value of %d bytes, limit %d", ErrTooLarge, len(value), max)
	}
	value = append([]byte(nil), value...)
	id := c.newWriteID()
	req := &protocol.Write{ID: id, Op: op, Key: []byte(key), Value: value, Expect: expect, Token: token, Lease: uint64(o.lease)}
	defer c.endWrite(id)
	var retryUntil time.Time // set once the write may have reached a server
	for {
		if dl, ok := ctx.Deadline(); ok {
			if req.Timeout = time.Until(dl); req.Timeout <= 0 {
				err := fmt.Errorf("%w: %w", ErrCanceled, context.DeadlineExceeded)
				if !retryUntil.IsZero() {
					err = fmt.Errorf("%w: the write was sent before its connection was lost and may or may not have committed: %w", ErrUnavailable, context.DeadlineExceeded)
				}
				return 0, false, err
			}
		}
		req.Acked = c.beginWrite(id)
		f, sent, _, ch, err := c.send(cn, key, req, true)
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
		if err != nil {
			c.endFetch(key, f)
			if retryUntil.IsZero() {
				retryUntil = c.clock.Now().Add(cn.hello.RetryWindow / 2)
			} else if errors.Is(err, ErrCanceled) {
				// This attempt was abandoned, but an earlier one may
				// have committed: the error must not wrap ErrCanceled,
				// which says that nothing changed.
				err = unknownOutcome(err)
			}
			if !lost || token != 0 || cn.hello.RetryWindow == 0 || ctx.Err() != nil {
				return 0, false, err
			}
			c.log.Debug("write lost with its connection; sending it again on the next session", "key", key, "id", id, "err", err)
			if cn, err = c.awaitConn(ctx, retryUntil); err != nil {
				return 0, false, fmt.Errorf("%w; the write was sent before and may or may not have committed", err)
			}
			continue
		}
		r, ok := m.(*protocol.WriteReply)
		if !ok {
			c.endFetch(key, f)
			return 0, false, unexpected(m)
		}
		c.fill(key, f, value, r.Version, op != protocol.OpDelete, sent.Add(r.Term), r.Term, c.monoNow())
		if o.result != nil {
			*o.result = WriteResult{Version: r.Version, Waited: r.Waited, Holders: r.Holders, Term: r.Term, Replayed: r.Duplicate}
		}
		return r.Version, r.Unchanged, nil
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
