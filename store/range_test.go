package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/store"
)

// mustRange reads the range opts names and fails t on an error.
func mustRange(t *testing.T, s store.Store, opts store.RangeOptions) store.Range {
	t.Helper()
	r, err := s.Range(opts)
	if err != nil {
		t.Fatalf("Range(%+v): %v", opts, err)
	}
	return r
}

// rangeKeys returns the keys of r, as strings.
func rangeKeys(r store.Range) []string {
	keys := make([]string, len(r.KVs))
	for i, kv := range r.KVs {
		keys[i] = string(kv.Key)
	}
	return keys
}

// wantKeys fails t unless the range opts names holds keys, in that order,
// and More is more.
func wantKeys(t *testing.T, s store.Store, opts store.RangeOptions, more bool, keys ...string) store.Range {
	t.Helper()
	r := mustRange(t, s, opts)
	if got := rangeKeys(r); !slices.Equal(got, keys) || r.More != more {
		t.Errorf("Range(%+v) = %q, More %v; want %q, More %v", opts, got, r.More, keys, more)
	}
	return r
}

// known is opts with Known n.
func known(opts store.RangeOptions, n uint64) store.RangeOptions {
	opts.Known = n
	return opts
}

// rng is a range from start to end, briefly.
func rng(start, end string) store.RangeOptions {
	return store.RangeOptions{Start: []byte(start), End: []byte(end)}
}

