package client

import (
	"slices"
	"strings"
	"time"

	"github.com/leased/leased/protocol"
)

// Cached listings under prefix leases (DESIGN §3.9). A List with Leased
// asks the server for a lease on the whole listing of a prefix; while it
// lasts, no key under the prefix changes, and none is created, until the
// client has dropped the listing and acknowledged its invalidation. So
// the client answers List(prefix) from its copy, and a Get of any key under
// it, found or not, when the key has no entry of its own.
//
// The listings live beside the key cache, in c.listings, under c.imu, and
// each List in flight has a fetch record in c.listFetches, which an
// invalidation of its prefix, a write of this client under it, or a
// suspend poisons, as for a key (read.go).
//
// A listing whose lease ran out, or that an invalidation dropped, stays as
// a stale copy (a zero deadline): it answers nothing, but the next List of
// its prefix names its revision (protocol.List.Known), and a reply that
// says Unchanged makes it the listing again, under the new lease, without
// the keys crossing the network. A write of this client under the prefix
// drops it: the listing changes.

// maxListings bounds the listings the client keeps, stale copies included;
// past it, a stale copy is dropped first, else the listing whose lease ends
// first, and its lease relinquished.
const maxListings = 1024

// listing is a cached listing of a prefix: every live key under it, with
// its value unless keysOnly, as of revision, under a lease until deadline
// on the client's clock; a zero deadline marks a stale copy, which only a
// revalidation uses.
type listing struct {
	kvs      []KV
	revision uint64
	keysOnly bool
	deadline time.Time
}

// answers reports whether l, live or not, holds what req, a List of its
// prefix, asks for: values where req wants them, and all of it within
// req's Limit.
func (l *listing) answers(req *protocol.List) bool {
	return (!l.keysOnly || req.KeysOnly) && (req.Limit == 0 || int(req.Limit) >= len(l.kvs))
}

// result is l as the answer to req: a copy of its keys, without their
// values if req asks for keys only.
func (l *listing) result(req *protocol.List) []KV {
	kvs := slices.Clone(l.kvs)
	if req.KeysOnly && !l.keysOnly {
		for i := range kvs {
			kvs[i].Value = nil
		}
	}
	return kvs
}

// Leased makes a List of a prefix ask for a lease on the whole listing, so
// that later Lists of the prefix, and Gets of any key under it (found or
// not) that has no entry of its own, are answered from the client's
// memory while the lease lasts, linearizably: no key under the prefix
// changes, and none is created, until the client has dropped the listing.
// The server grants one only for a prefix that is empty or ends with '/',
// read whole in one page (at most server.MaxListKeys keys, and half its
// largest value in bytes; a Limit below the keys there are, or a
// StartAfter, gets none), and not written about once a term or more
// lately; otherwise the listing is served uncached, as without Leased.
// The lease is not renewed: a List after it runs out, or after an
// invalidation dropped the listing, asks the server again, naming the
// revision of the client's copy; if nothing under the prefix changed
// since, the server grants a new lease without sending the keys, and the
// copy is the answer (not Cached: it took a round trip). A silent
// holder's lease holds writes under its prefix back for at most the term
// plus ε, as for a key.
func Leased() ListOption {
	return func(m *protocol.List) { m.Lease = true }
}

// leasedPrefix returns the prefix whose listing req, a List of the range
// [start, end), may be cached under, if it may be.
func leasedPrefix(req *protocol.List) (string, bool) {
	if !req.Lease || len(req.After) > 0 || string(req.End) != string(protocol.PrefixEnd(req.Start)) {
		return "", false
	}
	p := string(req.Start)
	return p, isDir(p)
}

// cachedListing answers req, a List of prefix, from the listing the client
// holds, if it holds one under a live lease that answers it: values where
// req wants them, and all of it within req's Limit.
func (c *Client) cachedListing(prefix string, req *protocol.List) (ListResult, bool) {
	now := c.checkedNow()
	c.imu.Lock()
	defer c.imu.Unlock()
	l := c.listings[prefix]
	if l == nil || !now.Before(l.deadline) || !l.answers(req) {
		return ListResult{}, false
	}
	return ListResult{KVs: l.result(req), Revision: l.revision, Cached: true}, true
}

// beginListFetch starts tracking a List of prefix, as beginFetch a read,
// and returns the copy of the listing the client holds, if it answers req
// (stale, or live but about to run out): req then names its revision
// (Known), for a revalidation. It must be called with c.imu held.
func (c *Client) beginListFetch(prefix string, req *protocol.List) (*fetch, *listing) {
	f := c.listFetches[prefix]
	if f == nil {
		f = &fetch{}
		c.listFetches[prefix] = f
	}
	f.n.Add(1)
	old := c.listings[prefix]
	if old == nil || !old.answers(req) {
		return f, nil
	}
	req.Known = old.revision
	return f, old
}

