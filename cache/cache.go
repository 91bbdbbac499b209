package cache

import (
	"container/heap"
	"sync"
	"sync/atomic"
	"time"

	"github.com/puzpuzpuz/xsync/v4"
)

// Default bounds, used for zero or negative Config fields.
const (
	defaultMaxEntries = 100_000
	defaultMaxBytes   = 64 << 20
)

// entryOverhead is the fixed number of bytes charged per entry on top of its
// key and value, approximating the Entry struct, the map slot and the ring
// and heap slots.
const entryOverhead = 64

// Bits of Entry.flags.
const (
	refBit  uint32 = 1 << iota // referenced since the clock hand last passed (CLOCK bit)
	usedBit                    // read by Get since stored or last taken by TakeRenewals
)

// Config bounds a Cache. Zero values mean defaults.
type Config struct {
	// MaxEntries is the most entries the cache holds; 0 (or less) means 100_000.
	MaxEntries int
	// MaxBytes is the most bytes the cache holds, counting for each entry its
	// key, its value and a fixed overhead of 64 bytes; 0 (or less) means 64 MiB.
	MaxBytes int64
	// Epoch is the time from which GetAt measures its now; zero means the
	// time New is called. Deadlines are kept as durations from it, so the
	// times given to the cache must lie within 290 years of it.
	Epoch time.Time
}

// Entry is one cached answer. Value, Version and Found never change after
// Put, so they may be read without synchronisation; the caller must not
// modify Value. The deadline is kept by the Cache (see Peek and Extend).
type Entry struct {
	// Value is the cached value; empty when Found is false.
	Value []byte
	// Version is the version of the value the lease covers.
	Version uint64
	// Found is false for a cached "key does not exist" answer (negative caching).
	Found bool

	key  string
	size int64

	// flags holds refBit and usedBit. Get sets them, with no lock; they
	// are cleared under the write lock.
	flags atomic.Uint32

	// until is deadline as a duration since the Cache's epoch, for GetAt,
	// which reads it without the lock; it changes with deadline.
	until atomic.Int64

	// The fields below are guarded by the owning Cache's mu.
	deadline time.Time
	idx      int // position in Cache.ring; -1 once the entry is no longer stored
	heapIdx  int // position in Cache.exp; -1 when not in it (expiry reported, or not stored)
}

// Key returns the key e was stored under. It is safe for concurrent use.
func (e *Entry) Key() string { return e.key }

// Until returns e's deadline as a duration since the Cache's epoch, as
// GetAt's now is measured. It is safe for concurrent use; a renewal moves
// it later.
func (e *Entry) Until() time.Duration { return time.Duration(e.until.Load()) }

// Cache is a bounded map from keys to leased entries with CLOCK eviction.
// All its methods are safe for concurrent use by multiple goroutines; Get
// takes no lock, and Peek only a read lock.
type Cache struct {
	maxEntries int
	maxBytes   int64
	epoch      time.Time

	// m maps each stored key to its entry. Get reads it without a lock;
	// it changes only under mu, held for writing, with the structures
	// below.
	m *xsync.Map[string, *Entry]

	// mu guards every field below, and the deadline, idx and heapIdx fields
	// of every Entry stored in the cache. Peek holds it for reading, every
	// other method that touches entries but Get holds it for writing.
	mu sync.RWMutex
	// ring holds the stored entries in clock order; ring[i].idx == i.
	ring []*Entry
	// hand is the ring position the clock hand examines next (0 when ring is empty).
	hand int
	// exp is a min-heap by deadline of the stored entries whose expiry has
	// not been reported by Expired yet.
	exp expiryHeap
	// bytes is the sum of the sizes of the stored entries.
	bytes int64
	// now is the latest time passed to TakeRenewals or Expired. Put treats
	// entries whose deadline is at or before it as expired.
	now time.Time
	// evictions counts the entries evicted to respect the bounds.
	evictions uint64
}

// New returns an empty Cache bounded by cfg. Fields of cfg that are zero or
// negative take their defaults. The returned Cache is safe for concurrent use.
func New(cfg Config) *Cache {
	if cfg.MaxEntries <= 0 {
		cfg.MaxEntries = defaultMaxEntries
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = defaultMaxBytes
	}
	if cfg.Epoch.IsZero() {
		cfg.Epoch = time.Now()
	}
	return &Cache{
		maxEntries: cfg.MaxEntries,
		maxBytes:   cfg.MaxBytes,
		epoch:      cfg.Epoch,
		m:          xsync.NewMap[string, *Entry](),
	}
}

// Get is GetAt at now.
func (c *Cache) Get(key string, now time.Time) (*Entry, bool) {
	return c.GetAt(key, now.Sub(c.epoch))
}

