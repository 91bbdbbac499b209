package server

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
)

// The server FuzzSession runs against. Values are small so that the fuzzer
// reaches the limits; terms are short, but lease time passes only when the
// target advances the fake clock.
const (
	fuzzTerm        = time.Second
	fuzzEpsilon     = 100 * time.Millisecond
	fuzzMaxValue    = 4 << 10
	fuzzMaxInflight = 4
	// fuzzWait bounds, in real time, every wait on the server's goroutines.
	fuzzWait = 5 * time.Second
	// fuzzHang bounds, in real time, an input. The fuzzer does not notice
	// an input that never returns, a deadlock say; the target panics with
	// every goroutine's stack instead, which kills the process, and the
	// fuzzer reports the input.
	fuzzHang = 30 * time.Second
)

// Keys the holder session holds while an input runs: a read lease on
// heldKey and the write lease on lockKey. Seeds use them to make writes
// wait, and to be canceled or recalled.
const (
	heldKey   = "k"
	lockKey   = "lock"
	healthKey = "fuzz/health"
)

// FuzzSession feeds arbitrary bytes to one session, after a valid hello or
// (hello false) instead of one. Sessions run over an in-memory conn, admitted
// directly: the server does not Serve. Each input runs against the same
// server: a panic in any server goroutine kills the process, which the
// fuzzer reports. After an input, the target checks that
//   - every reply and notice decodes with the limit a client reads with;
//     each reply answers a request sent, with the ID and type that request
//     gets, at most once; every error has a known code and a message;
//   - versions and tokens in replies are new to this input and increase;
//   - the session answers a request after the input, and once every lease
//     has expired no write of the input still waits;
//   - the session ends once its client has closed its request stream and,
//     after the server ended the reply stream, its connection;
//   - the server still serves: a fresh session says hello and reads a key;
//   - once the sessions have ended and the lease term has passed on the
//     fake clock, no write waits and no lease, write lease or session is
//     left; the revision never goes back;
//   - no goroutine outlives the input.
//
// While an input runs, another session (the holder) holds a read lease on
// heldKey and the write lease on lockKey and never answers, so that writes
// of the input wait, and can be canceled and recalled. Two things give an
// input what a client gets from waiting for replies and from time passing:
// every Stats request is a barrier, and fencing tokens and versions are
// rebased. See writeInput and rebase.
func FuzzSession(f *testing.F) {
	for _, s := range sessionSeeds(f) {
		f.Add(s.data, s.hello)
	}
	// Goroutines left by earlier tests are not this target's.
	leakOpts := []goleak.Option{goleak.IgnoreCurrent()}
	// Inputs run one at a time, each in a goroutine of its own that starts
	// after the last one ended.
	var fx *fuzzFixture
	f.Cleanup(func() {
		if fx == nil {
			return
		}
		if err := fx.close(); err != nil {
			f.Errorf("closing the server: %v", err)
		}
		// A fuzz worker's own goroutines (its link to the coordinator) are
		// not the server's, so check only when running the seed corpus.
		if !fuzzing() && !f.Failed() {
			if err := goleak.Find(leakOpts...); err != nil {
				f.Errorf("goroutines left after Close: %v", err)
			}
		}
	})
	f.Fuzz(func(t *testing.T, data []byte, hello bool) {
		if fx == nil {
			var err error
			if fx, err = newFuzzFixture(); err != nil {
				t.Fatal(err)
			}
		}
		watchdog := time.AfterFunc(fuzzHang, func() {
			panic(fmt.Sprintf("input still running after %v\n%s", fuzzHang, goroutineDump()))
		})
		defer watchdog.Stop()
		defer func() {
			// A failed input may leave sessions, leases and waiting writes
			// behind: the next input, or the fuzzer minimizing this one,
			// gets a new server.
			if t.Failed() {
				if err := fx.close(); err != nil {
					t.Logf("closing the server after the failure: %v", err)
				}
				fx = nil
			}
		}()
		fx.run(t, data, hello)
	})
}

// fuzzing reports whether the test binary runs with -test.fuzz, as the
// coordinator or a worker.
func fuzzing() bool {
	fl := flag.Lookup("test.fuzz")
	return fl != nil && fl.Value.String() != ""
}

// fuzzFixture is the server of a FuzzSession process, made on the first
// input and made anew after an input that failed.
type fuzzFixture struct {
	srv     *Server
	dir     string
	clock   *clock.Fake
	lastRev uint64 // the revision after the last input
}

func newFuzzFixture() (*fuzzFixture, error) {
	dir, err := os.MkdirTemp("", "leased-fuzz-session-")
	if err != nil {
		return nil, err
	}
	fc := clock.NewFake()
	srv, err := New(Config{Dir: dir, Addr: "127.0.0.1:0", LeaseTerm: fuzzTerm, Epsilon: fuzzEpsilon,
		MaxValueSize: fuzzMaxValue, MaxInflight: fuzzMaxInflight, HorizonStep: time.Minute, Clock: fc, Logger: quietLogger()})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &fuzzFixture{srv: srv, dir: dir, clock: fc}, nil
}

// close closes the server, for at most fuzzWait, and removes its folder.
func (fx *fuzzFixture) close() error {
	done := make(chan error, 1)
	go func() { done <- fx.srv.Close() }()
	err, ok := wait.Recv(done, fuzzWait)
	if !ok {
		return fmt.Errorf("Close did not return within %v; %s is left", fuzzWait, fx.dir)
	}
	os.RemoveAll(fx.dir)
	return err
}

