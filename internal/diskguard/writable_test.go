package diskguard

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// TestReadOnlyAlarm checks the READONLY alarm: once a folder the database
// writes in cannot be written, the next write and delete are refused with
// ErrNotWritable before any measurement, the alarm names the folder and
// shows in Alarm, and it clears once the folder can be written again, at
// the next write or measurement.
func TestReadOnlyAlarm(t *testing.T) {
	var ro atomic.Bool
	logs := &logBuffer{}
	dir := t.TempDir()
	db := filepath.Join(dir, "db")
	g := open(t, Config{Dir: dir, Writable: []string{dir, db}, Reserve: -1, Quota: -1, Logger: logs.logger(),
		writable: func(d string) error {
			if ro.Load() && d == db {
				return &fs.PathError{Op: "access", Path: d, Err: syscall.EROFS}
			}
			return nil
		}})
	if err := g.Admit(100, false); err != nil {
		t.Fatalf("write to a writable folder: %v", err)
	}

	ro.Store(true)
	for _, del := range []bool{false, true} {
		err := g.Admit(100, del)
		if !errors.Is(err, ErrNotWritable) || !strings.Contains(err.Error(), db) || !strings.Contains(err.Error(), "read-only file system") {
			t.Errorf("write (delete %v) to a read-only folder: %v, want READONLY naming %s", del, err, db)
		}
	}
	if err := g.Admit(0, false); !errors.Is(err, ErrNotWritable) {
		t.Errorf("asking under the alarm: %v, want READONLY", err)
	}
	if a := g.Alarm(); !errors.Is(a, ErrNotWritable) {
		t.Errorf("alarm %v, want READONLY", a)
	}
	g.Check()
	if n := logs.count("alarm raised"); n != 1 {
		t.Errorf("the alarm was logged %d times, want once\n%s", n, logs)
	}

	ro.Store(false)
	g.Check()
	if a := g.Alarm(); a != nil {
		t.Errorf("alarm %v once the folder can be written, want none", a)
	}
	if err := g.Admit(100, false); err != nil {
		t.Errorf("write once the folder can be written: %v", err)
	}
	if n := logs.count("alarm cleared"); n != 1 {
		t.Errorf("the clearing was logged %d times, want once\n%s", n, logs)
	}
}

// TestWritable checks Writable on real folders: a folder that does not
// exist yet, and one that exists, are writable for the test's user.
func TestWritable(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Join(dir, "none")} {
		if err := Writable(d); err != nil {
			t.Errorf("Writable(%s): %v", d, err)
		}
	}
}
