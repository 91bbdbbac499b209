// Package server is the leased lease server: a QUIC listener, one session
// per connection, the lease table, and committed data in badger.
//
// A Server is made with New, run with Serve, and stopped with Shutdown or
// Close. All of its methods are safe for concurrent use.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/protocol"
)

// Defaults of Config.
const (
	DefaultDir          = layout.DefaultDir
	DefaultAddr         = "127.0.0.1:7400"
	DefaultLeaseTerm    = 10 * time.Second
	DefaultEpsilon      = 100 * time.Millisecond
	DefaultMaxValueSize = 1 << 20
	DefaultMaxInflight  = 4096
	DefaultMaxSessions  = 10000
	DefaultIdleTimeout  = 30 * time.Second
	// DefaultMaxInflightBytes is the default of Config.MaxInflightBytes.
	DefaultMaxInflightBytes = 64 << 20
	// DefaultHelloTimeout is the default of Config.HelloTimeout.
	DefaultHelloTimeout = 10 * time.Second
	// MaxKeySize is the largest key, in bytes. Keys are 1 to MaxKeySize bytes.
	MaxKeySize = 4096
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
	// LeaseTerm is the term of read and write leases. Default
	// DefaultLeaseTerm.
	LeaseTerm time.Duration
	// PrefixTerms set other terms for keys under some prefixes; the longest
	// matching prefix wins, and other keys get LeaseTerm. Nil means none.
	PrefixTerms []PrefixTerm
	// Epsilon is the clock allowance ε: a lease of term t is live on the
	// server until t+ε after it was granted. Default DefaultEpsilon.
	Epsilon time.Duration
	// MaxValueSize is the largest value, in bytes. Default
	// DefaultMaxValueSize.
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
	// MaxSessions is how many sessions the server holds at once. Default
	// DefaultMaxSessions.
	MaxSessions int
	// HorizonStep is how far past the longest lease (the longest term plus
	// Epsilon) the server moves the lease horizon each time it persists it
	// (DESIGN §7). A longer step persists less often; a shorter one shortens
	// the wait for writes after a crash, which is at most the longest lease
	// plus the step. It must be at least 10 ms. Zero means a quarter of the
	// longest lease, and at least 100 ms.
	HorizonStep time.Duration
	// IdleTimeout closes a connection that has been silent this long.
	// Clients send keep-alives well within it. Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// HelloTimeout bounds the opening and the end of a session: how long a
	// new connection may take to open its request stream and say hello, how
	// long a client may keep its connection open after goodbye, and how long
	// the server waits to hand its last replies to a client before it
	// closes a connection. Default DefaultHelloTimeout.
	HelloTimeout time.Duration
	// TLSConfig, if set, is used instead of the self-signed files under Dir.
	// The server sets MinVersion to TLS 1.3 and NextProtos to protocol.ALPN.
	TLSConfig *tls.Config
	// TLSHosts are extra host names or IPs for the self-signed server
	// certificate, beside localhost, 127.0.0.1 and ::1.
	TLSHosts []string
	// Clock reads time for every lease decision. Nil means the system clock.
	Clock clock.Clock
	// Logger receives the server's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Dir == "" {
		c.Dir = DefaultDir
	}
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
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultIdleTimeout
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = max(DefaultMaxInflightBytes, c.MaxValueSize+MaxKeySize)
	}
	if c.HelloTimeout == 0 {
		c.HelloTimeout = DefaultHelloTimeout
	}
	if c.HorizonStep == 0 {
		c.HorizonStep = max((c.maxTerm()+c.Epsilon)/4, 100*time.Millisecond)
	}
	c.Clock = clock.OrReal(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// validate checks a Config after withDefaults.
func (c Config) validate() error {
	switch {
	case c.LeaseTerm < 0:
		return fmt.Errorf("lease term %v is negative", c.LeaseTerm)
	case c.Epsilon < 0:
		return fmt.Errorf("epsilon %v is negative", c.Epsilon)
	case c.MaxValueSize < 0 || c.MaxValueSize > 64<<20:
		return fmt.Errorf("max value size %d is outside 0..64 MiB", c.MaxValueSize)
	case c.MaxInflight < 0:
		return fmt.Errorf("max inflight %d is negative", c.MaxInflight)
	case c.MaxSessions < 0:
		return fmt.Errorf("max sessions %d is negative", c.MaxSessions)
	case c.IdleTimeout < 0:
		return fmt.Errorf("idle timeout %v is negative", c.IdleTimeout)
	case c.MaxInflightBytes < c.MaxValueSize+MaxKeySize:
		return fmt.Errorf("max inflight bytes %d is less than max value size %d plus max key size %d: a write of the largest key and value could never be taken", c.MaxInflightBytes, c.MaxValueSize, MaxKeySize)
	case c.HelloTimeout < 0:
		return fmt.Errorf("hello timeout %v is negative", c.HelloTimeout)
	case c.HorizonStep < 10*time.Millisecond:
		return fmt.Errorf("horizon step %v is shorter than 10ms: the horizon would be persisted for almost every lease", c.HorizonStep)
	}
	seen := make(map[string]bool)
	for _, p := range c.PrefixTerms {
		switch {
		case p.Term < 0:
			return fmt.Errorf("term %v for prefix %q is negative", p.Term, p.Prefix)
		case len(p.Prefix) > MaxKeySize:
			return fmt.Errorf("prefix of %d bytes is longer than a key may be (%d)", len(p.Prefix), MaxKeySize)
		case seen[p.Prefix]:
			return fmt.Errorf("prefix %q has two terms", p.Prefix)
		}
		seen[p.Prefix] = true
	}
	return nil
}

// PrefixTerm sets the lease term of the keys that start with Prefix.
type PrefixTerm struct {
	Prefix string
	// Term is the term of read leases on those keys. 0 means they are never
	// cached: every read of them goes to the server. Write leases on them
	// get Term, or LeaseTerm if Term is 0.
	Term time.Duration
}

// termFor returns the read-lease term of key.
func (c Config) termFor(key string) time.Duration {
	term, best := c.LeaseTerm, -1
	for _, p := range c.PrefixTerms {
		if len(p.Prefix) > best && strings.HasPrefix(key, p.Prefix) {
			term, best = p.Term, len(p.Prefix)
		}
	}
	return term
}

// writeTermFor returns the write-lease term of key.
func (c Config) writeTermFor(key string) time.Duration {
	if t := c.termFor(key); t > 0 {
		return t
	}
	return c.LeaseTerm
}

// maxTerm returns the longest term any lease may have.
func (c Config) maxTerm() time.Duration {
	m := c.LeaseTerm
	for _, p := range c.PrefixTerms {
		m = max(m, p.Term)
	}
	return m
}

func (c Config) maxFrameSize() int { return c.MaxValueSize + MaxKeySize + 1024 }

// Server is a leased server. See the package comment.
type Server struct {
	cfg     Config
	log     *slog.Logger
	clock   clock.Clock
	store   *store
	ln      *quic.Listener
	udp     net.PacketConn
	tr      *quic.Transport
	started time.Time

	mu    sync.Mutex // guards table
	table *leasetable.Table

	// The lease horizon (DESIGN §7): no lease this run grants lives past
	// it, so after a crash writes wait only until it has passed.
	life        time.Duration // the longest a lease lives: the longest term plus ε
	horizon     atomic.Int64  // the persisted horizon this run trusts, wall clock in Unix ns
	horizonMu   sync.Mutex    // serializes persisting it
	horizonKick chan struct{} // asks horizonLoop to move it ahead; capacity 1
	// horizonRetry is when (Unix ns on the server's clock) to try again to
	// persist the horizon after a storage fault; until then grants past it
	// fail at once instead of queueing behind a failing fsync.
	horizonRetry atomic.Int64
	horizonDown  bool      // the last attempt failed; guarded by horizonMu
	barrier      time.Time // the bound of an earlier run's leases, while it is ahead; writes wait for it

	smu      sync.Mutex // guards sessions and closing
	sessions map[leasetable.SessionID]*session
	closing  bool
	// stopping is set, under mu, when the server begins to close; sessions
	// refuse new writes from then on.
	stopping atomic.Bool

	nextSession atomic.Uint64
	commits     commitQueue
	wake        chan struct{} // pokes the timer loop; capacity 1

	msgsIn  [protocol.NumTypes]atomic.Uint64
	msgsOut [protocol.NumTypes]atomic.Uint64

	stop      chan struct{} // closed by Close and Shutdown
	stopOnce  sync.Once
	closeOnce sync.Once
	closeErr  error
	serving   sync.WaitGroup // accept loop and sessions
	loops     sync.WaitGroup // timer and committer
}

// New opens the data folder, creates or loads TLS, binds the UDP socket and
// returns a Server ready to Serve.
func New(cfg Config) (*Server, error) {
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
		if tlsConf, err = LoadOrCreateTLS(cfg.Dir, cfg.TLSHosts); err != nil {
			return nil, fmt.Errorf("leased: %w", err)
		}
	} else {
		tlsConf = tlsConf.Clone()
	}
	tlsConf.MinVersion = tls.VersionTLS13
	tlsConf.NextProtos = []string{protocol.ALPN}

	resetKey, err := loadOrCreateResetKey(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("leased: %w", err)
	}
	st, err := openStore(filepath.Join(cfg.Dir, layout.DBDir), cfg.Logger, cfg.Clock.Now())
	if err != nil {
		return nil, fmt.Errorf("leased: %w", err)
	}
	udpAddr, err := net.ResolveUDPAddr("udp", cfg.Addr)
	if err != nil {
		st.close()
		return nil, fmt.Errorf("leased: listen address %q: %w", cfg.Addr, err)
	}
	udp, err := net.ListenUDP("udp", udpAddr)
	if err != nil {
		st.close()
		return nil, fmt.Errorf("leased: listen: %w", err)
	}
	tr := &quic.Transport{Conn: udp, StatelessResetKey: resetKey}
	ln, err := tr.Listen(tlsConf, &quic.Config{
		MaxIdleTimeout:        cfg.IdleTimeout,
		MaxIncomingStreams:    4,
		MaxIncomingUniStreams: -1,
	})
	if err != nil {
		udp.Close()
		st.close()
		return nil, fmt.Errorf("leased: listen: %w", err)
	}
	s := &Server{
		cfg:      cfg,
		log:      cfg.Logger,
		clock:    cfg.Clock,
		store:    st,
		ln:       ln,
		udp:      udp,
		tr:       tr,
		table:    leasetable.New(leasetable.Config{Epsilon: cfg.Epsilon}),
		sessions: make(map[leasetable.SessionID]*session),
		wake:     make(chan struct{}, 1),
		stop:     make(chan struct{}),

		life:        cfg.maxTerm() + cfg.Epsilon,
		horizonKick: make(chan struct{}, 1),
	}
	s.commits.init()
	s.started = s.clock.Now()
	if st.hold > 0 {
		// Only the part of the old horizon that openStore trusted: if the
		// wall clock stepped back, the old horizon looks further ahead than
		// it reached, and must not spare this run from persisting its own.
		s.horizon.Store(s.started.Add(st.hold).UnixNano())
		// Read leases are soft state: a lease an earlier run granted may be
		// live until the horizon it persisted. Hold writes until then;
		// reads are served at once.
		s.barrier = s.started.Add(st.hold)
		s.table.SetWriteBarrier(s.barrier)
		s.log.Info("restarted: holding writes until leases granted before the restart have expired",
			"wait", st.hold)
	}
	s.loops.Add(3)
	go s.timerLoop()
	go s.commitLoop()
	go s.horizonLoop()
	return s, nil
}

