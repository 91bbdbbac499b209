package protocol

import "time"

// Type tags a message. It is the first byte of every frame, before the
// msgpack body, so a reader can dispatch without decoding.
type Type uint8

// Message types. Requests carry an ID chosen by the client; every request
// but Ack and Cancel gets exactly one reply with the same ID: its own reply
// type, or Error. Type 0 is no message type.
const (
	TypeHello        Type = 1  // client → server, first frame on the request stream
	TypeHelloReply   Type = 2  // server → client
	TypeGet          Type = 3  // read a key, with a read lease
	TypeGetReply     Type = 4  //
	TypeWrite        Type = 5  // Put, Delete or CompareAndSwap
	TypeWriteReply   Type = 6  //
	TypeRenew        Type = 7  // extend the leases of many keys
	TypeRenewReply   Type = 8  //
	TypeRelease      Type = 9  // relinquish the read leases of many keys
	TypeAcquire      Type = 10 // acquire the write lease of a key
	TypeAcquireReply Type = 11 //
	TypeReleaseWrite Type = 12 // relinquish a write lease
	TypeCancel       Type = 13 // abandon a waiting write; no reply of its own
	TypeAck          Type = 14 // acknowledge invalidations; no reply
	TypeStats        Type = 15 // server counters
	TypeStatsReply   Type = 16 //
	TypeGoodbye      Type = 17 // graceful close: free every lease of the session
	TypeOK           Type = 18 // reply without a body
	TypeError        Type = 19 // reply carrying an error code
	TypeInvalidate   Type = 20 // server → client, on the invalidation stream
	TypeRecall       Type = 21 // server → client, on the invalidation stream

	// Cluster administration, in an admin session (Hello.Admin): any node
	// answers the first two; only the leader changes the membership.
	TypeMemberList          Type = 22 // the members of the cluster
	TypeMemberListReply     Type = 23 //
	TypeMemberAdd           Type = 24 // add a voter; reply OK
	TypeMemberRemove        Type = 25 // remove a member; reply OK
	TypeMemberTransfer      Type = 26 // hand the lead to another voter; reply OK
	TypeEndpointStatus      Type = 27 // this node's role, term and indexes
	TypeEndpointStatusReply Type = 28 //

	// Backups, in an admin session: the leader streams a snapshot.
	TypeSnapshotSave      Type = 29 // stream a snapshot of the applied state
	TypeSnapshotSaveReply Type = 30 // what the stream held, once it has ended

	// TTL leases (DESIGN §14): liveness leases with keys attached, which
	// are deleted when the lease is revoked or expires.
	TypeLeaseGrant           Type = 31 // grant a TTL lease
	TypeLeaseGrantReply      Type = 32 //
	TypeLeaseRevoke          Type = 33 // revoke a TTL lease, deleting its keys
	TypeLeaseRevokeReply     Type = 34 //
	TypeLeaseKeepAlive       Type = 35 // renew many TTL leases at once
	TypeLeaseKeepAliveReply  Type = 36 //
	TypeLeaseTimeToLive      Type = 37 // a TTL lease's remaining TTL, and its keys
	TypeLeaseTimeToLiveReply Type = 38 //
	TypeLeaseList            Type = 39 // the live TTL leases
	TypeLeaseListReply       Type = 40 //
)

// Range reads (range.go).
const (
	TypeList      Type = 41 // the keys under a prefix or in a range, at one revision
	TypeListReply Type = 42 //
)

