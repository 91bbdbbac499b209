// Package clitest runs the leased and leasectl binaries for tests that need
// real processes (cmd/leased, cmd/leasectl, and the linearizability tests
// of package client): it builds them, starts a real server on a free port,
// and runs commands against it.
//
// Every wait here is bounded by a deadline, so a broken binary fails a test
// instead of hanging it. No helper sleeps to let lease time pass.
package clitest

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/client"
)

// Deadlines. They only bound failures: a passing run is much faster. They
// are generous because a loaded machine running -race tests of several
// packages at once can be slow to start a process.
const (
	// ReadyTimeout bounds the wait for a new server to answer.
	ReadyTimeout = 15 * time.Second
	// RunTimeout bounds one leasectl or leased command that should finish
	// by itself.
	RunTimeout = 30 * time.Second
	// ExitTimeout bounds the wait for a signalled server to exit: its
	// graceful shutdown is bounded by 10 s (--shutdown-timeout), plus slack.
	ExitTimeout = 20 * time.Second
)

// Binaries are the paths of the built binaries.
type Binaries struct {
	Leased   string
	Leasectl string
}

// Build builds leased and leasectl into dir with the go command from PATH.
func Build(dir string) (Binaries, error) {
	b := Binaries{
		Leased:   filepath.Join(dir, "leased"),
		Leasectl: filepath.Join(dir, "leasectl"),
	}
	for bin, pkg := range map[string]string{
		b.Leased:   "github.com/leased/leased/cmd/leased",
		b.Leasectl: "github.com/leased/leased/cmd/leasectl",
	} {
		// Bound the build too: a cold build cache compiles badger and
		// quic-go, which can take minutes on a slow machine.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg).CombinedOutput()
		cancel()
		if err != nil {
			return b, fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	return b, nil
}

// HelperEnv, set in the environment of a test binary, says that a test
// re-executed the binary as a helper process (such as a lease holder that
// must live in a process of its own). Main then runs the tests without
// building the binaries: the helper runs only the test that the parent
// named with -test.run, and needs neither.
const HelperEnv = "LEASED_CLITEST_HELPER"

// ProcessParallel is how many parallel tests Main lets run at once when
// -test.parallel is not given: tests of real processes wait on them and on
// real time far more than they compute, so the default, GOMAXPROCS, would
// leave a small machine idle and the package slow.
const ProcessParallel = 4

// Main builds the binaries into a temporary folder, runs the tests with
// them, and removes the folder. Use it from TestMain. Unless the command
// line sets -test.parallel, it raises it to ProcessParallel. In a helper
// process (HelperEnv is set) it builds nothing.
func Main(m interface{ Run() int }, bins *Binaries) int {
	if os.Getenv(HelperEnv) != "" {
		return m.Run()
	}
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given && runtime.GOMAXPROCS(0) < ProcessParallel {
		flag.Set("test.parallel", strconv.Itoa(ProcessParallel))
	}
	dir, err := os.MkdirTemp("", "leased-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bins, err = Build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// FreeUDPPort returns a UDP port on 127.0.0.1 that was free a moment ago,
// for a server process to listen on. See freePort.
func FreeUDPPort() (int, error) {
	return freePort(func(addr string) (io.Closer, error) { return net.ListenPacket("udp", addr) })
}

// FreeTCPPort returns a TCP port on 127.0.0.1 that was free a moment ago,
// for a server process to listen on. See freePort.
func FreeTCPPort() (int, error) {
	return freePort(func(addr string) (io.Closer, error) { return net.Listen("tcp", addr) })
}

// freePort returns a port that listen could bind on 127.0.0.1 a moment
// ago. It draws it at random below the kernel's ephemeral range, where no
// socket bound to port 0 and no outgoing connection takes it: a port from
// that range, released for a process to bind, is soon taken by the many
// QUIC clients and peer connections of the tests that run meanwhile, also
// while a killed server is down and about to bind it again. It never hands
// out the same port twice in one test process: a port free now may belong
// to another test's server that is down for a restart, and a second test
// that drew it would take it from that server. Where the range is unknown
// it falls back to a port the kernel picks.
func freePort(listen func(addr string) (io.Closer, error)) (int, error) {
	handed.Lock()
	defer handed.Unlock()
	if lo := ephemeralLow(); lo > minTestPort+1000 {
		for range 100 {
			port := minTestPort + rand.IntN(lo-minTestPort)
			if handed.ports[port] {
				continue
			}
			if l, err := listen(net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
				l.Close()
				handed.ports[port] = true
				return port, nil
			}
		}
	}
	for range 100 {
		port, err := kernelPort(listen)
		if err != nil {
			return 0, err
		}
		if !handed.ports[port] {
			handed.ports[port] = true
			return port, nil
		}
	}
	return 0, errors.New("clitest: the kernel offered only ports already handed out")
}

// handed holds every port freePort has returned in this process.
var handed = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// kernelPort returns a port the kernel picks for listen on 127.0.0.1.
func kernelPort(listen func(addr string) (io.Closer, error)) (int, error) {
	l, err := listen("127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	switch a := l.(type) {
	case net.PacketConn:
		return a.LocalAddr().(*net.UDPAddr).Port, nil
	case net.Listener:
		return a.Addr().(*net.TCPAddr).Port, nil
	}
	return 0, fmt.Errorf("clitest: cannot tell the port of %T", l)
}

// minTestPort is the lowest port freePort draws: above the well-known and
// most registered ports.
const minTestPort = 20000

// ephemeralLow returns the lowest port of the kernel's ephemeral range, or
// 0 if it cannot tell.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return lo
}

// Result is the outcome of a finished command.
type Result struct {
	Stdout string
	Stderr string
	Code   int
}

// Cmd describes a command to run.
type Cmd struct {
	// Dir is the working directory; empty means the test's.
	Dir string
	// Env is added to the environment, from which every LEASED_ variable
	// (leased's flags) and LEASECTL_CACERT (leasectl's CA) is first removed
	// so that the caller's shell cannot change a test.
	Env []string
	// Stdin is the command's input.
	Stdin io.Reader
}

// Env returns the environment for a command: os.Environ without its
// LEASED_ variables and LEASECTL_CACERT, plus extra.
func Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASED_") && !strings.HasPrefix(kv, "LEASECTL_CACERT=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// Run runs bin with args and waits, at most RunTimeout, for it to exit.
func (c Cmd) Run(t testing.TB, bin string, args ...string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), RunTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = c.Dir
	cmd.Env = Env(c.Env...)
	cmd.Stdin = c.Stdin
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s %q did not finish within %v\nstdout: %s\nstderr: %s", filepath.Base(bin), args, RunTimeout, r.Stdout, r.Stderr)
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %s %q: %v", filepath.Base(bin), args, err)
	}
	return r
}

// SyncBuffer is a bytes.Buffer safe for one writer and many readers.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Proc is a background process.
type Proc struct {
	Cmd    *exec.Cmd
	Stdout *SyncBuffer
	Stderr *SyncBuffer
	exited chan struct{}
	err    error // set before exited is closed
}

// Start starts bin with args in the background. The test's cleanup kills
// it if it is still running.
func (c Cmd) Start(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = c.Dir
	cmd.Env = Env(c.Env...)
	cmd.Stdin = c.Stdin
	p := &Proc{Cmd: cmd, Stdout: &SyncBuffer{}, Stderr: &SyncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.Stdout, p.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", filepath.Base(bin), err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// Exited returns a channel closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Signal sends sig to the process.
func (p *Proc) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %v: %v", sig, err)
	}
}

// Wait waits at most timeout for the process to exit and returns its exit
// status. It fails the test if the process does not exit in time.
func (p *Proc) Wait(t testing.TB, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v\nstderr: %s", filepath.Base(p.Cmd.Path), timeout, p.Stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("wait for %s: %v", filepath.Base(p.Cmd.Path), p.err)
	}
	return 0
}

