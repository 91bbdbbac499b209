package leasetable

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRandomized drives a Table with random sequences of calls at made-up,
// monotonically advancing times, and checks it against a model of what the
// clients were told:
//
//  1. A write (or acquire) that is not the write-lease holder's own never
//     becomes ready while another session may still trust a lease on its
//     key: a read lease neither relinquished nor expired, or a write lease
//     neither released nor expired.
//  2. While an op is queued, waiting, or ready but not done on a key, no
//     session gets a read lease on it, and Renew returns 0 for it, except to
//     the write-lease holder (whose write lease is renewed) and to a session
//     whose own write-lease write is in flight.
//  3. Fencing: a tokened write is accepted exactly when its token is that of
//     the key's unexpired write lease and its session holds that lease (the
//     model's sessions give no client identity, so none takes over
//     another's lease), and the tokens WriteLease reports only grow.
//
// It also checks per-key FIFO order, that abandoned and ready are exclusive,
// the Table's internal invariants after every call, and that everything
// drains once the sessions close and time runs on.
func TestRandomized(t *testing.T) {
	seeds, steps := 400, 400
	if testing.Short() {
		seeds, steps = 50, 200
	}
	// Every other seed keeps the Table's storage in mapped memory from
	// its first byte.
	defer func(at int) { offHeapAt = at }(offHeapAt)
	heapAt := offHeapAt
	var total modelCounts
	for seed := range uint64(seeds) {
		offHeapAt = heapAt
		if seed%2 == 1 {
			offHeapAt = 0
		}
		c := runModel(t, seed, steps)
		if t.Failed() {
			return
		}
		total.add(c)
	}
	t.Logf("%d runs: %+v", seeds, total)
	// The runs must reach the cases they are meant to check.
	if total.Ready == 0 || total.WaitedReady == 0 || total.Bypass == 0 || total.Fenced == 0 || total.Recalls == 0 ||
		total.Invalidations == 0 || total.Abandoned == 0 || total.Refused == 0 ||
		total.PrefixGrants == 0 || total.PrefixInvalidations == 0 || total.PrefixRefused == 0 {
		t.Fatalf("a case was never reached: %+v", total)
	}
}

// modelCounts says what the randomized runs reached.
type modelCounts struct {
	Ready         int // ops handed out as ready
	WaitedReady   int // of those, not ready at their submit
	Bypass        int // write-lease holders' writes
	Fenced        int // writes refused with ErrFenced
	Abandoned     int // ops abandoned
	Invalidations int
	Recalls       int
	Refused       int // grants and renewals refused for a pending op

	PrefixGrants        int // prefix leases granted
	PrefixInvalidations int
	PrefixRefused       int // prefix grants refused for an op or a write lease under the prefix
}

func (c *modelCounts) add(o modelCounts) {
	c.Ready += o.Ready
	c.WaitedReady += o.WaitedReady
	c.Bypass += o.Bypass
	c.Fenced += o.Fenced
	c.Abandoned += o.Abandoned
	c.PrefixGrants += o.PrefixGrants
	c.PrefixInvalidations += o.PrefixInvalidations
	c.PrefixRefused += o.PrefixRefused
	c.Invalidations += o.Invalidations
	c.Recalls += o.Recalls
	c.Refused += o.Refused
}

// mRead is a read lease as its client sees it: trusted until expiry, which
// every Grant, Renew or Done that returned a term for the key extends. The
// client drops it when it relinquishes the key or sends a write on it; a
// client that lost its connection still trusts it.
type mRead struct {
	expiry      time.Time
	invalidated bool
}

// mWrite is a write lease the Table holds.
type mWrite struct {
	session  SessionID
	token    uint64
	expiry   time.Time
	recalled bool
}

type mOp struct {
	op     *Op
	seq    int
	bypass bool // the write-lease holder's write: ready at submit, outside the queue
	ready  bool
	done   bool
	abnd   bool
}

func (o *mOp) pending() bool { return !o.done && !o.abnd }

type sk struct {
	s SessionID
	k string
}

