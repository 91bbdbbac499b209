package netfault

import (
	"container/heap"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/wait"
)

// These tests run on real UDP sockets on 127.0.0.1, so they wait in real
// time. Every wait is bounded by waitLimit, far above what a loaded machine
// needs, so that a bug fails a test instead of hanging it. No test asserts
// how soon something happens, only that it does not happen too early.
const waitLimit = 10 * time.Second

// burst is how many packets a test sends before it lets the receiver catch
// up, so that the kernel's socket buffers never overflow and lose packets
// the test did not mean to lose.
const burst = 50

// barrier is a payload sent on the wrapped socket past the faults. It
// arrives after every undelayed packet sent before it.
var barrier = []byte("barrier")

// pair is a wrapped socket and a plain one it talks to.
type pair struct {
	w    *Conn        // the conn under test
	raw  *net.UDPConn // the socket w wraps, to send barriers past the faults
	peer *net.UDPConn // the plain socket at the other end
}

func listenUDP(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newPair(t *testing.T) *pair {
	t.Helper()
	p := &pair{raw: listenUDP(t), peer: listenUDP(t)}
	p.w = Wrap(p.raw, 1)
	t.Cleanup(func() {
		p.w.Close()
		p.peer.Close()
	})
	return p
}

func payload(seq int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(seq)) }

// sendOut writes packets first..first+n-1 through p.w to p.peer and returns
// the sequence numbers p.peer receives, in order of arrival. The out faults
// must not delay: after each burst a barrier written past them marks the
// end of what can arrive.
func sendOut(t *testing.T, p *pair, first, n int) []int {
	t.Helper()
	var got []int
	for start := first; start < first+n; start += burst {
		for seq := start; seq < min(start+burst, first+n); seq++ {
			if _, err := p.w.WriteTo(payload(seq), p.peer.LocalAddr()); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := p.raw.WriteTo(barrier, p.peer.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		for {
			b, ok := readPlain(t, p.peer)
			if !ok {
				t.Fatalf("barrier not received within %v", waitLimit)
			}
			if string(b) == string(barrier) {
				break
			}
			got = append(got, seqOf(t, b))
		}
	}
	return got
}

// sendIn writes packets first..first+n-1 from p.peer to p.w, waiting after
// each burst until p.w has read them off its socket.
func sendIn(t *testing.T, p *pair, first, n int) {
	t.Helper()
	received := p.w.Stats().Received
	for start := first; start < first+n; start += burst {
		for seq := start; seq < min(start+burst, first+n); seq++ {
			if _, err := p.peer.WriteTo(payload(seq), p.w.LocalAddr()); err != nil {
				t.Fatal(err)
			}
			received++
		}
		wait.For(t, waitLimit, "packets read off the wrapped socket", func() bool { return p.w.Stats().Received >= received })
	}
}

// drain returns the sequence numbers of the packets p.w delivers until it
// has been idle for idle.
func drain(t *testing.T, p *pair, idle time.Duration) []int {
	t.Helper()
	defer p.w.SetReadDeadline(time.Time{})
	var got []int
	buf := make([]byte, 64)
	for {
		p.w.SetReadDeadline(time.Now().Add(idle))
		n, _, err := p.w.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return got
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, seqOf(t, buf[:n]))
	}
}

// readPlain reads one packet from c, or reports false after waitLimit.
func readPlain(t *testing.T, c *net.UDPConn) ([]byte, bool) {
	t.Helper()
	buf := make([]byte, 64)
	c.SetReadDeadline(time.Now().Add(waitLimit))
	n, _, err := c.ReadFrom(buf)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n], true
}

// readN reads n packets with read, which returns a payload, and returns
// their sequence numbers and arrival times.
func readN(t *testing.T, n int, read func(deadline time.Time) ([]byte, error)) ([]int, []time.Time) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	var seqs []int
	var at []time.Time
	for range n {
		b, err := read(deadline)
		if err != nil {
			t.Fatalf("after %d of %d packets: %v", len(seqs), n, err)
		}
		seqs = append(seqs, seqOf(t, b))
		at = append(at, time.Now())
	}
	return seqs, at
}

