package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// TestCheckCountsRecords: Check refuses a database that holds fewer keys
// than it counted (keys lost from under it), and a database or snapshot
// written before records were counted gets its count when it is opened or
// restored, so that it is not refused for that.
func TestCheckCountsRecords(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	dir := t.TempDir()
	b, err := Open(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { b.Close() }()
	for i, k := range []string{"a", "b", "c"} {
		if _, err := b.ApplyEntry(uint64(i+1), []Command{{Op: OpPut, Key: []byte(k), Value: []byte("v")}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Check(); err != nil {
		t.Fatalf("Check of a whole database: %v", err)
	}

	// A key lost, the count kept.
	if err := b.db.Update(func(t *badger.Txn) error { return t.Delete(prefixed(dataPrefix, []byte("b"))) }); err != nil {
		t.Fatal(err)
	}
	if err := b.Check(); !errors.Is(err, ErrDamaged) {
		t.Fatalf("Check of a database that lost a key: %v, want ErrDamaged", err)
	}
	if err := b.db.Update(func(t *badger.Txn) error {
		return t.Set(prefixed(dataPrefix, []byte("b")), encodeRecord(Record{Version: 2, Found: true, Value: []byte("v")}))
	}); err != nil {
		t.Fatal(err)
	}

	// No count, as written by an earlier version: a snapshot of it,
	// restored, and a new key after it.
	if err := b.db.Update(func(t *badger.Txn) error { return t.Delete(metaRecords) }); err != nil {
		t.Fatal(err)
	}
	snap, err := b.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	b.Close()
	dir2 := t.TempDir()
	if b, err = Open(dir2, log); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ApplyEntry(4, []Command{{Op: OpPut, Key: []byte("d"), Value: []byte("v")}}); err != nil {
		t.Fatal(err)
	}
	if err := b.Check(); err != nil {
		t.Errorf("Check after restoring a snapshot with no count: %v", err)
	}

	// The old folder itself, opened again.
	old, err := Open(dir, log)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if err := old.Check(); err != nil {
		t.Errorf("Check of a database with no count, opened again: %v", err)
	}
}

// TestCheckTTLAttachments: Check finds a database whose TTL lease records
// contradict each other: an attachment with one of its two index records
// lost, a key attached to a lease that is gone or that does not count it,
// a lease above the lease counter, a record that does not decode.
func TestCheckTTLAttachments(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		name   string
		damage func(t *badger.Txn) error
	}{
		{"key's lease record lost", func(t *badger.Txn) error { return t.Delete(prefixed(keyLeasePrefix, []byte("a"))) }},
		{"lease's key record lost", func(t *badger.Txn) error { return t.Delete(attachKey(1, []byte("a"))) }},
		{"lease lost", func(t *badger.Txn) error { return t.Delete(ttlKey(1)) }},
		{"key's value lost", func(t *badger.Txn) error {
			return t.Set(prefixed(dataPrefix, []byte("a")), encodeRecord(Record{Version: 1}))
		}},
		{"lease counter behind", func(t *badger.Txn) error { return setUint(badgerTxn{t}, metaTTL, 1) }},
		{"key count wrong", func(t *badger.Txn) error {
			return t.Set(ttlKey(1), encodeTTLLease(TTLLease{TTL: time.Second, Remaining: time.Second, Keys: 1, KeyBytes: 1, Gen: 3}))
		}},
		{"lease record cut short", func(t *badger.Txn) error { return t.Set(ttlKey(2), []byte{1, 2, 3}) }},
		{"key names another lease", func(t *badger.Txn) error {
			return t.Set(prefixed(keyLeasePrefix, []byte("a")), binary.BigEndian.AppendUint64(nil, 2))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			b, err := Open(dir, log)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { b.Close() }()
			cmds := []Command{
				{Op: OpGrantTTL, Term: time.Second}, {Op: OpGrantTTL, Term: time.Second},
				{Op: OpPut, Key: []byte("a"), Lease: 1}, {Op: OpPut, Key: []byte("b"), Lease: 1}, {Op: OpPut, Key: []byte("c")},
			}
			if _, err := b.ApplyEntry(1, cmds); err != nil {
				t.Fatal(err)
			}
			if err := b.Check(); err != nil {
				t.Fatalf("Check of a whole database: %v", err)
			}
			if err := b.db.Update(c.damage); err != nil {
				t.Fatal(err)
			}
			b.Close()
			if b, err = Open(dir, log); err != nil {
				t.Fatal(err)
			}
			if err := b.Check(); !errors.Is(err, ErrDamaged) {
				t.Errorf("Check = %v, want ErrDamaged", err)
			}
		})
	}
}
