package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/human"
	"github.com/leased/leased/internal/testkit/clitest"
)

// TestSnapshotSaveSizes: real processes. snapshot save gives the size in
// binary units and exactly in its table, and the exact byte count in
// JSON, each the length of the file it wrote; with stderr not a terminal
// (a pipe here) it draws no progress on it.
func TestSnapshotSaveSizes(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := clitest.StartServer(t, bins, "", filepath.Join(dir, "data"))
	// A value of 100 KiB makes the snapshot larger than a KiB.
	ok(t, srv.Ctl(t, "put", "big", strings.Repeat("x", 100<<10)))
	size := func(file string) int64 {
		t.Helper()
		st, err := os.Stat(file)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	quiet := func(what string, r clitest.Result) {
		t.Helper()
		if r.Stderr != "" {
			t.Errorf("%s: stderr %q; want nothing on a stderr that is not a terminal", what, r.Stderr)
		}
	}

	tableFile := filepath.Join(dir, "table.snap")
	r := ok(t, srv.Ctl(t, "snapshot", "save", tableFile))
	quiet("snapshot save", r)
	lines := strings.Split(strings.TrimSuffix(r.Stdout, "\n"), "\n")
	if len(lines) != 2 || !strings.HasSuffix(strings.TrimRight(lines[0], " "), "SIZE") {
		t.Fatalf("snapshot save table:\n%s", r.Stdout)
	}
	n := size(tableFile)
	if want := human.Bytes(n); !strings.HasSuffix(lines[1], "  "+want) || !strings.Contains(want, "KiB") {
		t.Errorf("snapshot save table:\n%s\nwant the size %q of the file it wrote", r.Stdout, want)
	}

	jsonFile := filepath.Join(dir, "json.snap")
	r = ok(t, srv.Ctl(t, "-o", "json", "snapshot", "save", jsonFile))
	quiet("snapshot save -o json", r)
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(r.Stdout), &raw); err != nil {
		t.Fatalf("snapshot save -o json: %q: %v", r.Stdout, err)
	}
	if got, want := string(raw["bytes"]), strconv.FormatInt(size(jsonFile), 10); got != want {
		t.Errorf("snapshot save -o json: \"bytes\": %s, want the exact length %s of the file it wrote", got, want)
	}
	srv.Stop(t)
}

// TestSaveProgress: the count of bytes saved is drawn only when stderr is
// a terminal; either way every byte reaches the file, unchanged.
func TestSaveProgress(t *testing.T) {
	data := bytes.Repeat([]byte("snapshot"), 64<<10)
	for _, tty := range []bool{false, true} {
		var file, stderr bytes.Buffer
		w, done := saveProgress(&file, &stderr, tty)
		for p := data; len(p) > 0; p = p[min(len(p), 100_000):] {
			if _, err := w.Write(p[:min(len(p), 100_000)]); err != nil {
				t.Fatal(err)
			}
		}
		done()
		if !bytes.Equal(file.Bytes(), data) {
			t.Errorf("terminal %v: the file got %d bytes, not the %d written", tty, file.Len(), len(data))
		}
		drawn := stderr.String()
		switch {
		case !tty && (w != &file || drawn != ""):
			t.Errorf("not a terminal: writer %T, stderr %q; want the file itself and nothing drawn", w, drawn)
		case tty && !strings.Contains(drawn, "saving snapshot"):
			t.Errorf("a terminal: stderr %q; want the count drawn", drawn)
		case tty && !cleared(drawn):
			t.Errorf("a terminal: stderr %q; want the count cleared when the stream ends", drawn)
		}
	}
}

// cleared reports whether what was drawn on a terminal ends with its last
// line cleared: after the last carriage return but one, only spaces.
func cleared(drawn string) bool {
	i := strings.LastIndexByte(strings.TrimSuffix(drawn, "\r"), '\r')
	return i >= 0 && strings.TrimSpace(drawn[i:]) == ""
}

// TestStatsSizes: the stats table gives sizes in binary units and
// exactly; JSON gives the exact integers.
func TestStatsSizes(t *testing.T) {
	st := &client.Stats{LeaseStorageBytes: 12 << 20, InflightBytes: 1536}
	a, stdout, _ := newTestApp(nil)
	a.output = "table"
	if err := a.printStats(st); err != nil {
		t.Fatal(err)
	}
	values := map[string]string{}
	for _, line := range strings.Split(stdout.String(), "\n") {
		name, value, _ := strings.Cut(line, " ")
		values[name] = strings.TrimSpace(value)
	}
	for name, want := range map[string]string{"lease_storage_bytes": "12 MiB (12582912 bytes)", "inflight_bytes": "1.5 KiB (1536 bytes)"} {
		if values[name] != want {
			t.Errorf("stats table:\n%s\nwant %s %q", stdout, name, want)
		}
	}
	a, stdout, _ = newTestApp(nil)
	a.output = "json"
	if err := a.printStats(st); err != nil {
		t.Fatal(err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(stdout.Bytes(), &raw); err != nil {
		t.Fatal(err)
	}
	if string(raw["lease_storage_bytes"]) != "12582912" || string(raw["inflight_bytes"]) != "1536" {
		t.Errorf("stats JSON: lease_storage_bytes %s, inflight_bytes %s; want 12582912 and 1536", raw["lease_storage_bytes"], raw["inflight_bytes"])
	}
}

// TestStdinValueBound: a value on stdin over leasectl's bound is refused
// as a bad command line that gives the bound in binary units and exactly.
func TestStdinValueBound(t *testing.T) {
	a, _, _ := newTestApp(nil)
	a.stdin = io.LimitReader(zeros{}, maxStdinValue+1)
	_, err := a.readValue("-")
	if a.exitCode(err) != exitUsage || !strings.Contains(err.Error(), "larger than 64 MiB (67108864 bytes)") {
		t.Fatalf("a value of %d bytes on stdin: %v; want a usage error that gives the bound", maxStdinValue+1, err)
	}
}

// zeros reads as endless zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
