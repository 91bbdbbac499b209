package client_test

// A fake server of TTL leases, for the unit tests of the client's TTL lease
// calls and keep-alive loop (ttl_test.go). It speaks the wire protocol over
// QUIC with verified TLS, on an in-memory network (simnet), and keeps a table
// of leases and nothing else: writes are acknowledged, not stored. Its
// tests run under testing/synctest, so the fake, the client and the network
// share the bubble's clock: the network takes no time, and a test moves
// lease time with time.Sleep, which costs nothing.
//
// It records every request it gets, with the bubble time it arrived and the
// session it came on, and a test may take over any request (fakeTTL.hook) to
// refuse it, delay it or lose its reply.

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/testutils/simnet"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// fakeAddr is the fake server's address on its in-memory network.
const fakeAddr = "127.0.0.1:7400"

// fakeFirstLease is the id of the first lease the fake grants.
const fakeFirstLease = 0x694d71ddacfda227

// fakeTTL is the fake server. Its methods are safe for concurrent use.
type fakeTTL struct {
	t      *testing.T
	dir    string // the TLS files
	router *simnet.PerfectRouter
	pc     *simnet.SimConn
	tr     *quic.Transport
	ln     *quic.Listener
	wg     sync.WaitGroup // the accept loop and the sessions

	mu        sync.Mutex // guards everything below
	leases    map[uint64]*fakeLease
	nextLease uint64
	grants    map[uint64]uint64 // request ID of a grant → the lease it got
	revision  uint64
	reqs      []fakeReq
	conns     []*quic.Conn
	sessions  int
	down      bool // hellos are refused
	nextEP    int
	// hook, if set, sees each request first (but Hello): if it returns
	// true, the fake sends its reply (none if nil) and does nothing else.
	hook func(session int, m protocol.Message) (protocol.Message, bool)
}

// fakeLease is a lease of the fake's table.
type fakeLease struct {
	ttl      time.Duration
	deadline time.Time // the receipt of its last grant or keep-alive, plus ttl
	keys     []string
}

// fakeReq is a request the fake got.
type fakeReq struct {
	at      time.Time
	session int // 1 for the first session, and so on
	msg     protocol.Message
}

// ttlBubble runs f in a synctest bubble with a new fake server.
func ttlBubble(t *testing.T, f func(t *testing.T, fs *fakeTTL)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		f(t, newFakeTTL(t))
	})
}

