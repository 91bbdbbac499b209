// What a command is and what it costs: the Ops, the Command that carries one, its Result, and the
// bounds a command must keep. What a command does is in exec.go.

package store

import (
	"fmt"
	"time"
)

// Op says what a Command does.
type Op uint8

// Ops of a Command.
const (
	// OpPut sets Key to Value at the next revision.
	OpPut Op = iota + 1
	// OpDelete deletes Key at the next revision.
	OpDelete
	// OpCAS sets Key to Value at the next revision if Key is at version
	// Expect (0: absent, which a deleted key is too); otherwise it changes
	// nothing and fails with ErrVersionMismatch.
	OpCAS
	// OpGrantWriteLease issues the next fencing token and records the write
	// lease of Session on Key with Term, and the identity of the session's
	// client, Client (0: none), replacing the key's earlier one. With a
	// Lease, the write lease is bound to that TTL lease (lock.go), and
	// ends with it; a Lease that does not exist is ErrLeaseNotFound, one
	// that binds MaxTTLLocks locks ErrLeaseFull, and nothing changes.
	OpGrantWriteLease
	// OpEndWriteLease ends the write lease on Key if its token is Token: a
	// release, a graceful close, or its expiry. Otherwise it changes
	// nothing.
	OpEndWriteLease
	// OpSetHorizon records the lease horizon: the wall-clock time Horizon
	// after which no lease granted so far can be live, written Span before
	// it, by the node whose clock Key names (State.HorizonBy; may be
	// empty). It also records Holds, the keys whose reads the leader holds
	// for an earlier leader (State.Holds), in place of those recorded
	// before; none clears them.
	OpSetHorizon
	// OpSetLeader records that the node named Key leads the cluster and
	// serves clients at the address Value, so that the other nodes can
	// send clients to it.
	OpSetLeader
	// OpHandoff records that the leader hands its live leases, Handoff,
	// over to the next one (DESIGN §13), at At on its wall clock: it
	// grants no lease from then on, so those are every lease that may be
	// live. It also sets the lease horizon to the end of the longest of
	// them, by the clock Key names, as OpSetHorizon does, and clears the
	// holds (a leader hands over only once they have passed). The next
	// OpSetHorizon clears it.
	OpHandoff
	// OpForgetClients forgets the write outcomes kept for the clients
	// listed in Clients whose last write was made before At (see
	// Command.Client). A client that wrote since is kept.
	OpForgetClients
	// OpGrantTTL grants a TTL lease (DESIGN §14) of Term: it takes the
	// next id of the TTL lease counter (Result.Lease), which no lease ever
	// had, and records the lease with Term as its remaining TTL, not kept
	// alive, at attachment generation 1 (TTLLease.Gen), with Owner as its
	// owner (TTLLease.Owner). A Term of 0 or less is refused with
	// ErrInvalidCommand. A grant with a Client is
	// applied once per (Client, Request), as a write is (Command.Client):
	// a retry gets the first grant's lease back, marked Duplicate, and no
	// second lease is granted.
	OpGrantTTL
	// OpRevokeTTL ends the TTL lease Lease: it deletes every key attached
	// to it, all at one new revision (Result.Version; Result.Keys names
	// them, sorted), and forgets the lease. A lease with no key attached
	// takes no revision (Result.Version 0), as a transaction that changes
	// no key takes none. An unknown lease is ErrLeaseNotFound, and nothing
	// changes. With Expect other than 0, it revokes only a lease whose
	// attachment generation (TTLLease.Gen) is Expect: otherwise the
	// outcome is ErrLeaseChanged, and nothing changes. The caller that
	// acted on the keys it read at generation Expect (invalidated their
	// readers) thus never deletes a key attached since. Expect 0 revokes
	// whatever is attached.
	//
	// It also ends the write leases bound to the lease (Result.Locks),
	// whether or not keys are attached to it; with Expired, each with a
	// lock delay leaves its key unavailable until At plus that delay
	// (State.LockDelays).
	OpRevokeTTL
	// OpCheckpointTTL records the remaining TTL of each lease of
	// Checkpoints, and clears its KeptAlive, so that the next leader
	// resumes it from there. Leases that do not exist (any more) are
	// skipped. More than MaxTTLLeasesPerCommand checkpoints, or a negative
	// remaining TTL, are refused with ErrInvalidCommand, and nothing
	// changes.
	OpCheckpointTTL
	// OpKeptAliveTTL records that a keep-alive of each lease of Leases
	// was acknowledged after its last checkpoint (TTLLease.KeptAlive), so
	// that the next leader gives it its whole TTL again. Leases that do
	// not exist are skipped. More than MaxTTLLeasesPerCommand leases are
	// refused with ErrInvalidCommand, and nothing changes.
	OpKeptAliveTTL
	// OpCollectTombstones removes the records that deletions at revision
	// Through or earlier left their keys (tombstone.go), oldest first, at
	// most MaxTombstonesPerCommand of them and MaxTombstoneKeyBytes of
	// their keys; Result.More says that some are left. A key collected
	// reads as one that never existed: not found, at version 0. It takes
	// no revision. A key written since its deletion keeps its record.
	OpCollectTombstones
	// OpSetAlarm records the NOSPACE alarm of the member Key, with Value
	// as what its disk guard says (State.Alarms), in place of the one
	// recorded before; an empty Value clears it. It takes no revision. A
	// Key that is empty or longer than MaxAlarmMemberBytes, a Value longer
	// than MaxAlarmBytes, or an alarm raised beyond MaxAlarms, is refused
	// with ErrInvalidCommand, and nothing changes.
	OpSetAlarm
	// OpTxn applies the transaction Txn (txn.go): compares on several
	// keys, and the one of its two branches of puts and deletes that
	// they choose, all of it at one revision, or none of it. It attaches
	// and detaches keys of TTL leases as OpPut and OpDelete do. Like a
	// write, an OpTxn with a Client is applied once per (Client,
	// Request). A Txn that Txn.Check refuses is ErrInvalidCommand, and
	// nothing changes.
	OpTxn
	// OpCompact drops the events of the history (history.go) of the
	// revisions up to Through, oldest first, whole revisions at a time,
	// and stops once the history holds at most KeepBytes bytes (0: no
	// such bound), or after MaxCompactEvents events; Result.More says
	// that it stopped there with revisions up to Through left. The
	// compaction point moves to the last revision dropped, and a read of
	// the history from it or below fails with ErrCompacted. It takes no
	// revision. A Through above the revision counts as the revision.
	OpCompact
)

