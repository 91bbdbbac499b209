package clock

import (
	"sync"
	"sync/atomic"
	"time"
)

// SuspendWatch notices that the machine was suspended (a laptop asleep, a
// virtual machine's guest suspended): Go's monotonic clock, on which
// leases are counted, stops while the machine sleeps (golang/go#24595),
// and the boot clock does not. The watch compares the two against a mark,
// and when they drift apart by more than a slack, which adds up the
// suspends since the mark, it calls its lost function and marks again.
// The client checks before it serves a cached read (DESIGN §8).
//
// The boot clock is read by a system call, which costs about 1.5 µs on a
// virtual machine, far more than a cached read. On the system clock, Check
// therefore first compares the wall clock with the monotonic clock, both
// read by the caller's one time.Now: a suspend moves the wall clock ahead
// of the monotonic clock by its length, as it moves the boot clock. The
// boot clock is read only when the wall clock has moved by more than the
// slack against the monotonic clock, forward (a suspend, or a step of the
// wall clock, which the boot clock tells apart) or back (a step, after
// which the comparison is based anew), and at most a slack of monotonic
// time after its last reading otherwise. Where the boot clock cannot be
// read (not Linux), the wall clock alone decides, and a step forward
// counts as a suspend.
//
// A SuspendWatch is safe for concurrent use. Check runs lost under the
// watch's lock, which is taken before any lock lost takes.
type SuspendWatch struct {
	sys  bool  // readings come from the system clock, whose wall reading moves with a suspend
	clk  Clock // the clock of the readings, when not sys
	boot Boot  // nil: none
	lost func(asleep time.Duration)

	base     time.Time // a reading of the clock at New, from which readings count
	baseWall int64     // base's wall reading, in ns since the Unix epoch (sys)

	// read returns a fresh reading: the monotonic time since base, and
	// the wall clock's lead on it (sys; 0 otherwise), in ns. Tests of
	// the package replace it.
	read func() (mono, skew int64)

	// wallRef is the wall clock's lead on the monotonic clock expected
	// of a reading that shows no suspend since the mark, in ns; nextBoot
	// is the monotonic time since base, in ns, from which Check reads the
	// boot clock whatever the wall clock shows. Both are for the fast
	// path of the system clock, read without mu.
	wallRef  atomic.Int64
	nextBoot atomic.Int64

	mu sync.Mutex // serialises the boot clock's readings and lost; guards the fields below
	// bootRef is the boot clock's lead on the monotonic clock at the
	// mark; skewRef the wall clock's, where no boot clock can be read.
	bootRef time.Duration
	skewRef int64
}

// NewSuspendWatch returns a watch marked now, which calls lost with how
// long the machine slept whenever Check finds it was suspended for longer
// than the slack since the last mark. c is the clock of the readings given
// to Check, nil for the system clock; b is its boot clock, nil for none.
// On the system clock, a nil b means RealBoot. On another clock, a nil b
// means the watch notices nothing, and Check never calls lost: fake and
// drifting clocks in tests have no boot clock to compare with. Nor has the
// system clock inside a testing/synctest bubble, whose readings carry no
// monotonic reading: a watch made there notices nothing either.
func NewSuspendWatch(c Clock, b Boot, lost func(asleep time.Duration)) *SuspendWatch {
	w := &SuspendWatch{sys: c == nil, clk: c, boot: b, lost: lost}
	if w.sys {
		w.boot = OrRealBoot(b)
		w.base = time.Now()
		w.baseWall = w.base.UnixNano()
		w.read = w.readSystem
		if w.base == w.base.Round(0) {
			// No monotonic reading: time is a testing/synctest
			// bubble's, which has nothing to do with the boot clock.
			w.sys, w.boot = false, nil
		}
	} else {
		w.base = c.Now()
		w.read = w.readClock
	}
	w.mu.Lock()
	w.markLocked(0)
	w.mu.Unlock()
	return w
}

// readSystem reads the system clock once.
func (w *SuspendWatch) readSystem() (mono, skew int64) {
	return w.split(time.Now())
}

// readClock reads the watch's clock, which tells no wall time apart.
func (w *SuspendWatch) readClock() (mono, skew int64) {
	return int64(w.clk.Now().Sub(w.base)), 0
}

// split returns now's monotonic time since base, and its wall clock's lead
// on it, in ns. now must come from time.Now.
func (w *SuspendWatch) split(now time.Time) (mono, skew int64) {
	mono = int64(now.Sub(w.base))
	return mono, now.UnixNano() - w.baseWall - mono
}

