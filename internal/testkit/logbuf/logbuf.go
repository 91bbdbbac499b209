// Package logbuf holds a log buffer that tests read while the code under
// test writes its logs to it from other goroutines. It imports only the
// standard library, so that any package's tests may use it.
package logbuf

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"
)

// Buffer is a bytes.Buffer safe for concurrent use, for logs. The zero
// value is empty and ready.
type Buffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Records returns the records that a slog.JSONHandler wrote to out, one
// map per line, and fails t on a line that is not one JSON object.
func Records(t testing.TB, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(out) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("a log line is not one record: %q: %v", line, err)
		}
		recs = append(recs, m)
	}
	return recs
}
