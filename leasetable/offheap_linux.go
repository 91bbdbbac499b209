package leasetable

import "syscall"

// mapAnon returns n bytes of zeroed private memory outside the Go heap.
// Its pages take memory only once they are touched.
func mapAnon(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		mapFailed(n, err)
	}
	return b
}

// unmap gives back memory that mapAnon returned.
func unmap(b []byte) {
	if err := syscall.Munmap(b); err != nil {
		panic("leasetable: unmap: " + err.Error())
	}
}
