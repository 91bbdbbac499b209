//go:build linux

package client_test

// Locks (DESIGN §5.1) in the linearizability histories: lock workers, each
// on a client of its own, take sessions (client.NewSession, a TTL lease
// kept alive) and loop: they acquire one of a few lock keys, in a mode
// (wait, try, recall), bound to their session's lease or as a plain write
// lease with a term; write a data key guarded by the lock (WithGuard);
// read the lock's record (Client.Lock, Client.CheckToken) and the data
// key; and release, or revoke their session's lease, or stop keeping it
// alive (Session.Orphan) so that the lock ends by expiry, which they
// record as the holders of TTL leases do (lincheck_ttl_test.go). Now and
// then they write under a token of theirs that has ended. The nemesis of
// lincheck_test.go pauses and cuts off their clients and restarts the
// server. The checker (internal/testkit/lincheck, locks.go) then finds two
// holders of a lock at once, a guarded write that committed while its
// token was not the lock's (or was refused while it was), a record that
// lies, and a try refused while nobody held the lock nor waited for it.
//
// TestLinearizableLocks is the short form; TestLinearizableLocksNegative
// runs a server that grants a waiting acquisition over a lock whose TTL
// lease still lives (--unsafe-lock-steal), and must find the violation;
// the long form runs histories of every lock scenario in turn:
//
//	go test ./client -run '^TestLinearizableLocksLong$' -lincheck.locks.duration=30m -timeout 0 -v

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/internal/testkit/lincheck"
)

var linLocksDuration = flag.Duration("lincheck.locks.duration", 0, "TestLinearizableLocksLong: how long to run histories of the lock scenarios (0: skip)")

// sessionTTL is the TTL of the lock workers' sessions, and the server's
// --ttl-min (its default minimum, 5 s, would outlast a history): a lock
// left to its orphaned session ends within a history, and waiters get it.
const sessionTTL = time.Second

// lockScenario describes one history of lock workers.
type lockScenario struct {
	// scenario gives the name, term, ε and faults (partition, pause,
	// crash), which runNemesis injects on the workers' clients.
	scenario
	workers int           // lock workers, each on a client of its own
	locks   int           // lock keys, lockKey(0) …, each guarding dataKey(i)
	history time.Duration // how long the workers run
	// steal starts the server with --unsafe-lock-steal: an acquisition at
	// the head of the queue is granted over a lock bound to a TTL lease
	// that still lives (the negative control).
	steal bool
}

// lockScenarios are the positive scenarios of locks.
func lockScenarios() []lockScenario {
	base := lockScenario{
		scenario: scenario{clients: 4, term: 300 * time.Millisecond, eps: 100 * time.Millisecond},
		workers:  4, locks: 2, history: 4 * time.Second,
	}
	with := func(name string, faults ...faultKind) lockScenario {
		s := base
		s.name, s.faults = "locks-"+name, faults
		if s.has(faultCrash) {
			// Acquisitions waiting when the server is killed ask again
			// once it is back, after its restart and its restart wait;
			// and the history goes on after the two crashes.
			s.opTimeout, s.history = 4*time.Second, 6*time.Second
		}
		return s
	}
	return []lockScenario{
		with("none"),
		with("pause", faultPause),
		with("partition", faultPartition),
		with("crash", faultCrash),
		with("all", faultPartition, faultPause, faultCrash),
	}
}

// stealScenario is the negative control: no faults, and a server that
// steals locks.
func stealScenario() lockScenario {
	s := lockScenarios()[0]
	s.name, s.steal = "locks-steal", true
	return s
}

// The keys of locks: lock i guards data key i. Worker w takes a session
// for each lock, whose TTL leases are those of the model's key
// sessionKey(w, i), which no one writes: so the operations of each lock
// fall in a part of their own, which the checker checks apart, and faster.
func lockKey(i int) string       { return fmt.Sprintf("lk/%d", i) }
func dataKey(i int) string       { return fmt.Sprintf("lkd/%d", i) }
func sessionKey(w, i int) string { return fmt.Sprintf("ls/%d/%d", w, i) }

