package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leased/leased/store"
)

// damagedDB writes a database whose keys lie in a table file and whose
// large values lie in a value-log file, closes it, and returns its folder.
func damagedDB(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	b := openBadger(t, dir)
	for i := range 50 {
		mustApply(t, b,
			store.Command{Op: store.OpPut, Key: []byte{'v', byte(i)}, Value: bigValue(i, 100<<10)}, // value log
			store.Command{Op: store.OpPut, Key: []byte{'s', byte(i)}, Value: bigValue(i, 1000)})    // table
	}
	if err := b.Close(); err != nil { // flushes the memtable to a table
		t.Fatal(err)
	}
	return dir
}

// onlyFile returns the one file of dir whose name ends in suffix.
func onlyFile(t *testing.T, dir, suffix string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+suffix))
	if err != nil || len(m) != 1 {
		t.Fatalf("files %s in %s: %v, %v; want one", suffix, dir, m, err)
	}
	return m[0]
}

func truncateTo(t *testing.T, path string, size func(int64) int64) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, size(fi.Size())); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string, off func(int64) int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off(int64(len(b)))] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestDamagedFiles damages a closed database's table and value-log files,
// each kind of damage the README's recovery section names (bits flipped,
// a file cut short), and opens it, for writing and read-only: each open
// fails with ErrDamaged, or the database opens and Check fails with
// ErrDamaged; never a panic, which in badger's goroutines no recover
// reaches (a table cut short killed the process, badger v4.9.6).
func TestDamagedFiles(t *testing.T) {
	t.Parallel()
	half := func(n int64) int64 { return n / 2 }
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string)
		// file is in the error of the open, when it names the file
		file string
	}{
		{"table cut in half", func(t *testing.T, dir string) { truncateTo(t, onlyFile(t, dir, ".sst"), half) }, ".sst"},
		{"table cut to 3 bytes", func(t *testing.T, dir string) {
			truncateTo(t, onlyFile(t, dir, ".sst"), func(int64) int64 { return 3 })
		}, ".sst"},
		{"table emptied", func(t *testing.T, dir string) {
			truncateTo(t, onlyFile(t, dir, ".sst"), func(int64) int64 { return 0 })
		}, ".sst"},
		{"table lost its last byte", func(t *testing.T, dir string) {
			truncateTo(t, onlyFile(t, dir, ".sst"), func(n int64) int64 { return n - 1 })
		}, ".sst"},
		{"table index bits flipped", func(t *testing.T, dir string) {
			flipByte(t, onlyFile(t, dir, ".sst"), func(n int64) int64 { return n - 100 })
		}, ".sst"},
		{"table footer bits flipped", func(t *testing.T, dir string) {
			flipByte(t, onlyFile(t, dir, ".sst"), func(n int64) int64 { return n - 2 })
		}, ".sst"},
		{"table block bits flipped", func(t *testing.T, dir string) {
			flipByte(t, onlyFile(t, dir, ".sst"), func(int64) int64 { return 500 })
		}, ""},
		{"value log emptied", func(t *testing.T, dir string) {
			truncateTo(t, onlyFile(t, dir, ".vlog"), func(int64) int64 { return 0 })
		}, ".vlog"},
		{"value log cut within its header", func(t *testing.T, dir string) {
			truncateTo(t, onlyFile(t, dir, ".vlog"), func(int64) int64 { return 10 })
		}, ".vlog"},
		{"value log cut in half", func(t *testing.T, dir string) { truncateTo(t, onlyFile(t, dir, ".vlog"), half) }, ""},
		{"value log bits flipped", func(t *testing.T, dir string) { flipByte(t, onlyFile(t, dir, ".vlog"), half) }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := damagedDB(t)
			tc.damage(t, dir)
			for _, ro := range []bool{false, true} {
				open := func() (*store.Badger, error) { return store.Open(dir, quietLogger()) }
				if ro {
					open = func() (*store.Badger, error) { return store.OpenReadOnly(dir, quietLogger()) }
				}
				b, err := open()
				if err == nil {
					err = b.Check()
					b.Close()
				} else if tc.file != "" && !strings.Contains(err.Error(), tc.file) {
					t.Errorf("read-only %v: the refusal does not name the %s file: %v", ro, tc.file, err)
				}
				if !errors.Is(err, store.ErrDamaged) {
					t.Errorf("read-only %v: %v, want ErrDamaged", ro, err)
				}
			}
		})
	}
}
