package client_test

// The client's side of TTL leases (DESIGN §14) against the fake server of
// ttlfake_test.go, under testing/synctest: the keep-alive loop's batching
// and timing, the loss of a lease, retries across reconnections, and what
// each call puts on the wire. Times are exact: the network takes no time,
// and time moves only when every goroutine waits.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/protocol"
)

func TestParseLeaseID(t *testing.T) {
	for in, want := range map[string]client.LeaseID{
		"694d71ddacfda227": 0x694d71ddacfda227,
		"694D71DDACFDA227": 0x694d71ddacfda227,
		"ab":               0xab,
		"1":                1,
		"00000000000000ab": 0xab,
		"ffffffffffffffff": 1<<64 - 1,
	} {
		got, err := client.ParseLeaseID(in)
		if err != nil || got != want {
			t.Errorf("ParseLeaseID(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "0000000000000000", "0x1f", "-1", "+1", " 1", "1 ", "g", "694d71ddacfda2270", "1.5", "１"} {
		if got, err := client.ParseLeaseID(in); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "lease id") {
			t.Errorf("ParseLeaseID(%q) = %v, %v; want an error wrapping ErrInvalidArgument that says what a lease id is", in, got, err)
		}
	}
	for id, want := range map[client.LeaseID]string{
		0x694d71ddacfda227: "694d71ddacfda227",
		0xab:               "00000000000000ab",
		1<<64 - 1:          "ffffffffffffffff",
	} {
		if got := id.String(); got != want {
			t.Errorf("LeaseID(%#x).String() = %q, want %q", uint64(id), got, want)
		}
		if back, err := client.ParseLeaseID(want); err != nil || back != id {
			t.Errorf("ParseLeaseID(%q) = %v, %v; want %v", want, back, err, id)
		}
	}
}

// mustGrant grants a lease of ttl or fails the test.
func mustGrant(t *testing.T, c *client.Client, ttl time.Duration) client.LeaseGrantResult {
	t.Helper()
	g, err := c.Grant(stepCtx(t), ttl)
	if err != nil {
		t.Fatalf("Grant(%v): %v", ttl, err)
	}
	if g.ID == 0 || g.TTL != ttl {
		t.Fatalf("Grant(%v) = %+v", ttl, g)
	}
	return g
}

// mustSession starts a session of ttl or fails the test.
func mustSession(t *testing.T, c *client.Client, ttl time.Duration) *client.Session {
	t.Helper()
	s, err := client.NewSession(stepCtx(t), c, ttl)
	if err != nil {
		t.Fatalf("NewSession(%v): %v", ttl, err)
	}
	return s
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// drainClosed reads what ch holds and reports whether it is closed,
// without waiting.
func drainClosed(ch <-chan client.KeepAliveResponse) (got []client.KeepAliveResponse, closed bool) {
	for {
		select {
		case r, ok := <-ch:
			if !ok {
				return got, true
			}
			got = append(got, r)
		default:
			return got, false
		}
	}
}

// DESIGN §14: KeepAlive renews many leases in one message. Three sessions
// granted 2 s apart with a TTL of 30 s are due at 10, 12 and 14 s; the first
// takes the other two along (each due within a sixth of its TTL), and from
// then on every message, one per third of the TTL, carries all three.
func TestKeepAliveOneMessageForEveryDueLease(t *testing.T) {
	ttlBubble(t, func(t *testing.T, fs *fakeTTL) {
		c := fs.dial(client.Config{})
		const ttl = 30 * time.Second
		start := time.Now()
		var sessions []*client.Session
		var want []client.LeaseID
		for range 3 {
			s := mustSession(t, c, ttl)
			sessions, want = append(sessions, s), append(want, s.Lease())
			time.Sleep(2 * time.Second)
		}
		slices.Sort(want)
		time.Sleep(100*time.Second - time.Since(start) + time.Second)
		synctest.Wait()
		kas := fs.keepAlives()
		if len(kas) != 10 {
			t.Fatalf("%d keep-alive messages in 101 s, want 10 (one per 10 s, for all three leases)", len(kas))
		}
		for i, r := range kas {
			if at, wantAt := r.at.Sub(start), time.Duration(i+1)*ttl/3; at != wantAt {
				t.Errorf("keep-alive %d sent at %v, want %v", i, at, wantAt)
			}
			if got := leaseIDs(r); !slices.Equal(got, want) {
				t.Errorf("keep-alive %d carries %v, want all of %v", i, got, want)
			}
		}
		for _, s := range sessions {
			if isClosed(s.Done()) {
				t.Errorf("session of lease %v done while kept alive", s.Lease())
			}
		}
	})
}

// A lease of a long TTL rides along with the keep-alives of a short one:
// it costs no message of its own, and is renewed no more often than every
// sixth of its TTL, and at least every third.
func TestKeepAliveLongLeaseRidesAlong(t *testing.T) {
	ttlBubble(t, func(t *testing.T, fs *fakeTTL) {
		c := fs.dial(client.Config{})
		start := time.Now()
		short := mustSession(t, c, 3*time.Second)
		long := mustSession(t, c, 30*time.Second)
		time.Sleep(60*time.Second + 500*time.Millisecond)
		synctest.Wait()
		kas := fs.keepAlives()
		if len(kas) != 60 {
			t.Fatalf("%d keep-alive messages in 60.5 s, want 60: one per second, for the 3 s lease", len(kas))
		}
		last := start
		for i, r := range kas {
			if at, want := r.at.Sub(start), time.Duration(i+1)*time.Second; at != want {
				t.Errorf("keep-alive %d at %v, want %v", i, at, want)
			}
			ids := leaseIDs(r)
			if !slices.Contains(ids, short.Lease()) {
				t.Errorf("keep-alive %d at %v lacks the 3 s lease: %v", i, r.at.Sub(start), ids)
			}
			if slices.Contains(ids, long.Lease()) {
				if d := r.at.Sub(last); d < 5*time.Second || d > 10*time.Second {
					t.Errorf("30 s lease renewed %v after its last renewal, want 5 to 10 s", d)
				}
				last = r.at
			}
		}
		if d := time.Since(last); d > 10*time.Second {
			t.Errorf("30 s lease last renewed %v ago", d)
		}
	})
}

// KeepAlive sends a lease's first keep-alive at once, then one every third
// of its TTL, counted from the send of the last; the channel receives each
// renewal, and is closed when ctx ends, after which the lease is no longer
// renewed.
func TestKeepAliveRenewsAtAThirdOfTheTTL(t *testing.T) {
	ttlBubble(t, func(t *testing.T, fs *fakeTTL) {
		c := fs.dial(client.Config{})
		const ttl = 9 * time.Second
		g := mustGrant(t, c, ttl)
		start := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, err := c.KeepAlive(ctx, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			select {
			case r := <-ch:
				if r != (client.KeepAliveResponse{ID: g.ID, TTL: ttl}) {
					t.Fatalf("renewal %d: %+v", i, r)
				}
				if at, want := time.Since(start), time.Duration(i)*ttl/3; at != want {
					t.Errorf("renewal %d received at %v, want %v", i, at, want)
				}
			case <-time.After(ttl):
				t.Fatalf("no renewal %d within the TTL", i)
			}
		}
		kas := fs.keepAlives()
		if len(kas) != 10 {
			t.Fatalf("%d keep-alives for 10 renewals", len(kas))
		}
		for i, r := range kas {
			if got := leaseIDs(r); !slices.Equal(got, []client.LeaseID{g.ID}) {
				t.Errorf("keep-alive %d carries %v", i, got)
			}
		}
		cancel()
		synctest.Wait()
		if got, closed := drainClosed(ch); !closed || len(got) != 0 {
			t.Fatalf("after ctx ended: channel closed %v, holding %v", closed, got)
		}
		time.Sleep(3 * ttl)
		if n := len(fs.keepAlives()); n != len(kas) {
			t.Errorf("%d keep-alives after ctx ended", n-len(kas))
		}
	})
}

// A lease the server says it does not know (revoked by another client, or
// expired) is lost at the next renewal: its KeepAlive channel and its
// Session's Done are closed, and it is no longer renewed.
func TestKeepAliveLostWhenUnknown(t *testing.T) {
	ttlBubble(t, func(t *testing.T, fs *fakeTTL) {
		c := fs.dial(client.Config{})
		const ttl = 9 * time.Second
		s := mustSession(t, c, ttl)
		g := mustGrant(t, c, ttl)
		ch, err := c.KeepAlive(context.Background(), g.ID)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second) // renewed at 0 s (g alone, at once) and 3 s (both)
		synctest.Wait()
		if got, closed := drainClosed(ch); closed || len(got) != 2 {
			t.Fatalf("after 4 s: renewals %v, closed %v; want two, open", got, closed)
		}
		fs.dropLease(s.Lease())
		fs.dropLease(g.ID)
		time.Sleep(2*time.Second - time.Millisecond)
		synctest.Wait()
		if isClosed(s.Done()) {
			t.Fatal("session done before the server said its lease was gone")
		}
		time.Sleep(time.Millisecond) // the keep-alive at 6 s
		synctest.Wait()
		if !isClosed(s.Done()) {
			t.Error("session not done after the server said its lease was not found")
		}
		if got, closed := drainClosed(ch); !closed || len(got) != 0 {
			t.Errorf("KeepAlive channel: renewals %v, closed %v; want closed", got, closed)
		}
		n := len(fs.keepAlives())
		time.Sleep(3 * ttl)
		if m := len(fs.keepAlives()); m != n {
			t.Errorf("%d keep-alives of lost leases", m-n)
		}
	})
}

// While keep-alives fail, the client keeps trying, and counts the TTL from
// the send of the last one that succeeded: when it runs out, the lease is
// lost, not a moment before, whether the server cannot be reached or
// refuses the keep-alives.
func TestKeepAliveLostWhenTheTTLRunsOut(t *testing.T) {
	for _, mode := range []string{"server down", "keep-alives refused"} {
		t.Run(mode, func(t *testing.T) {
			ttlBubble(t, func(t *testing.T, fs *fakeTTL) {
				c := fs.dial(client.Config{MaxReconnectDelay: 100 * time.Millisecond})
				const ttl = 9 * time.Second
				start := time.Now()
				s := mustSession(t, c, ttl) // granted at 0 s
				g := mustGrant(t, c, ttl)
				ch, err := c.KeepAlive(context.Background(), g.ID) // renewed at once, at 0 s
				if err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Second)
				synctest.Wait()
				if got, _ := drainClosed(ch); len(got) != 1 {
					t.Fatalf("renewals at 0 s: %v", got)
				}
				if mode == "server down" {
					fs.setDown(true)
				} else {
					fs.setHook(func(_ int, m protocol.Message) (protocol.Message, bool) {
						if ka, ok := m.(*protocol.LeaseKeepAlive); ok {
							return &protocol.Error{ID: ka.ID, Code: protocol.CodeUnavailable, Message: "try again"}, true
						}
						return nil, false
					})
				}
				time.Sleep(ttl - time.Since(start) - time.Millisecond)
				synctest.Wait()
				if isClosed(s.Done()) {
					t.Fatalf("session done at %v, before its TTL ran out", time.Since(start))
				}
				if _, closed := drainClosed(ch); closed {
					t.Fatalf("KeepAlive channel closed at %v, before the TTL ran out", time.Since(start))
				}
				time.Sleep(time.Millisecond)
				synctest.Wait()
				if !isClosed(s.Done()) {
					t.Errorf("session not done at %v, when its TTL ran out without a renewal", time.Since(start))
				}
				if got, closed := drainClosed(ch); !closed {
					t.Errorf("KeepAlive channel open at %v (renewals %v), when the TTL ran out", time.Since(start), got)
				}
				if mode == "keep-alives refused" {
					// Tried again and again meanwhile, with a backoff
					// of at most a second.
					if n := len(fs.keepAlives()); n < 10 {
						t.Errorf("%d keep-alives in 9 s of refusals, want one a second at least", n)
					}
				}
				// The server comes back: the lost leases stay lost.
				fs.setDown(false)
				fs.setHook(nil)
				n := len(fs.keepAlives())
				time.Sleep(2 * ttl)
				if m := len(fs.keepAlives()); m != n {
					t.Errorf("%d keep-alives of lost leases", m-n)
				}
			})
		})
	}
}

