package core

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/store"
)

// errMayNotDelete is the refusal of the authorizers of these tests.
var errMayNotDelete = errors.New("may not delete")

// authorizer stands for a revocation's requester under an access policy
// (Request.Authorize): it may delete the keys in allowed, and no other.
// It records the keys it is asked about, call by call.
type authorizer struct {
	mu      sync.Mutex
	allowed map[string]bool
	calls   [][]string
}

func allow(keys ...string) *authorizer {
	a := &authorizer{allowed: make(map[string]bool)}
	for _, k := range keys {
		a.allowed[k] = true
	}
	return a
}

func (a *authorizer) authorize(keys []string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls = append(a.calls, slices.Clone(keys))
	for _, k := range keys {
		if !a.allowed[k] {
			return fmt.Errorf("%w: key %q", errMayNotDelete, k)
		}
	}
	return nil
}

// asked returns the keys of each call, joined by ",", calls joined by " ".
func (a *authorizer) asked() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var s []string
	for _, c := range a.calls {
		s = append(s, strings.Join(c, ","))
	}
	return strings.Join(s, " ")
}

// revokeBy returns a revocation of lease id by session s, authorized by a.
func revokeBy(s SessionID, id uint64, a *authorizer) *Request {
	return &Request{Session: s, Op: store.OpRevokeTTL, Lease: id, Authorize: a.authorize}
}

// checkLeaseKept fails t unless lease id is live with exactly keys
// attached, each still there, and a keep-alive renews it.
func checkLeaseKept(t *testing.T, c *Core, st store.Store, id uint64, keys ...string) {
	t.Helper()
	left, _, attached, ok, err := c.TTLLease(id, true)
	if err != nil || !ok || left <= 0 || !slices.Equal(attached, keys) {
		t.Fatalf("TTLLease: %v left, keys %v (%v, %v); want it live with %v", left, attached, ok, err, keys)
	}
	for _, k := range keys {
		if !exists(t, st, k) {
			t.Fatalf("key %s of the lease was deleted", k)
		}
	}
	if o := keepAlive(t, c, id); o.Err != nil || len(o.Renewed) != 1 {
		t.Fatalf("keep-alive of the lease: %+v, want it renewed", o)
	}
}

// TestTTLRevokeRefused: a revocation whose requester may not delete one of
// the lease's keys fails with its Authorize's error, asked with every key
// attached, before anything happens: no holder of a key is asked to let
// go, the lease stays live with its keys, and no revocation is counted.
// A revocation by someone who may delete them goes through afterwards.
func TestTTLRevokeRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, n := newTTLCore(t, st, TTLConfig{})
		defer c.Close()
		c.OpenSession(1)
		c.OpenSession(2)
		id := grant(t, c, 1, time.Hour)
		putWith(t, c, 1, "a", id)
		putWith(t, c, 1, "b", id)
		c.Relinquish(1, []string{"a", "b"})
		if _, _, err := c.Read(2, []byte("a")); err != nil {
			t.Fatal(err)
		}
		az := allow("a")
		o, ok := submit(t, c, revokeBy(1, id, az)).outcome()
		if !ok || !errors.Is(o.Err, errMayNotDelete) || !strings.Contains(o.Err.Error(), `"b"`) {
			t.Fatalf("refused revocation: %+v (ended %v), want its Authorize's refusal of b", o, ok)
		}
		if got := az.asked(); got != "a,b" {
			t.Fatalf("Authorize asked about %q, want once, about a,b", got)
		}
		if len(n.inv[2]) != 0 {
			t.Fatalf("the refused revocation invalidated the reader's lease on %v", n.inv[2])
		}
		checkLeaseKept(t, c, st, id, "a", "b")
		if s := c.Stats().TTL; s.Revoked != 0 || s.KeysDeleted != 0 || s.Leases != 1 {
			t.Fatalf("stats %+v after a refused revocation, want none counted and the lease held", s)
		}

		c.Relinquish(2, []string{"a"})
		if o := submit(t, c, revokeBy(1, id, allow("a", "b"))).must(t); o.Keys != 2 || exists(t, st, "a") || exists(t, st, "b") {
			t.Fatalf("allowed revocation after the refused one deleted %d keys, want both", o.Keys)
		}
	})
}

