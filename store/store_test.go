package store_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/faultstore"
	"github.com/leased/leased/store"
)

// impl is a Store implementation under test.
type impl struct {
	name string
	open func(t *testing.T) store.Store
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// openBadger opens a Badger in dir and closes it when t ends.
func openBadger(t *testing.T, dir string) *store.Badger {
	t.Helper()
	b, err := store.Open(dir, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

var impls = []impl{
	{"memory", func(t *testing.T) store.Store {
		m := store.NewMemory()
		t.Cleanup(func() { m.Close() })
		return m
	}},
	{"badger", func(t *testing.T) store.Store { return openBadger(t, t.TempDir()) }},
}

// Commands, briefly.

func put(key, value string) store.Command {
	return store.Command{Op: store.OpPut, Key: []byte(key), Value: []byte(value)}
}

func del(key string) store.Command { return store.Command{Op: store.OpDelete, Key: []byte(key)} }

func cas(key string, expect uint64, value string) store.Command {
	return store.Command{Op: store.OpCAS, Key: []byte(key), Expect: expect, Value: []byte(value)}
}

func grant(key string, session uint64, term time.Duration) store.Command {
	return store.Command{Op: store.OpGrantWriteLease, Key: []byte(key), Session: session, Term: term}
}

func end(key string, token uint64) store.Command {
	return store.Command{Op: store.OpEndWriteLease, Key: []byte(key), Token: token}
}

func horizon(h time.Time, span time.Duration) store.Command {
	return store.Command{Op: store.OpSetHorizon, Horizon: h, Span: span}
}

// unknown is a command no store knows: applying it is a failure of the
// step, which is the one failure every store can be made to have.
var unknown = store.Command{Op: 99, Key: []byte("x")}

// mustApply applies cmds and fails t unless every one commits.
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

func mustGet(t *testing.T, s store.Store, key string) store.Record {
	t.Helper()
	r, err := s.Get([]byte(key))
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	return r
}

func mustState(t *testing.T, s store.Store) store.State {
	t.Helper()
	st, err := s.State()
	if err != nil {
		t.Fatalf("State: %v", err)
	}
	return st
}

// wantRecord fails t unless key's record is found with value at version,
// or, if value is nil, not found at version.
func wantRecord(t *testing.T, s store.Store, key string, value *string, version uint64) {
	t.Helper()
	r := mustGet(t, s, key)
	switch {
	case value == nil && (r.Found || r.Value != nil || r.Version != version):
		t.Errorf("Get(%q) = %+v; want not found at version %d", key, r, version)
	case value != nil && (!r.Found || string(r.Value) != *value || r.Version != version):
		t.Errorf("Get(%q) = {Value:%q Version:%d Found:%v}; want %q at version %d", key, r.Value, r.Version, r.Found, *value, version)
	}
}

func str(s string) *string { return &s }

// wantVersions fails t unless rs are successful writes at versions want.
func wantVersions(t *testing.T, rs []store.Result, want ...uint64) {
	t.Helper()
	for i, r := range rs {
		if r.Err != nil || r.Version != want[i] {
			t.Errorf("result %d = %+v; want version %d", i, r, want[i])
		}
	}
}

// wantMismatch fails t unless r is a compare-and-swap that did not match a
// key at version.
func wantMismatch(t *testing.T, r store.Result, version uint64) {
	t.Helper()
	if !errors.Is(r.Err, store.ErrVersionMismatch) || r.Version != version || r.Token != 0 {
		t.Errorf("result %+v; want ErrVersionMismatch at version %d", r, version)
	}
}

// contract is every case of the Store contract that any implementation
// must pass. Each runs on a new, empty store.
var contract = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"empty store", func(t *testing.T, s store.Store) {
		if st := mustState(t, s); !reflect.DeepEqual(st, store.State{}) {
			t.Errorf("State of an empty store = %+v", st)
		}
		wantRecord(t, s, "a", nil, 0)
		if rs, err := s.Apply(nil); err != nil || len(rs) != 0 {
			t.Errorf("Apply(nil) = %v, %v", rs, err)
		}
	}},
	{"one revision counter across keys and batches", func(t *testing.T, s store.Store) {
		wantVersions(t, mustApply(t, s, put("a", "1")), 1)
		wantVersions(t, mustApply(t, s, put("b", "2"), put("a", "3"), put("c", "4")), 2, 3, 4)
		wantRecord(t, s, "a", str("3"), 3)
		wantRecord(t, s, "b", str("2"), 2)
		wantRecord(t, s, "c", str("4"), 4)
		wantRecord(t, s, "d", nil, 0)
		if st := mustState(t, s); st.Revision != 4 || st.Fence != 0 {
			t.Errorf("State = %+v; want revision 4, fence 0", st)
		}
	}},
	{"delete", func(t *testing.T, s store.Store) {
		wantVersions(t, mustApply(t, s, put("a", "1"), del("a")), 1, 2)
		wantRecord(t, s, "a", nil, 2)
		// Deleting a key that was never there, or is deleted already,
		// removes nothing: it changes nothing, spends no revision, and
		// answers with the key's version (0, or its deletion's).
		rs := mustApply(t, s, del("b"), del("a"))
		for i, want := range []uint64{0, 2} {
			if r := rs[i]; !r.Unchanged || r.Version != want || r.Err != nil {
				t.Errorf("delete of a missing key %d = %+v; want unchanged at version %d", i, r, want)
			}
		}
		wantRecord(t, s, "b", nil, 0)
		wantRecord(t, s, "a", nil, 2)
		if st := mustState(t, s); st.Revision != 2 {
			t.Errorf("revision %d after deletes that removed nothing, want 2", st.Revision)
		}
		wantVersions(t, mustApply(t, s, put("a", "5")), 3)
		wantRecord(t, s, "a", str("5"), 3)
		if r := mustApply(t, s, del("a"))[0]; r.Unchanged || r.Version != 4 {
			t.Errorf("delete of a key that exists = %+v; want version 4, not unchanged", r)
		}
	}},
	{"empty value is found, not deleted", func(t *testing.T, s store.Store) {
		wantVersions(t, mustApply(t, s, put("a", ""), store.Command{Op: store.OpPut, Key: []byte("b")}), 1, 2)
		for _, k := range []string{"a", "b"} {
			r := mustGet(t, s, k)
			if !r.Found || len(r.Value) != 0 || r.Version == 0 {
				t.Errorf("Get(%q) = %+v; want found, empty", k, r)
			}
		}
	}},
	{"later commands of a batch see earlier ones", func(t *testing.T, s store.Store) {
		rs := mustApply(t, s, put("a", "1"), cas("a", 1, "2"), cas("a", 1, "3"), del("a"), cas("a", 0, "4"))
		wantVersions(t, rs[:2], 1, 2)
		wantMismatch(t, rs[2], 2)
		wantVersions(t, rs[3:], 3, 4)
		wantRecord(t, s, "a", str("4"), 4)
	}},
	{"compare-and-swap", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"), put("b", "2"), del("b")) // a@1, b deleted@3
		for _, c := range []struct {
			cmd   store.Command
			match bool
			at    uint64 // the key's version when it does not match
		}{
			{cas("new", 0, "x"), true, 0},    // absent matches 0
			{cas("never", 7, "x"), false, 0}, // absent matches nothing else
			{cas("a", 0, "x"), false, 1},     // present does not match 0
			{cas("a", 2, "x"), false, 1},
			{cas("a", 1, "x"), true, 0},
			{cas("b", 0, "x"), true, 0}, // deleted matches 0
		} {
			before := mustState(t, s).Revision
			valueBefore := mustGet(t, s, string(c.cmd.Key))
			r := mustApply(t, s, c.cmd)[0]
			if c.match {
				if r.Err != nil || r.Version != before+1 {
					t.Errorf("CAS %q expecting %d = %+v; want version %d", c.cmd.Key, c.cmd.Expect, r, before+1)
				}
				wantRecord(t, s, string(c.cmd.Key), str("x"), before+1)
				continue
			}
			wantMismatch(t, r, c.at)
			if got := mustState(t, s).Revision; got != before {
				t.Errorf("CAS %q expecting %d that did not match moved the revision from %d to %d", c.cmd.Key, c.cmd.Expect, before, got)
			}
			if got := mustGet(t, s, string(c.cmd.Key)); !reflect.DeepEqual(got, valueBefore) {
				t.Errorf("CAS %q expecting %d that did not match changed the record from %+v to %+v", c.cmd.Key, c.cmd.Expect, valueBefore, got)
			}
		}
		// A deleted key is also at the version of its deletion.
		rs := mustApply(t, s, del("a"), cas("a", 0, "y"), del("a"))
		at := rs[2].Version
		wantVersions(t, mustApply(t, s, cas("a", at, "z")), at+1)
	}},
	{"write lease tokens", func(t *testing.T, s store.Store) {
		const term = 3 * time.Second
		rs := mustApply(t, s, grant("a", 10, term), put("x", "1"), grant("b", 11, 2*term))
		if rs[0].Token != 1 || rs[2].Token != 2 || rs[0].Version != 0 || rs[2].Version != 0 {
			t.Errorf("grants = %+v, %+v; want tokens 1, 2 and no version", rs[0], rs[2])
		}
		// A second grant on a key replaces the first.
		if r := mustApply(t, s, grant("a", 12, term))[0]; r.Token != 3 {
			t.Errorf("regrant = %+v, want token 3", r)
		}
		want := store.State{Revision: 1, Fence: 3, WriteLeases: []store.WriteLease{
			{Key: "a", Token: 3, Session: 12, Term: term},
			{Key: "b", Token: 2, Session: 11, Term: 2 * term},
		}}
		// The put of x is the history's one event; write leases are none.
		want.History = mustState(t, s).History
		if h := want.History; h.Events != 1 || h.Bytes == 0 || h.Compacted != 0 {
			t.Errorf("history %+v, want one event and no compaction", h)
		}
		if st := mustState(t, s); !reflect.DeepEqual(st, want) {
			t.Errorf("State = %+v\nwant    %+v", st, want)
		}
		// Ending with a wrong token, or a lease that is not there,
		// changes nothing.
		mustApply(t, s, end("a", 1), end("b", 3), end("c", 2))
		if st := mustState(t, s); !reflect.DeepEqual(st, want) {
			t.Errorf("State after wrong ends = %+v\nwant    %+v", st, want)
		}
		if r := mustApply(t, s, end("a", 3))[0]; !reflect.DeepEqual(r, store.Result{}) {
			t.Errorf("end = %+v, want a zero result", r)
		}
		want.WriteLeases = want.WriteLeases[1:]
		if st := mustState(t, s); !reflect.DeepEqual(st, want) {
			t.Errorf("State after the end of a's lease = %+v\nwant    %+v", st, want)
		}
		// Tokens are never handed out twice.
		if r := mustApply(t, s, grant("a", 12, term))[0]; r.Token != 4 {
			t.Errorf("grant after an end = %+v, want token 4", r)
		}
	}},
	{"write lease client", func(t *testing.T, s store.Store) {
		// The holder's client identity is kept with its write lease, and
		// through a Reopen; a grant without one records none.
		withClient := grant("a", 10, time.Second)
		withClient.Client = 0xc1
		mustApply(t, s, withClient, grant("b", 11, time.Second))
		want := []store.WriteLease{
			{Key: "a", Token: 1, Session: 10, Term: time.Second, Client: 0xc1},
			{Key: "b", Token: 2, Session: 11, Term: time.Second},
		}
		if st := mustState(t, s); !reflect.DeepEqual(st.WriteLeases, want) {
			t.Errorf("WriteLeases = %+v\nwant          %+v", st.WriteLeases, want)
		}
		if err := s.Reopen(); err != nil {
			t.Fatal(err)
		}
		if st := mustState(t, s); !reflect.DeepEqual(st.WriteLeases, want) {
			t.Errorf("WriteLeases after Reopen = %+v\nwant          %+v", st.WriteLeases, want)
		}
		// Ending it takes the token alone, as before.
		mustApply(t, s, end("a", 1))
		if st := mustState(t, s); !reflect.DeepEqual(st.WriteLeases, want[1:]) {
			t.Errorf("WriteLeases after the end of a's = %+v", st.WriteLeases)
		}
	}},
	{"horizon", func(t *testing.T, s store.Store) {
		h1 := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
		mustApply(t, s, horizon(h1, time.Minute))
		st := mustState(t, s)
		if !st.Horizon.Equal(h1) || st.Span != time.Minute || st.Revision != 0 {
			t.Errorf("State = %+v; want horizon %v, span 1m, revision 0", st, h1)
		}
		h2 := h1.Add(time.Hour)
		mustApply(t, s, put("a", "1"), horizon(h2, 2*time.Minute))
		st = mustState(t, s)
		if !st.Horizon.Equal(h2) || st.Span != 2*time.Minute || st.Revision != 1 {
			t.Errorf("State = %+v; want horizon %v, span 2m, revision 1", st, h2)
		}
		// The clock a horizon was read on is kept with it, and goes
		// with the next horizon that names none.
		named := horizon(h2.Add(time.Hour), time.Minute)
		named.Key = []byte("clock-a")
		mustApply(t, s, named)
		if st := mustState(t, s); st.HorizonBy != "clock-a" || !st.Horizon.Equal(named.Horizon) {
			t.Errorf("State = %+v; want horizon %v by clock-a", st, named.Horizon)
		}
		mustApply(t, s, horizon(h2.Add(2*time.Hour), time.Minute))
		if st := mustState(t, s); st.HorizonBy != "" {
			t.Errorf("HorizonBy = %q after a horizon that names no clock; want none", st.HorizonBy)
		}
	}},
	{"closed", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"))
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
	}},
	{"reopen of a healthy store keeps everything", func(t *testing.T, s store.Store) {
		h := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		mustApply(t, s, put("a", "1"), put("b", "2"), del("b"), grant("a", 5, time.Second), horizon(h, time.Minute))
		st := mustState(t, s)
		if err := s.Reopen(); err != nil {
			t.Fatal(err)
		}
		wantSameState(t, mustState(t, s), st)
		wantRecord(t, s, "a", str("1"), 1)
		wantRecord(t, s, "b", nil, 3)
		rs := mustApply(t, s, put("c", "3"), grant("c", 5, time.Second))
		if rs[0].Version != 4 || rs[1].Token != 2 {
			t.Errorf("after Reopen: %+v; want version 4, token 2", rs)
		}
	}},
	{"a failed step refuses Apply until Reopen", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"))
		rs, err := s.Apply([]store.Command{put("a", "2"), put("b", "3"), unknown, put("c", "4")})
		if err == nil || errors.Is(err, store.ErrFailed) || len(rs) != 0 {
			t.Fatalf("Apply with an unknown op = %v, %v; want a failure and no results", rs, err)
		}
		if _, err := s.Apply([]store.Command{put("d", "5")}); !errors.Is(err, store.ErrFailed) {
			t.Fatalf("Apply after a failure = %v, want ErrFailed", err)
		}
		mustState(t, s) // reads still work
		if err := s.Reopen(); err != nil {
			t.Fatal(err)
		}
		// The failed commands may or may not be durable; either way
		// what the store shows must be whole. Neither store makes a
		// failed step durable.
		wantRecord(t, s, "a", str("1"), 1)
		wantRecord(t, s, "b", nil, 0)
		if st := mustState(t, s); st.Revision != 1 {
			t.Errorf("revision %d after Reopen, want 1", st.Revision)
		}
		wantVersions(t, mustApply(t, s, put("d", "5")), 2)
	}},
	{"an injected fault refuses Apply until Reopen", func(t *testing.T, s store.Store) {
		errDisk := errors.New("disk full")
		f := faultstore.New(s)
		h := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		mustApply(t, f, put("a", "1"), grant("a", 1, time.Second), horizon(h, time.Minute))
		durable := mustState(t, f)

		f.Fail(errDisk)
		if _, err := f.Apply([]store.Command{put("a", "2"), grant("b", 1, time.Second)}); !errors.Is(err, errDisk) {
			t.Fatalf("Apply under a fault = %v, want the fault", err)
		}
		if err := f.Reopen(); !errors.Is(err, errDisk) {
			t.Fatalf("Reopen under a fault = %v, want the fault", err)
		}
		f.Heal()
		if _, err := f.Apply([]store.Command{put("b", "2")}); !errors.Is(err, store.ErrFailed) {
			t.Fatalf("Apply after Heal, before Reopen = %v, want ErrFailed", err)
		}
		wantSameState(t, mustState(t, f), durable)
		wantRecord(t, f, "a", str("1"), 1)
		if err := f.Reopen(); err != nil {
			t.Fatal(err)
		}
		wantSameState(t, mustState(t, f), durable)
		wantRecord(t, f, "a", str("1"), 1)
		rs := mustApply(t, f, put("b", "2"), grant("b", 1, time.Second))
		if rs[0].Version != 2 || rs[1].Token != 2 {
			t.Errorf("after Reopen: %+v; want version 2, token 2", rs)
		}
		if got := f.Faults(); got != 1 {
			t.Errorf("Faults() = %d, want 1", got)
		}
	}},
	{"reads run concurrently with Apply", func(t *testing.T, s store.Store) {
		const batches = 50
		done := make(chan struct{})
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				var lastVersion, lastRev uint64
				for {
					select {
					case <-done:
						return
					default:
					}
					r, err := s.Get([]byte("k"))
					if err != nil {
						t.Errorf("Get: %v", err)
						return
					}
					st, err := s.State()
					if err != nil {
						t.Errorf("State: %v", err)
						return
					}
					if r.Version < lastVersion || st.Revision < lastRev || st.Revision < r.Version {
						t.Errorf("went back: version %d after %d, revision %d after %d", r.Version, lastVersion, st.Revision, lastRev)
						return
					}
					if r.Found && string(r.Value) != fmt.Sprint(r.Version) {
						t.Errorf("Get(k) = %+v: value of another version", r)
						return
					}
					lastVersion, lastRev = r.Version, st.Revision
				}
			})
		}
		for i := range batches {
			v := uint64(2*i + 1)
			mustApply(t, s, put("k", fmt.Sprint(v)), put("k", fmt.Sprint(v+1)), grant("k", v, time.Second))
		}
		close(done)
		wg.Wait()
	}},
}