// run runs one input. See FuzzSession.
func (fx *fuzzFixture) run(t *testing.T, data []byte, hello bool) {
	srv := fx.srv
	goroutines := runtime.NumGoroutine()
	rev0 := srv.Stats().Revision
	if rev0 < fx.lastRev {
		t.Fatalf("revision went back from %d to %d between inputs", fx.lastRev, rev0)
	}

	holder, holderConn, err := dialMem(srv)
	if err != nil {
		t.Fatalf("holder: %v", err)
	}
	if _, err := callMem(holder, &protocol.Get{Key: []byte(heldKey)}); err != nil {
		t.Fatalf("holder: %v", err)
	}
	r, err := callMem(holder, &protocol.Acquire{Key: []byte(lockKey)})
	if err != nil {
		t.Fatalf("holder: %v", err)
	}
	token := r.(*protocol.AcquireReply).Token

	stream := data
	if hello {
		stream = append(frames(t, &protocol.Hello{Version: protocol.Version, Client: "fuzz"}), data...)
	}
	in := readInput(stream, srv.cfg.maxFrameSize(), token, rev0)
	c := newMemConn()
	srv.admit(c)
	replies := drain(c.repCli, clientFrameLimit(srv))
	notices := drain(c.noteCli, clientFrameLimit(srv))
	fx.writeInput(t, c, replies, in)
	if in.open {
		// The session read the whole input and goes on. Once every lease
		// has expired, no write of the input waits, and the reply to a
		// Stats comes after the replies to all of them.
		fx.barrier(t, c, replies, in.unusedID(), nil, fuzzTerm+fuzzEpsilon+time.Millisecond)
		if n := srv.Stats().WritesWaiting; n != 0 {
			t.Fatalf("%d writes still wait after every lease they could wait for expired", n)
		}
		fx.barrier(t, c, replies, in.unusedID(), nil, 0)
	}
	c.reqCli.Close()
	// The server ends the reply stream, or closes the connection, once the
	// request stream ends or it ends the session itself; the client then
	// closes its connection.
	if !replies.wait() {
		t.Fatalf("session hung: its reply stream did not end within %v after the request stream ended\n%s", fuzzWait, goroutineDump())
	}
	c.closeClient()
	if !wait.Until(fuzzWait, func() bool { return !sessionOn(srv, c) }) {
		t.Fatalf("session hung: still open %v after its client closed the connection\n%s", fuzzWait, goroutineDump())
	}
	if !notices.wait() {
		t.Fatalf("notice stream still open after the connection closed\n%s", goroutineDump())
	}
	if code, msg, closed := c.closedWith(); closed && (!code.Valid() || code == protocol.CodeOK || msg == "") {
		t.Errorf("server closed the connection with code %d (%s), message %q", code, code, msg)
	}
	rev := srv.Stats().Revision
	checkReplies(t, in, replies, srv, token, rev0, rev)
	checkStreamEnd(t, "notice", notices.err)
	for _, m := range notices.msgs {
		t.Errorf("notice %#v to a session no other session wrote under", m)
	}

	if err := goodbyeMem(srv, holder, holderConn); err != nil {
		t.Fatalf("holder: %v", err)
	}
	// Its notice stream has ended: RecvNotice returns what it queued, then
	// why it ended.
	for {
		m, err := holder.RecvNotice(context.Background())
		if err != nil {
			checkStreamEnd(t, "holder's notice", err)
			break
		}
		switch m := m.(type) {
		case *protocol.Invalidate:
			if len(m.Keys) != 1 || string(m.Keys[0]) != heldKey {
				t.Errorf("holder of %q told to invalidate %q", heldKey, m.Keys)
			}
		case *protocol.Recall:
			if string(m.Key) != lockKey || m.Token != token {
				t.Errorf("holder of %q with token %d recalled for %q with token %d", lockKey, token, m.Key, m.Token)
			}
		default:
			t.Errorf("%s on the notice stream", m.Type())
		}
	}

	// The server still serves.
	health, healthConn, err := dialMem(srv)
	if err != nil {
		t.Fatalf("after the input: %v", err)
	}
	if _, err := callMem(health, &protocol.Get{Key: []byte(healthKey)}); err != nil {
		t.Fatalf("after the input: %v", err)
	}
	if err := goodbyeMem(srv, health, healthConn); err != nil {
		t.Fatalf("after the input: %v", err)
	}

	// Once what is ready has committed and every lease has expired,
	// nothing is left.
	fx.settle(t)
	fx.advance(fuzzTerm + fuzzEpsilon + time.Millisecond)
	fx.settle(t)
	fx.revokeTTLLeases(t)
	st := srv.Stats()
	if st.WritesWaiting != 0 || st.Leases != 0 || st.WriteLeases != 0 || st.Sessions != 0 {
		t.Fatalf("after the sessions ended and their leases expired: %d writes waiting, %d leases, %d write leases, %d sessions",
			st.WritesWaiting, st.Leases, st.WriteLeases, st.Sessions)
	}
	if st.Revision < rev {
		t.Fatalf("revision went back from %d to %d", rev, st.Revision)
	}
	fx.lastRev = st.Revision

	if !wait.Until(fuzzWait, func() bool { return runtime.NumGoroutine() <= goroutines }) {
		t.Fatalf("%d goroutines %v after the input, %d before\n%s", runtime.NumGoroutine(), fuzzWait, goroutines, goroutineDump())
	}
}

// revokeTTLLeases revokes every TTL lease, once every read lease has
// expired, so that none left by an input expires in the middle of a later
// one and sends it notices.
func (fx *fuzzFixture) revokeTTLLeases(t *testing.T) {
	t.Helper()
	c, conn, err := dialMem(fx.srv)
	if err != nil {
		t.Fatalf("after the input: %v", err)
	}
	leases, err := callMem(c, &protocol.LeaseList{})
	if err != nil {
		t.Fatalf("after the input: %v", err)
	}
	for _, l := range leases.(*protocol.LeaseListReply).Leases {
		ctx, cancel := context.WithTimeout(context.Background(), fuzzWait)
		r, err := c.Call(ctx, &protocol.LeaseRevoke{Lease: l.Lease})
		cancel()
		if e, ok := r.(*protocol.Error); err != nil || ok && e.Code != protocol.CodeNotFound {
			t.Fatalf("revoke TTL lease %d after the input: %#v, %v", l.Lease, r, err)
		}
	}
	if err := goodbyeMem(fx.srv, c, conn); err != nil {
		t.Fatalf("after the input: %v", err)
	}
	fx.settle(t)
}

// writeInput writes the frames of an input to the request stream, and the
// bytes after them, as far as the session reads them: up to its first
// message if that is not a hello it accepts, and up to a goodbye. Every
// Stats request after the hello is a barrier (see barrier), so that an
// input can make requests wait for those before to complete, as a client
// that waits for replies does; one with an ID from 1 to 65535 also lets
// that many milliseconds of lease time pass.
func (fx *fuzzFixture) writeInput(t *testing.T, c *memConn, replies *drained, in *sessionInput) {
	t.Helper()
	for i, f := range in.frames {
		if i == 0 && !in.hello {
			fx.send(t, c, f.raw)
			return // the session ends after its first message
		}
		if st, ok := f.msg.(*protocol.Stats); ok {
			var advance time.Duration
			if st.ID < 1<<16 {
				advance = time.Duration(st.ID) * time.Millisecond
			}
			fx.barrier(t, c, replies, st.ID, f.raw, advance)
			continue
		}
		if !fx.send(t, c, f.raw) {
			return
		}
		if f.msg != nil && f.msg.Type() == protocol.TypeGoodbye {
			return // the session reads no further
		}
	}
	fx.send(t, c, in.rest)
}