// TestTTLRevokeJoinRefused: a revocation request that joins one under way,
// whose keys are read, is authorized against them at once: refused, Submit
// returns the refusal and Done is never called. The revocation it would
// have joined goes on, and an allowed request that joins it too gets its
// outcome: the keys are deleted when the holder of one lets go, or when
// the holder's read lease runs out.
func TestTTLRevokeJoinRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		letGo   func(c *Core, read time.Time)
		waitFor string
	}{
		{"holder lets go", func(c *Core, _ time.Time) { c.Relinquish(2, []string{"a"}) }, "the reader let go"},
		{"term ends", func(_ *Core, read time.Time) { time.Sleep(time.Until(read.Add(term + eps + time.Millisecond))) }, "the reader's term ran out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newMemory(t)
				c, _ := newTTLCore(t, st, TTLConfig{})
				defer c.Close()
				c.OpenSession(1)
				c.OpenSession(2)
				c.OpenSession(3)
				id := grant(t, c, 1, time.Hour)
				putWith(t, c, 1, "a", id)
				putWith(t, c, 1, "b", id)
				c.Relinquish(1, []string{"a", "b"})
				read := time.Now()
				if _, _, err := c.Read(2, []byte("a")); err != nil {
					t.Fatal(err)
				}
				first := submit(t, c, &Request{Session: 1, Op: store.OpRevokeTTL, Lease: id})
				if _, ok := first.outcome(); ok {
					t.Fatal("revocation ended while a reader holds a key")
				}

				refused := allow("a")
				join := revokeBy(3, id, refused)
				join.Done = func(o Outcome) { t.Errorf("the refused request ended through Done: %+v", o) }
				if err := c.Submit(join); !errors.Is(err, errMayNotDelete) || !strings.Contains(err.Error(), `"b"`) {
					t.Fatalf("Submit of a refused request joining the revocation: %v, want its Authorize's refusal of b", err)
				}
				if got := refused.asked(); got != "a,b" {
					t.Fatalf("Authorize of the joining request asked about %q, want once, about a,b", got)
				}
				allowed := allow("a", "b")
				joined := submit(t, c, revokeBy(3, id, allowed))
				if got := allowed.asked(); got != "a,b" {
					t.Fatalf("Authorize of the allowed request asked about %q, want once, about a,b", got)
				}

				tc.letGo(c, read)
				for _, p := range []*pending{first, joined} {
					if o := p.must(t); o.Keys != 2 || o.Holders != 1 {
						t.Fatalf("revocation once %s: %+v, want 2 keys deleted after 1 holder", tc.waitFor, o)
					}
				}
				if exists(t, st, "a") || exists(t, st, "b") {
					t.Fatalf("keys still there once %s", tc.waitFor)
				}
				if s := c.Stats().TTL; s.Revoked != 1 || s.KeysDeleted != 2 || s.Leases != 0 {
					t.Fatalf("stats %+v, want one revocation of two keys", s)
				}
			})
		})
	}
}

// TestTTLRevokeRelaunchAuthorizesNewKeys: a revocation that finds keys
// attached to its lease since it read them (store.ErrLeaseChanged) is made
// again with the new keys, and its requester is asked again about all of
// them: one who may delete the old keys but not the new one gets the
// refusal, and the lease stays live with every key; one who may delete
// them all gets every key deleted.
func TestTTLRevokeRelaunchAuthorizesNewKeys(t *testing.T) {
	for _, tc := range []struct {
		name    string
		allowed []string
		refused bool
	}{
		{"new key refused", []string{"a"}, true},
		{"new key allowed", []string{"a", "b"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				st := newMemory(t)
				c, _ := newTTLCore(t, st, TTLConfig{})
				defer c.Close()
				c.OpenSession(1)
				c.OpenSession(2)
				id := grant(t, c, 1, time.Hour)
				putWith(t, c, 1, "a", id)
				submit(t, c, put(1, "b", "unattached")).must(t)
				c.Relinquish(1, []string{"a", "b"})
				for _, k := range []string{"a", "b"} {
					if _, _, err := c.Read(2, []byte(k)); err != nil {
						t.Fatal(err)
					}
				}
				// The attaching write waits for session 2's lease on b;
				// the revocation reads the keys meanwhile, only a, and
				// waits for session 2's lease on a.
				w := put(1, "b", "attached")
				w.Lease = id
				attach := submit(t, c, w)
				az := allow(tc.allowed...)
				rv := submit(t, c, revokeBy(1, id, az))
				if got := az.asked(); got != "a" {
					t.Fatalf("Authorize asked about %q at the start, want a", got)
				}
				c.Relinquish(2, []string{"b"})
				attach.must(t)
				c.Relinquish(1, []string{"b"})
				if _, ok := rv.outcome(); ok {
					t.Fatal("revocation ended before the reader of a let go")
				}
				// Its OpRevokeTTL now finds b attached, and it is made
				// again.
				c.Relinquish(2, []string{"a"})
				o, ok := rv.outcome()
				if got := az.asked(); got != "a a,b" {
					t.Fatalf("Authorize asked about %q, want a, then a,b once b was attached", got)
				}
				if !tc.refused {
					if !ok || o.Err != nil || o.Keys != 2 || exists(t, st, "a") || exists(t, st, "b") {
						t.Fatalf("allowed revocation: %+v (ended %v), want both keys deleted", o, ok)
					}
					return
				}
				if !ok || !errors.Is(o.Err, errMayNotDelete) || !strings.Contains(o.Err.Error(), `"b"`) {
					t.Fatalf("revocation refused b: %+v (ended %v), want its Authorize's refusal of b", o, ok)
				}
				checkLeaseKept(t, c, st, id, "a", "b")
				if s := c.Stats().TTL; s.Revoked != 0 || s.KeysDeleted != 0 {
					t.Fatalf("stats %+v after a refused revocation, want none counted", s)
				}
			})
		})
	}
}

