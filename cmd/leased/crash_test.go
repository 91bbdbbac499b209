package main

// TestCrashKill: the real leased binary, killed with SIGKILL at random
// moments under a load of concurrent writers using the real client library,
// and restarted on the same data folder and port. After every restart, and
// at the end, the test checks that nothing acknowledged was lost, that no
// value is torn, and that revisions and fencing tokens never go backwards.
//
// Replay a failure with the seed it logs:
//
//	go test ./cmd/leased -run '^TestCrashKill$' -count=1 -v -crash.seed=N
//
// The seed fixes the writers' choices and the kill delays, not the
// interleaving, so a replay is likely, not certain, to fail the same way.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
)

var (
	crashCycles = flag.Int("crash.cycles", 20, "TestCrashKill: how many times to kill and restart leased")
	crashSeed   = flag.Uint64("crash.seed", 0, "TestCrashKill: seed of the random choices (0: from the clock)")
)

const (
	// stepTimeout bounds one step that should take milliseconds: a dial, a
	// read, a write nobody holds up, a helper's answer. It is generous for a
	// loaded 2-core machine running -race tests of several packages.
	stepTimeout = 10 * time.Second

	crashEpsilon = 50 * time.Millisecond
	crashWriters = 4
	// crashOwnKeys is how many keys each writer alone writes.
	crashOwnKeys = 4
	// crashOpTimeout bounds one operation. A healthy one waits at most for
	// the restart hold (a lease and a horizon step: under 1.4 s here) and
	// for a few holders' terms.
	crashOpTimeout = 5 * time.Second
	// crashIdleTimeout is the clients' idle timeout. A restarted leased
	// answers packets of a connection it lost with a stateless reset, so
	// clients normally learn at once that their connection is dead; this
	// short timeout covers a reset that was lost, or a kill before the
	// restart, so that writers always come back while writes are held.
	crashIdleTimeout = 750 * time.Millisecond
	// crashReconnectTimeout bounds the wait for every writer to reconnect
	// after a restart: the idle timeout, then a dial with backoff.
	crashReconnectTimeout = 10 * time.Second
	// crashStopTimeout bounds the wait for the writers to stop at the end:
	// each finishes the operation in hand, bounded by crashOpTimeout.
	crashStopTimeout = 2 * crashOpTimeout
	// Kill delays after the writers are back: from the restart hold, with
	// writes waiting in it, to well past it.
	minKillDelay = 50 * time.Millisecond
	maxKillDelay = 600 * time.Millisecond
	// quickKills is the percentage of restarts after which the server is
	// killed again within maxQuickKill, before the writers are back: a
	// restart during the previous run's hold, which the next run inherits.
	quickKills   = 15
	maxQuickKill = 100 * time.Millisecond
	// maxLargeValue is the largest value written: large values go to
	// badger's value log, where a torn write would show.
	maxLargeValue = 200 << 10
)

var (
	// crashTerms are the lease terms of the runs; each run picks one, so
	// that some restart with a shorter term than the run before, which
	// must not shorten the restart hold (DESIGN §7).
	crashTerms      = []time.Duration{300 * time.Millisecond, time.Second}
	crashSharedKeys = []string{"shared/0", "shared/1", "shared/2"}
	// Keys that writers take write leases on, and also write without one,
	// which recalls the lease.
	crashLeaseKeys = []string{"lease/0", "lease/1"}
)

func ownKey(w, i int) string { return fmt.Sprintf("w%d/%d", w, i) }

// writeID names one write: every write gets a new sequence number of its
// writer, deletes and refused writes included.
type writeID struct {
	writer int
	seq    uint64
}

