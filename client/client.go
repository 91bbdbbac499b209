// Package client is the leased client library. A Client keeps a local cache
// of values, each covered by a read lease from the server: while the lease
// lasts, Get answers from memory without a network round trip. The server
// invalidates cached entries before it commits a write, so reads stay
// linearizable as long as clocks drift by less than the server's ε.
//
// A Client also holds TTL leases (DESIGN §14), the liveness leases of
// etcd: Grant returns a lease, Put with WithLease attaches a key to it,
// KeepAlive renews it in the background (every lease the client keeps
// alive goes in one message, at a third of its TTL), and Revoke, or the
// lease running out, deletes its keys through the write path. A Session
// keeps one lease alive and says when it is lost. Any client may keep
// alive, attach keys to, or revoke any lease, as in etcd; per-prefix
// permissions come later.
//
// A Client is safe for concurrent use by many goroutines.
package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/cache"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/protocol"
)

// Defaults of Config.
const (
	DefaultCacheEntries  = 100_000
	DefaultCacheBytes    = 64 << 20
	DefaultIdleTimeout   = time.Second
	DefaultRenewFraction = 2.0 / 3.0
	DefaultMaxReconnect  = 5 * time.Second
)

// Bounds of Config's durations, checked by Validate. They are far longer
// than a client needs, and keep the sums the client forms from them (a
// doubled backoff, a deadline) far from time.Duration's limit.
const (
	// MaxIdleTimeout is the longest IdleTimeout: a server that is gone is
	// noticed only after it.
	MaxIdleTimeout = time.Hour
	// MaxMaxReconnectDelay is the longest MaxReconnectDelay.
	MaxMaxReconnectDelay = time.Hour
)

// Config configures a Client. The zero value of every field means its
// default; Dial refuses other values that Validate refuses.
type Config struct {
	// CAFile is a PEM file of the CA that signed the server's certificate,
	// such as the server's <data>/tls/ca.pem. Empty means the system's
	// roots, unless TLSConfig is set. Certificates are always verified.
	CAFile string
	// CertFile and KeyFile are the client's certificate and its private
	// key (PEM), such as `leased cert create-client` writes, for a server
	// that requires client certificates: the certificate's CommonName is
	// the client's identity, by which the server's access policy knows it.
	// Both or neither; they are read once, by Dial. Empty means no
	// certificate, unless TLSConfig carries one.
	CertFile, KeyFile string
	// TLSConfig, if set, is used instead of CAFile, CertFile and KeyFile.
	// The client sets MinVersion to TLS 1.3 and NextProtos to
	// protocol.ALPN, and ServerName to the address's host if it is empty.
	TLSConfig *tls.Config
	// Name names the client in the server's logs. Empty means none.
	Name string
	// CacheEntries and CacheBytes bound the local cache, in entries and in
	// bytes of keys, values and a fixed overhead per entry (see package
	// cache). Zero means DefaultCacheEntries (100,000) and DefaultCacheBytes
	// (64 MiB); negative values are invalid.
	CacheEntries int
	CacheBytes   int64
	// RenewFraction is the fraction of a term after which a lease on an
	// entry read during that term is renewed, strictly between 0 and 1.
	// Zero means DefaultRenewFraction (2/3).
	RenewFraction float64
	// IdleTimeout closes the connection after this long without traffic
	// from the server; the client sends keep-alives at a third of it, which
	// the server answers. So a server that is gone, such as a leader that
	// crashed, is noticed within it, and the client reconnects (to the new
	// leader). Zero means DefaultIdleTimeout (1 s); negative values and
	// values over MaxIdleTimeout (1 h) are invalid.
	IdleTimeout time.Duration
	// MaxReconnectDelay caps the backoff between reconnection attempts.
	// Zero means DefaultMaxReconnect (5 s); negative values and values
	// over MaxMaxReconnectDelay (1 h) are invalid.
	MaxReconnectDelay time.Duration
	// OnEvent, if set, is called with connection and lease events, one at a
	// time, from a goroutine of the client. It should return quickly.
	OnEvent func(Event)
	// PacketConn, if set, carries the client's QUIC packets instead of a
	// UDP socket of its own, for the session and every reconnection: for
	// example a socket shared with other traffic, or one wrapped to shape
	// or observe packets. The caller owns it and closes it after Close has
	// returned.
	PacketConn net.PacketConn
	// Clock reads time for every lease decision. Nil means the system clock.
	Clock clock.Clock
	// Logger receives the client's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// Validate checks c as given, before defaults: zero values are valid and
// mean defaults. It returns an error wrapping ErrInvalidArgument that names
// each field with a bad value. Dial calls it.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: Config.%s %s", ErrInvalidArgument, field, fmt.Sprintf(format, args...)))
	}
	if c.CacheEntries < 0 {
		bad("CacheEntries", "is %d; want 0 (the default) or more", c.CacheEntries)
	}
	if c.CacheBytes < 0 {
		bad("CacheBytes", "is %d; want 0 (the default) or more", c.CacheBytes)
	}
	if f := c.RenewFraction; math.IsNaN(f) || f < 0 || f >= 1 {
		bad("RenewFraction", "is %v; want 0 (the default) or a fraction strictly between 0 and 1", f)
	}
	if c.IdleTimeout < 0 || c.IdleTimeout > MaxIdleTimeout {
		bad("IdleTimeout", "is %v; want 0 (the default) to %v", c.IdleTimeout, MaxIdleTimeout)
	}
	switch {
	case c.CertFile != "" && c.KeyFile == "":
		bad("CertFile", "is %s while KeyFile is empty; a certificate needs its key", c.CertFile)
	case c.CertFile == "" && c.KeyFile != "":
		bad("KeyFile", "is %s while CertFile is empty; a key needs its certificate", c.KeyFile)
	}
	if c.TLSConfig != nil && (c.CAFile != "" || c.CertFile != "") {
		bad("TLSConfig", "is set with CAFile or CertFile; put the CA and certificate in TLSConfig instead")
	}
	if c.MaxReconnectDelay < 0 || c.MaxReconnectDelay > MaxMaxReconnectDelay {
		bad("MaxReconnectDelay", "is %v; want 0 (the default) to %v", c.MaxReconnectDelay, MaxMaxReconnectDelay)
	}
	return errors.Join(errs...)
}

