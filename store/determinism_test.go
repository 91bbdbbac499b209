package store_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/leased/leased/store"
)

// outcome is a Result that compares by value: its error by message.
type outcome struct {
	Version, Token uint64
	Err            string
	Duplicate      bool
}

func outcomes(rs []store.Result) []outcome {
	out := make([]outcome, len(rs))
	for i, r := range rs {
		out[i] = outcome{Version: r.Version, Token: r.Token, Duplicate: r.Duplicate}
		if r.Err != nil {
			out[i].Err = r.Err.Error()
		}
	}
	return out
}

// commandGen makes random commands over a few keys. It looks at a store's
// state, as a client would, so that compare-and-swaps and ends of write
// leases match about half of the time.
type commandGen struct {
	rng  *rand.Rand
	keys []string
}

func (g commandGen) batch(t *testing.T, s store.Store, n int) []store.Command {
	t.Helper()
	st := mustState(t, s)
	cmds := make([]store.Command, n)
	for i := range cmds {
		key := g.keys[g.rng.IntN(len(g.keys))]
		c := store.Command{Key: []byte(key)}
		switch p := g.rng.IntN(100); {
		case p < 30:
			c.Op, c.Value = store.OpPut, g.value()
		case p < 40:
			c.Op = store.OpDelete
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
		default:
			c = store.Command{Op: store.OpForgetClients, Clients: []uint64{1, 2, 3}, At: time.Unix(1_900_000_000, g.rng.Int64N(1e12))}
		}
		// Most writes come from one of three clients, with request IDs
		// that repeat now and then: retries.
		if (c.Op == store.OpPut || c.Op == store.OpDelete || c.Op == store.OpCAS) && g.rng.IntN(4) > 0 {
			c.Client, c.Request = g.rng.Uint64N(3)+1, g.rng.Uint64N(30)+1
			c.Acked = g.rng.Uint64N(c.Request + 1)
			c.At = time.Unix(1_900_000_000, g.rng.Int64N(1e12))
		}
		cmds[i] = c
	}
	return cmds
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

// wantSameStores fails t unless a and b hold the same state and records.
func wantSameStores(t *testing.T, a, b store.Store, keys []string) {
	t.Helper()
	wantSameState(t, mustState(t, b), mustState(t, a))
	for _, k := range keys {
		if ra, rb := mustGet(t, a, k), mustGet(t, b, k); !reflect.DeepEqual(ra, rb) {
			t.Errorf("Get(%q) = %+v and %+v", k, ra, rb)
		}
	}
}

// TestSameCommandsSameState applies the same random batches to a Memory and
// to a Badger: every result, every state and every record must be the same,
// also after the Badger is opened again.
func TestSameCommandsSameState(t *testing.T) {
	const commands = 400
	keys := []string{"a", "b", "c", "d", "e", "f"}
	for seed := range uint64(3) {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) {
			g := commandGen{rng: rand.New(rand.NewPCG(seed, 0x1ea5ed)), keys: keys}
			m := store.NewMemory()
			defer m.Close()
			dir := t.TempDir()
			b := openBadger(t, dir)
			var mismatches int
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
				}
				wantSameStores(t, m, b, keys)
			}
			st := mustState(t, m)
			t.Logf("revision %d, fence %d, %d write leases, %d compare-and-swaps did not match", st.Revision, st.Fence, len(st.WriteLeases), mismatches)
			wantSameStores(t, m, reopenBadger(t, b, dir), keys)
		})
	}
}
