package server

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
)

// The server's bounds on memory. Each test reads the server's counters
// before and after a hostile client does its worst, and checks that what
// the client took stays within the bound, that it is told so with a clear
// code, and that other clients go on.

// works checks that session c writes and reads key, a key no other
// session of the test holds (checkOthers's keys repeat across sessions,
// and the sessions of these tests never acknowledge an invalidation).
func works(t *testing.T, c *protoclient.Client, key string) {
	t.Helper()
	v := put(t, c, key, []byte("v")).Version
	if r := get(t, c, key); !r.Found || string(r.Value) != "v" || r.Version != v {
		t.Fatalf("read %+v after writing version %d", r, v)
	}
}

// TestHostileLeaseCap: a session that reads more keys than
// MaxLeasesPerSession holds that many leases, no more; the reads past the
// cap are refused with a resource-exhausted error naming the limit, while
// its held keys are still read under lease, other sessions lease as
// before, and a release makes room.
func TestHostileLeaseCap(t *testing.T) {
	leaktest.Check(t)
	const maxLeases, reads = 100, 150
	srv, _ := hostileServer(t, Config{MaxLeasesPerSession: maxLeases})
	other := dialRaw(t, srv)
	c := dialRaw(t, srv)
	before := srv.Stats()

	// Pipelined, as an attacker would send them.
	for i := range reads {
		send(t, c, &protocol.Get{ID: uint64(i + 1), Key: []byte(fmt.Sprint("k", i))})
	}
	leased, refused := 0, 0
	for range reads {
		switch r := recv(t, c).(type) {
		case *protocol.GetReply:
			if r.Term != hostileTerm {
				t.Fatalf("read %d: term %v", r.ID, r.Term)
			}
			leased++
		case *protocol.Error:
			if r.Code != protocol.CodeResourceExhausted || !strings.Contains(r.Message, "MaxLeasesPerSession") || !strings.Contains(r.Message, fmt.Sprint(maxLeases)) {
				t.Fatalf("read %d refused with %s %q, want resource exhausted naming MaxLeasesPerSession and %d", r.ID, r.Code, r.Message, maxLeases)
			}
			refused++
		default:
			t.Fatalf("got %#v", r)
		}
	}
	after := srv.Stats()
	t.Logf("leases %d -> %d, refused %d -> %d", before.Leases, after.Leases, before.LeasesRefused, after.LeasesRefused)
	if leased != maxLeases || refused != reads-maxLeases {
		t.Fatalf("%d reads leased and %d refused, want %d and %d", leased, refused, maxLeases, reads-maxLeases)
	}
	if after.Leases-before.Leases != maxLeases || after.LeasesRefused-before.LeasesRefused != reads-maxLeases {
		t.Fatalf("stats: %d leases and %d refusals more, want %d and %d", after.Leases-before.Leases, after.LeasesRefused-before.LeasesRefused, maxLeases, reads-maxLeases)
	}

	// A key it holds is still read, and renewed, under lease.
	if r := get(t, c, "k0"); r.Term != hostileTerm {
		t.Fatalf("a held key at the cap: %+v", r)
	}
	send(t, c, &protocol.Renew{ID: 1000, Keys: [][]byte{[]byte("k1")}})
	if r, ok := recv(t, c).(*protocol.RenewReply); !ok || r.Terms[0] != hostileTerm {
		t.Fatalf("renew at the cap: %#v", r)
	}
	// Its writes commit, without a fresh lease.
	if r := put(t, c, "mine", []byte("v")); r.Term != 0 {
		t.Fatalf("a write at the cap got a lease of %v", r.Term)
	}
	checkOthers(t, other)

	// A release makes room.
	if _, ok := call(t, c, &protocol.Release{Keys: [][]byte{[]byte("k0")}}).(*protocol.OK); !ok {
		t.Fatal("release failed")
	}
	if r := get(t, c, "new"); r.Term != hostileTerm {
		t.Fatalf("a read after a release: %+v", r)
	}
	if n := srv.Stats().Leases - before.Leases; n != maxLeases+1 { // the other client's one lease
		t.Fatalf("%d leases, want %d", n, maxLeases+1)
	}
}

