package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// Watches (DESIGN §17). Each watch of a session has a goroutine and a
// stream of its own (protocol.Watch): it reads the history from the core a
// page at a time (store.HistoryOptions), writes the page's events on its
// stream in frames of whole revisions where they fit, and, once it has
// read up to the committed revision, waits for the next
// (core.Core.Revisions), or for its progress to be due. It holds one page
// at a time: a slow reader holds back its own stream, through QUIC's flow
// control, and its own goroutine; commits, other watches, and the session's
// replies and notices go on. A watch that falls behind the compaction of
// the history ends with CodeCompacted; its client lists again.

// Bounds of watches.
const (
	// MaxWatchesPerSession bounds the watches one session holds at once
	// (protocol.MaxWatchesPerSession).
	MaxWatchesPerSession = protocol.MaxWatchesPerSession
	// DefaultWatchProgress is how often an idle watch reports its
	// progress when its client asks for no other interval.
	DefaultWatchProgress = 10 * time.Second
	// minWatchProgress is the shortest interval of progress a client may
	// ask for.
	minWatchProgress = 10 * time.Millisecond
	// watchPageEvents bounds the events of one page a watch reads.
	watchPageEvents = 1000
)

// watchStream is the stream of one watch, which the server opens: frames
// go out on it, CancelWrite abandons it, and its Context ends once the
// client stopped reading it (STOP_SENDING) or it is done.
type watchStream interface {
	Write(p []byte) (int, error)
	Close() error
	CancelWrite(code protocol.Code)
	Context() context.Context
}

// watcher is one watch of a session.
type watcher struct {
	ss       *session
	id       uint64
	start    []byte
	end      []byte
	next     uint64 // the first revision not yet read
	prev     bool
	progress time.Duration // 0: none
	// asked is signalled by WatchProgress: report progress as soon as
	// the watch has read up to the committed revision.
	asked  chan struct{}
	cancel context.CancelFunc
}

// watch answers a Watch: it checks it against the history of the core,
// registers the watcher and starts it.
func (ss *session) watch(m *protocol.Watch) protocol.Message {
	for _, k := range [][]byte{m.Start, m.End} {
		if len(k) > MaxKeySize {
			return errorReply(m.ID, fmt.Errorf("%w: key of %d bytes, limit %d", errTooLarge, len(k), MaxKeySize))
		}
	}
	if len(m.End) > 0 && bytes.Compare(m.Start, m.End) >= 0 {
		return errorReply(m.ID, fmt.Errorf("%w: the watched range [%q, %q) is empty", errInvalidArgument, m.Start, m.End))
	}
	rev, _ := ss.core.Revisions()
	from := m.From
	if from == 0 {
		from = rev + 1
	}
	if from > rev+1 {
		return errorReply(m.ID, fmt.Errorf("%w: a watch from revision %d, past the next revision %d", errInvalidArgument, from, rev+1))
	}
	// One read of the history checks the start against the compaction
	// point, as of now; the watcher reads again from from.
	p, err := ss.core.History(store.HistoryOptions{From: from, MaxScan: 1})
	if err != nil {
		return watchError(m.ID, err)
	}
	progress := m.Progress
	switch {
	case progress == 0:
		progress = DefaultWatchProgress
	case progress < 0:
		progress = 0
	default:
		progress = max(progress, minWatchProgress)
	}
	ctx, cancel := context.WithCancel(ss.conn.Context())
	w := &watcher{ss: ss, id: m.WatchID, start: m.Start, end: m.End, next: from, prev: m.Prev, progress: progress,
		asked: make(chan struct{}, 1), cancel: cancel}
	ss.mu.Lock()
	switch {
	case ss.watchers[m.WatchID] != nil:
		err = fmt.Errorf("%w: watch id %d is in use in this session", errInvalidArgument, m.WatchID)
	case len(ss.watchers) >= MaxWatchesPerSession:
		err = fmt.Errorf("%w: %d watches in this session, the limit", errResourceExhausted, MaxWatchesPerSession)
	case ss.watchersDone:
		err = fmt.Errorf("%w: the session is ending", errClosed)
	default:
		if ss.watchers == nil {
			ss.watchers = make(map[uint64]*watcher)
		}
		ss.watchers[m.WatchID] = w
		ss.watchWG.Add(1)
	}
	ss.mu.Unlock()
	if err != nil {
		cancel()
		return errorReply(m.ID, err)
	}
	go w.run(ctx)
	return &protocol.WatchReply{ID: m.ID, WatchID: m.WatchID, From: from, Compacted: p.Compacted}
}

// watchProgress answers a WatchProgress: the watch reports its progress
// once it has read up to the committed revision.
func (ss *session) watchProgress(m *protocol.WatchProgress) protocol.Message {
	ss.mu.Lock()
	w := ss.watchers[m.WatchID]
	ss.mu.Unlock()
	if w == nil {
		return errorReply(m.ID, fmt.Errorf("%w: no watch %d in this session", errNotFound, m.WatchID))
	}
	select {
	case w.asked <- struct{}{}:
	default:
	}
	return &protocol.OK{ID: m.ID}
}

// stopWatches ends every watch of the session and waits for their
// goroutines; the session calls it as it ends, and takes no watch after.
func (ss *session) stopWatches() {
	ss.mu.Lock()
	ss.watchersDone = true
	for _, w := range ss.watchers {
		w.cancel()
	}
	ss.mu.Unlock()
	ss.watchWG.Wait()
}

// watchError is the Error reply for err of a read of the history: a
// compacted start names the compaction point.
func watchError(id uint64, err error) *protocol.Error {
	e := errorReply(id, err)
	var ce *store.CompactedError
	if errors.As(err, &ce) {
		e.Compacted = ce.Compacted
	}
	return e
}

