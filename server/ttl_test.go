package server

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
)

// startTTLServer starts a server on a fake clock whose TTL leases may be
// as short as a second, and at most maxLeases of them.
func startTTLServer(t *testing.T, fc *clock.Fake, maxLeases int) *Server {
	t.Helper()
	return serve(t, newServerWith(t, Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", LeaseTerm: 10 * time.Second, Epsilon: eps,
		Clock: fc, Logger: quietLogger(), TTL: core.TTLConfig{MinTTL: time.Second, MaxTTL: time.Hour, MaxLeases: maxLeases}}))
}

// grantTTL grants a TTL lease of ttl and returns its id.
func grantTTL(t *testing.T, c *protoclient.Client, ttl time.Duration) uint64 {
	t.Helper()
	r, ok := call(t, c, &protocol.LeaseGrant{TTL: ttl}).(*protocol.LeaseGrantReply)
	if !ok || r.Lease == 0 || r.TTL != ttl {
		t.Fatalf("grant of %v: %#v", ttl, r)
	}
	return r.Lease
}

// TestTTLLeaseOverTheWire: the life of a TTL lease as a client sees it:
// grant, keys attached by Put, keep-alive, time to live with its keys,
// the list, and a revocation that deletes the keys at one revision;
// afterwards the lease is gone for every request.
func TestTTLLeaseOverTheWire(t *testing.T) {
	fc := clock.NewFake()
	srv := startTTLServer(t, fc, 0)
	c := dialRaw(t, srv)
	id := grantTTL(t, c, 10*time.Second)
	for _, k := range []string{"svc/b", "svc/a"} {
		if r, ok := call(t, c, &protocol.Write{Op: protocol.OpPut, Key: []byte(k), Value: []byte("up"), Lease: id}).(*protocol.WriteReply); !ok {
			t.Fatalf("put %s with the lease: %#v", k, r)
		}
	}
	fc.Advance(4 * time.Second)
	ka, ok := call(t, c, &protocol.LeaseKeepAlive{Leases: []uint64{id, id + 100}}).(*protocol.LeaseKeepAliveReply)
	if !ok || len(ka.Renewed) != 1 || ka.Renewed[0] != (protocol.LeaseTTL{Lease: id, TTL: 10 * time.Second}) || len(ka.Unknown) != 1 || ka.Unknown[0] != id+100 {
		t.Fatalf("keep-alive of the lease and an unknown one: %#v", ka)
	}
	ttl, ok := call(t, c, &protocol.LeaseTimeToLive{Lease: id, Keys: true}).(*protocol.LeaseTimeToLiveReply)
	if !ok || ttl.GrantedTTL != 10*time.Second || ttl.TTL != 10*time.Second || len(ttl.Keys) != 2 || string(ttl.Keys[0]) != "svc/a" {
		t.Fatalf("time to live right after a keep-alive: %#v", ttl)
	}
	list, ok := call(t, c, &protocol.LeaseList{}).(*protocol.LeaseListReply)
	if !ok || len(list.Leases) != 1 || list.Leases[0].Lease != id {
		t.Fatalf("list: %#v", list)
	}
	// The writer holds read leases on what it wrote: it lets them go, as
	// the client library does when it is asked.
	send(t, c, &protocol.Ack{Keys: [][]byte{[]byte("svc/a"), []byte("svc/b")}})
	rv, ok := call(t, c, &protocol.LeaseRevoke{Lease: id}).(*protocol.LeaseRevokeReply)
	if !ok || rv.Keys != 2 || rv.Revision == 0 {
		t.Fatalf("revoke: %#v", rv)
	}
	for _, k := range []string{"svc/a", "svc/b"} {
		if r := get(t, c, k); r.Found || r.Version != rv.Revision {
			t.Fatalf("%s after the revocation: %+v, want deleted at revision %d", k, r, rv.Revision)
		}
	}
	if r, ok := call(t, c, &protocol.LeaseTimeToLive{Lease: id}).(*protocol.LeaseTimeToLiveReply); !ok || r.TTL != -1 {
		t.Fatalf("time to live of the revoked lease: %#v, want TTL -1", r)
	}
	hex := fmt.Sprintf("%016x", id)
	e := wantCode(t, "revoke again", call(t, c, &protocol.LeaseRevoke{Lease: id}), protocol.CodeNotFound)
	if !strings.Contains(e.Message, hex) {
		t.Fatalf("revoke of a revoked lease: %q does not name %s", e.Message, hex)
	}
	e = wantCode(t, "put with the revoked lease", call(t, c, &protocol.Write{Op: protocol.OpPut, Key: []byte("x"), Value: []byte("v"), Lease: id}), protocol.CodeNotFound)
	if !strings.Contains(e.Message, hex) {
		t.Fatalf("put with a revoked lease: %q does not name %s", e.Message, hex)
	}
	st := srv.Stats()
	if st.TTLRevoked != 1 || st.TTLKeysDeleted != 2 || st.TTLLeases != 0 || st.TTLKeepAlives != 1 {
		t.Fatalf("stats after one revocation of two keys: %+v", st)
	}
}