// ensureHorizon makes sure that the persisted lease horizon covers every
// lease granted at now. It persists a new horizon only when one could
// outlive the current one, which a background move ahead (horizonLoop)
// normally prevents: the usual cost is one atomic load. Callers call it
// before they grant or extend a lease at now, and grant none if it fails.
func (s *Server) ensureHorizon(now time.Time) error {
	need := now.Add(s.life).UnixNano()
	h := s.horizon.Load()
	if need <= h {
		if h-need < int64(s.cfg.HorizonStep/2) {
			select {
			case s.horizonKick <- struct{}{}:
			default:
			}
		}
		return nil
	}
	return s.advanceHorizon(now, 0)
}

// errHorizonDown is returned, without a new attempt, while persisting the
// lease horizon is failing.
var errHorizonDown = fmt.Errorf("%w: the lease horizon cannot be persisted", errInternal)

// advanceHorizon persists a horizon a full step past the longest lease
// granted at now, unless the current one already covers such a lease and
// ahead more. The new horizon also covers the leases of an earlier run
// (the barrier), which a shorter term could otherwise leave out.
func (s *Server) advanceHorizon(now time.Time, ahead time.Duration) error {
	if now.UnixNano() < s.horizonRetry.Load() {
		return errHorizonDown
	}
	s.horizonMu.Lock()
	defer s.horizonMu.Unlock()
	if now.Add(s.life+ahead).UnixNano() <= s.horizon.Load() {
		return nil
	}
	h := now.Add(s.life + s.cfg.HorizonStep)
	if s.barrier.After(h) {
		h = now.Add(s.barrier.Sub(now)) // on the monotonic clock, as in lowerHorizon
	}
	if err := s.store.setHorizon(h, now); err != nil {
		s.horizonRetry.Store(now.Add(s.cfg.HorizonStep / 2).UnixNano())
		if !s.horizonDown {
			s.log.Error("cannot persist the lease horizon; reads are served without leases until it can be", "err", err)
			s.horizonDown = true
		}
		return fmt.Errorf("%w: persist the lease horizon: %v", errInternal, err)
	}
	if s.horizonDown {
		s.log.Info("the lease horizon is persisted again; reads are served with leases")
		s.horizonDown = false
	}
	s.horizon.Store(h.UnixNano())
	return nil
}