// withDefaults returns c with every zero field that has a default set to
// it: the one place where defaults are applied. c must be valid.
func (c Config) withDefaults() Config {
	if c.CacheEntries == 0 {
		c.CacheEntries = DefaultCacheEntries
	}
	if c.CacheBytes == 0 {
		c.CacheBytes = DefaultCacheBytes
	}
	if c.RenewFraction == 0 {
		c.RenewFraction = DefaultRenewFraction
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxReconnectDelay == 0 {
		c.MaxReconnectDelay = DefaultMaxReconnect
	}
	c.Clock = clock.OrReal(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// EventKind says what happened.
type EventKind int

// Events, after Chubby's jeopardy, safe and expired.
const (
	// EventDisconnected: the connection to the server was lost. Cached
	// entries are still served until their leases run out.
	EventDisconnected EventKind = iota + 1
	// EventReconnected: a new session is open.
	EventReconnected
	// EventLeasesExpired: the leases of Keys ran out; reads of them go to
	// the server again, or fail with ErrUnavailable while disconnected.
	EventLeasesExpired
	// EventWriteLeaseLost: the write lease on Keys[0] was recalled by the
	// server or expired.
	EventWriteLeaseLost
)

func (k EventKind) String() string {
	switch k {
	case EventDisconnected:
		return "disconnected"
	case EventReconnected:
		return "reconnected"
	case EventLeasesExpired:
		return "leases expired"
	case EventWriteLeaseLost:
		return "write lease lost"
	}
	return "unknown"
}

// Event is a connection or lease event.
type Event struct {
	Kind EventKind
	Keys []string // EventLeasesExpired, EventWriteLeaseLost
	Err  error    // EventDisconnected: why
}

// Item is the answer to a Get.
type Item struct {
	// Value is the key's value. It is shared with the cache: do not modify
	// it.
	Value []byte
	// Found is false if the key does not exist.
	Found bool
	// Version is the revision of the key's last change (0 if it never
	// existed).
	Version uint64
	// Cached is true if the answer came from the local cache, under a
	// valid lease, without a network round trip.
	Cached bool
	// Stale is true if GetStale served an entry whose lease had run out.
	Stale bool
}

// Stats are the server's counters, as returned by ServerStats.
type Stats = protocol.StatsReply

// SessionInfo describes the client's current session: one connection to
// the server (DESIGN §6). Session returns it.
type SessionInfo struct {
	ID           uint64
	Epsilon      time.Duration
	DefaultTerm  time.Duration
	MaxValueSize int
	// ServerVersion is the server's build, as its hello reply gave it;
	// empty from a server that does not send it.
	ServerVersion string
}

// fetch tracks reads and writes of one key in flight. An invalidation of
// the key that arrives meanwhile poisons them: their answer is returned to
// the caller but not cached, because the invalidation may concern the very
// lease the answer carries.
type fetch struct {
	// n counts the requests that share the record. It is raised under
	// c.imu, but lowered without it (see endFetch), so that ending a
	// request that has nothing to cache does not take c.imu.
	n        atomic.Int32
	poisoned bool // guarded by c.imu
}

// Client is a connection to a leased server with a local lease cache. See
// the package comment.
//
// Lock order. Where a goroutine holds more than one of the client's locks,
// it takes them in this order, and never the other way round:
//
//	smu → imu → the cache's own lock
//	smu → conn.pmu, smu → conn.wmu   (a request, acknowledgement or release written under smu)
//	wmu → WriteLease.mu
//
// imu is never held while taking smu, wmu, rmu or a conn's lock; wmu is
// never held together with smu or imu; rmu, kmu, conn.pmu, conn.wmu and
// WriteLease.mu are leaves, under which no other lock of the client is
// taken. Code that needs two of the unordered ones (wmu and imu, say)
// releases the first before it takes the second. Under smu and
// WriteLease.mu the client reads its clock, which a test's clock may make
// wait; a wait there must not need one of those locks.
type Client struct {
	cfg Config
	// endpoints are the addresses Dial was given; addr is the one of the
	// current or last session, which dials try first.
	endpoints []string
	addr      atomic.Pointer[string]
	tlsConf   *tls.Config     // ServerName empty: each endpoint's host
	tr        *quic.Transport // over Config.PacketConn; nil: a socket per connection
	clock     clock.Clock
	log       *slog.Logger
	cache     *cache.Cache

	base     time.Time // a reading of clock at Dial, for monoNow
	sysClock bool      // clock is the system clock

	cur atomic.Pointer[conn] // nil while disconnected
	// newConn is closed, and replaced, when a connection is installed in
	// cur after a disconnection (see awaitConn); guarded by ncmu, a leaf.
	ncmu    sync.Mutex
	newConn chan struct{}
	// lastHello is the hello reply of the current or last session.
	lastHello atomic.Pointer[protocol.HelloReply]

	// id is the client's identity in the hello of every session
	// (protocol.Hello.ClientID): with it the server applies each write
	// once, so a write whose reply was lost is sent again. Request IDs
	// come from nextID, unique across the client's sessions.
	id     uint64
	nextID atomic.Uint64
	// writing holds the IDs of writes that have no outcome yet, and
	// lowest the least of them, or 0 if unknown: each write tells the
	// server which outcomes it may forget (protocol.Write.Acked).
	// Guarded by xmu, a leaf.
	xmu     sync.Mutex
	writing map[uint64]struct{}
	lowest  uint64
	minTerm atomic.Int64 // the shortest term granted so far, in ns; paces renewal

	imu     sync.Mutex // guards fetches and closed, and orders cache fills against invalidations; after smu
	fetches map[string]*fetch
	closed  bool

	// smu is held from beginning a read's or write's fetch record until its
	// request is on the stream, so that requests reach the server in the
	// order their records were begun (see beginWriteFetch). It is taken
	// first of the client's locks.
	smu sync.Mutex

	wmu          sync.Mutex // guards wleases, acquiring and earlyRecalls; before WriteLease.mu, never with smu or imu
	wleases      map[string]*WriteLease
	acquiring    map[string]int    // acquisitions in flight, by key
	earlyRecalls map[string]uint64 // key → token of a recall that came before its grant

	rmu       sync.Mutex // guards toRelease; a leaf
	toRelease []string

	// kmu guards kept and kclosed, and the leases and subscriptions in
	// kept; a leaf. kept holds the TTL leases the client keeps alive
	// (see keepAlives); kwake tells the loop of a new one.
	kmu     sync.Mutex
	kept    map[LeaseID]*keptLease
	kclosed bool
	kwake   chan struct{}

	events chan Event
	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Dial connects to the server at addr ("host:port") and opens a session.
// addr may list the nodes of a cluster, separated by commas
// ("a:7400,b:7400,c:7400"): Dial, and every reconnection, finds the node
// that leads, following a node's answer that another one leads (DESIGN
// §13); while none leads, Dial tries them again, with backoff, until ctx
// ends. An invalid cfg (see Config.Validate) or address is an error
// wrapping ErrInvalidArgument.
func Dial(ctx context.Context, addr string, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sysClock := cfg.Clock == nil
	cfg = cfg.withDefaults()
	endpoints, err := parseEndpoints(addr)
	if err != nil {
		return nil, err
	}
	tlsConf, err := defaultTLS(cfg)
	if err != nil {
		return nil, err
	}
	base := cfg.Clock.Now() // a reading of the clock, for monoNow and the cache
	c := &Client{
		cfg:          cfg,
		endpoints:    endpoints,
		tlsConf:      tlsConf,
		clock:        cfg.Clock,
		log:          cfg.Logger,
		cache:        cache.New(cache.Config{MaxEntries: cfg.CacheEntries, MaxBytes: cfg.CacheBytes, Epoch: base}),
		fetches:      make(map[string]*fetch),
		wleases:      make(map[string]*WriteLease),
		earlyRecalls: make(map[string]uint64),
		acquiring:    make(map[string]int),
		events:       make(chan Event, 256),
		newConn:      make(chan struct{}),
		id:           newClientID(),
		writing:      make(map[uint64]struct{}),
		kept:         make(map[LeaseID]*keptLease),
		kwake:        make(chan struct{}, 1),
	}
	c.addr.Store(&endpoints[0])
	c.base, c.sysClock = base, sysClock
	if cfg.PacketConn != nil {
		c.tr = &quic.Transport{Conn: cfg.PacketConn}
	}
	cn, err := dial(ctx, c)
	if err != nil {
		if c.tr != nil {
			c.tr.Close()
		}
		return nil, err
	}
	c.cur.Store(cn)
	c.lastHello.Store(cn.hello)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(4)
	go c.supervise(cn)
	go c.maintain()
	go c.deliverEvents()
	go c.keepAlives()
	return c, nil
}

// parseEndpoints splits a comma-separated list of host:port addresses.
func parseEndpoints(addr string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(addr, ",") {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("%w: address %q: %v", ErrInvalidArgument, a, err)
		}
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out, nil
}

// endpoint is the address of the current or last session.
func (c *Client) endpoint() string { return *c.addr.Load() }

// monoNow returns the current time for lease checks on the cached read
// path. On the system clock it reads only the monotonic clock, without the
// clock interface: time.Since skips the wall clock, which halves the cost of
// time.Now. The result compares correctly with times from Now, since both
// carry monotonic readings.
func (c *Client) monoNow() time.Time {
	if c.sysClock {
		return c.base.Add(time.Since(c.base))
	}
	return c.clock.Now()
}

// sinceBase is monoNow as the time since c.base, the cache's epoch: on
// the system clock, one reading of the monotonic clock and nothing else.
func (c *Client) sinceBase() time.Duration {
	if c.sysClock {
		return time.Since(c.base)
	}
	return c.clock.Now().Sub(c.base)
}

func loadCAFile(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: CA file: %v", ErrInvalidArgument, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrInvalidArgument, path)
	}
	return pool, nil
}

// Session returns the current session, and false while disconnected. (A
// Session, from NewSession, is something else: a TTL lease kept alive.)
func (c *Client) Session() (SessionInfo, bool) {
	cn := c.cur.Load()
	if cn == nil {
		return SessionInfo{}, false
	}
	h := cn.hello
	return SessionInfo{ID: h.SessionID, Epsilon: h.Epsilon, DefaultTerm: h.DefaultTerm, MaxValueSize: h.MaxValueSize,
		ServerVersion: h.ServerVersion}, true
}

// conn returns the current connection, or an error saying why there is
// none.
func (c *Client) conn() (*conn, error) {
	if cn := c.cur.Load(); cn != nil {
		return cn, nil
	}
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	return nil, fmt.Errorf("%w: not connected to %s", ErrUnavailable, c.endpoint())
}

// awaitConn returns the current connection, waiting for the client to
// reconnect if it has none, until ctx ends or until the time until. The
// error of a wait that ended wraps ErrUnavailable and the reason.
func (c *Client) awaitConn(ctx context.Context, until time.Time) (*conn, error) {
	for {
		c.ncmu.Lock()
		changed := c.newConn
		c.ncmu.Unlock()
		cn, err := c.conn()
		if err == nil || errors.Is(err, ErrClosed) {
			return cn, err
		}
		left := until.Sub(c.clock.Now())
		if left <= 0 {
			return nil, fmt.Errorf("%w: not connected to %s", ErrUnavailable, c.endpoint())
		}
		t := c.clock.NewTimer(left)
		select {
		case <-changed:
		case <-c.ctx.Done():
		case <-t.Chan():
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: not connected to %s: %w", ErrUnavailable, c.endpoint(), ctx.Err())
		}
		t.Stop()
	}
}

// connected installs cn, the connection of a new session, and wakes the
// writes waiting for one. It reports false if the client has a
// connection already.
func (c *Client) connected(cn *conn) bool {
	if !c.cur.CompareAndSwap(nil, cn) {
		return false
	}
	c.lastHello.Store(cn.hello)
	c.ncmu.Lock()
	close(c.newConn)
	c.newConn = make(chan struct{})
	c.ncmu.Unlock()
	return true
}

// newClientID returns a random client identity, not 0.
func newClientID() uint64 {
	for {
		var b [8]byte
		rand.Read(b[:]) // never fails (crypto/rand)
		if id := binary.BigEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// newWriteID returns the ID of a new write (or TTL lease grant), recorded
// at once as having no outcome yet. The ID is taken under the same lock
// that records it: a write whose ID was taken but not yet recorded could
// otherwise be below another write's Acked, which would tell the server
// that its outcome is known, and the server would refuse it as answered
// already.
func (c *Client) newWriteID() uint64 {
	c.xmu.Lock()
	defer c.xmu.Unlock()
	id := c.nextID.Add(1)
	c.writing[id] = struct{}{}
	if c.lowest == 0 || id < c.lowest {
		c.lowest = id
	}
	return id
}

// beginWrite records that write id, from newWriteID, has no outcome yet,
// and returns the least ID of such writes: the client has the outcomes of
// its writes below it.
func (c *Client) beginWrite(id uint64) uint64 {
	c.xmu.Lock()
	defer c.xmu.Unlock()
	c.writing[id] = struct{}{}
	if c.lowest == 0 || id < c.lowest {
		c.lowest = id
	}
	return c.lowest
}

// endWrite records that write id has its outcome, or will never be sent
// again.
func (c *Client) endWrite(id uint64) {
	c.xmu.Lock()
	defer c.xmu.Unlock()
	delete(c.writing, id)
	if id != c.lowest {
		return
	}
	c.lowest = 0
	for w := range c.writing {
		if c.lowest == 0 || w < c.lowest {
			c.lowest = w
		}
	}
}

func checkKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidArgument)
	case len(key) > protocol.MaxKeySize:
		return fmt.Errorf("%w: key of %d bytes, limit %d", ErrTooLarge, len(key), protocol.MaxKeySize)
	}
	return nil
}

// Get returns the value of key. If the client holds a valid lease on it,
// the answer comes from the local cache with no network round trip
// (Item.Cached). Otherwise it asks the server, and caches the answer under
// the lease that comes with it. While disconnected, keys without a valid
// lease fail with ErrUnavailable.
func (c *Client) Get(ctx context.Context, key string) (Item, error) {
	if e, ok := c.cache.GetAt(key, c.sinceBase()); ok {
		return Item{Value: e.Value, Found: e.Found, Version: e.Version, Cached: true}, nil
	}
	return c.fetch(ctx, key)
}

// GetStale is Get, except that when the server cannot be reached it serves
// an entry whose lease has run out, marked Stale, rather than failing. The
// value may be out of date.
func (c *Client) GetStale(ctx context.Context, key string) (Item, error) {
	it, err := c.Get(ctx, key)
	if err != nil && errors.Is(err, ErrUnavailable) {
		if e, _, ok := c.cache.Peek(key); ok {
			return Item{Value: e.Value, Found: e.Found, Version: e.Version, Cached: true, Stale: true}, nil
		}
	}
	return it, err
}

func (c *Client) beginFetch(key string) *fetch {
	f := c.fetches[key]
	if f == nil {
		f = &fetch{}
		c.fetches[key] = f
	}
	f.n.Add(1)
	return f
}

// beginWriteFetch starts tracking a write or write-lease acquisition of
// key. The server drops this client's read lease on key when the op starts
// (the library has removed the entry before sending it), so answers to
// reads and writes of key already in flight must not be cached once they
// arrive: replies are delivered in order, but the goroutines that fill the
// cache with them run in any order, and an older answer could otherwise
// replace the op's newer one, or be cached under a lease the server no
// longer records. They are poisoned, and the op gets a fetch of its own,
// which reads sent after it share. That is right only because requests
// are sent in the order their records are begun (c.smu): a read that shares
// the record reaches the server after the op. It must be called with c.imu
// held.
func (c *Client) beginWriteFetch(key string) *fetch {
	if old := c.fetches[key]; old != nil {
		old.poisoned = true
	}
	f := &fetch{}
	f.n.Store(1)
	c.fetches[key] = f
	return f
}

// send begins key's fetch record and writes req, under c.smu, so that
// requests reach the server in the order their records were begun. For a
// write or an acquisition (change), the client first drops its own entry
// and poisons reads in flight (see beginWriteFetch). It returns the record,
// which the caller ends with fill, the time the request was sent, and the
// request's ID and reply channel.
func (c *Client) send(cn *conn, key string, req protocol.Message, change bool) (f *fetch, sent time.Time, id uint64, ch chan protocol.Message, err error) {
	c.smu.Lock()
	defer c.smu.Unlock()
	c.imu.Lock()
	if change {
		f = c.beginWriteFetch(key)
		c.cache.Remove(key)
	} else {
		f = c.beginFetch(key)
	}
	c.imu.Unlock()
	sent = c.clock.Now()
	id, ch, err = cn.start(req)
	return f, sent, id, ch, err
}

// endFetch ends one request of f. It takes c.imu only to drop the record
// once the last of its requests has ended, so it must be called without it.
func (c *Client) endFetch(key string, f *fetch) {
	if f.n.Add(-1) > 0 {
		return
	}
	c.imu.Lock()
	c.dropFetch(key, f)
	c.imu.Unlock()
}

// dropFetch forgets f if no request shares it any more: one may have begun
// sharing it again since it was ended. It must be called with c.imu held.
func (c *Client) dropFetch(key string, f *fetch) {
	if f.n.Load() == 0 && c.fetches[key] == f {
		delete(c.fetches, key)
	}
}

// fill caches an answer that arrived at now under its lease, unless an
// invalidation poisoned the fetch, and ends the fetch. The caller reads now
// when the answer has arrived.
//
// An answer with no lease, or one the cache already holds (the same
// version, under a lease still live), has nothing to store: it ends its
// fetch without c.imu and leaves the entry alone. When the readers of a hot
// key miss together, every answer after the first is of this kind, and
// taking c.imu for each of them made a queue that could outlast the term,
// stall acknowledgements and renewals, and replace the entry with ones of
// earlier deadlines. Skipping is safe: it adds nothing to the cache, and
// the entry already cached is covered by the session's lease on the key,
// which is not released while the key is cached.
func (c *Client) fill(key string, f *fetch, value []byte, version uint64, found bool, deadline time.Time, term time.Duration, now time.Time) {
	if term <= 0 || c.holds(key, version, found, now) {
		c.endFetch(key, f)
		return
	}
	var evicted []string
	c.imu.Lock()
	if f.poisoned || c.closed {
		// The server granted a lease the cache will not use.
		evicted = append(evicted, key)
	} else {
		_, evicted = c.cache.Put(key, value, version, found, deadline)
		if m := c.minTerm.Load(); m == 0 || int64(term) < m {
			c.minTerm.Store(int64(term))
		}
	}
	f.n.Add(-1)
	c.dropFetch(key, f)
	c.imu.Unlock()
	c.relinquish(evicted)
}

// holds reports whether the cache holds version of key (found or not) under
// a lease that is still live at now.
func (c *Client) holds(key string, version uint64, found bool, now time.Time) bool {
	e, deadline, ok := c.cache.Peek(key)
	return ok && e.Version == version && e.Found == found && now.Before(deadline)
}

func (c *Client) fetch(ctx context.Context, key string) (Item, error) {
	if err := checkKey(key); err != nil {
		return Item{}, err
	}
	cn, err := c.conn()
	if err != nil {
		return Item{}, err
	}
	req := &protocol.Get{Key: []byte(key)}
	old, _, have := c.cache.Peek(key)
	if have {
		req.Revalidate, req.Known = true, old.Version
	}
	f, sent, id, ch, err := c.send(cn, key, req, false)
	var m protocol.Message
	if err == nil {
		m, err = cn.await(ctx, id, ch)
	}
	if err != nil {
		c.endFetch(key, f)
		// The server may have granted a lease whose answer is lost.
		c.relinquish([]string{key})
		return Item{}, err
	}
	r, ok := m.(*protocol.GetReply)
	if !ok || (r.Unchanged && (!have || old.Version != r.Version)) {
		c.endFetch(key, f)
		if ok {
			return Item{}, fmt.Errorf("%w: unchanged answer for version %d the client does not hold", ErrProtocol, r.Version)
		}
		return Item{}, unexpected(m)
	}
	value := r.Value
	if r.Unchanged {
		value = old.Value
	}
	// The clock read on arrival is where TestHerdAnswersDoNotQueue holds
	// answers before their fill, through Config.Clock.
	c.fill(key, f, value, r.Version, r.Found, sent.Add(r.Term), r.Term, c.monoNow())
	return Item{Value: value, Found: r.Found, Version: r.Version}, nil
}

// WriteResult describes a committed write, as the server reported it.
type WriteResult struct {
	Version uint64
	// Waited is how long the server held the write before it could commit:
	// for its turn on the key, and for holders to drop their leases or for
	// those leases to run out. The commit itself (the disk write) is not
	// counted.
	Waited time.Duration
	// Holders is how many read leases the write invalidated, plus one if it
	// recalled a write lease.
	Holders int
	// Term is the term of the read lease the write gave the writer on the
	// key's new value: the key's term, or 0 if it is not cached.
	Term time.Duration
	// Replayed says that the write was sent again after its connection
	// was lost (a failover), and had committed before: Version is that
	// commit's, and the writer got no lease (Term 0).
	Replayed bool
}

// WriteOption modifies a write.
type WriteOption func(*writeOptions)

type writeOptions struct {
	result *WriteResult
	// leaseUntil, if not zero, is when the write lease the write is made
	// under could have run out on the server, on the client's clock: a
	// write begun while disconnected waits for the next session until
	// then at most. WriteLease sets it.
	leaseUntil time.Time
	// lease is the TTL lease to attach the key to, if withLease is set
	// (WithLease).
	lease     LeaseID
	withLease bool
}

// Result makes a write fill r with the server's report when it commits.
func Result(r *WriteResult) WriteOption {
	return func(o *writeOptions) { o.result = r }
}

// Put sets key to value and returns the version it committed. It returns
// after every other holder of a lease on key has dropped it or its lease
// has run out. With WithLease it attaches key to a TTL lease; without, it
// detaches key from any.
func (c *Client) Put(ctx context.Context, key string, value []byte, opts ...WriteOption) (uint64, error) {
	return c.write(ctx, protocol.OpPut, key, value, 0, 0, opts)
}

// Delete removes key and returns the version of the deletion.
func (c *Client) Delete(ctx context.Context, key string, opts ...WriteOption) (uint64, error) {
	return c.write(ctx, protocol.OpDelete, key, nil, 0, 0, opts)
}

// CompareAndSwap sets key to value if its version is still oldVersion (0:
// the key does not exist), and returns the new version. Otherwise it
// returns ErrVersionMismatch and changes nothing. Like Put, it attaches key
// to the TTL lease of WithLease, or detaches it from any.
func (c *Client) CompareAndSwap(ctx context.Context, key string, oldVersion uint64, value []byte, opts ...WriteOption) (uint64, error) {
	return c.write(ctx, protocol.OpCAS, key, value, oldVersion, 0, opts)
}

// write performs a write. The client's own cached entry is dropped before
// the request is sent, so that no goroutine of this client reads the old
// value after another client could have read the new one; the committed
// value is cached afterwards under the fresh lease the reply carries.
//
// While the client is disconnected, the write waits for it to reconnect,
// within ctx. A write whose connection is lost before its reply is sent
// again on the next session, with the same request ID, so the server
// applies it once (protocol.Hello.ClientID). Both waits last at most half
// the server's retry window, which bounds a wait with a context that
// never ends.
//
// A write under a write lease (token not 0) is never sent twice: if its
// connection is lost before the reply, it fails and its outcome is
// unknown. One begun while the client is disconnected waits for the next
// session while the lease may still live on the server, which keeps it
// about its term past its last renewal: until the lease's deadline plus ε
// on the client's clock (writeOptions.leaseUntil), if that comes before
// the retry bound. (A restarted server keeps it until the restart's
// horizon, which may be later; the client does not know it.) The server
// then decides by the token: the write commits if the lease is still the
// live one, and fails with ErrFenced otherwise.
//
// If ctx ends before the write commits, the write is abandoned and the
// error wraps ErrCanceled; if the server cannot say, the error wraps
// ErrUnavailable and the outcome is unknown. A write that was never sent
// changed nothing, and its error says so.
func (c *Client) write(ctx context.Context, op protocol.WriteOp, key string, value []byte, expect, token uint64, opts []WriteOption) (uint64, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	var o writeOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.checkLease(op); err != nil {
		return 0, err
	}
	cn, err := c.conn()
	if err != nil && !errors.Is(err, ErrClosed) {
		// Wait for the client to reconnect; the last session's settings
		// bound the wait, and so does the write lease the write is made
		// under, if any.
		until, why := c.clock.Now().Add(c.retryWindow()/2), "not sent"
		if !o.leaseUntil.IsZero() && o.leaseUntil.Before(until) {
			until, why = o.leaseUntil, "not sent before the write lease could have run out"
		}
		cn, err = c.awaitConn(ctx, until)
		if err != nil && !errors.Is(err, ErrClosed) {
			err = fmt.Errorf("%w; the write was %s: nothing changed", err, why)
			if ctx.Err() != nil {
				err = fmt.Errorf("%w: %w", ErrCanceled, err)
			}
		}
	}
	if err != nil {
		return 0, err
	}
	if max := cn.hello.MaxValueSize; max > 0 && len(value) > max {
		return 0, fmt.Errorf("%w: value of %d bytes, limit %d", ErrTooLarge, len(value), max)
	}
	value = append([]byte(nil), value...)
	id := c.newWriteID()
	req := &protocol.Write{ID: id, Op: op, Key: []byte(key), Value: value, Expect: expect, Token: token, Lease: uint64(o.lease)}
	defer c.endWrite(id)
	var retryUntil time.Time // set once the write may have reached a server
	for {
		if dl, ok := ctx.Deadline(); ok {
			if req.Timeout = time.Until(dl); req.Timeout <= 0 {
				err := fmt.Errorf("%w: %w", ErrCanceled, context.DeadlineExceeded)
				if !retryUntil.IsZero() {
					err = fmt.Errorf("%w: the write was sent before its connection was lost and may or may not have committed: %w", ErrUnavailable, context.DeadlineExceeded)
				}
				return 0, err
			}
		}
		req.Acked = c.beginWrite(id)
		f, sent, _, ch, err := c.send(cn, key, req, true)
		var m protocol.Message
		lost := err != nil
		if err == nil {
			m, lost, err = cn.awaitWrite(ctx, id, ch)
		}
		if e, ok := m.(*protocol.Error); ok && e.Code == protocol.CodeNotLeader {
			// The node stopped leading while it committed the write: the
			// next leader may apply it or not. The session is of no more
			// use; the next one is with the new leader.
			err = fmt.Errorf("%w: %s; the write may or may not have committed", ErrUnavailable, e.Message)
			cn.fail(err)
			m, lost = nil, true
		}
		if err != nil {
			c.endFetch(key, f)
			if retryUntil.IsZero() {
				retryUntil = c.clock.Now().Add(cn.hello.RetryWindow / 2)
			} else if errors.Is(err, ErrCanceled) {
				// This attempt was abandoned, but an earlier one may
				// have committed.
				err = fmt.Errorf("%w: the write was sent before its connection was lost and may or may not have committed: %w", ErrUnavailable, err)
			}
			if !lost || token != 0 || cn.hello.RetryWindow == 0 || ctx.Err() != nil {
				return 0, err
			}
			c.log.Debug("write lost with its connection; sending it again on the next session", "key", key, "id", id, "err", err)
			if cn, err = c.awaitConn(ctx, retryUntil); err != nil {
				return 0, fmt.Errorf("%w; the write was sent before and may or may not have committed", err)
			}
			continue
		}
		r, ok := m.(*protocol.WriteReply)
		if !ok {
			c.endFetch(key, f)
			return 0, unexpected(m)
		}
		c.fill(key, f, value, r.Version, op != protocol.OpDelete, sent.Add(r.Term), r.Term, c.monoNow())
		if o.result != nil {
			*o.result = WriteResult{Version: r.Version, Waited: r.Waited, Holders: r.Holders, Term: r.Term, Replayed: r.Duplicate}
		}
		return r.Version, nil
	}
}

// retryWindow returns the retry window of the client's last session.
func (c *Client) retryWindow() time.Duration {
	if h := c.lastHello.Load(); h != nil {
		return h.RetryWindow
	}
	return 0
}

// invalidate drops keys from the cache before the client acknowledges, and
// poisons reads of them in flight. The notice reader calls it with the time
// the invalidation arrived.
//
// The acknowledgement goes out under c.smu, so that a read begun after the
// invalidation reaches the server after the acknowledgement: otherwise the
// acknowledgement could relinquish the lease that read is granted, and the
// read's answer would be cached without a lease behind it. Reads begun
// before are poisoned, and their record is dropped so that later reads
// start a clean one. The cost: an acknowledgement waits behind a request
// that is being written, such as a large Put held up by flow control, and
// behind the holders of c.imu. The writer waits for it meanwhile, so an
// acknowledgement held up for longer than slowAck is logged. That clock
// read, between dropping the entries and acknowledging, is where
// TestAckAfterReRead holds the notice reader through Config.Clock.
func (c *Client) invalidate(cn *conn, keys [][]byte, arrived time.Time) error {
	c.smu.Lock()
	defer c.smu.Unlock()
	c.imu.Lock()
	for _, k := range keys {
		if f := c.fetches[string(k)]; f != nil {
			f.poisoned = true
			delete(c.fetches, string(k))
		}
		c.cache.Remove(string(k))
	}
	c.imu.Unlock()
	if held := c.clock.Now().Sub(arrived); held > slowAck {
		c.log.Warn("acknowledgement of an invalidation held up", "keys", len(keys), "held", held)
	}
	return cn.write(&protocol.Ack{Keys: keys})
}

// slowAck is how long an acknowledgement may be held up in the client
// before it is logged.
const slowAck = 100 * time.Millisecond

// relinquish queues keys whose leases the client gives up, for the next
// batched release.
func (c *Client) relinquish(keys []string) {
	if len(keys) == 0 {
		return
	}
	c.rmu.Lock()
	c.toRelease = append(c.toRelease, keys...)
	c.rmu.Unlock()
}

// ServerStats returns the server's counters.
func (c *Client) ServerStats(ctx context.Context) (*Stats, error) {
	cn, err := c.conn()
	if err != nil {
		return nil, err
	}
	m, err := cn.call(ctx, &protocol.Stats{})
	if err != nil {
		return nil, err
	}
	st, ok := m.(*protocol.StatsReply)
	if !ok {
		return nil, unexpected(m)
	}
	return st, nil
}

// Close drops the cache, relinquishes every lease of the session, and
// closes the connection. It waits for the client's goroutines to end.
// TTL leases are not revoked: the client stops keeping them alive (their
// KeepAlive channels close, and their Sessions are done), and they run out
// after their TTL unless another client keeps them alive.
func (c *Client) Close() error {
	c.imu.Lock()
	if c.closed {
		c.imu.Unlock()
		return nil
	}
	c.closed = true
	c.cache.Clear()
	c.imu.Unlock()
	c.cancel()
	if cn := c.cur.Swap(nil); cn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		cn.call(ctx, &protocol.Goodbye{})
		cancel()
		cn.close()
	}
	c.dropWriteLeases()
	c.wg.Wait()
	c.endKept()
	if c.tr != nil {
		c.tr.Close()
	}
	return nil
}

// emit queues an event for OnEvent. If the application falls far behind,
// events are dropped and logged rather than blocking the client.
func (c *Client) emit(ev Event) {
	if c.cfg.OnEvent == nil {
		return
	}
	select {
	case c.events <- ev:
	default:
		c.log.Warn("event dropped: OnEvent is too slow", "event", ev.Kind.String())
	}
}

func (c *Client) deliverEvents() {
	defer c.wg.Done()
	for {
		select {
		case ev := <-c.events:
			c.cfg.OnEvent(ev)
		case <-c.ctx.Done():
			return
		}
	}
}

// supervise watches the connection and reconnects, with backoff, when it
// is lost. Cached entries keep being served until their leases run out.
func (c *Client) supervise(cn *conn) {
	defer c.wg.Done()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-cn.done:
		}
		if !c.cur.CompareAndSwap(cn, nil) {
			return // closed
		}
		c.log.Warn("connection lost", "addr", c.endpoint(), "err", cn.err)
		c.wg.Add(1) // this goroutine is counted, so the count is above zero
		go func(cn *conn) { defer c.wg.Done(); cn.close() }(cn)
		c.emit(Event{Kind: EventDisconnected, Err: cn.err})
		c.dropWriteLeases()
		delay := 50 * time.Millisecond
		for {
			ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
			next, err := dial(ctx, c)
			cancel()
			if err == nil {
				cn = next
				break
			}
			if c.ctx.Err() != nil {
				return
			}
			c.log.Debug("reconnect failed", "addr", c.endpoint(), "err", err, "retry_in", delay)
			select {
			case <-c.ctx.Done():
				return
			case <-c.clock.After(delay):
			}
			delay = min(2*delay, c.cfg.MaxReconnectDelay)
		}
		if !c.connected(cn) {
			cn.close()
			return
		}
		if c.ctx.Err() != nil {
			// Close ran between the dial and the swap: it found no
			// connection to close, so this goroutine closes it.
			if c.cur.CompareAndSwap(cn, nil) {
				cn.close()
			}
			return
		}
		c.log.Info("reconnected", "addr", c.endpoint(), "session", cn.hello.SessionID)
		c.emit(Event{Kind: EventReconnected})
	}
}

