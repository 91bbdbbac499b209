package leasetable

import (
	"container/heap"
	"strings"
	"time"
)

// Prefix (directory) read leases (DESIGN §3.9). A prefix lease covers a
// whole listing: while it lasts, no change to any key under its prefix
// commits until its holder has acknowledged an invalidation of the prefix
// or the lease has run out. Only a prefix that ends with Separator, or the
// empty prefix, may be leased, so that a write finds the leased prefixes
// that contain its key by walking the key's separator-bounded ancestors:
// O(depth) lookups, never a scan of every prefix.
//
// A write (any op) on key k is pending on every ancestor of k from its
// submission until it is done or abandoned, and so is a write lease on k
// while it lasts (its holder writes without waiting): while anything is
// pending under a prefix, the prefix gets no new lease (pendingUnder). At
// the head of k's queue, the op invalidates the prefix leases of the other
// sessions on k's ancestors, drops its own session's, and becomes ready
// only once they are all gone.

// Separator ends every prefix that may be leased.
const Separator = '/'

// Leasable reports whether prefix may be leased: it is empty, or ends with
// Separator.
func Leasable(prefix string) bool {
	return prefix == "" || prefix[len(prefix)-1] == Separator
}

// ancestors calls fn with every leasable prefix of key, the empty one first
// and key itself last if it ends with Separator.
func ancestors(key string, fn func(prefix string)) {
	fn("")
	for i := 0; i < len(key); i++ {
		if key[i] == Separator {
			fn(key[:i+1])
		}
	}
}

// prefixLease is one session's lease on one prefix.
type prefixLease struct {
	ps          *prefixState
	session     *session
	expiry      time.Time
	heapIndex   int
	invalidated bool // an invalidation was sent
}

func (l *prefixLease) at() time.Time { return l.expiry }
func (l *prefixLease) slot() *int    { return &l.heapIndex }

// prefixState is a prefix that has leases, or had one recently: its
// holders, the keys whose head op waits for them, and when writes under
// it last began, which tells a prefix written about once a term or more
// (hot: granted term 0).
type prefixState struct {
	name    string
	leases  []*prefixLease // one per session at most
	waiting map[string]struct{}
	term    time.Duration // the last term granted on it
	window  time.Time     // when the first of writes, the ops started within a term of it, started (zero: none yet)
	writes  int
	hot     time.Time // no lease until then
}

// idle reports whether ps holds nothing that must be kept at now.
func (ps *prefixState) idle(now time.Time) bool {
	return len(ps.leases) == 0 && !now.Before(ps.hot) && (ps.window.IsZero() || !now.Before(ps.window.Add(ps.term)))
}

// pend counts an op, or a write lease, on key as pending under each of its
// ancestors (delta 1), or no longer (delta -1).
func (t *Table) pend(key string, delta int32) {
	if t.unlisted != "" && strings.HasPrefix(key, t.unlisted) {
		return // Config.Unlisted: no listing holds it
	}
	ancestors(key, func(p string) {
		n := t.pendingUnder[p] + delta
		if n <= 0 {
			delete(t.pendingUnder, p)
			return
		}
		t.pendingUnder[p] = n
	})
}

// GrantPrefix gives session id a lease on the listing of prefix for term,
// and returns the term granted: term, or 0 if the prefix may not be
// leased (Leasable), an op or a write lease is pending on a key under it,
// it was written about once a term or more lately, the session is unknown
// or term <= 0, or the session or all sessions hold their cap of leases
// (read and prefix leases count together). A session that holds a lease
// on the prefix already has it extended. The caller reads the listing
// after the grant, so that a write that commits in between must
// invalidate it; a listing too large to lease is given back with
// RelinquishPrefixes.
func (t *Table) GrantPrefix(id SessionID, prefix string, term time.Duration, now time.Time) time.Duration {
	s := t.openSession(id)
	if s == nil || term <= 0 || !Leasable(prefix) || t.pendingUnder[prefix] > 0 {
		return 0
	}
	ps := t.prefixes[prefix]
	if ps != nil && now.Before(ps.hot) {
		return 0
	}
	expiry := now.Add(term + t.eps)
	if l := s.prefixes[prefix]; l != nil {
		if l.invalidated {
			// Its op was abandoned: the holder dropped or will drop the
			// listing, so the fresh grant makes it valid again.
			l.invalidated = false
			t.stats.InvalidationsCancelled++
		}
		if expiry.After(l.expiry) {
			l.expiry = expiry
			heap.Fix(&t.pheap, l.heapIndex)
		}
		ps.term = term
		return term
	}
	if t.full(s, noLease) {
		return 0
	}
	t.addPrefix(s, prefix, expiry).ps.term = term
	return term
}