// TestClientAtLeaseCap: the client library reports a read refused at the
// cap as ErrResourceExhausted with the server's message, caches nothing
// for it, and keeps serving the entries it holds from its cache.
func TestClientAtLeaseCap(t *testing.T) {
	leaktest.Check(t)
	const maxLeases = 3
	srv, _ := hostileServer(t, Config{MaxLeasesPerSession: maxLeases})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr().String(), client.Config{CAFile: CAPath(srv.cfg.Dir), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range maxLeases {
		if _, err := c.Get(ctx, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		_, err := c.Get(ctx, "past")
		if !errors.Is(err, client.ErrResourceExhausted) || !strings.Contains(err.Error(), "MaxLeasesPerSession") {
			t.Fatalf("Get past the cap: %v, want ErrResourceExhausted naming MaxLeasesPerSession", err)
		}
	}
	for i := range maxLeases {
		it, err := c.Get(ctx, fmt.Sprint("k", i))
		if err != nil || !it.Cached {
			t.Fatalf("Get k%d at the cap: %+v, %v; want it from the cache", i, it, err)
		}
	}
	if st := srv.Stats(); st.Leases != maxLeases || st.LeasesRefused != 2 {
		t.Fatalf("server: %d leases, %d refused; want %d and 2", st.Leases, st.LeasesRefused, maxLeases)
	}
}

// TestHostileTotalInflightBytes: the waiting writes of all sessions
// together hold at most MaxTotalInflightBytes; a write past it gets a
// resource-exhausted error naming that budget, its frame refused as it
// arrives, and its session goes on with its leases; every write's bytes
// return to it when the write is answered, whatever the answer: after
// many refused, canceled, abandoned and committed writes, and a session
// lost with writes waiting, the counter is back to 0.
func TestHostileTotalInflightBytes(t *testing.T) {
	leaktest.Check(t)
	const maxValue, perSession, total = 256 << 10, 600 << 10, 1 << 20
	const size = 2 + maxValue // "kN" and a full value
	srv, fc := hostileServer(t, Config{MaxValueSize: maxValue, MaxInflightBytes: perSession, MaxTotalInflightBytes: total})
	other := dialRaw(t, srv)
	holder := dialRaw(t, srv)
	for i := range 8 {
		get(t, holder, fmt.Sprint("k", i))
	}
	full := make([]byte, maxValue)
	write := func(c *protoclient.Client, id uint64, key string) {
		send(t, c, &protocol.Write{ID: id, Op: protocol.OpPut, Key: []byte(key), Value: full})
	}
	framesRefused0 := srv.frames.refused.Load()
	a, b := dialRaw(t, srv), dialRaw(t, srv)
	lost, _ := dialHello(t, srv, nil)
	write(a, 1, "k0")
	write(a, 2, "k1")
	write(lost, 1, "k2")
	wait.For(t, testTimeout, "three writes to wait", func() bool { return srv.Stats().WritesWaiting == 3 })
	if st := srv.Stats(); st.InflightBytes != 3*size {
		t.Fatalf("%d bytes counted, want %d", st.InflightBytes, 3*size)
	}
	// b's own budget has room; the server's has not. A write's frame
	// counts against it as it arrives, so each is refused before it is
	// whole, and discarded; b is told so, naming the budget, and its
	// session goes on with the read lease it holds.
	get(t, b, "b-held")
	const refusals = 50
	for i := range refusals {
		write(b, uint64(100+i), "k3")
		e := expectError(t, b, uint64(100+i), protocol.CodeResourceExhausted)
		if !strings.Contains(e.Message, "MaxTotalInflightBytes") || !strings.Contains(e.Message, fmt.Sprint(total)) {
			t.Fatalf("error %q does not name the server's budget", e.Message)
		}
	}
	if r, ok := call(t, b, &protocol.Renew{Keys: [][]byte{[]byte("b-held")}}).(*protocol.RenewReply); !ok || len(r.Terms) != 1 || r.Terms[0] == 0 {
		t.Fatalf("b's read lease after its writes were refused: %#v, want it renewed", r)
	}
	// A small write still fits.
	send(t, b, &protocol.Write{ID: 200, Op: protocol.OpDelete, Key: []byte("k4")})
	wait.For(t, testTimeout, "four writes to wait", func() bool { return srv.Stats().WritesWaiting == 4 })
	if st := srv.Stats(); st.InflightBytes != 3*size+2 || srv.frames.refused.Load()-framesRefused0 != refusals || srv.frames.total.Load() != 0 {
		t.Fatalf("%d bytes counted, %d frames refused, %d bytes held by frames; want %d, %d, 0",
			st.InflightBytes, srv.frames.refused.Load()-framesRefused0, srv.frames.total.Load(), 3*size+2, refusals)
	}
	checkOthers(t, other)

	// A session lost with a write waiting returns its bytes, and so does
	// a canceled write.
	lost.Close()
	send(t, a, &protocol.Cancel{ID: 2})
	expectError(t, a, 2, protocol.CodeCanceled)
	wait.For(t, testTimeout, "the lost session's write to be abandoned", func() bool { return srv.Stats().WritesWaiting == 2 })
	wait.For(t, testTimeout, "the bytes of the two writes to return", func() bool { return srv.Stats().InflightBytes == size+2 })
	write(b, 300, "k5")
	send(t, b, &protocol.Write{ID: 301, Op: protocol.OpPut, Key: []byte("k6"), Value: full, Timeout: time.Second})
	wait.For(t, testTimeout, "four writes to wait", func() bool { return srv.Stats().WritesWaiting == 4 })
	fc.Advance(time.Second)
	expectError(t, b, 301, protocol.CodeCanceled) // abandoned at its deadline

	// The rest commit once the holder's leases run out.
	fc.Advance(hostileTerm + hostileEps)
	if r, ok := recv(t, a).(*protocol.WriteReply); !ok || r.ID != 1 {
		t.Fatalf("want the reply of a's write 1, got %#v", r)
	}
	for range 2 {
		if r, ok := recv(t, b).(*protocol.WriteReply); !ok || (r.ID != 200 && r.ID != 300) {
			t.Fatalf("want the replies of b's writes 200 and 300, got %#v", r)
		}
	}
	after := srv.Stats()
	t.Logf("inflight bytes %d at the peak, %d at the end; %d frames refused", 3*size+2, after.InflightBytes, srv.frames.refused.Load()-framesRefused0)
	if after.InflightBytes != 0 || after.WritesWaiting != 0 {
		t.Fatalf("%d bytes still counted with %d writes waiting, want 0", after.InflightBytes, after.WritesWaiting)
	}
}

// TestHostileSlowFrame: a client that sends part of a frame and stalls
// (a slow loris) has its session closed with a protocol error naming
// FrameTimeout, within about that time, whether it stalls in the header
// or in the body; a session silent between frames for longer is not.
func TestHostileSlowFrame(t *testing.T) {
	leaktest.Check(t)
	const frameTimeout = 300 * time.Millisecond
	srv, _ := hostileServer(t, Config{FrameTimeout: frameTimeout})
	idle := dialRaw(t, srv)
	for _, tc := range []struct {
		name    string
		partial []byte
	}{
		{"header", []byte{0, 0}},
		{"body", append(binary.BigEndian.AppendUint32(nil, 1000), byte(protocol.TypeGet), 0x81)},
		{"a large body", append(binary.BigEndian.AppendUint32(nil, 1<<20), byte(protocol.TypeWrite))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, srv)
			before := srv.Stats().Sessions
			if err := c.SendFrame(tc.partial); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			expectClosed(t, c, protocol.CodeProtocol, "FrameTimeout")
			if d := time.Since(start); d > frameTimeout+prompt {
				t.Fatalf("closed after %v, want about %v", d, frameTimeout)
			}
			waitSessions(t, srv, before-1)
		})
	}
	// Silent for longer than the frame timeout, between frames.
	checkOthers(t, idle)
}

