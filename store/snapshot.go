// A snapshot written and restored: Snapshot streams the whole database at its applied index (format:
// internal/snapstream), Restore replaces the database with such a stream, Bump raises its counters.

package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/dgraph-io/badger/v4"

	"github.com/leased/leased/internal/snapstream"
)

// snapshotMagic opens every snapshot stream, with the format's version.
const snapshotMagic = snapstream.Magic

// ErrCorruptSnapshot is returned by Restore for a stream that is not a
// whole snapshot. It is snapstream.ErrCorrupt, which clients that check a
// stream without the store return too.
var ErrCorruptSnapshot = snapstream.ErrCorrupt

// Snapshot is a consistent view of the whole database, taken by
// Badger.Snapshot, that WriteTo streams while changes go on beside it.
type Snapshot struct {
	b       *Badger
	t       *badger.Txn
	applied uint64
}

// Snapshot makes every applied change durable and returns a view of the
// database as it is now. The caller must Release it.
func (b *Badger) Snapshot() (*Snapshot, error) {
	b.amu.Lock() // no entry half applied
	defer b.amu.Unlock()
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.usable(); err != nil {
		return nil, err
	}
	if err := b.db.Sync(); err != nil {
		return nil, fmt.Errorf("sync before a snapshot: %w", err)
	}
	t := b.db.NewTransaction(false)
	applied, err := getUint(badgerTxn{t}, metaApplied)
	if err != nil {
		t.Discard()
		return nil, err
	}
	return &Snapshot{b: b, t: t, applied: applied}, nil
}

// AppliedIndex is the applied index the snapshot holds.
func (s *Snapshot) AppliedIndex() uint64 { return s.applied }

// WriteTo streams the snapshot to w: the format's magic line, the applied
// index, every key and value, and a CRC-32C of all of it. Restore reads it.
func (s *Snapshot) WriteTo(w io.Writer) (int64, error) { return s.write(w, nil) }

// write is WriteTo, and hands visit, if not nil, every key and value it
// writes.
func (s *Snapshot) write(w io.Writer, visit func(key, value []byte) error) (int64, error) {
	cw := &countWriter{w: bufio.NewWriterSize(w, 256<<10), crc: crc32.New(castagnoli)}
	cw.Write([]byte(snapshotMagic))
	cw.uvarint(s.applied)
	it := s.t.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64})
	defer it.Close()
	for it.Rewind(); it.Valid() && cw.err == nil; it.Next() {
		item := it.Item()
		if perNode(item.Key()) {
			continue // the applied index is written by Restore last, from the header
		}
		err := item.Value(func(v []byte) error {
			cw.uvarint(uint64(len(item.Key())) + 1) // 0 ends the stream
			cw.Write(item.Key())
			cw.uvarint(uint64(len(v)))
			cw.Write(v)
			if visit != nil {
				return visit(item.Key(), v)
			}
			return nil
		})
		if err != nil {
			return cw.n, err
		}
	}
	cw.uvarint(0)
	sum := cw.crc.Sum32()
	cw.crc = nil
	cw.Write(binary.BigEndian.AppendUint32(nil, sum))
	if cw.err != nil {
		return cw.n, cw.err
	}
	return cw.n, cw.w.(*bufio.Writer).Flush()
}

// Release ends the view.
func (s *Snapshot) Release() { s.t.Discard() }

var castagnoli = snapstream.Castagnoli

// countWriter writes to w, counting bytes and summing them into crc, and
// keeps the first error.
type countWriter struct {
	w   io.Writer
	crc hash.Hash32
	n   int64
	err error
}