type model struct {
	t       *testing.T
	seed    uint64
	rng     *rand.Rand
	tab     *Table
	eps     time.Duration
	now     time.Time
	barrier time.Time
	tokens  tokenIssuer
	lastTok uint64 // the largest token WriteLease has reported

	open    map[SessionID]bool
	closed  []SessionID
	closing SessionID // the session CloseSession is closing
	nextID  SessionID
	keys    []string

	reads map[sk]*mRead // read leases the clients trust
	// prefixes may be leased (some runs have none); preads are the prefix
	// leases the clients trust, by session and prefix.
	prefixes []string
	preads   map[sk]*mRead
	writes   map[string]*mWrite // write leases, until released or Ticked away
	known    map[sk]uint64      // the last token each session got per key

	ops  []*mOp
	byOp map[*Op]*mOp

	trace []string
	count modelCounts
}

var terms = []time.Duration{time.Second, 2 * time.Second, 3500 * time.Millisecond}

func runModel(t *testing.T, seed uint64, steps int) modelCounts {
	rng := rand.New(rand.NewPCG(seed, 0x1ea5ed))
	m := &model{
		t:      t,
		seed:   seed,
		rng:    rng,
		eps:    []time.Duration{0, eps, 700 * time.Millisecond}[rng.IntN(3)],
		now:    t0,
		open:   make(map[SessionID]bool),
		keys:   []string{"a", "b", "c"}[:1+rng.IntN(3)],
		reads:  make(map[sk]*mRead),
		preads: make(map[sk]*mRead),
		writes: make(map[string]*mWrite),
		known:  make(map[sk]uint64),
		byOp:   make(map[*Op]*mOp),
	}
	if rng.IntN(2) == 0 {
		// Keys in directories, and listings of them leased.
		m.keys = []string{"d/a", "d/b", "e/c"}[:1+rng.IntN(3)]
		m.prefixes = []string{"", "d/", "e/"}
	}
	m.tab = New(Config{Epsilon: m.eps, HotPrefixWrites: -1})
	if rng.IntN(3) == 0 {
		m.barrier = t0.Add(time.Duration(rng.IntN(8000)) * time.Millisecond)
		m.tab.SetWriteBarrier(m.barrier)
		m.logf("barrier at t0%+v", m.barrier.Sub(t0))
	}
	for range 2 + rng.IntN(4) {
		m.addSession()
	}
	for range steps {
		switch r := rng.IntN(100); {
		case r < 16 && len(m.prefixes) > 0 && rng.IntN(3) == 0:
			m.grantPrefix()
		case r < 16:
			m.grant()
		case r < 24:
			m.renew()
		case r < 32 && len(m.prefixes) > 0 && rng.IntN(3) == 0:
			m.relinquishPrefix()
		case r < 32:
			m.relinquish()
		case r < 44:
			m.submitWrite()
		case r < 50:
			m.submitAcquire()
		case r < 64:
			m.done()
		case r < 68:
			m.abandon()
		case r < 72:
			m.release()
		case r < 86:
			m.advance()
		case r < 96:
			m.tick()
		case r < 98:
			m.closeSession()
		default:
			if len(m.open) < 6 {
				m.addSession()
			}
		}
		m.check()
		if m.t.Failed() {
			return m.count
		}
	}
	m.drain()
	return m.count
}

func (m *model) logf(format string, args ...any) {
	m.trace = append(m.trace, fmt.Sprintf("t0%+v: ", m.now.Sub(t0))+fmt.Sprintf(format, args...))
}

func (m *model) fail(format string, args ...any) {
	m.t.Helper()
	tail := m.trace
	if len(tail) > 60 {
		tail = tail[len(tail)-60:]
	}
	m.t.Fatalf("seed %d (ε %v): %s\nlast calls:\n  %s", m.seed, m.eps, fmt.Sprintf(format, args...), strings.Join(tail, "\n  "))
}

func (m *model) openIDs() []SessionID {
	return slices.Sorted(maps.Keys(m.open))
}

func (m *model) pickOpen() (SessionID, bool) {
	ids := m.openIDs()
	if len(ids) == 0 {
		return 0, false
	}
	return ids[m.rng.IntN(len(ids))], true
}

func (m *model) pickKey() string { return m.keys[m.rng.IntN(len(m.keys))] }

func (m *model) pickKeys() []string {
	n := 1 + m.rng.IntN(len(m.keys)+1)
	out := make([]string, n)
	for i := range out {
		out[i] = m.pickKey()
	}
	return out
}

