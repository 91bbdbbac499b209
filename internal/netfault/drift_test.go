package netfault

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/wait"
)

// These tests drive a fake base clock. A base timer that has not expired
// starts no goroutine, so "not fired yet" is checked at once; a fired one
// runs its callback in a goroutine, so "fired" waits for it, bounded by
// waitLimit.

var rates = []float64{0.5, 0.9, 1, 1.1, 2}

// slack is how far the tests let rounding move a drifted instant.
const slack = time.Microsecond

// within reports whether got is want give or take slack.
func within(got, want time.Duration) bool { return got >= want-slack && got <= want+slack }

// baseFor returns how long base must advance for d to pass on a clock
// drifting at rate.
func baseFor(d time.Duration, rate float64) time.Duration {
	return time.Duration(math.Ceil(float64(d) / rate))
}

// waiters waits until fc has n timers or tickers pending.
func waiters(t *testing.T, fc *clock.Fake, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := fc.BlockUntilContext(ctx, n); err != nil {
		t.Fatalf("fake clock never had %d waiters: %v", n, err)
	}
}

func recv(t *testing.T, ch <-chan time.Time) time.Time {
	t.Helper()
	return wait.Chan(t, ch, waitLimit, "a tick")
}

func none(t *testing.T, ch <-chan time.Time) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("received %v too early", v)
	default:
	}
}

func TestDriftNow(t *testing.T) {
	for _, rate := range rates {
		t.Run(fmt.Sprint(rate), func(t *testing.T) {
			fc := clock.NewFake()
			d := Drift(fc, rate)
			start := d.Now()
			if !start.Equal(fc.Now()) {
				t.Fatalf("Now %v, want base's %v", start, fc.Now())
			}
			var base time.Duration
			for _, step := range []time.Duration{time.Second, 7 * time.Millisecond, time.Hour} {
				fc.Advance(step)
				base += step
				want := time.Duration(float64(base) * rate)
				if got := d.Now().Sub(start); !within(got, want) {
					t.Errorf("after base advanced %v: drifted %v, want %v", base, got, want)
				}
				if got := d.Since(start); !within(got, want) {
					t.Errorf("Since(start) %v, want %v", got, want)
				}
				if got := d.Until(start.Add(2 * time.Hour)); !within(got, 2*time.Hour-want) {
					t.Errorf("Until(start+2h) %v, want %v", got, 2*time.Hour-want)
				}
			}
		})
	}
}

func TestDriftNowMonotonic(t *testing.T) {
	d := Drift(clock.Real(), 1.5)
	a := d.Now()
	if !strings.Contains(a.String(), "m=") {
		t.Errorf("Now %v has no monotonic reading", a)
	}
	if b := d.Now(); b.Before(a) || d.Since(a) < 0 {
		t.Errorf("Now went back: %v then %v", a, b)
	}
}

func TestDriftBadRate(t *testing.T) {
	for _, rate := range []float64{0, -1, math.NaN(), math.Inf(1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Drift with rate %v did not panic", rate)
				}
			}()
			Drift(clock.NewFake(), rate)
		}()
	}
}

func TestDriftTimer(t *testing.T) {
	const d = 10 * time.Second
	for _, rate := range rates {
		for _, kind := range []string{"NewTimer", "After"} {
			t.Run(fmt.Sprintf("%s/%v", kind, rate), func(t *testing.T) {
				leaktest.Check(t)
				fc := clock.NewFake()
				dc := Drift(fc, rate)
				start := dc.Now()
				var ch <-chan time.Time
				if kind == "After" {
					ch = dc.After(d)
				} else {
					ch = dc.NewTimer(d).Chan()
				}
				waiters(t, fc, 1)
				fc.Advance(baseFor(d, rate) - slack)
				none(t, ch)
				fc.Advance(slack)
				if got := recv(t, ch).Sub(start); got < d || got > d+slack {
					t.Errorf("fired at %v of drifting time, want %v", got, d)
				}
			})
		}
	}
}

func TestDriftTimerStopReset(t *testing.T) {
	leaktest.Check(t)
	fc := clock.NewFake()
	dc := Drift(fc, 2)
	start := dc.Now()
	tm := dc.NewTimer(10 * time.Second) // 5s of base time

	fc.Advance(3 * time.Second)
	if !tm.Reset(10 * time.Second) {
		t.Error("Reset of a pending timer returned false")
	}
	fc.Advance(5*time.Second - time.Nanosecond)
	none(t, tm.Chan())
	fc.Advance(time.Nanosecond)
	if got, want := recv(t, tm.Chan()), start.Add(16*time.Second); !got.Equal(want) {
		t.Errorf("fired at %v, want %v", got, want)
	}
	if tm.Stop() {
		t.Error("Stop of a fired timer returned true")
	}

	if tm.Reset(4 * time.Second) {
		t.Error("Reset of a fired timer returned true")
	}
	if !tm.Stop() {
		t.Error("Stop of a pending timer returned false")
	}
	fc.Advance(time.Hour)
	none(t, tm.Chan())

	// A value fired but not received is gone after Reset, as for time.Timer.
	tm.Reset(2 * time.Second)
	fc.Advance(time.Second)
	wait.For(t, waitLimit, "tick in the channel", func() bool { return len(tm.Chan()) == 1 })
	tm.Reset(2 * time.Second)
	none(t, tm.Chan())
	fc.Advance(time.Second)
	recv(t, tm.Chan())
}

