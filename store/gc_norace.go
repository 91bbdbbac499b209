//go:build !race

package store

// gcExcludesChanges: see gc_race.go.
const gcExcludesChanges = false