// registry describes every message type, indexed by its Type. It is the only
// list of the types: New, Decode, RequestID, SetRequestID, Type.String,
// Type.Valid and NumTypes all read it. A new message type needs a Type constant, its struct
// with a Type method, and an entry here.
var registry = [...]entry{
	TypeHello:        withoutID[Hello]("hello"),
	TypeHelloReply:   withoutID[HelloReply]("hello_reply"),
	TypeGet:          withID("get", func(m *Get) *uint64 { return &m.ID }),
	TypeGetReply:     withID("get_reply", func(m *GetReply) *uint64 { return &m.ID }),
	TypeWrite:        withID("write", func(m *Write) *uint64 { return &m.ID }),
	TypeWriteReply:   withID("write_reply", func(m *WriteReply) *uint64 { return &m.ID }),
	TypeRenew:        withID("renew", func(m *Renew) *uint64 { return &m.ID }),
	TypeRenewReply:   withID("renew_reply", func(m *RenewReply) *uint64 { return &m.ID }),
	TypeRelease:      withID("release", func(m *Release) *uint64 { return &m.ID }),
	TypeAcquire:      withID("acquire", func(m *Acquire) *uint64 { return &m.ID }),
	TypeAcquireReply: withID("acquire_reply", func(m *AcquireReply) *uint64 { return &m.ID }),
	TypeReleaseWrite: withID("release_write", func(m *ReleaseWrite) *uint64 { return &m.ID }),
	TypeCancel:       withID("cancel", func(m *Cancel) *uint64 { return &m.ID }),
	TypeAck:          withoutID[Ack]("ack"),
	TypeStats:        withID("stats", func(m *Stats) *uint64 { return &m.ID }),
	TypeStatsReply:   withID("stats_reply", func(m *StatsReply) *uint64 { return &m.ID }),
	TypeGoodbye:      withID("goodbye", func(m *Goodbye) *uint64 { return &m.ID }),
	TypeOK:           withID("ok", func(m *OK) *uint64 { return &m.ID }),
	TypeError:        withID("error", func(m *Error) *uint64 { return &m.ID }),
	TypeInvalidate:   withoutID[Invalidate]("invalidate"),
	TypeRecall:       withoutID[Recall]("recall"),

	TypeMemberList:          withID("member_list", func(m *MemberList) *uint64 { return &m.ID }),
	TypeMemberListReply:     withID("member_list_reply", func(m *MemberListReply) *uint64 { return &m.ID }),
	TypeMemberAdd:           withID("member_add", func(m *MemberAdd) *uint64 { return &m.ID }),
	TypeMemberRemove:        withID("member_remove", func(m *MemberRemove) *uint64 { return &m.ID }),
	TypeMemberTransfer:      withID("member_transfer", func(m *MemberTransfer) *uint64 { return &m.ID }),
	TypeEndpointStatus:      withID("endpoint_status", func(m *EndpointStatus) *uint64 { return &m.ID }),
	TypeEndpointStatusReply: withID("endpoint_status_reply", func(m *EndpointStatusReply) *uint64 { return &m.ID }),
	TypeSnapshotSave:        withID("snapshot_save", func(m *SnapshotSave) *uint64 { return &m.ID }),
	TypeSnapshotSaveReply:   withID("snapshot_save_reply", func(m *SnapshotSaveReply) *uint64 { return &m.ID }),

	TypeLeaseGrant:           withID("lease_grant", func(m *LeaseGrant) *uint64 { return &m.ID }),
	TypeLeaseGrantReply:      withID("lease_grant_reply", func(m *LeaseGrantReply) *uint64 { return &m.ID }),
	TypeLeaseRevoke:          withID("lease_revoke", func(m *LeaseRevoke) *uint64 { return &m.ID }),
	TypeLeaseRevokeReply:     withID("lease_revoke_reply", func(m *LeaseRevokeReply) *uint64 { return &m.ID }),
	TypeLeaseKeepAlive:       withID("lease_keep_alive", func(m *LeaseKeepAlive) *uint64 { return &m.ID }),
	TypeLeaseKeepAliveReply:  withID("lease_keep_alive_reply", func(m *LeaseKeepAliveReply) *uint64 { return &m.ID }),
	TypeLeaseTimeToLive:      withID("lease_time_to_live", func(m *LeaseTimeToLive) *uint64 { return &m.ID }),
	TypeLeaseTimeToLiveReply: withID("lease_time_to_live_reply", func(m *LeaseTimeToLiveReply) *uint64 { return &m.ID }),
	TypeLeaseList:            withID("lease_list", func(m *LeaseList) *uint64 { return &m.ID }),
	TypeLeaseListReply:       withID("lease_list_reply", func(m *LeaseListReply) *uint64 { return &m.ID }),

	TypeList:      withID("list", func(m *List) *uint64 { return &m.ID }),
	TypeListReply: withID("list_reply", func(m *ListReply) *uint64 { return &m.ID }),

	TypeTxn:      withID("txn", func(m *Txn) *uint64 { return &m.ID }),
	TypeTxnReply: withID("txn_reply", func(m *TxnReply) *uint64 { return &m.ID }),

	TypeCompact:      withID("compact", func(m *Compact) *uint64 { return &m.ID }),
	TypeCompactReply: withID("compact_reply", func(m *CompactReply) *uint64 { return &m.ID }),

	TypeWatch:         withID("watch", func(m *Watch) *uint64 { return &m.ID }),
	TypeWatchReply:    withID("watch_reply", func(m *WatchReply) *uint64 { return &m.ID }),
	TypeWatchEvents:   withoutID[WatchEvents]("watch_events"),
	TypeWatchEnd:      withoutID[WatchEnd]("watch_end"),
	TypeWatchProgress: withID("watch_progress", func(m *WatchProgress) *uint64 { return &m.ID }),
}

