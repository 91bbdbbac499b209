// The key index: how the Table finds a key's record by name (keyIndex, open addressing grown by halves),
// files and drops a key with its name in the arena, and reaches its name and its keyState.

package leasetable

import (
	"hash/maphash"
	"math/bits"
)

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

// newKey files key name, which the Table does not track, and returns its
// record.
func (t *Table) newKey(name string) int32 {
	ki := t.freeRec
	if ki != noLease {
		t.freeRec = t.recs.at(ki).holders
	} else {
		ki = t.recs.add(t.mem)
	}
	*t.recs.at(ki) = keyRec{name: t.names.put(t.mem, name), holders: noLease, ext: noLease}
	t.indexKey(ki)
	return ki
}

// extOf returns the keyState of key name, or nil if it has none.
func (t *Table) extOf(name string) *keyState {
	if ki, ok := t.findKey(name); ok {
		return t.ext(t.recs.at(ki))
	}
	return nil
}

// richKey returns the keyState of key name, made if need be.
func (t *Table) richKey(name string) *keyState {
	ki, ok := t.findKey(name)
	if !ok {
		ki = t.newKey(name)
	}
	return t.makeExt(ki)
}

// gcKey drops the keyState of key record ki once it is idle, and the key
// once it has no lease either.
func (t *Table) gcKey(ki int32) {
	kr := t.recs.at(ki)
	if k := t.ext(kr); k != nil && k.idle() {
		t.dropExt(kr)
	}
	if kr.ext == noLease && kr.n == 0 {
		t.unindexKey(ki)
		t.names.drop(kr.name)
		*kr = keyRec{holders: t.freeRec, ext: noLease}
		t.freeRec = ki
	}
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
