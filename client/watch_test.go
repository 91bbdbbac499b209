package client_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/server"
)

// next reads the next response of w, failing the test after a bound.
func next(t *testing.T, w *client.Watcher) client.WatchResponse {
	t.Helper()
	select {
	case r, ok := <-w.C:
		if !ok {
			t.Fatal("the watch's channel closed")
		}
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no watch response within 10 s")
	}
	return client.WatchResponse{}
}

// collect reads responses of w until it has n events, and checks that
// each response's progress covers its events and never goes back, and
// that no event comes at or below a progress already delivered (the
// progress is the watch's own, etcd #15220).
func collect(t *testing.T, w *client.Watcher, n int) []client.WatchEvent {
	t.Helper()
	var evs []client.WatchEvent
	var last uint64
	for len(evs) < n {
		r := next(t, w)
		if r.Err != nil {
			t.Fatalf("watch ended after %d events: %v", len(evs), r.Err)
		}
		if r.Revision < last {
			t.Fatalf("progress went back from %d to %d", last, r.Revision)
		}
		for _, e := range r.Events {
			if e.Revision > r.Revision {
				t.Fatalf("event at %d in a response of progress %d", e.Revision, r.Revision)
			}
			if e.Revision <= last {
				t.Fatalf("event at %d after progress %d was delivered", e.Revision, last)
			}
		}
		last = r.Revision
		evs = append(evs, r.Events...)
	}
	return evs
}

// TestWatchPrefix: a watch of a prefix from a revision delivers every
// change under it from that revision on, in order, once: the changes made
// before the watch began and those made after, puts, deletes and a
// transaction's two keys at one revision together, each with the value
// before; keys outside the prefix are not delivered.
func TestWatchPrefix(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	c := dial(t, srv, client.Config{})
	ctx, cancel := context.WithCancel(stepCtx(t))
	defer cancel()
	v1 := mustPut(t, c, "/d/a", "1")
	mustPut(t, c, "/e", "outside")
	w := c.Watch(ctx, "/d/", client.WithPrefix(), client.FromRevision(v1), client.WithPrevValue())
	mustPut(t, c, "/d/a", "2")
	if _, err := c.Delete(ctx, "/d/a"); err != nil {
		t.Fatal(err)
	}
	r, err := c.Txn(ctx).Then(client.PutOp("/d/x", []byte("x")), client.PutOp("/d/y", []byte("y"))).Commit()
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, w, 5)
	want := []string{"PUT /d/a 1 prev:-", "PUT /d/a 2 prev:1", "DELETE /d/a  prev:2", "PUT /d/x x prev:-", "PUT /d/y y prev:-"}
	for i, e := range evs {
		prev := "-"
		if e.PrevFound {
			prev = string(e.PrevValue)
		}
		if got := fmt.Sprintf("%v %s %s prev:%s", e.Type, e.Key, e.Value, prev); got != want[i] {
			t.Errorf("event %d: %s, want %s", i, got, want[i])
		}
	}
	if evs[3].Revision != r.Revision || evs[4].Revision != r.Revision {
		t.Errorf("the transaction's events at %d and %d, want both at %d", evs[3].Revision, evs[4].Revision, r.Revision)
	}
	cancel()
	for resp := range w.C {
		if resp.Err != nil && !errors.Is(resp.Err, context.Canceled) {
			t.Errorf("the watch ended with %v, want its context's error", resp.Err)
		}
	}
}

// TestWatchCompacted: a watch from a revision the history no longer holds
// ends with ErrCompacted, naming the compaction point.
func TestWatchCompacted(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	c := dial(t, srv, client.Config{})
	ctx := stepCtx(t)
	for i := range 5 {
		mustPut(t, c, "k", fmt.Sprint(i))
	}
	adm, err := client.DialAdmin(ctx, srv.Addr().String(), client.Config{CAFile: srv.CA()})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.Compact(ctx, 3); err != nil {
		t.Fatal(err)
	}
	w := c.Watch(ctx, "k", client.FromRevision(2))
	r := next(t, w)
	if !errors.Is(r.Err, client.ErrCompacted) || r.CompactRevision != 3 {
		t.Fatalf("a watch from 2 after compaction through 3: %+v, want ErrCompacted at 3", r)
	}
	if _, ok := <-w.C; ok {
		t.Fatal("the watch's channel stayed open after its error")
	}
	w = c.Watch(ctx, "k", client.FromRevision(4))
	if evs := collect(t, w, 2); evs[0].Revision != 4 || evs[1].Revision != 5 {
		t.Fatalf("a watch from 4: %+v, want revisions 4 and 5", evs)
	}
}

