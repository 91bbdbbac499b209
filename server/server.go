// Package server is the leased lease server's transport: a QUIC listener,
// one session per connection, and the senders that carry replies and
// notices; edge authorization (the access policy) and the table that maps
// errors to wire codes. Every decision about leases and every change of
// state belongs to package core, which the sessions call; the node's life
// (its state, leadership, membership, backups, disk guard and health)
// belongs to package node, which gives the server the core that serves now
// and which admin requests call.
//
// A Server is made with New, run with Serve, and stopped with Shutdown or
// Close. All of its methods are safe for concurrent use.
//
// Locks: Server.smu guards the sessions; a session's own mu guards its
// ops. A session's mu is never held while calling the core or the node.
// Of their methods, smu is held only around the node's Core and BeginStop
// (which take the node's mu, and then, for BeginStop, the core's:
// core.Core.BeginStop) and the core's OpenSession (the core's mu), none
// of which calls back; otherwise only around a session's sender calls,
// which take only the sender's lock, and connection closes. The core and
// the node call back (as a Notifier or the Host, and through a Request's
// Done) without their own locks, so nothing else nests.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/auth"
	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/node"
	"github.com/leased/leased/protocol"
)

// Server is a leased server. See the package comment.
type Server struct {
	cfg   Config
	log   *slog.Logger
	clock clock.Clock
	// node owns this node's life: its state, its leadership and the core
	// that serves while it leads (package node).
	node *node.Node
	ln   *quic.Listener
	udp  net.PacketConn // the socket the server bound, or nil if Config.PacketConn is used
	tr   *quic.Transport

	smu      sync.Mutex // guards sessions, perAddr and closing
	sessions map[leasetable.SessionID]*session
	perAddr  map[string]int // sessions held by client IP address (addrKey)
	closing  bool

	// inflightBytes is the bytes of keys and values that the waiting
	// writes of all sessions hold (Config.MaxTotalInflightBytes), and
	// the buffers of frames arriving, which frames also counts by address.
	inflightBytes atomic.Int64
	frames        frameBytes
	// handshakes counts the QUIC handshakes in progress: connections that
	// the transport has begun (connContext) and that have neither been
	// accepted nor ended. Past Config.RetryHandshakes, new attempts must
	// prove their source address (verifySource).
	handshakes      atomic.Int64
	leasesRefused   atomic.Uint64
	writesRefused   atomic.Uint64
	sessionsRefused atomic.Uint64
	retries         atomic.Uint64 // Initial packets verifySource had answered with a Retry
	// policy is the access policy in force (SetPolicy); nil: none.
	policy atomic.Pointer[auth.Policy]

	nextSession atomic.Uint64
	// left is what Serve returns once the node stopped for good:
	// ErrRemoved, ErrStateMachineStopped or ErrDataFolderLost, with its
	// cause (Stop).
	left atomic.Pointer[error]

	msgsIn  [protocol.NumTypes]atomic.Uint64
	msgsOut [protocol.NumTypes]atomic.Uint64
	// metrics are the operator's instruments, and metricsLn and
	// metricsSrv its listener (metrics.go); nil without
	// Config.MetricsListen.
	metrics    *metrics
	metricsLn  net.Listener
	metricsSrv *http.Server

	stop      chan struct{} // closed by Close and Shutdown
	stopOnce  sync.Once
	closeOnce sync.Once
	closeErr  error
	closeStep atomic.Value   // string: what Close or Shutdown is doing, for the log of one that runs out of time
	serving   sync.WaitGroup // accept loop and sessions
}

