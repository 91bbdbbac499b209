package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/leased/leased/internal/tlsfiles"
)

// runLeased runs leased in process with args and returns its exit status,
// stdout and stderr. The cert commands start no server, so no signals.
func runLeased(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = execute(args, nil, &out, &errOut, nil)
	return code, out.String(), errOut.String()
}

// mustRun runs leased with args and fails t unless it succeeds; it returns
// the lines of stdout.
func mustRun(t *testing.T, args ...string) []string {
	t.Helper()
	code, stdout, stderr := runLeased(args...)
	if code != exitOK || stderr != "" {
		t.Fatalf("leased %q: status %d\nstderr: %s", args, code, stderr)
	}
	return strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
}

func readCertFile(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatalf("%s: no PEM data", path)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// TestCertHelp checks that leased's help lists the cert command, and that
// each cert command has help of its own.
func TestCertHelp(t *testing.T) {
	if out := mustRun(t, "--help"); !slices.ContainsFunc(out, func(l string) bool { return strings.HasPrefix(strings.TrimSpace(l), "cert ") }) {
		t.Errorf("leased --help does not list cert:\n%s", strings.Join(out, "\n"))
	}
	for _, sub := range []string{"create-ca", "create-node", "create-client"} {
		if out := strings.Join(mustRun(t, "cert", sub, "--help"), "\n"); !strings.Contains(out, "leased cert "+sub) {
			t.Errorf("leased cert %s --help:\n%s", sub, out)
		}
	}
}

// TestCert makes a CA, a node certificate and a client certificate with
// the cert commands, and checks the files they print.
func TestCert(t *testing.T) {
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	nodeDir := filepath.Join(dir, "n1")
	clientDir := filepath.Join(dir, "app")

	caFile, caKey := filepath.Join(caDir, "ca.pem"), filepath.Join(caDir, "ca-key.pem")
	if got := mustRun(t, "cert", "create-ca", "--dir", caDir); !slices.Equal(got, []string{caFile, caKey}) {
		t.Errorf("create-ca printed %q, want %q", got, []string{caFile, caKey})
	}
	if ca := readCertFile(t, caFile); !ca.IsCA {
		t.Error("ca.pem is not a CA")
	}

	nodeCert, nodeKey := filepath.Join(nodeDir, "n1.pem"), filepath.Join(nodeDir, "n1-key.pem")
	got := mustRun(t, "cert", "create-node", "--ca-dir", caDir, "--name", "n1",
		"--host", "n1.example.com", "--host", "10.0.0.1", "--out", nodeDir)
	if !slices.Equal(got, []string{nodeCert, nodeKey}) {
		t.Errorf("create-node printed %q, want %q", got, []string{nodeCert, nodeKey})
	}
	node := readCertFile(t, nodeCert)
	if node.Subject.CommonName != "n1" || !slices.Contains(node.DNSNames, "n1.example.com") || len(node.IPAddresses) != 3 {
		t.Errorf("node certificate: CommonName %q, DNSNames %q, IPAddresses %v", node.Subject.CommonName, node.DNSNames, node.IPAddresses)
	}
	if _, _, err := tlsfiles.PeerTLS(caFile, nodeCert, nodeKey); err != nil {
		t.Errorf("the node certificate does not serve the peer port: %v", err)
	}

	clientCert, clientKey := filepath.Join(clientDir, "app.pem"), filepath.Join(clientDir, "app-key.pem")
	got = mustRun(t, "cert", "create-client", "--ca-dir", caDir, "--name", "app", "--out", clientDir)
	if !slices.Equal(got, []string{clientCert, clientKey}) {
		t.Errorf("create-client printed %q, want %q", got, []string{clientCert, clientKey})
	}
	client := readCertFile(t, clientCert)
	if client.Subject.CommonName != "app" || !slices.Equal(client.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
		t.Errorf("client certificate: CommonName %q, ExtKeyUsage %v", client.Subject.CommonName, client.ExtKeyUsage)
	}

	for _, key := range []string{caKey, nodeKey, clientKey} {
		info, err := os.Stat(key)
		if err != nil {
			t.Fatal(err)
		}
		if mode := info.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s has mode %#o, want 0600", filepath.Base(key), mode)
		}
	}
}