// Bounds of the alarms recorded (OpSetAlarm): a cluster has a few
// members, and a guard's alarm is a line.
const (
	MaxAlarms           = 64
	MaxAlarmMemberBytes = 256
	MaxAlarmBytes       = 512
)

// Bounds of what TTL lease commands may carry and hold, so that no command
// writes more than a small part of what one transaction takes: a log entry
// too large for a transaction would stop every replica.
const (
	// MaxTTLLeasesPerCommand bounds the leases of one OpCheckpointTTL or
	// OpKeptAliveTTL.
	MaxTTLLeasesPerCommand = 1000
	// MaxTTLKeys and MaxTTLKeyBytes bound the keys attached to one TTL
	// lease, in number and in bytes of key: an OpRevokeTTL deletes them
	// all in one step. A write that would attach one more is refused
	// with ErrLeaseFull.
	MaxTTLKeys     = 1000
	MaxTTLKeyBytes = 256 << 10
)

func (o Op) String() string {
	switch o {
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpCAS:
		return "compare-and-swap"
	case OpGrantWriteLease:
		return "grant write lease"
	case OpEndWriteLease:
		return "end write lease"
	case OpSetHorizon:
		return "set horizon"
	case OpSetLeader:
		return "set leader"
	case OpHandoff:
		return "hand off"
	case OpForgetClients:
		return "forget clients"
	case OpGrantTTL:
		return "grant TTL lease"
	case OpRevokeTTL:
		return "revoke TTL lease"
	case OpCheckpointTTL:
		return "checkpoint TTL leases"
	case OpKeptAliveTTL:
		return "keep TTL leases alive"
	case OpCollectTombstones:
		return "collect tombstones"
	case OpSetAlarm:
		return "set alarm"
	case OpTxn:
		return "transaction"
	case OpCompact:
		return "compact"
	}
	return fmt.Sprintf("op %d", uint8(o))
}

