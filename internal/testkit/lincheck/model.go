// Package lincheck checks histories of leased operations for
// linearizability with github.com/anishathalye/porcupine.
//
// A Recorder collects the operations that concurrent clients run, each with
// the times of its call and its return; History turns them into a porcupine
// history; Check checks it against Model, a sequential specification of
// leased's key-value store: Get, Put, Delete, CompareAndSwap, write-lease
// acquisition, writes fenced by a write lease's token, and TTL leases with
// a key attached. A read served from a client's cache is a read like any
// other, and so is each key of a listing (Input.Listed): one read of each
// key the listing covers, found or not; only that a listing is of one
// revision across its keys is left to the store's tests.
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
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Input is what an operation asked for.
type Input struct {
	Kind   Kind
	Key    string
	Value  string // Put, CAS, FencedPut, LeasePut; every value written in a history is unique
	Expect uint64 // CAS: the version the key must be at (0: absent)
	Token  uint64 // FencedPut, FencedDelete
	Lease  uint64 // LeasePut, KeepAlive, Revoke, TimeToLive, Expire
	// Listed marks a Get that is one key of a listing (client.List): the
	// listing's answer for Key. A listing names the keys it found, with
	// their versions, and not the version of a key it did not find.
	Listed bool
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
	Token   uint64 // Acquire: the fencing token granted
	Lease   uint64 // Grant: the TTL lease granted
	Cached  bool   // Get: served from the client's cache, under its lease
	Err     string // why, when Outcome is not OK; for the visualization only
}

// state is the model's state of one key. The history is partitioned by
// key, so a state describes a single key. It is comparable, as porcupine's
// default equality needs.
type state struct {
	found   bool
	value   string
	version uint64
	// pinned: version is the key's version. Otherwise a write of unknown
	// outcome took effect, and the key's version is only known to be
	// above version.
	pinned bool
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
}

// maxLeases bounds the TTL leases of one key live at once in a history.
const maxLeases = 4

// leaseLive reports whether TTL lease id lives.
func (s state) leaseLive(id uint64) bool {
	return id != 0 && slices.Contains(s.leases[:], id)
}

