package clock

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeMachine is the clocks of a machine for the tests of SuspendWatch on
// the system clock, in ns: the monotonic clock, the wall clock and the
// boot clock, which a test moves together (time passing), or the wall and
// boot clocks alone (a suspend), or the wall clock alone (a step).
type fakeMachine struct {
	mu               sync.Mutex // guards every field
	mono, wall, boot int64
	noBoot           bool  // ReadBoot is not ok, as off Linux
	hold             int64 // time that passes right after the next monotonic reading, as for a goroutine held up there
	holdFor          int   // how many monotonic readings in a row hold follows (0 or 1: the next one)
	bootReads        int
}

func (m *fakeMachine) read() (mono, skew int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	mono, skew = m.mono, m.wall-m.mono
	m.mono, m.wall, m.boot = m.mono+m.hold, m.wall+m.hold, m.boot+m.hold
	if m.holdFor--; m.holdFor <= 0 {
		m.hold, m.holdFor = 0, 0
	}
	return mono, skew
}

func (m *fakeMachine) ReadBoot() (string, time.Duration, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.bootReads++
	return "fake", time.Duration(m.boot), !m.noBoot
}

// pass lets d pass on every clock; sleep suspends the machine for d; step
// steps the wall clock by d.
func (m *fakeMachine) pass(d time.Duration)  { m.move(int64(d), int64(d), int64(d)) }
func (m *fakeMachine) sleep(d time.Duration) { m.move(0, int64(d), int64(d)) }
func (m *fakeMachine) step(d time.Duration)  { m.move(0, int64(d), 0) }

func (m *fakeMachine) move(mono, wall, boot int64) {
	m.mu.Lock()
	m.mono, m.wall, m.boot = m.mono+mono, m.wall+wall, m.boot+boot
	m.mu.Unlock()
}

// reads returns how many times the boot clock was read.
func (m *fakeMachine) reads() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bootReads
}

// newFakeSystemWatch returns a watch of the system clock kind over m's
// clocks, marked now, which records the sleeps it reports.
func newFakeSystemWatch(m *fakeMachine) (*SuspendWatch, *[]time.Duration) {
	var lost []time.Duration
	w := &SuspendWatch{sys: true, boot: m, read: m.read, lost: func(d time.Duration) { lost = append(lost, d) }}
	w.mu.Lock()
	w.markLocked(0)
	w.mu.Unlock()
	return w, &lost
}

// check is Check of a reading of m taken now.
func check(w *SuspendWatch, m *fakeMachine, slack time.Duration) bool {
	mono, skew := m.read()
	return w.checkAt(mono, skew, slack)
}

const testSlack = 10 * time.Millisecond

// TestSuspendWatchSystem: on the system clock, a suspend of more than the
// slack is reported before a reading after it passes, and only once; time
// passing, a shorter suspend, and steps of the wall clock are not; the
// boot clock is read only when the wall clock moves against the monotonic
// one, or a slack after its last reading.
func TestSuspendWatchSystem(t *testing.T) {
	m := &fakeMachine{mono: 5e9, wall: 1.7e18, boot: 9e9}
	w, lost := newFakeSystemWatch(m)
	if check(w, m, testSlack) { // reads the boot clock: the mark set no next reading
		t.Fatal("a suspend reported at once")
	}
	reads := m.reads()
	for range 5 {
		m.pass(time.Millisecond)
		if check(w, m, testSlack) {
			t.Fatal("time passing reported as a suspend")
		}
	}
	if m.reads() != reads {
		t.Fatalf("the boot clock was read %d times within the slack, with no sign of a suspend", m.reads()-reads)
	}
	m.pass(testSlack)
	check(w, m, testSlack)
	if m.reads() != reads+1 {
		t.Fatalf("boot clock read %d times over a slack later, want once", m.reads()-reads)
	}

	m.sleep(testSlack)
	if check(w, m, testSlack) {
		t.Fatal("a suspend of the slack reported")
	}
	m.sleep(time.Millisecond) // 11 ms in all since the mark
	if !check(w, m, testSlack) || len(*lost) != 1 || (*lost)[0] < testSlack+time.Millisecond {
		t.Fatalf("11 ms of suspends: lost %v, want one of at least 11ms", *lost)
	}
	if check(w, m, testSlack) {
		t.Fatal("the suspend reported twice")
	}

	// A step of the wall clock, forward or back, is no suspend; after a
	// step back, a suspend of its length is still seen.
	for _, d := range []time.Duration{time.Hour, -2 * time.Hour} {
		m.step(d)
		if check(w, m, testSlack) {
			t.Fatalf("a step of %v reported as a suspend", d)
		}
	}
	reads = m.reads()
	m.pass(time.Millisecond)
	if check(w, m, testSlack) || m.reads() != reads {
		t.Fatal("after a step, the fast path reads the boot clock again")
	}
	m.sleep(time.Second)
	if !check(w, m, testSlack) || len(*lost) != 2 {
		t.Fatalf("a suspend after a step back: lost %v", *lost)
	}
}

