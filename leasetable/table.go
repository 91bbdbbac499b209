// Package leasetable is the lease state machine of leased: read leases,
// pending writes and the invalidations they need, and exclusive write leases
// with fencing tokens.
//
// It does no I/O, owns no timers and starts no goroutines. Every method takes
// the current time (from a monotonic clock) and returns decisions: the
// invalidations and recalls to send, the operations that may now commit, the
// operations abandoned. Package core owns the one Table of a server, guards
// it with one mutex, carries out the decisions, and keeps one timer for
// NextDeadline. A Table is not safe for concurrent use.
package leasetable

import (
	"container/heap"
	"errors"
	"slices"
	"time"
)

// Errors returned by the Table.
var (
	// ErrFenced: a write carried a fencing token that is not the token of a
	// live write lease on its key that its session may use (see
	// Table.Submit). A token another client holds is refused the same way
	// as one never granted, so that a guess learns nothing.
	ErrFenced = errors.New("fencing token is not the live write lease's token")
	// ErrNotFound: the write lease to release is not held with that token
	// by a session that may use it.
	ErrNotFound = errors.New("no such write lease")
	// ErrUnknownSession: the session was never added, or has been closed.
	ErrUnknownSession = errors.New("unknown session")
	// ErrDuplicate: the op was already submitted.
	ErrDuplicate = errors.New("operation already submitted")
	// ErrWriteLeaseLimit: an acquisition by a session that holds
	// Config.MaxWriteLeasesPerSession write leases already.
	ErrWriteLeaseLimit = errors.New("the session holds its maximum of write leases")
	// ErrLocked: an acquisition of mode Try found the key's write lease
	// held by another client, or other acquisitions waiting for it.
	ErrLocked = errors.New("the key is locked")
)

// Mode says how an acquisition (OpAcquire) treats the key's write lease
// if another client holds it (DESIGN §5.1).
type Mode uint8

// Modes of an acquisition.
const (
	// Recall asks the holder to release, as a conflicting write does, and
	// waits for it to, or for its term to run out.
	Recall Mode = iota
	// Wait waits in line, first in first out, until the holder releases
	// or its lease ends; it never recalls.
	Wait
	// Try fails at once with ErrLocked if the key is held by another
	// client or acquisitions wait for it; otherwise it is Recall.
	Try
)

// never is the expiry of a write lease bound to a TTL lease: it has no
// term, and ends only when it is released or ended (EndLock).
var never = time.Unix(1<<62, 0)

// SessionID names a client session (one connection).
type SessionID uint64

// OpKind says what an Op does once it is ready.
type OpKind uint8

// Kinds of Op.
const (
	// OpWrite changes the key's value: Put, Delete or CompareAndSwap.
	OpWrite OpKind = iota + 1
	// OpAcquire acquires the key's exclusive write lease.
	OpAcquire
)

type opState uint8

const (
	opNew       opState = iota
	opQueued            // behind another op on the key
	opWaiting           // at the head, waiting for holders
	opReady             // handed to the server to commit
	opDone              // committed or failed; Done was called
	opAbandoned         // left before it was ready
)

// Op is a write or a write-lease acquisition on one key. The server fills
// the exported input fields and submits it; the Table fills the outputs.
type Op struct {
	Kind    OpKind
	Session SessionID
	Key     string
	Token   uint64 // OpWrite: the writer's fencing token, or 0
	// InOrder marks one op of a request on several keys (a transaction),
	// all of whose ops the server submits at once. Such requests must be
	// queued in the same order on every key they share, so that two of
	// them never wait for each other: an InOrder OpWrite of the write
	// lease's holder is ready at once, as the holder's writes are, only
	// if no other InOrder op is queued on its key; otherwise it waits its
	// turn behind them. Its token is checked when it is submitted, and
	// must be checked again once all the request's ops are ready
	// (Fenced): the lease may have ended meanwhile.
	InOrder bool
	// Mode is an OpAcquire's: what it does if another client holds the
	// key's write lease.
	Mode Mode
	// Lease, on an OpAcquire, binds its write lease to that TTL lease (a
	// lock): it has no term and is never recalled; it lives until it is
	// released or EndLock ends it, and a graceful close of its session
	// leaves it. On an OpWrite with a Token, it is a TTL lease the server
	// has found that the session may use: the session may then write under
	// a write lease bound to it, and takes the lease over, whatever client
	// holds it (mayUse).
	Lease    uint64
	Deadline time.Time // abandon if not ready by then; zero means never
	Data     any       // the server's own; the Table never reads it

	// Started is when the op reached the head of its key's queue and its
	// invalidations and recall were sent. Holders is how many leases it had to
	// invalidate or recall. Both are set by the Table.
	Started time.Time
	Holders int

	state     opState
	heapIndex int // in Table.deadlines, or -1
	holder    bool
	// orphan: a waiting acquisition whose session was lost, kept in its
	// place for its client's next session (CloseSession, AdoptClient).
	orphan bool
}

// Wait reports how long the op waited between Started and now.
func (o *Op) Wait(now time.Time) time.Duration { return now.Sub(o.Started) }

// Notice is an invalidation or a recall to send to a session.
type Notice struct {
	Session SessionID
	Key     string
	Token   uint64 // recalls: the token of the write lease recalled
}

// Effects are the decisions of one Table call, for the server to carry out
// in order after the call.
type Effects struct {
	// Invalidate asks holders to drop a key and acknowledge.
	Invalidate []Notice
	// InvalidatePrefix asks the holders of prefix leases to drop the
	// listing of a prefix (Notice.Key) and acknowledge (RelinquishPrefixes).
	InvalidatePrefix []Notice
	// Recall asks write-lease holders to release.
	Recall []Notice
	// Ready ops may now commit (OpWrite) or be granted (OpAcquire). The server
	// persists them in the order given, then calls Done or DoneAcquire.
	Ready []*Op
	// Abandoned ops left the queue before they were ready: their deadline
	// passed or their session closed. Nothing changed for them.
	Abandoned []*Op
	// EndWrite are write leases that ended (released, relinquished by a
	// graceful close, or expired). Each stays in the Table, refusing its
	// holder's writes and keeping other sessions' leases and ops off its
	// key, until the server has made its end durable and calls
	// EndWriteLease: so no other lease on the key is granted while a
	// restart could still bring the write lease back.
	EndWrite []Notice
}

func (e *Effects) empty() bool {
	return len(e.Invalidate) == 0 && len(e.InvalidatePrefix) == 0 && len(e.Recall) == 0 && len(e.Ready) == 0 && len(e.Abandoned) == 0 && len(e.EndWrite) == 0
}

