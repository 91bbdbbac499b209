package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// Election elects one leader among the processes that campaign on one
// name, after etcd's concurrency.Election, with the fencing it lacks
// (DESIGN §5.1). Winning is holding a Mutex on the key name + "/lock"
// under the campaigner's Session; the leader's record is the key name
// itself, which the leader writes with the lock's guard and attaches to
// its session's lease: only the current leader can write it, and it is
// deleted when the leader's session ends. Observers read the record under
// a read lease and hear of each change from the server's invalidation:
// they never poll.
//
// The record's value is the leader's token (8 bytes, big-endian) and then
// the value it proclaimed.
//
// An Election is safe for concurrent use.
type Election struct {
	s    *Session
	name string
	m    *Mutex
}

// Errors of an election.
var (
	// ErrNotLeader: Proclaim or Resign by a campaigner that does not
	// lead (any more).
	ErrNotLeader = errors.New("leased: not the elected leader")
	// ErrNoLeader: Leader found no leader.
	ErrNoLeader = errors.New("leased: no leader elected")
	// ErrSessionDone: a Mutex's Lock, or a Queue's Claim, whose Session
	// ended (its lease was lost, or it was closed) before it was granted.
	ErrSessionDone = errors.New("leased: the session has ended")
)

// NewElection returns an election on name in which s campaigns.
func NewElection(s *Session, name string) *Election {
	return &Election{s: s, name: name, m: NewMutex(s, electionLock(name))}
}

// electionLock is the key of the lock of the election on name.
func electionLock(name string) string { return name + "/lock" }

// Leader is an elected leader, as its record says: the value it
// proclaimed, its token (the lock's fencing token) and the record's
// version. The zero Leader (Token 0) means that nobody leads.
type Leader struct {
	Value   []byte
	Token   uint64
	Version uint64
}

// Campaign waits until s wins the election, until ctx ends, and then
// proclaims value. Its leadership's context is Context.
func (e *Election) Campaign(ctx context.Context, value []byte) error {
	if err := e.m.Lock(ctx); err != nil {
		return err
	}
	if err := e.Proclaim(ctx, value); err != nil {
		uctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.m.Unlock(uctx)
		return err
	}
	return nil
}

// Proclaim writes value as the leader's, under the lock's guard: once the
// campaigner no longer leads, it fails with ErrNotLeader (the server says
// ErrFenced) and changes nothing.
func (e *Election) Proclaim(ctx context.Context, value []byte) error {
	token := e.m.Token()
	if token == 0 {
		return fmt.Errorf("%w: %q", ErrNotLeader, e.name)
	}
	rec := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(value)), token)
	rec = append(rec, value...)
	_, err := e.s.c.Put(ctx, e.name, rec, WithGuard(e.m.Key(), token), WithLease(e.s.Lease()))
	if errors.Is(err, ErrFenced) {
		return fmt.Errorf("%w: %q: %w", ErrNotLeader, e.name, err)
	}
	return err
}

// Resign gives leadership up: the record is deleted, under the lock's
// guard, and the lock released. Resign by a campaigner that does not lead
// returns nil.
func (e *Election) Resign(ctx context.Context) error {
	token := e.m.Token()
	if token == 0 {
		return nil
	}
	_, err := e.s.c.Txn(ctx).Guard(e.m.Key(), token).Then(DeleteOp(e.name)).Commit()
	if err != nil && !errors.Is(err, ErrFenced) {
		return err
	}
	return e.m.Unlock(ctx)
}

// Context returns the context of this campaigner's leadership: cancelled
// when it ends, or at its safe deadline (Mutex.Context).
func (e *Election) Context() context.Context { return e.m.Context() }

// Token returns the leadership's fencing token, 0 if not leading.
func (e *Election) Token() uint64 { return e.m.Token() }

// Leader returns the current leader, from the client's cache while its
// read lease on the record lasts; ErrNoLeader if nobody leads.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	return leaderOf(ctx, e.s.c, e.name)
}

