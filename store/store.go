// Package store is the durable state of leased: committed values, the
// revision counter, the fencing-token counter, the write leases, the lease
// horizon, the leader's address, the leases a leader hands over, the TTL
// leases and their keys, and the write outcomes kept for retries. It
// defines the Store interface that package core applies commands through,
// and two implementations: Badger, on disk, and Memory, for tests (a
// replica.Node is the third, over a Badger). What a command is, is in
// command.go, what it does in exec.go, ttl.go and clients.go; a log entry
// applied to a Badger, in entry.go; snapshots, in snapshot.go and
// snapshot_summary.go.
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
	"time"
)

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
	// Locks are the write leases bound to it (DESIGN §5.1), by key, which
	// its revocation ends. Store.TTLLease fills it; TTLLeases does not.
	Locks []BoundLock
}

// Record is the committed state of one key. A missing key has Version 0,
// or the revision of its deletion until OpCollectTombstones collects the
// deletion's record.
type Record struct {
	Value   []byte
	Version uint64
	Found   bool
}

// RangeOptions says what Store.Range reads.
type RangeOptions struct {
	// Start and End bound the keys: Start <= key < End. A nil or empty
	// End has no upper bound.
	Start, End []byte
	// After, if not empty, skips the keys up to and including it: the
	// last key of the page before.
	After []byte
	// Limit, if > 0, bounds the number of keys returned.
	Limit int
	// MaxBytes, if > 0, bounds the bytes of the keys and values returned:
	// the range stops before the key that would pass it, but returns at
	// least one key.
	MaxBytes int
	// KeysOnly leaves the values out.
	KeysOnly bool
	// Known, if > 0, is the revision of a copy of the range that the
	// caller holds: Range.Unchanged then says whether the copy is still
	// the range (revalidation of a listing, DESIGN §3.9).
	Known uint64
}

// KV is one key of a Range, with its value (unless KeysOnly) and version.
type KV struct {
	Key     []byte
	Value   []byte
	Version uint64
}

// Range is what Store.Range returns.
type Range struct {
	KVs      []KV   // in key order (bytewise)
	Revision uint64 // the revision the range was read at: every KV is as of it
	More     bool   // the range holds keys past the last one returned
	// Unchanged answers Known: nothing in the range read (from Start, or
	// past After, to End) changed after revision Known, so that its keys
	// are those of revision Known, the range is whole (no More), and it
	// holds no KVs (the caller's copy is them). It is false when the store
	// cannot tell: a key's record, live or deleted, has a version above
	// Known; Known is above Revision; or the store no longer holds every
	// deletion after Known (forgotten, range.go).
	Unchanged bool
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
	// Lease is the TTL lease the write lease is bound to (DESIGN §5.1):
	// it has no term, and ends with that lease. 0: none.
	Lease uint64
	// LockDelay is how long the key stays unavailable to acquisitions
	// after the write lease ends with its TTL lease's expiry (not with a
	// release or a revocation). 0: none.
	LockDelay time.Duration
}

// LockDelay is a key that stays unavailable to acquisitions until Until
// (the wall clock of the leader that recorded it): a lock bound to a TTL
// lease with a lock delay ended when that lease expired (DESIGN §5.1).
type LockDelay struct {
	Key   string
	Until time.Time
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
	// Holds are the keys whose reads the leader that recorded the newest
	// horizon held for an earlier leader (OpSetHorizon): a later leader
	// holds them until their time left after HorizonApplied, plus ε.
	// Empty if none.
	Holds []HeldKey
	// Leader and LeaderAddr are the last leader recorded (OpSetLeader) and
	// its client address; empty if none.
	Leader, LeaderAddr string
	// Alarms are the NOSPACE alarms of members recorded (OpSetAlarm), by
	// member name; empty if none. The leader refuses writes while any is
	// raised (DESIGN §7).
	Alarms []MemberAlarm
	// WriteLeases are the write leases granted and not ended, by key.
	WriteLeases []WriteLease
	// LockDelays are the lock delays recorded, by key, those that have
	// passed included: a grant of the key clears its own.
	LockDelays []LockDelay
	// History describes the event history.
	History HistoryState
}

// HistoryState describes the event history (history.go).
type HistoryState struct {
	// Compacted is the compaction point: the history holds every event
	// of the revisions above it, and a read from it or below fails with
	// ErrCompacted.
	Compacted uint64
	// Bytes and Events are the bytes (keys and values of its records)
	// and the events the history holds.
	Bytes, Events uint64
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
	// ErrInvalidRange is returned by Range for options that name no
	// range: a Start past its End, or a negative Limit or MaxBytes.
	ErrInvalidRange = errors.New("store: invalid range")
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
// to: a local database (Badger), the state that a replicated log applies
// on every node (replica.Node, a server of one node included), or Memory
// in tests. Its owner, who opened it, closes it once the core over it has
// closed; a core never closes it (core.New).
//
// Every method is safe for concurrent use, and Apply calls may overlap:
// package core calls Apply from up to five goroutines at once (its
// committer, the one persisting the lease horizon or handing the leases
// over, the one forgetting idle clients, the one collecting tombstones,
// and the one recording a member's alarm; core/log.go lists them). The
// store serializes them. It applies each call's commands in their order,
// in one or more durable steps (a transaction, a log entry), each step
// whole and alone, and all steps in one order: on a replicated store the
// log's, the same on every node. Overlapping calls interleave only between
// steps. Memory applies a call in one step, and Badger holds its lock
// across all the steps of a call, so neither interleaves calls; a
// replica.Node puts a long call in several log entries, and another call's
// entries may come between them. A caller whose commands must be applied
// with nothing between them makes them one call that fits in one step;
// core's callers other than the committer apply one command a call.
//
// Get, Range, State, Kept, IdleClients, TTLLease and TTLLeases read the applied
// state beside Apply: they may run while an Apply is in progress (a store
// may make them wait for the step in progress, as Badger's State does),
// and see the state as of a whole step, never of a step half applied;
// while a call of several steps is in progress, they may see its first
// steps and not its last. Once Apply has returned, they see what it
// applied (a replica.Node's Apply returns once this node has applied its
// entries). TTLLeases reads a page at a time, each as of a whole step.
// Reopen and Close wait for the calls in progress, or end them with an
// error (a replica.Node's Close).
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
	// History returns a page of the event history (history.go) that opts
	// asks for, as of one moment. A read from a revision at or below the
	// compaction point fails with a CompactedError, which wraps
	// ErrCompacted.
	History(opts HistoryOptions) (HistoryPage, error)
	// Range returns the live keys (not deleted: no tombstone) the options
	// name, in key order, with the revision they were read at, all as of
	// one moment: one read transaction; with Known, whether they changed
	// after it (Range.Unchanged). Options that name no range are refused
	// with an error wrapping ErrInvalidRange.
	Range(opts RangeOptions) (Range, error)
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
	// WriteLease returns the write lease recorded on key, or false if
	// there is none: none was granted, or it ended.
	WriteLease(key []byte) (WriteLease, bool, error)
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
