package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/version"
	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

const (
	// maxQueuedBytes bounds the replies or notices waiting for a slow
	// client. Past it the client is not reading, and its session is closed:
	// the server never blocks on it, and its leases simply expire.
	maxQueuedBytes = 16 << 20
)

// pendingOp is the session's side of a write or acquisition while the core
// holds it.
type pendingOp struct {
	reqID uint64
	req   *core.Request // nil for a keep-alive, which cannot be canceled
	size  int           // bytes of key and value counted against Config.MaxInflightBytes
}

// session serves one connection. Its reader goroutine handles requests in
// order; replies and notices go out through two senders, so the reader
// never blocks on the network.
type session struct {
	srv  *Server
	id   leasetable.SessionID
	conn conn
	addr string // the client's IP address (addrKey), counted in Server.perAddr
	// stream is the request stream, set by run before any read.
	stream requestStream
	// core serves the session: the core of the server, or, in a cluster,
	// of the term of leadership the session was admitted in. Nil on a node
	// that does not lead: the session answers its hello with
	// CodeNotLeader.
	core *core.Core
	// client is the identity of the client (clientIdentity of the one it
	// gave in its hello and of identity; 0: none): its writes are applied
	// once per request ID, and its write leases are its own.
	client uint64
	// identity is the CommonName of the client's certificate ("" for
	// none), by which the access policy knows it (auth.go). Fixed at
	// newSession.
	identity string
	// owner is the owner recorded with the TTL leases the session grants
	// (leaseOwner of identity; 0: none). Fixed at newSession.
	owner uint64

	replies *sender // on the request stream
	notices *sender // invalidations and recalls, on their own stream

	// ended is closed once the session has ended in its core
	// (Server.endSession), so that Drop can wait for that before the node
	// closes the core.
	ended chan struct{}

	mu       sync.Mutex            // guards the fields below, and replies against goAway
	ops      map[uint64]*pendingOp // made by the first op: most sessions write nothing
	opsBytes int                   // the sum of the sizes of ops
	admin    bool                  // an admin session (serveAdmin), from its hello on
	leaving  bool                  // goAway was called
	// watchers are the session's watches (watch.go), by WatchID;
	// watchersDone, once stopWatches ran: no watch starts after.
	// watchWG counts their goroutines.
	watchers     map[uint64]*watcher
	watchersDone bool
	watchWG      sync.WaitGroup
}

func newSession(s *Server, c conn, id leasetable.SessionID, cr *core.Core) *session {
	identity := c.Identity()
	return &session{srv: s, id: id, conn: c, core: cr, identity: identity, owner: leaseOwner(identity), ended: make(chan struct{})}
}

// helloReply accepts the session's hello with the server's settings.
func (ss *session) helloReply() *protocol.HelloReply {
	cfg := ss.srv.cfg
	return &protocol.HelloReply{
		Version:      protocol.Version,
		SessionID:    uint64(ss.id),
		Epsilon:      cfg.Epsilon,
		DefaultTerm:  cfg.LeaseTerm,
		MaxKeySize:   MaxKeySize,
		MaxValueSize: cfg.MaxValueSize,
		MaxFrameSize: cfg.maxFrameSize(),
		MaxInflight:  cfg.MaxInflight,
		RetryWindow:  cfg.RetryWindow,

		ServerVersion: version.String(),
	}
}

// refuse closes a connection the server cannot take, with err's code.
func (ss *session) refuse(err error) {
	ss.srv.log.Warn("refusing connection", "remote", ss.conn.RemoteAddr().String(), "err", err)
	ss.conn.CloseWithError(codeOf(err), err.Error())
}

// closeWith closes the connection with err's code.
func (ss *session) closeWith(err error) {
	ss.conn.CloseWithError(codeOf(err), err.Error())
}

// run serves the session until its connection ends.
//
// Its goroutine is the only one an idle session holds, and its stack is
// most of what the session costs the server beyond quic-go's own state:
// idle, it waits in serve for the next request, and the collector shrinks
// a stack to half whenever less than a quarter of it is in use. So the
// frames below that wait are kept small: the work of accepting the stream
// and of the hello, whose frames are large, is in functions of their own
// that have returned by then (hence go:noinline, which keeps the compiler
// from folding their frames into run's).
func (ss *session) run() {
	defer ss.srv.endSession(ss)
	fr := ss.accept()
	if fr == nil {
		return
	}
	// The senders close, and then their goroutines end, before the session
	// ends in its core; its watches end before them.
	defer ss.stopSenders()
	defer ss.stopWatches()
	if ss.greet(fr) {
		ss.serve(fr)
	}
}

