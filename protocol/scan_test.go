package protocol

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// FuzzScanValue checks scanValue, which Decode runs before msgpack, against
// msgpack's own Skip: both must agree on whether bytes start with a whole
// value and on its size, but for values nested deeper than scanValue allows.
func FuzzScanValue(f *testing.F) {
	for _, s := range [][]byte{
		{0x80}, {0xc0}, {0xc1}, {0x91, 0x91, 0xc0},
		{0x82, 0xa1, 'i', 0x01, 0xa1, 'k', 0xc4, 0x01, 'x'},
		{0xdd, 0xff, 0xff, 0xff, 0xff},
		{0xdb, 0x00, 0x00, 0x00, 0x02, 'a', 'b', 0xc0},
		{0xc7, 0x02, 0x05, 'a', 'b'},
		{0xd8, 0x05, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
		{0xdf, 0x00, 0x00, 0x00, 0x01, 0x01, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0},
		append(bytes.Repeat([]byte{0x91}, maxNesting), 0xc0),
		append(bytes.Repeat([]byte{0x91}, maxNesting+1), 0xc0),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n, err := scanValue(data, 0)
		r := bytes.NewReader(data)
		skipErr := msgpack.NewDecoder(r).Skip()
		skipped := len(data) - r.Len()
		switch {
		case err == nil && skipErr != nil:
			t.Fatalf("scanValue = %d, but msgpack cannot skip it: %v", n, skipErr)
		case err == nil && n != skipped:
			t.Fatalf("scanValue = %d, msgpack skipped %d", n, skipped)
		case err != nil && skipErr == nil && !strings.Contains(err.Error(), "nested"):
			t.Fatalf("scanValue: %v, but msgpack skipped %d bytes", err, skipped)
		}
	})
}
