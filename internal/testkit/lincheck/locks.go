package lincheck

import (
	"fmt"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Locks (DESIGN §5.1) in the model: the write lease on a key acquired as a
// lock (LockAcquire), in a mode, bound to a TTL lease or not; released
// (LockRelease); read from its record (CheckToken); guarding the writes of
// other keys (GuardedPut, GuardedDelete).

// lockState is the model's state of the lock on a key: its write lease,
// whoever acquired it through LockAcquire. It is comparable.
//
// The rules:
//   - An acquisition is granted (OK) only while the lock is not held, or is
//     held by the acquirer's own client (the server grants a client's
//     acquisition over its own lock), and with a token above every token
//     known on the key: tokens only grow. An acquisition under a TTL lease
//     needs the lease to live, and fails NotFound only if it does not.
//   - A lock bound to a TTL lease lives until it is released, or its lease
//     ends (Revoke, Expire of that lease, in the part of the lease's key,
//     which the acquisition joins to the lock's: step ends the lease's
//     locks with it), or its client acquires it again. A plain write lease
//     (no TTL lease) has a term, and may be recalled or run out at any
//     moment, which the history does not show: it is loose, ended by the
//     model whenever an operation needs it ended (alternatives).
//   - A guarded write commits (OK) only if the lock is held with its token,
//     and is Fenced only if it is not.
//   - A try fails Locked only if another client holds the lock, or an
//     acquisition or release of the key by another operation overlaps it
//     in real time (Input.waiters: waiting acquisitions fail a try, and so
//     does a lock whose release is under way, which the server's table
//     still holds until the release is durable), or the lock ended since
//     its last grant other than by a release that returned (lingering:
//     the table forgets a lock that expired, was revoked or ran out a
//     moment after the store has, and a read in that moment sees it free).
//     The model cannot see operations in flight, so the overlap is marked
//     on the history (markWaiters).
//   - CheckToken's answer is the lock's state: held with that token, bound
//     to that TTL lease, or free; or, asked about a token, whether the lock
//     is held with it.
//
// An acquisition of unknown outcome (Unknown, or Maybe) may have been
// granted: the lock is then held by its client with a token unknown
// (token 0), above floor, which the first read of it, or a guarded write
// that commits, reveals.
type lockState struct {
	// token is the token the lock is held with; 0 while held by an
	// acquisition of unknown outcome, its token unknown but above floor.
	token uint64
	// floor is the highest token known to have been granted on the key.
	floor uint64
	// lease is the TTL lease the lock is bound to; 0: a plain write lease.
	lease uint64
	// owner is the client that holds it (Input.Owner).
	owner int32
	held  bool
	// loose: it may end at any moment (a plain write lease).
	loose bool
	// lingering: it ended since its last grant, otherwise than by a
	// release that returned; a try may still find it Locked.
	lingering bool
}

// alternatives returns the states the lock may be in: l, and, if it is
// loose, l ended.
func (l lockState) alternatives() []lockState {
	if l.held && l.loose {
		return []lockState{l, l.ended(true)}
	}
	return []lockState{l}
}

// ended returns the lock after it ended; lingering says how (see
// lockState.lingering).
func (l lockState) ended(lingering bool) lockState {
	return lockState{floor: l.floor, lingering: lingering}
}

// mayHold reports whether the lock may be held with token.
func (l lockState) mayHold(token uint64) bool {
	return l.held && token != 0 && (l.token == token || l.token == 0 && token > l.floor)
}

// pin returns the lock held with token, which mayHold allowed.
func (l lockState) pin(token uint64) lockState {
	if l.token == 0 {
		l.token, l.floor = token, max(l.floor, token)
	}
	return l
}

// granted returns the lock granted by acquisition in with token (0:
// unknown).
func (l lockState) granted(in Input, token uint64) lockState {
	return lockState{token: token, floor: max(l.floor, token), lease: in.Lease, owner: int32(in.Owner),
		held: true, loose: in.Lease == 0}
}

func (l lockState) String() string {
	if !l.held {
		s := fmt.Sprintf("lock free (tokens above %d)", l.floor)
		if l.lingering {
			s += ", its end maybe not yet seen by tries"
		}
		return s
	}
	var b strings.Builder
	if l.token != 0 {
		fmt.Fprintf(&b, "lock held with token %d", l.token)
	} else {
		fmt.Fprintf(&b, "lock held with a token above %d", l.floor)
	}
	fmt.Fprintf(&b, " by client %d", l.owner)
	if l.lease != 0 {
		fmt.Fprintf(&b, " under TTL lease %d", l.lease)
	}
	if l.loose {
		b.WriteString(" (a plain write lease: it may end at any moment)")
	}
	return b.String()
}

// withLock returns s with the lock on key k in state l.
func (s state) withLock(k string, l lockState) state {
	ks := s.get(k)
	ks.lock = l
	return s.with(k, ks)
}

// endLocks returns s with the locks bound to TTL lease id ended: the
// lease has just ended.
func (s state) endLocks(id uint64) state {
	n := s
	for _, e := range s.keys {
		if e.s.lock.held && e.s.lock.lease == id {
			n = n.withLock(e.key, e.s.lock.ended(true))
		}
	}
	return n
}

// stepLock is step for the operations on locks.
func stepLock(s state, in Input, out Output) []state {
	switch in.Kind {
	case LockAcquire:
		return stepAcquireLock(s, in, out)
	case GuardedPut, GuardedDelete:
		return stepGuarded(s, in, out)
	}
	var next []state
	for _, l := range s.get(in.Key).lock.alternatives() {
		for _, n := range stepLockKey(l, in, out) {
			next = append(next, s.withLock(in.Key, n))
		}
	}
	return next
}

// stepLockKey is step for a LockRelease or a CheckToken on a lock in
// state l.
func stepLockKey(l lockState, in Input, out Output) []lockState {
	switch in.Kind {
	case LockRelease:
		switch out.Outcome {
		case OK:
			// Acknowledged once the end is durable, and the table has
			// forgotten the lock.
			if !l.mayHold(in.Token) {
				return nil
			}
			return []lockState{l.ended(false)}
		case Unknown:
			if l.mayHold(in.Token) {
				return []lockState{l, l.ended(true)}
			}
			return []lockState{l}
		case NoEffect, NotFound:
			return []lockState{l}
		}
	case CheckToken:
		if out.Outcome != OK {
			return nil // failed reads are not recorded
		}
		switch {
		case in.Token != 0 && out.Found:
			if !l.mayHold(in.Token) {
				return nil
			}
			return []lockState{l.pin(in.Token)}
		case in.Token != 0:
			if l.held && l.token == in.Token {
				return nil
			}
			return []lockState{l}
		case out.Found:
			if !l.mayHold(out.Token) || l.lease != out.Lease {
				return nil
			}
			return []lockState{l.pin(out.Token)}
		default:
			if l.held {
				return nil
			}
			return []lockState{l}
		}
	}
	return nil
}

// stepAcquireLock is step for a LockAcquire.
func stepAcquireLock(s state, in Input, out Output) []state {
	cur := s.get(in.Key).lock
	live := in.Lease == 0 || s.get(in.LeaseKey).leaseLive(in.Lease)
	// mayGrant reports whether the lock may be granted to in's client in
	// state l.
	mayGrant := func(l lockState) bool { return live && (!l.held || l.owner == int32(in.Owner)) }
	var next []state
	switch out.Outcome {
	case NoEffect:
		return []state{s}
	case NotFound:
		if live {
			return nil
		}
		return []state{s}
	case Locked:
		if in.Mode != Try {
			return nil
		}
		for _, l := range cur.alternatives() {
			if in.waiters || l.held && l.owner != int32(in.Owner) || !l.held && l.lingering {
				next = append(next, s.withLock(in.Key, l))
			}
		}
	case OK:
		if out.Token <= cur.floor {
			return nil
		}
		for _, l := range cur.alternatives() {
			if mayGrant(l) {
				next = append(next, s.withLock(in.Key, l.granted(in, out.Token)))
			}
		}
	case Unknown, Maybe:
		next = append(next, s)
		for _, l := range cur.alternatives() {
			if mayGrant(l) {
				next = append(next, s.withLock(in.Key, l.granted(in, 0)))
			}
		}
	}
	return next
}

// stepGuarded is step for a GuardedPut or a GuardedDelete: the write of
// its key, if the lock on in.Guard is held with in.Token.
func stepGuarded(s state, in Input, out Output) []state {
	w := Input{Kind: Put, Key: in.Key, Value: in.Value}
	if in.Kind == GuardedDelete {
		w = Input{Kind: Delete, Key: in.Key}
	}
	var next []state
	for _, l := range s.get(in.Guard).lock.alternatives() {
		base := s.withLock(in.Guard, l)
		holds := l.mayHold(in.Token)
		switch out.Outcome {
		case OK:
			if holds {
				next = append(next, step(s.withLock(in.Guard, l.pin(in.Token)), w, out)...)
			}
		case Fenced:
			if !l.held || l.token != in.Token {
				next = append(next, base)
			}
		case Unknown:
			next = append(next, base)
			if holds {
				next = append(next, step(s.withLock(in.Guard, l.pin(in.Token)), w, out)...)
			}
		case NoEffect:
			next = append(next, base)
		}
	}
	return next
}

// markWaiters returns part with each try that failed Locked marked
// (Input.waiters) if an acquisition (but a try that failed Locked, which
// never waited) or a release of its key by another operation overlaps it
// in real time: the model sees no operation in flight, but a try fails
// while acquisitions wait for the lock, or while a release of it is under
// way. An operation of unknown outcome returns after the history's end
// (Recorder.History), and so overlaps every try called after it.
func markWaiters(part []porcupine.Operation) []porcupine.Operation {
	type span struct{ call, ret int64 }
	var spans map[string][]span
	tries := false
	for _, op := range part {
		in, out := op.Input.(Input), op.Output.(Output)
		switch {
		case in.Kind == LockAcquire && out.Outcome == Locked:
			tries = true
		case in.Kind == LockAcquire || in.Kind == LockRelease:
			if spans == nil {
				spans = make(map[string][]span)
			}
			spans[in.Key] = append(spans[in.Key], span{op.Call, op.Return})
		}
	}
	if !tries {
		return part
	}
	for i, op := range part {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind != LockAcquire || out.Outcome != Locked {
			continue
		}
		for _, sp := range spans[in.Key] {
			if sp.call <= op.Return && op.Call <= sp.ret {
				in.waiters = true
				part[i].Input = in
				break
			}
		}
	}
	return part
}

// HistoryWithLocks is History, with the operations on locks of unknown
// outcome put back that History leaves out as writes nobody read:
// acquisitions (LockAcquire), releases (LockRelease) and guarded deletes
// (GuardedDelete), whose effects show without a value. Like every
// operation of unknown outcome, they return after every other event. A
// guarded put of unknown outcome is left out, as a put is, unless a read
// returned its value.
func (r *Recorder) HistoryWithLocks() ([]porcupine.Operation, Summary) {
	// Read the operations before History does: it sees them all, and
	// perhaps more.
	r.mu.Lock()
	ops := append([]porcupine.Operation(nil), r.ops...)
	r.mu.Unlock()
	kept, s := r.History()
	type id struct {
		client int
		call   int64
		kind   Kind
	}
	have := make(map[id]bool, len(kept))
	var end int64
	for _, op := range kept {
		have[id{op.ClientId, op.Call, op.Input.(Input).Kind}] = true
		end = max(end, op.Return, op.Call)
	}
	for _, op := range ops {
		end = max(end, op.Return, op.Call)
	}
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if out.Outcome != Unknown || in.Kind != LockAcquire && in.Kind != LockRelease && in.Kind != GuardedDelete {
			continue
		}
		if have[id{op.ClientId, op.Call, in.Kind}] {
			continue
		}
		op.Return = end + 1
		kept = append(kept, op)
		s.Unneeded--
		s.Ops++
	}
	return kept, s
}