// A keep-alive that fails with the connection is sent again as soon as the
// client has a new session: the lease survives an outage shorter than its
// TTL, and is renewed from the send of that keep-alive.
func TestKeepAliveRetriedOnReconnect(t *testing.T) {
	ttlBubble(t, func(t *testing.T, fs *fakeTTL) {
		c := fs.dial(client.Config{MaxReconnectDelay: 100 * time.Millisecond})
		const ttl = 9 * time.Second
		start := time.Now()
		s := mustSession(t, c, ttl)
		time.Sleep(time.Second)
		fs.setDown(true)
		time.Sleep(6 * time.Second) // the keep-alive due at 3 s and 6 s fail
		fs.setDown(false)
		up := time.Now()
		time.Sleep(time.Second)
		synctest.Wait()
		var retried fakeReq
		for _, r := range fs.keepAlives() {
			if r.session > 1 {
				retried = r
				break
			}
		}
		if retried.msg == nil {
			t.Fatalf("no keep-alive on a new session within 1 s of the server's return")
		}
		if d := retried.at.Sub(up); d > 200*time.Millisecond {
			t.Errorf("keep-alive retried %v after the server came back; want within the reconnection delay", d)
		}
		time.Sleep(2 * ttl)
		synctest.Wait()
		if isClosed(s.Done()) {
			t.Fatalf("session lost at %v despite a successful keep-alive at %v", time.Since(start), retried.at.Sub(start))
		}
		// From the retry on, one keep-alive every third of the TTL.
		var after []time.Duration
		for _, r := range fs.keepAlives() {
			if !r.at.Before(retried.at) {
				after = append(after, r.at.Sub(retried.at))
			}
		}
		for i, d := range after {
			if want := time.Duration(i) * ttl / 3; d != want {
				t.Errorf("keep-alive %d after the retry at +%v, want +%v", i, d, want)
			}
		}
	})
}

