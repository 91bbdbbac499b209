package store

import (
	"bytes"
	"sync"
)

// clientCache keeps recent client records (clients.go) in memory, as
// committed, so that a write need not look its client's record up in
// badger: badger reads a key that was rewritten since its last flush from
// every level that holds an older version. Only the write path of a Badger
// (Apply and ApplyEntry, under amu) fills and changes the cache, so a value
// in it is never older than what badger has committed; Kept reads it. After
// a failed write, Reopen or Restore, it is emptied.
type clientCache struct {
	mu sync.Mutex
	m  map[string][]byte
}

// The cache's bounds: the records of this many clients, each of at most
// this many bytes (about 240 kept outcomes); larger records are read from
// badger.
const (
	maxCachedClients = 4096
	maxCachedRecord  = 4 << 10
)

func isClientKey(key []byte) bool { return bytes.HasPrefix(key, clientPrefix) }

func (c *clientCache) get(key []byte) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v, ok := c.m[string(key)]
	return v, ok
}

// put caches v, the committed record under key, or forgets key if v is
// nil or too large.
func (c *clientCache) put(key string, v []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v == nil || len(v) > maxCachedRecord {
		delete(c.m, key)
		return
	}
	if c.m == nil {
		c.m = make(map[string][]byte)
	}
	if _, ok := c.m[key]; !ok && len(c.m) >= maxCachedClients {
		for k := range c.m { // an arbitrary one
			delete(c.m, k)
			break
		}
	}
	c.m[key] = v
}

func (c *clientCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = nil
}

// cachingTxn is a write transaction of a Badger that reads client records
// through the cache, and stages its changes to them until commit says
// they are committed. The caller holds the Badger's amu, so that no other
// write can commit between a read from badger and its caching.
type cachingTxn struct {
	badgerTxn
	cache  *clientCache
	staged map[string][]byte // client records this transaction sets (nil: deletes)
}

func newCachingTxn(t badgerTxn, c *clientCache) *cachingTxn {
	return &cachingTxn{badgerTxn: t, cache: c}
}

func (x *cachingTxn) get(key []byte) ([]byte, bool, error) {
	if !isClientKey(key) {
		return x.badgerTxn.get(key)
	}
	if v, ok := x.staged[string(key)]; ok {
		return v, v != nil, nil
	}
	if v, ok := x.cache.get(key); ok {
		return v, true, nil
	}
	v, ok, err := x.badgerTxn.get(key)
	if err == nil && ok {
		x.cache.put(string(key), v)
	}
	return v, ok, err
}

func (x *cachingTxn) set(key, value []byte) error {
	if isClientKey(key) {
		x.stage(key, value)
	}
	return x.badgerTxn.set(key, value)
}

func (x *cachingTxn) del(key []byte) error {
	if isClientKey(key) {
		x.stage(key, nil)
	}
	return x.badgerTxn.del(key)
}

func (x *cachingTxn) stage(key, value []byte) {
	if x.staged == nil {
		x.staged = make(map[string][]byte)
	}
	x.staged[string(key)] = value
}

// committed moves the transaction's changes to client records into the
// cache, once the transaction has committed.
func (x *cachingTxn) committed() {
	for k, v := range x.staged {
		x.cache.put(k, v)
	}
}

// cachedReader reads committed state through the cache, without filling
// it: a reader may run beside a write, and what it read from badger may
// be older than what the write is about to cache.
type cachedReader struct {
	badgerTxn
	cache *clientCache
}

func (x cachedReader) get(key []byte) ([]byte, bool, error) {
	if isClientKey(key) {
		if v, ok := x.cache.get(key); ok {
			return v, true, nil
		}
	}
	return x.badgerTxn.get(key)
}
