package leasetable

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

var handoffSeeds = flag.Int("handoff.seeds", 0, "seeds per hot-key threshold for TestRandomizedHandoff (0: 250, or 30 with -short)")

// TestRandomizedHandoff drives a Table through random calls that include
// the paths of a restart and a handoff, which TestRandomized never takes:
// write leases restored from an earlier run (RestoreWriteLease, some for a
// client whose later sessions take them over with their token), read
// leases handed over by another node (RestoreReadLease) and adopted by a
// session of their client (AdoptSession), and the write barrier. It keeps
// what each client may believe, on the server's clock with ε, and checks:
//
//  1. An op that is not the write-lease holder's own becomes ready only
//     when no other session may still trust a read lease on its key, nor
//     a write lease.
//  2. A write that bypasses the queue comes from a session that may use
//     the key's write lease: its holder, or a session of its client with
//     its token, before it expires; and no other session may still trust a
//     read lease on the key.
//  3. An acquisition done with a token gives the session the key's write
//     lease exactly when the session is still open.
//
// It runs with keys that index their holders by session from the first,
// the second and the ninth holder on, checks the Table's invariants (the
// invalidation counters among them) after every call, and that everything
// drains once the sessions close and time runs on.
func TestRandomizedHandoff(t *testing.T) {
	seeds := 250
	if testing.Short() {
		seeds = 30
	}
	if *handoffSeeds > 0 {
		seeds = *handoffSeeds
	}
	defer func(n int32) { holderMapAt = n }(holderMapAt)
	// With a threshold of 2, the Table's storage is in mapped memory from
	// its first byte.
	defer func(at int) { offHeapAt = at }(offHeapAt)
	heapAt := offHeapAt
	var reached handoffCounts
	for _, at := range []int32{1, 2, 8} {
		holderMapAt = at
		offHeapAt = heapAt
		if at == 2 {
			offHeapAt = 0
		}
		for seed := range uint64(seeds) {
			r := newHandoffRun(t, seed, at)
			for range 300 {
				r.step()
				if t.Failed() {
					return
				}
			}
			r.drain()
			if t.Failed() {
				return
			}
			reached.add(r.reached)
		}
	}
	t.Logf("%d runs: %+v", 3*seeds, reached)
	if reached.WaitedReady == 0 || reached.RestoredInvalidated == 0 || reached.Adopted == 0 || reached.Merged == 0 ||
		reached.AdoptInvalidated == 0 || reached.RestoredRecalled == 0 || reached.TakenOver == 0 || reached.Cancelled == 0 {
		t.Fatalf("a case was never reached: %+v", reached)
	}
}

// handoffCounts says what the runs of TestRandomizedHandoff reached.
type handoffCounts struct {
	WaitedReady         int    // ops ready after holders were asked
	RestoredInvalidated int    // invalidations of handed-over read leases
	Adopted             int    // handed-over read leases adopted
	Merged              int    // of those, onto a lease of the adopting session's own
	AdoptInvalidated    int    // invalidations an adoption sent again
	RestoredRecalled    int    // recalls of restored write leases
	TakenOver           int    // restored write leases written under by a session of their client
	Cancelled           uint64 // invalidations cancelled
}

func (c *handoffCounts) add(o handoffCounts) {
	c.WaitedReady += o.WaitedReady
	c.RestoredInvalidated += o.RestoredInvalidated
	c.Adopted += o.Adopted
	c.Merged += o.Merged
	c.AdoptInvalidated += o.AdoptInvalidated
	c.RestoredRecalled += o.RestoredRecalled
	c.TakenOver += o.TakenOver
	c.Cancelled += o.Cancelled
}

// handoffClient is the client identity that restored write leases and some
// sessions share.
const handoffClient = 7

// handedBase names the closed holders of handed-over read leases.
const handedBase SessionID = 1 << 62

var handoffKeys = []string{"a", "b", "c"}

type sessionKey struct {
	s   SessionID
	key string
}

// writeBelief is a write lease as its holder's client sees it.
type writeBelief struct {
	holder   SessionID
	client   uint64
	token    uint64
	expiry   time.Time
	recalled bool
	restored bool
}

