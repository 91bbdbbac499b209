package server

import (
	"bytes"
	"fmt"

	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// MaxListKeys bounds the keys of one ListReply; a List may ask for fewer.
// A client pages past it with After (More says there is more).
const MaxListKeys = 1000

// listOverhead bounds the bytes a ListReply spends on each key besides the
// key and its value (msgpack's map header, field names and lengths, and the
// version).
const listOverhead = 40

// listBounds returns the bounds of one ListReply for a server whose values
// are at most maxValueSize bytes: at most keys keys, whose keys and values
// take at most size bytes, so that the reply fits the frame size that a
// GetReply of the largest value does (Config.maxFrameSize). A single key
// whose value takes more than size is still returned, alone: it fits as
// its GetReply would.
func listBounds(maxValueSize int) (keys, size int) {
	size = maxValueSize / 2
	keys = min(MaxListKeys, max(1, size/listOverhead))
	return keys, size
}

// checkRange checks the keys of a List: none longer than MaxKeySize. A
// start past its end is the core's to refuse (core.Core.List).
func checkRange(m *protocol.List) error {
	for _, k := range [][]byte{m.Start, m.End, m.After} {
		if len(k) > MaxKeySize {
			return fmt.Errorf("%w: key of %d bytes, limit %d", errTooLarge, len(k), MaxKeySize)
		}
	}
	return nil
}

// list answers a List from the core (DESIGN §3.8), with a prefix lease if
// it asks for one and the core grants it (§3.9), and Unchanged, with no
// keys, if the listing is leased and nothing under the prefix changed
// since the revision the client knows.
func (ss *session) list(m *protocol.List) protocol.Message {
	if err := checkRange(m); err != nil {
		return errorReply(m.ID, err)
	}
	keys, size := listBounds(ss.srv.cfg.MaxValueSize)
	if m.Limit > 0 && int(m.Limit) < keys {
		keys = int(m.Limit)
	}
	// A prefix lease covers a prefix's whole range only.
	lease := m.Lease && bytes.Equal(m.End, protocol.PrefixEnd(m.Start))
	r, term, err := ss.core.List(ss.id, store.RangeOptions{
		Start: m.Start, End: m.End, After: m.After, Limit: keys, MaxBytes: size, KeysOnly: m.KeysOnly, Known: m.Known,
	}, lease)
	if err != nil {
		return errorReply(m.ID, err)
	}
	reply := &protocol.ListReply{ID: m.ID, Revision: r.Revision, More: r.More, Term: term, Unchanged: r.Unchanged}
	if len(r.KVs) > 0 {
		reply.KVs = make([]protocol.KV, len(r.KVs))
		for i, kv := range r.KVs {
			reply.KVs[i] = protocol.KV{Key: kv.Key, Value: kv.Value, Version: kv.Version}
		}
	}
	return reply
}
