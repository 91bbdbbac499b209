// Package testkit runs a leased server in memory for tests, in the manner
// of net/http/httptest: real QUIC with verified TLS, the real server and the
// real client library, but packets travel over an in-memory network (a
// simnet router that delivers at once and, like UDP, drops a packet only
// when its reader is 32 packets behind) and the server keeps its state in a
// store.Memory.
//
// Nothing in it reads a socket or the disk in a way that blocks, so a test
// may run it inside testing/synctest: the server, its clients and the
// network then share the bubble's fake clock, and a test of lease expiry,
// renewal or offline reads advances time with time.Sleep instead of
// waiting it out. The only files are the server's self-signed TLS files,
// written under a temporary folder when the server starts, so their
// validity counts from the bubble's time.
//
// Only tests use it: the client's, and the server's external tests
// (package server_test). Tests inside package server cannot import it (it
// imports the server); they use simnet and protoclient directly.
package testkit

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go/testutils/simnet"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/server"
	"github.com/leased/leased/store"
)

// ServerAddr is the address every in-memory server listens on. Each server
// has its own network, so they do not collide.
const ServerAddr = "127.0.0.1:7400"

// StepTimeout bounds one step of a test that should not wait for a lease:
// a dial, a read, a write of a key nobody holds. Under synctest it is fake
// time and costs nothing; on real time it is generous for a loaded machine.
const StepTimeout = 10 * time.Second

// Server is a leased server on an in-memory network. Its fields are set by
// NewServer and must not be changed.
type Server struct {
	*server.Server
	// Config is the configuration the server was started with, with Dir,
	// Addr, Store, PacketConn and Logger filled in.
	Config server.Config
	// Store is the server's state. It outlives the server, so a test may
	// restart a server on it with Restart.
	Store *store.Memory

	t       testing.TB
	net     *simnet.PerfectRouter
	pc      *simnet.SimConn
	served  chan error
	mu      sync.Mutex
	nextEP  int
	stopped bool
}

// NewServer starts a server with cfg on a new in-memory network and closes
// it in t.Cleanup. Zero Dir means a new temporary folder
// (for the TLS files and the horizon's boot record), nil Store a new
// store.Memory, nil Logger one that discards, nil BootClock one that
// follows cfg.Clock (under testing/synctest, the bubble's time), so that a
// restart counts the time the server was down as that clock does.
// cfg.Addr and cfg.PacketConn must be zero.
func NewServer(t testing.TB, cfg server.Config) *Server {
	t.Helper()
	if cfg.Addr != "" || cfg.PacketConn != nil {
		t.Fatal("testkit: NewServer picks Addr and PacketConn itself")
	}
	mem, ok := cfg.Store.(*store.Memory)
	if cfg.Store == nil {
		mem, ok = store.NewMemory(), true
	}
	if !ok {
		t.Fatalf("testkit: Store is a %T, want *store.Memory", cfg.Store)
	}
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = Discard()
	}
	if cfg.BootClock == nil {
		cfg.BootClock = clock.NewFakeBoot(cfg.Clock)
	}
	s := &Server{Store: mem, t: t, net: &simnet.PerfectRouter{}}
	t.Cleanup(s.Close)
	s.start(cfg)
	return s
}

// start runs a server with cfg on a fresh endpoint at ServerAddr.
func (s *Server) start(cfg server.Config) {
	s.t.Helper()
	s.pc = simnet.NewSimConn(mustUDP(ServerAddr), s.net)
	cfg.Addr, cfg.PacketConn, cfg.Store = ServerAddr, s.pc, unclosable{s.Store}
	srv, err := server.New(cfg)
	if err != nil {
		s.pc.Close()
		s.t.Fatalf("testkit: server.New: %v", err)
	}
	s.Server, s.Config, s.stopped = srv, cfg, false
	s.served = make(chan error, 1)
	go func() { s.served <- srv.Serve(context.Background()) }()
}

// Close closes the server, waits for Serve to return and closes its
// endpoint. The store stays open for Restart. Close may be called more than
// once.
func (s *Server) Close() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	if err := s.Server.Close(); err != nil {
		s.t.Errorf("testkit: server Close: %v", err)
	}
	if err := <-s.served; err != server.ErrServerClosed {
		s.t.Errorf("testkit: Serve returned %v, want ErrServerClosed", err)
	}
	s.pc.Close()
}

// Restart closes the server and starts a new one on the same store,
// folder and address, with cfg changed by change (if not nil): a crash
// and restart without losing anything durable.
func (s *Server) Restart(change func(*server.Config)) {
	s.t.Helper()
	s.Close()
	cfg := s.Config
	cfg.PacketConn, cfg.Store = nil, s.Store
	if change != nil {
		change(&cfg)
	}
	s.start(cfg)
}

// CAFile is the path of the CA file clients trust.
func (s *Server) CAFile() string { return server.CAPath(s.Config.Dir) }

// Addr is the server's address, for client.Dial.
func (s *Server) Addr() string { return ServerAddr }

// Endpoint returns a new endpoint on the server's network, closed in
// t.Cleanup: the socket of one more client.
func (s *Server) Endpoint() net.PacketConn {
	s.mu.Lock()
	s.nextEP++
	addr := fmt.Sprintf("127.0.0.1:%d", 20000+s.nextEP)
	s.mu.Unlock()
	ep := simnet.NewSimConn(mustUDP(addr), s.net)
	s.t.Cleanup(func() { ep.Close() })
	return ep
}

// Dial connects a client of the real library to the server over a new
// endpoint, trusting the server's CA unless cfg says otherwise, and closes
// it in t.Cleanup. Nil cfg.Logger means one that discards.
func (s *Server) Dial(cfg client.Config) *client.Client {
	s.t.Helper()
	if cfg.CAFile == "" && cfg.TLSConfig == nil {
		cfg.CAFile = s.CAFile()
	}
	if cfg.Logger == nil {
		cfg.Logger = Discard()
	}
	if cfg.PacketConn == nil {
		cfg.PacketConn = s.Endpoint()
	}
	ctx, cancel := context.WithTimeout(context.Background(), StepTimeout)
	defer cancel()
	c, err := client.Dial(ctx, s.Addr(), cfg)
	if err != nil {
		s.t.Fatalf("testkit: client.Dial: %v", err)
	}
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Raw opens a session of a raw protocol client over a new endpoint,
// trusting the server's CA unless opts say otherwise, and closes it in
// t.Cleanup.
func (s *Server) Raw(opts protoclient.Options) *protoclient.Client {
	s.t.Helper()
	if opts.CAFile == "" && opts.TLSConfig == nil {
		opts.CAFile = s.CAFile()
	}
	if opts.PacketConn == nil {
		opts.PacketConn = s.Endpoint()
	}
	ctx, cancel := context.WithTimeout(context.Background(), StepTimeout)
	defer cancel()
	c, err := protoclient.Dial(ctx, s.Addr(), opts)
	if err != nil {
		s.t.Fatalf("testkit: protoclient.Dial: %v", err)
	}
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Discard returns a logger that drops everything.
func Discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func mustUDP(addr string) *net.UDPAddr {
	ua, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		panic(err)
	}
	return ua
}

// unclosable keeps the server from closing the shared store, so that
// Restart can hand it to the next server.
type unclosable struct{ *store.Memory }

func (unclosable) Close() error { return nil }
