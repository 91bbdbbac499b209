package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// openWith opens a Badger in a new directory with Open's options changed
// by change.
func openWith(t *testing.T, change func(badger.Options) badger.Options) *Badger {
	t.Helper()
	b, err := Open(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	opts := b.opts
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b = &Badger{dir: dir, opts: change(opts.WithDir(dir).WithValueDir(dir))}
	if err := b.open(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// commitTimestamps returns how many distinct badger commit timestamps the
// data keys carry: how many transactions wrote them.
func commitTimestamps(t *testing.T, b *Badger) int {
	t.Helper()
	ts := map[uint64]bool{}
	err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: dataPrefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			ts[it.Item().Version()] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return len(ts)
}

// TestLargeBatchTakesSeveralTransactions checks that a batch of 6 MB of
// values under the value threshold is split (one transaction takes about
// 2.4 MB of them), and that every result of it is right.
func TestLargeBatchTakesSeveralTransactions(t *testing.T) {
	const n, size = 100, 60 << 10
	b := openWith(t, func(o badger.Options) badger.Options { return o })
	var cmds []Command
	for i := range n {
		cmds = append(cmds, Command{Op: OpPut, Key: fmt.Appendf(nil, "k%03d", i), Value: make([]byte, size)})
	}
	rs, err := b.Apply(cmds)
	if err != nil || len(rs) != n {
		t.Fatalf("Apply = %d results, %v", len(rs), err)
	}
	for i, r := range rs {
		if r.Version != uint64(i+1) {
			t.Fatalf("result %d = %+v, want version %d", i, r, i+1)
		}
	}
	if got := commitTimestamps(t, b); got < 3 {
		t.Errorf("%d values of %d bytes committed in %d transactions, want at least 3", n, size, got)
	}
}

// TestCommandTooBigForATransaction makes one command larger than a
// transaction takes, which Open's options never allow: the smallest
// memtable whose batches still take a value just under the threshold, and
// such a value. Apply must fail, not try ever shorter empty prefixes.
func TestCommandTooBigForATransaction(t *testing.T) {
	const threshold = 64 << 10
	b := openWith(t, func(o badger.Options) badger.Options {
		// A batch takes 15% of the memtable: just the threshold.
		return o.WithValueThreshold(threshold).WithMemTableSize((threshold*100 + 99) / 15)
	})
	// The stored record is the value and 9 bytes.
	rs, err := b.Apply([]Command{{Op: OpPut, Key: []byte("k"), Value: make([]byte, threshold-10)}})
	if !errors.Is(err, badger.ErrTxnTooBig) || len(rs) != 0 {
		t.Fatalf("Apply of a command too big = %v, %v; want ErrTxnTooBig", rs, err)
	}
	if _, err := b.Apply([]Command{{Op: OpPut, Key: []byte("k")}}); !errors.Is(err, ErrFailed) {
		t.Fatalf("Apply after a failure = %v, want ErrFailed", err)
	}
	if err := b.Reopen(); err != nil {
		t.Fatal(err)
	}
	if rs, err := b.Apply([]Command{{Op: OpPut, Key: []byte("k")}}); err != nil || rs[0].Version != 1 {
		t.Fatalf("Apply after Reopen = %v, %v; want version 1", rs, err)
	}
}

// TestFailedReopen makes Reopen fail, with metadata it cannot read: the
// store then refuses every call with ErrFailed, not ErrClosed, and a
// Reopen after Close does not open the database again.
func TestFailedReopen(t *testing.T) {
	b := openWith(t, func(o badger.Options) badger.Options { return o })
	if _, err := b.Apply([]Command{{Op: OpPut, Key: []byte("k")}}); err != nil {
		t.Fatal(err)
	}
	err := b.db.Update(func(txn *badger.Txn) error { return txn.Set(metaRev, []byte("bad")) })
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Reopen(); err == nil {
		t.Fatal("Reopen with corrupt metadata succeeded")
	}
	if _, err := b.Apply([]Command{{Op: OpPut, Key: []byte("k")}}); !errors.Is(err, ErrFailed) {
		t.Errorf("Apply after a failed Reopen = %v, want ErrFailed", err)
	}
	if _, err := b.Get([]byte("k")); !errors.Is(err, ErrFailed) {
		t.Errorf("Get after a failed Reopen = %v, want ErrFailed", err)
	}
	if _, err := b.State(); !errors.Is(err, ErrFailed) {
		t.Errorf("State after a failed Reopen = %v, want ErrFailed", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close after a failed Reopen = %v", err)
	}
	for name, err := range map[string]error{
		"Reopen": b.Reopen(),
		"Apply":  func() error { _, err := b.Apply(nil); return err }(),
		"Get":    func() error { _, err := b.Get([]byte("k")); return err }(),
		"State":  func() error { _, err := b.State(); return err }(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close = %v, want ErrClosed", name, err)
		}
	}
}

// TestWriteLeaseRecordLayouts: a write lease without a client keeps the
// 24-byte layout of the records written before leases had one, and such a
// record reads back with no client; one with a client has 8 more bytes.
func TestWriteLeaseRecordLayouts(t *testing.T) {
	old := WriteLease{Key: "k", Token: 7, Session: 3, Term: 2 * time.Second}
	b := encodeWriteLease(old)
	want := []byte{0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0x77, 0x35, 0x94, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("a lease without a client encodes to %x, want the old layout %x", b, want)
	}
	if wl, err := decodeWriteLease([]byte("k"), want); err != nil || wl != old {
		t.Fatalf("an old record decodes to %+v, %v; want %+v", wl, err, old)
	}
	withClient := old
	withClient.Client = 0xfeed
	b = encodeWriteLease(withClient)
	if wl, err := decodeWriteLease([]byte("k"), b); len(b) != 32 || err != nil || wl != withClient {
		t.Fatalf("a lease with a client: %d bytes, decoded to %+v, %v; want 32, %+v", len(b), wl, err, withClient)
	}
	for _, bad := range [][]byte{want[:23], append(append([]byte{}, want...), make([]byte, 8)...), append(b, 0)} {
		if wl, err := decodeWriteLease([]byte("k"), bad); err == nil {
			t.Errorf("a record of %d bytes decoded to %+v, want an error", len(bad), wl)
		}
	}
}
