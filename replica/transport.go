// This file is the peer transport: raft's messages between the nodes of a
// cluster travel over TCP with mutual TLS 1.3 (DESIGN.md §13), in the
// configs that tlsfiles.PeerTLS makes.

package replica

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// handshakeTimeout bounds the TLS handshake of an accepted peer connection,
// and of a dialled one when Dial is given no timeout.
const handshakeTimeout = 10 * time.Second

// StreamLayer is a raft.StreamLayer over TCP with mutual TLS 1.3. The node
// wires it into raft.NewNetworkTransport, which accepts its peers'
// connections through Accept, one at a time in one goroutine, and dials its
// peers with Dial from several goroutines. All methods are safe for
// concurrent use.
//
// Accept does not wait for the TLS handshake: it returns the connection at
// once, and the handshake runs on the connection's first Read or Write, in
// the goroutine that raft gives each connection, bounded by 10 seconds. So a
// slow or silent peer cannot hold up the other peers' connections, a peer
// that never completes its handshake costs a goroutine for at most 10
// seconds, and a failed handshake ends that one connection (raft logs it)
// instead of failing Accept, which would make raft back off for up to a
// second before it accepts anyone else. A handshake in Accept would have
// neither property, and a plain tls.Server connection, which shakes hands
// on its first Read too, would wait for a silent peer forever, because raft
// sets no deadline on the connections it accepts.
type StreamLayer struct {
	ln        net.Listener
	advertise net.Addr
	serverTLS *tls.Config
	clientTLS *tls.Config

	mu       sync.Mutex // guards accepted and closed
	accepted map[*serverConn]struct{}
	closed   bool
}

var _ raft.StreamLayer = (*StreamLayer)(nil)

// NewStreamLayer returns a StreamLayer that accepts peers on ln with
// serverTLS and dials them with clientTLS; both normally come from
// tlsfiles.PeerTLS. advertise is the address that other nodes dial to reach
// this one, which raft records in the cluster's configuration; if it is
// nil, Addr reports ln's address, which suits a listener on a specific
// address but not one on a wildcard address such as 0.0.0.0. The
// StreamLayer owns ln: Close closes it.
//
// It panics if either config is nil or if serverTLS does not require and
// verify a client certificate, since a peer port that lets anyone in is a
// programming error, not a configuration to run with.
func NewStreamLayer(ln net.Listener, advertise net.Addr, serverTLS, clientTLS *tls.Config) *StreamLayer {
	if serverTLS == nil || clientTLS == nil {
		panic("replica: NewStreamLayer needs a server and a client TLS config")
	}
	if serverTLS.ClientAuth != tls.RequireAndVerifyClientCert {
		panic("replica: NewStreamLayer's server TLS config must require and verify client certificates")
	}
	return &StreamLayer{ln: ln, advertise: advertise, serverTLS: serverTLS, clientTLS: clientTLS,
		accepted: make(map[*serverConn]struct{})}
}

// Accept waits for the next peer connection and returns it, before its TLS
// handshake (see StreamLayer). raft's NetworkTransport calls it in its
// accept loop. It returns the listener's error, such as net.ErrClosed after
// Close.
func (s *StreamLayer) Accept() (net.Conn, error) {
	c, err := s.ln.Accept()
	if err != nil {
		return nil, err
	}
	sc := &serverConn{Conn: tls.Server(c, s.serverTLS), layer: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	s.accepted[sc] = struct{}{}
	return sc, nil
}

// Dial connects to the peer at address (host:port) and completes the TLS
// handshake, both within timeout (10 seconds if timeout is not positive).
// raft's NetworkTransport calls it to open connections to its peers.
//
// Dial verifies the peer's certificate against the CA and against the host
// of address, as tlsfiles.PeerTLS describes, unless the client config names
// a ServerName of its own. In TLS 1.3 the dialler finishes its handshake
// before the peer has checked the dialler's certificate, so a peer that
// refuses it makes the first read of the connection fail, not Dial: raft
// sees the failed request.
func (s *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	if timeout <= 0 {
		timeout = handshakeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()

	cfg := s.clientTLS
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(string(address))
		if err != nil {
			return nil, fmt.Errorf("replica: dial peer %q: %w", address, err)
		}
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, fmt.Errorf("replica: dial peer %s: %w", address, err)
	}
	c := tls.Client(raw, cfg)
	if err := c.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, fmt.Errorf("replica: TLS handshake with peer %s: %w", address, err)
	}
	return c, nil
}

// Addr returns the address other nodes dial to reach this one: the
// advertised address given to NewStreamLayer, or the listener's.
// raft's NetworkTransport reports it as its LocalAddr.
func (s *StreamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.ln.Addr()
}

// Close closes the listener, so that Accept returns net.ErrClosed. raft's
// NetworkTransport calls it when it is closed. Connections already accepted
// or dialled belong to raft, which closes them.
func (s *StreamLayer) Close() error {
	err := s.ln.Close()
	s.mu.Lock()
	s.closed = true
	conns := make([]*serverConn, 0, len(s.accepted))
	for c := range s.accepted {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	// raft's goroutine for each accepted connection reads until the peer
	// closes it; a node that stops ends them itself.
	for _, c := range conns {
		c.Close()
	}
	return err
}

// serverConn is an accepted peer connection whose TLS handshake runs on its
// first Read or Write, bounded by handshakeTimeout (see StreamLayer). Like
// any net.Conn it may be read and written from different goroutines; the
// first to arrive shakes hands and the other waits for it.
type serverConn struct {
	*tls.Conn
	layer *StreamLayer
	once  sync.Once
	err   error // of the handshake; written once, in once
}

// handshake completes the TLS handshake, once, and returns its error.
func (c *serverConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), handshakeTimeout)
		defer cancel()
		if err := c.Conn.HandshakeContext(ctx); err != nil {
			c.err = fmt.Errorf("replica: TLS handshake with peer %s: %w", c.RemoteAddr(), err)
		}
	})
	return c.err
}

// Close closes the connection and forgets it.
func (c *serverConn) Close() error {
	c.layer.mu.Lock()
	delete(c.layer.accepted, c)
	c.layer.mu.Unlock()
	return c.Conn.Close()
}

// Read shakes hands if that has not been done, then reads.
func (c *serverConn) Read(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(b)
}

// Write shakes hands if that has not been done, then writes.
func (c *serverConn) Write(b []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}
