//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leased/leased/internal/testkit/clitest"
)

// openPTY opens a pseudo-terminal and returns its two ends: the
// terminal a program writes to, and the side that reads what it wrote.
// It skips t where the system has none to give.
func openPTY(t *testing.T) (terminal, reader *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("the pseudo-terminal's number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("open the pseudo-terminal: %v", err)
	}
	return s, m
}

// TestSnapshotSaveOnATerminal: real processes. With stderr a terminal,
// snapshot save counts the bytes it saves there, and clears the count;
// stdout, a pipe, gets the answer alone.
func TestSnapshotSaveOnATerminal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := clitest.StartServer(t, bins, "", filepath.Join(dir, "data"))
	ok(t, srv.Ctl(t, "put", "big", strings.Repeat("x", 100<<10)))

	tty, reader := openPTY(t)
	ctx, cancel := context.WithTimeout(context.Background(), clitest.RunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bins.Leasectl, "--endpoint", srv.Addr, "--cacert", srv.CA, "snapshot", "save", filepath.Join(dir, "backup.snap"))
	cmd.Env = clitest.Env()
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, tty
	// Read the terminal beside the run, so that leasectl never blocks on
	// a full one; the read ends (with EIO) once no process has it open.
	drawn := make(chan string, 1)
	go func() {
		var b bytes.Buffer
		io.Copy(&b, reader)
		drawn <- b.String()
	}()
	err := cmd.Run()
	tty.Close()
	if err != nil {
		t.Fatalf("snapshot save: %v\nstdout: %s", err, stdout.String())
	}
	var out string
	select {
	case out = <-drawn:
	case <-time.After(clitest.RunTimeout):
		t.Fatal("the terminal was not closed after leasectl exited")
	}
	if !strings.Contains(out, "saving snapshot") || !strings.Contains(out, "\r") {
		t.Errorf("the terminal got %q; want the count of bytes saved", out)
	}
	if !cleared(out) {
		t.Errorf("the terminal got %q; want the count cleared at the end", out)
	}
	if strings.ContainsAny(stdout.String(), "\r\x1b") || !strings.Contains(stdout.String(), "KiB (") {
		t.Errorf("stdout %q: want the answer alone, with the size in binary units", stdout.String())
	}
	srv.Stop(t)
}
