package tlsfiles

import (
	"bytes"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// cluster is a CA made by CreateCA with node and client certificates issued
// from it.
type cluster struct {
	caDir, caFile string
}

func newCluster(t *testing.T) cluster {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ca")
	if err := CreateCA(dir); err != nil {
		t.Fatalf("CreateCA: %v", err)
	}
	return cluster{caDir: dir, caFile: filepath.Join(dir, CAFileName)}
}

// pair is a certificate and key file.
type pair struct{ cert, key string }

func (c cluster) node(t *testing.T, name string, hosts ...string) pair {
	t.Helper()
	cert, key, err := IssueNode(c.caDir, filepath.Join(filepath.Dir(c.caDir), "out"), name, hosts)
	if err != nil {
		t.Fatalf("IssueNode(%s): %v", name, err)
	}
	return pair{cert, key}
}

func (c cluster) client(t *testing.T, name string) pair {
	t.Helper()
	cert, key, err := IssueClient(c.caDir, filepath.Join(filepath.Dir(c.caDir), "out"), name)
	if err != nil {
		t.Fatalf("IssueClient(%s): %v", name, err)
	}
	return pair{cert, key}
}

// peerTLS returns the PeerTLS configs of p.
func (c cluster) peerTLS(t *testing.T, p pair) (server, client *tls.Config) {
	t.Helper()
	server, client, err := PeerTLS(c.caFile, p.cert, p.key)
	if err != nil {
		t.Fatalf("PeerTLS(%s): %v", filepath.Base(p.cert), err)
	}
	return server, client
}

// unchecked returns configs like PeerTLS's for p but without its checks, as
// a peer that does not play by the rules would have them.
func (c cluster) unchecked(t *testing.T, p pair) (server, client *tls.Config) {
	t.Helper()
	kp, err := tls.LoadX509KeyPair(p.cert, p.key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(mustReadFile(t, c.caFile))
	server = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{kp}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool}
	client = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{kp}, RootCAs: pool}
	return server, client
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	return parsePEMCert(t, mustReadFile(t, path))
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	if runtime.GOOS == "windows" {
		return
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := info.Mode().Perm(); got != want {
		t.Errorf("%s has mode %#o, want %#o", filepath.Base(path), got, want)
	}
}

// snapshot returns the contents of files, to check later that they did not
// change.
func snapshot(t *testing.T, files ...string) map[string][]byte {
	t.Helper()
	m := make(map[string][]byte)
	for _, f := range files {
		m[f] = mustReadFile(t, f)
	}
	return m
}

func checkUnchanged(t *testing.T, before map[string][]byte) {
	t.Helper()
	for f, b := range before {
		if !bytes.Equal(b, mustReadFile(t, f)) {
			t.Errorf("%s changed", filepath.Base(f))
		}
	}
}

func TestCreateCA(t *testing.T) {
	c := newCluster(t)
	caKey := filepath.Join(c.caDir, CAKeyFileName)
	ca := readCert(t, c.caFile)
	if !ca.IsCA || ca.Subject.CommonName != "leased cluster CA" || !ca.MaxPathLenZero {
		t.Errorf("CA: IsCA %v, CommonName %q, MaxPathLenZero %v", ca.IsCA, ca.Subject.CommonName, ca.MaxPathLenZero)
	}
	if err := ca.CheckSignatureFrom(ca); err != nil {
		t.Errorf("CA is not self-signed: %v", err)
	}
	checkMode(t, caKey, 0o600)
	checkMode(t, c.caFile, 0o644)
	checkMode(t, c.caDir, 0o700)

	// A second CreateCA refuses and changes nothing, even when only one of
	// the files is there.
	before := snapshot(t, c.caFile, caKey)
	if err := CreateCA(c.caDir); !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), c.caFile) {
		t.Errorf("CreateCA over an existing CA: err = %v, want one naming %s", err, c.caFile)
	}
	checkUnchanged(t, before)
	mustRemove(t, c.caFile)
	if err := CreateCA(c.caDir); !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), caKey) {
		t.Errorf("CreateCA over an existing CA key: err = %v, want one naming %s", err, caKey)
	}
	checkUnchanged(t, map[string][]byte{caKey: before[caKey]})
	if _, err := os.Stat(c.caFile); err == nil {
		t.Error("CreateCA wrote ca.pem next to an existing ca-key.pem")
	}
}

