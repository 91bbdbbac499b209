package protocol

import "time"

// The messages of an admin session (Hello.Admin): cluster membership and
// each node's status (DESIGN §13). leasectl's member and endpoint commands
// send them; package server answers them.

// MemberList asks a node for the members of its cluster, as its latest
// raft configuration has them. Any node answers, and no right is needed:
// clients ask it to learn the client addresses of the cluster (DESIGN
// §13). A node of the cluster that asks its leader names itself in From
// and FromAddr, its client address; the leader notes the address once the
// node at it confirms that it is From. Older servers ignore both fields.
type MemberList struct {
	ID       uint64 `msgpack:"i"`
	From     string `msgpack:"f,omitempty"`
	FromAddr string `msgpack:"fa,omitempty"`
}

// Member is one member of a cluster.
type Member struct {
	Name     string `msgpack:"n"`
	PeerAddr string `msgpack:"p"`
	// Voter is false for a member that receives the log but does not
	// vote (raft's nonvoter).
	Voter bool `msgpack:"v,omitempty"`
	// Leads is true for the member that the answering node takes to lead.
	Leads bool `msgpack:"l,omitempty"`
	// ClientAddr is the address the member serves clients at, if the
	// answering node knows it; empty from older servers.
	ClientAddr string `msgpack:"ca,omitempty"`
}

// MemberListReply answers MemberList.
type MemberListReply struct {
	ID      uint64   `msgpack:"i"`
	Members []Member `msgpack:"m"`
}

// MemberAdd asks the leader to add a voter named Name that its peers
// reach at PeerAddr. The new node must run with --initial-cluster-state
// existing. The reply is OK once the new configuration is committed.
type MemberAdd struct {
	ID       uint64 `msgpack:"i"`
	Name     string `msgpack:"n"`
	PeerAddr string `msgpack:"p"`
}

// MemberRemove asks the leader to remove member Name. The reply is OK once
// the new configuration is committed; the removed node then stops.
type MemberRemove struct {
	ID   uint64 `msgpack:"i"`
	Name string `msgpack:"n"`
}

// MemberTransfer asks the leader to hand the lead to voter To, or, if To
// is empty, to the voter raft picks. The reply is OK once another node
// leads, or at once if To is the leader itself.
type MemberTransfer struct {
	ID uint64 `msgpack:"i"`
	To string `msgpack:"t,omitempty"`
}

// EndpointStatus asks the node that receives it for its own status.
type EndpointStatus struct {
	ID uint64 `msgpack:"i"`
}

// Roles of a node in EndpointStatusReply.Role.
const (
	RoleLeader    = "leader"
	RoleFollower  = "follower"
	RoleCandidate = "candidate"
)

// EndpointStatusReply is one node's status.
type EndpointStatusReply struct {
	ID         uint64 `msgpack:"i"`
	Name       string `msgpack:"n"`
	ClientAddr string `msgpack:"ca"`
	PeerAddr   string `msgpack:"pa,omitempty"` // empty for a server that is not a node of a cluster
	Role       string `msgpack:"r"`            // RoleLeader, RoleFollower or RoleCandidate
	// RaftTerm is raft's current term, not a lease term.
	RaftTerm     uint64 `msgpack:"t"`
	CommitIndex  uint64 `msgpack:"ci"`
	AppliedIndex uint64 `msgpack:"ai"`
	// Leader and LeaderAddr name the node this one takes to lead, and its
	// client address; empty when it knows none.
	Leader     string `msgpack:"l,omitempty"`
	LeaderAddr string `msgpack:"la,omitempty"`
	// WritesHeldFor is, on the leader, how long it still holds writes
	// back after taking the lead (the failover rule); 0 elsewhere.
	WritesHeldFor time.Duration `msgpack:"wh,omitempty"`
	// Alarm is this node's NOSPACE or READONLY alarm, or why its data
	// folder is lost, and the NOSPACE alarms of other members of its
	// cluster, each naming its member (StatsReply.Alarm); empty when there
	// is none.
	Alarm string `msgpack:"al,omitempty"`
	// DiskAlarm is this node's own NOSPACE alarm, its disk guard's, empty
	// when none is raised. Alarm shows it too, beside the NOSPACE alarms
	// of the other members that the cluster's log records; the leader
	// asks each member for it, to record it there (DESIGN §7). Older
	// servers never set it.
	DiskAlarm string `msgpack:"da,omitempty"`
	// Version is the node's build (as HelloReply.ServerVersion), and
	// Policy the digest of the access policy it holds clients to
	// (auth.Policy.Digest), empty for none: nodes of a cluster should show
	// the same of both.
	Version string `msgpack:"v,omitempty"`
	Policy  string `msgpack:"po,omitempty"`
	// Serving says that the node serves clients now: it leads and its
	// core runs. A node that raft made leader serves only once it has
	// applied the log and recorded itself as the leader. Older servers
	// never set it.
	Serving bool `msgpack:"sg,omitempty"`
	// Revision is the revision of this node's applied state, and
	// Compacted the compaction point of its event history (DESIGN §16):
	// a watch from Compacted or below fails. Older servers never set them.
	Revision  uint64 `msgpack:"rv,omitempty"`
	Compacted uint64 `msgpack:"cp,omitempty"`
}

// SnapshotSave asks the leader for a snapshot of its applied state: a
// consistent view at its applied index, taken when the request arrives,
// while writes go on beside it. The leader opens a unidirectional stream
// on the session's connection and writes the snapshot on it, in the format
// of raft's snapshots (a magic line, the applied index, every key and
// value, and a CRC-32C of it all), then ends it; then it answers with
// SnapshotSaveReply. If it fails on the way, it resets the stream and
// answers with Error. A node that does not lead answers with Error of
// CodeNotLeader, naming the leader.
type SnapshotSave struct {
	ID uint64 `msgpack:"i"`
}

// SnapshotSaveReply says what the snapshot stream held. The client checks
// the stream against it.
type SnapshotSaveReply struct {
	ID           uint64 `msgpack:"i"`
	AppliedIndex uint64 `msgpack:"a"`
	Revision     uint64 `msgpack:"r"`
	Fence        uint64 `msgpack:"f"` // the last fencing token issued
	Keys         int    `msgpack:"k"` // keys that hold a value
	Deleted      int    `msgpack:"d"` // keys whose last change was a deletion
	WriteLeases  int    `msgpack:"w"`
	Bytes        int64  `msgpack:"b"` // the length of the stream
	// Digest is the SHA-256 of the replicated state in the snapshot (as
	// leased inspect prints it, in hex): the same for a data folder
	// restored from it, before it changes.
	Digest string `msgpack:"g"`
}
