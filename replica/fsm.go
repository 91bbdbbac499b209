// Where a log entry is applied: the FSM, to which raft hands each committed entry, applies its commands
// to badger and notes what the entry means for leases. Its encoding is in entry.go, snapshots in snapshot.go.

// Package replica replicates leased's state machine with hashicorp/raft.
// Every change that package core makes is a batch of store.Commands; a
// Node appends each batch to the raft log as one entry, and every replica
// applies the committed entries, in log order, to its own badger database
// (an FSM). badger keeps the applied state and, in the same transaction as
// each entry, the entry's index, so that a restarted node applies only the
// entries past what it holds. Snapshots stream the badger state.
//
// A Node is also a store.Store: core applies through it exactly as it
// applies to a local database, and reads the leader's applied state.
package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/store"
)

// Errors of the state machine.
var (
	// ErrBadEntry is the outcome of a log entry that does not decode. Every
	// replica reaches the same outcome, and applies nothing of it.
	ErrBadEntry = errors.New("replica: log entry does not decode")
	// ErrStopped is returned once the state machine has failed to apply an
	// entry to its database: it applies nothing more, so that it never
	// diverges from the other replicas, until the node is restarted and
	// applies the log again from what its database holds.
	ErrStopped = errors.New("replica: the state machine stopped after a storage failure")
	// ErrDamagedEntry is the outcome of a log entry whose checksum does
	// not match: this node's copy of the log is damaged. Unlike a bad
	// entry, it is no outcome the other replicas share: the state machine
	// stops, and the node refuses to start on the damaged log.
	ErrDamagedEntry = errors.New("replica: log entry damaged on disk")
)

// Applied is what FSM.Apply returns for a log entry, and what a Node hands
// back to the entry's proposer: the results of its commands, or why the
// entry was not applied.
type Applied struct {
	Results []store.Result
	Err     error
}

// FSM is the raft state machine over one badger database. raft calls Apply,
// Snapshot and Restore from one goroutine; the applied index may be read
// from any.
type FSM struct {
	db    *store.Badger
	log   *slog.Logger
	clock clock.Clock

	applied atomic.Uint64 // index of the last entry in db
	// sinceSnapshot counts the bytes of the entries applied since the last
	// snapshot; onBytes, if set before raft starts, is called with it
	// after each entry (Node.compact).
	sinceSnapshot atomic.Uint64
	entriesSince  atomic.Uint64 // the entries applied since the last snapshot
	onBytes       func(uint64)

	// term, once set (SetTerm), reads the node's current raft term.
	term atomic.Pointer[func() uint64]

	mu             sync.Mutex
	stopped        error         // the storage failure that stopped the machine
	horizonApplied time.Time     // when the newest horizon entry was applied here (HorizonApplied)
	span           time.Duration // the span of the newest horizon entry
	// inherited maps the keys that entries of an earlier term than the
	// node's changed, as it applied them, to when the leases of the
	// leader that appended them end at the latest (Inherited).
	inherited map[string]time.Time
}

// inheritedKept is how long after its bound an inherited key is kept:
// past any ε the core adds to it.
const inheritedKept = time.Minute

// SetTerm gives the machine a way to read the node's current raft term,
// with which it tells the entries a leader inherited (Inherited). The
// node calls it once raft runs.
func (f *FSM) SetTerm(term func() uint64) { f.term.Store(&term) }

// Inherited returns the keys that writes of an earlier term than the
// node's changed when this node applied them, each with a bound, on this
// node's clock and without ε, on the leases that the leader that appended
// the write may have granted on the key's old value: when the node applied
// the newest horizon entry before the write, plus that entry's span. A later
// leader commits such writes with its first entry; their writers may not
// have been told, and the leader that appended them may have taken them
// for failed and serve the old values until its horizon (DESIGN §13), as
// long as any node may lead after it. Keys whose bound passed a minute
// ago are dropped. A node that restarted, or restored a snapshot, knows
// only the writes it applied since: for the others, a later leader relies
// on the holds that the leader that inherited them recorded with its
// horizons (store.State.Holds, read by package core).
func (f *FSM) Inherited() map[string]time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.inherited)
}

