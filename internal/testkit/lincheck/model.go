// Package lincheck checks histories of leased operations for
// linearizability with github.com/anishathalye/porcupine.
//
// A Recorder collects the operations that concurrent clients run, each with
// the times of its call and its return; History turns them into a porcupine
// history; Check checks it against Model, a sequential specification of
// leased's key-value store: Get, Put, Delete, CompareAndSwap, write-lease
// acquisition, writes fenced by a write lease's token, transactions (Txn)
// and TTL leases with a key attached. A read served from a client's cache
// is a read like any other, and so is each key of a listing
// (Input.Listed): one read of each key the listing covers, found or not.
// A read that finds no key at version 0 says nothing of the version of
// its deletion: a Get answered from a cached listing cannot know it.
//
// The history is checked in parts (partition): the operations of each set
// of keys that transactions join, one key by itself when no transaction
// names it with another. Within a part, a transaction's compares are
// evaluated on the model's state of their keys, its Succeeded checked
// against them, and the branch they choose applied to every key it writes
// at once; and the reads of one listing (Recorder.EndListing) are checked
// at one point, as a listing is of one revision. That a listing is of one
// revision across keys of different parts is left to the store's tests.
//
// TTL leases are modelled per key, as everything else: each lease of a
// history is used with one key, whose partition holds its grant, the puts
// that attach the key to it, its keep-alives, its revocation and its
// expiry. Expiry is an operation of its own that a test records: called
// when the lease may first end (its TTL after the last keep-alive that
// was acknowledged was sent) and returning when the history ends. The
// model deletes the key at the moment its lease ends, by revocation or
// expiry, and not a moment before.
//
// Locks (DESIGN §5.1) are write leases acquired as locks (LockAcquire), in
// a mode (AcquireMode), bound to a TTL lease or not, released
// (LockRelease), read (CheckToken), and guarding writes of other keys
// (GuardedPut, GuardedDelete): see lockState for the rules. A lock bound
// to a TTL lease names the key of that lease (Input.LeaseKey), which joins
// the two in one part, so that the lease's revocation or expiry ends the
// lock there; a guarded write joins its key and the lock's.
//
// Only tests use this package.
package lincheck

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Kind is the kind of an operation.
type Kind uint8

// Operations of the model.
const (
	Get Kind = iota + 1
	Put
	Delete
	CAS
	// Acquire takes the write lease on a key. Its output is the token.
	Acquire
	// FencedPut and FencedDelete are writes under a write lease, carrying
	// its token.
	FencedPut
	FencedDelete
	// Txn is a transaction (Input.If, Then and Else); its output says
	// which branch it applied (Succeeded) and at which revision (Version).
	Txn
	// listing is what partition makes of the reads of one listing whose
	// keys are in one part (Input.reads, Output.reads): one operation, as
	// a listing is of one revision.
	listing
	// Grant grants a TTL lease for Key; its output is the lease. LeasePut
	// puts Key attached to Lease. KeepAlive renews Lease, Revoke ends it,
	// and TimeToLive asks whether it lives (OK) or not (NotFound). Expire
	// is the end of Lease that its holder stopped keeping alive.
	Grant
	LeasePut
	KeepAlive
	Revoke
	TimeToLive
	Expire
	// LockAcquire acquires the write lease on Key as a lock, in Mode,
	// bound to TTL lease Lease (of key LeaseKey) or not (0), for client
	// Owner; its output is the token, or Locked (a try that found it
	// taken), or NotFound (Lease does not live). LockRelease releases the
	// lock on Key held with Token. GuardedPut and GuardedDelete write Key
	// only if the lock on Guard is held with Token (else Fenced).
	// CheckToken reads the record of the lock on Key: held (Found), with
	// Token, bound to Lease; or, with Input.Token, whether it is held with
	// that token (Found).
	LockAcquire
	LockRelease
	GuardedPut
	GuardedDelete
	CheckToken
)

