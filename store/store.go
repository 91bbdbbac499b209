// Package store is the durable state of leased: committed values, the
// revision counter, the fencing-token counter, the write leases and the
// lease horizon. It defines the Store interface that package core applies
// commands through, and two implementations: Badger, on disk, and Memory,
// for tests.
//
// Every change is a Command. A command's outcome (its version, its token,
// whether a compare-and-swap matched) depends only on the commands applied
// before it, never on this process's history, so that any store that
// applies the same commands in the same order reaches the same state. A
// store whose Apply failed refuses further commands until Reopen has
// brought it back to what is durable: a failed commit's numbers are then
// either durable, and never handed out again, or gone with it, and never
// seen by anyone.
package store

import (
	"errors"
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
	// client, Client (0: none), replacing the key's earlier one.
	OpGrantWriteLease
	// OpEndWriteLease ends the write lease on Key if its token is Token: a
	// release, a graceful close, or its expiry. Otherwise it changes
	// nothing.
	OpEndWriteLease
	// OpSetHorizon records the lease horizon: the wall-clock time Horizon
	// after which no lease granted so far can be live, written Span before
	// it, by the node whose clock Key names (State.HorizonBy; may be
	// empty).
	OpSetHorizon
	// OpSetLeader records that the node named Key leads the cluster and
	// serves clients at the address Value, so that the other nodes can
	// send clients to it.
	OpSetLeader
	// OpHandoff records that the leader hands its live leases, Handoff,
	// over to the next one (DESIGN §13), at At on its wall clock: it
	// grants no lease from then on, so those are every lease that may be
	// live. It also sets the lease horizon to the end of the longest of
	// them, by the clock Key names, as OpSetHorizon does. The next
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
	}
	return fmt.Sprintf("op %d", uint8(o))
}

// Command is one deterministic state change.
type Command struct {
	Op      Op
	Key     []byte
	Value   []byte        // OpPut, OpCAS
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
}

// TTLCheckpoint is the remaining TTL of one lease, as the leader's lessor
// counts it, for an OpCheckpointTTL.
type TTLCheckpoint struct {
	ID        uint64
	Remaining time.Duration
}

// TTLLease is a TTL lease as the store records it (DESIGN §14). Only the
// leader counts its time; the store keeps what a new leader resumes from.
type TTLLease struct {
	ID uint64
	// TTL is the TTL it was granted with.
	TTL time.Duration
	// Remaining is the remaining TTL of its last checkpoint, or TTL if
	// it had none.
	Remaining time.Duration
	// KeptAlive says that a keep-alive was acknowledged after the last
	// checkpoint (or the grant): the lease then has its whole TTL from
	// the moment a new leader takes over, not Remaining.
	KeptAlive bool
	// Keys is the number of keys attached to it, and KeyBytes the sum of
	// their lengths (see MaxTTLKeys).
	Keys, KeyBytes int
	// Gen is its attachment generation: 1 when granted, raised by every
	// write that attaches a key to it, whether the key was attached to no
	// lease or moved from another. A write of a key already attached to it
	// leaves Gen as it is: the key was among those its revoker read, and
	// the write invalidates the key's readers itself. Detaching leaves it
	// too. An OpRevokeTTL whose Expect is Gen deletes only keys its
	// caller knew of.
	Gen uint64
	// Owner is the owner its grant recorded (Command.Owner): a hash of
	// the identity of the client that granted it, which the server holds
	// its other requests on the lease to. 0: none, for a lease granted
	// without an identity or before leases recorded one.
	Owner uint64
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
		// records it may move between, and the client's outcome.
		return 4*(len(c.Key)+record) + len(c.Value) + 2*record
	case OpRevokeTTL:
		return MaxTTLKeys*4*record + 3*MaxTTLKeyBytes + 2*record
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
}

// Result is the outcome of one Command.
type Result struct {
	// Version is the version a write committed, or, when a compare-and-swap
	// did not match, the key's current version.
	Version uint64
	// Token is the fencing token OpGrantWriteLease issued.
	Token uint64
	// Err is ErrVersionMismatch for a compare-and-swap that did not match,
	// and ErrAnswered for a stale copy of a client's write. It is part of
	// the command's deterministic outcome, not a failure of the store.
	Err error
	// Duplicate says that the write was applied before, under the same
	// Command.Client and Command.Request, and that this is that outcome:
	// nothing changed now.
	Duplicate bool
	// Lease is the id of the TTL lease that OpGrantTTL granted (also for
	// a Duplicate).
	Lease uint64
	// Keys are the keys that OpRevokeTTL deleted, sorted.
	Keys []string
}

// Record is the committed state of one key. A missing key has Version 0,
// or the revision of its deletion.
type Record struct {
	Value   []byte
	Version uint64
	Found   bool
}

// WriteLease is a write lease as the store records it.
type WriteLease struct {
	Key     string
	Token   uint64
	Session uint64
	Term    time.Duration
	// Client is the identity of the holder's client (Command.Client), the
	// only one whose sessions may write under the lease once its session
	// is gone; 0 if it gave none, or if the lease was recorded before
	// leases kept it: then no other session may.
	Client uint64
}

