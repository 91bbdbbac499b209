package core

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/faultstore"
	"github.com/leased/leased/internal/testkit/logbuf"
	"github.com/leased/leased/store"
)

// These tests restart a core on a fake wall clock, which the test may set
// hours ahead or behind, beside a fake boot clock, which it moves on its
// own: the machine's clocks while the server was down.

// crashed runs a core named self over st, with its boot record in file,
// on the wall clock wall and the boot clock boot; the core grants a read
// lease and crashes. It returns the horizon the core persisted, which
// st holds again after the crash, as does file its boot record: the
// core's Close lowered both, which a crash would not have done.
func crashed(t *testing.T, st store.Store, file string, wall clock.Clock, boot clock.Boot) store.State {
	t.Helper()
	a, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Clockname: "self",
		Clock: wall, BootClock: boot, BootFile: file, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, &notices{})
	if err != nil {
		t.Fatal(err)
	}
	a.OpenSession(1)
	if _, got, err := a.Read(1, []byte("k")); err != nil || got != term {
		t.Fatalf("read: term %v, %v", got, err)
	}
	h, err := st.State()
	if err != nil || h.Horizon.IsZero() {
		t.Fatalf("no horizon persisted: %+v, %v", h, err)
	}
	rec, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("no boot record: %v", err)
	}
	a.Close()
	if _, err := st.Apply([]store.Command{{Op: store.OpSetHorizon, Key: []byte(h.HorizonBy), Horizon: h.Horizon, Span: h.Span}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, rec, 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

// firstWriteAt checks that the first write of core c, started on wall,
// commits exactly want after the start, and not a moment before.
func firstWriteAt(t *testing.T, c *Core, wall *clock.Fake, want time.Duration) {
	t.Helper()
	if got := c.Stats().WritesAllowedIn; got != want {
		t.Errorf("writes held for %v, want %v", got, want)
	}
	c.OpenSession(2)
	w := submit(t, c, put(2, "other", "v"))
	if want > 0 {
		wall.Advance(want - time.Nanosecond)
		if o, ok := w.outcome(); ok {
			t.Fatalf("the first write committed %v after the start, before %v: %+v", want-time.Nanosecond, want, o)
		}
		wall.Advance(time.Nanosecond)
	}
	if o := w.must(t); o.Waited != want {
		t.Errorf("the first write waited %v, want %v", o.Waited, want)
	}
}

// TestRestartCountsDowntimeOnBootClock: a core that restarts in the same
// boot of the machine holds writes until the horizon it recorded passes on
// the boot clock, whatever the wall clock did while it was down: stepped
// forward by hours, or back. After a reboot, or when the boot record
// cannot be trusted, or for a horizon another node recorded, it holds them
// for the horizon's whole span, plus ε, from its start.
func TestRestartCountsDowntimeOnBootClock(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wall   time.Duration                  // how far the wall clock moved while the core was down
		boot   time.Duration                  // how far the boot clock moved
		reboot bool                           // the machine rebooted meanwhile
		after  func(t *testing.T, dir string) // what else happened meanwhile
		by     string                         // the clock name the stored horizon is put back with
		whole  bool                           // the wait is the whole span plus ε
	}{
		{name: "wall clock stepped forward by hours", wall: 5 * time.Hour, boot: time.Second},
		{name: "wall clock stepped back", wall: -time.Hour, boot: time.Second},
		{name: "down for a second", wall: time.Second, boot: time.Second},
		{name: "passed on the boot clock, wall clock stepped back", wall: -time.Hour, boot: time.Hour},
		{name: "rebooted, wall clock stepped forward", wall: 5 * time.Hour, boot: time.Second, reboot: true, whole: true},
		{name: "no boot record", wall: 5 * time.Hour, boot: time.Second, whole: true,
			after: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "horizon.boot")) }},
		{name: "damaged boot record", wall: 5 * time.Hour, boot: time.Second, whole: true,
			after: func(t *testing.T, dir string) {
				os.WriteFile(filepath.Join(dir, "horizon.boot"), []byte("{\"by\":"), 0o600)
			}},
		{name: "horizon recorded by another node", wall: 5 * time.Hour, boot: time.Second, by: "other", whole: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				dir := t.TempDir()
				file := filepath.Join(dir, "horizon.boot")
				st := newMemory(t)
				fa := clock.NewFake()
				fb := clock.NewFakeBoot(fa)
				h := crashed(t, st, file, fa, fb)
				if tc.by != "" {
					st.Apply([]store.Command{{Op: store.OpSetHorizon, Key: []byte(tc.by), Horizon: h.Horizon, Span: h.Span}})
				}
				// Down: the boot clock moves on its own, the wall
				// clock is set anew.
				fb.Advance(tc.boot)
				if tc.reboot {
					fb.Reboot("another-boot")
					fb.Advance(tc.boot)
				}
				if tc.after != nil {
					tc.after(t, dir)
				}
				fc := clockwork.NewFakeClockAt(fa.Now().Add(tc.wall))
				b, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Clockname: "self",
					Clock: fc, BootClock: fb, BootFile: file, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, &notices{})
				if err != nil {
					t.Fatal(err)
				}
				defer b.Close()
				want := max(h.Span-tc.boot, 0) // the horizon on the boot clock
				if tc.whole {
					want = h.Span + eps
				}
				firstWriteAt(t, b, fc, want)
			})
		})
	}
}