// debug logs msg at the debug level, with the session's attributes, if the
// server's logger takes it. The session keeps no logger of its own: most
// sessions log nothing.
func (ss *session) debug(msg string, args ...any) {
	log := ss.srv.log
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	log = log.With("session", uint64(ss.id), "remote", ss.conn.RemoteAddr().String())
	if ss.identity != "" {
		log = log.With("identity", ss.identity)
	}
	log.Debug(msg, args...)
}

// accept waits for the client's request stream and sets the session's
// replies up on it. It returns the stream's frame reader, or nil when the
// session must end (the connection is closed).
//
//go:noinline
func (ss *session) accept() *protocol.FrameReader {
	s := ss.srv
	ctx, cancel := context.WithTimeout(ss.conn.Context(), s.cfg.HelloTimeout)
	stream, err := ss.conn.AcceptStream(ctx)
	cancel()
	if err != nil {
		ss.closeWith(fmt.Errorf("%w: no request stream: %v", errProtocol, err))
		return nil
	}
	ss.stream = stream
	replies := newSender(stream, &s.msgsOut, func() {
		ss.closeWith(fmt.Errorf("%w: client is not reading its replies", errResourceExhausted))
	})
	replies.metrics = s.metrics
	ss.mu.Lock() // goAway reads it from another goroutine
	ss.replies = replies
	ss.mu.Unlock()
	fr := protocol.NewFrameReader(stream, s.cfg.maxFrameSize())
	fr.SetBudget(frameAccount{s: s, addr: ss.addr})
	return fr
}

// stopSenders closes the session's senders and waits for their goroutines
// to end.
func (ss *session) stopSenders() {
	ss.replies.close()
	if ss.notices != nil {
		ss.notices.close()
		ss.notices.wait()
	}
	ss.replies.wait()
}

// greet reads and answers the hello, and opens the notice stream. It
// reports whether the session goes on to serve requests; if not, it has
// closed the connection, or served an admin session or a refusal to its
// end.
//
//go:noinline
func (ss *session) greet(fr *protocol.FrameReader) bool {
	s := ss.srv
	stream := ss.stream
	// The hello names the protocol version. Nothing else may come first.
	stream.SetReadDeadline(time.Now().Add(s.cfg.HelloTimeout))
	m, err := ss.decode(fr)
	if err != nil {
		if !errors.Is(err, protocol.ErrMalformed) && !errors.Is(err, protocol.ErrFrameTooLarge) && !errors.Is(err, errResourceExhausted) {
			err = fmt.Errorf("%w: %v", errProtocol, err) // no hello in time, or the stream ended
		}
		ss.closeWith(fmt.Errorf("reading hello: %w", err))
		return false
	}
	hello, ok := m.(*protocol.Hello)
	switch {
	case !ok:
		id, _ := protocol.RequestID(m)
		ss.replies.send(errorReply(id, fmt.Errorf("%w: the first message must be hello, not %s", errProtocol, m.Type())))
		ss.replies.flush(s.cfg.HelloTimeout)
		ss.closeWith(fmt.Errorf("%w: request before hello", errProtocol))
		return false
	case hello.Version != protocol.Version:
		err := fmt.Errorf("%w: protocol version %d is not supported; this server speaks %d", errProtocol, hello.Version, protocol.Version)
		ss.replies.send(errorReply(0, err))
		ss.replies.flush(s.cfg.HelloTimeout)
		ss.closeWith(err)
		return false
	}
	if hello.Admin {
		stream.SetReadDeadline(time.Time{})
		ss.mu.Lock()
		ss.admin = true
		ss.mu.Unlock()
		ss.debug("admin session opened", "client", hello.Client)
		ss.serveAdmin(fr)
		return false
	}
	if ss.core == nil {
		// The reply, then the end of the stream; the client closes the
		// connection once it has read them, or has it closed.
		err := s.node.NotLeader()
		ss.replies.send(notLeaderReply(err))
		ss.replies.finish()
		t := time.NewTimer(s.cfg.HelloTimeout)
		defer t.Stop()
		select {
		case <-ss.conn.Context().Done():
		case <-t.C:
			ss.closeWith(err)
		}
		return false
	}
	ss.client = clientIdentity(hello.ClientID, ss.identity)
	stream.SetReadDeadline(time.Time{})
	ctx, cancel := context.WithTimeout(ss.conn.Context(), s.cfg.HelloTimeout)
	uni, err := ss.conn.OpenUniStreamSync(ctx)
	cancel()
	if err != nil {
		// The client must let the server open one stream: a client that
		// allows none does not speak the protocol.
		ss.closeWith(fmt.Errorf("%w: cannot open the notice stream: %v", errProtocol, err))
		return false
	}
	ss.notices = newSender(uni, &s.msgsOut, func() {
		ss.closeWith(fmt.Errorf("%w: client is not reading its invalidations", errResourceExhausted))
	})
	// With the notice stream open: the leases the session takes over
	// from the client's lost session may need their invalidations and
	// recalls sent again at once.
	if old := ss.core.SetClient(ss.id, ss.client); old != 0 {
		// The client came back on this connection while its last one
		// looked alive here: this session took that one's leases over.
		s.supersede(old)
	}
	ss.replies.send(ss.helloReply())
	ss.debug("session opened", "client", hello.Client)
	return true
}

