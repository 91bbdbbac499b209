package main

// Transactions under the crash tests (TestCrashKill, TestCrashCluster).
// Besides its other work, each writer commits transactions on keys that it
// alone writes, under txn/w<id>/:
//   - k0, k1 and k2, which its transactions put, two or three at a time, and
//     never delete. Some compare the version of one of them with the last
//     version the writer saw (If), and put another set of keys when it does
//     not hold (Else); some put one key under a write lease (Under).
//   - mva and mvb, the two places of a file: a first transaction creates it
//     at mva (If both are absent), and renames move it between them:
//     If(Exists(src), Absent(dst)) Then(Put(dst), Delete(src)).
//
// A transaction takes two sequence numbers of its writer: the values its
// Then branch puts carry the first (a writeID), those of its Else branch the
// second, so a value names the transaction and the branch that put it. Only
// writer w writes these keys, one operation at a time, so each key's values
// come in the order of their sequence numbers. Every check lists each
// writer's keys at one revision (txnViolations): a value of transaction T at
// version v on one key says that T's branch was applied, so every other key
// of that branch must show it too: a key it put at version v with T's value,
// or at a later version with a later value; a key it deleted absent, or at a
// later version. A key that shows an older version, or is absent where T put
// it, is a half-applied transaction. The file must never be at both places,
// and at one of them once its creation is known. A transaction whose outcome
// is unknown is held to the same rule: any key that shows it requires all
// of its branch.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
)

const (
	// crashTxnKeys is how many keys (k0, k1, ...) each writer's
	// transactions put.
	crashTxnKeys = 3
	// maxTxnValue bounds a value that a transaction puts, so that the
	// listing of a writer's keys (at most four present: k0-k2 and the
	// file) fits the one page that a check needs: a page holds half the
	// largest value, 512 KiB by default.
	maxTxnValue = 96 << 10
)

// txnPrefix is the prefix of writer w's transaction keys.
func txnPrefix(w int) string { return fmt.Sprintf("txn/w%d/", w) }

// txnKey is writer w's i-th key that transactions put.
func txnKey(w, i int) string { return fmt.Sprintf("txn/w%d/k%d", w, i) }

// mvKey is place 0 (mva) or 1 (mvb) of writer w's file.
func mvKey(w, place int) string { return fmt.Sprintf("txn/w%d/mv%c", w, 'a'+place) }

// txnKind is what a crash writer's transaction does.
type txnKind int

const (
	txnPuts   txnKind = iota // puts of two or three keys, maybe If a version, Else others
	txnFenced                // puts of two keys, one of them Under a write lease
	txnCreate                // If the file is at neither place, put it at mva
	txnRename                // If(Exists(src), Absent(dst)) Then(Put(dst), Delete(src))
)

func (k txnKind) String() string {
	return [...]string{"puts", "fenced puts", "create", "rename"}[k]
}

// txnOp is one op of a branch: a put of a value carrying the branch's
// writeID, or a delete.
type txnOp struct {
	key string
	del bool
}

// txnRec is one transaction of a crash writer, its outcome, and what the
// checks found of it. The model's mutex guards its fields once beginTxn
// has registered it.
type txnRec struct {
	writer           int
	kind             txnKind
	then, els        writeID // the IDs of the values each branch puts
	thenOps, elseOps []txnOp
	compared         bool // it has compares: without, Then always applies

	epoch     int    // kills done when it began
	outcome   int    // inFlight, acked, refused or unknown, as for a write
	succeeded bool   // acked: Then was applied
	revision  uint64 // acked: its Revision

	// seen: a check found a value of it, so it was applied (whole, or the
	// check reported it). notApplied: the last check found every key it
	// puts, in either branch, absent or at an older value.
	seen, notApplied bool
}

// ops returns the branch whose values carry id.
func (t *txnRec) ops(id writeID) []txnOp {
	if id == t.els {
		return t.elseOps
	}
	return t.thenOps
}

// applied returns the ID and the ops of the branch an acknowledged
// transaction applied.
func (t *txnRec) applied() (writeID, []txnOp) {
	if t.succeeded {
		return t.then, t.thenOps
	}
	return t.els, t.elseOps
}