// TestHostileExtraStreams: a client may open only its request stream: a
// second stream, of either kind, cannot be opened, so nothing it sends
// there waits in the server's memory; the session goes on.
func TestHostileExtraStreams(t *testing.T) {
	leaktest.Check(t)
	srv, _ := hostileServer(t, Config{})
	c := dialRaw(t, srv)
	qc := c.Conn()
	var limit *quic.StreamLimitReachedError
	if _, err := qc.OpenStream(); !errors.As(err, &limit) {
		t.Fatalf("a second stream: %v, want the stream limit", err)
	}
	if _, err := qc.OpenUniStream(); !errors.As(err, &limit) {
		t.Fatalf("a unidirectional stream: %v, want the stream limit", err)
	}
	// Waiting for one does not get one either.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := qc.OpenStreamSync(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("OpenStreamSync: %v, want to wait until the context ends", err)
	}
	checkOthers(t, c)
}

// TestHostileSessionsPerAddr: one client address takes at most
// MaxSessionsPerAddr sessions; a connection past it is refused with a
// resource-exhausted code naming the limit and the address, which the
// client library reports as ErrResourceExhausted; another address still
// gets sessions, and once one of the address's sessions ends it gets one
// again.
func TestHostileSessionsPerAddr(t *testing.T) {
	leaktest.Check(t)
	const perAddr = 2
	srv, _ := hostileServer(t, Config{MaxSessionsPerAddr: perAddr})
	first := dialRaw(t, srv)
	dialRaw(t, srv)
	before := srv.Stats()
	for range 5 {
		expectRefused(t, srv, protocol.CodeResourceExhausted, "2 sessions from address 127.0.0.1 (MaxSessionsPerAddr)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr().String(), client.Config{CAFile: CAPath(srv.cfg.Dir), Logger: quietLogger()})
	if err == nil {
		c.Close()
		t.Fatal("client.Dial succeeded past MaxSessionsPerAddr")
	}
	if !errors.Is(err, client.ErrResourceExhausted) || !strings.Contains(err.Error(), "MaxSessionsPerAddr") {
		t.Fatalf("client.Dial: %v, want ErrResourceExhausted naming MaxSessionsPerAddr", err)
	}
	after := srv.Stats()
	t.Logf("sessions %d -> %d, refused %d -> %d", before.Sessions, after.Sessions, before.SessionsRefused, after.SessionsRefused)
	if after.Sessions != perAddr || after.SessionsRefused-before.SessionsRefused < 6 {
		t.Fatalf("%d sessions and %d refused, want %d and at least 6", after.Sessions, after.SessionsRefused-before.SessionsRefused, perAddr)
	}

	// Another address. 127.0.0.2 is loopback too; the server listens on
	// 127.0.0.1 only.
	pc, err := net.ListenPacket("udp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no second loopback address: %v", err)
	}
	defer pc.Close()
	works(t, dial(t, srv, protoclient.Options{PacketConn: pc}), "elsewhere")

	first.Close()
	waitSessions(t, srv, perAddr)
	works(t, dialRaw(t, srv), "again")
}

// TestRetryHandshakes: once RetryHandshakes handshakes are in progress,
// a new connection attempt is asked to prove its source address with a
// QUIC Retry, and a real client still connects; below the threshold none
// is asked, and the count of handshakes in progress goes back to 0 as
// they end. With a negative threshold every attempt is asked.
func TestRetryHandshakes(t *testing.T) {
	leaktest.Check(t)
	t.Run("threshold", func(t *testing.T) {
		srv, _ := hostileServer(t, Config{RetryHandshakes: 1})
		works(t, dialRaw(t, srv), "before")
		if st := srv.Stats(); st.Retries != 0 || st.Handshakes != 0 {
			t.Fatalf("below the threshold: %d retries, %d handshakes in progress; want 0 and 0", st.Retries, st.Handshakes)
		}
		// A handshake in progress, as the transport begins one.
		ctx, cancel := context.WithCancel(context.Background())
		if _, err := srv.connContext(ctx, nil); err != nil {
			t.Fatal(err)
		}
		if n := srv.Stats().Handshakes; n != 1 {
			t.Fatalf("%d handshakes in progress, want 1", n)
		}
		works(t, dialRaw(t, srv), "at")
		retries := srv.Stats().Retries
		if retries == 0 {
			t.Fatal("no retry at the threshold")
		}
		cancel() // the handshake failed
		wait.For(t, testTimeout, "no handshake in progress", func() bool { return srv.Stats().Handshakes == 0 })
		works(t, dialRaw(t, srv), "after")
		if n := srv.Stats().Retries; n != retries {
			t.Fatalf("%d retries after the handshakes ended, want still %d", n, retries)
		}
	})
	t.Run("always", func(t *testing.T) {
		srv, _ := hostileServer(t, Config{RetryHandshakes: -1})
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		c, err := client.Dial(ctx, srv.Addr().String(), client.Config{CAFile: CAPath(srv.cfg.Dir), Logger: quietLogger()})
		if err != nil {
			t.Fatalf("client.Dial with every attempt retried: %v", err)
		}
		defer c.Close()
		if _, err := c.Put(ctx, "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
		if st := srv.Stats(); st.Retries < 1 || st.Handshakes != 0 {
			t.Fatalf("%d retries, %d handshakes in progress; want at least 1 and 0", st.Retries, st.Handshakes)
		}
	})
}

// TestAddrKey: sessions are counted per IPv4 address, and per /64 network
// of an IPv6 one, which a single host is commonly given whole.
func TestAddrKey(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"127.0.0.1:7400", "127.0.0.1"},
		{"[::ffff:10.0.0.7]:7400", "10.0.0.7"},
		{"[2001:db8:1:2:aaaa::1]:7400", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:ffff::9]:1", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:7400", "2001:db8:1:3::/64"},
		{"[fe80::1%eth0]:7400", "fe80::/64"},
	} {
		a, err := net.ResolveUDPAddr("udp", tc.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := addrKey(a); got != tc.want {
			t.Errorf("addrKey(%s) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// TestHostileServerLeaseCap: sessions that each stay under their own cap
// together meet the server's (MaxLeases): a read that needs a new lease is
// then refused, naming MaxLeases, on every session, and the server holds
// no more leases than the cap.
func TestHostileServerLeaseCap(t *testing.T) {
	leaktest.Check(t)
	const maxLeases, perSession = 60, 50
	srv, _ := hostileServer(t, Config{MaxLeases: maxLeases, MaxLeasesPerSession: perSession})
	a, b := dialRaw(t, srv), dialRaw(t, srv)
	for i := range perSession {
		if r := get(t, a, fmt.Sprint("a", i)); r.Term != hostileTerm {
			t.Fatalf("read a%d under both caps: %+v", i, r)
		}
	}
	leased := 0
	for i := range perSession {
		send(t, b, &protocol.Get{ID: uint64(i + 1), Key: []byte(fmt.Sprint("b", i))})
	}
	for range perSession {
		switch r := recv(t, b).(type) {
		case *protocol.GetReply:
			leased++
		case *protocol.Error:
			if r.Code != protocol.CodeResourceExhausted || !strings.Contains(r.Message, "MaxLeases)") {
				t.Fatalf("read refused with %s %q, want resource exhausted naming MaxLeases", r.Code, r.Message)
			}
		default:
			t.Fatalf("got %#v", r)
		}
	}
	if want := maxLeases - perSession; leased != want {
		t.Fatalf("the second session got %d leases, want %d: the server's cap less the first session's", leased, want)
	}
	if st := srv.Stats(); st.Leases != maxLeases {
		t.Fatalf("the server holds %d leases, want its cap %d", st.Leases, maxLeases)
	}
}

// TestHostileWriteLeaseCap: a session that holds MaxWriteLeasesPerSession
// write leases gets no other: the acquisition is refused, naming the
// limit, and nothing is written; another session still acquires.
func TestHostileWriteLeaseCap(t *testing.T) {
	leaktest.Check(t)
	const max = 3
	srv, _ := hostileServer(t, Config{MaxWriteLeasesPerSession: max})
	c, other := dialRaw(t, srv), dialRaw(t, srv)
	for i := range max {
		if _, ok := call(t, c, &protocol.Acquire{Key: []byte(fmt.Sprint("w", i))}).(*protocol.AcquireReply); !ok {
			t.Fatalf("acquisition %d under the cap refused", i)
		}
	}
	before := srv.Stats()
	r := call(t, c, &protocol.Acquire{Key: []byte("w-extra")})
	if e, ok := r.(*protocol.Error); !ok || e.Code != protocol.CodeResourceExhausted || !strings.Contains(e.Message, "MaxWriteLeasesPerSession") {
		t.Fatalf("an acquisition past the cap: %#v, want resource exhausted naming MaxWriteLeasesPerSession", r)
	}
	if after := srv.Stats(); after.WriteLeases != before.WriteLeases || after.Revision != before.Revision {
		t.Fatalf("the refused acquisition changed the server: %d write leases and revision %d, then %d and %d",
			before.WriteLeases, before.Revision, after.WriteLeases, after.Revision)
	}
	if _, ok := call(t, other, &protocol.Acquire{Key: []byte("w-extra")}).(*protocol.AcquireReply); !ok {
		t.Fatal("another session's acquisition refused")
	}
}