// Two KeepAlive calls for one lease share its renewals: one keep-alive per
// renewal, to both channels. A reader that never reads does not hold up
// renewals or the other reader; its channel keeps the first renewals it
// had room for. Ending one call leaves the other keeping the lease alive;
// closing the client closes every channel.
func TestKeepAliveSharedAndSlowReader(t *testing.T) {
	ttlBubble(t, func(t *testing.T, fs *fakeTTL) {
		c := fs.dial(client.Config{})
		const ttl = 3 * time.Second
		g := mustGrant(t, c, ttl)
		ctxA, cancelA := context.WithCancel(context.Background())
		defer cancelA()
		chA, err := c.KeepAlive(ctxA, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the first keep-alive, at once
		chB, err := c.KeepAlive(context.Background(), g.ID)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		const renewals = 40
		for i := range renewals {
			select {
			case <-chA:
			case <-time.After(ttl):
				t.Fatalf("reader A: no renewal %d within the TTL while B does not read", i)
			}
		}
		if took, want := time.Since(start), (renewals-1)*ttl/3; took != want {
			t.Errorf("%d renewals took %v, want %v", renewals, took, want)
		}
		if n := len(fs.keepAlives()); n != renewals {
			t.Errorf("%d keep-alives for %d renewals of one lease kept by two callers", n, renewals)
		}
		if got, closed := drainClosed(chB); closed || len(got) != cap(chB) || got[0] != (client.KeepAliveResponse{ID: g.ID, TTL: ttl}) {
			t.Errorf("the reader that never read: closed %v, holding %d renewals (%v); want the first %d", closed, len(got), got, cap(chB))
		}
		cancelA()
		synctest.Wait()
		if _, closed := drainClosed(chA); !closed {
			t.Error("A's channel open after its ctx ended")
		}
		n := len(fs.keepAlives())
		time.Sleep(3 * ttl)
		synctest.Wait()
		if m := len(fs.keepAlives()); m <= n {
			t.Error("lease no longer renewed after one of its two callers stopped")
		}
		if _, closed := drainClosed(chB); closed {
			t.Error("B's channel closed when A's ctx ended")
		}
		c.Close()
		if _, closed := drainClosed(chB); !closed {
			t.Error("B's channel open after Close")
		}
		if _, err := c.KeepAlive(context.Background(), g.ID); !errors.Is(err, client.ErrClosed) {
			t.Errorf("KeepAlive after Close: %v, want ErrClosed", err)
		}
	})
}

// KeepAliveOnce and Revoke of a lease the server does not know fail with
// ErrNotFound and name the lease, in its 16 hex digits, even when the
// server's message does not; TimeToLive says -1 and no error. The id 0 is
// refused before anything is sent.
func TestTTLCallsOfUnknownLease(t *testing.T) {
	ttlBubble(t, func(t *testing.T, fs *fakeTTL) {
		c := fs.dial(client.Config{})
		ctx := stepCtx(t)
		const missing = client.LeaseID(0xab)
		check := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), "00000000000000ab") {
				t.Errorf("%s of an unknown lease: %v; want ErrNotFound naming 00000000000000ab", what, err)
			}
		}
		_, err := c.KeepAliveOnce(ctx, missing)
		check("KeepAliveOnce", err)
		_, err = c.Revoke(ctx, missing)
		check("Revoke", err)
		ttl, err := c.TimeToLive(ctx, missing, true)
		if err != nil || ttl.TTL != -1 || ttl.ID != missing || len(ttl.Keys) != 0 {
			t.Errorf("TimeToLive of an unknown lease = %+v, %v; want TTL -1", ttl, err)
		}
		// A terse server message: the client names the lease itself.
		fs.setHook(func(_ int, m protocol.Message) (protocol.Message, bool) {
			if r, ok := m.(*protocol.LeaseRevoke); ok {
				return &protocol.Error{ID: r.ID, Code: protocol.CodeNotFound, Message: "no such lease"}, true
			}
			return nil, false
		})
		_, err = c.Revoke(ctx, missing)
		check("Revoke (terse message)", err)
		fs.setHook(nil)

		n := func() int {
			return len(fs.keepAlives()) + len(fs.requests(protocol.TypeLeaseRevoke)) + len(fs.requests(protocol.TypeLeaseTimeToLive))
		}
		sent := n()
		for what, err := range map[string]error{
			"KeepAliveOnce": second(c.KeepAliveOnce(ctx, 0)),
			"Revoke":        second(c.Revoke(ctx, 0)),
			"TimeToLive":    second(c.TimeToLive(ctx, 0, false)),
			"KeepAlive":     second(c.KeepAlive(ctx, 0)),
			"Grant 0":       second(c.Grant(ctx, 0)),
			"Grant -1s":     second(c.Grant(ctx, -time.Second)),
		} {
			if !errors.Is(err, client.ErrInvalidArgument) {
				t.Errorf("%s: %v, want ErrInvalidArgument", what, err)
			}
		}
		if m := n(); m != sent || len(fs.requests(protocol.TypeLeaseGrant)) != 0 {
			t.Errorf("requests sent for invalid arguments")
		}
		// The server's own refusal of a TTL comes back as it said it.
		if _, err := c.Grant(ctx, time.Millisecond); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "below the minimum") {
			t.Errorf("Grant below the server's minimum: %v", err)
		}
	})
}

