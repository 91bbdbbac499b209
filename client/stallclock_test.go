package client_test

import (
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/leased/leased/internal/clock"
)

// stallClock is the system clock, except that a test can hold the
// goroutines of a Client at one exact point of its code: the clock reads
// of one function of package client. The client reads its clock where the
// order of events matters (when a request is sent, when its answer
// arrives, when an invalidation's entries are dropped), so a test can
// stop a goroutine there, make something else happen meanwhile, and let
// it go on. Faults come in through Config.Clock, the interface every
// client has, and the production code holds no test hook.
//
// Times are the system clock's: a stalled read returns the time at which
// it was let go, as a slow goroutine would see it.
type stallClock struct {
	clock.Clock
	at string // the function whose reads stall, as runtime names it

	mu    sync.Mutex // guards stall
	stall func()     // run by each read at the point; nil: none
}

// newStallClock returns a clock whose reads by fn, a function of package
// client such as "(*Client).invalidate", can be made to stall (see
// stallWith). Reads through (*Client).monoNow count as reads by its caller.
func newStallClock(fn string) *stallClock {
	return &stallClock{Clock: clock.Real(), at: "github.com/leased/leased/client." + fn}
}

// stallWith makes every later read at the clock's point run f first, in
// the reading goroutine, which goes on when f returns. f decides which
// reads to hold and for how long; it must not read the clock at the same
// point itself.
func (s *stallClock) stallWith(f func()) {
	s.mu.Lock()
	s.stall = f
	s.mu.Unlock()
}

// Now reads the system clock, after running the stall function if the
// caller is the clock's point.
func (s *stallClock) Now() time.Time {
	s.mu.Lock()
	f := s.stall
	s.mu.Unlock()
	if f != nil && s.readAtPoint() {
		f()
	}
	return s.Clock.Now()
}

// readAtPoint reports whether Now was called by the clock's function, or
// by monoNow called by it, through the Now of a test's clock that wraps
// this one (a suspendClock) or not.
func (s *stallClock) readAtPoint() bool {
	var pcs [8]uintptr
	n := runtime.Callers(3, pcs[:]) // skip Callers, readAtPoint and Now
	frames := runtime.CallersFrames(pcs[:n])
	for {
		fr, more := frames.Next()
		if !strings.HasSuffix(fr.Function, ".(*Client).monoNow") && fr.Function != "github.com/leased/leased/client_test.(*suspendClock).Now" {
			return fr.Function == s.at
		}
		if !more {
			return false
		}
	}
}
