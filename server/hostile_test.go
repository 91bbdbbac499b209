package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/protocol"
)

// Hostile and broken clients. Each test checks that the server answers
// with a clear code, closes the connection only when the session cannot
// go on, keeps serving other clients promptly, and leaks no goroutine.
// Lease time is the fake clock's; the waits on real time are for the
// network, bounded by testTimeout, or for the hello and idle timeouts,
// which these tests shorten.

const (
	hostileTerm = 10 * time.Second
	hostileEps  = 100 * time.Millisecond
	// prompt bounds, in real time, another client's Put and Get while a
	// hostile client does its worst.
	prompt = 3 * time.Second
	// shortHello is the hello timeout of the tests that wait for it.
	shortHello = 300 * time.Millisecond
)

// hostileServer starts a server on 127.0.0.1 with cfg's limits, a fake
// clock, and unless cfg says otherwise hostileTerm and hostileEps.
func hostileServer(t *testing.T, cfg Config) (*Server, *clock.Fake) {
	t.Helper()
	fc := clock.NewFake()
	cfg.Dir, cfg.Addr, cfg.Clock, cfg.Logger = t.TempDir(), "127.0.0.1:0", fc, quietLogger()
	if cfg.LeaseTerm == 0 {
		cfg.LeaseTerm = hostileTerm
	}
	if cfg.Epsilon == 0 {
		cfg.Epsilon = hostileEps
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, srv), fc
}

// dialBare opens a connection and its request stream, and says nothing.
// Nil qconf means protoclient's default.
func dialBare(t *testing.T, srv *Server, qconf *quic.Config) *protoclient.Client {
	t.Helper()
	return dial(t, srv, protoclient.Options{QUICConfig: qconf, NoHello: true})
}

// dialHello opens a session and returns its hello reply. Nil qconf means
// protoclient's default.
func dialHello(t *testing.T, srv *Server, qconf *quic.Config) (*protoclient.Client, *protocol.HelloReply) {
	t.Helper()
	c := dial(t, srv, protoclient.Options{QUICConfig: qconf})
	return c, c.Hello()
}

// stallReader reads r until stall is closed; from then on a read waits
// until closed is, as a client that stopped reading. A read already under
// way when stall closes takes what arrives first, at most one buffer of
// the frame reader above it.
type stallReader struct {
	r      io.Reader
	stall  chan struct{}
	closed chan struct{}
}

func (s *stallReader) Read(p []byte) (int, error) {
	select {
	case <-s.stall:
		<-s.closed
		return 0, net.ErrClosed
	default:
		return s.r.Read(p)
	}
}

