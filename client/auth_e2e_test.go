package client_test

import (
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/tlsfiles"
	"github.com/leased/leased/server"
)

// TestClientCertificate: against a server that requires client
// certificates, a client with Config.CertFile and KeyFile from its CA gets
// in and is held to the access policy by its certificate's name; one
// without gets ErrUnauthenticated at once, not a timeout; and a certificate
// without its key is refused before dialling.
func TestClientCertificate(t *testing.T) {
	srv, issue := startPolicyServer(t, "clients:\n  app:\n    keys:\n      - prefix: app/\n        rights: [read, write]\n")
	cert, key := issue("app")
	c := dial(t, srv, client.Config{CertFile: cert, KeyFile: key})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if _, err := c.Put(ctx, "app/k", []byte("v")); err != nil {
		t.Fatalf("put under the client's rights: %v", err)
	}
	_, err := c.Put(ctx, "other/k", []byte("v"))
	if !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), `client "app" lacks the write right on key "other/k"`) {
		t.Fatalf("put outside the client's rights: %v, want ErrPermissionDenied naming the client, key and right", err)
	}

	start := time.Now()
	_, err = client.Dial(ctx, srv.Addr().String(), client.Config{CAFile: srv.CA(), Logger: testkit.Discard()})
	if !errors.Is(err, client.ErrUnauthenticated) || errors.Is(err, client.ErrUnavailable) || !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("dial without a certificate: %v, want ErrUnauthenticated (certificate required), not ErrUnavailable", err)
	}
	if d := time.Since(start); d > testTimeout/2 {
		t.Fatalf("dial without a certificate took %v: it was retried", d)
	}

	_, err = client.Dial(ctx, srv.Addr().String(), client.Config{CAFile: srv.CA(), CertFile: cert})
	if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "KeyFile is empty") {
		t.Fatalf("dial with a certificate and no key: %v", err)
	}
	_, err = client.Dial(ctx, srv.Addr().String(), client.Config{CAFile: srv.CA(), CertFile: key, KeyFile: cert})
	if !errors.Is(err, client.ErrInvalidArgument) || !strings.Contains(err.Error(), "client certificate") {
		t.Fatalf("dial with the certificate and key swapped: %v", err)
	}
}

// TestTTLLeaseOfAnotherClient: under a policy, a TTL lease is its
// granter's: another client's KeepAliveOnce, Revoke and Put WithLease get
// ErrPermissionDenied naming the lease and the client by its certificate's
// name (as every permission error does), its Leases leaves the lease out,
// and the owner keeps it alive.
func TestTTLLeaseOfAnotherClient(t *testing.T) {
	srv, issue := startPolicyServer(t, "clients:\n  alice:\n    keys:\n      - prefix: a/\n        rights: [read, write, ttl-lease]\n"+
		"  mallory:\n    keys:\n      - prefix: m/\n        rights: [read, write, ttl-lease]\n")
	as := func(name string) *client.Client {
		cert, key := issue(name)
		return dial(t, srv, client.Config{CertFile: cert, KeyFile: key})
	}
	alice, mallory := as("alice"), as("mallory")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	g, err := alice.Grant(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Put(ctx, "a/k", []byte("v"), client.WithLease(g.ID)); err != nil {
		t.Fatalf("alice's put under her lease: %v", err)
	}
	denied := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, client.ErrPermissionDenied) || !strings.Contains(err.Error(), g.ID.String()) || !strings.Contains(err.Error(), `client "mallory"`) {
			t.Fatalf("mallory's %s of alice's lease: %v, want ErrPermissionDenied naming %s and client \"mallory\"", what, err, g.ID)
		}
	}
	_, err = mallory.KeepAliveOnce(ctx, g.ID)
	denied("keep-alive", err)
	_, err = mallory.Revoke(ctx, g.ID)
	denied("revocation", err)
	_, err = mallory.Put(ctx, "m/x", []byte("x"), client.WithLease(g.ID))
	denied("put", err)
	if ls, err := mallory.Leases(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("mallory's leases: %v, %v; want none", ls, err)
	}
	if r, err := alice.KeepAliveOnce(ctx, g.ID); err != nil || r.TTL != time.Minute {
		t.Fatalf("alice's keep-alive: %+v, %v", r, err)
	}
}

// startPolicyServer starts a server that requires client certificates from
// a CA of its own and holds clients to the access policy rules. issue
// returns the certificate and key files of a client named name from that
// CA.
func startPolicyServer(t *testing.T, rules string) (srv *testServer, issue func(name string) (cert, key string)) {
	t.Helper()
	dir := t.TempDir()
	caDir, certs := filepath.Join(dir, "ca"), filepath.Join(dir, "certs")
	if err := tlsfiles.CreateCA(caDir); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(filepath.Join(caDir, tlsfiles.CAFileName))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", caDir)
	}
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	srv = startServer(t, server.Config{ClientCAs: pool, PolicyFile: policy, LeaseTerm: time.Second})
	return srv, func(name string) (string, string) {
		t.Helper()
		cert, key, err := tlsfiles.IssueClient(caDir, certs, name)
		if err != nil {
			t.Fatal(err)
		}
		return cert, key
	}
}