// serve handles requests until the session must end. Between requests it
// waits in read; see run for why its frame must stay small.
func (ss *session) serve(fr *protocol.FrameReader) {
	for {
		m, err := ss.read(fr)
		if err != nil {
			if !ss.readFailed(err) {
				return
			}
			continue
		}
		if !ss.handle(m) {
			return
		}
	}
}

// readFailed answers a request that could not be read. It reports whether
// the session goes on.
//
//go:noinline
func (ss *session) readFailed(err error) bool {
	var refused *protocol.RefusedFrameError
	switch {
	case errors.Is(err, protocol.ErrMalformed):
		// The frame was read whole, so the stream is still in step:
		// report and go on.
		ss.replies.send(errorReply(0, err))
		return true
	case errors.As(err, &refused) && !refused.IDUnread:
		// A budget of frames arriving refused the frame, which was read
		// to its end and discarded: the stream is still in step. Answer
		// the request with the refusal, as a write past a budget of
		// waiting writes is answered, and go on. A cancel's ID names
		// the op it cancels, whose reply this is not.
		id := refused.ID
		if refused.Type == protocol.TypeCancel {
			id = 0
		}
		ss.replies.send(errorReply(id, err))
		return true
	case errors.Is(err, protocol.ErrFrameTooLarge), errors.Is(err, errProtocol), errors.Is(err, errResourceExhausted):
		// Out of step (the frame was not read whole), or a refused
		// request that cannot be answered, its ID unread.
		ss.replies.send(errorReply(0, err))
		ss.replies.flush(ss.srv.cfg.HelloTimeout)
		ss.closeWith(err)
		return false
	}
	if !errors.Is(err, io.EOF) && ss.conn.Context().Err() == nil {
		ss.debug("session read failed", "err", err)
	}
	ss.closeWith(fmt.Errorf("%w: request stream ended", errClosed))
	return false
}

// read waits, as long as the connection lives, for the next frame to
// begin, then reads and decodes it, counting it. A frame must be whole
// within FrameTimeout of its start; otherwise read fails with a protocol
// error, and the session must end: the stream is out of step.
func (ss *session) read(fr *protocol.FrameReader) (protocol.Message, error) {
	if err := fr.Begin(); err != nil {
		return nil, err
	}
	timeout := ss.srv.cfg.FrameTimeout
	ss.stream.SetReadDeadline(time.Now().Add(timeout))
	m, err := ss.decode(fr)
	ss.stream.SetReadDeadline(time.Time{})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, fmt.Errorf("%w: a frame began to arrive and was not whole within %v (FrameTimeout)", errProtocol, timeout)
	}
	return m, err
}

// decode reads the next frame from fr and decodes it, counting it, or
// fails with the *protocol.RefusedFrameError of a frame a budget refused
// (frameAccount), which is counted too. The frame's buffer goes back to
// the budget of frames arriving once it is decoded: what the message
// keeps of it, a write's key and value, the write's own budget counts.
func (ss *session) decode(fr *protocol.FrameReader) (protocol.Message, error) {
	t, body, err := fr.ReadFrame()
	var refused *protocol.RefusedFrameError
	if errors.As(err, &refused) && refused.Type.Valid() {
		ss.srv.msgsIn[refused.Type].Add(1) // it came, and is answered
	}
	if err != nil {
		return nil, err
	}
	defer fr.Release()
	if t.Valid() {
		ss.srv.msgsIn[t].Add(1)
	}
	return protocol.Decode(t, body)
}