// rangeContract: Range reads the live user keys, a page at a time.
var rangeContract = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"range of an empty store", func(t *testing.T, s store.Store) {
		r := wantKeys(t, s, store.RangeOptions{}, false)
		if r.Revision != 0 || r.KVs != nil {
			t.Errorf("Range of an empty store = %+v", r)
		}
	}},
	{"range lists a prefix in key order", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("b/1", "x"), put("a/2", "v2"), put("a/10", "v10"), put("a", "v"), put("a/1", "v1"), put("a0", "y"))
		r := wantKeys(t, s, rng("a/", "a0"), false, "a/1", "a/10", "a/2")
		want := []store.KV{{Key: []byte("a/1"), Value: []byte("v1"), Version: 5}, {Key: []byte("a/10"), Value: []byte("v10"), Version: 3}, {Key: []byte("a/2"), Value: []byte("v2"), Version: 2}}
		if !reflect.DeepEqual(r.KVs, want) || r.Revision != 6 {
			t.Errorf("Range = %+v; want %+v at revision 6", r, want)
		}
	}},
	{"range bounds: start inclusive, end exclusive, empty end unbounded", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"), put("b", "2"), put("c", "3"), put("d", "4"), put("\xff\xff", "5"))
		wantKeys(t, s, rng("b", "d"), false, "b", "c")
		wantKeys(t, s, rng("b", "c\x00"), false, "b", "c")
		wantKeys(t, s, rng("a\x00", "c"), false, "b")
		wantKeys(t, s, rng("b", ""), false, "b", "c", "d", "\xff\xff")
		wantKeys(t, s, rng("", "b"), false, "a")
		wantKeys(t, s, rng("", ""), false, "a", "b", "c", "d", "\xff\xff")
		wantKeys(t, s, rng("b", "b"), false)
		wantKeys(t, s, rng("e", "f"), false)
	}},
	{"range after skips through the last key of the page before", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"), put("b", "2"), put("c", "3"), put("d", "4"))
		after := func(start, end, after string) store.RangeOptions {
			o := rng(start, end)
			o.After = []byte(after)
			return o
		}
		wantKeys(t, s, after("", "", "b"), false, "c", "d")
		wantKeys(t, s, after("", "", "bb"), false, "c", "d")
		wantKeys(t, s, after("b", "d", "b"), false, "c")
		wantKeys(t, s, after("c", "", "a"), false, "c", "d") // before Start: Start bounds
		wantKeys(t, s, after("", "c", "c"), false)
		wantKeys(t, s, after("", "", "d"), false)
	}},
	{"range limit and more", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"), put("b", "2"), put("c", "3"), put("d", "4"))
		lim := func(start, end string, limit int) store.RangeOptions {
			o := rng(start, end)
			o.Limit = limit
			return o
		}
		wantKeys(t, s, lim("", "", 1), true, "a")
		wantKeys(t, s, lim("", "", 3), true, "a", "b", "c")
		wantKeys(t, s, lim("", "", 4), false, "a", "b", "c", "d") // exactly at the end
		wantKeys(t, s, lim("", "", 5), false, "a", "b", "c", "d")
		wantKeys(t, s, lim("a", "c", 2), false, "a", "b") // exactly at End
		wantKeys(t, s, lim("a", "d", 2), true, "a", "b")
		// A deletion past the last key is no key more.
		mustApply(t, s, del("d"))
		wantKeys(t, s, lim("", "", 3), false, "a", "b", "c")
	}},
	{"range max bytes returns at least one key", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "12345"), put("b", "1"), put("c", "123"), put("dd", ""))
		by := func(maxBytes int, keysOnly bool) store.RangeOptions {
			return store.RangeOptions{MaxBytes: maxBytes, KeysOnly: keysOnly}
		}
		wantKeys(t, s, by(1, false), true, "a")            // a is 6 bytes: at least one key
		wantKeys(t, s, by(6, false), true, "a")            // a and b are 8
		wantKeys(t, s, by(8, false), true, "a", "b")       // and c 12
		wantKeys(t, s, by(12, false), true, "a", "b", "c") // and dd 14
		wantKeys(t, s, by(14, false), false, "a", "b", "c", "dd")
		// Keys only: the keys' bytes alone count.
		wantKeys(t, s, by(3, true), true, "a", "b", "c")
		wantKeys(t, s, by(5, true), false, "a", "b", "c", "dd")
		// Whichever bound comes first stops the range.
		wantKeys(t, s, store.RangeOptions{MaxBytes: 100, Limit: 2}, true, "a", "b")
		wantKeys(t, s, store.RangeOptions{MaxBytes: 8, Limit: 3}, true, "a", "b")
	}},
	{"range keys only has the versions and no values", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"), put("b", "2"), put("a", "3"), store.Command{Op: store.OpPut, Key: []byte("c")})
		r := mustRange(t, s, store.RangeOptions{KeysOnly: true})
		want := []store.KV{{Key: []byte("a"), Version: 3}, {Key: []byte("b"), Version: 2}, {Key: []byte("c"), Version: 4}}
		if !reflect.DeepEqual(r.KVs, want) || r.Revision != 4 {
			t.Errorf("Range, keys only = %+v; want %+v at revision 4", r, want)
		}
		// With values: an empty value is found, and empty.
		r = mustRange(t, s, store.RangeOptions{Start: []byte("c")})
		if len(r.KVs) != 1 || r.KVs[0].Value == nil || len(r.KVs[0].Value) != 0 || r.KVs[0].Version != 4 {
			t.Errorf("Range of a key with an empty value = %+v", r)
		}
	}},
	{"range skips deleted keys, which count toward no bound", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"), put("b", "2"), put("c", "3"), put("d", "4"), put("e", "5"))
		mustApply(t, s, del("b"), del("c"), del("e"))
		wantKeys(t, s, store.RangeOptions{}, false, "a", "d")
		wantKeys(t, s, store.RangeOptions{Limit: 2}, false, "a", "d")
		wantKeys(t, s, store.RangeOptions{Limit: 1}, true, "a")
		wantKeys(t, s, store.RangeOptions{MaxBytes: 4}, false, "a", "d")
		wantKeys(t, s, store.RangeOptions{After: []byte("a"), Limit: 1}, false, "d")
		wantKeys(t, s, rng("b", "d"), false)
		// Written again, a deleted key is live again; collected, it stays gone.
		mustApply(t, s, put("c", "6"), store.Command{Op: store.OpCollectTombstones, Through: 100})
		wantKeys(t, s, store.RangeOptions{}, false, "a", "c", "d")
	}},
	{"range lists no internal record", func(t *testing.T, s store.Store) {
		at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		id := mustApply(t, s, grantTTL(time.Minute))[0].Lease
		mustApply(t, s,
			withLease(put("leased", "v"), id),
			grant("w", 1, time.Second),
			write(put("client", "v"), 7, 1, 0, 1000),
			put("gone", "v"), del("gone"),
			horizon(at, time.Second),
			store.Command{Op: store.OpSetLeader, Key: []byte("n1"), Value: []byte("127.0.0.1:7401")},
			store.Command{Op: store.OpSetAlarm, Key: []byte("n1"), Value: []byte("NOSPACE")},
			// User keys spelled like internal ones are user keys.
			put("m/rev", "1"), put("w/w", "2"), put("x/", "3"),
		)
		want := []string{"client", "leased", "m/rev", "w/w", "x/"}
		wantKeys(t, s, store.RangeOptions{}, false, want...)
		wantKeys(t, s, store.RangeOptions{KeysOnly: true}, false, want...)
		wantKeys(t, s, store.RangeOptions{After: []byte("x/")}, false)
		st := mustState(t, s)
		if len(st.WriteLeases) != 1 || st.TTLLeaseID != id || st.Leader != "n1" || len(st.Alarms) != 1 {
			t.Fatalf("State = %+v; the internal records were not made", st)
		}
	}},
	{"range revision is the store's", func(t *testing.T, s store.Store) {
		check := func() {
			t.Helper()
			if r, st := mustRange(t, s, store.RangeOptions{Start: []byte("zz")}), mustState(t, s); r.Revision != st.Revision {
				t.Errorf("Range revision %d, State revision %d", r.Revision, st.Revision)
			}
		}
		check()
		mustApply(t, s, put("a", "1"), put("b", "2"))
		check()
		mustApply(t, s, del("a"), grant("b", 1, time.Second))
		check()
		mustApply(t, s, grantTTL(time.Minute), horizon(time.Unix(2e9, 0), time.Second))
		check()
		mustApply(t, s, store.Command{Op: store.OpCollectTombstones, Through: 100})
		check()
		if st := mustState(t, s); st.Revision != 3 {
			t.Errorf("revision %d; want 3", st.Revision)
		}
	}},
	{"range pages never skip nor repeat a key present throughout", func(t *testing.T, s store.Store) {
		// Keys k00..k38 step 2 present throughout; odd ones come and go
		// between pages, and keys that are deleted along the way.
		var throughout []string
		for i := 0; i < 40; i += 2 {
			k := fmt.Sprintf("k%02d", i)
			throughout = append(throughout, k)
			mustApply(t, s, put(k, "v"))
		}
		for i := 1; i < 40; i += 4 {
			mustApply(t, s, put(fmt.Sprintf("k%02d", i), "doomed"))
		}
		seen := make(map[string]int)
		var last []byte
		for page := 0; ; page++ {
			if page > 100 {
				t.Fatal("paging does not end")
			}
			r := mustRange(t, s, store.RangeOptions{Start: []byte("k"), End: []byte("l"), After: last, Limit: 2})
			for _, kv := range r.KVs {
				if last != nil && bytes.Compare(kv.Key, last) <= 0 {
					t.Errorf("page %d: key %q not past %q", page, kv.Key, last)
				}
				seen[string(kv.Key)]++
				last = kv.Key
			}
			if !r.More {
				break
			}
			// Between pages: a new key behind the cursor, one just past
			// it, one far ahead, and a deletion of one ahead.
			i := len(seen)
			mustApply(t, s,
				put(fmt.Sprintf("k%02d.b", i), "new"),
				put(string(last)+"\x00", "new"),
				put(fmt.Sprintf("k%02d.f", 39-i%40), "new"),
				del(fmt.Sprintf("k%02d", (4*i+1)%40)),
			)
		}
		for _, k := range throughout {
			if seen[k] != 1 {
				t.Errorf("key %q present throughout listed %d times", k, seen[k])
			}
		}
		for k, n := range seen {
			if n != 1 {
				t.Errorf("key %q listed %d times", k, n)
			}
		}
	}},
	{"range refuses invalid options", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"))
		for _, o := range []store.RangeOptions{
			rng("b", "a"),
			rng("a\x00", "a"),
			{Limit: -1},
			{MaxBytes: -1},
			{Start: []byte("a"), End: []byte("b"), Limit: -5},
		} {
			if r, err := s.Range(o); !errors.Is(err, store.ErrInvalidRange) || r.KVs != nil {
				t.Errorf("Range(%+v) = %+v, %v; want ErrInvalidRange", o, r, err)
			}
		}
		// A start past an unbounded end is a range, empty or not.
		wantKeys(t, s, rng("b", ""), false)
	}},
	{"range returns copies", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"), put("b", "2"))
		r := mustRange(t, s, store.RangeOptions{})
		for _, kv := range r.KVs {
			kv.Key[0], kv.Value[0] = 'z', 'z'
		}
		mustApply(t, s, put("c", "3"))
		wantKeys(t, s, store.RangeOptions{}, false, "a", "b", "c")
		wantRecord(t, s, "a", str("1"), 1)
	}},
	{"range unchanged since a revision", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("d/a", "1"), put("d/b", "2"), put("e", "3"), put("c", "4")) // d/ at 2, the store at 4
		for _, tc := range []struct {
			known     uint64
			unchanged bool
		}{{2, true}, {3, true}, {4, true}, {1, false}, {5, false}, {0, false}} {
			r := mustRange(t, s, known(rng("d/", "d0"), tc.known))
			if r.Unchanged != tc.unchanged || r.Revision != 4 || r.More {
				t.Errorf("Range of d/ known at %d: unchanged %v, revision %d, More %v; want unchanged %v at 4", tc.known, r.Unchanged, r.Revision, r.More, tc.unchanged)
			}
			if tc.unchanged != (r.KVs == nil) {
				t.Errorf("Range of d/ known at %d, unchanged %v: %d keys", tc.known, r.Unchanged, len(r.KVs))
			}
		}
		// Writes outside the range, and a delete that finds nothing, leave
		// it unchanged; keys only too.
		mustApply(t, s, put("d", "x"), put("d0", "x"), del("d/none"), del("c"))
		if r := mustRange(t, s, known(rng("d/", "d0"), 2)); !r.Unchanged || r.Revision != 7 {
			t.Errorf("Range of d/ after writes outside it: %+v; want unchanged at 7", r)
		}
		ko := known(rng("d/", "d0"), 2)
		ko.KeysOnly = true
		if r := mustRange(t, s, ko); !r.Unchanged || r.KVs != nil {
			t.Errorf("keys only: %+v; want unchanged", r)
		}
		// An empty range is unchanged too, and a range that does not fit
		// its page never is.
		if r := mustRange(t, s, known(rng("f/", "f0"), 1)); !r.Unchanged {
			t.Errorf("empty range: %+v; want unchanged", r)
		}
		lim := known(rng("d/", "d0"), 7)
		lim.Limit = 1
		if r := wantKeys(t, s, lim, true, "d/a"); r.Unchanged {
			t.Errorf("a page of a range: %+v; want not unchanged", r)
		}
	}},
	{"range changed by any write under it", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("d/a", "1"), put("d/b", "2"), put("d/c", "3"))
		txn := store.Command{Op: store.OpTxn, Txn: &store.Txn{Then: []store.TxnOp{{Op: store.OpPut, Key: []byte("e"), Value: []byte("1")}, {Op: store.OpDelete, Key: []byte("d/a")}}}}
		for _, w := range []struct {
			name string
			cmd  store.Command
		}{
			{"put", put("d/a", "again")},
			{"create", put("d/new", "1")},
			{"create of the prefix itself", put("d/", "1")},
			{"delete", del("d/b")},
			{"delete of its last key", del("d/new")},
			{"compare-and-swap", cas("d/c", 3, "swapped")},
			{"transaction", txn},
			{"create where a deletion was", put("d/b", "back")},
		} {
			before := mustState(t, s).Revision
			if r := mustRange(t, s, known(rng("d/", "d0"), before)); !r.Unchanged {
				t.Fatalf("before the %s: %+v; want unchanged", w.name, r)
			}
			if rs := mustApply(t, s, w.cmd); rs[0].Err != nil {
				t.Fatalf("%s: %v", w.name, rs[0].Err)
			}
			r := mustRange(t, s, known(rng("d/", "d0"), before))
			if all := mustRange(t, s, rng("d/", "d0")); r.Unchanged || !reflect.DeepEqual(r, all) {
				t.Errorf("after the %s, known at %d: %+v; want the range, %+v", w.name, before, r, all)
			}
		}
	}},
	{"range not unchanged past a collected deletion", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("d/a", "1"), put("d/b", "2"), del("d/b"), put("e", "4")) // d/b deleted at 3
		check := func(when string, n uint64, unchanged bool) {
			t.Helper()
			if r := mustRange(t, s, known(rng("d/", "d0"), n)); r.Unchanged != unchanged {
				t.Errorf("%s, known at %d: %+v; want unchanged %v", when, n, r, unchanged)
			}
		}
		check("before the collection", 2, false)
		check("before the collection", 3, true)
		collect := func(through uint64) {
			mustApply(t, s, store.Command{Op: store.OpCollectTombstones, Through: through})
		}
		collect(3)
		if r := mustGet(t, s, "d/b"); r.Version != 0 {
			t.Fatalf("d/b after the collection: %+v; want its tombstone gone", r)
		}
		// Without its tombstone, a copy of d/ at 2, which holds d/b, would
		// look unchanged.
		check("after the collection", 2, false)
		check("after the collection", 1, false)
		check("after the collection", 3, true)
		check("after the collection", 4, true)
		collect(4) // nothing left to collect
		check("after a collection of nothing", 3, true)
		// A deletion collected elsewhere counts for every range.
		mustApply(t, s, put("x", "1"), del("x")) // 5, 6
		collect(6)
		check("after a collection outside d/", 4, false)
		check("after a collection outside d/", 6, true)
	}},
	{"range of a closed store", func(t *testing.T, s store.Store) {
		s.Close()
		if _, err := s.Range(store.RangeOptions{}); !errors.Is(err, store.ErrClosed) {
			t.Errorf("Range after Close: %v; want ErrClosed", err)
		}
	}},
}