func (c *countWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.crc != nil {
		c.crc.Write(p)
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}

func (c *countWriter) uvarint(v uint64) { c.Write(binary.AppendUvarint(nil, v)) }

// SnapshotIndex reads the applied index from the head of a snapshot stream
// and returns it with a reader of the whole stream, head included, for
// Restore: the caller can skip a snapshot older than what it holds.
func SnapshotIndex(r io.Reader) (uint64, io.Reader, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	head, err := br.Peek(len(snapshotMagic) + binary.MaxVarintLen64)
	if len(head) < len(snapshotMagic)+1 {
		return 0, nil, fmt.Errorf("%w: %d bytes of header: %v", ErrCorruptSnapshot, len(head), err)
	}
	if string(head[:len(snapshotMagic)]) != snapshotMagic {
		return 0, nil, fmt.Errorf("%w: not a leased snapshot", ErrCorruptSnapshot)
	}
	idx, n := binary.Uvarint(head[len(snapshotMagic):])
	if n <= 0 {
		return 0, nil, fmt.Errorf("%w: bad applied index", ErrCorruptSnapshot)
	}
	return idx, br, nil
}

// maxSnapshotItem bounds a key or value read by Restore, so that a corrupt
// length cannot make it allocate without limit.
const maxSnapshotItem = 256 << 20

// Restore replaces the whole database with the snapshot r streams (see
// Snapshot.WriteTo). It writes the applied index last, after everything
// else is durable, so that a crash during a restore leaves an applied index
// of 0, and the log restores the snapshot again on the next start. A
// stream that is cut short or corrupt is an error (ErrCorruptSnapshot), and
// leaves the database empty with applied index 0.
func (b *Badger) Restore(r io.Reader) error {
	// A value-log GC must not run while the database is dropped and
	// loaded again: it could read a file DropAll unmapped, or write the old
	// state's values back into the new one.
	b.gc.run.Lock()
	defer b.gc.run.Unlock()
	unlock, err := b.lockChange()
	defer unlock()
	if err != nil {
		return err
	}
	if err := b.db.DropAll(); err != nil {
		b.fail()
		return fmt.Errorf("restore: drop the old state: %w", err)
	}
	b.ct, b.applied = counters{}, 0
	b.clients.clear()
	applied, err := b.load(r)
	if err == nil {
		// A snapshot of a database written before the records were
		// counted has no count.
		err = countRecords(b.db)
	}
	if err == nil {
		err = b.db.Sync()
	}
	if err == nil {
		err = b.db.Update(func(t *badger.Txn) error { return setUint(badgerTxn{t}, metaApplied, applied) })
	}
	if err == nil {
		err = b.db.Sync()
	}
	if err == nil {
		err = b.db.View(func(t *badger.Txn) error {
			var err error
			b.ct, err = loadCounters(badgerTxn{t})
			return err
		})
	}
	if err != nil {
		if !errors.Is(err, ErrCorruptSnapshot) {
			b.fail()
		}
		b.db.DropAll()
		b.ct = counters{}
		return fmt.Errorf("restore: %w", err)
	}
	b.applied = applied
	return nil
}

// load writes the keys of a snapshot stream, checks its sum, and returns
// its applied index.
func (b *Badger) load(r io.Reader) (uint64, error) {
	wb := b.db.NewWriteBatch()
	defer wb.Cancel()
	applied, err := readSnapshot(r, wb.Set)
	if err != nil {
		return 0, err
	}
	return applied, wb.Flush()
}

// readSnapshot reads a snapshot stream, hands each key and value to fn in
// the stream's order, checks the stream's sum, and returns its applied
// index. A stream that is cut short, has bytes after its sum, or whose sum
// does not match is ErrCorruptSnapshot; fn has then seen part of it.
func readSnapshot(r io.Reader, fn func(key, value []byte) error) (uint64, error) {
	br := bufio.NewReaderSize(r, 256<<10)
	sr := &sumReader{br: br, crc: crc32.New(castagnoli)}
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(sr, magic); err != nil || string(magic) != snapshotMagic {
		return 0, fmt.Errorf("%w: not a leased snapshot", ErrCorruptSnapshot)
	}
	applied, err := binary.ReadUvarint(sr)
	if err != nil {
		return 0, fmt.Errorf("%w: applied index: %v", ErrCorruptSnapshot, err)
	}
	for {
		kl, err := binary.ReadUvarint(sr)
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrCorruptSnapshot, err)
		}
		if kl == 0 {
			break
		}
		key, err := readItem(sr, kl-1)
		if err != nil {
			return 0, err
		}
		vl, err := binary.ReadUvarint(sr)
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrCorruptSnapshot, err)
		}
		val, err := readItem(sr, vl)
		if err != nil {
			return 0, err
		}
		if err := fn(key, val); err != nil {
			return 0, err
		}
	}
	want := sr.crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(br, sum[:]); err != nil {
		return 0, fmt.Errorf("%w: no checksum: %v", ErrCorruptSnapshot, err)
	}
	if got := binary.BigEndian.Uint32(sum[:]); got != want {
		return 0, fmt.Errorf("%w: checksum %08x, want %08x", ErrCorruptSnapshot, got, want)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return 0, fmt.Errorf("%w: data after the checksum", ErrCorruptSnapshot)
	}
	return applied, nil
}