// dialStalling opens a session whose client reads its replies until stall
// is called, and then reads nothing more: the server's replies back up in
// QUIC's flow-control window and then in its queue. It never accepts its
// notice stream either. It returns the QUIC connection too, to watch for
// its close.
func dialStalling(t *testing.T, srv *Server) (c *protoclient.Client, qc *quic.Conn, stall func()) {
	t.Helper()
	qc = dialQUIC(t, srv, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	stream, err := qc.OpenStreamSync(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := &stallReader{r: stream, stall: make(chan struct{}), closed: make(chan struct{})}
	c, err = protoclient.NewStreams(ctx, protoclient.Streams{
		Requests: stream,
		Replies:  r,
		Close: func(code protocol.Code, msg string) error {
			close(r.closed)
			return qc.CloseWithError(quic.ApplicationErrorCode(code), msg)
		},
	}, protoclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	var once sync.Once
	return c, qc, func() { once.Do(func() { close(r.stall) }) }
}

// anyFrame builds a frame of type byte typ around body, as a hostile client
// may: any type, any body.
func anyFrame(typ byte, body []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(1+len(body)))
	return append(append(b, typ), body...)
}

// frameOf returns the frame of m.
func frameOf(t *testing.T, m protocol.Message) []byte {
	t.Helper()
	b, err := protocol.AppendFrame(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// expectError reads the next reply and checks that it is an Error for
// request id with code.
func expectError(t *testing.T, c *protoclient.Client, id uint64, code protocol.Code) *protocol.Error {
	t.Helper()
	m := recv(t, c)
	e, ok := m.(*protocol.Error)
	if !ok || e.ID != id || e.Code != code || e.Message == "" {
		t.Fatalf("got %#v, want an error with a message for request %d with code %s", m, id, code)
	}
	return e
}

// expectClosed checks that the server closes c's connection with code,
// and a message that contains what. Before the close it may send Error
// frames with code; any other frame fails the test.
func expectClosed(t *testing.T, c *protoclient.Client, code protocol.Code, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for {
		m, err := c.Recv(ctx)
		if err != nil {
			break
		}
		if e, ok := m.(*protocol.Error); !ok || e.Code != code {
			t.Fatalf("before the close: got %#v, want nothing but an error with code %s", m, code)
		}
	}
	expectGone(t, c.Conn(), code, what)
}

// expectGone waits, without reading, until qc is closed by the server with
// code and a message that contains what.
func expectGone(t *testing.T, qc *quic.Conn, code protocol.Code, what string) {
	t.Helper()
	wait.Chan(t, qc.Context().Done(), testTimeout, fmt.Sprintf("the server to close the connection with code %s", code))
	var ae *quic.ApplicationError
	err := context.Cause(qc.Context())
	if !errors.As(err, &ae) || !ae.Remote || protocol.Code(ae.ErrorCode) != code || !strings.Contains(ae.ErrorMessage, what) {
		t.Fatalf("connection closed with %v, want the server's close with code %s and a message about %q", err, code, what)
	}
}

// expectRefused dials srv and checks that the server closes the
// connection with code and a message about what. On a busy machine the
// close may come before the dial has returned, which then fails with it.
func expectRefused(t *testing.T, srv *Server, code protocol.Code, what string) {
	t.Helper()
	tlsConf, err := protoclient.TLSConfig(protoclient.Options{CAFile: CAPath(srv.cfg.Dir)}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	qc, err := quic.DialAddr(ctx, srv.Addr().String(), tlsConf, nil)
	if err == nil {
		defer qc.CloseWithError(0, "")
		expectGone(t, qc, code, what)
		return
	}
	var ae *quic.ApplicationError
	if !errors.As(err, &ae) || !ae.Remote || protocol.Code(ae.ErrorCode) != code || !strings.Contains(ae.ErrorMessage, what) {
		t.Fatalf("dial failed with %v, want the server's close with code %s and a message about %q", err, code, what)
	}
}

// put writes key and waits for the reply.
func put(t *testing.T, c *protoclient.Client, key string, value []byte) *protocol.WriteReply {
	t.Helper()
	m := call(t, c, &protocol.Write{Op: protocol.OpPut, Key: []byte(key), Value: value})
	r, ok := m.(*protocol.WriteReply)
	if !ok {
		t.Fatalf("put %q: got %#v", key, m)
	}
	return r
}

// checkOthers checks that another client's Put and Get work, within prompt.
func checkOthers(t *testing.T, other *protoclient.Client) {
	t.Helper()
	start := time.Now()
	key := fmt.Sprintf("other-%d", other.NextID())
	v := put(t, other, key, []byte("v")).Version
	if r := get(t, other, key); !r.Found || string(r.Value) != "v" || r.Version != v {
		t.Fatalf("another client read %+v after writing version %d", r, v)
	}
	if d := time.Since(start); d > prompt {
		t.Fatalf("another client's put and get took %v, want under %v", d, prompt)
	}
}

// tableStats returns the lease table's counters.
func tableStats(srv *Server) leasetable.Stats {
	return srv.node.Core().Stats().Stats
}

// waitSessions waits until the server holds n sessions.
func waitSessions(t *testing.T, srv *Server, n int) {
	t.Helper()
	wait.For(t, testTimeout, fmt.Sprintf("%d sessions", n), func() bool { return srv.Stats().Sessions == n })
}

// TestHostileMessages: bad messages on an open session get an Error with a
// clear code, and the session goes on.
func TestHostileMessages(t *testing.T) {
	leaktest.Check(t)
	srv, _ := hostileServer(t, Config{})
	other := dialRaw(t, srv)
	getBody := frameOf(t, &protocol.Get{ID: 9, Key: []byte("k")})[5:]
	cases := []struct {
		name  string
		frame []byte
		id    uint64
		code  protocol.Code
	}{
		{"invalid msgpack in a get", anyFrame(byte(protocol.TypeGet), []byte{0xc1}), 0, protocol.CodeProtocol},
		{"truncated get", anyFrame(byte(protocol.TypeGet), []byte{0x82, 0xa1, 'i'}), 0, protocol.CodeProtocol},
		{"get that is a string", anyFrame(byte(protocol.TypeGet), []byte{0xa3, 'a', 'b', 'c'}), 0, protocol.CodeProtocol},
		{"get with trailing bytes", anyFrame(byte(protocol.TypeGet), append(bytes.Clone(getBody), 0x00)), 0, protocol.CodeProtocol},
		{"get declaring 4 GiB of key", anyFrame(byte(protocol.TypeGet), []byte{0x81, 0xa1, 'k', 0xc6, 0xff, 0xff, 0xff, 0xff}), 0, protocol.CodeProtocol},
		{"unknown type", anyFrame(200, []byte{0x80}), 0, protocol.CodeProtocol},
		{"type zero", anyFrame(0, []byte{0x80}), 0, protocol.CodeProtocol},
		{"empty frame", []byte{0, 0, 0, 0}, 0, protocol.CodeProtocol},
		{"get reply as a request", frameOf(t, &protocol.GetReply{ID: 42}), 42, protocol.CodeProtocol},
		{"error as a request", frameOf(t, &protocol.Error{ID: 43, Code: protocol.CodeInternal, Message: "x"}), 43, protocol.CodeProtocol},
		{"invalidate as a request", frameOf(t, &protocol.Invalidate{Keys: [][]byte{[]byte("k")}}), 0, protocol.CodeProtocol},
		{"hello again", frameOf(t, &protocol.Hello{Version: protocol.Version}), 0, protocol.CodeProtocol},
		{"unknown write op", frameOf(t, &protocol.Write{ID: 44, Op: 9, Key: []byte("k")}), 44, protocol.CodeInvalidArgument},
		{"negative write timeout", frameOf(t, &protocol.Write{ID: 45, Op: protocol.OpPut, Key: []byte("k"), Timeout: -1}), 45, protocol.CodeInvalidArgument},
		{"negative acquire timeout", frameOf(t, &protocol.Acquire{ID: 46, Key: []byte("k"), Timeout: -1}), 46, protocol.CodeInvalidArgument},
		{"delete with a value", frameOf(t, &protocol.Write{ID: 47, Op: protocol.OpDelete, Key: []byte("k"), Value: []byte("v")}), 47, protocol.CodeInvalidArgument},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, srv)
			if err := c.SendFrame(tc.frame); err != nil {
				t.Fatal(err)
			}
			expectError(t, c, tc.id, tc.code)
			// The session goes on.
			if r := get(t, c, "k"); r.Term != hostileTerm {
				t.Fatalf("get after the bad message: %+v", r)
			}
			checkOthers(t, other)
		})
	}
	// Every write above was refused: the revision counts only the other
	// client's puts, one per case.
	if st := srv.Stats(); st.WritesWaiting != 0 || st.WriteLeases != 0 || st.Revision != uint64(len(cases)) {
		t.Fatalf("bad messages left state behind: %d writes waiting, %d write leases, revision %d; want 0, 0, %d",
			st.WritesWaiting, st.WriteLeases, st.Revision, len(cases))
	}
}

// TestHostileHandshake: a connection that does not open its session
// properly is closed with a clear code, within the hello timeout.
func TestHostileHandshake(t *testing.T) {
	leaktest.Check(t)
	srv, _ := hostileServer(t, Config{HelloTimeout: shortHello})
	other := dialRaw(t, srv)
	gib := binary.BigEndian.AppendUint32(nil, 1<<30)
	for _, tc := range []struct {
		name  string
		qconf *quic.Config
		open  func(c *protoclient.Client) // nil: open no stream at all
		code  protocol.Code
		what  string
	}{
		{"request before hello", nil, func(c *protoclient.Client) { c.SendFrame(frameOf(t, &protocol.Get{ID: 3, Key: []byte("k")})) },
			protocol.CodeProtocol, "before hello"},
		{"wrong protocol version", nil, func(c *protoclient.Client) { c.SendFrame(frameOf(t, &protocol.Hello{Version: protocol.Version + 1})) },
			protocol.CodeProtocol, "version"},
		{"malformed hello", nil, func(c *protoclient.Client) { c.SendFrame(anyFrame(byte(protocol.TypeHello), []byte{0xc1})) },
			protocol.CodeProtocol, "reading hello"},
		{"frame over the limit before hello", nil, func(c *protoclient.Client) { c.SendFrame(gib) },
			protocol.CodeTooLarge, "too large"},
		{"no request stream", nil, nil, protocol.CodeProtocol, "no request stream"},
		{"hello cut short", nil, func(c *protoclient.Client) { c.SendFrame([]byte{0, 0}) },
			protocol.CodeProtocol, "reading hello"},
		{"no room for the notice stream", &quic.Config{MaxIncomingUniStreams: -1},
			func(c *protoclient.Client) { c.SendFrame(frameOf(t, &protocol.Hello{Version: protocol.Version})) },
			protocol.CodeProtocol, "notice stream"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c *protoclient.Client
			var qc *quic.Conn
			if tc.open == nil {
				qc = dialQUIC(t, srv, tc.qconf)
			} else {
				c = dialBare(t, srv, tc.qconf)
				tc.open(c)
			}
			start := time.Now()
			if c != nil {
				expectClosed(t, c, tc.code, tc.what)
			} else {
				expectGone(t, qc, tc.code, tc.what)
			}
			if d := time.Since(start); d > shortHello+prompt {
				t.Fatalf("closed after %v, want within the hello timeout of %v", d, shortHello)
			}
			waitSessions(t, srv, 1)
			checkOthers(t, other)
		})
	}
}

// TestHostileFrameTooLarge: a frame that declares more than the limit is
// refused before anything is allocated for it, and the connection, out of
// step, is closed at once, also when the client does not read its replies.
func TestHostileFrameTooLarge(t *testing.T) {
	leaktest.Check(t)
	srv, _ := hostileServer(t, Config{HelloTimeout: shortHello})
	other := dialRaw(t, srv)
	oneGiB := binary.BigEndian.AppendUint32(nil, 1<<30)

	t.Run("declared 1 GiB", func(t *testing.T) {
		c := dialRaw(t, srv)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		if err := c.SendFrame(append(oneGiB, byte(protocol.TypeWrite), 0x80)); err != nil {
			t.Fatal(err)
		}
		expectClosed(t, c, protocol.CodeTooLarge, "too large")
		if d := time.Since(start); d > prompt {
			t.Fatalf("closed after %v", d)
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 256<<20 {
			t.Fatalf("%d MiB allocated meanwhile: the declared size was allocated", n>>20)
		}
		waitSessions(t, srv, 1)
		checkOthers(t, other)
	})

	t.Run("client not reading its replies", func(t *testing.T) {
		c, qc, stall := dialStalling(t, srv)
		big := bytes.Repeat([]byte("b"), srv.cfg.MaxValueSize)
		put(t, c, "big", big)
		// It stops reading. 8 MiB of replies: more than QUIC lets in flight
		// to a reader that does not read, less than the queue's cap.
		stall()
		gets := srv.msgsIn[protocol.TypeGet].Load()
		for range 8 {
			send(t, c, &protocol.Get{ID: c.NextID(), Key: []byte("big")})
		}
		wait.For(t, testTimeout, "the gets to be served", func() bool { return srv.msgsIn[protocol.TypeGet].Load() == gets+8 })
		start := time.Now()
		if err := c.SendFrame(oneGiB); err != nil {
			t.Fatal(err)
		}
		// The error reply cannot reach it; the close must not wait for it
		// longer than the hello timeout.
		expectGone(t, qc, protocol.CodeTooLarge, "too large")
		if d := time.Since(start); d > shortHello+prompt {
			t.Fatalf("closed after %v, want within the hello timeout of %v", d, shortHello)
		}
		waitSessions(t, srv, 1)
		checkOthers(t, other)
	})
}

// TestHostileKeys: empty and oversized keys, and oversized values, in every
// request that carries them, get a clear code; the session goes on, and the
// lease table holds nothing of them.
func TestHostileKeys(t *testing.T) {
	leaktest.Check(t)
	srv, _ := hostileServer(t, Config{})
	other := dialRaw(t, srv)
	c := dialRaw(t, srv)
	empty, long := []byte{}, bytes.Repeat([]byte("k"), MaxKeySize+1)
	longValue := make([]byte, srv.cfg.MaxValueSize+1)
	type keyCase struct {
		name string
		req  func(id uint64, key []byte) protocol.Message
		noID bool // Ack carries no ID: its error comes with ID 0
	}
	requests := []keyCase{
		{"get", func(id uint64, k []byte) protocol.Message { return &protocol.Get{ID: id, Key: k} }, false},
		{"put", func(id uint64, k []byte) protocol.Message {
			return &protocol.Write{ID: id, Op: protocol.OpPut, Key: k, Value: []byte("v")}
		}, false},
		{"delete", func(id uint64, k []byte) protocol.Message {
			return &protocol.Write{ID: id, Op: protocol.OpDelete, Key: k}
		}, false},
		{"acquire", func(id uint64, k []byte) protocol.Message { return &protocol.Acquire{ID: id, Key: k} }, false},
		{"renew", func(id uint64, k []byte) protocol.Message {
			return &protocol.Renew{ID: id, Keys: [][]byte{[]byte("fine"), k}}
		}, false},
		{"release", func(id uint64, k []byte) protocol.Message {
			return &protocol.Release{ID: id, Keys: [][]byte{[]byte("fine"), k}}
		}, false},
		{"ack", func(_ uint64, k []byte) protocol.Message { return &protocol.Ack{Keys: [][]byte{k}} }, true},
		{"release write", func(id uint64, k []byte) protocol.Message { return &protocol.ReleaseWrite{ID: id, Key: k, Token: 1} }, false},
	}
	check := func(t *testing.T, m protocol.Message, id uint64, code protocol.Code, what string) {
		t.Helper()
		send(t, c, m)
		if e := expectError(t, c, id, code); !strings.Contains(e.Message, what) {
			t.Fatalf("error %q does not say %q", e.Message, what)
		}
		if r := get(t, c, "k"); r.Term == 0 { // the session goes on
			t.Fatalf("get after the bad request: %+v", r)
		}
	}
	for _, rq := range requests {
		t.Run(rq.name+" with an empty key", func(t *testing.T) {
			id := c.NextID()
			m := rq.req(id, empty)
			if rq.noID {
				id = 0
			}
			check(t, m, id, protocol.CodeInvalidArgument, "empty")
		})
		t.Run(rq.name+" with an oversized key", func(t *testing.T) {
			id := c.NextID()
			m := rq.req(id, long)
			if rq.noID {
				id = 0
			}
			check(t, m, id, protocol.CodeTooLarge, fmt.Sprint(MaxKeySize))
		})
	}
	t.Run("put with an oversized value", func(t *testing.T) {
		id := c.NextID()
		check(t, &protocol.Write{ID: id, Op: protocol.OpPut, Key: []byte("v"), Value: longValue}, id, protocol.CodeTooLarge, fmt.Sprint(srv.cfg.MaxValueSize))
	})
	t.Run("cas with an oversized value", func(t *testing.T) {
		id := c.NextID()
		check(t, &protocol.Write{ID: id, Op: protocol.OpCAS, Key: []byte("v"), Value: longValue}, id, protocol.CodeTooLarge, fmt.Sprint(srv.cfg.MaxValueSize))
	})
	t.Run("largest key and value", func(t *testing.T) {
		key := string(long[:MaxKeySize])
		put(t, c, key, longValue[:srv.cfg.MaxValueSize])
		if r := get(t, c, key); !r.Found || len(r.Value) != srv.cfg.MaxValueSize {
			t.Fatalf("get of the largest key: found %v, %d bytes", r.Found, len(r.Value))
		}
	})
	// Only "k", the largest key and the other client's keys were ever
	// leased or written.
	checkOthers(t, other)
	ts := tableStats(srv)
	if ts.Keys != 3 || ts.Leases != 3 || ts.WriteLeases != 0 || ts.WritesWaiting != 0 {
		t.Fatalf("lease table after bad keys: %+v, want 3 keys with one lease each", ts)
	}
	if rev := srv.Stats().Revision; rev != 2 {
		t.Fatalf("revision %d, want 2: only the largest put and the other client's", rev)
	}
}

// TestHostileMaxInflight: writes past MaxInflight get a resource-exhausted
// error; the ones taken still complete, and reads are not limited.
func TestHostileMaxInflight(t *testing.T) {
	leaktest.Check(t)
	srv, fc := hostileServer(t, Config{MaxInflight: 3})
	other := dialRaw(t, srv)
	holder := dialRaw(t, srv)
	for i := range 4 {
		get(t, holder, fmt.Sprint("k", i))
	}
	w := dialRaw(t, srv)
	// IDs of requests sent by hand come from w, so that its calls never
	// reuse one still in flight.
	taken := make(map[uint64]bool)
	for i := range 3 {
		id := w.NextID()
		taken[id] = true
		send(t, w, &protocol.Write{ID: id, Op: protocol.OpPut, Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")})
	}
	wait.For(t, testTimeout, "three writes to wait", func() bool { return srv.Stats().WritesWaiting == 3 })
	over := w.NextID()
	send(t, w, &protocol.Write{ID: over, Op: protocol.OpPut, Key: []byte("k3"), Value: []byte("v")})
	if e := expectError(t, w, over, protocol.CodeResourceExhausted); !strings.Contains(e.Message, "limit 3") {
		t.Fatalf("error %q does not name the limit", e.Message)
	}
	acquire := w.NextID()
	send(t, w, &protocol.Acquire{ID: acquire, Key: []byte("k3")})
	expectError(t, w, acquire, protocol.CodeResourceExhausted)
	if r := get(t, w, "k3"); r.Term != hostileTerm { // reads are not limited
		t.Fatalf("get while at the limit: %+v", r)
	}
	checkOthers(t, other)
	if n := srv.Stats().WritesWaiting; n != 3 {
		t.Fatalf("%d writes waiting, want the 3 taken", n)
	}

	fc.Advance(hostileTerm + hostileEps)
	for range 3 {
		r, ok := recv(t, w).(*protocol.WriteReply)
		if !ok || !taken[r.ID] {
			t.Fatalf("want the replies of the 3 writes taken, got %#v", r)
		}
		delete(taken, r.ID)
	}
	// The slots are free again.
	put(t, w, "k3", []byte("v"))
}

// sessionOf returns the server's session with id.
func sessionOf(t *testing.T, srv *Server, id uint64) *session {
	t.Helper()
	ss := srv.session(leasetable.SessionID(id))
	if ss == nil {
		t.Fatalf("no session %d", id)
	}
	return ss
}

// queuedBytes returns the bytes of the frames s holds queued.
func (s *sender) queuedBytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.buf)
}

func (ss *session) waitingBytes() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.opsBytes
}

// TestHostileInflightBytes: the keys and values of a session's waiting writes are
// held to MaxInflightBytes; a write past it gets a resource-exhausted error
// naming the budget, and a write's bytes return to the budget when it is
// answered: committed, canceled or abandoned at its deadline.
func TestHostileInflightBytes(t *testing.T) {
	leaktest.Check(t)
	const maxValue, budget = 256 << 10, 600 << 10
	srv, fc := hostileServer(t, Config{MaxValueSize: maxValue, MaxInflightBytes: budget})
	other := dialRaw(t, srv)
	holder := dialRaw(t, srv)
	for i := range 5 {
		get(t, holder, fmt.Sprint("k", i))
	}
	w, hello := dialHello(t, srv, nil)
	ss := sessionOf(t, srv, hello.SessionID)
	full := make([]byte, maxValue)
	write := func(id uint64, key string, value []byte) {
		send(t, w, &protocol.Write{ID: id, Op: protocol.OpPut, Key: []byte(key), Value: value})
	}
	write(1, "k0", full)
	write(2, "k1", full)
	wait.For(t, testTimeout, "two writes to wait", func() bool { return srv.Stats().WritesWaiting == 2 })
	write(3, "k2", full)
	e := expectError(t, w, 3, protocol.CodeResourceExhausted)
	if !strings.Contains(e.Message, "MaxInflightBytes") || !strings.Contains(e.Message, fmt.Sprint(budget)) {
		t.Fatalf("error %q does not name the budget", e.Message)
	}
	write(4, "k3", make([]byte, 64<<10)) // still fits
	send(t, w, &protocol.Write{ID: 5, Op: protocol.OpDelete, Key: []byte("k4")})
	wait.For(t, testTimeout, "four writes to wait", func() bool { return srv.Stats().WritesWaiting == 4 })
	if n, want := ss.waitingBytes(), 2*(2+maxValue)+2+64<<10+2; n != want {
		t.Fatalf("%d bytes counted, want %d: each write's key and value", n, want)
	}
	checkOthers(t, other)

	// A canceled write returns its bytes, and a write that did not fit
	// before fits now.
	send(t, w, &protocol.Cancel{ID: 2})
	expectError(t, w, 2, protocol.CodeCanceled)
	write(6, "k2", full)
	wait.For(t, testTimeout, "four writes to wait", func() bool { return srv.Stats().WritesWaiting == 4 })
	if n, want := ss.waitingBytes(), 2*(2+maxValue)+2+64<<10+2; n != want {
		t.Fatalf("%d bytes counted, want %d: each write's key and value", n, want)
	}

	// Committed writes return theirs.
	fc.Advance(hostileTerm + hostileEps)
	got := map[uint64]bool{}
	for range 4 {
		r, ok := recv(t, w).(*protocol.WriteReply)
		if !ok || got[r.ID] || (r.ID != 1 && r.ID != 4 && r.ID != 5 && r.ID != 6) {
			t.Fatalf("want the replies of writes 1, 4, 5 and 6, got %#v", r)
		}
		got[r.ID] = true
	}
	if n := ss.waitingBytes(); n != 0 {
		t.Fatalf("%d bytes counted with no write waiting", n)
	}

	// So does a write abandoned at its deadline.
	get(t, holder, "k0")
	send(t, w, &protocol.Write{ID: 7, Op: protocol.OpPut, Key: []byte("k0"), Value: full, Timeout: time.Second})
	wait.For(t, testTimeout, "the write to wait", func() bool { return srv.Stats().WritesWaiting == 1 })
	if n := ss.waitingBytes(); n != 2+maxValue {
		t.Fatalf("%d bytes counted, want %d", n, 2+maxValue)
	}
	fc.Advance(time.Second)
	expectError(t, w, 7, protocol.CodeCanceled)
	if n := ss.waitingBytes(); n != 0 {
		t.Fatalf("%d bytes counted after the write was abandoned", n)
	}
}

// TestHostileMaxSessions: a connection past MaxSessions is refused with a
// resource-exhausted code, which the client library reports as
// ErrResourceExhausted; the sessions held go on, and once one ends a new
// one is taken.
func TestHostileMaxSessions(t *testing.T) {
	leaktest.Check(t)
	srv, _ := hostileServer(t, Config{MaxSessions: 2})
	a := dialRaw(t, srv)
	other := dialRaw(t, srv)

	// The server refuses the connection as soon as it is accepted, maybe
	// before the client could open a stream, so only the close is checked.
	expectRefused(t, srv, protocol.CodeResourceExhausted, "maximum of 2 sessions")

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr().String(), client.Config{CAFile: CAPath(srv.cfg.Dir), Logger: quietLogger()})
	if err == nil {
		c.Close()
		t.Fatal("client.Dial succeeded past MaxSessions")
	}
	if !errors.Is(err, client.ErrResourceExhausted) {
		t.Fatalf("client.Dial: %v, want ErrResourceExhausted", err)
	}
	if n := srv.Stats().Sessions; n != 2 {
		t.Fatalf("%d sessions, want 2", n)
	}
	if r := get(t, a, "k"); r.Term != hostileTerm {
		t.Fatalf("a session held: %+v", r)
	}
	checkOthers(t, other)

	a.Close()
	waitSessions(t, srv, 1)
	b := dialRaw(t, srv)
	if r := get(t, b, "k2"); r.Term != hostileTerm {
		t.Fatalf("a session taken after one ended: %+v", r)
	}
}

