package client_test

// Lease timing: renewal, expiry, offline reads and waits for silent holders,
// on the in-memory server (internal/testkit) under testing/synctest. The
// server, the clients and the network share the bubble's fake clock, so the
// terms are production-sized, the tests take milliseconds, and the bounds
// are exact: the network takes no time, and time moves only when every
// goroutine waits for it.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// timeTerm is the lease term of these tests: the server's default, which
// costs nothing on the fake clock.
const timeTerm = server.DefaultLeaseTerm

// bubble runs f in a synctest bubble with a new in-memory server of term
// timeTerm, changed by cfg (if not nil).
func bubble(t *testing.T, cfg func(*server.Config), f func(t *testing.T, srv *testkit.Server)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		c := server.Config{LeaseTerm: timeTerm}
		if cfg != nil {
			cfg(&c)
		}
		f(t, testkit.NewServer(t, c))
	})
}

// DESIGN.md §3.5: entries read during the current term are renewed before
// they expire, in batches, so hot keys never miss.
func TestHotKeysRenewed(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		ev := newEvents()
		a := srv.Dial(client.Config{OnEvent: ev.on})
		keys := []string{"h1", "h2", "h3"}
		for _, k := range keys {
			mustGet(t, a, k)
		}
		gets, renews := msgsIn(srv, "get"), msgsIn(srv, "renew")
		// Read the hot keys every 50 ms for five terms.
		const rounds = 5 * int(timeTerm/(50*time.Millisecond))
		for n := range rounds {
			for _, k := range keys {
				if it := mustGet(t, a, k); !it.Cached {
					t.Fatalf("read %d of %q is not cached: the lease was not renewed", n, k)
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		if g := msgsIn(srv, "get"); g != gets {
			t.Errorf("hot reads reached the server: get %d -> %d", gets, g)
		}
		// One batch for all three keys each time two thirds of a term has
		// passed since the last renewal, checked every eighth of a term:
		// five terms hold six or seven of them.
		if r := msgsIn(srv, "renew") - renews; r < 6 || r > 8 {
			t.Errorf("%d renew messages over five terms, want 6 to 8 (three keys batched, every 2/3 term)", r)
		}
		for _, e := range ev.snapshot() {
			if e.Kind == client.EventLeasesExpired {
				t.Errorf("leases expired while hot: %v", e.Keys)
			}
		}
	})
}

// DESIGN.md §3.5, §6: an entry not read during its term is not renewed; it
// expires at the end of its term, and the expiry is reported within the
// eighth of a term at which the client checks.
func TestUnreadEntryExpires(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		ev := newEvents()
		a := srv.Dial(client.Config{OnEvent: ev.on})
		start := time.Now()
		mustGet(t, a, "cold")
		mustGet(t, a, "hot")
		var expiredAt time.Duration
		for expiredAt == 0 {
			if time.Since(start) > 2*timeTerm {
				t.Fatalf("no expiry of %q reported within two terms", "cold")
			}
			if it := mustGet(t, a, "hot"); !it.Cached {
				t.Fatalf("hot key read after %v is not cached", time.Since(start))
			}
			time.Sleep(10 * time.Millisecond)
			synctest.Wait()
			for _, e := range drainEvents(ev) {
				if e.Kind != client.EventLeasesExpired {
					continue
				}
				if hasKey(e, "hot") {
					t.Fatalf("hot key reported expired: %v", e.Keys)
				}
				if hasKey(e, "cold") {
					expiredAt = time.Since(start)
				}
			}
		}
		if expiredAt < timeTerm || expiredAt > timeTerm+timeTerm/8+10*time.Millisecond {
			t.Errorf("%q reported expired after %v; want within an eighth of a term after its term %v", "cold", expiredAt, timeTerm)
		}
		gets := msgsIn(srv, "get")
		if it := mustGet(t, a, "cold"); it.Cached {
			t.Errorf("expired entry served from cache: %s", fmtItem(it))
		}
		if g := msgsIn(srv, "get"); g != gets+1 {
			t.Errorf("read of an expired entry: get %d -> %d, want one more", gets, g)
		}
	})
}

