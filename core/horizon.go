package core

import (
	"fmt"
	"time"

	"github.com/leased/leased/store"
)

// The lease horizon (DESIGN §7): a wall-clock time after which no lease
// this run granted can be live. The core persists it, through the store,
// before it grants a lease that would outlive it, in steps of HorizonStep
// past the longest lease, and mostly ahead of time (horizonLoop), so that a
// grant seldom waits for it. After a crash, writes wait until the horizon
// the earlier run left has passed: the write barrier.

// restore reads what an earlier run left in the store: the horizon, whose
// remaining part becomes the write barrier, and the write leases, which
// live until the barrier (their holders may have renewed them up to it).
// Write leases whose barrier has passed already are ended in the store.
func (c *Core) restore() error {
	st, err := c.store.State()
	if err != nil {
		return fmt.Errorf("core: read the stored state: %w", err)
	}
	c.started = c.clock.Now()
	c.revision.Store(st.Revision)
	held := c.holdInherited()
	if st.HandedOff && !st.HorizonApplied.IsZero() {
		if err := c.restoreHandoff(st); err != nil {
			return err
		}
		c.holdWrites(held)
		return nil
	}
	var hold time.Duration
	switch {
	case c.cfg.UnsafeSkipHorizonWait:
		c.log.Warn("unsafe: not waiting for the leases an earlier run or leader may have granted")
	case !st.HorizonApplied.IsZero():
		// A replica that applied the horizon entry while it ran: the
		// leader that appended it granted no lease past its span from
		// then, and this node applied it later. ε covers the drift of the
		// two clocks over the span (DESIGN §13).
		hold = max(st.HorizonApplied.Add(st.Span+c.cfg.Epsilon).Sub(c.started), 0)
		// A node running alone recorded its horizons with no clock name
		// before it had one: they are its own too.
		own := st.HorizonBy == c.cfg.Clockname || (!c.cfg.Replicated && st.HorizonBy == "")
		if c.cfg.Clockname != "" && own {
			// This node recorded the horizon itself, on this clock,
			// perhaps before a restart that applied it again: the
			// wall clock bounds its leases as well, and it does not
			// count the time the node was down.
			hold = min(hold, wallHold(st.Horizon, st.Span, c.started))
		}
	case !st.Horizon.IsZero():
		hold = wallHold(st.Horizon, st.Span, c.started)
	}
	if hold > 0 {
		// The old horizon holds writes back, but grants no lease here:
		// this run grants only under horizons it persisted itself, which
		// every later leader learns of before it writes (DESIGN §13).
		barrier := c.started.Add(hold)
		c.log.Info("restarted: holding writes until leases granted before the restart have expired",
			"wait", hold, "write_leases", len(st.WriteLeases))
		for _, wl := range st.WriteLeases {
			c.table.RestoreWriteLease(wl.Key, wl.Token, wl.Client, barrier)
		}
		c.holdWrites(maxTime(barrier, held))
		return nil
	}
	c.holdWrites(held)
	if len(st.WriteLeases) == 0 {
		return nil
	}
	ends := make([]store.Command, len(st.WriteLeases))
	for i, wl := range st.WriteLeases {
		ends[i] = store.Command{Op: store.OpEndWriteLease, Key: []byte(wl.Key), Token: wl.Token}
	}
	if _, err := c.store.Apply(ends); err != nil {
		return fmt.Errorf("core: end the expired write leases of an earlier run: %w", err)
	}
	return nil
}

// holdInherited sets the reads held of the keys of Config.Inherited whose
// bound, plus ε, has not passed at the start, and returns when the last of
// them is released (zero if none is held).
func (c *Core) holdInherited() time.Time {
	if c.cfg.UnsafeSkipHorizonWait {
		return time.Time{}
	}
	var last time.Time
	for k, bound := range c.cfg.Inherited {
		until := bound.Add(c.cfg.Epsilon)
		if !until.After(c.started) {
			continue
		}
		if c.held == nil {
			c.held = make(map[string]time.Time)
		}
		c.held[k] = until
		last = maxTime(last, until)
	}
	if len(c.held) > 0 {
		c.log.Info("holding reads of keys an earlier leader was writing", "keys", len(c.held), "wait", last.Sub(c.started))
	}
	return last
}

