package store_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/leased/leased/store"
)

// outcome is a Result that compares by value: its error by message.
type outcome struct {
	Version, Token, Lease uint64
	Err                   string
	Duplicate, Unchanged  bool
	Keys                  []string
}

func outcomes(rs []store.Result) []outcome {
	out := make([]outcome, len(rs))
	for i, r := range rs {
		out[i] = outcome{Version: r.Version, Token: r.Token, Lease: r.Lease, Duplicate: r.Duplicate, Unchanged: r.Unchanged, Keys: r.Keys}
		if r.Err != nil {
			out[i].Err = r.Err.Error()
		}
	}
	return out
}

// commandGen makes random commands over a few keys. It looks at a store's
// state, as a client would, so that compare-and-swaps and ends of write
// leases match about half of the time, and TTL lease commands and writes
// attached to a TTL lease name one that exists most of the time.
type commandGen struct {
	rng  *rand.Rand
	keys []string
}

func (g commandGen) batch(t *testing.T, s store.Store, n int) []store.Command {
	t.Helper()
	st := mustState(t, s)
	var holding []store.TTLLease // TTL leases with keys attached
	for _, l := range listTTL(t, s) {
		if l.Keys > 0 {
			holding = append(holding, l)
		}
	}
	cmds := make([]store.Command, n)
	for i := range cmds {
		key := g.keys[g.rng.IntN(len(g.keys))]
		c := store.Command{Key: []byte(key)}
		if g.rng.IntN(5) == 0 {
			c = g.ttlCommand(st.TTLLeaseID, holding)
		}
		switch p := g.rng.IntN(100); {
		case c.Op != 0:
		case p < 30:
			c.Op, c.Value = store.OpPut, g.value()
		case p < 40:
			c.Op = store.OpDelete
		case p < 50:
			c = g.txn(t, s, st.TTLLeaseID)
		case p < 65:
			c.Op, c.Value = store.OpCAS, g.value()
			v := mustGet(t, s, key).Version
			switch q := g.rng.IntN(10); {
			case q < 5:
				c.Expect = v
			case q < 7:
				c.Expect = 0
			case q < 8 && v > 0:
				c.Expect = v - 1
			default:
				c.Expect = v + 1
			}
		case p < 80:
			c.Op, c.Session = store.OpGrantWriteLease, g.rng.Uint64N(4)+1
			c.Term = time.Duration(g.rng.IntN(10)+1) * time.Second
			if g.rng.IntN(3) > 0 {
				c.Client = g.rng.Uint64N(3) + 1 // the holder's client
			}
		case p < 95:
			c.Op, c.Token = store.OpEndWriteLease, g.rng.Uint64N(st.Fence+2)
			for _, wl := range st.WriteLeases {
				if wl.Key == key && g.rng.IntN(2) == 0 {
					c.Token = wl.Token
				}
			}
		case p < 97:
			c = horizon(time.Unix(1_900_000_000, g.rng.Int64N(1e12)), time.Duration(g.rng.Int64N(int64(time.Hour)))-time.Minute)
		case p < 98:
			c = store.Command{Op: store.OpForgetClients, Clients: []uint64{1, 2, 3}, At: time.Unix(1_900_000_000, g.rng.Int64N(1e12))}
		case p < 99:
			c = store.Command{Op: store.OpCollectTombstones, Through: g.rng.Uint64N(st.Revision + 2)}
		default:
			c = store.Command{Op: store.OpCompact, Through: g.rng.Uint64N(st.Revision + 2)}
			if g.rng.IntN(2) == 0 {
				c.KeepBytes = g.rng.Uint64N(st.History.Bytes + 1)
			}
		}
		// Most writes come from one of three clients, with request IDs
		// that repeat now and then: retries.
		if (c.Op == store.OpPut || c.Op == store.OpCAS) && g.rng.IntN(2) == 0 {
			c.Lease = g.lease(st.TTLLeaseID)
		}
		if (c.Op == store.OpPut || c.Op == store.OpDelete || c.Op == store.OpCAS || c.Op == store.OpGrantTTL || c.Op == store.OpTxn) && g.rng.IntN(4) > 0 {
			c.Client, c.Request = g.rng.Uint64N(3)+1, g.rng.Uint64N(30)+1
			c.Acked = g.rng.Uint64N(c.Request + 1)
			c.At = time.Unix(1_900_000_000, g.rng.Int64N(1e12))
		}
		cmds[i] = c
	}
	return cmds
}

