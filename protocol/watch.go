package protocol

import "time"

// Watches (DESIGN §17): the changes of a key range, in revision order,
// from a revision, read from the event history (§16).
//
// The client asks with Watch on its request stream; the server answers
// WatchReply, then opens a unidirectional stream of the watch's own, and
// writes on it WatchEvents frames, the first of them with no events, and,
// when the watch ends on the server's side, a WatchEnd. A slow reader of
// one watch holds back that stream alone: QUIC's flow control stops its
// writer, and the session's replies and notices go on. The client ends a
// watch by stopping to read its stream (QUIC's STOP_SENDING).
const (
	TypeWatch         Type = 47 // watch a key range from a revision
	TypeWatchReply    Type = 48 //
	TypeWatchEvents   Type = 49 // server → client, on the watch's stream
	TypeWatchEnd      Type = 50 // server → client, the last frame of the watch's stream
	TypeWatchProgress Type = 51 // ask a watch for its progress now; reply OK
)

// MaxWatchesPerSession bounds the watches one session holds at once: the
// server refuses one more with CodeResourceExhausted, and the client lets
// the server open that many streams beside the notice stream.
const MaxWatchesPerSession = 1000

// Watch asks for the events of the keys in [Start, End) (an empty End: no
// upper bound; End = Start + "\x00": the key Start alone) from revision
// From on (0: from the revision after the current one), with each event's
// previous value if Prev. Progress is how often, while the watch has no
// event to send, the server says how far it has come (a WatchEvents with no
// events); 0 means the server's default, a negative value never. WatchID,
// which the client chooses, names the watch on its stream; a session's
// watches have distinct ones.
//
// The reply is WatchReply, or Error: CodeCompacted (Error.Compacted names
// the compaction point) for a From at or below the compaction point,
// CodeInvalidArgument for a From above the next revision or a range that is
// empty, CodePermissionDenied for a range the client may not read whole,
// CodeResourceExhausted past the session's watches.
type Watch struct {
	ID       uint64        `msgpack:"i"`
	WatchID  uint64        `msgpack:"w"`
	Start    []byte        `msgpack:"s"`
	End      []byte        `msgpack:"e,omitempty"`
	From     uint64        `msgpack:"f,omitempty"`
	Prev     bool          `msgpack:"p,omitempty"`
	Progress time.Duration `msgpack:"pg,omitempty"`
}

// WatchReply accepts a Watch: its stream follows, with every event of the
// range from revision From on.
type WatchReply struct {
	ID      uint64 `msgpack:"i"`
	WatchID uint64 `msgpack:"w"`
	// From is the first revision the watch reads: Watch.From, or the
	// revision after the current one.
	From uint64 `msgpack:"f"`
	// Compacted is the compaction point of the history when the watch
	// began.
	Compacted uint64 `msgpack:"c,omitempty"`
}

// WatchEvent is one event of a watch: a change of Key at Revision.
type WatchEvent struct {
	//lint:ignore U1000 msgpack reads the field's tag: encode as an array
	_msgpack struct{} `msgpack:",as_array"`
	// Kind is the store's event kind: 1 put, 2 delete, 3 expiry of the
	// TTL lease Lease.
	Kind     uint8
	Key      []byte
	Value    []byte
	Revision uint64
	Lease    uint64
	// PrevFound says that the key held PrevValue before, set at
	// PrevRevision: only for a watch with Prev.
	PrevFound    bool
	PrevValue    []byte
	PrevRevision uint64
}

// WatchEvents carries events of watch WatchID, in revision order. A
// revision's events may span several frames: every frame but the last of
// a revision has More set. A frame without More says that the watch has
// sent every event of its range at or below Revision: its progress, which
// a frame with no events (at the start, while idle, or on WatchProgress)
// carries alone. A client that resumes the watch elsewhere asks from
// Revision + 1 of the last frame without More.
type WatchEvents struct {
	WatchID  uint64       `msgpack:"w"`
	Events   []WatchEvent `msgpack:"e,omitempty"`
	More     bool         `msgpack:"m,omitempty"`
	Revision uint64       `msgpack:"r"`
}

// WatchEnd is the last frame of a watch's stream: why the server ended it.
// CodeCompacted (Compacted names the compaction point) says that the watch
// fell behind the compaction of the history: its client must list again;
// CodeClosed that the session or the server is closing; CodeNotLeader that
// the node no longer leads. A client resumes a watch that ended for any
// reason but CodeCompacted and CodePermissionDenied from the revision after
// the last it saw.
type WatchEnd struct {
	WatchID   uint64 `msgpack:"w"`
	Code      Code   `msgpack:"c"`
	Message   string `msgpack:"m,omitempty"`
	Compacted uint64 `msgpack:"cp,omitempty"`
}

// WatchProgress asks watch WatchID of the session to send its progress (a
// WatchEvents with no events) as soon as it has sent every event up to the
// current revision. The reply is OK, or Error of CodeNotFound for a watch
// the session does not have.
type WatchProgress struct {
	ID      uint64 `msgpack:"i"`
	WatchID uint64 `msgpack:"w"`
}

func (*Watch) Type() Type         { return TypeWatch }
func (*WatchReply) Type() Type    { return TypeWatchReply }
func (*WatchEvents) Type() Type   { return TypeWatchEvents }
func (*WatchEnd) Type() Type      { return TypeWatchEnd }
func (*WatchProgress) Type() Type { return TypeWatchProgress }