func (t *txnRec) String() string {
	desc := func(ops []txnOp) string {
		var b strings.Builder
		for i, op := range ops {
			if i > 0 {
				b.WriteString(", ")
			}
			if op.del {
				fmt.Fprintf(&b, "delete %s", op.key)
			} else {
				fmt.Fprintf(&b, "put %s", op.key)
			}
		}
		return b.String()
	}
	s := fmt.Sprintf("transaction %v (%s: then %s", t.then, t.kind, desc(t.thenOps))
	if t.compared {
		s += fmt.Sprintf("; else %v: %s", t.els, desc(t.elseOps))
	}
	return s + ")"
}

// beginTxn records a transaction about to be sent.
func (m *crashModel) beginTxn(t *txnRec) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t.epoch = len(m.barriers)
	m.txns[t.then], m.txns[t.els] = t, t
	for _, op := range slices.Concat(t.thenOps, t.elseOps) {
		if op.del {
			m.keys[op.key].deletes++
		}
	}
}

// finishTxn records a transaction's outcome and checks what it alone can
// show, as finish does for a write: the revision of a branch that wrote
// keys is new, and above everything acknowledged before a kill that came
// before the transaction began; that of a branch that wrote nothing (the
// store's) is not below it.
func (m *crashModel) finishTxn(t *txnRec, res client.TxnResult, err error) {
	m.mu.Lock()
	switch {
	case err == nil:
	case errors.Is(err, client.ErrFenced), errors.Is(err, client.ErrCanceled):
		t.outcome = refused
		m.mu.Unlock()
		m.nTxnRefused.Add(1)
		return
	case errors.Is(err, client.ErrInvalidArgument), errors.Is(err, client.ErrTooLarge):
		// The server refused it whole; the writer built a bad one.
		t.outcome = refused
		m.mu.Unlock()
		m.violation("writer %d: %v: %v", t.writer, t, err)
		return
	default:
		t.outcome = unknown
		m.mu.Unlock()
		m.nTxnUnknown.Add(1)
		return
	}
	t.outcome, t.succeeded, t.revision = acked, res.Succeeded, res.Revision
	id, ops := t.applied()
	ver := res.Revision
	var bad []string
	var barrier uint64
	if t.epoch > 0 {
		barrier = m.barriers[t.epoch-1].version
	}
	if len(ops) == 0 {
		if ver < barrier {
			bad = append(bad, fmt.Sprintf("%v, begun after kill %d, changed nothing at the store's revision %d, below the %d acknowledged before it", t, t.epoch, ver, barrier))
		}
	} else {
		if prev, ok := m.byVersion[ver]; ok {
			bad = append(bad, fmt.Sprintf("version %d acknowledged twice: to %s and to %v", ver, m.describe(prev), t))
		}
		if t.epoch > 0 && ver <= barrier {
			bad = append(bad, fmt.Sprintf("%v, begun after kill %d, got version %d, not above %d acknowledged before it", t, t.epoch, ver, barrier))
		}
		m.byVersion[ver] = id
		for _, op := range ops {
			ks := m.keys[op.key]
			if ver > ks.acked {
				ks.acked, ks.ackedID = ver, id
			}
			if op.del {
				ks.ackedDel++
			}
		}
		m.maxAcked = max(m.maxAcked, ver)
	}
	if t.kind == txnCreate || (t.kind == txnRename && t.succeeded) {
		// Either branch of a create says the file exists: it created it,
		// or found it.
		m.made[t.writer] = true
	}
	m.mu.Unlock()
	m.nTxnAcked.Add(1)
	if !res.Succeeded {
		m.nTxnElse.Add(1)
	}
	if res.Replayed {
		m.nTxnReplayed.Add(1)
	}
	if !res.Succeeded && !t.compared {
		bad = append(bad, fmt.Sprintf("%v has no compares, but took its Else branch", t))
	}
	for _, b := range bad {
		m.violation("%s", b)
	}
}

// describe names the write or the transaction whose value carries id.
// m.mu must be held.
func (m *crashModel) describe(id writeID) string {
	if r := m.writes[id]; r != nil {
		if r.del {
			return fmt.Sprintf("delete %v of %s", id, r.key)
		}
		return fmt.Sprintf("write %v of %s", id, r.key)
	}
	if t := m.txns[id]; t != nil {
		return t.String()
	}
	return fmt.Sprintf("%v, never written", id)
}

