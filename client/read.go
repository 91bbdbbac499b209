package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leased/leased/protocol"
)

// Item is the answer to a Get.
type Item struct {
	// Value is the key's value. It is shared with the cache: do not modify
	// it.
	Value []byte
	// Found is false if the key does not exist.
	Found bool
	// Version is the revision of the key's last change (0 if it never
	// existed).
	Version uint64
	// Cached is true if the answer came from the local cache, under a
	// valid lease, without a network round trip.
	Cached bool
	// Stale is true if GetStale served an entry whose lease had run out.
	Stale bool
	// Lease is how long the lease behind a Cached answer had left when
	// Get answered: the answer is the key's value until then, unless the
	// server invalidates it first (Config.OnInvalidate). An application
	// that keeps a copy of the answer, such as a kernel's cache of file
	// attributes, keeps it no longer. It is 0 for an answer that did not
	// come from the cache, even if it was cached for the next Get, and for
	// a Stale one.
	Lease time.Duration
}

// fetch tracks reads and writes of one key in flight. An invalidation of
// the key that arrives meanwhile poisons them: their answer is returned to
// the caller but not cached, because the invalidation may concern the very
// lease the answer carries.
type fetch struct {
	// n counts the requests that share the record. It is raised under
	// c.imu, but lowered without it (see endFetch), so that ending a
	// request that has nothing to cache does not take c.imu.
	n        atomic.Int32
	poisoned bool // guarded by c.imu
}

// Get returns the value of key. If the client holds a valid lease on it,
// the answer comes from the local cache with no network round trip
// (Item.Cached). Otherwise it asks the server, and caches the answer under
// the lease that comes with it. While disconnected, keys without a valid
// lease fail with ErrUnavailable. If the machine was suspended for longer
// than a tenth of ε since the cache was filled, which the monotonic clock
// does not count, every cached lease is dropped first (DESIGN §8).
func (c *Client) Get(ctx context.Context, key string) (Item, error) {
	since := c.sinceBase()
	if e, ok := c.cache.GetAt(key, since); ok {
		return Item{Value: e.Value, Found: e.Found, Version: e.Version, Cached: true, Lease: max(0, e.Until()-since)}, nil
	}
	if it, ok := c.fromListing(key, c.base.Add(since)); ok {
		return it, nil
	}
	return c.fetch(ctx, key)
}

// GetStale is Get, except that when the server cannot be reached it serves
// an entry whose lease has run out, marked Stale, rather than failing. The
// value may be out of date.
func (c *Client) GetStale(ctx context.Context, key string) (Item, error) {
	it, err := c.Get(ctx, key)
	if err != nil && errors.Is(err, ErrUnavailable) {
		if e, _, ok := c.cache.Peek(key); ok {
			return Item{Value: e.Value, Found: e.Found, Version: e.Version, Cached: true, Stale: true}, nil
		}
	}
	return it, err
}

func (c *Client) fetch(ctx context.Context, key string) (Item, error) {
	if err := checkKey(key); err != nil {
		return Item{}, err
	}
	cn, err := c.conn()
	if err != nil {
		return Item{}, err
	}
	req := &protocol.Get{Key: []byte(key)}
	old, _, have := c.cache.Peek(key)
	if have {
		req.Revalidate, req.Known = true, old.Version
	}
	f, sent, id, ch, err := c.send(cn, key, req, false)
	var m protocol.Message
	if err == nil {
		m, err = cn.await(ctx, id, ch)
	}
	if err != nil {
		c.endFetch(key, f)
		// The server may have granted a lease whose answer is lost.
		c.relinquish([]string{key})
		return Item{}, err
	}
	r, ok := m.(*protocol.GetReply)
	if !ok || (r.Unchanged && (!have || old.Version != r.Version)) {
		c.endFetch(key, f)
		if ok {
			return Item{}, fmt.Errorf("%w: unchanged answer for version %d the client does not hold", ErrProtocol, r.Version)
		}
		return Item{}, unexpected(m)
	}
	value := r.Value
	if r.Unchanged {
		value = old.Value
	}
	// The clock read on arrival is where TestHerdAnswersDoNotQueue holds
	// answers before their fill, through Config.Clock.
	c.fill(key, f, value, r.Version, r.Found, sent.Add(r.Term), r.Term, c.monoNow())
	return Item{Value: value, Found: r.Found, Version: r.Version}, nil
}

func (c *Client) beginFetch(key string) *fetch {
	f := c.fetches[key]
	if f == nil {
		f = &fetch{}
		c.fetches[key] = f
	}
	f.n.Add(1)
	return f
}

// beginWriteFetch starts tracking a write or write-lease acquisition of
// key. The server drops this client's read lease on key when the op starts
// (the library has removed the entry before sending it), so answers to
// reads and writes of key already in flight must not be cached once they
// arrive: replies are delivered in order, but the goroutines that fill the
// cache with them run in any order, and an older answer could otherwise
// replace the op's newer one, or be cached under a lease the server no
// longer records. They are poisoned, and the op gets a fetch of its own,
// which reads sent after it share. That is right only because requests
// are sent in the order their records are begun (c.smu): a read that shares
// the record reaches the server after the op. It must be called with c.imu
// held.
func (c *Client) beginWriteFetch(key string) *fetch {
	if old := c.fetches[key]; old != nil {
		old.poisoned = true
	}
	f := &fetch{}
	f.n.Store(1)
	c.fetches[key] = f
	return f
}

