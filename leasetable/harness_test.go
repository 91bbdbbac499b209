package leasetable

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"
)

// Made-up times: tests never read the real clock.
var t0 = time.Unix(1000, 0)

const (
	term = 10 * time.Second
	eps  = 100 * time.Millisecond
)

// Sessions used by the direct tests.
const (
	sA SessionID = iota + 1
	sB
	sC
	sD
	sW // a writer
)

// harness drives one Table at a made-up time h.now and records what the
// Effects said: which ops became ready or were abandoned, and the notices.
// After every call it checks the Table's internal invariants.
type harness struct {
	tb        testing.TB
	tab       *Table
	now       time.Time
	ready     map[*Op]bool
	abandoned map[*Op]bool
	invalid   []Notice // every invalidation sent, in order
	pinvalid  []Notice // every invalidation of a prefix lease sent, in order
	recalls   []Notice // every recall sent, in order
}

func newHarness(tb testing.TB, sessions ...SessionID) *harness {
	tb.Helper()
	h := &harness{
		tb:        tb,
		tab:       New(Config{Epsilon: eps}),
		now:       t0,
		ready:     make(map[*Op]bool),
		abandoned: make(map[*Op]bool),
	}
	for _, id := range sessions {
		h.tab.AddSession(id)
	}
	return h
}

// at sets the time to t0+d.
func (h *harness) at(d time.Duration) *harness { h.now = t0.Add(d); return h }

// endWrites does what the server does with Effects.EndWrite once their
// ends are durable: it calls EndWriteLease for each, and returns eff with
// what those calls decided added.
func endWrites(tab *Table, eff Effects, now time.Time) Effects {
	for _, n := range eff.EndWrite {
		more := tab.EndWriteLease(n.Key, n.Token, now)
		eff.Invalidate = append(eff.Invalidate, more.Invalidate...)
		eff.InvalidatePrefix = append(eff.InvalidatePrefix, more.InvalidatePrefix...)
		eff.Recall = append(eff.Recall, more.Recall...)
		eff.Ready = append(eff.Ready, more.Ready...)
		eff.Abandoned = append(eff.Abandoned, more.Abandoned...)
	}
	return eff
}

func (h *harness) record(eff Effects) Effects {
	h.tb.Helper()
	eff = endWrites(h.tab, eff, h.now)
	for _, op := range eff.Ready {
		if h.ready[op] {
			h.tb.Fatalf("op %s/%d handed out as ready twice", op.Key, op.Session)
		}
		if h.abandoned[op] {
			h.tb.Fatalf("abandoned op %s/%d handed out as ready", op.Key, op.Session)
		}
		h.ready[op] = true
	}
	for _, op := range eff.Abandoned {
		if h.ready[op] {
			h.tb.Fatalf("ready op %s/%d reported abandoned", op.Key, op.Session)
		}
		h.abandoned[op] = true
	}
	h.invalid = append(h.invalid, eff.Invalidate...)
	h.pinvalid = append(h.pinvalid, eff.InvalidatePrefix...)
	h.recalls = append(h.recalls, eff.Recall...)
	checkInvariants(h.tb, h.tab)
	return eff
}

func (h *harness) grant(id SessionID, key string) time.Duration {
	h.tb.Helper()
	d := h.tab.Grant(id, key, term, h.now)
	checkInvariants(h.tb, h.tab)
	return d
}

func (h *harness) renew(id SessionID, keys ...string) []time.Duration {
	h.tb.Helper()
	d := renewUniform(h.tab, id, keys, term, h.now)
	checkInvariants(h.tb, h.tab)
	return d
}

func (h *harness) relinquish(id SessionID, keys ...string) Effects {
	h.tb.Helper()
	return h.record(h.tab.Relinquish(id, keys, h.now))
}

func (h *harness) tick() Effects {
	h.tb.Helper()
	return h.record(h.tab.Tick(h.now))
}

// submit submits op and fails the test on an error.
func (h *harness) submit(op *Op) Effects {
	h.tb.Helper()
	eff, err := h.tab.Submit(op, h.now)
	if err != nil {
		h.tb.Fatalf("Submit(%v %s by %d): %v", op.Kind, op.Key, op.Session, err)
	}
	return h.record(eff)
}

func (h *harness) write(id SessionID, key string) (*Op, Effects) {
	h.tb.Helper()
	op := &Op{Kind: OpWrite, Session: id, Key: key}
	return op, h.submit(op)
}