// second returns the error of a call with two results.
func second[T any](_ T, err error) error { return err }

// The calls of a lease's life, as the fake answers them: a key attached
// with WithLease is listed by TimeToLive, KeepAliveOnce renews, Revoke ends
// the lease, and Leases lists what lives.
func TestTTLCalls(t *testing.T) {
	ttlBubble(t, func(t *testing.T, fs *fakeTTL) {
		c := fs.dial(client.Config{})
		ctx := stepCtx(t)
		a := mustGrant(t, c, 60*time.Second)
		b := mustGrant(t, c, 30*time.Second)
		if a.ID != fakeFirstLease || b.ID != fakeFirstLease+1 {
			t.Fatalf("granted %v and %v", a.ID, b.ID)
		}
		if _, err := c.Put(ctx, "svc/a", []byte("1"), client.WithLease(a.ID)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CompareAndSwap(ctx, "svc/b", 0, []byte("2"), client.WithLease(a.ID)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(8 * time.Second)
		ttl, err := c.TimeToLive(ctx, a.ID, true)
		if err != nil || ttl.ID != a.ID || ttl.TTL != 52*time.Second || ttl.GrantedTTL != 60*time.Second || !slices.Equal(ttl.Keys, []string{"svc/a", "svc/b"}) {
			t.Fatalf("TimeToLive = %+v, %v", ttl, err)
		}
		if ttl, err := c.TimeToLive(ctx, a.ID, false); err != nil || ttl.Keys != nil {
			t.Fatalf("TimeToLive without keys = %+v, %v", ttl, err)
		}
		r, err := c.KeepAliveOnce(ctx, a.ID)
		if err != nil || r != (client.KeepAliveResponse{ID: a.ID, TTL: 60 * time.Second}) {
			t.Fatalf("KeepAliveOnce = %+v, %v", r, err)
		}
		ls, err := c.Leases(ctx)
		if want := []client.LeaseStatus{{ID: a.ID, TTL: 60 * time.Second}, {ID: b.ID, TTL: 22 * time.Second}}; err != nil || !slices.Equal(ls, want) {
			t.Fatalf("Leases = %+v, %v; want %+v", ls, err, want)
		}
		rv, err := c.Revoke(ctx, a.ID)
		if err != nil || rv.Keys != 2 || rv.Revision == 0 {
			t.Fatalf("Revoke = %+v, %v", rv, err)
		}
		if ttl, err := c.TimeToLive(ctx, a.ID, true); err != nil || ttl.TTL != -1 {
			t.Fatalf("TimeToLive after Revoke = %+v, %v", ttl, err)
		}
		if ls, err := c.Leases(ctx); err != nil || len(ls) != 1 || ls[0].ID != b.ID {
			t.Fatalf("Leases after Revoke = %+v, %v", ls, err)
		}
		// A write that names a lease the server does not know fails.
		if _, err := c.Put(ctx, "svc/c", []byte("3"), client.WithLease(a.ID)); !errors.Is(err, client.ErrNotFound) || !strings.Contains(err.Error(), a.ID.String()) {
			t.Errorf("Put with a revoked lease: %v, want ErrNotFound naming it", err)
		}
	})
}

// WithLease puts the lease on the wire for Put and CompareAndSwap; a write
// without it carries none (which detaches the key); on a Delete, or with
// the id 0, it is refused before anything is sent.
func TestWithLeaseOnTheWire(t *testing.T) {
	ttlBubble(t, func(t *testing.T, fs *fakeTTL) {
		c := fs.dial(client.Config{})
		ctx := stepCtx(t)
		g := mustGrant(t, c, time.Minute)
		if _, err := c.Put(ctx, "k1", []byte("v"), client.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CompareAndSwap(ctx, "k2", 0, []byte("v"), client.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(ctx, "k1", []byte("w")); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Delete(ctx, "k1", client.WithLease(g.ID)); !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "Delete") {
			t.Errorf("Delete with WithLease: %v, want ErrInvalidArgument", err)
		}
		if _, err := c.Put(ctx, "k1", []byte("v"), client.WithLease(0)); !errors.Is(err, client.ErrInvalidArgument) {
			t.Errorf("Put with WithLease(0): %v, want ErrInvalidArgument", err)
		}
		var got []string
		for _, r := range fs.requests(protocol.TypeWrite) {
			w := r.msg.(*protocol.Write)
			got = append(got, string(w.Key)+"/"+client.LeaseID(w.Lease).String())
		}
		want := []string{"k1/" + g.ID.String(), "k2/" + g.ID.String(), "k1/0000000000000000"}
		if !slices.Equal(got, want) {
			t.Errorf("writes on the wire (key/lease): %v, want %v", got, want)
		}
	})
}

// A grant whose reply is lost with its connection, after the server
// applied it, is sent again on the next session with the same request ID,
// and the server's answer names the lease the first copy got: one lease,
// not two.
func TestGrantRetriedAfterLostReply(t *testing.T) {
	ttlBubble(t, func(t *testing.T, fs *fakeTTL) {
		c := fs.dial(client.Config{MaxReconnectDelay: 100 * time.Millisecond})
		fs.setHook(func(session int, m protocol.Message) (protocol.Message, bool) {
			if _, ok := m.(*protocol.LeaseGrant); ok && session == 1 {
				fs.applyNow(m)
				fs.dropSessions()
				return nil, true
			}
			return nil, false
		})
		g, err := c.Grant(stepCtx(t), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		grants := fs.requests(protocol.TypeLeaseGrant)
		if len(grants) != 2 {
			t.Fatalf("%d grants sent, want 2", len(grants))
		}
		first, again := grants[0].msg.(*protocol.LeaseGrant), grants[1].msg.(*protocol.LeaseGrant)
		if grants[0].session != 1 || grants[1].session != 2 || again.ID != first.ID || again.TTL != first.TTL || again.Acked != first.Acked || first.Acked > first.ID {
			t.Errorf("grant %+v on session %d, then %+v on session %d; want the same request again on the next session",
				first, grants[0].session, again, grants[1].session)
		}
		if g.ID != fakeFirstLease || g.TTL != time.Minute || fs.leaseCount() != 1 {
			t.Errorf("Grant = %+v with %d leases on the server; want the first copy's lease, alone", g, fs.leaseCount())
		}
	})
}

// Session.Close stops the keep-alives and revokes the lease; Orphan stops
// them and leaves the lease to run out; closing the client ends a session.
// Done is closed in each case, and Close of a lease that is gone already
// is not an error.
func TestSessionCloseOrphan(t *testing.T) {
	ttlBubble(t, func(t *testing.T, fs *fakeTTL) {
		c := fs.dial(client.Config{})
		ctx := stepCtx(t)
		const ttl = 9 * time.Second
		closed, orphaned, ended := mustSession(t, c, ttl), mustSession(t, c, ttl), mustSession(t, c, ttl)
		if closed.TTL() != ttl {
			t.Errorf("TTL() = %v", closed.TTL())
		}
		if _, err := c.Put(ctx, "svc/closed", []byte("up"), client.WithLease(closed.Lease())); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second)
		if err := closed.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		orphaned.Orphan()
		if !isClosed(closed.Done()) || !isClosed(orphaned.Done()) {
			t.Fatal("Done open after Close or Orphan")
		}
		revokes := fs.requests(protocol.TypeLeaseRevoke)
		if len(revokes) != 1 || client.LeaseID(revokes[0].msg.(*protocol.LeaseRevoke).Lease) != closed.Lease() {
			t.Fatalf("revocations sent: %d, want one, of the closed session's lease", len(revokes))
		}
		if err := closed.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		n := len(fs.keepAlives())
		time.Sleep(ttl)
		synctest.Wait()
		for _, r := range fs.keepAlives()[n:] {
			if ids := leaseIDs(r); !slices.Equal(ids, []client.LeaseID{ended.Lease()}) {
				t.Errorf("keep-alive of %v after Close and Orphan", ids)
			}
		}
		if ttl, err := c.TimeToLive(stepCtx(t), orphaned.Lease(), false); err != nil || ttl.TTL != -1 {
			t.Errorf("orphaned lease after its TTL: %+v, %v; want gone", ttl, err)
		}
		if err := orphaned.Close(); err != nil {
			t.Errorf("Close of a session whose lease ran out: %v", err)
		}
		c.Close()
		if !isClosed(ended.Done()) {
			t.Error("Done open after the client closed")
		}
	})
}

// A client that keeps more leases alive than one message takes (1,000,
// the most the server takes in one command) sends them in several
// messages at once, every lease in exactly one of them.
func TestKeepAliveSplitsLargeBatches(t *testing.T) {
	ttlBubble(t, func(t *testing.T, fs *fakeTTL) {
		const ttl = 30 * time.Second
		fs.setHook(func(_ int, m protocol.Message) (protocol.Message, bool) {
			ka, ok := m.(*protocol.LeaseKeepAlive)
			if !ok {
				return nil, false
			}
			r := &protocol.LeaseKeepAliveReply{ID: ka.ID}
			for _, id := range ka.Leases {
				r.Renewed = append(r.Renewed, protocol.LeaseTTL{Lease: id, TTL: ttl})
			}
			return r, true
		})
		c := fs.dial(client.Config{})
		const n = 1500
		for id := range client.LeaseID(n) {
			if _, err := c.KeepAlive(context.Background(), id+1); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		start := time.Now() // every lease renewed once, by now
		time.Sleep(ttl/3 + time.Second)
		synctest.Wait()
		var sizes []int
		seen := make(map[client.LeaseID]int)
		for _, r := range fs.keepAlives() {
			if r.at.Sub(start) < ttl/6 { // the first renewals
				continue
			}
			ids := leaseIDs(r)
			sizes = append(sizes, len(ids))
			for _, id := range ids {
				seen[id]++
			}
		}
		slices.Sort(sizes)
		if !slices.Equal(sizes, []int{500, 1000}) || len(seen) != n {
			t.Fatalf("second renewal: messages of sizes %v for %d leases, want 1000 and 500 for all %d", sizes, len(seen), n)
		}
		for id, k := range seen {
			if k != 1 {
				t.Errorf("lease %v in %d messages", id, k)
			}
		}
	})
}