// endListFetch ends one List of f, and caches l, the listing it read (or
// the copy the server found unchanged), under the lease the reply carries
// (term, from when it was sent, until deadline), unless the fetch was
// poisoned meanwhile.
func (c *Client) endListFetch(prefix string, f *fetch, l listing, deadline time.Time, term time.Duration) {
	var evicted string
	c.imu.Lock()
	if term > 0 && !f.poisoned && !c.closed {
		if _, ok := c.listings[prefix]; !ok && len(c.listings) >= maxListings {
			evicted = c.evictListing()
		}
		l.kvs, l.deadline = slices.Clone(l.kvs), deadline
		c.listings[prefix] = &l
	}
	if f.n.Add(-1) == 0 && c.listFetches[prefix] == f {
		delete(c.listFetches, prefix)
	}
	c.imu.Unlock()
	// A poisoned answer's lease is gone already, ended by the
	// invalidation's acknowledgement or by this client's write: only an
	// evicted listing's is given back.
	if evicted != "" {
		c.relinquishPrefixes([]string{evicted})
	}
}

// evictListing drops a stale copy, or else the listing whose lease ends
// first, and returns the prefix whose lease to give back: "" for a stale
// copy, which has none. It must be called with c.imu held.
func (c *Client) evictListing() string {
	var first string
	var at time.Time
	for p, l := range c.listings {
		if l.deadline.IsZero() {
			delete(c.listings, p)
			return ""
		}
		if at.IsZero() || l.deadline.Before(at) {
			first, at = p, l.deadline
		}
	}
	delete(c.listings, first)
	return first
}

// relinquishPrefixes gives the server back this client's leases on
// prefixes whose listings it dropped, those it holds again, or has a List
// of in flight, apart: the acknowledgement names a prefix, not a grant,
// so it would also end the lease of the newer answer. It goes out under
// c.smu, so that a List begun after the check reaches the server after it.
func (c *Client) relinquishPrefixes(prefixes []string) {
	cn := c.cur.Load()
	if cn == nil {
		return // the lease ends with the session, or runs out
	}
	c.smu.Lock()
	defer c.smu.Unlock()
	var ps [][]byte
	c.imu.Lock()
	for _, p := range prefixes {
		if l := c.listings[p]; (l == nil || l.deadline.IsZero()) && c.listFetches[p] == nil {
			ps = append(ps, []byte(p))
		}
	}
	c.imu.Unlock()
	if len(ps) > 0 {
		cn.write(&protocol.Ack{Prefixes: ps})
	}
}

// dropListingsOf drops the listings of the prefixes that contain key, and
// poisons the Lists of them in flight: this client is about to write key,
// and the server drops its own prefix leases on them when the write
// starts, without asking. It must be called with c.imu held.
func (c *Client) dropListingsOf(key string) {
	if len(c.listings) == 0 && len(c.listFetches) == 0 {
		return
	}
	dirsOf(key, func(p string) bool {
		delete(c.listings, p)
		if f := c.listFetches[p]; f != nil {
			f.poisoned = true
			delete(c.listFetches, p)
		}
		return true
	})
}

// dirsOf calls fn with each prefix of key that may be leased (isDir), the
// empty one first, while fn returns true.
func dirsOf(key string, fn func(prefix string) bool) {
	if !fn("") {
		return
	}
	for i := 0; i < len(key); i++ {
		if key[i] == '/' && !fn(key[:i+1]) {
			return
		}
	}
}

// isDir reports whether prefix may be leased: it is empty or ends with '/'
// (the server's leasetable.Leasable).
func isDir(prefix string) bool { return prefix == "" || prefix[len(prefix)-1] == '/' }

// dropPrefixes drops the listings of prefixes, keeping each as a stale
// copy for a revalidation, and poisons the Lists of them in flight: an
// invalidation. It must be called with c.imu held.
func (c *Client) dropPrefixes(prefixes [][]byte) {
	for _, p := range prefixes {
		if l := c.listings[string(p)]; l != nil {
			c.listings[string(p)] = &listing{kvs: l.kvs, revision: l.revision, keysOnly: l.keysOnly}
		}
		if f := c.listFetches[string(p)]; f != nil {
			f.poisoned = true
			delete(c.listFetches, string(p))
		}
	}
}

// dropAllListings drops every listing and poisons every List in flight:
// the client closes, or its leases are lost. It must be called with c.imu
// held.
func (c *Client) dropAllListings() {
	clear(c.listings)
	for p, f := range c.listFetches {
		f.poisoned = true
		delete(c.listFetches, p)
	}
}

// fromListing answers a Get of key, which has no entry of its own, from a
// listing of a prefix that contains it, held under a live lease at now: the
// key's value and version if the listing has it (with values), or not
// found if it does not (then Version is 0: the listing does not say when
// the key was deleted, if ever).
func (c *Client) fromListing(key string, now time.Time) (Item, bool) {
	c.imu.Lock()
	defer c.imu.Unlock()
	if len(c.listings) == 0 {
		return Item{}, false
	}
	var it Item
	answered := false
	dirsOf(key, func(p string) bool {
		l := c.listings[p]
		if l == nil || !now.Before(l.deadline) {
			return true
		}
		i, found := slices.BinarySearchFunc(l.kvs, key, func(kv KV, k string) int { return strings.Compare(kv.Key, k) })
		switch {
		case !found:
			it, answered = Item{Cached: true, Lease: l.deadline.Sub(now)}, true
		case !l.keysOnly:
			kv := l.kvs[i]
			it, answered = Item{Value: kv.Value, Found: true, Version: kv.Version, Cached: true, Lease: l.deadline.Sub(now)}, true
		}
		return !answered
	})
	return it, answered
}
