package core

import (
	"testing"
	"testing/synctest"
	"time"
)

// TestListRevalidated: a List that names the revision of the caller's copy
// of a listing (Known) is answered Unchanged, with no keys, under a new
// lease that holds a create back as any listing's does, while nothing
// under the prefix changed since, whatever changed elsewhere; a create
// under it gets the new listing; a List that is not leased is read whole.
func TestListRevalidated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := newCore(t, newMemory(t))
		defer c.Close()
		for _, s := range []SessionID{1, 2} {
			c.OpenSession(s)
		}
		submit(t, c, put(2, "d/a", "1")).must(t)
		submit(t, c, put(2, "d/b", "1")).must(t)
		time.Sleep(2 * term) // past the prefix's hot window
		first, got, err := c.List(1, dir("d/"), true)
		if err != nil || got != term || len(first.KVs) != 2 {
			t.Fatalf("leased listing: %d keys, term %v, %v", len(first.KVs), got, err)
		}
		time.Sleep(term + eps) // the lease runs out
		submit(t, c, put(2, "e", "1")).must(t)
		opts := dir("d/")
		opts.Known = first.Revision
		r, got, err := c.List(1, opts, true)
		if err != nil || !r.Unchanged || got != term || r.KVs != nil || r.Revision != first.Revision+1 {
			t.Fatalf("revalidation: %+v, term %v, %v; want unchanged at %d under a lease of %v", r, got, err, first.Revision+1, term)
		}
		// The lease is a lease: a create under the prefix waits for its
		// holder.
		create := submit(t, c, put(2, "d/new", "1"))
		if _, ok := create.outcome(); ok {
			t.Fatal("a create under a revalidated listing committed before its holder let go")
		}
		if r, _, err := c.List(1, opts, false); err != nil || r.Unchanged || len(r.KVs) != 2 {
			t.Fatalf("revalidation not leased: %+v, %v; want the listing read whole", r, err)
		}
		c.RelinquishPrefixes(1, []string{"d/"})
		created := create.must(t)
		time.Sleep(2 * term)
		r, got, err = c.List(1, opts, true)
		if err != nil || r.Unchanged || got != term || len(r.KVs) != 3 || string(r.KVs[2].Key) != "d/new" || r.Revision != created.Version {
			t.Fatalf("revalidation after a create: %+v, term %v, %v; want the new listing at %d", r, got, err, created.Version)
		}
		// Known now, it is unchanged again.
		c.RelinquishPrefixes(1, []string{"d/"})
		opts.Known = r.Revision
		if r, got, err := c.List(1, opts, true); err != nil || !r.Unchanged || got != term {
			t.Fatalf("revalidation of the new listing: %+v, term %v, %v; want unchanged", r, got, err)
		}
	})
}
