package faultproxy

import (
	"bufio"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/wait"
)

// ioTimeout bounds every read and write of these tests, so that a broken
// proxy fails them instead of hanging them.
const ioTimeout = 5 * time.Second

// echoServer accepts on 127.0.0.1 and echoes each line back, until the test
// ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				io.Copy(c, c)
				c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// roundTrip sends a line on c and returns the line that comes back, or the
// error.
func roundTrip(c net.Conn, r *bufio.Reader, line string) (string, error) {
	c.SetDeadline(time.Now().Add(ioTimeout))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

func dial(t *testing.T, p *Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// TestForwards: data goes through the proxy both ways.
func TestForwards(t *testing.T) {
	leaktest.Check(t)
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p)
	for _, line := range []string{"one", "two"} {
		if got, err := roundTrip(c, r, line); err != nil || got != line {
			t.Fatalf("round trip %q: %q, %v", line, got, err)
		}
	}
	if s := p.Stats(); s.Accepted != 1 {
		t.Errorf("stats %+v, want one accepted", s)
	}
}

// TestCutAndHeal: Cut ends an open connection and refuses new ones; after
// Heal a new connection goes through.
func TestCutAndHeal(t *testing.T) {
	leaktest.Check(t)
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "before"); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if !p.IsCut() {
		t.Fatal("IsCut after Cut is false")
	}
	if got, err := roundTrip(c, r, "during"); err == nil {
		t.Fatalf("an open connection still carries data after Cut: %q", got)
	}
	c2, r2 := dial(t, p) // the listener still accepts, then closes
	if got, err := roundTrip(c2, r2, "new"); err == nil {
		t.Fatalf("a new connection carries data while cut: %q", got)
	}
	p.Heal()
	c3, r3 := dial(t, p)
	if got, err := roundTrip(c3, r3, "after"); err != nil || got != "after" {
		t.Fatalf("after Heal: %q, %v", got, err)
	}
	if s := p.Stats(); s.Accepted != 2 || s.Dropped != 1 || s.Refused != 1 {
		t.Errorf("stats %+v, want 2 accepted, 1 dropped, 1 refused", s)
	}
}

// TestDelay: a delayed proxy holds each chunk back, and forwards at once
// again when the delay is set to 0.
func TestDelay(t *testing.T) {
	leaktest.Check(t)
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p)
	const d = 100 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	if got, err := roundTrip(c, r, "slow"); err != nil || got != "slow" {
		t.Fatalf("round trip: %q, %v", got, err)
	}
	// There and back: two delayed chunks.
	if took := time.Since(start); took < 2*d {
		t.Errorf("a round trip took %v, want at least %v", took, 2*d)
	}
	p.Delay(0)
	if got, err := roundTrip(c, r, "fast"); err != nil || got != "fast" {
		t.Fatalf("round trip: %q, %v", got, err)
	}
}

// TestUnreachableTarget: a connection to a target that is down is closed.
func TestUnreachableTarget(t *testing.T) {
	leaktest.Check(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()
	p := newProxy(t, target)
	c, r := dial(t, p)
	if got, err := roundTrip(c, r, "x"); err == nil {
		t.Fatalf("data through a proxy to a closed port: %q", got)
	}
	wait.For(t, ioTimeout, "the refusal to be counted", func() bool { return p.Stats().Refused == 1 })
}

// TestConcurrentUse: Cut, Heal, Delay and traffic from several goroutines
// at once, for the race detector; Close ends everything.
func TestConcurrentUse(t *testing.T) {
	leaktest.Check(t)
	p := newProxy(t, echoServer(t))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				c, err := net.DialTimeout("tcp", p.Addr(), ioTimeout)
				if err != nil {
					continue
				}
				roundTrip(c, bufio.NewReader(c), "x")
				c.Close()
			}
		}()
	}
	for i := range 50 {
		switch i % 3 {
		case 0:
			p.Cut()
		case 1:
			p.Heal()
		case 2:
			p.Delay(time.Duration(i%2) * time.Millisecond)
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