// wrote says whether the write or the transaction branch id wrote key, and
// whether it deleted it. m.mu must be held.
func (m *crashModel) wrote(id writeID, key string) (del, ok bool) {
	if r := m.writes[id]; r != nil {
		return r.del, r.key == key
	}
	if t := m.txns[id]; t != nil {
		for _, op := range t.ops(id) {
			if op.key == key {
				return op.del, true
			}
		}
	}
	return false, false
}

// checkTxnValue checks that a value carrying id, found on key at version
// ver, is one that a transaction put there and that the server did not
// refuse, and, if the transaction was acknowledged, that it was put by the
// branch applied, at its revision. It returns what is wrong, or "". m.mu
// must be held.
func (m *crashModel) checkTxnValue(who, key string, id writeID, ver uint64) string {
	t := m.txns[id]
	if del, ok := m.wrote(id, key); !ok || del {
		return fmt.Sprintf("%s read %s at version %d: value %v, which %v does not put there", who, key, ver, id, t)
	}
	switch applied, _ := t.applied(); {
	case t.outcome == refused:
		return fmt.Sprintf("%s read %s at version %d: value %v of %v, which the server refused", who, key, ver, id, t)
	case t.outcome == acked && applied != id:
		return fmt.Sprintf("%s read %s at version %d: value %v of %v, whose other branch was applied", who, key, ver, id, t)
	case t.outcome == acked && t.revision != ver:
		return fmt.Sprintf("%s read %s at version %d: value %v of %v, acknowledged at version %d", who, key, ver, id, t, t.revision)
	}
	return ""
}

// madeOf says whether writer w's file is known to exist: a transaction
// that created it, found it, or moved it was acknowledged.
func (m *crashModel) madeOf(w int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.made[w]
}