// Config sets the Table's parameters. The zero value is valid.
type Config struct {
	// Epsilon is the clock allowance ε: the Table keeps a lease of term t live
	// for t + ε after it granted it. Zero means no allowance.
	Epsilon time.Duration
	// MaxLeasesPerSession caps the read leases one session holds at once:
	// past it, Grant gives the session no new lease (see AtLeaseLimit).
	// Zero means no cap.
	MaxLeasesPerSession int
	// MaxWriteLeasesPerSession caps the write leases one session holds at
	// once: past it, Submit refuses its acquisitions of other keys with
	// ErrWriteLeaseLimit. Zero means no cap.
	MaxWriteLeasesPerSession int
	// MaxLeases caps the read leases of all sessions together: past it,
	// Grant gives no session a new lease (see AtLeaseLimit). Zero means no
	// cap. The cap bounds the Table's storage too, which never shrinks:
	// after a burst it keeps about 85 bytes for each read lease of the
	// peak (records, key index and expiry heap; see storage.go), reused by
	// later leases.
	MaxLeases int
	// HotPrefixWrites is how many writes starting under a prefix within
	// its term make it hot: no lease on it for a term after the last
	// (GrantPrefix). Zero means 2: a prefix written about once a term or
	// more; a negative value, never.
	HotPrefixWrites int
	// UnsafeNoPrefixRecall grants prefix leases but never invalidates
	// nor waits for them: the negative control of the linearizability
	// tests (core.Config.UnsafeNoPrefixRecall). Never set it otherwise.
	UnsafeNoPrefixRecall bool
	// UnsafeLockSteal lets an acquisition at the head of its key's queue
	// be granted over a write lease bound to a TTL lease that another
	// session holds, which ends: the negative control of the lock checks
	// of the linearizability tests (core.Config.UnsafeLockSteal). Never
	// set it otherwise.
	UnsafeLockSteal bool
	// Unlisted is a prefix of keys that no listing holds (the server's
	// lock records): ops and write leases on them leave prefix leases
	// alone. Empty: none.
	Unlisted string
}

// Stats are the Table's counters. The Table keeps the gauges (Sessions to
// WritesWaiting) as they change; Keys is the size of its key index, and
// StorageBytes what its flat storage holds.
type Stats struct {
	Sessions int // open sessions
	Keys     int // keys the Table tracks: with a lease, a write lease or an op
	// StorageBytes is the memory of the Table's flat storage (read-lease
	// and key records, names, the key index and the expiry heap), on the
	// Go heap or mapped outside it (see storage.go). It keeps its peak.
	StorageBytes         int
	Leases               int    // outstanding read leases, unexpired
	PrefixLeases         int    // outstanding prefix leases, unexpired (prefix.go)
	WriteLeases          int    // outstanding write leases
	WritesWaiting        int    // ops queued or waiting for holders
	InvalidationsSent    uint64 // read leases asked to be dropped
	InvalidationsAcked   uint64 // of those, relinquished by their holder
	InvalidationsExpired uint64 // of those, expired instead
	// InvalidationsCancelled: of those, neither acknowledged nor expired:
	// the write that sent it was abandoned and its holder was granted the
	// key afresh, or AdoptSession merged the lease into its client's own,
	// invalidated too. Sent = acknowledged + expired + cancelled + those
	// still outstanding.
	InvalidationsCancelled uint64
	Recalls                uint64 // write leases recalled
	Renewed                uint64 // keys a renewal gave a term, whether or not it lengthened their lease
}

// lease is a read lease or a write lease of one session on one key.
// lease is a write lease of one session on one key. (Read leases are
// readLease records: see storage.go.)
type lease struct {
	key       *keyState
	session   *session
	expiry    time.Time
	heapIndex int
	token     uint64
	client    uint64 // the holder's client identity (0: none); see mayUse
	recalled  bool   // a recall was sent
	ending    bool   // ended, waiting for EndWriteLease
	bound     bool   // bound to a TTL lease: no term, never recalled (Op.Lease)
	ttl       uint64 // the TTL lease it is bound to, if bound
	counted   bool   // counted in Stats.WriteLeases (pushWrite)
}

// keyState is what a key needs besides its read holders: its write lease,
// its ops, and the map of a key with many holders. See storage.go.
type keyState struct {
	name   string
	ki     int32  // its keyRec
	wlease *lease // the write lease, if any
	queue  []*Op  // waiting ops, FIFO; queue[0] is the head
	// inflight counts ops handed out as Ready that are not Done yet: the head
	// op once ready, and writes of the write-lease holder, which bypass the
	// queue.
	inflight int
	blocked  bool // the head is ready but for the write barrier
	// takeover are writes of a client that took the write lease over from
	// another (mayUse by a TTL lease): they wait, outside the queue, for
	// the read lease the earlier holder's session kept on the key.
	takeover []*Op
	// bySession finds the key's read leases by session slot once it has
	// more than holderMapAt of them; nil otherwise, and once it has none.
	bySession map[int32]int32
}

// queuedInOrder reports whether an InOrder op waits in k's queue.
func (k *keyState) queuedInOrder() bool {
	for _, op := range k.queue {
		if op.InOrder {
			return true
		}
	}
	return false
}

func (k *keyState) idle() bool {
	return k.wlease == nil && len(k.queue) == 0 && len(k.takeover) == 0 && k.inflight == 0 && k.bySession == nil
}

type session struct {
	id     SessionID
	slot   int32 // in Table.slots
	reads  int32 // the first of its read leases, or noLease
	nreads int   // how many read and prefix leases it holds
	// prefixes are its prefix leases, by prefix (prefix.go); nil until
	// it has one.
	prefixes map[string]*prefixLease
	wrlses   map[string]*lease // write leases by key
	ops      map[*Op]struct{}  // ops queued or waiting
	closed   bool              // closed without relinquishing; kept until its leases expire
	client   uint64            // the client identity it gave (SetClient); 0: none
}

// RestoredSession holds the write leases that RestoreWriteLease brings back
// from an earlier run. It is never open: no client speaks for it until a
// session of the lease's client presents its token, and then the lease
// moves to that session.
const RestoredSession SessionID = 0

// Table is the lease state machine. See the package comment.
type Table struct {
	eps       time.Duration
	maxLeases int    // Config.MaxLeasesPerSession; 0: no cap
	maxTotal  int    // Config.MaxLeases; 0: no cap
	maxWrite  int    // Config.MaxWriteLeasesPerSession; 0: no cap
	noRecall  bool   // Config.UnsafeNoPrefixRecall
	unlisted  string // Config.Unlisted
	steal     bool   // Config.UnsafeLockSteal
	hotWrites int    // Config.HotPrefixWrites, 2 for 0

	// Read leases and keys; see storage.go, and index.go for the key index.
	base     time.Time // read-lease expiries count from it
	based    bool
	mem      *offHeap
	names    nameArena
	exts     pool[keyState] // by keyRec.ext
	reads    slab[readLease]
	freeRead int32 // the first free read-lease record, or noLease
	recs     slab[keyRec]
	freeRec  int32 // the first free key record, or noLease
	index    keyIndex
	rheap    []int32 // read leases by expiry
	sessions map[SessionID]*session
	slots    pool[session] // sessions by slot
	// byClient maps each client identity to the session of that client
	// that AdoptClient adopted into last (or that SetClient saw first),
	// open or closed, while the Table tracks it.
	byClient map[uint64]*session

	leases    leaseHeap // write leases by expiry
	deadlines opHeap
	barrier   time.Time
	blocked   []*keyState // keys whose head is held only by the barrier
	stats     Stats

	// Prefix leases (prefix.go): the prefixes with leases, or written
	// lately; their leases by expiry; those to forget once idle; and how
	// many ops and write leases are pending under each prefix.
	// delays are the keys under a lock delay, and when it ends
	// (DelayLock): acquisitions of them wait until then.
	delays map[string]time.Time

	prefixes     map[string]*prefixState
	pheap        timeHeap[*prefixLease]
	cooling      []*prefixState
	pendingUnder map[string]int32
}

