package client

import (
	"testing"
	"time"
)

// TestSilenceCountsOnlyRunningTime: the watchdog's count of a server's
// silence grows by the time between looks when they come on time, by at
// most watchLateCap ticks for a look that comes late (the process was
// starved, and the server's packets may be waiting in its socket), and
// starts again at each packet. Time is passed in: looks are values.
func TestSilenceCountsOnlyRunningTime(t *testing.T) {
	const tick = 250 * time.Millisecond
	capped := time.Duration(watchLateCap * float64(tick))
	t0 := time.Unix(1000, 0)
	type look struct {
		after   time.Duration // since the previous look
		packets uint64
		want    time.Duration
	}
	for _, tc := range []struct {
		name  string
		looks []look
	}{
		{"on time, silent", []look{{tick, 5, tick}, {tick, 5, 2 * tick}, {tick, 5, 3 * tick}, {tick, 5, 4 * tick}}},
		{"a packet starts the count again", []look{{tick, 5, tick}, {tick, 6, 0}, {tick, 6, tick}}},
		{"late looks are capped", []look{{3 * time.Second, 5, capped}, {10 * time.Second, 5, 2 * capped}}},
		{"a late look that finds a packet", []look{{tick, 5, tick}, {5 * time.Second, 9, 0}, {tick, 9, tick}}},
		{"a little late counts in full", []look{{tick + tick/4, 5, tick + tick/4}}},
		{"the clock going back counts nothing", []look{{tick, 5, tick}, {-time.Second, 5, tick}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0
			s := newSilence(now, tick, 5)
			for i, l := range tc.looks {
				now = now.Add(l.after)
				if got := s.observe(now, l.packets); got != l.want {
					t.Fatalf("look %d (%v later, %d packets): silence %v, want %v", i, l.after, l.packets, got, l.want)
				}
			}
		})
	}
}

// TestQUICIdleIsABackstop: QUIC's idle timeout of a session is far longer
// than IdleTimeout, which the watchdog enforces, and the keep-alives come
// often enough that a server that is up is heard several times within
// IdleTimeout.
func TestQUICIdleIsABackstop(t *testing.T) {
	for _, idle := range []time.Duration{time.Millisecond, 500 * time.Millisecond, DefaultIdleTimeout, 5 * time.Second, MaxIdleTimeout} {
		timeout, keepAlive := quicIdle(idle)
		if timeout < minBackstop || timeout < backstopFactor*idle {
			t.Errorf("IdleTimeout %v: QUIC idle timeout %v, want at least %v and %d times it", idle, timeout, minBackstop, backstopFactor)
		}
		if keepAlive <= 0 || keepAlive > idle/3 {
			t.Errorf("IdleTimeout %v: keep-alive every %v, want more than three within it", idle, keepAlive)
		}
	}
}