func leaderOf(ctx context.Context, c *Client, name string) (Leader, error) {
	it, err := c.Get(ctx, name)
	if err != nil {
		return Leader{}, err
	}
	if !it.Found {
		return Leader{}, fmt.Errorf("%w: %q", ErrNoLeader, name)
	}
	if len(it.Value) < 8 {
		return Leader{}, fmt.Errorf("%w: the record of election %q holds %d bytes, not a leader's", ErrInvalidArgument, name, len(it.Value))
	}
	return Leader{Value: it.Value[8:], Token: binary.BigEndian.Uint64(it.Value), Version: it.Version}, nil
}

// Observe returns a channel of the election's leaders: the current one
// at once (the zero Leader if nobody leads), and then each change, until
// ctx ends or the client is closed, when the channel is closed. It reads
// the record under a read lease and waits for the server to invalidate
// it, so it sends one message a lease term while nothing changes, and
// none to ask. A slow reader misses intermediate leaders, never the
// latest.
func (e *Election) Observe(ctx context.Context) <-chan Leader { return Observe(ctx, e.s.c, e.name) }

// Observe is Election.Observe for an observer that does not campaign:
// client c watches the election on name.
func Observe(ctx context.Context, c *Client, name string) <-chan Leader {
	ch := make(chan Leader, 1)
	go func() {
		defer close(ch)
		var last Leader
		var quick backoff
		first := true
		for {
			wake, stop := c.waitFor([]string{name}, nil)
			l, err := leaderOf(ctx, c, name)
			switch {
			case errors.Is(err, ErrNoLeader):
				l = Leader{}
			case errors.Is(err, ErrPermissionDenied), errors.Is(err, ErrClosed):
				stop()
				return // asking again cannot help
			case err != nil:
				// Unavailable for now, or a record that is not a
				// leader's: read again soon.
			}
			if err == nil || errors.Is(err, ErrNoLeader) {
				if first || l.Version != last.Version || l.Token != last.Token || !bytes.Equal(l.Value, last.Value) {
					select {
					case <-ch: // drop the one not yet read: the latest wins
					default:
					}
					ch <- l
					last, first = l, false
				}
			}
			t := c.clock.NewTimer(c.renewWait(name, &quick))
			select {
			case <-wake:
				quick = 0 // a change is on its way: look again soon if it has not committed
			case <-t.Chan():
			case <-ctx.Done():
			case <-c.ctx.Done():
			}
			t.Stop()
			stop()
			if ctx.Err() != nil || c.ctx.Err() != nil {
				return
			}
		}
	}()
	return ch
}

// renewWait is how long a waiter for invalidations of key waits before it
// reads key again: until its cached lease runs out (a read then renews
// it), at least a tenth of the server's default term. If the last read
// of key got no lease (the server gives none while a write of it is
// pending: the invalidation that woke the waiter comes before that write
// commits), it reads again soon: after quick, which doubles from 10 ms up
// to the term each time, and starts over once the read gets a lease.
func (c *Client) renewWait(key string, quick *backoff) time.Duration {
	term := c.defaultTerm()
	if _, deadline, ok := c.cache.Peek(key); ok {
		if left := deadline.Sub(c.clock.Now()); left > 0 {
			*quick = 0
			return max(left, term/10)
		}
	}
	return quick.next(term)
}

// defaultTerm is the server's default lease term, or a second before the
// client has one.
func (c *Client) defaultTerm() time.Duration {
	if h := c.lastHello.Load(); h != nil && h.DefaultTerm > 0 {
		return h.DefaultTerm
	}
	return time.Second
}

// backoff is a wait that doubles from 10 ms up to a bound (renewWait).
type backoff time.Duration

// next returns the next wait, at most bound.
func (b *backoff) next(bound time.Duration) time.Duration {
	d := max(time.Duration(*b)*2, 10*time.Millisecond)
	d = min(d, bound)
	*b = backoff(d)
	return d
}