// write is cmd as write request of client, which has the outcomes of its
// writes below acked, made at the Unix second at.
func write(cmd store.Command, client, request, acked uint64, at int64) store.Command {
	cmd.Client, cmd.Request, cmd.Acked, cmd.At = client, request, acked, time.Unix(at, 0)
	return cmd
}

// onceContract: writes with a client are applied once per request.
var onceContract = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a retried write is applied once", func(t *testing.T, s store.Store) {
		rs := mustApply(t, s, write(put("a", "1"), 7, 1, 1, 100), write(put("a", "2"), 7, 2, 1, 100))
		wantVersions(t, rs, 1, 2)
		// Request 1 again, in another batch, with a value it never had:
		// the kept outcome, and nothing changes.
		again := mustApply(t, s, write(put("a", "other"), 7, 1, 1, 101), write(del("a"), 7, 2, 1, 101))
		for i, r := range again {
			if !r.Duplicate || r.Version != uint64(i+1) || r.Err != nil {
				t.Errorf("retry of request %d: %+v; want a duplicate at version %d", i+1, r, i+1)
			}
		}
		wantRecord(t, s, "a", str("2"), 2)
		if st := mustState(t, s); st.Revision != 2 {
			t.Errorf("revision %d after retries, want 2", st.Revision)
		}
		if r, ok, err := s.Kept(write(put("a", "x"), 7, 2, 1, 101)); err != nil || !ok || !r.Duplicate || r.Version != 2 {
			t.Errorf("Kept(request 2) = %+v, %v, %v; want a duplicate at version 2", r, ok, err)
		}
		if r, ok, err := s.Kept(write(put("a", "x"), 7, 9, 1, 101)); err != nil || ok {
			t.Errorf("Kept(request 9, never applied) = %+v, %v, %v; want none", r, ok, err)
		}
		// Another client's request 1 is its own.
		wantVersions(t, mustApply(t, s, write(put("a", "3"), 8, 1, 1, 101)), 3)
		// Within one batch, the second of two equal requests is the
		// duplicate.
		rs = mustApply(t, s, write(put("b", "x"), 7, 3, 1, 102), write(put("b", "y"), 7, 3, 1, 102))
		if rs[0].Duplicate || !rs[1].Duplicate || rs[1].Version != rs[0].Version {
			t.Errorf("one request twice in a batch: %+v", rs)
		}
		wantRecord(t, s, "b", str("x"), 4)
	}},
	{"a delete that removed nothing removes nothing again", func(t *testing.T, s store.Store) {
		rs := mustApply(t, s, write(del("a"), 7, 1, 1, 100))
		if !rs[0].Unchanged || rs[0].Version != 0 || rs[0].Duplicate {
			t.Fatalf("delete of a missing key: %+v; want unchanged at version 0", rs[0])
		}
		mustApply(t, s, put("a", "1")) // the retry would remove it now
		rs = mustApply(t, s, write(del("a"), 7, 1, 1, 101))
		if !rs[0].Unchanged || !rs[0].Duplicate || rs[0].Version != 0 {
			t.Errorf("retry: %+v; want the kept outcome, unchanged at version 0", rs[0])
		}
		wantRecord(t, s, "a", str("1"), 1)
	}},
	{"a compare-and-swap that did not match fails again", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"))
		rs := mustApply(t, s, write(cas("a", 5, "x"), 1, 1, 1, 100))
		wantMismatch(t, rs[0], 1)
		mustApply(t, s, put("a", "2"), put("a", "3")) // a@3: the retry would match now
		rs = mustApply(t, s, write(cas("a", 3, "x"), 1, 1, 1, 100))
		wantMismatch(t, rs[0], 1)
		if !rs[0].Duplicate {
			t.Errorf("retry: %+v, want a duplicate", rs[0])
		}
		wantRecord(t, s, "a", str("3"), 3)
	}},
	{"requests below acked are refused", func(t *testing.T, s store.Store) {
		mustApply(t, s, write(put("a", "1"), 1, 1, 1, 100), write(put("a", "2"), 1, 2, 1, 100))
		// The client has the outcome of request 1: a request 1 now is
		// a stale copy, refused, and changes nothing, also after later
		// writes of the client. Request 2's outcome is kept.
		rs := mustApply(t, s, write(put("a", "3"), 1, 3, 2, 100), write(put("a", "4"), 1, 1, 2, 100), write(put("a", "5"), 1, 2, 2, 100))
		if rs[0].Duplicate || rs[0].Version != 3 || !errors.Is(rs[1].Err, store.ErrAnswered) || rs[1].Version != 0 || !rs[2].Duplicate || rs[2].Version != 2 {
			t.Errorf("results %+v; want 3 applied, 1 refused, 2 a duplicate", rs)
		}
		rs = mustApply(t, s, write(put("a", "6"), 1, 1, 1, 101))
		if !errors.Is(rs[0].Err, store.ErrAnswered) {
			t.Errorf("request 1 with a lower acked: %+v; want ErrAnswered", rs[0])
		}
		if r, ok, err := s.Kept(write(put("a", "6"), 1, 1, 1, 101)); err != nil || !ok || !errors.Is(r.Err, store.ErrAnswered) {
			t.Errorf("Kept(request 1) = %+v, %v, %v; want ErrAnswered", r, ok, err)
		}
		wantRecord(t, s, "a", str("3"), 3)
		if st := mustState(t, s); st.Revision != 3 {
			t.Errorf("revision %d, want 3: refused writes take no revision", st.Revision)
		}
	}},
	{"idle clients are listed and forgotten", func(t *testing.T, s store.Store) {
		mustApply(t, s, write(put("a", "1"), 1, 1, 1, 100), write(put("a", "2"), 2, 1, 1, 200), write(put("a", "3"), 3, 1, 1, 300))
		ids, err := s.IdleClients(time.Unix(250, 0), 10)
		if err != nil || !reflect.DeepEqual(ids, []uint64{1, 2}) {
			t.Fatalf("IdleClients(250) = %v, %v; want [1 2]", ids, err)
		}
		if ids, err := s.IdleClients(time.Unix(250, 0), 1); err != nil || len(ids) != 1 {
			t.Errorf("IdleClients with limit 1 = %v, %v", ids, err)
		}
		// Client 2 writes again before the command that forgets it is
		// applied: it is kept.
		mustApply(t, s, write(put("b", "1"), 2, 2, 1, 260))
		mustApply(t, s, store.Command{Op: store.OpForgetClients, Clients: ids, At: time.Unix(250, 0)})
		if ids, err := s.IdleClients(time.Unix(1000, 0), 10); err != nil || !reflect.DeepEqual(ids, []uint64{2, 3}) {
			t.Errorf("after forgetting: IdleClients = %v, %v; want [2 3]", ids, err)
		}
		// Client 1's request 1 is a new write now; client 2's is not.
		rs := mustApply(t, s, write(put("a", "x"), 1, 1, 1, 400), write(put("a", "y"), 2, 1, 1, 400))
		if rs[0].Duplicate || !rs[1].Duplicate {
			t.Errorf("after forgetting client 1: %+v", rs)
		}
	}},
}