// modelRange is the range opts names of the live keys of live, computed
// the plain way.
func modelRange(live map[string]store.KV, rev uint64, opts store.RangeOptions) store.Range {
	var keys []string
	for k := range live {
		if k >= string(opts.Start) && (len(opts.End) == 0 || k < string(opts.End)) && (len(opts.After) == 0 || k > string(opts.After)) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	r := store.Range{Revision: rev}
	size := 0
	for i, k := range keys {
		kv := live[k]
		n := len(k) + len(kv.Value)
		if opts.KeysOnly {
			kv.Value, n = nil, len(k)
		}
		if (opts.Limit > 0 && i == opts.Limit) || (opts.MaxBytes > 0 && i > 0 && size+n > opts.MaxBytes) {
			r.More = true
			break
		}
		size += n
		r.KVs = append(r.KVs, kv)
	}
	return r
}

// TestRangeMatchesModel applies random writes and deletions of a few short
// keys, and compares random ranges with those of a plain model.
func TestRangeMatchesModel(t *testing.T) {
	const alphabet = "ab\x00\xff"
	key := func(r *rand.Rand, minLen int) string {
		b := make([]byte, minLen+r.IntN(4-minLen))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		return string(b)
	}
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			s := im.open(t)
			r := rand.New(rand.NewPCG(27, 1))
			live := make(map[string]store.KV)
			var ranges, paged int // ranges read, and those with More
			for round := range 60 {
				for range 1 + r.IntN(8) {
					k := key(r, 1)
					if r.IntN(3) == 0 {
						if res := mustApply(t, s, del(k))[0]; !res.Unchanged {
							delete(live, k)
						}
						continue
					}
					v := key(r, 0)
					res := mustApply(t, s, put(k, v))[0]
					live[k] = store.KV{Key: []byte(k), Value: []byte(v), Version: res.Version}
				}
				rev := mustState(t, s).Revision
				for range 30 {
					opts := store.RangeOptions{
						Start: []byte(key(r, 0)), End: []byte(key(r, 0)),
						Limit: r.IntN(5), MaxBytes: r.IntN(14), KeysOnly: r.IntN(2) == 0,
					}
					if r.IntN(2) == 0 {
						opts.After = []byte(key(r, 0))
					}
					got, err := s.Range(opts)
					if len(opts.End) > 0 && string(opts.Start) > string(opts.End) {
						if !errors.Is(err, store.ErrInvalidRange) {
							t.Fatalf("round %d: Range(%+v): %v; want ErrInvalidRange", round, opts, err)
						}
						continue
					}
					ranges++
					if got.More {
						paged++
					}
					if err != nil {
						t.Fatalf("round %d: Range(%+v): %v", round, opts, err)
					}
					want := modelRange(live, rev, opts)
					if !sameRange(got, want) {
						t.Fatalf("round %d: Range(%+v)\n got %+v\nwant %+v", round, opts, got, want)
					}
				}
			}
			t.Logf("%d ranges of %d live keys, %d with more keys", ranges, len(live), paged)
			if paged == 0 || paged == ranges {
				t.Errorf("%d of %d ranges had more keys; want some and not all", paged, ranges)
			}
		})
	}
}

