package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
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
	addr   string // the node's address, as dialled

	wmu  sync.Mutex // guards wbuf and writes to stream; a leaf (see Client's lock order)
	wbuf []byte

	pmu     sync.Mutex // guards pending; a leaf
	pending map[uint64]chan protocol.Message

	done    chan struct{} // closed when the connection is gone
	errOnce sync.Once
	err     error // why; set before done is closed
	wg      sync.WaitGroup

	// watches are the watches waiting for their streams, by WatchID
	// (watch.go); guarded by pmu.
	watches map[uint64]chan watchStream
}

// endpointTimeout bounds one attempt to open a session with one endpoint
// of several, so that a node that is down does not take all of a dial's
// time from the others.
const endpointTimeout = 2 * time.Second

// maxRedirects bounds how many leaders, named one after another by nodes
// that do not lead, one round of a dial follows.
const maxRedirects = 3

// dial opens a session with the node that leads. It asks every address it
// knows at once (the endpoints given to Dial and those learned from the
// cluster), so that one that is down costs no time, and then follows the
// leader that a refusal names, verified like any endpoint, at most
// maxRedirects times. While no node leads (an election is under way, or
// the nodes are starting, and a node said it does not lead), it asks them
// again, with backoff, until ctx ends. With one address and no node that
// refused for not leading, the first failure is the dial's.
func dial(ctx context.Context, c *Client) (*conn, error) {
	delay := 50 * time.Millisecond
	for {
		addrs := c.dialAddrs()
		cn, leader, err := dialAll(ctx, c, addrs)
		for hops := 0; err != nil && leader != "" && hops < maxRedirects && ctx.Err() == nil; hops++ {
			c.learn(leader)
			addrs = append(addrs, leader)
			var next string
			cn, next, err = dialAll(ctx, c, []string{leader})
			if slices.Contains(addrs, next) {
				next = ""
			}
			leader = next
		}
		if err == nil || ctx.Err() != nil || errors.Is(err, ErrUnauthenticated) {
			return cn, err
		}
		var se *ServerError
		if errors.As(err, &se) && se.Code == protocol.CodeNotLeader {
			c.learn(c.endpoint()) // a node of a cluster: sync its members
		} else if len(addrs) == 1 {
			return nil, err
		}
		c.log.Debug("no endpoint leads yet", "err", err, "retry_in", delay)
		t := c.clock.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.Chan():
		}
		delay = min(2*delay, time.Second)
	}
}

// dialAll opens sessions with every address at once, each within
// endpointTimeout if there are several, keeps the first that a node
// accepts, and closes the others. If none accepts, it returns a leader
// that a refusal named outside addrs, if any, and every error.
func dialAll(ctx context.Context, c *Client, addrs []string) (*conn, string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		addr string
		cn   *conn
		err  error
	}
	results := make(chan result, len(addrs))
	for _, addr := range addrs {
		go func() {
			actx, acancel := ctx, context.CancelFunc(func() {})
			if len(addrs) > 1 {
				actx, acancel = context.WithTimeout(ctx, endpointTimeout)
			}
			defer acancel()
			cn, err := dialOne(actx, c, addr)
			results <- result{addr, cn, err}
		}()
	}
	var won *conn
	var leader string
	var errs []error
	for range addrs {
		r := <-results
		switch {
		case r.err == nil && won == nil:
			won = r.cn
			c.addr.Store(&r.addr)
			cancel() // the other dials give up
		case r.err == nil:
			r.cn.close() // two nodes took a session: one is about to step down
		default:
			errs = append(errs, r.err)
			var se *ServerError
			if errors.As(r.err, &se) && se.Leader != "" && !slices.Contains(addrs, se.Leader) {
				leader = se.Leader
			}
		}
	}
	if won != nil {
		return won, "", nil
	}
	if len(errs) == 1 {
		return nil, leader, errs[0]
	}
	return nil, leader, fmt.Errorf("%w: no endpoint leads: %w", ErrUnavailable, errors.Join(errs...))
}

