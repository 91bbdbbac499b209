package diskguard

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeDisk is a measurement that a test sets.
type fakeDisk struct {
	mu     sync.Mutex
	u      Usage
	err    error  // returned instead of u, if set
	during func() // called while Measure runs, if set
}

func (f *fakeDisk) set(u Usage, err error) { f.mu.Lock(); f.u, f.err = u, err; f.mu.Unlock() }
func (f *fakeDisk) setDuring(fn func())    { f.mu.Lock(); f.during = fn; f.mu.Unlock() }
func (f *fakeDisk) Measure() (Usage, error) {
	f.mu.Lock()
	during := f.during
	f.mu.Unlock()
	if during != nil {
		during()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.u, f.err
}

// meterFunc is a Meter made of a function.
type meterFunc func() (Usage, error)

func (f meterFunc) Measure() (Usage, error) { return f() }

// logBuffer collects a logger's lines, for a test to count.
type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// count returns how many lines hold s.
func (b *logBuffer) count(s string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for line := range strings.Lines(b.buf.String()) {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger { return slog.New(slog.NewTextHandler(b, nil)) }

func open(t *testing.T, cfg Config) *Guard {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	cfg.Interval = time.Hour // the test calls Check
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// TestAlarm checks that the guard refuses writes past the quota and below
// the reserve, names the figures, lets deletes through down to half the
// reserve, and clears the alarm once a measurement finds room.
func TestAlarm(t *testing.T) {
	const mib = 1 << 20
	d := &fakeDisk{u: Usage{Used: 10 * mib, Free: 1000 * mib}}
	g := open(t, Config{Quota: 100 * mib, Reserve: 200 * mib, Meter: d})
	if err := g.Admit(mib, false); err != nil {
		t.Fatalf("write with room: %v", err)
	}

	cases := []struct {
		name    string
		u       Usage
		want    string // in the error; "" for none
		delete  error  // want for a delete: nil or ErrNoSpace
		refused bool
	}{
		{"room", Usage{Used: 50 * mib, Free: 500 * mib}, "", nil, false},
		{"quota", Usage{Used: 101 * mib, Free: 500 * mib}, "over its quota of 104857600 bytes (100.0 MiB)", nil, true},
		{"reserve", Usage{Used: 50 * mib, Free: 150 * mib}, "below the reserve of 209715200 bytes (200.0 MiB)", nil, true},
		{"floor", Usage{Used: 50 * mib, Free: 90 * mib}, "below the reserve", ErrNoSpace, true},
		{"room again", Usage{Used: 50 * mib, Free: 500 * mib}, "", nil, false},
	}
	for _, c := range cases {
		d.set(c.u, nil)
		g.Check()
		err := g.Admit(1000, false)
		if c.refused {
			if !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: write: %v, want NOSPACE naming %q", c.name, err, c.want)
			}
			if a := g.Alarm(); a == nil || !strings.Contains(a.Error(), c.want) {
				t.Errorf("%s: alarm %v, want one naming %q", c.name, a, c.want)
			}
		} else if err != nil || g.Alarm() != nil {
			t.Errorf("%s: write: %v, alarm %v; want neither", c.name, err, g.Alarm())
		}
		if err := g.Admit(10, true); !errors.Is(err, c.delete) || (c.delete == nil && err != nil) {
			t.Errorf("%s: delete: %v, want %v", c.name, err, c.delete)
		}
	}
}

// TestAdmitCounts checks that the bytes admitted between two measurements
// count against the reserve, so that a burst cannot run past it.
func TestAdmitCounts(t *testing.T) {
	d := &fakeDisk{u: Usage{Used: 0, Free: 1000}}
	g := open(t, Config{Quota: -1, Reserve: 400, Meter: d})
	n := 0
	for g.Admit(10, false) == nil {
		n++
		if n > 1000 {
			t.Fatal("admitted without end")
		}
	}
	// 600 bytes of room, each write counted Amplification times.
	if want := 600 / (10 * Amplification); n != want {
		t.Fatalf("admitted %d writes of 10 bytes, want %d", n, want)
	}
	if g.Alarm() == nil {
		t.Fatal("refused a write but raised no alarm")
	}
	// The writes are on disk by the next measurement; just above the
	// reserve, the alarm stays.
	d.set(Usage{Used: 590, Free: 410}, nil)
	g.Check()
	if err := g.Admit(10, false); err == nil || g.Alarm() == nil {
		t.Fatalf("just above the reserve after an alarm: write %v, alarm %v; want both refused and raised", err, g.Alarm())
	}
	d.set(Usage{Used: 0, Free: 1000}, nil)
	g.Check() // room clear of the reserve
	if err := g.Admit(10, false); err != nil {
		t.Fatalf("after a measurement with room: %v", err)
	}
}

// TestAdmittedDuringMeasurement checks that a measurement clears only the
// bytes admitted before it began: those admitted while it runs may be
// missing from it, and go on counting against the reserve.
func TestAdmittedDuringMeasurement(t *testing.T) {
	d := &fakeDisk{u: Usage{Used: 0, Free: 1000}}
	g := open(t, Config{Quota: -1, Reserve: 400, Meter: d})
	for range 50 {
		if err := g.Admit(10, false); err != nil {
			t.Fatal(err)
		}
	}
	d.setDuring(func() {
		if err := g.Admit(50, false); err != nil {
			t.Errorf("write admitted during the measurement: %v", err)
		}
	})
	// The 500 bytes admitted before are on disk; the 50 admitted while
	// it measures are not.
	d.set(Usage{Used: 500, Free: 500}, nil)
	g.Check()
	d.setDuring(nil)
	n := 0
	for g.Admit(10, false) == nil {
		n++
		if n > 1000 {
			t.Fatal("admitted without end")
		}
	}
	// 100 bytes of room above the reserve, less the 50 still counted.
	if want := (100 - 50*Amplification) / (10 * Amplification); n != want {
		t.Fatalf("after the measurement, admitted %d writes of 10 bytes, want %d: the bytes admitted while it ran were forgotten", n, want)
	}
}

// TestNotMeasured checks that a guard whose first measurement failed
// refuses the start (with a limit on, and only then), that a failing
// measurement is logged once, not at every check, and that a later
// failure keeps the last figures and their alarm.
func TestNotMeasured(t *testing.T) {
	broken := errors.New("statfs /data: input/output error")
	var logs logBuffer
	d := &fakeDisk{err: broken}
	g := open(t, Config{Reserve: 100, Meter: d, Logger: logs.logger()})
	if err := g.StartErr(); !errors.Is(err, ErrNotMeasured) || !errors.Is(err, broken) {
		t.Fatalf("StartErr after a failed measurement: %v, want ErrNotMeasured naming %q", err, broken)
	}
	g.Check()
	g.Check()
	if n := logs.count("cannot measure the data folder"); n != 1 {
		t.Fatalf("3 failed measurements logged %d times, want once:\n%s", n, logs.String())
	}

	d.set(Usage{Free: 40}, nil)
	g.Check()
	if logs.count("measured again") != 1 || g.Alarm() == nil {
		t.Fatalf("after a measurement below the reserve: alarm %v; log:\n%s", g.Alarm(), logs.String())
	}
	d.set(Usage{}, broken)
	g.Check()
	if u := g.Usage(); u.Free != 40 || g.Alarm() == nil || !g.BelowFloor() {
		t.Fatalf("after a failed measurement: %+v, alarm %v, below the floor %v; want the last figures and their alarm", u, g.Alarm(), g.BelowFloor())
	}

	g = open(t, Config{Quota: -1, Reserve: -1, Meter: &fakeDisk{err: broken}})
	if err := g.StartErr(); err != nil {
		t.Fatalf("StartErr without limits: %v", err)
	}
}

// TestFolderLost checks that deleting the folder, or replacing its lock
// file, refuses every later write and closes Lost.
func TestFolderLost(t *testing.T) {
	for _, how := range []string{"remove folder", "replace lock file"} {
		t.Run(how, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			g := open(t, Config{Dir: dir, Quota: -1, Reserve: -1})
			if err := g.Admit(1, false); err != nil {
				t.Fatal(err)
			}
			switch how {
			case "remove folder":
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
			case "replace lock file":
				lf := filepath.Join(dir, LockFile)
				if err := os.Remove(lf); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(lf, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if err := g.Admit(1, false); !errors.Is(err, ErrFolderLost) {
				t.Fatalf("write after %s: %v, want ErrFolderLost", how, err)
			}
			select {
			case <-g.Lost():
			default:
				t.Fatal("Lost not closed")
			}
			if err := g.Admit(0, true); !errors.Is(err, ErrFolderLost) {
				t.Fatalf("delete after %s: %v", how, err)
			}
		})
	}
}

// TestLocked checks that a second guard on the same folder is refused.
func TestLocked(t *testing.T) {
	dir := t.TempDir()
	open(t, Config{Dir: dir})
	_, err := Open(Config{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v, want ErrLocked", err)
	}
}

// TestMeasure checks that Measure counts written blocks, not the size of
// a sparse file.
func TestMeasure(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(1 << 30); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	u, err := Measure(dir)
	if err != nil {
		t.Fatal(err)
	}
	if u.Used < 1<<20 || u.Used > 64<<20 || u.Free <= 0 {
		t.Fatalf("Measure: %+v; want about 1 MiB used of a 1 GiB sparse file, and some free", u)
	}
}

func TestBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 bytes", 1023: "1023 bytes", 1536: "1536 bytes (1.5 KiB)", 8 << 30: "8589934592 bytes (8.0 GiB)"} {
		if got := Bytes(n); got != want {
			t.Errorf("Bytes(%d) = %q, want %q", n, got, want)
		}
	}
}