func TestIssueNode(t *testing.T) {
	c := newCluster(t)
	p := c.node(t, "n1", "n1.example.com", "10.0.0.1", "[2001:db8::1]")
	if want := filepath.Join(filepath.Dir(c.caDir), "out", "n1.pem"); p.cert != want {
		t.Errorf("certificate file %s, want %s", p.cert, want)
	}
	if want := filepath.Join(filepath.Dir(c.caDir), "out", "n1-key.pem"); p.key != want {
		t.Errorf("key file %s, want %s", p.key, want)
	}
	checkMode(t, p.key, 0o600)
	checkMode(t, p.cert, 0o644)

	leaf := readCert(t, p.cert)
	if leaf.Subject.CommonName != "n1" || leaf.IsCA {
		t.Errorf("CommonName %q, IsCA %v", leaf.Subject.CommonName, leaf.IsCA)
	}
	if want := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}; !slices.Equal(leaf.ExtKeyUsage, want) {
		t.Errorf("ExtKeyUsage %v, want %v", leaf.ExtKeyUsage, want)
	}
	// The given hosts and loopback, and not the issuing machine's name.
	if want := []string{"localhost", "n1.example.com"}; !slices.Equal(leaf.DNSNames, want) {
		t.Errorf("DNSNames %q, want %q", leaf.DNSNames, want)
	}
	var ips []string
	for _, ip := range leaf.IPAddresses {
		ips = append(ips, ip.String())
	}
	if want := []string{"127.0.0.1", "::1", "10.0.0.1", "2001:db8::1"}; !slices.Equal(ips, want) {
		t.Errorf("IPAddresses %q, want %q", ips, want)
	}
	pool := x509.NewCertPool()
	pool.AddCert(readCert(t, c.caFile))
	for _, host := range []string{"n1.example.com", "10.0.0.1", "localhost"} {
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("does not verify for %s, usage %v: %v", host, usage, err)
			}
		}
	}

	// It never replaces a file, and refuses before touching the other one.
	before := snapshot(t, p.cert, p.key)
	if _, _, err := IssueNode(c.caDir, filepath.Dir(p.cert), "n1", nil); !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), p.cert) {
		t.Errorf("IssueNode over existing files: err = %v, want one naming %s", err, p.cert)
	}
	mustRemove(t, p.cert)
	if _, _, err := IssueNode(c.caDir, filepath.Dir(p.cert), "n1", nil); !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), p.key) {
		t.Errorf("IssueNode over an existing key: err = %v, want one naming %s", err, p.key)
	}
	checkUnchanged(t, map[string][]byte{p.key: before[p.key]})
	if _, err := os.Stat(p.cert); err == nil {
		t.Error("IssueNode wrote a certificate next to an existing key")
	}
	// Nor the CA's files, whatever the name.
	if _, _, err := IssueNode(c.caDir, c.caDir, "ca", nil); !errors.Is(err, ErrBadName) {
		t.Errorf(`IssueNode named "ca" into the CA folder: err = %v, want ErrBadName`, err)
	}
}