// handle serves one request. It returns false when the session must end.
func (ss *session) handle(m protocol.Message) bool {
	s := ss.srv
	switch m.(type) {
	case *protocol.Write, *protocol.Txn, *protocol.Acquire, *protocol.Cancel, *protocol.LeaseGrant, *protocol.LeaseRevoke, *protocol.LeaseKeepAlive:
		// submit checks the ID as it records the op; a Cancel names one.
	default:
		// A second reply with the ID of a waiting op would be taken for
		// that op's reply.
		if id, ok := protocol.RequestID(m); ok && ss.inFlight(id) {
			ss.replies.send(errorReply(id, fmt.Errorf("%w: request id %d is already in flight", errProtocol, id)))
			return true
		}
	}
	if err := ss.authorize(m); err != nil {
		id, _ := protocol.RequestID(m)
		ss.replies.send(errorReply(id, err))
		return true
	}
	switch m := m.(type) {
	case *protocol.Get:
		start := time.Now()
		ss.replies.send(ss.get(m))
		s.metrics.read.Observe(time.Since(start).Seconds())
	case *protocol.List:
		start := time.Now()
		ss.replies.send(ss.list(m))
		s.metrics.read.Observe(time.Since(start).Seconds())
	case *protocol.Watch:
		ss.replies.send(ss.watch(m))
	case *protocol.WatchProgress:
		ss.replies.send(ss.watchProgress(m))
	case *protocol.Write:
		if err := ss.submitWrite(m); err != nil {
			ss.replies.send(errorReply(m.ID, err))
		}
	case *protocol.Txn:
		if err := ss.submitTxn(m); err != nil {
			ss.replies.send(errorReply(m.ID, err))
		}
	case *protocol.Acquire:
		if err := ss.submitAcquire(m); err != nil {
			ss.replies.send(errorReply(m.ID, err))
		}
	case *protocol.Renew:
		keys, err := keyStrings(m.Keys)
		if err != nil {
			ss.replies.send(errorReply(m.ID, err))
			break
		}
		ss.replies.send(&protocol.RenewReply{ID: m.ID, Terms: ss.renew(keys)})
	case *protocol.Release:
		if err := ss.relinquish(m.Keys); err != nil {
			ss.replies.send(errorReply(m.ID, err))
			break
		}
		ss.replies.send(&protocol.OK{ID: m.ID})
	case *protocol.Ack:
		if err := ss.relinquish(m.Keys); err != nil {
			ss.replies.send(errorReply(0, err))
			break
		}
		if len(m.Prefixes) > 0 {
			ss.core.RelinquishPrefixes(ss.id, prefixStrings(m.Prefixes))
		}
	case *protocol.ReleaseWrite:
		if err := ss.checkKey(m.Key); err != nil {
			ss.replies.send(errorReply(m.ID, err))
			break
		}
		if m.Under != 0 {
			if err := ss.mayUseLease(m.Under); err != nil {
				ss.replies.send(errorReply(m.ID, err))
				break
			}
		}
		id := m.ID
		if err := ss.core.ReleaseWriteLease(ss.id, string(m.Key), m.Token, m.Under, func() { ss.replies.send(&protocol.OK{ID: id}) }); err != nil {
			ss.replies.send(errorReply(m.ID, fmt.Errorf("release write lease on %q with token %d: %w", m.Key, m.Token, err)))
		}
	case *protocol.Cancel:
		ss.cancel(m.ID, errCanceled)
	case *protocol.LeaseGrant, *protocol.LeaseRevoke, *protocol.LeaseKeepAlive, *protocol.LeaseTimeToLive, *protocol.LeaseList:
		ss.handleTTL(m)
	case *protocol.Stats:
		st := s.Stats()
		st.ID = m.ID
		ss.replies.send(st)
	case *protocol.Goodbye:
		// The reply waits until the session's write leases are free for
		// others, as a release's does.
		freed := make(chan struct{})
		ss.core.CloseSession(ss.id, true, func() { close(freed) })
		<-freed
		ss.replies.send(&protocol.OK{ID: m.ID})
		ss.farewell()
		return false
	default:
		id, _ := protocol.RequestID(m)
		ss.replies.send(errorReply(id, fmt.Errorf("%w: %s is not a request", errProtocol, m.Type())))
	}
	return true
}

