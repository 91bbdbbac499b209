package leasetable

import (
	"encoding/binary"
	"fmt"
)

// nameRef names a block of Table.names: its chunk and its offset in the
// chunk, in units of nameAlign bytes. The zero nameRef names no block.
type nameRef uint32

const (
	nameAlign      = 8
	nameChunkBits  = 16 // 64 KiB chunks
	nameChunk      = 1 << nameChunkBits
	nameOffsetBits = nameChunkBits - 3 // log2(nameChunk / nameAlign)
	nameLenSize    = 2
	// maxName is the longest name the arena holds. The server's keys are
	// much shorter (protocol.MaxKeySize).
	maxName = nameChunk - nameAlign - nameLenSize
)

// nameArena holds the names of a Table's keys, in chunks from its offHeap.
// A name takes a block of the next multiple of nameAlign bytes that holds
// its length (nameLenSize bytes) and the name; the blocks
// of each size freed are on a free list of their own (the next block's
// nameRef in a free block's first bytes), and a later name of that size
// reuses them. A block never spans chunks: a name that does not fit in the
// rest of the last chunk starts the next, and the rest stays unused.
type nameArena struct {
	chunks []*[nameChunk]byte
	used   int       // bytes handed out of the last chunk
	free   []nameRef // free blocks by size in units of nameAlign; 0 ends a list
}

// blocks returns the size of the block of a name of n bytes, in units of
// nameAlign.
func blocks(n int) int { return (nameLenSize + n + nameAlign - 1) / nameAlign }

// put stores name and returns its block.
func (a *nameArena) put(o *offHeap, name string) nameRef {
	c := blocks(len(name))
	if len(name) > maxName {
		panic(fmt.Sprintf("leasetable: a key of %d bytes; the longest is %d", len(name), maxName))
	}
	var ref nameRef
	if c < len(a.free) && a.free[c] != 0 {
		ref = a.free[c]
		a.free[c] = nameRef(binary.NativeEndian.Uint32(a.block(ref, c)))
	} else {
		if len(a.chunks) == 0 || a.used+c*nameAlign > nameChunk {
			a.chunks = append(a.chunks, (*[nameChunk]byte)(allocSlice[byte](o, nameChunk)))
			a.used = 0
			if len(a.chunks) == 1 {
				a.used = nameAlign // so that no block is named 0
			}
			if len(a.chunks) > 1<<(32-nameOffsetBits) {
				panic("leasetable: key names take more than the arena can address")
			}
		}
		ref = nameRef((len(a.chunks)-1)<<nameOffsetBits | a.used/nameAlign)
		a.used += c * nameAlign
	}
	b := a.block(ref, c)
	binary.NativeEndian.PutUint16(b, uint16(len(name)))
	copy(b[nameLenSize:], name)
	return ref
}

// block returns the c units of block ref.
func (a *nameArena) block(ref nameRef, c int) []byte {
	off := int(ref&(1<<nameOffsetBits-1)) * nameAlign
	return a.chunks[ref>>nameOffsetBits][off : off+c*nameAlign]
}

// bytes returns the name in block ref.
func (a *nameArena) bytes(ref nameRef) []byte {
	off := int(ref&(1<<nameOffsetBits-1)) * nameAlign
	c := a.chunks[ref>>nameOffsetBits]
	n := int(binary.NativeEndian.Uint16(c[off:]))
	return c[off+nameLenSize : off+nameLenSize+n]
}

// drop frees block ref.
func (a *nameArena) drop(ref nameRef) {
	c := blocks(len(a.bytes(ref)))
	if c >= len(a.free) {
		a.free = append(a.free, make([]nameRef, c+1-len(a.free))...)
	}
	binary.NativeEndian.PutUint32(a.block(ref, c), uint32(a.free[c]))
	a.free[c] = ref
}