// GetAt returns the entry for key if it is present and now, measured from
// the Config's Epoch, is before its deadline. It marks the entry as used
// (so TakeRenewals offers it for renewal) and as referenced (so eviction
// spares it once). GetAt takes no lock and does not allocate; it is safe
// for concurrent use.
//
// It answers as of the moment it finds the entry: a Remove or Put that
// runs meanwhile may end before GetAt returns the entry it replaced. The
// client removes an entry before it acknowledges the invalidation that
// lets a write commit, so a read that returns the old entry began before
// the write committed, and may be ordered before it.
func (c *Cache) GetAt(key string, now time.Duration) (*Entry, bool) {
	e, ok := c.m.Load(key)
	if !ok || int64(now) >= e.until.Load() {
		return nil, false
	}
	// Load first so that steady-state hits only read the shared cache line.
	if e.flags.Load() != refBit|usedBit {
		e.flags.Or(refBit | usedBit)
	}
	return e, true
}

// setDeadline sets e's deadline, and until with it. c.mu must be held
// for writing.
func (c *Cache) setDeadline(e *Entry, deadline time.Time) {
	e.deadline = deadline
	e.until.Store(int64(deadline.Sub(c.epoch)))
}

// Peek returns the entry for key whatever its deadline, together with that
// deadline. It does not mark the entry used or referenced. Callers use it
// for stale reads and for revalidation. Peek takes only a read lock; it is
// safe for concurrent use.
func (c *Cache) Peek(key string) (e *Entry, deadline time.Time, ok bool) {
	c.mu.RLock()
	e, ok = c.m.Load(key)
	if ok {
		deadline = e.deadline
	}
	c.mu.RUnlock()
	return e, deadline, ok
}

// Put stores a new entry for key, replacing any entry already stored for it,
// and returns the new entry together with the keys evicted to make room, in
// eviction order. A replaced entry is not reported as evicted.
//
// If the entry alone is larger than MaxBytes it is not stored, and any
// entry already stored for key is removed: Put returns a nil entry and
// evicted == []string{key}, so that the caller releases its lease.
//
// When making room, Put evicts at once the entries whose deadline is at or
// before the latest now passed to TakeRenewals or Expired, and otherwise
// gives referenced entries a second chance. Put is safe for concurrent use.
func (c *Cache) Put(key string, value []byte, version uint64, found bool, deadline time.Time) (e *Entry, evicted []string) {
	size := int64(len(key)) + int64(len(value)) + entryOverhead

	c.mu.Lock()
	defer c.mu.Unlock()

	if old, ok := c.m.Load(key); ok {
		c.drop(old)
	}
	if size > c.maxBytes {
		c.evictions++
		return nil, []string{key}
	}

	slot := -1 // ring slot freed for e by the last eviction, if any
	for len(c.ring) > 0 && (len(c.ring)+1 > c.maxEntries || c.bytes+size > c.maxBytes) {
		v := c.ring[c.hand]
		if c.now.Before(v.deadline) && v.flags.Load()&refBit != 0 {
			v.flags.And(^refBit)
			c.hand++
			if c.hand == len(c.ring) {
				c.hand = 0
			}
			continue
		}
		evicted = append(evicted, v.key)
		c.evictions++
		if len(c.ring) <= c.maxEntries && c.bytes-v.size+size <= c.maxBytes {
			// Last eviction needed: e takes v's slot, just behind the
			// hand, which is exact CLOCK replacement.
			c.unindex(v)
			slot = v.idx
			v.idx = -1
			break
		}
		c.drop(v)
	}

	e = &Entry{
		Value:   value,
		Version: version,
		Found:   found,
		key:     key,
		size:    size,
	}
	c.setDeadline(e, deadline)
	c.m.Store(key, e)
	c.bytes += size
	heap.Push(&c.exp, e)
	if slot >= 0 {
		c.ring[slot] = e
		e.idx = slot
		c.hand = (slot + 1) % len(c.ring)
	} else {
		c.insertBehindHand(e)
	}
	return e, evicted
}

// insertBehindHand appends e to the ring just behind the clock hand, so that
// the hand examines it last. When the hand is at 0, the end of the ring is
// behind it. Otherwise e takes the hand's slot, the entry that was there
// moves to the end (and so loses its place in the clock order), and the
// hand advances past e. c.mu must be held for writing.
func (c *Cache) insertBehindHand(e *Entry) {
	n := len(c.ring)
	c.ring = append(c.ring, e)
	e.idx = n
	if c.hand == 0 {
		return
	}
	h := c.hand
	moved := c.ring[h]
	c.ring[h], c.ring[n] = e, moved
	e.idx, moved.idx = h, n
	c.hand = h + 1
}

// unindex removes the stored entry e from the map and the expiry heap and
// subtracts its size, leaving the ring alone. c.mu must be held for writing.
func (c *Cache) unindex(e *Entry) {
	c.m.Delete(e.key)
	c.bytes -= e.size
	if e.heapIdx >= 0 {
		heap.Remove(&c.exp, e.heapIdx)
	}
}

// drop removes the stored entry e from the cache. Its ring slot is filled by
// the last ring entry; the hand follows the entry it pointed at. c.mu must
// be held for writing.
func (c *Cache) drop(e *Entry) {
	c.unindex(e)
	i, last := e.idx, len(c.ring)-1
	if i != last {
		moved := c.ring[last]
		c.ring[i] = moved
		moved.idx = i
		if c.hand == last {
			c.hand = i
		}
	}
	c.ring[last] = nil
	c.ring = c.ring[:last]
	if c.hand >= len(c.ring) {
		c.hand = 0
	}
	e.idx = -1
}

