package store_test

import (
	"fmt"
	"testing"

	"github.com/leased/leased/store"
)

// BenchmarkBadgerGet reads keys of a database whose tables are on disk, as
// after a restart: small values from the tables, large ones from the value
// log. It measures the cost of badger's checksum verification on reads.
func BenchmarkBadgerGet(b *testing.B) {
	for _, size := range []int{100, 128 << 10} {
		b.Run(fmt.Sprintf("value=%d", size), func(b *testing.B) {
			dir := b.TempDir()
			db, err := store.Open(dir, quietLogger())
			if err != nil {
				b.Fatal(err)
			}
			const keys = 1000
			val := make([]byte, size)
			for i := range keys {
				if _, err := db.Apply([]store.Command{{Op: store.OpPut, Key: fmt.Appendf(nil, "k%04d", i), Value: val}}); err != nil {
					b.Fatal(err)
				}
			}
			// Reopen, so that the values are read from files, not the
			// memtable.
			db.Close()
			if db, err = store.Open(dir, quietLogger()); err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				r, err := db.Get(fmt.Appendf(nil, "k%04d", i%keys))
				if err != nil || !r.Found {
					b.Fatalf("get: %+v, %v", r, err)
				}
			}
		})
	}
}

// BenchmarkRange lists 100 keys of 100-byte values, in one range, from a
// database whose tables are on disk, as after a restart: with their
// values, and keys only.
func BenchmarkRange(b *testing.B) {
	dir := b.TempDir()
	db, err := store.Open(dir, quietLogger())
	if err != nil {
		b.Fatal(err)
	}
	const keys = 100
	val := make([]byte, 100)
	cmds := make([]store.Command, keys)
	for i := range cmds {
		cmds[i] = store.Command{Op: store.OpPut, Key: fmt.Appendf(nil, "k%04d", i), Value: val}
	}
	// Keys around the range, that it must not list.
	cmds = append(cmds, store.Command{Op: store.OpPut, Key: []byte("j"), Value: val}, store.Command{Op: store.OpPut, Key: []byte("l"), Value: val})
	if _, err := db.Apply(cmds); err != nil {
		b.Fatal(err)
	}
	db.Close()
	if db, err = store.Open(dir, quietLogger()); err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	for _, keysOnly := range []bool{false, true} {
		b.Run(fmt.Sprintf("keysonly=%v", keysOnly), func(b *testing.B) {
			opts := store.RangeOptions{Start: []byte("k"), End: []byte("l"), KeysOnly: keysOnly}
			for b.Loop() {
				r, err := db.Range(opts)
				if err != nil || len(r.KVs) != keys || r.More {
					b.Fatalf("range: %d keys, more %v, %v", len(r.KVs), r.More, err)
				}
			}
		})
	}
}

// BenchmarkBadgerPut applies puts of 100-byte values to 1,000 keys, a
// command a step, without syncing (store.NoSync): the work of a step in
// the store, without the disk's flush, which a put pays besides.
func BenchmarkBadgerPut(b *testing.B) {
	db, err := store.Open(b.TempDir(), quietLogger(), store.NoSync())
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	val := make([]byte, 100)
	for i := 0; b.Loop(); i++ {
		if _, err := db.Apply([]store.Command{{Op: store.OpPut, Key: fmt.Appendf(nil, "k%04d", i%1000), Value: val}}); err != nil {
			b.Fatal(err)
		}
	}
}
