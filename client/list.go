package client

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/leased/leased/protocol"
)

// KV is one key of a listing: its value (none with KeysOnly) and version,
// the revision of its last change (etcd's mod_revision).
type KV struct {
	Key     string
	Value   []byte
	Version uint64
}

// ListResult is a page of a listing, in key order. Revision is the
// revision it was read at: every KV is as of it. More says that the range
// holds keys past the last one: StartAfter(that key) reads the next page.
type ListResult struct {
	KVs      []KV
	Revision uint64
	More     bool
	// Cached says that the listing came from the client's memory, under
	// a prefix lease (Leased), without a round trip.
	Cached bool
}

// ListOption changes what List and ListRange read.
type ListOption func(*protocol.List)

// Limit bounds the keys of a page to n; n <= 0 leaves the bound to the
// server, which bounds every page (server.MaxListKeys keys, and half its
// largest value in bytes) and says More when it stops before the end.
func Limit(n int) ListOption {
	return func(m *protocol.List) { m.Limit = uint32(min(max(n, 0), 1<<31)) }
}

// StartAfter skips the keys up to and including key: the last key of the
// page before. Pages read this way skip no key that exists throughout and
// repeat none, whatever is written between them; a key created or deleted
// meanwhile appears in the page that reads it, or not.
func StartAfter(key string) ListOption {
	return func(m *protocol.List) { m.After = []byte(key) }
}

// KeysOnly leaves the values out of the page: keys and versions only.
func KeysOnly() ListOption {
	return func(m *protocol.List) { m.KeysOnly = true }
}

// List reads the keys that begin with prefix, in key order, at one
// revision, linearizably: from the leader's applied state, as an uncached
// Get is. Without Leased, each call asks the server and leaves no lease;
// with it, the listing may be cached under a prefix lease, and a List that
// the cached listing answers is served from memory (ListResult.Cached). An
// empty prefix lists every key (under an access policy, the client needs
// the read right on every key the range may hold, or it fails with
// ErrPermissionDenied). While disconnected it fails with ErrUnavailable,
// unless a cached listing answers it.
func (c *Client) List(ctx context.Context, prefix string, opts ...ListOption) (ListResult, error) {
	return c.list(ctx, []byte(prefix), protocol.PrefixEnd([]byte(prefix)), opts)
}

// ListRange reads the keys k with start <= k < end, as List does; an empty
// end has no upper bound. A start past end fails with ErrInvalidArgument.
func (c *Client) ListRange(ctx context.Context, start, end string, opts ...ListOption) (ListResult, error) {
	if end != "" && start > end {
		return ListResult{}, fmt.Errorf("%w: range start %q is past its end %q", ErrInvalidArgument, start, end)
	}
	return c.list(ctx, []byte(start), []byte(end), opts)
}

func (c *Client) list(ctx context.Context, start, end []byte, opts []ListOption) (ListResult, error) {
	req := &protocol.List{Start: start, End: end}
	for _, o := range opts {
		o(req)
	}
	for _, k := range [][]byte{start, end, req.After} {
		if len(k) > protocol.MaxKeySize {
			return ListResult{}, fmt.Errorf("%w: key of %d bytes, limit %d", ErrTooLarge, len(k), protocol.MaxKeySize)
		}
	}
	prefix, leased := leasedPrefix(req)
	if leased {
		if r, ok := c.cachedListing(prefix, req); ok {
			return r, nil
		}
	} else {
		req.Lease = false // the server would grant none that the client could use
	}
	cn, err := c.conn()
	if err != nil {
		return ListResult{}, err
	}
	var f *fetch
	var old *listing // the copy whose revision req names (Known)
	c.smu.Lock()
	if leased {
		c.imu.Lock()
		f, old = c.beginListFetch(prefix, req)
		c.imu.Unlock()
	}
	sent := c.clock.Now()
	id, ch, err := cn.start(req)
	c.smu.Unlock()
	var m protocol.Message
	if err == nil {
		m, err = cn.await(ctx, id, ch)
	}
	r, ok := m.(*protocol.ListReply)
	switch {
	case err == nil && !ok:
		err = unexpected(m)
	case err == nil && r.Term > 0 && (!leased || r.More):
		err = fmt.Errorf("%w: a prefix lease on a listing the client did not ask one for, or an incomplete one", ErrProtocol)
	case err == nil && r.Unchanged && (old == nil || r.Term <= 0 || len(r.KVs) > 0 || r.Revision < old.revision):
		err = fmt.Errorf("%w: an unchanged answer for a listing at revision %d the client does not hold, or with keys or no lease", ErrProtocol, req.Known)
	}
	if err != nil {
		if leased {
			c.endListFetch(prefix, f, listing{}, time.Time{}, 0)
		}
		return ListResult{}, err
	}
	if r.Unchanged {
		// The copy is the listing as of r.Revision too: nothing under the
		// prefix changed in between.
		c.endListFetch(prefix, f, listing{kvs: old.kvs, revision: r.Revision, keysOnly: old.keysOnly}, sent.Add(r.Term), r.Term)
		return ListResult{KVs: old.result(req), Revision: r.Revision}, nil
	}
	out := ListResult{Revision: r.Revision, More: r.More, KVs: make([]KV, len(r.KVs))}
	// The keys become strings of one allocation, each a piece of it.
	n := 0
	for _, kv := range r.KVs {
		n += len(kv.Key)
	}
	var b strings.Builder
	b.Grow(n)
	for _, kv := range r.KVs {
		b.Write(kv.Key)
	}
	keys, at := b.String(), 0
	for i, kv := range r.KVs {
		out.KVs[i] = KV{Key: keys[at : at+len(kv.Key)], Value: kv.Value, Version: kv.Version}
		at += len(kv.Key)
	}
	if leased {
		c.endListFetch(prefix, f, listing{kvs: out.KVs, revision: out.Revision, keysOnly: req.KeysOnly}, sent.Add(r.Term), r.Term)
	}
	return out, nil
}