// crashValue is a self-checking value: a header that names the key, the
// writer and the sequence number, size bytes of filler, and the SHA-256 of
// both. A torn, mixed or misplaced value fails parseCrashValue.
func crashValue(key string, id writeID, size int, rng *rand.ChaCha8) []byte {
	b := fmt.Appendf(nil, "crash key=%s writer=%d seq=%d size=%d\n", key, id.writer, id.seq, size)
	n := len(b)
	b = slices.Grow(b, size+sha256.Size)[:n+size]
	rng.Read(b[n:])
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

func parseCrashValue(v []byte) (key string, id writeID, err error) {
	if len(v) < sha256.Size {
		return "", id, fmt.Errorf("value of %d bytes is too short to be one of ours", len(v))
	}
	body := v[:len(v)-sha256.Size]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], v[len(body):]) {
		return "", id, fmt.Errorf("checksum mismatch: a torn or corrupt value of %d bytes, starting %.60q", len(v), v)
	}
	line, filler, _ := bytes.Cut(body, []byte("\n"))
	var size int
	if _, err := fmt.Sscanf(string(line), "crash key=%s writer=%d seq=%d size=%d", &key, &id.writer, &id.seq, &size); err != nil {
		return "", id, fmt.Errorf("header %q: %v", line, err)
	}
	if size != len(filler) {
		return "", id, fmt.Errorf("header %q, but %d bytes of filler", line, len(filler))
	}
	return key, id, nil
}

// Outcomes of a write.
const (
	inFlight = iota
	acked    // returned nil: durable at version
	refused  // the server said it changed nothing: version mismatch, fenced, abandoned
	unknown  // any other error: it may or may not have been applied
)

type writeRec struct {
	key     string
	del     bool
	outcome int
	version uint64
	epoch   int // kills done when the write began
}

// keyState is what is known of one key.
type keyState struct {
	acked    uint64  // the highest acknowledged version
	ackedID  writeID // the write that has it
	deletes  int     // deletes begun
	ackedDel int     // deletes acknowledged
}

// barrier is what had been acknowledged when the server was killed.
type barrier struct {
	version, token uint64
}

// crashModel records every write, its outcome, and every fencing token. It
// is safe for concurrent use.
type crashModel struct {
	t      *testing.T
	cancel context.CancelFunc // ends the run after too many violations

	mu        sync.Mutex
	writes    map[writeID]*writeRec
	byVersion map[uint64]writeID // acknowledged versions
	keys      map[string]*keyState
	tokens    map[uint64]bool
	maxAcked  uint64
	maxToken  uint64
	barriers  []barrier // barriers[e]: what was acknowledged before kill e+1
	failures  int
	// txns holds each transaction under both its IDs (crash_txn_test.go).
	txns map[writeID]*txnRec
	// made[w]: writer w's file is known to exist (txnViolations).
	made [crashWriters]bool

	nAcked, nUnknown, nRefused, nLarge, nReads, nCached, nTokens atomic.Int64
	// nLost counts acknowledged writes that a check found lost.
	nLost atomic.Int64
	// Transactions: acknowledged (of them, Else applied; answered as a
	// replay), refused, of unknown outcome, and the listings checked.
	nTxnAcked, nTxnElse, nTxnReplayed, nTxnRefused, nTxnUnknown, nTxnLists atomic.Int64
}

func newCrashModel(t *testing.T, cancel context.CancelFunc) *crashModel {
	m := &crashModel{
		t:         t,
		cancel:    cancel,
		writes:    make(map[writeID]*writeRec),
		byVersion: make(map[uint64]writeID),
		keys:      make(map[string]*keyState),
		tokens:    make(map[uint64]bool),
		txns:      make(map[writeID]*txnRec),
	}
	for w := range crashWriters {
		for i := range crashOwnKeys {
			m.keys[ownKey(w, i)] = &keyState{}
		}
		for i := range crashTxnKeys {
			m.keys[txnKey(w, i)] = &keyState{}
		}
		m.keys[mvKey(w, 0)], m.keys[mvKey(w, 1)] = &keyState{}, &keyState{}
	}
	for _, k := range append(append([]string(nil), crashSharedKeys...), crashLeaseKeys...) {
		m.keys[k] = &keyState{}
	}
	return m
}

