package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/server"
)

// silentServer binds a UDP socket on loopback that never answers, as a
// stopped or paused server looks to a client, and returns its address.
func silentServer(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc.LocalAddr().String()
}

// deadAddr returns a loopback address where nothing listens: a socket's,
// closed at once. Linux does not report the ICMP port-unreachable to the
// client's unconnected socket, so to the client it is as silent.
func deadAddr(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

// testCA returns the CA file of a server folder made for the test.
func testCA(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if _, err := server.LoadOrCreateTLS(dir, nil); err != nil {
		t.Fatal(err)
	}
	return server.CAPath(dir)
}

// TestDialSilentServerFailsFast checks that Dial and DialAdmin to an
// address where no server answers (a bound socket that never answers, or
// nothing at all) fail with ErrUnavailable and an error that says so in
// the user's words within about twice Config.IdleTimeout (2 s by
// default), not after QUIC's 5 s handshake idle timeout, while the dial's
// context would have allowed much longer.
func TestDialSilentServerFailsFast(t *testing.T) {
	ca := testCA(t)
	cases := []struct {
		name   string
		idle   time.Duration // Config.IdleTimeout
		within string        // the bound the error names
		atMost time.Duration // generous, for a loaded machine
		admin  bool
	}{
		{name: "silent socket", within: "2s", atMost: 4 * time.Second},
		{name: "nothing listening", within: "2s", atMost: 4 * time.Second},
		{name: "admin silent socket", within: "2s", atMost: 4 * time.Second, admin: true},
		{name: "short IdleTimeout keeps 1s", idle: 100 * time.Millisecond, within: "1s", atMost: 3 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := silentServer(t)
			if tc.name == "nothing listening" {
				addr = deadAddr(t)
			}
			cfg := client.Config{CAFile: ca, IdleTimeout: tc.idle, Logger: testkit.Discard()}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			var err error
			if tc.admin {
				var a *client.Admin
				if a, err = client.DialAdmin(ctx, addr, cfg); err == nil {
					a.Close()
				}
			} else {
				var c *client.Client
				if c, err = client.Dial(ctx, addr, cfg); err == nil {
					c.Close()
				}
			}
			took := time.Since(start)
			if err == nil {
				t.Fatalf("dial to a silent %s succeeded", addr)
			}
			if !errors.Is(err, client.ErrUnavailable) {
				t.Errorf("error %q does not wrap ErrUnavailable", err)
			}
			want := "no answer from " + addr + " within " + tc.within
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
			if strings.Contains(err.Error(), "no recent network activity") {
				t.Errorf("error %q is in QUIC's words", err)
			}
			if took > tc.atMost {
				t.Errorf("dial failed after %v; want within %v", took, tc.atMost)
			}
			if ctx.Err() != nil {
				t.Errorf("the dial's context ended (%v): the dial was not judged lost by itself", ctx.Err())
			}
			t.Logf("failed after %v: %v", took, err)
		})
	}
}

// TestDialSilentEndpointsRetryUntilContext checks that Dial with several
// endpoints still skips one that does not answer for one that does, and
// with none answering keeps trying until its context ends.
func TestDialSilentEndpointsRetryUntilContext(t *testing.T) {
	srv := startServer(t, server.Config{})
	silent := silentServer(t)

	c := dialAddr(t, silent+","+srv.Addr().String(), srv.CA(), client.Config{})
	if _, err := c.Put(stepCtx(t), "k", []byte("v")); err != nil {
		t.Fatalf("Put through the endpoint that answers: %v", err)
	}

	const wait = 5 * time.Second // longer than one round of handshakes
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	start := time.Now()
	_, err := client.Dial(ctx, silent+","+silentServer(t), client.Config{CAFile: srv.CA(), Logger: testkit.Discard()})
	took := time.Since(start)
	if !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("Dial to two silent endpoints: %v; want ErrUnavailable", err)
	}
	if took < wait-100*time.Millisecond {
		t.Errorf("Dial to two silent endpoints gave up after %v, before its context's %v", took, wait)
	}
}

// TestDialLiveServerWithShortIdleTimeout checks that the shorter handshake
// bound does not fail a handshake with a live server, here under the race
// detector and with the shortest IdleTimeout a test uses.
func TestDialLiveServerWithShortIdleTimeout(t *testing.T) {
	srv := startServer(t, server.Config{})
	for _, idle := range []time.Duration{0, 100 * time.Millisecond} {
		for range 5 {
			c := dial(t, srv, client.Config{IdleTimeout: idle})
			if _, err := c.Put(stepCtx(t), "k", []byte("v")); err != nil {
				t.Fatalf("IdleTimeout %v: Put: %v", idle, err)
			}
			c.Close()
		}
	}
}
