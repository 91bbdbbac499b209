package server

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/internal/testkit/protoclient"
)

// The server's memory per idle session:
//
//	go test ./server -run '^$' -bench IdleSessionMemory -benchtime 1x
//
// The clients run in a process of their own (this test binary again, as
// TestIdleSessionClients), so that the heap and goroutines measured are the
// server's alone: its sessions, senders and quic-go's server side of each
// connection. The same helper opens sessions to a real leased process:
//
//	LEASED_IDLE_ADDR=127.0.0.1:7400 LEASED_IDLE_CA=DATA/ca.pem LEASED_IDLE_N=10000 \
//	    ./server.test -test.run '^TestIdleSessionClients$' -test.timeout 0
//
// prints "open N" once N sessions are open, and keeps them open, idle
// with keep-alives, until its standard input ends.

var (
	idleSessions    = flag.Int("sess.n", 2000, "idle sessions that BenchmarkIdleSessionMemory opens")
	idleHeapProfile = flag.String("sess.heapprofile", "", "write a heap profile of the server with its idle sessions open to this file")
)

// BenchmarkIdleSessionMemory: the server's heap (B/session), goroutine
// stacks (stack-B/session) and goroutines (goroutines/session) per idle
// session, each a QUIC connection that said hello and took its notice
// stream, after a garbage collection. It runs once, whatever b.N.
func BenchmarkIdleSessionMemory(b *testing.B) {
	n := *idleSessions
	if *idleHeapProfile != "" {
		// Every allocation in the profile, not a sample of them.
		defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
		runtime.MemProfileRate = 1
	}
	srv, err := New(Config{Dir: b.TempDir(), Addr: "127.0.0.1:0", Logger: quietLogger(),
		MaxSessions: n + 10, MaxSessionsPerAddr: n + 10})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	defer func() {
		srv.Close()
		<-done
	}()

	// A session before the measure, so that whatever the first one makes
	// once (the session table, pools) is not counted.
	warm := benchSessions(b, srv, 1)[0]
	heap0, stack0, g0 := serverMemory()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, exe, "-test.run", "^TestIdleSessionClients$", "-test.timeout", "0")
	cmd.Env = append(os.Environ(), "LEASED_IDLE_ADDR="+srv.Addr().String(), "LEASED_IDLE_CA="+CAPath(srv.cfg.Dir),
		"LEASED_IDLE_N="+strconv.Itoa(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		stdin.Close() // the clients close their sessions and exit
		cmd.Wait()
	}()
	if err := waitOpen(stdout, n); err != nil {
		b.Fatal(err)
	}
	for srv.Stats().Sessions < n+1 {
		if ctx.Err() != nil {
			b.Fatalf("%d sessions, want %d", srv.Stats().Sessions, n+1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Past the handshakes: whatever quic-go and the sessions keep only
	// while a connection starts has been let go.
	time.Sleep(2 * time.Second)
	heap1, stack1, g1 := serverMemory()
	if *idleHeapProfile != "" {
		f, err := os.Create(*idleHeapProfile)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	if got := srv.Stats().Sessions; got != n+1 {
		b.Fatalf("%d sessions once measured, want %d: some did not stay idle", got, n+1)
	}
	warm.Close()
	for b.Loop() {
	}
	b.ReportMetric(float64(heap1-heap0)/float64(n), "B/session")
	b.ReportMetric(float64(stack1-stack0)/float64(n), "stack-B/session")
	b.ReportMetric(float64(g1-g0)/float64(n), "goroutines/session")
}

// serverMemory returns the heap in use after a collection, the goroutine
// stacks in use, and the goroutines.
func serverMemory() (heap, stack int64, goroutines int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapInuse), int64(ms.StackInuse), runtime.NumGoroutine()
}

// waitOpen reads the clients' output until they say that n sessions are
// open.
func waitOpen(r io.Reader, n int) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var got int
		if _, err := fmt.Sscanf(sc.Text(), "open %d", &got); err == nil {
			if got != n {
				return fmt.Errorf("the clients opened %d sessions, want %d", got, n)
			}
			return nil
		}
	}
	return fmt.Errorf("the clients ended before their sessions were open: %v", sc.Err())
}

// TestIdleSessionClients is the clients of BenchmarkIdleSessionMemory, and
// of a measure of a real leased process: with LEASED_IDLE_ADDR,
// LEASED_IDLE_CA and LEASED_IDLE_N set, it opens LEASED_IDLE_N sessions,
// prints "open N", and keeps them until its standard input ends. Without
// them it skips.
func TestIdleSessionClients(t *testing.T) {
	addr, ca := os.Getenv("LEASED_IDLE_ADDR"), os.Getenv("LEASED_IDLE_CA")
	n, _ := strconv.Atoi(os.Getenv("LEASED_IDLE_N"))
	if addr == "" || ca == "" || n <= 0 {
		t.Skip("a helper process: LEASED_IDLE_ADDR, LEASED_IDLE_CA and LEASED_IDLE_N are not set")
	}
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if !ua.IP.IsLoopback() {
		t.Fatalf("%s is not a loopback address", addr)
	}
	host, _, _ := net.SplitHostPort(addr)
	tlsConf, err := protoclient.TLSConfig(protoclient.Options{CAFile: ca}, host)
	if err != nil {
		t.Fatal(err)
	}
	// One UDP socket for every perTransport connections, not one each:
	// 50,000 sessions would take 50,000 descriptors.
	const perTransport = 500
	var trs []*quic.Transport
	for range (n + perTransport - 1) / perTransport {
		pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		tr := &quic.Transport{Conn: pc}
		trs = append(trs, tr)
		defer pc.Close()
		defer tr.Close()
	}
	cs := make([]*protoclient.Client, n)
	var next, failed, retried atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n || failed.Load() > 0 {
					return
				}
				// A session whose handshake or hello is lost while thousands
				// open at once on two cores is tried again, twice.
				var err error
				for try := range 3 {
					if try > 0 {
						retried.Add(1)
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					var qc *quic.Conn
					qc, err = trs[i/perTransport].Dial(ctx, ua, tlsConf,
						&quic.Config{MaxIdleTimeout: 30 * time.Second, KeepAlivePeriod: 10 * time.Second})
					if err == nil {
						cs[i], err = protoclient.New(ctx, qc, protoclient.Options{})
					}
					cancel()
					if err == nil {
						break
					}
				}
				if err != nil {
					failed.Add(1)
					t.Errorf("session %d: %v", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	defer func() {
		for _, c := range cs {
			if c != nil {
				c.Close()
			}
		}
	}()
	if t.Failed() {
		return
	}
	fmt.Printf("open %d\n", n)
	fmt.Fprintf(os.Stderr, "%d sessions tried again\n", retried.Load())
	io.Copy(io.Discard, os.Stdin)
}