// TestCertErrors checks the status and message of each cert command's bad
// input: 2 for a bad command line, 1 for files that exist or a missing CA,
// and that nothing is written.
func TestCertErrors(t *testing.T) {
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	mustRun(t, "cert", "create-ca", "--dir", caDir)
	mustRun(t, "cert", "create-node", "--ca-dir", caDir, "--name", "n1", "--out", filepath.Join(dir, "n1"))
	mustRun(t, "cert", "create-client", "--ca-dir", caDir, "--name", "app", "--out", filepath.Join(dir, "app"))
	before := snapshotDir(t, dir)

	fresh := filepath.Join(dir, "fresh")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"cert"}, exitUsage, "needs a subcommand"},
		{[]string{"cert", "bogus"}, exitUsage, `unknown command "bogus"`},

		{[]string{"cert", "create-ca"}, exitUsage, "--dir is required"},
		{[]string{"cert", "create-ca", "--dir", fresh, "extra"}, exitUsage, "takes no arguments"},
		{[]string{"cert", "create-ca", "--dir", caDir}, exitError, filepath.Join(caDir, "ca.pem") + " already exists"},

		{[]string{"cert", "create-node", "--ca-dir", caDir, "--out", fresh}, exitUsage, "--name is required"},
		{[]string{"cert", "create-node", "--ca-dir", caDir, "--name", "n2", "--host", "bad host", "--out", fresh}, exitUsage, `"bad host"`},
		{[]string{"cert", "create-node", "--ca-dir", caDir, "--name", "n2", "--host", "", "--out", fresh}, exitUsage, "--host must not be empty"},
		{[]string{"cert", "create-node", "--ca-dir", caDir, "--name", "n2", "--host", "a.example.com,10.0.0.2", "--out", fresh}, exitUsage, `"a.example.com,10.0.0.2"`},
		{[]string{"cert", "create-node", "--ca-dir", caDir, "--name", "../n2", "--out", fresh}, exitUsage, `"../n2"`},
		{[]string{"cert", "create-node", "--ca-dir", caDir, "--name", "n1", "--out", filepath.Join(dir, "n1")}, exitError, "already exists"},
		{[]string{"cert", "create-node", "--ca-dir", caDir, "--name", "n2", "--out", fresh, "--bogus"}, exitUsage, "--bogus"},

		{[]string{"cert", "create-node", "--ca-dir", caDir, "--name", "n2", "--host", "*.com", "--out", fresh}, exitUsage, `"com" is a public suffix`},
		{[]string{"cert", "create-node", "--ca-dir", caDir, "--name", "n2", "--host", "a.*.example.com", "--out", fresh}, exitUsage, "a wildcard must be the whole first label"},
		{[]string{"cert", "create-ca", "--dir", fresh, "--permit-host", "*.example.com"}, exitUsage, "give the domain alone"},
		{[]string{"cert", "create-ca", "--dir", fresh, "--permit-host", "bad host"}, exitUsage, `"bad host"`},
		{[]string{"cert", "create-ca", "--dir", fresh, "--permit-host", ""}, exitUsage, "--permit-host must not be empty"},

		{[]string{"cert", "create-client", "--name", "app", "--out", fresh}, exitUsage, "--ca-dir is required"},
		{[]string{"cert", "create-client", "--ca-dir", fresh, "--name", "app", "--out", fresh}, exitError, filepath.Join(fresh, "ca.pem")},
		{[]string{"cert", "create-client", "--ca-dir", caDir, "--name", "app", "--out", filepath.Join(dir, "app")}, exitError, "already exists"},
	} {
		code, stdout, stderr := runLeased(tc.args...)
		if code != tc.code || !strings.HasPrefix(stderr, "Error: ") || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("leased %q: status %d, stdout %q, stderr %q; want status %d and an error containing %q",
				tc.args, code, stdout, stderr, tc.code, tc.want)
		}
		if code == exitUsage && !strings.Contains(stderr, "Run 'leased cert") {
			t.Errorf("leased %q: the usage hint does not name the cert command: %q", tc.args, stderr)
		}
	}
	if after := snapshotDir(t, dir); !maps.Equal(before, after) {
		t.Errorf("bad input changed the files: before %q, after %q", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
}

// snapshotDir returns the contents of every file under dir by path.
func snapshotDir(t *testing.T, dir string) map[string]string {
	t.Helper()
	m := make(map[string]string)
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		m[path] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCertPermitHost: a CA made with --permit-host carries critical name
// constraints; create-node issues certificates under them and refuses,
// as a bad command line that says what the CA permits, any other host,
// writing nothing.
func TestCertPermitHost(t *testing.T) {
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	mustRun(t, "cert", "create-ca", "--dir", caDir, "--permit-host", "example.com", "--permit-host", "10.0.0.0/8")
	ca := readCertFile(t, filepath.Join(caDir, "ca.pem"))
	if !ca.PermittedDNSDomainsCritical || !slices.Contains(ca.PermittedDNSDomains, "example.com") || len(ca.PermittedIPRanges) != 3 {
		t.Fatalf("CA constraints: DNS %q (critical %v), IP ranges %v", ca.PermittedDNSDomains, ca.PermittedDNSDomainsCritical, ca.PermittedIPRanges)
	}
	mustRun(t, "cert", "create-node", "--ca-dir", caDir, "--name", "n1", "--host", "n1.example.com", "--host", "10.1.2.3", "--out", filepath.Join(dir, "n1"))

	before := snapshotDir(t, dir)
	for _, host := range []string{"n2.example.org", "192.168.0.2"} {
		code, stdout, stderr := runLeased("cert", "create-node", "--ca-dir", caDir, "--name", "n2", "--host", host, "--out", filepath.Join(dir, "n2"))
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, host) || !strings.Contains(stderr, "may not sign for it") || !strings.Contains(stderr, "example.com") {
			t.Errorf("create-node --host %s: status %d, stderr %q; want status 2 naming the host and what the CA permits", host, code, stderr)
		}
	}
	if after := snapshotDir(t, dir); !maps.Equal(before, after) {
		t.Errorf("refused node certificates changed the files: before %q, after %q", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
}