// New returns an empty Table.
func New(cfg Config) *Table {
	t := &Table{
		eps:       cfg.Epsilon,
		maxLeases: cfg.MaxLeasesPerSession,
		maxTotal:  cfg.MaxLeases,
		maxWrite:  cfg.MaxWriteLeasesPerSession,
		noRecall:  cfg.UnsafeNoPrefixRecall,
		unlisted:  cfg.Unlisted,
		steal:     cfg.UnsafeLockSteal,
		hotWrites: cfg.HotPrefixWrites,
		freeRead:  noLease,
		freeRec:   noLease,
		sessions:  make(map[SessionID]*session),
		byClient:  make(map[uint64]*session),
		delays:    make(map[string]time.Time),

		prefixes:     make(map[string]*prefixState),
		pendingUnder: make(map[string]int32),
	}
	if t.hotWrites == 0 {
		t.hotWrites = 2
	}
	t.mem = newOffHeap()
	return t
}

// SetWriteBarrier holds every op until t: none becomes ready before it. A
// restarted server sets it to the time when no lease granted before the
// restart can still be live. Reads and grants are not affected.
func (t *Table) SetWriteBarrier(at time.Time) { t.barrier = at }

// LatestExpiry returns the time until which the last of the outstanding
// read and write leases is live (ε included), or the zero time if there is
// none. It walks every lease: it is for shutdown, not for a hot path.
func (t *Table) LatestExpiry() time.Time {
	var latest time.Time
	for _, li := range t.rheap {
		if e := t.time(t.reads.at(li).expiry); e.After(latest) {
			latest = e
		}
	}
	for _, l := range t.leases {
		if l.expiry.After(latest) {
			latest = l.expiry
		}
	}
	for _, l := range t.pheap {
		if l.expiry.After(latest) {
			latest = l.expiry
		}
	}
	return latest
}

// Stats returns the Table's counters. It costs the same however many
// sessions and leases the Table holds: the counters are kept as they
// change, so that a flood of stats requests does not hold up the callers
// that wait for the Table's owner's lock.
func (t *Table) Stats() Stats {
	s := t.stats
	s.Keys = t.index.n
	s.StorageBytes = t.mem.used
	return s
}

// pushWrite puts write lease l in the expiry heap and counts it (Stats).
// A bound one has no expiry, and stays out of the heap.
func (t *Table) pushWrite(l *lease) {
	l.counted = true
	t.stats.WriteLeases++
	if l.bound {
		l.heapIndex = -1
		return
	}
	heap.Push(&t.leases, l)
}

// removeWrite takes write lease l out of the expiry heap, if it is there,
// and stops counting it. A write lease leaves the heap when it ends
// (Effects.EndWrite).
func (t *Table) removeWrite(l *lease) {
	if !l.counted {
		return
	}
	l.counted = false
	t.stats.WriteLeases--
	if l.heapIndex >= 0 {
		heap.Remove(&t.leases, l.heapIndex)
	}
}

// newSession files a session with a slot of its own.
func (t *Table) newSession(id SessionID, closed bool) *session {
	s := &session{id: id, reads: noLease, wrlses: make(map[string]*lease), ops: make(map[*Op]struct{}), closed: closed}
	s.slot = t.slots.add(s)
	t.sessions[id] = s
	return s
}

// AddSession registers a session. Adding an open session again is a no-op.
func (t *Table) AddSession(id SessionID) {
	if s, ok := t.sessions[id]; ok && !s.closed {
		return
	}
	t.newSession(id, false)
	t.stats.Sessions++
}

// SetClient records the client identity that open session id gave (0:
// none). The write leases the session is granted from then on record it,
// and a session of the same client may take them over (see Submit), or
// adopt all of the session's leases once it is the client's latest
// (AdoptClient). The caller sets it once, before the session submits
// anything.
func (t *Table) SetClient(id SessionID, client uint64) {
	s := t.openSession(id)
	if s == nil {
		return
	}
	s.client = client
	if _, ok := t.byClient[client]; !ok && client != 0 {
		t.byClient[client] = s
	}
}

// CloseSession ends a session. Its ops that are not ready yet are abandoned
// (ready ones still finish), but, when it is not a graceful close, the
// waiting acquisitions (mode Wait) of a session with a client identity:
// they keep their place in line for the client's next session, which
// takes each over when it asks again for the same key (Submit,
// takePlace); one that reaches the head before, or that the client does
// not ask for again, is granted to nobody, as its session is closed. If relinquish is true (a graceful
// close), all of its read leases are freed at once and its write leases
// end (see Effects.EndWrite), but those bound to a TTL lease; otherwise
// they stay live until they expire, because the client may still trust
// its cache.
func (t *Table) CloseSession(id SessionID, relinquish bool, now time.Time) Effects {
	var eff Effects
	s := t.sessions[id]
	if s == nil || s.closed {
		return eff
	}
	kept := func(op *Op) bool {
		if !relinquish && s.client != 0 && op.Kind == OpAcquire && op.Mode == Wait && !op.holder {
			op.orphan = true
			return true
		}
		return false
	}
	// Abandoning a head op starts the next op on its key, which may be ready
	// at once. So abandon the ops behind others first: then that next op is
	// never one of this session's.
	for op := range s.ops {
		if q := t.extOf(op.Key).queue; (len(q) == 0 || q[0] != op) && !kept(op) {
			t.abandon(op, now, &eff)
			eff.Abandoned = append(eff.Abandoned, op)
		}
	}
	for op := range s.ops {
		if !kept(op) {
			t.abandon(op, now, &eff)
			eff.Abandoned = append(eff.Abandoned, op)
		}
	}
	s.closed = true
	t.stats.Sessions--
	if relinquish {
		for li := s.reads; li != noLease; {
			next := t.reads.at(li).sessNext
			t.dropRead(li, now, &eff, false)
			li = next
		}
		for _, l := range s.wrlses {
			if !l.bound { // a lock lives as long as its TTL lease
				t.endWriteLease(l, &eff)
			}
		}
		for _, l := range s.prefixes {
			t.dropPrefix(l, now, &eff, false)
		}
	}
	t.gcSession(s)
	return eff
}

// RestoreWriteLease brings back a write lease that an earlier run or
// leader granted to a session of client (0: none) and had not ended, held
// by RestoredSession until expiry. Its key gets no other lease while it
// lasts. A session of the same client that presents its token, in a
// fenced write or a release, takes it over: its writes need not wait for
// the write barrier, because no other session can hold a lease on the
// key. A lease restored with client 0 is taken over by nobody: it ends at
// expiry. One bound to TTL lease ttl (not 0, Op.Lease) has no expiry: it
// ends when EndLock ends it, or its holder releases it.
func (t *Table) RestoreWriteLease(key string, token, client uint64, expiry time.Time, ttl uint64) {
	s := t.closedSession(RestoredSession)
	k := t.richKey(key)
	if old := k.wlease; old != nil {
		delete(old.session.wrlses, key)
		t.removeWrite(old)
	} else {
		t.pend(key, 1) // its holder may write at once: no listing under it is leased
	}
	if ttl != 0 {
		expiry = never
	}
	l := &lease{key: k, session: s, expiry: expiry, token: token, client: client, bound: ttl != 0, ttl: ttl}
	k.wlease = l
	s.wrlses[k.name] = l
	t.pushWrite(l)
}

