package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"

	"github.com/dgraph-io/badger/v4"
)

// Digest is a SHA-256 over the replicated state of a store: every key of
// the layout (values with their versions, deletions, the counters, the
// write leases, the horizon, the leader record, the TTL leases and the
// keys attached to them) in key order, and nothing
// that is a node's own, such as its applied index. Two stores that applied
// the same commands have the same digest, whatever their history of
// batches, restarts and snapshots; a store that holds anything else has
// another one, but for a collision of SHA-256.
type Digest [sha256.Size]byte

// String returns the digest in hex.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// Summary describes the state of a store at one moment, for tools that
// compare replicas (leased inspect) and for tests.
type Summary struct {
	// Applied is the applied index (see Badger.AppliedIndex); 0 for a
	// Memory.
	Applied uint64
	// State is what State returns.
	State State
	// Keys is the number of keys that hold a value, and Deleted the number
	// of keys whose last change was a deletion.
	Keys, Deleted int
	// Digest is the digest of the replicated state.
	Digest Digest
}

// perNode tells whether a stored key is a node's own, left out of the
// digest: the applied index is a position in one node's log, and the
// snapshot format carries it apart from the state too; a key under
// gcPrefix exists only while the garbage collector flushes the memtable
// (gc.go). Every other key is replicated, so that a key a new command
// brings is in the digest by default.
func perNode(key []byte) bool {
	return bytes.Equal(key, metaApplied) || bytes.HasPrefix(key, gcPrefix)
}

// summarizer builds a Summary from the stored keys, which it must see in
// key order.
type summarizer struct {
	h       hash.Hash
	n       [binary.MaxVarintLen64]byte
	keys    int
	deleted int
}

func newSummarizer() *summarizer { return &summarizer{h: sha256.New()} }

// add takes one stored key and its value.
func (s *summarizer) add(key, value []byte) error {
	if perNode(key) {
		return nil
	}
	if bytes.HasPrefix(key, dataPrefix) {
		r, err := decodeRecord(value)
		if err != nil {
			return err
		}
		if r.Found {
			s.keys++
		} else {
			s.deleted++
		}
	}
	// Length-prefixed, so that no two sequences of keys and values hash
	// the same bytes.
	for _, p := range [][]byte{key, value} {
		s.h.Write(s.n[:binary.PutUvarint(s.n[:], uint64(len(p)))])
		s.h.Write(p)
	}
	return nil
}

func (s *summarizer) finish(sum *Summary) {
	sum.Keys, sum.Deleted = s.keys, s.deleted
	s.h.Sum(sum.Digest[:0])
}

// Summarize returns the applied index, the state, the number of keys and
// the digest of the database, all from one consistent view. Callers: leased
// inspect, on a stopped node's folder, and tests that compare replicas.
func (b *Badger) Summarize() (Summary, error) {
	var sum Summary
	b.mu.RLock()
	defer b.mu.RUnlock()
	if err := b.usable(); err != nil {
		return sum, err
	}
	err := b.db.View(func(t *badger.Txn) error {
		tx := badgerTxn{t}
		ct, err := loadCounters(tx)
		if err != nil {
			return err
		}
		st := &sum.State
		st.Revision, st.Fence, st.TTLLeaseID = ct.rev, ct.fence, ct.ttl
		if err := loadMeta(tx, st); err != nil {
			return err
		}
		if sum.Applied, err = getUint(tx, metaApplied); err != nil {
			return err
		}
		s := newSummarizer()
		it := t.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			key := item.Key()
			err := item.Value(func(v []byte) error {
				if bytes.HasPrefix(key, wleasPrefix) {
					wl, err := decodeWriteLease(key[len(wleasPrefix):], v)
					if err != nil {
						return err
					}
					st.WriteLeases = append(st.WriteLeases, wl)
				}
				return s.add(key, v)
			})
			if err != nil {
				return err
			}
		}
		s.finish(&sum)
		return nil
	})
	return sum, err
}

// Digest returns the digest of the replicated state (see Summarize).
func (b *Badger) Digest() (Digest, error) {
	sum, err := b.Summarize()
	return sum.Digest, err
}

// Summarize is Badger.Summarize for a Memory, whose applied index is 0.
// Tests call it to compare a Memory with a Badger.
func (m *Memory) Summarize() (Summary, error) {
	st, err := m.State()
	if err != nil {
		return Summary{}, err
	}
	m.mu.RLock()
	defer m.mu.RUnlock()
	keys := make([]string, 0, len(m.data))
	for k := range m.data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s := newSummarizer()
	for _, k := range keys {
		if err := s.add([]byte(k), m.data[k]); err != nil {
			return Summary{}, err
		}
	}
	sum := Summary{State: st}
	s.finish(&sum)
	return sum, nil
}
