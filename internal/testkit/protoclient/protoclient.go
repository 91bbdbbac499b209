// Package protoclient is a raw client of the leased wire protocol, for
// tests: it sends exactly the messages a test gives it and answers nothing
// by itself. A test uses it to play a lease holder that never acknowledges
// its invalidations, one that lies about its cache, or one that breaks the
// protocol on purpose.
//
// A Client owns one session: the request stream it opens (requests out,
// replies in) and the notice stream the server opens (invalidations and
// recalls). Two goroutines read the two streams from the start: replies
// that answer a Call go to it, and every other reply waits for Recv; notices
// wait for RecvNotice. Nothing is dropped and nothing is answered, so a
// client that never calls RecvNotice is a holder that never acknowledges.
//
// It imports only the protocol package, quic-go and the standard library,
// so tests of the server and of the client library can both use it.
package protoclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/protocol"
)

// DefaultMaxFrameSize bounds the frames a Client reads unless
// Options.MaxFrameSize says otherwise: far above any server's limit, so the
// server's own framing is what a test sees.
const DefaultMaxFrameSize = 64 << 20

// Options configures a Client. The zero value of every field means its
// default.
type Options struct {
	// TLSConfig, if set, is used to dial. Dial clones it and sets NextProtos
	// to protocol.ALPN, MinVersion to TLS 1.3 and, if empty, ServerName to
	// the address's host.
	TLSConfig *tls.Config
	// CAFile, used when TLSConfig is nil, is a PEM file of the CA that
	// signed the server's certificate. Empty (and no TLSConfig) means the
	// system's roots.
	CAFile string
	// QUICConfig, if set, configures the QUIC connection Dial opens. Nil
	// means quic-go's defaults with a keep-alive, so an idle test session
	// lives as long as the test.
	QUICConfig *quic.Config
	// Name names the client in its hello (Hello.Client).
	Name string
	// ClientID is the client identity its hello gives (Hello.ClientID),
	// under which the server applies each write request once; 0: none.
	ClientID uint64
	// Version is the protocol version the hello names. Zero means
	// protocol.Version.
	Version uint16
	// NoHello opens the request stream and sends nothing: the test sends
	// its own first frame with Send or SendFrame and reads the answer with
	// Recv. Hello then returns nil.
	NoHello bool
	// NoNotices leaves the notice stream unaccepted and unread: its data
	// waits in QUIC's flow-control window, as for a client that stopped
	// reading. RecvNotice then fails at once.
	NoNotices bool
	// MaxFrameSize bounds each frame read. Zero means DefaultMaxFrameSize.
	MaxFrameSize int
	// PacketConn, if set, carries Dial's QUIC packets instead of a UDP
	// socket of its own: for example an endpoint of an in-memory network.
	// The caller owns it and closes it after Close has returned.
	PacketConn net.PacketConn
}

// Streams are the streams of a session over something other than a QUIC
// connection, such as the in-memory conn of a server's fuzz test.
type Streams struct {
	// Requests carries requests to the server.
	Requests io.Writer
	// Replies carries the server's replies.
	Replies io.Reader
	// Notices, if not nil, carries invalidations and recalls. It is asked
	// for once, after the hello, from a goroutine of the Client; it should
	// return when ctx ends.
	Notices func(ctx context.Context) (io.Reader, error)
	// Close closes the session with a code and a message for the server,
	// and must end every read and write of the streams.
	Close func(code protocol.Code, msg string) error
}

// Client is one session of the raw protocol. Its methods are safe for
// concurrent use, except that frames given to SendFrame by concurrent
// callers are not interleaved only if each call carries whole frames.
type Client struct {
	qc      *quic.Conn   // nil over Streams
	stream  *quic.Stream // nil over Streams
	streams Streams
	hello   *protocol.HelloReply
	max     int

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	wmu sync.Mutex // serialises writes to streams.Requests

	nextID  atomic.Uint64
	pmu     sync.Mutex // guards pending
	pending map[uint64]chan protocol.Message

	replies queue // replies no Call waits for
	notices queue

	closeOnce sync.Once
	closeErr  error
}

// Dial connects to addr ("host:port"), opens the request stream and, unless
// opts.NoHello, says hello. ctx bounds the dial and the hello.
func Dial(ctx context.Context, addr string, opts Options) (*Client, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("protoclient: address %q: %w", addr, err)
	}
	tlsConf, err := tlsConfig(opts, host)
	if err != nil {
		return nil, err
	}
	qconf := opts.QUICConfig
	if qconf == nil {
		qconf = &quic.Config{MaxIdleTimeout: 30 * time.Second, KeepAlivePeriod: 5 * time.Second}
	}
	var qc *quic.Conn
	if opts.PacketConn != nil {
		ua, rerr := net.ResolveUDPAddr("udp", addr)
		if rerr != nil {
			return nil, fmt.Errorf("protoclient: address %q: %w", addr, rerr)
		}
		qc, err = quic.Dial(ctx, opts.PacketConn, ua, tlsConf, qconf)
	} else {
		qc, err = quic.DialAddr(ctx, addr, tlsConf, qconf)
	}
	if err != nil {
		return nil, fmt.Errorf("protoclient: dial %s: %w", addr, err)
	}
	c, err := New(ctx, qc, opts)
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, err
	}
	return c, nil
}

