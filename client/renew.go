package client

import (
	"context"
	"time"

	"github.com/leased/leased/cache"
	"github.com/leased/leased/protocol"
)

// maintain renews leases of entries read during their term, releases
// evicted entries in batches, and reports expired leases. It wakes every
// eighth of the shortest term granted so far, or of the server's default
// term.
func (c *Client) maintain() {
	defer c.wg.Done()
	var renew []*Entry
	var expired []string
	for {
		term := DefaultTermFallback
		if cn := c.cur.Load(); cn != nil && cn.hello.DefaultTerm > 0 {
			term = cn.hello.DefaultTerm
		}
		if m := time.Duration(c.minTerm.Load()); m > 0 && m < term {
			term = m // some keys have shorter terms (per-prefix terms)
		}
		select {
		case <-c.ctx.Done():
			return
		case <-c.clock.After(max(term/8, time.Millisecond)):
		}
		// A suspend of the machine is found here too, within a tick of
		// waking, and not only at the next cached read.
		now := c.checkedNow()
		horizon := now.Add(time.Duration(float64(term) * (1 - c.cfg.RenewFraction)))
		renew = c.cache.TakeRenewals(now, horizon, renew[:0])
		c.renew(renew, now, horizon)
		c.expireWriteLeases(c.clock.Now())
		c.flushReleases()
		if expired = c.cache.Expired(now, expired[:0]); len(expired) > 0 {
			c.emit(Event{Kind: EventLeasesExpired, Keys: append([]string(nil), expired...)})
		}
	}
}

// DefaultTermFallback paces the maintenance loop before a session tells
// the client the server's term.
const DefaultTermFallback = 10 * time.Second

// Entry is a cache entry, as handed to the renewal.
type Entry = cache.Entry

// renew extends, in batches, the leases of entries and of the write leases
// that fall due before horizon. A lease is extended from now, when the
// renewal was decided, and only if it has not run out by the time the reply
// comes.
func (c *Client) renew(entries []*Entry, now, horizon time.Time) {
	cn := c.cur.Load()
	if cn == nil {
		return
	}
	wls := c.writeLeasesDue(horizon)
	if len(entries) == 0 && len(wls) == 0 {
		return
	}
	keys := make([][]byte, 0, len(entries)+len(wls))
	for _, e := range entries {
		keys = append(keys, []byte(e.Key()))
	}
	for _, wl := range wls {
		keys = append(keys, []byte(wl.key))
	}
	ctx, cancel := context.WithTimeout(c.ctx, max(horizon.Sub(now), time.Second))
	defer cancel()
	first := 0
	for _, batch := range protocol.SplitKeys(keys, cn.batchLimit()) {
		m, err := cn.call(ctx, &protocol.Renew{Keys: batch})
		if err != nil {
			c.log.Debug("renewal failed", "keys", len(batch), "err", err)
			return
		}
		r, ok := m.(*protocol.RenewReply)
		if !ok || len(r.Terms) != len(batch) {
			c.log.Warn("bad renewal reply", "err", unexpected(m))
			return
		}
		at := c.clock.Now()
		for i, t := range r.Terms {
			if t <= 0 {
				continue
			}
			if n := first + i; n < len(entries) {
				c.cache.Extend(entries[n], at, now.Add(t))
			} else {
				wls[n-len(entries)].extend(at, now.Add(t))
			}
		}
		first += len(batch)
	}
}

// relinquish queues keys whose leases the client gives up, for the next
// batched release.
func (c *Client) relinquish(keys []string) {
	if len(keys) == 0 {
		return
	}
	c.rmu.Lock()
	c.toRelease = append(c.toRelease, keys...)
	c.rmu.Unlock()
}

// flushReleases relinquishes, in batches, the leases of evicted entries.
// A key that is cached again, or has a request in flight, keeps its lease:
// the release names a key, not a grant, so it would also end the lease of
// the newer answer. The releases go out under c.smu, so a read begun after
// the check reaches the server after the release.
func (c *Client) flushReleases() {
	c.rmu.Lock()
	queued := c.toRelease
	c.toRelease = nil
	c.rmu.Unlock()
	cn := c.cur.Load()
	if len(queued) == 0 || cn == nil {
		return
	}
	c.smu.Lock()
	keys := make([][]byte, 0, len(queued))
	seen := make(map[string]bool, len(queued))
	c.imu.Lock()
	for _, k := range queued {
		f := c.fetches[k] // ended but not yet dropped if n is 0 (see endFetch)
		if _, _, cached := c.cache.Peek(k); cached || (f != nil && f.n.Load() > 0) || seen[k] {
			continue
		}
		seen[k] = true
		keys = append(keys, []byte(k))
	}
	c.imu.Unlock()
	var calls []uint64
	var chans []chan protocol.Message
	for _, batch := range protocol.SplitKeys(keys, cn.batchLimit()) {
		id, ch, err := cn.start(&protocol.Release{Keys: batch})
		if err != nil {
			break
		}
		calls, chans = append(calls, id), append(chans, ch)
	}
	c.smu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	for i := range calls {
		if _, err := cn.await(ctx, calls[i], chans[i]); err != nil {
			c.log.Debug("release failed", "err", err)
		}
	}
}
