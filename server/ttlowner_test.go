package server

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// ownerPolicy is the access policy of the tests of TTL lease owners: alice
// and mallory each have their prefix; root is an admin with every right on
// every key; auditor is an admin with the TTL lease right on x/ alone.
const ownerPolicy = `
clients:
  alice:
    keys:
      - prefix: a/
        rights: [read, write, write-lease, ttl-lease]
  mallory:
    keys:
      - prefix: m/
        rights: [read, write, ttl-lease]
  root:
    admin: true
    keys:
      - prefix: ""
        rights: [read, write, ttl-lease]
  auditor:
    admin: true
    keys:
      - prefix: x/
        rights: [ttl-lease]
`

// putLeased puts key under lease as c, and acknowledges the read lease the
// put gives c, so that a revocation need not wait for it.
func putLeased(t *testing.T, c *protoclient.Client, key string, lease uint64) protocol.Message {
	t.Helper()
	r := call(t, c, &protocol.Write{Op: protocol.OpPut, Key: []byte(key), Value: []byte("v"), Lease: lease})
	if r.Type() == protocol.TypeWriteReply {
		send(t, c, &protocol.Ack{Keys: [][]byte{[]byte(key)}})
	}
	return r
}

// wantNotOwner checks that reply refuses the use of another client's
// lease, naming the client and the lease.
func wantNotOwner(t *testing.T, what string, reply protocol.Message, client string, lease uint64) {
	t.Helper()
	wantDenied(t, what, reply, fmt.Sprintf("client %q may not use TTL lease %016x", client, lease), "belongs to another client")
}

// keepAlive keeps leases alive as c.
func keepAlive(t *testing.T, c *protoclient.Client, leases ...uint64) *protocol.LeaseKeepAliveReply {
	t.Helper()
	r, ok := call(t, c, &protocol.LeaseKeepAlive{Leases: leases}).(*protocol.LeaseKeepAliveReply)
	if !ok {
		t.Fatalf("keep-alive of %v: %#v", leases, r)
	}
	return r
}

// renewedIDs returns the leases r renewed.
func renewedIDs(r *protocol.LeaseKeepAliveReply) []uint64 {
	var ids []uint64
	for _, l := range r.Renewed {
		ids = append(ids, l.Lease)
	}
	return ids
}

// listed returns the leases c sees in LeaseList.
func listed(t *testing.T, c *protoclient.Client) []uint64 {
	t.Helper()
	r, ok := call(t, c, &protocol.LeaseList{}).(*protocol.LeaseListReply)
	if !ok {
		t.Fatalf("list: %#v", r)
	}
	var ids []uint64
	for _, l := range r.Leases {
		ids = append(ids, l.Lease)
	}
	return ids
}

// TestTTLLeaseHijackRefused: mallory, who may use TTL leases on m/ only,
// cannot attach a key of its own to alice's lease; alice keeps it alive,
// her key survives, and she revokes it.
func TestTTLLeaseHijackRefused(t *testing.T) {
	a := startAuthServer(t, ownerPolicy)
	alice, mallory := a.as(t, "alice"), a.as(t, "mallory")
	lease := grantTTL(t, alice, 5*time.Second)
	if r := putLeased(t, alice, "a/session", lease); r.Type() != protocol.TypeWriteReply {
		t.Fatalf("alice's put: %#v", r)
	}
	if ids := listed(t, mallory); len(ids) != 0 {
		t.Fatalf("mallory lists %v; want none of alice's leases", ids)
	}
	wantNotOwner(t, "mallory's attach", putLeased(t, mallory, "m/x", lease), "mallory", lease)
	if r := get(t, mallory, "m/x"); r.Found {
		t.Fatalf("m/x after the refused attach: %+v", r)
	}
	for range 3 {
		a.fc.Advance(3 * time.Second) // past the lease's TTL, unless kept alive
		if r := keepAlive(t, alice, lease); !slices.Equal(renewedIDs(r), []uint64{lease}) {
			t.Fatalf("alice's keep-alive: %#v", r)
		}
	}
	if n := a.srv.Stats().TTLExpired; n != 0 {
		t.Fatalf("%d leases expired; want alice's kept alive", n)
	}
	if r := get(t, alice, "a/session"); !r.Found {
		t.Fatal("alice's a/session is gone")
	}
	send(t, alice, &protocol.Ack{Keys: [][]byte{[]byte("a/session")}}) // the read lease, which the revocation would wait for
	ttl, ok := call(t, alice, &protocol.LeaseTimeToLive{Lease: lease, Keys: true}).(*protocol.LeaseTimeToLiveReply)
	if !ok || ttl.TTL <= 0 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "a/session" {
		t.Fatalf("alice's time to live: %#v; want her key alone", ttl)
	}
	if r, ok := call(t, alice, &protocol.LeaseRevoke{Lease: lease}).(*protocol.LeaseRevokeReply); !ok || r.Keys != 1 {
		t.Fatalf("alice's revocation: %#v", r)
	}
}