func TestIssueBadInput(t *testing.T) {
	c := newCluster(t)
	out := t.TempDir()
	for _, name := range []string{"", "../n1", "n1/x", ".hidden", "-n1", "n 1", "CA", strings.Repeat("n", 65)} {
		if _, _, err := IssueNode(c.caDir, out, name, nil); !errors.Is(err, ErrBadName) {
			t.Errorf("IssueNode(name %q): err = %v, want ErrBadName", name, err)
		}
		if _, _, err := IssueClient(c.caDir, out, name); !errors.Is(err, ErrBadName) {
			t.Errorf("IssueClient(name %q): err = %v, want ErrBadName", name, err)
		}
		if _, _, err := EnsureNode(c.caDir, out, name, nil); !errors.Is(err, ErrBadName) {
			t.Errorf("EnsureNode(name %q): err = %v, want ErrBadName", name, err)
		}
	}
	for _, host := range []string{"n1.example.com:7500", "bad host", "fe80::1%eth0"} {
		if _, _, err := IssueNode(c.caDir, out, "n1", []string{host}); !errors.Is(err, ErrBadHost) || !strings.Contains(err.Error(), host) {
			t.Errorf("IssueNode(host %q): err = %v, want ErrBadHost naming it", host, err)
		}
		if _, _, err := EnsureNode(c.caDir, out, "n1", []string{host}); !errors.Is(err, ErrBadHost) {
			t.Errorf("EnsureNode(host %q): err = %v, want ErrBadHost", host, err)
		}
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("bad input left %d files in the output folder", len(entries))
	}

	// A missing or incomplete CA.
	missing := filepath.Join(t.TempDir(), "none")
	if _, _, err := IssueNode(missing, out, "n1", nil); err == nil || !strings.Contains(err.Error(), filepath.Join(missing, CAFileName)) {
		t.Errorf("IssueNode without a CA: err = %v", err)
	}
	mustRemove(t, filepath.Join(c.caDir, CAKeyFileName))
	if _, _, err := IssueClient(c.caDir, out, "c1"); err == nil || !strings.Contains(err.Error(), filepath.Join(c.caDir, CAKeyFileName)) {
		t.Errorf("IssueClient without a CA key: err = %v", err)
	}
}

func TestIssueClient(t *testing.T) {
	c := newCluster(t)
	p := c.client(t, "app-1.example")
	checkMode(t, p.key, 0o600)
	leaf := readCert(t, p.cert)
	if leaf.Subject.CommonName != "app-1.example" || leaf.IsCA {
		t.Errorf("CommonName %q, IsCA %v", leaf.Subject.CommonName, leaf.IsCA)
	}
	if want := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}; !slices.Equal(leaf.ExtKeyUsage, want) {
		t.Errorf("ExtKeyUsage %v, want %v", leaf.ExtKeyUsage, want)
	}
	if len(leaf.DNSNames)+len(leaf.IPAddresses) != 0 {
		t.Errorf("client certificate names hosts %q %v", leaf.DNSNames, leaf.IPAddresses)
	}
	before := snapshot(t, p.cert, p.key)
	if _, _, err := IssueClient(c.caDir, filepath.Dir(p.cert), "app-1.example"); !errors.Is(err, fs.ErrExist) {
		t.Errorf("IssueClient over existing files: err = %v", err)
	}
	checkUnchanged(t, before)
}