// farewell ends a session after goodbye. It ends the request stream after
// the replies queued on it, and leaves it to the client to close the
// connection, so that the client reads them all; a client that has not
// closed it within HelloTimeout has it closed.
func (ss *session) farewell() {
	ss.replies.finish()
	t := time.NewTimer(ss.srv.cfg.HelloTimeout)
	defer t.Stop()
	select {
	case <-ss.conn.Context().Done():
	case <-t.C:
		ss.closeWith(fmt.Errorf("%w: the client did not close its connection after goodbye", errClosed))
	}
}

// inFlight reports whether request id is a write or acquisition waiting
// for its reply.
func (ss *session) inFlight(id uint64) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.ops[id] != nil
}

func (ss *session) checkKey(key []byte) error {
	switch {
	case len(key) == 0:
		return fmt.Errorf("%w: empty key", errInvalidArgument)
	case len(key) > MaxKeySize && !bytes.HasPrefix(key, []byte(protocol.LockRecordPrefix)):
		return fmt.Errorf("%w: key of %d bytes, limit %d", errTooLarge, len(key), MaxKeySize)
	case len(key) > MaxKeySize+len(protocol.LockRecordPrefix):
		return fmt.Errorf("%w: lock record key of %d bytes, limit %d", errTooLarge, len(key), MaxKeySize+len(protocol.LockRecordPrefix))
	}
	return nil
}

// checkWriteKey checks key as checkKey does, and refuses the keys that
// begin with protocol.ReservedPrefix: they are the server's (lock
// records, DESIGN §5.1), read-only, and no write, acquisition or
// transaction may name one.
func (ss *session) checkWriteKey(key []byte) error {
	if err := ss.checkKey(key); err != nil {
		return err
	}
	if bytes.HasPrefix(key, []byte(protocol.ReservedPrefix)) {
		return fmt.Errorf("%w: keys that begin with the bytes 0xff 0xff are the server's own (lock records), and read-only", errInvalidArgument)
	}
	return nil
}

// guardOf checks the guard of a write or transaction and returns it as
// the store's.
func (ss *session) guardOf(g *protocol.Guard) (*store.Guard, error) {
	if g == nil {
		return nil, nil
	}
	if err := ss.checkWriteKey(g.Key); err != nil {
		return nil, fmt.Errorf("guard: %w", err)
	}
	if g.Token == 0 {
		return nil, fmt.Errorf("%w: guard on %q with token 0, which no lock is held with", errInvalidArgument, g.Key)
	}
	return &store.Guard{Key: g.Key, Token: g.Token}, nil
}

// keyStrings checks a batch of keys, as checkKey checks one.
func keyStrings(keys [][]byte) ([]string, error) {
	out := make([]string, len(keys))
	for i, k := range keys {
		switch {
		case len(k) == 0:
			return nil, fmt.Errorf("%w: key %d of the batch is empty", errInvalidArgument, i)
		case len(k) > MaxKeySize:
			return nil, fmt.Errorf("%w: key %d of the batch has %d bytes, limit %d", errTooLarge, i, len(k), MaxKeySize)
		}
		out[i] = string(k)
	}
	return out, nil
}

// prefixStrings returns the prefixes of an Ack as strings. A prefix may
// be empty (the prefix of every key); one longer than any key names no
// lease, and is ignored as a prefix that holds none.
func prefixStrings(ps [][]byte) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = string(p)
	}
	return out
}

func (ss *session) relinquish(keys [][]byte) error {
	ks, err := keyStrings(keys)
	if err != nil {
		return err
	}
	ss.core.Relinquish(ss.id, ks)
	return nil
}

// renew renews the session's leases on keys, as Core.Renew does, except
// on keys the access policy no longer lets its client read: those get no
// new term (0), and their leases end at their terms. A write lease is
// renewed only with the write-lease right too.
func (ss *session) renew(keys []string) []time.Duration {
	ok, readOnly := ss.renewable(keys)
	if ok == nil {
		return ss.core.Renew(ss.id, keys, nil)
	}
	allowed := make([]string, 0, len(keys))
	allowedRO := make([]bool, 0, len(keys))
	for i, k := range keys {
		if ok[i] {
			allowed = append(allowed, k)
			allowedRO = append(allowedRO, readOnly[i])
		}
	}
	terms := ss.core.Renew(ss.id, allowed, allowedRO)
	out := make([]time.Duration, len(keys))
	j := 0
	for i := range keys {
		if ok[i] {
			out[i] = terms[j]
			j++
		}
	}
	return out
}

