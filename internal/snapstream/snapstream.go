// Package snapstream is what both ends of a backup know of the snapshot
// stream's frame: the magic line that opens it, the applied index after
// it, and the CRC-32C of everything before the last four bytes, which
// close it. Package store writes and reads the whole format; a client
// (leasectl snapshot save) checks a stream with a Checker as it writes it
// to a file, without linking the store.
package snapstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
)

// Magic opens every snapshot stream, with the format's version.
const Magic = "leased-snapshot-1\n"

// ErrCorrupt is the error of a stream that is not a whole snapshot: cut
// short, changed, or not a snapshot at all. store.ErrCorruptSnapshot is
// this error.
var ErrCorrupt = errors.New("corrupt snapshot")

// Castagnoli is the CRC-32C table of the stream's sum.
var Castagnoli = crc32.MakeTable(crc32.Castagnoli)

// headLen is as much of the head as a Checker keeps: the magic and the
// longest uvarint.
const headLen = len(Magic) + binary.MaxVarintLen64

// Checker is an io.Writer that checks a snapshot stream written to it, in
// any pieces: Check, once the whole stream is written, says whether it is
// one. It keeps only the head and the last four bytes. The zero value is
// ready to use; it is not safe for concurrent use.
type Checker struct {
	crc  hash.Hash32
	head []byte
	tail []byte // the last bytes written, up to four: the sum, at the end
	n    int64
}

// Write takes the next piece of the stream. It never fails.
func (c *Checker) Write(p []byte) (int, error) {
	if c.crc == nil {
		c.crc = crc32.New(Castagnoli)
	}
	c.n += int64(len(p))
	if len(c.head) < headLen {
		c.head = append(c.head, p[:min(len(p), headLen-len(c.head))]...)
	}
	// Everything but the last four bytes so far is summed.
	all := len(c.tail) + len(p)
	if all <= 4 {
		c.tail = append(c.tail, p...)
		return len(p), nil
	}
	sum := all - 4
	if sum <= len(c.tail) { // then p is four bytes or fewer
		t := append(append([]byte{}, c.tail...), p...)
		c.crc.Write(t[:sum])
		c.tail = t[sum:]
		return len(p), nil
	}
	c.crc.Write(c.tail)
	c.crc.Write(p[:sum-len(c.tail)])
	c.tail = append(c.tail[:0], p[len(p)-4:]...)
	return len(p), nil
}

// Len is how many bytes were written.
func (c *Checker) Len() int64 { return c.n }

// Check returns the applied index in the stream's head if what was written
// is a whole snapshot stream, and an error that wraps ErrCorrupt if not.
// It checks the frame (magic, index, sum), not the keys between.
func (c *Checker) Check() (uint64, error) {
	if len(c.head) < len(Magic)+1 || string(c.head[:len(Magic)]) != Magic {
		return 0, fmt.Errorf("%w: not a leased snapshot", ErrCorrupt)
	}
	idx, n := binary.Uvarint(c.head[len(Magic):])
	if n <= 0 {
		return 0, fmt.Errorf("%w: bad applied index", ErrCorrupt)
	}
	if len(c.tail) < 4 || c.n < int64(len(Magic)+n+1+4) {
		return 0, fmt.Errorf("%w: cut short after %d bytes", ErrCorrupt, c.n)
	}
	if got, want := binary.BigEndian.Uint32(c.tail), c.crc.Sum32(); got != want {
		return 0, fmt.Errorf("%w: checksum %08x, want %08x", ErrCorrupt, got, want)
	}
	return idx, nil
}
