package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/protocol"
)

// cancelWait bounds how long a write whose context ended waits for the
// server to say whether it abandoned the write or had already committed it.
const cancelWait = 2 * time.Second

// conn is one QUIC connection to the server: one session. Requests go out
// on one stream, pipelined; replies come back on it out of order, matched by
// ID. Invalidations and recalls arrive on a stream of their own.
type conn struct {
	c      *Client
	qc     *quic.Conn
	stream *quic.Stream
	hello  *protocol.HelloReply

	wmu  sync.Mutex // guards wbuf and writes to stream; a leaf (see Client's lock order)
	wbuf []byte

	nextID  atomic.Uint64
	pmu     sync.Mutex // guards pending; a leaf
	pending map[uint64]chan protocol.Message

	done    chan struct{} // closed when the connection is gone
	errOnce sync.Once
	err     error // why; set before done is closed
	wg      sync.WaitGroup
}

// dial connects and says hello.
func dial(ctx context.Context, c *Client) (*conn, error) {
	qconf := &quic.Config{
		MaxIdleTimeout:  c.cfg.IdleTimeout,
		KeepAlivePeriod: c.cfg.IdleTimeout / 3,
	}
	var qc *quic.Conn
	var err error
	if c.tr != nil {
		var ua *net.UDPAddr
		if ua, err = net.ResolveUDPAddr("udp", c.addr); err == nil {
			qc, err = c.tr.Dial(ctx, ua, c.tlsConf, qconf)
		}
	} else {
		qc, err = quic.DialAddr(ctx, c.addr, c.tlsConf, qconf)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: connect to %s: %w", ErrUnavailable, c.addr, transportError(err))
	}
	stream, err := qc.OpenStreamSync(ctx)
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, fmt.Errorf("%w: open stream to %s: %w", ErrUnavailable, c.addr, transportError(err))
	}
	cn := &conn{
		c:       c,
		qc:      qc,
		stream:  stream,
		pending: make(map[uint64]chan protocol.Message),
		done:    make(chan struct{}),
	}
	if err := cn.write(&protocol.Hello{Version: protocol.Version, Client: c.cfg.Name}); err != nil {
		qc.CloseWithError(0, "")
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		stream.SetReadDeadline(dl)
	}
	fr := protocol.NewFrameReader(stream, 0)
	m, err := fr.ReadMessage()
	stream.SetReadDeadline(time.Time{})
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, fmt.Errorf("%w: hello from %s: %w", ErrUnavailable, c.addr, transportError(err))
	}
	hello, ok := m.(*protocol.HelloReply)
	if !ok {
		qc.CloseWithError(0, "")
		return nil, fmt.Errorf("hello from %s: %w", c.addr, unexpected(m))
	}
	if hello.MaxFrameSize > 0 {
		fr = protocol.NewFrameReader(stream, hello.MaxFrameSize+1024)
		// Anything already buffered after the hello reply is lost with the
		// old reader; the server sends nothing before the client's next
		// request, so there is nothing buffered.
	}
	cn.hello = hello
	cn.wg.Add(2)
	go cn.readReplies(fr)
	go cn.readNotices()
	return cn, nil
}

// transportError turns a connection closed by the server with an
// application code into that code's sentinel.
func transportError(err error) error {
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote {
		return &ServerError{Code: protocol.Code(ae.ErrorCode), Message: ae.ErrorMessage}
	}
	return err
}

// fail records why the connection is gone and wakes its waiters.
func (cn *conn) fail(err error) {
	cn.errOnce.Do(func() {
		cn.err = fmt.Errorf("%w: connection lost: %w", ErrUnavailable, transportError(err))
		close(cn.done)
		cn.qc.CloseWithError(0, "")
	})
}

// close closes the connection and waits for its goroutines.
func (cn *conn) close() {
	cn.fail(ErrClosed)
	cn.wg.Wait()
}

// write sends one message on the request stream.
func (cn *conn) write(m protocol.Message) error {
	cn.wmu.Lock()
	defer cn.wmu.Unlock()
	var err error
	cn.wbuf, err = protocol.AppendFrame(cn.wbuf[:0], m)
	if err != nil {
		return err
	}
	if _, err := cn.stream.Write(cn.wbuf); err != nil {
		cn.fail(err)
		return fmt.Errorf("%w: send: %w", ErrUnavailable, transportError(err))
	}
	if cap(cn.wbuf) > 64<<10 {
		cn.wbuf = nil
	}
	return nil
}

// setID stamps a request with its ID.
func setID(m protocol.Message, id uint64) {
	switch m := m.(type) {
	case *protocol.Get:
		m.ID = id
	case *protocol.Write:
		m.ID = id
	case *protocol.Renew:
		m.ID = id
	case *protocol.Release:
		m.ID = id
	case *protocol.Acquire:
		m.ID = id
	case *protocol.ReleaseWrite:
		m.ID = id
	case *protocol.Stats:
		m.ID = id
	case *protocol.Goodbye:
		m.ID = id
	}
}

