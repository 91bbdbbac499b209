package faultstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leased/leased/store"
)

var errDisk = errors.New("disk full")

func put(key, value string) store.Command {
	return store.Command{Op: store.OpPut, Key: []byte(key), Value: []byte(value)}
}

// mustApply applies cmds and fails t unless they all commit.
func mustApply(t *testing.T, s store.Store, cmds ...store.Command) []store.Result {
	t.Helper()
	rs, err := s.Apply(cmds)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(rs) != len(cmds) {
		t.Fatalf("Apply: %d results for %d commands", len(rs), len(cmds))
	}
	return rs
}

func revision(t *testing.T, s store.Store) uint64 {
	t.Helper()
	st, err := s.State()
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	return st.Revision
}

func TestPassesThroughWithoutFault(t *testing.T) {
	inner := store.NewMemory()
	s := New(inner)
	defer s.Close()
	rs := mustApply(t, s, put("a", "1"), put("b", "2"))
	if rs[0].Version != 1 || rs[1].Version != 2 {
		t.Fatalf("versions %d, %d; want 1, 2", rs[0].Version, rs[1].Version)
	}
	rec, err := s.Get([]byte("b"))
	if err != nil || string(rec.Value) != "2" || rec.Version != 2 || !rec.Found {
		t.Fatalf("Get(b) = %+v, %v", rec, err)
	}
	if got := revision(t, s); got != 2 {
		t.Fatalf("revision %d, want 2", got)
	}
	if r, err := s.Range(store.RangeOptions{Start: []byte("b")}); err != nil || len(r.KVs) != 1 || string(r.KVs[0].Value) != "2" || r.Revision != 2 {
		t.Fatalf("Range from b = %+v, %v; want b at revision 2", r, err)
	}
	if _, err := s.Range(store.RangeOptions{Limit: -1}); !errors.Is(err, store.ErrInvalidRange) {
		t.Fatalf("Range with a negative limit: %v; want ErrInvalidRange", err)
	}
	if err := s.Reopen(); err != nil {
		t.Fatalf("Reopen of a healthy store: %v", err)
	}
	mustApply(t, s, put("c", "3"))
	if got := s.Faults(); got != 0 {
		t.Fatalf("Faults() = %d, want 0", got)
	}
}

// TestFailRefusesUntilReopen walks a store through a fault, its healing
// and the Reopen that ends the refusal.
func TestFailRefusesUntilReopen(t *testing.T) {
	inner := store.NewMemory()
	s := New(inner)
	defer s.Close()
	mustApply(t, s, put("a", "1"))

	s.Fail(errDisk)
	rs, err := s.Apply([]store.Command{put("b", "2")})
	if !errors.Is(err, errDisk) || errors.Is(err, store.ErrFailed) || rs != nil {
		t.Fatalf("first Apply under a fault = %v, %v; want no results and the fault", rs, err)
	}
	if got := revision(t, inner); got != 1 {
		t.Fatalf("inner revision %d after the fault, want 1: the command reached it", got)
	}
	_, err = s.Apply([]store.Command{put("b", "2")})
	if !errors.Is(err, errDisk) || !errors.Is(err, store.ErrFailed) {
		t.Fatalf("second Apply under a fault = %v; want both the fault and ErrFailed", err)
	}
	if got := s.Faults(); got != 2 {
		t.Fatalf("Faults() = %d, want 2", got)
	}
	// Reads still work and show what was applied before the fault.
	rec, err := s.Get([]byte("a"))
	if err != nil || !rec.Found || rec.Version != 1 {
		t.Fatalf("Get(a) under a fault = %+v, %v", rec, err)
	}
	if rec, err := s.Get([]byte("b")); err != nil || rec.Found {
		t.Fatalf("Get(b) under a fault = %+v, %v; want not found", rec, err)
	}
	if got := revision(t, s); got != 1 {
		t.Fatalf("revision %d under a fault, want 1", got)
	}
	if r, err := s.Range(store.RangeOptions{}); err != nil || len(r.KVs) != 1 || string(r.KVs[0].Key) != "a" || r.Revision != 1 {
		t.Fatalf("Range under a fault = %+v, %v; want a alone at revision 1", r, err)
	}
	if err := s.Reopen(); !errors.Is(err, errDisk) {
		t.Fatalf("Reopen under a fault = %v, want the fault", err)
	}

	s.Heal()
	if _, err := s.Apply([]store.Command{put("b", "2")}); !errors.Is(err, store.ErrFailed) || errors.Is(err, errDisk) {
		t.Fatalf("Apply after Heal, before Reopen = %v; want ErrFailed alone", err)
	}
	if got := s.Faults(); got != 2 {
		t.Fatalf("Faults() = %d after Heal, want still 2", got)
	}
	if err := s.Reopen(); err != nil {
		t.Fatalf("Reopen after Heal: %v", err)
	}
	rs = mustApply(t, s, put("b", "2"))
	if rs[0].Version != 2 {
		t.Fatalf("version %d after Reopen, want 2", rs[0].Version)
	}
}

func TestHealBeforeApplyLeavesStoreHealthy(t *testing.T) {
	s := New(store.NewMemory())
	defer s.Close()
	s.Fail(errDisk)
	s.Heal()
	mustApply(t, s, put("a", "1"))
	if got := s.Faults(); got != 0 {
		t.Fatalf("Faults() = %d, want 0", got)
	}
}

