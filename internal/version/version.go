// Package version says which build of leased is running, from the build
// information the Go toolchain stamps into every binary
// (runtime/debug.ReadBuildInfo). The leased and leasectl binaries print
// it, and the server sends it in its hello reply. Its functions are safe
// for concurrent use.
package version

import (
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode"
)

// Unknown is the version of a binary that carries no build information.
const Unknown = "unknown"

// devel is the module version of a build from a work tree that the
// toolchain could not name: go run, go test, or a build without VCS
// stamping.
const devel = "(devel)"

// shortRevision is how many hex digits of a VCS revision are shown, as
// in a Go pseudo-version.
const shortRevision = 12

// String returns the version of the running binary, with no spaces: the
// main module's version, such as v1.2.0 or the pseudo-version go build
// stamps from the work tree; for a (devel) build (go run, go test, or a
// build without VCS stamping), "devel", then the VCS commit time (UTC,
// YYYYMMDDhhmmss) and revision (12 hex digits) when known, as in a
// pseudo-version, and "+dirty" if the work tree had changes, such as
// "devel-20261125030739-3ba5826a1b2c+dirty"; or Unknown.
func String() string {
	current()
	return cur.short
}

// Go returns the Go toolchain that built the binary, such as "go1.26.0",
// or Unknown.
func Go() string {
	current()
	return cur.goVersion
}

// Long returns String followed by Go, such as "v1.2.0 go1.26.0", for
// --version output.
func Long() string {
	current()
	return cur.short + " " + cur.goVersion
}

var (
	once sync.Once
	cur  struct{ short, goVersion string } // set once by current
)

// current reads the build information once.
func current() {
	once.Do(func() {
		bi, ok := debug.ReadBuildInfo()
		cur.short = From(bi, ok)
		cur.goVersion = Unknown
		if ok && bi.GoVersion != "" {
			cur.goVersion = bi.GoVersion
		}
	})
}

// From returns the version that build information bi describes, in the
// form String documents; ok is ReadBuildInfo's second result. String
// uses it; tests call it with build information of their own.
func From(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return Unknown
	}
	if v := bi.Main.Version; v != "" && v != devel {
		return v
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	v := "devel"
	if t, err := time.Parse(time.RFC3339, at); err == nil {
		v += "-" + t.UTC().Format("20060102150405")
	}
	if rev = strings.Map(noSpace, rev); rev != "" {
		v += "-" + rev[:min(len(rev), shortRevision)]
	}
	if modified {
		v += "+dirty"
	}
	return v
}

// noSpace drops white space from a revision, so that the version stays
// one word.
func noSpace(r rune) rune {
	if unicode.IsSpace(r) {
		return -1
	}
	return r
}
