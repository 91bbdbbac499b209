package core

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/internal/testkit/faultstore"
	"github.com/leased/leased/store"
)

// A core that holds reads of keys for an earlier leader records them with
// its horizon before it serves, and with every horizon after, each with the
// time its hold has left, until the hold has passed. A later core holds
// them from the stored state alone, counted from when its node applied
// that horizon (store.State.HorizonApplied): as a node does that restarted
// or restored a snapshot, and so knows nothing of the inherited write
// itself (Config.Inherited empty).
func TestHoldsRecordedWithTheHorizon(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		now := time.Now()
		cfg := Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Replicated: true,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		first := cfg
		first.Inherited = map[string]time.Time{"k": now.Add(3 * time.Second), "gone": now.Add(-eps)}
		a, err := New(first, st, &notices{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := st.State()
		if err != nil {
			t.Fatal(err)
		}
		if want := []store.HeldKey{{Key: "k", Left: 3 * time.Second}}; !slices.Equal(s.Holds, want) {
			t.Fatalf("New recorded holds %+v, want %+v", s.Holds, want)
		}
		time.Sleep(time.Second)
		a.BeginStop() // a crash: the horizon stays as it is
		a.Close()

		// The next leader applied that horizon a second after it was
		// written, and knows of no inherited write itself.
		at := time.Now()
		b, err := New(cfg, applied{st, at}, &notices{})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		release := at.Add(3*time.Second + eps)
		b.OpenSession(1)
		if _, _, err := b.Read(1, []byte("k")); !errors.Is(err, ErrUnavailable) {
			t.Errorf("read of k held by the recorded horizon: %v, want ErrUnavailable", err)
		}
		if _, _, err := b.Read(1, []byte("gone")); err != nil {
			t.Errorf("read of a key whose bound had passed: %v", err)
		}
		if left := b.Stats().WritesAllowedIn; left < time.Until(release) {
			t.Errorf("writes held for %v, want at least until k's release, %v", left, time.Until(release))
		}
		// Its own horizons record the hold too, with the time it has left.
		time.Sleep(time.Second)
		if err := b.advanceHorizon(time.Now(), 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if s, _ := st.State(); !slices.Equal(s.Holds, []store.HeldKey{{Key: "k", Left: 2 * time.Second}}) {
			t.Errorf("the next horizon recorded holds %+v, want k with 2s left", s.Holds)
		}
		time.Sleep(time.Until(release) - time.Nanosecond)
		if _, _, err := b.Read(1, []byte("k")); !errors.Is(err, ErrUnavailable) {
			t.Errorf("read of k just before its release: %v, want ErrUnavailable", err)
		}
		time.Sleep(time.Nanosecond)
		if _, _, err := b.Read(1, []byte("k")); err != nil {
			t.Errorf("read of k at its release: %v", err)
		}
		// Once it has passed, the next horizon records no hold.
		if err := b.advanceHorizon(time.Now(), time.Minute); err != nil {
			t.Fatal(err)
		}
		if s, _ := st.State(); len(s.Holds) != 0 {
			t.Errorf("a horizon after the release recorded holds %+v", s.Holds)
		}
	})
}

// A write whose commit failed in a replicated store may yet be committed
// by another leader: from then on the core refuses reads of its key, until
// the store is reopened and shows every committed entry. Reads of other
// keys go on. A store of one node alone (Replicated false) settles the
// outcome itself when it is reopened, and its reads go on.
func TestUnknownOutcomeRefusesReads(t *testing.T) {
	for _, replicated := range []bool{true, false} {
		t.Run(fmt.Sprintf("replicated=%v", replicated), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				fs := owned(t, faultstore.New(store.NewMemory()))
				c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Replicated: replicated,
					Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, fs, &notices{})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				c.OpenSession(1)
				submit(t, c, put(1, "k", "old")).must(t)
				submit(t, c, put(1, "x", "old")).must(t)
				if _, _, err := c.Read(1, []byte("x")); err != nil {
					t.Fatal(err)
				}
				fs.Fail(fmt.Errorf("replica: %w: leadership lost while committing log", store.ErrNotLeader))
				if o, _ := submit(t, c, put(1, "k", "new")).outcome(); o.Err == nil {
					t.Fatal("the put succeeded under the fault")
				}
				// A write refused while the store is down never reached it.
				if o, _ := submit(t, c, put(1, "y", "new")).outcome(); o.Err == nil {
					t.Fatal("the put succeeded with the store down")
				}
				_, _, err = c.Read(1, []byte("k"))
				if replicated && !errors.Is(err, ErrUnavailable) {
					t.Errorf("read of the key of the write of unknown outcome: %v, want ErrUnavailable", err)
				}
				if !replicated && err != nil {
					t.Errorf("read of the key of the failed write, alone: %v", err)
				}
				_, _, err = c.List(1, store.RangeOptions{Start: []byte("j"), End: []byte("l")}, false)
				if replicated && !errors.Is(err, ErrUnavailable) {
					t.Errorf("list of a range holding the key of the write of unknown outcome: %v, want ErrUnavailable", err)
				}
				if r, _, err := c.List(1, store.RangeOptions{Start: []byte("x"), End: []byte("y")}, false); err != nil || len(r.KVs) != 1 {
					t.Errorf("list of x alone: %+v, %v", r, err)
				}
				for k, want := range map[string]string{"x": "old", "y": ""} {
					if rec, _, err := c.Read(1, []byte(k)); err != nil || string(rec.Value) != want {
						t.Errorf("read of %s: %q, %v; want %q", k, rec.Value, err, want)
					}
				}
				fs.Heal()
				time.Sleep(c.retryInterval())
				synctest.Wait()
				if c.StoreErr() != nil {
					t.Fatalf("the store is not reopened: %v", c.StoreErr())
				}
				if rec, _, err := c.Read(1, []byte("k")); err != nil || string(rec.Value) != "old" {
					t.Errorf("read of k once the store is reopened: %q, %v; want the value it holds", rec.Value, err)
				}
			})
		})
	}
}