// Command is one deterministic state change.
type Command struct {
	Op      Op
	Key     []byte
	Value   []byte        // OpPut, OpCAS, OpSetLeader, OpSetAlarm
	Expect  uint64        // OpCAS: a version; OpRevokeTTL: an attachment generation
	Token   uint64        // OpEndWriteLease
	Session uint64        // OpGrantWriteLease: the holder
	Term    time.Duration // OpGrantWriteLease, OpGrantTTL
	Horizon time.Time     // OpSetHorizon, wall clock
	Span    time.Duration // OpSetHorizon

	// Client is the identity of the client that sent the command (0:
	// none). For OpGrantWriteLease, it is recorded with the lease, so that
	// the client may take it over from a new session after a restart or a
	// failover (WriteLease.Client).
	//
	// A write (OpPut, OpDelete, OpCAS) or an OpGrantTTL with a Client is
	// applied once per (Client, Request), one sequence of requests for
	// both: the store keeps its outcome, and the same write
	// retried after a lost reply, perhaps through another leader, gets
	// that outcome back (Result.Duplicate) instead of being applied again.
	// Acked says that the client has the outcome of each of its writes
	// with a lower Request: the store forgets those outcomes, and from
	// then on refuses a write of the client with a lower Request
	// (ErrAnswered), which can only be a stale copy. At is when
	// the leader made the command (wall clock), and for OpForgetClients
	// the cutoff. The fields are left out of an encoding when zero.
	Client  uint64        `msgpack:",omitempty"`
	Request uint64        `msgpack:",omitempty"`
	Acked   uint64        `msgpack:",omitempty"`
	At      time.Time     `msgpack:",omitempty"`
	Clients []uint64      `msgpack:",omitempty"` // OpForgetClients
	Handoff []HandedLease `msgpack:",omitempty"` // OpHandoff

	// Lease is the TTL lease of an OpRevokeTTL, or the one that an OpPut
	// or OpCAS attaches Key to: a write that applies attaches its key to
	// Lease, moving it from the lease it was attached to, if another, and
	// with Lease 0 detaches it from any. An OpDelete detaches its key
	// whatever Lease says. A write naming a lease that does not exist
	// fails with ErrLeaseNotFound and changes nothing.
	Lease uint64 `msgpack:",omitempty"`
	// Owner is the owner an OpGrantTTL records with the lease
	// (TTLLease.Owner): a hash of the identity of the client that asked
	// for it, 0 for none.
	Owner       uint64          `msgpack:",omitempty"`
	Checkpoints []TTLCheckpoint `msgpack:",omitempty"` // OpCheckpointTTL
	Leases      []uint64        `msgpack:",omitempty"` // OpKeptAliveTTL
	Holds       []HeldKey       `msgpack:",omitempty"` // OpSetHorizon
	// Through is the newest revision whose deletions an
	// OpCollectTombstones may collect.
	Through uint64 `msgpack:",omitempty"`
	// Txn is the transaction of an OpTxn.
	Txn *Txn `msgpack:",omitempty"`
	// LockDelay, on an OpGrantWriteLease with a Lease, is the lock delay
	// recorded with the write lease (WriteLease.LockDelay).
	LockDelay time.Duration `msgpack:",omitempty"`
	// Guard, on an OpPut, OpDelete, OpCAS or OpTxn, makes it apply only
	// if the lock it names is held with its token (lock.go); else the
	// outcome is ErrFenced, and nothing changes.
	Guard *Guard `msgpack:",omitempty"`
	// Expired says that an OpRevokeTTL revokes a lease that expired: the
	// events of its keys are EventExpire, not EventDelete.
	Expired bool `msgpack:",omitempty"`
	// KeepBytes bounds an OpCompact: it stops once the history holds at
	// most that many bytes (0: no bound but Through).
	KeepBytes uint64 `msgpack:",omitempty"`
}

// WrittenKeys returns the keys that c may change the value of: a write's
// key, or the keys of either branch of a transaction. An OpRevokeTTL's
// keys are known only once it is applied (Result.Keys).
func (c Command) WrittenKeys() [][]byte {
	switch c.Op {
	case OpPut, OpDelete, OpCAS:
		return [][]byte{c.Key}
	case OpTxn:
		return c.Txn.Keys()
	}
	return nil
}

// TTLCheckpoint is the remaining TTL of one lease, as the leader's lessor
// counts it, for an OpCheckpointTTL.
type TTLCheckpoint struct {
	ID        uint64
	Remaining time.Duration
}