// send writes b to the request stream. It reports false if the server
// closed the connection.
func (fx *fuzzFixture) send(t *testing.T, c *memConn, b []byte) bool {
	t.Helper()
	c.reqCli.SetWriteDeadline(time.Now().Add(fuzzWait))
	_, err := c.reqCli.Write(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("session hung: it read no request for %v\n%s", fuzzWait, goroutineDump())
	}
	return err == nil
}

// barrier sends a Stats request with ID id (encoded as raw, if not nil),
// waits for its reply, lets advance pass on the clock, and waits until the
// server has done what is due: lease expiries and deadlines ticked, and
// ready writes committed, their replies queued.
func (fx *fuzzFixture) barrier(t *testing.T, c *memConn, replies *drained, id uint64, raw []byte, advance time.Duration) {
	t.Helper()
	if raw == nil {
		raw = frames(t, &protocol.Stats{ID: id})
	}
	seen := replies.count(id)
	if !fx.send(t, c, raw) {
		t.Fatalf("server closed the connection before a Stats request")
	}
	switch replies.waitReply(id, seen) {
	case replyMissing:
		t.Fatalf("the reply stream ended (%v) without the reply to Stats request %d", replies.err, id)
	case replyLate:
		t.Fatalf("session hung: no reply to Stats request %d within %v\n%s", id, fuzzWait, goroutineDump())
	}
	fx.settle(t)
	if advance > 0 {
		fx.advance(advance)
		fx.settle(t)
	}
}

// advance moves the clock on. The core's timer loop makes its timer again
// if the clock moved while it made it, so an Advance is never missed.
func (fx *fuzzFixture) advance(d time.Duration) {
	fx.clock.Advance(d)
}

// settle waits until the server's timer has ticked what is due on the
// clock, and its committer has committed every ready op.
func (fx *fuzzFixture) settle(t *testing.T) {
	t.Helper()
	srv := fx.srv
	now := fx.clock.Now()
	if !wait.Until(fuzzWait, func() bool {
		next, ok := srv.node.Core().NextDeadline()
		return !ok || next.After(now)
	}) {
		t.Fatalf("lease timer did not tick within %v\n%s", fuzzWait, goroutineDump())
	}
	drained := make(chan struct{}, 1)
	go func() { srv.node.Core().Drain(); drained <- struct{}{} }()
	if _, ok := wait.Recv(drained, fuzzWait); !ok {
		t.Fatalf("committer hung\n%s", goroutineDump())
	}
}

// sessionInput is a request stream cut into frames as the session reads
// them, with what the session does with it.
type sessionInput struct {
	frames []inputFrame
	rest   []byte // after the last whole frame: part of one, or one over the limit
	hello  bool   // the first frame is a hello the server accepts
	// open: the session reads the whole stream and goes on. It opens with
	// a hello and has no goodbye, and no bytes are left after its frames.
	open bool
	// byID lists, for each ID, the messages that get a reply with it: every
	// message with an ID, but a Cancel after the hello.
	byID map[uint64][]protocol.Message
	ids  map[uint64]bool // every ID in the stream
	next uint64          // where unusedID looks next
}

type inputFrame struct {
	raw []byte
	msg protocol.Message // nil if the frame does not decode
}

// readInput cuts stream into frames as a FrameReader with limit max does,
// and rebases them: see rebase.
func readInput(stream []byte, max int, token, rev uint64) *sessionInput {
	in := &sessionInput{byID: make(map[uint64][]protocol.Message), ids: make(map[uint64]bool), next: 1 << 62}
	goodbye := false
	for len(stream) >= 4 && !goodbye {
		n := binary.BigEndian.Uint32(stream)
		if n == 0 {
			in.frames = append(in.frames, inputFrame{raw: stream[:4]}) // malformed
			stream = stream[4:]
			continue
		}
		if uint64(n) > uint64(max) || uint64(n) > uint64(len(stream)-4) {
			break
		}
		f := inputFrame{raw: stream[:4+n]}
		stream = stream[4+n:]
		if m, err := protocol.Decode(protocol.Type(f.raw[4]), f.raw[5:]); err == nil {
			f.msg = m
			if rebase(m, token, rev) {
				if b, err := protocol.AppendFrame(nil, m); err == nil && len(b)-4 <= max {
					f.raw = b
				}
			}
		}
		first := len(in.frames) == 0
		in.frames = append(in.frames, f)
		if first {
			h, ok := f.msg.(*protocol.Hello)
			in.hello = ok && h.Version == protocol.Version
			if !in.hello {
				// Before the hello, anything gets an error reply with its ID.
				if id, ok := protocol.RequestID(f.msg); ok {
					in.ids[id] = true
					in.byID[id] = append(in.byID[id], f.msg)
				}
				return in
			}
			continue
		}
		if f.msg == nil {
			continue
		}
		goodbye = f.msg.Type() == protocol.TypeGoodbye
		if id, ok := protocol.RequestID(f.msg); ok {
			in.ids[id] = true
			if f.msg.Type() != protocol.TypeCancel {
				in.byID[id] = append(in.byID[id], f.msg)
			}
		}
	}
	in.rest = stream
	in.open = in.hello && !goodbye && len(stream) == 0
	return in
}

// unusedID returns an ID no message of the stream has, and records a Stats
// request with it.
func (in *sessionInput) unusedID() uint64 {
	for in.ids[in.next] {
		in.next++
	}
	id := in.next
	in.ids[id] = true
	in.byID[id] = append(in.byID[id], &protocol.Stats{ID: id})
	return id
}

// rebase maps the small fencing tokens and versions in m onto those the
// server gives out while the input runs, which an input cannot know:
// tokens 1 to 255 in Write, a Txn's ops and ReleaseWrite become token+t-1 (1 is the
// holder's token, 2 the token of the input's first acquisition granted,
// and so on), and versions 1 to 255 in a Write's Expect or a Get's Known
// become rev+v (1 is the version of the input's first write). It reports
// whether it changed m.
func rebase(m protocol.Message, token, rev uint64) bool {
	small := func(x uint64) bool { return x >= 1 && x <= 255 }
	changed := false
	switch m := m.(type) {
	case *protocol.Write:
		if small(m.Token) {
			m.Token, changed = token+m.Token-1, true
		}
		if small(m.Expect) {
			m.Expect, changed = rev+m.Expect, true
		}
	case *protocol.ReleaseWrite:
		if small(m.Token) {
			m.Token, changed = token+m.Token-1, true
		}
	case *protocol.Txn:
		for _, ops := range [2][]protocol.TxnOp{m.Then, m.Else} {
			for i := range ops {
				if small(ops[i].Token) {
					ops[i].Token, changed = token+ops[i].Token-1, true
				}
			}
		}
	case *protocol.Get:
		if small(m.Known) {
			m.Known, changed = rev+m.Known, true
		}
	}
	return changed
}

