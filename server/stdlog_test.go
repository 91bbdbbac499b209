package server_test

import (
	"io"
	"log"
	"os"
	"testing"
)

// stdLogAtInit is the standard library's logger as package initialization
// left it: after the init of every package that server imports, and before
// any test could change it. A program that embeds a server sees the same.
var stdLogAtInit = struct {
	flags  int
	prefix string
	out    io.Writer
}{log.Flags(), log.Prefix(), log.Writer()}

// TestImportKeepsStdLog checks that importing server leaves the package log
// as Go starts it (date and time, no prefix, standard error), so the log
// lines of a program that embeds a server keep their format and their
// destination. raft-wal's dependency on an old etcd package once replaced
// all three in an init (replica/stdlog.go).
func TestImportKeepsStdLog(t *testing.T) {
	if got := stdLogAtInit.flags; got != log.LstdFlags {
		t.Errorf("log.Flags() after imports = %d, want log.LstdFlags (%d)", got, log.LstdFlags)
	}
	if got := stdLogAtInit.prefix; got != "" {
		t.Errorf("log.Prefix() after imports = %q, want \"\"", got)
	}
	if got := stdLogAtInit.out; got != io.Writer(os.Stderr) {
		t.Errorf("log.Writer() after imports = %T, want os.Stderr", got)
	}
}
