// Package memtest measures a process's memory for benchmarks of footprint:
// the live Go heap, and the resident memory, which also counts what a
// package maps outside the Go heap. Only tests use it.
package memtest

import (
	"bytes"
	"os"
	"runtime"
	"strconv"
	"time"
)

// HeapInUse returns the bytes of heap spans in use after a collection.
func HeapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// RSS returns the process's resident memory in bytes, or 0 where
// /proc/self/statm does not say. It first collects garbage and gives the
// cleanups that collection queued (such as the unmapping of a lease
// table's storage) a moment to run, so that they do not run during the
// measurement that follows.
func RSS() int64 {
	runtime.GC()
	time.Sleep(100 * time.Millisecond)
	runtime.GC()
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := bytes.Fields(b)
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseInt(string(f[1]), 10, 64)
	if err != nil {
		return 0
	}
	return pages * int64(os.Getpagesize())
}