// dialOne connects to addr and says hello.
func dialOne(ctx context.Context, c *Client, addr string) (*conn, error) {
	qc, stream, err := openStream(ctx, c.tr, c.tlsConf, c.cfg.IdleTimeout, addr)
	if err != nil {
		return nil, err
	}
	cn := &conn{
		c:       c,
		addr:    addr,
		qc:      qc,
		stream:  stream,
		pending: make(map[uint64]chan protocol.Message),
		done:    make(chan struct{}),
	}
	if err := cn.write(&protocol.Hello{Version: protocol.Version, Client: c.cfg.Name, ClientID: c.id}); err != nil {
		qc.CloseWithError(0, "")
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		stream.SetReadDeadline(dl)
	}
	// A cancel ends the wait for the answer too, as when another node
	// of dialAll took the session first: the read ends at once.
	stop := context.AfterFunc(ctx, func() { stream.SetReadDeadline(time.Now()) })
	fr := protocol.NewFrameReader(stream, 0)
	m, err := fr.ReadMessage()
	if !stop() && err == nil {
		// Canceled as the answer came: the deadline may be set yet.
		err = ctx.Err()
	}
	stream.SetReadDeadline(time.Time{})
	if err != nil {
		qc.CloseWithError(0, "")
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: hello from %s: %w", ErrUnavailable, addr, ctx.Err())
		}
		return nil, connectError("hello from", addr, err)
	}
	hello, ok := m.(*protocol.HelloReply)
	if !ok {
		qc.CloseWithError(0, "")
		if e, ok := m.(*protocol.Error); ok && e.Code == protocol.CodeNotLeader {
			return nil, fmt.Errorf("hello from %s: %w", addr, &ServerError{Code: e.Code, Message: e.Message, Leader: e.Leader})
		}
		return nil, fmt.Errorf("hello from %s: %w", addr, unexpected(m))
	}
	if hello.MaxFrameSize > 0 {
		fr = protocol.NewFrameReader(stream, hello.MaxFrameSize+1024)
		// Anything already buffered after the hello reply is lost with the
		// old reader; the server sends nothing before the client's next
		// request, so there is nothing buffered.
	}
	cn.hello = hello
	cn.wg.Add(3)
	go cn.readReplies(fr)
	go cn.readNotices()
	go cn.watchServer(c.cfg.IdleTimeout)
	return cn, nil
}

// minHandshakeIdle and maxHandshakeIdle bound handshakeIdle: below the
// minimum, one lost Initial packet (QUIC resends it after about 300 ms)
// could fail a handshake with a live server; the maximum is QUIC's own
// default.
const (
	minHandshakeIdle = time.Second
	maxHandshakeIdle = 5 * time.Second
)

// handshakeIdle is how long a handshake may go without a packet from the
// server before it is judged lost, for a Config.IdleTimeout of idle: twice
// idle (the silence after which an established session is judged lost),
// within [minHandshakeIdle, maxHandshakeIdle]. A server that is down or
// stopped sends nothing, so a dial to it fails after this long (2 s by
// default) rather than QUIC's 5 s. Each packet from the server starts the
// wait again, and QUIC bounds the whole handshake to twice it.
func handshakeIdle(idle time.Duration) time.Duration {
	return min(max(2*idle, minHandshakeIdle), maxHandshakeIdle)
}

// openStream opens a QUIC connection to addr, over tr if it is not nil,
// with tlsConf (its ServerName, if empty, is addr's host) and the QUIC
// idle timeout and keep-alives that Config.IdleTimeout idle gives
// (quicIdle, handshakeIdle), and the request stream on it. Its errors wrap
// ErrUnavailable; a server that sent nothing within handshakeIdle is one
// that says so.
func openStream(ctx context.Context, tr *quic.Transport, tlsConf *tls.Config, idle time.Duration, addr string) (*quic.Conn, *quic.Stream, error) {
	qidle, keepAlive := quicIdle(idle)
	hsIdle := handshakeIdle(idle)
	// The server opens the notice stream, and a stream for each watch.
	qconf := &quic.Config{MaxIdleTimeout: qidle, KeepAlivePeriod: keepAlive, HandshakeIdleTimeout: hsIdle,
		MaxIncomingUniStreams: protocol.MaxWatchesPerSession + 8}
	if tlsConf.ServerName == "" {
		tlsConf = tlsConf.Clone()
		tlsConf.ServerName, _, _ = net.SplitHostPort(addr)
	}
	var qc *quic.Conn
	var err error
	if tr != nil {
		var ua *net.UDPAddr
		if ua, err = net.ResolveUDPAddr("udp", addr); err == nil {
			qc, err = tr.Dial(ctx, ua, tlsConf, qconf)
		}
	} else {
		qc, err = quic.DialAddr(ctx, addr, tlsConf, qconf)
	}
	var idleErr *quic.IdleTimeoutError
	if errors.As(err, &idleErr) && ctx.Err() == nil {
		return nil, nil, fmt.Errorf("%w: no answer from %s within %v: the server is down, stopped or unreachable", ErrUnavailable, addr, hsIdle)
	}
	if err != nil {
		return nil, nil, connectError("connect to", addr, err)
	}
	stream, err := qc.OpenStreamSync(ctx)
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, nil, connectError("open stream to", addr, err)
	}
	return qc, stream, nil
}