// maintain renews leases of entries read during their term, releases
// evicted entries in batches, and reports expired leases. It wakes every
// eighth of the shortest term granted so far, or of the server's default
// term.
func (c *Client) maintain() {
	defer c.wg.Done()
	var renew []*Entry
	var expired []string
	for {
		term := DefaultTermFallback
		if cn := c.cur.Load(); cn != nil && cn.hello.DefaultTerm > 0 {
			term = cn.hello.DefaultTerm
		}
		if m := time.Duration(c.minTerm.Load()); m > 0 && m < term {
			term = m // some keys have shorter terms (per-prefix terms)
		}
		select {
		case <-c.ctx.Done():
			return
		case <-c.clock.After(max(term/8, time.Millisecond)):
		}
		now := c.clock.Now()
		horizon := now.Add(time.Duration(float64(term) * (1 - c.cfg.RenewFraction)))
		renew = c.cache.TakeRenewals(now, horizon, renew[:0])
		c.renew(renew, now, horizon)
		c.flushReleases()
		if expired = c.cache.Expired(now, expired[:0]); len(expired) > 0 {
			c.emit(Event{Kind: EventLeasesExpired, Keys: append([]string(nil), expired...)})
		}
	}
}

// Entry is a cache entry, as handed to the renewal.
type Entry = cache.Entry

