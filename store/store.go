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
	// lease of Session on Key with Term, replacing the key's earlier one.
	OpGrantWriteLease
	// OpEndWriteLease ends the write lease on Key if its token is Token: a
	// release, a graceful close, or its expiry. Otherwise it changes
	// nothing.
	OpEndWriteLease
	// OpSetHorizon records the lease horizon: the wall-clock time Horizon
	// after which no lease granted so far can be live, written Span before
	// it.
	OpSetHorizon
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
	}
	return fmt.Sprintf("op %d", uint8(o))
}

// Command is one deterministic state change.
type Command struct {
	Op      Op
	Key     []byte
	Value   []byte        // OpPut, OpCAS
	Expect  uint64        // OpCAS
	Token   uint64        // OpEndWriteLease
	Session uint64        // OpGrantWriteLease: the holder
	Term    time.Duration // OpGrantWriteLease
	Horizon time.Time     // OpSetHorizon, wall clock
	Span    time.Duration // OpSetHorizon
}

// Result is the outcome of one Command.
type Result struct {
	// Version is the version a write committed, or, when a compare-and-swap
	// did not match, the key's current version.
	Version uint64
	// Token is the fencing token OpGrantWriteLease issued.
	Token uint64
	// Err is ErrVersionMismatch for a compare-and-swap that did not match.
	// It is part of the command's deterministic outcome, not a failure of
	// the store.
	Err error
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
}

// State is what a store holds besides the values: its counters, the lease
// horizon, and the write leases.
type State struct {
	// Revision is the revision of the last committed change.
	Revision uint64
	// Fence is the last fencing token issued.
	Fence uint64
	// Horizon is the last lease horizon recorded (wall clock; zero if
	// none), and Span how far ahead of the moment it was written it lay.
	Horizon time.Time
	Span    time.Duration
	// WriteLeases are the write leases granted and not ended, by key.
	WriteLeases []WriteLease
}

// Errors of a store.
var (
	// ErrVersionMismatch is the outcome of a compare-and-swap whose key is
	// not at the expected version.
	ErrVersionMismatch = errors.New("version mismatch")
	// ErrFailed is returned by Apply after an earlier Apply failed, until
	// Reopen succeeds.
	ErrFailed = errors.New("storage failed to persist an earlier change and must be reopened")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("store is closed")
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
}