// TLSConfig returns the TLS configuration Dial would use for a server
// named host: for a test that dials QUIC itself and then calls New.
func TLSConfig(opts Options, host string) (*tls.Config, error) {
	return tlsConfig(opts, host)
}

func tlsConfig(opts Options, host string) (*tls.Config, error) {
	t := &tls.Config{}
	if opts.TLSConfig != nil {
		t = opts.TLSConfig.Clone()
	} else if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("protoclient: CA file: %w", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("protoclient: CA file %s holds no PEM certificate", opts.CAFile)
		}
	}
	if t.ServerName == "" {
		t.ServerName = host
	}
	t.NextProtos = []string{protocol.ALPN}
	t.MinVersion = tls.VersionTLS13
	return t, nil
}

// New runs a session on qc, a QUIC connection already open to a server:
// it opens the request stream and, unless opts.NoHello, says hello. The
// Client owns qc from then on, even when New fails: it closes qc on failure
// and at Close. opts.TLSConfig, CAFile and QUICConfig are not used.
func New(ctx context.Context, qc *quic.Conn, opts Options) (*Client, error) {
	stream, err := qc.OpenStreamSync(ctx)
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, fmt.Errorf("protoclient: open the request stream: %w", err)
	}
	s := Streams{
		Requests: stream,
		Replies:  stream,
		Close: func(code protocol.Code, msg string) error {
			return qc.CloseWithError(quic.ApplicationErrorCode(code), msg)
		},
	}
	if !opts.NoNotices {
		s.Notices = func(ctx context.Context) (io.Reader, error) {
			us, err := qc.AcceptUniStream(ctx)
			if err != nil {
				return nil, err
			}
			return us, nil
		}
	}
	c := start(s, opts)
	c.qc, c.stream = qc, stream
	if err := c.sayHello(ctx, opts); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// NewStreams runs a session over s: unless opts.NoHello, it says hello.