// New opens the data folder, creates or loads TLS, takes the data folder
// (node.New: its lock and the disk guard), binds the UDP socket, opens the
// node's state (and the core of a server alone) and returns a Server ready
// to Serve. It owns cfg.Store and cfg.Cluster.PeerListener from the start:
// on error they are closed.
func New(cfg Config) (_ *Server, err error) {
	handed := false // whether node.New has cfg.Store and the peer listener, which it closes from then on
	defer func() {
		if err == nil || handed {
			return
		}
		if cfg.Store != nil {
			cfg.Store.Close()
		}
		if cfg.Cluster != nil && cfg.Cluster.PeerListener != nil {
			cfg.Cluster.PeerListener.Close()
		}
	}()
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("leased: config: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("leased: data folder: %w", err)
	}
	tlsConf := cfg.TLSConfig
	if tlsConf == nil {
		var err error
		if tlsConf, err = loadOrCreateTLS(cfg.Dir, cfg.TLSHosts, cfg.Logger); err != nil {
			return nil, fmt.Errorf("leased: %w", err)
		}
	} else {
		tlsConf = tlsConf.Clone()
	}
	tlsConf.MinVersion = tls.VersionTLS13
	tlsConf.NextProtos = []string{protocol.ALPN}
	// No client resumes a session (the client library keeps no session
	// cache), so a ticket would only cost each handshake its encryption,
	// and each connection its bytes, which quic-go keeps.
	tlsConf.SessionTicketsDisabled = true
	if cfg.ClientCAs != nil {
		tlsConf.ClientAuth = tls.RequireAndVerifyClientCert
		tlsConf.ClientCAs = cfg.ClientCAs
	}
	var policy *auth.Policy
	if cfg.PolicyFile != "" {
		if policy, err = loadPolicy(cfg.PolicyFile, cfg.Logger); err != nil {
			return nil, fmt.Errorf("leased: %w", err)
		}
	}

	resetKey, err := loadOrCreateResetKey(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("leased: %w", err)
	}
	// The data folder first, then the address: a second server on a
	// folder in use is told so, whatever address it asks for.
	handed = true
	nd, err := node.New(cfg.nodeConfig())
	if err != nil {
		return nil, fmt.Errorf("leased: %w", err)
	}
	// Bind next: a busy address fails at once, before the store starts.
	pc := cfg.PacketConn
	var udp net.PacketConn
	if pc == nil {
		if pc, err = listenUDP(cfg.Addr); err != nil {
			nd.Close()
			return nil, fmt.Errorf("leased: %w", err)
		}
		udp = pc
	}
	closeUDP := func() {
		if udp != nil {
			udp.Close()
		}
	}
	s := &Server{
		node:     nd,
		udp:      udp,
		cfg:      cfg,
		log:      cfg.Logger,
		clock:    cfg.Clock,
		sessions: make(map[leasetable.SessionID]*session),
		perAddr:  make(map[string]int),
		stop:     make(chan struct{}),
	}
	s.policy.Store(policy)
	// A server alone serves from here on; a node of a cluster once it
	// leads (node.Node.Start). An Open that fails closes the node.
	if err := nd.Open(s); err != nil {
		closeUDP()
		return nil, fmt.Errorf("leased: %w", err)
	}
	s.tr = &quic.Transport{Conn: pc, StatelessResetKey: resetKey,
		ConnContext: s.connContext, VerifySourceAddress: s.verifySource}
	// A client opens one stream, for its requests (DESIGN §10); the
	// server opens the notice stream. A client can open no other, so no
	// stream the server never reads holds memory in it.
	s.ln, err = s.tr.Listen(tlsConf, &quic.Config{
		MaxIdleTimeout:        cfg.IdleTimeout,
		MaxIncomingStreams:    1,
		MaxIncomingUniStreams: -1,
	})
	if err != nil {
		s.tr.Close()
		closeUDP()
		s.node.Close()
		return nil, fmt.Errorf("leased: listen: %w", err)
	}
	s.metrics = newMetrics(s)
	if err := s.startMetrics(tlsConf); err != nil {
		s.ln.Close()
		s.tr.Close()
		closeUDP()
		s.node.Close()
		return nil, fmt.Errorf("leased: %w", err)
	}
	s.node.Start()
	return s, nil
}

func listenUDP(addr string) (net.PacketConn, error) {
	udpAddr, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen address %q: %w", addr, err)
	}
	udp, err := net.ListenUDP("udp", udpAddr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	return udp, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Serve accepts connections until ctx ends or the server is closed. It
// returns ErrServerClosed after Shutdown or Close; when ctx ends, it closes
// the server and returns ctx's error.
func (s *Server) Serve(ctx context.Context) error {
	err := s.serve(ctx)
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		// Close waits for serve to have returned.
		s.Close()
	}
	return err
}