// txnViolations checks a listing of writer w's transaction keys, all of
// them as of one revision: every transaction one of whose values it shows
// is there whole (see the top of this file), and writer w's file is at one
// place, or at none if made is false (made: its creation was acknowledged
// before the listing began). It returns what is wrong, and records in the
// transactions what it found of them. It checks neither the values
// themselves nor the versions acknowledged: checkItem and crashCheckAt do.
// The caller must not hold m.mu.
func (m *crashModel) txnViolations(w int, made bool, kvs []client.KV) []string {
	type entry struct {
		version uint64
		id      writeID
		ok      bool // a value of ours: id is valid
	}
	at := make(map[string]entry, len(kvs))
	for _, kv := range kvs {
		_, id, err := parseCrashValue(kv.Value)
		at[kv.Key] = entry{version: kv.Version, id: id, ok: err == nil}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var bad []string
	seen := make(map[*txnRec]bool)
	for _, kv := range kvs {
		e := at[kv.Key]
		t := m.txns[e.id]
		if !e.ok || t == nil {
			continue // checkItem reports it
		}
		seen[t], t.seen = true, true
		for _, op := range t.ops(e.id) {
			if op.key == kv.Key {
				continue
			}
			o, present := at[op.key]
			var what string
			switch {
			case op.del && present && o.version <= e.version:
				what = fmt.Sprintf("%s, which it deleted, is present at version %d (%v)", op.key, o.version, o.id)
			case op.del:
				continue
			case !present:
				what = fmt.Sprintf("%s, which it put, is absent", op.key)
			case o.version < e.version:
				what = fmt.Sprintf("%s, which it put, is at the older version %d (%v)", op.key, o.version, o.id)
			case !o.ok:
				continue // checkItem reports it
			case o.version == e.version && o.id != e.id:
				what = fmt.Sprintf("%s, which it put, is at its version %d but holds %v", op.key, o.version, o.id)
			case o.version > e.version && o.id.seq <= t.els.seq:
				what = fmt.Sprintf("%s, which it put, is at the later version %d but holds %v, not a later write", op.key, o.version, o.id)
			default:
				continue
			}
			bad = append(bad, fmt.Sprintf("half-applied transaction: %s shows %v of %v at version %d, but %s", kv.Key, e.id, t, e.version, what))
		}
	}
	// Transactions of unknown outcome that the listing shows nothing of:
	// were they applied and overwritten since, or not applied? A branch was
	// not applied if a key it writes shows a value older than it (its own
	// would be there, or a later one), or if a key it puts that nobody
	// deletes is absent.
	for id, t := range m.txns {
		if t.writer != w || id != t.then || t.outcome != unknown || seen[t] {
			continue
		}
		t.notApplied = true
		for _, ops := range [][]txnOp{t.thenOps, t.elseOps} {
			out := len(ops) == 0 // changes nothing either way
			for _, op := range ops {
				o, present := at[op.key]
				if (present && o.ok && o.id.seq < t.then.seq) || (!present && !op.del && m.keys[op.key].deletes == 0) {
					out = true
				}
			}
			t.notApplied = t.notApplied && out
		}
	}
	a, inA := at[mvKey(w, 0)]
	b, inB := at[mvKey(w, 1)]
	switch {
	case inA && inB:
		bad = append(bad, fmt.Sprintf("writer %d's file is at both %s (version %d, %v) and %s (version %d, %v): a rename half-applied",
			w, mvKey(w, 0), a.version, a.id, mvKey(w, 1), b.version, b.id))
	case made && !inA && !inB:
		bad = append(bad, fmt.Sprintf("writer %d's file, whose creation was acknowledged, is at neither %s nor %s: a rename half-applied",
			w, mvKey(w, 0), mvKey(w, 1)))
	}
	return bad
}

// txnCounts is what the checks found of the transactions.
type txnCounts struct {
	acked, ackedSeen int // acknowledged; of them, found by a listing
	// Of unknown outcome: found applied by a listing (and checked whole:
	// a violation says if it was not); found not applied by the last one;
	// neither (applied and overwritten before a listing, or not applied and
	// its keys overwritten since).
	unknown, applied, notApplied, undetermined int
}

func (c txnCounts) String() string {
	return fmt.Sprintf("%d acked transactions (%d seen whole in a listing), %d unknown (%d found applied, %d found not applied, %d overwritten before a listing)",
		c.acked, c.ackedSeen, c.unknown, c.applied, c.notApplied, c.undetermined)
}

// txnCounts counts the transactions by outcome and by what the checks
// found of them.
func (m *crashModel) txnCounts() txnCounts {
	m.mu.Lock()
	defer m.mu.Unlock()
	var c txnCounts
	for id, t := range m.txns {
		if id != t.then {
			continue
		}
		switch {
		case t.outcome == acked:
			c.acked++
			if t.seen {
				c.ackedSeen++
			}
		case t.outcome != unknown:
		case t.seen:
			c.unknown++
			c.applied++
		case t.notApplied:
			c.unknown++
			c.notApplied++
		default:
			c.unknown++
			c.undetermined++
		}
	}
	return c
}

// crashCheckTxns lists each writer's transaction keys through c and checks
// each listing: every value in it (checkItem), and every transaction it
// shows, whole (txnViolations). With settle (a cluster), a listing
// answered ErrUnavailable is made again, as getSettled does for a read. It
// returns the highest revision listed at.
func crashCheckTxns(ctx context.Context, t *testing.T, c *client.Client, m *crashModel, when string, settle bool) uint64 {
	t.Helper()
	var maxRev uint64
	for w := range crashWriters {
		made := m.madeOf(w)
		res, err := c.List(ctx, txnPrefix(w))
		for settle && errors.Is(err, client.ErrUnavailable) && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			res, err = c.List(ctx, txnPrefix(w))
		}
		if err != nil {
			t.Fatalf("%s: checker: list %s: %v", when, txnPrefix(w), err)
		}
		if res.More {
			t.Fatalf("%s: checker: the listing of %s took more than a page (%d keys): its values are too large", when, txnPrefix(w), len(res.KVs))
		}
		m.nTxnLists.Add(1)
		who := "checker " + when + " (listing)"
		for _, kv := range res.KVs {
			m.mu.Lock()
			_, known := m.keys[kv.Key]
			m.mu.Unlock()
			switch {
			case !known:
				m.violation("%s listed %s, a key nobody writes", who, kv.Key)
			case kv.Version > res.Revision:
				m.violation("%s listed %s at version %d, above the listing's revision %d", who, kv.Key, kv.Version, res.Revision)
			default:
				m.checkItem(who, kv.Key, true, kv.Value, kv.Version)
			}
		}
		for _, b := range m.txnViolations(w, made, res.KVs) {
			m.violation("%s: %s", when, b)
		}
		maxRev = max(maxRev, res.Revision)
	}
	return maxRev
}