// drainEvents returns the events waiting in ev's channel.
func drainEvents(ev *events) []client.Event {
	var out []client.Event
	for {
		select {
		case e := <-ev.ch:
			out = append(out, e)
		default:
			return out
		}
	}
}

// DESIGN.md §6: while disconnected, entries are served until their leases
// run out, and not a moment longer; then reads fail with ErrUnavailable,
// the loss is reported, and stale data comes only when asked for.
func TestOfflineReadsUntilLeaseEnds(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		ev := newEvents()
		a := srv.Dial(client.Config{OnEvent: ev.on, MaxReconnectDelay: 100 * time.Millisecond})
		b := srv.Dial(client.Config{})
		v := mustPut(t, b, "k", "value")
		granted := time.Now()
		if it := mustGet(t, a, "k"); it.Cached || string(it.Value) != "value" {
			t.Fatalf("first read: %s", fmtItem(it))
		}
		time.Sleep(timeTerm / 4)
		srv.Close()
		synctest.Wait()
		ev.wait(t, client.EventDisconnected, testTimeout, nil)
		if _, ok := a.Connection(); ok {
			t.Error("Session reports a session while disconnected")
		}
		if _, err := a.Get(stepCtx(t), "never-read"); !errors.Is(err, client.ErrUnavailable) {
			t.Errorf("uncached read while disconnected: %v, want ErrUnavailable", err)
		}
		wctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		if _, err := a.Put(wctx, "k", []byte("v")); !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, client.ErrCanceled) {
			t.Errorf("write while disconnected: %v, want ErrUnavailable and ErrCanceled", err)
		}
		cancel()
		// Every 10 ms: cached until the term has run out, then unavailable.
		for time.Since(granted) < timeTerm+time.Second {
			it, err := a.Get(stepCtx(t), "k")
			live := time.Since(granted) < timeTerm
			switch {
			case live && err != nil:
				t.Fatalf("read %v after the grant, within the term: %v", time.Since(granted), err)
			case live && (!it.Cached || string(it.Value) != "value" || it.Version != v):
				t.Fatalf("read %v after the grant: %s, want the cached value", time.Since(granted), fmtItem(it))
			case !live && !errors.Is(err, client.ErrUnavailable):
				t.Fatalf("read %v after the grant, past the term: %s, %v; want ErrUnavailable", time.Since(granted), fmtItem(it), err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		ev.wait(t, client.EventLeasesExpired, testTimeout, func(e client.Event) bool { return hasKey(e, "k") })
		st, err := a.GetStale(stepCtx(t), "k")
		if err != nil || !st.Stale || string(st.Value) != "value" {
			t.Errorf("GetStale: %s, %v; want the stale value", fmtItem(st), err)
		}
	})
}

