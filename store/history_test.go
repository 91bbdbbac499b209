package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/leased/leased/store"
)

// readAll reads the history from from through the end in pages of opts'
// bounds, checking that pages follow each other (each starts where the
// last said, ends at a revision boundary, and no revision is split), and
// returns every event.
func readAll(t *testing.T, s store.Store, from uint64, opts store.HistoryOptions) []store.Event {
	t.Helper()
	var all []store.Event
	opts.From = from
	for range 100000 {
		p, err := s.History(opts)
		if err != nil {
			t.Fatalf("History(%+v): %v", opts, err)
		}
		if p.Next <= opts.From && opts.From <= p.Revision {
			t.Fatalf("History from %d: next %d makes no progress", opts.From, p.Next)
		}
		for i, e := range p.Events {
			if e.Revision < opts.From || e.Revision >= p.Next {
				t.Fatalf("page [%d, %d) holds an event at %d", opts.From, p.Next, e.Revision)
			}
			if i > 0 && (e.Revision < p.Events[i-1].Revision || e.Revision == p.Events[i-1].Revision && bytes.Compare(e.Key, p.Events[i-1].Key) <= 0) {
				t.Fatalf("events out of order: %d %q after %d %q", e.Revision, e.Key, p.Events[i-1].Revision, p.Events[i-1].Key)
			}
		}
		all = append(all, p.Events...)
		if p.Next > p.Revision {
			return all
		}
		opts.From = p.Next
	}
	t.Fatal("History never reached the end")
	return nil
}

// historyModel is what the history must hold: every change, by the
// results of the commands that made it.
type historyModel struct {
	events []store.Event
	state  map[string]store.Event // each key's last event
}

// note records the events of command c, whose result is r, in a store
// whose revision was rev before it.
func (m *historyModel) note(c store.Command, r store.Result, rev uint64) {
	if r.Err != nil || r.Duplicate || r.Version != rev+1 {
		return
	}
	var evs []store.Event
	add := func(kind store.EventKind, key, value []byte, lease uint64) {
		e := store.Event{Kind: kind, Key: key, Revision: r.Version, Lease: lease}
		if kind == store.EventPut {
			e.Value = value
		}
		if p, ok := m.state[string(key)]; ok && p.Kind == store.EventPut {
			e.PrevFound, e.PrevValue, e.PrevRevision = true, p.Value, p.Revision
		}
		evs = append(evs, e)
	}
	switch c.Op {
	case store.OpPut, store.OpCAS:
		add(store.EventPut, c.Key, c.Value, c.Lease)
	case store.OpDelete:
		add(store.EventDelete, c.Key, nil, 0)
	case store.OpTxn:
		ops := c.Txn.Then
		if !r.Succeeded {
			ops = c.Txn.Else
		}
		for _, op := range ops {
			if op.Op == store.OpPut {
				add(store.EventPut, op.Key, op.Value, op.Lease)
			} else if p, ok := m.state[string(op.Key)]; ok && p.Kind == store.EventPut {
				add(store.EventDelete, op.Key, nil, 0)
			}
		}
	case store.OpRevokeTTL:
		kind := store.EventDelete
		if c.Expired {
			kind = store.EventExpire
		}
		for _, k := range r.Keys {
			add(kind, []byte(k), nil, c.Lease)
		}
	}
	slices.SortFunc(evs, func(a, b store.Event) int { return bytes.Compare(a.Key, b.Key) })
	for _, e := range evs {
		m.state[string(e.Key)] = e
	}
	m.events = append(m.events, evs...)
}

// after returns the events of the model from revision from on, without
// their previous values unless prev.
func (m *historyModel) after(from uint64, prev bool) []store.Event {
	var out []store.Event
	for _, e := range m.events {
		if e.Revision < from {
			continue
		}
		if !prev {
			e.PrevFound, e.PrevValue, e.PrevRevision = false, nil, 0
		}
		out = append(out, e)
	}
	return out
}

func eventsEqual(a, b []store.Event) bool {
	return slices.EqualFunc(a, b, func(x, y store.Event) bool {
		return x.Kind == y.Kind && bytes.Equal(x.Key, y.Key) && x.Revision == y.Revision && bytes.Equal(x.Value, y.Value) &&
			x.Lease == y.Lease && x.PrevFound == y.PrevFound && bytes.Equal(x.PrevValue, y.PrevValue) && x.PrevRevision == y.PrevRevision
	})
}