// lockCounterOrder is the order in which formatLocks prints the counters
// of what the lock workers did.
var lockCounterOrder = []string{
	"acquisitions", "granted", "granted-bound", "granted-plain", "tries-locked", "acquisitions-not-found", "acquisitions-unknown",
	"acquisitions-no-effect", "reconnects-in-acquisitions", "guarded-writes", "guarded-ok", "guarded-fenced", "guarded-unknown",
	"stale-writes", "stale-ok", "stale-fenced", "stale-unknown", "checks", "checks-cached", "checks-held", "releases", "releases-ok", "releases-unknown",
	"sessions", "sessions-failed", "orphaned-holding", "sessions-lost", "revocations", "revocations-ok", "expiries", "expiry-handoffs",
}

// formatLocks prints the lock workers' counters.
func formatLocks(m map[string]int) string {
	var parts []string
	for _, k := range lockCounterOrder {
		if n, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// ownedToken is a token a worker was granted, on lock key.
type ownedToken struct {
	key   string
	token uint64
}

// lockWorker is one lock worker of a history. It records its operations
// as history client 2·id, and the expiries of its sessions, and the
// grants it may have been given without learning of them, as 2·id+1.
// Only its goroutine uses it.
type lockWorker struct {
	id    int
	c     *client.Client
	sc    lockScenario
	rec   *lincheck.Recorder
	rng   *rand.Rand
	stop  <-chan struct{}
	tally *ttlTally
	// disconnects counts its client's EventDisconnected.
	disconnects *atomic.Int64
	seq         int
	// sess are its sessions, one for each lock key.
	sess []lockSession
	// old are tokens it was granted, for writes under them after they
	// ended.
	old []ownedToken
}

// lockSession is a worker's session for the locks of one key.
type lockSession struct {
	key string // the model's key of its TTL leases (sessionKey)
	// s is the session, nil if none; from is the earliest its lease may
	// end (the send of its last acknowledged grant or keep-alive, as far
	// as the worker knows, plus its TTL).
	s    *client.Session
	from time.Time
	// lapsed are the moments from which its earlier sessions, whose
	// expiry the worker recorded, may end.
	lapsed []time.Time
}

// owner is the worker's client, as the model numbers it (Input.Owner).
func (w *lockWorker) owner() int { return w.id + 1 }

// ctx returns a context for one operation.
func (w *lockWorker) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), w.sc.opLimit())
}

// value returns a value no other write of the history has.
func (w *lockWorker) value() string {
	w.seq++
	return fmt.Sprintf("w%d-%d", w.id, w.seq)
}

// sleep waits d, or until stop is closed; it reports false if stop came
// first.
func (w *lockWorker) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.stop:
		return false
	case <-t.C:
		return true
	}
}

// run loops until stop is closed: a lock's cycle (acquire, write, read,
// end it) four times in five, reads of a lock's record and its data key,
// or a write under a token that ended, otherwise. In the end it records
// the expiry of its session: the history ends, and nothing is recorded
// after, but the server may have ended the lease unseen already.
func (w *lockWorker) run() {
	for pace(w.rng, w.stop) {
		i := w.rng.IntN(w.sc.locks)
		if w.rng.IntN(5) == 0 {
			w.observe(i)
			continue
		}
		if !w.session(i) {
			continue
		}
		w.cycle(i)
	}
	for i := range w.sess {
		if w.sess[i].s != nil {
			w.lapse(i, false)
		}
	}
}

// session makes sure the worker has a session for lock i, and reports
// whether it does: a new one if it has none, or if its session was lost
// (whose expiry it records). The model of a key tracks at most four of its
// TTL leases live at once, and a lease let lapse is live until its expiry,
// which may come at the end of the history: so before a grant, at most
// two earlier leases may lapse later than now.
func (w *lockWorker) session(i int) bool {
	ls := &w.sess[i]
	if ls.s != nil {
		select {
		case <-ls.s.Done():
			w.tally.add("sessions-lost", 1)
			w.lapse(i, false)
		default:
			return true
		}
	}
	if n := len(ls.lapsed); n >= 3 && !w.sleep(time.Until(ls.lapsed[n-3])) {
		return false
	}
	ctx, cancel := w.ctx()
	defer cancel()
	in := lincheck.Input{Kind: lincheck.Grant, Key: ls.key}
	start := time.Now()
	call := w.rec.Begin(2*w.id, in)
	s, err := client.NewSession(ctx, w.c, sessionTTL)
	if err != nil {
		o := lincheck.Output{Outcome: lincheck.Unknown, Err: err.Error()}
		if errors.Is(err, client.ErrCanceled) || errors.Is(err, client.ErrInvalidArgument) || errors.Is(err, client.ErrResourceExhausted) {
			o.Outcome = lincheck.NoEffect
		}
		w.rec.End(call, o)
		w.tally.add("sessions-failed", 1)
		w.sleep(50 * time.Millisecond)
		return false
	}
	w.rec.End(call, lincheck.Output{Outcome: lincheck.OK, Lease: uint64(s.Lease())})
	w.tally.add("sessions", 1)
	// The grant was sent after start, and lives its TTL from then at
	// least.
	ls.s, ls.from = s, start.Add(s.TTL())
	return true
}