// TestHorizonYearsAheadIsBounded: a horizon recorded while the wall clock
// was set years ahead (2040) holds writes after a restart no longer than
// its span, counted on the boot clock in the same boot, and its whole span
// plus ε after a reboot, never until the wall clock reaches it; the core
// warns, naming the stored horizon.
func TestHorizonYearsAheadIsBounded(t *testing.T) {
	for _, reboot := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "horizon.boot")
			st := newMemory(t)
			future := clockwork.NewFakeClockAt(time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC))
			fb := clock.NewFakeBoot(future)
			h := crashed(t, st, file, future, fb)
			fb.Advance(time.Second)
			want := h.Span - time.Second
			if reboot {
				fb.Reboot("another-boot")
				want = h.Span + eps
			}
			var logs logbuf.Buffer
			now := clock.NewFake() // 2026: the wall clock was put right
			b, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Clockname: "self",
				Clock: now, BootClock: fb, BootFile: file, Logger: slog.New(slog.NewTextHandler(&logs, nil))}, st, &notices{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			firstWriteAt(t, b, now, want)
			named := h.Horizon.UTC().Format(time.RFC3339Nano)
			if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, named) {
				t.Errorf("reboot %v: no warning naming the stored horizon %s in the log:\n%s", reboot, named, out)
			}
		})
	}
}