type handoffRun struct {
	t       *testing.T
	rng     *rand.Rand
	seed    uint64
	at      int32
	tab     *Table
	now     time.Time
	next    SessionID
	open    map[SessionID]uint64 // open sessions and their client identity
	clients map[SessionID]uint64 // every session's client identity
	reads   map[sessionKey]time.Time
	writes  map[string]*writeBelief
	pending []*Op // submitted, not ready, not abandoned
	ready   []*Op // ready, not done
	tokens  uint64
	trace   []string
	reached handoffCounts
}

func newHandoffRun(t *testing.T, seed uint64, at int32) *handoffRun {
	r := &handoffRun{
		t: t, rng: rand.New(rand.NewPCG(seed, 7)), seed: seed, at: at, tab: New(Config{Epsilon: eps}), now: t0, next: 1,
		open: make(map[SessionID]uint64), clients: make(map[SessionID]uint64), reads: make(map[sessionKey]time.Time), writes: make(map[string]*writeBelief),
	}
	// What a new core restores before any session opens.
	for _, key := range handoffKeys {
		if r.rng.IntN(3) == 0 {
			r.tokens++
			w := &writeBelief{holder: RestoredSession, token: r.tokens, expiry: r.now.Add(time.Duration(r.rng.IntN(30000)) * time.Millisecond), restored: true}
			if r.rng.IntN(2) == 0 {
				w.client = handoffClient
			}
			r.tab.RestoreWriteLease(key, w.token, w.client, w.expiry, 0)
			r.writes[key] = w
			r.logf("restore write lease %s token %d client %d until %v", key, w.token, w.client, w.expiry.Sub(t0))
		}
	}
	r.tab.SetWriteBarrier(r.now.Add(time.Duration(r.rng.IntN(3)) * time.Second))
	r.check()
	return r
}

func (r *handoffRun) logf(format string, args ...any) {
	r.trace = append(r.trace, fmt.Sprintf("t0+%v: ", r.now.Sub(t0))+fmt.Sprintf(format, args...))
}

func (r *handoffRun) fail(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("seed %d, holder map at %d: %s\ntrace:\n%s", r.seed, r.at, fmt.Sprintf(format, args...), strings.Join(r.trace, "\n"))
}

func (r *handoffRun) check() {
	r.t.Helper()
	checkInvariants(r.t, r.tab)
}