// alive notes what the client knows of its session's lease: that it lives
// at least until from. A lock bound to it tells (m, or wl): a Mutex's
// context's deadline is a tenth of the TTL before the send of the last
// acknowledged keep-alive plus the TTL, before which the server does not
// end the lease, and a lock is Valid only before that deadline.
func (w *lockWorker) alive(ls *lockSession, m *client.Mutex, wl *client.WriteLease) {
	if ls.s == nil {
		return
	}
	now := time.Now()
	if m != nil {
		if d, ok := m.Context().Deadline(); ok {
			ls.from = maxTime(ls.from, d)
		}
	}
	if wl != nil && wl.Lease() == ls.s.Lease() && wl.Valid() {
		ls.from = maxTime(ls.from, now)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// lapse stops keeping the session of lock i alive and records its expiry,
// from the earliest moment its lease may end. The next cycle of the lock
// takes a new session.
func (w *lockWorker) lapse(i int, holding bool) {
	ls := &w.sess[i]
	ls.s.Orphan()
	w.rec.Expiry(2*w.id+1, ls.key, uint64(ls.s.Lease()), ls.from)
	ls.lapsed = append(ls.lapsed, ls.from)
	w.tally.add("expiries", 1)
	if holding {
		w.tally.add("orphaned-holding", 1)
	}
	ls.s = nil
}

// revoke stops keeping the session of lock i alive and revokes its lease,
// which ends its locks. Unless the revocation is known to have ended the
// lease, the lease's expiry is recorded: it ended before (NotFound), or
// may end any time (outcome unknown).
func (w *lockWorker) revoke(i int) {
	ls := &w.sess[i]
	ls.s.Orphan()
	id := ls.s.Lease()
	ctx, cancel := w.ctx()
	defer cancel()
	call := w.rec.Begin(2*w.id, lincheck.Input{Kind: lincheck.Revoke, Key: ls.key, Lease: uint64(id)})
	r, err := w.c.Revoke(ctx, id)
	out := leaseOutput(err)
	if err == nil {
		out.Version = r.Revision
	}
	w.rec.End(call, out)
	w.tally.add("revocations", 1)
	if out.Outcome == lincheck.OK {
		w.tally.add("revocations-ok", 1)
		ls.s = nil
		return
	}
	w.lapse(i, false)
}

// connection returns the id of its client's session with the server, 0
// while disconnected, and how many times it was disconnected.
func (w *lockWorker) connection() (uint64, int64) {
	info, ok := w.c.Connection()
	if !ok {
		return 0, w.disconnects.Load()
	}
	return info.ID, w.disconnects.Load()
}

// cycle runs the life of one lock on lock key i: an acquisition; then, if
// granted, a few guarded writes of its data key, reads of its record and
// of the data key; and its end: a release mostly, or, for a lock bound
// to the session, sometimes the session let lapse (the lock ends by
// expiry) or revoked.
func (w *lockWorker) cycle(i int) {
	key, data, ls := lockKey(i), dataKey(i), &w.sess[i]
	s := ls.s
	ctx, cancel := w.ctx()
	defer cancel()
	bound := w.rng.IntN(5) != 0
	mode := []lincheck.AcquireMode{lincheck.Wait, lincheck.Wait, lincheck.Try, lincheck.Recall}[w.rng.IntN(4)]
	in := lincheck.Input{Kind: lincheck.LockAcquire, Key: key, Mode: mode, Owner: w.owner()}
	if bound {
		in.Lease, in.LeaseKey = uint64(s.Lease()), ls.key
	}
	var opts []client.AcquireOption
	switch mode {
	case lincheck.Wait:
		opts = append(opts, client.AcquireWait())
	case lincheck.Try:
		opts = append(opts, client.AcquireTry())
	}
	// A grant the client never learned of: when its session is lost
	// while it acquires, the client asks again on its next session, and
	// the server may have granted the lost one's request already, before
	// the crash or before the next session's hello, which abandons the
	// lost one's requests. Such a grant is recorded as an acquisition of
	// outcome Maybe, as history client 2·id+1 (so that it tells apart
	// from the acquisition itself); or, if the acquisition's own outcome
	// is unknown (the client may not have asked again, and the lost
	// session's request, kept in line, may be granted to the client's
	// next session later), of unknown outcome.
	hidden := w.rec.Begin(2*w.id+1, in)
	conn, drops := w.connection()
	call := w.rec.Begin(2*w.id, in)
	var (
		m   *client.Mutex
		wl  *client.WriteLease
		err error
	)
	switch {
	case bound && mode == lincheck.Wait:
		m = client.NewMutex(s, key)
		if err = m.Lock(ctx); err == nil {
			wl = m.WriteLease()
		}
	case bound && mode == lincheck.Try:
		m = client.NewMutex(s, key)
		if err = m.TryLock(ctx); err == nil {
			wl = m.WriteLease()
		}
	case bound:
		wl, err = w.c.AcquireWriteLease(ctx, key, client.AcquireUnder(s.Lease()))
	default:
		wl, err = w.c.AcquireWriteLease(ctx, key, opts...)
	}
	out := acquireOutput(err)
	if err == nil {
		out.Token = wl.Token()
	}
	w.rec.End(call, out)
	if conn2, drops2 := w.connection(); conn == 0 || conn2 != conn || drops2 != drops {
		o := lincheck.Output{Outcome: lincheck.Maybe, Err: "the client's session changed meanwhile"}
		if out.Outcome == lincheck.Unknown {
			o.Outcome = lincheck.Unknown
		}
		w.rec.End(hidden, o)
		w.tally.add("reconnects-in-acquisitions", 1)
	}
	w.countAcquisition(out, bound)
	if err != nil {
		return
	}
	token := wl.Token()
	w.old = append(w.old, ownedToken{key, token})
	if len(w.old) > 4 {
		w.old = w.old[1:]
	}
	for range 1 + w.rng.IntN(3) {
		switch p := w.rng.IntN(10); {
		case p < 6:
			w.guardedWrite(ctx, data, key, token, w.rng.IntN(8) == 0, "guarded")
		case p < 8:
			w.check(ctx, key, token)
		default:
			readKey(ctx, 2*w.id, w.c, w.rec, data)
		}
		w.alive(ls, m, wl)
	}
	switch p := w.rng.IntN(10); {
	case bound && p == 0:
		// Its holder stops keeping the session alive: the lock ends when
		// the lease expires, and the waiters get it then. A write under
		// it meanwhile commits or is fenced, depending on when.
		w.alive(ls, m, wl)
		w.lapse(i, true)
		if w.rng.IntN(2) == 0 {
			w.guardedWrite(ctx, data, key, token, false, "stale")
		}
	case bound && p == 1:
		w.alive(ls, m, wl)
		w.revoke(i)
	default:
		if !bound {
			s = nil
		}
		w.release(ctx, key, token, m, wl, s)
	}
}

// countAcquisition counts an acquisition's outcome.
func (w *lockWorker) countAcquisition(out lincheck.Output, bound bool) {
	w.tally.add("acquisitions", 1)
	switch out.Outcome {
	case lincheck.OK:
		w.tally.add("granted", 1)
		if bound {
			w.tally.add("granted-bound", 1)
		} else {
			w.tally.add("granted-plain", 1)
		}
	case lincheck.Locked:
		w.tally.add("tries-locked", 1)
	case lincheck.NotFound:
		w.tally.add("acquisitions-not-found", 1)
	case lincheck.Unknown:
		w.tally.add("acquisitions-unknown", 1)
	default:
		w.tally.add("acquisitions-no-effect", 1)
	}
}

// acquireOutput classifies an acquisition's result.
func acquireOutput(err error) lincheck.Output {
	switch {
	case err == nil:
		return lincheck.Output{Outcome: lincheck.OK}
	case errors.Is(err, client.ErrLocked):
		return lincheck.Output{Outcome: lincheck.Locked, Err: err.Error()}
	case errors.Is(err, client.ErrNotFound):
		// The TTL lease it was to be bound to does not live.
		return lincheck.Output{Outcome: lincheck.NotFound, Err: err.Error()}
	case errors.Is(err, client.ErrCanceled), errors.Is(err, client.ErrInvalidArgument):
		// Abandoned, as the server confirmed; or refused before it was
		// sent (a Mutex whose session has ended).
		return lincheck.Output{Outcome: lincheck.NoEffect, Err: err.Error()}
	}
	return lincheck.Output{Outcome: lincheck.Unknown, Err: err.Error()}
}

// guardedWrite puts a new value in data (or, with del, deletes it), guarded
// by the lock on key held with token, records it and counts it under
// counter.
func (w *lockWorker) guardedWrite(ctx context.Context, data, key string, token uint64, del bool, counter string) {
	in := lincheck.Input{Kind: lincheck.GuardedPut, Key: data, Value: w.value(), Guard: key, Token: token}
	if del {
		in = lincheck.Input{Kind: lincheck.GuardedDelete, Key: data, Guard: key, Token: token}
	}
	call := w.rec.Begin(2*w.id, in)
	var out lincheck.Output
	if del {
		r, err := w.c.Delete(ctx, data, client.WithGuard(key, token))
		out = deleteOutput(r, err)
	} else {
		v, err := w.c.Put(ctx, data, []byte(in.Value), client.WithGuard(key, token))
		out = writeOutput(v, err)
	}
	w.rec.End(call, out)
	w.tally.add(counter+"-writes", 1)
	switch out.Outcome {
	case lincheck.OK:
		w.tally.add(counter+"-ok", 1)
	case lincheck.Fenced:
		w.tally.add(counter+"-fenced", 1)
	case lincheck.Unknown:
		w.tally.add(counter+"-unknown", 1)
	}
}

// check reads the record of the lock on key (Client.Lock), or, half the
// time if token is not 0, asks whether token is its current one
// (Client.CheckToken), and records the answer. A read that failed is not
// recorded: it reveals nothing.
func (w *lockWorker) check(ctx context.Context, key string, token uint64) {
	if token != 0 && w.rng.IntN(2) == 0 {
		call := w.rec.Begin(2*w.id, lincheck.Input{Kind: lincheck.CheckToken, Key: key, Token: token})
		ok, err := w.c.CheckToken(ctx, key, token)
		if err != nil {
			return
		}
		w.rec.End(call, lincheck.Output{Outcome: lincheck.OK, Found: ok})
		w.tally.add("checks", 1)
		return
	}
	call := w.rec.Begin(2*w.id, lincheck.Input{Kind: lincheck.CheckToken, Key: key})
	r, err := w.c.Lock(ctx, key)
	if err != nil {
		return
	}
	w.rec.End(call, lincheck.Output{Outcome: lincheck.OK, Found: r.Held, Token: r.Token, Lease: uint64(r.Lease), Cached: r.Cached})
	w.tally.add("checks", 1)
	if r.Cached {
		w.tally.add("checks-cached", 1)
	}
	if r.Held {
		w.tally.add("checks-held", 1)
	}
}

// observe reads lock i's record or its data key, or writes the data key
// under a token of the worker's that may have ended.
func (w *lockWorker) observe(i int) {
	ctx, cancel := w.ctx()
	defer cancel()
	switch p := w.rng.IntN(3); {
	case p == 0 && len(w.old) > 0:
		o := w.old[w.rng.IntN(len(w.old))]
		w.guardedWrite(ctx, dataKey(lockIndex(o.key)), o.key, o.token, false, "stale")
	case p == 1:
		readKey(ctx, 2*w.id, w.c, w.rec, dataKey(i))
	default:
		var token uint64
		if len(w.old) > 0 {
			if o := w.old[len(w.old)-1]; o.key == lockKey(i) {
				token = o.token
			}
		}
		w.check(ctx, lockKey(i), token)
	}
}

// lockIndex returns i of lockKey(i).
func lockIndex(key string) int {
	var i int
	fmt.Sscanf(key, "lk/%d", &i)
	return i
}

// release releases the lock on key held with token (through m, if it was
// taken through a Mutex), bound to session s (nil: a plain write lease),
// and records it. The library sends nothing for a lock it has marked lost
// (recalled, run out, or its session no longer kept alive) and returns
// nil: a release of a lock lost before it is not recorded, and one that
// returned nil is OK only for a lock bound to a session that still lives
// after it (it cannot have been marked lost meanwhile); a plain write
// lease's may have been recalled meanwhile, and is of unknown outcome.
func (w *lockWorker) release(ctx context.Context, key string, token uint64, m *client.Mutex, wl *client.WriteLease, s *client.Session) {
	select {
	case <-wl.Done():
		return // lost: the release would send nothing
	default:
	}
	call := w.rec.Begin(2*w.id, lincheck.Input{Kind: lincheck.LockRelease, Key: key, Token: token})
	var err error
	if m != nil {
		err = m.Unlock(ctx)
	} else {
		err = wl.Release(ctx)
	}
	out := lincheck.Output{Outcome: lincheck.Unknown}
	switch {
	case err == nil && s != nil && !sessionDone(s):
		out.Outcome = lincheck.OK
	case errors.Is(err, client.ErrNotFound):
		out = lincheck.Output{Outcome: lincheck.NotFound, Err: err.Error()}
	case err != nil:
		out.Err = err.Error()
	}
	w.rec.End(call, out)
	w.tally.add("releases", 1)
	switch out.Outcome {
	case lincheck.OK:
		w.tally.add("releases-ok", 1)
	case lincheck.Unknown:
		w.tally.add("releases-unknown", 1)
	}
}

// sessionDone reports whether s has ended.
func sessionDone(s *client.Session) bool {
	select {
	case <-s.Done():
		return true
	default:
		return false
	}
}

// TestLinearizableLocks is the short form: a history of each lock
// scenario, two of those that restart the server, each of which must be
// linearizable, and hold no grant of a lock while another client held it
// for sure (doubleGrants). They run linParallel at a time.
func TestLinearizableLocks(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and real time")
	}
	leaktest.Check(t) // once every history has ended
	runs := map[string]int{"locks-crash": 2, "locks-all": 2}
	var (
		names []string
		scs   []lockScenario
	)
	for _, sc := range lockScenarios() {
		for i := range max(runs[sc.name], 1) {
			names = append(names, fmt.Sprintf("%s/%d", sc.name, i))
			scs = append(scs, sc)
		}
	}
	var (
		mu  sync.Mutex
		tot = make(map[string]int)
	)
	checkHistories(t, names, firstSeed(t), func(t *testing.T, i int, seed uint64) historyResult {
		res := runLockHistory(t, scs[i], seed, *linOut)
		if p := doubleGrants(res.history); len(p) > 0 && res.err == nil {
			res.err = fmt.Errorf("%d grants to another client while a lock was held, such as %s", len(p), p[0])
		}
		mu.Lock()
		for k, n := range res.ttl {
			tot[k] += n
		}
		mu.Unlock()
		return res
	})
	t.Logf("locks of every history: %s", formatLocks(tot))
}

// TestLinearizableLocksNegative runs the negative control of locks: a
// server that grants an acquisition at the head of the queue over a lock
// whose TTL lease still lives (--unsafe-lock-steal). The checker must
// find two holders at once, or a guarded write refused while its lock
// must still be held, within negativeTries histories.
func TestLinearizableLocksNegative(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and real time")
	}
	leaktest.Check(t)
	sc := stealScenario()
	first := firstSeed(t)
	var res historyResult
	var seed uint64
	for try := range uint64(negativeTries) {
		seed = first + try
		res = runLockHistory(t, sc, seed, t.TempDir())
		if res.err != nil {
			t.Fatalf("seed %d: %v", seed, res.err)
		}
		if res.verdict == porcupine.Illegal {
			break
		}
		t.Logf("seed %d: negative control is %s (%s); another seed", seed, res.verdict, res.summary)
	}
	if res.verdict != porcupine.Illegal {
		t.Fatalf("seed %d: negative control is %s after %d histories, want a violation (%s)", seed, res.verdict, negativeTries, res.summary)
	}
	if st, err := os.Stat(res.viz); err != nil || st.Size() == 0 {
		t.Fatalf("visualisation %q: %v", res.viz, err)
	}
	pairs := doubleGrants(res.history)
	t.Logf("violation found as expected: %s; %s; %d grants to another client while a lock bound to a TTL lease was held for sure", res.summary, res.viz, len(pairs))
	for i, p := range pairs[:min(len(pairs), 3)] {
		t.Logf("for instance (%d): %s", i+1, p)
	}
}

