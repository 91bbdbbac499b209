package main

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/proccluster"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/server"
)

// TestAuthFlags: off loopback, clients must present certificates, from
// --client-ca or a node's cluster CA, unless the operator says
// --insecure-no-client-auth; an access policy needs them; the flags that
// contradict each other are refused.
func TestAuthFlags(t *testing.T) {
	base := goodOptions
	for _, tc := range []struct {
		name   string
		change func(*options)
		want   string // "" for valid
		ca     string // the client CA the flags come to, when valid
	}{
		{"loopback", func(o *options) {}, "", ""},
		{"localhost", func(o *options) { o.listen = "localhost:7400" }, "", ""},
		{"IPv6 loopback", func(o *options) { o.listen = "[::1]:7400" }, "", ""},
		{"every address", func(o *options) { o.listen = "0.0.0.0:7400" }, "--listen 0.0.0.0:7400 is reachable from other machines, so clients must present certificates", ""},
		{"no host", func(o *options) { o.listen = ":7400" }, "clients must present certificates", ""},
		{"a host name", func(o *options) { o.listen = "db1.example.com:7400" }, "--insecure-no-client-auth", ""},
		{"insecure", func(o *options) { o.listen = "0.0.0.0:7400"; o.insecureNoClient = true }, "", ""},
		{"client CA", func(o *options) { o.listen = "0.0.0.0:7400"; o.clientCA = "ca.pem" }, "", "ca.pem"},
		{"client CA on loopback", func(o *options) { o.clientCA = "ca.pem" }, "", "ca.pem"},
		{"node off loopback", func(o *options) { cluster(o); o.listen = "10.0.0.1:7400" }, "", filepath.Join("ca", "ca.pem")},
		{"node on loopback", func(o *options) { cluster(o) }, "", ""},
		{"node with a policy", func(o *options) { cluster(o); o.authPolicy = "p.yaml" }, "", filepath.Join("ca", "ca.pem")},
		{"node with its own client CA", func(o *options) { cluster(o); o.clientCA = "clients.pem" }, "", "clients.pem"},
		{"insecure node", func(o *options) { cluster(o); o.listen = "10.0.0.1:7400"; o.insecureNoClient = true }, "", ""},
		{"policy without a CA", func(o *options) { o.authPolicy = "p.yaml" }, "--auth-policy knows clients by their certificates: give --client-ca", ""},
		{"insecure with a CA", func(o *options) { o.insecureNoClient = true; o.clientCA = "ca.pem" }, "contradict", ""},
		{"insecure with a policy", func(o *options) { o.insecureNoClient = true; o.authPolicy = "p.yaml"; o.clientCA = "" }, "--insecure-no-client-auth turns off", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			tc.change(o)
			err := o.validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				if got := o.clientCAFile(); got != tc.ca {
					t.Fatalf("client CA %q, want %q", got, tc.ca)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("validate: %v; want an error containing %q", err, tc.want)
			}
			if _, ok := err.(usageError); !ok {
				t.Fatalf("validate: %T, want a usage error (status 2)", err)
			}
		})
	}
}

// TestListenBeyondLoopbackRefused: the real binary refuses, with status 2
// and before it binds anything, to serve every address without client
// certificates, and says what to do.
func TestListenBeyondLoopbackRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := clitest.Cmd{Dir: dir}.Run(t, bins.Leased, "--listen", "0.0.0.0:0")
	expectError(t, r, 2, "leased cert create-ca --dir ./ca")
	expectError(t, r, 2, "--insecure-no-client-auth")
	if _, err := os.Stat(filepath.Join(dir, server.DefaultDir)); err == nil {
		t.Fatal("leased created its data folder although it refused to start")
	}
}

// testAuthPolicy is the access policy of TestAuthEndToEnd.
const testAuthPolicy = `clients:
  app:
    keys:
      - prefix: app/
        rights: [read, write]
  reader:
    keys:
      - prefix: app/
        rights: [read]
`