// violation reports a broken guarantee. After ten, it ends the run.
func (m *crashModel) violation(format string, args ...any) {
	m.t.Errorf("VIOLATION: "+format, args...)
	m.mu.Lock()
	m.failures++
	n := m.failures
	m.mu.Unlock()
	if n >= 10 {
		m.cancel()
	}
}

// begin records a write about to be sent.
func (m *crashModel) begin(id writeID, key string, del bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.writes[id] = &writeRec{key: key, del: del, epoch: len(m.barriers)}
	if del {
		m.keys[key].deletes++
	}
}

// finish records a write's outcome, and checks what the write alone can
// show: its version is new, and newer than anything acknowledged before a
// kill that came before the write began.
func (m *crashModel) finish(id writeID, ver uint64, err error) {
	m.mu.Lock()
	r := m.writes[id]
	switch {
	case err == nil:
		r.outcome, r.version = acked, ver
	case errors.Is(err, client.ErrVersionMismatch), errors.Is(err, client.ErrFenced), errors.Is(err, client.ErrCanceled):
		r.outcome = refused
		m.mu.Unlock()
		m.nRefused.Add(1)
		return
	default:
		r.outcome = unknown
		m.mu.Unlock()
		m.nUnknown.Add(1)
		return
	}
	var bad []string
	if prev, ok := m.byVersion[ver]; ok {
		bad = append(bad, fmt.Sprintf("version %d acknowledged twice: to %s and to %v on %s", ver, m.describe(prev), id, r.key))
	}
	if r.epoch > 0 && ver <= m.barriers[r.epoch-1].version {
		bad = append(bad, fmt.Sprintf("write %v on %s, begun after kill %d, got version %d, not above %d acknowledged before it",
			id, r.key, r.epoch, ver, m.barriers[r.epoch-1].version))
	}
	m.byVersion[ver] = id
	ks := m.keys[r.key]
	if ver > ks.acked {
		ks.acked, ks.ackedID = ver, id
	}
	if r.del {
		ks.ackedDel++
	}
	m.maxAcked = max(m.maxAcked, ver)
	m.mu.Unlock()
	m.nAcked.Add(1)
	for _, b := range bad {
		m.violation("%s", b)
	}
}

// unchanged records that a delete found no key to remove: it changed
// nothing, as a refused write.
func (m *crashModel) unchanged(id writeID) {
	m.mu.Lock()
	m.writes[id].outcome = refused
	m.mu.Unlock()
	m.nRefused.Add(1)
}

// token records a fencing token granted to an acquisition begun after
// epoch kills: it must be new, and above every token received before.
func (m *crashModel) token(tok uint64, epoch int) {
	m.mu.Lock()
	var bad []string
	if m.tokens[tok] {
		bad = append(bad, fmt.Sprintf("fencing token %d granted twice", tok))
	}
	if epoch > 0 && tok <= m.barriers[epoch-1].token {
		bad = append(bad, fmt.Sprintf("fencing token %d, granted after kill %d, is not above %d received before it", tok, epoch, m.barriers[epoch-1].token))
	}
	m.tokens[tok] = true
	m.maxToken = max(m.maxToken, tok)
	m.mu.Unlock()
	m.nTokens.Add(1)
	for _, b := range bad {
		m.violation("%s", b)
	}
}

// epoch returns how many kills are done.
func (m *crashModel) epoch() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.barriers)
}

// killed records what was acknowledged when the server died.
func (m *crashModel) killed() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.barriers = append(m.barriers, barrier{version: m.maxAcked, token: m.maxToken})
}

