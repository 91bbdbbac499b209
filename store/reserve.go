package store

import "github.com/dgraph-io/badger/v4"

// The sizes of badger's files that Open sets.
const (
	memTableSize     = 16 << 20
	valueLogFileSize = 64 << 20
)

// UnaskedBytes is the most bytes that a database opened by Open writes to
// its folder's file system by itself, on no write's account, and may write
// between two measurements of a disk guard: badger flushes each full
// memtable to a table written through a memory map (MemTableSize each, and
// up to NumMemtables of them queued), and the value-log collector copies the
// live values of a value-log file into a new one (up to ValueLogFileSize).
// A write into a mapped file on a full file system is a SIGBUS, so a disk
// reserve smaller than this (plus the log's own, see package node) cannot
// keep a full disk from killing the process. With Open's options it is
// 5 × 16 MiB + 64 MiB = 144 MiB.
func UnaskedBytes() int64 {
	n := badger.DefaultOptions("").NumMemtables
	return int64(n)*memTableSize + valueLogFileSize
}
