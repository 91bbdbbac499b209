package protocol

import (
	"fmt"
	"slices"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

// Range reads: the keys under a prefix, or in [Start, End), in key order
// (DESIGN §3.8).

// List reads the live keys k with Start <= k < End, in key order, at one
// revision. An empty End has no upper bound; a prefix P is the range from P
// to PrefixEnd(P). After, if not empty, skips the keys up to and including
// it, for the next page. Limit, if not 0, bounds the keys of the reply; the
// server bounds them too (HelloReply.MaxListKeys), and its reply's bytes.
// KeysOnly leaves the values out.
type List struct {
	ID       uint64 `msgpack:"i"`
	Start    []byte `msgpack:"s,omitempty"`
	End      []byte `msgpack:"e,omitempty"`
	After    []byte `msgpack:"a,omitempty"`
	Limit    uint32 `msgpack:"l,omitempty"`
	KeysOnly bool   `msgpack:"k,omitempty"`
	// Lease asks for a prefix lease on the listing (DESIGN §3.9): granted
	// (ListReply.Term) only for a prefix range (End is PrefixEnd(Start))
	// whose prefix is empty or ends with '/', read whole in one page from
	// its start (no After), and not written lately.
	Lease bool `msgpack:"ls,omitempty"`
	// Known, with Lease, is the revision of the client's copy of the
	// listing, which it held under a lease that ended: a reply whose
	// listing is leased and that nothing under the prefix changed since
	// says Unchanged and carries no keys. 0: none.
	Known uint64 `msgpack:"kn,omitempty"`
}

// KV is one key of a ListReply, with its version and, unless the List
// asked for keys only, its value. It travels as a three-element array, a
// few bytes a key smaller than a map, and encoded without the per-key
// work of leaving out an empty field.
type KV struct {
	//lint:ignore U1000 msgpack reads the field's tag: encode as an array
	_msgpack struct{} `msgpack:",as_array"`
	Key      []byte
	Value    []byte
	Version  uint64
}

// ListReply answers a List: the keys, in key order, as of Revision; More
// says that the range holds keys past the last one, for a List with After
// set to it.
type ListReply struct {
	ID       uint64 `msgpack:"i"`
	KVs      []KV   `msgpack:"kv,omitempty"`
	Revision uint64 `msgpack:"rev"`
	More     bool   `msgpack:"m,omitempty"`
	// Term is how long the client may answer the listing, and a read of
	// any key under its prefix (found or not), from its cache, counted from
	// when it sent the List: the prefix lease it was granted; 0: none.
	Term time.Duration `msgpack:"t,omitempty"`
	// Unchanged answers List.Known: no key under the prefix changed,
	// and none was created or deleted, after revision Known, so that the
	// client's copy is the listing as of Revision, leased for Term (which
	// is then above 0). The reply carries no keys.
	Unchanged bool `msgpack:"u,omitempty"`
}

func (*List) Type() Type      { return TypeList }
func (*ListReply) Type() Type { return TypeListReply }

// PrefixEnd returns the end of the range of the keys that begin with
// prefix: the least key greater than all of them, or nil (no bound) when
// prefix is empty or all 0xff bytes.
func PrefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// DecodeMsgpack decodes a ListReply as the msgpack encoder writes it (a
// map of its fields, the KVs as three-element arrays), with the keys and
// values of every KV in one buffer: a page of a thousand keys costs a few
// allocations, not three a key. It takes the fields in any order and skips
// those it does not know, as the encoder's reflection-based decoder does;
// a nil field stays the zero value, and a bin of no bytes is an empty,
// not nil, slice, as there.
func (m *ListReply) DecodeMsgpack(dec *msgpack.Decoder) error {
	n, err := dec.DecodeMapLen()
	if err != nil || n < 0 {
		return err // n < 0: nil, the zero ListReply
	}
	*m = ListReply{}
	for range n {
		field, err := dec.DecodeString()
		if err != nil {
			return err
		}
		switch field {
		case "i":
			m.ID, err = dec.DecodeUint64()
		case "rev":
			m.Revision, err = dec.DecodeUint64()
		case "m":
			m.More, err = dec.DecodeBool()
		case "t":
			m.Term, err = dec.DecodeDuration()
		case "kv":
			m.KVs, err = decodeKVs(dec)
		case "u":
			m.Unchanged, err = dec.DecodeBool()
		default:
			err = dec.Skip()
		}
		if err != nil {
			return fmt.Errorf("list reply field %q: %w", field, err)
		}
	}
	return nil
}

// decodeKVs decodes the KVs of a ListReply into one buffer for all their
// keys and values.
func decodeKVs(dec *msgpack.Decoder) ([]KV, error) {
	n, err := dec.DecodeArrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	kvs := make([]KV, n)
	var buf []byte
	// field reads a bin (or nil) into buf and returns its piece of buf.
	field := func() ([]byte, error) {
		size, err := dec.DecodeBytesLen()
		switch {
		case err != nil:
			return nil, err
		case size < 0:
			return nil, nil
		case size == 0:
			return []byte{}, nil
		}
		start := len(buf)
		buf = slices.Grow(buf, size)[:start+size]
		if err := dec.ReadFull(buf[start:]); err != nil {
			return nil, err
		}
		return buf[start : start+size : start+size], nil
	}
	for i := range kvs {
		l, err := dec.DecodeArrayLen()
		if err != nil {
			return nil, err
		}
		if l != 3 {
			return nil, fmt.Errorf("a key of a list reply is an array of %d, not 3", l)
		}
		if kvs[i].Key, err = field(); err != nil {
			return nil, err
		}
		if kvs[i].Value, err = field(); err != nil {
			return nil, err
		}
		if kvs[i].Version, err = dec.DecodeUint64(); err != nil {
			return nil, err
		}
	}
	return kvs, nil
}
