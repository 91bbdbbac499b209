package core

import (
	"bytes"
	"fmt"
	"time"

	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/store"
)

// List reads the live keys of a range for session id, in key order, at
// one revision (DESIGN §3.8), and returns the term of the prefix lease it
// granted on the listing (DESIGN §3.9), 0 for none. It is linearizable as
// a Get is: the store holds every committed write, and this node shows it
// still leads the way a read does, by its lease horizon. A range that
// holds a key held for an earlier leader, or one that a write of unknown
// outcome may have changed, fails with ErrUnavailable, as a Get of that
// key does: the listing could miss or show a change the next leader
// decides. opts.Start > opts.End fails with ErrInvalidArgument.
//
// With lease, which says that opts is the whole range of the prefix
// opts.Start (its End the prefix's end), the listing is leased if the
// prefix may be leased
// (leasetable.Leasable), read from its start and whole (no More within
// opts' bounds), and the lease table grants the prefix a lease
// (leasetable.Table.GrantPrefix): as for Read, the lease is recorded
// before the listing is read, and a listing that turns out incomplete
// gives it back.
//
// With opts.Known, the revision of the caller's copy of the listing, a
// leased listing that nothing changed since (store.Range.Unchanged) is
// returned Unchanged, without its keys, under the lease: the caller's copy
// is the listing, as of the returned revision too (DESIGN §3.9). A listing
// not leased is read whole, whatever Known says.
func (c *Core) List(id SessionID, opts store.RangeOptions, lease bool) (store.Range, time.Duration, error) {
	c.readMu.RLock()
	defer c.readMu.RUnlock()
	if len(opts.End) > 0 && bytes.Compare(opts.Start, opts.End) > 0 {
		return store.Range{}, 0, fmt.Errorf("%w: range start %q is past its end %q", ErrInvalidArgument, opts.Start, opts.End)
	}
	if c.handingOff.Load() {
		return store.Range{}, 0, fmt.Errorf("%w: list %s: this node is handing the lead over", ErrUnavailable, rangeName(opts))
	}
	now := c.clock.Now()
	if k, until := c.heldIn(opts, now); k != "" {
		return store.Range{}, 0, fmt.Errorf("%w: list %s: a write of an earlier leader's term is settling on key %q until %v",
			ErrUnavailable, rangeName(opts), k, until.Format(time.RFC3339Nano))
	}
	prefix, leasable := leasedPrefix(opts, lease)
	term := time.Duration(0)
	if leasable {
		term = c.cfg.TermFor(prefix)
	}
	if (term > 0 || c.cfg.Replicated) && c.ensureHorizon(now) != nil {
		if c.cfg.Replicated && c.sinceStart(now) >= c.horizon.Load() {
			return store.Range{}, 0, fmt.Errorf("%w: list %s", ErrUnavailable, rangeName(opts))
		}
		term = 0 // served, but not cached
	}
	c.mu.Lock()
	for k := range c.doubt {
		if inRange([]byte(k), opts) && c.doubted(k) {
			c.mu.Unlock()
			return store.Range{}, 0, fmt.Errorf("%w: list %s: a write to key %q failed with an unknown outcome, which another node may decide",
				ErrUnavailable, rangeName(opts), k)
		}
	}
	if term > 0 && !c.handingOff.Load() {
		term = c.table.GrantPrefix(id, prefix, term, now)
	} else {
		term = 0
	}
	c.mu.Unlock()
	if term > 0 {
		c.poke()
	} else {
		opts.Known = 0 // only a leased listing is revalidated
	}
	r, err := c.store.Range(opts)
	if err != nil || (term > 0 && r.More) {
		if term > 0 {
			// Incomplete, or not read: the lease covers no listing.
			c.RelinquishPrefixes(id, []string{prefix})
			term = 0
		}
		if err != nil {
			return store.Range{}, 0, fmt.Errorf("%w: list %s: %v", ErrInternal, rangeName(opts), err)
		}
	}
	return r, term, nil
}

// leasedPrefix returns the prefix whose lease a List of opts asks for, if
// lease is set (the caller's word that opts is the whole range of the
// prefix opts.Start), opts reads it from its start, and the prefix may be
// leased.
func leasedPrefix(opts store.RangeOptions, lease bool) (string, bool) {
	if !lease || len(opts.After) > 0 {
		return "", false
	}
	p := string(opts.Start)
	return p, leasetable.Leasable(p)
}

// RelinquishPrefixes frees session id's prefix leases on prefixes: as the
// acknowledgement of their invalidations (DESIGN §3.9).
func (c *Core) RelinquishPrefixes(id SessionID, prefixes []string) {
	c.mu.Lock()
	eff := c.table.RelinquishPrefixes(id, prefixes, c.clock.Now())
	c.enqueueReady(eff)
	c.mu.Unlock()
	c.carryOut(eff)
}

// heldIn returns a key of the range that is held for an earlier leader
// at now, and until when, or "" if none is.
func (c *Core) heldIn(opts store.RangeOptions, now time.Time) (string, time.Time) {
	for k, until := range c.held {
		if now.Before(until) && inRange([]byte(k), opts) {
			return k, until
		}
	}
	return "", time.Time{}
}

// inRange reports whether key lies in the range opts reads: from Start
// (or past After) to End.
func inRange(key []byte, opts store.RangeOptions) bool {
	if bytes.Compare(key, opts.Start) < 0 || len(opts.End) > 0 && bytes.Compare(key, opts.End) >= 0 {
		return false
	}
	return len(opts.After) == 0 || bytes.Compare(key, opts.After) > 0
}

// rangeName names a range in messages: [start, end), or [start, ...) with
// no end.
func rangeName(opts store.RangeOptions) string {
	if len(opts.End) == 0 {
		return fmt.Sprintf("[%q, ...)", opts.Start)
	}
	return fmt.Sprintf("[%q, %q)", opts.Start, opts.End)
}