// entry is a message type's row in the registry. The zero entry, at the
// indexes of unused Type values, marks no type.
type entry struct {
	name string         // in stats and error messages
	new  func() Message // a new zero message of the type
	// id returns the request ID field of a message of the type. It is nil
	// for types that carry none, and returns nil for a Message of the
	// type's tag that is not the package's struct.
	id func(Message) *uint64
}

// withoutID returns the entry of a message type whose struct is T and that
// carries no request ID.
func withoutID[T any, M interface {
	*T
	Message
}](name string) entry {
	return entry{name: name, new: func() Message { return M(new(T)) }}
}

// withID returns the entry of a message type whose struct is T and that
// carries the request ID field that id points to: a request, or the reply
// to one.
func withID[T any, M interface {
	*T
	Message
}](name string, id func(M) *uint64) entry {
	e := withoutID[T, M](name)
	e.id = func(m Message) *uint64 {
		if m, ok := m.(M); ok {
			return id(m)
		}
		return nil
	}
	return e
}

// NumTypes bounds the message types: every valid Type is below it. Servers
// use it to size per-type counter arrays.
const NumTypes = len(registry)

// String returns the type's name, as used in stats.
func (t Type) String() string {
	if !t.Valid() {
		return "unknown"
	}
	return registry[t].name
}

// Valid reports whether t is a known message type.
func (t Type) Valid() bool { return int(t) < len(registry) && registry[t].new != nil }

// Message is any protocol message.
type Message interface {
	Type() Type
}

// Hello opens a session. It must be the first frame a client sends.
type Hello struct {
	Version uint16 `msgpack:"v"`
	Client  string `msgpack:"c,omitempty"` // free-form client name, for logs
	// ClientID is the client's identity, the same on every session it
	// opens, on any node: random, and not 0. With it, each of its writes
	// is applied once per request ID, so the client may send a write again
	// on a new session when it lost the first one's reply; it must then
	// never use a request ID twice for different writes. 0: no identity.
	ClientID uint64 `msgpack:"ci,omitempty"`
	// Admin opens an admin session, which any node of a cluster accepts:
	// it carries only the cluster administration messages (MemberList and
	// the rest) and Goodbye, and gets no notice stream.
	Admin bool `msgpack:"adm,omitempty"`
}

// HelloReply accepts a session and tells the client the server's settings.
type HelloReply struct {
	Version      uint16        `msgpack:"v"`
	SessionID    uint64        `msgpack:"s"`
	Epsilon      time.Duration `msgpack:"e"`  // the server's clock allowance ε
	DefaultTerm  time.Duration `msgpack:"t"`  // the default lease term
	MaxKeySize   int           `msgpack:"mk"` // bytes
	MaxValueSize int           `msgpack:"mv"` // bytes
	MaxFrameSize int           `msgpack:"mf"` // bytes, type byte and body
	MaxInflight  int           `msgpack:"mi"` // requests in flight per connection
	// RetryWindow is how long after a client's last write the server
	// keeps the outcomes of its writes: a write sent again within it is
	// applied once (Hello.ClientID). 0: writes are not de-duplicated.
	RetryWindow time.Duration `msgpack:"rw,omitempty"`
	// ServerVersion is the server's build, for display only: a module
	// version such as v1.2.0, or for a development build "devel" with its
	// commit time and revision (package internal/version). Empty from a
	// server that predates it.
	ServerVersion string `msgpack:"sv,omitempty"`
}

