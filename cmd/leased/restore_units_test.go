package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSnapshotSummaryUnits: the text summary gives a snapshot's length in
// binary units and exactly (human.Bytes, tested in its package); the JSON
// keeps the exact number alone.
func TestSnapshotSummaryUnits(t *testing.T) {
	s := snapshotSummary{File: "/b.snap", Bytes: 3 << 20, Digest: "d"}
	var text bytes.Buffer
	if err := s.print(&text, "text"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "length:") || !strings.Contains(text.String(), "3.0 MiB (3145728 bytes)") {
		t.Errorf("text summary:\n%s\nwant the length in MiB and in bytes", text.String())
	}
	var js bytes.Buffer
	if err := s.print(&js, "json"); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Bytes int64 `json:"bytes"`
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Bytes != 3<<20 {
		t.Errorf("JSON summary %s: bytes %d, %v; want %d", js.String(), back.Bytes, err, 3<<20)
	}
}

// TestReadProgressOnlyOnATerminal: a progress bar is drawn only on a
// terminal: with stderr a pipe or a buffer, the file is read as it is and
// nothing is written.
func TestReadProgressOnlyOnATerminal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(path, make([]byte, 2*minProgressBytes), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var stderr bytes.Buffer
	r, done := readProgress(&stderr, f, "reading")
	done()
	if r != f || stderr.Len() != 0 {
		t.Errorf("not a terminal: reader %T, stderr %q; want the file itself and nothing written", r, stderr.String())
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	if r, done := readProgress(pw, f, "reading"); r != f {
		t.Errorf("a pipe: reader %T, want the file itself", r)
	} else {
		done()
	}
}