func seqOf(t *testing.T, b []byte) int {
	t.Helper()
	if len(b) != 4 {
		t.Fatalf("unexpected payload %q", b)
	}
	return int(binary.BigEndian.Uint32(b))
}

func seqRange(first, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = first + i
	}
	return s
}

// faults returns the pair of faults with f in direction dir ("out" or "in").
func faults(dir string, f Faults) (out, in Faults) {
	if dir == "out" {
		return f, Faults{}
	}
	return Faults{}, f
}

// send sends n packets in direction dir through p, with undelayed faults,
// and returns the sequence numbers delivered, in order.
func send(t *testing.T, p *pair, dir string, first, n int) []int {
	t.Helper()
	if dir == "out" {
		return sendOut(t, p, first, n)
	}
	sendIn(t, p, first, n)
	return drain(t, p, 50*time.Millisecond)
}

func TestConnPassThrough(t *testing.T) {
	leaktest.Check(t)
	p := newPair(t)
	if got := sendOut(t, p, 0, 200); !slices.Equal(got, seqRange(0, 200)) {
		t.Errorf("out: got %v", got)
	}
	sendIn(t, p, 0, 200)
	if got := drain(t, p, 50*time.Millisecond); !slices.Equal(got, seqRange(0, 200)) {
		t.Errorf("in: got %v", got)
	}
	if st, want := p.w.Stats(), (Stats{Sent: 200, Received: 200}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

func TestConnDrop(t *testing.T) {
	for _, tc := range []struct {
		dir      string
		drop     float64
		n        int
		min, max float64 // bounds of the fraction lost
	}{
		{"out", 1, 200, 1, 1},
		{"in", 1, 200, 1, 1},
		{"out", 0.3, 2000, 0.2, 0.4},
		{"in", 0.3, 2000, 0.2, 0.4},
	} {
		t.Run(fmt.Sprintf("%s/%v", tc.dir, tc.drop), func(t *testing.T) {
			leaktest.Check(t)
			p := newPair(t)
			p.w.SetFaults(faults(tc.dir, Faults{Drop: tc.drop}))
			got := send(t, p, tc.dir, 0, tc.n)
			if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
				t.Errorf("delivered out of order or twice: %v", got)
			}
			st := p.w.Stats()
			if int(st.Dropped) != tc.n-len(got) {
				t.Errorf("Stats.Dropped %d, but %d of %d arrived", st.Dropped, len(got), tc.n)
			}
			if lost := float64(tc.n-len(got)) / float64(tc.n); lost < tc.min || lost > tc.max {
				t.Errorf("lost %.3f of packets with Drop %v, want [%v, %v]", lost, tc.drop, tc.min, tc.max)
			}
		})
	}
}

func TestConnDuplicate(t *testing.T) {
	for _, dir := range []string{"out", "in"} {
		t.Run(dir, func(t *testing.T) {
			leaktest.Check(t)
			p := newPair(t)
			p.w.SetFaults(faults(dir, Faults{Duplicate: 1}))
			const n = 100
			got := send(t, p, dir, 0, n)
			slices.Sort(got)
			var want []int
			for seq := range n {
				want = append(want, seq, seq)
			}
			if !slices.Equal(got, want) {
				t.Errorf("got %v, want each packet twice", got)
			}
			if st := p.w.Stats(); st.Duplicated != n || st.Dropped != 0 {
				t.Errorf("stats %+v, want %d duplicated, none dropped", st, n)
			}
		})
	}
}

// readerFor returns a function that reads one payload in direction dir
// with a deadline.
func readerFor(p *pair, dir string) func(time.Time) ([]byte, error) {
	buf := make([]byte, 64)
	return func(deadline time.Time) ([]byte, error) {
		var n int
		var err error
		if dir == "out" {
			p.peer.SetReadDeadline(deadline)
			n, _, err = p.peer.ReadFrom(buf)
		} else {
			p.w.SetReadDeadline(deadline)
			n, _, err = p.w.ReadFrom(buf)
		}
		return buf[:n], err
	}
}

// writerFor returns a function that writes one packet in direction dir.
func writerFor(p *pair, dir string) func(b []byte) error {
	return func(b []byte) error {
		var err error
		if dir == "out" {
			_, err = p.w.WriteTo(b, p.peer.LocalAddr())
		} else {
			_, err = p.peer.WriteTo(b, p.w.LocalAddr())
		}
		return err
	}
}

func TestConnDelay(t *testing.T) {
	const delay = 150 * time.Millisecond
	for _, dir := range []string{"out", "in"} {
		t.Run(dir, func(t *testing.T) {
			leaktest.Check(t)
			p := newPair(t)
			p.w.SetFaults(faults(dir, Faults{Delay: delay}))
			const n = 20
			write := writerFor(p, dir)
			sentAt := make([]time.Time, n)
			for seq := range n {
				sentAt[seq] = time.Now()
				if err := write(payload(seq)); err != nil {
					t.Fatal(err)
				}
			}
			seqs, at := readN(t, n, readerFor(p, dir))
			if !slices.Equal(seqs, seqRange(0, n)) {
				t.Errorf("got %v, want all in order", seqs)
			}
			for i, seq := range seqs {
				if early := sentAt[seq].Add(delay).Sub(at[i]); early > 0 {
					t.Errorf("packet %d arrived %v before its delay was up", seq, early)
				}
			}
			if st := p.w.Stats(); st.Delayed != n {
				t.Errorf("Stats.Delayed %d, want %d", st.Delayed, n)
			}
		})
	}
}

func TestConnJitter(t *testing.T) {
	for _, dir := range []string{"out", "in"} {
		t.Run(dir, func(t *testing.T) {
			leaktest.Check(t)
			p := newPair(t)
			p.w.SetFaults(faults(dir, Faults{Jitter: 50 * time.Millisecond}))
			const n = 100
			write := writerFor(p, dir)
			for seq := range n {
				if err := write(payload(seq)); err != nil {
					t.Fatal(err)
				}
			}
			seqs, _ := readN(t, n, readerFor(p, dir))
			inversions := 0
			for i := 1; i < len(seqs); i++ {
				if seqs[i] < seqs[i-1] {
					inversions++
				}
			}
			if inversions == 0 {
				t.Errorf("jitter reordered nothing: %v", seqs)
			}
			if slices.Sort(seqs); !slices.Equal(seqs, seqRange(0, n)) {
				t.Errorf("got %v, want each packet once", seqs)
			}
			t.Logf("%d inversions in %d packets; stats %+v", inversions, n, p.w.Stats())
		})
	}
}

func TestConnPartition(t *testing.T) {
	for _, dir := range []string{"out", "in"} {
		t.Run(dir, func(t *testing.T) {
			leaktest.Check(t)
			p := newPair(t)
			other := map[string]string{"out": "in", "in": "out"}[dir]
			p.w.Partition(dir == "out", dir == "in")
			if got := send(t, p, dir, 0, 20); len(got) != 0 {
				t.Errorf("%s: %v crossed the partition", dir, got)
			}
			if got := send(t, p, other, 0, 20); !slices.Equal(got, seqRange(0, 20)) {
				t.Errorf("%s, not partitioned: got %v", other, got)
			}
			p.w.Partition(false, false)
			if got := send(t, p, dir, 20, 20); !slices.Equal(got, seqRange(20, 20)) {
				t.Errorf("%s, healed: got %v", dir, got)
			}
			if st := p.w.Stats(); st.Dropped != 20 {
				t.Errorf("Stats.Dropped %d, want 20", st.Dropped)
			}
		})
	}
}

func TestConnPause(t *testing.T) {
	leaktest.Check(t)
	p := newPair(t)
	p.w.Pause()
	sendIn(t, p, 0, 5)
	p.w.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, _, err := p.w.ReadFrom(make([]byte, 64)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("ReadFrom while paused: %v, want a deadline error", err)
	}
	p.w.SetReadDeadline(time.Time{})

	wrote := make(chan error, 1)
	go func() {
		_, err := p.w.WriteTo(payload(100), p.peer.LocalAddr())
		wrote <- err
	}()
	// Not a bound on real time, only a chance for a broken Pause to show.
	select {
	case err := <-wrote:
		t.Fatalf("WriteTo returned %v while paused", err)
	case <-time.After(100 * time.Millisecond):
	}
	p.w.Resume()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("WriteTo still blocked %v after Resume", waitLimit)
	}
	if b, ok := readPlain(t, p.peer); !ok || seqOf(t, b) != 100 {
		t.Errorf("peer got %q, %v; want packet 100", b, ok)
	}
	if got := drain(t, p, 50*time.Millisecond); !slices.Equal(got, seqRange(0, 5)) {
		t.Errorf("after Resume got %v, want the 5 held packets", got)
	}
	if st, want := p.w.Stats(), (Stats{Sent: 1, Received: 5, HeldWhilePaused: 5}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

func TestConnPauseOverflow(t *testing.T) {
	leaktest.Check(t)
	p := newPair(t)
	p.w.Pause()
	const extra = 100
	sendIn(t, p, 0, queueLimit+extra)
	p.w.Resume()
	if got := drain(t, p, 100*time.Millisecond); !slices.Equal(got, seqRange(0, queueLimit)) {
		t.Errorf("after Resume got %d packets, want the first %d", len(got), queueLimit)
	}
	st := p.w.Stats()
	if want := (Stats{Received: queueLimit + extra, HeldWhilePaused: queueLimit + extra, Overflowed: extra}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
}

func TestConnCloseUnblocks(t *testing.T) {
	leaktest.Check(t)
	p := newPair(t)
	p.w.Pause()
	errs := make(chan error, 2)
	go func() {
		_, err := p.w.WriteTo(payload(0), p.peer.LocalAddr())
		errs <- err
	}()
	go func() {
		_, _, err := p.w.ReadFrom(make([]byte, 64))
		errs <- err
	}()
	// Not a bound on real time, only a chance for both calls to block.
	select {
	case err := <-errs:
		t.Fatalf("returned %v before Close", err)
	case <-time.After(50 * time.Millisecond):
	}
	if err := p.w.Close(); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("got %v, want net.ErrClosed", err)
			}
		case <-time.After(waitLimit):
			t.Fatalf("still blocked %v after Close", waitLimit)
		}
	}
	if err := p.w.Close(); err == nil {
		t.Error("second Close succeeded")
	}
	if _, err := p.w.WriteTo(payload(0), p.peer.LocalAddr()); !errors.Is(err, net.ErrClosed) {
		t.Errorf("WriteTo after Close: %v", err)
	}
	if _, _, err := p.w.ReadFrom(make([]byte, 64)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("ReadFrom after Close: %v", err)
	}
}