// answers says which request type a reply type answers.
var answers = map[protocol.Type][]protocol.Type{
	protocol.TypeGetReply:     {protocol.TypeGet},
	protocol.TypeWriteReply:   {protocol.TypeWrite},
	protocol.TypeRenewReply:   {protocol.TypeRenew},
	protocol.TypeAcquireReply: {protocol.TypeAcquire},
	protocol.TypeStatsReply:   {protocol.TypeStats},
	protocol.TypeOK:           {protocol.TypeRelease, protocol.TypeReleaseWrite, protocol.TypeGoodbye, protocol.TypeWatchProgress},

	protocol.TypeLeaseGrantReply:      {protocol.TypeLeaseGrant},
	protocol.TypeLeaseRevokeReply:     {protocol.TypeLeaseRevoke},
	protocol.TypeLeaseKeepAliveReply:  {protocol.TypeLeaseKeepAlive},
	protocol.TypeLeaseTimeToLiveReply: {protocol.TypeLeaseTimeToLive},
	protocol.TypeLeaseListReply:       {protocol.TypeLeaseList},

	protocol.TypeListReply: {protocol.TypeList},
	protocol.TypeTxnReply:  {protocol.TypeTxn},

	protocol.TypeWatchReply: {protocol.TypeWatch},
}

// checkReplies checks the replies of a session against the requests sent:
// token is the holder's fencing token, and the input ran between revisions
// rev0 and rev.
func checkReplies(t *testing.T, sent *sessionInput, replies *drained, srv *Server, token, rev0, rev uint64) {
	t.Helper()
	checkStreamEnd(t, "reply", replies.err)
	msgs := replies.msgs
	if len(msgs) > 0 {
		if hr, ok := msgs[0].(*protocol.HelloReply); ok {
			if !sent.hello {
				t.Errorf("hello reply without a hello")
			}
			if hr.Version != protocol.Version || hr.SessionID == 0 || hr.MaxFrameSize != srv.cfg.maxFrameSize() || hr.MaxValueSize != srv.cfg.MaxValueSize {
				t.Errorf("hello reply %+v", hr)
			}
			msgs = msgs[1:]
		} else if sent.hello {
			t.Errorf("first reply to a hello is %s", msgs[0].Type())
		}
	}
	count := make(map[uint64]int)
	// Each reply but an error answers the first request with its ID, of
	// the kind it answers, that no reply answered yet.
	answered := make(map[protocol.Message]bool)
	var lastVersion, lastToken uint64
	for _, m := range msgs {
		id, ok := protocol.RequestID(m)
		if !ok {
			t.Errorf("%s on the reply stream", m.Type())
			continue
		}
		if e, isErr := m.(*protocol.Error); isErr {
			if !e.Code.Valid() || e.Code == protocol.CodeOK || e.Message == "" {
				t.Errorf("error reply %+v: want a known code and a message", e)
			}
			if id == 0 {
				continue // about the session, or a request with ID 0
			}
		}
		count[id]++
		if n := len(sent.byID[id]); count[id] > n {
			t.Errorf("%d replies with ID %d to %d requests with it; the last is %#v", count[id], id, n, m)
		}
		var req protocol.Message
	find:
		for _, r := range sent.byID[id] {
			for _, rt := range answers[m.Type()] {
				if r.Type() == rt && !answered[r] {
					req = r
					answered[r] = true
					break find
				}
			}
		}
		if req == nil && m.Type() != protocol.TypeError {
			t.Errorf("%s with ID %d, which no request of its kind still waiting for a reply had", m.Type(), id)
			continue
		}
		switch m := m.(type) {
		case *protocol.GetReply:
			if m.Version > rev || m.Term < 0 || m.Term > fuzzTerm || (m.Unchanged && m.Term == 0) || (!m.Found && len(m.Value) > 0) {
				t.Errorf("get reply %+v at revision %d", m, rev)
			}
		case *protocol.WriteReply:
			if m.Unchanged {
				// A delete that found nothing to remove: the key's version,
				// no new one.
				if w, ok := req.(*protocol.Write); !ok || w.Op != protocol.OpDelete || m.Version > rev || m.Term < 0 || m.Term > fuzzTerm || m.Holders < 0 {
					t.Errorf("write reply %+v to %+v: unchanged, at revision %d", m, req, rev)
				}
				break
			}
			if m.Version <= rev0 || m.Version > rev || m.Version <= lastVersion || m.Term < 0 || m.Term > fuzzTerm || m.Holders < 0 {
				t.Errorf("write reply %+v: input ran from revision %d to %d, last version %d", m, rev0, rev, lastVersion)
			}
			lastVersion = m.Version
		case *protocol.AcquireReply:
			if m.Token <= token || m.Token <= lastToken || m.Term != fuzzTerm || m.Version > rev {
				t.Errorf("acquire reply %+v: holder's token %d, last token %d, revision %d", m, token, lastToken, rev)
			}
			lastToken = m.Token
		case *protocol.RenewReply:
			if n := len(req.(*protocol.Renew).Keys); len(m.Terms) != n {
				t.Errorf("renew of %d keys got %d terms", n, len(m.Terms))
			}
		case *protocol.StatsReply:
			if m.Revision < rev0 || m.Revision > rev {
				t.Errorf("stats reply at revision %d; input ran from %d to %d", m.Revision, rev0, rev)
			}
		case *protocol.LeaseGrantReply:
			if m.Lease == 0 || m.TTL != req.(*protocol.LeaseGrant).TTL {
				t.Errorf("grant reply %+v to %+v", m, req)
			}
		case *protocol.LeaseRevokeReply:
			if m.Revision > rev || m.Keys < 0 || (m.Keys > 0) != (m.Revision > rev0) || m.Holders < 0 {
				t.Errorf("revoke reply %+v: input ran from revision %d to %d", m, rev0, rev)
			}
		case *protocol.LeaseKeepAliveReply:
			if n := len(req.(*protocol.LeaseKeepAlive).Leases); len(m.Renewed)+len(m.Unknown) != n {
				t.Errorf("keep-alive of %d leases: %d renewed, %d unknown", n, len(m.Renewed), len(m.Unknown))
			}
		case *protocol.ListReply:
			// In key order, in the range, after After, within the limits,
			// at a revision the input saw, no key newer than it.
			q := req.(*protocol.List)
			keys, _ := listBounds(srv.cfg.MaxValueSize)
			if q.Limit > 0 {
				keys = min(keys, int(q.Limit))
			}
			if m.Revision < rev0 || m.Revision > rev || len(m.KVs) > keys {
				t.Errorf("list reply of %d keys at revision %d to %+v: input ran from revision %d to %d", len(m.KVs), m.Revision, q, rev0, rev)
			}
			for i, kv := range m.KVs {
				if bytes.Compare(kv.Key, q.Start) < 0 || len(q.End) > 0 && bytes.Compare(kv.Key, q.End) >= 0 ||
					len(q.After) > 0 && bytes.Compare(kv.Key, q.After) <= 0 || i > 0 && bytes.Compare(kv.Key, m.KVs[i-1].Key) <= 0 ||
					kv.Version == 0 || kv.Version > m.Revision || q.KeysOnly && len(kv.Value) > 0 {
					t.Errorf("list reply to %+v: key %d, %+v, out of order, range or revision %d", q, i, kv, m.Revision)
				}
			}
		case *protocol.TxnReply:
			// At a revision the input saw; a duplicate only of a retry.
			if m.Revision < rev0 || m.Revision > rev || m.Holders < 0 || m.Waited < 0 {
				t.Errorf("txn reply %+v: input ran from revision %d to %d", m, rev0, rev)
			}
		case *protocol.LeaseTimeToLiveReply:
			if q := req.(*protocol.LeaseTimeToLive); m.Lease != q.Lease || m.TTL < -1 || m.TTL > m.GrantedTTL || (m.TTL == -1) != (m.GrantedTTL == 0) || (!q.Keys && len(m.Keys) > 0) {
				t.Errorf("time to live %+v of %+v", m, q)
			}
		}
	}
}

