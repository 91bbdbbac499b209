package leasetable

import "time"

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

// findRead returns session s's read lease on key record ki, or noLease.
func (t *Table) findRead(s *session, ki int32) int32 {
	kr := t.recs.at(ki)
	if k := t.ext(kr); k != nil && k.bySession != nil {
		if li, ok := k.bySession[s.slot]; ok {
			return li
		}
		return noLease
	}
	for li := kr.holders; li != noLease; {
		l := t.reads.at(li)
		if l.session == s.slot {
			return li
		}
		li = l.keyNext
	}
	return noLease
}

// sessionRead returns session s's read lease on key name, or noLease.
func (t *Table) sessionRead(s *session, name string) int32 {
	if ki, ok := t.findKey(name); ok {
		return t.findRead(s, ki)
	}
	return noLease
}

// addRead gives session s a read lease on key record ki until expiry: a
// record linked into the key's and the session's lists and the heap.
func (t *Table) addRead(s *session, ki int32, expiry int64) int32 {
	li := t.freeRead
	if li != noLease {
		t.freeRead = t.reads.at(li).keyNext
	} else {
		li = t.reads.add(t.mem)
	}
	kr := t.recs.at(ki)
	*t.reads.at(li) = readLease{expiry: expiry, key: ki, session: s.slot, keyPrev: noLease, keyNext: kr.holders, sessPrev: noLease, sessNext: s.reads}
	if kr.holders != noLease {
		t.reads.at(kr.holders).keyPrev = li
	}
	kr.holders = li
	kr.n++
	if s.reads != noLease {
		t.reads.at(s.reads).sessPrev = li
	}
	s.reads = li
	s.nreads++
	t.indexHolder(ki, s.slot, li)
	t.rpush(li)
	t.stats.Leases++
	return li
}

// indexHolder files read lease li of session slot on key record ki in the
// key's bySession map, making it once the key has more than holderMapAt
// holders.
func (t *Table) indexHolder(ki, slot, li int32) {
	kr := t.recs.at(ki)
	if k := t.ext(kr); kr.n <= holderMapAt && (k == nil || k.bySession == nil) {
		return
	}
	k := t.makeExt(ki)
	if k.bySession == nil {
		k.bySession = make(map[int32]int32, kr.n)
		for h := kr.holders; h != noLease; h = t.reads.at(h).keyNext {
			k.bySession[t.reads.at(h).session] = h
		}
		return
	}
	k.bySession[slot] = li
}

// unlinkSession takes read lease li out of its session's list.
func (t *Table) unlinkSession(li int32) {
	l := t.reads.at(li)
	s := t.slots.items[l.session]
	if l.sessPrev != noLease {
		t.reads.at(l.sessPrev).sessNext = l.sessNext
	} else {
		s.reads = l.sessNext
	}
	if l.sessNext != noLease {
		t.reads.at(l.sessNext).sessPrev = l.sessPrev
	}
	s.nreads--
}

// moveRead gives read lease li to session s, which holds none on its key.
func (t *Table) moveRead(li int32, s *session) {
	l := t.reads.at(li)
	t.unlinkSession(li)
	if k := t.ext(t.recs.at(l.key)); k != nil && k.bySession != nil {
		delete(k.bySession, l.session)
		k.bySession[s.slot] = li
	}
	l.session = s.slot
	l.sessPrev, l.sessNext = noLease, s.reads
	if s.reads != noLease {
		t.reads.at(s.reads).sessPrev = li
	}
	s.reads = li
	s.nreads++
}

// removeRead takes read lease li off its key's and its session's lists and
// out of the heap, stops counting it, and frees its record. It neither
// moves the key's ops on nor forgets the key or the session.
func (t *Table) removeRead(li int32) {
	l := t.reads.at(li)
	kr := t.recs.at(l.key)
	if l.keyPrev != noLease {
		t.reads.at(l.keyPrev).keyNext = l.keyNext
	} else {
		kr.holders = l.keyNext
	}
	if l.keyNext != noLease {
		t.reads.at(l.keyNext).keyPrev = l.keyPrev
	}
	kr.n--
	if k := t.ext(kr); k != nil && k.bySession != nil {
		delete(k.bySession, l.session)
		if kr.n == 0 {
			k.bySession = nil
		}
	}
	t.unlinkSession(li)
	t.rremove(li)
	t.stats.Leases--
	*l = readLease{session: noLease, keyNext: t.freeRead}
	t.freeRead = li
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