// txnValue is a value for key that a transaction puts: mostly small, some
// of a few KiB, a few large enough for badger's value log, where a torn
// transaction would show.
func (w *crashWriter) txnValue(key string, id writeID) []byte {
	size := 16 + w.rng.IntN(240)
	switch p := w.rng.IntN(100); {
	case p < 4:
		size = 64<<10 + w.rng.IntN(maxTxnValue-64<<10)
		w.m.nLarge.Add(1)
	case p < 14:
		size = 1<<10 + w.rng.IntN(15<<10)
	}
	return crashValue(key, id, size, w.fill)
}

// txn commits a transaction on the writer's own transaction keys.
func (w *crashWriter) txn(ctx context.Context) error {
	switch p := w.rng.IntN(100); {
	case p < 45:
		return w.txnPuts(ctx)
	case p < 75:
		return w.txnMove(ctx)
	default:
		return w.txnFenced(ctx)
	}
}

// txnPuts puts two or three of the writer's keys. Most often it first
// compares one key's version with the last this client saw: that it is
// that version, or, as often, above it. The first holds and the second
// does not, unless a transaction of unknown outcome was applied. The Else
// branch puts that key and another, so that the client learns its version
// again.
func (w *crashWriter) txnPuts(ctx context.Context) error {
	t := &txnRec{writer: w.id, kind: txnPuts, then: w.next(), els: w.next()}
	keys := w.rng.Perm(crashTxnKeys)
	for _, i := range keys[:2+w.rng.IntN(crashTxnKeys-1)] {
		t.thenOps = append(t.thenOps, txnOp{key: txnKey(w.id, i)})
	}
	txn := w.c.Txn(ctx)
	if w.rng.IntN(100) < 60 {
		t.compared = true
		c := keys[w.rng.IntN(crashTxnKeys)]
		other := (c + 1 + w.rng.IntN(crashTxnKeys-1)) % crashTxnKeys
		t.elseOps = []txnOp{{key: txnKey(w.id, c)}, {key: txnKey(w.id, other)}}
		cmp := client.VersionIs
		if w.rng.IntN(2) == 0 {
			cmp = client.VersionAbove
		}
		txn.If(cmp(txnKey(w.id, c), w.seen[txnKey(w.id, c)]))
	}
	return w.commit(txn, t, nil)
}

// txnMove creates the writer's file, until one creation is acknowledged,
// then renames it from where the writer last knew it to be to its other
// place. A rename that does not apply (the file was elsewhere) tells the
// writer that it is at the other place.
func (w *crashWriter) txnMove(ctx context.Context) error {
	a, b := mvKey(w.id, 0), mvKey(w.id, 1)
	if !w.mvMade {
		t := &txnRec{writer: w.id, kind: txnCreate, then: w.next(), els: w.next(), compared: true,
			thenOps: []txnOp{{key: a}}}
		err := w.commit(w.c.Txn(ctx).If(client.Absent(a), client.Absent(b)), t, nil)
		if err == nil {
			w.mvMade, w.mvAt = true, 0
		}
		return err
	}
	src, dst := mvKey(w.id, w.mvAt), mvKey(w.id, 1-w.mvAt)
	t := &txnRec{writer: w.id, kind: txnRename, then: w.next(), els: w.next(), compared: true,
		thenOps: []txnOp{{key: dst}, {key: src, del: true}}}
	err := w.commit(w.c.Txn(ctx).If(client.Exists(src), client.Absent(dst)), t, nil)
	if err == nil {
		w.mvAt = 1 - w.mvAt
	}
	return err
}