// expiryHandoffs counts the grants of a lock to another client than the
// previous one's (by token) holder, whose lock was bound to a TTL lease,
// and was neither released nor revoked before it: it ended by expiry, its
// session let lapse or lost.
func expiryHandoffs(history []porcupine.Operation) int {
	type grant struct {
		op  porcupine.Operation
		in  lincheck.Input
		tok uint64
	}
	byKey := make(map[string][]grant)
	for _, op := range history {
		in, out := op.Input.(lincheck.Input), op.Output.(lincheck.Output)
		if in.Kind == lincheck.LockAcquire && out.Outcome == lincheck.OK {
			byKey[in.Key] = append(byKey[in.Key], grant{op, in, out.Token})
		}
	}
	n := 0
	for key, gs := range byKey {
		slices.SortFunc(gs, func(a, b grant) int { return cmp.Compare(a.tok, b.tok) })
		for i := 1; i < len(gs); i++ {
			a, b := gs[i-1], gs[i]
			if a.in.Lease == 0 || a.in.Owner == b.in.Owner {
				continue
			}
			ended := false
			for _, op := range history {
				in := op.Input.(lincheck.Input)
				if op.Call < b.op.Return && (in.Kind == lincheck.LockRelease && in.Key == key && in.Token == a.tok ||
					in.Kind == lincheck.Revoke && in.Lease == a.in.Lease) {
					ended = true
					break
				}
			}
			if !ended {
				n++
			}
		}
	}
	return n
}