// The Client owns s from then on: it calls s.Close on failure and at Close.
// opts.TLSConfig, CAFile, QUICConfig and NoNotices are not used; leave
// s.Notices nil for a client that never reads its notices.
func NewStreams(ctx context.Context, s Streams, opts Options) (*Client, error) {
	c := start(s, opts)
	if err := c.sayHello(ctx, opts); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// start makes a Client over s and starts the reader of replies.
func start(s Streams, opts Options) *Client {
	c := &Client{
		streams: s,
		max:     opts.MaxFrameSize,
		pending: make(map[uint64]chan protocol.Message),
	}
	if c.max <= 0 {
		c.max = DefaultMaxFrameSize
	}
	c.replies.init()
	c.notices.init()
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(1)
	go c.readReplies()
	return c
}

// sayHello sends the hello and waits for its reply, then starts the reader
// of notices: the server opens the notice stream before it answers.
func (c *Client) sayHello(ctx context.Context, opts Options) error {
	if !opts.NoHello {
		v := opts.Version
		if v == 0 {
			v = protocol.Version
		}
		if err := c.Send(&protocol.Hello{Version: v, Client: opts.Name, ClientID: opts.ClientID}); err != nil {
			return err
		}
		m, err := c.Recv(ctx)
		if err != nil {
			return fmt.Errorf("protoclient: hello: %w", err)
		}
		h, ok := m.(*protocol.HelloReply)
		if !ok {
			return fmt.Errorf("protoclient: hello answered with %s %+v", m.Type(), m)
		}
		c.hello = h
	}
	if c.streams.Notices != nil {
		c.wg.Add(1)
		go c.readNotices()
	} else {
		c.notices.end(errNoNotices)
	}
	return nil
}

var errNoNotices = errors.New("protoclient: the notice stream is not read")

// Hello returns the server's answer to the hello, or nil with
// Options.NoHello.
func (c *Client) Hello() *protocol.HelloReply { return c.hello }

// Conn returns the QUIC connection, or nil over Streams.
func (c *Client) Conn() *quic.Conn { return c.qc }

// NextID returns a request ID that no Call of this Client uses: for
// requests a test sends itself with Send.
func (c *Client) NextID() uint64 { return c.nextID.Add(1) }

// Send writes m as one frame on the request stream, as it is: a request's
// ID is the caller's (see NextID). It may block while the server does not
// read, until Close.
func (c *Client) Send(m protocol.Message) error {
	b, err := protocol.AppendFrame(nil, m)
	if err != nil {
		return fmt.Errorf("protoclient: encode %s: %w", m.Type(), err)
	}
	if err := c.SendFrame(b); err != nil {
		return fmt.Errorf("protoclient: send %s: %w", m.Type(), err)
	}
	return nil
}

// SendFrame writes b on the request stream as it is: whole frames, part
// of one, or bytes that are no frame at all.
func (c *Client) SendFrame(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.streams.Requests.Write(b)
	return err
}

// Recv returns the next reply that no Call waits for, in the order the
// server sent them. When the reply stream has ended and every reply has
// been received, it returns why (io.EOF for a clean end). It returns
// ctx's error if ctx ends first.
func (c *Client) Recv(ctx context.Context) (protocol.Message, error) {
	return c.replies.recv(ctx)
}

// RecvNotice returns the next invalidation or recall. When the notice
// stream has ended and every notice has been received, it returns why. It
// returns ctx's error if ctx ends first.
func (c *Client) RecvNotice(ctx context.Context) (protocol.Message, error) {
	return c.notices.recv(ctx)
}

// Call sends req with a fresh ID, overwriting the one it has, and returns
// the reply with that ID, whatever its type (an Error included). Calls
// may run concurrently with each other and with Send and Recv. If ctx ends
// first, Call returns ctx's error, and the reply, if it comes, goes to
// Recv.
func (c *Client) Call(ctx context.Context, req protocol.Message) (protocol.Message, error) {
	id := c.nextID.Add(1)
	if err := setID(req, id); err != nil {
		return nil, err
	}
	ch := make(chan protocol.Message, 1)
	c.pmu.Lock()
	c.pending[id] = ch
	c.pmu.Unlock()
	forget := func() {
		c.pmu.Lock()
		delete(c.pending, id)
		c.pmu.Unlock()
	}
	if err := c.Send(req); err != nil {
		forget()
		return nil, err
	}
	select {
	case m := <-ch:
		return m, nil
	case <-ctx.Done():
		forget()
		return nil, ctx.Err()
	case <-c.replies.done:
		// The stream ended; the reply may still have been delivered just
		// before.
		select {
		case m := <-ch:
			return m, nil
		default:
		}
		forget()
		return nil, fmt.Errorf("protoclient: %s %d: %w", req.Type(), id, c.replies.failure())
	}
}

// Close closes the session with code 0 and waits for the readers.
func (c *Client) Close() error { return c.CloseWithError(0, "") }

// CloseWithError closes the session with code and msg for the server, and
// waits for the Client's goroutines to end. Later calls do nothing and
// return the first call's result.
func (c *Client) CloseWithError(code protocol.Code, msg string) error {
	c.closeOnce.Do(func() {
		c.cancel()
		if c.streams.Close != nil {
			c.closeErr = c.streams.Close(code, msg)
		}
		c.wg.Wait()
	})
	return c.closeErr
}

// readReplies delivers each reply to the Call that waits for it, or to
// Recv, until the reply stream ends.
func (c *Client) readReplies() {
	defer c.wg.Done()
	fr := protocol.NewFrameReader(c.streams.Replies, c.max)
	for {
		m, err := fr.ReadMessage()
		if err != nil {
			c.replies.end(err)
			return
		}
		if id, ok := protocol.RequestID(m); ok && id != 0 {
			c.pmu.Lock()
			ch := c.pending[id]
			delete(c.pending, id)
			c.pmu.Unlock()
			if ch != nil {
				ch <- m
				continue
			}
		}
		c.replies.push(m)
	}
}

// readNotices accepts the notice stream and queues its notices until it
// ends.
func (c *Client) readNotices() {
	defer c.wg.Done()
	r, err := c.streams.Notices(c.ctx)
	if err != nil {
		c.notices.end(err)
		return
	}
	fr := protocol.NewFrameReader(r, c.max)
	for {
		m, err := fr.ReadMessage()
		if err != nil {
			c.notices.end(err)
			return
		}
		c.notices.push(m)
	}
}

// setID stamps a request with id. A request must have a reply, so that
// Call has something to wait for: Cancel, which has none, is refused.
func setID(m protocol.Message, id uint64) error {
	if m.Type() == protocol.TypeCancel || !protocol.SetRequestID(m, id) {
		return fmt.Errorf("protoclient: %s is not a request with a reply", m.Type())
	}
	return nil
}

// queue is an unbounded queue of messages read from one stream, ended by
// the error that ended the stream.
type queue struct {
	mu   sync.Mutex // guards msgs, err and wake
	msgs []protocol.Message
	err  error
	wake chan struct{} // closed and replaced when msgs or err change
	done chan struct{} // closed when err is set
}

func (q *queue) init() {
	q.wake = make(chan struct{})
	q.done = make(chan struct{})
}

func (q *queue) push(m protocol.Message) {
	q.mu.Lock()
	q.msgs = append(q.msgs, m)
	close(q.wake)
	q.wake = make(chan struct{})
	q.mu.Unlock()
}

// end records why the stream ended. Only the first call counts.
func (q *queue) end(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return
	}
	q.err = err
	close(q.done)
	close(q.wake)
	q.wake = make(chan struct{})
}

func (q *queue) failure() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.err
}

func (q *queue) recv(ctx context.Context) (protocol.Message, error) {
	for {
		q.mu.Lock()
		if len(q.msgs) > 0 {
			m := q.msgs[0]
			q.msgs[0] = nil
			q.msgs = q.msgs[1:]
			q.mu.Unlock()
			return m, nil
		}
		if q.err != nil {
			err := q.err
			q.mu.Unlock()
			return nil, err
		}
		wake := q.wake
		q.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