// txnFenced acquires the write lease on one of the writer's keys, puts it
// under the lease and another key in one transaction, and releases it.
func (w *crashWriter) txnFenced(ctx context.Context) error {
	i := w.rng.IntN(crashTxnKeys)
	j := (i + 1 + w.rng.IntN(crashTxnKeys-1)) % crashTxnKeys
	epoch := w.m.epoch()
	wl, err := w.c.AcquireWriteLease(ctx, txnKey(w.id, i))
	if err != nil {
		return err
	}
	w.m.token(wl.Token(), epoch)
	t := &txnRec{writer: w.id, kind: txnFenced, then: w.next(), els: w.next(),
		thenOps: []txnOp{{key: txnKey(w.id, i)}, {key: txnKey(w.id, j)}}}
	err = w.commit(w.c.Txn(ctx), t, wl)
	wl.Release(ctx) // an error leaves the lease to run out
	return err
}

// commit adds t's branches to txn, with new values, the put of wl's key
// under wl, and commits it, recording it in the model.
func (w *crashWriter) commit(txn *client.Txn, t *txnRec, wl *client.WriteLease) error {
	branch := func(ops []txnOp, id writeID) []client.TxnOp {
		out := make([]client.TxnOp, len(ops))
		for i, op := range ops {
			if op.del {
				out[i] = client.DeleteOp(op.key)
				continue
			}
			out[i] = client.PutOp(op.key, w.txnValue(op.key, id))
			if wl != nil && wl.Key() == op.key {
				out[i] = out[i].Under(wl)
			}
		}
		return out
	}
	txn.Then(branch(t.thenOps, t.then)...).Else(branch(t.elseOps, t.els)...)
	w.m.beginTxn(t)
	res, err := txn.Commit()
	w.m.finishTxn(t, res, err)
	if err != nil {
		return err
	}
	ops := t.thenOps
	if !res.Succeeded {
		ops = t.elseOps
	}
	for _, op := range ops {
		w.saw(op.key, res.Revision, "transaction")
	}
	return nil
}

// logTxns logs the transactions of a crash test and what its checks found
// of them.
func logTxns(t *testing.T, m *crashModel) {
	t.Helper()
	t.Logf("transactions: %v; %d acked took Else, %d answered as replays, %d refused, %d listings checked",
		m.txnCounts(), m.nTxnElse.Load(), m.nTxnReplayed.Load(), m.nTxnRefused.Load(), m.nTxnLists.Load())
}