// newFakeTTL starts a fake server, closed in t.Cleanup.
func newFakeTTL(t *testing.T) *fakeTTL {
	t.Helper()
	fs := &fakeTTL{
		t:         t,
		dir:       t.TempDir(),
		router:    &simnet.PerfectRouter{},
		leases:    make(map[uint64]*fakeLease),
		nextLease: fakeFirstLease,
		grants:    make(map[uint64]uint64),
	}
	tlsConf, err := server.LoadOrCreateTLS(fs.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	fs.pc = simnet.NewSimConn(udpAddr(fakeAddr), fs.router)
	fs.tr = &quic.Transport{Conn: fs.pc}
	fs.ln, err = fs.tr.Listen(tlsConf, &quic.Config{MaxIdleTimeout: 30 * time.Second, KeepAlivePeriod: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	fs.wg.Add(1)
	go fs.accept()
	t.Cleanup(fs.close)
	return fs
}

func udpAddr(s string) *net.UDPAddr {
	a, err := net.ResolveUDPAddr("udp", s)
	if err != nil {
		panic(err)
	}
	return a
}

// close stops the fake and waits for its goroutines.
func (fs *fakeTTL) close() {
	fs.ln.Close()
	fs.mu.Lock()
	for _, qc := range fs.conns {
		qc.CloseWithError(0, "")
	}
	fs.mu.Unlock()
	fs.wg.Wait()
	fs.tr.Close()
	fs.pc.Close()
}

// dial connects a client of the real library to the fake, over a new
// endpoint, and closes it in t.Cleanup. Nil cfg.Logger means one that
// discards.
func (fs *fakeTTL) dial(cfg client.Config) *client.Client {
	fs.t.Helper()
	fs.mu.Lock()
	fs.nextEP++
	ep := simnet.NewSimConn(udpAddr(fmt.Sprintf("127.0.0.1:%d", 20000+fs.nextEP)), fs.router)
	fs.mu.Unlock()
	cfg.PacketConn = ep
	cfg.CAFile = server.CAPath(fs.dir)
	if cfg.Logger == nil {
		cfg.Logger = testkit.Discard()
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := client.Dial(ctx, fakeAddr, cfg)
	if err != nil {
		ep.Close()
		fs.t.Fatalf("client.Dial: %v", err)
	}
	fs.t.Cleanup(func() { c.Close(); ep.Close() })
	return c
}

// setHook makes h see each request first (see fakeTTL.hook); nil removes it.
func (fs *fakeTTL) setHook(h func(session int, m protocol.Message) (protocol.Message, bool)) {
	fs.mu.Lock()
	fs.hook = h
	fs.mu.Unlock()
}

// setDown takes the fake down (true): its sessions are closed, and it
// refuses hellos, so clients keep trying to reconnect; or up again.
func (fs *fakeTTL) setDown(down bool) {
	fs.mu.Lock()
	fs.down = down
	conns := fs.conns
	if down {
		fs.conns = nil
	}
	fs.mu.Unlock()
	if down {
		for _, qc := range conns {
			qc.CloseWithError(0, "down")
		}
	}
}

// dropSessions closes every session, as a network that drops them does;
// clients reconnect at once.
func (fs *fakeTTL) dropSessions() {
	fs.mu.Lock()
	conns := fs.conns
	fs.conns = nil
	fs.mu.Unlock()
	for _, qc := range conns {
		qc.CloseWithError(0, "dropped")
	}
}

// applyNow answers m from the lease table, as if it arrived now: a hook
// calls it to apply a request and then lose its reply.
func (fs *fakeTTL) applyNow(m protocol.Message) protocol.Message {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.apply(m, time.Now())
}

// leaseCount returns how many leases the fake's table holds, live or not.
func (fs *fakeTTL) leaseCount() int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return len(fs.leases)
}

// dropLease forgets a lease, as if it had expired or another client had
// revoked it.
func (fs *fakeTTL) dropLease(id client.LeaseID) {
	fs.mu.Lock()
	delete(fs.leases, uint64(id))
	fs.mu.Unlock()
}

// requests returns the requests of type typ the fake got, in order.
func (fs *fakeTTL) requests(typ protocol.Type) []fakeReq {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	var out []fakeReq
	for _, r := range fs.reqs {
		if r.msg.Type() == typ {
			out = append(out, r)
		}
	}
	return out
}

// keepAlives returns the keep-alives the fake got, in order.
func (fs *fakeTTL) keepAlives() []fakeReq { return fs.requests(protocol.TypeLeaseKeepAlive) }

func (fs *fakeTTL) accept() {
	defer fs.wg.Done()
	for {
		qc, err := fs.ln.Accept(context.Background())
		if err != nil {
			return
		}
		fs.wg.Add(1)
		go fs.serve(qc)
	}
}

// serve runs one session: the hello, then requests one at a time.
func (fs *fakeTTL) serve(qc *quic.Conn) {
	defer fs.wg.Done()
	defer qc.CloseWithError(0, "")
	stream, err := qc.AcceptStream(context.Background())
	if err != nil {
		return
	}
	fr := protocol.NewFrameReader(stream, 0)
	send := func(m protocol.Message) error {
		b, err := protocol.AppendFrame(nil, m)
		if err != nil {
			return err
		}
		_, err = stream.Write(b)
		return err
	}
	if m, err := fr.ReadMessage(); err != nil {
		return
	} else if _, ok := m.(*protocol.Hello); !ok {
		return
	}
	fs.mu.Lock()
	if fs.down {
		fs.mu.Unlock()
		send(&protocol.Error{Code: protocol.CodeUnavailable, Message: "the fake is down"})
		return
	}
	fs.sessions++
	session := fs.sessions
	fs.conns = append(fs.conns, qc)
	fs.mu.Unlock()
	err = send(&protocol.HelloReply{
		Version: protocol.Version, SessionID: uint64(session), Epsilon: 100 * time.Millisecond,
		DefaultTerm: 10 * time.Second, MaxKeySize: protocol.MaxKeySize, MaxValueSize: 1 << 20,
		MaxFrameSize: protocol.DefaultMaxFrameSize, MaxInflight: 1000, RetryWindow: 5 * time.Minute,
	})
	if err != nil {
		return
	}
	for {
		m, err := fr.ReadMessage()
		if err != nil {
			return
		}
		if reply := fs.handle(session, m); reply != nil {
			if send(reply) != nil {
				return
			}
		}
	}
}

// handle records request m of session and returns its reply, if any.
func (fs *fakeTTL) handle(session int, m protocol.Message) protocol.Message {
	now := time.Now()
	fs.mu.Lock()
	fs.reqs = append(fs.reqs, fakeReq{at: now, session: session, msg: m})
	hook := fs.hook
	fs.mu.Unlock()
	if hook != nil {
		if reply, done := hook(session, m); done {
			return reply
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.apply(m, now)
}

// apply answers m, received at now, from the lease table. It must be
// called with fs.mu held.
func (fs *fakeTTL) apply(m protocol.Message, now time.Time) protocol.Message {
	live := func(id uint64) *fakeLease {
		if l := fs.leases[id]; l != nil && now.Before(l.deadline) {
			return l
		}
		delete(fs.leases, id)
		return nil
	}
	notFound := func(reqID, id uint64) protocol.Message {
		return &protocol.Error{ID: reqID, Code: protocol.CodeNotFound, Message: fmt.Sprintf("TTL lease %016x not found", id)}
	}
	switch m := m.(type) {
	case *protocol.LeaseGrant:
		if id, ok := fs.grants[m.ID]; ok {
			return &protocol.LeaseGrantReply{ID: m.ID, Lease: id, TTL: m.TTL, Duplicate: true}
		}
		if m.TTL < time.Second {
			return &protocol.Error{ID: m.ID, Code: protocol.CodeInvalidArgument, Message: fmt.Sprintf("TTL %v is below the minimum of 1s", m.TTL)}
		}
		id := fs.nextLease
		fs.nextLease++
		fs.leases[id] = &fakeLease{ttl: m.TTL, deadline: now.Add(m.TTL)}
		fs.grants[m.ID] = id
		return &protocol.LeaseGrantReply{ID: m.ID, Lease: id, TTL: m.TTL}
	case *protocol.LeaseKeepAlive:
		r := &protocol.LeaseKeepAliveReply{ID: m.ID, Renewed: []protocol.LeaseTTL{}}
		for _, id := range m.Leases {
			if l := live(id); l != nil {
				l.deadline = now.Add(l.ttl)
				r.Renewed = append(r.Renewed, protocol.LeaseTTL{Lease: id, TTL: l.ttl})
			} else {
				r.Unknown = append(r.Unknown, id)
			}
		}
		return r
	case *protocol.LeaseRevoke:
		l := live(m.Lease)
		if l == nil {
			return notFound(m.ID, m.Lease)
		}
		delete(fs.leases, m.Lease)
		r := &protocol.LeaseRevokeReply{ID: m.ID, Keys: len(l.keys)}
		if len(l.keys) > 0 {
			fs.revision++
			r.Revision = fs.revision
		}
		return r
	case *protocol.LeaseTimeToLive:
		l := live(m.Lease)
		if l == nil {
			return &protocol.LeaseTimeToLiveReply{ID: m.ID, Lease: m.Lease, TTL: -1}
		}
		r := &protocol.LeaseTimeToLiveReply{ID: m.ID, Lease: m.Lease, TTL: l.deadline.Sub(now), GrantedTTL: l.ttl}
		if m.Keys {
			for _, k := range l.keys {
				r.Keys = append(r.Keys, []byte(k))
			}
		}
		return r
	case *protocol.LeaseList:
		r := &protocol.LeaseListReply{ID: m.ID, Leases: []protocol.LeaseTTL{}}
		for id := range fs.leases {
			if l := live(id); l != nil {
				r.Leases = append(r.Leases, protocol.LeaseTTL{Lease: id, TTL: l.deadline.Sub(now)})
			}
		}
		slices.SortFunc(r.Leases, func(a, b protocol.LeaseTTL) int { return cmp.Compare(a.Lease, b.Lease) })
		return r
	case *protocol.Write:
		if m.Lease != 0 {
			l := live(m.Lease)
			if l == nil {
				return notFound(m.ID, m.Lease)
			}
			if !slices.Contains(l.keys, string(m.Key)) {
				l.keys = append(l.keys, string(m.Key))
				slices.Sort(l.keys)
			}
		}
		fs.revision++
		return &protocol.WriteReply{ID: m.ID, Version: fs.revision}
	case *protocol.Get:
		return &protocol.GetReply{ID: m.ID, Version: fs.revision}
	case *protocol.Renew:
		return &protocol.RenewReply{ID: m.ID, Terms: make([]time.Duration, len(m.Keys))}
	case *protocol.Release:
		return &protocol.OK{ID: m.ID}
	case *protocol.Goodbye:
		return &protocol.OK{ID: m.ID}
	case *protocol.Cancel, *protocol.Ack:
		return nil
	}
	id, _ := protocol.RequestID(m)
	return &protocol.Error{ID: id, Code: protocol.CodeProtocol, Message: "the fake does not serve " + m.Type().String()}
}

// leaseIDs returns the leases of a keep-alive request.
func leaseIDs(r fakeReq) []client.LeaseID {
	var out []client.LeaseID
	for _, id := range r.msg.(*protocol.LeaseKeepAlive).Leases {
		out = append(out, client.LeaseID(id))
	}
	slices.Sort(out)
	return out
}