// DESIGN.md §4.6: a read-lease holder that never acknowledges holds a
// write back until its lease plus ε has run out, to the tick, and writes
// to other keys go through meanwhile; the WriteReply reports the wait and
// the holders.
func TestSilentHolderBoundsWrite(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		eps := srv.Stats().Epsilon
		b := srv.Dial(client.Config{Name: "b"})
		c := srv.Dial(client.Config{Name: "c"})
		mustPut(t, b, "k", "old")
		mustGet(t, c, "k")
		h := srv.Raw(protoclient.Options{Name: "silent"})
		g, ok := rawCall(t, h, &protocol.Get{Key: []byte("k")}).(*protocol.GetReply)
		if !ok || g.Term != timeTerm {
			t.Fatalf("silent holder's read: %+v", g)
		}
		granted := time.Now()
		time.Sleep(timeTerm / 2)

		start := time.Now()
		var rep client.WriteResult
		done := make(chan error, 1)
		go func() {
			_, err := b.Put(context.Background(), "k", []byte("new"), client.Result(&rep))
			done <- err
		}()
		synctest.Wait()
		if st := srv.Stats(); st.WritesWaiting != 1 {
			t.Fatalf("WritesWaiting = %d, want the write waiting for the silent holder", st.WritesWaiting)
		}
		if _, took := timedPut(t, c, "other", "x"); took != 0 {
			t.Errorf("a write to another key took %v during the wait", took)
		}
		if _, took := timedPut(t, b, "other2", "y"); took != 0 {
			t.Errorf("the waiting writer's write to another key took %v", took)
		}
		if err := <-done; err != nil {
			t.Fatalf("blocked Put: %v", err)
		}
		if got, want := time.Since(granted), timeTerm+eps; got != want {
			t.Errorf("the write committed %v after the grant, want exactly term+ε = %v", got, want)
		}
		// c read k and acknowledged at once; the silent holder is the
		// second. The writer's own lease is not one it waits for.
		if rep.Holders != 2 || rep.Waited != time.Since(start) {
			t.Errorf("write report %+v; want 2 holders and a wait of %v", rep, time.Since(start))
		}
		if it := mustGet(t, c, "k"); string(it.Value) != "new" || it.Version != rep.Version {
			t.Errorf("after the write: %s, want %q at %d", fmtItem(it), "new", rep.Version)
		}
		if st := srv.Stats(); st.InvalidationsExpired != 1 {
			t.Errorf("InvalidationsExpired = %d, want 1", st.InvalidationsExpired)
		}
	})
}

// DESIGN.md §4.1: while a write waits for a silent holder, readers get the
// last committed value, uncached, up to the tick before the commit; from
// the commit on they get the new one, and cache it again.
func TestReadsDuringPendingWrite(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		eps := srv.Stats().Epsilon
		b := srv.Dial(client.Config{Name: "writer"})
		c := srv.Dial(client.Config{Name: "reader"})
		other := srv.Dial(client.Config{Name: "bystander"})
		v0 := mustPut(t, b, "k", "old")
		// The reader holds a lease too: it is invalidated and acknowledges
		// at once, and its reads during the wait must not be cached again.
		if it := mustGet(t, c, "k"); string(it.Value) != "old" {
			t.Fatalf("read before: %s", fmtItem(it))
		}
		h := srv.Raw(protoclient.Options{Name: "silent"})
		if g, ok := rawCall(t, h, &protocol.Get{Key: []byte("k")}).(*protocol.GetReply); !ok || g.Term != timeTerm {
			t.Fatalf("silent holder's read: %+v", g)
		}
		commit := time.Now().Add(timeTerm + eps) // the silent holder's lease ends
		type result struct {
			v   uint64
			err error
			at  time.Time
		}
		done := make(chan result, 1)
		go func() {
			v, err := b.Put(context.Background(), "k", []byte("new"))
			done <- result{v, err, time.Now()}
		}()
		synctest.Wait()
		if st := srv.Stats(); st.WritesWaiting != 1 {
			t.Fatalf("WritesWaiting = %d, want the write waiting for the silent holder", st.WritesWaiting)
		}
		read := func(when string) {
			t.Helper()
			it := mustGet(t, c, "k")
			if string(it.Value) != "old" || it.Version != v0 || it.Cached {
				t.Fatalf("read %s, %v before the commit: %s, want the committed %q at %d, uncached",
					when, time.Until(commit), fmtItem(it), "old", v0)
			}
		}
		// Every tenth of a term across the wait, and on the last tick
		// before the commit.
		reads := 0
		for ; time.Until(commit) > timeTerm/10; reads++ {
			read(fmt.Sprintf("%d", reads))
			time.Sleep(timeTerm / 10)
		}
		if want := int((timeTerm + eps - 1) / (timeTerm / 10)); reads != want {
			t.Errorf("%d reads during the wait, want %d", reads, want)
		}
		time.Sleep(time.Until(commit) - time.Nanosecond)
		read("on the last tick")
		select {
		case r := <-done:
			t.Fatalf("the write returned %v before the silent holder's lease ended: %d, %v", time.Until(commit), r.v, r.err)
		default:
		}
		r := <-done
		if r.err != nil {
			t.Fatalf("blocked Put: %v", r.err)
		}
		if !r.at.Equal(commit) {
			t.Errorf("the write committed %v after the end of the silent holder's lease, want at it", r.at.Sub(commit))
		}
		for _, cl := range []*client.Client{c, other, b} {
			if it := mustGet(t, cl, "k"); string(it.Value) != "new" || it.Version != r.v {
				t.Fatalf("read after the commit: %s, want %q at %d", fmtItem(it), "new", r.v)
			}
		}
		if it := mustGet(t, c, "k"); !it.Cached {
			t.Errorf("the reader's second read after the commit is not cached: %s", fmtItem(it))
		}
	})
}