// holdWrites holds every write until barrier, if it is after the start:
// the write barrier.
func (c *Core) holdWrites(barrier time.Time) {
	if !barrier.After(c.started) {
		return
	}
	c.barrier = barrier
	c.table.SetWriteBarrier(barrier)
}

// wallHold is how long writes wait at now for horizon h, written span
// before it, on this node's wall clock after a restart: bounded by span, so
// that a wall clock that stepped back cannot stretch it.
func wallHold(h time.Time, span time.Duration, now time.Time) time.Duration {
	return max(min(h.Sub(now), span), 0)
}

// ensureHorizon makes sure that the persisted lease horizon covers every
// lease granted at now. It persists a new horizon only when one could
// outlive the current one, which a background move ahead (horizonLoop)
// normally prevents: the usual cost is one atomic load. Callers call it
// before they grant or extend a lease at now, and grant none if it fails.
func (c *Core) ensureHorizon(now time.Time) error {
	need := now.Add(c.life).UnixNano()
	h := c.horizon.Load()
	if need <= h {
		if h-need < int64(c.cfg.HorizonStep/2) {
			select {
			case c.horizonKick <- struct{}{}:
			default:
			}
		}
		return nil
	}
	return c.advanceHorizon(now, 0)
}

// advanceHorizon persists a horizon a full step past the longest lease
// granted at now, unless the current one already covers such a lease and
// ahead more. The new horizon also covers the leases of an earlier run
// (the barrier), which a shorter term could otherwise leave out.
func (c *Core) advanceHorizon(now time.Time, ahead time.Duration) error {
	c.horizonMu.Lock()
	defer c.horizonMu.Unlock()
	if now.Add(c.life+ahead).UnixNano() <= c.horizon.Load() {
		return nil
	}
	if c.handingOff.Load() {
		return fmt.Errorf("%w: the leases are being handed over to the next leader", ErrUnavailable)
	}
	h := now.Add(c.life + c.cfg.HorizonStep)
	if cover := maxTime(c.barrier, c.inherited); cover.After(h) {
		h = now.Add(cover.Sub(now)) // on the monotonic clock, as in lowerHorizon
	}
	if err := c.setHorizon(h, now); err != nil {
		return fmt.Errorf("persist the lease horizon: %w", err)
	}
	c.horizon.Store(h.UnixNano())
	return nil
}

// setHorizon persists horizon h, written at now.
func (c *Core) setHorizon(h, now time.Time) error {
	_, err := c.apply([]store.Command{{Op: store.OpSetHorizon, Key: []byte(c.cfg.Clockname), Horizon: h, Span: max(h.Sub(now), 0)}})
	return err
}

// horizonLoop moves the horizon ahead when leases granted near it ask, so
// that grants seldom wait for it to be persisted.
func (c *Core) horizonLoop() {
	defer c.loops.Done()
	for {
		select {
		case <-c.queue.closed:
			return
		case <-c.horizonKick:
			c.advanceHorizon(c.clock.Now(), c.cfg.HorizonStep/2)
		}
	}
}

// lowerHorizon persists, once no lease can be granted any more, the
// earliest horizon that still covers every live lease: the latest expiry in
// the table, or the bound of an earlier run's leases (the barrier). When
// every holder relinquished its leases, the next run does not hold writes
// at all. Close calls it, after the core's loops have ended.
func (c *Core) lowerHorizon() error {
	c.horizonMu.Lock()
	defer c.horizonMu.Unlock()
	now := c.clock.Now()
	c.mu.Lock()
	latest := c.table.LatestExpiry()
	c.mu.Unlock()
	if c.barrier.After(latest) {
		latest = c.barrier
	}
	// Measured on the monotonic clock from now: the wall clock may have
	// stepped since the lease was granted.
	h := now.Add(max(latest.Sub(now), 0))
	if c.horizon.Load() == 0 || h.UnixNano() >= c.horizon.Load() {
		return nil
	}
	if err := c.setHorizon(h, now); err != nil {
		return err
	}
	c.horizon.Store(h.UnixNano())
	return nil
}
