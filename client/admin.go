package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/protocol"
)

// NodeStatus is one node's status, as Admin.Status returns it.
type NodeStatus = protocol.EndpointStatusReply

// Member is one member of a cluster, as Admin.Members returns it.
type Member = protocol.Member

// Admin is an admin session with one node of a cluster (DESIGN §13): any
// node answers Status and Members; only the leader makes membership
// changes, and another node answers them with a *ServerError of code
// CodeNotLeader that names the leader's client address. It holds no leases
// and caches nothing. Its methods are safe for concurrent use; requests go
// one at a time.
type Admin struct {
	addr   string
	qc     *quic.Conn
	stream *quic.Stream
	fr     *protocol.FrameReader

	mu     sync.Mutex // guards the stream, wbuf and nextID: one request at a time
	wbuf   []byte
	nextID uint64
}

// DialAdmin opens an admin session with the node at addr (one host:port,
// not a list): it does not look for the leader. Of cfg it uses the TLS
// settings, Name and IdleTimeout. Its errors are as Dial's.
func DialAdmin(ctx context.Context, addr string, cfg Config) (*Admin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	tlsConf, err := defaultTLS(cfg)
	if err != nil {
		return nil, err
	}
	a, err := dialAdmin(ctx, nil, tlsConf, addr, cfg)
	return a, certHint(err, cfg)
}

// dialAdmin is DialAdmin over tr (nil: a socket of its own) with tlsConf,
// for cfg with defaults applied. A Client's member sync calls it too.
func dialAdmin(ctx context.Context, tr *quic.Transport, tlsConf *tls.Config, addr string, cfg Config) (*Admin, error) {
	qc, stream, err := openStream(ctx, tr, tlsConf, cfg.IdleTimeout, addr)
	if err != nil {
		return nil, err
	}
	a := &Admin{addr: addr, qc: qc, stream: stream, fr: protocol.NewFrameReader(stream, 0)}
	m, err := a.roundTrip(ctx, &protocol.Hello{Version: protocol.Version, Client: cfg.Name, Admin: true})
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, fmt.Errorf("hello from %s: %w", addr, err)
	}
	hello, ok := m.(*protocol.HelloReply)
	if !ok {
		qc.CloseWithError(0, "")
		return nil, fmt.Errorf("hello from %s: %w", addr, adminError(m))
	}
	if hello.MaxFrameSize > 0 {
		a.fr = protocol.NewFrameReader(stream, hello.MaxFrameSize+1024)
	}
	return a, nil
}

// Addr is the address of the node the session is with.
func (a *Admin) Addr() string { return a.addr }

// Close ends the session.
func (a *Admin) Close() error {
	return a.qc.CloseWithError(0, "")
}

// Status returns the node's status.
func (a *Admin) Status(ctx context.Context) (*NodeStatus, error) {
	m, err := a.call(ctx, &protocol.EndpointStatus{})
	if err != nil {
		return nil, err
	}
	st, ok := m.(*protocol.EndpointStatusReply)
	if !ok {
		return nil, adminError(m)
	}
	return st, nil
}

// Members returns the members of the cluster as the node knows them.
func (a *Admin) Members(ctx context.Context) ([]Member, error) {
	m, err := a.call(ctx, &protocol.MemberList{})
	if err != nil {
		return nil, err
	}
	r, ok := m.(*protocol.MemberListReply)
	if !ok {
		return nil, adminError(m)
	}
	return r.Members, nil
}

// Announce is Members for a node of the cluster (package node): it names
// the node, name, and the address it serves clients at, which the node
// asked notes for its member list once the node at that address confirms
// that it is name (DESIGN §13).
func (a *Admin) Announce(ctx context.Context, name, clientAddr string) ([]Member, error) {
	m, err := a.call(ctx, &protocol.MemberList{From: name, FromAddr: clientAddr})
	if err != nil {
		return nil, err
	}
	r, ok := m.(*protocol.MemberListReply)
	if !ok {
		return nil, adminError(m)
	}
	return r.Members, nil
}