// horizonLoop moves the horizon ahead when leases granted near it ask, so
// that grants seldom wait for it to be persisted.
func (s *Server) horizonLoop() {
	defer s.loops.Done()
	for {
		select {
		case <-s.commits.closed:
			return
		case <-s.horizonKick:
			s.advanceHorizon(s.clock.Now(), s.cfg.HorizonStep/2)
		}
	}
}

// lowerHorizon persists, once no lease can be granted any more, the
// earliest horizon that still covers every live lease: the latest expiry in
// the table, or the bound of an earlier run's leases (the barrier). When
// every holder relinquished its leases, the next run does not hold writes
// at all. The Server's Close calls it, after its sessions and loops ended.
func (s *Server) lowerHorizon() error {
	s.horizonMu.Lock()
	defer s.horizonMu.Unlock()
	now := s.clock.Now()
	s.mu.Lock()
	latest := s.table.LatestExpiry()
	s.mu.Unlock()
	if s.barrier.After(latest) {
		latest = s.barrier
	}
	// Measured on the monotonic clock from now: the wall clock may have
	// stepped since the lease was granted.
	h := now.Add(max(latest.Sub(now), 0))
	if s.horizon.Load() == 0 || h.UnixNano() >= s.horizon.Load() {
		return nil
	}
	if err := s.store.setHorizon(h, now); err != nil {
		return err
	}
	s.horizon.Store(h.UnixNano())
	return nil
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
		s.admit(quicConn{conn})
	}
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
	if len(s.sessions) >= s.cfg.MaxSessions {
		s.serving.Add(1)
		s.smu.Unlock()
		sess := newSession(s, conn, 0)
		go func() {
			defer s.serving.Done()
			sess.refuse(fmt.Errorf("%w: the server holds its maximum of %d sessions", errResourceExhausted, s.cfg.MaxSessions))
		}()
		return
	}
	id := leasetable.SessionID(s.nextSession.Add(1))
	sess := newSession(s, conn, id)
	s.sessions[id] = sess
	s.serving.Add(1)
	s.smu.Unlock()
	s.mu.Lock()
	s.table.AddSession(id)
	s.mu.Unlock()
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
	s.smu.Unlock()
	s.mu.Lock()
	eff := s.table.CloseSession(sess.id, false, s.clock.Now())
	s.enqueueReady(eff)
	s.mu.Unlock()
	s.apply(eff)
}