// Cost returns a bound on the bytes that applying c writes in one
// transaction: its keys and value as each record that carries them holds
// them (a write's data, lease and client records), and a fixed overhead
// for each record. A revocation counts the most that the keys of one TTL
// lease may take (MaxTTLKeys, MaxTTLKeyBytes), since what is attached is
// known only when it is applied. A replicated log (package replica) puts
// commands into one entry, applied in one transaction, only while their
// costs together stay within its entry size, so that no entry can exceed
// what a transaction takes.
func Cost(c Command) int {
	const record = 64 // a record's key prefix, encoding and the database's own overhead
	switch c.Op {
	case OpPut, OpDelete, OpCAS:
		// The data record, the key's lease record and the two attachment
		// records it may move between, a deletion's index record, and the
		// client's outcome.
		return 5*(len(c.Key)+record) + len(c.Value) + 2*record
	case OpTxn:
		return txnCost(c.Txn, record)
	case OpCollectTombstones:
		// Each key's record and its index record.
		return MaxTombstonesPerCommand*2*record + 2*MaxTombstoneKeyBytes + 2*record
	case OpRevokeTTL:
		return MaxTTLKeys*5*record + 4*MaxTTLKeyBytes + 2*record
	case OpGrantTTL:
		// The lease, the counter and the client's outcome.
		return 3 * record
	case OpCheckpointTTL:
		return (len(c.Checkpoints) + 1) * record
	case OpKeptAliveTTL:
		return (len(c.Leases) + 1) * record
	case OpHandoff:
		n := record
		for _, l := range c.Handoff {
			n += len(l.Key) + record
		}
		return n
	case OpForgetClients:
		return (len(c.Clients) + 1) * record
	case OpSetAlarm:
		// The one record of every alarm, rewritten whole.
		return MaxAlarms*(MaxAlarmMemberBytes+MaxAlarmBytes+8) + 2*record
	case OpSetHorizon:
		n := len(c.Key) + 2*record
		for _, h := range c.Holds {
			n += len(h.Key) + record
		}
		return n
	}
	return len(c.Key) + len(c.Value) + 2*record
}

// Longest returns the longest time left of the leases ls, 0 if none: how
// long after it the leases of an OpHandoff may live.
func Longest(ls []HandedLease) time.Duration {
	var longest time.Duration
	for _, l := range ls {
		longest = max(longest, l.Left)
	}
	return longest
}

// MemberAlarm is the NOSPACE alarm of one member of a cluster, as the
// leader recorded it (OpSetAlarm).
type MemberAlarm struct {
	Member string
	// Alarm is what the member's disk guard said when it was raised.
	Alarm string
}

// HeldKey is a key whose reads a leader holds, recorded with its lease
// horizon (OpSetHorizon, State.Holds): a write of an earlier leader's term
// changed it, which that leader may have taken for failed, serving the
// key's old value until its leases end (DESIGN §13).
type HeldKey struct {
	Key string
	// Left is how long the hold had to last when the horizon was written,
	// ε not included. A later leader holds the key until Left after it
	// applied the horizon entry, plus ε (State.HorizonApplied).
	Left time.Duration
}

// HandedLease is a lease that a leader hands over to the next one.
type HandedLease struct {
	// Client is the identity of the holder's client (Command.Client), or
	// 0 if it gave none.
	Client uint64
	Key    string
	// Left is how long the lease had to live when it was handed over, ε
	// included.
	Left time.Duration
	// Token is a write lease's fencing token; 0 for a read lease.
	Token uint64
	// Prefix says that it is a prefix lease (DESIGN §3.9): Key is the
	// prefix, whose listing it covers.
	Prefix bool `msgpack:",omitempty"`
}

// Result is the outcome of one Command.
type Result struct {
	// Version is the version a write committed, or, when a compare-and-swap
	// did not match or a delete found nothing (Unchanged), the key's
	// current version: that of its deletion, or 0 if it never existed or
	// its deletion's record was collected.
	Version uint64
	// Unchanged says that an OpDelete found no key to remove: it wrote
	// nothing and spent no revision.
	Unchanged bool
	// Token is the fencing token OpGrantWriteLease issued.
	Token uint64
	// Err is ErrVersionMismatch for a compare-and-swap that did not match,
	// ErrFenced for a write whose Guard failed, and ErrAnswered for a
	// stale copy of a client's write. It is part of
	// the command's deterministic outcome, not a failure of the store.
	Err error
	// Duplicate says that the write was applied before, under the same
	// Command.Client and Command.Request, and that this is that outcome:
	// nothing changed now.
	Duplicate bool
	// Lease is the id of the TTL lease that OpGrantTTL granted (also for
	// a Duplicate).
	Lease uint64
	// Keys are the keys that OpRevokeTTL deleted, sorted, and Locks the
	// write leases it ended, by key.
	Keys  []string
	Locks []BoundLock
	// More says that OpCollectTombstones stopped at its bounds with
	// tombstones of its revision left to collect.
	More bool
	// Succeeded says that an OpTxn's compares held, and it applied its
	// Then branch; false, its Else branch. Version is then the revision
	// of its writes, or the store's revision if they changed nothing;
	// with ErrLeaseNotFound or ErrLeaseFull, the lease it names.
	Succeeded bool
}