func (m *model) pickTerm() time.Duration { return terms[m.rng.IntN(len(terms))] }

func (m *model) addSession() {
	m.nextID++
	m.open[m.nextID] = true
	m.tab.AddSession(m.nextID)
	m.logf("AddSession(%d)", m.nextID)
}

// pendingOn returns the ops on key that are queued, waiting, or ready but
// not done.
func (m *model) pendingOn(key string) []*mOp {
	var out []*mOp
	for _, o := range m.ops {
		if o.op.Key == key && o.pending() {
			out = append(out, o)
		}
	}
	return out
}

func (m *model) otherWriteLease(key string, id SessionID) bool {
	w := m.writes[key]
	return w != nil && w.session != id
}

func (m *model) trust(id SessionID, key string, d time.Duration) {
	exp := m.now.Add(d + m.eps)
	r := m.reads[sk{id, key}]
	if r == nil {
		m.reads[sk{id, key}] = &mRead{expiry: exp}
		return
	}
	r.invalidated = false
	if exp.After(r.expiry) {
		r.expiry = exp
	}
}

func (m *model) grant() {
	id, ok := m.pickOpen()
	if !ok || m.rng.IntN(10) == 0 {
		id = m.nextID + 1 // unknown
		if len(m.closed) > 0 && m.rng.IntN(2) == 0 {
			id = m.closed[m.rng.IntN(len(m.closed))]
		}
	}
	key, d := m.pickKey(), m.pickTerm()
	want := time.Duration(0)
	if m.open[id] && len(m.pendingOn(key)) == 0 && !m.otherWriteLease(key, id) {
		want = d
	}
	got := m.tab.Grant(id, key, d, m.now)
	m.logf("Grant(%d, %s, %v) = %v", id, key, d, got)
	if m.open[id] && len(m.pendingOn(key)) > 0 {
		m.count.Refused++
	}
	if got != want {
		m.fail("Grant(%d, %s) = %v, want %v (pending %d, write lease %+v)", id, key, got, want, len(m.pendingOn(key)), m.writes[key])
	}
	if got > 0 {
		m.trust(id, key, got)
	}
}

func (m *model) renew() {
	id, ok := m.pickOpen()
	if !ok {
		return
	}
	keys, d := m.pickKeys(), m.pickTerm()
	// What the model expects, decided before the call.
	type expect struct{ mayRenew, mustRenew bool }
	exp := make([]expect, len(keys))
	for i, key := range keys {
		pend := m.pendingOn(key)
		w := m.writes[key]
		ownWrite := w != nil && w.session == id && !w.recalled
		ownBypass := slices.ContainsFunc(pend, func(o *mOp) bool { return o.bypass && o.op.Session == id })
		r := m.reads[sk{id, key}]
		exp[i].mayRenew = len(pend) == 0 || ownWrite || ownBypass
		exp[i].mustRenew = ownWrite || (r != nil && !r.invalidated && len(pend) == 0 && !m.otherWriteLease(key, id))
	}
	got := renewUniform(m.tab, id, keys, d, m.now)
	m.logf("Renew(%d, %v, %v) = %v", id, keys, d, got)
	if len(got) != len(keys) {
		m.fail("Renew returned %d terms for %d keys", len(got), len(keys))
	}
	for i, key := range keys {
		switch {
		case got[i] != 0 && got[i] != d:
			m.fail("Renew term %v, asked %v", got[i], d)
		case got[i] != 0 && !exp[i].mayRenew:
			m.fail("property 2: Renew(%d) renewed %s while an op is pending on it", id, key)
		case got[i] == 0 && exp[i].mustRenew:
			m.fail("Renew(%d) did not renew %s", id, key)
		}
		if got[i] == 0 {
			if !exp[i].mayRenew {
				m.count.Refused++
			}
			continue
		}
		if r := m.reads[sk{id, key}]; r != nil {
			if e := m.now.Add(d + m.eps); e.After(r.expiry) {
				r.expiry = e
			}
		}
		if w := m.writes[key]; w != nil && w.session == id && !w.recalled {
			if e := m.now.Add(d + m.eps); e.After(w.expiry) {
				w.expiry = e
			}
		}
	}
}

