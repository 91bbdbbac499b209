package tlsfiles

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// testALPN is the ALPN protocol the tests' configs offer.
const testALPN = "leased-test/1"

// testPaths are the four files LoadOrCreate keeps under a data folder.
type testPaths struct {
	dir, ca, caKey, cert, key string
}

func newTestPaths(dataDir string) testPaths {
	dir := filepath.Join(dataDir, DirName)
	return testPaths{
		dir:   dir,
		ca:    filepath.Join(dir, CAFileName),
		caKey: filepath.Join(dir, CAKeyFileName),
		cert:  filepath.Join(dir, CertFileName),
		key:   filepath.Join(dir, KeyFileName),
	}
}

func mustLoad(t *testing.T, dataDir string, extraHosts []string) *tls.Config {
	t.Helper()
	cfg, _ := mustLoadLog(t, dataDir, extraHosts)
	return cfg
}

// mustLoadLog is mustLoad, and returns what LoadOrCreate logged.
func mustLoadLog(t *testing.T, dataDir string, extraHosts []string) (*tls.Config, string) {
	t.Helper()
	var logged bytes.Buffer
	cfg, err := LoadOrCreate(dataDir, extraHosts, testALPN, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatalf("LoadOrCreate(%v): %v", extraHosts, err)
	}
	return cfg, logged.String()
}

// newCAWarning is what LoadOrCreate logs when it replaces a CA.
const newCAWarning = "clients must trust the new CA certificate"