// Get reads a key. If Revalidate is set and Known is still the key's version,
// the reply says Unchanged and carries no value.
type Get struct {
	ID         uint64 `msgpack:"i"`
	Key        []byte `msgpack:"k"`
	Revalidate bool   `msgpack:"r,omitempty"`
	Known      uint64 `msgpack:"n,omitempty"`
}

// GetReply answers a Get. Term is how long the client may serve the answer
// from its cache, counted from when it sent the request; 0 means do not cache.
type GetReply struct {
	ID        uint64        `msgpack:"i"`
	Found     bool          `msgpack:"f,omitempty"`
	Unchanged bool          `msgpack:"u,omitempty"`
	Value     []byte        `msgpack:"val,omitempty"`
	Version   uint64        `msgpack:"ver"`
	Term      time.Duration `msgpack:"t"`
}

// WriteOp says what a Write does.
type WriteOp uint8

// Write operations.
const (
	OpPut    WriteOp = 1
	OpDelete WriteOp = 2
	OpCAS    WriteOp = 3 // Put if the key's version equals Expect
)

// Write changes a key. Token, if not 0, is the fencing token of the
// writer's write lease on the key. Timeout, if not 0, abandons the write if
// it has not committed that long after the server received it.
type Write struct {
	ID      uint64        `msgpack:"i"`
	Op      WriteOp       `msgpack:"o"`
	Key     []byte        `msgpack:"k"`
	Value   []byte        `msgpack:"val,omitempty"`
	Expect  uint64        `msgpack:"x,omitempty"`
	Token   uint64        `msgpack:"tok,omitempty"`
	Timeout time.Duration `msgpack:"to,omitempty"`
	// Acked, from a client with a Hello.ClientID, says that it has the
	// outcome of each of its writes with an ID below Acked and will not
	// send them again, so the server may forget those outcomes.
	Acked uint64 `msgpack:"a,omitempty"`
	// Lease, on a Put or CompareAndSwap, attaches Key to that TTL lease
	// (moving it from any other); 0 detaches it from any. A Delete
	// detaches its key whatever Lease says.
	Lease uint64 `msgpack:"ls,omitempty"`
	// Guard, if set, makes the write commit only if the write lease on
	// Guard.Key is held with Guard.Token when it commits; otherwise it
	// fails with CodeFenced and nothing changes.
	Guard *Guard `msgpack:"g,omitempty"`
	// Under, on a write with a Token, is a TTL lease the client may use:
	// it may then write under a write lease bound to that lease (a lock)
	// that another client holds, and takes it over (ReleaseWrite.Under).
	Under uint64 `msgpack:"u,omitempty"`
}

// Guard names a lock and the token a write expects it to be held with.
type Guard struct {
	Key   []byte `msgpack:"k"`
	Token uint64 `msgpack:"tok"`
}

// WriteReply reports a committed write. Waited is how long the write waited
// for holders, and Holders how many it had to invalidate or recall. Term is
// the writer's fresh read lease on the value it wrote (0: none).
type WriteReply struct {
	ID      uint64        `msgpack:"i"`
	Version uint64        `msgpack:"ver"`
	Waited  time.Duration `msgpack:"w"` // from receipt until holders let it commit; the commit itself not counted
	Holders int           `msgpack:"h"`
	Term    time.Duration `msgpack:"t"`
	// Duplicate says that the write was a retry of one that had committed,
	// and this is that commit: nothing changed now, and Term is 0.
	Duplicate bool `msgpack:"d,omitempty"`
	// Unchanged says that a delete found no key to remove: nothing
	// changed, no revision was spent, and Version is the key's current
	// version (that of its deletion, or 0).
	Unchanged bool `msgpack:"u,omitempty"`
}

// Renew extends the session's leases on Keys.
type Renew struct {
	ID   uint64   `msgpack:"i"`
	Keys [][]byte `msgpack:"k"`
}