// DESIGN.md §5: a write-lease holder that ignores its recall holds a
// conflicting write back until its term plus ε has run out, and its token
// is fenced afterwards.
func TestSilentWriteLeaseHolder(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		eps := srv.Stats().Epsilon
		b := srv.Dial(client.Config{})
		c := srv.Dial(client.Config{})
		h := srv.Raw(protoclient.Options{Name: "silent"})
		ar, ok := rawCall(t, h, &protocol.Acquire{Key: []byte("k")}).(*protocol.AcquireReply)
		if !ok || ar.Token == 0 || ar.Term != timeTerm {
			t.Fatalf("raw acquire: %+v", ar)
		}
		granted := time.Now()
		if it := mustGet(t, c, "k"); it.Cached {
			t.Fatalf("read under another's write lease: %s", fmtItem(it))
		}
		time.Sleep(timeTerm / 3)
		recalls := srv.Stats().Recalls
		done := make(chan uint64, 1)
		go func() {
			v, err := b.Put(context.Background(), "k", []byte("b"))
			if err != nil {
				t.Errorf("conflicting Put: %v", err)
			}
			done <- v
		}()
		synctest.Wait()
		if _, took := timedPut(t, c, "other", "x"); took != 0 {
			t.Errorf("a write to another key took %v during the wait", took)
		}
		v := <-done
		if got, want := time.Since(granted), timeTerm+eps; got != want {
			t.Errorf("the conflicting write committed %v after the grant, want exactly term+ε = %v", got, want)
		}
		if got := srv.Stats().Recalls; got != recalls+1 {
			t.Errorf("Recalls %d -> %d, want one recall", recalls, got)
		}
		m := rawCall(t, h, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("late"), Token: ar.Token})
		if e, ok := m.(*protocol.Error); !ok || e.Code != protocol.CodeFenced {
			t.Fatalf("late write with the expired token: %T %+v, want CodeFenced", m, m)
		}
		if it := mustGet(t, c, "k"); string(it.Value) != "b" || it.Version != v {
			t.Fatalf("after the fenced write: %s", fmtItem(it))
		}
	})
}

// DESIGN.md §5: a write lease is renewed like a read lease while its
// holder's session lasts, and the holder reads the key from its cache.
func TestWriteLeaseRenewed(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		a := srv.Dial(client.Config{})
		b := srv.Dial(client.Config{})
		wl, err := a.AcquireWriteLease(stepCtx(t), "k")
		if err != nil {
			t.Fatal(err)
		}
		gets := msgsIn(srv, "get")
		// Hold it for four terms, reading from the cache every 50 ms.
		for n := range 4 * int(timeTerm/(50*time.Millisecond)) {
			if !wl.Valid() {
				t.Fatalf("write lease lost after %d reads", n)
			}
			if it := mustGet(t, a, "k"); !it.Cached {
				t.Fatalf("holder's read %d not cached", n)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if g := msgsIn(srv, "get"); g != gets {
			t.Errorf("holder's reads reached the server: get %d -> %d", gets, g)
		}
		if n := srv.Stats().WriteLeases; n != 1 {
			t.Errorf("server counts %d write leases", n)
		}
		if _, err := wl.Put(stepCtx(t), []byte("still mine")); err != nil {
			t.Fatalf("write under a renewed lease: %v", err)
		}
		if it := mustGet(t, b, "k"); string(it.Value) != "still mine" || it.Cached {
			t.Fatalf("other reader: %s", fmtItem(it))
		}
	})
}