// handoffContract: the leases a leader hands over are kept until the next
// horizon.
var handoffContract = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a handoff is kept until the next horizon", func(t *testing.T, s store.Store) {
		at := time.Unix(1_900_000_000, 0)
		ls := []store.HandedLease{
			{Client: 7, Key: "a", Left: 3 * time.Second},
			{Key: "", Left: time.Second},
			{Client: 8, Key: "w", Left: 5 * time.Second, Token: 4},
		}
		mustApply(t, s, horizon(at.Add(time.Minute), time.Minute), store.Command{Op: store.OpHandoff, Handoff: ls, At: at})
		st := mustState(t, s)
		if !st.HandedOff || !reflect.DeepEqual(st.Handoff, ls) {
			t.Errorf("State after a handoff: handed off %v, %+v; want %+v", st.HandedOff, st.Handoff, ls)
		}
		// The horizon is the end of the longest lease handed over.
		if !st.Horizon.Equal(at.Add(5*time.Second)) || st.Span != 5*time.Second {
			t.Errorf("horizon %v span %v after the handoff; want %v, 5s", st.Horizon, st.Span, at.Add(5*time.Second))
		}
		// A handoff of no lease is one too.
		mustApply(t, s, store.Command{Op: store.OpHandoff, At: at})
		if st := mustState(t, s); !st.HandedOff || len(st.Handoff) != 0 || !st.Horizon.Equal(at) {
			t.Errorf("State after an empty handoff: %+v", st)
		}
		mustApply(t, s, horizon(at.Add(time.Hour), time.Hour))
		if st := mustState(t, s); st.HandedOff || st.Handoff != nil {
			t.Errorf("State after a horizon: still handed off: %+v", st)
		}
	}},
}

// wantSameState fails t unless got and want are the same state, their
// horizons the same instant.
func wantSameState(t *testing.T, got, want store.State) {
	t.Helper()
	if !got.Horizon.Equal(want.Horizon) {
		t.Errorf("horizon %v, want %v", got.Horizon, want.Horizon)
	}
	got.Horizon, want.Horizon = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("State = %+v\nwant    %+v", got, want)
	}
}

func TestContract(t *testing.T) {
	for _, im := range impls {
		for _, c := range slices.Concat(contract, onceContract, handoffContract, ttlContract, rangeContract, lockContract) {
			t.Run(im.name+"/"+c.name, func(t *testing.T) { c.run(t, im.open(t)) })
		}
	}
}
