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
	mu sync.Mutex
	u  Usage
}

func (f *fakeDisk) set(u Usage) { f.mu.Lock(); f.u = u; f.mu.Unlock() }
func (f *fakeDisk) Measure() (Usage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.u, nil
}

func open(t *testing.T, cfg Config) *Guard {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	cfg.Interval = time.Hour // the test calls Check
	cfg.Logger = slog.New(slog.DiscardHandler)
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
		d.set(c.u)
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
	d.set(Usage{Used: 590, Free: 410})
	g.Check()
	if err := g.Admit(10, false); err == nil || g.Alarm() == nil {
		t.Fatalf("just above the reserve after an alarm: write %v, alarm %v; want both refused and raised", err, g.Alarm())
	}
	d.set(Usage{Used: 0, Free: 1000})
	g.Check() // room clear of the reserve
	if err := g.Admit(10, false); err != nil {
		t.Fatalf("after a measurement with room: %v", err)
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