// transportError turns a connection closed by the server with an
// application code into that code's sentinel, and one it closed with a
// TLS alert about the client's certificate into ErrUnauthenticated.
func transportError(err error) error {
	var ae *quic.ApplicationError
	if errors.As(err, &ae) && ae.Remote {
		return &ServerError{Code: protocol.Code(ae.ErrorCode), Message: ae.ErrorMessage}
	}
	var te *quic.TransportError
	if errors.As(err, &te) && te.Remote && te.ErrorCode.IsCryptoError() {
		alert := tls.AlertError(te.ErrorCode - 0x100)
		if clientCertAlerts[uint8(alert)] {
			return fmt.Errorf("%w: the server refused this client's certificate (TLS alert %q): it needs one signed by a CA it trusts (Config.CertFile and KeyFile)", ErrUnauthenticated, alert.Error())
		}
	}
	return err
}

// clientCertAlerts are the TLS alerts (RFC 8446 §6.2) by which a server
// refuses a client's certificate, or its lack of one.
var clientCertAlerts = map[uint8]bool{
	42:  true, // bad_certificate
	43:  true, // unsupported_certificate
	44:  true, // certificate_revoked
	45:  true, // certificate_expired
	46:  true, // certificate_unknown
	48:  true, // unknown_ca
	116: true, // certificate_required
}

// connectError is the error of a failure to connect to addr while doing
// what (lostError).
func connectError(what, addr string, err error) error {
	return lostError(what+" "+addr, err)
}

// lostError is the error of a connection that failed while doing what:
// ErrUnavailable, which trying again may mend, unless the server refused
// the client's certificate (ErrUnauthenticated). The refusal may reach the
// client after its side of the handshake is done, as it sends its hello.
func lostError(what string, err error) error {
	err = transportError(err)
	if errors.Is(err, ErrUnauthenticated) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, what, err)
}