// doubleGrants returns, described, the pairs of grants of a lock of
// history to two clients, the second granted (its acquisition called
// after the first returned, and returned) while the first was held for
// sure: bound to a TTL lease, before any release of it, revocation or
// expiry of that lease, or acquisition of the key by its holder's client
// was called. They break the lock's promise, whatever else the history
// holds.
func doubleGrants(history []porcupine.Operation) []string {
	type grant struct {
		op porcupine.Operation
		in lincheck.Input
	}
	var grants []grant
	for _, op := range history {
		in, out := op.Input.(lincheck.Input), op.Output.(lincheck.Output)
		if in.Kind == lincheck.LockAcquire && out.Outcome == lincheck.OK {
			grants = append(grants, grant{op, in})
		}
	}
	var pairs []string
	for _, a := range grants {
		if a.in.Lease == 0 {
			continue
		}
		token := a.op.Output.(lincheck.Output).Token
		// until: when the lock may first have ended.
		until := int64(1<<63 - 1)
		for _, op := range history {
			in := op.Input.(lincheck.Input)
			switch {
			case in.Kind == lincheck.LockRelease && in.Key == a.in.Key && in.Token == token,
				(in.Kind == lincheck.Expire || in.Kind == lincheck.Revoke) && in.Lease == a.in.Lease,
				in.Kind == lincheck.LockAcquire && in.Key == a.in.Key && in.Owner == a.in.Owner && op.Call > a.op.Call:
				until = min(until, op.Call)
			}
		}
		for _, b := range grants {
			if b.in.Key == a.in.Key && b.in.Owner != a.in.Owner && b.op.Call > a.op.Return && b.op.Return < until {
				pairs = append(pairs, fmt.Sprintf("%s: client %d granted token %d under TTL lease %d at [%v, %v]; client %d granted token %d at [%v, %v], before the first lock could end (%v)",
					a.in.Key, a.in.Owner, token, a.in.Lease, time.Duration(a.op.Call), time.Duration(a.op.Return),
					b.in.Owner, b.op.Output.(lincheck.Output).Token, time.Duration(b.op.Call), time.Duration(b.op.Return), time.Duration(until)))
			}
		}
	}
	return pairs
}

