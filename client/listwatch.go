package client

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
)

// ListWatch: the informer pattern of a prefix (DESIGN §17), list at a
// revision, watch from the next one, and list again when the watch falls
// behind the compaction of the history, so that no program writes that
// loop by hand.

// ListWatchUpdate is what ListWatch delivers.
type ListWatchUpdate struct {
	// Listed says that Snapshot holds every key under the prefix as of
	// Revision, in key order: the caller replaces what it holds with it.
	// The first update is one. Relisted says that this one follows a
	// watch that fell behind the compaction of the server's history: the
	// changes since the last update can no longer be told one by one.
	Listed, Relisted bool
	Snapshot         []KV
	// Events are the changes under the prefix after the last update, in
	// revision order, up to Revision.
	Events []WatchEvent
	// Revision is how far the updates have come: the state of the prefix
	// as of Revision is the last snapshot with every event after it
	// applied.
	Revision uint64
	// Err ends ListWatch: its context's error, a refusal by the server
	// (ErrPermissionDenied), or ErrClosed when the client closes.
	Err error
}

// ListWatch lists the keys under prefix and then watches them, and
// delivers on the returned channel a snapshot of the prefix, then its
// changes, each once and in order; whenever the watch falls behind the
// compaction of the server's history, it lists again and delivers a new
// snapshot (Relisted). A listing of many pages, read at several revisions,
// is made whole with the changes between them before it is delivered: the
// snapshot is the prefix as of one revision. Of opts, WithPrevValue and
// WithProgressNotify apply. The channel closes after an update with Err.
func (c *Client) ListWatch(ctx context.Context, prefix string, opts ...WatchOption) <-chan ListWatchUpdate {
	out := make(chan ListWatchUpdate)
	go c.listWatch(ctx, prefix, opts, out)
	return out
}

// listWatch is ListWatch's goroutine.
func (c *Client) listWatch(ctx context.Context, prefix string, opts []WatchOption, out chan<- ListWatchUpdate) {
	defer close(out)
	deliver := func(u ListWatchUpdate) bool {
		select {
		case out <- u:
			return true
		case <-ctx.Done():
			return false
		}
	}
	fail := func(err error) {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		deliver(ListWatchUpdate{Err: err})
	}
	relisted := false
	for {
		state, low, high, err := c.listAll(ctx, prefix)
		switch {
		case err == nil:
		case ctx.Err() == nil && errors.Is(err, ErrUnavailable):
			select {
			case <-time.After(100 * time.Millisecond):
				continue
			case <-ctx.Done():
				fail(ctx.Err())
				return
			}
		default:
			fail(err)
			return
		}
		wctx, cancel := context.WithCancel(ctx)
		w := c.Watch(wctx, prefix, append(slices.Clone(opts), WithPrefix(), FromRevision(low+1))...)
		// The changes from the oldest page's revision up to the newest's
		// make the listing whole: each sets its key's state, so that the
		// last of a key's changes up to high leaves it as it was at high,
		// whether its page read it before that change or after; a key
		// that none changed was the same on its page as at high.
		var after []WatchEvent // past high
		caught := high == low
		if !caught {
			w.RequestProgress()
		}
		ended := false
		for !caught && !ended {
			r, ok := <-w.C
			if !ok || r.Err != nil {
				ended = true
				err = r.Err
				break
			}
			for _, e := range r.Events {
				if e.Revision > high {
					after = append(after, e)
				} else {
					apply(state, e)
				}
			}
			caught = r.Revision >= high
		}
		if !ended {
			snap := make([]KV, 0, len(state))
			for _, kv := range state {
				snap = append(snap, kv)
			}
			slices.SortFunc(snap, func(a, b KV) int { return strings.Compare(a.Key, b.Key) })
			if !deliver(ListWatchUpdate{Listed: true, Relisted: relisted, Snapshot: snap, Revision: high}) {
				cancel()
				fail(ctx.Err())
				return
			}
			if len(after) > 0 && !deliver(ListWatchUpdate{Events: after, Revision: after[len(after)-1].Revision}) {
				cancel()
				fail(ctx.Err())
				return
			}
			for r := range w.C {
				if r.Err != nil {
					err = r.Err
					break
				}
				if !deliver(ListWatchUpdate{Events: r.Events, Revision: r.Revision}) {
					cancel()
					fail(ctx.Err())
					return
				}
			}
		}
		cancel()
		for range w.C {
		}
		if !errors.Is(err, ErrCompacted) || ctx.Err() != nil {
			fail(err)
			return
		}
		relisted = true
	}
}

// listAll lists every key under prefix, a page at a time, and returns them
// by key, with the oldest and the newest revision of the pages.
func (c *Client) listAll(ctx context.Context, prefix string) (state map[string]KV, low, high uint64, err error) {
	state = make(map[string]KV)
	var opts []ListOption
	for {
		r, err := c.List(ctx, prefix, opts...)
		if err != nil {
			return nil, 0, 0, err
		}
		if low == 0 {
			low = r.Revision
		}
		low, high = min(low, r.Revision), max(high, r.Revision)
		for _, kv := range r.KVs {
			state[kv.Key] = kv
		}
		if !r.More || len(r.KVs) == 0 {
			return state, low, high, nil
		}
		opts = []ListOption{StartAfter(r.KVs[len(r.KVs)-1].Key)}
	}
}

// apply applies e to state.
func apply(state map[string]KV, e WatchEvent) {
	if e.Type == WatchPut {
		state[e.Key] = KV{Key: e.Key, Value: e.Value, Version: e.Revision}
		return
	}
	delete(state, e.Key)
}