// Shutdown stops accepting connections, abandons writes that have not
// started to commit (their writers are told), lets committing ones finish,
// tells every session to go, waits for their clients to close them once
// they have read every reply, and closes the database. If ctx ends first,
// it closes at once and returns ctx's error.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginClose()
	done := make(chan struct{})
	go func() {
		s.commits.drain()
		// Closing a connection drops the replies not yet delivered on it,
		// so end each request stream after its replies instead, and let
		// the client close the connection.
		s.smu.Lock()
		for _, sess := range s.sessions {
			sess.goAway()
		}
		s.smu.Unlock()
		s.serving.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		s.Close()
		return ctx.Err()
	}
	return s.Close()
}

// beginClose stops accepting and abandons every waiting op.
func (s *Server) beginClose() {
	s.stopOnce.Do(func() {
		s.mu.Lock() // submit checks stopping under s.mu: no op slips past abandonAll
		s.stopping.Store(true)
		s.mu.Unlock()
		s.smu.Lock()
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

// Close closes the server at once: connections, loops and the database.
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
		s.serving.Wait()
		s.commits.close()
		s.loops.Wait()
		s.tr.Close()
		s.udp.Close()
		if err := s.lowerHorizon(); err != nil {
			s.log.Warn("cannot lower the lease horizon; the next start holds writes until it", "err", err)
		}
		s.closeErr = s.store.close()
	})
	return s.closeErr
}

