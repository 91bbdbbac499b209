package store_test

import (
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/leased/leased/internal/testkit/logbuf"
	"github.com/leased/leased/store"
)

// badgerRecords returns the records with component=badger that a
// slog.JSONHandler wrote to out.
func badgerRecords(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for _, m := range logbuf.Records(t, out) {
		if m["component"] == "badger" {
			recs = append(recs, m)
		}
	}
	return recs
}

// TestBadgerLogsThroughSlog: badger's log lines reach the logger given to
// Open, as records with component=badger: its routine lines (files opened
// and replayed) at debug level, and the error it logs reading a damaged
// value log at ERROR, one line without badger's own prefix. (Before,
// Open's WithLoggingLevel replaced the logger with badger's own, which
// printed "badger 2026/11/27 21:05:42 ERROR: Unable to read: ..." to
// stderr before leased's message, and no record reached slog.)
func TestBadgerLogsThroughSlog(t *testing.T) {
	t.Parallel()
	t.Run("routine", func(t *testing.T) {
		t.Parallel()
		var out logbuf.Buffer
		log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug - 8}))
		dir := t.TempDir()
		for range 2 { // create, then open again and replay
			b, err := store.Open(dir, log)
			if err != nil {
				t.Fatal(err)
			}
			mustApply(t, b, store.Command{Op: store.OpPut, Key: []byte("k"), Value: bigValue(1, 100<<10)})
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
		}
		recs := badgerRecords(t, out.String())
		if len(recs) == 0 {
			t.Fatalf("no record of badger's reached the logger:\n%s", out.String())
		}
		for _, r := range recs {
			if r["level"] != "DEBUG" && r["level"] != "DEBUG-4" {
				t.Errorf("badger's routine line at %v, want DEBUG or below: %v", r["level"], r["msg"])
			}
		}
	})
	t.Run("damaged", func(t *testing.T) {
		t.Parallel()
		dir := damagedDB(t)
		truncateTo(t, onlyFile(t, dir, ".vlog"), func(n int64) int64 { return n / 2 })
		var out logbuf.Buffer
		b, err := store.Open(dir, slog.New(slog.NewJSONHandler(&out, nil)))
		if err == nil {
			err = b.Check()
			b.Close()
		}
		if !errors.Is(err, store.ErrDamaged) {
			t.Fatalf("a value log cut in half: %v, want ErrDamaged", err)
		}
		var found bool
		for _, r := range badgerRecords(t, out.String()) {
			msg, _ := r["msg"].(string)
			if strings.HasPrefix(msg, "badger ") || strings.HasSuffix(msg, "\n") {
				t.Errorf("badger's record carries badger's own prefix or newline: %q", msg)
			}
			found = found || r["level"] == "ERROR" && strings.Contains(msg, "Unable to read")
		}
		if !found {
			t.Errorf("badger's error reading the damaged value log did not reach the logger as an ERROR record:\n%s", out.String())
		}
	})
}
