package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/internal/snapstream"
	"github.com/leased/leased/protocol"
)

// SnapshotInfo says what a snapshot held, as the leader that streamed it
// reports it.
type SnapshotInfo = protocol.SnapshotSaveReply

// ErrCorruptSnapshot is returned by SaveSnapshot when the stream that
// arrived is not a whole snapshot, or not the one the leader reports.
var ErrCorruptSnapshot = snapstream.ErrCorrupt

// snapshotChunk is how much of the snapshot stream is read at a time.
const snapshotChunk = 256 << 10

// SaveSnapshot asks the node, which must lead its cluster (another node
// answers with a *ServerError of code CodeNotLeader that names the
// leader), for a snapshot of its applied state, and writes the stream to w
// as it arrives, a piece at a time: a consistent view at the leader's
// applied index, while writes go on. It checks the stream's frame and sum
// and its length against the leader's report, and returns the report; a
// stream that does not pass is ErrCorruptSnapshot, and w has then received
// what arrived. stall bounds every wait for progress: the start of the
// stream, each piece of it, and the report; ctx ends it at any point.
// The session takes no other request meanwhile.
func (a *Admin) SaveSnapshot(ctx context.Context, w io.Writer, stall time.Duration) (*SnapshotInfo, error) {
	if stall <= 0 {
		return nil, fmt.Errorf("%w: SaveSnapshot needs a positive stall bound", ErrInvalidArgument)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.nextID++
	id := a.nextID
	var err error
	if a.wbuf, err = protocol.AppendFrame(a.wbuf[:0], &protocol.SnapshotSave{ID: id}); err != nil {
		return nil, err
	}
	if _, err := a.stream.Write(a.wbuf); err != nil {
		return nil, fmt.Errorf("%w: send to %s: %w", ErrUnavailable, a.addr, transportError(err))
	}

	// The reply comes after the stream, or instead of it (an error); read
	// it beside the stream.
	type reply struct {
		m   protocol.Message
		err error
	}
	replies := make(chan reply, 1)
	a.stream.SetReadDeadline(time.Time{})
	go func() {
		for {
			m, err := a.fr.ReadMessage()
			if err != nil {
				replies <- reply{err: fmt.Errorf("%w: reply from %s: %w", ErrUnavailable, a.addr, transportError(err))}
				return
			}
			got, _ := protocol.RequestID(m)
			if e, ok := m.(*protocol.Error); got == id || (ok && e.ID == 0) {
				replies <- reply{m: m}
				return
			}
		}
	}()
	// awaitReply waits for the reply within stall, or gives it up.
	awaitReply := func(wait time.Duration) reply {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case r := <-replies:
			return r
		case <-ctx.Done():
		case <-t.C:
		}
		a.stream.SetReadDeadline(time.Now()) // ends the reader
		<-replies
		if ctx.Err() != nil {
			return reply{err: ctx.Err()}
		}
		return reply{err: fmt.Errorf("%w: no reply from %s within %v", ErrUnavailable, a.addr, wait)}
	}

	sctx, cancel := context.WithTimeout(ctx, stall)
	type accepted struct {
		st  *quic.ReceiveStream
		err error
	}
	streams := make(chan accepted, 1)
	go func() {
		st, err := a.qc.AcceptUniStream(sctx)
		streams <- accepted{st, err}
	}()
	var st *quic.ReceiveStream
	var early *reply // the report, if it overtook the stream's first bytes
	select {
	case r := <-replies:
		if _, ok := r.m.(*protocol.SnapshotSaveReply); ok {
			early = &r
			acc := <-streams
			cancel()
			if acc.err != nil {
				return nil, fmt.Errorf("%w: no snapshot stream from %s within %v: %v", ErrUnavailable, a.addr, stall, acc.err)
			}
			st = acc.st
			break
		}
		// An error instead of a stream.
		cancel()
		if acc := <-streams; acc.st != nil {
			acc.st.CancelRead(0)
		}
		if r.err != nil {
			return nil, r.err
		}
		return nil, adminError(r.m)
	case acc := <-streams:
		cancel()
		if acc.err != nil {
			r := awaitReply(0)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if r.err == nil {
				return nil, adminError(r.m)
			}
			return nil, fmt.Errorf("%w: no snapshot stream from %s within %v: %v", ErrUnavailable, a.addr, stall, acc.err)
		}
		st = acc.st
	}

	check := &snapstream.Checker{}
	stop := context.AfterFunc(ctx, func() { st.SetReadDeadline(time.Now()) })
	_, cerr := io.CopyBuffer(io.MultiWriter(errWriter{w}, check), stallReader{ctx, st, stall}, make([]byte, snapshotChunk))
	stop()
	if cerr != nil {
		st.CancelRead(0)
		var we writeError
		if errors.As(cerr, &we) {
			if early == nil {
				awaitReply(stall) // the leader's error, which adds nothing
			}
			return nil, we.err
		}
		// The leader reset the stream because it failed: its reply says
		// why.
		if early == nil {
			r := awaitReply(stall)
			switch {
			case ctx.Err() != nil:
				return nil, ctx.Err()
			case r.err == nil:
				if _, ok := r.m.(*protocol.Error); ok {
					return nil, adminError(r.m)
				}
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: snapshot stream from %s: %w", ErrUnavailable, a.addr, transportError(cerr))
	}
	var r reply
	if early != nil {
		r = *early
	} else {
		r = awaitReply(stall)
	}
	if r.err != nil {
		return nil, r.err
	}
	info, ok := r.m.(*protocol.SnapshotSaveReply)
	if !ok {
		return nil, adminError(r.m)
	}
	idx, err := check.Check()
	if err != nil {
		return nil, err
	}
	if idx != info.AppliedIndex || check.Len() != info.Bytes {
		return nil, fmt.Errorf("%w: %d bytes at applied index %d arrived; the leader sent %d at %d", ErrCorruptSnapshot, check.Len(), idx, info.Bytes, info.AppliedIndex)
	}
	return info, nil
}

// stallReader gives every read from r stall to make progress, until ctx
// ends.
type stallReader struct {
	ctx   context.Context
	r     *quic.ReceiveStream
	stall time.Duration
}

func (s stallReader) Read(p []byte) (int, error) {
	if err := s.ctx.Err(); err != nil {
		return 0, err
	}
	s.r.SetReadDeadline(time.Now().Add(s.stall))
	return s.r.Read(p)
}

// writeError is a failure to write what arrived to the caller's writer.
type writeError struct{ err error }

func (e writeError) Error() string { return e.err.Error() }

// errWriter marks the errors of w as writeErrors.
type errWriter struct{ w io.Writer }

func (e errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		err = writeError{err}
	}
	return n, err
}