// sameRange reports whether a and b hold the same keys, values, versions,
// revision and More; a value nil and one empty are the same.
func sameRange(a, b store.Range) bool {
	if a.Revision != b.Revision || a.More != b.More || len(a.KVs) != len(b.KVs) {
		return false
	}
	for i := range a.KVs {
		x, y := a.KVs[i], b.KVs[i]
		if !bytes.Equal(x.Key, y.Key) || !bytes.Equal(x.Value, y.Value) || x.Version != y.Version {
			return false
		}
	}
	return true
}

// TestRangeRevisionMatchesKeysDuringApply reads ranges while other
// goroutines apply writes of new keys, one revision each: every range must
// hold exactly the keys of its revision, never one written after it nor
// miss one written before it.
func TestRangeRevisionMatchesKeysDuringApply(t *testing.T) {
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			s := im.open(t)
			const writers, writes = 2, 150
			var wg sync.WaitGroup
			done := make(chan struct{})
			for w := range writers {
				wg.Go(func() {
					for i := range writes {
						if _, err := s.Apply([]store.Command{put(fmt.Sprintf("k%d-%03d", w, i), "v")}); err != nil {
							t.Errorf("Apply: %v", err)
							return
						}
					}
				})
			}
			defer wg.Wait() // before the store closes, also if t fails
			go func() { wg.Wait(); close(done) }()
			reads := 0
			for finished := false; !finished; {
				select {
				case <-done:
					finished = true // one more read, of every key
				default:
				}
				r := mustRange(t, s, store.RangeOptions{KeysOnly: true})
				reads++
				var newest uint64
				for _, kv := range r.KVs {
					newest = max(newest, kv.Version)
				}
				if uint64(len(r.KVs)) != r.Revision || newest != r.Revision {
					t.Fatalf("read %d: %d keys, the newest at version %d, at revision %d", reads, len(r.KVs), newest, r.Revision)
				}
			}
			if r := mustRange(t, s, store.RangeOptions{Limit: 1}); r.Revision != writers*writes {
				t.Errorf("revision %d after %d writes", r.Revision, writers*writes)
			}
			t.Logf("%d reads", reads)
		})
	}
}