// TestHostileNoticesNotRead: a holder that never accepts its invalidation
// stream blocks neither the server nor other clients nor other keys: writes
// to its keys wait out its leases and no longer. Once its invalidations
// queued pass the cap, its session is closed, and its leases simply
// expire.
func TestHostileNoticesNotRead(t *testing.T) {
	leaktest.Check(t)
	// Each invalidation carries one key of the largest size. The first
	// writes send more of them than QUIC lets in flight to a client that
	// does not read, and the rest pass the cap of queued bytes, with room
	// for those that the sender took to write when the stream blocked.
	const first = 400
	n := maxQueuedBytes/MaxKeySize + 2*first
	srv, fc := hostileServer(t, Config{MaxInflight: n})
	other := dialRaw(t, srv)
	holder := dial(t, srv, protoclient.Options{NoNotices: true}) // never accepts the notice stream
	key := func(i int) []byte {
		k := bytes.Repeat([]byte("x"), MaxKeySize)
		copy(k, fmt.Sprint(i, "/"))
		return k
	}
	for i := range n {
		send(t, holder, &protocol.Get{ID: holder.NextID(), Key: key(i)})
	}
	for range n {
		if r, ok := recv(t, holder).(*protocol.GetReply); !ok || r.Term != hostileTerm {
			t.Fatalf("holder's get: %#v", r)
		}
	}
	w := dialRaw(t, srv)
	// IDs of writes sent by hand come from w, so that its calls never reuse
	// one still in flight. Those of the first writes are up to lastFirst,
	// those of the rest above it.
	var lastFirst uint64
	for i := range first {
		lastFirst = w.NextID()
		send(t, w, &protocol.Write{ID: lastFirst, Op: protocol.OpPut, Key: key(i), Value: []byte("v")})
	}
	wait.For(t, testTimeout, "the writes to wait", func() bool { return srv.Stats().WritesWaiting == first })
	put(t, w, "free", []byte("v")) // other keys go on
	checkOthers(t, other)
	if r := get(t, holder, "h"); r.Term != hostileTerm { // and the holder's own requests
		t.Fatalf("holder's get: %+v", r)
	}

	// The rest pass the cap: the holder's session is closed. They give up
	// after a second, so that only the first ones commit.
	for i := first; i < n; i++ {
		send(t, w, &protocol.Write{ID: w.NextID(), Op: protocol.OpPut, Key: key(i), Value: []byte("v"), Timeout: time.Second})
	}
	expectGone(t, holder.Conn(), protocol.CodeResourceExhausted, "invalidations")
	waitSessions(t, srv, 2)
	checkOthers(t, other)
	wait.For(t, testTimeout, "the writes to wait", func() bool { return srv.Stats().WritesWaiting == n })
	fc.Advance(time.Second)
	for range n - first {
		if r, ok := recv(t, w).(*protocol.Error); !ok || r.ID <= lastFirst || r.Code != protocol.CodeCanceled {
			t.Fatalf("want the later writes abandoned at their deadline, got %#v", r)
		}
	}

	// The closed session's leases expire term+ε after they were granted,
	// not before.
	fc.Advance(hostileTerm + hostileEps - time.Second - time.Millisecond)
	settle(t, srv, fc)
	if got := srv.Stats().WritesWaiting; got != first {
		t.Fatalf("%d writes waiting, want %d: some committed before the holder's leases expired", got, first)
	}
	fc.Advance(time.Millisecond)
	for range first {
		r, ok := recv(t, w).(*protocol.WriteReply)
		if !ok || r.ID > lastFirst || r.Holders != 1 || r.Waited != hostileTerm+hostileEps {
			t.Fatalf("want a write that waited out one holder's lease, got %#v", r)
		}
	}
	checkOthers(t, other)
}

