package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/node"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// Backups: an admin session asks the leader for a snapshot
// (protocol.SnapshotSave), and the leader streams it on a stream of its
// own, as it reads it from a consistent view of its database: neither side
// holds the whole snapshot in memory, and writes go on beside it.

// snapshotStall bounds how long the snapshot stream may make no progress
// (a client that stopped reading) before the leader gives it up and ends
// the view, which holds old versions of the database alive.
const snapshotStall = 30 * time.Second

// saveSnapshot answers m: it streams a snapshot on a new unidirectional
// stream, ends the stream, and returns the reply that says what it held;
// or, if it fails on the way, resets the stream and returns the error. The
// admin session's reader calls it, and reads no other request meanwhile.
func (ss *session) saveSnapshot(m *protocol.SnapshotSave) protocol.Message {
	s := ss.srv
	snap, err := s.node.Snapshot()
	if err != nil {
		return okOrError(m.ID, err)
	}
	defer snap.Release()
	ctx, cancel := context.WithTimeout(ss.conn.Context(), s.cfg.HelloTimeout)
	w, err := ss.conn.OpenUniStreamSync(ctx)
	cancel()
	if err != nil {
		return errorReply(m.ID, fmt.Errorf("%w: open the snapshot stream: %v", errUnavailable, err))
	}
	start := time.Now()
	sum, n, err := snap.WriteSummary(stallWriter{w})
	if err == nil {
		err = w.Close()
	}
	if err != nil {
		if c, ok := w.(interface{ CancelWrite(quic.StreamErrorCode) }); ok {
			c.CancelWrite(quic.StreamErrorCode(protocol.CodeUnavailable))
		}
		s.log.Warn("snapshot stream failed", "remote", ss.conn.RemoteAddr().String(), "bytes", n, "err", err)
		return errorReply(m.ID, fmt.Errorf("%w: stream the snapshot: %v", errUnavailable, err))
	}
	s.log.Info("snapshot streamed", "remote", ss.conn.RemoteAddr().String(), "applied_index", sum.Applied,
		"revision", sum.State.Revision, "keys", sum.Keys, "bytes", n, "took", time.Since(start))
	return &protocol.SnapshotSaveReply{
		ID:           m.ID,
		AppliedIndex: sum.Applied,
		Revision:     sum.State.Revision,
		Fence:        sum.State.Fence,
		Keys:         sum.Keys,
		Deleted:      sum.Deleted,
		WriteLeases:  len(sum.State.WriteLeases),
		Bytes:        n,
		Digest:       sum.Digest.String(),
	}
}

// stallWriter gives every write to w, if it can, snapshotStall to make
// progress.
type stallWriter struct{ w io.Writer }

func (s stallWriter) Write(p []byte) (int, error) {
	if d, ok := s.w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		d.SetWriteDeadline(time.Now().Add(snapshotStall))
	}
	return s.w.Write(p)
}

// Restore makes dir, which must be missing or empty, the data folder of a
// new server from a snapshot stream: node.Restore. `leased restore` calls
// it.
func Restore(dir string, snapshot io.Reader, name string, peers []Peer, bump uint64, log *slog.Logger) (store.Summary, error) {
	return node.Restore(dir, snapshot, name, peers, bump, log)
}