// TestWatchResumesAfterRestart: a watch whose server restarts resumes on
// the client's next session from the revision after the last one it
// delivered: the changes before and after the restart arrive once each,
// in order.
func TestWatchResumesAfterRestart(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		ev := newEvents()
		a := srv.Dial(client.Config{OnEvent: ev.on, MaxReconnectDelay: 100 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		w := a.Watch(ctx, "k", client.FromRevision(1))
		for i := range 3 {
			mustPut(t, a, "k", fmt.Sprint(i))
		}
		before := collect(t, w, 3)
		srv.Restart(nil)
		ev.wait(t, client.EventReconnected, testTimeout, nil)
		for i := 3; i < 5; i++ {
			if _, err := a.Put(ctx, "k", []byte(fmt.Sprint(i))); err != nil {
				t.Fatal(err)
			}
		}
		after := collect(t, w, 2)
		for i, e := range append(before, after...) {
			if e.Revision != uint64(i+1) || string(e.Value) != fmt.Sprint(i) {
				t.Errorf("event %d: %s at %d, want %d at %d", i, e.Value, e.Revision, i, i+1)
			}
		}
		cancel()
		for range w.C {
		}
	})
}

// TestWatchRevisionInFrames: a revision whose events are larger than a
// frame (a TTL lease revoked with 300 keys of 10 KiB, each delete with
// its previous value) arrives whole, in one response.
func TestWatchRevisionInFrames(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	c := dial(t, srv, client.Config{})
	ctx := stepCtx(t)
	g, err := c.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	val := make([]byte, 10<<10)
	const keys = 300
	for i := range keys {
		if _, err := c.Put(ctx, fmt.Sprintf("/t/%03d", i), val, client.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := c.Watch(wctx, "/t/", client.WithPrefix(), client.WithPrevValue())
	rr, err := c.Revoke(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	r := next(t, w)
	if r.Err != nil || len(r.Events) != keys || r.Revision != rr.Revision {
		t.Fatalf("the revocation's response: %d events at progress %d, %v; want %d at %d", len(r.Events), r.Revision, r.Err, keys, rr.Revision)
	}
	for i, e := range r.Events {
		if e.Type != client.WatchDelete || e.Lease != g.ID || e.Revision != rr.Revision || len(e.PrevValue) != len(val) || e.Key != fmt.Sprintf("/t/%03d", i) {
			t.Fatalf("event %d: %v %s at %d, lease %v, %d bytes before", i, e.Type, e.Key, e.Revision, e.Lease, len(e.PrevValue))
		}
	}
}

// TestSlowWatcherHoldsNothingBack: a watcher whose program does not read
// its channel holds back neither the commits, nor another watcher of the
// same keys, nor its own client's session; once it reads, it gets every
// event, in order, once.
func TestSlowWatcherHoldsNothingBack(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	slowClient := dial(t, srv, client.Config{})
	fastClient := dial(t, srv, client.Config{})
	writer := dial(t, srv, client.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow := slowClient.Watch(ctx, "/s/", client.WithPrefix())
	fast := fastClient.Watch(ctx, "/s/", client.WithPrefix())
	// Both watches have begun once a write shows on the fast one.
	first := mustPut(t, writer, "/s/start", "x")
	if evs := collect(t, fast, 1); evs[0].Revision != first {
		t.Fatalf("first event at %d, want %d", evs[0].Revision, first)
	}
	// 200 values of 64 KiB, 12.5 MiB: more than a stream's flow-control
	// window, so that the slow watcher's stream fills.
	val := make([]byte, 64<<10)
	const n = 200
	done := make(chan error, 1)
	var lats []time.Duration // each write's latency
	start := time.Now()
	go func() {
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		for i := range n {
			t0 := time.Now()
			if _, err := writer.Put(wctx, fmt.Sprintf("/s/%03d", i), val); err != nil {
				done <- err
				return
			}
			lats = append(lats, time.Since(t0))
		}
		done <- nil
	}()
	got := collect(t, fast, n)
	fastDone := time.Since(start)
	if err := <-done; err != nil {
		t.Fatalf("a write while a watcher did not read: %v", err)
	}
	slices.Sort(lats)
	// What the writes and the other watcher took while one watcher read
	// nothing: for the log, not a bound (this is no benchmark).
	t.Logf("%d writes of 64 KiB: median %v, slowest %v; the other watcher had them all %v after the first write",
		n, lats[n/2].Round(time.Microsecond), lats[n-1].Round(time.Microsecond), fastDone.Round(time.Millisecond))
	if got[n-1].Key != fmt.Sprintf("/s/%03d", n-1) {
		t.Fatalf("the fast watcher's last event: %s", got[n-1].Key)
	}
	// The slow watcher's session serves its client meanwhile.
	if _, err := slowClient.Get(stepCtx(t), "/s/000"); err != nil {
		t.Fatalf("a read of the slow watcher's client: %v", err)
	}
	evs := collect(t, slow, n+1)
	for i, e := range evs {
		if e.Revision != first+uint64(i) {
			t.Fatalf("slow watcher's event %d at revision %d, want %d", i, e.Revision, first+uint64(i))
		}
	}
}

// applyUpdate applies a ListWatch update to state.
func applyUpdate(state map[string]string, u client.ListWatchUpdate) {
	if u.Listed {
		clear(state)
		for _, kv := range u.Snapshot {
			state[kv.Key] = string(kv.Value)
		}
	}
	for _, e := range u.Events {
		if e.Type == client.WatchPut {
			state[e.Key] = string(e.Value)
		} else {
			delete(state, e.Key)
		}
	}
}

// listWatched is what a program that follows a ListWatch holds: its
// updates applied, and how many were snapshots after a relisting.
type listWatched struct {
	updates <-chan client.ListWatchUpdate
	state   map[string]string
	seen    uint64 // the revision of the last update
	read    int
	relists int
}

func newListWatched(updates <-chan client.ListWatchUpdate) *listWatched {
	return &listWatched{updates: updates, state: make(map[string]string)}
}

// next applies the next update, within 20 s; the first must be a
// snapshot, and none may end the ListWatch.
func (lw *listWatched) next(t *testing.T) client.ListWatchUpdate {
	t.Helper()
	select {
	case u := <-lw.updates:
		switch {
		case u.Err != nil:
			t.Fatalf("ListWatch ended: %v", u.Err)
		case lw.read == 0 && (!u.Listed || u.Relisted):
			t.Fatalf("first update: %+v, want a snapshot", u)
		}
		lw.read++
		if u.Relisted {
			lw.relists++
		}
		applyUpdate(lw.state, u)
		lw.seen = u.Revision
		return u
	case <-time.After(20 * time.Second):
		t.Fatalf("ListWatch stopped at revision %d", lw.seen)
	}
	return client.ListWatchUpdate{}
}

// catchUp applies updates until the ListWatch has come to revision rev,
// and checks that it holds want then.
func (lw *listWatched) catchUp(t *testing.T, rev uint64, want map[string]string) {
	t.Helper()
	for lw.seen < rev {
		lw.next(t)
	}
	if len(lw.state) != len(want) {
		t.Fatalf("ListWatch's state holds %d keys, the listing %d", len(lw.state), len(want))
	}
	for k, v := range want {
		if lw.state[k] != v {
			t.Fatalf("key %s: ListWatch has %d bytes, the listing %d", k, len(lw.state[k]), len(v))
		}
	}
}

// truth lists every key under prefix.
func truth(t *testing.T, c *client.Client, prefix string) (map[string]string, uint64) {
	t.Helper()
	out := make(map[string]string)
	var opts []client.ListOption
	var rev uint64
	for {
		r, err := c.List(stepCtx(t), prefix, opts...)
		if err != nil {
			t.Fatal(err)
		}
		rev = max(rev, r.Revision)
		for _, kv := range r.KVs {
			out[kv.Key] = string(kv.Value)
		}
		if !r.More {
			return out, rev
		}
		opts = []client.ListOption{client.StartAfter(r.KVs[len(r.KVs)-1].Key)}
	}
}

// TestListWatch: ListWatch of a prefix of more keys than a page, started
// while a writer changes them, delivers a snapshot and then changes whose
// sum is, once the writer stops, exactly the prefix as a listing reads it;
// the first update is a snapshot.
func TestListWatch(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	c := dial(t, srv, client.Config{})
	writer := dial(t, srv, client.Config{})
	for i := range server.MaxListKeys + 500 {
		mustPut(t, writer, fmt.Sprintf("/lw/%04d", i), "0")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	wrote := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				wrote <- nil
				return
			default:
			}
			key := fmt.Sprintf("/lw/%04d", (i*37)%(server.MaxListKeys+700))
			var err error
			if i%5 == 0 {
				_, err = writer.Delete(ctx, key)
			} else {
				_, err = writer.Put(ctx, key, []byte(fmt.Sprint(i)))
			}
			if err != nil {
				wrote <- err
				return
			}
		}
	}()
	lw := newListWatched(c.ListWatch(ctx, "/lw/"))
	lw.next(t)
	time.Sleep(200 * time.Millisecond) // the writer's changes after the snapshot
	close(stop)
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	want, rev := truth(t, writer, "/lw/")
	lw.catchUp(t, rev, want)
}

// TestListWatchRelists: a ListWatch whose reader falls so far behind that
// the history is compacted past it lists again, says so (Relisted), and
// goes on; its state is the prefix's once it has caught up.
func TestListWatchRelists(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	c := dial(t, srv, client.Config{})
	writer := dial(t, srv, client.Config{})
	ctx, cancel := context.WithCancel(stepCtx(t))
	defer cancel()
	mustPut(t, writer, "/r/a", "0")
	lw := newListWatched(c.ListWatch(ctx, "/r/"))
	lw.next(t)
	// 200 values of 64 KiB, more than the watch's stream holds while
	// nobody reads it, and the history compacted past them.
	val := make([]byte, 64<<10)
	var last uint64
	for i := range 200 {
		last = mustPut(t, writer, fmt.Sprintf("/r/%03d", i%10), string(val[:len(val)-i]))
	}
	adm, err := client.DialAdmin(ctx, srv.Addr().String(), client.Config{CAFile: srv.CA()})
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.Compact(ctx, last); err != nil {
		t.Fatal(err)
	}
	want, rev := truth(t, writer, "/r/")
	lw.catchUp(t, rev, want)
	if lw.relists == 0 {
		t.Fatal("ListWatch caught up without listing again: the history was not compacted past it")
	}
}

// TestClosedClientEndsBlockedWatch: a client that closes while one of its
// watches is held back by flow control (its program reads nothing) ends
// its session on the server at once: the watch's writer is abandoned.
func TestClosedClientEndsBlockedWatch(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	c := dial(t, srv, client.Config{})
	writer := dial(t, srv, client.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := c.Watch(ctx, "/b/", client.WithPrefix(), client.FromRevision(1))
	val := make([]byte, 64<<10)
	for i := range 150 {
		mustPut(t, writer, fmt.Sprintf("/b/%03d", i), string(val))
	}
	if r := next(t, w); len(r.Events) == 0 {
		t.Fatalf("first response: %+v, want events", r)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for srv.Stats().Sessions > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions 5 s after the watching client closed, want the writer's alone", srv.Stats().Sessions)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWatchProgressIsTheWatchers: a watch asked for its progress while a
// burst of writes under another prefix and its own commit reports a
// revision up to which it has delivered every event of its keys, never one
// past events it still owes (etcd #15220), and an idle watch reports the
// store's revision.
func TestWatchProgressIsTheWatchers(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	c := dial(t, srv, client.Config{})
	writer := dial(t, srv, client.Config{})
	ctx, cancel := context.WithCancel(stepCtx(t))
	defer cancel()
	mine := mustPut(t, writer, "/p/mine", "1")
	for i := range 50 {
		mustPut(t, writer, fmt.Sprintf("/q/%d", i), "x")
	}
	w := c.Watch(ctx, "/p/", client.WithPrefix(), client.FromRevision(1), client.WithProgressNotify(-1))
	w.RequestProgress()
	seen := false
	for {
		r := next(t, w)
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		for _, e := range r.Events {
			if e.Revision == mine {
				seen = true
			}
		}
		if !seen && r.Revision >= mine {
			t.Fatalf("progress %d before the event at %d was delivered", r.Revision, mine)
		}
		if len(r.Events) == 0 {
			if st := srv.Stats(); r.Revision != st.Revision {
				t.Fatalf("an idle watch's progress %d, want the store's revision %d", r.Revision, st.Revision)
			}
			return
		}
	}
}

// TestWatchUnderCompaction: a leader that keeps only the newest 20
// revisions of its history (compacting every 20 ms) while writers write:
// a ListWatch whose reader is slow now and then lists again as often as
// it falls behind, and ends with the state a listing reads; a watch from
// a compacted revision gets ErrCompacted and the compaction point.
func TestWatchUnderCompaction(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute,
		History: core.HistoryRetention{Revisions: 20, Interval: 20 * time.Millisecond}})
	c := dial(t, srv, client.Config{})
	writer := dial(t, srv, client.Config{})
	ctx, cancel := context.WithCancel(stepCtx(t))
	defer cancel()
	lw := newListWatched(c.ListWatch(ctx, "/u/"))
	lw.next(t)
	// 400 values of 32 KiB, 12.5 MiB, which the reader does not read
	// meanwhile: more than its watch's stream holds, so that the server's
	// watcher waits, and the history is compacted past it.
	pad := strings.Repeat("x", 32<<10)
	for i := range 400 {
		mustPut(t, writer, fmt.Sprintf("/u/%d", i%30), fmt.Sprint(i)+pad)
	}
	want, rev := truth(t, writer, "/u/")
	lw.catchUp(t, rev, want)
	t.Logf("%d revisions, %d relistings", rev, lw.relists)
	if lw.relists == 0 {
		t.Fatal("the reader caught up without listing again: the history was not compacted past it")
	}
	compacted := srv.Stats().HistoryCompacted
	if compacted == 0 {
		t.Fatal("no compaction")
	}
	w := c.Watch(ctx, "/u/", client.WithPrefix(), client.FromRevision(compacted))
	if r := next(t, w); !errors.Is(r.Err, client.ErrCompacted) || r.CompactRevision < compacted {
		t.Fatalf("a watch from the compaction point %d: %+v", compacted, r)
	}
}

// TestWatchesPerSession: a session holds MaxWatchesPerSession watches at
// once, each on a stream of its own (the client lets the server open that
// many), and one more is refused with ErrResourceExhausted.
func TestWatchesPerSession(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Minute})
	c := dial(t, srv, client.Config{})
	ctx, cancel := context.WithCancel(stepCtx(t))
	defer cancel()
	ws := make([]*client.Watcher, server.MaxWatchesPerSession)
	for i := range ws {
		ws[i] = c.Watch(ctx, fmt.Sprintf("many/%d", i), client.WithProgressNotify(-1))
	}
	for i, w := range ws {
		w.RequestProgress()
		if r := next(t, w); r.Err != nil {
			t.Fatalf("watch %d: %v", i, r.Err)
		}
	}
	extra := c.Watch(ctx, "many/extra")
	if r := next(t, extra); !errors.Is(r.Err, client.ErrResourceExhausted) {
		t.Fatalf("watch %d of a session: %+v, want ErrResourceExhausted", server.MaxWatchesPerSession+1, r)
	}
}
