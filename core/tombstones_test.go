package core

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/store"
)

// TestTombstonesCollected: the core collects the record a deletion left
// once the deletion is at least tombstoneAge old, and not before: a
// deletion made just before a round waits for the next one. The
// collection takes no revision.
func TestTombstonesCollected(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, _ := newCore(t, st)
		defer c.Close()
		c.OpenSession(1)
		age := c.tombstoneAge()
		del := func(key string) uint64 {
			t.Helper()
			return submit(t, c, &Request{Session: 1, Op: store.OpDelete, Key: []byte(key)}).must(t).Version
		}
		want := func(when, key string, version uint64) {
			t.Helper()
			if r, err := st.Get([]byte(key)); err != nil || r.Found || r.Version != version {
				t.Fatalf("%s: %s = %+v, %v; want not found at version %d", when, key, r, err, version)
			}
		}
		a := del("a")
		time.Sleep(2*age - time.Second)
		b := del("b") // just before the round that collects a
		synctest.Wait()
		want("before two rounds", "a", a)
		time.Sleep(2 * time.Second)
		synctest.Wait()
		want("after two rounds", "a", 0)
		want("one second after its deletion", "b", b)
		time.Sleep(age)
		synctest.Wait()
		want("a round later", "b", 0)
		if s, err := st.State(); err != nil || s.Revision != b {
			t.Errorf("revision %d, %v after the collections; want %d", s.Revision, err, b)
		}
	})
}
