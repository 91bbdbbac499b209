package replica

import (
	"log"
	"os"
	"reflect"
)

// raft-wal v0.4.x (the latest release) imports the old
// github.com/coreos/etcd/pkg/fileutil for one call, Preallocate, and that
// package's logger, github.com/coreos/pkg/capnslog, takes over the standard
// library's log package in its init: no flags, and every line through its
// own formatter. An import must not change the logging of the program that
// embeds a server, so replica, the only package that imports raft-wal, puts
// the standard logger back once its imports have run. Upstream moved to
// go.etcd.io/etcd/client/pkg/v3 (no such init) after v0.4.2, in no release
// yet; once one is out, the upgrade makes this file unneeded (the test is
// server.TestImportKeepsStdLog). A replace directive would be no fix: it
// applies to this module's builds, never to a program that imports it.
func init() { undoLogHijack() }

// capnslogPkg is the import path of the package whose init takes over log.
const capnslogPkg = "github.com/coreos/pkg/capnslog"

// undoLogHijack sets log's output, flags and prefix back to Go's defaults
// if capnslog's writer is log's output, and leaves log alone otherwise (a
// program's own choice, made in an init that ran after capnslog's, stays).
// Only replica's init calls it.
func undoLogHijack() {
	t := reflect.TypeOf(log.Writer())
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.PkgPath() != capnslogPkg {
		return
	}
	log.SetOutput(os.Stderr)
	log.SetFlags(log.LstdFlags)
	log.SetPrefix("")
}
