package protocol

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
}

// KV is one key of a ListReply, with its version and, unless the List
// asked for keys only, its value.
type KV struct {
	Key     []byte `msgpack:"k"`
	Value   []byte `msgpack:"v,omitempty"`
	Version uint64 `msgpack:"ver"`
}

// ListReply answers a List: the keys, in key order, as of Revision; More
// says that the range holds keys past the last one, for a List with After
// set to it.
type ListReply struct {
	ID       uint64 `msgpack:"i"`
	KVs      []KV   `msgpack:"kv,omitempty"`
	Revision uint64 `msgpack:"rev"`
	More     bool   `msgpack:"m,omitempty"`
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
