package protocol

// The event history (DESIGN §16): its compaction, by an operator, in an
// admin session.
const (
	TypeCompact      Type = 45 // compact the history through a revision
	TypeCompactReply Type = 46 //
)

// Compact asks the leader to compact the event history through Revision
// at once: a watch or a read of the history from Revision or below fails
// with CodeCompacted from then on. A Revision at or below the compaction
// point changes nothing; one above the current revision is refused with
// CodeInvalidArgument. It needs the admin right. A node that does not lead
// answers with Error of CodeNotLeader, naming the leader.
type Compact struct {
	ID       uint64 `msgpack:"i"`
	Revision uint64 `msgpack:"r"`
}

// CompactReply is the history's state after a Compact: its compaction
// point (the history holds the revisions above it), and the bytes and
// events it holds.
type CompactReply struct {
	ID        uint64 `msgpack:"i"`
	Compacted uint64 `msgpack:"c"`
	Bytes     uint64 `msgpack:"b"`
	Events    uint64 `msgpack:"e"`
}

func (*Compact) Type() Type      { return TypeCompact }
func (*CompactReply) Type() Type { return TypeCompactReply }