func (h *harness) tokenWrite(id SessionID, key string, token uint64) (*Op, Effects, error) {
	h.tb.Helper()
	op := &Op{Kind: OpWrite, Session: id, Key: key, Token: token}
	eff, err := h.tab.Submit(op, h.now)
	return op, h.record(eff), err
}

func (h *harness) acquire(id SessionID, key string) (*Op, Effects) {
	h.tb.Helper()
	op := &Op{Kind: OpAcquire, Session: id, Key: key}
	return op, h.submit(op)
}

func (h *harness) done(op *Op, committed bool) (time.Duration, Effects) {
	h.tb.Helper()
	d, eff := h.tab.Done(op, committed, term, h.now)
	return d, h.record(eff)
}

func (h *harness) doneAcquire(op *Op, token uint64) Effects {
	h.tb.Helper()
	return h.record(h.tab.DoneAcquire(op, token, term, h.now))
}

func (h *harness) release(id SessionID, key string, token uint64) (Effects, error) {
	h.tb.Helper()
	eff, err := h.tab.ReleaseWriteLease(id, key, token, 0, h.now)
	return h.record(eff), err
}

func (h *harness) abandon(op *Op) (bool, Effects) {
	h.tb.Helper()
	ok, eff := h.tab.Abandon(op, h.now)
	return ok, h.record(eff)
}

func (h *harness) close(id SessionID, relinquish bool) Effects {
	h.tb.Helper()
	return h.record(h.tab.CloseSession(id, relinquish, h.now))
}

// mustAcquire gives id the write lease on key with token, at h.now. Nobody
// else may hold a lease on key.
func (h *harness) mustAcquire(id SessionID, key string, token uint64) {
	h.tb.Helper()
	op, _ := h.acquire(id, key)
	if !h.ready[op] {
		h.tb.Fatalf("acquire of %s by %d not ready at once", key, id)
	}
	h.doneAcquire(op, token)
	if tok, holder, ok := h.tab.WriteLease(key); !ok || tok != token || holder != id {
		h.tb.Fatalf("WriteLease(%s) = %d, %d, %v; want %d, %d, true", key, tok, holder, ok, token, id)
	}
}

func (h *harness) wantReady(op *Op, want bool) {
	h.tb.Helper()
	if h.ready[op] != want {
		h.tb.Fatalf("%s op on %s by session %d: ready = %v, want %v", kindName(op.Kind), op.Key, op.Session, h.ready[op], want)
	}
}

func (h *harness) wantNextDeadline(want time.Time) {
	h.tb.Helper()
	got, ok := h.tab.NextDeadline()
	if !ok || !got.Equal(want) {
		h.tb.Fatalf("NextDeadline() = %v, %v; want %v (t0%+v)", got, ok, want, want.Sub(t0))
	}
}

func kindName(k OpKind) string {
	switch k {
	case OpWrite:
		return "write"
	case OpAcquire:
		return "acquire"
	}
	return "op?"
}

// sessionsOf returns the sessions named in notices, sorted.
func sessionsOf(ns []Notice) []SessionID {
	var ids []SessionID
	for _, n := range ns {
		ids = append(ids, n.Session)
	}
	slices.Sort(ids)
	return ids
}

// tokenIssuer stands in for the server, which persists fencing tokens and
// hands out a larger one with every grant.
type tokenIssuer struct{ last uint64 }

func (ti *tokenIssuer) next() uint64 { ti.last++; return ti.last }

