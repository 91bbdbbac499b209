package protocol

import "time"

// The messages of TTL leases (DESIGN §14). A TTL lease is not tied to the
// session that granted it: any session may keep it alive, attach keys to
// it, or revoke it, as in etcd, if its client may (DESIGN §15: under an
// access policy, a lease belongs to the client certificate that granted
// it). Its id is never 0 and never reused.

// LeaseGrant asks for a TTL lease of TTL. From a client with a
// Hello.ClientID, a grant sent again with the same ID (on any session)
// is granted once: the reply names the lease the first copy got.
type LeaseGrant struct {
	ID  uint64        `msgpack:"i"`
	TTL time.Duration `msgpack:"t"`
	// Acked is as in Write: the client has the outcome of its requests
	// with an ID below it.
	Acked uint64 `msgpack:"a,omitempty"`
}

// LeaseGrantReply names the lease granted and its TTL. The lease lives
// for TTL from when the client sent the grant (plus the server's ε).
type LeaseGrantReply struct {
	ID    uint64        `msgpack:"i"`
	Lease uint64        `msgpack:"l"`
	TTL   time.Duration `msgpack:"t"`
	// Duplicate says that the grant was a retry of one granted already,
	// and Lease is that grant's.
	Duplicate bool `msgpack:"d,omitempty"`
}

// LeaseRevoke ends lease Lease: its attached keys are deleted, through the
// write path (their cached readers are invalidated first), at one
// revision. Timeout is as in Write: if not 0, the revocation is abandoned
// if its keys' holders have not let it commit that long after the server
// received it.
type LeaseRevoke struct {
	ID      uint64        `msgpack:"i"`
	Lease   uint64        `msgpack:"l"`
	Timeout time.Duration `msgpack:"to,omitempty"`
}

// LeaseRevokeReply reports a revocation: the revision at which its keys
// were deleted (0 if it had none), how many, and, as in WriteReply, how
// long it waited for their holders and how many it had to invalidate or
// recall.
type LeaseRevokeReply struct {
	ID       uint64        `msgpack:"i"`
	Revision uint64        `msgpack:"rev"`
	Keys     int           `msgpack:"k"`
	Waited   time.Duration `msgpack:"w"`
	Holders  int           `msgpack:"h"`
}

// LeaseKeepAlive renews Leases, each for its granted TTL from when the
// client sent it.
type LeaseKeepAlive struct {
	ID     uint64   `msgpack:"i"`
	Leases []uint64 `msgpack:"l"`
}

// LeaseTTL is a lease and a TTL: the one it was renewed for
// (LeaseKeepAliveReply) or the one it has left (LeaseListReply).
type LeaseTTL struct {
	Lease uint64        `msgpack:"l"`
	TTL   time.Duration `msgpack:"t"`
}

// LeaseKeepAliveReply lists the leases renewed, with their TTL, and those
// that were not, because they do not exist (never granted, revoked, or
// expired) or the client may not keep them alive. Every lease of the
// request is in one of the two lists. Denied lists the leases of Unknown
// that exist but that the client may not keep alive: another client's, or
// with a key it lacks the ttl-lease right on (DESIGN §15). A client that
// does not know Denied takes them for gone, which, for it, they are.
type LeaseKeepAliveReply struct {
	ID      uint64     `msgpack:"i"`
	Renewed []LeaseTTL `msgpack:"r"`
	Unknown []uint64   `msgpack:"u,omitempty"`
	Denied  []uint64   `msgpack:"d,omitempty"`
}

// LeaseTimeToLive asks for the remaining TTL of Lease, and, if Keys is
// set, its attached keys.
type LeaseTimeToLive struct {
	ID    uint64 `msgpack:"i"`
	Lease uint64 `msgpack:"l"`
	Keys  bool   `msgpack:"k,omitempty"`
}

// LeaseTimeToLiveReply gives the remaining TTL of a lease as its holder
// should count it, and the TTL it was granted with; TTL is -1 if the
// lease has expired or never existed (the reply is not an error, as in
// etcd). Keys are the attached keys, sorted, if asked for.
type LeaseTimeToLiveReply struct {
	ID         uint64        `msgpack:"i"`
	Lease      uint64        `msgpack:"l"`
	TTL        time.Duration `msgpack:"t"`
	GrantedTTL time.Duration `msgpack:"g"`
	Keys       [][]byte      `msgpack:"k,omitempty"`
}

// LeaseList asks for the live TTL leases with an id above After (0: from
// the first), a page at a time.
type LeaseList struct {
	ID    uint64 `msgpack:"i"`
	After uint64 `msgpack:"a,omitempty"`
}

// LeaseListReply lists live TTL leases with their remaining TTL, in id
// order: as many as fit in a frame. More says that there are others, with
// ids above the last one listed: the client asks again with After set to
// it.
type LeaseListReply struct {
	ID     uint64     `msgpack:"i"`
	Leases []LeaseTTL `msgpack:"l"`
	More   bool       `msgpack:"m,omitempty"`
}

func (*LeaseGrant) Type() Type           { return TypeLeaseGrant }
func (*LeaseGrantReply) Type() Type      { return TypeLeaseGrantReply }
func (*LeaseRevoke) Type() Type          { return TypeLeaseRevoke }
func (*LeaseRevokeReply) Type() Type     { return TypeLeaseRevokeReply }
func (*LeaseKeepAlive) Type() Type       { return TypeLeaseKeepAlive }
func (*LeaseKeepAliveReply) Type() Type  { return TypeLeaseKeepAliveReply }
func (*LeaseTimeToLive) Type() Type      { return TypeLeaseTimeToLive }
func (*LeaseTimeToLiveReply) Type() Type { return TypeLeaseTimeToLiveReply }
func (*LeaseList) Type() Type            { return TypeLeaseList }
func (*LeaseListReply) Type() Type       { return TypeLeaseListReply }