// RestoreReadLease brings back a read lease that another node granted
// before it handed its leases over (DESIGN §13), held until expiry by the
// session holder, which is closed: nobody speaks for it until AdoptSession
// gives its leases to the session of the same client. A write on key
// invalidates the lease as any other, and waits for it.
func (t *Table) RestoreReadLease(holder SessionID, key string, expiry time.Time) {
	s := t.closedSession(holder)
	ki, ok := t.findKey(key)
	if ok {
		if li := t.findRead(s, ki); li != noLease {
			l := t.reads.at(li)
			if e := t.ns(expiry); e > l.expiry {
				l.expiry = e
				t.rfix(li)
			}
			return
		}
	} else {
		ki = t.newKey(key)
	}
	t.addRead(s, ki, t.ns(expiry))
}

// AdoptSession gives the read leases of the closed session from, which
// RestoreReadLease made, to the open session to: its client came back,
// and now answers for them. Leases a write has invalidated meanwhile are
// invalidated again, on to. It does nothing if from is not closed or to
// is not open.
func (t *Table) AdoptSession(from, to SessionID, now time.Time) Effects {
	var eff Effects
	f, s := t.sessions[from], t.openSession(to)
	if f == nil || !f.closed || s == nil || f == s {
		return eff
	}
	t.mergeReads(f, s, &eff)
	t.mergePrefixes(f, s, &eff)
	t.gcSession(f)
	return eff
}

// AdoptClient gives the open session to, whose client identity SetClient
// recorded, the leases of the session of the same client it comes after:
// the client lost its connection and came back on a new one (DESIGN §6).
// That earlier session may be closed, or still open if the server has not
// noticed the loss yet; an open one is closed first, as CloseSession
// without relinquishing would close it (its ops not yet ready are
// abandoned), and returned as superseded, for the caller to close its
// connection: the client speaks through to alone from now on. Its read
// leases and its write leases, but those that ended, move to to, which
// renews and releases them. A lease that a write has invalidated, or a
// write lease recalled, is invalidated or recalled again, on to: the
// notice to the earlier session may have been lost. A session with no
// client identity adopts nothing. The write leases restored for the same
// client (RestoreWriteLease, after a restart or a failover) move to to as
// well, recalled again if a writer waits for them, so that the recall
// reaches their holder at once rather than at its next renewal or write.
// The caller calls it once, after SetClient and before to submits
// anything.
func (t *Table) AdoptClient(to SessionID, now time.Time) (eff Effects, superseded SessionID) {
	s := t.openSession(to)
	if s == nil || s.client == 0 {
		return eff, 0
	}
	if r := t.sessions[RestoredSession]; r != nil {
		t.adoptWrites(r, s, &eff)
	}
	p := t.byClient[s.client]
	t.byClient[s.client] = s
	if p == nil || p == s {
		return eff, 0
	}
	if !p.closed {
		eff = t.CloseSession(p.id, false, now)
		superseded = p.id
	}
	t.mergeReads(p, s, &eff)
	t.mergePrefixes(p, s, &eff)
	t.adoptWrites(p, s, &eff)
	t.gcSession(p) // kept while it holds waiting acquisitions (takePlace)
	return eff, superseded
}

// adoptWrites moves to open session s the write leases of f that s may use
// (mayUse: its client's), but those that ended, which wait in place for
// EndWriteLease, and recalls again, on s, those recalled: the notice to f
// may have been lost (AdoptClient).
func (t *Table) adoptWrites(f, s *session, eff *Effects) {
	for _, l := range f.wrlses {
		if l.ending || !mayUse(l, s, 0) {
			continue
		}
		t.adopt(l, s)
		if l.recalled {
			eff.Recall = append(eff.Recall, Notice{Session: s.id, Key: l.key.name, Token: l.token})
		}
	}
}

// mergeReads moves the read leases of closed session f to open session s
// (AdoptSession, AdoptClient). Where s holds a lease on the key already,
// the two become one, with the later expiry. An invalidation of f's lease
// carries on in s's, and is sent again to s.
func (t *Table) mergeReads(f, s *session, eff *Effects) {
	for li := f.reads; li != noLease; {
		l := t.reads.at(li)
		next := l.sessNext
		ki := l.key
		if mi := t.findRead(s, ki); mi != noLease {
			// to holds a lease of its own: keep the later expiry on it.
			mine := t.reads.at(mi)
			if l.expiry > mine.expiry {
				mine.expiry = l.expiry
				t.rfix(mi)
			}
			// An invalidation of from's lease carries on in to's; if to's
			// was asked already, from's ends unanswered.
			if l.invalidated && mine.invalidated {
				t.stats.InvalidationsCancelled++
			}
			mine.invalidated = mine.invalidated || l.invalidated
			t.removeRead(li)
			if mine.invalidated {
				eff.Invalidate = append(eff.Invalidate, Notice{Session: s.id, Key: t.keyString(ki)})
			}
		} else {
			t.moveRead(li, s)
			if l.invalidated {
				eff.Invalidate = append(eff.Invalidate, Notice{Session: s.id, Key: t.keyString(ki)})
			}
		}
		li = next
	}
}

// LeaseInfo describes one live lease (Leases).
type LeaseInfo struct {
	Session SessionID
	Key     string
	Expiry  time.Time
	Write   bool
	Prefix  bool   // a prefix lease: Key is its prefix
	Token   uint64 // a write lease's
	Client  uint64 // a write lease's: its holder's client identity (0: none)
}

// Leases returns every lease in the table, for a handoff to another node.
// It walks every lease: it is not for a hot path.
func (t *Table) Leases() []LeaseInfo {
	out := make([]LeaseInfo, 0, len(t.rheap)+len(t.leases)+len(t.pheap))
	for _, li := range t.rheap {
		l := t.reads.at(li)
		out = append(out, LeaseInfo{Session: t.slots.items[l.session].id, Key: t.keyString(l.key), Expiry: t.time(l.expiry)})
	}
	for _, l := range t.leases {
		if l.ending {
			continue
		}
		out = append(out, LeaseInfo{Session: l.session.id, Key: l.key.name, Expiry: l.expiry, Write: true, Token: l.token, Client: l.client})
	}
	for _, l := range t.pheap {
		out = append(out, LeaseInfo{Session: l.session.id, Key: l.ps.name, Expiry: l.expiry, Prefix: true})
	}
	return out
}

// closedSession returns session id, made closed if it does not exist: the
// holder of leases restored from an earlier run or leader, for which no
// client speaks.
func (t *Table) closedSession(id SessionID) *session {
	s := t.sessions[id]
	if s == nil {
		s = t.newSession(id, true)
	}
	return s
}

// mayUse reports whether session s may write under write lease l, or
// release it, with its token: s holds it, or s is a session of the client
// it was granted to, which came back on a new session (after a lost
// connection, a restart or a failover), or l is bound to TTL lease ttl
// (not 0), which the server has found that s may use: whoever may use a
// TTL lease may revoke it, which ends its locks anyway. A fencing token is
// a fence, not a credential: tokens come from one counter, so another
// client may guess a live one, and must not write under it.
func mayUse(l *lease, s *session, ttl uint64) bool {
	return l.session == s || (l.client != 0 && l.client == s.client) || (ttl != 0 && l.ttl == ttl)
}