func TestPeerTLS(t *testing.T) {
	c := newCluster(t)
	a, b := c.node(t, "a", "127.0.0.1"), c.node(t, "b")
	aServer, aClient := c.peerTLS(t, a)
	bServer, bClient := c.peerTLS(t, b)
	for _, cfg := range []*tls.Config{aServer, aClient} {
		if cfg.MinVersion != tls.VersionTLS13 || len(cfg.Certificates) != 1 {
			t.Errorf("config: MinVersion %#x, %d certificates", cfg.MinVersion, len(cfg.Certificates))
		}
	}
	if aServer.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Errorf("server ClientAuth = %v", aServer.ClientAuth)
	}

	// Nodes of one CA talk, both ways; the dialler's host names the server.
	for _, tc := range []struct {
		name           string
		server, client *tls.Config
		want           string // the server's CommonName
	}{
		{"a to b", bServer, aClient, "b"},
		{"b to a", aServer, bClient, "a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := handshake(t, tc.server, tc.client)
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if st.Version != tls.VersionTLS13 {
				t.Errorf("Version = %#x, want TLS 1.3", st.Version)
			}
			if got := st.PeerCertificates[0].Subject.CommonName; got != tc.want {
				t.Errorf("server is %q, want %q", got, tc.want)
			}
		})
	}

	// refused checks that a handshake fails with an error containing want.
	refused := func(t *testing.T, server, client *tls.Config, want string) {
		t.Helper()
		_, err := handshake(t, server, client)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("handshake: err = %v, want a refusal saying %q", err, want)
		}
	}

	t.Run("name mismatch", func(t *testing.T) {
		// The client verifies the name it dials: b's certificate does not
		// name n9.example.com, although the CA signed it.
		cfg := aClient.Clone()
		cfg.ServerName = "n9.example.com"
		refused(t, bServer, cfg, "not n9.example.com")
	})

	t.Run("foreign CA", func(t *testing.T) {
		other := newCluster(t)
		x := other.node(t, "a", "127.0.0.1")
		xServer, xClient := other.peerTLS(t, x)
		refused(t, aServer, xClient, "unknown authority")
		refused(t, xServer, aClient, "unknown authority")
		if _, _, err := PeerTLS(c.caFile, x.cert, x.key); err == nil || !strings.Contains(err.Error(), x.cert) {
			t.Errorf("PeerTLS with a certificate of another CA: err = %v", err)
		}
	})

	// lacking issues a certificate of the cluster's CA for loopback with
	// only usage, as IssueNode would but with one usage too few.
	lacking := func(t *testing.T, usage x509.ExtKeyUsage) pair {
		t.Helper()
		ca, caKey, err := loadCA(c.caDir, true, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		names, err := hostAltNames(nil)
		if err != nil {
			t.Fatal(err)
		}
		certPEM, keyPEM, err := issueLeaf(ca, caKey, "rogue", []x509.ExtKeyUsage{usage}, names, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		cert, key := leafPaths(t.TempDir(), "rogue")
		if err := replacePair(cert, key, certPEM, keyPEM); err != nil {
			t.Fatal(err)
		}
		return pair{cert, key}
	}

	t.Run("client certificate", func(t *testing.T) {
		// Signed by the same CA, but a client certificate cannot be a peer,
		// as a dialler (the server's check of the key usages refuses it) or
		// as a server (the chain does not allow server authentication).
		cc := c.client(t, "c")
		_, ccClient := c.unchecked(t, cc)
		refused(t, aServer, ccClient, `peer "c" is not a node`)
		ccServer, _ := c.unchecked(t, lacking(t, x509.ExtKeyUsageClientAuth))
		refused(t, ccServer, aClient, "incompatible key usage")
		if _, _, err := PeerTLS(c.caFile, cc.cert, cc.key); err == nil || !strings.Contains(err.Error(), cc.cert) {
			t.Errorf("PeerTLS with a client certificate: err = %v", err)
		}
	})

	t.Run("server-only certificate", func(t *testing.T) {
		// A certificate for server authentication only cannot be a peer
		// either: the dialler's check of the key usages refuses it as a
		// server, and the chain does not allow it to dial.
		so := lacking(t, x509.ExtKeyUsageServerAuth)
		soServer, soClient := c.unchecked(t, so)
		refused(t, soServer, aClient, `peer "rogue" is not a node`)
		refused(t, aServer, soClient, "incompatible key usage")
		if _, _, err := PeerTLS(c.caFile, so.cert, so.key); err == nil || !strings.Contains(err.Error(), so.cert) {
			t.Errorf("PeerTLS with a server-only certificate: err = %v", err)
		}
	})

	t.Run("bad files", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "missing.pem")
		if _, _, err := PeerTLS(missing, a.cert, a.key); err == nil || !strings.Contains(err.Error(), missing) {
			t.Errorf("missing CA: err = %v", err)
		}
		if _, _, err := PeerTLS(a.key, a.cert, a.key); err == nil || !strings.Contains(err.Error(), a.key) {
			t.Errorf("CA file with no certificate: err = %v", err)
		}
		if _, _, err := PeerTLS(c.caFile, a.cert, b.key); err == nil || !strings.Contains(err.Error(), a.cert) {
			t.Errorf("mismatched key: err = %v", err)
		}
	})
}

