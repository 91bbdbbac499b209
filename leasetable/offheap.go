package leasetable

import (
	"fmt"
	"runtime"
	"unsafe"
)

// A Table with many read leases keeps their records, its keys' records and
// names, its key index and its expiry heap outside the Go heap, in memory
// it maps itself (offHeap). They hold no pointers, so the collector need
// not scan them, and they do not count toward the heap that sets the
// collector's pace: with GOGC at 100 the Go heap may grow to twice its
// live bytes between collections, which doubled the memory a lease took.
// Off the heap, a lease costs what its records hold.
//
// A small Table keeps them on the Go heap (offHeapAt): a process with many
// small Tables, such as a test, would otherwise run out of mappings before
// the collector freed them.

// offHeapAt is the storage a Table takes from the Go heap before it maps
// memory of its own. Tests set it to 0 to map everything.
var offHeapAt = 256 << 10

// offHeap hands out the memory of one Table's flat storage. Only types
// without pointers may live in it (TestOffHeapTypesHoldNoPointers checks
// the Table's): the collector does not see what mapped memory refers to.
// Mapped regions are unmapped when they are released, or when the offHeap
// is garbage (newOffHeap).
type offHeap struct {
	used   int              // bytes handed out and not released
	mapped map[*byte][]byte // mapped regions by their first byte
}

// newOffHeap returns an empty offHeap, which unmaps what is left of it
// once it is garbage: its Table's storage lives as long as the Table.
func newOffHeap() *offHeap {
	o := &offHeap{mapped: make(map[*byte][]byte)}
	runtime.AddCleanup(o, func(mapped map[*byte][]byte) {
		for _, b := range mapped {
			unmap(b)
		}
	}, o.mapped)
	return o
}

// alloc returns n zeroed bytes, aligned to 8 at least.
func (o *offHeap) alloc(n int) []byte {
	o.used += n
	if o.used <= offHeapAt {
		return make([]byte, n)
	}
	b := mapAnon(n)
	o.mapped[&b[0]] = b
	return b
}

// release gives back b, which alloc returned; its contents are gone.
func (o *offHeap) release(b []byte) {
	o.used -= len(b)
	if m, ok := o.mapped[&b[0]]; ok {
		delete(o.mapped, &b[0])
		unmap(m)
	}
}

// allocSlice returns a slice of n zero Ts from o. T must hold no pointers.
func allocSlice[T any](o *offHeap, n int) []T {
	var z T
	b := o.alloc(n * int(unsafe.Sizeof(z)))
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

// releaseSlice gives back s, which allocSlice returned (its whole
// capacity).
func releaseSlice[T any](o *offHeap, s []T) {
	if cap(s) == 0 {
		return
	}
	var z T
	s = s[:cap(s)]
	o.release(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(z))))
}

// grow returns s with room for one more element: s itself, or a copy with
// twice the capacity, the old one released.
func grow[T any](o *offHeap, s []T) []T {
	if len(s) < cap(s) {
		return s
	}
	g := allocSlice[T](o, max(64, 2*cap(s)))
	copy(g, s)
	releaseSlice(o, s)
	return g[:len(s)]
}

// mapFailed reports a failure to map memory: like the runtime's own, it
// ends the process, which cannot go on without the memory.
func mapFailed(n int, err error) {
	panic(fmt.Sprintf("leasetable: cannot map %d bytes for lease storage: %v", n, err))
}
