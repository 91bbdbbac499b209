package protoclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// testTimeout bounds each step that talks to the server over a real
// socket; a healthy step takes milliseconds.
const testTimeout = 10 * time.Second

// startServer serves a real server on 127.0.0.1 with its self-signed CA
// under a temporary folder, and closes it in t.Cleanup. It returns the
// server and the client options that trust it.
func startServer(t *testing.T, cfg server.Config) (*server.Server, protoclient.Options) {
	t.Helper()
	cfg.Dir, cfg.Addr, cfg.Logger = t.TempDir(), "127.0.0.1:0", slog.New(slog.DiscardHandler)
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-served; !errors.Is(err, server.ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	return srv, protoclient.Options{CAFile: server.CAPath(cfg.Dir)}
}

func stepCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, srv *server.Server, opts protoclient.Options) *protoclient.Client {
	t.Helper()
	c, err := protoclient.Dial(stepCtx(t), srv.Addr().String(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// call is Call that fails the test on an error or on a reply of another
// type than T.
func call[T protocol.Message](t *testing.T, c *protoclient.Client, req protocol.Message) T {
	t.Helper()
	m, err := c.Call(stepCtx(t), req)
	if err != nil {
		t.Fatalf("%s: %v", req.Type(), err)
	}
	r, ok := m.(T)
	if !ok {
		t.Fatalf("%s answered with %s %+v", req.Type(), m.Type(), m)
	}
	return r
}

// TestInvalidationAcknowledged: a holder sees the invalidation of its
// lease on its notice stream, and its acknowledgement lets the write
// commit long before the lease would have run out.
func TestInvalidationAcknowledged(t *testing.T) {
	leaktest.Check(t)
	const term = time.Minute // a write that waits the lease out fails the test
	srv, opts := startServer(t, server.Config{LeaseTerm: term})
	holderOpts := opts
	holderOpts.Name = "holder"
	holder := dial(t, srv, holderOpts)
	writer := dial(t, srv, opts)
	if h := holder.Hello(); h == nil || h.SessionID == 0 || h.DefaultTerm != term || h.Version != protocol.Version {
		t.Fatalf("hello reply %+v", h)
	}
	if g := call[*protocol.GetReply](t, holder, &protocol.Get{Key: []byte("k")}); g.Found || g.Term != term {
		t.Fatalf("holder's read: %+v", g)
	}
	written := make(chan protocol.Message, 1)
	go func() {
		m, err := writer.Call(context.Background(), &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v")})
		if err != nil {
			m = &protocol.Error{Message: err.Error()}
		}
		written <- m
	}()
	n, err := holder.RecvNotice(stepCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	inv, ok := n.(*protocol.Invalidate)
	if !ok || len(inv.Keys) != 1 || string(inv.Keys[0]) != "k" {
		t.Fatalf("notice %s %+v, want the invalidation of k", n.Type(), n)
	}
	if err := holder.Send(&protocol.Ack{Keys: inv.Keys}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-written:
		if w, ok := m.(*protocol.WriteReply); !ok || w.Holders != 1 || w.Version == 0 {
			t.Fatalf("write: %s %+v", m.Type(), m)
		}
	case <-time.After(testTimeout):
		t.Fatal("the write did not commit after the acknowledgement")
	}
	if st := call[*protocol.StatsReply](t, writer, &protocol.Stats{}); st.InvalidationsAcked != 1 || st.Sessions != 2 {
		t.Errorf("stats: %d invalidations acknowledged, %d sessions; want 1 and 2", st.InvalidationsAcked, st.Sessions)
	}
}

// TestSilentHolder: with NoNotices the holder never reads its notices, so
// a write waits out its lease.
func TestSilentHolder(t *testing.T) {
	leaktest.Check(t)
	const term, eps = 200 * time.Millisecond, 50 * time.Millisecond
	srv, opts := startServer(t, server.Config{LeaseTerm: term, Epsilon: eps})
	silent := opts
	silent.NoNotices = true
	holder := dial(t, srv, silent)
	writer := dial(t, srv, opts)
	call[*protocol.GetReply](t, holder, &protocol.Get{Key: []byte("k")})
	granted := time.Now()
	w := call[*protocol.WriteReply](t, writer, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v")})
	if time.Since(granted) < term || w.Holders != 1 {
		t.Errorf("the write committed after %v for %d holders; want the lease of %v waited out for 1", time.Since(granted), w.Holders, term)
	}
	if _, err := holder.RecvNotice(stepCtx(t)); err == nil {
		t.Error("RecvNotice returned a notice of a stream that is not read")
	}
}

// TestPipelined: requests sent with Send are answered in order through
// Recv, and concurrent Calls each get their own reply.
func TestPipelined(t *testing.T) {
	leaktest.Check(t)
	srv, opts := startServer(t, server.Config{})
	c := dial(t, srv, opts)
	ids := []uint64{c.NextID(), c.NextID(), c.NextID()}
	for i, id := range ids {
		if err := c.Send(&protocol.Get{ID: id, Key: []byte(fmt.Sprintf("k%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			key := fmt.Sprintf("c%d", i)
			m, err := c.Call(context.Background(), &protocol.Write{Op: protocol.OpPut, Key: []byte(key), Value: []byte(key)})
			if w, ok := m.(*protocol.WriteReply); err != nil || !ok || w.Version == 0 {
				t.Errorf("concurrent write %s: %v %+v", key, err, m)
			}
		})
	}
	wg.Wait()
	for _, id := range ids {
		m, err := c.Recv(stepCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		if g, ok := m.(*protocol.GetReply); !ok || g.ID != id {
			t.Fatalf("Recv: %s %+v, want the reply to %d", m.Type(), m, id)
		}
	}
	if _, err := c.Call(stepCtx(t), &protocol.Ack{}); err == nil {
		t.Error("Call accepted an Ack, which has no reply")
	}
}

// TestNewGoodbye: a session on a QUIC connection the test opened itself;
// after goodbye the server ends the reply stream.
func TestNewGoodbye(t *testing.T) {
	leaktest.Check(t)
	srv, opts := startServer(t, server.Config{})
	tlsConf, err := protoclient.TLSConfig(opts, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	qc, err := quic.DialAddr(stepCtx(t), srv.Addr().String(), tlsConf, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := protoclient.New(stepCtx(t), qc, protoclient.Options{Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.Conn() != qc {
		t.Error("Conn is not the connection given to New")
	}
	call[*protocol.OK](t, c, &protocol.Goodbye{})
	if m, err := c.Recv(stepCtx(t)); !errors.Is(err, io.EOF) {
		t.Fatalf("after goodbye: %v %+v, want the end of the reply stream", err, m)
	}
	if _, err := c.Call(stepCtx(t), &protocol.Stats{}); err == nil {
		t.Error("a Call after the end of the reply stream succeeded")
	}
}

// TestNoHello: a client that speaks first with something else than a hello
// gets an error and is closed with the protocol code.
func TestNoHello(t *testing.T) {
	leaktest.Check(t)
	srv, opts := startServer(t, server.Config{})
	opts.NoHello = true
	c := dial(t, srv, opts)
	if c.Hello() != nil {
		t.Fatal("a hello reply without a hello")
	}
	if err := c.Send(&protocol.Get{ID: 7, Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	// The error reply may be lost with the close that follows it.
	if m, err := c.Recv(stepCtx(t)); err == nil {
		if e, ok := m.(*protocol.Error); !ok || e.ID != 7 || e.Code != protocol.CodeProtocol {
			t.Fatalf("a request before hello answered with %+v, want a protocol error for request 7", m)
		}
	}
	select {
	case <-c.Conn().Context().Done():
	case <-time.After(testTimeout):
		t.Fatal("the server did not close the connection")
	}
	var ae *quic.ApplicationError
	if err := context.Cause(c.Conn().Context()); !errors.As(err, &ae) || !ae.Remote || protocol.Code(ae.ErrorCode) != protocol.CodeProtocol {
		t.Fatalf("closed with %v, want the server's protocol code", err)
	}
	if _, err := c.Recv(stepCtx(t)); err == nil {
		t.Error("Recv after the close returned no error")
	}
}

// TestWrongVersion: Options.Version names another protocol version, and
// Dial reports the server's refusal.
func TestWrongVersion(t *testing.T) {
	leaktest.Check(t)
	srv, opts := startServer(t, server.Config{})
	opts.Version = protocol.Version + 1
	if c, err := protoclient.Dial(stepCtx(t), srv.Addr().String(), opts); err == nil {
		c.Close()
		t.Fatal("Dial with a wrong protocol version succeeded")
	}
}

// TestStreams: a session over in-memory streams, against a fake server
// that answers the hello and sends one recall.
func TestStreams(t *testing.T) {
	leaktest.Check(t)
	reqCli, reqSrv := net.Pipe()
	noteCli, noteSrv := net.Pipe()
	var closed []string
	fake := make(chan error, 1)
	go func() {
		fake <- func() error {
			fr := protocol.NewFrameReader(reqSrv, 0)
			m, err := fr.ReadMessage()
			if err != nil {
				return err
			}
			if h, ok := m.(*protocol.Hello); !ok || h.Client != "mem" {
				return fmt.Errorf("first message %+v", m)
			}
			b, _ := protocol.AppendFrame(nil, &protocol.HelloReply{Version: protocol.Version, SessionID: 42})
			if _, err := reqSrv.Write(b); err != nil {
				return err
			}
			b, _ = protocol.AppendFrame(nil, &protocol.Recall{Key: []byte("k"), Token: 3})
			_, err = noteSrv.Write(b)
			return err
		}()
	}()
	c, err := protoclient.NewStreams(stepCtx(t), protoclient.Streams{
		Requests: reqCli,
		Replies:  reqCli,
		Notices:  func(context.Context) (io.Reader, error) { return noteCli, nil },
		Close: func(code protocol.Code, msg string) error {
			closed = append(closed, fmt.Sprintf("%d %s", code, msg))
			reqCli.Close()
			return noteCli.Close()
		},
	}, protoclient.Options{Name: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	if h := c.Hello(); h.SessionID != 42 {
		t.Fatalf("hello reply %+v", h)
	}
	n, err := c.RecvNotice(stepCtx(t))
	if r, ok := n.(*protocol.Recall); err != nil || !ok || string(r.Key) != "k" || r.Token != 3 {
		t.Fatalf("notice %v %+v, want the recall", err, n)
	}
	if err := <-fake; err != nil {
		t.Fatal(err)
	}
	c.CloseWithError(protocol.CodeInternal, "bye")
	c.Close()
	if len(closed) != 1 || closed[0] != fmt.Sprintf("%d bye", protocol.CodeInternal) {
		t.Errorf("Close ran %q, want one close with the code and message", closed)
	}
	reqSrv.Close()
	noteSrv.Close()
}