// TestSuspendWatchMaskedSuspend: a suspend hidden from the wall clock by a
// step back of the same length, both since the last reading, is found by
// the boot clock's reading due a slack later.
func TestSuspendWatchMaskedSuspend(t *testing.T) {
	m := &fakeMachine{mono: 5e9, wall: 1.7e18, boot: 9e9}
	w, lost := newFakeSystemWatch(m)
	check(w, m, testSlack)
	m.sleep(time.Minute)
	m.step(-time.Minute)
	m.pass(testSlack)
	if !check(w, m, testSlack) || len(*lost) != 1 || (*lost)[0] < time.Minute {
		t.Fatalf("lost %v, want the minute of the suspend", *lost)
	}
}

// TestSuspendWatchNoBoot: where the boot clock cannot be read, the wall
// clock decides: a jump forward counts as a suspend, a step back does not,
// and hides no later suspend.
func TestSuspendWatchNoBoot(t *testing.T) {
	m := &fakeMachine{mono: 5e9, wall: 1.7e18, noBoot: true}
	w, lost := newFakeSystemWatch(m)
	m.step(-time.Hour)
	if check(w, m, testSlack) {
		t.Fatal("a step back reported as a suspend")
	}
	m.sleep(time.Second)
	if !check(w, m, testSlack) || len(*lost) != 1 || (*lost)[0] != time.Second {
		t.Fatalf("lost %v, want the second of the suspend", *lost)
	}
}

// TestSuspendWatchHeldUp: a goroutine held up between its readings of the
// monotonic and the boot clocks reads them again, rather than report the
// delay as a suspend.
func TestSuspendWatchHeldUp(t *testing.T) {
	m := &fakeMachine{mono: 5e9, wall: 1.7e18, boot: 9e9}
	w, lost := newFakeSystemWatch(m)
	m.pass(testSlack) // the boot clock is due
	mono, skew := m.read()
	m.mu.Lock()
	m.hold = int64(50 * time.Millisecond)
	m.mu.Unlock()
	if w.checkAt(mono, skew, testSlack) {
		t.Fatalf("a delay of 50ms between two readings reported as a suspend: %v", *lost)
	}
}

// TestSuspendWatchHeldUpRepeatedly: on a loaded machine a goroutine may be
// held up between its readings several times in a row; it reads again
// until it gets a reading without the delay, and reports no suspend.
func TestSuspendWatchHeldUpRepeatedly(t *testing.T) {
	m := &fakeMachine{mono: 5e9, wall: 1.7e18, boot: 9e9}
	w, lost := newFakeSystemWatch(m)
	m.pass(testSlack) // the boot clock is due
	mono, skew := m.read()
	m.mu.Lock()
	m.hold, m.holdFor = int64(50*time.Millisecond), 6 // three tries held up
	m.mu.Unlock()
	if w.checkAt(mono, skew, testSlack) {
		t.Fatalf("delays of 50ms between the readings of three tries reported as a suspend: %v", *lost)
	}
	// A real suspend is still found, after as many held-up tries.
	m.pass(testSlack)
	m.sleep(testSlack + time.Millisecond)
	mono, skew = m.read()
	m.mu.Lock()
	m.hold, m.holdFor = int64(50*time.Millisecond), 6
	m.mu.Unlock()
	if !w.checkAt(mono, skew, testSlack) || len(*lost) != 1 || (*lost)[0] < testSlack+time.Millisecond {
		t.Fatalf("a suspend of 11ms after held-up tries: lost %v", *lost)
	}
}

// TestSuspendWatchHeldUpAtMark: a goroutine held up while it marks takes
// a reference that makes later sleeps look longer, never shorter.
func TestSuspendWatchHeldUpAtMark(t *testing.T) {
	m := &fakeMachine{mono: 5e9, wall: 1.7e18, boot: 9e9, hold: int64(50 * time.Millisecond)}
	w, lost := newFakeSystemWatch(m)
	m.pass(testSlack) // the boot clock is due
	m.sleep(testSlack + time.Millisecond)
	if !check(w, m, testSlack) {
		t.Fatalf("a suspend of 11ms after a mark held up for 50ms: lost %v", *lost)
	}
}

