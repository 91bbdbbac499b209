package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// These tests drive the server's lease timer with a fake clock: lease time
// passes only when the test advances it. QUIC itself runs on real time, so
// every wait on the network is bounded by testTimeout.
const testTimeout = 10 * time.Second

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newServer makes a server on 127.0.0.1 with a fake clock, not yet serving.
func newServer(t *testing.T, dir string, fc *clock.Fake, term time.Duration) *Server {
	t.Helper()
	return newServerWith(t, Config{Dir: dir, Addr: "127.0.0.1:0", LeaseTerm: term, Epsilon: eps, Clock: fc, Logger: quietLogger()})
}

// newServerWith makes a server of cfg whose badger store, under cfg.Dir,
// the test can read (storedState). Unless cfg says otherwise, its boot
// clock follows its clock: advancing a fake clock is time passing.
func newServerWith(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.BootClock == nil {
		cfg.BootClock = clock.NewFakeBoot(cfg.Clock)
	}
	st, err := store.Open(filepath.Join(cfg.Dir, "db"), quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Store = st
	srv, err := New(cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	return srv
}

// settle waits until srv's core has done what is due at fc's time: its
// lease timer has ticked (its next deadline is later), and no write is
// queued or committing. A write that became ready too early has then
// committed, and shows in the server's counters; no sleep is needed.
func settle(t *testing.T, srv *Server, fc *clock.Fake) {
	t.Helper()
	now := fc.Now()
	wait.For(t, testTimeout, "the lease timer to tick", func() bool {
		next, ok := srv.node.Core().NextDeadline()
		return !ok || next.After(now)
	})
	srv.node.Core().Drain()
}

// storedState returns what srv's store holds.
func storedState(t *testing.T, srv *Server) store.State {
	t.Helper()
	st, err := srv.cfg.Store.State()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// serve runs srv.Serve until the test ends, then closes srv (a test may
// close it earlier) and checks that Serve returned ErrServerClosed.
func serve(t *testing.T, srv *Server) *Server {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background()) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return srv
}

// startServer starts a server on 127.0.0.1 with a fake clock.
func startServer(t *testing.T, dir string, fc *clock.Fake, term time.Duration) *Server {
	t.Helper()
	return serve(t, newServer(t, dir, fc, term))
}

// dialQUIC opens a QUIC connection to srv and nothing more.
func dialQUIC(t *testing.T, srv *Server, qconf *quic.Config) *quic.Conn {
	t.Helper()
	tlsConf, err := protoclient.TLSConfig(protoclient.Options{CAFile: CAPath(srv.cfg.Dir)}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	qc, err := quic.DialAddr(ctx, srv.Addr().String(), tlsConf, qconf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	return qc
}

// dial opens a raw protocol session to srv with opts, trusting srv's CA,
// and closes it when the test ends. The client answers nothing by itself:
// it never acknowledges an invalidation.
func dial(t *testing.T, srv *Server, opts protoclient.Options) *protoclient.Client {
	t.Helper()
	opts.CAFile = CAPath(srv.cfg.Dir)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := protoclient.Dial(ctx, srv.Addr().String(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialRaw opens a session: a connection, its request stream and a hello.
func dialRaw(t *testing.T, srv *Server) *protoclient.Client {
	t.Helper()
	return dial(t, srv, protoclient.Options{})
}

// send sends m as it is, its ID included.
func send(t *testing.T, c *protoclient.Client, m protocol.Message) {
	t.Helper()
	if err := c.Send(m); err != nil {
		t.Fatal(err)
	}
}

// recv returns the next reply that no call waits for, within testTimeout.
func recv(t *testing.T, c *protoclient.Client) protocol.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	m, err := c.Recv(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// call sends req with a fresh ID and returns its reply, within
// testTimeout.
func call(t *testing.T, c *protoclient.Client, req protocol.Message) protocol.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	m, err := c.Call(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// get reads key.
func get(t *testing.T, c *protoclient.Client, key string) *protocol.GetReply {
	t.Helper()
	m := call(t, c, &protocol.Get{Key: []byte(key)})
	r, ok := m.(*protocol.GetReply)
	if !ok {
		t.Fatalf("get %q: got %#v, want a get reply", key, m)
	}
	return r
}

// TestWriteWaitsOutSilentHolder: a holder that never acknowledges holds a
// write back until its lease has expired on the server's clock, and not a
// moment less; writes to other keys go through meanwhile.
func TestWriteWaitsOutSilentHolder(t *testing.T) {
	fc := clock.NewFake()
	term := 10 * time.Second
	srv := startServer(t, t.TempDir(), fc, term)
	holder := dialRaw(t, srv)
	if r := get(t, holder, "k"); r.Term != term {
		t.Fatalf("holder got term %v, want %v", r.Term, term)
	}
	writer := dialRaw(t, srv)
	fc.Advance(3 * time.Second)
	send(t, writer, &protocol.Write{ID: 100, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v1")})
	wait.For(t, testTimeout, "the write to wait", func() bool { return srv.Stats().WritesWaiting == 1 })

	// Another key is not held up.
	send(t, writer, &protocol.Write{ID: 101, Op: protocol.OpPut, Key: []byte("other"), Value: []byte("x")})
	if r, ok := recv(t, writer).(*protocol.WriteReply); !ok || r.ID != 101 {
		t.Fatalf("write to another key: got %#v", r)
	}
	// A reader during the wait gets the committed value, uncached.
	if r := get(t, writer, "k"); r.Term != 0 || r.Found {
		t.Fatalf("read during the pending write: %+v, want not found with term 0", r)
	}

	// The lease lives term+ε from its grant: 7.1 s more. Just short of it,
	// the write still waits.
	fc.Advance(7*time.Second + 100*time.Millisecond - time.Millisecond)
	settle(t, srv, fc)
	if n := srv.Stats().WritesWaiting; n != 1 {
		t.Fatalf("write committed before the holder's lease expired (waiting=%d)", n)
	}
	fc.Advance(time.Millisecond)
	r, ok := recv(t, writer).(*protocol.WriteReply)
	if !ok || r.ID != 100 {
		t.Fatalf("want the write's reply, got %#v", r)
	}
	if r.Holders != 1 || r.Waited != 7*time.Second+100*time.Millisecond {
		t.Fatalf("reply says waited %v for %d holders, want 7.1s for 1", r.Waited, r.Holders)
	}
	st := srv.Stats()
	if st.InvalidationsSent != 1 || st.InvalidationsExpired != 1 || st.InvalidationsAcked != 0 {
		t.Fatalf("invalidation counters: %+v", st)
	}
}

// TestAbandonedAtDeadline: a write with a timeout that cannot commit in time
// is abandoned at its deadline and changes nothing.
func TestAbandonedAtDeadline(t *testing.T) {
	fc := clock.NewFake()
	srv := startServer(t, t.TempDir(), fc, 10*time.Second)
	holder := dialRaw(t, srv)
	get(t, holder, "k")
	writer := dialRaw(t, srv)
	send(t, writer, &protocol.Write{ID: 7, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v"), Timeout: time.Second})
	wait.For(t, testTimeout, "the write to wait", func() bool { return srv.Stats().WritesWaiting == 1 })
	fc.Advance(time.Second)
	e, ok := recv(t, writer).(*protocol.Error)
	if !ok || e.ID != 7 || e.Code != protocol.CodeCanceled {
		t.Fatalf("want a canceled error for request 7, got %#v", e)
	}
	if r := get(t, writer, "k"); r.Found || r.Version != 0 {
		t.Fatalf("abandoned write changed the key: %+v", r)
	}
	if rev := srv.Stats().Revision; rev != 0 {
		t.Fatalf("revision %d after an abandoned write, want 0", rev)
	}
}

// TestPrefixTerms: the longest matching prefix sets a key's term, a term of
// 0 means never cached, renewals use each key's own term, and a write waits
// out the lease of its key's term.
func TestPrefixTerms(t *testing.T) {
	fc := clock.NewFake()
	srv, err := New(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", LeaseTerm: 10 * time.Second, Clock: fc, Logger: quietLogger(),
		PrefixTerms: []PrefixTerm{{Prefix: "/nocache/", Term: 0}, {Prefix: "/a/", Term: 5 * time.Second}, {Prefix: "/a/b/", Term: 30 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv)
	c := dialRaw(t, srv)
	for _, tc := range []struct {
		key  string
		term time.Duration
	}{
		{"/nocache/x", 0},
		{"/a/x", 5 * time.Second},
		{"/a/b/x", 30 * time.Second},
		{"/a", 10 * time.Second},
		{"other", 10 * time.Second},
	} {
		if r := get(t, c, tc.key); r.Term != tc.term {
			t.Errorf("Get(%q) term %v, want %v", tc.key, r.Term, tc.term)
		}
	}
	send(t, c, &protocol.Renew{ID: 99, Keys: [][]byte{[]byte("/a/x"), []byte("/a/b/x"), []byte("/nocache/x"), []byte("other")}})
	r, ok := recv(t, c).(*protocol.RenewReply)
	if !ok {
		t.Fatal("want a renew reply")
	}
	want := []time.Duration{5 * time.Second, 30 * time.Second, 0, 10 * time.Second}
	for i := range want {
		if r.Terms[i] != want[i] {
			t.Errorf("renewed terms %v, want %v", r.Terms, want)
			break
		}
	}

	// A silent holder of /a/b/x holds a write back for 30 s + ε.
	w := dialRaw(t, srv)
	send(t, w, &protocol.Write{ID: 1, Op: protocol.OpPut, Key: []byte("/a/b/x"), Value: []byte("v")})
	wait.For(t, testTimeout, "the write to wait", func() bool { return srv.Stats().WritesWaiting == 1 })
	fc.Advance(30*time.Second + 100*time.Millisecond - time.Millisecond)
	settle(t, srv, fc)
	if n := srv.Stats().WritesWaiting; n != 1 {
		t.Fatal("write committed before the 30 s lease expired")
	}
	fc.Advance(time.Millisecond)
	if wr, ok := recv(t, w).(*protocol.WriteReply); !ok || wr.ID != 1 {
		t.Fatalf("want the write reply, got %#v", wr)
	}
}
