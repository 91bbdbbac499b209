package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"time"

	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/diskguard"
	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/internal/tlsfiles"
	"github.com/leased/leased/node"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// Defaults of Config.
const (
	DefaultDir          = layout.DefaultDir
	DefaultAddr         = "127.0.0.1:7400"
	DefaultLeaseTerm    = 10 * time.Second
	DefaultEpsilon      = 100 * time.Millisecond
	DefaultMaxValueSize = 1 << 20
	// MaxValueSizeLimit bounds Config.MaxValueSize: a value is applied in
	// one log entry and one database transaction, and an entry of a 64 MiB
	// value, with its key and framing, is over the database's limit.
	MaxValueSizeLimit  = 63 << 20
	DefaultMaxInflight = 4096
	// DefaultMaxSessions is the default of Config.MaxSessions. An idle
	// session costs the server about 75 KB (BenchmarkIdleSessionMemory;
	// most of it quic-go's state of the connection), so 50,000 hold under
	// 4 GB.
	DefaultMaxSessions = 50_000
	DefaultIdleTimeout = 30 * time.Second
	// DefaultMaxInflightBytes is the default of Config.MaxInflightBytes.
	DefaultMaxInflightBytes = 64 << 20
	// DefaultHelloTimeout is the default of Config.HelloTimeout.
	DefaultHelloTimeout = 10 * time.Second
	// DefaultRetryWindow is the default of Config.RetryWindow.
	DefaultRetryWindow = 5 * time.Minute
	// DefaultMaxLeasesPerSession is the default of
	// Config.MaxLeasesPerSession: twice the client library's default cache
	// (client.DefaultCacheEntries, 100,000 entries), so that a client with
	// that cache never meets it, even while releases of evicted entries
	// are on their way.
	DefaultMaxLeasesPerSession = 200_000
	// DefaultMaxLeases is the default of Config.MaxLeases: about 4 GB of
	// leases at their cost today.
	DefaultMaxLeases = 5_000_000
	// DefaultMaxWriteLeasesPerSession is the default of
	// Config.MaxWriteLeasesPerSession.
	DefaultMaxWriteLeasesPerSession = 10_000
	// DefaultMaxTotalInflightBytes is the default of
	// Config.MaxTotalInflightBytes: 1 GiB, sixteen sessions at their
	// default MaxInflightBytes.
	DefaultMaxTotalInflightBytes = 1 << 30
	// DefaultFrameTimeout is the default of Config.FrameTimeout: a frame
	// of the default largest value (1 MiB) must arrive at 35 KB/s at
	// least.
	DefaultFrameTimeout = 30 * time.Second
	// DefaultMaxSessionsPerAddr is the default of Config.MaxSessionsPerAddr:
	// a fiftieth of DefaultMaxSessions, so that one address, a hostile
	// client's, takes at most 2% of the sessions and about 75 MB.
	DefaultMaxSessionsPerAddr = 1000
	// DefaultMaxFrameBytesPerAddr is the default of
	// Config.MaxFrameBytesPerAddr: a sixteenth of the default
	// MaxTotalInflightBytes, and room for a frame of the largest value
	// MaxValueSize may allow (63 MiB).
	DefaultMaxFrameBytesPerAddr = 64 << 20
	// DefaultRetryHandshakes is the default of Config.RetryHandshakes.
	DefaultRetryHandshakes = 128
	// MaxKeySize is the largest key, in bytes. Keys are 1 to MaxKeySize bytes.
	MaxKeySize = protocol.MaxKeySize
)