// TestTTLExpiryNotStoppedByRefusedRevoker: a lease that expired is revoked
// whatever the clients who ask to revoke it may delete: one refused when
// it joins the expiry's revocation gets the refusal from Submit, and one
// refused when the revocation is made again with a key attached meanwhile
// gets it through Done; either way the keys are deleted and the expiry
// counted.
func TestTTLExpiryNotStoppedByRefusedRevoker(t *testing.T) {
	t.Run("joins the expiry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			st := newMemory(t)
			c, _ := newTTLCore(t, st, TTLConfig{})
			defer c.Close()
			c.OpenSession(1)
			c.OpenSession(2)
			start := time.Now()
			id := grant(t, c, 1, ttl)
			putWith(t, c, 1, "a", id)
			putWith(t, c, 1, "b", id)
			c.Relinquish(1, []string{"a", "b"})
			time.Sleep(ttl - time.Second) // session 2's lease lasts past the TTL lease
			if _, _, err := c.Read(2, []byte("a")); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Until(start.Add(ttl + eps + time.Millisecond)))
			synctest.Wait()
			if !exists(t, st, "a") {
				t.Fatal("key deleted before its reader let go")
			}
			az := allow()
			r := revokeBy(1, id, az)
			r.Done = func(o Outcome) { t.Errorf("the refused request ended through Done: %+v", o) }
			if err := c.Submit(r); !errors.Is(err, errMayNotDelete) {
				t.Fatalf("Submit of a refused revocation joining the expiry's: %v, want the refusal", err)
			}
			if got := az.asked(); got != "a,b" {
				t.Fatalf("Authorize asked about %q, want a,b", got)
			}
			c.Relinquish(2, []string{"a"})
			synctest.Wait()
			if exists(t, st, "a") || exists(t, st, "b") {
				t.Fatal("keys of the expired lease still there after the reader let go")
			}
			if s := c.Stats().TTL; s.Expired != 1 || s.KeysDeleted != 2 || s.Leases != 0 {
				t.Fatalf("stats %+v, want one expiry of two keys", s)
			}
		})
	})
	t.Run("refused on the relaunch", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			st := newMemory(t)
			c, _ := newTTLCore(t, st, TTLConfig{})
			defer c.Close()
			c.OpenSession(1)
			c.OpenSession(2)
			start := time.Now()
			id := grant(t, c, 1, ttl)
			putWith(t, c, 1, "a", id)
			submit(t, c, put(1, "b", "unattached")).must(t)
			c.Relinquish(1, []string{"a", "b"})
			time.Sleep(ttl - time.Second) // session 2's leases last past the TTL lease
			for _, k := range []string{"a", "b"} {
				if _, _, err := c.Read(2, []byte(k)); err != nil {
					t.Fatal(err)
				}
			}
			w := put(1, "b", "attached")
			w.Lease = id
			attach := submit(t, c, w)
			az := allow("a")
			rv := submit(t, c, revokeBy(1, id, az))
			// The lease expires while the client's revocation waits for
			// the reader of a: expiry joins it.
			time.Sleep(time.Until(start.Add(ttl + eps + time.Millisecond)))
			synctest.Wait()
			c.Relinquish(2, []string{"b"})
			attach.must(t)
			c.Relinquish(1, []string{"b"})
			c.Relinquish(2, []string{"a"})
			o, ok := rv.outcome()
			if !ok || !errors.Is(o.Err, errMayNotDelete) {
				t.Fatalf("client revocation refused b on the relaunch: %+v (ended %v), want the refusal", o, ok)
			}
			if got := az.asked(); got != "a a,b" {
				t.Fatalf("Authorize asked about %q, want a, then a,b", got)
			}
			if exists(t, st, "a") || exists(t, st, "b") {
				t.Fatal("keys of the expired lease still there: the refused client stopped the expiry")
			}
			if s := c.Stats().TTL; s.Expired != 1 || s.KeysDeleted != 2 || s.Leases != 0 {
				t.Fatalf("stats %+v, want one expiry of two keys", s)
			}
		})
	})
}
