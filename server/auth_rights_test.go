package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/internal/version"
	"github.com/leased/leased/protocol"
)

// TestAcquireNeedsRead: an acquisition's reply carries the key's value,
// which its holder caches under the write lease, so a client without the
// read right gets no write lease and learns nothing of the value.
func TestAcquireNeedsRead(t *testing.T) {
	a := startAuthServer(t, testPolicy)
	app, lockonly, locker := a.as(t, "app"), a.as(t, "lockonly"), a.as(t, "locker")
	writeOp(t, app, protocol.OpPut, "app/secret", "s3cr3t", 0)
	send(t, app, &protocol.Ack{Keys: [][]byte{[]byte("app/secret")}})

	reply := call(t, lockonly, &protocol.Acquire{Key: []byte("app/secret")})
	wantDenied(t, "lockonly's acquisition", reply, "app/secret", "read")
	if e := reply.(*protocol.Error); strings.Contains(e.Message, "s3cr3t") {
		t.Fatalf("the refusal carries the value: %q", e.Message)
	}
	if st := a.srv.Stats(); st.WriteLeases != 0 {
		t.Fatalf("%d write leases after a refused acquisition, want 0", st.WriteLeases)
	}
	acq, ok := call(t, locker, &protocol.Acquire{Key: []byte("app/secret")}).(*protocol.AcquireReply)
	if !ok || !acq.Found || string(acq.Value) != "s3cr3t" || acq.Token == 0 {
		t.Fatalf("locker's acquisition, with read and write-lease: %#v", acq)
	}
}

// TestWriterWithoutReadGetsNoLease: a write by a client that may not read
// its key gives it no read lease, so it caches nothing and is not told of
// the key's later writes; a writer that may read gets one.
func TestWriterWithoutReadGetsNoLease(t *testing.T) {
	a := startAuthServer(t, testPolicy)
	app, writer := a.as(t, "app"), a.as(t, "writer")
	w, ok := writeOp(t, writer, protocol.OpPut, "app/n", "1", 0).(*protocol.WriteReply)
	if !ok || w.Term != 0 {
		t.Fatalf("writer's put: %#v; want it applied with term 0", w)
	}
	next, ok := writeOp(t, app, protocol.OpPut, "app/n", "2", 0).(*protocol.WriteReply)
	if !ok || next.Holders != 0 {
		t.Fatalf("app's put after writer's: %#v; want no holder to invalidate", next)
	}
	if next.Term == 0 {
		t.Fatalf("app's put: term 0; app may read app/n and should get a lease")
	}
	// The control: a writer that may read holds a lease the next write
	// must invalidate.
	other := a.as(t, "app") // another session of app's
	send(t, other, &protocol.Write{ID: other.NextID(), Op: protocol.OpPut, Key: []byte("app/n"), Value: []byte("3")})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n, err := app.RecvNotice(ctx)
	if inv, ok := n.(*protocol.Invalidate); err != nil || !ok || len(inv.Keys) != 1 || string(inv.Keys[0]) != "app/n" {
		t.Fatalf("app's notice: %#v, %v; want an invalidation of app/n", n, err)
	}
	send(t, app, &protocol.Ack{Keys: [][]byte{[]byte("app/n")}})
	if r, ok := recv(t, other).(*protocol.WriteReply); !ok || r.Holders != 1 {
		t.Fatalf("the other session's put: %#v; want one holder", r)
	}
}

// TestRenewWriteLeaseNeedsRight: a renewal renews a write lease only while
// its client has the write-lease right on the key (and read, as for
// every renewal): a reload that takes write-lease away lets the write
// lease run out at its term, even if the holder may still read.
func TestRenewWriteLeaseNeedsRight(t *testing.T) {
	a := startAuthServer(t, testPolicy)
	locker := a.as(t, "locker")
	if _, ok := call(t, locker, &protocol.Acquire{Key: []byte("app/l")}).(*protocol.AcquireReply); !ok {
		t.Fatal("locker's acquisition failed")
	}
	renew := func() time.Duration {
		t.Helper()
		r, ok := call(t, locker, &protocol.Renew{Keys: [][]byte{[]byte("app/l")}}).(*protocol.RenewReply)
		if !ok || len(r.Terms) != 1 {
			t.Fatalf("renewal: %#v", r)
		}
		return r.Terms[0]
	}
	if renew() == 0 {
		t.Fatal("locker's renewal of its write lease: term 0, want its term")
	}
	a.editPolicy(t, "rights: [read, write-lease]", "rights: [read]")
	if got := renew(); got != 0 {
		t.Fatalf("renewal after write-lease was taken away: term %v, want 0", got)
	}
	wantDenied(t, "locker's new acquisition", call(t, locker, &protocol.Acquire{Key: []byte("app/m")}), "app/m", "write-lease")
}

// TestStatusNamesPolicy: a node's status names its build and the digest
// of the access policy in force, which a reload of other text changes and
// a reload of the same text does not, so that nodes left on another copy
// of the file stand out.
func TestStatusNamesPolicy(t *testing.T) {
	a := startAuthServer(t, testPolicy)
	st := a.srv.Status()
	if st.Version != version.String() || len(st.Policy) != 12 {
		t.Fatalf("status: version %q, policy %q; want %q and a 12-digit digest", st.Version, st.Policy, version.String())
	}
	if err := a.srv.ReloadPolicy(); err != nil {
		t.Fatal(err)
	}
	if got := a.srv.Status().Policy; got != st.Policy {
		t.Fatalf("the same file read again: digest %q, want %q", got, st.Policy)
	}
	if err := a.writePolicy(t, testPolicy+"\n  extra:\n    admin: true\n"); err != nil {
		t.Fatal(err)
	}
	if got := a.srv.Status().Policy; got == st.Policy || len(got) != 12 {
		t.Fatalf("another file: digest %q, want one other than %q", got, st.Policy)
	}
}