// Check makes sure, before a cached read is served, that the machine was
// not suspended for longer than slack in all since the mark: if it was, it
// calls lost, marks, and returns true, and otherwise returns false. A
// Check that runs while lost does waits for it, so no Check returns false
// on a suspend that lost has not yet handled. now is the caller's reading
// of the watch's clock, from which it serves the read: on the system
// clock it must come from time.Now, and Check reads no other clock unless
// the wall clock moved against the monotonic one by more than slack, or
// the boot clock was last read over slack ago. Any goroutine may call it,
// holding none of the locks lost takes.
func (w *SuspendWatch) Check(now time.Time, slack time.Duration) bool {
	if w.boot == nil && !w.sys {
		return false
	}
	if w.sys {
		mono, skew := w.split(now)
		return w.checkAt(mono, skew, slack)
	}
	return w.confirm(slack)
}

// checkAt is Check of a reading of the system clock at mono, whose wall
// clock leads by skew.
func (w *SuspendWatch) checkAt(mono, skew int64, slack time.Duration) bool {
	if w.passes(mono, skew, slack) {
		return false
	}
	return w.confirm(slack)
}

// passes reports whether the fast path lets a reading of the system clock
// at mono, whose wall clock leads by skew, pass without reading the boot
// clock.
func (w *SuspendWatch) passes(mono, skew int64, slack time.Duration) bool {
	d := skew - w.wallRef.Load()
	return -int64(slack) <= d && d <= int64(slack) && mono < w.nextBoot.Load()
}

// confirm reads the boot clock, and handles a suspend of over slack since
// the mark: the slow path of Check.
func (w *SuspendWatch) confirm(slack time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	asleep := w.asleepLocked(slack)
	if asleep <= slack {
		return false
	}
	if w.lost != nil {
		w.lost(asleep)
	}
	w.markLocked(slack)
	return true
}

// bootTries bounds how many times readBoot reads the clocks again when
// the reading goroutine was held up between its readings.
const bootTries = 8

// bootReading is the boot clock read between two readings of the
// monotonic one, at mono and mono+gap (ns), with the wall clock's lead skew
// at the first. The boot clock's lead on the monotonic clock lies between
// boot-(mono+gap) and boot-mono: a suspend in between stops the monotonic
// clock, so only time in which the goroutine ran, or waited to run, at
// most gap, can lie between the readings.
type bootReading struct {
	mono, skew, gap int64
	boot            time.Duration
}

// readBoot reads the boot clock between two readings of the monotonic
// one, again while the goroutine was held up between them for more than a
// quarter of slack (a loaded machine), up to bootTries times, and returns
// the reading with the smallest gap; ok is false if the boot clock cannot
// be read. w.mu must be held.
func (w *SuspendWatch) readBoot(slack time.Duration) (best bootReading, ok bool) {
	for try := range bootTries {
		mono, skew := w.read()
		_, boot, ok := w.boot.ReadBoot()
		if !ok {
			return bootReading{mono: mono, skew: skew}, false
		}
		again, _ := w.read()
		r := bootReading{mono: mono, skew: skew, gap: again - mono, boot: boot}
		if try == 0 || r.gap < best.gap {
			best = r
		}
		if best.gap <= int64(slack)/4 {
			break
		}
	}
	return best, true
}

// asleepLocked measures how long the machine slept since the mark, from
// fresh readings, and sets the references of the fast path for them. It
// takes the boot clock's lead at its largest (against the first monotonic
// reading), so that a suspend is never measured short; a goroutine held up
// between its readings reads again (readBoot), so that it does not
// mistake the delay for a suspend. w.mu must be held.
func (w *SuspendWatch) asleepLocked(slack time.Duration) time.Duration {
	r, ok := w.readBoot(slack)
	if !ok {
		// No boot clock: the wall clock decides. A step back is taken
		// as the new reference, so that it hides no later suspend.
		d := r.skew - w.skewRef
		if d < 0 {
			w.skewRef, d = r.skew, 0
		}
		w.setFast(r.mono, r.skew-d, slack)
		return time.Duration(d)
	}
	asleep := r.boot - time.Duration(r.mono) - w.bootRef
	w.setFast(r.mono, r.skew-int64(asleep), slack)
	return asleep
}

// setFast sets the references of the fast path after a reading at mono
// whose wall clock leads by skew, of which ref is not suspend. w.mu must
// be held.
func (w *SuspendWatch) setFast(mono, ref int64, slack time.Duration) {
	w.wallRef.Store(ref)
	w.nextBoot.Store(mono + int64(slack))
}

// markLocked marks now: suspends are counted from here, and the boot clock
// is next read a slack later. w.mu must be held.
//
// The reference is the boot clock's lead at its smallest (against the
// second monotonic reading of readBoot), so that a delay between the
// readings makes later measures longer than the true sleep, never
// shorter; readBoot keeps that delay small on a loaded machine, so that
// it does not make every later measure a false suspend.
func (w *SuspendWatch) markLocked(slack time.Duration) {
	if w.boot == nil {
		mono, skew := w.read()
		w.skewRef = skew
		w.setFast(mono, skew, slack)
		return
	}
	r, ok := w.readBoot(slack)
	if ok {
		w.bootRef = r.boot - time.Duration(r.mono+r.gap)
	}
	w.skewRef = r.skew
	w.setFast(r.mono, r.skew, slack)
}
