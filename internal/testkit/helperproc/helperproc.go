// Package helperproc starts the running test binary again as a helper
// process that runs one named test function, and talks to it by lines on
// its stdin and stdout. The test function is a helper, not a test: it
// skips unless its environment says that a parent started it, and then does
// its work (a lease holder in a process of its own, which the parent may
// stop with SIGSTOP or kill), prints lines and os.Exits.
//
// The process is killed and reaped in the test's cleanup, and the goroutine
// that reads its stdout ends with it, so a test that checks for leaked
// goroutines (leaktest) may use it.
//
// Only tests use it.
package helperproc

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// reapTimeout bounds the wait, in the cleanup, for the stdout of a killed
// process to close: a killed process closes it at once, so this only turns
// a lost process into a failure.
const reapTimeout = 10 * time.Second

// Proc is a helper process. Its methods must be called from the goroutine
// of the test that started it (they call t.Fatal), except Lines.
type Proc struct {
	// Cmd is the process. Before Start, a caller may change its Env,
	// Stderr or Dir; after, it may signal Cmd.Process (SIGSTOP, SIGCONT,
	// SIGKILL), but must not call Cmd.Wait, which the cleanup calls.
	Cmd *exec.Cmd
	// Name names the process in failure messages; Command sets it to the
	// test function's name.
	Name string

	t        testing.TB
	stdin    io.WriteCloser
	lines    chan string   // closed when stdout ends
	quit     chan struct{} // closed by the cleanup: lines has no reader
	readDone chan struct{} // closed when the reader has seen stdout end
}

// Command prepares, without starting it, a process that runs the test
// binary with only the test function test selected (-test.run=^test$
// -test.count=1), with env appended to os.Environ() and stderr going to
// os.Stderr. Start starts it.
func Command(test string, env ...string) *Proc {
	cmd := exec.Command(os.Args[0], "-test.run=^"+test+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	return &Proc{Cmd: cmd, Name: test}
}

// Start starts the process Command(test, env...) and returns it.
func Start(t testing.TB, test string, env ...string) *Proc {
	t.Helper()
	p := Command(test, env...)
	p.Start(t)
	return p
}

// Start starts p, which Command prepared, and starts reading its stdout
// by lines. In t.Cleanup it kills p with SIGKILL (which ends a stopped
// process too), closes its stdin, waits for its stdout to close and reaps
// it.
func (p *Proc) Start(t testing.TB) {
	t.Helper()
	p.t = t
	var err error
	if p.stdin, err = p.Cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.Cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("%s: %v", p.Name, err)
	}
	p.lines = make(chan string, 16)
	p.quit = make(chan struct{})
	p.readDone = make(chan struct{})
	go p.read(stdout)
	t.Cleanup(func() {
		p.Cmd.Process.Kill()
		p.stdin.Close()
		close(p.quit)
		select {
		case <-p.readDone:
		case <-time.After(reapTimeout):
			t.Errorf("%s: its stdout did not close after SIGKILL", p.Name)
		}
		p.Cmd.Wait()
	})
}

// read passes the lines of stdout to p.lines, until stdout ends or nobody
// reads them any more, and then reads stdout to its end, when the process
// is gone.
func (p *Proc) read(stdout io.Reader) {
	defer close(p.readDone)
	sc := bufio.NewScanner(stdout)
scan:
	for sc.Scan() {
		select {
		case p.lines <- sc.Text():
		case <-p.quit:
			break scan
		}
	}
	close(p.lines)
	io.Copy(io.Discard, stdout)
}

// Say writes line and a newline to p's stdin. It fails the test if it
// cannot.
func (p *Proc) Say(line string) {
	p.t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		p.t.Fatalf("%s: write %q: %v", p.Name, line, err)
	}
}

// CloseStdin closes p's stdin, so that a helper that reads it to its end
// goes on to exit.
func (p *Proc) CloseStdin() {
	p.stdin.Close()
}

// Next returns p's next line on stdout, without its newline. It fails the
// test if none comes within timeout, if stdout ends, or if the line starts
// with "error" (a helper's report that it failed).
func (p *Proc) Next(timeout time.Duration) string {
	p.t.Helper()
	tm := time.NewTimer(timeout)
	defer tm.Stop()
	select {
	case l, ok := <-p.lines:
		if !ok {
			p.t.Fatalf("%s: its stdout ended", p.Name)
		}
		if strings.HasPrefix(l, "error") {
			p.t.Fatalf("%s: %q", p.Name, l)
		}
		return l
	case <-tm.C:
		p.t.Fatalf("%s said nothing within %v", p.Name, timeout)
	}
	return ""
}

// Lines returns the lines of p's stdout, for a caller that reads them
// itself (in a goroutine of its own, or with its own checks) instead of
// with Next; both take from the same stream. The channel is closed when
// stdout ends, and the cleanup stops passing lines to it.
func (p *Proc) Lines() <-chan string {
	return p.lines
}