// poke tells the timer loop that the next deadline may have moved.
func (s *Server) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// timerLoop is the one timer of the lease table: it sleeps until the
// table's next deadline and ticks it.
func (s *Server) timerLoop() {
	defer s.loops.Done()
	for {
		s.mu.Lock()
		next, ok := s.table.NextDeadline()
		s.mu.Unlock()
		var timer clock.Timer
		var fire <-chan time.Time
		if ok {
			now := s.clock.Now()
			timer = s.clock.NewTimer(next.Sub(now))
			fire = timer.Chan()
			// The timer counts from when it was made, not from now: if the
			// clock jumped in between (a fake clock advanced by a test),
			// it would fire late by the jump. Make it again.
			if s.clock.Now().Sub(now) >= time.Millisecond {
				timer.Stop()
				continue
			}
		}
		select {
		case <-s.commits.closed:
			if timer != nil {
				timer.Stop()
			}
			return
		case <-s.wake:
			if timer != nil {
				timer.Stop()
			}
			continue
		case <-fire:
		}
		s.mu.Lock()
		eff := s.table.Tick(s.clock.Now())
		s.enqueueReady(eff)
		s.mu.Unlock()
		s.apply(eff)
	}
}

// enqueueReady hands ready ops to the committer, noting when they became
// ready. The caller holds s.mu, so that ops reach the committer in the
// order the table made them ready.
func (s *Server) enqueueReady(eff leasetable.Effects) {
	if len(eff.Ready) > 0 {
		now := s.clock.Now()
		for _, op := range eff.Ready {
			op.Data.(*pendingOp).ready = now
		}
		s.commits.push(eff.Ready...)
	}
}

// apply carries out the table's decisions other than ready ops: it sends
// invalidations and recalls, and tells the writers of abandoned ops. The
// caller must not hold s.mu.
func (s *Server) apply(eff leasetable.Effects) {
	if len(eff.Invalidate) > 0 {
		// One message per session with all of its keys, split where the
		// message (or the acknowledgement that echoes it) would come near the
		// frame limit.
		bySession := make(map[leasetable.SessionID][][]byte)
		for _, n := range eff.Invalidate {
			bySession[n.Session] = append(bySession[n.Session], []byte(n.Key))
		}
		for id, keys := range bySession {
			if sess := s.session(id); sess != nil {
				for _, batch := range protocol.SplitKeys(keys, s.cfg.maxFrameSize()/2) {
					sess.sendNotice(&protocol.Invalidate{Keys: batch})
				}
			}
		}
	}
	for _, n := range eff.Recall {
		if sess := s.session(n.Session); sess != nil {
			sess.sendNotice(&protocol.Recall{Key: []byte(n.Key), Token: n.Token})
		}
	}
	for _, op := range eff.Abandoned {
		p := op.Data.(*pendingOp)
		p.sess.finishOp(p, errorReply(p.reqID, errCanceled))
	}
	s.poke()
}

// commitLoop persists ready ops in batches, one fsync per batch, and
// replies to their writers.
func (s *Server) commitLoop() {
	defer s.loops.Done()
	var muts []*mutation
	for {
		batch := s.commits.take(256)
		if batch == nil {
			return
		}
		muts = muts[:0]
		for _, op := range batch {
			p := op.Data.(*pendingOp)
			muts = append(muts, &p.mut)
		}
		s.store.apply(muts)
		now := s.clock.Now()
		// A writer gets a fresh read lease, and an acquirer its write lease,
		// only under the horizon.
		var horizonErr error
		for _, op := range batch {
			if op.Kind == leasetable.OpAcquire || s.cfg.termFor(op.Key) > 0 {
				horizonErr = s.ensureHorizon(now)
				break
			}
		}
		var effs []leasetable.Effects
		s.mu.Lock()
		for _, op := range batch {
			p := op.Data.(*pendingOp)
			var eff leasetable.Effects
			if op.Kind == leasetable.OpAcquire {
				if p.mut.err == nil && horizonErr != nil {
					p.mut.err = horizonErr
				}
				var token uint64
				if p.mut.err == nil {
					token = p.mut.token
				}
				eff = s.table.DoneAcquire(op, token, s.cfg.writeTermFor(op.Key), now)
			} else {
				term := s.cfg.termFor(op.Key)
				if horizonErr != nil {
					term = 0
				}
				p.term, eff = s.table.Done(op, p.mut.err == nil, term, now)
			}
			s.enqueueReady(eff)
			effs = append(effs, eff)
		}
		s.mu.Unlock()
		for _, eff := range effs {
			s.apply(eff)
		}
		for _, op := range batch {
			p := op.Data.(*pendingOp)
			p.sess.finishOp(p, s.opReply(op, p))
		}
		s.commits.done(len(batch))
	}
}

