package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
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
	// OpenWatchStream opens the stream of a watch (watch.go).
	OpenWatchStream(ctx context.Context) (watchStream, error)
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

func (q quicConn) OpenWatchStream(ctx context.Context) (watchStream, error) {
	st, err := q.c.OpenUniStreamSync(ctx)
	if err != nil {
		return nil, err
	}
	return quicSendStream{st}, nil
}

// quicSendStream is a QUIC send stream as a watchStream.
type quicSendStream struct{ *quic.SendStream }

func (s quicSendStream) CancelWrite(code protocol.Code) {
	s.SendStream.CancelWrite(quic.StreamErrorCode(code))
}

func (q quicConn) CloseWithError(code protocol.Code, msg string) {
	q.c.CloseWithError(quic.ApplicationErrorCode(code), msg)
}

func (q quicConn) Context() context.Context { return q.c.Context() }
func (q quicConn) RemoteAddr() net.Addr     { return q.c.RemoteAddr() }
func (q quicConn) Identity() string         { return identityOf(q.c.ConnectionState().TLS) }

// frameBytes counts the memory that request frames hold while they arrive:
// the buffers of the sessions' frame readers for bodies over the few
// kilobytes a reader keeps (protocol.FrameBudget). Those bytes count
// against Config.MaxTotalInflightBytes, in Server.inflightBytes beside the
// keys and values of waiting writes, and against MaxFrameBytesPerAddr for
// the frames of each client address, so that clients that send most of
// large frames and stall hold at most that. Safe for concurrent use; the
// zero value counts nothing yet.
type frameBytes struct {
	total   atomic.Int64  // bytes held by all frames arriving (leased_frame_bytes)
	refused atomic.Uint64 // frames refused by either budget

	mu     sync.Mutex       // guards byAddr
	byAddr map[string]int64 // bytes held by address (addrKey); no entry for 0
}

// frameAccount is the protocol.FrameBudget of one session's frame reader:
// the server's frameBytes, for the session's client address.
type frameAccount struct {
	s    *Server
	addr string // addrKey of the session's client
}

// Take takes n bytes for a frame arriving from the budget of a.addr, and
// then from the server's; it refuses them, with a resource-exhausted error
// naming the budget, if either would go past its limit.
func (a frameAccount) Take(n int) error {
	s, fb := a.s, &a.s.frames
	fb.mu.Lock()
	defer fb.mu.Unlock()
	held := fb.byAddr[a.addr]
	if held+int64(n) > s.cfg.MaxFrameBytesPerAddr {
		fb.refused.Add(1)
		return fmt.Errorf("%w: the frames arriving from address %s hold %d bytes, and %d more would take them past their budget of %d bytes (MaxFrameBytesPerAddr)",
			errResourceExhausted, a.addr, held, n, s.cfg.MaxFrameBytesPerAddr)
	}
	if total := s.inflightBytes.Add(int64(n)); total > s.cfg.MaxTotalInflightBytes {
		s.inflightBytes.Add(-int64(n))
		fb.refused.Add(1)
		return fmt.Errorf("%w: %d more bytes for a frame arriving would take what waiting writes and arriving frames hold past the server's budget of %d bytes (MaxTotalInflightBytes)",
			errResourceExhausted, n, s.cfg.MaxTotalInflightBytes)
	}
	if fb.byAddr == nil {
		fb.byAddr = make(map[string]int64)
	}
	fb.byAddr[a.addr] = held + int64(n)
	fb.total.Add(int64(n))
	return nil
}

// Return gives back n bytes that Take took.
func (a frameAccount) Return(n int) {
	s, fb := a.s, &a.s.frames
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if left := fb.byAddr[a.addr] - int64(n); left > 0 {
		fb.byAddr[a.addr] = left
	} else {
		delete(fb.byAddr, a.addr)
	}
	s.inflightBytes.Add(-int64(n))
	fb.total.Add(-int64(n))
}