// checkStreamEnd checks what ended a stream the server wrote: its end, or
// a connection closed, maybe in the middle of a frame; not a frame that is
// too large or does not decode.
func checkStreamEnd(t *testing.T, name string, err error) {
	t.Helper()
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("%s stream: %v", name, err)
	}
}

func clientFrameLimit(srv *Server) int {
	// What client.Conn reads replies and notices with: the frame limit the
	// server announces, plus room.
	return srv.cfg.maxFrameSize() + 1024
}

// sessionOn reports whether a session runs over c.
func sessionOn(srv *Server, c conn) bool {
	srv.smu.Lock()
	defer srv.smu.Unlock()
	for _, ss := range srv.sessions {
		if ss.conn == c {
			return true
		}
	}
	return false
}

func goroutineDump() string {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 1)
	return b.String()
}

// drained collects the messages of a stream until it ends.
type drained struct {
	mu   sync.Mutex // guards msgs until done is closed
	msgs []protocol.Message
	more chan struct{} // signalled when a message is added; capacity 1
	err  error         // what ended the stream; set before done is closed
	done chan struct{}
}

func drain(r io.Reader, max int) *drained {
	d := &drained{more: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		fr := protocol.NewFrameReader(r, max)
		for {
			m, err := fr.ReadMessage()
			if err != nil {
				d.err = err
				return
			}
			d.mu.Lock()
			d.msgs = append(d.msgs, m)
			d.mu.Unlock()
			select {
			case d.more <- struct{}{}:
			default:
			}
		}
	}()
	return d
}

// wait waits at most fuzzWait for the stream to end, and reports whether
// it did.
func (d *drained) wait() bool {
	wait.Recv(d.done, fuzzWait) // done is only ever closed
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

type replyWait int

const (
	replyCame replyWait = iota
	replyMissing
	replyLate
)

// count returns how many replies with ID id came so far.
func (d *drained) count(id uint64) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, m := range d.msgs {
		if mid, ok := protocol.RequestID(m); ok && mid == id {
			n++
		}
	}
	return n
}

// waitReply waits at most fuzzWait for a reply with ID id after the first
// seen of them.
func (d *drained) waitReply(id uint64, seen int) replyWait {
	timer := time.NewTimer(fuzzWait)
	defer timer.Stop()
	for {
		if d.count(id) > seen {
			return replyCame
		}
		select {
		case <-d.more:
		case <-d.done:
			if d.count(id) > seen {
				return replyCame
			}
			return replyMissing
		case <-timer.C:
			return replyLate
		}
	}
}

// memConn is a conn in memory, whose client end the test holds. The
// request stream is two pipes, one each way, so that the server's Close of
// it ends only its replies, as with QUIC; the notice stream is a third.
type memConn struct {
	ctx    context.Context
	cancel context.CancelCauseFunc

	reqSrv, reqCli   net.Conn // requests
	repSrv, repCli   net.Conn // replies
	noteSrv, noteCli net.Conn // invalidations and recalls

	mu       sync.Mutex // guards the fields below
	accepted bool
	opened   bool
	closed   bool // by the server, with code and msg
	code     protocol.Code
	msg      string

	identity string // the client certificate's CommonName, fixed before admit
}

func newMemConn() *memConn {
	c := &memConn{}
	c.ctx, c.cancel = context.WithCancelCause(context.Background())
	c.reqCli, c.reqSrv = net.Pipe()
	c.repSrv, c.repCli = net.Pipe()
	c.noteSrv, c.noteCli = net.Pipe()
	return c
}

// memStream is the server's end of the request stream.
type memStream struct{ r, w net.Conn }

func (s memStream) Read(p []byte) (int, error)        { return s.r.Read(p) }
func (s memStream) Write(p []byte) (int, error)       { return s.w.Write(p) }
func (s memStream) Close() error                      { return s.w.Close() }
func (s memStream) SetReadDeadline(t time.Time) error { return s.r.SetReadDeadline(t) }

func (c *memConn) AcceptStream(ctx context.Context) (requestStream, error) {
	c.mu.Lock()
	first := !c.accepted
	c.accepted = true
	c.mu.Unlock()
	if first && c.ctx.Err() == nil {
		return memStream{r: c.reqSrv, w: c.repSrv}, nil
	}
	return nil, c.waitClosed(ctx)
}

func (c *memConn) OpenUniStreamSync(ctx context.Context) (io.WriteCloser, error) {
	c.mu.Lock()
	first := !c.opened
	c.opened = true
	c.mu.Unlock()
	if first && c.ctx.Err() == nil {
		return c.noteSrv, nil
	}
	return nil, c.waitClosed(ctx)
}

// OpenWatchStream has no streams of watches to give: the watch's
// goroutine ends at once.
func (c *memConn) OpenWatchStream(ctx context.Context) (watchStream, error) {
	return nil, errors.New("no watch streams over an in-memory connection")
}

// Identity is the CommonName of the certificate the client presented.
func (c *memConn) Identity() string { return c.identity }

// waitClosed waits for ctx or the connection to end, and says which did.
func (c *memConn) waitClosed(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return context.Cause(c.ctx)
	}
}

var (
	errServerClosedConn = errors.New("connection closed by the server")
	errClientClosedConn = errors.New("connection closed by the client")
)