// DESIGN.md §7: a restart on the same store keeps values, the revision and
// the growth of fencing tokens, serves reads at once, and holds writes
// until the leases granted before the restart have run out on the server:
// exactly term+ε after the last grant, and not a tick longer.
func TestRestartKeepsState(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		eps := srv.Stats().Epsilon
		a := srv.Dial(client.Config{})
		granted := time.Now() // a's leases, of its writes and its write lease, all from now
		want := map[string]string{}
		for i := range 5 {
			k, v := fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)
			mustPut(t, a, k, v)
			want[k] = v
		}
		if _, err := a.Delete(stepCtx(t), "k4"); err != nil {
			t.Fatal(err)
		}
		delete(want, "k4")
		wl, err := a.AcquireWriteLease(stepCtx(t), "k0")
		if err != nil {
			t.Fatal(err)
		}
		t1 := wl.Token()
		versions := map[string]uint64{}
		for i := range 5 {
			k := fmt.Sprintf("k%d", i)
			versions[k] = mustGet(t, a, k).Version
		}
		rev := srv.Stats().Revision
		time.Sleep(timeTerm / 4)
		// a is cut off by the server, not closed: its leases stay live,
		// and the server that closes persists a lease horizon that covers
		// them.
		srv.Restart(nil)
		leasesEnd := granted.Add(timeTerm + eps)
		if st := srv.Stats(); st.Revision != rev || st.WritesAllowedIn != time.Until(leasesEnd) {
			t.Fatalf("after restart: revision %d (want %d), writes allowed in %v (want %v, when a's leases end)",
				st.Revision, rev, st.WritesAllowedIn, time.Until(leasesEnd))
		}
		b := srv.Dial(client.Config{})
		start := time.Now()
		for i := range 5 {
			k := fmt.Sprintf("k%d", i)
			it := mustGet(t, b, k)
			wv, found := want[k]
			if it.Found != found || string(it.Value) != wv || it.Version != versions[k] {
				t.Fatalf("after restart %q: %s, want found=%v %q at %d", k, fmtItem(it), found, wv, versions[k])
			}
		}
		if it := mustGet(t, b, "k1"); !it.Cached {
			t.Errorf("reads after a restart are not leased: %s", fmtItem(it))
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("reads right after the restart took %v, want no wait", took)
		}
		v, _ := timedPut(t, b, "k1", "after-restart")
		if at := time.Now(); !at.Equal(leasesEnd) {
			t.Errorf("the first write after the restart committed %v after a's leases ended, want at their end", at.Sub(leasesEnd))
		}
		if v != rev+1 {
			t.Errorf("first version after restart %d, want %d", v, rev+1)
		}
		wl2, err := b.AcquireWriteLease(stepCtx(t), "k0")
		if err != nil {
			t.Fatal(err)
		}
		if wl2.Token() <= t1 {
			t.Fatalf("token after restart %d, not above %d", wl2.Token(), t1)
		}
		// Once the barrier has passed, writes do not wait.
		if _, took := timedPut(t, b, "k2", "fast"); took != 0 {
			t.Errorf("a write after the barrier took %v", took)
		}
	})
}