// call sends a request and waits for its reply. If ctx ends first, the
// request is forgotten: use start and awaitWrite for requests that change
// state.
func (cn *conn) call(ctx context.Context, req protocol.Message) (protocol.Message, error) {
	id, ch, err := cn.start(req)
	if err != nil {
		return nil, err
	}
	return cn.await(ctx, id, ch)
}

// await waits for the reply to a request sent by start. If ctx ends first,
// the request is forgotten.
func (cn *conn) await(ctx context.Context, id uint64, ch chan protocol.Message) (protocol.Message, error) {
	select {
	case m := <-ch:
		return m, nil
	case <-ctx.Done():
		cn.forget(id)
		return nil, ctx.Err()
	case <-cn.done:
		cn.forget(id)
		return nil, cn.err
	}
}

// awaitWrite waits for the reply to a write or acquisition sent by start.
// If ctx ends first, it asks the server to abandon the request and waits a
// little for the verdict, so that the caller learns whether it committed.
func (cn *conn) awaitWrite(ctx context.Context, id uint64, ch chan protocol.Message) (protocol.Message, error) {
	select {
	case m := <-ch:
		return m, nil
	case <-cn.done:
		cn.forget(id)
		return nil, fmt.Errorf("%w; the write may or may not have committed", cn.err)
	case <-ctx.Done():
	}
	if err := cn.write(&protocol.Cancel{ID: id}); err != nil {
		cn.forget(id)
		return nil, fmt.Errorf("%w; the write may or may not have committed", err)
	}
	t := time.NewTimer(cancelWait)
	defer t.Stop()
	select {
	case m := <-ch:
		if e, ok := m.(*protocol.Error); ok && e.Code == protocol.CodeCanceled {
			return nil, fmt.Errorf("%w: %w", ErrCanceled, ctx.Err())
		}
		return m, nil
	case <-cn.done:
		cn.forget(id)
		return nil, fmt.Errorf("%w; the write may or may not have committed", cn.err)
	case <-t.C:
		cn.forget(id)
		return nil, fmt.Errorf("%w: no answer to the cancellation; the write may or may not have committed: %w", ErrUnavailable, ctx.Err())
	}
}

func (cn *conn) start(req protocol.Message) (uint64, chan protocol.Message, error) {
	select {
	case <-cn.done:
		return 0, nil, cn.err
	default:
	}
	id := cn.nextID.Add(1)
	setID(req, id)
	ch := make(chan protocol.Message, 1)
	cn.pmu.Lock()
	cn.pending[id] = ch
	cn.pmu.Unlock()
	if err := cn.write(req); err != nil {
		cn.forget(id)
		return 0, nil, err
	}
	return id, ch, nil
}

func (cn *conn) forget(id uint64) {
	cn.pmu.Lock()
	delete(cn.pending, id)
	cn.pmu.Unlock()
}

// readReplies delivers replies to their callers until the stream ends.
func (cn *conn) readReplies(fr *protocol.FrameReader) {
	defer cn.wg.Done()
	for {
		m, err := fr.ReadMessage()
		if err != nil {
			cn.fail(err)
			return
		}
		id, ok := protocol.RequestID(m)
		if !ok {
			cn.fail(fmt.Errorf("%w: %s on the request stream", ErrProtocol, m.Type()))
			return
		}
		if id == 0 {
			if e, ok := m.(*protocol.Error); ok {
				cn.c.log.Warn("server reported a session error", "code", e.Code.String(), "message", e.Message)
			}
			continue
		}
		cn.pmu.Lock()
		ch := cn.pending[id]
		delete(cn.pending, id)
		cn.pmu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// readNotices handles invalidations and recalls until the connection ends.
func (cn *conn) readNotices() {
	defer cn.wg.Done()
	us, err := cn.qc.AcceptUniStream(cn.qc.Context())
	if err != nil {
		cn.fail(err)
		return
	}
	fr := protocol.NewFrameReader(us, cn.hello.MaxFrameSize+1024)
	for {
		m, err := fr.ReadMessage()
		if err != nil {
			cn.fail(err)
			return
		}
		switch m := m.(type) {
		case *protocol.Invalidate:
			if err := cn.c.invalidate(cn, m.Keys, cn.c.clock.Now()); err != nil {
				return
			}
		case *protocol.Recall:
			cn.c.recall(string(m.Key), m.Token)
		default:
			cn.fail(fmt.Errorf("%w: %s on the notice stream", ErrProtocol, m.Type()))
			return
		}
	}
}

// batchLimit is the most key bytes the client puts in one Renew or
// Release, well under the server's frame limit.
func (cn *conn) batchLimit() int {
	return max(cn.hello.MaxFrameSize/2, 4<<10)
}

// defaultTLS builds the client's TLS config from Config.
func defaultTLS(cfg Config, serverName string) (*tls.Config, error) {
	t := &tls.Config{ServerName: serverName}
	if cfg.TLSConfig != nil {
		t = cfg.TLSConfig.Clone()
		if t.ServerName == "" {
			t.ServerName = serverName
		}
	} else if cfg.CAFile != "" {
		pool, err := loadCAFile(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		t.RootCAs = pool
	}
	t.MinVersion = tls.VersionTLS13
	t.NextProtos = []string{protocol.ALPN}
	return t, nil
}