// noteInherited records the keys that the commands of l change, as their
// results rs say, if l is of an earlier term than the node's.
func (f *FSM) noteInherited(l *raft.Log, cmds []store.Command, rs []store.Result) {
	tp := f.term.Load()
	if tp == nil {
		return
	}
	if l.Term >= (*tp)() {
		return
	}
	now := f.clock.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, until := range f.inherited {
		if now.Sub(until) > inheritedKept {
			delete(f.inherited, k)
		}
	}
	// The leader that appended the write granted leases only under
	// horizons it saw committed, entries before this one: the newest of
	// them applied here bounds its leases, from when it was applied.
	until := now
	if !f.horizonApplied.IsZero() {
		until = f.horizonApplied.Add(f.span)
	}
	note := func(k string) {
		if f.inherited == nil {
			f.inherited = make(map[string]time.Time)
		}
		if until.After(f.inherited[k]) {
			f.inherited[k] = until
		}
	}
	for i, c := range cmds {
		switch c.Op {
		case store.OpPut, store.OpDelete, store.OpCAS, store.OpTxn:
			for _, k := range c.WrittenKeys() {
				note(string(k))
			}
		case store.OpRevokeTTL:
			// A revocation deletes the keys its result names, and ends
			// the locks bound to the lease.
			if i < len(rs) {
				for _, k := range rs[i].Keys {
					note(k)
				}
				for _, l := range rs[i].Locks {
					note(store.LockRecordKey(l.Key))
				}
			}
		case store.OpGrantWriteLease, store.OpEndWriteLease:
			// A lock's record changes (store.LockRecordKey).
			note(store.LockRecordKey(string(c.Key)))
		}
	}
}

// NewFSM returns the state machine over db, which it does not own. clk
// (nil: the system clock) stamps the horizon entries it applies.
func NewFSM(db *store.Badger, clk clock.Clock, log *slog.Logger) (*FSM, error) {
	idx, err := db.AppliedIndex()
	if err != nil {
		return nil, err
	}
	st, err := db.State()
	if err != nil {
		return nil, err
	}
	f := &FSM{db: db, log: log, clock: clock.OrReal(clk), span: st.Span}
	f.applied.Store(idx)
	if !st.Horizon.IsZero() || st.HandedOff {
		// The newest horizon entry was applied before this start, on a
		// clock that is gone: count it as applied now. Its leases end
		// no later than its span after it, plus ε, from then, whoever
		// recorded it; only a core that recorded it itself, in the
		// same boot of the machine, may count it on the boot clock
		// instead (core.Config.BootFile).
		f.horizonApplied = f.clock.Now()
	}
	return f, nil
}

// AppliedIndex is the index of the last log entry the database holds.
func (f *FSM) AppliedIndex() uint64 { return f.applied.Load() }

// Apply applies a committed log entry and returns an Applied. An entry at
// or below the applied index is already in the database (a restart applies
// the log again from the last snapshot) and is skipped.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	if err := f.stoppedErr(); err != nil {
		return Applied{Err: err}
	}
	if l.Index <= f.applied.Load() {
		return Applied{Err: errReplayed}
	}
	cmds, derr := decodeEntry(l.Data)
	if errors.Is(derr, ErrDamagedEntry) {
		f.stop(fmt.Errorf("%w: entry %d: %w", ErrStopped, l.Index, derr))
		return Applied{Err: f.stoppedErr()}
	}
	// An entry that does not decode still takes its index, with no
	// commands, on every replica alike.
	rs, err := f.db.ApplyEntry(l.Index, cmds)
	if err != nil {
		f.stop(fmt.Errorf("%w: entry %d: %v", ErrStopped, l.Index, err))
		return Applied{Err: f.stoppedErr()}
	}
	f.applied.Store(l.Index)
	f.sinceSnapshot.Add(uint64(len(l.Data)))
	f.entriesSince.Add(1)
	if f.onBytes != nil {
		f.onBytes(f.sinceSnapshot.Load())
	}
	f.noteInherited(l, cmds, rs)
	for _, c := range cmds {
		switch c.Op {
		case store.OpSetHorizon:
			f.stampHorizon(c.Span)
		case store.OpHandoff:
			f.stampHorizon(store.Longest(c.Handoff))
		}
	}
	if derr != nil {
		f.log.Error("log entry does not decode; applied as empty", "index", l.Index, "err", derr)
		return Applied{Err: derr}
	}
	return Applied{Results: rs}
}

// errReplayed answers an entry the database held already. Nobody waits for
// it: its proposer was answered before the restart.
var errReplayed = errors.New("replica: entry applied before the restart")

// stampHorizon notes that the newest horizon entry, or handoff, of span
// was applied now.
func (f *FSM) stampHorizon(span time.Duration) {
	now := f.clock.Now()
	f.mu.Lock()
	f.horizonApplied, f.span = now, span
	f.mu.Unlock()
}

// HorizonApplied is when the newest horizon entry was applied here: no
// earlier than the leader that appended it did. An entry applied before
// this node's start, or in a snapshot it restored, counts as applied then.
// Zero if the state holds no horizon.
func (f *FSM) HorizonApplied() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.horizonApplied
}

func (f *FSM) stop(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped == nil {
		f.stopped = err
		f.log.Error("state machine stopped; restart the node to apply the log again", "err", err)
	}
}

func (f *FSM) stoppedErr() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopped
}
