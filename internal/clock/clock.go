// Package clock is the one clock interface of leased. The server, the client
// and the cache read time only through a Clock, so tests can drive lease time
// with a fake clock instead of sleeping.
//
// It wraps github.com/jonboulle/clockwork: Real is the system clock, and
// NewFake returns a clock whose Advance fires timers and whose BlockUntil
// waits until goroutines are parked on it.
package clock

import (
	"time"

	"github.com/jonboulle/clockwork"
)

// Clock tells time and makes timers. Every implementation is safe for
// concurrent use. Times it returns carry a monotonic reading where the
// implementation has one (Real does), so lease decisions never follow
// wall-clock steps.
type Clock = clockwork.Clock

// Timer is a timer made by a Clock.
type Timer = clockwork.Timer

// Fake is a clock that moves only when Advance is called. Advance fires the
// timers that fall due.
type Fake = clockwork.FakeClock

// Real returns the system clock.
func Real() Clock { return clockwork.NewRealClock() }

// NewFake returns a fake clock set to an arbitrary fixed instant.
func NewFake() *Fake {
	return clockwork.NewFakeClockAt(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}

// OrReal returns c, or the system clock when c is nil. Config structs use it
// so that a nil Clock field means real time.
func OrReal(c Clock) Clock {
	if c == nil {
		return Real()
	}
	return c
}