// CloseWithError closes the server's ends: the client reads the end of
// every stream.
func (c *memConn) CloseWithError(code protocol.Code, msg string) {
	c.mu.Lock()
	if !c.closed {
		c.closed, c.code, c.msg = true, code, msg
	}
	c.mu.Unlock()
	c.cancel(errServerClosedConn)
	c.reqSrv.Close()
	c.repSrv.Close()
	c.noteSrv.Close()
}

// closeClient closes the client's ends, as a client closes its connection.
func (c *memConn) closeClient() {
	c.cancel(errClientClosedConn)
	c.reqCli.Close()
	c.repCli.Close()
	c.noteCli.Close()
}

// closedWith returns the code and message the server closed c with, if it
// did.
func (c *memConn) closedWith() (protocol.Code, string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.code, c.msg, c.closed
}

func (c *memConn) Context() context.Context { return c.ctx }
func (c *memConn) RemoteAddr() net.Addr     { return c.reqSrv.RemoteAddr() }

// dialMem opens a session over a new memConn and says hello, as a
// well-behaved client: one that sends a request at a time and waits for
// its reply. It reads its notices and acknowledges none.
func dialMem(srv *Server) (*protoclient.Client, *memConn, error) {
	c := newMemConn()
	srv.admit(c)
	ctx, cancel := context.WithTimeout(context.Background(), fuzzWait)
	defer cancel()
	pc, err := protoclient.NewStreams(ctx, protoclient.Streams{
		Requests: deadlineWriter{c.reqCli},
		Replies:  c.repCli,
		Notices:  func(context.Context) (io.Reader, error) { return c.noteCli, nil },
		Close: func(protocol.Code, string) error {
			c.closeClient()
			return nil
		},
	}, protoclient.Options{MaxFrameSize: clientFrameLimit(srv)})
	if err != nil {
		return nil, nil, err
	}
	return pc, c, nil
}

// deadlineWriter bounds each write to a pipe by fuzzWait, so that a
// session that stops reading its requests fails a send instead of hanging
// it.
type deadlineWriter struct{ c net.Conn }

func (w deadlineWriter) Write(p []byte) (int, error) {
	w.c.SetWriteDeadline(time.Now().Add(fuzzWait))
	return w.c.Write(p)
}

// callMem sends req with a fresh ID and returns its reply, which must be
// of the kind that answers it.
func callMem(pc *protoclient.Client, req protocol.Message) (protocol.Message, error) {
	ctx, cancel := context.WithTimeout(context.Background(), fuzzWait)
	defer cancel()
	r, err := pc.Call(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", req.Type(), err)
	}
	for _, rt := range answers[r.Type()] {
		if rt == req.Type() {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%s answered with %#v", req.Type(), r)
}

// goodbyeMem ends a session of dialMem gracefully: goodbye, then the end of
// the reply stream; the client then closes its connection, which ends its
// notice stream, and the session ends.
func goodbyeMem(srv *Server, pc *protoclient.Client, c *memConn) error {
	if _, err := callMem(pc, &protocol.Goodbye{}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), fuzzWait)
	defer cancel()
	if m, err := pc.Recv(ctx); !errors.Is(err, io.EOF) {
		return fmt.Errorf("after goodbye: %#v, %v; want the end of the reply stream", m, err)
	}
	pc.Close()
	if !wait.Until(fuzzWait, func() bool { return !sessionOn(srv, c) }) {
		return fmt.Errorf("session still open %v after goodbye", fuzzWait)
	}
	return nil
}

// frames encodes ms as a stream of frames.
func frames(tb testing.TB, ms ...protocol.Message) []byte {
	tb.Helper()
	var b []byte
	for _, m := range ms {
		var err error
		if b, err = protocol.AppendFrame(b, m); err != nil {
			tb.Fatal(err)
		}
	}
	return b
}

// rawFrame is a frame of type t with body as it is.
func rawFrame(t protocol.Type, body ...byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(1+len(body)))
	return append(append(b, byte(t)), body...)
}

type sessionSeed struct {
	data  []byte
	hello bool
}