func (s *Server) serve(ctx context.Context) error {
	// Every Add to serving happens under smu while not closing, so that
	// Close's Wait never races with an Add.
	s.smu.Lock()
	if s.closing {
		s.smu.Unlock()
		return ErrServerClosed
	}
	s.serving.Add(1)
	s.smu.Unlock()
	defer s.serving.Done()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
		case <-s.stop:
			cancel()
		}
	}()
	s.log.Info("serving", "addr", s.Addr().String(), "dir", s.cfg.Dir,
		"lease_term", s.cfg.LeaseTerm, "epsilon", s.cfg.Epsilon)
	for {
		conn, err := s.ln.Accept(ctx)
		if err != nil {
			select {
			case <-s.stop:
				if err := s.left.Load(); err != nil {
					return *err
				}
				return ErrServerClosed
			default:
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, quic.ErrServerClosed) {
				return ErrServerClosed
			}
			return fmt.Errorf("leased: accept: %w", err)
		}
		handshakeDone(conn.Context())
		s.admit(quicConn{conn})
	}
}

// handshakeKey is the context key of a connection's handshake.
type handshakeKey struct{}

// handshake is a connection whose handshake Server.handshakes counts.
type handshake struct {
	s    *Server
	done atomic.Bool
	// stop unregisters end from the connection's context (AfterFunc), so
	// that a session holds nothing of its handshake but this.
	stop func() bool
}

// end uncounts the handshake, once.
func (h *handshake) end() {
	if h.done.CompareAndSwap(false, true) {
		h.s.handshakes.Add(-1)
	}
}

// connContext counts a connection whose handshake the transport begins,
// until handshakeDone or the connection's end, whichever comes first. The
// transport calls it (quic.Transport.ConnContext).
func (s *Server) connContext(ctx context.Context, _ *quic.ClientInfo) (context.Context, error) {
	s.handshakes.Add(1)
	h := &handshake{s: s}
	h.stop = context.AfterFunc(ctx, h.end)
	return context.WithValue(ctx, handshakeKey{}, h), nil
}

// handshakeDone uncounts the handshake of the connection of ctx, which the
// accept loop has taken.
func handshakeDone(ctx context.Context) {
	if h, ok := ctx.Value(handshakeKey{}).(*handshake); ok {
		h.stop()
		h.end()
	}
}

// verifySource says whether a connection attempt must first prove its
// source address with a Retry: when Config.RetryHandshakes handshakes are
// in progress. The transport calls it (quic.Transport.VerifySourceAddress).
func (s *Server) verifySource(net.Addr) bool {
	retry := s.cfg.RetryHandshakes < 0 || s.handshakes.Load() >= int64(s.cfg.RetryHandshakes)
	if retry {
		s.retries.Add(1)
	}
	return retry
}

// addrKey names the client address of addr, the unit of
// Config.MaxSessionsPerAddr: an IPv4 address, or the /64 network of an IPv6
// one, since a single IPv6 host is commonly given a whole /64 and could
// otherwise take every session slot from addresses of its own.
func addrKey(addr net.Addr) string {
	if u, ok := addr.(*net.UDPAddr); ok {
		ip := u.AddrPort().Addr().Unmap()
		if ip.Is6() {
			p, _ := ip.WithZone("").Prefix(64)
			return p.String()
		}
		return ip.String()
	}
	if host, _, err := net.SplitHostPort(addr.String()); err == nil {
		return host
	}
	return addr.String()
}

// admit starts a session for conn, or refuses it when the server is full or
// closing.
func (s *Server) admit(conn conn) {
	s.smu.Lock()
	if s.closing {
		s.smu.Unlock()
		conn.CloseWithError(protocol.CodeClosed, "server is shutting down")
		return
	}
	addr := addrKey(conn.RemoteAddr())
	var full error
	switch {
	case len(s.sessions) >= s.cfg.MaxSessions:
		full = fmt.Errorf("%w: the server holds its maximum of %d sessions", errResourceExhausted, s.cfg.MaxSessions)
	case s.perAddr[addr] >= s.cfg.MaxSessionsPerAddr:
		full = fmt.Errorf("%w: the server holds its maximum of %d sessions from address %s (MaxSessionsPerAddr)", errResourceExhausted, s.cfg.MaxSessionsPerAddr, addr)
	}
	if full != nil {
		s.serving.Add(1)
		s.smu.Unlock()
		s.sessionsRefused.Add(1)
		sess := newSession(s, conn, 0, nil)
		go func() {
			defer s.serving.Done()
			sess.refuse(full)
		}()
		return
	}
	id := leasetable.SessionID(s.nextSession.Add(1))
	sess := newSession(s, conn, id, s.node.Core())
	sess.addr = addr
	s.sessions[id] = sess
	s.perAddr[addr]++
	s.serving.Add(1)
	if sess.core != nil {
		// Under smu, so that Drop, which the node calls after it took the
		// core away, finds the session.
		sess.core.OpenSession(id)
	}
	s.smu.Unlock()
	go func() {
		defer s.serving.Done()
		sess.run()
	}()
}