// txn returns a random transaction: compares on the keys that hold now
// and then, puts (some attaching a TTL lease up to one past last) and
// deletes in both branches, and now and then a key written twice, which
// every store refuses.
func (g commandGen) txn(t *testing.T, s store.Store, last uint64) store.Command {
	t.Helper()
	tx := &store.Txn{}
	for range g.rng.IntN(3) {
		key := g.keys[g.rng.IntN(len(g.keys))]
		rec := mustGet(t, s, key)
		c := store.Compare{Key: []byte(key), Op: store.CompareOp(g.rng.IntN(8) + 1), Version: rec.Version + g.rng.Uint64N(2)}
		if g.rng.IntN(2) == 0 {
			c.Value = rec.Value
		} else {
			c.Value = g.value()
		}
		tx.If = append(tx.If, c)
	}
	branch := func() []store.TxnOp {
		var ops []store.TxnOp
		for _, i := range g.rng.Perm(len(g.keys))[:g.rng.IntN(4)] {
			op := store.TxnOp{Op: store.OpDelete, Key: []byte(g.keys[i])}
			if g.rng.IntN(3) > 0 {
				op.Op, op.Value = store.OpPut, g.value()
				if g.rng.IntN(3) == 0 {
					op.Lease = g.lease(last)
				}
			}
			ops = append(ops, op)
		}
		if len(ops) > 0 && g.rng.IntN(20) == 0 {
			ops = append(ops, ops[0])
		}
		return ops
	}
	tx.Then, tx.Else = branch(), branch()
	return store.Command{Op: store.OpTxn, Txn: tx}
}

// lease returns a TTL lease id up to one past last, the last one issued.
func (g commandGen) lease(last uint64) uint64 { return g.rng.Uint64N(last + 2) }

// ttlCommand returns a random TTL lease command; a revoke names one of the
// leases holding keys most of the time, and expects its attachment
// generation, an older one, or none.
func (g commandGen) ttlCommand(last uint64, holding []store.TTLLease) store.Command {
	switch p := g.rng.IntN(100); {
	case p < 30:
		return store.Command{Op: store.OpGrantTTL, Term: time.Duration(g.rng.IntN(10)) * time.Second}
	case p < 50:
		if len(holding) > 0 && g.rng.IntN(3) > 0 {
			l := holding[g.rng.IntN(len(holding))]
			return store.Command{Op: store.OpRevokeTTL, Lease: l.ID, Expect: l.Gen - g.rng.Uint64N(min(l.Gen, 3)), Expired: g.rng.IntN(2) == 0}
		}
		return store.Command{Op: store.OpRevokeTTL, Lease: g.lease(last), Expect: g.rng.Uint64N(3)}
	case p < 75:
		c := store.Command{Op: store.OpCheckpointTTL}
		for range g.rng.IntN(4) {
			c.Checkpoints = append(c.Checkpoints, store.TTLCheckpoint{ID: g.lease(last), Remaining: time.Duration(g.rng.Int64N(int64(10*time.Second))) - time.Second/10})
		}
		return c
	default:
		c := store.Command{Op: store.OpKeptAliveTTL}
		for range g.rng.IntN(4) {
			c.Leases = append(c.Leases, g.lease(last))
		}
		return c
	}
}

func (g commandGen) value() []byte {
	if g.rng.IntN(8) == 0 {
		return nil
	}
	v := make([]byte, g.rng.IntN(64))
	for i := range v {
		v[i] = byte(g.rng.Uint32())
	}
	return v
}

