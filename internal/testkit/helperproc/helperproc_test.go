//go:build linux

package helperproc_test

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/helperproc"
	"github.com/leased/leased/internal/testkit/leaktest"
)

const (
	echoEnv   = "HELPERPROC_TEST_ECHO" // set to "1" in the echo process
	valueEnv  = "HELPERPROC_TEST_VALUE"
	echoTest  = "TestHelperEcho"
	lineLimit = 10 * time.Second // starting a race-instrumented binary is well under this
)

// TestHelperEcho is not a test: it is the body of the process the tests
// below start. It prints "ready value=" and the value of valueEnv, then
// answers each line of stdin: "fail" with an "error" line and exit status
// 1, "exit" with exit status 0 and nothing printed, "quiet" with nothing,
// and any other line with itself. It exits when stdin closes.
func TestHelperEcho(t *testing.T) {
	if os.Getenv(echoEnv) != "1" {
		t.Skip("helper process of the helperproc tests")
	}
	fmt.Printf("ready value=%s\n", os.Getenv(valueEnv))
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch l := sc.Text(); l {
		case "fail":
			fmt.Println("error asked to fail")
			os.Exit(1)
		case "exit":
			os.Exit(0)
		case "quiet":
		default:
			fmt.Println(l)
		}
	}
	os.Exit(0)
}

func startEcho(t testing.TB, value string) *helperproc.Proc {
	t.Helper()
	return helperproc.Start(t, echoTest, echoEnv+"=1", valueEnv+"="+value)
}

// closed waits up to lineLimit for the lines of p to end, and reports
// whether they did.
func closed(p *helperproc.Proc) bool {
	tm := time.NewTimer(lineLimit)
	defer tm.Stop()
	for {
		select {
		case _, ok := <-p.Lines():
			if !ok {
				return true
			}
		case <-tm.C:
			return false
		}
	}
}

func TestSayNext(t *testing.T) {
	leaktest.Check(t)
	p := startEcho(t, "x y")
	if l := p.Next(lineLimit); l != "ready value=x y" {
		t.Fatalf("first line %q, want %q (the environment passed to Start)", l, "ready value=x y")
	}
	for _, s := range []string{"hello", "", "  spaced  ", "world"} {
		p.Say(s)
		if l := p.Next(lineLimit); l != s {
			t.Fatalf("echo of %q: %q", s, l)
		}
	}
	p.CloseStdin()
	if !closed(p) {
		t.Fatal("the helper's stdout did not end after its stdin was closed")
	}
}

// recorder is a testing.TB whose Fatalf records its message and ends the
// goroutine, so that a test can see its helper fail.
type recorder struct {
	testing.TB
	mu      sync.Mutex
	failure string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.failure = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	runtime.Goexit()
}

// failureOf runs f in a goroutine of its own and returns what it failed
// with through r, or "" if it did not.
func (r *recorder) failureOf(f func()) string {
	r.mu.Lock()
	r.failure = ""
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	<-done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failure
}

func TestNextFails(t *testing.T) {
	for _, tc := range []struct {
		say     string
		timeout time.Duration
		want    string
	}{
		{"fail", lineLimit, echoTest + `: "error asked to fail"`},
		{"exit", lineLimit, echoTest + ": its stdout ended"},
		{"quiet", 200 * time.Millisecond, echoTest + " said nothing within 200ms"},
	} {
		t.Run(tc.say, func(t *testing.T) {
			leaktest.Check(t)
			r := &recorder{TB: t}
			p := startEcho(r, "v")
			var first string
			if msg := r.failureOf(func() { first = p.Next(lineLimit) }); msg != "" || first != "ready value=v" {
				t.Fatalf("first line %q, failure %q", first, msg)
			}
			p.Say(tc.say)
			var got string
			msg := r.failureOf(func() { got = p.Next(tc.timeout) })
			if msg != tc.want {
				t.Fatalf("Next after %q returned %q and failed with %q; want the failure %q", tc.say, got, msg, tc.want)
			}
		})
	}
}

func TestSayFailsAfterClose(t *testing.T) {
	leaktest.Check(t)
	r := &recorder{TB: t}
	p := startEcho(r, "v")
	p.Name = "echo"
	if msg := r.failureOf(func() { p.Next(lineLimit) }); msg != "" {
		t.Fatal(msg)
	}
	p.CloseStdin()
	msg := r.failureOf(func() { p.Say("late") })
	if !strings.HasPrefix(msg, `echo: write "late": `) {
		t.Fatalf("Say on a closed stdin failed with %q", msg)
	}
}

// TestCleanupKillsStopped: the cleanup kills a process stopped with
// SIGSTOP, reaps it, and leaves no goroutine behind.
func TestCleanupKillsStopped(t *testing.T) {
	var p *helperproc.Proc
	start := time.Now()
	t.Run("stopped", func(t *testing.T) {
		leaktest.Check(t)
		p = startEcho(t, "v")
		p.Next(lineLimit)
		if err := p.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		clitest.WaitStopped(t, p.Cmd.Process.Pid, lineLimit)
	})
	if t.Failed() {
		return
	}
	if took := time.Since(start); took > 2*lineLimit {
		t.Errorf("the test and its cleanup took %v", took)
	}
	st := p.Cmd.ProcessState
	if st == nil {
		t.Fatal("the stopped process was not reaped")
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the stopped process ended with %v, want killed by SIGKILL", st)
	}
	if !closed(p) {
		t.Error("its lines were not closed")
	}
}
