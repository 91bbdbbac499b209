//go:build !linux

package leasetable

// mapAnon returns n zeroed bytes. Off Linux they come from the Go heap.
func mapAnon(n int) []byte { return make([]byte, n) }

// unmap does nothing: the collector frees what mapAnon returned.
func unmap([]byte) {}