// Bounds of Config's durations, checked by Validate. They keep every sum
// the server forms from them (a term plus ε plus the horizon step, a
// deadline) far from time.Duration's limit; see package core for why each
// is as long as a user could want.
const (
	// MaxLeaseTerm is the longest LeaseTerm and PrefixTerms term.
	MaxLeaseTerm = core.MaxLeaseTerm
	// MaxEpsilon is the largest Epsilon.
	MaxEpsilon = core.MaxEpsilon
	// MinHorizonStep and MaxHorizonStep bound HorizonStep.
	MinHorizonStep = 10 * time.Millisecond
	MaxHorizonStep = core.MaxHorizonStep
	// MaxRetryWindow is the longest RetryWindow.
	MaxRetryWindow = core.MaxRetryWindow
	// MaxIdleTimeout is the longest IdleTimeout: a client that vanished
	// holds its session, and a place among MaxSessions, this long.
	MaxIdleTimeout = time.Hour
	// MaxHelloTimeout is the longest HelloTimeout: a connection that never
	// says hello holds a place this long.
	MaxHelloTimeout = 5 * time.Minute
)

// Config configures a Server. The zero value of every field means its
// default.
type Config struct {
	// Dir is the data folder: the database and, unless TLSConfig is set,
	// the self-signed TLS files under Dir/tls. Default DefaultDir.
	Dir string
	// Addr is the UDP address to listen on. Default DefaultAddr; port 0
	// picks a free port (see Server.Addr).
	Addr string
	// LeaseTerm is the term of read and write leases, at most
	// MaxLeaseTerm (1 h). Default DefaultLeaseTerm.
	LeaseTerm time.Duration
	// PrefixTerms set other terms for keys under some prefixes; the longest
	// matching prefix wins, and other keys get LeaseTerm. Each term is 0 to
	// MaxLeaseTerm. Nil means none.
	PrefixTerms []PrefixTerm
	// Epsilon is the clock allowance ε: a lease of term t is live on the
	// server until t+ε after it was granted. At most MaxEpsilon (1 min).
	// Default DefaultEpsilon.
	Epsilon time.Duration
	// MaxValueSize is the largest value, in bytes. Default
	// DefaultMaxValueSize (1 MiB). A value is replicated whole: one larger
	// than raft's suggested entry (512 KiB) goes in a log entry of its own,
	// so a limit far above the default makes large writes slow every write
	// behind them.
	MaxValueSize int
	// MaxInflight is how many requests one connection may have waiting for
	// a reply. Default DefaultMaxInflight.
	MaxInflight int
	// MaxInflightBytes is how many bytes of keys and values the writes of
	// one connection may hold in the server while they wait for holders and
	// commit; a write past it is refused with a resource-exhausted error.
	// It bounds a session's memory, which MaxInflight times MaxValueSize
	// would not. It must be at least MaxValueSize plus MaxKeySize. Zero
	// means DefaultMaxInflightBytes, or that sum if it is larger.
	MaxInflightBytes int
	// RetryWindow is how long after a client's last write the server keeps
	// the outcomes of its writes, so that a write the client sends again
	// within it, after it lost the reply, is applied once. At most
	// MaxRetryWindow (24 h). Default DefaultRetryWindow.
	RetryWindow time.Duration
	// UnsafeSkipHorizonWait makes the server write at once after a start
	// or a failover, breaking the promise of the leases granted before
	// (core.Config.UnsafeSkipHorizonWait). Only the negative control of
	// the linearizability tests sets it.
	UnsafeSkipHorizonWait bool
	// HotPrefixWrites is how many writes under a prefix within its term
	// keep it from being leased for a term after the last (DESIGN §3.9):
	// a prefix written that often makes every write under it wait for its
	// holders for little gain. Zero means 2; negative, never.
	HotPrefixWrites int
	// UnsafeWatchFault makes the watches of the server break their
	// promise: "skip" leaves out one event of every fifth frame of events
	// a watch sends, "repeat" sends the last event of every fifth such
	// frame twice. Only the
	// negative controls of the watch checker in the linearizability tests
	// set it; empty, the default, keeps the promise.
	UnsafeWatchFault string
	// UnsafeNoPrefixRecall makes the server grant prefix leases that no
	// write recalls (core.Config.UnsafeNoPrefixRecall). Only the negative
	// control of the linearizability tests sets it.
	UnsafeNoPrefixRecall bool
	// UnsafeLockSteal makes the server grant a waiting acquisition over a
	// lock that is still held (core.Config.UnsafeLockSteal). Only the
	// negative control of the linearizability tests sets it.
	UnsafeLockSteal bool
	// MaxTotalInflightBytes is how many bytes of keys and values the
	// waiting writes of all sessions together may hold in the server: the
	// server-wide budget beside each session's MaxInflightBytes. A write
	// past it is refused with a resource-exhausted error that names it;
	// its bytes return to the budget when the write is answered, whatever
	// the answer. Request frames of more than 4 KiB count against it too
	// while they arrive, by the buffer each holds, which grows with the
	// bytes that came: a frame it cannot take is read to its end and
	// discarded, and its request refused with a resource-exhausted error
	// naming it; the session goes on. It must be at least the largest
	// frame, MaxValueSize plus MaxKeySize plus 1 KiB. Zero means
	// DefaultMaxTotalInflightBytes (1 GiB), or MaxInflightBytes if that is
	// larger.
	MaxTotalInflightBytes int64
	// MaxFrameBytesPerAddr is how many bytes the request frames still
	// arriving on the sessions of one client IP address (as
	// MaxSessionsPerAddr counts them) may hold together, counted as for
	// MaxTotalInflightBytes: a frame past it is refused in the same way,
	// so that one address cannot take the server's budget with frames it
	// never finishes. It must be at least the largest frame (MaxValueSize
	// plus MaxKeySize plus 1 KiB). Zero means DefaultMaxFrameBytesPerAddr
	// (64 MiB).
	MaxFrameBytesPerAddr int64
	// MaxLeasesPerSession is how many read leases one session may hold at
	// once. A read that needs another is refused with a resource-exhausted
	// error (the client library's ErrResourceExhausted) naming the limit;
	// reads of keys the session holds, renewals, and reads served without
	// a lease (term 0) go on, and a writer past it gets no fresh lease on
	// what it wrote. A lease costs the server about 800 bytes, so the
	// default bounds a session's leases to about 160 MB. Zero means
	// DefaultMaxLeasesPerSession (200,000).
	MaxLeasesPerSession int
	// MaxLeases is how many read leases all sessions together may hold at
	// once, refused in the same way past it, so that the sessions'
	// caps together (MaxSessions times MaxLeasesPerSession) do not bound
	// the server's memory alone. Zero means DefaultMaxLeases (5,000,000).
	// The lease table keeps the storage of its peak after a burst, about
	// 85 bytes a lease, for later leases to reuse (DESIGN §9).
	MaxLeases int
	// MaxWriteLeasesPerSession is how many write leases one session may
	// hold at once; an acquisition of another is refused with a
	// resource-exhausted error naming the limit. Every grant is written
	// to the log, so the cap bounds what one session makes the server
	// keep. Zero means DefaultMaxWriteLeasesPerSession (10,000).
	MaxWriteLeasesPerSession int
	// MaxSessions is how many sessions the server holds at once. Default
	// DefaultMaxSessions.
	MaxSessions int
	// MaxSessionsPerAddr is how many sessions the server holds at once
	// from one client IP address (loopback included): a connection past
	// it is refused with a resource-exhausted code naming the limit, so
	// that one client cannot take every session. Clients behind one NAT
	// share it. Zero means DefaultMaxSessionsPerAddr (1,000).
	MaxSessionsPerAddr int
	// HorizonStep is how far past the longest lease (the longest term plus
	// Epsilon) the server moves the lease horizon each time it persists it
	// (DESIGN §7). A longer step persists less often; a shorter one shortens
	// the wait for writes after a crash, which is at most the longest lease
	// plus the step. It must be from MinHorizonStep (10 ms) to
	// MaxHorizonStep (1 h). Zero means a quarter of the longest lease, and
	// at least 100 ms.
	HorizonStep time.Duration
	// IdleTimeout closes a connection that has been silent this long.
	// Clients send keep-alives well within it. At most MaxIdleTimeout
	// (1 h). Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// HelloTimeout bounds the opening and the end of a session: how long a
	// new connection may take to open its request stream and say hello, how
	// long a client may keep its connection open after goodbye, and how long
	// the server waits to hand its last replies to a client before it
	// closes a connection. At most MaxHelloTimeout (5 min). Default
	// DefaultHelloTimeout.
	HelloTimeout time.Duration
	// FrameTimeout bounds how long a request frame may take to arrive
	// once its first byte has: a client that sends part of a frame and
	// stalls has its session closed with a protocol error. A session may
	// stay silent between frames as long as IdleTimeout allows. Default
	// DefaultFrameTimeout.
	FrameTimeout time.Duration
	// RetryHandshakes is how many QUIC handshakes may be in progress
	// before the server asks each new connection attempt to prove its
	// source address first (a QUIC Retry, RFC 9000 §8.1.2), so that a
	// flood of handshakes from spoofed addresses costs the server no
	// connection state. The proof adds one round trip to those handshakes.
	// Zero means DefaultRetryHandshakes; negative means every connection
	// attempt must prove its address.
	RetryHandshakes int
	// History bounds the event history the leader keeps (DESIGN §16;
	// core.HistoryRetention): for each of its fields, zero means the
	// default and a negative value no bound.
	History core.HistoryRetention
	// QuotaBytes is the most bytes the data folder's database, raft log
	// and snapshots may occupy on disk; past it, writes are refused with
	// a resource-exhausted error (the NOSPACE alarm) until they occupy
	// less. Zero means diskguard.DefaultQuota (8 GiB); negative means no
	// quota. Unused with Store.
	QuotaBytes int64
	// ReserveBytes is how many bytes must stay free on the data folder's
	// file system: below it, writes are refused as past the quota, and
	// the server does not start. It covers what the database and the
	// log write by themselves (diskguard.DefaultReserve says how much
	// that is), so that a full disk refuses writes instead of crashing
	// the server. Zero means diskguard.DefaultReserve (512 MiB); negative
	// means no reserve. Unused with Store.
	ReserveBytes int64
	// DiskUsage, if set, measures the data folder instead of statfs and
	// a walk of its files: for tests that fill a disk by decree, and
	// embedders with their own accounting. Unused with Store.
	DiskUsage diskguard.Meter
	// MetricsListen, if set, is the TCP address of the operator's
	// listener: Prometheus metrics on /metrics, liveness on /healthz and
	// readiness on /readyz (a leader is known and the store takes
	// writes). Plain HTTP on a loopback address; HTTPS with the server's
	// certificate on any other. Empty: none.
	MetricsListen string
	// MetricsPprof serves Go's profiles on the operator's listener, under
	// /debug/pprof/. It needs MetricsListen.
	MetricsPprof bool
	// TTL bounds and paces TTL leases (DESIGN §14): the shortest and
	// longest TTL a grant may ask for (core.DefaultMinTTL, 5 s, and
	// core.DefaultMaxTTL, 24 h), the most TTL leases held at once
	// (core.DefaultMaxTTLLeases, 1,000,000), how often long leases are
	// checkpointed (lessor.DefaultCheckpointInterval, 5 min) and how
	// many expired leases are revoked per second at most
	// (lessor.DefaultMaxRevokesPerSecond, 1,000). In a cluster, the
	// minimum TTL must be at least three election timeouts, and is by
	// default: a lease must outlive a failover, during which no
	// keep-alive gets through.
	TTL core.TTLConfig
	// Store, if set, holds the server's state instead of a badger database
	// under Dir, for tests and embedders (store.NewMemory keeps it in
	// memory). The server owns it from New on: it closes it in Close, or in
	// New if New fails.
	Store store.Store
	// PacketConn, if set, is the socket the server serves QUIC on instead of
	// binding Addr: for example an in-memory network in tests. The caller
	// owns it and closes it after Close has returned.
	PacketConn net.PacketConn
	// Cluster, if set, makes the server one node of a replicated cluster:
	// it serves clients only while it leads. Store must then be nil. Nil
	// means a cluster of this node alone, with no peer port.
	Cluster *Cluster
	// TLSConfig, if set, is used instead of the self-signed files under Dir.
	// The server sets MinVersion to TLS 1.3 and NextProtos to protocol.ALPN.
	TLSConfig *tls.Config
	// TLSHosts are extra host names or IPs for the self-signed server
	// certificate, beside localhost, 127.0.0.1 and ::1. A wildcard is
	// allowed only as *.DOMAIN under a domain someone can own (not *.com
	// or *.co.uk); Validate refuses other hosts.
	TLSHosts []string
	// ClientCAs, if set, makes the server require of every client a
	// certificate signed by one of them (mutual TLS), such as those of
	// `leased cert create-client`; the certificate's CommonName is the
	// client's identity. Nil means clients present none, unless TLSConfig
	// asks for them itself (its ClientAuth and ClientCAs): a verified
	// certificate identifies a client either way.
	ClientCAs *x509.CertPool
	// PolicyFile, if set, is the access policy file (package auth): what
	// each client identity may do to which keys. Requests it does not
	// allow fail with a permission-denied error and change nothing.
	// Server.ReloadPolicy reads it again. It needs client certificates
	// (ClientCAs, or a TLSConfig that requires and verifies them). Empty
	// means no policy: every client may do everything.
	PolicyFile string
	// Clock reads time for every lease decision. Nil means the system clock.
	Clock clock.Clock
	// BootClock reads the machine's boot clock, with which a restart in the
	// same boot measures how long the server was down, whatever the wall
	// clock did meanwhile (core.Config.BootFile). Nil means the system's.
	BootClock clock.Boot
	// Logger receives the server's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
	if c.TTL.MinTTL == 0 && c.Cluster != nil {
		// A TTL lease must outlive a failover (see TTL).
		if f := c.Cluster.FailoverTTL(); f > 0 {
			c.TTL.MinTTL = max(core.DefaultMinTTL, f)
		}
	}
	c.TTL = c.TTL.WithDefaults()
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.LeaseTerm == 0 {
		c.LeaseTerm = DefaultLeaseTerm
	}
	if c.Epsilon == 0 {
		c.Epsilon = DefaultEpsilon
	}
	if c.MaxValueSize == 0 {
		c.MaxValueSize = DefaultMaxValueSize
	}
	if c.MaxInflight == 0 {
		c.MaxInflight = DefaultMaxInflight
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.RetryWindow == 0 {
		c.RetryWindow = DefaultRetryWindow
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = max(DefaultMaxInflightBytes, c.MaxValueSize+MaxKeySize)
	}
	if c.MaxTotalInflightBytes == 0 {
		c.MaxTotalInflightBytes = max(DefaultMaxTotalInflightBytes, int64(c.MaxInflightBytes))
	}
	if c.MaxFrameBytesPerAddr == 0 {
		c.MaxFrameBytesPerAddr = DefaultMaxFrameBytesPerAddr
	}
	if c.MaxLeasesPerSession == 0 {
		c.MaxLeasesPerSession = DefaultMaxLeasesPerSession
	}
	if c.MaxLeases == 0 {
		c.MaxLeases = DefaultMaxLeases
	}
	if c.MaxWriteLeasesPerSession == 0 {
		c.MaxWriteLeasesPerSession = DefaultMaxWriteLeasesPerSession
	}
	if c.MaxSessionsPerAddr == 0 {
		c.MaxSessionsPerAddr = DefaultMaxSessionsPerAddr
	}
	if c.QuotaBytes == 0 {
		c.QuotaBytes = diskguard.DefaultQuota
	}
	if c.ReserveBytes == 0 {
		c.ReserveBytes = diskguard.DefaultReserve
	}
	if c.HelloTimeout == 0 {
		c.HelloTimeout = DefaultHelloTimeout
	}
	if c.FrameTimeout == 0 {
		c.FrameTimeout = DefaultFrameTimeout
	}
	if c.RetryHandshakes == 0 {
		c.RetryHandshakes = DefaultRetryHandshakes
	}
	if c.HorizonStep == 0 {
		c.HorizonStep = max((c.coreConfig().MaxTerm()+c.Epsilon)/4, 100*time.Millisecond)
	}
	c.Clock = clock.OrReal(c.Clock)
	c.BootClock = clock.OrRealBoot(c.BootClock)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks c as New does: it applies the defaults first, so that a
// zero field, which means its default, is valid, and then checks every
// field against its bounds and against the fields it depends on: the
// durations against their bounds (LeaseTerm, PrefixTerms, Epsilon,
// HorizonStep, RetryWindow, IdleTimeout, HelloTimeout, FrameTimeout, the
// TTL bounds and, for a node of a cluster, Cluster.Replica's raft
// timeouts, also against each other), MaxValueSize against
// MaxValueSizeLimit, MaxInflightBytes against MaxValueSize plus
// MaxKeySize, MaxTotalInflightBytes and MaxFrameBytesPerAddr against the
// largest frame (that plus 1 KiB), TTL.MinTTL against TTL.MaxTTL and, in a
// cluster, against three election timeouts, the limits on counts against
// 0, the TLS hosts, the prefixes, and which fields need which others
// (MetricsPprof needs MetricsListen, PolicyFile client certificates).
// It creates nothing and reads no file: that Dir, PolicyFile or the
// certificates can be used is found out by New.
//
// Its error begins with the name of the first bad field, as Go spells it,
// with the path to a field of a field, and says its value and the bound
// it passes: "MaxValueSize 73400320 is over the limit of 66060288 bytes
// (63 MiB)", "TTL.MaxTTL 2562047h0m0s is longer than 720h0m0s, the
// longest allowed", "Cluster.Replica.ElectionTimeout 1ms is outside
// 5ms..1m0s". A field named later in the message is one the first is
// checked against; one without a path there is the first one's sibling
// ("TTL.MinTTL 2h0m0s is above MaxTTL 1h0m0s").
//
// New calls it; a caller may call it to check a configuration early, such
// as one built from a command line.
func (c Config) Validate() error { return c.withDefaults().validate() }

// validate checks a Config after withDefaults: see Validate.
func (c Config) validate() error {
	// The core's fields first (LeaseTerm, PrefixTerms, Epsilon,
	// HorizonStep, RetryWindow, TTL), which core.Config.Validate names as
	// this Config does: withDefaults derives HorizonStep from the terms.
	if err := c.coreConfig().Validate(); err != nil {
		return err
	}
	switch c.UnsafeWatchFault {
	case "", "skip", "repeat":
	default:
		return fmt.Errorf("UnsafeWatchFault %q is not skip, repeat or empty", c.UnsafeWatchFault)
	}
	seen := make(map[string]bool)
	for _, p := range c.PrefixTerms {
		switch {
		case len(p.Prefix) > MaxKeySize:
			return fmt.Errorf("PrefixTerms: prefix of %d bytes is longer than a key may be (%d)", len(p.Prefix), MaxKeySize)
		case seen[p.Prefix]:
			return fmt.Errorf("PrefixTerms: prefix %q is given twice", p.Prefix)
		}
		seen[p.Prefix] = true
	}
	if least := node.MinReserveBytes(); c.Store == nil && c.DiskUsage == nil && c.ReserveBytes > 0 && c.ReserveBytes < least {
		// With a DiskUsage of their own, tests and embedders measure
		// by decree.
		return fmt.Errorf("ReserveBytes %d is below %d (%d MiB), the least that covers what the database and the log may write at once between two measurements (node.MinReserveBytes): a full disk could then crash the server", c.ReserveBytes, least, least>>20)
	}
	if c.HorizonStep < MinHorizonStep {
		return fmt.Errorf("HorizonStep %v is shorter than %v: the horizon would be persisted for almost every lease", c.HorizonStep, MinHorizonStep)
	}
	switch {
	case c.MaxValueSize < 0:
		return fmt.Errorf("MaxValueSize %d is negative", c.MaxValueSize)
	case c.MaxValueSize > MaxValueSizeLimit:
		return fmt.Errorf("MaxValueSize %d is over the limit of %d bytes (63 MiB)", c.MaxValueSize, MaxValueSizeLimit)
	case c.MaxInflight < 0:
		return fmt.Errorf("MaxInflight %d is negative", c.MaxInflight)
	case c.MaxSessions < 0:
		return fmt.Errorf("MaxSessions %d is negative", c.MaxSessions)
	case c.IdleTimeout < 0:
		return fmt.Errorf("IdleTimeout %v is negative", c.IdleTimeout)
	case c.IdleTimeout > MaxIdleTimeout:
		return fmt.Errorf("IdleTimeout %v is longer than %v, the longest allowed", c.IdleTimeout, MaxIdleTimeout)
	case c.MaxInflightBytes < c.MaxValueSize+MaxKeySize:
		return fmt.Errorf("MaxInflightBytes %d is less than MaxValueSize %d plus MaxKeySize %d: a write of the largest key and value could never be taken", c.MaxInflightBytes, c.MaxValueSize, MaxKeySize)
	case c.MaxTotalInflightBytes < int64(c.maxFrameSize()):
		// The frame of a write of the largest key and value counts
		// against it as it arrives, with 1 KiB of its other fields.
		return fmt.Errorf("MaxTotalInflightBytes %d is less than MaxValueSize %d plus MaxKeySize %d plus 1024: a write of the largest key and value could never be taken", c.MaxTotalInflightBytes, c.MaxValueSize, MaxKeySize)
	case c.MaxFrameBytesPerAddr < int64(c.maxFrameSize()):
		return fmt.Errorf("MaxFrameBytesPerAddr %d is less than the largest frame, MaxValueSize %d plus MaxKeySize %d plus 1024: a write of the largest key and value could never arrive", c.MaxFrameBytesPerAddr, c.MaxValueSize, MaxKeySize)
	case c.MaxLeasesPerSession < 0:
		return fmt.Errorf("MaxLeasesPerSession %d is negative", c.MaxLeasesPerSession)
	case c.MaxLeases < 0:
		return fmt.Errorf("MaxLeases %d is negative", c.MaxLeases)
	case c.MaxWriteLeasesPerSession < 0:
		return fmt.Errorf("MaxWriteLeasesPerSession %d is negative", c.MaxWriteLeasesPerSession)
	case c.MaxSessionsPerAddr < 0:
		return fmt.Errorf("MaxSessionsPerAddr %d is negative", c.MaxSessionsPerAddr)
	case c.HelloTimeout < 0:
		return fmt.Errorf("HelloTimeout %v is negative", c.HelloTimeout)
	case c.HelloTimeout > MaxHelloTimeout:
		return fmt.Errorf("HelloTimeout %v is longer than %v, the longest allowed", c.HelloTimeout, MaxHelloTimeout)
	case c.FrameTimeout < 0 || c.FrameTimeout > MaxIdleTimeout:
		return fmt.Errorf("FrameTimeout %v is outside 0..%v", c.FrameTimeout, MaxIdleTimeout)
	case c.MetricsPprof && c.MetricsListen == "":
		return errors.New("MetricsPprof: profiles are served on the metrics listener: set MetricsListen too")
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			return fmt.Errorf("MetricsListen %q: %w", c.MetricsListen, err)
		}
	}
	if c.Cluster != nil {
		if c.Store != nil {
			//lint:ignore ST1005 the error begins with the name of the field
			return errors.New("Store: a node of a cluster keeps its state in its data folder; Store must be nil")
		}
		if err := c.Cluster.Validate(); err != nil {
			return err
		}
		if f := c.Cluster.FailoverTTL(); c.TTL.MinTTL < f {
			return fmt.Errorf("TTL.MinTTL %v is shorter than three times Cluster.Replica.ElectionTimeout (%v): a TTL lease must outlive a failover, during which no keep-alive gets through", c.TTL.MinTTL, f)
		}
	}
	if c.PolicyFile != "" && c.ClientCAs == nil && (c.TLSConfig == nil || c.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert) {
		return fmt.Errorf("PolicyFile %s: a policy knows clients by their certificates; require them (ClientCAs)", c.PolicyFile)
	}
	if c.ClientCAs == nil && c.TLSConfig != nil && c.TLSConfig.ClientAuth >= tls.VerifyClientCertIfGiven && c.TLSConfig.ClientCAs == nil {
		// crypto/tls would verify client certificates against the system's
		// roots: any publicly issued certificate would name a client.
		return errors.New("ClientCAs: client certificates are verified (TLSConfig.ClientAuth) but no CA is given for them: set ClientCAs (or TLSConfig.ClientCAs)")
	}
	if c.TLSConfig == nil {
		for _, h := range c.TLSHosts {
			if err := tlsfiles.CheckHost(h); err != nil {
				return fmt.Errorf("TLSHosts: a TLS host is refused: %s", strings.TrimPrefix(err.Error(), "tls: "))
			}
		}
	}
	return nil
}

// PrefixTerm sets the lease term of the keys that start with Prefix. Its
// Term is the term of read leases on those keys; 0 means they are never
// cached, and write leases on them get LeaseTerm.
type PrefixTerm = core.PrefixTerm

// bootFile is where, in the data folder, the core keeps the boot record
// of the last lease horizon it persisted (core.Config.BootFile).
const bootFile = "horizon.boot"

// coreConfig returns the part of c that the core runs by.
func (c Config) coreConfig() core.Config {
	return core.Config{
		LeaseTerm:   c.LeaseTerm,
		PrefixTerms: c.PrefixTerms,
		Epsilon:     c.Epsilon,
		HorizonStep: c.HorizonStep,
		RetryWindow: c.RetryWindow,
		Clock:       c.Clock,
		BootClock:   c.BootClock,
		BootFile:    filepath.Join(c.Dir, bootFile),

		MaxLeasesPerSession: c.MaxLeasesPerSession,
		MaxLeases:           c.MaxLeases,

		MaxWriteLeasesPerSession: c.MaxWriteLeasesPerSession,

		TTL: c.TTL,

		History: c.History,

		UnsafeSkipHorizonWait: c.UnsafeSkipHorizonWait,
		UnsafeNoPrefixRecall:  c.UnsafeNoPrefixRecall,
		UnsafeLockSteal:       c.UnsafeLockSteal,
		HotPrefixWrites:       c.HotPrefixWrites,
		Logger:                c.Logger,
	}
}

// nodeConfig returns the part of c that the node runs by.
func (c Config) nodeConfig() node.Config {
	return node.Config{Dir: c.Dir, Core: c.coreConfig(), Store: c.Store, Cluster: c.Cluster,
		QuotaBytes: c.QuotaBytes, ReserveBytes: c.ReserveBytes, DiskUsage: c.DiskUsage,
		Clock: c.Clock, Logger: c.Logger}
}

// maxFrameSize is the largest frame the server reads or writes.
func (c Config) maxFrameSize() int { return c.MaxValueSize + MaxKeySize + 1024 }