// adopt moves write lease l to s, which presented its token and may use it
// (mayUse): s answers for it from now on, renews and releases it.
func (t *Table) adopt(l *lease, s *session) {
	if l.session == s {
		return
	}
	old := l.session
	delete(old.wrlses, l.key.name)
	t.gcSession(old)
	l.session = s
	s.wrlses[l.key.name] = l
}

// gcSession forgets a closed session once it holds nothing. Its slot is
// free then: no read lease names it.
func (t *Table) gcSession(s *session) {
	if s.closed && s.nreads == 0 && len(s.wrlses) == 0 && len(s.ops) == 0 && t.slots.items[s.slot] == s {
		if t.sessions[s.id] == s {
			delete(t.sessions, s.id)
		}
		if t.byClient[s.client] == s {
			delete(t.byClient, s.client)
		}
		t.slots.remove(s.slot)
	}
}

func (t *Table) openSession(id SessionID) *session {
	s := t.sessions[id]
	if s == nil || s.closed {
		return nil
	}
	return s
}

// Grant gives session a read lease on key for term, and returns the term
// granted: term, or 0 if the key must not be cached now because an op is
// pending on it, another session holds its write lease, the session is
// unknown, or term <= 0, or if the session holds no lease on key and
// already holds Config.MaxLeasesPerSession, or all sessions together hold
// Config.MaxLeases. A session that already holds a
// lease on the key has it extended.
func (t *Table) Grant(id SessionID, key string, term time.Duration, now time.Time) time.Duration {
	s := t.openSession(id)
	if s == nil || term <= 0 {
		return 0
	}
	ki, ok := t.findKey(key)
	var k *keyState
	li := noLease
	if ok {
		k = t.ext(t.recs.at(ki))
		li = t.findRead(s, ki)
	}
	if !t.cacheable(k, s) || t.full(s, li) {
		return 0
	}
	expiry := t.ns(now.Add(term + t.eps))
	if li != noLease {
		// An invalidated lease whose op was abandoned: the holder dropped or
		// will drop the entry, so the fresh grant makes it valid again.
		l := t.reads.at(li)
		if l.invalidated {
			l.invalidated = false
			t.stats.InvalidationsCancelled++
		}
		if expiry > l.expiry {
			l.expiry = expiry
			t.rfix(li)
		}
		return term
	}
	if !ok {
		ki = t.newKey(key)
	}
	t.addRead(s, ki, expiry)
	return term
}

// AtLeaseLimit reports whether Grant would refuse session id a lease on key
// for term only because the session holds Config.MaxLeasesPerSession read
// leases already, or all sessions hold Config.MaxLeases: a caller that must
// tell the client so asks before Grant (and Stats tells which cap it met).
func (t *Table) AtLeaseLimit(id SessionID, key string, term time.Duration) bool {
	s := t.openSession(id)
	if s == nil || term <= 0 {
		return false
	}
	ki, ok := t.findKey(key)
	if !ok {
		return t.full(s, noLease)
	}
	return t.full(s, t.findRead(s, ki)) && t.cacheable(t.ext(t.recs.at(ki)), s)
}

// full reports whether session s may take no new read lease, given li, its
// lease on the key it asks for (noLease: none).
func (t *Table) full(s *session, li int32) bool {
	return li == noLease &&
		((t.maxLeases > 0 && s.nreads >= t.maxLeases) || (t.maxTotal > 0 && t.stats.Leases+t.stats.PrefixLeases >= t.maxTotal))
}

// cacheable reports whether session s may lease a key with keyState k (nil:
// a key the Table does not track, or that has only read leases) now: no op
// is pending on it and no other session holds its write lease. inflight
// counts the write-lease holder's writes too, which bypass the queue and
// may outlive the write lease itself.
func (t *Table) cacheable(k *keyState, s *session) bool {
	return k == nil || (len(k.queue) == 0 && k.inflight == 0 && (k.wlease == nil || k.wlease.session == s))
}

// Renew extends the session's leases on keys. terms[i] is the term to grant
// keys[i]; on return it holds the term granted, or 0 if that lease was not
// renewed: not held, already invalidated or recalled, or an op is pending
// on the key. A write lease on the key is renewed too, unless readOnly[i]
// (readOnly nil: none is). keys and terms have the same length, and
// readOnly too unless it is nil.
func (t *Table) Renew(id SessionID, keys []string, terms []time.Duration, readOnly []bool, now time.Time) {
	s := t.openSession(id)
	for i, key := range keys {
		term := terms[i]
		terms[i] = 0
		if s == nil || term <= 0 {
			continue
		}
		expiry := now.Add(term + t.eps)
		if wl := s.wrlses[key]; wl != nil && !wl.recalled && !wl.ending && (readOnly == nil || !readOnly[i]) {
			if expiry.After(wl.expiry) {
				wl.expiry = expiry
				heap.Fix(&t.leases, wl.heapIndex)
			}
			terms[i] = term
		}
		ki, ok := t.findKey(key)
		if !ok {
			continue
		}
		li := t.findRead(s, ki)
		if li == noLease {
			continue
		}
		l := t.reads.at(li)
		if l.invalidated || !t.cacheable(t.ext(t.recs.at(ki)), s) {
			continue
		}
		if e := t.ns(expiry); e > l.expiry {
			l.expiry = e
			t.rfix(li)
		}
		terms[i] = term
	}
	for _, term := range terms {
		if term > 0 {
			t.stats.Renewed++
		}
	}
}

// Relinquish frees the session's read leases on keys: after an eviction, or
// as the acknowledgement of an invalidation. Keys it holds no lease on are
// ignored. Ops waiting for those leases may become ready.
func (t *Table) Relinquish(id SessionID, keys []string, now time.Time) Effects {
	var eff Effects
	s := t.sessions[id]
	if s == nil {
		return eff
	}
	for _, key := range keys {
		if li := t.sessionRead(s, key); li != noLease {
			t.dropRead(li, now, &eff, false)
		}
	}
	t.gcSession(s)
	return eff
}

// ReleaseWriteLease ends the session's write lease on key if it was granted
// with token, or if the session may take it over (see Submit), and returns
// ErrNotFound otherwise. The lease ends at once for its holder; for
// everyone else it ends when the server calls EndWriteLease (see
// Effects.EndWrite).
//
// With ttl not 0, a TTL lease the server has found the session may use,
// the session may release a write lease bound to it (mayUse).
func (t *Table) ReleaseWriteLease(id SessionID, key string, token, ttl uint64, now time.Time) (Effects, error) {
	var eff Effects
	s := t.sessions[id]
	if s == nil {
		return eff, ErrUnknownSession
	}
	l := s.wrlses[key]
	if k := t.extOf(key); l == nil && !s.closed && k != nil && k.wlease != nil && k.wlease.token == token && !k.wlease.ending && mayUse(k.wlease, s, ttl) {
		l = k.wlease
		t.adopt(l, s)
	}
	if l == nil || l.token != token || l.session != s || l.ending {
		return eff, ErrNotFound
	}
	t.endWriteLease(l, &eff)
	return eff, nil
}