// DefaultTermFallback paces the maintenance loop before a session tells
// the client the server's term.
const DefaultTermFallback = 10 * time.Second

// renew extends, in batches, the leases of entries and of the write leases
// that fall due before horizon. A lease is extended from now, when the
// renewal was decided, and only if it has not run out by the time the reply
// comes.
func (c *Client) renew(entries []*Entry, now, horizon time.Time) {
	cn := c.cur.Load()
	if cn == nil {
		return
	}
	wls := c.writeLeasesDue(horizon)
	if len(entries) == 0 && len(wls) == 0 {
		return
	}
	keys := make([][]byte, 0, len(entries)+len(wls))
	for _, e := range entries {
		keys = append(keys, []byte(e.Key()))
	}
	for _, wl := range wls {
		keys = append(keys, []byte(wl.key))
	}
	ctx, cancel := context.WithTimeout(c.ctx, max(horizon.Sub(now), time.Second))
	defer cancel()
	first := 0
	for _, batch := range protocol.SplitKeys(keys, cn.batchLimit()) {
		m, err := cn.call(ctx, &protocol.Renew{Keys: batch})
		if err != nil {
			c.log.Debug("renewal failed", "keys", len(batch), "err", err)
			return
		}
		r, ok := m.(*protocol.RenewReply)
		if !ok || len(r.Terms) != len(batch) {
			c.log.Warn("bad renewal reply", "err", unexpected(m))
			return
		}
		at := c.clock.Now()
		for i, t := range r.Terms {
			if t <= 0 {
				continue
			}
			if n := first + i; n < len(entries) {
				c.cache.Extend(entries[n], at, now.Add(t))
			} else {
				wls[n-len(entries)].extend(at, now.Add(t))
			}
		}
		first += len(batch)
	}
}

