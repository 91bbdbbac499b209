package store

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

// FuzzRecords: the decoders of the records the store keeps for clients,
// for a handoff, for a write lease, for a TTL lease and for a key's TTL
// lease take any bytes without panicking, and what they accept encodes
// back to the same bytes.
func FuzzRecords(f *testing.F) {
	rec := clientRecord{last: time.Unix(100, 0).UnixNano()}
	rec.add(outcome{request: 3, version: 7}, 1)
	rec.add(outcome{request: 4, version: 7, fail: failMismatch}, 1)
	rec.add(outcome{request: 5, fail: failNoLease}, 1)
	rec.add(outcome{request: 6, fail: failLeaseFull}, 1)
	rec.add(outcome{request: 7, version: 2, fail: grantedTTL}, 1)
	rec.add(outcome{request: 8, fail: failInvalid}, 1)
	f.Add(rec.encode())
	f.Add(encodeHandoff([]HandedLease{{Client: 9, Key: "k", Left: time.Second}, {Key: "", Left: 1, Token: 4}}))
	f.Add(encodeWriteLease(WriteLease{Token: 3, Session: 4, Term: time.Second}))
	f.Add(encodeWriteLease(WriteLease{Token: 3, Session: 4, Term: time.Second, Client: 5}))
	f.Add(encodeTTLLease(TTLLease{TTL: time.Minute, Remaining: time.Second, Keys: 3, KeyBytes: 12, Gen: 4, KeptAlive: true}))
	f.Add(encodeTTLLease(TTLLease{TTL: time.Minute, Remaining: time.Second, Keys: 2 * MaxTTLKeys, KeyBytes: 2 * MaxTTLKeyBytes, Gen: 1}))
	f.Add(binary.BigEndian.AppendUint64(nil, 7))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 33))
	f.Add(append(make([]byte, 24), 0x80, 0x00)) // a key length in two bytes where one does
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := decodeClientRecord(b); err == nil {
			if got := r.encode(); !bytes.Equal(got, b) {
				t.Errorf("client record %x decodes to %+v, which encodes to %x", b, r, got)
			}
			// Foreign bytes need not hold sorted outcomes: find and add
			// must not panic on them.
			r.find(5)
			r.add(outcome{request: 5}, 2)
		}
		if wl, err := decodeWriteLease([]byte("k"), b); err == nil {
			if got := encodeWriteLease(wl); !bytes.Equal(got, b) {
				t.Errorf("write lease %x decodes to %+v, which encodes to %x", b, wl, got)
			}
		}
		if l, err := decodeTTLLease(9, b); err == nil {
			if l.ID != 9 {
				t.Errorf("TTL lease %x decodes to id %d, want 9", b, l.ID)
			}
			if got := encodeTTLLease(l); !bytes.Equal(got, b) {
				t.Errorf("TTL lease %x decodes to %+v, which encodes to %x", b, l, got)
			}
		}
		if id, err := decodeLeaseID([]byte("k"), b); err == nil {
			if got := binary.BigEndian.AppendUint64(nil, id); !bytes.Equal(got, b) {
				t.Errorf("lease of a key %x decodes to %d, which encodes to %x", b, id, got)
			}
		}
		if ls, err := decodeHandoff(b); err == nil {
			if got := encodeHandoff(ls); !bytes.Equal(got, b) {
				t.Errorf("handoff %x decodes to %+v, which encodes to %x", b, ls, got)
			}
		}
	})
}

// TestTTLLeaseDecode: a lease that counts more keys than MaxTTLKeys and
// MaxTTLKeyBytes allow decodes, so that lowering them cannot make stored
// leases read as corrupt; a lease at attachment generation 0, which no
// grant writes, does not.
func TestTTLLeaseDecode(t *testing.T) {
	big := TTLLease{ID: 9, TTL: time.Minute, Remaining: time.Second, Keys: 2 * MaxTTLKeys, KeyBytes: 2 * MaxTTLKeyBytes, Gen: 5}
	if l, err := decodeTTLLease(9, encodeTTLLease(big)); err != nil || l != big {
		t.Errorf("lease above the limits decodes to %+v, %v; want %+v", l, err, big)
	}
	big.Gen = 0
	if l, err := decodeTTLLease(9, encodeTTLLease(big)); err == nil {
		t.Errorf("lease at generation 0 decodes to %+v; want it corrupt", l)
	}
}