func (m *model) relinquish() {
	id, ok := m.pickOpen()
	if !ok {
		return
	}
	keys := m.pickKeys()
	m.logf("Relinquish(%d, %v)", id, keys)
	for _, key := range keys {
		delete(m.reads, sk{id, key})
	}
	m.apply(m.tab.Relinquish(id, keys, m.now), "Relinquish")
}

func (m *model) newOp(kind OpKind, id SessionID, key string) *Op {
	op := &Op{Kind: kind, Session: id, Key: key}
	if m.rng.IntN(3) == 0 {
		op.Deadline = m.now.Add(time.Duration(m.rng.IntN(5000)) * time.Millisecond)
	}
	// The client drops its cached entry, and its listings of the
	// prefixes above key, before it sends a write.
	delete(m.reads, sk{id, key})
	for _, p := range m.prefixes {
		if strings.HasPrefix(key, p) {
			delete(m.preads, sk{id, p})
		}
	}
	return op
}

// under reports whether anything under prefix p is pending: an op, or a
// write lease on a key under it.
func (m *model) under(p string) bool {
	for _, o := range m.ops {
		if o.pending() && strings.HasPrefix(o.op.Key, p) {
			return true
		}
	}
	for key := range m.writes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

func (m *model) grantPrefix() {
	id, ok := m.pickOpen()
	if !ok {
		return
	}
	p, d := m.prefixes[m.rng.IntN(len(m.prefixes))], m.pickTerm()
	want := d
	if m.under(p) {
		want = 0
		m.count.PrefixRefused++
	}
	got := m.tab.GrantPrefix(id, p, d, m.now)
	m.logf("GrantPrefix(%d, %q, %v) = %v", id, p, d, got)
	if got != want {
		m.fail("GrantPrefix(%d, %q) = %v, want %v", id, p, got, want)
	}
	if got > 0 {
		m.count.PrefixGrants++
		exp := m.now.Add(got + m.eps)
		if r := m.preads[sk{id, p}]; r != nil && r.expiry.After(exp) {
			exp = r.expiry
		}
		m.preads[sk{id, p}] = &mRead{expiry: exp}
	}
}

func (m *model) relinquishPrefix() {
	id, ok := m.pickOpen()
	if !ok {
		return
	}
	p := m.prefixes[m.rng.IntN(len(m.prefixes))]
	m.logf("RelinquishPrefixes(%d, %q)", id, p)
	delete(m.preads, sk{id, p})
	m.apply(m.tab.RelinquishPrefixes(id, []string{p}, m.now), "RelinquishPrefixes")
}

// checkPrefixes is property 1 for listings: no op under a prefix is ready
// while another session trusts its lease on the prefix.
func (m *model) checkPrefixes(o *mOp, call string) {
	m.t.Helper()
	for key, r := range m.preads {
		if key.s != o.op.Session && strings.HasPrefix(o.op.Key, key.k) && r.expiry.After(m.now) {
			m.fail("property 1: %s: %s on %s by %d ready while session %d trusts its listing of %q until t0%+v",
				call, kindName(o.op.Kind), o.op.Key, o.op.Session, key.s, key.k, r.expiry.Sub(t0))
		}
	}
}

func (m *model) track(op *Op, bypass bool) *mOp {
	o := &mOp{op: op, seq: len(m.ops), bypass: bypass}
	m.ops = append(m.ops, o)
	m.byOp[op] = o
	return o
}

func (m *model) submitWrite() {
	id, ok := m.pickOpen()
	if !ok {
		return
	}
	key := m.pickKey()
	op := m.newOp(OpWrite, id, key)
	switch r := m.rng.IntN(100); {
	case r < 25:
		op.Token = m.known[sk{id, key}]
	case r < 35:
		op.Token = 1 + m.rng.Uint64N(m.tokens.last+1)
	}
	w := m.writes[key]
	fenced := op.Token != 0 && (w == nil || w.token != op.Token || !m.now.Before(w.expiry) || w.session != id)
	bypass := !fenced && w != nil && w.session == id && !m.now.Before(m.barrier)
	if !fenced {
		m.track(op, bypass)
	}
	eff, err := m.tab.Submit(op, m.now)
	m.logf("Submit(write %s by %d, token %d, deadline %v) = %v; %s", key, id, op.Token, deadlineString(op), err, effString(eff))
	switch {
	case fenced && !errors.Is(err, ErrFenced):
		m.fail("property 3: write with token %d (lease %+v) not fenced: %v", op.Token, w, err)
	case !fenced && err != nil:
		m.fail("write with token %d (lease %+v): %v", op.Token, w, err)
	case fenced:
		m.count.Fenced++
		if !eff.empty() {
			m.fail("fenced write had effects %+v", eff)
		}
		return
	case bypass && (len(eff.Ready) != 1 || eff.Ready[0] != op || len(eff.Invalidate)+len(eff.Recall)+len(eff.Abandoned) != 0):
		m.fail("the write-lease holder's write not ready at once: %s", effString(eff))
	}
	m.apply(eff, "Submit")
}

func (m *model) submitAcquire() {
	id, ok := m.pickOpen()
	if !ok {
		return
	}
	key := m.pickKey()
	op := m.newOp(OpAcquire, id, key)
	m.track(op, false)
	eff, err := m.tab.Submit(op, m.now)
	m.logf("Submit(acquire %s by %d, deadline %v) = %v; %s", key, id, deadlineString(op), err, effString(eff))
	if err != nil {
		m.fail("Submit acquire: %v", err)
	}
	m.apply(eff, "Submit")
}

func (m *model) done() {
	var inflight []*mOp
	for _, o := range m.ops {
		if o.ready && !o.done {
			inflight = append(inflight, o)
		}
	}
	if len(inflight) == 0 {
		return
	}
	o := inflight[m.rng.IntN(len(inflight))]
	op, d := o.op, m.pickTerm()
	o.done = true
	if op.Kind == OpWrite {
		committed := m.rng.IntN(5) != 0
		want := time.Duration(0)
		if committed && m.open[op.Session] && len(m.pendingOn(op.Key)) == 0 && !m.otherWriteLease(op.Key, op.Session) {
			want = d
		}
		got, eff := m.tab.Done(op, committed, d, m.now)
		m.logf("Done(write %s by %d, %v) = %v; %s", op.Key, op.Session, committed, got, effString(eff))
		if got != want {
			m.fail("Done granted %v, want %v", got, want)
		}
		if got > 0 {
			m.trust(op.Session, op.Key, got)
		}
		m.apply(eff, "Done")
		return
	}
	token := uint64(0)
	if m.rng.IntN(8) != 0 {
		token = m.tokens.next()
	}
	granted := token != 0 && m.open[op.Session]
	if granted {
		if w := m.writes[op.Key]; w != nil && w.session != op.Session {
			m.fail("acquire by %d ready while %d holds the write lease", op.Session, w.session)
		}
		m.writes[op.Key] = &mWrite{session: op.Session, token: token, expiry: m.now.Add(d + m.eps)}
		m.known[sk{op.Session, op.Key}] = token
	}
	eff := m.tab.DoneAcquire(op, token, d, m.now)
	m.logf("DoneAcquire(%s by %d, token %d) %s", op.Key, op.Session, token, effString(eff))
	m.apply(eff, "DoneAcquire")
	if granted {
		tok, holder, ok := m.tab.WriteLease(op.Key)
		if !ok || tok != token || holder != op.Session {
			m.fail("WriteLease(%s) = %d, %d, %v; want %d, %d", op.Key, tok, holder, ok, token, op.Session)
		}
		if tok <= m.lastTok {
			m.fail("property 3: fencing token %d after %d", tok, m.lastTok)
		}
		m.lastTok = tok
	}
}

func (m *model) abandon() {
	if len(m.ops) == 0 {
		return
	}
	o := m.ops[m.rng.IntN(len(m.ops))]
	want := o.pending() && !o.ready
	ok, eff := m.tab.Abandon(o.op, m.now)
	m.logf("Abandon(%s by %d) = %v; %s", o.op.Key, o.op.Session, ok, effString(eff))
	if ok != want {
		m.fail("Abandon = %v, want %v (%+v)", ok, want, *o)
	}
	if ok {
		o.abnd = true
	}
	m.apply(eff, "Abandon")
}

func (m *model) release() {
	id, ok := m.pickOpen()
	if !ok {
		return
	}
	key := m.pickKey()
	token := m.known[sk{id, key}]
	if m.rng.IntN(4) == 0 {
		token = m.rng.Uint64N(m.tokens.last + 2)
	}
	w := m.writes[key]
	want := w != nil && w.session == id && w.token == token
	if want {
		delete(m.writes, key)
	}
	eff, err := m.tab.ReleaseWriteLease(id, key, token, 0, m.now)
	m.logf("ReleaseWriteLease(%d, %s, %d) = %v; %s", id, key, token, err, effString(eff))
	if want != (err == nil) || (err != nil && !errors.Is(err, ErrNotFound)) {
		m.fail("ReleaseWriteLease = %v, want success %v (lease %+v)", err, want, w)
	}
	m.apply(eff, "ReleaseWriteLease")
}

func (m *model) advance() {
	switch r := m.rng.IntN(10); {
	case r < 4:
		m.now = m.now.Add(time.Duration(m.rng.IntN(1500)) * time.Millisecond)
	case r < 8:
		next, ok := m.tab.NextDeadline()
		if ok && next.After(m.now) {
			if r < 6 {
				m.now = next
			} else if next.Add(-time.Nanosecond).After(m.now) {
				m.now = next.Add(-time.Nanosecond)
			}
		}
	default:
		m.now = m.now.Add(time.Duration(m.rng.IntN(8000)) * time.Millisecond)
	}
	m.logf("advance")
}

func (m *model) tick() {
	eff := m.tab.Tick(m.now)
	m.logf("Tick %s", effString(eff))
	for _, op := range eff.Abandoned {
		if op.Deadline.IsZero() || op.Deadline.After(m.now) {
			m.fail("Tick abandoned an op with deadline %v", op.Deadline)
		}
	}
	m.apply(eff, "Tick")
	for key, r := range m.reads {
		if !r.expiry.After(m.now) {
			delete(m.reads, key)
		}
	}
	for key, r := range m.preads {
		if !r.expiry.After(m.now) {
			delete(m.preads, key)
		}
	}
	for key, w := range m.writes {
		if !w.expiry.After(m.now) {
			delete(m.writes, key)
		}
	}
	if next, ok := m.tab.NextDeadline(); ok && !next.After(m.now) {
		m.fail("NextDeadline %v not after the Tick", next.Sub(t0))
	}
}

func (m *model) closeSession() {
	id, ok := m.pickOpen()
	if !ok {
		return
	}
	relinquish := m.rng.IntN(2) == 0
	delete(m.open, id)
	m.closed = append(m.closed, id)
	var want []*Op
	for _, o := range m.ops {
		if o.op.Session == id && o.pending() && !o.ready {
			want = append(want, o.op)
		}
	}
	if relinquish {
		for key := range m.reads {
			if key.s == id {
				delete(m.reads, key)
			}
		}
		for key := range m.preads {
			if key.s == id {
				delete(m.preads, key)
			}
		}
		for key, w := range m.writes {
			if w.session == id {
				delete(m.writes, key)
			}
		}
	}
	eff := m.tab.CloseSession(id, relinquish, m.now)
	m.logf("CloseSession(%d, %v) %s", id, relinquish, effString(eff))
	m.closing = id
	m.apply(eff, "CloseSession")
	m.closing = 0
	var got []*Op
	for _, op := range eff.Abandoned {
		if op.Session == id {
			got = append(got, op)
		}
	}
	if len(got) != len(want) {
		m.fail("CloseSession abandoned %d of the session's ops, want %d", len(got), len(want))
	}
	for _, op := range want {
		if !slices.Contains(got, op) {
			m.fail("CloseSession did not abandon an op on %s", op.Key)
		}
	}
	if m.rng.IntN(2) == 0 {
		m.addSession()
	}
}

// apply checks one call's Effects against the model, and updates it.
func (m *model) apply(eff Effects, call string) {
	m.t.Helper()
	eff = endWrites(m.tab, eff, m.now)
	m.count.Recalls += len(eff.Recall)
	m.count.Invalidations += len(eff.Invalidate)
	m.count.Abandoned += len(eff.Abandoned)
	m.count.Ready += len(eff.Ready)
	for _, n := range eff.Recall {
		w := m.writes[n.Key]
		if w == nil && n.Session == m.closing {
			// Closing a session abandons its ops before it frees its
			// leases, so the next op on a key may still recall them.
			continue
		}
		if w == nil || w.session != n.Session || w.token != n.Token || w.recalled {
			m.fail("%s: recall %+v of a write lease the model does not have: %+v", call, n, w)
		}
		w.recalled = true
	}
	for _, n := range eff.Invalidate {
		if r := m.reads[sk{n.Session, n.Key}]; r != nil {
			r.invalidated = true
		}
	}
	m.count.PrefixInvalidations += len(eff.InvalidatePrefix)
	for _, n := range eff.InvalidatePrefix {
		if r := m.preads[sk{n.Session, n.Key}]; r != nil {
			r.invalidated = true
		}
	}
	// The lists are not ordered among each other: an op abandoned in
	// the same call may have let a later one start.
	for _, op := range eff.Abandoned {
		o := m.byOp[op]
		if o == nil || o.ready || !o.pending() {
			m.fail("%s: op %s by %d abandoned in the wrong state", call, op.Key, op.Session)
		}
		o.abnd = true
	}
	for _, op := range eff.Ready {
		o := m.byOp[op]
		switch {
		case o == nil:
			m.fail("%s: unknown op ready", call)
		case o.ready || !o.pending():
			m.fail("%s: op %s by %d ready again (%+v)", call, op.Key, op.Session, *o)
		case !m.open[op.Session]:
			m.fail("%s: op %s of closed session %d became ready", call, op.Key, op.Session)
		}
		o.ready = true
		m.checkPrefixes(o, call)
		if o.bypass {
			m.count.Bypass++
			continue
		}
		if call != "Submit" {
			m.count.WaitedReady++
		}
		m.checkSafeToCommit(o, call)
	}
}

// checkSafeToCommit is property 1, plus FIFO order and the barrier.
func (m *model) checkSafeToCommit(o *mOp, call string) {
	m.t.Helper()
	op := o.op
	for key, r := range m.reads {
		if key.k == op.Key && key.s != op.Session && r.expiry.After(m.now) {
			m.fail("property 1: %s: %s on %s by %d ready while session %d trusts its read lease until t0%+v",
				call, kindName(op.Kind), op.Key, op.Session, key.s, r.expiry.Sub(t0))
		}
	}
	if w := m.writes[op.Key]; w != nil && w.session != op.Session && w.expiry.After(m.now) {
		m.fail("property 1: %s: %s on %s by %d ready while session %d holds the write lease until t0%+v",
			call, kindName(op.Kind), op.Key, op.Session, w.session, w.expiry.Sub(t0))
	}
	if m.now.Before(m.barrier) {
		m.fail("%s: op ready before the write barrier", call)
	}
	for _, p := range m.ops {
		if p == o || p.op.Key != op.Key || !p.pending() {
			continue
		}
		if p.ready {
			m.fail("%s: op on %s ready while another is in flight", call, op.Key)
		}
		if !p.bypass && p.seq < o.seq {
			m.fail("%s: op on %s ready before one submitted earlier", call, op.Key)
		}
	}
}

// check compares the Table with the model after every call.
func (m *model) check() {
	m.t.Helper()
	checkInvariants(m.t, m.tab)
	if m.t.Failed() {
		m.fail("invariants broken")
	}
	for key, r := range m.reads {
		expiry, ok := readExpiry(m.tab, key.s, key.k)
		if !ok || expiry.Before(r.expiry) {
			m.fail("session %d trusts %s until t0%+v but the table's lease (%v) expires t0%+v", key.s, key.k, r.expiry.Sub(t0), ok, expiry.Sub(t0))
		}
	}
	wleases := 0
	keys := keyStates(m.tab)
	for name, k := range keys {
		if k.wlease != nil {
			wleases++
			if m.writes[name] == nil {
				m.fail("the table holds a write lease on %s the model does not", name)
			}
		}
	}
	for key, w := range m.writes {
		k := keys[key]
		if k == nil || k.wlease == nil {
			m.fail("write lease on %s missing from the table", key)
		}
		l := k.wlease
		if l.session.id != w.session || l.token != w.token || !l.expiry.Equal(w.expiry) || l.recalled != w.recalled {
			m.fail("write lease on %s: table %d/%d/t0%+v/%v, model %+v", key, l.session.id, l.token, l.expiry.Sub(t0), l.recalled, w)
		}
	}
	waiting := 0
	for _, o := range m.ops {
		if o.pending() && !o.ready {
			waiting++
		}
	}
	st := m.tab.Stats()
	if st.WritesWaiting != waiting || st.WriteLeases != wleases || st.WriteLeases != len(m.writes) || st.Sessions != len(m.open) {
		m.fail("Stats %+v; model: %d waiting, %d write leases, %d sessions", st, waiting, len(m.writes), len(m.open))
	}
	// Property 2, probed: nobody gets a lease on a key with a pending op.
	for _, key := range m.keys {
		if len(m.pendingOn(key)) == 0 {
			continue
		}
		for _, id := range m.openIDs() {
			if got := m.tab.Grant(id, key, time.Second, m.now); got != 0 {
				m.fail("property 2: Grant(%d, %s) = %v with %d ops pending", id, key, got, len(m.pendingOn(key)))
			}
		}
	}
}

// drain closes every session, finishes every ready op and lets time run
// out: the Table must be empty.
func (m *model) drain() {
	for _, id := range m.openIDs() {
		delete(m.open, id)
		m.apply(m.tab.CloseSession(id, false, m.now), "CloseSession")
	}
	for _, o := range m.ops {
		if o.ready && !o.done {
			o.done = true
			if o.op.Kind == OpWrite {
				if d, eff := m.tab.Done(o.op, true, time.Second, m.now); d != 0 || !eff.empty() {
					m.fail("drain: Done = %v, %+v", d, eff)
				}
			} else if eff := m.tab.DoneAcquire(o.op, m.tokens.next(), time.Second, m.now); !eff.empty() {
				m.fail("drain: DoneAcquire = %+v", eff)
			}
		}
	}
	m.now = m.now.Add(time.Hour)
	m.apply(m.tab.Tick(m.now), "Tick")
	checkInvariants(m.t, m.tab)
	for _, o := range m.ops {
		if o.pending() {
			m.fail("drain: op on %s still pending: %+v", o.op.Key, *o)
		}
	}
	if m.tab.index.n != 0 || len(m.tab.sessions) != 0 || len(m.tab.rheap)+len(m.tab.leases) != 0 || len(m.tab.deadlines) != 0 {
		m.fail("drain: %d keys, %d sessions, %d leases, %d deadlines left",
			m.tab.index.n, len(m.tab.sessions), len(m.tab.rheap)+len(m.tab.leases), len(m.tab.deadlines))
	}
	st := m.tab.Stats()
	if st.Leases != 0 || st.WriteLeases != 0 || st.WritesWaiting != 0 || st.Sessions != 0 {
		m.fail("drain: Stats %+v", st)
	}
	if st.InvalidationsAcked+st.InvalidationsExpired > st.InvalidationsSent {
		m.fail("drain: more invalidations answered than sent: %+v", st)
	}
}

func effString(e Effects) string {
	if e.empty() {
		return ""
	}
	var b strings.Builder
	for _, n := range e.Invalidate {
		fmt.Fprintf(&b, " inval(%d,%s)", n.Session, n.Key)
	}
	for _, n := range e.Recall {
		fmt.Fprintf(&b, " recall(%d,%s,%d)", n.Session, n.Key, n.Token)
	}
	for _, op := range e.Ready {
		fmt.Fprintf(&b, " ready(%s %s by %d)", kindName(op.Kind), op.Key, op.Session)
	}
	for _, op := range e.Abandoned {
		fmt.Fprintf(&b, " abandoned(%s %s by %d)", kindName(op.Kind), op.Key, op.Session)
	}
	return "->" + b.String()
}

func deadlineString(op *Op) string {
	if op.Deadline.IsZero() {
		return "none"
	}
	return fmt.Sprintf("t0%+v", op.Deadline.Sub(t0))
}

// TestRandomizedHolderMap runs the randomized model with keys that index
// their holders by session from the second holder on (keyState.bySession),
// which otherwise only keys with more than holderMapAt holders do.
func TestRandomizedHolderMap(t *testing.T) {
	defer func(n int32) { holderMapAt = n }(holderMapAt)
	holderMapAt = 1
	seeds, steps := 200, 400
	if testing.Short() {
		seeds, steps = 50, 200
	}
	for seed := range uint64(seeds) {
		runModel(t, seed, steps)
		if t.Failed() {
			return
		}
	}
}