// endWriteLease ends write lease l: it no longer takes writes or renewals,
// and waits in place for EndWriteLease.
func (t *Table) endWriteLease(l *lease, eff *Effects) {
	if l.ending {
		return
	}
	l.ending, l.recalled = true, true
	t.removeWrite(l)
	eff.EndWrite = append(eff.EndWrite, Notice{Session: l.session.id, Key: l.key.name, Token: l.token})
}

// EndWriteLease removes the ended write lease on key with token, once the
// server has made its end durable. Ops waiting for it may become ready. It
// does nothing if there is no such ended lease.
func (t *Table) EndWriteLease(key string, token uint64, now time.Time) Effects {
	var eff Effects
	k := t.extOf(key)
	if k == nil || k.wlease == nil || k.wlease.token != token || !k.wlease.ending {
		return eff
	}
	s := k.wlease.session
	t.dropWrite(k.wlease, now, &eff)
	t.gcSession(s)
	return eff
}

// EndLock ends and removes the write lease on key with token at once: its
// end is durable already, applied with the revocation of the TTL lease it
// was bound to (store.OpRevokeTTL). Ops waiting for it may become ready.
// It does nothing if there is no such lease.
func (t *Table) EndLock(key string, token uint64, now time.Time) Effects {
	var eff Effects
	k := t.extOf(key)
	if k == nil || k.wlease == nil || k.wlease.token != token {
		return eff
	}
	l := k.wlease
	l.ending, l.recalled = true, true
	t.removeWrite(l)
	s := l.session
	t.dropWrite(l, now, &eff)
	t.gcSession(s)
	return eff
}

// DelayLock makes acquisitions of key wait until until (a lock delay,
// DESIGN §5.1): a lock on it ended by its TTL lease's expiry. Try
// acquisitions fail with ErrLocked meanwhile; writes are not held.
func (t *Table) DelayLock(key string, until time.Time) {
	if until.After(t.delays[key]) {
		t.delays[key] = until
	}
}

// delayed reports whether acquisitions of key wait for a lock delay at now.
func (t *Table) delayed(key string, now time.Time) bool {
	until, ok := t.delays[key]
	return ok && now.Before(until)
}

// WriteLease returns the token and the holder of the live write lease on key.
func (t *Table) WriteLease(key string) (token uint64, holder SessionID, ok bool) {
	k := t.extOf(key)
	if k == nil || k.wlease == nil {
		return 0, 0, false
	}
	return k.wlease.token, k.wlease.session.id, true
}

// dropRead removes read lease li from its key, its session and the heap,
// and lets the key's head op move on.
func (t *Table) dropRead(li int32, now time.Time, eff *Effects, expired bool) {
	l := t.reads.at(li)
	ki := l.key
	if l.invalidated {
		if expired {
			t.stats.InvalidationsExpired++
		} else {
			t.stats.InvalidationsAcked++
		}
	}
	t.removeRead(li)
	if k := t.ext(t.recs.at(ki)); k != nil {
		t.checkReady(k, now, eff)
	}
	t.gcKey(ki)
}

// dropWrite removes write lease l from its key, its session and the heap,
// and lets the key's head op move on.
func (t *Table) dropWrite(l *lease, now time.Time, eff *Effects) {
	k := l.key
	delete(l.session.wrlses, k.name)
	if k.wlease == l {
		k.wlease = nil
		t.pend(k.name, -1)
	}
	t.removeWrite(l)
	t.checkReady(k, now, eff)
	t.gcKey(k.ki)
}

// Submit hands an op to the Table. A write carrying a fencing token must
// match the live write lease on its key, and come from the session that
// holds it or from a session of the client it was granted to (SetClient;
// the lease then moves to that session); otherwise Submit returns
// ErrFenced and changes nothing. A write by the write lease's holder is
// ready at once: nobody else holds a lease on the key. Any other op joins
// the key's FIFO queue; at the head, it invalidates the read leases of
// other sessions and recalls another session's write lease, and becomes
// ready when all of them are gone.
func (t *Table) Submit(op *Op, now time.Time) (Effects, error) {
	var eff Effects
	s := t.openSession(op.Session)
	if s == nil {
		return eff, ErrUnknownSession
	}
	if op.state != opNew {
		return eff, ErrDuplicate
	}
	op.heapIndex = -1
	if op.Kind == OpAcquire && t.maxWrite > 0 && len(s.wrlses) >= t.maxWrite && s.wrlses[op.Key] == nil {
		return eff, ErrWriteLeaseLimit
	}
	k := t.extOf(op.Key)
	if op.Kind == OpAcquire && op.Mode == Try && (k != nil && t.locked(k, s) || t.delayed(op.Key, now)) {
		return eff, ErrLocked
	}
	if op.Kind == OpAcquire && op.Mode == Wait && k != nil && t.takePlace(k, s, op, now, &eff) {
		return eff, nil
	}
	if op.Kind == OpWrite {
		var wl *lease
		if k != nil {
			wl = k.wlease
		}
		switch {
		case op.Token != 0 && (wl == nil || wl.token != op.Token || wl.ending || !now.Before(wl.expiry) || !mayUse(wl, s, op.Lease)):
			return eff, ErrFenced
		case wl != nil && !wl.ending && (op.Token != 0 || wl.session == s):
			// The holder writes under its lease, without waiting for the
			// write barrier: no other client holds a lease on the key, as
			// none could while the write lease lasted. (Every write lease
			// before the barrier is a restored one.) A session of the
			// holder's client takes the lease over; if it was recalled,
			// the recall went to the session that held it, so it goes
			// again to this one.
			if wl.session != s && wl.recalled {
				eff.Recall = append(eff.Recall, Notice{Session: s.id, Key: k.name, Token: wl.token})
			}
			prev := wl.session
			cross := prev != s && (wl.client == 0 || wl.client != s.client)
			t.adopt(wl, s)
			if cross {
				wl.client = s.client // the earlier holder's client may use it no more
			}
			if cross && t.takeOver(k, prev, op, now, &eff) {
				return eff, nil
			}
			if op.InOrder && k.queuedInOrder() {
				break // queued below, behind the requests before it
			}
			t.pend(op.Key, 1)
			op.holder = true
			op.Started = now
			op.state = opReady
			k.inflight++
			eff.Ready = append(eff.Ready, op)
			return eff, nil
		}
	}
	if k == nil {
		k = t.richKey(op.Key)
	}
	t.pend(op.Key, 1)
	op.state = opQueued
	k.queue = append(k.queue, op)
	s.ops[op] = struct{}{}
	t.stats.WritesWaiting++
	if !op.Deadline.IsZero() {
		heap.Push(&t.deadlines, op)
	}
	if len(k.queue) == 1 {
		t.start(k, now, &eff)
	}
	return eff, nil
}