// TestOwnHorizonApplied: in a replicated store, a horizon this node
// recorded is counted on the boot clock by its record; one of another
// node's clock, or of none, from when this node applied it, plus ε.
func TestOwnHorizonApplied(t *testing.T) {
	for _, by := range []string{"self", "other", ""} {
		synctest.Test(t, func(t *testing.T) {
			dir := t.TempDir()
			file := filepath.Join(dir, "horizon.boot")
			st := newMemory(t)
			fa := clock.NewFake()
			fb := clock.NewFakeBoot(fa)
			h := crashed(t, st, file, fa, fb)
			if by != "self" {
				st.Apply([]store.Command{{Op: store.OpSetHorizon, Key: []byte(by), Horizon: h.Horizon, Span: h.Span}})
			}
			fb.Advance(time.Second)
			fc := clockwork.NewFakeClockAt(fa.Now().Add(5 * time.Hour))
			// The node applied the entry half a second before the core
			// started.
			appliedAt := fc.Now()
			fc.Advance(500 * time.Millisecond)
			b, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Clockname: "self", Replicated: true,
				Clock: fc, BootClock: fb, BootFile: file, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, applied{st, appliedAt}, &notices{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			want := h.Span - time.Second
			if by != "self" {
				want = h.Span + eps - 500*time.Millisecond
			}
			if got := b.Stats().WritesAllowedIn; got != want {
				t.Errorf("horizon by %q: writes held for %v, want %v", by, got, want)
			}
		})
	}
}

// TestBootRecordKeptWhenPersistFails: a core whose store fails as it
// lowers the horizon at its close keeps, beside the record of the horizon
// it could not persist, the record of the one the store still holds: the
// next start counts that one on the boot clock.
func TestBootRecordKeptWhenPersistFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "horizon.boot")
		mem := store.NewMemory()
		fs := owned(t, faultstore.New(mem))
		fa := clock.NewFake()
		fb := clock.NewFakeBoot(fa)
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		a, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Clockname: "self",
			Clock: fa, BootClock: fb, BootFile: file, Logger: quiet}, fs, &notices{})
		if err != nil {
			t.Fatal(err)
		}
		a.OpenSession(1)
		if _, got, err := a.Read(1, []byte("k")); err != nil || got != term {
			t.Fatalf("read: term %v, %v", got, err)
		}
		fa.Advance(time.Second)
		a.Relinquish(1, []string{"k"}) // Close would lower the horizon to now
		fs.Fail(syscall.EIO)
		a.Close()
		h, _ := mem.State()

		fb.Advance(time.Second)
		fc := clockwork.NewFakeClockAt(fa.Now().Add(5 * time.Hour))
		b, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Clockname: "self",
			Clock: fc, BootClock: fb, BootFile: file, Logger: quiet}, mem, &notices{})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		firstWriteAt(t, b, fc, h.Span-2*time.Second)
	})
}

// BenchmarkSetHorizon measures persisting one horizon to a badger store on
// disk, with and without its boot record (an fsynced file beside it).
func BenchmarkSetHorizon(b *testing.B) {
	for _, kept := range []bool{false, true} {
		name := "without boot record"
		if kept {
			name = "with boot record"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			st, err := store.Open(filepath.Join(dir, "db"), slog.New(slog.DiscardHandler))
			if err != nil {
				b.Fatal(err)
			}
			cfg := Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Clockname: "self", Logger: slog.New(slog.DiscardHandler)}
			if kept {
				cfg.BootFile = filepath.Join(dir, "horizon.boot")
			}
			defer st.Close() // after the core's Close: the store is the caller's (New)
			c, err := New(cfg, st, &notices{})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			c.horizonMu.Lock()
			defer c.horizonMu.Unlock()
			for b.Loop() {
				now := time.Now()
				if err := c.setHorizon(now.Add(3*time.Second), now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSuspendRecordsTheHorizonAgain: when the machine is suspended while
// a core runs, its boot clock (and its clients' clocks) move on, and its
// monotonic clock does not: the horizon still covers the next lease on
// the monotonic clock, but its boot record falls short of it, and a
// restart in the same boot would wait too little. The next grant records
// the horizon again, so that the boot record covers every lease granted.
func TestSuspendRecordsTheHorizonAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "horizon.boot")
		fa := clock.NewFake()
		fb := clock.NewFakeBoot(fa)
		c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Clockname: "self",
			Clock: fa, BootClock: fb, BootFile: file, Logger: slog.New(slog.DiscardHandler)}, newMemory(t), &notices{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.OpenSession(1)
		newest := func() time.Duration {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var recs []bootRecord
			if err := json.Unmarshal(b, &recs); err != nil || len(recs) == 0 {
				t.Fatalf("boot record %q: %v", b, err)
			}
			return recs[0].BootHorizon
		}
		if _, got, err := c.Read(1, []byte("a")); err != nil || got != term {
			t.Fatalf("read: term %v, %v", got, err)
		}
		before := newest()
		fb.Advance(time.Hour) // suspended for an hour
		if _, got, err := c.Read(1, []byte("b")); err != nil || got != term {
			t.Fatalf("read after the suspend: term %v, %v", got, err)
		}
		_, since, _ := fb.ReadBoot()
		if got, want := newest(), since+term+eps; got < want {
			t.Fatalf("after the suspend, the boot record says the horizon passes at %v since boot (%v before), but the lease just granted lasts until %v", got, before, want)
		}
	})
}