// TestSuspendWatchLostFirst: while lost runs, the fast path lets no
// reading of the suspended machine pass: Check returns false on a suspend
// only once lost has handled it.
func TestSuspendWatchLostFirst(t *testing.T) {
	m := &fakeMachine{mono: 5e9, wall: 1.7e18, boot: 9e9}
	w, _ := newFakeSystemWatch(m)
	check(w, m, testSlack)
	m.sleep(time.Minute)
	mono, skew := m.read()
	called := false
	w.lost = func(time.Duration) {
		called = true
		if w.passes(mono, skew, testSlack) {
			t.Error("the fast path passes a reading of the suspended machine while lost runs")
		}
	}
	if !w.checkAt(mono, skew, testSlack) || !called {
		t.Fatal("suspend not reported")
	}
	if !w.passes(mono, skew, testSlack) {
		t.Error("after lost, the reading still goes to the boot clock")
	}
}

// TestSuspendWatchClock: on a clock of its own, the watch compares it with
// the boot clock it was given at every Check, and notices nothing without
// one.
func TestSuspendWatchClock(t *testing.T) {
	base := NewFake()
	boot := NewFakeBoot(base)
	var lost []time.Duration
	w := NewSuspendWatch(base, boot, func(d time.Duration) { lost = append(lost, d) })
	blind := NewSuspendWatch(base, nil, func(time.Duration) { t.Error("a watch without a boot clock called lost") })
	base.Advance(time.Hour)
	if w.Check(base.Now(), testSlack) {
		t.Fatal("time passing reported as a suspend")
	}
	boot.Advance(testSlack / 2)
	base.Advance(time.Second)
	boot.Advance(testSlack/2 + 1)
	if !w.Check(base.Now(), testSlack) || len(lost) != 1 || lost[0] != testSlack+1 {
		t.Fatalf("two suspends of a half slack and 1ns: lost %v", lost)
	}
	if w.Check(base.Now(), testSlack) || blind.Check(base.Now(), testSlack) {
		t.Fatal("reported again, or by a watch without a boot clock")
	}
}

// TestSuspendWatchRealClock: on the real clocks of this machine, with no
// suspend, Check reports none.
func TestSuspendWatchRealClock(t *testing.T) {
	w := NewSuspendWatch(nil, nil, func(d time.Duration) { t.Errorf("lost called: %v", d) })
	for range 1000 {
		if w.Check(time.Now(), 50*time.Millisecond) {
			t.Fatal("suspend reported")
		}
	}
}

// BenchmarkSuspendWatchCheck measures the check of a cached read on the
// system clock, which reads the clock with time.Now; compare it with
// BenchmarkMonotonicRead, the read the cached path made before.
func BenchmarkSuspendWatchCheck(b *testing.B) {
	w := NewSuspendWatch(nil, nil, func(d time.Duration) { b.Fatalf("lost called: %v", d) })
	base := time.Now()
	var sum time.Duration
	for b.Loop() {
		now := time.Now()
		w.Check(now, 10*time.Millisecond)
		sum += now.Sub(base)
	}
	if sum < 0 {
		b.Fatal(sum)
	}
}

// BenchmarkMonotonicRead measures time.Since alone: one reading of the
// monotonic clock.
func BenchmarkMonotonicRead(b *testing.B) {
	base := time.Now()
	var sum time.Duration
	for b.Loop() {
		sum += time.Since(base)
	}
	if sum < 0 {
		b.Fatal(sum)
	}
}

// TestSuspendWatchBubble: inside a testing/synctest bubble, where time is
// fake and jumps ahead of the boot clock, or lags it while goroutines run,
// a watch of the system clock notices nothing.
func TestSuspendWatchBubble(t *testing.T) {
	if _, _, ok := RealBoot().ReadBoot(); !ok {
		t.Skip("no boot clock here")
	}
	synctest.Test(t, func(t *testing.T) {
		w := NewSuspendWatch(nil, nil, func(d time.Duration) { t.Errorf("lost called in a bubble: %v", d) })
		// Real time passes while the bubble's stands still (its
		// goroutine runs), then the bubble's jumps ahead.
		_, start, _ := RealBoot().ReadBoot()
		for {
			if _, now, _ := RealBoot().ReadBoot(); now-start > 3*testSlack {
				break
			}
		}
		w.Check(time.Now(), testSlack)
		time.Sleep(time.Hour)
		w.Check(time.Now(), testSlack)
	})
}