// flushReleases relinquishes, in batches, the leases of evicted entries.
// A key that is cached again, or has a request in flight, keeps its lease:
// the release names a key, not a grant, so it would also end the lease of
// the newer answer. The releases go out under c.smu, so a read begun after
// the check reaches the server after the release.
func (c *Client) flushReleases() {
	c.rmu.Lock()
	queued := c.toRelease
	c.toRelease = nil
	c.rmu.Unlock()
	cn := c.cur.Load()
	if len(queued) == 0 || cn == nil {
		return
	}
	c.smu.Lock()
	keys := make([][]byte, 0, len(queued))
	seen := make(map[string]bool, len(queued))
	c.imu.Lock()
	for _, k := range queued {
		f := c.fetches[k] // ended but not yet dropped if n is 0 (see endFetch)
		if _, _, cached := c.cache.Peek(k); cached || (f != nil && f.n.Load() > 0) || seen[k] {
			continue
		}
		seen[k] = true
		keys = append(keys, []byte(k))
	}
	c.imu.Unlock()
	var calls []uint64
	var chans []chan protocol.Message
	for _, batch := range protocol.SplitKeys(keys, cn.batchLimit()) {
		id, ch, err := cn.start(&protocol.Release{Keys: batch})
		if err != nil {
			break
		}
		calls, chans = append(calls, id), append(chans, ch)
	}
	c.smu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
	defer cancel()
	for i := range calls {
		if _, err := cn.await(ctx, calls[i], chans[i]); err != nil {
			c.log.Debug("release failed", "err", err)
		}
	}
}