func TestConnCloseLosesDelayed(t *testing.T) {
	leaktest.Check(t)
	p := newPair(t)
	p.w.SetFaults(Faults{Delay: time.Hour}, Faults{})
	if _, err := p.w.WriteTo(payload(0), p.peer.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	if err := p.w.Close(); err != nil {
		t.Fatal(err)
	}
	// noLeaks checks that the send loop ended with the packet unsent.
}

func TestConnReadDeadline(t *testing.T) {
	leaktest.Check(t)
	p := newPair(t)
	buf := make([]byte, 64)

	const d = 50 * time.Millisecond
	start := time.Now()
	p.w.SetReadDeadline(start.Add(d))
	_, _, err := p.w.ReadFrom(buf)
	if elapsed := time.Since(start); elapsed < d {
		t.Errorf("ReadFrom returned after %v, before its deadline", elapsed)
	}
	var nerr net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &nerr) || !nerr.Timeout() {
		t.Errorf("ReadFrom after the deadline: %v, want a timeout", err)
	}

	// quic-go stops its read loop by moving the deadline to now.
	p.w.SetReadDeadline(time.Time{})
	read := make(chan error, 1)
	go func() {
		_, _, err := p.w.ReadFrom(buf)
		read <- err
	}()
	p.w.SetReadDeadline(time.Now())
	select {
	case err := <-read:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("ReadFrom after the deadline moved to now: %v", err)
		}
	case <-time.After(waitLimit):
		t.Fatalf("ReadFrom still blocked %v after the deadline moved to now", waitLimit)
	}

	// A delayed packet waits in the queue past a deadline, as in a socket
	// buffer, and is read once the deadline is cleared.
	p.w.SetFaults(Faults{}, Faults{Delay: d})
	sendIn(t, p, 0, 1)
	p.w.SetDeadline(time.Now())
	if _, _, err := p.w.ReadFrom(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("ReadFrom with a passed deadline: %v", err)
	}
	p.w.SetDeadline(time.Time{})
	if got, _ := readN(t, 1, readerFor(p, "in")); !slices.Equal(got, []int{0}) {
		t.Errorf("after clearing the deadline got %v", got)
	}
}

