package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/internal/tlsfiles"
	"github.com/leased/leased/protocol"
)

// testPolicy is the access policy of the tests below.
const testPolicy = `
clients:
  app:
    keys:
      - prefix: app/
        rights: [read, write, write-lease, ttl-lease]
  reader:
    keys:
      - prefix: app/
        rights: [read]
  writer:
    keys:
      - prefix: app/
        rights: [write]
  locker:             # holds write leases, and caches the value under them
    keys:
      - prefix: app/
        rights: [read, write-lease]
  lockonly:           # write leases, but may not read
    keys:
      - prefix: app/
        rights: [write-lease]
  keeper:             # TTL leases and reads of app/, but may not delete
    keys:
      - prefix: app/
        rights: [read, ttl-lease]
  stranger:           # TTL leases, but of other keys
    keys:
      - prefix: other/
        rights: [ttl-lease]
  publisher:
    keys:
      - prefix: pub/
        rights: [write]
  ops:
    admin: true
  "*":
    keys:
      - prefix: pub/
        rights: [read]
`

// authServer is a server that requires client certificates from a CA of
// its own and holds them to a policy file.
type authServer struct {
	srv    *Server
	fc     *clock.Fake
	caDir  string // the client CA
	policy string // the policy file
	certs  string // where client certificates are issued
	cfg    Config // what srv was started with, its store aside
}