// RenewReply gives, for each key of the Renew in order, the new term, or 0
// if the lease was not renewed (not held, or a write is pending).
type RenewReply struct {
	ID    uint64          `msgpack:"i"`
	Terms []time.Duration `msgpack:"t"`
}

// Release relinquishes the session's read leases on Keys. Keys the session
// holds no lease on are ignored. The reply is OK.
type Release struct {
	ID   uint64   `msgpack:"i"`
	Keys [][]byte `msgpack:"k"`
}

// Acquire asks for the exclusive write lease on Key. Mode says what it
// does if another client holds it (AcquireRecall, the zero value,
// AcquireWait or AcquireTry). With a Lease, the write lease is bound to
// that TTL lease: a lock, with no term (AcquireReply.Term 0), that lives
// until it is released or the TTL lease ends, and that nothing recalls.
type Acquire struct {
	ID      uint64        `msgpack:"i"`
	Key     []byte        `msgpack:"k"`
	Timeout time.Duration `msgpack:"to,omitempty"`
	Mode    AcquireMode   `msgpack:"m,omitempty"`
	Lease   uint64        `msgpack:"ls,omitempty"`
	// LockDelay, with a Lease, is how long the key stays unavailable to
	// acquisitions after the lock ends because its TTL lease expired (not
	// by a release or a revocation), at most MaxLockDelay.
	LockDelay time.Duration `msgpack:"ld,omitempty"`
}

// MaxLockDelay bounds a lock delay (Acquire.LockDelay), as Chubby's.
const MaxLockDelay = time.Minute

// AcquireMode says what an acquisition does if another client holds the
// write lease (DESIGN §5.1).
type AcquireMode uint8

// Acquisition modes.
const (
	// AcquireRecall recalls the holder's write lease, unless it is bound
	// to a TTL lease, and waits for it to end.
	AcquireRecall AcquireMode = iota
	// AcquireWait waits in line, first in first out, for the holder to
	// release or its lease to end; it never recalls.
	AcquireWait
	// AcquireTry fails at once with CodeLocked if another client holds
	// the write lease or acquisitions wait for it.
	AcquireTry
	acquireModes
)

// Valid reports whether m is a known mode.
func (m AcquireMode) Valid() bool { return m < acquireModes }

// AcquireReply grants a write lease with its fencing token and term, and
// gives the key's committed value.
type AcquireReply struct {
	ID      uint64        `msgpack:"i"`
	Token   uint64        `msgpack:"tok"`
	Term    time.Duration `msgpack:"t"`
	Found   bool          `msgpack:"f,omitempty"`
	Value   []byte        `msgpack:"val,omitempty"`
	Version uint64        `msgpack:"ver"`
}

// ReleaseWrite relinquishes the write lease on Key granted with Token.
//
// Under, if not 0, is a TTL lease the client may use: it may then release
// a write lease bound to that lease (a lock) that another client holds,
// as whoever may use a TTL lease may revoke it, which ends its locks.
type ReleaseWrite struct {
	ID    uint64 `msgpack:"i"`
	Key   []byte `msgpack:"k"`
	Token uint64 `msgpack:"tok"`
	Under uint64 `msgpack:"u,omitempty"`
}

// Cancel asks the server to abandon the waiting request ID. The request
// still gets its one reply: Error with CodeCanceled if it was abandoned, or
// its normal reply if it had already committed.
type Cancel struct {
	ID uint64 `msgpack:"i"`
}

// Ack tells the server that the client dropped Keys from its cache after an
// Invalidate, relinquishing its leases on them, and its listings of
// Prefixes, relinquishing its prefix leases.
type Ack struct {
	Keys     [][]byte `msgpack:"k"`
	Prefixes [][]byte `msgpack:"p,omitempty"`
}

// Stats asks for the server's counters.
type Stats struct {
	ID uint64 `msgpack:"i"`
}