func TestDriftTicker(t *testing.T) {
	leaktest.Check(t)
	fc := clock.NewFake()
	dc := Drift(fc, 2)
	start := dc.Now()
	tk := dc.NewTicker(10 * time.Second) // every 5s of base time
	for i := 1; i <= 3; i++ {
		waiters(t, fc, 1)
		fc.Advance(5*time.Second - time.Nanosecond)
		none(t, tk.Chan())
		fc.Advance(time.Nanosecond)
		if got, want := recv(t, tk.Chan()), start.Add(time.Duration(i)*10*time.Second); !got.Equal(want) {
			t.Errorf("tick %d at %v, want %v", i, got, want)
		}
	}

	// Base at 15s jumps to 32s: one tick, and the next one at 35s.
	waiters(t, fc, 1)
	fc.Advance(17 * time.Second)
	if got, want := recv(t, tk.Chan()), start.Add(64*time.Second); !got.Equal(want) {
		t.Errorf("late tick at %v, want %v", got, want)
	}
	waiters(t, fc, 1)
	none(t, tk.Chan())
	fc.Advance(3*time.Second - time.Nanosecond)
	none(t, tk.Chan())
	fc.Advance(time.Nanosecond)
	if got, want := recv(t, tk.Chan()), start.Add(70*time.Second); !got.Equal(want) {
		t.Errorf("tick after the late one at %v, want %v", got, want)
	}

	tk.Reset(4 * time.Second) // every 2s of base time
	waiters(t, fc, 1)
	fc.Advance(2*time.Second - time.Nanosecond)
	none(t, tk.Chan())
	fc.Advance(time.Nanosecond)
	recv(t, tk.Chan())

	// Stop drops a tick not yet received, and no tick comes after it.
	waiters(t, fc, 1)
	fc.Advance(2 * time.Second)
	wait.For(t, waitLimit, "tick in the channel", func() bool { return len(tk.Chan()) == 1 })
	tk.Stop()
	fc.Advance(time.Hour)
	none(t, tk.Chan())
}

func TestDriftAfterFunc(t *testing.T) {
	leaktest.Check(t)
	fc := clock.NewFake()
	dc := Drift(fc, 0.5)
	calls := make(chan time.Time, 3)
	call := func() { calls <- fc.Now() }
	start := fc.Now()

	tm := dc.AfterFunc(time.Second, call) // 2s of base time
	fc.Advance(2*time.Second - time.Nanosecond)
	none(t, calls)
	fc.Advance(time.Nanosecond)
	if got := recv(t, calls).Sub(start); got != 2*time.Second {
		t.Errorf("called when base had advanced %v, want 2s", got)
	}

	if tm.Reset(time.Second) {
		t.Error("Reset of a fired timer returned true")
	}
	fc.Advance(2*time.Second - time.Nanosecond)
	none(t, calls)
	fc.Advance(time.Nanosecond)
	recv(t, calls)

	tm.Reset(time.Second)
	if !tm.Stop() {
		t.Error("Stop of a pending timer returned false")
	}
	fc.Advance(time.Hour)
	none(t, calls)
}

func TestDriftSleep(t *testing.T) {
	leaktest.Check(t)
	fc := clock.NewFake()
	dc := Drift(fc, 2)
	woke := make(chan time.Time, 1)
	go func() {
		dc.Sleep(10 * time.Second)
		woke <- fc.Now()
	}()
	waiters(t, fc, 1)
	start := fc.Now()
	fc.Advance(5*time.Second - time.Nanosecond)
	none(t, woke)
	fc.Advance(time.Nanosecond)
	if got := recv(t, woke).Sub(start); got != 5*time.Second {
		t.Errorf("woke when base had advanced %v, want 5s", got)
	}
}

// firedClock is a fake clock whose AfterFunc callbacks report on done when
// they have returned.
type firedClock struct {
	*clock.Fake
	done chan struct{}
}

func (c firedClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	return c.Fake.AfterFunc(d, func() {
		f()
		c.done <- struct{}{}
	})
}

// TestDriftStopWhileFiring stops a timer and a ticker after their base
// timer has fired but before its callback has run, and checks that the
// callback then sends nothing.
func TestDriftStopWhileFiring(t *testing.T) {
	for _, kind := range []string{"timer", "ticker"} {
		t.Run(kind, func(t *testing.T) {
			leaktest.Check(t)
			fc := firedClock{Fake: clock.NewFake(), done: make(chan struct{}, 1)}
			dc := Drift(fc, 2)
			var ch <-chan time.Time
			var mu sync.Locker
			var stopLocked func()
			if kind == "timer" {
				tm := dc.NewTimer(10 * time.Second).(*driftTimer)
				ch, mu, stopLocked = tm.Chan(), &tm.mu, func() { tm.stopLocked() }
			} else {
				tk := dc.NewTicker(10 * time.Second).(*driftTicker)
				ch, mu, stopLocked = tk.Chan(), &tk.mu, tk.stopLocked
			}
			mu.Lock() // the callback blocks on this once it runs
			fc.Advance(5 * time.Second)
			stopLocked()
			mu.Unlock()
			select {
			case <-fc.done:
			case <-time.After(waitLimit):
				t.Fatalf("callback did not return within %v", waitLimit)
			}
			none(t, ch)
		})
	}
}