// addPrefix gives session s a new lease on prefix until expiry.
func (t *Table) addPrefix(s *session, prefix string, expiry time.Time) *prefixLease {
	ps := t.prefixes[prefix]
	if ps == nil {
		ps = &prefixState{name: prefix}
		t.prefixes[prefix] = ps
	}
	l := &prefixLease{ps: ps, session: s, expiry: expiry}
	ps.leases = append(ps.leases, l)
	if s.prefixes == nil {
		s.prefixes = make(map[string]*prefixLease)
	}
	s.prefixes[prefix] = l
	heap.Push(&t.pheap, l)
	s.nreads++
	t.stats.PrefixLeases++
	return l
}

// RelinquishPrefixes frees the session's leases on prefixes: as the
// acknowledgement of their invalidations, or a listing given back.
// Prefixes it holds no lease on are ignored. Ops waiting for those leases
// may become ready.
func (t *Table) RelinquishPrefixes(id SessionID, prefixes []string, now time.Time) Effects {
	var eff Effects
	s := t.sessions[id]
	if s == nil {
		return eff
	}
	for _, p := range prefixes {
		if l := s.prefixes[p]; l != nil {
			t.dropPrefix(l, now, &eff, false)
		}
	}
	t.gcSession(s)
	return eff
}

// RestorePrefixLease brings back a prefix lease that another node granted
// before it handed its leases over, as RestoreReadLease does a read lease.
func (t *Table) RestorePrefixLease(holder SessionID, prefix string, expiry time.Time) {
	s := t.closedSession(holder)
	if l := s.prefixes[prefix]; l != nil {
		if expiry.After(l.expiry) {
			l.expiry = expiry
			heap.Fix(&t.pheap, l.heapIndex)
		}
		return
	}
	t.addPrefix(s, prefix, expiry)
}

// dropPrefix removes prefix lease l, and lets the ops that waited for it
// move on.
func (t *Table) dropPrefix(l *prefixLease, now time.Time, eff *Effects, expired bool) {
	ps, s := l.ps, l.session
	if l.invalidated {
		if expired {
			t.stats.InvalidationsExpired++
		} else {
			t.stats.InvalidationsAcked++
		}
	}
	for i, m := range ps.leases {
		if m == l {
			ps.leases = append(ps.leases[:i], ps.leases[i+1:]...)
			break
		}
	}
	delete(s.prefixes, ps.name)
	if l.heapIndex >= 0 {
		heap.Remove(&t.pheap, l.heapIndex)
	}
	s.nreads--
	t.stats.PrefixLeases--
	if len(ps.waiting) > 0 {
		waiting := ps.waiting
		ps.waiting = nil
		for name := range waiting {
			if k := t.extOf(name); k != nil {
				t.checkReady(k, now, eff)
			}
		}
	}
	t.gcPrefix(ps, now)
}

// gcPrefix forgets ps once it is idle, or files it to be forgotten once it
// will be.
func (t *Table) gcPrefix(ps *prefixState, now time.Time) {
	switch {
	case len(ps.leases) > 0 || t.prefixes[ps.name] != ps:
	case ps.idle(now):
		delete(t.prefixes, ps.name)
	default:
		t.cooling = append(t.cooling, ps)
	}
}