// takePlace puts op, a waiting acquisition of session s, in the place of
// one kept from a lost session of s's client (CloseSession), if k's queue
// holds one not yet ready: the client asked again for the same key on its
// new session. The kept one is abandoned (Effects.Abandoned). It reports
// whether op took a place.
func (t *Table) takePlace(k *keyState, s *session, op *Op, now time.Time, eff *Effects) bool {
	if s.client == 0 {
		return false
	}
	i := slices.IndexFunc(k.queue, func(o *Op) bool {
		p := t.sessions[o.Session]
		return o.orphan && p != nil && p.closed && p.client == s.client && o.Kind == OpAcquire && (o.state == opQueued || o.state == opWaiting)
	})
	if i < 0 {
		return false
	}
	o := k.queue[i]
	p := t.sessions[o.Session]
	op.state, op.Started, op.Holders, op.heapIndex = o.state, o.Started, o.Holders, -1
	k.queue[i] = op
	delete(p.ops, o)
	t.gcSession(p)
	s.ops[op] = struct{}{}
	if o.heapIndex >= 0 {
		heap.Remove(&t.deadlines, o.heapIndex)
	}
	if !op.Deadline.IsZero() {
		heap.Push(&t.deadlines, op)
	}
	o.state = opAbandoned
	eff.Abandoned = append(eff.Abandoned, o)
	if i == 0 {
		t.checkReady(k, now, eff)
	}
	return true
}

// takeOver holds op, a write of session op.Session, which has just taken
// k's write lease over from session prev of another client (mayUse by a
// TTL lease), until prev's read lease on k is gone: the earlier holder
// cached the key under its lease, and must drop it before a write of
// another client commits. It asks prev to drop it, and reports whether op
// waits (false: prev holds no read lease on k, and op is ready at once as
// any holder's write).
func (t *Table) takeOver(k *keyState, prev *session, op *Op, now time.Time, eff *Effects) bool {
	li := t.findRead(prev, k.ki)
	if li == noLease {
		return false
	}
	if l := t.reads.at(li); !l.invalidated {
		l.invalidated = true
		t.stats.InvalidationsSent++
		eff.Invalidate = append(eff.Invalidate, Notice{Session: prev.id, Key: k.name})
	}
	op.Holders++
	op.holder = true
	op.Started = now
	op.state = opWaiting
	t.pend(op.Key, 1)
	k.takeover = append(k.takeover, op)
	t.sessions[op.Session].ops[op] = struct{}{}
	t.stats.WritesWaiting++
	if !op.Deadline.IsZero() {
		heap.Push(&t.deadlines, op)
	}
	return true
}

// takeoverReady hands out k's takeover writes once no other session holds
// a read lease on k; those whose write lease ended or moved meanwhile are
// abandoned (nothing of them applied).
func (t *Table) takeoverReady(k *keyState, now time.Time, eff *Effects) {
	if len(k.takeover) == 0 {
		return
	}
	op := k.takeover[0]
	if kr := t.recs.at(k.ki); kr.n > 1 || (kr.n == 1 && t.slots.items[t.reads.at(kr.holders).session].id != op.Session) {
		return
	}
	ops := k.takeover
	k.takeover = nil
	for _, op := range ops {
		t.unlinkOp(op)
		if wl := k.wlease; wl == nil || wl.token != op.Token || wl.ending || wl.session.id != op.Session {
			op.state = opAbandoned
			t.pend(op.Key, -1)
			eff.Abandoned = append(eff.Abandoned, op)
			continue
		}
		op.state = opReady
		k.inflight++
		eff.Ready = append(eff.Ready, op)
	}
}

// locked reports whether an acquisition of k by session s must wait for
// another client: k's write lease is held by another (mayUse), or an
// acquisition of another session waits for it.
func (t *Table) locked(k *keyState, s *session) bool {
	if wl := k.wlease; wl != nil && !mayUse(wl, s, 0) {
		return true
	}
	for _, q := range k.queue {
		if q.Kind == OpAcquire && q.Session != s.id {
			return true
		}
	}
	return false
}

// Fenced reports whether op, a ready OpWrite that carries a token (an
// InOrder one), may no longer commit: its token is not that of the live
// write lease on its key, held by its session, now. The lease may have
// been released, have expired or been recalled and ended while op waited.
func (t *Table) Fenced(op *Op, now time.Time) bool {
	if op.Token == 0 {
		return false
	}
	k := t.extOf(op.Key)
	if k == nil || k.wlease == nil {
		return true
	}
	wl := k.wlease
	return wl.token != op.Token || wl.ending || !now.Before(wl.expiry) || wl.session.id != op.Session
}

// start sends the head op's invalidations and recall.
func (t *Table) start(k *keyState, now time.Time, eff *Effects) {
	op := k.queue[0]
	op.state = opWaiting
	op.Started = now
	for li := t.recs.at(k.ki).holders; li != noLease; {
		l := t.reads.at(li)
		next := l.keyNext
		sid := t.slots.items[l.session].id
		if sid == op.Session {
			// The writer's own lease: its library dropped the entry before
			// it sent the op, so there is nobody to ask.
			t.dropRead(li, now, eff, false)
			li = next
			continue
		}
		if !l.invalidated {
			l.invalidated = true
			t.stats.InvalidationsSent++
			eff.Invalidate = append(eff.Invalidate, Notice{Session: sid, Key: k.name})
		}
		op.Holders++
		li = next
	}
	if wl := k.wlease; wl != nil && wl.session.id != op.Session {
		if !wl.recalled && !wl.bound && (op.Kind == OpWrite || op.Mode != Wait) {
			wl.recalled = true
			t.stats.Recalls++
			eff.Recall = append(eff.Recall, Notice{Session: wl.session.id, Key: k.name, Token: wl.token})
		}
		op.Holders++
	}
	t.startPrefixes(op, now, eff)
	t.checkReady(k, now, eff)
}

// checkReady hands out the key's head op if nothing holds it back any
// more, and its takeover writes (takeoverReady).
func (t *Table) checkReady(k *keyState, now time.Time, eff *Effects) {
	t.takeoverReady(k, now, eff)
	if len(k.queue) == 0 {
		return
	}
	op := k.queue[0]
	if op.state != opWaiting || k.inflight > 0 {
		return
	}
	// A session holds one read lease on a key at most: any but the op's
	// own holds the op back.
	if kr := t.recs.at(k.ki); kr.n > 1 || (kr.n == 1 && t.slots.items[t.reads.at(kr.holders).session].id != op.Session) {
		return
	}
	if k.wlease != nil && k.wlease.session.id != op.Session && !(t.steal && op.Kind == OpAcquire && k.wlease.bound) {
		return
	}
	if t.prefixHeld(k, op) {
		return
	}
	if op.Kind == OpAcquire && t.delayed(k.name, now) {
		return // Tick looks again when the delay ends
	}
	if now.Before(t.barrier) {
		if !k.blocked {
			k.blocked = true
			t.blocked = append(t.blocked, k)
		}
		return
	}
	op.state = opReady
	k.inflight++
	t.unlinkOp(op)
	eff.Ready = append(eff.Ready, op)
}

// unlinkOp takes a ready or abandoned op out of its session and the
// deadline heap.
func (t *Table) unlinkOp(op *Op) {
	if s := t.sessions[op.Session]; s != nil {
		delete(s.ops, op)
		t.gcSession(s)
	}
	if op.heapIndex >= 0 {
		heap.Remove(&t.deadlines, op.heapIndex)
	}
	t.stats.WritesWaiting--
}