// checkInvariants checks that the Table's indexes agree with each other:
// the expiry heaps, the key records and their index, the keys' and the
// sessions' lists of read leases, the session slots, the op queues and the
// deadline heap. It catches a lease orphaned from its key, a stale heap
// index, a record on one list but not another, an op in two places, a
// closed session kept after its last lease.
func checkInvariants(tb testing.TB, tab *Table) {
	tb.Helper()
	fail := func(format string, args ...any) {
		tb.Helper()
		tb.Fatalf("invariant: "+format, args...)
	}
	// Key records: filed under their names, and only the live ones.
	live := make(map[int32]bool)
	for _, v := range tab.index.slots {
		if v == 0 {
			continue
		}
		ki := v - 1
		if live[ki] {
			fail("key record %d filed twice", ki)
		}
		live[ki] = true
		if got, ok := tab.findKey(tab.keyString(ki)); !ok || got != ki {
			fail("key %q not found under its name", tab.keyName(ki))
		}
	}
	if len(live) != tab.index.n {
		fail("key index counts %d keys, holds %d", tab.index.n, len(live))
	}
	for ki := tab.freeRec; ki != noLease; ki = tab.recs.at(ki).holders {
		if live[ki] {
			fail("key record %d is both live and free", ki)
		}
	}
	sessionOf := func(slot int32) *session {
		if slot < 0 || int(slot) >= len(tab.slots.items) {
			return nil
		}
		return tab.slots.items[slot]
	}
	for i, li := range tab.rheap {
		l := tab.reads.at(li)
		if int(l.heapIndex) != i {
			fail("read lease %d has heapIndex %d at %d", li, l.heapIndex, i)
		}
		if i > 0 && tab.rless(i, (i-1)/2) {
			fail("read lease heap out of order at %d", i)
		}
		if !live[l.key] {
			fail("read lease %d is on a key the table no longer knows", li)
		}
		if s := sessionOf(l.session); s == nil || tab.sessions[s.id] != s {
			fail("read lease %d belongs to a session the table no longer knows", li)
		}
	}
	inHeap := func(li int32) bool {
		l := tab.reads.at(li)
		return l.heapIndex >= 0 && int(l.heapIndex) < len(tab.rheap) && tab.rheap[l.heapIndex] == li
	}
	for i, l := range tab.leases {
		if l.heapIndex != i {
			fail("write lease %s/%d has heapIndex %d at %d", l.key.name, l.session.id, l.heapIndex, i)
		}
		if i > 0 && tab.leases.Less(i, (i-1)/2) {
			fail("write lease heap out of order at %d", i)
		}
		if ki, ok := tab.findKey(l.key.name); !ok || tab.ext(tab.recs.at(ki)) != l.key {
			fail("write lease %s/%d is on a key the table no longer knows", l.key.name, l.session.id)
		}
		if tab.sessions[l.session.id] != l.session {
			fail("write lease %s/%d belongs to a session the table no longer knows", l.key.name, l.session.id)
		}
		if l.key.wlease != l || l.session.wrlses[l.key.name] != l {
			fail("write lease %s/%d not linked from its key and session", l.key.name, l.session.id)
		}
	}
	for i, op := range tab.deadlines {
		if op.heapIndex != i {
			fail("op %s/%d has heapIndex %d at %d", op.Key, op.Session, op.heapIndex, i)
		}
		if i > 0 && tab.deadlines.Less(i, (i-1)/2) {
			fail("deadline heap out of order at %d", i)
		}
		if op.state != opQueued && op.state != opWaiting {
			fail("op %s/%d in the deadline heap in state %d", op.Key, op.Session, op.state)
		}
	}
	waiting, onKeys := 0, 0
	for ki := range live {
		kr := tab.recs.at(ki)
		name := tab.keyString(ki)
		if kr.n == 0 && kr.ext == noLease {
			fail("idle key %q kept", name)
		}
		holders := make(map[int32]int32)
		prev := noLease
		for li := kr.holders; li != noLease; li = tab.reads.at(li).keyNext {
			l := tab.reads.at(li)
			if l.key != ki || l.keyPrev != prev || !inHeap(li) {
				fail("holder %d of %q is not a live read lease linked to it", li, name)
			}
			if _, dup := holders[l.session]; dup {
				fail("session slot %d holds two read leases on %q", l.session, name)
			}
			holders[l.session] = li
			prev = li
			if len(holders) > int(tab.reads.n) {
				fail("holders of %q loop", name)
			}
		}
		if int(kr.n) != len(holders) {
			fail("key %q counts %d holders, lists %d", name, kr.n, len(holders))
		}
		onKeys += len(holders)
		k := tab.ext(kr)
		if k == nil {
			if kr.n > holderMapAt {
				fail("key %q has %d holders and no map of them", name, kr.n)
			}
			continue
		}
		if k.ki != ki || k.name != name {
			fail("keyState of %q names %q (record %d)", name, k.name, k.ki)
		}
		if k.idle() {
			fail("idle keyState of %q kept", name)
		}
		if k.inflight < 0 {
			fail("key %q inflight %d", name, k.inflight)
		}
		if k.bySession != nil && !maps.Equal(k.bySession, holders) {
			fail("holder map of %q is %v, its list %v", name, k.bySession, holders)
		}
		if k.bySession == nil && kr.n > holderMapAt {
			fail("key %q has %d holders and no map of them", name, kr.n)
		}
		if wl := k.wlease; wl != nil && (wl.key != k || wl.counted == wl.ending || inWriteHeap(tab, wl) != (wl.counted && !wl.bound)) {
			fail("write lease of %q is neither live nor ending (ending=%v, bound=%v)", name, wl.ending, wl.bound)
		}
		for i, op := range k.queue {
			if op.Key != name || op.holder {
				fail("op %s/%d queued on %q", op.Key, op.Session, name)
			}
			switch {
			case i == 0 && op.state != opWaiting && op.state != opReady:
				fail("head of %q in state %d", name, op.state)
			case i > 0 && op.state != opQueued:
				fail("op %d of %q in state %d", i, name, op.state)
			}
			if op.state == opReady {
				if k.inflight < 1 {
					fail("ready head of %q not counted in flight", name)
				}
				continue
			}
			waiting++
			if s := tab.sessions[op.Session]; s == nil {
				fail("op of %q from unknown session %d", name, op.Session)
			} else if _, ok := s.ops[op]; !ok {
				fail("op of %q not listed in its session %d", name, op.Session)
			}
		}
		for _, op := range k.takeover {
			if op.Key != name || !op.holder || op.state != opWaiting || op.Token == 0 {
				fail("takeover write %s/%d on %q in state %d", op.Key, op.Session, name, op.state)
			}
			waiting++
			if s := tab.sessions[op.Session]; s == nil {
				fail("takeover write of %q from unknown session %d", name, op.Session)
			} else if _, ok := s.ops[op]; !ok {
				fail("takeover write of %q not listed in its session %d", name, op.Session)
			}
		}
	}
	// keyStates: each in use is the one of exactly one live key; the free
	// ones are nil.
	withExt := 0
	for ki := range live {
		if e := tab.recs.at(ki).ext; e != noLease {
			withExt++
			if e < 0 || int(e) >= len(tab.exts.items) || tab.exts.items[e] == nil || tab.exts.items[e].ki != ki {
				fail("key %q names keyState %d, which is not its own", tab.keyName(ki), e)
			}
		}
	}
	inUse := 0
	for _, k := range tab.exts.items {
		if k != nil {
			inUse++
		}
	}
	if inUse != withExt || inUse+len(tab.exts.free) != len(tab.exts.items) {
		fail("%d keys have a keyState, %d are in use, %d free of %d", withExt, inUse, len(tab.exts.free), len(tab.exts.items))
	}
	for _, e := range tab.exts.free {
		if tab.exts.items[e] != nil {
			fail("free keyState %d is in use", e)
		}
	}
	if len(tab.pheap) != tab.stats.PrefixLeases {
		fail("the prefix heap holds %d leases, Stats.PrefixLeases = %d", len(tab.pheap), tab.stats.PrefixLeases)
	}
	for p, ps := range tab.prefixes {
		if ps.name != p {
			fail("prefix %q filed as %q", ps.name, p)
		}
		for _, l := range ps.leases {
			if l.ps != ps || l.session.prefixes[p] != l {
				fail("a lease of prefix %q is not its session's", p)
			}
		}
	}
	pending := make(map[string]int32)
	for name, k := range keyStates(tab) {
		n := int32(len(k.queue) + len(k.takeover) + k.inflight)
		if len(k.queue) > 0 && k.queue[0].state == opReady {
			n-- // in the queue and in flight
		}
		if k.wlease != nil {
			n++
		}
		if n > 0 && (tab.unlisted == "" || !strings.HasPrefix(name, tab.unlisted)) {
			ancestors(name, func(p string) { pending[p] += n })
		}
	}
	if !maps.Equal(pending, tab.pendingUnder) {
		fail("pending under prefixes %v; the ops and write leases make %v", tab.pendingUnder, pending)
	}
	if onKeys != len(tab.rheap) || onKeys != tab.stats.Leases {
		fail("keys list %d read leases, the heap holds %d, Stats.Leases = %d", onKeys, len(tab.rheap), tab.stats.Leases)
	}
	for client, s := range tab.byClient {
		if client == 0 || s.client != client || tab.sessions[s.id] != s {
			fail("client %d filed with session %d (client %d), which the table does not track", client, s.id, s.client)
		}
	}
	onSessions := 0
	for id, s := range tab.sessions {
		if s.id != id {
			fail("session %d filed as %d", s.id, id)
		}
		if sessionOf(s.slot) != s {
			fail("session %d not in its slot %d", id, s.slot)
		}
		if s.closed && s.nreads == 0 && len(s.wrlses) == 0 && len(s.ops) == 0 {
			fail("closed session %d kept with nothing left", id)
		}
		if s.closed {
			for op := range s.ops {
				if !op.orphan {
					fail("closed session %d still has op %s/%d, not a kept acquisition", id, op.Key, op.Session)
				}
			}
		}
		n, prev := 0, noLease
		for li := s.reads; li != noLease; li = tab.reads.at(li).sessNext {
			l := tab.reads.at(li)
			if l.session != s.slot || l.sessPrev != prev || !live[l.key] || !inHeap(li) {
				fail("read lease %d of session %d is not live", li, id)
			}
			prev = li
			if n++; n > int(tab.reads.n) {
				fail("read leases of session %d loop", id)
			}
		}
		for prefix, l := range s.prefixes {
			if l.session != s || l.ps.name != prefix || tab.prefixes[prefix] != l.ps || l.heapIndex < 0 || tab.pheap[l.heapIndex] != l || !slices.Contains(l.ps.leases, l) {
				fail("prefix lease %q of session %d is not live", prefix, id)
			}
		}
		if n+len(s.prefixes) != s.nreads {
			fail("session %d counts %d read and prefix leases, lists %d and %d", id, s.nreads, n, len(s.prefixes))
		}
		onSessions += n
		for key, l := range s.wrlses {
			if l.session != s || l.key.name != key || l.counted == l.ending || inWriteHeap(tab, l) != (l.counted && !l.bound) {
				fail("write lease %q of session %d is not live", key, id)
			}
		}
		for op := range s.ops {
			if op.state != opQueued && op.state != opWaiting {
				fail("op %s of session %d listed in state %d", op.Key, id, op.state)
			}
			k := tab.extOf(op.Key)
			if k == nil || !slices.Contains(k.queue, op) && !slices.Contains(k.takeover, op) {
				fail("op %s of session %d is in no queue", op.Key, id)
			}
		}
	}
	if onSessions != onKeys {
		fail("sessions list %d read leases, keys %d", onSessions, onKeys)
	}
	free := 0
	for li := tab.freeRead; li != noLease; li = tab.reads.at(li).keyNext {
		if tab.reads.at(li).session != noLease {
			fail("free read-lease record %d names a session", li)
		}
		if free++; free > int(tab.reads.n) {
			fail("free read-lease records loop")
		}
	}
	if free+onKeys != int(tab.reads.n) {
		fail("%d read-lease records: %d free, %d live", tab.reads.n, free, onKeys)
	}
	// Every invalidation sent is acknowledged, expired, cancelled, or still
	// outstanding on its lease.
	outstanding := uint64(0)
	for _, li := range tab.rheap {
		if tab.reads.at(li).invalidated {
			outstanding++
		}
	}
	for _, l := range tab.pheap {
		if l.invalidated {
			outstanding++
		}
	}
	if st := tab.stats; st.InvalidationsSent != st.InvalidationsAcked+st.InvalidationsExpired+st.InvalidationsCancelled+outstanding {
		fail("%d invalidations sent, but %d acknowledged + %d expired + %d cancelled + %d outstanding",
			st.InvalidationsSent, st.InvalidationsAcked, st.InvalidationsExpired, st.InvalidationsCancelled, outstanding)
	}
	if tab.stats.WritesWaiting != waiting {
		fail("Stats.WritesWaiting = %d, but %d ops are queued or waiting", tab.stats.WritesWaiting, waiting)
	}
}