// TestHistoryMatchesModel applies random writes, transactions, TTL
// leases, revocations and expiries, and compactions (by revision and by
// bytes), and checks after each batch that the history holds exactly the
// events of the revisions above its compaction point, in order, each with
// the value its key held before (PrevValue) even where that value's own
// event was compacted; that pages of any bounds put them together; that
// a read below the compaction point fails with its revision; that a key
// range reads only its keys; and that the database checks clean.
func TestHistoryMatchesModel(t *testing.T) {
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 1))
			s := im.open(t)
			m := &historyModel{state: make(map[string]store.Event)}
			keys := []string{"a", "b", "c", "d/1", "d/2", "e"}
			var leases []uint64
			compactions := 0
			for batch := range 60 {
				for range 1 + rng.IntN(20) {
					st := mustState(t, s)
					key := []byte(keys[rng.IntN(len(keys))])
					value := fmt.Appendf(nil, "v%d", rng.IntN(1000))
					var c store.Command
					switch p := rng.IntN(100); {
					case p < 40:
						c = store.Command{Op: store.OpPut, Key: key, Value: value}
						if len(leases) > 0 && rng.IntN(3) == 0 {
							c.Lease = leases[rng.IntN(len(leases))]
						}
					case p < 55:
						c = store.Command{Op: store.OpDelete, Key: key}
					case p < 65:
						rec := mustGet(t, s, string(key))
						c = store.Command{Op: store.OpCAS, Key: key, Value: value, Expect: rec.Version + rng.Uint64N(2)}
					case p < 80:
						tx := &store.Txn{If: []store.Compare{{Key: key, Op: store.CmpExists}}}
						for _, i := range rng.Perm(len(keys))[:1+rng.IntN(3)] {
							op := store.TxnOp{Op: store.OpPut, Key: []byte(keys[i]), Value: value}
							if rng.IntN(3) == 0 {
								op = store.TxnOp{Op: store.OpDelete, Key: []byte(keys[i])}
							}
							if rng.IntN(2) == 0 {
								tx.Then = append(tx.Then, op)
							} else {
								tx.Else = append(tx.Else, op)
							}
						}
						c = store.Command{Op: store.OpTxn, Txn: tx}
					case p < 86:
						c = store.Command{Op: store.OpGrantTTL, Term: time.Second}
					case p < 92:
						if len(leases) == 0 {
							continue
						}
						i := rng.IntN(len(leases))
						c = store.Command{Op: store.OpRevokeTTL, Lease: leases[i], Expired: rng.IntN(2) == 0}
						leases = slices.Delete(leases, i, i+1)
					default:
						compactions++
						c = store.Command{Op: store.OpCompact, Through: st.Revision - min(st.Revision, rng.Uint64N(8))}
						if rng.IntN(3) == 0 {
							c.KeepBytes = st.History.Bytes / 2
						}
					}
					r := mustApply(t, s, c)[0]
					if c.Op == store.OpGrantTTL {
						leases = append(leases, r.Lease)
					}
					m.note(c, r, st.Revision)
				}
				st := mustState(t, s)
				from := st.History.Compacted + 1
				prev := rng.IntN(2) == 0
				opts := store.HistoryOptions{Prev: prev, MaxEvents: rng.IntN(4), MaxBytes: rng.IntN(40), MaxScan: rng.IntN(5)}
				got := readAll(t, s, from, opts)
				if want := m.after(from, prev); !eventsEqual(got, want) {
					t.Fatalf("batch %d: history from %d (%+v):\n got %+v\nwant %+v", batch, from, opts, got, want)
				}
				if st.History.Events < uint64(len(got)) || len(got) > 0 && st.History.Bytes == 0 {
					t.Fatalf("batch %d: state %+v counts fewer events than the %d read", batch, st.History, len(got))
				}
				// A key range reads its keys only.
				lo, hi := []byte("b"), []byte("d/2")
				ranged := readAll(t, s, from, store.HistoryOptions{Start: lo, End: hi, Prev: true})
				var want []store.Event
				for _, e := range m.after(from, true) {
					if bytes.Compare(e.Key, lo) >= 0 && bytes.Compare(e.Key, hi) < 0 {
						want = append(want, e)
					}
				}
				if !eventsEqual(ranged, want) {
					t.Fatalf("batch %d: history of [b, d/2) from %d:\n got %+v\nwant %+v", batch, from, ranged, want)
				}
				if st.History.Compacted > 0 {
					_, err := s.History(store.HistoryOptions{From: st.History.Compacted})
					var ce *store.CompactedError
					if !errors.As(err, &ce) || !errors.Is(err, store.ErrCompacted) || ce.Compacted != st.History.Compacted {
						t.Fatalf("batch %d: a read from the compaction point %d: %v, want a CompactedError naming it", batch, st.History.Compacted, err)
					}
				}
			}
			st := mustState(t, s)
			t.Logf("revision %d, %d events made, history %+v", st.Revision, len(m.events), st.History)
			if compactions == 0 || st.History.Compacted == 0 {
				t.Fatalf("no compaction in the whole run: %d asked, compaction point %d", compactions, st.History.Compacted)
			}
			if b, ok := s.(*store.Badger); ok {
				if err := b.Check(); err != nil {
					t.Fatalf("Check: %v", err)
				}
			}
		})
	}
}