// TestTTLLeaseExpiresOverTheWire: a lease nobody keeps alive ends ttl + ε
// after its grant, not before; the caching reader of its key is asked to
// drop it, and the deletion waits for its acknowledgement. The holder,
// which wrote the key, holds a read lease on it that ends with the TTL
// lease (DESIGN §14): the deletion does not wait for it.
func TestTTLLeaseExpiresOverTheWire(t *testing.T) {
	fc := clock.NewFake()
	srv := startTTLServer(t, fc, 0)
	holder := dialRaw(t, srv)
	reader := dialRaw(t, srv)
	id := grantTTL(t, holder, 2*time.Second)
	call(t, holder, &protocol.Write{Op: protocol.OpPut, Key: []byte("alive"), Value: []byte("1"), Lease: id})
	if r := get(t, reader, "alive"); !r.Found || r.Term == 0 {
		t.Fatalf("reader: %+v, want the key with a lease", r)
	}
	fc.Advance(2*time.Second + eps - time.Millisecond)
	settle(t, srv, fc)
	if st := srv.Stats(); st.TTLExpired != 0 || st.InvalidationsSent != 0 {
		t.Fatalf("the lease ended before ttl + ε: %+v", st)
	}
	fc.Advance(time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	m, err := reader.RecvNotice(ctx)
	if inv, ok := m.(*protocol.Invalidate); err != nil || !ok || len(inv.Keys) != 1 || string(inv.Keys[0]) != "alive" {
		t.Fatalf("notice to the reader: %#v, %v", m, err)
	}
	if st := srv.Stats(); st.TTLExpired != 0 {
		t.Fatal("the keys were deleted before the reader acknowledged")
	}
	send(t, reader, &protocol.Ack{Keys: [][]byte{[]byte("alive")}})
	wait.For(t, testTimeout, "the expiry to be applied", func() bool { return srv.Stats().TTLExpired == 1 })
	if r := get(t, reader, "alive"); r.Found {
		t.Fatalf("key of the expired lease: %+v", r)
	}
	if st := srv.Stats(); st.TTLRevokeHolders != 1 || st.TTLKeysDeleted != 1 {
		t.Fatalf("stats: %+v, want one key deleted after invalidating its one live holder (the reader; the writer's lease ended with the TTL lease)", st)
	}
}

// TestTTLLeaseHostileInput: bad TTLs, grants past the server's cap,
// oversized and unknown keep-alives, and revocations of leases that never
// were each get a clear error code and change nothing.
func TestTTLLeaseHostileInput(t *testing.T) {
	fc := clock.NewFake()
	srv := startTTLServer(t, fc, 3)
	c := dialRaw(t, srv)
	for _, d := range []time.Duration{-time.Second, 0, time.Second - 1, time.Hour + 1} {
		e := wantCode(t, fmt.Sprintf("grant of %v", d), call(t, c, &protocol.LeaseGrant{TTL: d}), protocol.CodeInvalidArgument)
		if d > 0 && !strings.Contains(e.Message, "TTL") {
			t.Fatalf("grant of %v: %q does not say what is wrong", d, e.Message)
		}
	}
	if strings.Contains(wantCode(t, "short", call(t, c, &protocol.LeaseGrant{TTL: time.Millisecond}), protocol.CodeInvalidArgument).Message, "failover") == false {
		t.Fatal("the refusal of a short TTL does not say why there is a minimum")
	}
	for range 3 {
		grantTTL(t, c, time.Minute)
	}
	wantCode(t, "grant past the cap", call(t, c, &protocol.LeaseGrant{TTL: time.Minute}), protocol.CodeResourceExhausted)
	many := make([]uint64, core.MaxKeepAliveLeases+1)
	wantCode(t, "oversized keep-alive", call(t, c, &protocol.LeaseKeepAlive{Leases: many}), protocol.CodeInvalidArgument)
	unknown := make([]uint64, 1000)
	for i := range unknown {
		unknown[i] = uint64(1000 + i)
	}
	for range 20 {
		r, ok := call(t, c, &protocol.LeaseKeepAlive{Leases: unknown}).(*protocol.LeaseKeepAliveReply)
		if !ok || len(r.Renewed) != 0 || len(r.Unknown) != len(unknown) {
			t.Fatalf("keep-alive of unknown leases: %#v", r)
		}
	}
	wantCode(t, "revoke lease 0", call(t, c, &protocol.LeaseRevoke{Lease: 0}), protocol.CodeInvalidArgument)
	wantCode(t, "revoke a lease never granted", call(t, c, &protocol.LeaseRevoke{Lease: 99}), protocol.CodeNotFound)
	wantCode(t, "put with a lease never granted", call(t, c, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v"), Lease: 99}), protocol.CodeNotFound)
	if r := get(t, c, "k"); r.Found {
		t.Fatal("a put with an unknown lease wrote its key")
	}
	if st := srv.Stats(); st.TTLLeases != 3 || st.TTLRevoked != 0 {
		t.Fatalf("stats after the hostile requests: %+v", st)
	}
}

// TestTTLLeaseOfAnotherSession: a TTL lease is not tied to the session
// that granted it: another session may keep it alive, attach keys to it
// and revoke it, and it outlives the granting session, as in etcd.
func TestTTLLeaseOfAnotherSession(t *testing.T) {
	fc := clock.NewFake()
	srv := startTTLServer(t, fc, 0)
	a := dialRaw(t, srv)
	id := grantTTL(t, a, 5*time.Second)
	a.Close()
	b := dialRaw(t, srv)
	if r, ok := call(t, b, &protocol.LeaseKeepAlive{Leases: []uint64{id}}).(*protocol.LeaseKeepAliveReply); !ok || len(r.Renewed) != 1 {
		t.Fatalf("keep-alive by another session: %#v", r)
	}
	call(t, b, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v"), Lease: id})
	send(t, b, &protocol.Ack{Keys: [][]byte{[]byte("k")}})
	if r, ok := call(t, b, &protocol.LeaseRevoke{Lease: id}).(*protocol.LeaseRevokeReply); !ok || r.Keys != 1 {
		t.Fatalf("revoke by another session: %#v", r)
	}
}

// wantCode checks that reply is an Error with code, and returns it.
func wantCode(t *testing.T, what string, reply protocol.Message, code protocol.Code) *protocol.Error {
	t.Helper()
	e, ok := reply.(*protocol.Error)
	if !ok || e.Code != code {
		t.Fatalf("%s: %#v, want an error with code %s", what, reply, code)
	}
	return e
}

// TestTTLLeaseListPages: the list of leases comes a page at a time, as
// many as fit in a frame, with More until the last page; asking again after
// the last id of a page gives the next, and every lease is listed once.
func TestTTLLeaseListPages(t *testing.T) {
	fc := clock.NewFake()
	srv := serve(t, newServerWith(t, Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Clock: fc, Logger: quietLogger(),
		MaxValueSize: 1024, TTL: core.TTLConfig{MinTTL: time.Second}}))
	c := dialRaw(t, srv)
	page := (srv.cfg.maxFrameSize() - 1024) / leaseListEntry
	// A full page of the largest ids and TTLs still fits in a frame.
	worst := &protocol.LeaseListReply{ID: math.MaxUint64, Leases: make([]protocol.LeaseTTL, page), More: true}
	for i := range worst.Leases {
		worst.Leases[i] = protocol.LeaseTTL{Lease: math.MaxUint64, TTL: math.MinInt64}
	}
	if b, err := protocol.AppendFrame(nil, worst); err != nil || len(b) > srv.cfg.maxFrameSize() {
		t.Fatalf("a full page of the largest values takes %d bytes (%v), over the frame limit %d", len(b), err, srv.cfg.maxFrameSize())
	}
	n := 2*page + 7
	for range n {
		grantTTL(t, c, time.Hour)
	}
	seen := map[uint64]bool{}
	var after uint64
	pages := 0
	for {
		r, ok := call(t, c, &protocol.LeaseList{After: after}).(*protocol.LeaseListReply)
		if !ok {
			t.Fatalf("page after %d: %#v", after, r)
		}
		pages++
		for _, l := range r.Leases {
			if l.Lease <= after || seen[l.Lease] {
				t.Fatalf("lease %d listed out of order or twice (after %d)", l.Lease, after)
			}
			seen[l.Lease] = true
		}
		if !r.More {
			break
		}
		if len(r.Leases) != page {
			t.Fatalf("a page that says More has %d leases, want %d", len(r.Leases), page)
		}
		after = r.Leases[len(r.Leases)-1].Lease
	}
	if pages != 3 || len(seen) != n {
		t.Fatalf("%d pages, %d leases listed; want 3 pages of all %d", pages, len(seen), n)
	}
}