// WaitOutput waits at most timeout for the process to write want to
// stdout, and fails the test if it does not.
func (p *Proc) WaitOutput(t testing.TB, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(p.Stdout.String(), want) {
		select {
		case <-p.exited:
			t.Fatalf("%s exited before printing %q\nstdout: %s\nstderr: %s", filepath.Base(p.Cmd.Path), want, p.Stdout.String(), p.Stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print %q within %v\nstdout: %s\nstderr: %s", filepath.Base(p.Cmd.Path), want, timeout, p.Stdout.String(), p.Stderr.String())
		}
	}
}

// Server is a running leased.
type Server struct {
	*Proc
	bins  Binaries
	dir   string   // working directory
	extra []string // flags beside --listen and --data
	// Addr is the address it serves on, 127.0.0.1:port.
	Addr string
	// Data is its data folder, and CA the CA file in it.
	Data string
	CA   string
}

// StartServer starts leased on a free port of 127.0.0.1 with the data
// folder data and the extra flags, in the working directory dir (empty: the
// test's), and waits until it answers leasectl status. If the port was
// taken meanwhile it retries with another.
func StartServer(t testing.TB, bins Binaries, dir, data string, extra ...string) *Server {
	t.Helper()
	const attempts = 5
	for range attempts {
		port, err := FreeUDPPort()
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		s, ok := startAt(t, bins, dir, data, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), extra)
		if ok {
			return s
		}
		if !strings.Contains(s.Stderr.String(), "address already in use") {
			t.Fatalf("leased %q exited before it answered\nstderr: %s", s.Cmd.Args[1:], s.Stderr.String())
		}
		// Another process took the port between FreeUDPPort and leased's
		// bind: try another.
	}
	t.Fatalf("leased: no free port after %d attempts", attempts)
	return nil
}

// StartServerAt is StartServer on the address addr, such as the port of a
// server that was just killed: clients that reconnect by themselves find
// the new one there. It fails the test if the server does not answer.
func StartServerAt(t testing.TB, bins Binaries, dir, data, addr string, extra ...string) *Server {
	t.Helper()
	s, ok := startAt(t, bins, dir, data, addr, extra)
	if !ok {
		t.Fatalf("leased %q exited before it answered\nstderr: %s", s.Cmd.Args[1:], s.Stderr.String())
	}
	return s
}

