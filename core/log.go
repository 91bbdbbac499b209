package core

import (
	"errors"
	"fmt"

	"github.com/leased/leased/store"
)

// The log: every state change the core makes reaches the store as a
// store.Command through writeLog, the core's one call of Store.Apply. Most
// go through the committer's queue (commit.go); writeLog's comment lists
// the few that do not, and why.

// writeLog applies cmds through the store, in order (Store.Apply), and
// returns their results; it notes the revision of the last change
// committed. It is the core's only call of Store.Apply. Its callers, the
// goroutine each runs on, and why each does not go through the
// committer's queue:
//
// Through apply, which first reopens the store if it is down and its
// retry is due, and takes it down when Apply fails (recover and downState,
// commit.go):
//
//   - commit (commit.go), on the committer's goroutine (commitLoop): the
//     queue itself. Writes, write-lease grants and ends, and every command
//     of TTL leases (grants, the marks of keep-alives, checkpoints,
//     revocations), up to 256 a call.
//   - setHorizon (horizon.go), OpSetHorizon, under horizonMu: from
//     advanceHorizon, on the goroutine about to grant or extend a lease
//     past the horizon (a session's, in Read, Renew or KeepAlive; the
//     committer's, in commit, for a writer's read lease or an acquirer's
//     write lease; horizonLoop's, which moves it ahead of time; Resume's
//     caller), from lowerHorizon, on Close's goroutine, and from
//     recordHolds, on New's goroutine before the committer starts. The
//     horizon must be durable before any lease past it is granted, so its caller
//     waits for it; and the committer may itself be that caller (commit
//     grants a writer's lease once its batch is applied): waiting for a
//     job of its own queue, it would wait forever. lowerHorizon runs once
//     the committer has stopped.
//   - HandOff (handoff.go), OpHandoff, on its caller's goroutine
//     (node.Node.TransferLead's, before it transfers the lead). It drains the queue and
//     then holds horizonMu, so that no horizon follows the handoff; the
//     committer may be waiting for horizonMu (commit, ensureHorizon), so
//     HandOff must not wait for the committer while it holds it. Its
//     caller needs the outcome before it transfers the lead.
//   - forgetIdleClients (core.go), OpForgetClients, on forgetLoop's
//     goroutine. It must see each batch applied before it reads the next
//     (Store.IdleClients reads the applied state), and no request waits
//     for it or must come after it: the queue orders what the lease table
//     makes ready on keys, and forgetting touches no key.
//   - collectTombstones (tombstones.go), store.OpCollectTombstones, on
//     collectLoop's goroutine, for the same reasons: it reads each
//     command's outcome before the next, no request waits for it, and it
//     changes no key's value.
//   - compactThrough (compact.go), store.OpCompact, on compactLoop's
//     goroutine or Compact's caller's (an operator's compaction), one at a
//     time (compactMu), for the same reasons: it reads each command's
//     outcome before the next, no request waits for it, and it changes
//     no key's value.
//   - SetAlarm (alarm.go), store.OpSetAlarm, on its caller's goroutine
//     (node.Node's alarm watch), for the same reasons: it touches no key,
//     no request waits for it, and its caller needs the outcome to know
//     that the alarm is recorded.
//
// Directly, on the goroutine that calls New, before New starts the
// committer and the core's other goroutines: there is no committer yet,
// and nothing else calls the store. An error fails New, with the store's
// error, and takes no store down:
//
//   - recordLeader (core.go), OpSetLeader: the first command of the core's
//     term (Config.LeaderName), before New reads the state.
//   - restore (horizon.go) and restoreHandoff (handoff.go),
//     OpEndWriteLease: the write leases an earlier run or leader left
//     that live no longer, ended before the core serves.
//
// So Store.Apply may run on six goroutines at once: the committer's,
// the one holding horizonMu (setHorizon or HandOff; the committer's own
// at times), forgetLoop's, collectLoop's, the compactor's and SetAlarm's
// caller's. The
// store serializes them (Store). Every caller but the committer applies
// one command a call, so that none depends on a batch of another being
// applied with nothing in between.
func (c *Core) writeLog(cmds []store.Command) ([]store.Result, error) {
	rs, err := c.store.Apply(cmds)
	moved := false
	for _, r := range rs {
		if r.Version > c.revision.Load() && r.Err == nil {
			c.revision.Store(r.Version)
			moved = true
		}
	}
	if moved {
		c.revisionMoved()
	}
	return rs, err
}

// revisionMoved wakes whoever waits for the committed revision to move
// (Revisions).
func (c *Core) revisionMoved() {
	c.revMu.Lock()
	if c.revCh != nil {
		close(c.revCh)
		c.revCh = nil
	}
	c.revMu.Unlock()
}

// Revisions returns the revision committed now, and a channel that is
// closed once a later one is committed (or the store is reopened after a
// failure that may have committed one): a watcher reads the history up to
// the revision, then waits on the channel. Any goroutine may call it.
func (c *Core) Revisions() (uint64, <-chan struct{}) {
	c.revMu.Lock()
	defer c.revMu.Unlock()
	if c.revCh == nil {
		c.revCh = make(chan struct{})
	}
	return c.revision.Load(), c.revCh
}

// apply applies cmds to the store (writeLog), unless it is down and its
// retry is not due. A failure takes it down.
func (c *Core) apply(cmds []store.Command) ([]store.Result, error) {
	if err := c.recover(c.clock.Now()); err != nil {
		return nil, notApplied{err}
	}
	rs, err := c.writeLog(cmds)
	if err != nil {
		ferr := c.down.fail(c, err)
		if errors.Is(err, store.ErrNotLeader) {
			return rs, fmt.Errorf("%w: %v", ErrNotLeader, err)
		}
		return rs, ferr
	}
	return rs, nil
}

// notApplied is the error of apply when the store is down and its retry is
// not due: the commands never reached it, and their outcome is known.
type notApplied struct{ error }

func (e notApplied) Unwrap() error { return e.error }
