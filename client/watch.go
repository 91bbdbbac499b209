package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/protocol"
)

// Watches (DESIGN §17): the changes of a key or a range, in revision
// order, from a revision, resumed on the next session, and on the next
// leader, from the revision after the last one delivered.

// WatchEventType says how a WatchEvent changed its key.
type WatchEventType uint8

// Types of watch events.
const (
	// WatchPut set the key's value.
	WatchPut WatchEventType = 1
	// WatchDelete deleted the key: a delete, or a revocation of the TTL
	// lease it was attached to (WatchEvent.Lease names it then).
	WatchDelete WatchEventType = 2
	// WatchExpire deleted the key because its TTL lease expired.
	WatchExpire WatchEventType = 3
)

func (t WatchEventType) String() string {
	switch t {
	case WatchPut:
		return "PUT"
	case WatchDelete:
		return "DELETE"
	case WatchExpire:
		return "EXPIRE"
	}
	return fmt.Sprintf("WatchEventType(%d)", uint8(t))
}

// WatchEvent is one change of one key.
type WatchEvent struct {
	Type WatchEventType
	Key  string
	// Value is the value a put set; nil otherwise.
	Value []byte
	// Revision is the revision of the change: the key's version after it.
	Revision uint64
	// Lease is the TTL lease a put attached the key to, or whose
	// revocation or expiry deleted it; 0: none.
	Lease LeaseID
	// PrevFound says that the key held PrevValue before the change, set at
	// PrevRevision; only with WithPrevValue.
	PrevFound    bool
	PrevValue    []byte
	PrevRevision uint64
}

// WatchResponse is what a watch delivers: the events of one or more whole
// revisions, or progress alone, or the error that ended it.
type WatchResponse struct {
	// Events are the changes of the watched keys, in revision order; a
	// revision's changes are all in one response.
	Events []WatchEvent
	// Revision is the watch's progress: every change of the watched keys
	// at or below it has been delivered, in this response or an earlier
	// one. A response with no events and no error carries progress alone
	// (WithProgressNotify, RequestProgress).
	Revision uint64
	// Err, if set, ended the watch: its channel closes after this
	// response. ErrCompacted (CompactRevision names the compaction
	// point): the server no longer holds the revision the watch needs;
	// list again. The watch's context's error when it ended. Others:
	// the server refused the watch (ErrPermissionDenied,
	// ErrInvalidArgument, ErrResourceExhausted), or the client closed
	// (ErrClosed).
	Err             error
	CompactRevision uint64
}

// WatchOption changes what a watch asks for.
type WatchOption func(*watchSpec)

// watchSpec is what a watch asks for.
type watchSpec struct {
	start, end []byte
	prefix     bool
	from       uint64
	prev       bool
	progress   time.Duration
}

// WithPrefix watches every key that starts with the key given.
func WithPrefix() WatchOption { return func(s *watchSpec) { s.prefix = true } }

// WithRange watches the keys from the key given up to end, not included.
func WithRange(end string) WatchOption { return func(s *watchSpec) { s.end = []byte(end) } }

// FromRevision starts the watch at revision rev: it delivers every change
// of the watched keys from rev on, as long as the server's history holds
// rev (else ErrCompacted). Without it, the watch starts after the current
// revision.
func FromRevision(rev uint64) WatchOption { return func(s *watchSpec) { s.from = rev } }

// WithPrevValue has each event carry the value its key held before.
func WithPrevValue() WatchOption { return func(s *watchSpec) { s.prev = true } }

// WithProgressNotify has the watch deliver its progress (a response with
// no events) every d while it has no change to deliver; the server's
// default is 10 s, and a negative d asks for none.
func WithProgressNotify(d time.Duration) WatchOption {
	return func(s *watchSpec) { s.progress = d }
}

// Watcher is a running watch. Its channel, C, delivers responses until the
// watch ends: after a response with Err, or when its context ends. Read C
// promptly: the watch reads its stream from the server only as fast as C
// is read, and a slow reader holds back nothing but its own watch.
type Watcher struct {
	C <-chan WatchResponse

	c  *Client
	mu sync.Mutex // guards the fields below
	// cn and id are the session and the id of the watch while its stream
	// is live; asked, that RequestProgress was called while it was not.
	cn    *conn
	id    uint64
	asked bool
}

// watchIDs numbers the watches of every client of the process.
var watchIDs atomic.Uint64