// TestAuthEndToEnd: real processes. leased with --client-ca and
// --auth-policy lets in only clients with certificates from the CA, holds
// each to its rights, and reloads the policy on SIGHUP, keeping the one in
// force when the file is bad; leasectl says what went wrong.
func TestAuthEndToEnd(t *testing.T) {
	dir := t.TempDir()
	ca, certs, policy := filepath.Join(dir, "ca"), filepath.Join(dir, "certs"), filepath.Join(dir, "policy.yaml")
	for _, args := range [][]string{
		{"cert", "create-ca", "--dir", ca},
		{"cert", "create-client", "--ca-dir", ca, "--name", "app", "--out", certs},
		{"cert", "create-client", "--ca-dir", ca, "--name", "reader", "--out", certs},
	} {
		if r := (clitest.Cmd{}).Run(t, bins.Leased, args...); r.Code != 0 {
			t.Fatalf("leased %q: status %d\n%s", args, r.Code, r.Stderr)
		}
	}
	if err := os.WriteFile(policy, []byte(testAuthPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	as := func(name string) []string {
		return []string{"--cert", filepath.Join(certs, name+".pem"), "--key", filepath.Join(certs, name+"-key.pem")}
	}
	// leasectl, and StartServer's readiness check, present app's
	// certificate unless told otherwise.
	t.Setenv("LEASECTL_CERT", filepath.Join(certs, "app.pem"))
	t.Setenv("LEASECTL_KEY", filepath.Join(certs, "app-key.pem"))
	srv := clitest.StartServer(t, bins, "", filepath.Join(dir, "data"),
		"--client-ca", filepath.Join(ca, "ca.pem"), "--auth-policy", policy, "--lease-term", "2s")

	if r := srv.Ctl(t, "put", "app/k", "v1"); r.Code != 0 {
		t.Fatalf("app's put: status %d\n%s", r.Code, r.Stderr)
	}
	if r := srv.Ctl(t, append(as("reader"), "get", "--print-value-only", "app/k")...); r.Code != 0 || r.Stdout != "v1" {
		t.Fatalf("reader's get: status %d, %q\n%s", r.Code, r.Stdout, r.Stderr)
	}
	r := srv.Ctl(t, append(as("reader"), "put", "app/k", "v2")...)
	if r.Code != 1 || !strings.Contains(r.Stderr, `permission denied: client "reader" lacks the write right on key "app/k"`) {
		t.Fatalf("reader's put: status %d\n%s", r.Code, r.Stderr)
	}
	r = clitest.Cmd{Env: []string{"LEASECTL_CERT=", "LEASECTL_KEY="}}.Run(t, bins.Leasectl, "--endpoint", srv.Addr, "--cacert", srv.CA, "get", "app/k")
	if r.Code == 0 || !strings.Contains(r.Stderr, "certificate required") || !strings.Contains(r.Stderr, "pass --cert and --key") {
		t.Fatalf("get without a certificate: status %d\n%s", r.Code, r.Stderr)
	}

	// The reader may write once the file says so and leased got SIGHUP.
	if err := os.WriteFile(policy, []byte(strings.Replace(testAuthPolicy, "rights: [read]", "rights: [read, write]", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	srv.Signal(t, syscall.SIGHUP)
	wait.For(t, 10*time.Second, "the reload's log line", func() bool { return strings.Contains(srv.Stderr.String(), "access policy reloaded") })
	if r := srv.Ctl(t, append(as("reader"), "put", "app/k", "v2")...); r.Code != 0 {
		t.Fatalf("reader's put after the reload: status %d\n%s", r.Code, r.Stderr)
	}

	// A bad file is refused and the policy in force stays.
	if err := os.WriteFile(policy, []byte("clients: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv.Signal(t, syscall.SIGHUP)
	wait.For(t, 10*time.Second, "the failed reload's log line", func() bool { return strings.Contains(srv.Stderr.String(), "access policy not reloaded") })
	if r := srv.Ctl(t, append(as("reader"), "put", "app/k", "v3")...); r.Code != 0 {
		t.Fatalf("reader's put after a bad reload: status %d\n%s", r.Code, r.Stderr)
	}
	srv.Stop(t)
}

// TestAuthClusterFailover: real processes. A cluster whose nodes hold an
// access policy requires client certificates from the cluster CA even on
// loopback, holds clients to the policy on every leader, across a
// failover, and lets only an admin change its members.
func TestAuthClusterFailover(t *testing.T) {
	t.Parallel()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(testAuthPolicy+"  ops:\n    admin: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cl := proccluster.Start(t, proccluster.Config{Bins: bins, Direct: true, Clients: []string{"app", "reader", "ops"},
		Flags: []string{"--lease-term", "1s", "--auth-policy", policy}})
	ctl := func(who string, args ...string) clitest.Result {
		t.Helper()
		cert, key := cl.ClientCert(who)
		return clitest.Cmd{}.Run(t, bins.Leasectl, append([]string{"--endpoints", cl.Endpoints(), "--cacert", cl.CAFile, "--cert", cert, "--key", key, "--timeout", "20s"}, args...)...)
	}
	write := func(when string) {
		t.Helper()
		if r := ctl("app", "put", "app/k", when); r.Code != 0 {
			t.Fatalf("app's put %s: status %d\n%s", when, r.Code, r.Stderr)
		}
		if r := ctl("reader", "put", "app/k", "x"); r.Code != 1 || !strings.Contains(r.Stderr, `client "reader" lacks the write right`) {
			t.Fatalf("reader's put %s: status %d\n%s", when, r.Code, r.Stderr)
		}
		if r := ctl("reader", "get", "--print-value-only", "app/k"); r.Code != 0 || r.Stdout != when {
			t.Fatalf("reader's get %s: status %d, %q\n%s", when, r.Code, r.Stdout, r.Stderr)
		}
	}
	write("before")
	r := clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoints", cl.Endpoints(), "--cacert", cl.CAFile, "--timeout", "5s", "get", "app/k")
	if r.Code == 0 || !strings.Contains(r.Stderr, "certificate required") {
		t.Fatalf("get without a certificate on loopback: status %d\n%s", r.Code, r.Stderr)
	}
	if r := ctl("reader", "member", "list"); r.Code != 0 {
		t.Fatalf("reader's member list, which needs no right: status %d\n%s", r.Code, r.Stderr)
	}
	lead := cl.Leader()
	if r := ctl("reader", "member", "transfer"); r.Code != 1 || !strings.Contains(r.Stderr, `client "reader" lacks the admin right`) {
		t.Fatalf("reader's member transfer: status %d\n%s", r.Code, r.Stderr)
	}
	if r := ctl("ops", "member", "transfer"); r.Code != 0 {
		t.Fatalf("ops' member transfer: status %d\n%s", r.Code, r.Stderr)
	}
	if next := cl.Leader(); next.Name == lead.Name {
		t.Fatalf("%s still leads after the transfer", lead.Name)
	}
	write("after a transfer")
	cl.Kill(cl.Leader().Name)
	write("after a failover")
}

// TestInsecureNoClientAuthWarns: serving beyond loopback without client
// certificates is logged as a warning that says what it allows.
func TestInsecureNoClientAuthWarns(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	o := &options{listen: "0.0.0.0:7400", insecureNoClient: true}
	o.warnAuth(log)
	if out := buf.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "anyone who reaches the port may read and write every key") {
		t.Fatalf("log: %q", out)
	}
	buf.Reset()
	o.listen = "127.0.0.1:7400"
	o.warnAuth(log)
	if buf.Len() != 0 {
		t.Fatalf("on loopback the flag changes nothing and deserves no warning; log: %q", buf.String())
	}
}

// countReloads counts the reloads of an access policy.
type countReloads struct{ n atomic.Int32 }

func (c *countReloads) ReloadPolicy() error { c.n.Add(1); return nil }

// TestHUPDuringStart: a SIGHUP that comes while the server starts is not
// lost: the policy is read again once the server serves, once however many
// came; later ones reload at once; other signals pass through.
func TestHUPDuringStart(t *testing.T) {
	sigs := make(chan os.Signal)
	var logs bytes.Buffer
	h := filterHUP(slog.New(slog.NewTextHandler(&logs, nil)), sigs, true)
	defer h.stop()
	sigs <- syscall.SIGHUP
	sigs <- syscall.SIGHUP
	sigs <- syscall.SIGTERM // handled after both SIGHUPs: the filter reads in order
	if got := <-h.out; got != syscall.SIGTERM {
		t.Fatalf("passed on %v, want SIGTERM", got)
	}
	var r countReloads
	h.serving(&r)
	if n := r.n.Load(); n != 1 {
		t.Fatalf("%d reloads once serving after two early SIGHUPs, want 1", n)
	}
	sigs <- syscall.SIGHUP
	sigs <- syscall.SIGINT
	<-h.out
	if n := r.n.Load(); n != 2 {
		t.Fatalf("%d reloads after a SIGHUP while serving, want 2", n)
	}
	if !strings.Contains(logs.String(), "read again once it serves") {
		t.Fatalf("the early SIGHUP was not logged: %s", logs.String())
	}
}

// TestHUPWithoutPolicy: without an access policy a SIGHUP reloads nothing.
func TestHUPWithoutPolicy(t *testing.T) {
	sigs := make(chan os.Signal)
	h := filterHUP(slog.New(slog.DiscardHandler), sigs, false)
	defer h.stop()
	var r countReloads
	sigs <- syscall.SIGHUP
	h.serving(&r)
	sigs <- syscall.SIGHUP
	sigs <- syscall.SIGTERM
	<-h.out
	if n := r.n.Load(); n != 0 {
		t.Fatalf("%d reloads without a policy, want 0", n)
	}
}