// endLease returns the state after TTL lease id ends, live or not:
// the key is deleted, at version (0: unknown), if it is attached to it.
func (s state) endLease(id uint64, version uint64) state {
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
func (s state) versionIs(v uint64) bool {
	if s.pinned {
		return s.version == v
	}
	return v > s.version
}

// reads reports whether a read may return found, value and version.
func (s state) reads(found bool, value string, version uint64) bool {
	return s.found == found && (!found || s.value == value) && s.versionIs(version)
}

// casMatches reports whether a CAS expecting version e may succeed. A key
// that does not exist matches 0, whatever the version of its deletion.
func (s state) casMatches(e uint64) bool {
	return (e == 0 && !s.found) || s.versionIs(e)
}

// casMayMismatch reports whether a CAS expecting version e may fail.
func (s state) casMayMismatch(e uint64) bool {
	if e == 0 && !s.found {
		return false
	}
	return !s.pinned || s.version != e
}

// write returns the state after a write of in that committed version, or
// took effect at an unknown version (version 0).
func (s state) write(in Input, version uint64) state {
	n := s
	n.found = in.Kind == Put || in.Kind == CAS || in.Kind == FencedPut || in.Kind == LeasePut
	n.value = ""
	if n.found {
		n.value = in.Value
	}
	n.version, n.pinned = version, version != 0
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
func (s state) fencedMayCommit(token uint64) bool {
	return s.tokenKnown && s.token == token && s.live
}

// step returns every state the key may be in after op, or none if op is
// impossible in s.
func step(s state, in Input, out Output) []state {
	if in.Kind >= Grant {
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
		return []state{s}
	case Mismatch:
		if in.Kind != CAS || !s.casMayMismatch(in.Expect) {
			return nil
		}
		n := s
		n.live = false // it queued behind, and so recalled, the write lease
		return []state{n}
	case Unknown:
		return stepUnknown(s, in)
	case OK:
	default:
		return nil
	}
	switch in.Kind {
	case Get:
		if in.Listed && !out.Found {
			// Absent, at a version the listing does not say.
			if s.found {
				return nil
			}
			return []state{s}
		}
		if !s.reads(out.Found, out.Value, out.Version) {
			return nil
		}
		n := s
		n.version, n.pinned = out.Version, true
		return []state{n}
	case Acquire:
		if out.Token <= s.token {
			return nil
		}
		n := s
		n.token, n.tokenKnown, n.live = out.Token, true, true
		return []state{n}
	case Delete, FencedDelete:
		if in.Kind == FencedDelete && !s.fencedMayCommit(in.Token) {
			return nil
		}
		if out.Found {
			if !s.found || out.Version <= s.version {
				return nil
			}
			return []state{s.write(in, out.Version)}
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
		return []state{n}
	case Put:
		if out.Version <= s.version {
			return nil
		}
		return []state{s.write(in, out.Version)}
	case CAS:
		if !s.casMatches(in.Expect) || out.Version <= s.version || out.Version <= in.Expect {
			return nil
		}
		return []state{s.write(in, out.Version)}
	case FencedPut:
		if !s.fencedMayCommit(in.Token) || out.Version <= s.version {
			return nil
		}
		return []state{s.write(in, out.Version)}
	}
	return nil
}

// stepUnknown returns the states after an operation of unknown outcome:
// unchanged, or changed at an unknown version.
func stepUnknown(s state, in Input) []state {
	next := []state{s}
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
func stepTTL(s state, in Input, out Output) []state {
	live := s.leaseLive(in.Lease)
	switch out.Outcome {
	case NoEffect:
		if in.Kind == Expire || in.Kind == TimeToLive {
			return nil
		}
		return []state{s}
	case NotFound:
		if in.Kind == Grant || in.Kind == Expire || live {
			return nil
		}
		return []state{s}
	case Unknown:
		switch in.Kind {
		case LeasePut:
			if live {
				return []state{s, s.write(in, 0)}
			}
		case Revoke:
			return []state{s, s.endLease(in.Lease, 0)}
		case Expire, TimeToLive:
			return nil
		}
		return []state{s}
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
		return []state{n}
	case LeasePut:
		if !live || out.Version <= s.version {
			return nil
		}
		return []state{s.write(in, out.Version)}
	case KeepAlive, TimeToLive:
		if !live {
			return nil
		}
		return []state{s}
	case Revoke:
		if !live || s.attached == in.Lease && out.Version <= s.version {
			return nil
		}
		return []state{s.endLease(in.Lease, out.Version)}
	case Expire:
		return []state{s.endLease(in.Lease, 0)}
	}
	return nil
}

// Model is the sequential specification of leased's key-value store, for
// porcupine. Its history is partitioned by key. Every key starts absent at
// version 0, as in a new data folder.
var Model = (&porcupine.NondeterministicModel{
	Partition: partition,
	Init:      func() []any { return []any{state{pinned: true}} },
	Step: func(st, in, out any) []any {
		next := step(st.(state), in.(Input), out.(Output))
		r := make([]any, len(next))
		for i, n := range next {
			r[i] = n
		}
		return r
	},
	DescribeOperation: func(in, out any) string { return describe(in.(Input), out.(Output)) },
	DescribeState:     func(st any) string { return st.(state).String() },
}).ToModel()

// partition splits a history by key.
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := make(map[string]int)
	var parts [][]porcupine.Operation
	for _, op := range history {
		k := op.Input.(Input).Key
		i, ok := byKey[k]
		if !ok {
			i = len(parts)
			byKey[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

func (s state) String() string {
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
	return b.String()
}

// describe describes an operation for the visualization.
func describe(in Input, out Output) string {
	var b strings.Builder
	switch in.Kind {
	case Put, FencedPut, LeasePut:
		fmt.Fprintf(&b, "%s(%s, %q", in.Kind, in.Key, in.Value)
	case CAS:
		fmt.Fprintf(&b, "cas(%s, v%d → %q", in.Key, in.Expect, in.Value)
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
		if out.Err != "" {
			fmt.Fprintf(&b, " (%s)", out.Err)
		}
	case in.Kind == Acquire:
		fmt.Fprintf(&b, "token %d", out.Token)
	case in.Kind == Grant:
		fmt.Fprintf(&b, "TTL lease %d", out.Lease)
	case in.Kind == KeepAlive || in.Kind == TimeToLive || in.Kind == Expire:
		b.WriteString("lives")
		if in.Kind == Expire {
			b.WriteString(" no more")
		}
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
