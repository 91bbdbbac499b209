package replica

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestRaftRepeatsLoggedOnce: raft's same line, but for its time, is
// logged once per repeatWindow, then again with the number of repeats left
// out; other lines are logged as they come.
func TestRaftRepeatsLoggedOnce(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(1e9, 0)
	w := &slogWriter{l: slog.New(slog.NewTextHandler(&out, nil)), now: func() time.Time { return now }, seen: map[string]*repeat{}}
	line := func(i int, msg string) {
		fmt.Fprintf(w, "2026-11-25T00:35:%02d.%03dZ [ERROR] raft: %s\n", i/1000, i%1000, msg)
	}
	for i := range 100 {
		line(i, `failed to commit logs: error="segment is sealed"`)
		now = now.Add(time.Millisecond)
	}
	line(200, "another failure")
	if got := strings.Count(out.String(), "segment is sealed"); got != 1 {
		t.Fatalf("the same line 100 times within %v was logged %d times, want once:\n%s", repeatWindow, got, out.String())
	}
	if !strings.Contains(out.String(), "another failure") {
		t.Fatalf("another line was left out:\n%s", out.String())
	}
	now = now.Add(repeatWindow)
	out.Reset()
	line(300, `failed to commit logs: error="segment is sealed"`)
	if !strings.Contains(out.String(), "segment is sealed") || !strings.Contains(out.String(), "repeated=99") {
		t.Fatalf("after %v, the line again with repeated=99; got:\n%s", repeatWindow, out.String())
	}
}
