package client_test

import (
	"sync"
	"time"

	"github.com/leased/leased/internal/clock"
)

// suspendClock is the clock of a machine that a test suspends: while the
// machine sleeps its Now stands still, as the monotonic clock of a
// suspended machine does, and once it wakes Now runs on from there, behind
// its base clock by the time it slept; its boot clock (ReadBoot, so that
// the client compares the two as it does CLOCK_BOOTTIME and the monotonic
// clock) follows the base clock throughout. The client's goroutines go on
// meanwhile, unlike a suspended machine's: the test decides what they may
// do (the histories pause the client's packets too). Timers are the base
// clock's. It is safe for concurrent use.
type suspendClock struct {
	clock.Clock // the base clock: timers, and the boot clock
	start       time.Time

	mu     sync.Mutex    // guards asleep, since and ahead
	asleep time.Duration // the time slept in earlier suspends
	since  time.Time     // base time at which the current suspend began; zero while awake
	ahead  time.Duration // the boot clock's lead on the base clock, from sleep
}

// newSuspendClock returns an awake suspendClock over base (nil: the
// system clock).
func newSuspendClock(base clock.Clock) *suspendClock {
	base = clock.OrReal(base)
	return &suspendClock{Clock: base, start: base.Now()}
}

// Now returns the base clock's time, less the time slept; while asleep,
// the time at which the suspend began.
func (s *suspendClock) Now() time.Time {
	now := s.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.since.IsZero() {
		now = s.since
	}
	return now.Add(-s.asleep)
}

func (s *suspendClock) Since(t time.Time) time.Duration { return s.Now().Sub(t) }

func (s *suspendClock) Until(t time.Time) time.Duration { return t.Sub(s.Now()) }

// ReadBoot returns the time since the clock was made on the base clock,
// which counts the suspends, and the time slept in sleep.
func (s *suspendClock) ReadBoot() (string, time.Duration, bool) {
	since := s.Clock.Now().Sub(s.start)
	s.mu.Lock()
	defer s.mu.Unlock()
	return "suspend-clock", since + s.ahead, true
}

// suspend puts the machine to sleep until resume.
func (s *suspendClock) suspend() {
	s.mu.Lock()
	if s.since.IsZero() {
		s.since = s.Clock.Now()
	}
	s.mu.Unlock()
}

// resume wakes the machine, and returns how long it slept.
func (s *suspendClock) resume() time.Duration {
	now := s.Clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.since.IsZero() {
		return 0
	}
	d := now.Sub(s.since)
	s.asleep += d
	s.since = time.Time{}
	return d
}

// sleep has the machine sleep for d in no time of the base clock: the
// boot clock jumps d ahead, and Now does not move, as after a suspend of d
// as seen by a goroutine that did not run meanwhile.
func (s *suspendClock) sleep(d time.Duration) {
	s.mu.Lock()
	s.ahead += d
	s.mu.Unlock()
}

// blindClock hides the boot clock of the clock it wraps: a client on it
// has nothing to compare its clock with, and notices no suspend. It is the
// negative control of the suspend check.
type blindClock struct{ clock.Clock }
