package client_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io/fs"
	"os"
	"strings"
	"testing"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/server"
)

// TestDialCertificateHint checks that Dial and DialAdmin, against a real
// server whose certificate does not verify, say what to change: the CA to
// pass (naming the one given, or the system's roots) or the name to dial,
// while the error still wraps the x509 error and ErrUnavailable.
func TestDialCertificateHint(t *testing.T) {
	srv := startServer(t, server.Config{})
	otherDir := t.TempDir()
	if _, err := server.LoadOrCreateTLS(otherDir, nil); err != nil {
		t.Fatalf("another server's TLS files: %v", err)
	}
	otherCA := server.CAPath(otherDir)
	pem, err := os.ReadFile(srv.CA())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatalf("%s holds no certificate", srv.CA())
	}

	unknownCA := func(err error) bool {
		var ua x509.UnknownAuthorityError
		return errors.As(err, &ua)
	}
	wrongHost := func(err error) bool {
		var he x509.HostnameError
		return errors.As(err, &he)
	}
	for _, tc := range []struct {
		name string
		cfg  client.Config
		is   func(error) bool // what the error must still wrap
		want []string         // in the error's text
	}{
		{"wrong CA file", client.Config{CAFile: otherCA}, unknownCA, []string{
			"x509: certificate signed by unknown authority",
			"not signed by the CA in Config.CAFile (" + otherCA + "): pass the server's CA, client.CAPath(<leased's data folder>)",
		}},
		{"system roots", client.Config{}, unknownCA, []string{
			"not signed by a CA in the system's roots (Config.CAFile is empty): pass the server's CA, client.CAPath(<leased's data folder>) as Config.CAFile",
		}},
		{"TLSConfig without the CA", client.Config{TLSConfig: &tls.Config{RootCAs: x509.NewCertPool()}}, unknownCA, []string{
			"not signed by a CA in Config.TLSConfig: add the server's CA, client.CAPath(<leased's data folder>) to its RootCAs",
		}},
		{"a name the certificate lacks", client.Config{TLSConfig: &tls.Config{RootCAs: roots, ServerName: "elsewhere.example"}}, wrongHost, []string{
			`does not name "elsewhere.example"`,
			"restart leased with --tls-host elsewhere.example, or connect by a name it has",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Logger = testkit.Discard()
			check := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s succeeded; want a certificate error", what)
				}
				t.Logf("%s: %v", what, err)
				if !tc.is(err) || !errors.Is(err, client.ErrUnavailable) {
					t.Errorf("%s: %v\nlost the x509 error or ErrUnavailable from its chain", what, err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("%s: %v\nwant it to say %q", what, err, w)
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			c, err := client.Dial(ctx, srv.Addr().String(), tc.cfg)
			if err == nil {
				c.Close()
			}
			check("Dial", err)
			a, err := client.DialAdmin(ctx, srv.Addr().String(), tc.cfg)
			if err == nil {
				a.Close()
			}
			check("DialAdmin", err)
		})
	}

	// The right CA: no hint, and a session.
	dial(t, srv, client.Config{})
}

// TestDialRelativeCAFileHint checks that a relative Config.CAFile that
// names no file, such as client.CAPath(client.DefaultDataDir) in a program
// that does not run where leased does, is an invalid argument that says the
// path was taken from the program's working folder, and keeps the file's
// error.
func TestDialRelativeCAFileHint(t *testing.T) {
	ca := client.CAPath(client.DefaultDataDir) // no such folder beside this test
	if _, err := os.Stat(ca); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s: %v; the test needs it absent", ca, err)
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	cfg := client.Config{CAFile: ca, Logger: testkit.Discard()}
	_, dialErr := client.Dial(ctx, "127.0.0.1:7400", cfg)
	_, adminErr := client.DialAdmin(ctx, "127.0.0.1:7400", cfg)
	for what, err := range map[string]error{"Dial": dialErr, "DialAdmin": adminErr} {
		if !errors.Is(err, client.ErrInvalidArgument) || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: %v; want ErrInvalidArgument and fs.ErrNotExist", what, err)
			continue
		}
		if want := "a relative path is taken from this program's working folder, " + wd + ", not leased's"; !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v\nwant it to say %q", what, err, want)
		}
	}
}