// TestHostileRepliesNotRead: a client that stops reading its replies
// blocks neither the server nor other clients nor other keys; writes to its
// keys complete when its leases expire. Once its replies queued pass the
// cap, its session is closed, and its leases simply expire.
func TestHostileRepliesNotRead(t *testing.T) {
	leaktest.Check(t)
	const value = 4 << 20
	srv, fc := hostileServer(t, Config{MaxValueSize: value})
	other := dialRaw(t, srv)
	w := dialRaw(t, srv)
	put(t, w, "big", make([]byte, value))
	holder, holderConn, stall := dialStalling(t, srv)
	get(t, holder, "k")

	// It stops reading. Three large replies: more than QUIC lets in flight
	// to it, under the cap.
	stall()
	gets := srv.msgsIn[protocol.TypeGet].Load()
	for range 3 {
		send(t, holder, &protocol.Get{ID: holder.NextID(), Key: []byte("big")})
	}
	wait.For(t, testTimeout, "the gets to be served", func() bool { return srv.msgsIn[protocol.TypeGet].Load() == gets+3 })
	checkOthers(t, other)
	send(t, w, &protocol.Write{ID: 1000, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v")})
	wait.For(t, testTimeout, "the write to wait", func() bool { return srv.Stats().WritesWaiting == 1 })
	put(t, w, "free", []byte("v"))
	fc.Advance(hostileTerm + hostileEps)
	if r, ok := recv(t, w).(*protocol.WriteReply); !ok || r.ID != 1000 || r.Holders != 1 || r.Waited != hostileTerm+hostileEps {
		t.Fatalf("want the write to k after the holder's lease expired, got %#v", r)
	}
	if n := srv.Stats().Sessions; n != 3 {
		t.Fatalf("%d sessions, want 3: the holder's is not over its cap yet", n)
	}

	// It takes a lease on k2, and more large replies pass the cap.
	leases := tableStats(srv).Leases
	send(t, holder, &protocol.Get{ID: holder.NextID(), Key: []byte("k2")})
	wait.For(t, testTimeout, "the lease on k2", func() bool { return tableStats(srv).Leases == leases+1 })
	// Past the cap even if the sender took all of the first ones to write.
	for range 5 {
		send(t, holder, &protocol.Get{ID: holder.NextID(), Key: []byte("big")})
	}
	expectGone(t, holderConn, protocol.CodeResourceExhausted, "replies")
	waitSessions(t, srv, 2)
	checkOthers(t, other)

	// Its lease on k2 lives on until it expires.
	send(t, w, &protocol.Write{ID: 2000, Op: protocol.OpPut, Key: []byte("k2"), Value: []byte("v")})
	wait.For(t, testTimeout, "the write to wait", func() bool { return srv.Stats().WritesWaiting == 1 })
	fc.Advance(hostileTerm + hostileEps - time.Millisecond)
	settle(t, srv, fc)
	if srv.Stats().WritesWaiting != 1 {
		t.Fatal("the write committed before the closed session's lease expired")
	}
	fc.Advance(time.Millisecond)
	if r, ok := recv(t, w).(*protocol.WriteReply); !ok || r.ID != 2000 || r.Holders != 1 {
		t.Fatalf("want the write to k2, got %#v", r)
	}
	checkOthers(t, other)
}

// TestHostileIdle: a connection silent for IdleTimeout is closed, whether
// or not it said hello; a session lost so keeps its leases until they
// expire.
func TestHostileIdle(t *testing.T) {
	leaktest.Check(t)
	const idle = 300 * time.Millisecond
	srv, fc := hostileServer(t, Config{IdleTimeout: idle})
	other, _ := dialHello(t, srv, &quic.Config{KeepAlivePeriod: idle / 3})

	// No keep-alive: it is silent once it has its lease.
	silent := dial(t, srv, protoclient.Options{QUICConfig: &quic.Config{}})
	get(t, silent, "k")
	dialQUIC(t, srv, nil) // never opens a stream
	start := time.Now()
	// An idle timeout closes a connection silently: the clients learn of it
	// only at their own, which quic-go holds to at least 5 s. The server's
	// sessions end at the server's.
	waitSessions(t, srv, 1)
	// QUIC waits at least 3 PTOs, a few milliseconds on localhost; allow
	// for a slow machine.
	if d := time.Since(start); d > idle+prompt {
		t.Fatalf("idle connections closed after %v, want about %v", d, idle)
	}
	checkOthers(t, other)
	if n := tableStats(srv).Leases; n < 1 {
		t.Fatal("the lost session's lease is gone")
	}
	send(t, other, &protocol.Write{ID: 1000, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v")})
	wait.For(t, testTimeout, "the write to wait", func() bool { return srv.Stats().WritesWaiting == 1 })
	fc.Advance(hostileTerm + hostileEps)
	if r, ok := recv(t, other).(*protocol.WriteReply); !ok || r.ID != 1000 || r.Holders != 1 {
		t.Fatalf("want the write to k, got %#v", r)
	}
}

// TestHostileFlood: a client that renews, releases and acknowledges, in
// large batches, leases it never held gets sane replies, the lease table
// does not grow, and other clients and their leases are unaffected.
func TestHostileFlood(t *testing.T) {
	leaktest.Check(t)
	const batches, perBatch = 200, 1000
	srv, _ := hostileServer(t, Config{})
	other := dialRaw(t, srv)
	get(t, other, "shared")
	f := dialRaw(t, srv)
	before := tableStats(srv)
	checks := 0
	for b := range batches {
		keys := make([][]byte, perBatch)
		for i := range keys {
			keys[i] = []byte(fmt.Sprintf("f/%d/%d", b, i))
		}
		keys[b%perBatch] = []byte("shared") // held by the other client, not by f
		renew, release := f.NextID(), f.NextID()
		send(t, f, &protocol.Renew{ID: renew, Keys: keys})
		send(t, f, &protocol.Release{ID: release, Keys: keys})
		send(t, f, &protocol.Ack{Keys: keys})
		r, ok := recv(t, f).(*protocol.RenewReply)
		if !ok || r.ID != renew || len(r.Terms) != perBatch {
			t.Fatalf("renew of %d unheld keys: %#v", perBatch, r)
		}
		for i, term := range r.Terms {
			if term != 0 {
				t.Fatalf("renew of unheld key %q: term %v, want 0", keys[i], term)
			}
		}
		if ok, isOK := recv(t, f).(*protocol.OK); !isOK || ok.ID != release {
			t.Fatalf("release of unheld keys: %#v", ok)
		}
		if b%50 == 0 {
			checkOthers(t, other)
			checks++
		}
	}
	// Only the other client's puts added keys and leases.
	after := tableStats(srv)
	if after.Keys != before.Keys+checks || after.Leases != before.Leases+checks || after.Sessions != before.Sessions {
		t.Fatalf("lease table grew: %+v before, %+v after, want %d keys and leases more", before, after, checks)
	}
	send(t, other, &protocol.Renew{ID: 999999, Keys: [][]byte{[]byte("shared")}})
	if r, ok := recv(t, other).(*protocol.RenewReply); !ok || r.Terms[0] != hostileTerm {
		t.Fatalf("the other client's lease on shared: %#v", r)
	}
}

// TestHostileDuplicateID: a request that reuses the ID of a write still in
// flight gets a protocol error; the session, and the write, go on.
func TestHostileDuplicateID(t *testing.T) {
	leaktest.Check(t)
	srv, fc := hostileServer(t, Config{})
	other := dialRaw(t, srv)
	holder := dialRaw(t, srv)
	get(t, holder, "k")
	w := dialRaw(t, srv)
	id := w.NextID() // one that w's calls do not use
	send(t, w, &protocol.Write{ID: id, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v1")})
	wait.For(t, testTimeout, "the write to wait", func() bool { return srv.Stats().WritesWaiting == 1 })
	for _, m := range []protocol.Message{
		&protocol.Write{ID: id, Op: protocol.OpPut, Key: []byte("other"), Value: []byte("x")},
		&protocol.Acquire{ID: id, Key: []byte("other")},
		&protocol.Get{ID: id, Key: []byte("other")},
		&protocol.Renew{ID: id, Keys: [][]byte{[]byte("other")}},
		&protocol.Stats{ID: id},
	} {
		send(t, w, m)
		if e := expectError(t, w, id, protocol.CodeProtocol); !strings.Contains(e.Message, "in flight") {
			t.Fatalf("%s reusing id %d: error %q", m.Type(), id, e.Message)
		}
	}
	if r := get(t, w, "other"); r.Found || r.Term != hostileTerm {
		t.Fatalf("get after the duplicates: %+v", r)
	}
	if st := srv.Stats(); st.WritesWaiting != 1 || st.WriteLeases != 0 {
		t.Fatalf("a duplicate was taken: %+v", st)
	}
	checkOthers(t, other)
	fc.Advance(hostileTerm + hostileEps)
	if r, ok := recv(t, w).(*protocol.WriteReply); !ok || r.ID != id || r.Version != 2 {
		// Version 1 is the other client's put.
		t.Fatalf("want the reply of write %d, got %#v", id, r)
	}
	// Once answered, the ID is free again.
	send(t, w, &protocol.Write{ID: id, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v2")})
	if r, ok := recv(t, w).(*protocol.WriteReply); !ok || r.ID != id || r.Version != 3 {
		t.Fatalf("put reusing an answered id: %#v", r)
	}
}

// TestHostileGoodbyeNoClose: a client that says goodbye gets its OK and the
// end of the request stream, and its connection is closed if it does not
// close it within the hello timeout.
func TestHostileGoodbyeNoClose(t *testing.T) {
	leaktest.Check(t)
	srv, _ := hostileServer(t, Config{HelloTimeout: shortHello})
	other := dialRaw(t, srv)
	c := dialRaw(t, srv)
	get(t, c, "k")
	send(t, c, &protocol.Goodbye{ID: 7})
	if r, ok := recv(t, c).(*protocol.OK); !ok || r.ID != 7 {
		t.Fatalf("want OK to goodbye, got %#v", r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if m, err := c.Recv(ctx); err == nil {
		t.Fatalf("the request stream goes on after goodbye: %#v", m)
	}
	expectGone(t, c.Conn(), protocol.CodeClosed, "goodbye")
	waitSessions(t, srv, 1)
	if n := tableStats(srv).Leases; n != 0 {
		t.Fatalf("%d leases after goodbye, want 0", n)
	}
	checkOthers(t, other)
}

// TestConfigSessionLimits: the defaults and validation of the limits on
// sessions.
func TestConfigSessionLimits(t *testing.T) {
	d := Config{}.withDefaults()
	if d.MaxInflightBytes != DefaultMaxInflightBytes || d.HelloTimeout != DefaultHelloTimeout {
		t.Fatalf("defaults: %d inflight bytes, hello timeout %v", d.MaxInflightBytes, d.HelloTimeout)
	}
	if err := d.validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	big := Config{MaxValueSize: MaxValueSizeLimit}.withDefaults()
	if err := big.validate(); err != nil || big.MaxInflightBytes != max(DefaultMaxInflightBytes, MaxValueSizeLimit+MaxKeySize) {
		t.Fatalf("the largest values with the default budget of %d: %v", big.MaxInflightBytes, err)
	}
	// The server's budget is at least one session's.
	if huge := (Config{MaxInflightBytes: 2 << 30}).withDefaults(); huge.MaxTotalInflightBytes != 2<<30 {
		t.Fatalf("MaxInflightBytes of 2 GiB: the server's budget defaults to %d", huge.MaxTotalInflightBytes)
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"negative inflight bytes", Config{MaxInflightBytes: -1}},
		{"inflight bytes under the value size", Config{MaxValueSize: 2 << 20, MaxInflightBytes: 1 << 20}},
		{"negative hello timeout", Config{HelloTimeout: -time.Second}},
		{"negative frame timeout", Config{FrameTimeout: -time.Second}},
		{"negative leases per session", Config{MaxLeasesPerSession: -1}},
		{"negative sessions per address", Config{MaxSessionsPerAddr: -1}},
		{"total inflight bytes under the value size", Config{MaxValueSize: 2 << 20, MaxTotalInflightBytes: 1 << 20}},
	} {
		if err := tc.cfg.withDefaults().validate(); err == nil {
			t.Errorf("%s: validate accepted it", tc.name)
		}
	}
}

// stalledWriter is a stream whose peer does not read: Write blocks until
// the stream is closed.
type stalledWriter struct{ closed chan struct{} }

func (w stalledWriter) Write([]byte) (int, error) { <-w.closed; return 0, io.ErrClosedPipe }

// TestSenderOverflow: a sender whose peer does not read queues up to the
// cap and no further: past it, it drops what it queued, refuses more, and
// calls overflow once, whose closing of the stream ends its goroutine.
func TestSenderOverflow(t *testing.T) {
	leaktest.Check(t)
	w := stalledWriter{make(chan struct{})}
	var counts [protocol.NumTypes]atomic.Uint64
	var overflows atomic.Int32
	s := newSender(w, &counts, func() { overflows.Add(1); close(w.closed) })
	value := make([]byte, 1<<20)
	taken := 0
	for i := range 2 * maxQueuedBytes >> 20 {
		if s.send(&protocol.GetReply{ID: uint64(i + 1), Value: value}) {
			taken++
		}
		if queued := s.queuedBytes(); queued > maxQueuedBytes+len(value)+64 {
			t.Fatalf("%d bytes queued, cap %d", queued, maxQueuedBytes)
		}
	}
	if n := overflows.Load(); n != 1 {
		t.Fatalf("overflow called %d times, want once", n)
	}
	// What the goroutine took to write, and blocks on, is out of the queue:
	// at most the cap again.
	if max := 2 * (maxQueuedBytes>>20 + 1); taken > max {
		t.Fatalf("%d frames of 1 MiB taken, want at most %d", taken, max)
	}
	if queued := s.queuedBytes(); queued != 0 {
		t.Fatalf("%d bytes still queued after the overflow", queued)
	}
	done := make(chan struct{})
	go func() { defer close(done); s.wait() }()
	wait.Chan(t, done, testTimeout, "the sender's goroutine to end")
}

// gatedWriter is a stream whose peer reads, but only once the gate opens:
// until then Write blocks.
type gatedWriter struct {
	gate chan struct{}
	n    atomic.Int64
}

func (w *gatedWriter) Write(p []byte) (int, error) {
	<-w.gate
	w.n.Add(int64(len(p)))
	return len(p), nil
}

// TestSenderLargeReplyBesideSmall: a reply larger than the queue's cap goes
// out whether a small reply waits in the queue before it or arrives after
// it while the sender's goroutine is busy writing an earlier frame; only a
// second large reply queued beside the first is overflow, so the queue
// stays within the cap and one frame.
func TestSenderLargeReplyBesideSmall(t *testing.T) {
	leaktest.Check(t)
	big := make([]byte, maxQueuedBytes+1)
	for _, tc := range []struct {
		name     string
		msgs     []protocol.Message
		overflow bool
	}{
		{"small then large", []protocol.Message{&protocol.OK{ID: 2}, &protocol.GetReply{ID: 3, Value: big, Found: true}}, false},
		{"large then small", []protocol.Message{&protocol.GetReply{ID: 2, Value: big, Found: true}, &protocol.OK{ID: 3}}, false},
		{"two large", []protocol.Message{&protocol.GetReply{ID: 2, Value: big, Found: true}, &protocol.OK{ID: 3}, &protocol.GetReply{ID: 4, Value: big, Found: true}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &gatedWriter{gate: make(chan struct{})}
			var counts [protocol.NumTypes]atomic.Uint64
			var overflows atomic.Int32
			s := newSender(w, &counts, func() { overflows.Add(1) })
			defer func() { s.close(); s.wait() }()
			if !s.send(&protocol.OK{ID: 1}) {
				t.Fatal("first send refused")
			}
			// The goroutine takes the first frame and blocks writing it.
			wait.For(t, testTimeout, "the first frame to be taken", func() bool {
				return s.queuedBytes() == 0
			})
			refused := 0
			for _, m := range tc.msgs {
				if !s.send(m) {
					refused++
				}
				if queued := s.queuedBytes(); queued > maxQueuedBytes+len(big)+64 {
					t.Fatalf("%d bytes queued, cap %d and one frame", queued, maxQueuedBytes)
				}
			}
			close(w.gate)
			flushed := s.flush(testTimeout)
			if got := overflows.Load() > 0; got != tc.overflow {
				t.Fatalf("overflow %v (%d sends refused), want %v", got, refused, tc.overflow)
			}
			if !tc.overflow && (!flushed || refused > 0) {
				t.Fatalf("flushed %v, %d sends refused; want every reply written", flushed, refused)
			}
		})
	}
}

// TestSenderFlushBounded: flush gives up after its timeout when the peer
// does not read, and reports that it did.
func TestSenderFlushBounded(t *testing.T) {
	leaktest.Check(t)
	w := stalledWriter{make(chan struct{})}
	var counts [protocol.NumTypes]atomic.Uint64
	s := newSender(w, &counts, func() {})
	s.send(&protocol.OK{ID: 1})
	start := time.Now()
	if s.flush(50 * time.Millisecond) {
		t.Fatal("flush reported the frame written to a peer that does not read")
	}
	if d := time.Since(start); d < 50*time.Millisecond || d > prompt {
		t.Fatalf("flush returned after %v, want 50ms", d)
	}
	close(w.closed)
	s.wait() // the write fails, and the sender closes
	if s.flush(time.Hour) {
		t.Fatal("flush of a closed sender reported its frame written")
	}
}

// TestStaleWriteCopyRefused: a write that arrives after its client has
// acknowledged its outcome (a copy held up in the network past the
// client's retry on a new session) is refused, and undoes none of the
// client's later writes; a retry of a write whose outcome the client has
// not acknowledged gets that outcome back.
func TestStaleWriteCopyRefused(t *testing.T) {
	srv, fc := hostileServer(t, Config{})
	const clientID = 42
	a := dial(t, srv, protoclient.Options{ClientID: clientID})
	w := func(c *protoclient.Client, id, acked uint64, value string) protocol.Message {
		t.Helper()
		send(t, c, &protocol.Write{ID: id, Op: protocol.OpPut, Key: []byte("k"), Value: []byte(value), Acked: acked})
		return recv(t, c)
	}
	first, ok := w(a, 1, 1, "v1").(*protocol.WriteReply)
	if !ok || first.Duplicate {
		t.Fatalf("first write: %#v", first)
	}
	// The same request on a new session, as a retry after a lost reply:
	// the kept outcome. The new session of the same client takes the
	// first one's leases over, and the server closes the first
	// (core.Core.SetClient): no copy can arrive on it any more.
	b := dial(t, srv, protoclient.Options{ClientID: clientID})
	if r, ok := w(b, 1, 1, "v1").(*protocol.WriteReply); !ok || !r.Duplicate || r.Version != first.Version {
		t.Fatalf("retry of request 1: %#v; want the outcome at version %d again", r, first.Version)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := a.Recv(ctx); err == nil {
		t.Fatal("the first session still answers after the client came back on a second")
	}
	// The client moves on: it has the outcome of request 1. Another
	// client holds a lease on k, and does not answer the invalidation:
	// the write commits once that lease has run out.
	get(t, dial(t, srv, protoclient.Options{ClientID: clientID + 1}), "k")
	send(t, b, &protocol.Write{ID: 2, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v2"), Acked: 2})
	wait.For(t, testTimeout, "the second write to wait", func() bool { return srv.Stats().WritesWaiting == 1 })
	fc.Advance(hostileTerm + hostileEps)
	second, ok := recv(t, b).(*protocol.WriteReply)
	if !ok || second.Duplicate {
		t.Fatalf("second write: %#v", second)
	}
	// A copy of request 1 now must not put v1 back.
	for _, c := range []*protoclient.Client{b} {
		send(t, c, &protocol.Write{ID: 1, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v1"), Acked: 1})
		if e := expectError(t, c, 1, protocol.CodeInvalidArgument); !strings.Contains(e.Message, "answered already") {
			t.Errorf("stale copy of request 1: %q", e.Message)
		}
	}
	if r := get(t, b, "k"); string(r.Value) != "v2" || r.Version != second.Version {
		t.Fatalf("k after the stale copies: %q at version %d; want v2 at %d", r.Value, r.Version, second.Version)
	}
}

// closeRecorder is a stream that keeps what is written to it and whether
// it was closed.
type closeRecorder struct {
	mu     sync.Mutex
	b      bytes.Buffer
	closed bool
}

func (w *closeRecorder) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *closeRecorder) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	return nil
}

// TestSenderIdleHoldsNothing: once what it was sent is written, a sender
// has no goroutine left, and no buffer; the next send starts one again,
// and finish, on an idle sender, ends the stream after every frame.
func TestSenderIdleHoldsNothing(t *testing.T) {
	leaktest.Check(t)
	w := &closeRecorder{}
	var counts [protocol.NumTypes]atomic.Uint64
	s := newSender(w, &counts, func() { t.Error("overflow") })
	var want []byte
	for round := range 3 {
		for i := range 10 {
			m := &protocol.OK{ID: uint64(round*10 + i + 1)}
			want, _ = protocol.AppendFrame(want, m)
			if !s.send(m) {
				t.Fatalf("round %d: send %d refused", round, i)
			}
		}
		if !s.flush(testTimeout) {
			t.Fatalf("round %d: flush failed", round)
		}
		done := make(chan struct{})
		go func() { defer close(done); s.wait() }()
		wait.Chan(t, done, testTimeout, "the sender's goroutine to end once idle")
		s.mu.Lock()
		held, writing := cap(s.buf), s.writing
		s.mu.Unlock()
		if held != 0 || writing {
			t.Fatalf("round %d: idle sender holds a buffer of %d bytes, writing %v", round, held, writing)
		}
	}
	s.finish()
	done := make(chan struct{})
	go func() { defer close(done); s.wait() }()
	wait.Chan(t, done, testTimeout, "the sender to finish")
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed || !bytes.Equal(w.b.Bytes(), want) {
		t.Fatalf("stream closed %v, %d bytes written; want closed after %d bytes", w.closed, w.b.Len(), len(want))
	}
	if s.send(&protocol.OK{ID: 99}) {
		t.Fatal("a finished sender took a frame")
	}
}