// StatsReply carries the server's counters.
type StatsReply struct {
	ID                   uint64            `msgpack:"i"`
	Revision             uint64            `msgpack:"rev"`
	Sessions             int               `msgpack:"s"`
	Leases               int               `msgpack:"l"`
	WriteLeases          int               `msgpack:"wl"`
	WritesWaiting        int               `msgpack:"ww"`
	InvalidationsSent    uint64            `msgpack:"is"`
	InvalidationsAcked   uint64            `msgpack:"ia"`
	InvalidationsExpired uint64            `msgpack:"ie"`
	Recalls              uint64            `msgpack:"rc"`
	LeasesRenewed        uint64            `msgpack:"lr"` // keys a Renew gave a term
	MessagesIn           map[string]uint64 `msgpack:"mi"`
	MessagesOut          map[string]uint64 `msgpack:"mo"`
	Uptime               time.Duration     `msgpack:"up"`
	DefaultTerm          time.Duration     `msgpack:"t"`
	Epsilon              time.Duration     `msgpack:"e"`
	WritesAllowedIn      time.Duration     `msgpack:"wa"` // time left before a restarted server accepts writes
	// The server's bounds on memory, and what they refused (omitted when
	// zero, so older peers read and write the reply as before).
	InflightBytes   int64  `msgpack:"ib,omitempty"` // bytes of keys and values of the writes waiting, all sessions
	Handshakes      int64  `msgpack:"hs,omitempty"` // QUIC handshakes in progress
	LeasesRefused   uint64 `msgpack:"lx,omitempty"` // reads refused at a session's lease cap
	WritesRefused   uint64 `msgpack:"wx,omitempty"` // writes refused for a session's or the server's byte budget
	SessionsRefused uint64 `msgpack:"sx,omitempty"` // connections refused at MaxSessions or MaxSessionsPerAddr
	Retries         uint64 `msgpack:"rt,omitempty"` // Initial packets answered with a QUIC Retry: the sender must prove its source address
	// Alarm is the server's NOSPACE alarm, which refuses writes while
	// its data folder is past its quota or its disk below the reserve
	// (it says which, with the figures), or why its data folder is lost;
	// empty when writes are allowed.
	Alarm string `msgpack:"al,omitempty"`
	// TTL leases (DESIGN §14): how many the leader tracks; the
	// revocations applied, and of them those that expiry started; the
	// keys they deleted; how long they waited for their keys' holders in
	// all, and how many holders they invalidated or recalled, as writes
	// count them; and the leases keep-alives renewed.
	TTLLeases        int           `msgpack:"tl,omitempty"`
	TTLRevoked       uint64        `msgpack:"tr,omitempty"`
	TTLExpired       uint64        `msgpack:"te,omitempty"`
	TTLKeysDeleted   uint64        `msgpack:"tk,omitempty"`
	TTLRevokeWaited  time.Duration `msgpack:"tw,omitempty"`
	TTLRevokeHolders uint64        `msgpack:"th,omitempty"`
	TTLKeepAlives    uint64        `msgpack:"tka,omitempty"`
	// InvalidationsCancelled counts the invalidations sent that were
	// neither acknowledged nor expired: InvalidationsSent is the sum of
	// the three and of those outstanding. Omitted when zero.
	InvalidationsCancelled uint64 `msgpack:"ic,omitempty"`
	// LeaseStorageBytes is the memory of the lease table's storage (read
	// leases, keys, their names, the index and the expiry heap), which a
	// large table keeps outside the Go heap. It keeps its peak. Omitted
	// when zero.
	LeaseStorageBytes int64 `msgpack:"lsb,omitempty"`
	// PrefixLeases counts the outstanding prefix leases (DESIGN §3.9),
	// which Leases does not. Omitted when zero.
	PrefixLeases int `msgpack:"pl,omitempty"`
	// HistoryCompacted is the compaction point of the event history
	// (DESIGN §16): it holds the revisions above it; HistoryBytes and
	// HistoryEvents are what it holds, as the leader last read them (within
	// its compaction interval). Omitted when zero, and by older servers.
	HistoryCompacted uint64 `msgpack:"hc,omitempty"`
	HistoryBytes     uint64 `msgpack:"hb,omitempty"`
	HistoryEvents    uint64 `msgpack:"he,omitempty"`
}

// Goodbye ends a session gracefully: the server frees all of its leases at
// once. The reply is OK.
type Goodbye struct {
	ID uint64 `msgpack:"i"`
}