// TestCrashTxnCheck: the check of a listing (txnViolations) reports every
// half-applied transaction of a hand-made history, and nothing in states
// that a whole transaction, or none, leaves.
func TestCrashTxnCheck(t *testing.T) {
	t.Parallel()
	k0, k1, k2, mva, mvb := txnKey(0, 0), txnKey(0, 1), txnKey(0, 2), mvKey(0, 0), mvKey(0, 1)
	id := func(seq uint64) writeID { return writeID{0, seq} }
	// The history of writer 0, each transaction's Then ids odd, Else ids
	// even:
	//	create (1, 2): mva, acknowledged at 5
	//	t1 (3, 4): put k0, k1, acknowledged at 10
	//	t2 (5, 6): put k0, k1, k2, outcome unknown
	//	t3 (7, 8): If k0's version... then put k1, k2; else put k0, k2:
	//	           acknowledged at 20, Else applied
	//	mv (9, 10): rename mva to mvb, outcome unknown
	put := func(keys ...string) []txnOp {
		var ops []txnOp
		for _, k := range keys {
			ops = append(ops, txnOp{key: k})
		}
		return ops
	}
	history := func(t *testing.T) (*crashModel, map[string]*txnRec) {
		m := newCrashModel(t, func() {})
		txns := map[string]*txnRec{
			"create": {kind: txnCreate, then: id(1), els: id(2), compared: true, thenOps: put(mva)},
			"t1":     {kind: txnPuts, then: id(3), els: id(4), thenOps: put(k0, k1)},
			"t2":     {kind: txnPuts, then: id(5), els: id(6), thenOps: put(k0, k1, k2)},
			"t3":     {kind: txnPuts, then: id(7), els: id(8), compared: true, thenOps: put(k1, k2), elseOps: put(k0, k2)},
			"mv":     {kind: txnRename, then: id(9), els: id(10), compared: true, thenOps: []txnOp{{key: mvb}, {key: mva, del: true}}},
		}
		for _, step := range []struct {
			name string
			res  client.TxnResult
			err  error
		}{
			{"create", client.TxnResult{Succeeded: true, Revision: 5}, nil},
			{"t1", client.TxnResult{Succeeded: true, Revision: 10}, nil},
			{"t2", client.TxnResult{}, client.ErrUnavailable},
			{"t3", client.TxnResult{Succeeded: false, Revision: 20}, nil},
			{"mv", client.TxnResult{}, client.ErrUnavailable},
		} {
			m.beginTxn(txns[step.name])
			m.finishTxn(txns[step.name], step.res, step.err)
		}
		return m, txns
	}
	// kv is a key at a version, holding a value of id seq; seq 0: a value
	// that is not one of ours.
	kv := func(key string, ver, seq uint64) client.KV {
		if seq == 0 {
			return client.KV{Key: key, Value: []byte("junk"), Version: ver}
		}
		return client.KV{Key: key, Value: crashValue(key, id(seq), 8, rand.NewChaCha8([32]byte{})), Version: ver}
	}
	for _, tc := range []struct {
		name string
		made bool
		kvs  []client.KV
		want []string // a substring of each violation, in order
		// applied and notApplied: the unknown transactions found so.
		applied, notApplied []string
	}{
		{name: "after t1", made: true, kvs: []client.KV{kv(k0, 10, 3), kv(k1, 10, 3), kv(mva, 5, 1)},
			notApplied: []string{"t2", "mv"}},
		{name: "t2 applied whole", made: true, kvs: []client.KV{kv(k0, 12, 5), kv(k1, 12, 5), kv(k2, 12, 5), kv(mva, 5, 1)},
			applied: []string{"t2"}, notApplied: []string{"mv"}},
		{name: "t2 without k1", made: true, kvs: []client.KV{kv(k0, 12, 5), kv(k1, 10, 3), kv(k2, 12, 5), kv(mva, 5, 1)},
			want: []string{
				"k0 shows {0 5} of transaction {0 5} (puts: then put txn/w0/k0, put txn/w0/k1, put txn/w0/k2) at version 12, but txn/w0/k1, which it put, is at the older version 10",
				"k2 shows {0 5} of transaction {0 5}",
			},
			applied: []string{"t2"}, notApplied: []string{"mv"}},
		{name: "t2 without k2, never written before", made: true, kvs: []client.KV{kv(k0, 12, 5), kv(k1, 12, 5), kv(mva, 5, 1)},
			want:    []string{"txn/w0/k2, which it put, is absent", "txn/w0/k2, which it put, is absent"},
			applied: []string{"t2"}, notApplied: []string{"mv"}},
		{name: "t2 and another value at its version", made: true, kvs: []client.KV{kv(k0, 12, 5), kv(k1, 12, 3), kv(k2, 12, 5), kv(mva, 5, 1)},
			want: []string{
				"k0 shows {0 5} of transaction {0 5} (puts: then put txn/w0/k0, put txn/w0/k1, put txn/w0/k2) at version 12, but txn/w0/k1, which it put, is at its version 12 but holds {0 3}",
				"k1 shows {0 3} of transaction {0 3} (puts: then put txn/w0/k0, put txn/w0/k1) at version 12, but txn/w0/k0, which it put, is at its version 12 but holds {0 5}",
				"k2 shows {0 5}",
			},
			applied: []string{"t2"}, notApplied: []string{"mv"}},
		{name: "an older value after t2", made: true, kvs: []client.KV{kv(k0, 12, 5), kv(k1, 14, 3), kv(k2, 12, 5), kv(mva, 5, 1)},
			want: []string{
				"k0 shows {0 5} of transaction {0 5} (puts: then put txn/w0/k0, put txn/w0/k1, put txn/w0/k2) at version 12, but txn/w0/k1, which it put, is at the later version 14 but holds {0 3}, not a later write",
				"k1 shows {0 3} of transaction {0 3} (puts: then put txn/w0/k0, put txn/w0/k1) at version 14, but txn/w0/k0, which it put, is at the older version 12",
				"k2 shows {0 5}",
			},
			applied: []string{"t2"}, notApplied: []string{"mv"}},
		{name: "t3's else whole", made: true, kvs: []client.KV{kv(k0, 20, 8), kv(k1, 10, 3), kv(k2, 20, 8), kv(mva, 5, 1)},
			notApplied: []string{"t2", "mv"}},
		{name: "t3's else without k2", made: true, kvs: []client.KV{kv(k0, 20, 8), kv(k1, 10, 3), kv(mva, 5, 1)},
			want:       []string{"k0 shows {0 8} of transaction {0 7} (puts: then put txn/w0/k1, put txn/w0/k2; else {0 8}: put txn/w0/k0, put txn/w0/k2) at version 20, but txn/w0/k2, which it put, is absent"},
			notApplied: []string{"t2", "mv"}},
		{name: "t3's else, then t2's later writes", made: true, kvs: []client.KV{kv(k0, 20, 8), kv(k1, 10, 3), kv(k2, 22, 5), kv(mva, 5, 1)},
			// t2 began before t3: its value cannot be a later write.
			want: []string{
				"k0 shows {0 8} of transaction {0 7} (puts: then put txn/w0/k1, put txn/w0/k2; else {0 8}: put txn/w0/k0, put txn/w0/k2) at version 20, but txn/w0/k2, which it put, is at the later version 22 but holds {0 5}, not a later write",
				"k2 shows {0 5} of transaction {0 5} (puts: then put txn/w0/k0, put txn/w0/k1, put txn/w0/k2) at version 22, but txn/w0/k0, which it put, is at the older version 20",
				"k2 shows {0 5} of transaction {0 5} (puts: then put txn/w0/k0, put txn/w0/k1, put txn/w0/k2) at version 22, but txn/w0/k1, which it put, is at the older version 10",
			},
			applied: []string{"t2"}, notApplied: []string{"mv"}},
		{name: "the rename applied whole", made: true, kvs: []client.KV{kv(k0, 20, 8), kv(k1, 10, 3), kv(k2, 20, 8), kv(mvb, 25, 9)},
			applied: []string{"mv"}, notApplied: []string{"t2"}},
		{name: "the rename applied, k2 overwritten", made: true, kvs: []client.KV{kv(k0, 20, 8), kv(k1, 30, 11), kv(k2, 30, 11), kv(mvb, 25, 9)},
			applied: []string{"mv"}},
		{name: "the rename's put alone", made: true, kvs: []client.KV{kv(k0, 20, 8), kv(k1, 10, 3), kv(k2, 20, 8), kv(mva, 5, 1), kv(mvb, 25, 9)},
			want:    []string{"txn/w0/mva, which it deleted, is present at version 5", "is at both txn/w0/mva"},
			applied: []string{"mv"}, notApplied: []string{"t2"}},
		{name: "the rename's delete alone", made: true, kvs: []client.KV{kv(k0, 20, 8), kv(k1, 10, 3), kv(k2, 20, 8)},
			want:       []string{"whose creation was acknowledged, is at neither"},
			notApplied: []string{"t2", "mv"}},
		{name: "no file before its creation", made: false, kvs: []client.KV{kv(k0, 20, 8), kv(k1, 10, 3), kv(k2, 20, 8)},
			notApplied: []string{"t2", "mv"}},
		{name: "values not ours are left to checkItem", made: true, kvs: []client.KV{kv(k0, 20, 0), kv(k1, 10, 3), kv(k2, 20, 8), kv(mva, 5, 1)},
			notApplied: []string{"t2", "mv"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, txns := history(t)
			got := m.txnViolations(0, tc.made, tc.kvs)
			if len(got) != len(tc.want) {
				t.Errorf("%d violations, want %d:\n%s", len(got), len(tc.want), strings.Join(got, "\n"))
			}
			for i, w := range tc.want {
				if i < len(got) && !strings.Contains(got[i], w) {
					t.Errorf("violation %d: %s\nwant it to say %q", i, got[i], w)
				}
			}
			for name, tx := range txns {
				if tx.outcome != unknown {
					continue
				}
				if want := slices.Contains(tc.applied, name); tx.seen != want {
					t.Errorf("%s: found applied %v, want %v", name, tx.seen, want)
				}
				if want := slices.Contains(tc.notApplied, name); tx.notApplied != want {
					t.Errorf("%s: found not applied %v, want %v", name, tx.notApplied, want)
				}
			}
		})
	}
}