// TestLinearizableLocksLong is the long form: with
// -lincheck.locks.duration set, it runs histories of every lock scenario
// in turn until the time is up, and prints what it checked.
func TestLinearizableLocksLong(t *testing.T) {
	if *linLocksDuration <= 0 {
		t.Skip("long form: set -lincheck.locks.duration")
	}
	tot := make(map[string]int)
	runLongForm(t, lockScenarios(), func(sc lockScenario) string { return sc.name }, *linLocksDuration,
		func(t *testing.T, sc lockScenario, seed uint64) historyResult {
			res := runLockHistory(t, sc, seed, *linOut)
			if p := doubleGrants(res.history); len(p) > 0 && res.err == nil {
				res.err = fmt.Errorf("%d grants to another client while a lock was held, such as %s", len(p), p[0])
			}
			for k, n := range res.ttl {
				tot[k] += n
			}
			return res
		})
	t.Logf("locks: %s", formatLocks(tot))
}

// runLockHistory runs one history of sc and checks it. A visualisation of
// a violation goes to the folder out. What the workers did is in the
// result's ttl counters.
func runLockHistory(t *testing.T, sc lockScenario, seed uint64, out string) historyResult {
	t.Helper()
	b := linBinaries(t)
	rng := rand.New(rand.NewPCG(seed, 0x10c5))
	dir := t.TempDir()
	flags := []string{"--lease-term", sc.term.String(), "--epsilon", sc.eps.String(), "--ttl-min", sessionTTL.String(), "--log-level", "error"}
	if sc.steal {
		flags = append(flags, "--unsafe-lock-steal")
	}
	srv := clitest.StartServer(t, b, "", filepath.Join(dir, "data"), flags...)
	t.Cleanup(func() {
		select {
		case <-srv.Exited():
		default:
			srv.Kill(t)
		}
	})
	res := historyResult{faults: make(map[string]int)}
	clients := make([]*linClient, sc.workers)
	drops := make([]*atomic.Int64, sc.workers)
	for i := range clients {
		lc, cfg := newLinClient(t, i, seed, srv.ClientConfig())
		n := new(atomic.Int64)
		cfg.OnEvent = func(e client.Event) {
			if e.Kind == client.EventDisconnected {
				n.Add(1)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := client.Dial(ctx, srv.Addr, cfg)
		cancel()
		if err != nil {
			lc.pc.Close()
			t.Fatalf("dial client %d: %v", i, err)
		}
		lc.kv, lc.c = c, c
		clients[i], drops[i] = lc, n
		t.Cleanup(func() { lc.kv.Close(); lc.pc.Close() })
	}
	rec := lincheck.NewRecorder()
	tally := newTTLTally()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, lc := range clients {
		w := &lockWorker{id: i, c: lc.c, sc: sc, rec: rec, rng: rand.New(rand.NewPCG(seed, uint64(0x10c+i))),
			stop: stop, tally: tally, disconnects: drops[i], sess: make([]lockSession, sc.locks)}
		for j := range w.sess {
			w.sess[j].key = sessionKey(i, j)
		}
		wg.Go(w.run)
	}
	stopWorkers := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopWorkers() // also when the nemesis fails the test
	runNemesis(t, sc.scenario, rng, clients, res.faults, time.Now().Add(sc.history), &srv)
	stopWorkers()
	closeClients(clients, res.faults)

	history, summary := rec.HistoryWithLocks()
	res.summary, res.history = summary, history
	tally.add("expiry-handoffs", expiryHandoffs(history))
	res.ttl = tally.counts()
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	res.viz = filepath.Join(out, fmt.Sprintf("lincheck-%s-seed%d.html", name, seed))
	start := time.Now()
	verdict, err := lincheck.Check(history, checkBudget, res.viz)
	res.verdict = verdict
	if verdict == porcupine.Ok {
		res.viz = ""
	} else {
		t.Log(err)
	}
	if res.ttl["granted"] == 0 || res.ttl["guarded-ok"] == 0 {
		res.err = fmt.Errorf("history too thin to mean anything: %s", formatLocks(res.ttl))
	}
	t.Logf("scenario %s seed %d: %s: %s, checked in %v; faults: %s; locks: %s",
		sc.name, seed, res.verdict, res.summary, time.Since(start).Round(time.Millisecond), formatCounts(res.faults), formatLocks(res.ttl))
	return res
}