// startAuthServer starts a server on a fake clock that requires client
// certificates from a new CA, under the access policy policy.
func startAuthServer(t *testing.T, policy string) *authServer {
	t.Helper()
	dir := t.TempDir()
	a := &authServer{fc: clock.NewFake(), caDir: filepath.Join(dir, "ca"), policy: filepath.Join(dir, "policy.yaml"), certs: filepath.Join(dir, "clients")}
	if err := tlsfiles.CreateCA(a.caDir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a.policy, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	a.cfg = Config{Dir: filepath.Join(dir, "data"), Addr: "127.0.0.1:0", LeaseTerm: 10 * time.Second, Epsilon: eps,
		Clock: a.fc, Logger: quietLogger(), ClientCAs: certPool(t, filepath.Join(a.caDir, tlsfiles.CAFileName)), PolicyFile: a.policy,
		TTL: core.TTLConfig{MinTTL: time.Second, MaxTTL: time.Hour}}
	a.srv = serve(t, newServerWith(t, a.cfg))
	return a
}

// restart closes a's server, calls between with the folder of its store,
// if between is not nil, and starts the server again on that store, with
// writes allowed: the clock is past the horizon the closed server left.
// Sessions of the closed server are closed.
func (a *authServer) restart(t *testing.T, between func(db string)) {
	t.Helper()
	if err := a.srv.Close(); err != nil {
		t.Fatal(err)
	}
	if between != nil {
		between(filepath.Join(a.cfg.Dir, "db"))
	}
	a.fc.Advance(a.cfg.LeaseTerm + eps)
	a.srv = serve(t, newServerWith(t, a.cfg))
	wait.For(t, testTimeout, "writes to be allowed", func() bool { return a.srv.Stats().WritesAllowedIn == 0 })
}

// writePolicy replaces a's policy file with text and reads it again
// (Server.ReloadPolicy), returning what the reload says.
func (a *authServer) writePolicy(t *testing.T, text string) error {
	t.Helper()
	if err := os.WriteFile(a.policy, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return a.srv.ReloadPolicy()
}

// editPolicy writes testPolicy with old replaced by new as a's policy,
// which must then reload.
func (a *authServer) editPolicy(t *testing.T, old, new string) {
	t.Helper()
	changed := strings.Replace(testPolicy, old, new, 1)
	if changed == testPolicy {
		t.Fatalf("the test's policy edit changed nothing: %q is not in it", old)
	}
	if err := a.writePolicy(t, changed); err != nil {
		t.Fatal(err)
	}
}

// certPool reads a PEM file of CA certificates.
func certPool(t *testing.T, file string) *x509.CertPool {
	t.Helper()
	pem, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", file)
	}
	return pool
}

// clientTLS returns the TLS config of a client that trusts a's server and
// presents the certificate of name, issued from caDir.
func (a *authServer) clientTLS(t *testing.T, caDir, name string) *tls.Config {
	t.Helper()
	out := filepath.Join(a.certs, filepath.Base(caDir))
	cert, key := filepath.Join(out, name+".pem"), filepath.Join(out, name+"-key.pem")
	if _, err := os.Stat(cert); err != nil {
		if cert, key, err = tlsfiles.IssueClient(caDir, out, name); err != nil {
			t.Fatal(err)
		}
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: certPool(t, CAPath(a.srv.cfg.Dir)), Certificates: []tls.Certificate{pair}}
}

// as opens a session as the client name, with a certificate from the
// server's client CA.
func (a *authServer) as(t *testing.T, name string) *protoclient.Client {
	t.Helper()
	return a.dial(t, protoclient.Options{TLSConfig: a.clientTLS(t, a.caDir, name)})
}

// dial opens a session with opts and closes it when the test ends.
func (a *authServer) dial(t *testing.T, opts protoclient.Options) *protoclient.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := protoclient.Dial(ctx, a.srv.Addr().String(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// wantDenied checks that reply is a permission-denied error naming key and
// right.
func wantDenied(t *testing.T, what string, reply protocol.Message, key, right string) {
	t.Helper()
	e := wantCode(t, what, reply, protocol.CodePermissionDenied)
	if !strings.Contains(e.Message, key) || !strings.Contains(e.Message, right) {
		t.Fatalf("%s: message %q does not name key %q and right %q", what, e.Message, key, right)
	}
}

// TestClientCertificatesRequired: a server with client CAs lets in only a
// client with a certificate they signed, and knows it by the certificate's
// CommonName.
func TestClientCertificatesRequired(t *testing.T) {
	a := startAuthServer(t, testPolicy)
	serverCA := certPool(t, CAPath(a.srv.cfg.Dir))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	if c, err := protoclient.Dial(ctx, a.srv.Addr().String(), protoclient.Options{TLSConfig: &tls.Config{RootCAs: serverCA}}); err == nil {
		c.Close()
		t.Fatal("a session without a client certificate was opened")
	} else if !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("without a client certificate: %v; want the TLS alert \"certificate required\"", err)
	}

	otherCA := filepath.Join(t.TempDir(), "other-ca")
	if err := tlsfiles.CreateCA(otherCA); err != nil {
		t.Fatal(err)
	}
	if c, err := protoclient.Dial(ctx, a.srv.Addr().String(), protoclient.Options{TLSConfig: a.clientTLS(t, otherCA, "app")}); err == nil {
		c.Close()
		t.Fatal("a session with a certificate from another CA was opened")
	} else if !strings.Contains(err.Error(), "unknown certificate authority") {
		t.Fatalf("with a certificate from another CA: %v; want the TLS alert \"unknown certificate authority\"", err)
	}

	c := a.as(t, "app")
	if r := writeOp(t, c, protocol.OpPut, "app/k", "v", 0); r.Type() != protocol.TypeWriteReply {
		t.Fatalf("app's put: %#v", r)
	}
	a.srv.smu.Lock()
	var ids []string
	for _, ss := range a.srv.sessions {
		ids = append(ids, ss.identity)
	}
	a.srv.smu.Unlock()
	if len(ids) != 1 || ids[0] != "app" {
		t.Fatalf("the sessions' identities: %q, want [app]", ids)
	}
}

// TestPolicyRights: each request needs its right on its key; a request
// without it fails with permission denied, naming the key and the right,
// and changes nothing.
func TestPolicyRights(t *testing.T) {
	a := startAuthServer(t, testPolicy)
	app, reader, writer, locker := a.as(t, "app"), a.as(t, "reader"), a.as(t, "writer"), a.as(t, "locker")
	keeper, stranger := a.as(t, "keeper"), a.as(t, "stranger")

	put, ok := writeOp(t, app, protocol.OpPut, "app/k", "v1", 0).(*protocol.WriteReply)
	if !ok {
		t.Fatal("app's put failed")
	}
	send(t, app, &protocol.Ack{Keys: [][]byte{[]byte("app/k")}}) // its own lease on what it wrote
	unchanged := func(what string) {
		t.Helper()
		if r := get(t, app, "app/k"); !r.Found || r.Version != put.Version || string(r.Value) != "v1" {
			t.Fatalf("after %s: app/k is %+v, want v1 at version %d", what, r, put.Version)
		}
	}

	// read
	if r := get(t, reader, "app/k"); !r.Found || string(r.Value) != "v1" {
		t.Fatalf("reader's read of app/k: %+v", r)
	}
	wantDenied(t, "writer's read", call(t, writer, &protocol.Get{Key: []byte("app/k")}), "app/k", "read")
	wantDenied(t, "reader's read outside its prefix", call(t, reader, &protocol.Get{Key: []byte("other/k")}), "other/k", "read")
	if r := get(t, writer, "pub/x"); r.Found {
		t.Fatalf("writer's read of pub/x, which every client may read: %+v", r)
	}

	// write
	for _, w := range []*protocol.Write{
		{Op: protocol.OpPut, Key: []byte("app/k"), Value: []byte("x")},
		{Op: protocol.OpCAS, Key: []byte("app/k"), Value: []byte("x"), Expect: put.Version},
		{Op: protocol.OpDelete, Key: []byte("app/k")},
	} {
		wantDenied(t, "reader's write", call(t, reader, w), "app/k", "write")
		unchanged("the reader's write")
	}
	wantDenied(t, "a put to pub/, which every client may only read", writeOp(t, app, protocol.OpPut, "pub/x", "x", 0), "pub/x", "write")

	// write-lease
	wantDenied(t, "writer's acquisition", call(t, writer, &protocol.Acquire{Key: []byte("app/w")}), "app/w", "write-lease")
	acq, ok := call(t, locker, &protocol.Acquire{Key: []byte("app/w")}).(*protocol.AcquireReply)
	if !ok {
		t.Fatal("locker's acquisition failed")
	}
	wantDenied(t, "locker's fenced write", writeOp(t, locker, protocol.OpPut, "app/w", "x", acq.Token), "app/w", "write")
	if _, ok := call(t, locker, &protocol.ReleaseWrite{Key: []byte("app/w"), Token: acq.Token}).(*protocol.OK); !ok {
		t.Fatal("locker's release of its write lease failed: relinquishing needs no right")
	}
	if r := get(t, app, "app/w"); r.Found {
		t.Fatalf("app/w after the denied fenced write: %+v", r)
	}

	// ttl-lease
	wantDenied(t, "reader's grant", call(t, reader, &protocol.LeaseGrant{TTL: time.Minute}), "", "ttl-lease")
	wantDenied(t, "reader's list", call(t, reader, &protocol.LeaseList{}), "", "ttl-lease")
	lease := grantTTL(t, app, time.Minute)
	bare := grantTTL(t, stranger, time.Minute)
	if r := call(t, app, &protocol.Write{Op: protocol.OpPut, Key: []byte("app/t"), Value: []byte("t"), Lease: lease}); r.Type() != protocol.TypeWriteReply {
		t.Fatalf("app's put under its TTL lease: %#v", r)
	}
	send(t, app, &protocol.Ack{Keys: [][]byte{[]byte("app/t")}}) // so that a revocation need not wait for app
	wantDenied(t, "writer's put under a TTL lease", call(t, writer, &protocol.Write{Op: protocol.OpPut, Key: []byte("app/u"), Value: []byte("u"), Lease: lease}), "app/u", "ttl-lease")
	// A TTL lease is its granter's: another client may not use it
	// (TestTTLLeaseOwner), whatever its rights on the lease's keys.
	ka, ok := call(t, stranger, &protocol.LeaseKeepAlive{Leases: []uint64{bare, lease}}).(*protocol.LeaseKeepAliveReply)
	if !ok || len(ka.Renewed) != 1 || ka.Renewed[0].Lease != bare || !slices.Equal(ka.Unknown, []uint64{lease}) || !slices.Equal(ka.Denied, []uint64{lease}) {
		t.Fatalf("stranger's keep-alive of its lease and app's: %#v; want its own renewed, app's denied", ka)
	}
	others := fmt.Sprintf("%016x", lease)
	wantDenied(t, "stranger's time to live", call(t, stranger, &protocol.LeaseTimeToLive{Lease: lease}), others, "belongs to another client")
	wantDenied(t, "keeper's revocation", call(t, keeper, &protocol.LeaseRevoke{Lease: lease}), others, "belongs to another client")
	wantDenied(t, "stranger's revocation", call(t, stranger, &protocol.LeaseRevoke{Lease: lease}), others, "belongs to another client")
	if ka, ok := call(t, app, &protocol.LeaseKeepAlive{Leases: []uint64{lease}}).(*protocol.LeaseKeepAliveReply); !ok || len(ka.Renewed) != 1 {
		t.Fatalf("app's keep-alive: %#v", ka)
	}
	ttl, ok := call(t, app, &protocol.LeaseTimeToLive{Lease: lease, Keys: true}).(*protocol.LeaseTimeToLiveReply)
	if !ok || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "app/t" {
		t.Fatalf("app's time to live with keys: %#v, want app/t alone: the denied revocations deleted nothing, the denied put attached nothing", ttl)
	}
	if r, ok := call(t, app, &protocol.LeaseRevoke{Lease: lease}).(*protocol.LeaseRevokeReply); !ok || r.Keys != 1 {
		t.Fatalf("app's revocation: %#v", r)
	}

	// admin, on admin sessions: membership and snapshots need it; the
	// status, the member list and the counters do not.
	opsAdmin := a.admin(t, "ops")
	appAdmin := a.admin(t, "app")
	for _, m := range []protocol.Message{&protocol.MemberAdd{Name: "n2", PeerAddr: "127.0.0.1:1"}, &protocol.MemberRemove{Name: "n2"}, &protocol.MemberTransfer{To: "n2"}, &protocol.SnapshotSave{}} {
		wantDenied(t, "app's "+m.Type().String(), call(t, appAdmin, m), "", "admin")
		if e, ok := call(t, opsAdmin, m).(*protocol.Error); ok && e.Code == protocol.CodePermissionDenied {
			t.Fatalf("ops' %s: %v", m.Type(), e.Message)
		}
	}
	for _, m := range []protocol.Message{&protocol.EndpointStatus{}, &protocol.MemberList{}, &protocol.Stats{}} {
		if e, ok := call(t, appAdmin, m).(*protocol.Error); ok {
			t.Fatalf("app's %s: %v", m.Type(), e.Message)
		}
	}
}

// admin opens an admin session as the client name.
func (a *authServer) admin(t *testing.T, name string) *protoclient.Client {
	t.Helper()
	c := a.dial(t, protoclient.Options{TLSConfig: a.clientTLS(t, a.caDir, name), NoHello: true})
	send(t, c, &protocol.Hello{Version: protocol.Version, Client: "admin " + name, Admin: true})
	if _, ok := recv(t, c).(*protocol.HelloReply); !ok {
		t.Fatalf("admin hello as %s failed", name)
	}
	return c
}

// TestPolicyReload: ReloadPolicy puts a changed policy file in force for
// the next request, and a bad one leaves the policy in force as it was.
// Leases granted before a reload that takes the right away are not
// renewed, and end at their terms.
func TestPolicyReload(t *testing.T) {
	a := startAuthServer(t, testPolicy)
	reader := a.as(t, "reader")
	wantDenied(t, "reader's read of other/k", call(t, reader, &protocol.Get{Key: []byte("other/k")}), "other/k", "read")
	if r := get(t, reader, "app/k"); r.Term == 0 {
		t.Fatalf("reader's read of app/k: %+v, want a lease", r)
	}

	a.editPolicy(t, "  reader:\n    keys:\n      - prefix: app/", "  reader:\n    keys:\n      - prefix: other/")
	if r := get(t, reader, "other/k"); r.Term == 0 {
		t.Fatalf("reader's read of other/k after the reload: %+v", r)
	}
	wantDenied(t, "reader's read of app/k after the reload", call(t, reader, &protocol.Get{Key: []byte("app/k")}), "app/k", "read")
	r, ok := call(t, reader, &protocol.Renew{Keys: [][]byte{[]byte("app/k"), []byte("other/k")}}).(*protocol.RenewReply)
	if !ok || len(r.Terms) != 2 || r.Terms[0] != 0 || r.Terms[1] == 0 {
		t.Fatalf("renewal after the reload: %#v; want no term for app/k, one for other/k", r)
	}

	err := a.writePolicy(t, "clients:\n  reader:\n    keys:\n      - prefix: x/\n        rights: [reed]\n")
	if err == nil || !strings.Contains(err.Error(), `unknown right "reed"`) {
		t.Fatalf("reload of a bad file: %v", err)
	}
	if r := get(t, reader, "other/k"); r.Term == 0 {
		t.Fatalf("reader's read of other/k after a bad reload: %+v; want the policy in force kept", r)
	}
	m := a.srv.metrics.policyReloads
	if ok, bad := testutil.ToFloat64(m.WithLabelValues("ok")), testutil.ToFloat64(m.WithLabelValues("error")); ok != 1 || bad != 1 {
		t.Fatalf("reloads counted: ok %v, error %v; want 1 and 1", ok, bad)
	}
}

// TestInvalidationsStayWithinRights: a session hears only of keys it
// holds leases on, and so of no key it may not read, however busy the
// keys next to its own are.
func TestInvalidationsStayWithinRights(t *testing.T) {
	a := startAuthServer(t, testPolicy)
	app, publisher := a.as(t, "app"), a.as(t, "publisher")
	outsider := a.as(t, "stranger") // may read pub/ only, as every client
	writeOp(t, publisher, protocol.OpPut, "pub/x", "1", 0)
	send(t, publisher, &protocol.Ack{Keys: [][]byte{[]byte("pub/x")}})
	if r := get(t, outsider, "pub/x"); r.Term == 0 {
		t.Fatalf("outsider's read of pub/x: %+v", r)
	}
	wantDenied(t, "outsider's read of app/k", call(t, outsider, &protocol.Get{Key: []byte("app/k")}), "app/k", "read")
	for i := range 5 {
		writeOp(t, app, protocol.OpPut, "app/k", string(rune('a'+i)), 0)
	}
	// A write that the outsider holds a lease on: its first notice.
	if err := publisher.Send(&protocol.Write{ID: publisher.NextID(), Op: protocol.OpPut, Key: []byte("pub/x"), Value: []byte("2")}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	n, err := outsider.RecvNotice(ctx)
	inv, ok := n.(*protocol.Invalidate)
	if err != nil || !ok || len(inv.Keys) != 1 || string(inv.Keys[0]) != "pub/x" {
		t.Fatalf("outsider's first notice: %#v, %v; want an invalidation of pub/x alone", n, err)
	}
}