// get answers a read, under a read lease when the core grants one.
func (ss *session) get(m *protocol.Get) protocol.Message {
	if err := ss.checkKey(m.Key); err != nil {
		return errorReply(m.ID, err)
	}
	rec, term, err := ss.core.Read(ss.id, m.Key)
	if err != nil {
		if errors.Is(err, core.ErrLeaseLimit) {
			ss.srv.leasesRefused.Add(1)
		}
		return errorReply(m.ID, err)
	}
	if m.Revalidate && term > 0 && rec.Version == m.Known {
		return &protocol.GetReply{ID: m.ID, Unchanged: true, Found: rec.Found, Version: rec.Version, Term: term}
	}
	return &protocol.GetReply{ID: m.ID, Found: rec.Found, Value: rec.Value, Version: rec.Version, Term: term}
}

func (ss *session) submitWrite(m *protocol.Write) error {
	s := ss.srv
	if err := ss.checkWriteKey(m.Key); err != nil {
		return err
	}
	guard, err := ss.guardOf(m.Guard)
	if err != nil {
		return err
	}
	switch {
	case m.Op != protocol.OpPut && m.Op != protocol.OpDelete && m.Op != protocol.OpCAS:
		return fmt.Errorf("%w: unknown write op %d", errInvalidArgument, m.Op)
	case len(m.Value) > s.cfg.MaxValueSize:
		return fmt.Errorf("%w: value of %d bytes, limit %d", errTooLarge, len(m.Value), s.cfg.MaxValueSize)
	case m.Op == protocol.OpDelete && len(m.Value) > 0:
		return fmt.Errorf("%w: a delete carries no value", errInvalidArgument)
	case m.Timeout < 0:
		return fmt.Errorf("%w: negative timeout", errInvalidArgument)
	}
	req := &core.Request{Op: storeOps[m.Op], Key: m.Key, Value: m.Value, Expect: m.Expect, Token: m.Token, Timeout: m.Timeout,
		Client: ss.client, ID: m.ID, Acked: m.Acked, NoReadLease: !ss.mayRead(m.Key), Guard: guard}
	if m.Under != 0 && m.Token != 0 {
		if err := ss.mayUseLease(m.Under); err != nil {
			return err
		}
		req.Under = m.Under
	}
	if m.Op != protocol.OpDelete && m.Lease != 0 {
		// A delete detaches its key whatever it says; a put or a
		// compare-and-swap attaches it to a lease the client may use.
		if err := ss.mayUseLease(m.Lease); err != nil {
			return err
		}
		req.Lease = m.Lease
	}
	return ss.submit(m.ID, req)
}

// storeOps maps the wire's write ops to the store's.
var storeOps = map[protocol.WriteOp]store.Op{
	protocol.OpPut:    store.OpPut,
	protocol.OpDelete: store.OpDelete,
	protocol.OpCAS:    store.OpCAS,
}

func (ss *session) submitAcquire(m *protocol.Acquire) error {
	if err := ss.checkWriteKey(m.Key); err != nil {
		return err
	}
	switch {
	case m.Timeout < 0:
		return fmt.Errorf("%w: negative timeout", errInvalidArgument)
	case !m.Mode.Valid():
		return fmt.Errorf("%w: unknown acquisition mode %d", errInvalidArgument, m.Mode)
	case m.LockDelay < 0 || m.LockDelay > protocol.MaxLockDelay:
		return fmt.Errorf("%w: lock delay %v, want 0 to %v", errInvalidArgument, m.LockDelay, protocol.MaxLockDelay)
	case m.LockDelay > 0 && m.Lease == 0:
		return fmt.Errorf("%w: a lock delay needs a TTL lease: it starts when the lease expires", errInvalidArgument)
	}
	if m.Lease != 0 {
		if err := ss.mayUseLease(m.Lease); err != nil {
			return err
		}
	}
	return ss.submit(m.ID, &core.Request{Op: store.OpGrantWriteLease, Key: m.Key, Timeout: m.Timeout,
		Mode: acquireModes[m.Mode], Lease: m.Lease, LockDelay: m.LockDelay})
}

