package store

import (
	"bytes"
	"testing"
	"time"
)

// FuzzHolds: a record of held keys (OpSetHorizon's Holds) that decodes
// encodes to the same bytes, and bad bytes are an error, never a panic.
func FuzzHolds(f *testing.F) {
	f.Add(encodeHolds([]HeldKey{{Key: "k", Left: time.Second}, {Key: "", Left: 0}}))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 9))
	f.Add(append(make([]byte, 8), 0x80, 0x00)) // a key length in two bytes where one does
	f.Add(append(make([]byte, 8), 5, 'a'))     // a key cut short
	f.Fuzz(func(t *testing.T, b []byte) {
		hs, err := decodeHolds(b)
		if err != nil {
			return
		}
		if got := encodeHolds(hs); !bytes.Equal(got, b) {
			t.Errorf("held keys %x decode to %+v, which encode to %x", b, hs, got)
		}
	})
}

// TestHoldsDecodeRefusesDamage: a record of held keys cut short, with a
// negative time left, or a key longer than what follows is refused.
func TestHoldsDecodeRefusesDamage(t *testing.T) {
	good := encodeHolds([]HeldKey{{Key: "key", Left: time.Second}})
	for name, b := range map[string][]byte{
		"cut short":     good[:len(good)-1],
		"no key length": good[:8],
		"negative left": append(bytes.Repeat([]byte{0xff}, 8), 0),
		"long key":      append(append([]byte{}, good[:8]...), 9, 'k'),
	} {
		if hs, err := decodeHolds(b); err == nil {
			t.Errorf("%s: %x decodes to %+v", name, b, hs)
		}
	}
}
