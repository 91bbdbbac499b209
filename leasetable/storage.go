package leasetable

import (
	"hash/maphash"
	"math/bits"
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
//     records (keyPrev, keyNext). The key's name is stored once, in
//     Table.names; a keyState, a notice or a write lease that needs it as a
//     string makes one.
//   - A key that needs more than read holders (a write lease, ops, or more
//     than holderMapAt holders) has a keyState too (keyRec.ext, an index in
//     Table.exts).
//   - A session's read leases are a doubly linked list through their
//     records (sessPrev, sessNext); a record names its session by its slot
//     in Table.slots. A session finds its lease on a key through the key's
//     holders: a short list, or the keyState's bySession map once it is
//     long.
//   - Expiries are nanoseconds since Table.base, the first time the Table
//     was given; the expiry heap (Table.rheap) holds record indexes.
//
// The records, the names, the index and the heap hold no pointers, and a
// large Table keeps them off the Go heap (offheap.go): about 90 bytes a
// read lease on a key of its own (40 of its record, 16 of its key's, its
// name and two bytes of its length rounded up to 8 bytes, 4 in the heap,
// 5.3 to 8 in the index).
//
// Storage only grows: chunks, the names' chunks and the session slots keep
// their peak size once their leases are gone, and later leases reuse them;
// the index and the heap keep their peak capacity, of which only the pages
// touched take memory. Shrinking would mean moving records, whose indexes
// the lists, the heap and bySession hold.
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
	name    nameRef // its name in Table.names
	holders int32   // the first of its read leases, or noLease; free records: the next free
	n       int32   // how many read leases it has
	ext     int32   // its keyState in Table.exts, or noLease if it has only read leases, at most holderMapAt
}

// chunkBits sets the records per chunk of a slab: storage grows a chunk at
// a time, never copying what it holds.
const chunkBits = 10

// slab is a growable array of T addressed by int32 index, in memory from
// an offHeap. T holds no pointers.
type slab[T any] struct {
	chunks []*[1 << chunkBits]T
	n      int32
}

func (s *slab[T]) at(i int32) *T { return &s.chunks[i>>chunkBits][i&(1<<chunkBits-1)] }

// add returns the index of a new zero T.
func (s *slab[T]) add(o *offHeap) int32 {
	if int(s.n) == len(s.chunks)<<chunkBits {
		s.chunks = append(s.chunks, (*[1 << chunkBits]T)(allocSlice[T](o, 1<<chunkBits)))
	}
	s.n++
	return s.n - 1
}

// keyName returns the name of key record ki as bytes in Table.names, valid
// until the record is freed.
func (t *Table) keyName(ki int32) []byte {
	return t.names.bytes(t.recs.at(ki).name)
}

// keyString returns the name of key record ki as a string of its own.
func (t *Table) keyString(ki int32) string { return string(t.keyName(ki)) }

// ext returns the keyState of key record kr, or nil.
func (t *Table) ext(kr *keyRec) *keyState {
	if kr.ext == noLease {
		return nil
	}
	return t.exts.items[kr.ext]
}

// makeExt gives key record ki a keyState, if it has none, and returns it.
func (t *Table) makeExt(ki int32) *keyState {
	kr := t.recs.at(ki)
	if kr.ext != noLease {
		return t.exts.items[kr.ext]
	}
	k := &keyState{name: t.keyString(ki), ki: ki}
	kr.ext = t.exts.add(k)
	return k
}

// dropExt forgets the keyState of key record kr.
func (t *Table) dropExt(kr *keyRec) {
	t.exts.remove(kr.ext)
	kr.ext = noLease
}

// pool is a slice of *T whose freed slots are reused: a T is named by its
// int32 slot, which stays its own until it is removed.
type pool[T any] struct {
	items []*T // nil: a free slot
	free  []int32
}

// add files v in a free slot, or a new one, and returns the slot.
func (p *pool[T]) add(v *T) int32 {
	if n := len(p.free); n > 0 {
		i := p.free[n-1]
		p.free = p.free[:n-1]
		p.items[i] = v
		return i
	}
	p.items = append(p.items, v)
	return int32(len(p.items) - 1)
}

// remove frees slot i.
func (p *pool[T]) remove(i int32) {
	p.items[i] = nil
	p.free = append(p.free, i)
}

// keyIndex finds a key record by name: an open-addressing hash table,
// linear probing, of record indexes plus one (0: an empty slot). It is at
// most three quarters full, and grows by half: its size need not be a
// power of two, for a name's home slot is the high word of its hash times
// the size.
type keyIndex struct {
	seed  maphash.Seed
	slots []int32
	n     int
}

func (t *Table) home(name string) int {
	hi, _ := bits.Mul64(maphash.String(t.index.seed, name), uint64(len(t.index.slots)))
	return int(hi)
}

// homeOf returns the home slot of key record ki: maphash.Bytes hashes the
// bytes as maphash.String hashes the same string.
func (t *Table) homeOf(ki int32) int {
	hi, _ := bits.Mul64(maphash.Bytes(t.index.seed, t.keyName(ki)), uint64(len(t.index.slots)))
	return int(hi)
}

// after returns the slot after slot i of the index.
func (t *Table) after(i int) int {
	if i++; i == len(t.index.slots) {
		return 0
	}
	return i
}

// findKey returns the record of key name.
func (t *Table) findKey(name string) (int32, bool) {
	x := &t.index
	if x.n == 0 {
		return noLease, false
	}
	for i := t.home(name); ; i = t.after(i) {
		v := x.slots[i]
		if v == 0 {
			return noLease, false
		}
		if string(t.keyName(v-1)) == name {
			return v - 1, true
		}
	}
}

// indexKey files record ki under its name, which is not filed yet.
func (t *Table) indexKey(ki int32) {
	x := &t.index
	if (x.n+1)*4 > len(x.slots)*3 {
		old := x.slots
		x.slots = allocSlice[int32](t.mem, max(16, len(old)+len(old)/2))
		if len(old) == 0 {
			x.seed = maphash.MakeSeed()
		}
		for _, v := range old {
			if v != 0 {
				t.place(v)
			}
		}
		releaseSlice(t.mem, old)
	}
	t.place(ki + 1)
	x.n++
}

func (t *Table) place(v int32) {
	x := &t.index
	i := t.homeOf(v - 1)
	for x.slots[i] != 0 {
		i = t.after(i)
	}
	x.slots[i] = v
}

// unindexKey removes record ki, which is filed, and shifts back the
// entries after it that probed past its slot.
func (t *Table) unindexKey(ki int32) {
	x := &t.index
	i := t.homeOf(ki)
	for x.slots[i] != ki+1 {
		i = t.after(i)
	}
	for j := t.after(i); x.slots[j] != 0; j = t.after(j) {
		h := t.homeOf(x.slots[j] - 1)
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
	n := len(t.rheap)
	t.reads.at(li).heapIndex = int32(n)
	t.rheap = grow(t.mem, t.rheap)[:n+1]
	t.rheap[n] = li
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
