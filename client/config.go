package client

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"time"

	"github.com/leased/leased/internal/clock"
)

// Defaults of Config.
const (
	DefaultCacheEntries  = 100_000
	DefaultCacheBytes    = 64 << 20
	DefaultIdleTimeout   = time.Second
	DefaultRenewFraction = 2.0 / 3.0
	DefaultMaxReconnect  = 5 * time.Second
	DefaultMemberSync    = 30 * time.Second
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
	// MaxMemberSyncInterval is the longest MemberSyncInterval.
	MaxMemberSyncInterval = 24 * time.Hour
)

// Config configures a Client. The zero value of every field means its
// default; Dial refuses other values that Validate refuses.
type Config struct {
	// CAFile is a PEM file of the CA that signed the server's certificate,
	// such as the server's <data>/tls/ca.pem (CAPath). A relative path is
	// taken from this program's working folder, not leased's. Empty means
	// the system's roots, unless TLSConfig is set. Certificates are always
	// verified.
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
	// from the server, counting only time in which the client's process
	// ran (a client that keeps every core busy is not mistaken for one
	// whose server fell silent); the client sends keep-alives every quarter
	// of it while it hears nothing, which the server answers. So a server
	// that is gone, such as a leader that crashed, is noticed within about
	// it, and the client reconnects (to the new leader). The connection's
	// QUIC idle timeout, which counts wall time, is a backstop of ten times
	// it, at least 10 s (DESIGN §6). A dial judges a server that sends
	// nothing in its handshake for twice IdleTimeout (within 1 s to 5 s; 2 s
	// by default) to be down, and fails with ErrUnavailable. Zero means
	// DefaultIdleTimeout (1 s); negative values and values over
	// MaxIdleTimeout (1 h) are invalid.
	IdleTimeout time.Duration
	// MaxReconnectDelay caps the backoff between reconnection attempts.
	// Zero means DefaultMaxReconnect (5 s); negative values and values
	// over MaxMaxReconnectDelay (1 h) are invalid.
	MaxReconnectDelay time.Duration
	// MemberSyncInterval is how often a client of a cluster asks the node
	// it is connected to for the cluster's members, in an admin session
	// (which needs no right), and learns the addresses they serve clients
	// at: it dials them too from then on, beside the addresses given to
	// Dial, so that a client given one node follows the cluster as it
	// fails over and changes (DESIGN §13), as etcd's client does with
	// AutoSyncInterval. It also asks after each new session once it has
	// seen a node that does not lead, or was given several addresses, and
	// stops asking a server that is not a node of a cluster. Zero means
	// DefaultMemberSync (30 s); negative means never; values over
	// MaxMemberSyncInterval (24 h) are invalid.
	MemberSyncInterval time.Duration
	// OnEvent, if set, is called with connection and lease events, one at a
	// time, from a goroutine of the client. It should return quickly.
	OnEvent func(Event)
	// OnInvalidate, if set, is called when the client drops cached
	// entries because the server invalidated them: with the keys and the
	// prefixes (listings) of an invalidation, before the client
	// acknowledges it, so that a cache the application keeps beside the
	// client's (a kernel's copy of file attributes, say) can be dropped
	// before the write that invalidated it commits. Those calls come from
	// the goroutine that reads the server's notices, one at a time: until
	// one returns, no invalidation is acknowledged and the writes waiting
	// for them wait. It is also called with the one prefix "" (everything)
	// when the client drops every lease after a suspend, from the
	// goroutine whose call (a Get or a List) noticed the
	// suspend, perhaps while a notice's call runs. It must be safe for
	// concurrent use, return quickly, not call the Client, and not wait
	// for anything that waits for a write or for a lock held around the
	// Client's calls. The client's own writes call nothing: the
	// application drops its copies of what it writes itself.
	OnInvalidate func(keys, prefixes []string)
	// PacketConn, if set, carries the client's QUIC packets instead of a
	// UDP socket of its own, for the session and every reconnection: for
	// example a socket shared with other traffic, or one wrapped to shape
	// or observe packets. The caller owns it and closes it after Close has
	// returned.
	PacketConn net.PacketConn
	// Clock reads time for every lease decision. Nil means the system
	// clock, which the client compares with the boot clock to notice that
	// the machine was suspended (DESIGN §8). Another clock is compared
	// only if it also has a boot clock (a ReadBoot method, as
	// internal/clock.Boot), and otherwise no suspend is noticed.
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
	if c.MemberSyncInterval > MaxMemberSyncInterval {
		bad("MemberSyncInterval", "is %v; want at most %v, 0 (the default) or negative (never)", c.MemberSyncInterval, MaxMemberSyncInterval)
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
	if c.MemberSyncInterval == 0 {
		c.MemberSyncInterval = DefaultMemberSync
	}
	c.Clock = clock.OrReal(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}