func (r *handoffRun) pickOpen() (SessionID, bool) {
	if len(r.open) == 0 {
		return 0, false
	}
	ids := make([]SessionID, 0, len(r.open))
	for id := range r.open {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids[r.rng.IntN(len(ids))], true
}

func (r *handoffRun) pickKey() string { return handoffKeys[r.rng.IntN(len(handoffKeys))] }

func (r *handoffRun) believeRead(s SessionID, key string, until time.Time) {
	if k := (sessionKey{s, key}); until.After(r.reads[k]) {
		r.reads[k] = until
	}
}

// apply does what the server and the clients do with a call's effects:
// it checks the ready ops against what clients believe, ends ended write
// leases in the store at once, and lets some clients acknowledge their
// invalidations at once, which may make more ops ready.
func (r *handoffRun) apply(eff Effects, call string) {
	r.t.Helper()
	for _, op := range eff.Ready {
		r.checkReady(op, call)
		r.pending = slices.DeleteFunc(r.pending, func(o *Op) bool { return o == op })
		r.ready = append(r.ready, op)
	}
	for _, op := range eff.Abandoned {
		r.pending = slices.DeleteFunc(r.pending, func(o *Op) bool { return o == op })
	}
	for _, n := range eff.Recall {
		if w := r.writes[n.Key]; w != nil && w.token == n.Token {
			w.recalled = true
			if w.restored {
				r.reached.RestoredRecalled++
			}
		}
	}
	for _, n := range eff.EndWrite {
		r.logf("%s: write lease %s token %d ended", call, n.Key, n.Token)
		// It ended at its expiry, or its holder released it or closed.
		if w := r.writes[n.Key]; w != nil && w.token == n.Token {
			delete(r.writes, n.Key)
		}
		r.apply(r.tab.EndWriteLease(n.Key, n.Token, r.now), "EndWriteLease")
	}
	for _, n := range eff.Invalidate {
		if n.Session >= handedBase {
			r.reached.RestoredInvalidated++
		}
		if _, open := r.open[n.Session]; open && r.rng.IntN(2) == 0 {
			r.logf("%s: %d acknowledges %s", call, n.Session, n.Key)
			delete(r.reads, sessionKey{n.Session, n.Key})
			r.apply(r.tab.Relinquish(n.Session, []string{n.Key}, r.now), "Relinquish")
		}
	}
	r.check()
}

// checkReady checks that op may be ready: properties 1 and 2.
func (r *handoffRun) checkReady(op *Op, call string) {
	r.t.Helper()
	w := r.writes[op.Key]
	if op.holder {
		// A write lease past its expiry ends at the next Tick: until then
		// its holder's writes without a token still bypass the queue (no
		// other session could lease the key meanwhile), but no tokened one.
		switch {
		case w == nil || (op.Token != 0 && !r.now.Before(w.expiry)):
			r.fail("%s: a write on %s by %d with token %d bypassed the queue with no live write lease", call, op.Key, op.Session, op.Token)
		case w.holder != op.Session && (w.client == 0 || r.open[op.Session] != w.client):
			r.fail("%s: a write on %s by %d bypassed the queue under the write lease of %d (client %d)", call, op.Key, op.Session, w.holder, w.client)
		}
		if w.holder != op.Session {
			r.logf("%s: %d takes over write lease %s token %d", call, op.Session, op.Key, w.token)
			if w.restored {
				r.reached.TakenOver++
			}
			w.holder = op.Session
		}
	}
	for k, until := range r.reads {
		if k.key == op.Key && k.s != op.Session && r.now.Before(until) {
			r.fail("%s: %s on %s by %d ready while %d may trust its read lease until t0+%v", call, kindName(op.Kind), op.Key, op.Session, k.s, until.Sub(t0))
		}
	}
	if op.holder {
		return
	}
	if w != nil && w.holder != op.Session && r.now.Before(w.expiry) {
		r.fail("%s: %s on %s by %d ready while %d may trust its write lease until t0+%v", call, kindName(op.Kind), op.Key, op.Session, w.holder, w.expiry.Sub(t0))
	}
	if op.Holders > 0 {
		r.reached.WaitedReady++
	}
}

func (r *handoffRun) submit(op *Op) {
	r.t.Helper()
	// The client drops its entry before it sends a write or acquisition.
	// A client's sessions share its cache: one that came back on a new
	// session drops what it read on the old one too, whose read lease a
	// write that takes over the write lease leaves in place.
	for k := range r.reads {
		if k.key == op.Key && (k.s == op.Session || (r.clients[k.s] != 0 && r.clients[k.s] == r.clients[op.Session])) {
			delete(r.reads, k)
		}
	}
	eff, err := r.tab.Submit(op, r.now)
	r.logf("submit %s %s by %d token %d: %v", kindName(op.Kind), op.Key, op.Session, op.Token, err)
	if err != nil {
		r.check()
		return
	}
	if op.state == opQueued || op.state == opWaiting {
		r.pending = append(r.pending, op)
	}
	r.apply(eff, "Submit")
}

func (r *handoffRun) step() {
	r.t.Helper()
	r.now = r.now.Add(time.Duration(r.rng.IntN(1500)) * time.Millisecond)
	key := r.pickKey()
	switch r.rng.IntN(15) {
	case 0: // a session opens, some as the client of the restored leases
		id := r.next
		r.next++
		r.tab.AddSession(id)
		r.open[id] = 0
		if r.rng.IntN(3) == 0 {
			r.tab.SetClient(id, handoffClient)
			r.open[id] = handoffClient
			r.clients[id] = handoffClient
		}
		r.logf("open %d client %d", id, r.open[id])
	case 1, 2: // a read
		if s, ok := r.pickOpen(); ok {
			if got := r.tab.Grant(s, key, term, r.now); got > 0 {
				r.believeRead(s, key, r.now.Add(got+eps))
			}
			r.logf("grant %s to %d", key, s)
			r.check()
		}
	case 3: // a write, with the key's write-lease token if the session thinks it may use it
		if s, ok := r.pickOpen(); ok {
			op := &Op{Kind: OpWrite, Session: s, Key: key}
			if w := r.writes[key]; w != nil && (w.holder == s || (w.client != 0 && w.client == r.open[s])) && r.rng.IntN(2) == 0 {
				op.Token = w.token
			}
			if r.rng.IntN(2) == 0 {
				op.Deadline = r.now.Add(time.Duration(r.rng.IntN(15)) * time.Second)
			}
			r.submit(op)
		}
	case 4: // an acquisition
		if s, ok := r.pickOpen(); ok {
			op := &Op{Kind: OpAcquire, Session: s, Key: key}
			if r.rng.IntN(2) == 0 {
				op.Deadline = r.now.Add(time.Duration(r.rng.IntN(15)) * time.Second)
			}
			r.submit(op)
		}
	case 5, 6: // the committer finishes a ready op
		if len(r.ready) == 0 {
			return
		}
		i := r.rng.IntN(len(r.ready))
		op := r.ready[i]
		r.ready = slices.Delete(r.ready, i, i+1)
		r.finish(op, r.rng.IntN(4) > 0)
	case 7: // a writer gives up
		if len(r.pending) > 0 {
			op := r.pending[r.rng.IntN(len(r.pending))]
			ok, eff := r.tab.Abandon(op, r.now)
			if !ok {
				r.fail("Abandon of a pending op %s on %s by %d refused", kindName(op.Kind), op.Key, op.Session)
			}
			r.logf("abandon %s on %s by %d", kindName(op.Kind), op.Key, op.Session)
			r.pending = slices.DeleteFunc(r.pending, func(o *Op) bool { return o == op })
			r.apply(eff, "Abandon")
		}
	case 8: // a session closes, gracefully or not
		if s, ok := r.pickOpen(); ok {
			graceful := r.rng.IntN(2) == 0
			if graceful {
				for k := range r.reads {
					if k.s == s {
						delete(r.reads, k)
					}
				}
				for key, w := range r.writes {
					if w.holder == s {
						delete(r.writes, key)
					}
				}
			}
			delete(r.open, s)
			r.logf("close %d graceful %v", s, graceful)
			r.apply(r.tab.CloseSession(s, graceful, r.now), "CloseSession")
		}
	case 9: // time passes, and the timer fires
		if next, ok := r.tab.NextDeadline(); ok && !r.now.Before(next) {
			r.logf("tick")
			r.apply(r.tab.Tick(r.now), "Tick")
		}
	case 10: // another node hands over a read lease, on a key without a write lease or a write committing
		if _, _, ok := r.tab.WriteLease(key); ok || slices.ContainsFunc(r.ready, func(o *Op) bool { return o.Key == key }) {
			return
		}
		h := handedBase + SessionID(r.rng.IntN(3))
		until := r.now.Add(time.Duration(r.rng.IntN(12000)) * time.Millisecond)
		r.tab.RestoreReadLease(h, key, until)
		r.believeRead(h, key, until)
		r.logf("restore read lease %s for %d until t0+%v", key, h, until.Sub(t0))
		r.check()
	case 11: // the client of handed-over leases comes back
		if s, ok := r.pickOpen(); ok {
			r.adopt(handedBase+SessionID(r.rng.IntN(3)), s)
		}
	case 12: // a renewal
		if s, ok := r.pickOpen(); ok {
			terms := []time.Duration{term}
			r.tab.Renew(s, []string{key}, terms, nil, r.now)
			if terms[0] > 0 {
				until := r.now.Add(terms[0] + eps)
				if _, held := r.reads[sessionKey{s, key}]; held {
					r.believeRead(s, key, until)
				}
				if w := r.writes[key]; w != nil && w.holder == s && !w.recalled && until.After(w.expiry) {
					w.expiry = until
				}
			}
			r.logf("renew %s by %d: %v", key, s, terms[0])
			r.check()
		}
	case 13: // an eviction
		if s, ok := r.pickOpen(); ok {
			delete(r.reads, sessionKey{s, key})
			r.logf("relinquish %s by %d", key, s)
			r.apply(r.tab.Relinquish(s, []string{key}, r.now), "Relinquish")
		}
	case 14: // a release of a write lease the session believes it holds
		if s, ok := r.pickOpen(); ok {
			w := r.writes[key]
			if w == nil || w.holder != s {
				return
			}
			eff, err := r.tab.ReleaseWriteLease(s, key, w.token, 0, r.now)
			r.logf("release %s token %d by %d: %v", key, w.token, s, err)
			if err == nil {
				delete(r.writes, key)
			}
			r.apply(eff, "ReleaseWriteLease")
		}
	}
}

// finish does what the committer does with a ready op: property 3.
func (r *handoffRun) finish(op *Op, ok bool) {
	r.t.Helper()
	if op.Kind == OpWrite {
		granted, eff := r.tab.Done(op, ok, term, r.now)
		if granted > 0 {
			r.believeRead(op.Session, op.Key, r.now.Add(granted+eps))
		}
		r.logf("done write %s by %d committed %v: lease %v", op.Key, op.Session, ok, granted)
		r.apply(eff, "Done")
		return
	}
	var token uint64
	if ok {
		r.tokens++
		token = r.tokens
	}
	client, open := r.open[op.Session]
	eff := r.tab.DoneAcquire(op, token, term, r.now)
	r.logf("done acquire %s by %d token %d", op.Key, op.Session, token)
	got, holder, held := r.tab.WriteLease(op.Key)
	switch granted := held && got == token && holder == op.Session; {
	case token != 0 && open && !granted:
		r.fail("DoneAcquire of %s by open session %d with token %d: write lease %d of %d (%v)", op.Key, op.Session, token, got, holder, held)
	case (token == 0 || !open) && granted:
		r.fail("DoneAcquire of %s by %d with token %d (open %v) granted the lease", op.Key, op.Session, token, open)
	case granted:
		r.writes[op.Key] = &writeBelief{holder: op.Session, client: client, token: token, expiry: r.now.Add(term + eps)}
	}
	r.apply(eff, "DoneAcquire")
}

// adopt gives the handed-over read leases of h to open session s, and
// moves what h's client believes to s.
func (r *handoffRun) adopt(h, s SessionID) {
	r.t.Helper()
	hs := r.tab.sessions[h]
	moved, merged := 0, 0
	if hs != nil {
		for li := hs.reads; li != noLease; li = r.tab.reads.at(li).sessNext {
			moved++
			if r.tab.sessionRead(r.tab.sessions[s], r.tab.keyString(r.tab.reads.at(li).key)) != noLease {
				merged++
			}
		}
	}
	eff := r.tab.AdoptSession(h, s, r.now)
	r.logf("adopt %d into %d: %d leases, %d merged, invalidations %v", h, s, moved, merged, eff.Invalidate)
	if r.tab.sessions[h] != nil {
		r.fail("AdoptSession(%d, %d) left the handed-over holder", h, s)
	}
	for k, until := range r.reads {
		if k.s == h {
			delete(r.reads, k)
			r.believeRead(s, k.key, until)
		}
	}
	r.reached.Adopted += moved
	r.reached.Merged += merged
	r.reached.AdoptInvalidated += len(eff.Invalidate)
	r.apply(eff, "AdoptSession")
}

// drain closes every session, lets every op finish and every lease run
// out, and checks that the Table is empty.
func (r *handoffRun) drain() {
	r.t.Helper()
	ids := make([]SessionID, 0, len(r.open))
	for id := range r.open {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		delete(r.open, id)
		r.apply(r.tab.CloseSession(id, false, r.now), "CloseSession")
	}
	for range 10 {
		for len(r.ready) > 0 {
			op := r.ready[0]
			r.ready = r.ready[1:]
			r.finish(op, true)
		}
		r.now = r.now.Add(time.Hour)
		r.apply(r.tab.Tick(r.now), "Tick")
	}
	st := r.tab.Stats()
	if st.Sessions != 0 || st.Leases != 0 || st.WriteLeases != 0 || st.WritesWaiting != 0 || st.Keys != 0 || len(r.ready) != 0 || len(r.pending) != 0 {
		r.fail("after every session closed and every lease ran out: Stats %+v, %d ops ready, %d pending", st, len(r.ready), len(r.pending))
	}
	r.reached.Cancelled += st.InvalidationsCancelled
}