func TestEnsureNode(t *testing.T) {
	c := newCluster(t)
	nodeDir := filepath.Join(t.TempDir(), "node")
	ensure := func(hosts ...string) pair {
		t.Helper()
		cert, key, err := EnsureNode(c.caDir, nodeDir, "n1", hosts)
		if err != nil {
			t.Fatalf("EnsureNode(%q): %v", hosts, err)
		}
		return pair{cert, key}
	}

	// First start: issued.
	p := ensure("n1.example.com")
	if p.cert != filepath.Join(nodeDir, "n1.pem") || p.key != filepath.Join(nodeDir, "n1-key.pem") {
		t.Fatalf("files %v", p)
	}
	checkMode(t, p.key, 0o600)
	checkMode(t, nodeDir, 0o700)
	if _, _, err := PeerTLS(c.caFile, p.cert, p.key); err != nil {
		t.Fatalf("PeerTLS of the issued certificate: %v", err)
	}

	// Later starts reuse it, even without the CA key, and with a subset of
	// its hosts.
	before := snapshot(t, p.cert, p.key)
	caKey := filepath.Join(c.caDir, CAKeyFileName)
	caKeyPEM := mustReadFile(t, caKey)
	mustRemove(t, caKey)
	ensure("n1.example.com")
	ensure()
	checkUnchanged(t, before)

	// A host it lacks needs a new certificate, and so the CA key.
	if _, _, err := EnsureNode(c.caDir, nodeDir, "n1", []string{"10.0.0.1"}); err == nil || !strings.Contains(err.Error(), caKey) || !strings.Contains(err.Error(), "10.0.0.1") {
		t.Errorf("new host without the CA key: err = %v", err)
	}
	checkUnchanged(t, before)
	if err := os.WriteFile(caKey, caKeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	p = ensure("10.0.0.1")
	if leaf := readCert(t, p.cert); !containsIP(leaf.IPAddresses, net.ParseIP("10.0.0.1")) {
		t.Errorf("reissued certificate lacks the new host: %v", leaf.IPAddresses)
	}

	// A missing file is reissued.
	for _, f := range []string{p.cert, p.key} {
		before := snapshot(t, p.cert)
		mustRemove(t, f)
		ensure()
		if bytes.Equal(before[p.cert], mustReadFile(t, p.cert)) {
			t.Errorf("%s missing: not reissued", filepath.Base(f))
		}
		if _, _, err := PeerTLS(c.caFile, p.cert, p.key); err != nil {
			t.Errorf("%s missing: the reissued pair does not work: %v", filepath.Base(f), err)
		}
	}
}

func TestEnsureNodeReissues(t *testing.T) {
	c := newCluster(t)
	ca, caKey, err := loadCA(c.caDir, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	other := newCluster(t)
	otherCA, otherKey, err := loadCA(other.caDir, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	names, err := hostAltNames(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		ca      *x509.Certificate
		caKey   crypto.Signer
		issued  time.Time
		because string
	}{
		{"expiring", ca, caKey, time.Now().Add(-serverValidity + 29*24*time.Hour), "expires"},
		{"other CA", otherCA, otherKey, time.Now(), "not signed by the CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodeDir := t.TempDir()
			cert, key := leafPaths(nodeDir, "n1")
			certPEM, keyPEM, err := issueLeaf(tc.ca, tc.caKey, "n1", nodeUsages, names, tc.issued)
			if err != nil {
				t.Fatal(err)
			}
			if err := replacePair(cert, key, certPEM, keyPEM); err != nil {
				t.Fatal(err)
			}

			// Without the CA key it says why it must reissue.
			caKeyFile := filepath.Join(c.caDir, CAKeyFileName)
			caKeyPEM := mustReadFile(t, caKeyFile)
			mustRemove(t, caKeyFile)
			if _, _, err := EnsureNode(c.caDir, nodeDir, "n1", nil); err == nil || !strings.Contains(err.Error(), tc.because) {
				t.Errorf("without the CA key: err = %v, want one saying %q", err, tc.because)
			}
			if err := os.WriteFile(caKeyFile, caKeyPEM, 0o600); err != nil {
				t.Fatal(err)
			}

			if _, _, err := EnsureNode(c.caDir, nodeDir, "n1", nil); err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(certPEM, mustReadFile(t, cert)) || bytes.Equal(keyPEM, mustReadFile(t, key)) {
				t.Fatal("not reissued")
			}
			if _, _, err := PeerTLS(c.caFile, cert, key); err != nil {
				t.Errorf("the reissued pair does not work: %v", err)
			}
		})
	}
}

func TestEnsureNodeRefuses(t *testing.T) {
	c := newCluster(t)
	other := c.node(t, "n2")
	client := c.client(t, "c1")
	tests := []struct {
		name   string
		file   string // the file the error must name: "cert" or "key"
		damage func(t *testing.T, p pair)
	}{
		{"garbage certificate", "cert", func(t *testing.T, p pair) {
			os.WriteFile(p.cert, []byte("not a certificate\n"), 0o644)
		}},
		{"empty certificate", "cert", func(t *testing.T, p pair) {
			os.WriteFile(p.cert, nil, 0o644)
		}},
		{"garbage key", "key", func(t *testing.T, p pair) {
			os.WriteFile(p.key, []byte("garbage"), 0o600)
		}},
		{"key does not match", "key", func(t *testing.T, p pair) {
			os.WriteFile(p.key, mustReadFile(t, other.key), 0o600)
		}},
		{"another node's certificate", "cert", func(t *testing.T, p pair) {
			os.WriteFile(p.cert, mustReadFile(t, other.cert), 0o644)
			os.WriteFile(p.key, mustReadFile(t, other.key), 0o600)
		}},
		{"a client certificate", "cert", func(t *testing.T, p pair) {
			os.WriteFile(p.cert, mustReadFile(t, client.cert), 0o644)
			os.WriteFile(p.key, mustReadFile(t, client.key), 0o600)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			nodeDir := t.TempDir()
			cert, key, err := EnsureNode(c.caDir, nodeDir, "n1", nil)
			if err != nil {
				t.Fatal(err)
			}
			p := pair{cert, key}
			tt.damage(t, p)
			before := snapshot(t, p.cert, p.key)
			want := map[string]string{"cert": p.cert, "key": p.key}[tt.file]
			if _, _, err := EnsureNode(c.caDir, nodeDir, "n1", nil); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want one naming %s", err, want)
			}
			checkUnchanged(t, before)
		})
	}

	t.Run("corrupt CA", func(t *testing.T) {
		c := newCluster(t)
		nodeDir := t.TempDir()
		if _, _, err := EnsureNode(c.caDir, nodeDir, "n1", nil); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(c.caFile, []byte("garbage"), 0o644)
		if _, _, err := EnsureNode(c.caDir, nodeDir, "n1", nil); err == nil || !strings.Contains(err.Error(), c.caFile) {
			t.Errorf("err = %v, want one naming %s", err, c.caFile)
		}
	})
}

func TestWriteFileNew(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f.pem")
	if err := writeFileNew(path, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	checkMode(t, path, 0o600)
	err := writeFileNew(path, []byte("second"), 0o600)
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("second write: err = %v, want fs.ErrExist naming %s", err, path)
	}
	if got := mustReadFile(t, path); string(got) != "first" {
		t.Errorf("%s holds %q after a refused write", path, got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("folder holds %d files, want only %s", len(entries), filepath.Base(path))
	}
}

// TestCreateCAPermit: a cluster CA made with permitted hosts carries
// critical name constraints for them and for localhost and the loopback
// addresses; nodes under them are issued, and verify; a node certificate
// for any other name is refused, naming the host and what the CA permits,
// and nothing is written; Go's verifier refuses such a certificate even
// when the CA's key signs it. Bad or wildcard permitted hosts are refused.
func TestCreateCAPermit(t *testing.T) {
	dir := t.TempDir()
	caDir := filepath.Join(dir, "ca")
	if err := CreateCA(caDir, "Example.com", "10.0.0.0/8", "192.168.1.7"); err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, filepath.Join(caDir, CAFileName))
	if !ca.PermittedDNSDomainsCritical || !slices.Equal(ca.PermittedDNSDomains, []string{"localhost", "example.com"}) {
		t.Errorf("PermittedDNSDomains %q (critical %v), want localhost and example.com, critical", ca.PermittedDNSDomains, ca.PermittedDNSDomainsCritical)
	}
	var ranges []string
	for _, r := range ca.PermittedIPRanges {
		ranges = append(ranges, r.String())
	}
	if want := []string{"127.0.0.1/32", "::1/128", "192.168.1.7/32", "10.0.0.0/8"}; !slices.Equal(ranges, want) {
		t.Errorf("PermittedIPRanges %q, want %q", ranges, want)
	}

	out := filepath.Join(dir, "out")
	cert, _, err := IssueNode(caDir, out, "n1", []string{"n1.example.com", "10.1.2.3", "192.168.1.7", "*.n1.example.com"})
	if err != nil {
		t.Fatalf("a node under the permitted names: %v", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	if _, err := readCert(t, cert).Verify(x509.VerifyOptions{Roots: roots, DNSName: "n1.example.com", KeyUsages: nodeUsages}); err != nil {
		t.Errorf("the node certificate does not verify: %v", err)
	}

	for _, host := range []string{"n2.example.org", "10.0.0.0.example", "11.0.0.1", "192.168.1.8", "fd00::1"} {
		_, _, err := IssueNode(caDir, out, "n2", []string{host})
		if !errors.Is(err, ErrBadHost) || !strings.Contains(err.Error(), "may not sign for it") || !strings.Contains(err.Error(), "example.com") {
			t.Errorf("IssueNode for %s: %v, want ErrBadHost saying what the CA permits", host, err)
		}
		if _, err := os.Stat(filepath.Join(out, "n2.pem")); err == nil {
			t.Fatalf("IssueNode for %s wrote a certificate", host)
		}
		if _, _, err := EnsureNode(caDir, filepath.Join(dir, "n2"), "n2", []string{host}); !errors.Is(err, ErrBadHost) {
			t.Errorf("EnsureNode for %s: %v, want ErrBadHost", host, err)
		}
	}

	// Signed with the CA's key all the same, the certificate is refused.
	caCert, caKey, err := loadCA(caDir, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var names altNames
	names.addDNS("bank.example", true)
	certPEM, _, err := issueLeaf(caCert, caKey, "rogue", nodeUsages, names, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(certPEM)
	rogue, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	var invalid x509.CertificateInvalidError
	if _, err := rogue.Verify(x509.VerifyOptions{Roots: roots, DNSName: "bank.example", KeyUsages: nodeUsages}); !errors.As(err, &invalid) || invalid.Reason != x509.CANotAuthorizedForThisName {
		t.Errorf("a certificate for bank.example from the constrained CA: %v, want the CA not authorized for this name", err)
	}

	for _, bad := range []string{"*.example.com", "bad host", "10.0.0.0/33", "com", "co.uk", "github.io", "COM."} {
		d := filepath.Join(dir, "bad")
		if err := CreateCA(d, bad); !errors.Is(err, ErrBadHost) || !strings.Contains(err.Error(), bad) {
			t.Errorf("CreateCA permitting %q: %v, want ErrBadHost naming it", bad, err)
		}
		if _, err := os.Stat(d); err == nil {
			t.Errorf("CreateCA permitting %q made its folder", bad)
		}
	} // A host name of a private network is not a public suffix.
	if err := CreateCA(filepath.Join(dir, "private"), "db1", "corp.internal"); err != nil {
		t.Errorf("CreateCA permitting db1 and corp.internal: %v", err)
	}
}

// TestNodeWildcardHosts: node certificates take a wildcard host only
// under a domain someone can own.
func TestNodeWildcardHosts(t *testing.T) {
	c := newCluster(t)
	out := filepath.Join(t.TempDir(), "out")
	for _, host := range []string{"*.com", "*.co.uk", "*", "*.*.example.com", "a.*.example.com"} {
		if _, _, err := IssueNode(c.caDir, out, "n1", []string{host}); !errors.Is(err, ErrBadHost) || !strings.Contains(err.Error(), host) {
			t.Errorf("IssueNode with %q: %v, want ErrBadHost naming it", host, err)
		}
	}
	if _, _, err := IssueNode(c.caDir, out, "n1", []string{"*.example.com"}); err != nil {
		t.Errorf("IssueNode with *.example.com: %v", err)
	}
}