// A Reopen that fails leaves the store failed even if no Apply did, as a
// real store whose database could not be opened again.
func TestFailedReopenLeavesStoreFailed(t *testing.T) {
	s := New(store.NewMemory())
	defer s.Close()
	s.Fail(errDisk)
	if err := s.Reopen(); !errors.Is(err, errDisk) {
		t.Fatalf("Reopen under a fault = %v, want the fault", err)
	}
	s.Heal()
	if _, err := s.Apply([]store.Command{put("a", "1")}); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("Apply after a failed Reopen = %v, want ErrFailed", err)
	}
	if err := s.Reopen(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, put("a", "1"))
}

// A failure of the inner store refuses Apply just like an injected one.
func TestInnerFailureRefusesUntilReopen(t *testing.T) {
	s := New(store.NewMemory())
	defer s.Close()
	bad := store.Command{Op: 99, Key: []byte("a")}
	if _, err := s.Apply([]store.Command{put("a", "1"), bad}); err == nil || errors.Is(err, store.ErrFailed) {
		t.Fatalf("Apply of an unknown op = %v, want the inner store's failure", err)
	}
	if _, err := s.Apply([]store.Command{put("a", "1")}); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("Apply after the inner store failed = %v, want ErrFailed", err)
	}
	if got := s.Faults(); got != 0 {
		t.Fatalf("Faults() = %d, want 0: no fault was injected", got)
	}
	if err := s.Reopen(); err != nil {
		t.Fatal(err)
	}
	mustApply(t, s, put("a", "1"))
}

func TestClosed(t *testing.T) {
	s := New(store.NewMemory())
	mustApply(t, s, put("a", "1"))
	s.Fail(errDisk)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply([]store.Command{put("a", "2")}); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Apply after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Get([]byte("a")); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Get after Close = %v, want ErrClosed", err)
	}
	if _, err := s.State(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("State after Close = %v, want ErrClosed", err)
	}
	if err := s.Reopen(); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Reopen after Close = %v, want ErrClosed", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if got := s.Faults(); got != 0 {
		t.Errorf("Faults() = %d, want 0: a closed store reaches no fault", got)
	}
}

func TestFailNilPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("Fail(nil) did not panic")
		}
	}()
	New(store.NewMemory()).Fail(nil)
}

// TestConcurrent runs a committer that reopens after every failure against
// a goroutine that sets and clears the fault and readers, for the race
// detector, and checks that every fault the committer saw was counted.
func TestConcurrent(t *testing.T) {
	const applies = 200
	s := New(store.NewMemory())
	defer s.Close()

	done := make(chan struct{})
	var toggles, ok atomic.Int64 // ok: commits the operator has seen the committer make
	var wg sync.WaitGroup
	wg.Go(func() { // the operator of the disk
		// Set a fault, keep it until the committer has run into it, then
		// clear it until the committer has committed again, over and over.
		for i := 1; ; i++ {
			before := s.Faults()
			s.Fail(fmt.Errorf("fault %d: %w", i, errDisk))
			for s.Faults() == before {
				select {
				case <-done:
					return
				default:
				}
			}
			s.Heal()
			toggles.Store(int64(i))
			for was := ok.Load(); ok.Load() == was; {
				select {
				case <-done:
					return
				default:
				}
			}
		}
	})
	for range 2 { // readers
		wg.Go(func() {
			var last uint64
			for {
				select {
				case <-done:
					return
				default:
				}
				rec, err := s.Get([]byte("k"))
				if err != nil {
					t.Errorf("Get: %v", err)
					return
				}
				if rec.Version < last {
					t.Errorf("version went back from %d to %d", last, rec.Version)
					return
				}
				last = rec.Version
				if _, err := s.State(); err != nil {
					t.Errorf("State: %v", err)
					return
				}
			}
		})
	}

	// The committer: Apply and Reopen from this goroutine only, until the
	// operator has set and cleared the fault a few times.
	var faults, committed int64
	for i := 0; i < applies || toggles.Load() < 10; i++ {
		rs, err := s.Apply([]store.Command{put("k", fmt.Sprint(i))})
		switch {
		case err == nil:
			committed++
			ok.Store(committed)
			if rs[0].Version != uint64(committed) {
				t.Fatalf("version %d, want %d", rs[0].Version, committed)
			}
			continue
		case errors.Is(err, errDisk):
			faults++
		case !errors.Is(err, store.ErrFailed):
			t.Fatalf("Apply: %v", err)
		}
		_ = s.Reopen() // fails while the fault lasts; the next round tries again
	}
	close(done)
	wg.Wait()

	t.Logf("%d committed, %d faults, %d toggles", committed, faults, toggles.Load())
	if faults == 0 || committed == 0 {
		t.Errorf("%d committed, %d faults: the test did not exercise both", committed, faults)
	}
	s.Heal()
	if got := s.Faults(); got != faults {
		t.Errorf("Faults() = %d, the committer saw %d", got, faults)
	}
	if err := s.Reopen(); err != nil {
		t.Fatal(err)
	}
	if got := revision(t, s); got != uint64(committed) {
		t.Errorf("revision %d, want %d", got, committed)
	}
}
