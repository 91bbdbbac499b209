//go:build unix

package diskguard

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// denyFS is a folder in which one subfolder cannot be listed, as a
// root-owned lost+found cannot by another user: the injected fault, for a
// test that runs as root, whom no permission stops.
type denyFS struct {
	fs.FS
	deny string
}

func (d denyFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if name == d.deny {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
	}
	return fs.ReadDir(d.FS, name)
}

// TestUnreadableEntry checks that a data folder holding a folder the
// server cannot read (a lost+found, when the data folder is the root of
// its own file system) is still measured: the rest of its files count
// against the quota, statfs's free space against the reserve, so that the
// alarm, the start refusal and the follower's floor still work; and the
// unreadable folder is named once in the log, not at every measurement.
func TestUnreadableEntry(t *testing.T) {
	const mib = 1 << 20
	for _, how := range []string{"permissions", "injected"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			for _, name := range []string{"db/000001.vlog", "lost+found/#1234"} {
				p := filepath.Join(dir, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, make([]byte, mib), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			lostFound := filepath.Join(dir, "lost+found")
			var meter Meter
			switch how {
			case "permissions":
				if os.Geteuid() == 0 {
					t.Skip("root reads every folder; the injected case covers this")
				}
				if err := os.Chmod(lostFound, 0); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Chmod(lostFound, 0o700) })
			case "injected":
				fsys := denyFS{os.DirFS(dir), "lost+found"}
				meter = meterFunc(func() (Usage, error) { return measure(dir, fsys) })
			}

			var logs logBuffer
			g := open(t, Config{Dir: dir, Quota: mib / 2, Reserve: 1, Meter: meter, Logger: logs.logger()})
			u := g.Usage()
			if u.Used < mib || u.Used >= 2*mib || u.Free <= 0 {
				t.Fatalf("usage %+v: want the readable 1 MiB counted, not the unreadable one, and statfs's free space", u)
			}
			if len(u.Skipped) != 1 || !strings.Contains(u.Skipped[0], "lost+found") {
				t.Fatalf("skipped %q, want lost+found", u.Skipped)
			}
			if err := g.Admit(1, false); !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "quota") {
				t.Fatalf("write past the quota: %v, want NOSPACE naming the quota", err)
			}
			g.Check()
			g.Check()
			if n := logs.count("cannot be read"); n != 1 || logs.count("lost+found") != 1 {
				t.Fatalf("3 measurements logged the unreadable folder %d times, want once, naming it:\n%s", n, logs.String())
			}
			g.Close()

			// A reserve above what is free: the start is refused, and a
			// follower would stop.
			g = open(t, Config{Dir: dir, Quota: -1, Reserve: 1 << 62, Meter: meter})
			if err := g.StartErr(); !errors.Is(err, ErrNoSpace) || !strings.Contains(err.Error(), "below the reserve") {
				t.Fatalf("StartErr below the reserve: %v", err)
			}
			if !g.BelowFloor() || g.Alarm() == nil {
				t.Fatalf("below the reserve: floor %v, alarm %v; want both", g.BelowFloor(), g.Alarm())
			}
		})
	}
}

// TestIdentityUnsure checks that only a stat that finds no file (ENOENT,
// or ENOTDIR: a folder of the path replaced by a file) loses the data
// folder; another error (EIO, ENOMEM) lets writes through, is logged
// once, and the folder is checked again at the next write or measurement.
func TestIdentityUnsure(t *testing.T) {
	cases := []struct {
		name string
		err  syscall.Errno
		lost bool
	}{
		{"EIO", syscall.EIO, false},
		{"ENOMEM", syscall.ENOMEM, false},
		{"ENOENT", syscall.ENOENT, true},
		{"ENOTDIR", syscall.ENOTDIR, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var fail atomic.Bool
			stat := func(path string) (fileID, error) {
				if fail.Load() {
					return fileID{}, &os.PathError{Op: "stat", Path: path, Err: c.err}
				}
				return statID(path)
			}
			var logs logBuffer
			g := open(t, Config{Quota: -1, Reserve: -1, Meter: &fakeDisk{}, Logger: logs.logger(), stat: stat})
			fail.Store(true)
			err := g.Admit(1, false)
			g.Check()
			g.Check()
			if c.lost {
				if !errors.Is(err, ErrFolderLost) || !errors.Is(g.Err(), ErrFolderLost) {
					t.Fatalf("write: %v, Err %v; want ErrFolderLost", err, g.Err())
				}
				select {
				case <-g.Lost():
				default:
					t.Fatal("Lost not closed")
				}
				return
			}
			if err != nil || g.Err() != nil {
				t.Fatalf("write: %v, Err %v; want neither: %v says nothing of the folder", err, g.Err(), c.err)
			}
			select {
			case <-g.Lost():
				t.Fatal("Lost closed")
			default:
			}
			if n := logs.count("cannot check that the data folder is still there"); n != 1 {
				t.Fatalf("3 failed checks logged %d times, want once:\n%s", n, logs.String())
			}
			fail.Store(false)
			if err := g.Admit(1, false); err != nil {
				t.Fatal(err)
			}
			if logs.count("can be checked again") != 1 {
				t.Fatalf("no word that the folder can be checked again:\n%s", logs.String())
			}
		})
	}
}