func inWriteHeap(tab *Table, l *lease) bool {
	return l.heapIndex >= 0 && l.heapIndex < len(tab.leases) && tab.leases[l.heapIndex] == l
}

// readExpiry returns the expiry of session id's read lease on key, if it
// holds one.
func readExpiry(tab *Table, id SessionID, key string) (time.Time, bool) {
	s := tab.sessions[id]
	if s == nil {
		return time.Time{}, false
	}
	li := tab.sessionRead(s, key)
	if li == noLease {
		return time.Time{}, false
	}
	return tab.time(tab.reads.at(li).expiry), true
}

// keyStates returns the keyStates of the keys the Table tracks, by name.
func keyStates(tab *Table) map[string]*keyState {
	ks := make(map[string]*keyState)
	for _, v := range tab.index.slots {
		if v != 0 {
			if k := tab.ext(tab.recs.at(v - 1)); k != nil {
				ks[k.name] = k
			}
		}
	}
	return ks
}

// tracked reports whether the Table tracks key.
func tracked(tab *Table, key string) bool {
	_, ok := tab.findKey(key)
	return ok
}

// renewUniform renews keys with the same term for each and returns the
// terms granted.
func renewUniform(tab *Table, id SessionID, keys []string, term time.Duration, now time.Time) []time.Duration {
	terms := make([]time.Duration, len(keys))
	for i := range terms {
		terms[i] = term
	}
	tab.Renew(id, keys, terms, nil, now)
	return terms
}