// acquireModes maps the wire's acquisition modes to the lease table's.
var acquireModes = map[protocol.AcquireMode]leasetable.Mode{
	protocol.AcquireRecall: leasetable.Recall,
	protocol.AcquireWait:   leasetable.Wait,
	protocol.AcquireTry:    leasetable.Try,
}

// submit hands a write or acquisition to the core, within the session's
// budgets. Its reply comes later, when the core ends it.
func (ss *session) submit(id uint64, req *core.Request) error {
	s := ss.srv
	p := &pendingOp{reqID: id, req: req, size: req.Size()}
	req.Session = ss.id
	start := time.Now()
	req.Done = func(o core.Outcome) {
		if req.Op == store.OpPut || req.Op == store.OpDelete || req.Op == store.OpCAS || req.Op == store.OpTxn {
			s.metrics.write.Observe(time.Since(start).Seconds())
			if o.Err == nil && !o.Duplicate {
				s.metrics.wait.Observe(o.Waited.Seconds())
			}
		}
		ss.finishOp(p, opReply(id, req, o))
	}
	ss.mu.Lock()
	switch {
	case ss.ops[id] != nil:
		ss.mu.Unlock()
		return fmt.Errorf("%w: request id %d is already in flight", errProtocol, id)
	case len(ss.ops) >= s.cfg.MaxInflight:
		ss.mu.Unlock()
		return fmt.Errorf("%w: %d requests in flight, limit %d", errResourceExhausted, len(ss.ops), s.cfg.MaxInflight)
	case ss.opsBytes+p.size > s.cfg.MaxInflightBytes:
		ss.mu.Unlock()
		s.writesRefused.Add(1)
		return fmt.Errorf("%w: a key and value of %d bytes would take this session's waiting writes past their budget of %d bytes (MaxInflightBytes); %d bytes are waiting",
			errResourceExhausted, p.size, s.cfg.MaxInflightBytes, ss.opsBytes)
	}
	// The server's budget, taken last: every op in ops holds its bytes
	// there until forget returns them.
	if total := s.inflightBytes.Add(int64(p.size)); total > s.cfg.MaxTotalInflightBytes {
		s.inflightBytes.Add(-int64(p.size))
		ss.mu.Unlock()
		s.writesRefused.Add(1)
		return fmt.Errorf("%w: a key and value of %d bytes would take the waiting writes of all sessions past the server's budget of %d bytes (MaxTotalInflightBytes)",
			errResourceExhausted, p.size, s.cfg.MaxTotalInflightBytes)
	}
	ss.addOpLocked(p)
	ss.mu.Unlock()
	if err := ss.core.Submit(p.req); err != nil {
		ss.forget(p)
		return err
	}
	return nil
}

// addOpLocked records p among the session's ops, which it makes on the
// first. ss.mu is held.
func (ss *session) addOpLocked(p *pendingOp) {
	if ss.ops == nil {
		ss.ops = make(map[uint64]*pendingOp)
	}
	ss.ops[p.reqID] = p
	ss.opsBytes += p.size
}

// opReply builds the reply to a write or acquisition that ended with o.
func opReply(id uint64, req *core.Request, o core.Outcome) protocol.Message {
	switch {
	case o.Err != nil:
		return errorReply(id, o.Err)
	case req.Op == store.OpGrantWriteLease:
		return &protocol.AcquireReply{ID: id, Token: o.Token, Term: o.Term,
			Found: o.Record.Found, Value: o.Record.Value, Version: o.Record.Version}
	case req.Op == store.OpGrantTTL:
		return &protocol.LeaseGrantReply{ID: id, Lease: o.Lease, TTL: o.TTL, Duplicate: o.Duplicate}
	case req.Op == store.OpTxn:
		return &protocol.TxnReply{ID: id, Succeeded: o.Succeeded, Revision: o.Version, Waited: o.Waited, Holders: o.Holders, Duplicate: o.Duplicate}
	case req.Op == store.OpRevokeTTL:
		return &protocol.LeaseRevokeReply{ID: id, Revision: o.Version, Keys: o.Keys, Waited: o.Waited, Holders: o.Holders}
	}
	return &protocol.WriteReply{ID: id, Version: o.Version, Waited: o.Waited, Holders: o.Holders, Term: o.Term, Duplicate: o.Duplicate, Unchanged: o.Unchanged}
}

// cancel abandons the op of request id if it has not started to commit.
func (ss *session) cancel(id uint64, why error) {
	ss.mu.Lock()
	p := ss.ops[id]
	ss.mu.Unlock()
	if p != nil && p.req != nil {
		ss.core.Cancel(p.req, why)
	}
}

