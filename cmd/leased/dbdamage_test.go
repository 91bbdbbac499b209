package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/internal/testkit/clitest"
)

// TestDamagedDatabase damages the database of a stopped leased, each kind
// of damage to it that the README's recovery section names (table and
// value-log files cut short or with bits flipped): leased and leased
// inspect both exit with status 1, say the folder is damaged and how to
// recover, and name the file where they can tell; neither panics (a table
// cut short made both die with status 2, "slice bounds out of range", in
// a badger goroutine), and badger's own lines go through leased's log
// (they were printed raw, "badger 2026/11/27 21:05:42 ERROR: ...").
// Following the advice (delete db, start again) brings every key back from
// the log.
func TestDamagedDatabase(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	srv := clitest.StartServer(t, bins, "", data, "--lease-term", "1s")
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("b", 100<<10)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if r := srv.Ctl(t, "put", k, "small-"+k); r.Code != 0 {
			t.Fatalf("put %s: %s", k, r.Stderr)
		}
		if r := (clitest.Cmd{Stdin: mustOpen(t, big)}).Run(t, bins.Leasectl, "--endpoint", srv.Addr, "--cacert", srv.CA, "put", "big-"+k, "-"); r.Code != 0 {
			t.Fatalf("put big-%s: %s", k, r.Stderr)
		}
	}
	srv.Stop(t) // badger writes its memtable out to a table

	one := func(t *testing.T, dir, suffix string) string {
		m, _ := filepath.Glob(filepath.Join(dir, layout.DBDir, "*"+suffix))
		if len(m) != 1 {
			t.Fatalf("%s files: %v, want one", suffix, m)
		}
		return m[0]
	}
	cut := func(suffix string, named bool, size func(int64) int64) func(t *testing.T, dir string) string {
		return func(t *testing.T, dir string) string {
			f := one(t, dir, suffix)
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(f, size(fi.Size())); err != nil {
				t.Fatal(err)
			}
			if !named {
				return "" // found as values that cannot be read
			}
			return filepath.Base(f)
		}
	}
	flip := func(suffix string, off func(int64) int64) func(t *testing.T, dir string) string {
		return func(t *testing.T, dir string) string {
			f := one(t, dir, suffix)
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			b[off(int64(len(b)))] ^= 0xff
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return ""
		}
	}
	half := func(n int64) int64 { return n / 2 }
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, dir string) string // returns the file the refusal must name, or ""
	}{
		{"table cut short", cut(".sst", true, half)},
		{"table lost its last byte", cut(".sst", true, func(n int64) int64 { return n - 1 })},
		{"table index bits flipped", flip(".sst", func(n int64) int64 { return n - 100 })},
		{"table block bits flipped", flip(".sst", func(int64) int64 { return 300 })},
		{"value log cut within its header", cut(".vlog", true, func(int64) int64 { return 10 })},
		{"value log cut short", cut(".vlog", false, half)},
		{"value log bits flipped", flip(".vlog", half)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.CopyFS(dir, os.DirFS(data)); err != nil {
				t.Fatal(err)
			}
			file := tc.damage(t, dir)
			for _, args := range [][]string{{"--listen", "127.0.0.1:0", "--data", dir}, {"inspect", "--data", dir}} {
				r := clitest.Cmd{}.Run(t, bins.Leased, args...)
				if raw := rawLogLines(r.Stderr); len(raw) > 0 {
					t.Errorf("leased %s: lines that bypassed its log:\n%s", args[0], strings.Join(raw, "\n"))
				}
				if r.Code != exitError {
					t.Errorf("leased %s: status %d, want %d\nstderr: %s", args[0], r.Code, exitError, tail(r.Stderr))
					continue
				}
				wants := []string{"is damaged", "delete the folder db", file}
				if args[0] == "inspect" && tc.name == "table block bits flipped" && strings.Contains(r.Stderr, "not closed cleanly") {
					// badger's read-only open asks for its memtable log to
					// be replayed first; leased's start names the damage.
					wants = []string{"not closed cleanly"}
				}
				for _, want := range wants {
					if !strings.Contains(r.Stderr, want) {
						t.Errorf("leased %s: the refusal does not say %q\nstderr: %s", args[0], want, tail(r.Stderr))
					}
				}
			}
			// The advice: delete db, start again; the log rebuilds it.
			if err := os.RemoveAll(filepath.Join(dir, layout.DBDir)); err != nil {
				t.Fatal(err)
			}
			again := clitest.StartServer(t, bins, "", dir, "--lease-term", "1s")
			for _, k := range []string{"a", "b", "c"} {
				if r := again.Ctl(t, "get", k); r.Code != 0 || !strings.Contains(r.Stdout, "small-"+k) {
					t.Errorf("after the rebuild, get %s: %s %s", k, r.Stdout, r.Stderr)
				}
			}
			again.Stop(t)
		})
	}
}

func mustOpen(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