// sumReader reads from br and sums what it hands out.
type sumReader struct {
	br  *bufio.Reader
	crc hash.Hash32
}

func (s *sumReader) Read(p []byte) (int, error) {
	n, err := s.br.Read(p)
	s.crc.Write(p[:n])
	return n, err
}

func (s *sumReader) ReadByte() (byte, error) {
	c, err := s.br.ReadByte()
	if err == nil {
		s.crc.Write([]byte{c})
	}
	return c, err
}

func readItem(r io.Reader, n uint64) ([]byte, error) {
	if n > maxSnapshotItem {
		return nil, fmt.Errorf("%w: item of %d bytes", ErrCorruptSnapshot, n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r, p); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptSnapshot, err)
	}
	return p, nil
}

// ErrBumpTooLarge is returned by Bump when a counter would pass the
// largest revision, fencing token or TTL lease id.
var ErrBumpTooLarge = errors.New("bump would overflow a counter")

// Bump raises the revision counter, the fencing-token counter and the TTL
// lease counter by n, durably, changing no key: the next write gets a
// version, the next write lease a fencing token, and the next TTL lease an
// id, more than n above any the database holds, so that none handed out
// after the snapshot and lost with it is handed out again. Changes up to
// the new revision count as forgotten (metaForgotten): a copy of a range
// read before the restore is never found Unchanged, and a read of the
// history from it or below fails with ErrCompacted (metaHistoryFloor).
// Only a restore (replica.Restore) calls it, before any node serves from
// the database: every node restored from one snapshot must get the same n.
func (b *Badger) Bump(n uint64) error {
	unlock, err := b.lockChange()
	defer unlock()
	if err != nil {
		return err
	}
	ct := b.ct
	if ct.rev > ^uint64(0)-n || ct.fence > ^uint64(0)-n || ct.ttl > ^uint64(0)-n {
		return fmt.Errorf("%w: revision %d, fencing token %d and TTL lease id %d raised by %d", ErrBumpTooLarge, ct.rev, ct.fence, ct.ttl, n)
	}
	ct.rev += n
	ct.fence += n
	ct.ttl += n
	if n > 0 {
		ct.history.floor = ct.rev
	}
	err = b.db.Update(func(t *badger.Txn) error {
		tx := badgerTxn{t}
		if err := saveCounters(tx, b.ct, ct); err != nil || n == 0 {
			return err
		}
		// The history between the snapshot and the new revision is not
		// this database's: a copy of a range from it is not revalidated.
		return forget(tx, ct.rev, ct.rev)
	})
	if err == nil {
		err = b.db.Sync()
	}
	if err != nil {
		b.fail()
		return fmt.Errorf("bump the counters: %w", err)
	}
	b.ct = ct
	return nil
}