func (k Kind) String() string {
	switch k {
	case Get:
		return "get"
	case Put:
		return "put"
	case Delete:
		return "delete"
	case CAS:
		return "cas"
	case Acquire:
		return "acquire"
	case FencedPut:
		return "fenced-put"
	case FencedDelete:
		return "fenced-delete"
	case Txn:
		return "txn"
	case listing:
		return "listing"
	case Grant:
		return "grant"
	case LeasePut:
		return "lease-put"
	case KeepAlive:
		return "keep-alive"
	case Revoke:
		return "revoke"
	case TimeToLive:
		return "time-to-live"
	case Expire:
		return "expire"
	case LockAcquire:
		return "lock"
	case LockRelease:
		return "unlock"
	case GuardedPut:
		return "guarded-put"
	case GuardedDelete:
		return "guarded-delete"
	case CheckToken:
		return "check-token"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Input is what an operation asked for.
type Input struct {
	Kind   Kind
	Key    string // every kind but Txn
	Value  string // Put, CAS, FencedPut, LeasePut, GuardedPut; every value written in a history is unique
	Expect uint64 // CAS: the version the key must be at (0: absent)
	Token  uint64 // FencedPut, FencedDelete, LockRelease, GuardedPut, GuardedDelete, CheckToken (0: read the record)
	Lease  uint64 // LeasePut, KeepAlive, Revoke, TimeToLive, Expire, LockAcquire (0: a plain write lease)
	// Mode, LeaseKey and Owner are a LockAcquire's: its mode; the key of
	// TTL lease Lease (that of its Grant); and the client of the library
	// that acquires, numbered from 1. An acquisition by the lock's holder's
	// own client is granted over its lock, as the server does.
	Mode     AcquireMode
	LeaseKey string
	Owner    int
	// Guard is the lock key of a GuardedPut or GuardedDelete: the write
	// commits only if the lock on it is held with Token.
	Guard string
	// waiters, on a LockAcquire that found the lock Locked, says that an
	// acquisition or a release of its key by another operation overlaps
	// it in real time (partition): acquisitions waiting for the lock, and
	// a lock being released, also make a try fail.
	waiters bool
	// Listed marks a Get that is one key of a listing (client.List): the
	// listing's answer for Key. A listing names the keys it found, with
	// their versions, and not the version of a key it did not find.
	Listed bool
	// If, Then and Else are a Txn: if every compare of If holds, the ops
	// of Then are applied, else those of Else. A branch writes a key once
	// at most.
	If         []Compare
	Then, Else []TxnOp
	reads      []Input // listing
}

// AcquireMode is how a LockAcquire acquires (client.AcquireWait,
// client.AcquireTry): modes change how long it waits, not what it may be
// granted, except that only a try fails with Locked.
type AcquireMode uint8

// Modes of an acquisition.
const (
	// Recall recalls a plain write lease held by another client, and
	// waits for a lock bound to a TTL lease.
	Recall AcquireMode = iota
	// Wait waits in line until the lock is released or ends.
	Wait
	// Try fails at once (Locked) if another client holds the lock or
	// acquisitions wait for it; otherwise it is Recall.
	Try
)

func (m AcquireMode) String() string {
	switch m {
	case Recall:
		return "recall"
	case Wait:
		return "wait"
	case Try:
		return "try"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// CompareOp says what a Compare checks of its key, as client.Compare does.
type CompareOp uint8

// Compares. A key's version, for them, is the revision of its last write,
// 0 while it is absent; a value compare never holds for an absent key.
const (
	Exists CompareOp = iota + 1
	Absent
	VersionIs
	VersionIsNot
	VersionAbove
	VersionBelow
	ValueIs
	ValueIsNot
)

func (o CompareOp) String() string {
	switch o {
	case Exists:
		return "exists"
	case Absent:
		return "absent"
	case VersionIs:
		return "version ="
	case VersionIsNot:
		return "version !="
	case VersionAbove:
		return "version >"
	case VersionBelow:
		return "version <"
	case ValueIs:
		return "value ="
	case ValueIsNot:
		return "value !="
	}
	return fmt.Sprintf("compare(%d)", uint8(o))
}

// Compare is one condition of a Txn on Key: Op, with Version or Value.
type Compare struct {
	Key     string
	Op      CompareOp
	Version uint64
	Value   string
}

// TxnOp is one write of a Txn's branch: a put of Key to Value, or, with
// Delete, a delete of Key. Token, if not 0, is the fencing token of the
// write lease it is under (client.TxnOp.Under), which must live for the
// transaction to commit, whichever branch it applies.
type TxnOp struct {
	Key    string
	Delete bool
	Value  string // every value written in a history is unique
	Token  uint64
}

// Outcome says what became of an operation.
type Outcome uint8

// Outcomes.
const (
	// OK: the operation took effect, and Output describes it.
	OK Outcome = iota + 1
	// Mismatch: a CAS found the key at another version and changed nothing.
	Mismatch
	// Fenced: the server refused a fenced write; nothing changed.
	Fenced
	// NoEffect: the operation is known to have changed nothing, such as a
	// write the server abandoned. Reads that failed are not recorded.
	NoEffect
	// Unknown: the operation may or may not have taken effect, such as a
	// write whose connection was lost before its reply came. It may take
	// effect at any time after its call.
	Unknown
	// NotFound: the TTL lease the operation named does not exist (never
	// granted, revoked or expired); nothing changed.
	NotFound
	// Locked: a try (LockAcquire of Mode Try) found the lock held by
	// another client, or acquisitions waiting for it; nothing changed.
	Locked
	// Maybe: the operation may or may not have taken effect, and if it
	// did, it did before it returned, unlike Unknown: a LockAcquire that
	// stands for a grant its client may have been given without learning
	// of it (its session was lost while it acquired, and it asked again on
	// the next one, which the operation's own outcome is about).
	Maybe
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Mismatch:
		return "mismatch"
	case Fenced:
		return "fenced"
	case NoEffect:
		return "no effect"
	case Unknown:
		return "unknown"
	case NotFound:
		return "not found"
	case Locked:
		return "locked"
	case Maybe:
		return "maybe"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Output is what an operation returned.
type Output struct {
	Outcome Outcome
	// Found, Value and Version: for Get, the key's state as read; for a
	// write, Version is the version it committed. For a delete, Found
	// says that it removed the key; one that removed nothing changed
	// nothing, and Version is the key's version (that of its deletion).
	Found   bool
	Value   string
	Version uint64
	Token   uint64 // Acquire, LockAcquire: the fencing token granted; CheckToken: the lock's
	Lease   uint64 // Grant: the TTL lease granted; CheckToken: the TTL lease the lock is bound to
	Cached  bool   // Get, CheckToken: served from the client's cache, under its lease
	// Succeeded: a Txn applied Then (every compare held), not Else. Its
	// Version is the revision of every key it wrote, or, if the branch
	// changed nothing, the store's revision.
	Succeeded bool
	Err       string   // why, when Outcome is not OK; for the visualization only
	reads     []Output // listing
}

// keyState is the model's state of one key. It is comparable.
type keyState struct {
	found   bool
	value   string
	version uint64
	// pinned: version is the key's version. Otherwise a write of unknown
	// outcome took effect, and the key's version is only known to be
	// above version.
	pinned bool
	// tag, if not 0 and not pinned: a transaction of unknown outcome
	// wrote the key, and every key of the state of the same tag has the
	// same version, that of the transaction, one unknown.
	tag uint64
	// token is the latest fencing token granted on the key, if tokenKnown.
	// An acquisition of unknown outcome that took effect makes it unknown.
	token      uint64
	tokenKnown bool
	// live: no write outside the write lease has taken effect since the
	// latest grant, so a write fenced by its token may still commit.
	live bool
	// attached is the TTL lease the key is attached to (0: none), and
	// leases are the live TTL leases granted for the key (0: a free
	// slot). lastLease is the highest lease granted for it: ids only grow.
	attached  uint64
	leases    [maxLeases]uint64
	lastLease uint64
	// lock is the key's write lease as a lock (LockAcquire).
	lock lockState
}

// maxLeases bounds the TTL leases of one key live at once in a history.
const maxLeases = 4

// leaseLive reports whether TTL lease id lives.
func (s keyState) leaseLive(id uint64) bool {
	return id != 0 && slices.Contains(s.leases[:], id)
}

// endLease returns the state after TTL lease id ends, live or not:
// the key is deleted, at version (0: unknown), if it is attached to it.
func (s keyState) endLease(id uint64, version uint64) keyState {
	if !s.leaseLive(id) {
		return s
	}
	n := s
	n.leases[slices.Index(n.leases[:], id)] = 0
	if n.attached == id {
		n = n.write(Input{Kind: Delete}, version)
	}
	return n
}

// versionIs reports whether the key's version may be v.
func (s keyState) versionIs(v uint64) bool {
	if s.pinned {
		return s.version == v
	}
	return v > s.version
}

// reads reports whether a read may return found, value and version.
func (s keyState) reads(found bool, value string, version uint64) bool {
	return s.found == found && (!found || s.value == value) && s.versionIs(version)
}

// casMatches reports whether a CAS expecting version e may succeed. A key
// that does not exist matches 0, whatever the version of its deletion.
func (s keyState) casMatches(e uint64) bool {
	return (e == 0 && !s.found) || s.versionIs(e)
}

// casMayMismatch reports whether a CAS expecting version e may fail.
func (s keyState) casMayMismatch(e uint64) bool {
	if e == 0 && !s.found {
		return false
	}
	return !s.pinned || s.version != e
}

// write returns the state after a write of in that committed version, or
// took effect at an unknown version (version 0).
func (s keyState) write(in Input, version uint64) keyState {
	n := s
	n.found = in.Kind == Put || in.Kind == CAS || in.Kind == FencedPut || in.Kind == LeasePut
	n.value = ""
	if n.found {
		n.value = in.Value
	}
	n.version, n.pinned, n.tag = version, version != 0, 0
	if version == 0 {
		n.version = s.version // a lower bound
	}
	n.attached = 0
	if in.Kind == LeasePut {
		n.attached = in.Lease
	}
	if in.Kind != FencedPut && in.Kind != FencedDelete {
		// A write outside the write lease recalls it and commits only
		// after it has ended.
		n.live = false
	}
	return n
}

// fencedMayCommit reports whether a write fenced by token may commit.
func (s keyState) fencedMayCommit(token uint64) bool {
	return s.tokenKnown && s.token == token && s.live
}

// stepKey returns every state the key may be in after op, or none if op is
// impossible in s.
func stepKey(s keyState, in Input, out Output) []keyState {
	if in.Kind >= Grant && in.Kind <= Expire {
		return stepTTL(s, in, out)
	}
	switch out.Outcome {
	case NoEffect, Fenced:
		if in.Kind == Get {
			return nil // failed reads are not recorded
		}
		if out.Outcome == Fenced && in.Kind != FencedPut && in.Kind != FencedDelete {
			return nil
		}
		return []keyState{s}
	case Mismatch:
		if in.Kind != CAS || !s.casMayMismatch(in.Expect) {
			return nil
		}
		n := s
		n.live = false // it queued behind, and so recalled, the write lease
		return []keyState{n}
	case Unknown:
		return stepUnknown(s, in)
	case OK:
	default:
		return nil
	}
	switch in.Kind {
	case Get:
		if !out.Found && (in.Listed || out.Version == 0) {
			// Absent, at a version the read does not say: a listing names
			// only the keys it found, and a Get answered from a cached
			// listing (client.Leased), or of a key whose tombstone was
			// collected, says version 0 of a key that may have been
			// deleted at any version.
			if s.found {
				return nil
			}
			return []keyState{s}
		}
		if !s.reads(out.Found, out.Value, out.Version) {
			return nil
		}
		n := s
		n.version, n.pinned = out.Version, true
		return []keyState{n}
	case Acquire:
		if out.Token <= s.token {
			return nil
		}
		n := s
		n.token, n.tokenKnown, n.live = out.Token, true, true
		return []keyState{n}
	case Delete, FencedDelete:
		if in.Kind == FencedDelete && !s.fencedMayCommit(in.Token) {
			return nil
		}
		if out.Found {
			if !s.found || out.Version <= s.version {
				return nil
			}
			return []keyState{s.write(in, out.Version)}
		}
		// It removed nothing: the key did not exist, at that version.
		if !s.reads(false, "", out.Version) {
			return nil
		}
		n := s
		n.version, n.pinned = out.Version, true
		if in.Kind == Delete {
			n.live = false // it queued behind, and so recalled, the write lease
		}
		return []keyState{n}
	case Put:
		if out.Version <= s.version {
			return nil
		}
		return []keyState{s.write(in, out.Version)}
	case CAS:
		if !s.casMatches(in.Expect) || out.Version <= s.version || out.Version <= in.Expect {
			return nil
		}
		return []keyState{s.write(in, out.Version)}
	case FencedPut:
		if !s.fencedMayCommit(in.Token) || out.Version <= s.version {
			return nil
		}
		return []keyState{s.write(in, out.Version)}
	}
	return nil
}

// stepUnknown returns the states after an operation of unknown outcome:
// unchanged, or changed at an unknown version.
func stepUnknown(s keyState, in Input) []keyState {
	next := []keyState{s}
	switch in.Kind {
	case Get:
		return nil // failed reads are not recorded
	case Acquire:
		n := s
		n.tokenKnown, n.live = false, false
		next = append(next, n)
	case Put, Delete:
		next = append(next, s.write(in, 0))
	case CAS:
		if s.casMatches(in.Expect) {
			n := s.write(in, 0)
			if in.Expect > n.version {
				n.version = in.Expect
			}
			next = append(next, n)
		}
	case FencedPut, FencedDelete:
		if s.fencedMayCommit(in.Token) {
			next = append(next, s.write(in, 0))
		}
	}
	return next
}

// stepTTL is step for the operations of TTL leases.
func stepTTL(s keyState, in Input, out Output) []keyState {
	live := s.leaseLive(in.Lease)
	switch out.Outcome {
	case NoEffect:
		if in.Kind == Expire || in.Kind == TimeToLive {
			return nil
		}
		return []keyState{s}
	case NotFound:
		if in.Kind == Grant || in.Kind == Expire || live {
			return nil
		}
		return []keyState{s}
	case Unknown:
		switch in.Kind {
		case LeasePut:
			if live {
				return []keyState{s, s.write(in, 0)}
			}
		case Revoke:
			return []keyState{s, s.endLease(in.Lease, 0)}
		case Expire, TimeToLive:
			return nil
		}
		return []keyState{s}
	case OK:
	default:
		return nil
	}
	switch in.Kind {
	case Grant:
		free := slices.Index(s.leases[:], 0)
		if out.Lease <= s.lastLease || free < 0 {
			return nil
		}
		n := s
		n.leases[free], n.lastLease = out.Lease, out.Lease
		return []keyState{n}
	case LeasePut:
		if !live || out.Version <= s.version {
			return nil
		}
		return []keyState{s.write(in, out.Version)}
	case KeepAlive, TimeToLive:
		if !live {
			return nil
		}
		return []keyState{s}
	case Revoke:
		if !live || s.attached == in.Lease && out.Version <= s.version {
			return nil
		}
		return []keyState{s.endLease(in.Lease, out.Version)}
	case Expire:
		return []keyState{s.endLease(in.Lease, 0)}
	}
	return nil
}

// state is the model's state of one part of a history (partition): the
// keys that its operations have changed, sorted, each with its keyState. A
// key not in it is as every key starts, absent at version 0 (initial), and
// a key whose state is that again leaves it, so that equal states look
// alike. Steps never change a state: they return new ones.
type state struct {
	keys []keyEntry
}

// keyEntry is one key of a state.
type keyEntry struct {
	key string
	s   keyState
}

// initial is the state of a key never written, as in a new data folder.
var initial = keyState{pinned: true}

// find returns the index of key k in s.keys, or where it would go.
func (s state) find(k string) (int, bool) {
	return slices.BinarySearchFunc(s.keys, k, func(e keyEntry, k string) int { return strings.Compare(e.key, k) })
}

// get returns the state of key k.
func (s state) get(k string) keyState {
	if i, ok := s.find(k); ok {
		return s.keys[i].s
	}
	return initial
}

// with returns s with key k in state ks.
func (s state) with(k string, ks keyState) state {
	i, ok := s.find(k)
	if ok && s.keys[i].s == ks || !ok && ks == initial {
		return s
	}
	keys := make([]keyEntry, 0, len(s.keys)+1)
	keys = append(keys, s.keys[:i]...)
	if ks != initial {
		keys = append(keys, keyEntry{k, ks})
	}
	if ok {
		i++
	}
	return state{append(keys, s.keys[i:]...)}
}

// revisionFloor returns the least the store's revision may be: that of
// the latest write it knows of, at least every key's version.
func (s state) revisionFloor() uint64 {
	var r uint64
	for _, e := range s.keys {
		v := e.s.version
		if !e.s.pinned {
			v++ // the key's version is above v
		}
		r = max(r, v)
	}
	return r
}

// step returns every state the part may be in after op, or none if op is
// impossible in s.
func step(s state, in Input, out Output) []state {
	switch in.Kind {
	case Txn:
		return stepTxn(s, in, out)
	case LockAcquire, LockRelease, GuardedPut, GuardedDelete, CheckToken:
		return stepLock(s, in, out)
	case listing:
		states := []state{s}
		for i, r := range in.reads {
			var next []state
			for _, st := range states {
				next = append(next, step(st, r, out.reads[i])...)
			}
			states = next
		}
		return states
	}
	ks := s.get(in.Key)
	next := stepKey(ks, in, out)
	r := make([]state, len(next))
	for i, n := range next {
		base := s
		if !ks.pinned && ks.tag != 0 && n.pinned && n.tag == ks.tag {
			// Its version is found: so is that of every key the same
			// transaction wrote.
			base = s.pinTag(ks.tag, n.version)
		}
		if n.pinned {
			n.tag = 0
		}
		r[i] = base.with(in.Key, n)
		if (in.Kind == Revoke || in.Kind == Expire) && ks.leaseLive(in.Lease) && !n.leaseLive(in.Lease) {
			r[i] = r[i].endLocks(in.Lease)
		}
	}
	return r
}

// pinTag returns s with every key of tag, written by one transaction of
// unknown outcome, at version v.
func (s state) pinTag(tag, v uint64) state {
	n := state{slices.Clone(s.keys)}
	for i := range n.keys {
		if e := &n.keys[i].s; !e.pinned && e.tag == tag {
			e.version, e.pinned, e.tag = v, true, 0
		}
	}
	return n
}

// stepTxn is step for a transaction. Its fencing tokens must all be live
// for it to commit, whichever branch it applies: the server checks the
// token of each key once every key is ready. Keys it only compares are
// left as they are; the others, written under no write lease, recall the
// write leases on them, in either branch, as a write does.
func stepTxn(s state, in Input, out Output) []state {
	fenced, fencesHold := false, true
	for _, op := range slices.Concat(in.Then, in.Else) {
		if op.Token != 0 {
			fenced = true
			fencesHold = fencesHold && s.get(op.Key).fencedMayCommit(op.Token)
		}
	}
	switch out.Outcome {
	case NoEffect:
		return []state{s}
	case Fenced:
		if !fenced {
			return nil
		}
		return []state{s}
	case Unknown:
		next := []state{s}
		if !fencesHold {
			return next
		}
		for _, succeeded := range []bool{true, false} {
			if s.mayChoose(in.If, succeeded) {
				if n, ok := s.applyTxn(in, succeeded, 0); ok {
					next = append(next, n)
				}
			}
		}
		return next
	case OK:
		if !fencesHold || !s.mayChoose(in.If, out.Succeeded) {
			return nil
		}
		if n, ok := s.applyTxn(in, out.Succeeded, out.Version); ok {
			return []state{n}
		}
	}
	return nil
}

// mayChoose reports whether compares cmps may hold, all of them
// (succeeded), or not all of them. Each compare is judged on its own, so
// two compares of a key whose version is unknown may both seem to hold
// where they cannot together: the model then lets pass what it cannot
// tell, and rejects nothing legal.
func (s state) mayChoose(cmps []Compare, succeeded bool) bool {
	for _, c := range cmps {
		hold, fail := s.get(c.Key).compare(c)
		if succeeded && !hold {
			return false
		}
		if !succeeded && fail {
			return true
		}
	}
	return succeeded
}

// compare reports whether c may hold of the key, and whether it may fail.
// Both may be true when the key's version is only known to be above a
// bound.
func (s keyState) compare(c Compare) (hold, fail bool) {
	switch c.Op {
	case Exists:
		return s.found, !s.found
	case Absent:
		return !s.found, s.found
	case ValueIs:
		h := s.found && s.value == c.Value
		return h, !h
	case ValueIsNot:
		h := s.found && s.value != c.Value
		return h, !h
	}
	if !s.found || s.pinned {
		v := uint64(0) // an absent key's version, for a compare
		if s.found {
			v = s.version
		}
		var h bool
		switch c.Op {
		case VersionIs:
			h = v == c.Version
		case VersionIsNot:
			h = v != c.Version
		case VersionAbove:
			h = v > c.Version
		case VersionBelow:
			h = v < c.Version
		default:
			return false, true // not a compare the store knows: it never holds
		}
		return h, !h
	}
	// The key exists at a version above s.version, which one unknown.
	above := c.Version > s.version // c.Version is one it may be at
	switch c.Op {
	case VersionIs:
		return above, true
	case VersionIsNot:
		return true, above
	case VersionAbove:
		return true, above
	case VersionBelow:
		return c.Version > s.version+1, true
	}
	return false, true
}

// applyTxn returns the state after transaction in applied its Then
// branch (succeeded) or its Else branch, at revision rev, or at an
// unknown one (0); ok is false if rev is impossible. A branch that
// changes no key leaves every key as it was, and rev is the store's
// revision then.
func (s state) applyTxn(in Input, succeeded bool, rev uint64) (n state, ok bool) {
	ops := in.Then
	if !succeeded {
		ops = in.Else
	}
	changes := false
	for _, op := range ops {
		changes = changes || !op.Delete || s.get(op.Key).found
	}
	floor := s.revisionFloor()
	if rev != 0 && (changes && rev <= floor || !changes && rev < floor) {
		return s, false
	}
	n = s
	for _, op := range slices.Concat(in.Then, in.Else) {
		if op.Token == 0 && !in.fences(op.Key) {
			ks := n.get(op.Key)
			ks.live = false // the write lease on it was recalled
			n = n.with(op.Key, ks)
		}
	}
	if !changes {
		return n, true
	}
	var tag uint64 // for an unknown revision: one more than any in s
	if rev == 0 {
		for _, e := range s.keys {
			tag = max(tag, e.s.tag)
		}
		tag++
	}
	for _, op := range ops {
		ks := n.get(op.Key)
		if op.Delete && !ks.found {
			continue // a delete of an absent key changes nothing
		}
		ks.found, ks.value, ks.attached = !op.Delete, op.Value, 0
		if op.Delete {
			ks.value = ""
		}
		ks.version, ks.pinned, ks.tag = rev, rev != 0, tag
		if rev == 0 {
			ks.version = floor // a lower bound: the revision is above the floor
		}
		n = n.with(op.Key, ks)
	}
	return n, true
}

// fences reports whether a Txn writes key under a write lease, in either
// branch.
func (in Input) fences(key string) bool {
	for _, op := range slices.Concat(in.Then, in.Else) {
		if op.Key == key && op.Token != 0 {
			return true
		}
	}
	return false
}

// keys returns the keys that in names: a Txn's, in its compares and its
// branches, or Key.
func (in Input) keys() []string {
	var ks []string
	switch in.Kind {
	case listing:
		for _, r := range in.reads {
			ks = append(ks, r.Key)
		}
		return ks
	case LockAcquire:
		if in.Lease != 0 && in.LeaseKey != "" {
			return []string{in.Key, in.LeaseKey}
		}
		return []string{in.Key}
	case GuardedPut, GuardedDelete:
		return []string{in.Key, in.Guard}
	case Txn:
	default:
		return []string{in.Key}
	}
	for _, c := range in.If {
		ks = append(ks, c.Key)
	}
	for _, op := range slices.Concat(in.Then, in.Else) {
		ks = append(ks, op.Key)
	}
	return ks
}

// Model is the sequential specification of leased's key-value store, for
// porcupine. Its history is partitioned by the keys that transactions
// join (partition). Every key starts absent at version 0, as in a new data
// folder.
var Model = (&porcupine.NondeterministicModel{
	Partition: partition,
	Init:      func() []any { return []any{state{}} },
	Step: func(st, in, out any) []any {
		next := step(st.(state), in.(Input), out.(Output))
		r := make([]any, len(next))
		for i, n := range next {
			r[i] = n
		}
		return r
	},
	Equal:             func(a, b any) bool { return slices.Equal(a.(state).keys, b.(state).keys) },
	DescribeOperation: func(in, out any) string { return describe(in.(Input), out.(Output)) },
	DescribeState:     func(st any) string { return st.(state).String() },
}).ToModel()

// partition splits a history into parts that share no key, each the
// operations of a set of keys that transactions join: a key is a part of
// its own, unless a transaction names it with another. The model checks
// each part on its own, and nothing across them (such as the order of
// revisions of keys in different parts), so that a history of keys that
// no transaction joins is checked key by key, which is fast. The reads of
// one listing (Recorder.EndListing) whose keys are in one part become one
// operation there: a listing is of one revision. Checked apart, they
// would also let the checker try every order of them, with every other
// operation of the part, which takes it minutes where it takes seconds.
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	parent := make(map[string]string)
	var root func(k string) string
	root = func(k string) string {
		p, ok := parent[k]
		if !ok || p == k {
			parent[k] = k
			return k
		}
		r := root(p)
		parent[k] = r
		return r
	}
	for _, op := range history {
		keys := op.Input.(Input).keys()
		for _, k := range keys {
			if a, b := root(keys[0]), root(k); a != b {
				parent[b] = a
			}
		}
	}
	byRoot := make(map[string]int)
	var parts [][]porcupine.Operation
	for _, op := range history {
		r := "" // a transaction that names no key
		if keys := op.Input.(Input).keys(); len(keys) > 0 {
			r = root(keys[0])
		}
		i, ok := byRoot[r]
		if !ok {
			i = len(parts)
			byRoot[r] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	for i, p := range parts {
		parts[i] = markWaiters(joinListings(p))
	}
	return parts
}

// joinListings returns part with the reads of each listing in it made one
// operation (a listing). The reads of a listing are those of one client
// with the same call and return (Recorder.EndListing): a client runs one
// operation at a time.
func joinListings(part []porcupine.Operation) []porcupine.Operation {
	type id struct {
		client    int
		call, ret int64
	}
	at := make(map[id]int) // a listing → its index in out
	out := part[:0:0]
	for _, op := range part {
		in, o := op.Input.(Input), op.Output.(Output)
		if in.Kind != Get || !in.Listed {
			out = append(out, op)
			continue
		}
		l := id{op.ClientId, op.Call, op.Return}
		i, ok := at[l]
		if !ok {
			at[l] = len(out)
			out = append(out, op)
			continue
		}
		j, jo := out[i].Input.(Input), out[i].Output.(Output)
		if j.Kind != listing {
			j = Input{Kind: listing, reads: []Input{j}}
			jo = Output{Outcome: OK, reads: []Output{jo}}
		}
		j.reads, jo.reads = append(j.reads, in), append(jo.reads, o)
		out[i].Input, out[i].Output = j, jo
	}
	return out
}

func (s state) String() string {
	if len(s.keys) == 0 {
		return "every key absent v0"
	}
	parts := make([]string, len(s.keys))
	for i, e := range s.keys {
		parts[i] = e.key + ": " + e.s.String()
	}
	return strings.Join(parts, "; ")
}

func (s keyState) String() string {
	var b strings.Builder
	if s.found {
		fmt.Fprintf(&b, "%q", s.value)
	} else {
		b.WriteString("absent")
	}
	if s.pinned {
		fmt.Fprintf(&b, " v%d", s.version)
	} else {
		fmt.Fprintf(&b, " v>%d", s.version)
	}
	switch {
	case s.tokenKnown && s.live:
		fmt.Fprintf(&b, ", write lease %d", s.token)
	case s.tokenKnown:
		fmt.Fprintf(&b, ", token %d ended", s.token)
	case s.token > 0:
		fmt.Fprintf(&b, ", token above %d unknown", s.token)
	}
	if s.attached != 0 {
		fmt.Fprintf(&b, ", attached to TTL lease %d", s.attached)
	}
	for _, l := range s.leases {
		if l != 0 {
			fmt.Fprintf(&b, ", TTL lease %d lives", l)
		}
	}
	if s.lock != (lockState{}) {
		b.WriteString(", " + s.lock.String())
	}
	return b.String()
}

// describe describes an operation for the visualization.
func describe(in Input, out Output) string {
	var b strings.Builder
	switch in.Kind {
	case Put, FencedPut, LeasePut:
		fmt.Fprintf(&b, "%s(%s, %q", in.Kind, in.Key, in.Value)
	case GuardedPut:
		fmt.Fprintf(&b, "%s(%s, %q, guard %s", in.Kind, in.Key, in.Value, in.Guard)
	case GuardedDelete:
		fmt.Fprintf(&b, "%s(%s, guard %s", in.Kind, in.Key, in.Guard)
	case LockAcquire:
		fmt.Fprintf(&b, "%s(%s, %s, client %d", in.Kind, in.Key, in.Mode, in.Owner)
	case CAS:
		fmt.Fprintf(&b, "cas(%s, v%d → %q", in.Key, in.Expect, in.Value)
	case Txn:
		describeTxn(&b, in)
	case listing:
		b.WriteString("listing(")
		for i, r := range in.reads {
			if i > 0 {
				b.WriteString(", ")
			}
			if o := out.reads[i]; o.Found {
				fmt.Fprintf(&b, "%s → %q v%d", r.Key, o.Value, o.Version)
			} else {
				fmt.Fprintf(&b, "%s → absent", r.Key)
			}
		}
		return b.String() + ")"
	default:
		fmt.Fprintf(&b, "%s(%s", in.Kind, in.Key)
	}
	if in.Token != 0 {
		fmt.Fprintf(&b, ", token %d", in.Token)
	}
	if in.Lease != 0 {
		fmt.Fprintf(&b, ", TTL lease %d", in.Lease)
	}
	b.WriteString(") → ")
	switch {
	case out.Outcome != OK:
		b.WriteString(out.Outcome.String())
		if in.waiters {
			b.WriteString(" (others acquire or release meanwhile)")
		}
		if out.Err != "" {
			fmt.Fprintf(&b, " (%s)", out.Err)
		}
	case in.Kind == Acquire || in.Kind == LockAcquire:
		fmt.Fprintf(&b, "token %d", out.Token)
	case in.Kind == LockRelease:
		b.WriteString("released")
	case in.Kind == CheckToken:
		switch {
		case in.Token != 0:
			fmt.Fprintf(&b, "current %v", out.Found)
		case out.Found:
			fmt.Fprintf(&b, "held, token %d", out.Token)
			if out.Lease != 0 {
				fmt.Fprintf(&b, ", TTL lease %d", out.Lease)
			}
		default:
			b.WriteString("free")
		}
		if out.Cached {
			b.WriteString(" (cached)")
		}
	case in.Kind == Grant:
		fmt.Fprintf(&b, "TTL lease %d", out.Lease)
	case in.Kind == KeepAlive || in.Kind == TimeToLive || in.Kind == Expire:
		b.WriteString("lives")
		if in.Kind == Expire {
			b.WriteString(" no more")
		}
	case in.Kind == Txn:
		branch := "else"
		if out.Succeeded {
			branch = "then"
		}
		fmt.Fprintf(&b, "%s v%d", branch, out.Version)
	case in.Kind == Get:
		switch {
		case out.Found:
			fmt.Fprintf(&b, "%q v%d", out.Value, out.Version)
		case in.Listed:
			b.WriteString("absent")
		default:
			fmt.Fprintf(&b, "absent v%d", out.Version)
		}
		if in.Listed {
			b.WriteString(" (listed)")
		}
		if out.Cached {
			b.WriteString(" (cached)")
		}
	default:
		fmt.Fprintf(&b, "v%d", out.Version)
	}
	return b.String()
}

// describeTxn writes a transaction's compares and branches to b, without
// the closing parenthesis.
func describeTxn(b *strings.Builder, in Input) {
	b.WriteString("txn(if")
	for i, c := range in.If {
		if i > 0 {
			b.WriteString(",")
		}
		switch c.Op {
		case Exists, Absent:
			fmt.Fprintf(b, " %s %s", c.Key, c.Op)
		case ValueIs, ValueIsNot:
			fmt.Fprintf(b, " %s %s %q", c.Key, c.Op, c.Value)
		default:
			fmt.Fprintf(b, " %s %s %d", c.Key, c.Op, c.Version)
		}
	}
	for i, ops := range [2][]TxnOp{in.Then, in.Else} {
		b.WriteString([2]string{" then", " else"}[i])
		for j, op := range ops {
			if j > 0 {
				b.WriteString(",")
			}
			if op.Delete {
				fmt.Fprintf(b, " delete(%s", op.Key)
			} else {
				fmt.Fprintf(b, " put(%s, %q", op.Key, op.Value)
			}
			if op.Token != 0 {
				fmt.Fprintf(b, ", token %d", op.Token)
			}
			b.WriteString(")")
		}
	}
}