// TestBumpMarksHistoryCompacted: after a restore's Bump, a read of the
// history from the bumped revision or below fails with ErrCompacted naming
// it, so that a watcher of the state before the restore lists again; the
// changes made since read as usual, with their previous values.
func TestBumpMarksHistoryCompacted(t *testing.T) {
	b := openBadger(t, t.TempDir())
	mustApply(t, b, put("a", "1"), put("b", "2"))
	if err := b.Bump(10); err != nil {
		t.Fatal(err)
	}
	st := mustState(t, b)
	if st.Revision != 12 || st.History.Compacted != 12 {
		t.Fatalf("after Bump(10): revision %d, compaction point %d; want 12, 12", st.Revision, st.History.Compacted)
	}
	var ce *store.CompactedError
	if _, err := b.History(store.HistoryOptions{From: 2}); !errors.As(err, &ce) || ce.Compacted != 12 {
		t.Fatalf("a read from revision 2 after the bump: %v, want a CompactedError naming 12", err)
	}
	mustApply(t, b, put("a", "3"))
	got := readAll(t, b, 13, store.HistoryOptions{Prev: true})
	want := []store.Event{{Kind: store.EventPut, Key: []byte("a"), Revision: 13, Value: []byte("3"), PrevFound: true, PrevValue: []byte("1"), PrevRevision: 1}}
	if !eventsEqual(got, want) {
		t.Fatalf("history after the bump: %+v, want %+v", got, want)
	}
}

// TestHistoryOfACompactedKey: a key whose events were all compacted gives,
// at its next change, the value it held as the previous one: a base made
// from its record in the step of the change.
func TestHistoryOfACompactedKey(t *testing.T) {
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			s := im.open(t)
			mustApply(t, s, put("a", "1"), put("b", "x"), store.Command{Op: store.OpCompact, Through: 2})
			if st := mustState(t, s); st.History.Compacted != 2 || st.History.Events != 0 || st.History.Bytes != 0 {
				t.Fatalf("after compacting everything: %+v, want compaction point 2 and nothing held", st.History)
			}
			mustApply(t, s, put("a", "2"), del("b"))
			got := readAll(t, s, 3, store.HistoryOptions{Prev: true})
			want := []store.Event{
				{Kind: store.EventPut, Key: []byte("a"), Revision: 3, Value: []byte("2"), PrevFound: true, PrevValue: []byte("1"), PrevRevision: 1},
				{Kind: store.EventDelete, Key: []byte("b"), Revision: 4, PrevFound: true, PrevValue: []byte("x"), PrevRevision: 2},
			}
			if !eventsEqual(got, want) {
				t.Fatalf("history: %+v, want %+v", got, want)
			}
			// Compacting the changes drops the bases made for them.
			mustApply(t, s, store.Command{Op: store.OpCompact, Through: 4})
			if st := mustState(t, s); st.History.Events != 0 || st.History.Bytes != 0 {
				t.Fatalf("after compacting the changes: %+v, want nothing held", st.History)
			}
		})
	}
}