// startAt starts leased on addr and waits until it answers. It returns
// false if the server exited first.
func startAt(t testing.TB, bins Binaries, dir, data, addr string, extra []string) (*Server, bool) {
	t.Helper()
	args := append([]string{"--listen", addr, "--data", data}, extra...)
	s := &Server{
		Proc:  Cmd{Dir: dir}.Start(t, bins.Leased, args...),
		bins:  bins,
		dir:   dir,
		extra: append([]string(nil), extra...),
		Addr:  addr,
		Data:  data,
	}
	s.CA = filepath.Join(data, "tls", "ca.pem")
	if dir != "" && !filepath.IsAbs(s.CA) {
		s.CA = filepath.Join(dir, s.CA)
	}
	return s, s.waitReady(t)
}

// Restart starts a new leased with the same address, data folder and flags
// as s, which must have exited, and waits until it answers.
func (s *Server) Restart(t testing.TB) *Server {
	t.Helper()
	return s.RestartWith(t, s.extra...)
}

// RestartWith is Restart with other flags beside --listen and --data.
func (s *Server) RestartWith(t testing.TB, extra ...string) *Server {
	t.Helper()
	select {
	case <-s.exited:
	default:
		t.Fatalf("restart of leased at %s while it is still running", s.Addr)
	}
	return StartServerAt(t, s.bins, s.dir, s.Data, s.Addr, extra...)
}

// Kill kills the server with SIGKILL, as a crash of the process would, and
// waits at most ExitTimeout for it to be gone. It fails the test if the
// server had already exited by itself. (It is not a power cut: what the
// process wrote to the kernel survives it, synced or not.)
func (s *Server) Kill(t testing.TB) {
	t.Helper()
	select {
	case <-s.exited:
		t.Fatalf("leased at %s exited before it was killed: %v\nstderr: %s", s.Addr, s.err, s.Stderr.String())
	default:
	}
	s.Signal(t, syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(ExitTimeout):
		t.Fatalf("leased at %s did not die within %v of SIGKILL", s.Addr, ExitTimeout)
	}
	if ws, ok := s.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && !ws.Signaled() {
		t.Fatalf("leased at %s exited with status %d before SIGKILL took effect\nstderr: %s", s.Addr, ws.ExitStatus(), s.Stderr.String())
	}
}

// ClientConfig returns a client.Config that trusts the server's CA and
// discards the client's logs. Callers set what else they need.
func (s *Server) ClientConfig() client.Config {
	return client.Config{CAFile: s.CA, Logger: slog.New(slog.DiscardHandler)}
}

// waitReady polls leasectl status until the server answers, for at most
// ReadyTimeout. It returns false if the server exited first.
func (s *Server) waitReady(t testing.TB) bool {
	t.Helper()
	deadline := time.Now().Add(ReadyTimeout)
	for {
		select {
		case <-s.exited:
			return false
		default:
		}
		r := Cmd{}.Run(t, s.bins.Leasectl, "--endpoint", s.Addr, "--cacert", s.CA, "--timeout", "1s", "status")
		if r.Code == 0 {
			return true
		}
		if time.Now().After(deadline) {
			t.Fatalf("leased at %s did not answer within %v\nlast leasectl error: %s\nleased stderr: %s", s.Addr, ReadyTimeout, r.Stderr, s.Stderr.String())
		}
		select {
		case <-s.exited:
			return false
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM and checks that the server exits with status 0 within
// ExitTimeout.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.Signal(t, syscall.SIGTERM)
	if code := s.Wait(t, ExitTimeout); code != 0 {
		t.Fatalf("leased exited with status %d after SIGTERM\nstderr: %s", code, s.Stderr.String())
	}
}

// Ctl runs leasectl against s with --endpoint and --cacert, and the args.
func (s *Server) Ctl(t testing.TB, args ...string) Result {
	t.Helper()
	return Cmd{}.Run(t, s.bins.Leasectl, append([]string{"--endpoint", s.Addr, "--cacert", s.CA}, args...)...)
}

// WaitStopped waits until every thread of process pid is stopped, for at
// most within. SIGSTOP takes effect asynchronously: the kernel wakes one
// thread to process the stop, and on a loaded machine the others can run on
// (and answer an invalidation) for milliseconds before it gets a CPU. It
// fails the test if the process has not stopped in time. Linux only: it
// reads /proc.
func WaitStopped(t testing.TB, pid int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !stopped(t, pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d did not stop within %v", pid, within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stopped reports whether every thread of process pid is stopped.
func stopped(t testing.TB, pid int) bool {
	t.Helper()
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		t.Fatalf("threads of process %d: %v", pid, err)
	}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			return false // a thread came or went; look again
		}
		// The state follows the parenthesised command name.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) == 0 || (f[0] != "T" && f[0] != "t") {
			return false
		}
	}
	return true
}