// sessionSeeds are real sessions, and broken ones. Tokens and versions in
// them are relative (see rebase); Stats requests are barriers, and those
// with IDs below 65536 let time pass (see writeInput).
func sessionSeeds(tb testing.TB) []sessionSeed {
	k, a, lock, lock2 := []byte(heldKey), []byte("a"), []byte(lockKey), []byte("lock2")
	// Printable, because error replies quote keys.
	bigKey := bytes.Repeat([]byte{'b'}, MaxKeySize)
	seq := func(ms ...protocol.Message) []byte { return frames(tb, ms...) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	put := func(id uint64, key []byte, v string) *protocol.Write {
		return &protocol.Write{ID: id, Op: protocol.OpPut, Key: key, Value: []byte(v)}
	}
	// barrier waits for the replies before it; pass also lets time pass.
	barrier := &protocol.Stats{ID: 1 << 20}
	pass := func(d time.Duration) *protocol.Stats { return &protocol.Stats{ID: uint64(d / time.Millisecond)} }
	seeds := []sessionSeed{
		{data: nil},
		{data: seq(&protocol.Get{ID: 1, Key: a}, &protocol.Get{ID: 2, Key: k}, &protocol.Get{ID: 3, Key: a, Revalidate: true, Known: 1},
			&protocol.Get{ID: 4}, &protocol.Get{ID: 5, Key: bytes.Repeat([]byte{'x'}, MaxKeySize+1)})},
		// Listings: a prefix, pages, keys only, every key, bad ranges.
		{data: seq(put(1, a, "v1"), put(2, []byte("a/b"), "v2"), put(3, []byte("a/c"), "v3"), put(4, []byte("b"), "v4"), barrier,
			&protocol.List{ID: 5, Start: []byte("a/"), End: []byte("a0")},
			&protocol.List{ID: 6, Start: a, Limit: 1}, &protocol.List{ID: 7, Start: a, After: []byte("a/b"), KeysOnly: true},
			&protocol.List{ID: 8}, &protocol.Write{ID: 9, Op: protocol.OpDelete, Key: []byte("a/b")}, barrier,
			&protocol.List{ID: 10, Start: []byte("a/")},
			&protocol.List{ID: 11, Start: []byte("b"), End: a},
			&protocol.List{ID: 12, Start: bytes.Repeat([]byte{'x'}, MaxKeySize+1)})},
		// Watches: from a revision, of a prefix, a compacted start, one
		// past the next revision, an empty range, a watch id used twice,
		// progress of a watch and of none.
		{data: seq(put(1, a, "v1"), put(2, []byte("a/b"), "v2"), barrier,
			&protocol.Watch{ID: 3, WatchID: 1, Start: a, From: 1, Prev: true},
			&protocol.Watch{ID: 4, WatchID: 2, Start: []byte("a/"), End: []byte("a0"), Progress: time.Millisecond},
			&protocol.Watch{ID: 5, WatchID: 3, Start: a, From: 99},
			&protocol.Watch{ID: 6, WatchID: 4, Start: []byte("b"), End: a},
			&protocol.Watch{ID: 7, WatchID: 1, Start: a},
			&protocol.WatchProgress{ID: 8, WatchID: 2}, &protocol.WatchProgress{ID: 9, WatchID: 77},
			&protocol.Watch{ID: 10, WatchID: 5, Start: bytes.Repeat([]byte{'x'}, MaxKeySize+1)}, put(11, a, "v3"))},
		// Transactions: a rename, its failed repeat, fenced and refused
		// ones (a key twice, a compare of no kind, too many ops, a
		// wrong token), and one with nothing to write.
		{data: seq(put(1, a, "v1"), barrier,
			&protocol.Txn{ID: 2, If: []protocol.Compare{{Key: a, Op: protocol.CmpExists}, {Key: []byte("a/b"), Op: protocol.CmpAbsent}},
				Then: []protocol.TxnOp{{Op: protocol.OpPut, Key: []byte("a/b"), Value: []byte("v1")}, {Op: protocol.OpDelete, Key: a}}}, barrier,
			&protocol.Txn{ID: 3, If: []protocol.Compare{{Key: a, Op: protocol.CmpVersionEqual, Version: 1}},
				Then: []protocol.TxnOp{{Op: protocol.OpPut, Key: []byte("a/b"), Value: []byte("v1")}}, Else: []protocol.TxnOp{{Op: protocol.OpPut, Key: a, Value: []byte("v2")}}},
			&protocol.Txn{ID: 4, Then: []protocol.TxnOp{{Op: protocol.OpPut, Key: k, Value: []byte("held"), Token: 1}, {Op: protocol.OpDelete, Key: []byte("a/c")}}},
			&protocol.Txn{ID: 5, Then: []protocol.TxnOp{{Op: protocol.OpPut, Key: a}, {Op: protocol.OpDelete, Key: a}}},
			&protocol.Txn{ID: 6, If: []protocol.Compare{{Key: a, Op: 77}}},
			&protocol.Txn{ID: 7, Then: make([]protocol.TxnOp, MaxTxnOps+1)},
			&protocol.Txn{ID: 8, Then: []protocol.TxnOp{{Op: protocol.OpPut, Key: k, Token: 99}}},
			&protocol.Txn{ID: 9, If: []protocol.Compare{{Key: a, Op: protocol.CmpValueEqual, Value: []byte("v2")}}})},
		// A leased listing, a create under it while it is held, the
		// acknowledgement of its invalidation, a listing too large to
		// lease, and an acknowledgement of prefixes never held.
		{data: seq(put(1, []byte("d/a"), "v1"), barrier,
			&protocol.List{ID: 2, Start: []byte("d/"), End: []byte("d0"), Lease: true},
			&protocol.List{ID: 3, Start: []byte("d/"), End: []byte("d0"), Lease: true, Limit: 1},
			put(4, []byte("d/new"), "v2"), pass(20*time.Millisecond),
			&protocol.Ack{Prefixes: [][]byte{[]byte("d/"), {}, []byte("zz/")}}, barrier,
			&protocol.List{ID: 5, Start: []byte("d"), End: []byte("e"), Lease: true})},
		// Put, revalidate, compare-and-swap, delete.
		{data: seq(put(1, a, "v1"), barrier, &protocol.Get{ID: 2, Key: a, Revalidate: true, Known: 1},
			&protocol.Write{ID: 3, Op: protocol.OpCAS, Key: a, Value: []byte("v2"), Expect: 1}, barrier,
			&protocol.Write{ID: 4, Op: protocol.OpCAS, Key: a, Value: []byte("v3"), Expect: 1},
			&protocol.Write{ID: 5, Op: protocol.OpDelete, Key: a}, barrier,
			&protocol.Write{ID: 6, Op: protocol.OpCAS, Key: a, Value: []byte("v4")})},
		// Writes refused.
		{data: seq(&protocol.Write{ID: 1, Op: protocol.OpPut, Key: a, Value: make([]byte, fuzzMaxValue+1)},
			&protocol.Write{ID: 2, Op: protocol.OpDelete, Key: a, Value: []byte("x")},
			&protocol.Write{ID: 3, Op: 9, Key: a},
			&protocol.Write{ID: 4, Op: protocol.OpPut, Key: a, Timeout: -1},
			&protocol.Write{ID: 5, Op: protocol.OpPut},
			&protocol.Write{ID: 6, Op: protocol.OpPut, Key: a, Value: make([]byte, fuzzMaxValue)})},
		// Writes that wait for the holder's read lease: canceled, beyond
		// the limit in flight, a duplicate ID, a read meanwhile; then one
		// times out and the rest go through once the lease expires.
		{data: seq(put(1, k, "v"), &protocol.Get{ID: 2, Key: k}, &protocol.Cancel{ID: 1}, &protocol.Cancel{ID: 99},
			&protocol.Write{ID: 3, Op: protocol.OpPut, Key: k, Value: []byte("v"), Timeout: 500 * time.Millisecond},
			put(3, k, "dup"), &protocol.Get{ID: 3, Key: a}, put(4, k, "4"), put(5, k, "5"), put(6, k, "6"), put(7, a, "7"),
			pass(600*time.Millisecond), &protocol.Renew{ID: 8, Keys: [][]byte{k}}, pass(600*time.Millisecond), &protocol.Get{ID: 9, Key: k})},
		// Acquire, write under the token, release; fenced writes after.
		{data: seq(&protocol.Acquire{ID: 1, Key: lock2, Timeout: time.Second}, barrier,
			&protocol.Write{ID: 2, Op: protocol.OpPut, Key: lock2, Value: []byte("v"), Token: 2},
			&protocol.Write{ID: 3, Op: protocol.OpCAS, Key: lock2, Value: []byte("w"), Token: 2, Expect: 1},
			&protocol.Write{ID: 4, Op: protocol.OpPut, Key: lock2, Value: []byte("x")}, barrier,
			&protocol.ReleaseWrite{ID: 5, Key: lock2, Token: 2},
			&protocol.ReleaseWrite{ID: 6, Key: lock2, Token: 2},
			&protocol.Write{ID: 7, Op: protocol.OpPut, Key: lock2, Value: []byte("v"), Token: 2},
			&protocol.Write{ID: 8, Op: protocol.OpDelete, Key: lock2, Token: 200})},
		// The holder's write lease: recalled by an acquisition, which is
		// canceled; written under its token by another session, released
		// by one that does not hold it; acquired once it expired.
		{data: seq(&protocol.Acquire{ID: 1, Key: lock}, &protocol.Cancel{ID: 1},
			&protocol.Write{ID: 2, Op: protocol.OpPut, Key: lock, Value: []byte("v"), Token: 1},
			&protocol.ReleaseWrite{ID: 3, Key: lock, Token: 1},
			&protocol.Acquire{ID: 4, Key: lock, Timeout: -1}, &protocol.Acquire{ID: 5},
			&protocol.ReleaseWrite{ID: 6, Key: bigKey, Token: 1},
			&protocol.Acquire{ID: 7, Key: lock, Timeout: 10 * time.Second}, pass(1200*time.Millisecond),
			&protocol.Write{ID: 8, Op: protocol.OpPut, Key: lock, Value: []byte("w"), Token: 2},
			&protocol.ReleaseWrite{ID: 9, Key: lock, Token: 2})},
		// Leases read, renewed, released and acknowledged.
		{data: seq(&protocol.Get{ID: 1, Key: a}, &protocol.Get{ID: 2, Key: k},
			&protocol.Renew{ID: 3, Keys: [][]byte{a, k, lock}}, &protocol.Renew{ID: 4, Keys: [][]byte{a, {}}},
			&protocol.Renew{ID: 5}, &protocol.Release{ID: 6, Keys: [][]byte{a}}, &protocol.Release{ID: 7, Keys: [][]byte{{}}},
			&protocol.Ack{Keys: [][]byte{k}}, &protocol.Ack{}, &protocol.Ack{Keys: [][]byte{bigKey, append(bigKey, 1)}},
			&protocol.Stats{ID: 8})},
		// TTL leases: grants good and bad, a key attached, keep-alives of
		// known, unknown and too many leases, time to live, the list, a
		// revocation canceled and one that goes through, and the lease
		// gone after it.
		{data: seq(&protocol.LeaseGrant{ID: 1, TTL: 10 * time.Second}, &protocol.LeaseGrant{ID: 2, TTL: -1},
			&protocol.LeaseGrant{ID: 3, TTL: time.Millisecond}, &protocol.LeaseGrant{ID: 4, TTL: 1 << 62}, barrier,
			&protocol.Write{ID: 5, Op: protocol.OpPut, Key: a, Value: []byte("v"), Lease: 1},
			&protocol.Write{ID: 6, Op: protocol.OpPut, Key: k, Value: []byte("v"), Lease: 99},
			&protocol.Write{ID: 7, Op: protocol.OpDelete, Key: a, Lease: 1}, barrier,
			&protocol.Write{ID: 8, Op: protocol.OpPut, Key: a, Value: []byte("v"), Lease: 1},
			&protocol.LeaseKeepAlive{ID: 9, Leases: []uint64{1, 2, 0, 1 << 63}}, &protocol.LeaseKeepAlive{ID: 10},
			&protocol.LeaseKeepAlive{ID: 11, Leases: make([]uint64, 10001)},
			&protocol.LeaseTimeToLive{ID: 12, Lease: 1, Keys: true}, &protocol.LeaseTimeToLive{ID: 13},
			&protocol.LeaseList{ID: 14}, &protocol.Get{ID: 15, Key: a},
			&protocol.LeaseRevoke{ID: 16, Lease: 1, Timeout: 100 * time.Millisecond}, &protocol.Cancel{ID: 16}, barrier,
			&protocol.Ack{Keys: [][]byte{a}}, &protocol.LeaseRevoke{ID: 17, Lease: 1}, &protocol.LeaseRevoke{ID: 18, Lease: 1},
			&protocol.LeaseRevoke{ID: 19}, &protocol.LeaseRevoke{ID: 20, Lease: 2, Timeout: -1}, barrier,
			&protocol.LeaseKeepAlive{ID: 21, Leases: []uint64{1}}, &protocol.LeaseTimeToLive{ID: 22, Lease: 1})},
		// A fenced write whose key the error reply quotes.
		{data: seq(&protocol.Write{ID: 1, Op: protocol.OpPut, Key: bigKey, Value: []byte("v"), Token: 1})},
		// Goodbye, and requests after it that are not read.
		{data: seq(&protocol.Get{ID: 1, Key: a}, put(2, k, "v"), &protocol.Goodbye{ID: 3}, &protocol.Get{ID: 4, Key: a})},
		// Messages a client does not send.
		{data: seq(&protocol.Hello{Version: protocol.Version}, &protocol.GetReply{ID: 1}, &protocol.OK{ID: 2},
			&protocol.Error{ID: 3, Code: protocol.CodeInternal, Message: "x"}, &protocol.Invalidate{Keys: [][]byte{a}},
			&protocol.Recall{Key: a, Token: 1}, &protocol.StatsReply{ID: 4}, &protocol.Stats{ID: 5})},
		// Malformed frames are reported and skipped; a frame over the limit
		// ends the session.
		{data: cat(rawFrame(protocol.TypeGet, 0xc1), rawFrame(protocol.TypeGet, 0x80, 0xc0), rawFrame(0),
			rawFrame(200, 0x80), rawFrame(protocol.TypeWrite, 0x81, 0xa1, 'k', 0xdd, 0xff, 0xff, 0xff, 0xff),
			[]byte{0, 0, 0, 0}, seq(&protocol.Stats{ID: 1}),
			binary.BigEndian.AppendUint32(nil, uint32(Config{MaxValueSize: fuzzMaxValue}.maxFrameSize()+1)), seq(&protocol.Stats{ID: 2}))},
		// A truncated frame at the end.
		{data: cat(seq(&protocol.Get{ID: 1, Key: a}), seq(&protocol.Get{ID: 2, Key: a})[:9])},
	}
	for i := range seeds {
		seeds[i].hello = true
	}
	return append(seeds,
		sessionSeed{data: nil},
		sessionSeed{data: seq(&protocol.Hello{Version: protocol.Version, Client: "c"}, &protocol.Get{ID: 1, Key: a}, &protocol.Goodbye{ID: 2})},
		sessionSeed{data: seq(&protocol.Get{ID: 7, Key: a})},
		sessionSeed{data: seq(&protocol.Cancel{ID: 7})},
		sessionSeed{data: seq(&protocol.Ack{Keys: [][]byte{a}})},
		sessionSeed{data: seq(&protocol.Hello{Version: protocol.Version + 1})},
		sessionSeed{data: rawFrame(protocol.TypeHello, 0xc1)},
		sessionSeed{data: binary.BigEndian.AppendUint32(nil, 1<<31)},
	)
}
