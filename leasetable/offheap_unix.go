//go:build unix

package leasetable

import "golang.org/x/sys/unix"

// mapAnon returns n bytes of zeroed private memory outside the Go heap.
// Its pages take memory only once they are touched.
func mapAnon(n int) []byte {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		mapFailed(n, err)
	}
	return b
}

// unmap gives back memory that mapAnon returned.
func unmap(b []byte) {
	if err := unix.Munmap(b); err != nil {
		panic("leasetable: unmap: " + err.Error())
	}
}