// checkItem checks a read of key, by anyone, at any time: a value is
// intact, belongs to key, was written (by a write or a transaction) and not
// refused, and a version that was acknowledged holds what that write or
// transaction wrote.
func (m *crashModel) checkItem(who, key string, found bool, value []byte, ver uint64) {
	var id writeID
	if found {
		k, vid, err := parseCrashValue(value)
		if err != nil {
			m.violation("%s read %s at version %d: %v", who, key, ver, err)
			return
		}
		if k != key {
			m.violation("%s read %s at version %d, and found the value written to %s", who, key, ver, k)
			return
		}
		id = vid
	}
	m.mu.Lock()
	var bad string
	switch r := m.writes[id]; {
	case found && r == nil && m.txns[id] != nil:
		bad = m.checkTxnValue(who, key, id, ver)
	case found && r == nil:
		bad = fmt.Sprintf("%s read %s at version %d: value %v was never written", who, key, ver, id)
	case found && r.outcome == refused:
		bad = fmt.Sprintf("%s read %s at version %d: value %v, whose write the server refused or abandoned", who, key, ver, id)
	case found && r.outcome == acked && r.version != ver:
		bad = fmt.Sprintf("%s read %s at version %d: value %v, acknowledged at version %d", who, key, ver, id, r.version)
	}
	if aid, ok := m.byVersion[ver]; ok && bad == "" {
		switch del, wrote := m.wrote(aid, key); {
		case !wrote:
			bad = fmt.Sprintf("%s read %s at version %d, which was acknowledged to %s", who, key, ver, m.describe(aid))
		case del && found:
			bad = fmt.Sprintf("%s read %s at version %d: value %v, but that version is an acknowledged delete", who, key, ver, id)
		case !del && (!found || aid != id):
			bad = fmt.Sprintf("%s read %s at version %d: found=%v value %v, but that version was acknowledged to %v", who, key, ver, found, id, aid)
		}
	}
	if bad == "" && !found && ver > 0 && m.keys[key].deletes == 0 {
		bad = fmt.Sprintf("%s read %s as absent at version %d, but nobody deleted it", who, key, ver)
	}
	m.mu.Unlock()
	if bad != "" {
		m.violation("%s", bad)
	}
}

// ackedOf returns the highest acknowledged version of key, and its write.
func (m *crashModel) ackedOf(key string) (uint64, writeID) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ks := m.keys[key]
	return ks.acked, ks.ackedID
}

// snapshot copies the key states and the highest acknowledged version.
func (m *crashModel) snapshot() (map[string]keyState, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	snap := make(map[string]keyState, len(m.keys))
	for k, ks := range m.keys {
		snap[k] = *ks
	}
	return snap, m.maxAcked
}

// crashWriter is one writer goroutine with a client of its own.
type crashWriter struct {
	id         int
	c          *client.Client
	m          *crashModel
	rng        *rand.Rand
	fill       *rand.ChaCha8
	seq        uint64
	seen       map[string]uint64 // the highest version this client saw per key
	reconnects atomic.Int64
	opTimeout  time.Duration // bounds one operation; 0: crashOpTimeout
	mvMade     bool          // the creation of its file was acknowledged
	mvAt       int           // where it last knew its file to be (mvKey)
}

func (w *crashWriter) next() writeID {
	w.seq++
	return writeID{w.id, w.seq}
}

func (w *crashWriter) value(key string, id writeID) []byte {
	size := 16 + w.rng.IntN(240)
	switch p := w.rng.IntN(100); {
	case p < 5:
		size = 64<<10 + w.rng.IntN(maxLargeValue-64<<10)
		w.m.nLarge.Add(1)
	case p < 15:
		size = 1<<10 + w.rng.IntN(15<<10)
	}
	return crashValue(key, id, size, w.fill)
}

// saw checks that this client's reads and writes of key never go back in
// version: each of its operations begins after the last one ended, so a
// linearizable store shows it versions in order.
func (w *crashWriter) saw(key string, ver uint64, what string) {
	if prev := w.seen[key]; ver < prev {
		w.m.violation("writer %d: %s %s at version %d after it saw version %d", w.id, what, key, ver, prev)
	}
	w.seen[key] = max(w.seen[key], ver)
}