// State is what a store holds besides the values: its counters, the lease
// horizon, and the write leases.
type State struct {
	// Revision is the revision of the last committed change.
	Revision uint64
	// Fence is the last fencing token issued.
	Fence uint64
	// TTLLeaseID is the last TTL lease id issued (OpGrantTTL). The
	// leases themselves are read with TTLLease and TTLLeases.
	TTLLeaseID uint64
	// Horizon is the last lease horizon recorded (wall clock; zero if
	// none), and Span how far ahead of the moment it was written it lay.
	Horizon time.Time
	Span    time.Duration
	// HorizonBy names the clock that Horizon was read on (the Key of the
	// OpSetHorizon that recorded it): a node that finds its own name here
	// may count the horizon on its boot clock, by the record it keeps of
	// it on its own (core.Config.BootFile). Empty if not given.
	HorizonBy string
	// HorizonApplied is when this node applied the entry that recorded
	// the horizon (or the handoff), on its own clock, in a replicated store
	// (package replica), which counts an entry it applied before its start,
	// or in a snapshot it restored, as applied then; zero in a store that
	// is not replicated. A new leader counts the old leader's leases from
	// it (DESIGN §13): the entry was appended before any replica applied
	// it.
	HorizonApplied time.Time
	// HandedOff says that the newest horizon entry is an OpHandoff, and
	// Handoff holds the leases it handed over: the next leader counts
	// them from HorizonApplied instead of waiting for the horizon.
	HandedOff bool
	Handoff   []HandedLease
	// Leader and LeaderAddr are the last leader recorded (OpSetLeader) and
	// its client address; empty if none.
	Leader, LeaderAddr string
	// WriteLeases are the write leases granted and not ended, by key.
	WriteLeases []WriteLease
}

// Errors of a store.
var (
	// ErrVersionMismatch is the outcome of a compare-and-swap whose key is
	// not at the expected version.
	ErrVersionMismatch = errors.New("version mismatch")
	// ErrAnswered is the outcome of a write whose request is below the
	// Acked its client sent since: a stale copy, which changes nothing
	// (see Command.Client).
	ErrAnswered = errors.New("request answered already")
	// ErrLeaseNotFound is the outcome of a command naming a TTL lease
	// that does not exist: never granted, revoked, or expired.
	ErrLeaseNotFound = errors.New("TTL lease not found")
	// ErrLeaseFull is the outcome of a write that would attach a key to
	// a TTL lease that holds MaxTTLKeys keys or MaxTTLKeyBytes of them.
	ErrLeaseFull = errors.New("TTL lease holds as many keys as it may")
	// ErrLeaseChanged is the outcome of an OpRevokeTTL whose Expect is not
	// the lease's attachment generation: a key was attached to it since
	// its revoker read it. Nothing changes.
	ErrLeaseChanged = errors.New("TTL lease had keys attached since")
	// ErrInvalidCommand is the outcome of a command whose arguments no
	// store takes, such as a TTL of 0 or more checkpoints than
	// MaxTTLLeasesPerCommand. Like ErrVersionMismatch, it is the same
	// on every store and changes nothing: refusing it as a failure of
	// the step would stop every replica on the entry.
	ErrInvalidCommand = errors.New("invalid command")
	// ErrFailed is returned by Apply after an earlier Apply failed, until
	// Reopen succeeds.
	ErrFailed = errors.New("storage failed to persist an earlier change and must be reopened")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("store is closed")
	// ErrNotLeader is returned by a replicated store whose node does not
	// lead, or stopped leading while it applied: the commands' outcome is
	// unknown, because the next leader may still apply them.
	ErrNotLeader = errors.New("this node does not lead the cluster")
)

// Store is the durable state machine that package core applies commands
// to. On one node it is a local database; later, a replicated log applies
// the same commands on every node.
//
// Every method is safe for concurrent use. Apply calls are serialized, and
// Get and State run beside them; Reopen and Close wait for the calls in
// progress.
type Store interface {
	// Apply applies cmds in order, durably, and returns their results. It
	// may split the batch into several durable steps. If a step fails,
	// Apply returns the results of the commands durably applied before it
	// (a prefix of cmds) and an error that names the failure; the store
	// then refuses every later Apply with ErrFailed until Reopen. The
	// failed commands' outcome is unknown until Reopen: they may or may not
	// be durable.
	Apply(cmds []Command) ([]Result, error)
	// Get returns the committed record of key.
	Get(key []byte) (Record, error)
	// State returns the counters, horizon and write leases as of the last
	// command applied.
	State() (State, error)
	// Reopen drops whatever the store holds in memory and loads it again
	// from what is durable, and makes that durable, so that a failed
	// Apply's outcome is settled. After it, Apply works again.
	Reopen() error
	// Close releases the store. Every applied command is durable already.
	Close() error
	// Kept returns the kept outcome of the write or OpGrantTTL c, which
	// has a Client, if the store applied it before: the Result that
	// applying c now would return, marked Duplicate; or, for a stale copy
	// of a request below the Acked its client sent, ErrAnswered. It
	// reports false if c would be applied.
	Kept(c Command) (Result, bool, error)
	// IdleClients returns up to limit clients whose write outcomes the
	// store keeps and whose last write was made before cutoff, for an
	// OpForgetClients.
	IdleClients(cutoff time.Time, limit int) ([]uint64, error)
	// TTLLease returns the TTL lease id and the keys attached to it,
	// sorted, or false if there is no such lease.
	TTLLease(id uint64) (TTLLease, []string, bool, error)
	// TTLLeases calls fn with every TTL lease, in id order, and stops at
	// the first error fn returns, which it returns. It reads the leases
	// a page at a time, not all at once, and holds no lock while fn
	// runs: a lease granted or revoked meanwhile may be listed or not,
	// but none is listed twice, and each as it was at some moment of the
	// listing. fn may call the store.
	TTLLeases(fn func(TTLLease) error) error
}