// Abandon takes an op that is not ready yet out of its queue: its writer
// gave up. It reports false if the op is already ready or finished, in which
// case the server must wait for its commit and report that.
func (t *Table) Abandon(op *Op, now time.Time) (bool, Effects) {
	var eff Effects
	if op.state != opQueued && op.state != opWaiting {
		return false, eff
	}
	t.abandon(op, now, &eff)
	return true, eff
}

func (t *Table) abandon(op *Op, now time.Time, eff *Effects) {
	k := t.extOf(op.Key)
	t.unlinkOp(op)
	op.state = opAbandoned
	t.pend(op.Key, -1)
	if op.holder { // a takeover write (takeOver), outside the queue
		k.takeover = slices.DeleteFunc(k.takeover, func(o *Op) bool { return o == op })
		t.gcKey(k.ki)
		return
	}
	head := k.queue[0] == op
	for i, q := range k.queue {
		if q == op {
			k.queue = append(k.queue[:i], k.queue[i+1:]...)
			break
		}
	}
	if head && len(k.queue) > 0 {
		t.start(k, now, eff)
	}
	t.gcKey(k.ki)
}

// Done finishes a ready OpWrite after the server committed it, or failed to
// (a storage error, a CompareAndSwap mismatch). If committed is true and no
// other op waits on the key, the writer gets a fresh read lease for term,
// which Done returns (0: none). The key's next op starts.
func (t *Table) Done(op *Op, committed bool, term time.Duration, now time.Time) (time.Duration, Effects) {
	var eff Effects
	if op.state != opReady || op.Kind != OpWrite {
		return 0, eff
	}
	k := t.finish(op)
	var granted time.Duration
	if committed && len(k.queue) == 0 {
		granted = t.Grant(op.Session, op.Key, term, now)
	}
	t.next(k, now, &eff)
	return granted, eff
}

// DoneAcquire finishes a ready OpAcquire. If token is not 0, the server has
// persisted it as the key's new fencing token, and the session now holds the
// key's write lease for term. Token 0 means the grant failed. The key's
// next op starts, and recalls the lease at once if it belongs to another
// session.
func (t *Table) DoneAcquire(op *Op, token uint64, term time.Duration, now time.Time) Effects {
	var eff Effects
	if op.state != opReady || op.Kind != OpAcquire {
		return eff
	}
	k := t.finish(op)
	s := t.openSession(op.Session)
	if token != 0 && s != nil {
		if old := k.wlease; old != nil {
			t.dropWrite(old, now, &eff)
			// dropWrite forgets the key if that left it idle; the new
			// lease brings it back.
			k = t.richKey(op.Key)
		}
		l := &lease{key: k, session: s, expiry: now.Add(term + t.eps), token: token, client: s.client, bound: op.Lease != 0, ttl: op.Lease}
		if l.bound {
			l.expiry = never
		}
		k.wlease = l
		t.pend(k.name, 1)
		s.wrlses[k.name] = l
		t.pushWrite(l)
	}
	t.next(k, now, &eff)
	return eff
}

func (t *Table) finish(op *Op) *keyState {
	k := t.extOf(op.Key)
	op.state = opDone
	t.pend(op.Key, -1)
	k.inflight--
	if !op.holder {
		k.queue = k.queue[1:]
	}
	return k
}

func (t *Table) next(k *keyState, now time.Time, eff *Effects) {
	if len(k.queue) > 0 && k.queue[0].state == opQueued {
		t.start(k, now, eff)
	} else {
		t.checkReady(k, now, eff)
	}
	t.gcKey(k.ki)
}

// NextDeadline returns the earliest time at which Tick has something to do:
// a lease expiry, an op deadline, or the end of the write barrier.
func (t *Table) NextDeadline() (time.Time, bool) {
	var next time.Time
	ok := false
	consider := func(at time.Time) {
		if !ok || at.Before(next) {
			next, ok = at, true
		}
	}
	if len(t.rheap) > 0 {
		consider(t.time(t.reads.at(t.rheap[0]).expiry))
	}
	if len(t.leases) > 0 {
		consider(t.leases[0].expiry)
	}
	if len(t.pheap) > 0 {
		consider(t.pheap[0].expiry)
	}
	if len(t.deadlines) > 0 {
		consider(t.deadlines[0].Deadline)
	}
	if len(t.blocked) > 0 {
		consider(t.barrier)
	}
	for _, until := range t.delays {
		consider(until)
	}
	return next, ok
}

// Tick expires the leases whose time has come, abandons the ops whose
// deadline has passed, and lets ops held by the write barrier go once it
// has passed.
func (t *Table) Tick(now time.Time) Effects {
	var eff Effects
	// Expire read and write leases in the order of their expiries.
	at := t.ns(now)
	for {
		read := len(t.rheap) > 0 && t.reads.at(t.rheap[0]).expiry <= at
		write := len(t.leases) > 0 && !now.Before(t.leases[0].expiry)
		if read && write && t.time(t.reads.at(t.rheap[0]).expiry).After(t.leases[0].expiry) {
			read = false
		}
		switch {
		case read:
			li := t.rheap[0]
			s := t.slots.items[t.reads.at(li).session]
			t.dropRead(li, now, &eff, true)
			t.gcSession(s)
			continue
		case write:
			t.endWriteLease(t.leases[0], &eff)
			continue
		}
		break
	}
	t.tickPrefixes(now, &eff)
	for len(t.deadlines) > 0 && !now.Before(t.deadlines[0].Deadline) {
		op := t.deadlines[0]
		t.abandon(op, now, &eff)
		eff.Abandoned = append(eff.Abandoned, op)
	}
	for key, until := range t.delays {
		if !now.Before(until) {
			delete(t.delays, key)
			if k := t.extOf(key); k != nil {
				t.checkReady(k, now, &eff)
			}
		}
	}
	if len(t.blocked) > 0 && !now.Before(t.barrier) {
		blocked := t.blocked
		t.blocked = nil
		for _, k := range blocked {
			k.blocked = false
			t.checkReady(k, now, &eff)
		}
	}
	return eff
}

// leaseHeap orders write leases by expiry; opHeap orders ops by deadline.
type (
	leaseHeap = timeHeap[*lease]
	opHeap    = timeHeap[*Op]
)

func (l *lease) at() time.Time { return l.expiry }
func (l *lease) slot() *int    { return &l.heapIndex }
func (o *Op) at() time.Time    { return o.Deadline }
func (o *Op) slot() *int       { return &o.heapIndex }

// timed is an item of a timeHeap: its time, and where it keeps its index in
// the heap (-1 when it is in none).
type timed interface {
	at() time.Time
	slot() *int
}

// timeHeap is a container/heap min-heap by time that keeps each item's
// index current, so that an item can be fixed or removed in O(log n).
type timeHeap[T timed] []T

func (h timeHeap[T]) Len() int           { return len(h) }
func (h timeHeap[T]) Less(i, j int) bool { return h[i].at().Before(h[j].at()) }
func (h timeHeap[T]) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	*h[i].slot() = i
	*h[j].slot() = j
}
func (h *timeHeap[T]) Push(x any) {
	item := x.(T)
	*item.slot() = len(*h)
	*h = append(*h, item)
}
func (h *timeHeap[T]) Pop() any {
	old := *h
	n := len(old) - 1
	item := old[n]
	var zero T
	old[n] = zero
	*h = old[:n]
	*item.slot() = -1
	return item
}