// fail records why the connection is gone and wakes its waiters.
func (cn *conn) fail(err error) {
	cn.errOnce.Do(func() {
		cn.err = lostError("connection lost", err)
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
		return lostError("send", err)
	}
	if cap(cn.wbuf) > 64<<10 {
		cn.wbuf = nil
	}
	return nil
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

// callLosable is call for a request the server applies once per request
// ID, which the caller may send again on the next session: lost reports
// that the connection was lost (or never took the request) before the
// reply came.
func (cn *conn) callLosable(ctx context.Context, req protocol.Message) (m protocol.Message, lost bool, err error) {
	id, ch, err := cn.start(req)
	if err != nil {
		select {
		case <-cn.done:
			return nil, true, err
		default:
			return nil, false, err
		}
	}
	select {
	case m := <-ch:
		return m, false, nil
	case <-ctx.Done():
		cn.forget(id)
		return nil, false, ctx.Err()
	case <-cn.done:
		cn.forget(id)
		return nil, true, cn.err
	}
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
// lost reports that the connection was lost with the request in flight:
// its outcome is unknown.
func (cn *conn) awaitWrite(ctx context.Context, id uint64, ch chan protocol.Message) (m protocol.Message, lost bool, err error) {
	select {
	case m := <-ch:
		return m, false, nil
	case <-cn.done:
		cn.forget(id)
		return nil, true, fmt.Errorf("%w; the write may or may not have committed", cn.err)
	case <-ctx.Done():
	}
	if err := cn.write(&protocol.Cancel{ID: id}); err != nil {
		cn.forget(id)
		return nil, true, fmt.Errorf("%w; the write may or may not have committed", err)
	}
	t := time.NewTimer(cancelWait)
	defer t.Stop()
	select {
	case m := <-ch:
		if e, ok := m.(*protocol.Error); ok && e.Code == protocol.CodeCanceled {
			return nil, false, fmt.Errorf("%w: %w", ErrCanceled, ctx.Err())
		}
		return m, false, nil
	case <-cn.done:
		cn.forget(id)
		return nil, true, fmt.Errorf("%w; the write may or may not have committed", cn.err)
	case <-t.C:
		cn.forget(id)
		return nil, false, fmt.Errorf("%w: no answer to the cancellation; the write may or may not have committed: %w", ErrUnavailable, ctx.Err())
	}
}

func (cn *conn) start(req protocol.Message) (uint64, chan protocol.Message, error) {
	select {
	case <-cn.done:
		return 0, nil, cn.err
	default:
	}
	id, _ := protocol.RequestID(req)
	if id == 0 {
		id = cn.c.nextID.Add(1)
		protocol.SetRequestID(req, id)
	}
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
	// The notice stream is the first the server opens; the streams of
	// watches come after it.
	cn.wg.Add(1)
	go cn.acceptWatches()
	fr := protocol.NewFrameReader(us, cn.hello.MaxFrameSize+1024)
	for {
		m, err := fr.ReadMessage()
		if err != nil {
			cn.fail(err)
			return
		}
		switch m := m.(type) {
		case *protocol.Invalidate:
			if err := cn.c.invalidate(cn, m.Keys, m.Prefixes, cn.c.clock.Now()); err != nil {
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

// defaultTLS builds the client's TLS config from Config. Its ServerName
// is the one Config.TLSConfig gives, or empty: each dial then names the
// host it dials.
func defaultTLS(cfg Config) (*tls.Config, error) {
	t := &tls.Config{}
	if cfg.TLSConfig != nil {
		t = cfg.TLSConfig.Clone()
	} else if cfg.CAFile != "" {
		pool, err := loadCAFile(cfg.CAFile)
		if err != nil {
			return nil, err
		}
		t.RootCAs = pool
	}
	if cfg.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: client certificate %s with key %s: %v", ErrInvalidArgument, cfg.CertFile, cfg.KeyFile, err)
		}
		t.Certificates = []tls.Certificate{pair}
	}
	t.MinVersion = tls.VersionTLS13
	t.NextProtos = []string{protocol.ALPN}
	return t, nil
}

// certHint adds to err, the error of a dial, what to do when the server's
// certificate did not verify: pass the server's CA when no CA that cfg
// trusts signed it, or connect by a name the certificate has when it does
// not name the host dialled. Other errors it returns as they are. The
// result wraps err, so errors.Is and errors.As see what err holds. Dial and
// DialAdmin call it.
func certHint(err error, cfg Config) error {
	if err == nil {
		return nil
	}
	var hostErr x509.HostnameError
	if errors.As(err, &hostErr) {
		return fmt.Errorf("%w; the server's certificate does not name %q: restart leased with --tls-host %s, or connect by a name it has",
			err, hostErr.Host, hostErr.Host)
	}
	var unknownCA x509.UnknownAuthorityError
	var verifyErr *tls.CertificateVerificationError
	if !errors.As(err, &unknownCA) && !errors.As(err, &verifyErr) {
		return err
	}
	const ca = "the server's CA, client.CAPath(<leased's data folder>)"
	switch {
	case cfg.TLSConfig != nil:
		return fmt.Errorf("%w; the server's certificate is not signed by a CA in Config.TLSConfig: add %s to its RootCAs", err, ca)
	case cfg.CAFile != "":
		return fmt.Errorf("%w; the server's certificate is not signed by the CA in Config.CAFile (%s): pass %s", err, cfg.CAFile, ca)
	}
	return fmt.Errorf("%w; the server's certificate is not signed by a CA in the system's roots (Config.CAFile is empty): pass %s as Config.CAFile", err, ca)
}

// loadCAFile reads the CA certificates of Config.CAFile. Its errors wrap
// ErrInvalidArgument, and the file's error; a relative path that names no
// file is said to be taken from the working folder, which is not leased's.
func loadCAFile(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !filepath.IsAbs(path) {
		wd, _ := os.Getwd()
		return nil, fmt.Errorf("%w: CA file: %w (a relative path is taken from this program's working folder, %s, "+
			"not leased's: pass client.CAPath(<leased's data folder>) with that folder's full path)", ErrInvalidArgument, err, wd)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: CA file: %w", ErrInvalidArgument, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrInvalidArgument, path)
	}
	return pool, nil
}