// makeLegacy makes the TLS files of a data folder as an earlier version
// did: an unconstrained CA, valid 10 years, whose key is kept in
// ca-key.pem, and a server certificate issued from it at issued.
func makeLegacy(t *testing.T, dataDir string, issued time.Time) testPaths {
	t.Helper()
	p := newTestPaths(dataDir)
	if err := ensureDir(p.dir); err != nil {
		t.Fatal(err)
	}
	if err := createCA(p.ca, p.caKey, caCommonName, issued, writeFileAtomic, nil); err != nil {
		t.Fatal(err)
	}
	ca, caKey, err := loadCA(p.dir, true, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := serverAltNames(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := issueServer(p.cert, p.key, ca, caKey, hosts, issued); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustReadFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

// caPool returns a pool holding the CA of the data folder, built the way the
// CLI builds it: from CAPath.
func caPool(t *testing.T, dataDir string) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(mustReadFile(t, CAPath(dataDir))) {
		t.Fatalf("no certificate in %s", CAPath(dataDir))
	}
	return pool
}

// leafOf returns the server certificate of cfg.
func leafOf(t *testing.T, cfg *tls.Config) *x509.Certificate {
	t.Helper()
	if len(cfg.Certificates) != 1 {
		t.Fatalf("config has %d certificates, want 1", len(cfg.Certificates))
	}
	c := cfg.Certificates[0]
	if c.Leaf != nil {
		return c.Leaf
	}
	leaf, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return leaf
}

func parsePEMCert(t *testing.T, data []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func verifyServer(leaf *x509.Certificate, pool *x509.CertPool, host string) error {
	_, err := leaf.Verify(x509.VerifyOptions{
		DNSName:   host,
		Roots:     pool,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return err
}

func TestCAPath(t *testing.T) {
	got := CAPath(filepath.Join("var", "lib", "leased"))
	want := filepath.Join("var", "lib", "leased", "tls", "ca.pem")
	if got != want {
		t.Fatalf("CAPath = %q, want %q", got, want)
	}
}

func TestLoadOrCreateCreatesFiles(t *testing.T) {
	data := t.TempDir()
	cfg := mustLoad(t, data, nil)
	p := newTestPaths(data)

	for _, f := range []string{p.ca, p.cert, p.key} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("tls folder holds %v, want exactly ca.pem, server.pem and server-key.pem: the CA's key is not kept", names)
	}

	if cfg.MinVersion != tls.VersionTLS13 {
		t.Errorf("MinVersion = %#x, want TLS 1.3", cfg.MinVersion)
	}
	if !slices.Equal(cfg.NextProtos, []string{testALPN}) {
		t.Errorf("NextProtos = %q, want [%q]", cfg.NextProtos, testALPN)
	}

	if runtime.GOOS == "windows" {
		return
	}
	for _, f := range []string{p.key} {
		info, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if mode := info.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s has mode %#o, want 0600", f, mode)
		}
	}
	info, err := os.Stat(p.dir)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o700 {
		t.Errorf("%s has mode %#o, want 0700", p.dir, mode)
	}
}

func TestLoadOrCreateCertificates(t *testing.T) {
	data := t.TempDir()
	cfg := mustLoad(t, data, nil)
	leaf := leafOf(t, cfg)
	pool := caPool(t, data)

	for _, host := range []string{"localhost", "127.0.0.1", "::1"} {
		if err := verifyServer(leaf, pool, host); err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}
	if err := verifyServer(leaf, pool, "example.com"); err == nil {
		t.Error("leaf verified for example.com, a host it does not name")
	}

	// A fresh CA of another data folder must not verify this server.
	other := t.TempDir()
	mustLoad(t, other, nil)
	if err := verifyServer(leaf, caPool(t, other), "localhost"); err == nil {
		t.Error("leaf verified against a different CA")
	}

	ca := parsePEMCert(t, mustReadFile(t, CAPath(data)))
	if !ca.IsCA || !ca.MaxPathLenZero || ca.MaxPathLen != 0 {
		t.Errorf("CA: IsCA=%v MaxPathLen=%d MaxPathLenZero=%v", ca.IsCA, ca.MaxPathLen, ca.MaxPathLenZero)
	}
	if ca.Subject.CommonName != "leased local CA" {
		t.Errorf("CA CommonName = %q", ca.Subject.CommonName)
	}
	if ca.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageCRLSign {
		t.Errorf("CA KeyUsage = %v", ca.KeyUsage)
	}
	if ca.PublicKeyAlgorithm != x509.ECDSA || leaf.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("key algorithms: CA %v, server %v; want ECDSA", ca.PublicKeyAlgorithm, leaf.PublicKeyAlgorithm)
	}
	now := time.Now()
	if d := ca.NotAfter.Sub(now); d < 824*24*time.Hour || d > 826*24*time.Hour {
		t.Errorf("CA valid for %v more, want 825 days, as long as the one certificate it signs", d)
	}
	if d := leaf.NotAfter.Sub(now); d < 824*24*time.Hour || d > 826*24*time.Hour {
		t.Errorf("server certificate valid for %v more, want 825 days", d)
	}
	for _, c := range []*x509.Certificate{ca, leaf} {
		if !c.NotBefore.Before(now.Add(-30 * time.Minute)) {
			t.Errorf("%s NotBefore %v is not back-dated", c.Subject.CommonName, c.NotBefore)
		}
		if c.SerialNumber.Sign() <= 0 || c.SerialNumber.BitLen() > 128 {
			t.Errorf("%s serial %v is not a positive 128-bit number", c.Subject.CommonName, c.SerialNumber)
		}
	}
	if leaf.IsCA {
		t.Error("server certificate is a CA")
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}) {
		t.Errorf("server ExtKeyUsage = %v", leaf.ExtKeyUsage)
	}
	if host, err := os.Hostname(); err == nil && validDNSName(host) {
		if err := verifyServer(leaf, pool, host); err != nil {
			t.Errorf("verify for host name %s: %v", host, err)
		}
	}
}

func TestLoadOrCreateReuses(t *testing.T) {
	data := t.TempDir()
	p := newTestPaths(data)
	first := mustLoad(t, data, nil)
	ca, cert, key := mustReadFile(t, p.ca), mustReadFile(t, p.cert), mustReadFile(t, p.key)

	second := mustLoad(t, data, nil)
	if !bytes.Equal(ca, mustReadFile(t, p.ca)) {
		t.Error("ca.pem changed on the second call")
	}
	if !bytes.Equal(cert, mustReadFile(t, p.cert)) {
		t.Error("server.pem changed on the second call")
	}
	if !bytes.Equal(key, mustReadFile(t, p.key)) {
		t.Error("server-key.pem changed on the second call")
	}
	if !leafOf(t, first).Equal(leafOf(t, second)) {
		t.Error("second config serves a different certificate")
	}
}

func TestLoadOrCreateExtraHosts(t *testing.T) {
	data := t.TempDir()
	p := newTestPaths(data)
	mustLoad(t, data, nil)
	ca, cert := mustReadFile(t, p.ca), mustReadFile(t, p.cert)

	// The CA's key is gone and the CA may sign only for the old names: a
	// new host takes a new CA, and a warning that clients must trust it.
	extra := []string{"Lease.Example.internal", "10.1.2.3", "[fd00::7]", " "}
	cfg, logged := mustLoadLog(t, data, extra)
	if bytes.Equal(ca, mustReadFile(t, p.ca)) {
		t.Fatal("ca.pem kept, although the CA may not sign for the new extra hosts")
	}
	if !strings.Contains(logged, newCAWarning) || !strings.Contains(logged, "level=WARN") || !strings.Contains(logged, p.ca) {
		t.Errorf("log %q: want a warning that clients must trust the new %s", logged, p.ca)
	}
	if bytes.Equal(cert, mustReadFile(t, p.cert)) {
		t.Fatal("server.pem was not reissued for the new extra hosts")
	}
	leaf := leafOf(t, cfg)
	if !leaf.Equal(parsePEMCert(t, mustReadFile(t, p.cert))) {
		t.Error("config serves a certificate other than server.pem")
	}
	pool := caPool(t, data)
	for _, host := range []string{"lease.example.internal", "10.1.2.3", "fd00::7", "localhost", "127.0.0.1", "::1"} {
		if err := verifyServer(leaf, pool, host); err != nil {
			t.Errorf("verify for %s: %v", host, err)
		}
	}

	// The same hosts, or fewer, reuse the certificate and the CA, quietly.
	ca, cert = mustReadFile(t, p.ca), mustReadFile(t, p.cert)
	_, logged1 := mustLoadLog(t, data, []string{"10.1.2.3", "lease.example.internal."})
	_, logged2 := mustLoadLog(t, data, nil)
	if !bytes.Equal(cert, mustReadFile(t, p.cert)) || !bytes.Equal(ca, mustReadFile(t, p.ca)) {
		t.Error("server.pem or ca.pem replaced although the certificate names every requested host")
	}
	if logged1+logged2 != "" {
		t.Errorf("reusing the files logged %q", logged1+logged2)
	}
}

func TestLoadOrCreateBadExtraHost(t *testing.T) {
	data := t.TempDir()
	for _, host := range []string{"lease.example.com:4433", "bad host", "fe80::1%eth0"} {
		_, err := LoadOrCreate(data, []string{host}, testALPN, nil)
		if err == nil || !strings.Contains(err.Error(), host) {
			t.Errorf("extra host %q: err = %v, want an error naming it", host, err)
		}
	}
}

// TestLoadOrCreateReissuesMissingServerCert: without its server pair, a
// data folder gets a new CA with a new pair (there is no CA key to issue
// another from), and a warning that clients must trust the new CA.
func TestLoadOrCreateReissuesMissingServerCert(t *testing.T) {
	for _, missing := range []string{CertFileName, KeyFileName} {
		t.Run(missing, func(t *testing.T) {
			data := t.TempDir()
			p := newTestPaths(data)
			mustLoad(t, data, nil)
			ca, cert := mustReadFile(t, p.ca), mustReadFile(t, p.cert)
			mustRemove(t, filepath.Join(p.dir, missing))

			cfg, logged := mustLoadLog(t, data, nil)
			if bytes.Equal(ca, mustReadFile(t, p.ca)) {
				t.Fatal("ca.pem kept, although its key is gone")
			}
			if !strings.Contains(logged, newCAWarning) || !strings.Contains(logged, missing) {
				t.Errorf("log %q: want a warning that clients must trust the new CA, naming the missing %s", logged, missing)
			}
			if bytes.Equal(cert, mustReadFile(t, p.cert)) {
				t.Fatal("server.pem not reissued")
			}
			if _, err := os.Stat(p.key); err != nil {
				t.Fatal(err)
			}
			if err := verifyServer(leafOf(t, cfg), caPool(t, data), "localhost"); err != nil {
				t.Fatalf("reissued certificate: %v", err)
			}
		})
	}
}

// TestLoadOrCreateReissuesExpiring: a CA and server certificate that
// expire within 30 days are replaced, with a warning.
func TestLoadOrCreateReissuesExpiring(t *testing.T) {
	data := t.TempDir()
	p := newTestPaths(data)
	if err := ensureDir(p.dir); err != nil {
		t.Fatal(err)
	}
	hosts, err := serverAltNames(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Made 810 days ago: 15 days left.
	if _, _, err := createLocal(p.ca, p.cert, p.key, hosts, time.Now().Add(-810*24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	old := mustReadFile(t, p.ca)
	cfg, logged := mustLoadLog(t, data, nil)
	if bytes.Equal(old, mustReadFile(t, p.ca)) {
		t.Fatal("expiring CA not replaced")
	}
	if !strings.Contains(logged, newCAWarning) || !strings.Contains(logged, "expires") {
		t.Errorf("log %q: want a warning naming the expiry", logged)
	}
	if d := time.Until(leafOf(t, cfg).NotAfter); d < 800*24*time.Hour {
		t.Fatalf("reissued certificate valid for only %v", d)
	}
	if err := verifyServer(leafOf(t, cfg), caPool(t, data), "localhost"); err != nil {
		t.Fatal(err)
	}
}

// TestLoadOrCreateKeepsNoCAKey: no private key but the server's own is
// left anywhere in the data folder, after a first start and a reissue.
func TestLoadOrCreateKeepsNoCAKey(t *testing.T) {
	data := t.TempDir()
	mustLoad(t, data, nil)
	mustLoad(t, data, []string{"db1.example.com"})
	p := newTestPaths(data)
	err := filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if path != p.key && bytes.Contains(mustReadFile(t, path), []byte("PRIVATE KEY")) {
			t.Errorf("%s holds a private key: the CA's key must not be kept", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLoadOrCreateNameConstraints: the self-signed CA carries critical
// name constraints for exactly the server's names, and Go's verifier
// refuses a certificate it signed for any other name; the server's own
// certificate, a wildcard's names and the names under a permitted one
// verify.
func TestLoadOrCreateNameConstraints(t *testing.T) {
	extra := []string{"*.lease.example.com", "db1.example.com", "10.1.2.3"}
	data := t.TempDir()
	cfg := mustLoad(t, data, extra)
	ca := parsePEMCert(t, mustReadFile(t, CAPath(data)))
	if !ca.PermittedDNSDomainsCritical {
		t.Error("the name constraints are not critical")
	}
	for _, d := range []string{"localhost", "lease.example.com", "db1.example.com"} {
		if !slices.Contains(ca.PermittedDNSDomains, d) {
			t.Errorf("PermittedDNSDomains %q lacks %q", ca.PermittedDNSDomains, d)
		}
	}
	var ranges []string
	for _, r := range ca.PermittedIPRanges {
		ranges = append(ranges, r.String())
	}
	for _, r := range []string{"127.0.0.1/32", "::1/128", "10.1.2.3/32"} {
		if !slices.Contains(ranges, r) {
			t.Errorf("PermittedIPRanges %q lacks %s", ranges, r)
		}
	}
	pool := caPool(t, data)
	for _, host := range []string{"localhost", "127.0.0.1", "db1.example.com", "a.lease.example.com", "10.1.2.3"} {
		if err := verifyServer(leafOf(t, cfg), pool, host); err != nil {
			t.Errorf("the server's own certificate for %s: %v", host, err)
		}
	}

	// The same CA, made here with its key kept, signs for other names.
	hosts, err := serverAltNames(extra)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca, caKey, _, err := newCA(caCommonName, now, now.Add(serverValidity), &caNames{hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, tc := range []struct {
		host string
		ok   bool
	}{
		{"db1.example.com", true},
		{"x.db1.example.com", true},
		{"a.lease.example.com", true},
		{"example.com", false},
		{"db2.example.com", false},
		{"bank.example", false},
		{"10.1.2.4", false},
		{"192.168.0.1", false},
		{"fd00::1", false},
	} {
		var names altNames
		if ip := net.ParseIP(tc.host); ip != nil {
			names.addIP(ip, true)
		} else {
			names.addDNS(tc.host, true)
		}
		certPEM, _, err := issueLeaf(ca, caKey, "rogue", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, names, now)
		if err != nil {
			t.Fatal(err)
		}
		err = verifyServer(parsePEMCert(t, certPEM), roots, tc.host)
		var invalid x509.CertificateInvalidError
		switch {
		case tc.ok && err != nil:
			t.Errorf("a certificate for %s, a permitted name: %v", tc.host, err)
		case !tc.ok && (!errors.As(err, &invalid) || invalid.Reason != x509.CANotAuthorizedForThisName):
			t.Errorf("a certificate for %s: verify = %v, want the CA not authorized for this name", tc.host, err)
		}
		block, _ := pem.Decode(certPEM)
		if err := checkPermitted(block.Bytes, ca, "ca.pem", now); (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrBadHost)) {
			t.Errorf("checkPermitted for %s: %v", tc.host, err)
		}
	}
}

// TestLoadOrCreateLegacyCAKey: a data folder of an earlier version, with
// the CA's key in ca-key.pem, keeps its CA, which clients trust: its
// server certificate is reissued from that key when it must be, and every
// start warns that the key should go. Once the operator removes it, a
// reissue makes a new, constrained CA, with the warning that clients must
// trust it.
func TestLoadOrCreateLegacyCAKey(t *testing.T) {
	data := t.TempDir()
	p := makeLegacy(t, data, time.Now())
	ca := mustReadFile(t, p.ca)
	oldPool := caPool(t, data)

	_, logged := mustLoadLog(t, data, nil)
	if !strings.Contains(logged, "level=WARN") || !strings.Contains(logged, p.caKey) || !strings.Contains(logged, "remove it") {
		t.Errorf("log %q: want a warning naming %s", logged, p.caKey)
	}
	// A missing server certificate, then a new host: both reissued from
	// the old CA.
	mustRemove(t, p.cert)
	for _, host := range []string{"localhost", "db1.example.com"} {
		cfg, logged := mustLoadLog(t, data, []string{host})
		if !bytes.Equal(ca, mustReadFile(t, p.ca)) {
			t.Fatal("ca.pem of an earlier version replaced although its key is there")
		}
		if strings.Contains(logged, newCAWarning) || !strings.Contains(logged, p.caKey) {
			t.Errorf("log %q: want only the warning about %s", logged, p.caKey)
		}
		if err := verifyServer(leafOf(t, cfg), oldPool, host); err != nil {
			t.Fatalf("reissued from the old CA: %v", err)
		}
	}

	mustRemove(t, p.caKey)
	cfg, logged := mustLoadLog(t, data, []string{"db2.example.com"})
	if bytes.Equal(ca, mustReadFile(t, p.ca)) || !strings.Contains(logged, newCAWarning) {
		t.Fatalf("without the old key, a new host: log %q; want a new CA and a warning", logged)
	}
	if parsePEMCert(t, mustReadFile(t, p.ca)).PermittedDNSDomains == nil {
		t.Error("the new CA is not constrained")
	}
	if err := verifyServer(leafOf(t, cfg), caPool(t, data), "db2.example.com"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.caKey); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ca-key.pem after the new CA: %v", err)
	}
}

// TestWildcardHosts: a wildcard host is accepted only as the whole first
// label of a name under a domain someone can own, by CheckHost and
// LoadOrCreate alike (node certificates: see pki_test.go).
func TestWildcardHosts(t *testing.T) {
	for _, tc := range []struct {
		host string
		want string // "" if accepted
	}{
		{"*.example.com", ""},
		{"*.lease.example.co.uk", ""},
		{"*.EXAMPLE.com.", ""},
		{"*.com", `"com" is a public suffix`},
		{"*.co.uk", `"co.uk" is a public suffix`},
		{"*.github.io", `"github.io" is a public suffix`},
		{"*.localhost", `"localhost" is a public suffix`},
		{"*", "a wildcard must be the whole first label"},
		{"*.", "a wildcard must be the whole first label"},
		{"*.*.example.com", "a wildcard must be the whole first label"},
		{"a.*.example.com", "a wildcard must be the whole first label"},
		{"a*.example.com", "a wildcard must be the whole first label"},
	} {
		err := CheckHost(tc.host)
		if tc.want == "" {
			if err != nil {
				t.Errorf("CheckHost(%q): %v", tc.host, err)
			}
			continue
		}
		if !errors.Is(err, ErrBadHost) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.host) {
			t.Errorf("CheckHost(%q) = %v, want ErrBadHost naming it and saying %q", tc.host, err, tc.want)
		}
		data := t.TempDir()
		if _, err := LoadOrCreate(data, []string{tc.host}, testALPN, nil); !errors.Is(err, ErrBadHost) {
			t.Errorf("LoadOrCreate with %q: %v, want ErrBadHost", tc.host, err)
		}
		if _, err := os.Stat(filepath.Join(data, DirName)); err == nil {
			t.Errorf("LoadOrCreate with %q made the TLS folder", tc.host)
		}
	}
}

func TestLoadOrCreateCorruptFiles(t *testing.T) {
	tests := []struct {
		name   string
		file   string // the file the error must name
		damage func(t *testing.T, p testPaths)
	}{
		{"garbage ca.pem", CAFileName, func(t *testing.T, p testPaths) {
			os.WriteFile(p.ca, []byte("not a certificate\n"), 0o644)
		}},
		{"empty ca.pem", CAFileName, func(t *testing.T, p testPaths) {
			os.WriteFile(p.ca, nil, 0o644)
		}},
		{"bad DER in ca.pem", CAFileName, func(t *testing.T, p testPaths) {
			os.WriteFile(p.ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")}), 0o644)
		}},
		{"ca.pem is not a CA", CAFileName, func(t *testing.T, p testPaths) {
			os.WriteFile(p.ca, mustReadFile(t, p.cert), 0o644)
		}},
		{"garbage ca-key.pem", CAKeyFileName, func(t *testing.T, p testPaths) {
			os.WriteFile(p.caKey, []byte("garbage"), 0o600)
		}},
		{"ca-key.pem does not match", CAKeyFileName, func(t *testing.T, p testPaths) {
			os.WriteFile(p.caKey, mustReadFile(t, p.key), 0o600)
		}},
		{"garbage server.pem", CertFileName, func(t *testing.T, p testPaths) {
			os.WriteFile(p.cert, []byte("garbage"), 0o644)
		}},
		{"garbage server-key.pem", KeyFileName, func(t *testing.T, p testPaths) {
			os.WriteFile(p.key, []byte("garbage"), 0o600)
		}},
		{"server-key.pem does not match", KeyFileName, func(t *testing.T, p testPaths) {
			other := t.TempDir()
			mustLoad(t, other, nil)
			os.WriteFile(p.key, mustReadFile(t, newTestPaths(other).key), 0o600)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := t.TempDir()
			p := newTestPaths(data)
			mustLoad(t, data, nil)
			tt.damage(t, p)
			before := map[string][]byte{}
			for _, f := range []string{p.ca, p.caKey, p.cert, p.key} {
				if b, err := os.ReadFile(f); err == nil {
					before[f] = b
				}
			}

			_, err := LoadOrCreate(data, nil, testALPN, nil)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), filepath.Join(p.dir, tt.file)) {
				t.Errorf("error %q does not name %s", err, tt.file)
			}
			for f, b := range before {
				if !bytes.Equal(b, mustReadFile(t, f)) {
					t.Errorf("%s changed after the error", filepath.Base(f))
				}
			}
		})
	}
}

func TestLoadOrCreateMissingCA(t *testing.T) {
	// Without ca.pem there is no CA anyone can trust: a new one is made and
	// the server certificate is reissued from it. A CA key that an earlier
	// version left is removed with it.
	data := t.TempDir()
	p := makeLegacy(t, data, time.Now())
	mustRemove(t, p.ca)

	cfg := mustLoad(t, data, nil)
	if _, err := os.Stat(p.caKey); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ca-key.pem left beside the new CA: %v", err)
	}
	if err := verifyServer(leafOf(t, cfg), caPool(t, data), "localhost"); err != nil {
		t.Errorf("server certificate does not verify against the new CA: %v", err)
	}
}

func TestLoadPair(t *testing.T) {
	data := t.TempDir()
	p := newTestPaths(data)
	want := leafOf(t, mustLoad(t, data, nil))

	cfg, err := LoadPair(p.cert, p.key, testALPN)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS13 {
		t.Errorf("MinVersion = %#x, want TLS 1.3", cfg.MinVersion)
	}
	if !slices.Equal(cfg.NextProtos, []string{testALPN}) {
		t.Errorf("NextProtos = %q, want [%q]", cfg.NextProtos, testALPN)
	}
	if !leafOf(t, cfg).Equal(want) {
		t.Error("LoadPair serves a different certificate")
	}

	missing := filepath.Join(data, "nope.pem")
	if _, err := LoadPair(missing, p.key, testALPN); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing certificate: err = %v", err)
	}
	if _, err := LoadPair(p.cert, missing, testALPN); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing key: err = %v", err)
	}
	other := t.TempDir()
	mustLoad(t, other, nil)
	if _, err := LoadPair(p.cert, newTestPaths(other).key, testALPN); err == nil || !strings.Contains(err.Error(), p.cert) {
		t.Errorf("mismatched key: err = %v", err)
	}
}

// handshake runs a TLS handshake between server and client over a loopback
// TCP connection and returns the client's connection state.
func handshake(t *testing.T, server, client *tls.Config) (tls.ConnectionState, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	serverErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			serverErr <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		serverErr <- tls.Server(c, server).Handshake()
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := tls.Dialer{Config: client}
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		<-serverErr
		return tls.ConnectionState{}, err
	}
	defer c.Close()
	if err := <-serverErr; err != nil {
		return tls.ConnectionState{}, err
	}
	return c.(*tls.Conn).ConnectionState(), nil
}

func TestHandshake(t *testing.T) {
	data := t.TempDir()
	generated := mustLoad(t, data, nil)
	p := newTestPaths(data)
	files, err := LoadPair(p.cert, p.key, testALPN)
	if err != nil {
		t.Fatal(err)
	}
	pool := caPool(t, data)

	for _, tc := range []struct {
		name       string
		server     *tls.Config
		serverName string
	}{
		{"generated/localhost", generated, "localhost"},
		{"generated/127.0.0.1", generated, "127.0.0.1"},
		{"files/localhost", files, "localhost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := handshake(t, tc.server, &tls.Config{
				RootCAs:    pool,
				ServerName: tc.serverName,
				NextProtos: []string{testALPN},
			})
			if err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if st.NegotiatedProtocol != testALPN {
				t.Errorf("NegotiatedProtocol = %q, want %q", st.NegotiatedProtocol, testALPN)
			}
			if st.Version != tls.VersionTLS13 {
				t.Errorf("Version = %#x, want TLS 1.3", st.Version)
			}
		})
	}

	t.Run("other CA", func(t *testing.T) {
		other := t.TempDir()
		mustLoad(t, other, nil)
		if _, err := handshake(t, generated, &tls.Config{
			RootCAs:    caPool(t, other),
			ServerName: "localhost",
			NextProtos: []string{testALPN},
		}); err == nil {
			t.Fatal("handshake succeeded with a client trusting another CA")
		}
	})

	t.Run("TLS 1.2 client", func(t *testing.T) {
		if _, err := handshake(t, generated, &tls.Config{
			RootCAs:    pool,
			ServerName: "localhost",
			NextProtos: []string{testALPN},
			MaxVersion: tls.VersionTLS12,
		}); err == nil {
			t.Fatal("handshake succeeded with TLS 1.2")
		}
	})
}
