package core

import (
	"bytes"
	"fmt"
	"time"

	"github.com/leased/leased/store"
)

// List reads the live keys of a range for session id, in key order, at
// one revision (DESIGN §3.8). It grants no lease: the answer is served
// with term 0, as a Get of a write-pending key is, and is linearizable as
// a Get is: the store holds every committed write, and this node shows it
// still leads the way a read does, by its lease horizon. A range that
// holds a key held for an earlier leader, or one that a write of unknown
// outcome may have changed, fails with ErrUnavailable, as a Get of that
// key does: the listing could miss or show a change the next leader
// decides. opts.Start > opts.End fails with ErrInvalidArgument.
func (c *Core) List(id SessionID, opts store.RangeOptions) (store.Range, error) {
	c.readMu.RLock()
	defer c.readMu.RUnlock()
	if len(opts.End) > 0 && bytes.Compare(opts.Start, opts.End) > 0 {
		return store.Range{}, fmt.Errorf("%w: range start %q is past its end %q", ErrInvalidArgument, opts.Start, opts.End)
	}
	if c.handingOff.Load() {
		return store.Range{}, fmt.Errorf("%w: list %s: this node is handing the lead over", ErrUnavailable, rangeName(opts))
	}
	now := c.clock.Now()
	if k, until := c.heldIn(opts, now); k != "" {
		return store.Range{}, fmt.Errorf("%w: list %s: a write of an earlier leader's term is settling on key %q until %v",
			ErrUnavailable, rangeName(opts), k, until.Format(time.RFC3339Nano))
	}
	if c.cfg.Replicated && c.ensureHorizon(now) != nil && c.sinceStart(now) >= c.horizon.Load() {
		return store.Range{}, fmt.Errorf("%w: list %s", ErrUnavailable, rangeName(opts))
	}
	c.mu.Lock()
	for k := range c.doubt {
		if inRange([]byte(k), opts) && c.doubted(k) {
			c.mu.Unlock()
			return store.Range{}, fmt.Errorf("%w: list %s: a write to key %q failed with an unknown outcome, which another node may decide",
				ErrUnavailable, rangeName(opts), k)
		}
	}
	c.mu.Unlock()
	r, err := c.store.Range(opts)
	if err != nil {
		return store.Range{}, fmt.Errorf("%w: list %s: %v", ErrInternal, rangeName(opts), err)
	}
	return r, nil
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