// wantSameStores fails t unless a and b hold the same state, records and
// TTL leases.
func wantSameStores(t *testing.T, a, b store.Store, keys []string) {
	t.Helper()
	wantSameState(t, mustState(t, b), mustState(t, a))
	la, lb := listTTL(t, a), listTTL(t, b)
	if !reflect.DeepEqual(la, lb) {
		t.Errorf("TTL leases:\n%+v\n%+v", la, lb)
	}
	for _, l := range la {
		_, ka, _, erra := a.TTLLease(l.ID)
		_, kb, _, errb := b.TTLLease(l.ID)
		if erra != nil || errb != nil || !reflect.DeepEqual(ka, kb) {
			t.Errorf("keys of TTL lease %d: %q, %v and %q, %v", l.ID, ka, erra, kb, errb)
		}
	}
	for _, k := range keys {
		if ra, rb := mustGet(t, a, k), mustGet(t, b, k); !reflect.DeepEqual(ra, rb) {
			t.Errorf("Get(%q) = %+v and %+v", k, ra, rb)
		}
	}
	rev := mustState(t, a).Revision
	for _, o := range []store.RangeOptions{
		{},
		{KeysOnly: true},
		{Start: []byte("b"), End: []byte("e"), Limit: 2},
		{After: []byte("c"), MaxBytes: 40},
		{Known: rev},
		{Start: []byte("b"), End: []byte("d"), Known: rev - min(rev, 10)},
		{Start: []byte("e"), Known: rev - min(rev, 3)},
	} {
		if ra, rb := mustRange(t, a, o), mustRange(t, b, o); !reflect.DeepEqual(ra, rb) {
			t.Errorf("Range(%+v) =\n%+v\n%+v", o, ra, rb)
		}
	}
	// Range lists the keys Get finds, as Get finds them.
	all := mustRange(t, a, store.RangeOptions{})
	var live []store.KV
	for _, k := range keys {
		if r := mustGet(t, a, k); r.Found {
			live = append(live, store.KV{Key: []byte(k), Value: r.Value, Version: r.Version})
		}
	}
	if !reflect.DeepEqual(all.KVs, live) {
		t.Errorf("Range = %+v; Get finds %+v", all.KVs, live)
	}
}

// TestSameCommandsSameState applies the same random batches to a Memory and
// to a Badger: every result, every state, every record and TTL lease, and
// the digest must be the same, also after the Badger is opened again.
func TestSameCommandsSameState(t *testing.T) {
	const commands = 1000
	keys := []string{"a", "b", "c", "d", "e", "f"}
	var changed, regranted int // over every seed
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			g := commandGen{rng: rand.New(rand.NewPCG(seed, 0x1ea5ed)), keys: keys}
			m := store.NewMemory()
			defer m.Close()
			dir := t.TempDir()
			b := openBadger(t, dir)
			var mismatches, revoked int
			for n := 0; n < commands; {
				cmds := g.batch(t, m, 1+g.rng.IntN(25))
				n += len(cmds)
				rm, rb := mustApply(t, m, cmds...), mustApply(t, b, cmds...)
				if om, ob := outcomes(rm), outcomes(rb); !reflect.DeepEqual(om, ob) {
					t.Fatalf("batch of %d after %d commands:\nmemory %+v\nbadger %+v", len(cmds), n, om, ob)
				}
				for _, r := range rm {
					if r.Err != nil {
						mismatches++
					}
					if errors.Is(r.Err, store.ErrLeaseChanged) {
						changed++
					}
					if r.Lease != 0 && r.Duplicate {
						regranted++
					}
					revoked += len(r.Keys)
				}
				wantSameStores(t, m, b, keys)
			}
			st := mustState(t, m)
			t.Logf("revision %d, fence %d, %d write leases, %d TTL leases granted, %d keys revoked, %d commands refused", st.Revision, st.Fence, len(st.WriteLeases), st.TTLLeaseID, revoked, mismatches)
			b = reopenBadger(t, b, dir)
			wantSameStores(t, m, b, keys)
			if dm, db := mustSummarize(t, m).Digest, mustSummarize(t, b).Digest; dm != db {
				t.Errorf("digests %v and %v", dm, db)
			}
			if err := b.Check(); err != nil {
				t.Errorf("Check: %v", err)
			}
		})
	}
	t.Logf("%d revokes of changed leases, %d retried grants", changed, regranted)
	if changed == 0 || regranted == 0 {
		t.Errorf("the commands made %d revokes of changed leases and %d retried grants; want some of each", changed, regranted)
	}
}