// DESIGN.md §7: "A restart with a shorter configured term must not shorten
// this wait." A client that read under the old, longer term keeps serving
// its entry while the server is down; a write on the restarted server
// commits exactly when that entry's lease ends on the server, and the
// client does not serve the old value after it.
func TestRestartWithShorterTerm(t *testing.T) {
	const longTerm, shortTerm = timeTerm, timeTerm / 8
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		eps := srv.Stats().Epsilon
		b := srv.Dial(client.Config{})
		mustPut(t, b, "k", "old")
		time.Sleep(shortTerm)
		a := srv.Dial(client.Config{})
		granted := time.Now() // a trusts its entry until granted + longTerm
		if it := mustGet(t, a, "k"); string(it.Value) != "old" {
			t.Fatalf("read: %s", fmtItem(it))
		}
		time.Sleep(shortTerm)
		srv.Restart(func(c *server.Config) { c.LeaseTerm = shortTerm })
		leaseEnd := granted.Add(longTerm + eps)
		if left := srv.Stats().WritesAllowedIn; left != time.Until(leaseEnd) {
			t.Errorf("restarted server with a shorter term allows writes in %v; a's lease of the old term %v ends on the server in %v",
				left, longTerm, time.Until(leaseEnd))
		}
		c := srv.Dial(client.Config{})
		if _, err := c.Put(stepCtx(t), "k", []byte("new")); err != nil {
			t.Fatal(err)
		}
		if at := time.Now(); !at.Equal(leaseEnd) {
			t.Errorf("the first write after the restart committed %v after a's lease of the old term ended on the server, want at its end", at.Sub(leaseEnd))
		}
		// The linearizability check itself: after the write returned, a
		// must not serve the old value from its cache.
		if it, err := a.Get(stepCtx(t), "k"); err == nil && string(it.Value) == "old" {
			t.Errorf("after a write of %q was acknowledged, a client still reads %s", "new", fmtItem(it))
		}
	})
}

// DESIGN.md §6: a client whose server restarts reconnects in the
// background. An entry it cached under the old session is served from the
// cache until its lease ends, to the tick, and is not renewed on the new
// session however often it is read; the next read comes from the new
// server, and a write waits for the restarted server's barrier.
func TestReconnectedEntryRunsOut(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		eps := srv.Stats().Epsilon
		ev := newEvents()
		a := srv.Dial(client.Config{OnEvent: ev.on, MaxReconnectDelay: 100 * time.Millisecond})
		granted := time.Now()
		v := mustPut(t, a, "k", "kept")
		leaseEnd := granted.Add(timeTerm)
		srv.Restart(nil)
		ev.wait(t, client.EventDisconnected, testTimeout, nil)
		ev.wait(t, client.EventReconnected, testTimeout, nil)
		if s, ok := a.Connection(); !ok || s.ID == 0 {
			t.Fatalf("no session after EventReconnected")
		}
		renews := msgsIn(srv, "renew")
		read := func(cached bool) {
			t.Helper()
			it := mustGet(t, a, "k")
			if string(it.Value) != "kept" || it.Version != v || it.Cached != cached {
				t.Fatalf("read %v after the grant: %s, want %q at %d, cached %v", time.Since(granted), fmtItem(it), "kept", v, cached)
			}
		}
		// Every tenth of a term, so that the client asks to renew it.
		for time.Until(leaseEnd) > timeTerm/10 {
			read(true)
			time.Sleep(timeTerm / 10)
		}
		time.Sleep(time.Until(leaseEnd) - time.Nanosecond)
		read(true)
		time.Sleep(time.Nanosecond)
		read(false)
		read(true) // the new session's lease
		if msgsIn(srv, "renew") == renews {
			t.Errorf("the client did not ask the new server to renew the entry it read")
		}
		if n := srv.Stats().Sessions; n != 1 {
			t.Errorf("sessions after reconnect: %d", n)
		}
		// The restarted server holds writes until the old session's lease
		// has ended on the server.
		if _, err := a.Put(stepCtx(t), "k", []byte("new")); err != nil {
			t.Fatal(err)
		}
		if at, want := time.Since(granted), timeTerm+eps; at != want {
			t.Errorf("the first write after the restart committed %v after the old session's grant, want %v", at, want)
		}
	})
}