// Remove deletes the entry for key, if any, and reports whether there was
// one. It is used for invalidation and is safe for concurrent use.
func (c *Cache) Remove(key string) bool {
	c.mu.Lock()
	e, ok := c.m.Load(key)
	if ok {
		c.drop(e)
	}
	c.mu.Unlock()
	return ok
}

// Extend moves e's deadline to max(current, deadline) if e is still the
// entry stored for its key and its lease has not run out at now, and reports
// whether it did. A renewal reply must not extend an entry that was
// invalidated or replaced meanwhile, nor one whose lease ran out before the
// reply came: the server may since have let a write commit. A deadline is
// never shortened. If it moves, the entry's expiry will be reported again by
// Expired. Extend is safe for concurrent use.
func (c *Cache) Extend(e *Entry, now, deadline time.Time) bool {
	if e == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, _ := c.m.Load(e.key); cur != e || !now.Before(e.deadline) {
		return false
	}
	if deadline.After(e.deadline) {
		c.setDeadline(e, deadline)
		if e.heapIdx >= 0 {
			heap.Fix(&c.exp, e.heapIdx)
		} else {
			heap.Push(&c.exp, e)
		}
	}
	return true
}

// TakeRenewals appends to dst, in no particular order, the stored entries
// that were used by Get since they were stored or last taken, and whose
// deadline is in [now, horizon); it clears their used mark and returns dst.
// Entries whose expiry Expired has already reported are not included.
// TakeRenewals is safe for concurrent use.
func (c *Cache) TakeRenewals(now, horizon time.Time, dst []*Entry) []*Entry {
	c.mu.Lock()
	c.advance(now)
	dst = c.exp.collectRenewals(0, now, horizon, dst)
	c.mu.Unlock()
	return dst
}

// Expired appends to dst the keys of the stored entries whose deadline is at
// or before now and whose expiry has not been reported before, in deadline
// order, and returns dst. Each expiry is reported once per Put or deadline
// moving Extend. The entries stay in the cache for stale reads (Peek).
// Expired is safe for concurrent use.
func (c *Cache) Expired(now time.Time, dst []string) []string {
	c.mu.Lock()
	c.advance(now)
	for len(c.exp) > 0 && !now.Before(c.exp[0].deadline) {
		e := heap.Pop(&c.exp).(*Entry)
		dst = append(dst, e.key)
	}
	c.mu.Unlock()
	return dst
}

// advance moves c.now forward to now. c.mu must be held for writing.
func (c *Cache) advance(now time.Time) {
	if now.After(c.now) {
		c.now = now
	}
}

// Clear removes every entry and returns their keys. Entries removed this way
// are not counted as evictions. Clear is safe for concurrent use.
func (c *Cache) Clear() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var keys []string
	if len(c.ring) > 0 {
		keys = make([]string, 0, len(c.ring))
	}
	for i, e := range c.ring {
		keys = append(keys, e.key)
		e.idx, e.heapIdx = -1, -1
		c.ring[i] = nil
	}
	clear(c.exp)
	c.exp = c.exp[:0]
	c.ring = c.ring[:0]
	c.m.Clear()
	c.hand = 0
	c.bytes = 0
	return keys
}

// Len returns the number of stored entries, expired ones included. It is
// safe for concurrent use.
func (c *Cache) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.ring)
}

// Bytes returns the accounted size of the stored entries: for each, its key,
// its value and a fixed overhead. It is safe for concurrent use.
func (c *Cache) Bytes() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.bytes
}

// Evictions returns how many entries have been evicted to respect the
// bounds since New, counting entries rejected by Put as too large. It is
// safe for concurrent use.
func (c *Cache) Evictions() uint64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.evictions
}

// expiryHeap is a min-heap of entries by deadline that keeps each entry's
// heapIdx current. It implements heap.Interface; c.mu guards it.
type expiryHeap []*Entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].deadline.Before(h[j].deadline) }

func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

func (h *expiryHeap) Push(x any) {
	e := x.(*Entry)
	e.heapIdx = len(*h)
	*h = append(*h, e)
}

func (h *expiryHeap) Pop() any {
	old := *h
	n := len(old) - 1
	e := old[n]
	old[n] = nil
	*h = old[:n]
	e.heapIdx = -1
	return e
}

// collectRenewals walks the subtree rooted at i, skipping subtrees whose root
// deadline is at or after horizon (heap order makes all of it so), and
// appends the used entries whose deadline is in [now, horizon), clearing
// their used bit. Its cost is bounded by the entries due before horizon.
func (h expiryHeap) collectRenewals(i int, now, horizon time.Time, dst []*Entry) []*Entry {
	for i < len(h) {
		e := h[i]
		if !e.deadline.Before(horizon) {
			return dst
		}
		if !e.deadline.Before(now) && e.flags.Load()&usedBit != 0 {
			e.flags.And(^usedBit)
			dst = append(dst, e)
		}
		dst = h.collectRenewals(2*i+1, now, horizon, dst)
		i = 2*i + 2 // walk the right child iteratively
	}
	return dst
}