// opReply builds the reply to a finished op.
func (s *Server) opReply(op *leasetable.Op, p *pendingOp) protocol.Message {
	if p.mut.err != nil {
		return errorReply(p.reqID, p.mut.err)
	}
	if op.Kind == leasetable.OpWrite {
		waited := max(0, p.ready.Sub(p.received))
		return &protocol.WriteReply{ID: p.reqID, Version: p.mut.version, Waited: waited, Holders: op.Holders, Term: p.term}
	}
	rec, err := s.store.get(p.mut.key)
	if err != nil {
		return errorReply(p.reqID, fmt.Errorf("%w: read after grant: %v", errInternal, err))
	}
	return &protocol.AcquireReply{ID: p.reqID, Token: p.mut.token, Term: s.cfg.writeTermFor(op.Key),
		Found: rec.Found, Value: rec.Value, Version: rec.Version}
}

// Stats returns the server's counters.
func (s *Server) Stats() *protocol.StatsReply {
	now := s.clock.Now()
	s.mu.Lock()
	ts := s.table.Stats()
	s.mu.Unlock()
	s.smu.Lock()
	sessions := len(s.sessions)
	s.smu.Unlock()
	st := &protocol.StatsReply{
		Revision:             s.store.revision(),
		Sessions:             sessions,
		Leases:               ts.Leases,
		WriteLeases:          ts.WriteLeases,
		WritesWaiting:        ts.WritesWaiting,
		InvalidationsSent:    ts.InvalidationsSent,
		InvalidationsAcked:   ts.InvalidationsAcked,
		InvalidationsExpired: ts.InvalidationsExpired,
		Recalls:              ts.Recalls,
		LeasesRenewed:        ts.Renewed,
		MessagesIn:           make(map[string]uint64),
		MessagesOut:          make(map[string]uint64),
		Uptime:               now.Sub(s.started),
		DefaultTerm:          s.cfg.LeaseTerm,
		Epsilon:              s.cfg.Epsilon,
	}
	if left := s.barrier.Sub(now); !s.barrier.IsZero() && left > 0 {
		st.WritesAllowedIn = left
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

// commitQueue is the unbounded FIFO of ready ops between the lease table
// and the committer. push never blocks, so it may be called with s.mu held.
type commitQueue struct {
	mu      sync.Mutex // guards ops, busy and isShut
	cond    *sync.Cond
	ops     []*leasetable.Op
	busy    int // ops taken and not done
	isShut  bool
	closed  chan struct{} // closed by close
	shutOne sync.Once
}

func (q *commitQueue) init() {
	q.cond = sync.NewCond(&q.mu)
	q.closed = make(chan struct{})
}

func (q *commitQueue) push(ops ...*leasetable.Op) {
	q.mu.Lock()
	q.ops = append(q.ops, ops...)
	q.mu.Unlock()
	q.cond.Broadcast()
}

// take waits for ops and returns up to max of them, or nil once the queue is
// closed and empty.
func (q *commitQueue) take(max int) []*leasetable.Op {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ops) == 0 && !q.isShut {
		q.cond.Wait()
	}
	if len(q.ops) == 0 {
		return nil
	}
	n := min(len(q.ops), max)
	batch := append([]*leasetable.Op(nil), q.ops[:n]...)
	q.ops = q.ops[n:]
	q.busy += n
	return batch
}

func (q *commitQueue) done(n int) {
	q.mu.Lock()
	q.busy -= n
	q.mu.Unlock()
	q.cond.Broadcast()
}

// drain waits until no op is queued or being committed.
func (q *commitQueue) drain() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for (len(q.ops) > 0 || q.busy > 0) && !q.isShut {
		q.cond.Wait()
	}
}

// close lets the committer finish what is queued, then stop.
func (q *commitQueue) close() {
	q.shutOne.Do(func() {
		q.mu.Lock()
		q.isShut = true
		q.mu.Unlock()
		q.cond.Broadcast()
		close(q.closed)
	})
}