// run sends the watch's events until the session ends, the client stops
// reading, or the watch falls behind the compaction of the history.
func (w *watcher) run(ctx context.Context) {
	ss := w.ss
	defer func() {
		w.cancel()
		ss.mu.Lock()
		delete(ss.watchers, w.id)
		ss.mu.Unlock()
		ss.watchWG.Done()
	}()
	st, err := ss.conn.OpenWatchStream(ctx)
	if err != nil {
		return
	}
	stop := context.AfterFunc(st.Context(), w.cancel) // the client stopped reading
	defer stop()
	// A write held back by flow control ends when the watch does: the
	// session's end waits for the watch.
	abandon := context.AfterFunc(ctx, func() { st.CancelWrite(protocol.CodeClosed) })
	defer abandon()
	out := &watchOut{st: st, limit: ss.srv.cfg.maxFrameSize() / 2, fault: ss.srv.cfg.UnsafeWatchFault}
	if err := out.frame(&protocol.WatchEvents{WatchID: w.id, Revision: w.next - 1}); err != nil {
		st.CancelWrite(protocol.CodeClosed)
		return
	}
	end := func(code protocol.Code, compacted uint64, msg string) {
		if out.frame(&protocol.WatchEnd{WatchID: w.id, Code: code, Compacted: compacted, Message: msg}) == nil {
			st.Close()
			return
		}
		st.CancelWrite(code)
	}
	_, pageSize := listBounds(ss.srv.cfg.MaxValueSize)
	var idle *time.Timer
	if w.progress > 0 {
		idle = time.NewTimer(w.progress)
		defer idle.Stop()
	}
	for {
		rev, moved := ss.core.Revisions()
		caughtUp := false
		for !caughtUp {
			if ctx.Err() != nil {
				st.CancelWrite(protocol.CodeClosed)
				return
			}
			p, err := ss.core.History(store.HistoryOptions{From: w.next, Start: w.start, End: w.end, Prev: w.prev,
				MaxEvents: watchPageEvents, MaxBytes: pageSize})
			var ce *store.CompactedError
			switch {
			case errors.As(err, &ce):
				end(protocol.CodeCompacted, ce.Compacted, ce.Error())
				return
			case err != nil:
				// The store cannot be read now (a failed commit not yet
				// settled): the client resumes the watch in a moment.
				end(protocol.CodeUnavailable, 0, err.Error())
				return
			}
			if len(p.Events) > 0 {
				if err := out.events(w.id, p.Events, p.Next-1); err != nil {
					st.CancelWrite(protocol.CodeClosed)
					return
				}
				if idle != nil {
					idle.Reset(w.progress)
				}
			}
			w.next = p.Next
			caughtUp = p.Next > rev
		}
		var tick <-chan time.Time
		if idle != nil {
			tick = idle.C
		}
		select {
		case <-ctx.Done():
			end(protocol.CodeClosed, 0, "the session ended")
			return
		case <-moved:
			continue
		case <-w.asked:
		case <-tick:
		}
		// Progress: every event of the range up to the revision read is
		// sent.
		if err := out.frame(&protocol.WatchEvents{WatchID: w.id, Revision: w.next - 1}); err != nil {
			st.CancelWrite(protocol.CodeClosed)
			return
		}
		if idle != nil {
			idle.Reset(w.progress)
		}
	}
}

// watchOut writes the frames of one watch.
type watchOut struct {
	st    watchStream
	limit int // the bytes of events a frame carries at most, but one
	buf   []byte
	// fault and frames break the promise for the negative controls
	// (Config.UnsafeWatchFault): frames counts the frames of events.
	fault  string
	frames int
}

// frame writes m as one frame.
func (o *watchOut) frame(m protocol.Message) error {
	b, err := protocol.AppendFrame(o.buf[:0], m)
	if err != nil {
		return err
	}
	o.buf = b
	_, err = o.st.Write(b)
	return err
}

// events writes events, in revision order, in frames of at most limit
// bytes of keys and values (but one event, whatever its size); a
// revision's events span frames only where they do not fit one, and every
// frame but the last of a revision says More. The last frame carries
// progress, the revision through which every event of the range is sent.
func (o *watchOut) events(id uint64, events []store.Event, progress uint64) error {
	var batch []protocol.WatchEvent
	size := 0
	flush := func(more bool, rev uint64) error {
		m := &protocol.WatchEvents{WatchID: id, Events: batch, More: more, Revision: rev}
		o.frames++
		unsafe := o.fault != "" && o.frames%5 == 0
		switch {
		case unsafe && o.fault == "skip" && len(m.Events) > 0:
			m.Events = m.Events[1:]
		case unsafe && o.fault == "repeat" && len(m.Events) > 0:
			m.Events = append(m.Events, m.Events[len(m.Events)-1])
		}
		err := o.frame(m)
		batch, size = batch[:0], 0
		return err
	}
	for _, e := range events {
		n := len(e.Key) + len(e.Value) + len(e.PrevValue) + 64
		if len(batch) > 0 && size+n > o.limit {
			// The batch ends here: within a revision, More says that
			// its events go on.
			last := batch[len(batch)-1].Revision
			if err := flush(last == e.Revision, last); err != nil {
				return err
			}
		}
		batch = append(batch, protocol.WatchEvent{Kind: uint8(e.Kind), Key: e.Key, Value: e.Value, Revision: e.Revision, Lease: e.Lease,
			PrevFound: e.PrevFound, PrevValue: e.PrevValue, PrevRevision: e.PrevRevision})
		size += n
	}
	return flush(false, progress)
}
