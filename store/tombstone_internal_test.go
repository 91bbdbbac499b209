package store

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// countKeys returns how many keys the database holds under prefix.
func countKeys(t *testing.T, b *Badger, prefix []byte) int {
	t.Helper()
	n := 0
	err := b.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestTombstonesOfManyDeletionsCollected: 50,000 puts and deletes of
// distinct keys (a file system's files, created and removed) leave a
// record per key until a collection removes them all: then the database
// holds no record and no index record of them, counts no record, and
// passes Check. It logs the database's size before and after, once
// compacted.
func TestTombstonesOfManyDeletionsCollected(t *testing.T) {
	const n = 50_000
	b, err := Open(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)), NoSync())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	const batch = 1000
	for i := 0; i < n; i += batch {
		cmds := make([]Command, 0, 2*batch)
		for j := i; j < i+batch; j++ {
			key := []byte(fmt.Sprintf("/fs/dir%03d/file%06d", j%100, j))
			cmds = append(cmds, Command{Op: OpPut, Key: key, Value: []byte("contents")}, Command{Op: OpDelete, Key: key})
		}
		if _, err := b.Apply(cmds); err != nil {
			t.Fatal(err)
		}
	}
	if got := countKeys(t, b, dataPrefix); got != n {
		t.Fatalf("%d records after %d puts and deletes, want one a key", got, n)
	}
	before := compactedSize(t, b)

	rev := b.ct.rev
	commands := 0
	for more := true; more; commands++ {
		rs, err := b.Apply([]Command{{Op: OpCollectTombstones, Through: rev}})
		if err != nil {
			t.Fatal(err)
		}
		more = rs[0].More
		if commands > n/MaxTombstonesPerCommand+1 {
			t.Fatalf("still collecting after %d commands", commands)
		}
	}
	for _, p := range [][]byte{dataPrefix, tombstonePrefix} {
		if got := countKeys(t, b, p); got != 0 {
			t.Errorf("%d keys left under %q after the collection, want 0", got, p)
		}
	}
	if b.ct.records != 0 || b.ct.rev != rev {
		t.Errorf("after the collection: %d records counted at revision %d; want 0 at %d", b.ct.records, b.ct.rev, rev)
	}
	if err := b.Check(); err != nil {
		t.Fatal(err)
	}
	after := compactedSize(t, b)
	t.Logf("%d deleted keys: %d bytes of tables before the collection, %d after (%d commands)", n, before, after, commands)
}

// compactedSize flattens the database's tables, so that what deletions
// replaced is gone, and returns their size in bytes.
func compactedSize(t *testing.T, b *Badger) int64 {
	t.Helper()
	if err := b.flushMemtable(); err != nil {
		t.Fatal(err)
	}
	if err := b.db.Flatten(1); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(b.dir)
	if err != nil {
		t.Fatal(err)
	}
	var size int64
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".sst") {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			size += fi.Size()
		}
	}
	return size
}