// send begins key's fetch record and writes req, under c.smu, so that
// requests reach the server in the order their records were begun. For a
// write or an acquisition (change), the client first drops its own entry
// and poisons reads in flight (see beginWriteFetch). It returns the record,
// which the caller ends with fill, the time the request was sent, and the
// request's ID and reply channel.
func (c *Client) send(cn *conn, key string, req protocol.Message, change bool) (f *fetch, sent time.Time, id uint64, ch chan protocol.Message, err error) {
	c.smu.Lock()
	defer c.smu.Unlock()
	c.imu.Lock()
	if change {
		f = c.beginWriteFetch(key)
		c.cache.Remove(key)
		c.dropListingsOf(key)
	} else {
		f = c.beginFetch(key)
	}
	c.imu.Unlock()
	sent = c.clock.Now()
	id, ch, err = cn.start(req)
	return f, sent, id, ch, err
}

// sendChange is send for a write or a transaction of keys (change): it
// begins a fetch record of each, in order, and drops the client's entries
// of them, before it writes req. A failed send leaves the records begun,
// for the caller to end.
func (c *Client) sendChange(cn *conn, keys []string, req protocol.Message) (fs []*fetch, sent time.Time, id uint64, ch chan protocol.Message, err error) {
	c.smu.Lock()
	defer c.smu.Unlock()
	c.imu.Lock()
	fs = make([]*fetch, len(keys))
	for i, k := range keys {
		fs[i] = c.beginWriteFetch(k)
		c.cache.Remove(k)
		c.dropListingsOf(k)
	}
	c.imu.Unlock()
	sent = c.clock.Now()
	id, ch, err = cn.start(req)
	return fs, sent, id, ch, err
}

// endFetch ends one request of f. It takes c.imu only to drop the record
// once the last of its requests has ended, so it must be called without it.
func (c *Client) endFetch(key string, f *fetch) {
	if f.n.Add(-1) > 0 {
		return
	}
	c.imu.Lock()
	c.dropFetch(key, f)
	c.imu.Unlock()
}

// dropFetch forgets f if no request shares it any more: one may have begun
// sharing it again since it was ended. It must be called with c.imu held.
func (c *Client) dropFetch(key string, f *fetch) {
	if f.n.Load() == 0 && c.fetches[key] == f {
		delete(c.fetches, key)
	}
}

// fill caches an answer that arrived at now under its lease, unless an
// invalidation poisoned the fetch, and ends the fetch. The caller reads now
// when the answer has arrived.
//
// An answer with no lease, or one the cache already holds (the same
// version, under a lease still live), has nothing to store: it ends its
// fetch without c.imu and leaves the entry alone. When the readers of a hot
// key miss together, every answer after the first is of this kind, and
// taking c.imu for each of them made a queue that could outlast the term,
// stall acknowledgements and renewals, and replace the entry with ones of
// earlier deadlines. Skipping is safe: it adds nothing to the cache, and
// the entry already cached is covered by the session's lease on the key,
// which is not released while the key is cached.
func (c *Client) fill(key string, f *fetch, value []byte, version uint64, found bool, deadline time.Time, term time.Duration, now time.Time) {
	if term <= 0 || c.holds(key, version, found, now) {
		c.endFetch(key, f)
		return
	}
	var evicted []string
	c.imu.Lock()
	if f.poisoned || c.closed {
		// The server granted a lease the cache will not use.
		evicted = append(evicted, key)
	} else {
		_, evicted = c.cache.Put(key, value, version, found, deadline)
		if m := c.minTerm.Load(); m == 0 || int64(term) < m {
			c.minTerm.Store(int64(term))
		}
	}
	f.n.Add(-1)
	c.dropFetch(key, f)
	c.imu.Unlock()
	c.relinquish(evicted)
}

// holds reports whether the cache holds version of key (found or not) under
// a lease that is still live at now.
func (c *Client) holds(key string, version uint64, found bool, now time.Time) bool {
	e, deadline, ok := c.cache.Peek(key)
	return ok && e.Version == version && e.Found == found && now.Before(deadline)
}

func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidArgument)
	case isLockRecord(key) && len(key) <= protocol.MaxKeySize+len(protocol.LockRecordPrefix):
		return nil // the record of a lock on a key of at most MaxKeySize bytes (Client.Lock)
	case len(key) > protocol.MaxKeySize:
		return fmt.Errorf("%w: key of %d bytes, limit %d", ErrTooLarge, len(key), protocol.MaxKeySize)
	}
	return nil
}

// monoNow returns the current time for lease checks on the cached read
// path. On the system clock it reads only the monotonic clock, without the
// clock interface: time.Since skips the wall clock, which halves the cost of
// time.Now. The result compares correctly with times from Now, since both
// carry monotonic readings.
func (c *Client) monoNow() time.Time {
	if c.sysClock {
		return c.base.Add(time.Since(c.base))
	}
	return c.clock.Now()
}

// sinceBase is monoNow as the time since c.base, the cache's epoch, for a
// cached read: it first makes sure that the machine was not suspended
// meanwhile, which the monotonic clock does not count, and drops every
// cached lease if it was (c.suspend). On the system clock it reads the
// clock once, with time.Now, whose wall reading tells the check whether
// to read the boot clock. It must be called holding none of the client's
// locks.
func (c *Client) sinceBase() time.Duration {
	return c.checkedNow().Sub(c.base)
}

// checkedNow reads the client's clock, after making sure that the machine
// was not suspended since the last check (c.suspend), and dropping every
// lease, read and write, if it was. On the system clock it reads time.Now,
// whose monotonic reading the leases' deadlines compare with. It must be
// called holding none of the client's locks.
func (c *Client) checkedNow() time.Time {
	var now time.Time
	if c.sysClock {
		now = time.Now()
	} else {
		now = c.clock.Now()
	}
	c.suspend.Check(now, c.suspendSlack())
	return now
}
