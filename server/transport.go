package server

import (
	"context"
	"io"
	"net"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/protocol"
)

// conn is what a session needs of its connection: the request stream the
// client opens, the notice stream the server opens, and a way to close it
// all with an error code. quicConn is the one the server serves; the
// session's fuzz target runs sessions over an in-memory conn.
//
// Every method is safe for concurrent use.
type conn interface {
	// AcceptStream waits for the client's request stream.
	AcceptStream(ctx context.Context) (requestStream, error)
	// OpenUniStreamSync opens the stream of invalidations and recalls.
	OpenUniStreamSync(ctx context.Context) (io.WriteCloser, error)
	// CloseWithError closes the connection with an application error code
	// (a protocol.Code) and a message for the peer.
	CloseWithError(code protocol.Code, msg string)
	// Context ends when the connection is closed.
	Context() context.Context
	RemoteAddr() net.Addr
	// Identity is the client's identity: the CommonName of the
	// certificate it presented, once the server verified it; "" if it
	// presented none.
	Identity() string
}

// requestStream is a bidirectional stream of requests and replies. Close
// ends the server's side of it: the client reads every reply sent before.
type requestStream interface {
	io.ReadWriteCloser
	SetReadDeadline(t time.Time) error
}

// quicConn is a QUIC connection as a session's conn.
type quicConn struct{ c *quic.Conn }

func (q quicConn) AcceptStream(ctx context.Context) (requestStream, error) {
	st, err := q.c.AcceptStream(ctx)
	if err != nil {
		return nil, err
	}
	return st, nil
}

func (q quicConn) OpenUniStreamSync(ctx context.Context) (io.WriteCloser, error) {
	st, err := q.c.OpenUniStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	return st, nil
}

func (q quicConn) CloseWithError(code protocol.Code, msg string) {
	q.c.CloseWithError(quic.ApplicationErrorCode(code), msg)
}

func (q quicConn) Context() context.Context { return q.c.Context() }
func (q quicConn) RemoteAddr() net.Addr     { return q.c.RemoteAddr() }
func (q quicConn) Identity() string         { return identityOf(q.c.ConnectionState().TLS) }