// Watch watches key, or the keys that WithPrefix or WithRange name, and
// delivers their changes on the returned Watcher's channel, in revision
// order, each exactly once, with a revision's changes together. When the
// session ends (a reconnection, a failover to another leader), the watch
// resumes on the next session from the revision after the last one
// delivered, so that no change is lost or delivered twice; while no session
// can be had it waits. It ends when ctx ends (its last response carries
// ctx's error), when the client closes, or with ErrCompacted when the
// server's history no longer holds a revision it needs. Keys the client
// may not read, under the server's access policy, are refused with
// ErrPermissionDenied: the whole range must be readable.
func (c *Client) Watch(ctx context.Context, key string, opts ...WatchOption) *Watcher {
	s := watchSpec{start: []byte(key)}
	for _, o := range opts {
		o(&s)
	}
	switch {
	case s.prefix:
		s.end = protocol.PrefixEnd(s.start)
	case len(s.end) == 0:
		s.end = append([]byte(key), 0)
	}
	out := make(chan WatchResponse)
	w := &Watcher{C: out, c: c}
	go w.run(ctx, s, out)
	return w
}

// RequestProgress asks the watch to deliver its progress as soon as it has
// delivered every change up to the server's current revision. It returns
// at once; a watch between sessions asks once the next one is live.
func (w *Watcher) RequestProgress() {
	w.mu.Lock()
	cn, id := w.cn, w.id
	w.asked = cn == nil
	w.mu.Unlock()
	if cn != nil {
		askProgress(cn, id)
	}
}

// askProgress sends the request for progress of watch id on session cn,
// and does not wait for its reply: the progress comes on the watch's
// stream. A session that ends meanwhile makes it moot: the next one starts
// with progress.
func askProgress(cn *conn, id uint64) {
	if rid, _, err := cn.start(&protocol.WatchProgress{WatchID: id}); err == nil {
		cn.forget(rid)
	}
}

// live records that watch id's stream on session cn is live (cn not nil)
// or not, and sends a request for progress that waited for it.
func (w *Watcher) live(cn *conn, id uint64) {
	w.mu.Lock()
	w.cn, w.id = cn, id
	asked := w.asked && cn != nil
	if asked {
		w.asked = false
	}
	w.mu.Unlock()
	if asked {
		askProgress(cn, id)
	}
}