func (w *crashWriter) run(ctx context.Context) {
	for ctx.Err() == nil {
		if _, ok := w.c.Connection(); !ok {
			// Disconnected: the client reconnects in the background.
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		opCtx, cancel := context.WithTimeout(ctx, cmp.Or(w.opTimeout, crashOpTimeout))
		var err error
		switch p := w.rng.IntN(100); {
		case p < 30:
			err = w.put(opCtx, ownKey(w.id, w.rng.IntN(crashOwnKeys)))
		case p < 38:
			err = w.del(opCtx, ownKey(w.id, w.rng.IntN(crashOwnKeys)))
		case p < 48:
			err = w.put(opCtx, crashSharedKeys[w.rng.IntN(len(crashSharedKeys))])
		case p < 50:
			err = w.del(opCtx, crashSharedKeys[w.rng.IntN(len(crashSharedKeys))])
		case p < 58:
			err = w.cas(opCtx, crashSharedKeys[w.rng.IntN(len(crashSharedKeys))])
		case p < 60:
			err = w.put(opCtx, crashLeaseKeys[w.rng.IntN(len(crashLeaseKeys))])
		case p < 82:
			_, err = w.get(opCtx, w.anyKey())
		case p < 94:
			err = w.txn(opCtx)
		default:
			err = w.fenced(opCtx, crashLeaseKeys[w.rng.IntN(len(crashLeaseKeys))])
		}
		cancel()
		if errors.Is(err, client.ErrUnavailable) {
			// The connection is gone, though the client may not have
			// dropped it yet, and ops fail at once: pause rather than spin
			// until it reconnects in the background.
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

func (w *crashWriter) anyKey() string {
	switch p := w.rng.IntN(10); {
	case p < 4:
		return ownKey(w.rng.IntN(crashWriters), w.rng.IntN(crashOwnKeys))
	case p < 6:
		return crashSharedKeys[w.rng.IntN(len(crashSharedKeys))]
	case p < 7:
		return crashLeaseKeys[w.rng.IntN(len(crashLeaseKeys))]
	case p < 9:
		return txnKey(w.rng.IntN(crashWriters), w.rng.IntN(crashTxnKeys))
	default:
		return mvKey(w.rng.IntN(crashWriters), w.rng.IntN(2))
	}
}

func (w *crashWriter) put(ctx context.Context, key string) error {
	id := w.next()
	v := w.value(key, id)
	w.m.begin(id, key, false)
	var res client.WriteResult
	ver, err := w.c.Put(ctx, key, v, client.Result(&res))
	return w.finish(id, key, ver, err, res, "put")
}

func (w *crashWriter) del(ctx context.Context, key string) error {
	id := w.next()
	w.m.begin(id, key, true)
	var res client.WriteResult
	d, err := w.c.Delete(ctx, key, client.Result(&res))
	if err == nil && d.Deleted == 0 {
		// It removed nothing, and has no version of its own: the key's
		// version, which must not go back.
		w.m.unchanged(id)
		w.saw(key, d.Version, "delete that removed nothing of")
		return nil
	}
	return w.finish(id, key, d.Version, err, res, "delete")
}

func (w *crashWriter) cas(ctx context.Context, key string) error {
	it, err := w.get(ctx, key)
	if err != nil {
		return err
	}
	id := w.next()
	v := w.value(key, id)
	w.m.begin(id, key, false)
	var res client.WriteResult
	ver, err := w.c.CompareAndSwap(ctx, key, it.Version, v, client.Result(&res))
	return w.finish(id, key, ver, err, res, "cas")
}

// fenced acquires the write lease on key, writes under it, and releases it.
func (w *crashWriter) fenced(ctx context.Context, key string) error {
	epoch := w.m.epoch()
	wl, err := w.c.AcquireWriteLease(ctx, key)
	if err != nil {
		return err
	}
	w.m.token(wl.Token(), epoch)
	id := w.next()
	v := w.value(key, id)
	w.m.begin(id, key, false)
	var res client.WriteResult
	ver, err := wl.Put(ctx, v, client.Result(&res))
	err = w.finish(id, key, ver, err, res, "fenced put")
	wl.Release(ctx) // an error leaves the lease to run out
	return err
}

func (w *crashWriter) finish(id writeID, key string, ver uint64, err error, res client.WriteResult, what string) error {
	w.m.finish(id, ver, err)
	if err != nil {
		return err
	}
	if res.Version != ver {
		w.m.violation("writer %d: %s %s returned version %d, but its result says %d", w.id, what, key, ver, res.Version)
	}
	w.saw(key, ver, what)
	return nil
}

func (w *crashWriter) get(ctx context.Context, key string) (client.Item, error) {
	before, beforeID := w.m.ackedOf(key)
	it, err := w.c.Get(ctx, key)
	if err != nil {
		return it, err
	}
	w.m.nReads.Add(1)
	if it.Cached {
		w.m.nCached.Add(1)
	}
	if it.Version < before {
		// The write of version before had returned to its writer when
		// this read began: a linearizable read sees it.
		w.m.violation("writer %d: stale read: %s at version %d (found=%v, cached=%v), but version %d (%v) was acknowledged before the read began",
			w.id, key, it.Version, it.Found, it.Cached, before, beforeID)
	}
	w.m.checkItem(fmt.Sprintf("writer %d", w.id), key, it.Found, it.Value, it.Version)
	w.saw(key, it.Version, fmt.Sprintf("read (cached=%v)", it.Cached))
	return it, nil
}

// crashCheck reads every key with a fresh client and checks it against
// what had been acknowledged before the read began, and lists each
// writer's transaction keys to check that every transaction is there whole
// (crashCheckTxns). Writers may go on meanwhile: whatever they do can only
// make keys newer. It returns the server's revision, which must not be
// below prevRev, and how long the server said it would still hold writes.
func crashCheck(t *testing.T, srv *clitest.Server, m *crashModel, prevRev uint64, when string) (uint64, time.Duration) {
	t.Helper()
	return crashCheckAt(t, srv.ClientConfig(), srv.Addr, m, prevRev, when, false)
}

// getSettled reads key through c, again while the server answers
// ErrUnavailable, within ctx: a cluster whose lead just moved holds reads
// of the keys the last leader was writing until their writes settle, and a
// leader that has lost its quorum refuses reads until it steps down. Only
// the checks of a cluster (TestCrashCluster) use it: a single server
// serves reads at once after its restart.
func getSettled(ctx context.Context, c *client.Client, key string) (client.Item, error) {
	for {
		it, err := c.Get(ctx, key)
		if !errors.Is(err, client.ErrUnavailable) {
			return it, err
		}
		select {
		case <-ctx.Done():
			return it, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// crashCheckAt is crashCheck with a client of cfg dialing endpoints: one
// server, or the endpoint list of a cluster (TestCrashCluster). With
// settle (a cluster), a read answered ErrUnavailable is made again
// (getSettled); without it, such an answer fails the test.
func crashCheckAt(t *testing.T, cfg client.Config, endpoints string, m *crashModel, prevRev uint64, when string, settle bool) (uint64, time.Duration) {
	t.Helper()
	snap, maxAcked := m.snapshot()
	cfg.Name = "checker"
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	c, err := client.Dial(ctx, endpoints, cfg)
	if err != nil {
		t.Fatalf("%s: checker: dial: %v", when, err)
	}
	defer c.Close()
	var maxRead uint64
	for key, ks := range snap {
		var it client.Item
		if settle {
			it, err = getSettled(ctx, c, key)
		} else {
			it, err = c.Get(ctx, key)
		}
		if err != nil {
			t.Fatalf("%s: checker: get %s: %v", when, key, err)
		}
		m.checkItem("checker "+when, key, it.Found, it.Value, it.Version)
		maxRead = max(maxRead, it.Version)
		if it.Version < ks.acked {
			m.nLost.Add(1)
			m.violation("%s: %s is at version %d (found=%v), but version %d (%v) was acknowledged: an acknowledged write is lost",
				when, key, it.Version, it.Found, ks.acked, ks.ackedID)
			continue
		}
		if it.Version == ks.acked || !it.Found {
			if !it.Found && it.Version > ks.acked {
				// Newer and absent: a delete that was not acknowledged
				// when the snapshot was taken must have done it.
				m.mu.Lock()
				deletes := m.keys[key].deletes
				m.mu.Unlock()
				if deletes <= ks.ackedDel {
					m.violation("%s: %s is absent at version %d, newer than the acknowledged %d, but no delete was in flight or unknown", when, key, it.Version, ks.acked)
				}
			}
			continue
		}
		// Newer and present. A key of one writer is written in order, so
		// a newer value is a later write of it.
		_, id, _ := parseCrashValue(it.Value) // checkItem checked it
		if ks.ackedID.writer == id.writer && id.seq <= ks.ackedID.seq {
			m.violation("%s: %s holds %v at version %d, after %v acknowledged at version %d: an older write landed after a newer one",
				when, key, id, it.Version, ks.ackedID, ks.acked)
		}
	}
	maxRead = max(maxRead, crashCheckTxns(ctx, t, c, m, when, settle))
	st, err := c.ServerStats(ctx)
	if err != nil {
		t.Fatalf("%s: checker: stats: %v", when, err)
	}
	switch {
	case st.Revision < prevRev:
		m.violation("%s: the server's revision went back from %d to %d", when, prevRev, st.Revision)
	case st.Revision < maxAcked:
		m.violation("%s: the server's revision %d is below the acknowledged version %d", when, st.Revision, maxAcked)
	case st.Revision < maxRead:
		m.violation("%s: the server's revision %d is below the version %d just read", when, st.Revision, maxRead)
	}
	return max(st.Revision, prevRev), st.WritesAllowedIn
}

// TestCrashKill: several writers with their own clients put, delete,
// compare-and-swap, read and write under write leases, while a killer
// SIGKILLs leased at random moments and restarts it on the same data folder
// and port. It checks, after every restart and at the end:
//   - every key holds its last acknowledged value or a newer one (a newer
//     absence only if a delete was not acknowledged), never an older one;
//   - no value is torn, misplaced, refused, or at another version than the
//     one its write was acknowledged at;
//   - the revision never goes back, and is at least every acknowledged
//     version; a write begun after a kill gets a version above every one
//     acknowledged before it;
//   - fencing tokens are never granted twice, and one granted after a kill
//     is above every token received before it;
//   - no read, cached or not, returns a version older than one whose write
//     was acknowledged before the read began: a client's cached entries stay
//     safe across a crash because the restarted server holds writes until
//     the persisted lease horizon has passed (DESIGN §7), also when it
//     restarts with a shorter term;
//   - each client sees each key's versions in order;
//   - every transaction is applied whole or not at all, also one whose
//     outcome is unknown: a listing of a writer's transaction keys at one
//     revision never shows one key of a transaction without the others
//     (crash_txn_test.go).
//
// Writes and transactions that return an error are unknown: they may or
// may not be applied.
func TestCrashKill(t *testing.T) {
	t.Parallel()
	seed := *crashSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -crash.seed=%d); %d cycles", seed, seed, *crashCycles)
	begin := time.Now()

	port, err := clitest.FreeUDPPort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	data := filepath.Join(t.TempDir(), "data")
	killer := rand.New(rand.NewPCG(seed, 1<<32))
	flags := func() ([]string, time.Duration) {
		term := crashTerms[killer.IntN(len(crashTerms))]
		return []string{"--lease-term", term.String(), "--epsilon", crashEpsilon.String()}, term
	}
	args, term := flags()
	srv := clitest.StartServerAt(t, bins, "", data, addr, args...)

	runCtx, stop := context.WithCancel(context.Background())
	defer stop()
	m := newCrashModel(t, stop)
	writers := make([]*crashWriter, crashWriters)
	for i := range writers {
		var fillSeed [32]byte
		binary.LittleEndian.PutUint64(fillSeed[:], seed)
		fillSeed[8] = byte(i)
		w := &crashWriter{
			id:   i,
			m:    m,
			rng:  rand.New(rand.NewPCG(seed, uint64(i))),
			fill: rand.NewChaCha8(fillSeed),
			seen: make(map[string]uint64),
		}
		cfg := srv.ClientConfig()
		cfg.Name = fmt.Sprintf("writer-%d", i)
		cfg.IdleTimeout = crashIdleTimeout
		cfg.MaxReconnectDelay = 100 * time.Millisecond
		cfg.OnEvent = func(ev client.Event) {
			if ev.Kind == client.EventReconnected {
				w.reconnects.Add(1)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
		w.c, err = client.Dial(ctx, addr, cfg)
		cancel()
		if err != nil {
			t.Fatalf("writer %d: dial: %v", i, err)
		}
		t.Cleanup(func() { w.c.Close() })
		writers[i] = w
	}
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(func() { w.run(runCtx) })
	}
	stopWriters := func() {
		stop()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(crashStopTimeout):
			t.Fatalf("the writers did not stop within %v", crashStopTimeout)
		}
	}
	defer stopWriters()

	var rev uint64
	quick := false
	for cycle := 1; cycle <= *crashCycles && runCtx.Err() == nil; cycle++ {
		// Let the server serve for a random while, a wait bounded by
		// maxKillDelay (or maxQuickKill), so that kills land at random
		// points of the writers' work, some inside the restart hold.
		delay := minKillDelay + time.Duration(killer.Int64N(int64(maxKillDelay-minKillDelay)))
		if quick {
			delay = time.Duration(killer.Int64N(int64(maxQuickKill)))
		}
		select {
		case <-time.After(delay):
		case <-runCtx.Done():
		}
		before := make([]int64, len(writers))
		for i, w := range writers {
			before[i] = w.reconnects.Load()
		}
		srv.Kill(t)
		m.killed()
		restart := time.Now()
		prevTerm := term
		args, term = flags()
		srv = srv.RestartWith(t, args...)
		restarted := time.Since(restart)
		var held time.Duration
		rev, held = crashCheck(t, srv, m, rev, fmt.Sprintf("after restart %d", cycle))
		wasQuick := quick
		if quick = killer.IntN(100) < quickKills; !quick {
			// Wait for every writer to be back, so that the next kill
			// finds them at work.
			deadline := time.Now().Add(crashReconnectTimeout)
			for i, w := range writers {
				for w.reconnects.Load() == before[i] {
					if time.Now().After(deadline) {
						t.Fatalf("cycle %d: writer %d did not reconnect within %v of the restart", cycle, i, crashReconnectTimeout)
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		}
		served, next := "with the writers back", "the writers were back"
		if wasQuick {
			served = "right after its restart"
		}
		if quick {
			next = "checked; the next kill comes before the writers are back"
		}
		t.Logf("cycle %d: killed %v %s; term %v, then %v; restarted in %v, writes held %v more; %v %v after the kill; revision %d; acked %d, unknown %d; transactions acked %d, unknown %d",
			cycle, delay.Round(time.Millisecond), served, prevTerm, term, restarted.Round(time.Millisecond), held.Round(time.Millisecond),
			next, time.Since(restart).Round(time.Millisecond), rev, m.nAcked.Load(), m.nUnknown.Load(), m.nTxnAcked.Load(), m.nTxnUnknown.Load())
	}

	stopWriters()
	rev, _ = crashCheck(t, srv, m, rev, "at the end")
	srv.Stop(t)
	t.Logf("crash: seed %d, %d cycles, %d acked writes (%d large values written), %d unknown, %d refused, %d reads (%d cached), %d fencing tokens, revision %d, elapsed %v",
		seed, len(m.barriers), m.nAcked.Load(), m.nLarge.Load(), m.nUnknown.Load(), m.nRefused.Load(), m.nReads.Load(), m.nCached.Load(), m.nTokens.Load(), rev, time.Since(begin).Round(time.Millisecond))
	logTxns(t, m)
}
