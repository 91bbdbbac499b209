package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leased/leased/protocol"
)

// Locks (DESIGN §5.1): the modes of an acquisition, write leases bound to
// a TTL lease, and the records of locks that CheckToken reads.

// AcquireOption changes how AcquireWriteLease acquires.
type AcquireOption func(*acquireOptions)

type acquireOptions struct {
	mode  protocol.AcquireMode
	lease LeaseID
	delay time.Duration
}

// AcquireWait makes an acquisition wait in line, first in first out,
// behind the write lease's holder and the acquisitions before it, until the
// holder releases or its lease ends: it never recalls the holder's lease.
// Without it, an acquisition recalls the holder's lease (unless that lease
// is bound to a TTL lease), as a conflicting write does.
func AcquireWait() AcquireOption { return func(o *acquireOptions) { o.mode = protocol.AcquireWait } }

// AcquireTry makes an acquisition fail at once with ErrLocked if another
// client holds the write lease, or acquisitions wait for it.
func AcquireTry() AcquireOption { return func(o *acquireOptions) { o.mode = protocol.AcquireTry } }

// AcquireUnder binds the write lease to TTL lease id: a lock that lives
// exactly as long as that lease, whoever keeps it alive. It has no term
// and nothing recalls it: a conflicting write or acquisition waits until
// it is released or the TTL lease is revoked or runs out, and then it ends
// through the log. It survives a reconnect and a failover: the client's
// next session holds it. Its holder's writes under it need its token, as
// any write lease's. The client may use the lease as for WithLease.
func AcquireUnder(id LeaseID) AcquireOption { return func(o *acquireOptions) { o.lease = id } }

// never is the deadline of a write lease bound to a TTL lease: it has no
// term of its own (WriteLease.Valid).
var never = time.Unix(1<<62, 0)

// AcquireLockDelay sets a lock delay on a lock bound to a TTL lease
// (AcquireUnder), as Chubby and Consul have: if the lock ends because its
// TTL lease expired (its holder died or was cut off), not by a release or
// a revocation, the key stays unavailable to acquisitions for d, at most
// a minute, so that the dead holder's requests still on their way to a
// resource that cannot check tokens arrive before the next holder's.
// Waiting acquisitions wait it out; a try fails with ErrLocked.
func AcquireLockDelay(d time.Duration) AcquireOption {
	return func(o *acquireOptions) { o.delay = d }
}

// lockDeadlineMargin is how long before a lock's TTL lease could run out,
// on the client's clock, the client stops taking the lock for held
// (WriteLease.Valid, Mutex.Context): a tenth of the lease's TTL.
const lockDeadlineMargin = 10

// keptDeadline returns when TTL lease id could run out, on the client's
// clock, minus a tenth of its TTL: the client keeps it alive and has had a
// grant or keep-alive of it answered. ok is false if the client does not
// keep it alive, or has no answer yet.
func (c *Client) keptDeadline(id LeaseID) (deadline time.Time, ok bool) {
	c.kmu.Lock()
	defer c.kmu.Unlock()
	kl := c.kept[id]
	if kl == nil || kl.deadline.IsZero() {
		return time.Time{}, false
	}
	return kl.deadline.Add(-kl.ttl / lockDeadlineMargin), true
}

// loseBound marks lost the write leases bound to TTL lease id, which the
// client no longer keeps alive: it was lost.
func (c *Client) loseBound(id LeaseID) {
	c.wmu.Lock()
	var lost []*WriteLease
	for key, wl := range c.wleases {
		if wl.lease == id {
			delete(c.wleases, key)
			lost = append(lost, wl)
		}
	}
	c.wmu.Unlock()
	for _, wl := range lost {
		if wl.markLost() {
			c.emit(Event{Kind: EventWriteLeaseLost, Keys: []string{wl.key}})
		}
	}
}

// ResumeLock returns the lock on key held with token under TTL lease id,
// which another client acquired (AcquireUnder): a process that claimed a
// lock and exited, leaving it to its TTL lease, as a shell worker does
// with leasectl. Any client that may use the TTL lease may write under the
// lock and release it, as it may revoke the lease, which ends the lock;
// the server moves the lock to this client at its first write or release.
// It sends nothing: a token that is not the lock's fails the first write
// with ErrFenced, and its release with ErrNotFound.
func (c *Client) ResumeLock(key string, token uint64, id LeaseID) (*WriteLease, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	if token == 0 || id == 0 {
		return nil, fmt.Errorf("%w: resume the lock on %q: token %d, lease %v; neither may be 0", ErrInvalidArgument, key, token, id)
	}
	return &WriteLease{c: c, key: key, token: token, lease: id, under: id, deadline: never, done: make(chan struct{})}, nil
}

// LockRecord is what the record of a lock says (Client.Lock).
type LockRecord struct {
	// Held says that the write lease is held, with Token, bound to TTL
	// lease Lease (0: not bound).
	Held  bool
	Token uint64
	Lease LeaseID
	// Cached says that the answer came from the client's cache, under a
	// read lease on the record.
	Cached bool
}

// Lock reads the record of the write lease on key: whether it is held,
// and with which token. The read takes a read lease on the record, which
// the server invalidates before the lock is granted or ends, so that
// while the lease lasts the answer comes from the client's cache, in
// nanoseconds, and is never stale.
func (c *Client) Lock(ctx context.Context, key string) (LockRecord, error) {
	if err := checkKey(key); err != nil {
		return LockRecord{}, err
	}
	rk := lockRecordKey(key)
	if e, ok := c.cache.GetAt(rk, c.sinceBase()); ok {
		return lockRecordOf(key, Item{Value: e.Value, Found: e.Found, Version: e.Version, Cached: true})
	}
	return c.fetchLock(ctx, key)
}

// fetchLock reads the record of the lock on key from the server.
func (c *Client) fetchLock(ctx context.Context, key string) (LockRecord, error) {
	it, err := c.fetch(ctx, lockRecordKey(key))
	if err != nil {
		return LockRecord{}, err
	}
	return lockRecordOf(key, it)
}

// lockRecordOf decodes it, a read of the record of the lock on key.
func lockRecordOf(key string, it Item) (LockRecord, error) {
	if !it.Found {
		return LockRecord{Cached: it.Cached}, nil
	}
	token, lease, err := protocol.DecodeLockRecord(it.Value)
	if err != nil {
		return LockRecord{}, fmt.Errorf("%w: lock record of %q: %v", ErrProtocol, key, err)
	}
	return LockRecord{Held: true, Token: token, Lease: LeaseID(lease), Cached: it.Cached}, nil
}

// CheckToken reports whether the write lease on key is held with token
// now: the question a service asks before it lets a lock's holder change
// what the lock guards. It is answered from a read lease on the lock's
// record (Lock), in nanoseconds while the lease lasts; the server
// invalidates the lease before the lock changes hands, so a true answer is
// never stale. A token 0 is never current.
func (c *Client) CheckToken(ctx context.Context, key string, token uint64) (bool, error) {
	r, err := c.Lock(ctx, key)
	if err != nil {
		return false, err
	}
	return token != 0 && r.Held && r.Token == token, nil
}

// lockRecordKey is the key of the record of the lock on key.
func lockRecordKey(key string) string { return protocol.LockRecordPrefix + key }

// isLockRecord reports whether key names a lock's record.
func isLockRecord(key string) bool { return strings.HasPrefix(key, protocol.LockRecordPrefix) }