// run is the watch's goroutine: a session's watch at a time, resumed on
// the next until the watch ends.
func (w *Watcher) run(ctx context.Context, s watchSpec, out chan<- WatchResponse) {
	defer close(out)
	c := w.c
	next := s.from
	deliver := func(r WatchResponse) bool {
		select {
		case out <- r:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		cn, err := c.awaitConn(ctx, time.Now().Add(100*365*24*time.Hour))
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			deliver(WatchResponse{Err: err})
			return
		}
		n, err := w.once(ctx, cn, &s, next, deliver)
		next = max(next, n)
		var se *ServerError
		switch {
		case err == nil:
			// The session ended, or the server ended the watch for now.
		case ctx.Err() != nil:
			deliver(WatchResponse{Err: ctx.Err()})
			return
		case errors.As(err, &se) && se.Code == protocol.CodeCompacted:
			deliver(WatchResponse{Err: err, CompactRevision: se.Compacted})
			return
		case errors.As(err, &se) && se.Code != protocol.CodeNotLeader && se.Code != protocol.CodeClosed && se.Code != protocol.CodeUnavailable:
			deliver(WatchResponse{Err: err})
			return
		}
		// Not served now: resume, on the next session or, in a moment,
		// on this one.
		select {
		case <-cn.done:
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// watchStream is a watch's stream, with the reader of its frames, as the
// connection hands it over (acceptWatches).
type watchStream struct {
	st *quic.ReceiveStream
	fr frameSource
}

// frameSource reads the frames of a stream.
type frameSource interface {
	ReadMessage() (protocol.Message, error)
}

// replayReader gives first, a frame read already, and then the frames of
// fr.
type replayReader struct {
	first protocol.Message
	fr    frameSource
}

func (r *replayReader) ReadMessage() (protocol.Message, error) {
	if m := r.first; m != nil {
		r.first = nil
		return m, nil
	}
	return r.fr.ReadMessage()
}

// once runs the watch on session cn from revision from (0: after the
// current one) until the session ends (nil) or the watch does (its error),
// and returns the revision to resume from.
func (w *Watcher) once(ctx context.Context, cn *conn, s *watchSpec, from uint64, deliver func(WatchResponse) bool) (uint64, error) {
	id := watchIDs.Add(1)
	ch := make(chan watchStream, 1)
	cn.pmu.Lock()
	if cn.watches == nil {
		cn.watches = make(map[uint64]chan watchStream)
	}
	cn.watches[id] = ch
	cn.pmu.Unlock()
	defer func() {
		// A stream that came after the watch stopped waiting for it is
		// refused: its server side ends.
		cn.pmu.Lock()
		delete(cn.watches, id)
		select {
		case late := <-ch:
			late.st.CancelRead(quic.StreamErrorCode(protocol.CodeCanceled))
		default:
		}
		cn.pmu.Unlock()
	}()
	m, err := cn.call(ctx, &protocol.Watch{WatchID: id, Start: s.start, End: s.end, From: from, Prev: s.prev, Progress: s.progress})
	if err != nil {
		if errors.Is(err, ErrClosed) && w.c.ctx.Err() == nil || errors.Is(err, ErrUnavailable) {
			return from, nil // the session ended under it
		}
		return from, err
	}
	r, ok := m.(*protocol.WatchReply)
	if !ok {
		return from, unexpected(m)
	}
	next := r.From
	var ws watchStream
	select {
	case ws = <-ch:
	case <-cn.done:
		return next, nil
	case <-ctx.Done():
		return next, ctx.Err()
	}
	defer ws.st.CancelRead(quic.StreamErrorCode(protocol.CodeClosed))
	stop := context.AfterFunc(ctx, func() { ws.st.CancelRead(quic.StreamErrorCode(protocol.CodeCanceled)) })
	defer stop()
	w.live(cn, id)
	defer w.live(nil, 0)
	var pending []WatchEvent
	first := true
	for {
		m, err := ws.fr.ReadMessage()
		if err != nil {
			if ctx.Err() != nil {
				return next, ctx.Err()
			}
			return next, nil // the session, or the stream, ended: resume
		}
		switch m := m.(type) {
		case *protocol.WatchEvents:
			for _, e := range m.Events {
				pending = append(pending, WatchEvent{Type: WatchEventType(e.Kind), Key: string(e.Key), Value: e.Value, Revision: e.Revision,
					Lease: LeaseID(e.Lease), PrevFound: e.PrevFound, PrevValue: e.PrevValue, PrevRevision: e.PrevRevision})
			}
			if m.More {
				continue
			}
			if m.Revision+1 < next || len(pending) > 0 && pending[0].Revision < next {
				return next, fmt.Errorf("%w: a watch went back to revision %d after %d", ErrProtocol, m.Revision, next-1)
			}
			resp := WatchResponse{Events: pending, Revision: m.Revision}
			pending = nil
			next = m.Revision + 1
			if first && len(resp.Events) == 0 {
				first = false // the stream's first frame: where it starts
				continue
			}
			first = false
			if !deliver(resp) {
				return next, ctx.Err()
			}
		case *protocol.WatchEnd:
			err := &ServerError{Code: m.Code, Message: m.Message, Compacted: m.Compacted}
			if m.Code == protocol.CodeClosed || m.Code == protocol.CodeNotLeader || m.Code == protocol.CodeUnavailable {
				return next, nil
			}
			return next, err
		default:
			return next, fmt.Errorf("%w: %s on a watch's stream", ErrProtocol, m.Type())
		}
	}
}

// acceptWatches hands each stream the server opens after the notice stream
// to the watch that its first frame names, until the connection ends. A
// stream that names no watch waiting for it (one that ended meanwhile) is
// refused.
func (cn *conn) acceptWatches() {
	defer cn.wg.Done()
	for {
		st, err := cn.qc.AcceptUniStream(cn.qc.Context())
		if err != nil {
			return
		}
		// A frame of a watch carries a value and its previous one.
		fr := protocol.NewFrameReader(st, 2*cn.hello.MaxFrameSize+8192)
		st.SetReadDeadline(time.Now().Add(cn.c.cfg.IdleTimeout * 4))
		m, err := fr.ReadMessage()
		st.SetReadDeadline(time.Time{})
		ev, ok := m.(*protocol.WatchEvents)
		if err != nil || !ok {
			st.CancelRead(quic.StreamErrorCode(protocol.CodeProtocol))
			continue
		}
		// Handed over under pmu, so that a watch that stops waiting
		// (once) finds the stream in its channel, or the stream finds no
		// watch. The channel holds the one stream of its watch.
		cn.pmu.Lock()
		handed := false
		if ch := cn.watches[ev.WatchID]; ch != nil {
			// The first frame is the watch's start; its reader skips it.
			select {
			case ch <- watchStream{st: st, fr: &replayReader{first: ev, fr: fr}}:
				handed = true
			default: // a second stream for one watch
			}
		}
		cn.pmu.Unlock()
		if !handed {
			st.CancelRead(quic.StreamErrorCode(protocol.CodeCanceled))
		}
	}
}
