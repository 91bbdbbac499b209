package netfault

import (
	"math"
	"sync"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leased/leased/internal/clock"
)

// Drift returns a clock that runs at rate times the speed of base (rate
// 0.9: 10% slow; 1.1: 10% fast). Its Now starts equal to base.Now() at the
// call. Durations passed to timers, tickers, After, Sleep and AfterFunc are
// measured on the drifting clock, so a timer of d fires after d/rate of base
// time, rounded up to the nanosecond. Since and Until measure on the
// drifting clock. Times it returns keep base's monotonic reading when base
// has one, so comparisons between them stay monotonic.
//
// Tests use it to give one server or client a clock that runs fast or slow
// against the others'.
//
// Timers and tickers of the drifting clock are base.AfterFunc timers, so
// each counts as one waiter of a fake base. They send the drifting clock's
// Now from the callback's goroutine, so with a fake base a value arrives
// shortly after the Advance that fires it, not during it, and a ticker
// schedules its next tick only then: wait for the value, and for the ticker
// to be a waiter again (BlockUntilContext), before the next Advance. As for
// time.Timer since Go 1.23, no stale value is received from a timer or
// ticker after Stop or Reset returns.
//
// Drift panics unless rate is positive and finite. The clock is safe for
// concurrent use, as base must be.
func Drift(base clock.Clock, rate float64) clock.Clock {
	if !(rate > 0) || math.IsInf(rate, 1) {
		panic("netfault: Drift rate must be positive and finite")
	}
	return &driftClock{base: base, rate: rate, start: base.Now()}
}

// driftClock is the clock Drift returns.
type driftClock struct {
	base  clock.Clock
	rate  float64
	start time.Time // base.Now() when the clock was made; both clocks read it then
}

func (c *driftClock) Now() time.Time { return c.at(c.base.Now()) }

func (c *driftClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *driftClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

func (c *driftClock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).Chan() }

func (c *driftClock) Sleep(d time.Duration) { <-c.After(d) }

func (c *driftClock) NewTimer(d time.Duration) clockwork.Timer {
	t := &driftTimer{c: c, ch: make(chan time.Time, 1)}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.armLocked(d)
	return t
}

func (c *driftClock) AfterFunc(d time.Duration, f func()) clockwork.Timer {
	return &funcTimer{c: c, t: c.base.AfterFunc(c.toBase(d), f)}
}

// NewTicker panics if d is not positive, as time.NewTicker does.
func (c *driftClock) NewTicker(d time.Duration) clockwork.Ticker {
	if d <= 0 {
		panic("netfault: non-positive interval for NewTicker")
	}
	t := &driftTicker{c: c, ch: make(chan time.Time, 1)}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.armLocked(d)
	return t
}

// at returns the drifting clock's reading when base reads b.
func (c *driftClock) at(b time.Time) time.Time {
	return c.start.Add(ceilDuration(float64(b.Sub(c.start)) * c.rate))
}

// toBase returns how long base takes to move d of drifting time.
func (c *driftClock) toBase(d time.Duration) time.Duration {
	return ceilDuration(float64(d) / c.rate)
}

// ceilDuration returns x nanoseconds rounded up, within the range of
// time.Duration.
func ceilDuration(x float64) time.Duration {
	x = math.Ceil(x)
	switch {
	case x >= math.MaxInt64:
		return math.MaxInt64
	case x <= math.MinInt64:
		return math.MinInt64
	}
	return time.Duration(x)
}

// driftTimer is a timer of a driftClock. Each arming is a new base
// AfterFunc timer tagged with a generation, so that a base timer that fires
// while it is being stopped or reset sends nothing.
type driftTimer struct {
	c  *driftClock
	ch chan time.Time

	mu   sync.Mutex // protects the fields below and sends on ch
	gen  uint64
	base clockwork.Timer
}

func (t *driftTimer) Chan() <-chan time.Time { return t.ch }

func (t *driftTimer) Stop() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopLocked()
}

func (t *driftTimer) Reset(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	active := t.stopLocked()
	t.armLocked(d)
	return active
}

// stopLocked stops the base timer and drains ch. The caller holds t.mu.
func (t *driftTimer) stopLocked() bool {
	t.gen++
	active := t.base.Stop()
	select {
	case <-t.ch:
	default:
	}
	return active
}

// armLocked starts a base timer that sends on ch after d of drifting time.
// The caller holds t.mu.
func (t *driftTimer) armLocked(d time.Duration) {
	t.gen++
	gen := t.gen
	t.base = t.c.base.AfterFunc(t.c.toBase(d), func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if gen != t.gen {
			return // stopped or reset meanwhile
		}
		select {
		case t.ch <- t.c.Now():
		default:
		}
	})
}

// funcTimer is a timer of a driftClock made by AfterFunc: the base timer,
// with Reset scaled.
type funcTimer struct {
	c *driftClock
	t clockwork.Timer
}

func (t *funcTimer) Chan() <-chan time.Time     { return t.t.Chan() }
func (t *funcTimer) Stop() bool                 { return t.t.Stop() }
func (t *funcTimer) Reset(d time.Duration) bool { return t.t.Reset(t.c.toBase(d)) }

// driftTicker is a ticker of a driftClock: a base AfterFunc timer that
// sends a tick and rearms itself for the next multiple of the period,
// dropping ticks it is late for as time.Ticker does.
type driftTicker struct {
	c  *driftClock
	ch chan time.Time

	mu     sync.Mutex // protects the fields below and sends on ch
	gen    uint64
	period time.Duration // in base time
	next   time.Time     // base time of the next tick
	base   clockwork.Timer
}

func (t *driftTicker) Chan() <-chan time.Time { return t.ch }

func (t *driftTicker) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopLocked()
}

// Reset panics if d is not positive, as time.Ticker.Reset does.
func (t *driftTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("netfault: non-positive interval for Ticker.Reset")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopLocked()
	t.armLocked(d)
}

// stopLocked stops the base timer and drains ch. The caller holds t.mu.
func (t *driftTicker) stopLocked() {
	t.gen++
	t.base.Stop()
	select {
	case <-t.ch:
	default:
	}
}

// armLocked starts ticking every d of drifting time. The caller holds t.mu.
func (t *driftTicker) armLocked(d time.Duration) {
	t.gen++
	gen := t.gen
	t.period = max(t.c.toBase(d), 1)
	t.next = t.c.base.Now().Add(t.period)
	t.base = t.c.base.AfterFunc(t.period, func() { t.tick(gen) })
}

// tick sends a tick, unless the ticker was stopped or reset since arming
// gen, and arms the base timer for the next one.
func (t *driftTicker) tick(gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if gen != t.gen {
		return
	}
	now := t.c.base.Now()
	select {
	case t.ch <- t.c.at(now):
	default:
	}
	t.next = t.next.Add(t.period)
	if late := now.Sub(t.next); late >= 0 {
		t.next = t.next.Add((late/t.period + 1) * t.period)
	}
	t.base.Reset(t.next.Sub(now))
}