// startPrefixes sends the invalidations of op's head start to the other
// sessions' leases on the prefixes that contain its key, drops its own
// session's (its library dropped the listing before it sent the op), and
// notes the write on each prefix, for GrantPrefix's hot test.
func (t *Table) startPrefixes(op *Op, now time.Time, eff *Effects) {
	if len(t.prefixes) == 0 || t.noRecall || t.unlisted != "" && strings.HasPrefix(op.Key, t.unlisted) {
		return
	}
	ancestors(op.Key, func(p string) {
		ps := t.prefixes[p]
		if ps == nil {
			return
		}
		if ps.window.IsZero() || now.Sub(ps.window) >= ps.term {
			ps.window, ps.writes = now, 0
		}
		if ps.writes++; t.hotWrites > 0 && ps.writes >= t.hotWrites {
			ps.hot = now.Add(ps.term) // Config.HotPrefixWrites within a term
		}
		for i := 0; i < len(ps.leases); {
			l := ps.leases[i]
			if l.session.id == op.Session {
				t.dropPrefix(l, now, eff, false)
				continue // dropPrefix took it out of ps.leases
			}
			if !l.invalidated {
				l.invalidated = true
				t.stats.InvalidationsSent++
				eff.InvalidatePrefix = append(eff.InvalidatePrefix, Notice{Session: l.session.id, Key: p})
			}
			op.Holders++
			i++
		}
	})
}

// prefixHeld reports whether a lease of a session other than op's on a
// prefix that contains key k holds op back, and notes k as waiting for
// that prefix's leases.
func (t *Table) prefixHeld(k *keyState, op *Op) bool {
	if len(t.prefixes) == 0 || t.noRecall || t.unlisted != "" && strings.HasPrefix(k.name, t.unlisted) {
		return false
	}
	held := false
	ancestors(k.name, func(p string) {
		ps := t.prefixes[p]
		if ps == nil {
			return
		}
		for _, l := range ps.leases {
			if l.session.id != op.Session {
				if ps.waiting == nil {
					ps.waiting = make(map[string]struct{})
				}
				ps.waiting[k.name] = struct{}{}
				held = true
				return
			}
		}
	})
	return held
}

// tickPrefixes expires the prefix leases whose time has come, and forgets
// the prefixes that have cooled down.
func (t *Table) tickPrefixes(now time.Time, eff *Effects) {
	for len(t.pheap) > 0 && !now.Before(t.pheap[0].expiry) {
		l := t.pheap[0]
		s := l.session
		t.dropPrefix(l, now, eff, true)
		t.gcSession(s)
	}
	if len(t.cooling) == 0 {
		return
	}
	keep := t.cooling[:0]
	for _, ps := range t.cooling {
		switch {
		case t.prefixes[ps.name] != ps || len(ps.leases) > 0:
		case ps.idle(now):
			delete(t.prefixes, ps.name)
		default:
			keep = append(keep, ps)
		}
	}
	clear(t.cooling[len(keep):])
	t.cooling = keep
}

// mergePrefixes moves the prefix leases of closed session f to open
// session s, as mergeReads does the read leases.
func (t *Table) mergePrefixes(f, s *session, eff *Effects) {
	for p, l := range f.prefixes {
		if mine := s.prefixes[p]; mine != nil {
			if l.expiry.After(mine.expiry) {
				mine.expiry = l.expiry
				heap.Fix(&t.pheap, mine.heapIndex)
			}
			if l.invalidated && mine.invalidated {
				t.stats.InvalidationsCancelled++
			}
			mine.invalidated = mine.invalidated || l.invalidated
			t.dropPrefixQuietly(l)
			if mine.invalidated {
				eff.InvalidatePrefix = append(eff.InvalidatePrefix, Notice{Session: s.id, Key: p})
			}
			continue
		}
		delete(f.prefixes, p)
		f.nreads--
		l.session = s
		if s.prefixes == nil {
			s.prefixes = make(map[string]*prefixLease)
		}
		s.prefixes[p] = l
		s.nreads++
		if l.invalidated {
			eff.InvalidatePrefix = append(eff.InvalidatePrefix, Notice{Session: s.id, Key: p})
		}
	}
}

// dropPrefixQuietly removes l, merged into another lease of the same
// prefix, without counting it as acknowledged or waking waiters: the
// other lease holds them still.
func (t *Table) dropPrefixQuietly(l *prefixLease) {
	ps := l.ps
	for i, m := range ps.leases {
		if m == l {
			ps.leases = append(ps.leases[:i], ps.leases[i+1:]...)
			break
		}
	}
	delete(l.session.prefixes, ps.name)
	if l.heapIndex >= 0 {
		heap.Remove(&t.pheap, l.heapIndex)
	}
	l.session.nreads--
	t.stats.PrefixLeases--
}