// TestConnQUIC runs a QUIC connection through a client conn that delays,
// reorders, drops and duplicates in both directions, and checks that a
// stream echo still works.
func TestConnQUIC(t *testing.T) {
	leaktest.Check(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	serverTLS, clientTLS := tlsConfigs(t)

	serverTr := &quic.Transport{Conn: listenUDP(t)}
	defer serverTr.Conn.Close()
	defer serverTr.Close()
	ln, err := serverTr.Listen(serverTLS, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() { served <- echo(ctx, ln) }()

	w := Wrap(listenUDP(t), 7)
	defer w.Close()
	f := Faults{Delay: 2 * time.Millisecond, Jitter: 10 * time.Millisecond, Drop: 0.05, Duplicate: 0.05}
	w.SetFaults(f, f)
	clientTr := &quic.Transport{Conn: w}
	defer clientTr.Close()
	conn, err := clientTr.Dial(ctx, ln.Addr(), clientTLS, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.CloseWithError(0, "")
	str, err := conn.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	str.SetDeadline(time.Now().Add(20 * time.Second))
	msg := make([]byte, 64<<10)
	for i := range msg {
		msg[i] = byte(i * 7)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := str.Write(msg)
		wrote <- errors.Join(err, str.Close())
	}()
	got, err := io.ReadAll(str)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if string(got) != string(msg) {
		t.Fatalf("echoed %d bytes, not the %d sent", len(got), len(msg))
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	t.Logf("stats %+v", st)
	if st.Sent == 0 || st.Received == 0 || st.Delayed == 0 {
		t.Errorf("stats %+v: no faults injected", st)
	}
}

// echo accepts one connection and one stream on ln and echoes the stream.
func echo(ctx context.Context, ln *quic.Listener) error {
	conn, err := ln.Accept(ctx)
	if err != nil {
		return err
	}
	str, err := conn.AcceptStream(ctx)
	if err != nil {
		return err
	}
	if _, err := io.Copy(str, str); err != nil {
		return err
	}
	return str.Close()
}

// tlsConfigs returns a server config with a throwaway self-signed
// certificate for 127.0.0.1 and a client config that trusts only it.
func tlsConfigs(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "netfault"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	server = &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{"test"},
		MinVersion:   tls.VersionTLS13,
	}
	client = &tls.Config{
		RootCAs:    roots,
		ServerName: "127.0.0.1",
		NextProtos: []string{"test"},
		MinVersion: tls.VersionTLS13,
	}
	return server, client
}

func TestPacketQueueOrder(t *testing.T) {
	var c Conn
	now := time.Now()
	dues := []time.Duration{3, 1, 2, 1, 0, 2, 1}
	for i, d := range dues {
		c.pushLocked(&c.inq, payload(i), nil, now.Add(d))
	}
	var got []int
	for len(c.inq) > 0 {
		got = append(got, seqOf(t, heap.Pop(&c.inq).(*packet).data))
	}
	if want := []int{4, 1, 3, 6, 2, 5, 0}; !slices.Equal(got, want) {
		t.Errorf("popped %v, want %v: earliest due first, then first queued", got, want)
	}
}