func (s *Server) session(id leasetable.SessionID) *session {
	s.smu.Lock()
	defer s.smu.Unlock()
	return s.sessions[id]
}

// endSession removes a finished session. A session that said goodbye has
// already relinquished its leases; one that was lost keeps them until they
// expire, because its client may still trust its cache.
func (s *Server) endSession(sess *session) {
	s.smu.Lock()
	delete(s.sessions, sess.id)
	if s.perAddr[sess.addr]--; s.perAddr[sess.addr] <= 0 {
		delete(s.perAddr, sess.addr)
	}
	s.smu.Unlock()
	if sess.core != nil {
		sess.core.CloseSession(sess.id, false, nil)
	}
	close(sess.ended)
}

// supersede closes the connection of session id, which a later session
// of the same client took over (core.Core.SetClient): the client came
// back on a new connection while this one still looked alive here. The
// lease table closed the session already, so it ends without its leases.
func (s *Server) supersede(id leasetable.SessionID) {
	if sess := s.session(id); sess != nil {
		s.log.Info("a new session of the same client took over this session's leases", "session", uint64(id))
		sess.closeWith(fmt.Errorf("%w: a new session of the same client took over this session's leases", errClosed))
	}
}

// Invalidate sends session id one invalidation of keys, split where the
// message (or the acknowledgement that echoes it) would come near the frame
// limit. The core calls it (core.Notifier).
func (s *Server) Invalidate(id leasetable.SessionID, keys []string) {
	s.invalidate(id, keys, func(batch [][]byte) *protocol.Invalidate { return &protocol.Invalidate{Keys: batch} })
}

// invalidate sends session id the invalidations of names, keys or
// prefixes, split into messages (msg) where a message would come near the
// frame limit.
func (s *Server) invalidate(id leasetable.SessionID, names []string, msg func(batch [][]byte) *protocol.Invalidate) {
	sess := s.session(id)
	if sess == nil {
		return
	}
	bs := make([][]byte, len(names))
	for i, k := range names {
		bs[i] = []byte(k)
	}
	for _, batch := range protocol.SplitKeys(bs, s.cfg.maxFrameSize()/2) {
		sess.sendNotice(msg(batch))
	}
}

// InvalidatePrefixes sends session id one invalidation of its listings of
// prefixes, split as Invalidate splits keys. The core calls it
// (core.Notifier).
func (s *Server) InvalidatePrefixes(id leasetable.SessionID, prefixes []string) {
	s.invalidate(id, prefixes, func(batch [][]byte) *protocol.Invalidate { return &protocol.Invalidate{Prefixes: batch} })
}

// Recall sends session id a recall of its write lease on key. The core
// calls it (core.Notifier).
func (s *Server) Recall(id leasetable.SessionID, key string, token uint64) {
	if sess := s.session(id); sess != nil {
		sess.sendNotice(&protocol.Recall{Key: []byte(key), Token: token})
	}
}

