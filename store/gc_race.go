//go:build race

package store

// gcExcludesChanges makes a value-log GC hold the change lock in builds
// with the race detector. badger's value-log rewrite reads
// DB.MaxVersion, which reads the memtable's maxVersion under the
// database's lock, while every write sets it without that lock
// (badger v4.9.6, value.go and memtable.go): a race in badger that the
// detector reports whenever a GC and a write meet. Outside race builds
// the GC runs beside changes, as badger means it to.
const gcExcludesChanges = true