// TestTTLLeaseOfAnotherClient: mallory can neither revoke, keep alive nor
// look up alice's lease, with keys or without; nothing changes.
func TestTTLLeaseOfAnotherClient(t *testing.T) {
	a := startAuthServer(t, ownerPolicy)
	alice, mallory := a.as(t, "alice"), a.as(t, "mallory")
	bare := grantTTL(t, alice, time.Minute)
	keyed := grantTTL(t, alice, time.Minute)
	putLeased(t, alice, "a/k", keyed)
	for _, lease := range []uint64{bare, keyed} {
		wantNotOwner(t, "mallory's revocation", call(t, mallory, &protocol.LeaseRevoke{Lease: lease}), "mallory", lease)
		wantNotOwner(t, "mallory's time to live", call(t, mallory, &protocol.LeaseTimeToLive{Lease: lease}), "mallory", lease)
		r := keepAlive(t, mallory, lease)
		if len(r.Renewed) != 0 || !slices.Equal(r.Unknown, []uint64{lease}) || !slices.Equal(r.Denied, []uint64{lease}) {
			t.Fatalf("mallory's keep-alive of alice's lease: %#v; want it unknown and denied", r)
		}
	}
	if r := keepAlive(t, alice, bare, keyed); len(r.Renewed) != 2 {
		t.Fatalf("alice's keep-alive: %#v", r)
	}
	if r := get(t, alice, "a/k"); !r.Found {
		t.Fatal("alice's a/k is gone")
	}
	// A lease that does not exist is not found, for mallory as for any.
	wantCode(t, "mallory's revocation of no lease", call(t, mallory, &protocol.LeaseRevoke{Lease: keyed + 100}), protocol.CodeNotFound)
	wantCode(t, "mallory's attach to no lease", putLeased(t, mallory, "m/y", keyed+100), protocol.CodeNotFound)
	if r, ok := call(t, mallory, &protocol.LeaseTimeToLive{Lease: keyed + 100}).(*protocol.LeaseTimeToLiveReply); !ok || r.TTL != -1 {
		t.Fatalf("mallory's time to live of no lease: %#v", r)
	}
}

// TestTTLKeepAliveLeaseByLease: a keep-alive of a client's own lease,
// another's and one that does not exist renews its own, and answers the
// others as unknown, the other client's as denied too.
func TestTTLKeepAliveLeaseByLease(t *testing.T) {
	a := startAuthServer(t, ownerPolicy)
	alice, mallory := a.as(t, "alice"), a.as(t, "mallory")
	own := grantTTL(t, alice, time.Minute)
	putLeased(t, alice, "a/k", own)
	foreign := grantTTL(t, mallory, time.Minute)
	putLeased(t, mallory, "m/k", foreign)
	r := keepAlive(t, alice, foreign, own, own+100)
	if !slices.Equal(renewedIDs(r), []uint64{own}) || !slices.Equal(r.Denied, []uint64{foreign}) ||
		len(r.Unknown) != 2 || !slices.Contains(r.Unknown, foreign) || !slices.Contains(r.Unknown, own+100) {
		t.Fatalf("keep-alive of own, foreign and unknown leases: %#v", r)
	}
}

// TestTTLLeaseAdmin: an admin lists every lease and may use another
// client's, with the rights on its keys a revocation needs: an admin
// without them is refused, naming the key.
func TestTTLLeaseAdmin(t *testing.T) {
	a := startAuthServer(t, ownerPolicy)
	alice, mallory, root, auditor := a.as(t, "alice"), a.as(t, "mallory"), a.as(t, "root"), a.as(t, "auditor")
	la := grantTTL(t, alice, time.Minute)
	lm := grantTTL(t, mallory, time.Minute)
	lr := grantTTL(t, root, time.Minute)
	for _, c := range []struct {
		name string
		c    *protoclient.Client
		want []uint64
	}{{"alice", alice, []uint64{la}}, {"mallory", mallory, []uint64{lm}}, {"root", root, []uint64{la, lm, lr}}, {"auditor", auditor, []uint64{la, lm, lr}}} {
		if got := listed(t, c.c); !slices.Equal(got, c.want) {
			t.Errorf("%s lists %v, want %v", c.name, got, c.want)
		}
	}
	putLeased(t, alice, "a/k", la)
	if r := keepAlive(t, root, la); len(r.Renewed) != 1 {
		t.Fatalf("root's keep-alive of alice's lease: %#v", r)
	}
	wantDenied(t, "auditor's revocation", call(t, auditor, &protocol.LeaseRevoke{Lease: la}), "a/k", "write")
	if r, ok := call(t, root, &protocol.LeaseRevoke{Lease: la}).(*protocol.LeaseRevokeReply); !ok || r.Keys != 1 {
		t.Fatalf("root's revocation of alice's lease: %#v", r)
	}
	if r := get(t, alice, "a/k"); r.Found {
		t.Fatal("a/k survived the revocation")
	}
}

