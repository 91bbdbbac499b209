package replica

import (
	"bytes"
	"io"
	"log"
	"os"
	"testing"
)

// TestUndoLogHijackKeepsOwnLogger checks that undoLogHijack leaves alone a
// standard logger that capnslog does not hold: a program's own output,
// flags and prefix stay. The case where capnslog holds it is
// server.TestImportKeepsStdLog.
func TestUndoLogHijackKeepsOwnLogger(t *testing.T) {
	t.Cleanup(func() {
		log.SetOutput(os.Stderr)
		log.SetFlags(log.LstdFlags)
		log.SetPrefix("")
	})
	var own bytes.Buffer
	log.SetOutput(&own)
	log.SetFlags(log.Lmicroseconds)
	log.SetPrefix("host: ")

	undoLogHijack()

	if got := log.Writer(); got != io.Writer(&own) {
		t.Errorf("log.Writer() = %T, want the program's own writer", got)
	}
	if got := log.Flags(); got != log.Lmicroseconds {
		t.Errorf("log.Flags() = %d, want %d", got, log.Lmicroseconds)
	}
	if got := log.Prefix(); got != "host: " {
		t.Errorf("log.Prefix() = %q, want \"host: \"", got)
	}
}
