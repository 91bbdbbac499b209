package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/cache"
)

// ConnectionInfo describes the client's current connection to the server,
// and the session the server holds on it (DESIGN §6). Connection returns
// it.
type ConnectionInfo struct {
	// ID is the server's id of the session on this connection: a new one
	// on each connection, which takes over the leases of the last.
	ID           uint64
	Epsilon      time.Duration
	DefaultTerm  time.Duration
	MaxValueSize int
	// ServerVersion is the server's build, as its hello reply gave it;
	// empty from a server that does not send it.
	ServerVersion string
	// Addr is the address of the node of the session: one given to Dial,
	// or, in a cluster, one the client learned (DESIGN §13).
	Addr string
}

// Dial connects to the server at addr ("host:port") and opens a session.
// addr may list the nodes of a cluster, separated by commas
// ("a:7400,b:7400,c:7400"): Dial, and every reconnection, finds the node
// that leads, following a node's answer that another one leads (DESIGN
// §13); while none leads, Dial tries them again, with backoff, until ctx
// ends. An invalid cfg (see Config.Validate) or address is an error
// wrapping ErrInvalidArgument. A server certificate that does not verify
// is an error that says what to change (the CA to trust, or the name to
// dial), and still wraps the x509 or tls error.
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
		listings:     make(map[string]*listing),
		listFetches:  make(map[string]*fetch),
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
	c.suspend = newSuspendWatch(c, sysClock, cfg.Clock)
	if cfg.PacketConn != nil {
		c.tr = &quic.Transport{Conn: cfg.PacketConn}
	}
	cn, err := dial(ctx, c)
	if err != nil {
		if c.tr != nil {
			c.tr.Close()
		}
		return nil, certHint(err, cfg)
	}
	c.cur.Store(cn)
	c.lastHello.Store(cn.hello)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.wg.Add(5)
	go c.supervise(cn)
	go c.maintain()
	go c.deliverEvents()
	go c.keepAlives()
	go c.syncMembers()
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

// learnedAddrs are the client addresses a Client learned from its cluster
// (DESIGN §13): from the member list (syncMembers) and from the leaders
// that nodes named. Dials try them beside the endpoints given to Dial.
// Its zero value is empty and ready; mu is a leaf.
type learnedAddrs struct {
	mu    sync.Mutex
	addrs []string // in the order learned; none of Client.endpoints
	// cluster: a node refused a session because it does not lead, or the
	// client was given several endpoints: syncMembers asks at once.
	cluster bool
}

// learn adds addr, which a node of the cluster named, to the learned
// addresses, and notes that the server is a cluster.
func (c *Client) learn(addr string) {
	c.learned.mu.Lock()
	defer c.learned.mu.Unlock()
	c.learned.cluster = true
	if !slices.Contains(c.endpoints, addr) && !slices.Contains(c.learned.addrs, addr) {
		c.learned.addrs = append(c.learned.addrs, addr)
	}
}

// dialAddrs returns the addresses a dial tries: the endpoints given to
// Dial, then the learned ones.
func (c *Client) dialAddrs() []string {
	c.learned.mu.Lock()
	defer c.learned.mu.Unlock()
	return append(slices.Clip(c.endpoints), c.learned.addrs...)
}

// syncMembers keeps the learned addresses current: it asks the node of
// the current session for the cluster's members, in an admin session, and
// learns the client addresses the list gives, replacing those it learned
// before (Config.MemberSyncInterval). It asks every interval, and after
// each new session once the client knows its server is a node of a
// cluster; it stops when the server says it is not one. Dial starts it;
// it ends with the client.
func (c *Client) syncMembers() {
	defer c.wg.Done()
	if c.cfg.MemberSyncInterval < 0 {
		return
	}
	c.learned.mu.Lock()
	due := c.learned.cluster || len(c.endpoints) > 1
	c.learned.mu.Unlock()
	for {
		c.ncmu.Lock()
		changed := c.newConn
		c.ncmu.Unlock()
		if due && c.cur.Load() != nil {
			if !c.syncOnce() {
				return
			}
		}
		t := c.clock.NewTimer(c.cfg.MemberSyncInterval)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return
		case <-changed:
			c.learned.mu.Lock()
			due = c.learned.cluster || len(c.endpoints) > 1
			c.learned.mu.Unlock()
		case <-t.Chan():
			due = true
		}
		t.Stop()
	}
}

// memberSyncWait bounds one question of syncMembers.
const memberSyncWait = 5 * time.Second

// syncOnce asks the node of the current session for the members, and
// learns their client addresses. It reports false if the node is not one
// of a cluster (a server alone lists one member with no peer address), so
// that there is nothing to sync.
func (c *Client) syncOnce() bool {
	addr := c.endpoint()
	ctx, cancel := context.WithTimeout(c.ctx, memberSyncWait)
	defer cancel()
	adm, err := dialAdmin(ctx, c.tr, c.tlsConf, addr, c.cfg)
	if err != nil {
		c.log.Debug("member sync: no admin session", "addr", addr, "err", err)
		return true
	}
	defer adm.Close()
	ms, err := adm.Members(ctx)
	if err != nil {
		c.log.Debug("member sync failed", "addr", addr, "err", err)
		return true
	}
	if len(ms) == 1 && ms[0].PeerAddr == "" {
		return false
	}
	var addrs []string
	known := false
	for _, m := range ms {
		known = known || m.ClientAddr != ""
		if m.ClientAddr == "" || slices.Contains(c.endpoints, m.ClientAddr) || slices.Contains(addrs, m.ClientAddr) {
			continue
		}
		if _, _, err := net.SplitHostPort(m.ClientAddr); err != nil {
			continue
		}
		addrs = append(addrs, m.ClientAddr)
	}
	c.learned.mu.Lock()
	c.learned.cluster = true
	if known { // an older server gives no client addresses
		c.learned.addrs = addrs
	}
	c.learned.mu.Unlock()
	c.log.Debug("member sync", "addr", addr, "members", len(ms), "learned", addrs)
	return true
}

// Connection returns the current connection to the server, and false while
// disconnected. (A Session, from NewSession, is a TTL lease kept alive, as
// etcd's concurrency.Session is.)
func (c *Client) Connection() (ConnectionInfo, bool) {
	cn := c.cur.Load()
	if cn == nil {
		return ConnectionInfo{}, false
	}
	h := cn.hello
	return ConnectionInfo{ID: h.SessionID, Epsilon: h.Epsilon, DefaultTerm: h.DefaultTerm, MaxValueSize: h.MaxValueSize,
		ServerVersion: h.ServerVersion, Addr: cn.addr}, true
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
		c.sessionLost() // write leases stay held: the next session adopts them
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

// nextConn waits, as awaitConn does, for a connection other than old,
// whose session was lost: the client may not have dropped it yet.
func (c *Client) nextConn(ctx context.Context, old *conn, until time.Time) (*conn, error) {
	for {
		c.ncmu.Lock()
		changed := c.newConn
		c.ncmu.Unlock()
		cn, err := c.awaitConn(ctx, until)
		if err != nil || cn != old {
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
		case <-ctx.Done():
		case <-t.Chan():
		}
		t.Stop()
	}
}