// TestTTLLeaseOwnerSurvivesRestart: a lease's owner is in the store, as a
// hash, and survives a restart: a new session of the owner's certificate,
// with another ClientID, keeps it alive, looks it up and revokes it;
// another client still may not use it.
func TestTTLLeaseOwnerSurvivesRestart(t *testing.T) {
	a := startAuthServer(t, ownerPolicy)
	alice := a.as(t, "alice")
	lease := grantTTL(t, alice, time.Hour)
	putLeased(t, alice, "a/session", lease)
	l, _, ok, err := a.srv.cfg.Store.TTLLease(lease)
	if err != nil || !ok || l.Owner != leaseOwner("alice") || l.Owner == clientIdentity(1, "alice") {
		t.Fatalf("stored lease %+v, %v, %v; want owner %#x", l, ok, err, leaseOwner("alice"))
	}
	a.restart(t, nil)

	alice = a.dial(t, protoclient.Options{TLSConfig: a.clientTLS(t, a.caDir, "alice"), ClientID: 0xa11ce})
	mallory := a.as(t, "mallory")
	wantNotOwner(t, "mallory's attach after the restart", putLeased(t, mallory, "m/x", lease), "mallory", lease)
	wantNotOwner(t, "mallory's revocation after the restart", call(t, mallory, &protocol.LeaseRevoke{Lease: lease}), "mallory", lease)
	if ids := listed(t, mallory); len(ids) != 0 {
		t.Fatalf("mallory lists %v after the restart", ids)
	}
	if ids := listed(t, alice); !slices.Equal(ids, []uint64{lease}) {
		t.Fatalf("alice lists %v after the restart, want %v", ids, []uint64{lease})
	}
	if r := keepAlive(t, alice, lease); len(r.Renewed) != 1 {
		t.Fatalf("alice's keep-alive after the restart: %#v", r)
	}
	if r := putLeased(t, alice, "a/other", lease); r.Type() != protocol.TypeWriteReply {
		t.Fatalf("alice's attach after the restart: %#v", r)
	}
	if r, ok := call(t, alice, &protocol.LeaseRevoke{Lease: lease}).(*protocol.LeaseRevokeReply); !ok || r.Keys != 2 {
		t.Fatalf("alice's revocation after the restart: %#v", r)
	}
}

// TestTTLLeaseWithoutOwner: a lease granted without an owner, as before
// leases had one, is anyone's to use with the rights on its keys, as
// then: it is listed to every client, and mallory may attach a key to it.
func TestTTLLeaseWithoutOwner(t *testing.T) {
	a := startAuthServer(t, ownerPolicy)
	var lease uint64
	a.restart(t, func(db string) {
		st, err := store.Open(db, quietLogger())
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		rs, err := st.Apply([]store.Command{{Op: store.OpGrantTTL, Term: time.Hour}})
		if err != nil || rs[0].Err != nil {
			t.Fatalf("grant in the store: %+v, %v", rs, err)
		}
		lease = rs[0].Lease
	})
	alice, mallory := a.as(t, "alice"), a.as(t, "mallory")
	for _, c := range []*protoclient.Client{alice, mallory} {
		if ids := listed(t, c); !slices.Equal(ids, []uint64{lease}) {
			t.Fatalf("listed %v, want the lease without an owner %v", ids, []uint64{lease})
		}
	}
	if r := keepAlive(t, alice, lease); len(r.Renewed) != 1 {
		t.Fatalf("alice's keep-alive of a lease without an owner: %#v", r)
	}
	if r := putLeased(t, mallory, "m/x", lease); r.Type() != protocol.TypeWriteReply {
		t.Fatalf("mallory's attach to a lease without an owner: %#v", r)
	}
	wait.For(t, testTimeout, "the attach", func() bool {
		_, keys, _, err := a.srv.cfg.Store.TTLLease(lease)
		return err == nil && slices.Equal(keys, []string{"m/x"})
	})
}
