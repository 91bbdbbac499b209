// Package human formats what leased and leasectl show a person at the
// command line: sizes in binary units with the exact figure, and progress
// bars drawn only on a terminal. Both binaries use it, so that they look
// the same. JSON output keeps exact numbers and does not use it.
package human

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Bytes returns n bytes as a person reads them: "512 bytes" below a KiB,
// and above in binary units followed by the exact figure, as
// "3.0 MiB (3145728 bytes)".
func Bytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%s (%d bytes)", humanize.IBytes(uint64(n)), n)
}

// IsTerminal reports whether w is a terminal: an *os.File whose
// descriptor is one. A pipe, a regular file or a buffer is not.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// NewBar returns a progress bar drawn on w, described by what, of total
// bytes: a bar with a percentage and the bytes so far of the total, or for
// a total of -1 (not known) a spinner with the bytes so far; both with the
// rate. It is drawn at once, in binary units, at most ten times a second,
// and cleared when it ends. Callers draw
// one only when IsTerminal(w), so that scripts and logs never see it, and
// must call its Finish, which also ends the goroutine that turns the
// spinner of an unknown total.
func NewBar(w io.Writer, total int64, what string) *progressbar.ProgressBar {
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowCount(),
		progressbar.OptionUseIECUnits(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetRenderBlankState(true),
		progressbar.OptionClearOnFinish(),
	)
}
