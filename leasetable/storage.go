package leasetable

import (
	"hash/maphash"
	"time"
)

// The Table keeps its read leases and keys in flat storage, so that an
// outstanding read lease costs a few words and no map of its own:
//
//   - A read lease is a readLease record in Table.reads, named by its
//     int32 index. A free record is on a free list through keyNext.
//   - A key with a lease, a write lease or an op is a keyRec in
//     Table.recs, named by its index, and found by name through
//     Table.index. Its read leases are a doubly linked list through their
//     records (keyPrev, keyNext). The key's name is stored once, in its
//     keyRec: notices and write leases share that string.
//   - A key that needs more than read holders (a write lease, ops, or more
//     than holderMapAt holders) has a keyState too (keyRec.ext).
//   - A session's read leases are a doubly linked list through their
//     records (sessPrev, sessNext); a record names its session by its slot
//     in Table.slots. A session finds its lease on a key through the key's
//     holders: a short list, or the keyState's bySession map once it is
//     long.
//   - Expiries are nanoseconds since Table.base, the first time the Table
//     was given; the expiry heap (Table.rheap) holds record indexes.
//
// Storage only grows: chunks, the key index, the heap and the session
// slots keep their peak size once their leases are gone (about 85 bytes a
// read lease: 40 of its record, 32 of its key's, 4 in the heap, 4 to 8 in
// the index), and later leases reuse them. Shrinking would mean moving
// records, whose indexes the lists, the heap and bySession hold.
//
// A record's index is reused only once it is on no list and not in the
// heap (freeRead); a key record's only once it has no holder and no
// keyState (gcKey); a session's slot only once no read lease names it
// (gcSession).

// noLease ends a list of read leases, and marks a record or a key without
// one.
const noLease int32 = -1

// holderMapAt is the number of read holders past which a key indexes them
// by session in a map (keyState.bySession), so that finding a session's
// lease on a hot key does not walk all of its holders.
var holderMapAt int32 = 8

// readLease is one session's read lease on one key.
type readLease struct {
	expiry             int64 // ns since Table.base, ε included
	key                int32 // in Table.recs
	session            int32 // slot in Table.slots; noLease when free
	heapIndex          int32 // in Table.rheap
	keyPrev, keyNext   int32 // the key's holders
	sessPrev, sessNext int32 // the session's read leases
	invalidated        bool  // an invalidation was sent
}

// keyRec is a key the Table tracks.
type keyRec struct {
	name    string
	holders int32     // the first of its read leases, or noLease; free records: the next free
	n       int32     // how many read leases it has
	ext     *keyState // nil if it has only read leases, at most holderMapAt
}

// chunkBits sets the records per chunk of a slab: storage grows a chunk at
// a time, never copying what it holds.
const chunkBits = 10

// slab is a growable array of T addressed by int32 index.
type slab[T any] struct {
	chunks []*[1 << chunkBits]T
	n      int32
}

func (s *slab[T]) at(i int32) *T { return &s.chunks[i>>chunkBits][i&(1<<chunkBits-1)] }

// add returns the index of a new zero T.
func (s *slab[T]) add() int32 {
	if int(s.n) == len(s.chunks)<<chunkBits {
		s.chunks = append(s.chunks, new([1 << chunkBits]T))
	}
	s.n++
	return s.n - 1
}

// keyIndex finds a key record by name: an open-addressing hash table,
// linear probing, of record indexes plus one (0: an empty slot).
type keyIndex struct {
	seed  maphash.Seed
	slots []int32
	n     int
}

func (t *Table) home(name string) int {
	return int(maphash.String(t.index.seed, name) & uint64(len(t.index.slots)-1))
}

// findKey returns the record of key name.
func (t *Table) findKey(name string) (int32, bool) {
	x := &t.index
	if x.n == 0 {
		return noLease, false
	}
	mask := len(x.slots) - 1
	for i := t.home(name); ; i = (i + 1) & mask {
		v := x.slots[i]
		if v == 0 {
			return noLease, false
		}
		if t.recs.at(v-1).name == name {
			return v - 1, true
		}
	}
}

// indexKey files record ki under its name, which is not filed yet.
func (t *Table) indexKey(ki int32) {
	x := &t.index
	if (x.n+1)*4 > len(x.slots)*3 {
		old := x.slots
		x.slots = make([]int32, max(16, 2*len(old)))
		if len(old) == 0 {
			x.seed = maphash.MakeSeed()
		}
		for _, v := range old {
			if v != 0 {
				t.place(v)
			}
		}
	}
	t.place(ki + 1)
	x.n++
}

func (t *Table) place(v int32) {
	x := &t.index
	mask := len(x.slots) - 1
	i := t.home(t.recs.at(v - 1).name)
	for x.slots[i] != 0 {
		i = (i + 1) & mask
	}
	x.slots[i] = v
}

// unindexKey removes record ki, which is filed, and shifts back the
// entries after it that probed past its slot.
func (t *Table) unindexKey(ki int32) {
	x := &t.index
	mask := len(x.slots) - 1
	i := t.home(t.recs.at(ki).name)
	for x.slots[i] != ki+1 {
		i = (i + 1) & mask
	}
	for j := (i + 1) & mask; x.slots[j] != 0; j = (j + 1) & mask {
		h := t.home(t.recs.at(x.slots[j] - 1).name)
		// The entry at j may move to i if its home is not in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			x.slots[i] = x.slots[j]
			i = j
		}
	}
	x.slots[i] = 0
	x.n--
}

// ns turns a time into the Table's nanoseconds; the first time it is given
// fixes the base.
func (t *Table) ns(at time.Time) int64 {
	if !t.based {
		t.base, t.based = at, true
	}
	return int64(at.Sub(t.base))
}

// time turns the Table's nanoseconds back into a time.
func (t *Table) time(ns int64) time.Time { return t.base.Add(time.Duration(ns)) }

// The read-lease expiry heap: a min-heap of record indexes by expiry, each
// record keeping its place (heapIndex).

func (t *Table) rless(i, j int) bool {
	return t.reads.at(t.rheap[i]).expiry < t.reads.at(t.rheap[j]).expiry
}

func (t *Table) rswap(i, j int) {
	h := t.rheap
	h[i], h[j] = h[j], h[i]
	t.reads.at(h[i]).heapIndex = int32(i)
	t.reads.at(h[j]).heapIndex = int32(j)
}

func (t *Table) rup(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !t.rless(j, i) {
			break
		}
		t.rswap(i, j)
		j = i
	}
}

func (t *Table) rdown(i0, n int) bool {
	i := i0
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 {
			break
		}
		j := j1
		if j2 := j1 + 1; j2 < n && t.rless(j2, j1) {
			j = j2
		}
		if !t.rless(j, i) {
			break
		}
		t.rswap(i, j)
		i = j
	}
	return i > i0
}

func (t *Table) rpush(li int32) {
	t.reads.at(li).heapIndex = int32(len(t.rheap))
	t.rheap = append(t.rheap, li)
	t.rup(len(t.rheap) - 1)
}

func (t *Table) rremove(li int32) {
	i := int(t.reads.at(li).heapIndex)
	n := len(t.rheap) - 1
	if n != i {
		t.rswap(i, n)
		if !t.rdown(i, n) {
			t.rup(i)
		}
	}
	t.rheap = t.rheap[:n]
	t.reads.at(li).heapIndex = noLease
}

// rfix restores the heap after the expiry of record li changed.
func (t *Table) rfix(li int32) {
	i := int(t.reads.at(li).heapIndex)
	if !t.rdown(i, len(t.rheap)) {
		t.rup(i)
	}
}