// Shutdown first, on the leader of a cluster with other voters, hands the
// lead to one of them (TransferLead, within 2 s; a failure is logged), so
// that clients move at once. Then it stops accepting connections, abandons
// writes that have not started to commit (their writers are told), lets
// committing ones finish, tells every session to go, waits for their
// clients to close them once they have read every reply, and closes the
// database. If ctx ends first, it closes at once, but returns ctx's error
// without waiting for the close: a store that hangs (a deleted data
// folder, a dead disk) cannot hold the caller past ctx. It logs the step
// it gave up waiting for; a later Close waits for it.
func (s *Server) Shutdown(ctx context.Context) error {
	s.node.HandOff(ctx) // a leader of a cluster hands the lead over first
	s.beginClose()
	done := make(chan error, 1)
	go func() {
		s.closeStep.Store("letting committing writes finish")
		if c := s.node.Core(); c != nil {
			c.Drain()
		}
		// Closing a connection drops the replies not yet delivered on it,
		// so end each request stream after its replies instead, and let
		// the client close the connection.
		s.closeStep.Store("waiting for clients to close their sessions")
		s.smu.Lock()
		for _, sess := range s.sessions {
			sess.goAway()
		}
		s.smu.Unlock()
		s.serving.Wait()
		done <- s.Close()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	step, _ := s.closeStep.Load().(string)
	s.log.Warn("shutdown ran out of time: closing at once, without waiting for the step in progress", "step", step)
	go s.Close()
	return ctx.Err()
}

// beginClose stops accepting and abandons every waiting op.
func (s *Server) beginClose() {
	s.stopOnce.Do(func() {
		s.smu.Lock()
		s.node.BeginStop()
		s.closing = true
		sessions := make([]*session, 0, len(s.sessions))
		for _, sess := range s.sessions {
			sessions = append(sessions, sess)
		}
		s.smu.Unlock()
		close(s.stop)
		s.ln.Close()
		for _, sess := range sessions {
			sess.abandonAll()
		}
	})
}

// Close closes the server at once: connections, the core and the store.
// Writes that were acknowledged are durable; writes still waiting are
// abandoned. Close waits for the server's goroutines to end.
func (s *Server) Close() error {
	s.beginClose()
	s.closeOnce.Do(func() {
		s.smu.Lock()
		for _, sess := range s.sessions {
			sess.conn.CloseWithError(protocol.CodeClosed, "server closed")
		}
		s.smu.Unlock()
		s.closeStep.Store("closing the sessions")
		s.serving.Wait()
		s.tr.Close()
		if s.udp != nil {
			s.udp.Close()
		}
		s.closeStep.Store("closing the node: its core, raft, its log and the database")
		err := s.node.Close()
		s.stopMetrics()
		s.closeStep.Store("closed")
		s.closeErr = err
	})
	return s.closeErr
}

// Stats returns the server's counters.
func (s *Server) Stats() *protocol.StatsReply {
	var cs core.Stats
	if c := s.node.Core(); c != nil {
		cs = c.Stats()
	}
	s.smu.Lock()
	sessions := len(s.sessions)
	s.smu.Unlock()
	st := &protocol.StatsReply{
		Revision:               cs.Revision,
		Sessions:               sessions,
		Leases:                 cs.Leases,
		PrefixLeases:           cs.PrefixLeases,
		WriteLeases:            cs.WriteLeases,
		WritesWaiting:          cs.WritesWaiting,
		InvalidationsSent:      cs.InvalidationsSent,
		InvalidationsAcked:     cs.InvalidationsAcked,
		InvalidationsExpired:   cs.InvalidationsExpired,
		InvalidationsCancelled: cs.InvalidationsCancelled,
		LeaseStorageBytes:      int64(cs.StorageBytes),
		Recalls:                cs.Recalls,
		LeasesRenewed:          cs.Renewed,
		MessagesIn:             make(map[string]uint64),
		MessagesOut:            make(map[string]uint64),
		Uptime:                 cs.Uptime,
		DefaultTerm:            s.cfg.LeaseTerm,
		Epsilon:                s.cfg.Epsilon,
		WritesAllowedIn:        cs.WritesAllowedIn,
		InflightBytes:          s.inflightBytes.Load(),
		Handshakes:             s.handshakes.Load(),
		LeasesRefused:          s.leasesRefused.Load(),
		WritesRefused:          s.writesRefused.Load(),
		SessionsRefused:        s.sessionsRefused.Load(),
		Retries:                s.retries.Load(),
		Alarm:                  s.node.Alarm(),
		TTLLeases:              cs.TTL.Leases,
		TTLRevoked:             cs.TTL.Revoked,
		TTLExpired:             cs.TTL.Expired,
		TTLKeysDeleted:         cs.TTL.KeysDeleted,
		TTLRevokeWaited:        cs.TTL.Waited,
		TTLRevokeHolders:       cs.TTL.Holders,
		TTLKeepAlives:          cs.TTL.KeepAlives,
		HistoryCompacted:       cs.History.Compacted,
		HistoryBytes:           cs.History.Bytes,
		HistoryEvents:          cs.History.Events,
	}
	for t := range protocol.NumTypes {
		if n := s.msgsIn[t].Load(); n > 0 {
			st.MessagesIn[protocol.Type(t).String()] = n
		}
		if n := s.msgsOut[t].Load(); n > 0 {
			st.MessagesOut[protocol.Type(t).String()] = n
		}
	}
	return st
}