// AddMember asks the leader to add voter name at peerAddr.
func (a *Admin) AddMember(ctx context.Context, name, peerAddr string) error {
	return a.callOK(ctx, &protocol.MemberAdd{Name: name, PeerAddr: peerAddr})
}

// RemoveMember asks the leader to remove member name.
func (a *Admin) RemoveMember(ctx context.Context, name string) error {
	return a.callOK(ctx, &protocol.MemberRemove{Name: name})
}

// TransferLead asks the leader to hand the lead to voter to, or, if to is
// empty, to the voter raft picks.
func (a *Admin) TransferLead(ctx context.Context, to string) error {
	return a.callOK(ctx, &protocol.MemberTransfer{To: to})
}

// HistoryState is the event history's state (DESIGN §16), as
// Admin.Compact returns it: its compaction point (a watch may start from
// the revision after it, and no earlier), and the bytes and events it
// holds.
type HistoryState struct {
	Compacted, Bytes, Events uint64
}

// Compact asks the leader to compact the event history through revision
// rev at once, and returns its state after. A revision at or below the
// compaction point changes nothing; one above the current revision is
// refused with ErrInvalidArgument. It needs the admin right.
func (a *Admin) Compact(ctx context.Context, rev uint64) (HistoryState, error) {
	m, err := a.call(ctx, &protocol.Compact{Revision: rev})
	if err != nil {
		return HistoryState{}, err
	}
	r, ok := m.(*protocol.CompactReply)
	if !ok {
		return HistoryState{}, adminError(m)
	}
	return HistoryState{Compacted: r.Compacted, Bytes: r.Bytes, Events: r.Events}, nil
}

func (a *Admin) callOK(ctx context.Context, req protocol.Message) error {
	m, err := a.call(ctx, req)
	if err != nil {
		return err
	}
	if _, ok := m.(*protocol.OK); !ok {
		return adminError(m)
	}
	return nil
}

// call stamps req with the next request ID, sends it and reads its reply.
func (a *Admin) call(ctx context.Context, req protocol.Message) (protocol.Message, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nextID++
	id := a.nextID
	protocol.SetRequestID(req, id)
	for {
		m, err := a.exchange(ctx, req)
		if err != nil {
			return nil, err
		}
		if got, _ := protocol.RequestID(m); got == id {
			return m, nil
		}
		// A reply with ID 0 reports a session error; any other is stale.
		if e, ok := m.(*protocol.Error); ok && e.ID == 0 {
			return nil, adminError(e)
		}
		req = nil
	}
}

// roundTrip sends req and reads one reply, under mu.
func (a *Admin) roundTrip(ctx context.Context, req protocol.Message) (protocol.Message, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.exchange(ctx, req)
}

// exchange sends req, unless it is nil, and reads one message, within ctx.
// The caller holds mu.
func (a *Admin) exchange(ctx context.Context, req protocol.Message) (protocol.Message, error) {
	if req != nil {
		var err error
		if a.wbuf, err = protocol.AppendFrame(a.wbuf[:0], req); err != nil {
			return nil, err
		}
		if _, err := a.stream.Write(a.wbuf); err != nil {
			return nil, fmt.Errorf("%w: send to %s: %w", ErrUnavailable, a.addr, transportError(err))
		}
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Time{}
	}
	a.stream.SetReadDeadline(dl)
	stop := context.AfterFunc(ctx, func() { a.stream.SetReadDeadline(time.Now()) })
	defer stop()
	m, err := a.fr.ReadMessage()
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, context.DeadlineExceeded
		}
		return nil, fmt.Errorf("%w: reply from %s: %w", ErrUnavailable, a.addr, transportError(err))
	}
	return m, nil
}

// adminError turns an unexpected reply into an error, keeping the leader
// that an Error with CodeNotLeader names.
func adminError(m protocol.Message) error {
	if e, ok := m.(*protocol.Error); ok {
		return &ServerError{Code: e.Code, Message: e.Message, Leader: e.Leader}
	}
	return unexpected(m)
}