// abandonAll abandons every op of the session that has not started to
// commit. The server calls it when it shuts down.
func (ss *session) abandonAll() {
	ss.mu.Lock()
	ids := make([]uint64, 0, len(ss.ops))
	for id := range ss.ops {
		ids = append(ids, id)
	}
	ss.mu.Unlock()
	for _, id := range ids {
		ss.cancel(id, fmt.Errorf("%w: the server is shutting down", errCanceled))
	}
}

// finishOp sends the one reply of an op and forgets it.
func (ss *session) finishOp(p *pendingOp, reply protocol.Message) {
	if ss.forget(p) && ss.replies != nil {
		ss.replies.send(reply)
	}
}

// forget removes p from the session's ops and returns its bytes to the
// budget. It reports whether p was there.
func (ss *session) forget(p *pendingOp) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.ops[p.reqID] != p {
		return false
	}
	delete(ss.ops, p.reqID)
	ss.opsBytes -= p.size
	ss.srv.inflightBytes.Add(-int64(p.size))
	return true
}

// goAway ends the request stream after the replies queued on it, so that
// the client reads them all and then closes the connection. Shutdown calls
// it once no op is left to reply to.
//
// An admin client reads only when it asks (client.Admin): it would notice
// the end of the stream at its next question, if ever, and an admin
// session that a peer keeps open between its questions would hold the
// shutdown for its whole time. So an admin session stops reading instead
// (the deadline wakes a read that waits), and serveAdmin closes it once
// the reply to the request it serves, if any, is written.
func (ss *session) goAway() {
	ss.mu.Lock()
	replies, admin := ss.replies, ss.admin
	ss.leaving = true
	ss.mu.Unlock()
	switch {
	case admin:
		ss.stream.SetReadDeadline(time.Now())
	case replies != nil:
		replies.finish()
	default:
		// Still saying hello: there is nothing to deliver.
		ss.closeWith(fmt.Errorf("%w: the server is shutting down", errClosed))
	}
}

// sendNotice queues an invalidation or recall.
func (ss *session) sendNotice(m protocol.Message) {
	if ss.notices != nil {
		ss.notices.send(m)
	}
}

// clientIdentity returns the identity the server knows a client by, for
// the ClientID it gave in its hello (0: none, and 0 stays 0): the first 8
// bytes of a SHA-256 of it. The store keeps it with the client's write
// outcomes and write leases, and a snapshot carries it, so whoever reads
// a snapshot learns only these; a session presenting one as its ClientID
// is another client, because its identity is the hash of that. The
// ClientID itself, which a session of the same client may show to take over
// its write leases, never leaves the client and the server's memory.
//
// A client that presented a certificate (cert: its CommonName, "" for
// none) is known by the hash of both, so that a session with another
// certificate, or none, is another client even if it shows the same
// ClientID; without a certificate the hash is the one of the ClientID
// alone, as before certificates were checked.
func clientIdentity(id uint64, cert string) uint64 {
	if id == 0 {
		return 0
	}
	return identityHash(id, cert)
}

// leaseOwner returns the owner recorded with the TTL leases that the
// client of certificate name cert grants (store.TTLLease.Owner), 0 for no
// certificate: the hash clientIdentity takes, of the name with a ClientID
// of 0, which no session's client identity is the hash of. A TTL lease
// belongs to the certificate, not to the ClientID a session gives: leases
// outlive sessions, and a client restarted with the same certificate, and
// a new ClientID, keeps its leases.
func leaseOwner(cert string) uint64 {
	if cert == "" {
		return 0
	}
	return identityHash(0, cert)
}

// identityHash is the hash of clientIdentity and leaseOwner: the first 8
// bytes of a SHA-256 of the ClientID id and the certificate name cert,
// never 0.
func identityHash(id uint64, cert string) uint64 {
	b := make([]byte, 0, len(clientIdentityDomain)+8+len(cert))
	b = append(b, clientIdentityDomain...)
	b = binary.BigEndian.AppendUint64(b, id)
	b = append(b, cert...)
	sum := sha256.Sum256(b)
	return max(binary.BigEndian.Uint64(sum[:8]), 1)
}

// clientIdentityDomain sets clientIdentity's hash apart from any other.
const clientIdentityDomain = "leased client identity\x00"
