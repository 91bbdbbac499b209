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
// keeps one lease alive and says when it is lost. A lease is not tied to
// the session that granted it. Without an access policy on the server, any
// client may keep alive, attach keys to, or revoke any lease, as in etcd.
// Under one (DESIGN §15), TTL leases need the ttl-lease right, and a lease
// belongs to the client certificate that granted it: only a client with
// that certificate, or with the admin right, may keep it alive, attach
// keys to it, look it up or revoke it, each time with the policy's rights
// on the keys concerned (ttl-lease, and write to attach or revoke).
// Another client gets ErrPermissionDenied, and a lease it keeps alive is
// lost. A lease granted without a certificate has no owner: it is
// anyone's.
//
// A Client is safe for concurrent use by many goroutines.
package client

import (
	"context"
	"crypto/tls"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/cache"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/protocol"
)

// Client is a connection to a leased server with a local lease cache. See
// the package comment.
//
// Lock order. Where a goroutine holds more than one of the client's locks,
// it takes them in this order, and never the other way round:
//
//	smu → imu → the cache's own lock
//	suspend's lock → imu, suspend's lock → wmu  (dropAfterSuspend)
//	smu → conn.pmu, smu → conn.wmu   (a request, acknowledgement or release written under smu)
//	wmu → WriteLease.mu
//
// imu is never held while taking smu, wmu, rmu or a conn's lock; wmu is
// never held together with smu or imu; notices.mu (taken under smu when
// an invalidation is applied), rmu, kmu, xmu, ncmu, conn.pmu,
// conn.wmu and WriteLease.mu are leaves, under which no other lock of the
// client is taken. Code that needs two of the unordered ones (wmu and imu,
// say) releases the first before it takes the second. Under smu and
// WriteLease.mu the client reads its clock, which a test's clock may make
// wait; a wait there must not need one of those locks.
type Client struct {
	cfg Config
	// endpoints are the addresses Dial was given; addr is the one of the
	// current or last session, which dials try first.
	endpoints []string
	addr      atomic.Pointer[string]
	learned   learnedAddrs    // the cluster's client addresses, learned (connect.go)
	tlsConf   *tls.Config     // ServerName empty: each endpoint's host
	tr        *quic.Transport // over Config.PacketConn; nil: a socket per connection
	clock     clock.Clock
	log       *slog.Logger
	cache     *cache.Cache

	base     time.Time // a reading of clock at Dial, for monoNow
	sysClock bool      // clock is the system clock
	// suspend notices, before a cached read is served, that the machine
	// slept: it then drops every cached lease (dropAfterSuspend). Its
	// lock is taken before imu, and never under another lock.
	suspend *clock.SuspendWatch

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

	imu     sync.Mutex // guards fetches, listings, listFetches and closed, and orders cache fills against invalidations; after smu
	fetches map[string]*fetch
	closed  bool
	// listings are the listings cached under prefix leases, and
	// listFetches the Lists of them in flight (listcache.go).
	listings    map[string]*listing
	listFetches map[string]*fetch

	// smu is held from beginning a read's or write's fetch record until its
	// request is on the stream, so that requests reach the server in the
	// order their records were begun (see beginWriteFetch). It is taken
	// first of the client's locks.
	smu sync.Mutex

	wmu          sync.Mutex // guards wleases, acquiring and earlyRecalls; before WriteLease.mu, never with smu or imu
	notices      notices    // waiters for invalidations (notify.go); its lock is a leaf
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

// Stats are the server's counters, as returned by ServerStats.
type Stats = protocol.StatsReply

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
	c.dropAllListings()
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