// OK is the reply to a request that returns nothing.
type OK struct {
	ID uint64 `msgpack:"i"`
}

// Error is the reply to a request that failed. ID 0 reports an error that
// concerns the whole session, such as a protocol violation, just before the
// server closes the connection.
type Error struct {
	ID      uint64 `msgpack:"i"`
	Code    Code   `msgpack:"c"`
	Message string `msgpack:"m"`
	// Leader, with CodeNotLeader, is the client address of the node that
	// leads the cluster, if this node knows it.
	Leader string `msgpack:"l,omitempty"`
	// Compacted, with CodeCompacted, is the compaction point of the event
	// history: a watch may start from the revision after it.
	Compacted uint64 `msgpack:"cp,omitempty"`
}

// Invalidate asks the client to drop Keys from its cache and acknowledge,
// and to drop its listings of Prefixes, which it holds prefix leases on.
type Invalidate struct {
	Keys     [][]byte `msgpack:"k"`
	Prefixes [][]byte `msgpack:"p,omitempty"`
}

// Recall asks the holder of the write lease on Key, granted with Token, to
// finish its writes and release it.
type Recall struct {
	Key   []byte `msgpack:"k"`
	Token uint64 `msgpack:"tok"`
}

func (*Hello) Type() Type        { return TypeHello }
func (*HelloReply) Type() Type   { return TypeHelloReply }
func (*Get) Type() Type          { return TypeGet }
func (*GetReply) Type() Type     { return TypeGetReply }
func (*Write) Type() Type        { return TypeWrite }
func (*WriteReply) Type() Type   { return TypeWriteReply }
func (*Renew) Type() Type        { return TypeRenew }
func (*RenewReply) Type() Type   { return TypeRenewReply }
func (*Release) Type() Type      { return TypeRelease }
func (*Acquire) Type() Type      { return TypeAcquire }
func (*AcquireReply) Type() Type { return TypeAcquireReply }
func (*ReleaseWrite) Type() Type { return TypeReleaseWrite }
func (*Cancel) Type() Type       { return TypeCancel }
func (*Ack) Type() Type          { return TypeAck }
func (*Stats) Type() Type        { return TypeStats }
func (*StatsReply) Type() Type   { return TypeStatsReply }
func (*Goodbye) Type() Type      { return TypeGoodbye }
func (*OK) Type() Type           { return TypeOK }
func (*Error) Type() Type        { return TypeError }
func (*Invalidate) Type() Type   { return TypeInvalidate }
func (*Recall) Type() Type       { return TypeRecall }

func (*MemberList) Type() Type          { return TypeMemberList }
func (*MemberListReply) Type() Type     { return TypeMemberListReply }
func (*MemberAdd) Type() Type           { return TypeMemberAdd }
func (*MemberRemove) Type() Type        { return TypeMemberRemove }
func (*MemberTransfer) Type() Type      { return TypeMemberTransfer }
func (*EndpointStatus) Type() Type      { return TypeEndpointStatus }
func (*EndpointStatusReply) Type() Type { return TypeEndpointStatusReply }
func (*SnapshotSave) Type() Type        { return TypeSnapshotSave }
func (*SnapshotSaveReply) Type() Type   { return TypeSnapshotSaveReply }

// New returns a new zero message of type t, or nil if t is not a known type.
func New(t Type) Message {
	if !t.Valid() {
		return nil
	}
	return registry[t].new()
}

// RequestID returns the request or reply ID that m carries, and false for
// messages that have none (Hello, HelloReply, Ack, Invalidate, Recall).
func RequestID(m Message) (uint64, bool) {
	if p := idField(m); p != nil {
		return *p, true
	}
	return 0, false
}

// SetRequestID stamps m with the request ID id, and reports false, leaving
// m alone, for messages that carry none. Clients call it as they send.
func SetRequestID(m Message, id uint64) bool {
	if p := idField(m); p != nil {
		*p = id
		return true
	}
	return false
}

// idField returns m's request ID field, or nil if it has none.
func idField(m Message) *uint64 {
	if m == nil {
		return nil
	}
	t := m.Type()
	if !t.Valid() || registry[t].id == nil {
		return nil
	}
	return registry[t].id(m)
}
