package core

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/store"
)

// dir is the range of the keys under prefix p, as the server asks for it.
func dir(p string) store.RangeOptions {
	return store.RangeOptions{Start: []byte(p), End: []byte(p[:len(p)-1] + string(rune(p[len(p)-1]+1))), Limit: 1000}
}

// TestListLeased: a listing of a prefix is leased; a key created under it
// by another session invalidates the listing and commits once its holder
// acknowledges, or its lease runs out; an incomplete listing, a page past
// the first, or a prefix that does not end with '/' is not leased, and
// holds no write back.
func TestListLeased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, n := newCore(t, newMemory(t))
		defer c.Close()
		for _, s := range []SessionID{1, 2} {
			c.OpenSession(s)
		}
		submit(t, c, put(2, "d/a", "1")).must(t)
		submit(t, c, put(2, "d/b", "1")).must(t)
		time.Sleep(2 * term) // past the prefix's hot window, as it was never leased
		r, got, err := c.List(1, dir("d/"), true)
		if err != nil || got != term || len(r.KVs) != 2 {
			t.Fatalf("leased listing: %d keys, term %v, %v; want 2 keys under a lease of %v", len(r.KVs), got, err, term)
		}
		create := submit(t, c, put(2, "d/new", "1"))
		if _, ok := create.outcome(); ok {
			t.Fatal("a key created under a leased prefix committed before the holder let go")
		}
		if !slices.Equal(n.pinv[1], []string{"d/"}) {
			t.Fatalf("prefix invalidations to the holder: %q", n.pinv[1])
		}
		c.RelinquishPrefixes(1, []string{"d/"})
		if o := create.must(t); o.Holders != 1 {
			t.Fatalf("the create counted %d holders", o.Holders)
		}

		// A silent holder holds a create back until term + ε.
		time.Sleep(2 * term)
		if _, got, _ := c.List(1, dir("d/"), true); got != term {
			t.Fatalf("listing again: term %v", got)
		}
		start := time.Now()
		o := submit(t, c, put(2, "d/later", "1"))
		time.Sleep(term + eps)
		if w := o.must(t); w.Waited != term+eps || time.Since(start) != term+eps {
			t.Fatalf("the create waited %v for a silent holder; want term + ε, %v", w.Waited, term+eps)
		}

		time.Sleep(2 * term)
		small := dir("d/")
		small.Limit = 1
		for name, tc := range map[string]struct {
			opts  store.RangeOptions
			lease bool
		}{
			"incomplete":   {small, true},
			"not a page 1": {store.RangeOptions{Start: []byte("d/"), End: []byte("d0"), After: []byte("d/a")}, true},
			"not bounded":  {store.RangeOptions{Start: []byte("d"), End: []byte("e")}, true},
			"not asked":    {dir("d/"), false},
		} {
			if _, got, err := c.List(1, tc.opts, tc.lease); err != nil || got != 0 {
				t.Errorf("%s: term %v, %v; want 0", name, got, err)
			}
		}
		if o := submit(t, c, put(2, "d/free", "1")); func() bool { _, ok := o.outcome(); return !ok }() {
			t.Fatal("a write waited for listings that were not leased")
		}
	})
}
