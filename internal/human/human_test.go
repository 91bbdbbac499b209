package human

import (
	"bytes"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/leased/leased/internal/testkit/leaktest"
)

// TestBytes: a size is in binary units with the exact figure, and below a
// KiB in bytes alone.
func TestBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 bytes"},
		{512, "512 bytes"},
		{1023, "1023 bytes"},
		{1536, "1.5 KiB (1536 bytes)"},
		{3 << 20, "3.0 MiB (3145728 bytes)"},
		{12 << 20, "12 MiB (12582912 bytes)"},
		{5 << 30, "5.0 GiB (5368709120 bytes)"},
	} {
		if got := Bytes(tc.n); got != tc.want {
			t.Errorf("Bytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

// TestIsTerminal: a buffer, a pipe and a regular file are not terminals.
func TestIsTerminal(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	defer pw.Close()
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, w := range map[string]io.Writer{"a buffer": &bytes.Buffer{}, "a pipe": pw, "a file": f} {
		if IsTerminal(w) {
			t.Errorf("%s is taken for a terminal", name)
		}
	}
}

// TestNewBar: a bar of an unknown total is drawn at once, with its
// description, and cleared when it ends; the goroutine of its spinner
// ends too.
func TestNewBar(t *testing.T) {
	leaktest.Check(t)
	var out bytes.Buffer
	bar := NewBar(&out, -1, "saving")
	if !strings.Contains(out.String(), "saving") {
		t.Fatalf("a new bar draws nothing: %q", out.String())
	}
	bar.Add(3 << 20)
	if err := bar.Finish(); err != nil {
		t.Fatal(err)
	}
	last := out.String()[strings.LastIndexByte(strings.TrimSuffix(out.String(), "\r"), '\r'):]
	if strings.TrimSpace(last) != "" {
		t.Errorf("the bar is not cleared when it ends: it ends with %q", last)
	}
}
