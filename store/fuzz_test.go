package store

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"
	"time"
)

// FuzzRecords: the decoders of the records the store keeps for clients,
// for a handoff, for a write lease, for a TTL lease, for a key's TTL
// lease and for an event of the history take any bytes without panicking, and what they accept encodes
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
	f.Add(encodeHandoff([]HandedLease{{Client: 9, Key: "d/", Left: time.Second, Prefix: true}, {Key: "", Prefix: true}}))
	rec.add(outcome{request: 9, version: 3, fail: txnThen}, 1)
	rec.add(outcome{request: 10, version: 3, fail: txnElse}, 1)
	f.Add(rec.encode())
	f.Add(encodeWriteLease(WriteLease{Token: 3, Session: 4, Term: time.Second}))
	f.Add(encodeWriteLease(WriteLease{Token: 3, Session: 4, Term: time.Second, Client: 5}))
	f.Add(encodeTTLLease(TTLLease{TTL: time.Minute, Remaining: time.Second, Keys: 3, KeyBytes: 12, Gen: 4, KeptAlive: true}))
	f.Add(encodeTTLLease(TTLLease{TTL: time.Minute, Remaining: time.Second, Keys: 2 * MaxTTLKeys, KeyBytes: 2 * MaxTTLKeyBytes, Gen: 1}))
	f.Add(encodeTTLLease(TTLLease{TTL: time.Minute, Remaining: time.Second, Gen: 1, Owner: 7}))
	f.Add(binary.BigEndian.AppendUint64(nil, 7))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 33))
	f.Add(append(make([]byte, 24), 0x80, 0x00)) // a key length in two bytes where one does
	f.Add(encodeEvent(EventPut, 3, 2, []byte("v")))
	f.Add(encodeEvent(EventExpire, 3, 0, nil))
	f.Add([]byte{byte(EventDelete), 0x80, 0x00, 0x00}) // a lease of 0 in two bytes
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
		if e, prev, err := decodeEvent(5, []byte("k"), b); err == nil {
			if got := encodeEvent(e.Kind, e.Lease, prev, e.Value); !bytes.Equal(got, b) || prev >= 5 {
				t.Errorf("event %x decodes to %+v (previous %d), which encodes to %x", b, e, prev, got)
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
	if l, err := decodeTTLLease(9, encodeTTLLease(big)); err != nil || !reflect.DeepEqual(l, big) {
		t.Errorf("lease above the limits decodes to %+v, %v; want %+v", l, err, big)
	}
	big.Gen = 0
	if l, err := decodeTTLLease(9, encodeTTLLease(big)); err == nil {
		t.Errorf("lease at generation 0 decodes to %+v; want it corrupt", l)
	}
}

// TestTTLLeaseOwnerDecode: a lease record written before leases had an
// owner (33 bytes) decodes as a lease with none, and encodes back to the
// same bytes; a lease with an owner keeps it; an owner of 0 written out
// is corrupt.
func TestTTLLeaseOwnerDecode(t *testing.T) {
	// The record of a lease of a minute, 20 s left, 2 keys of 7 bytes,
	// generation 3, kept alive, as it was written before owners.
	old := []byte{
		0x00, 0x00, 0x00, 0x0d, 0xf8, 0x47, 0x58, 0x00, // TTL: 1m
		0x00, 0x00, 0x00, 0x04, 0xa8, 0x17, 0xc8, 0x00, // remaining: 20s
		0x00, 0x00, 0x00, 0x02, // keys
		0x00, 0x00, 0x00, 0x07, // key bytes
		0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03, // generation
		0x01, // kept alive
	}
	want := TTLLease{ID: 9, TTL: time.Minute, Remaining: 20 * time.Second, Keys: 2, KeyBytes: 7, Gen: 3, KeptAlive: true}
	l, err := decodeTTLLease(9, old)
	if err != nil || !reflect.DeepEqual(l, want) {
		t.Fatalf("old record decodes to %+v, %v; want %+v", l, err, want)
	}
	if b := encodeTTLLease(l); !bytes.Equal(b, old) {
		t.Errorf("a lease without an owner encodes to %x, want the old layout %x", b, old)
	}
	want.Owner = 0xfeed
	b := encodeTTLLease(want)
	if l, err := decodeTTLLease(9, b); err != nil || !reflect.DeepEqual(l, want) {
		t.Errorf("owned lease decodes to %+v, %v; want %+v", l, err, want)
	}
	if l, err := decodeTTLLease(9, append(old, make([]byte, 8)...)); err == nil {
		t.Errorf("lease with owner 0 written out decodes to %+v; want it corrupt", l)
	}
}
