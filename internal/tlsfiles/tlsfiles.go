// Package tlsfiles keeps the TLS files of a leased data folder: a
// self-signed CA, which clients trust, and a server certificate signed by it.
// It creates them on first use, reuses them later and makes new ones when
// it must, and it loads a certificate and key pair that an operator
// supplies. The self-signed CA is limited by name constraints to the
// server's names and its key is not kept; a CA that clients may trust is
// never replaced without a warning in the log.
//
// For a cluster (pki.go) it makes a cluster CA, node and client certificates
// issued from it, and the mutual TLS configs of the raft peer port.
//
// It imports only the standard library, golang.org/x/net/publicsuffix and
// internal/layout, so that any layer may use it; the caller names the ALPN
// protocol its configs offer.
package tlsfiles

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/leased/leased/internal/atomicfile"
	"github.com/leased/leased/internal/layout"
)

// TLS file names. LoadOrCreate keeps ca.pem, server.pem and server-key.pem
// in <data>/DirName; the CLI reads the CA from CAPath.
const (
	// DirName is the folder under the data folder that holds the TLS files.
	DirName = layout.TLSDir
	// CAFileName is the CA certificate clients trust (PEM).
	CAFileName = layout.CAFile
	// CAKeyFileName is the private key of a CA (PEM, mode 0600): of a
	// cluster CA (CreateCA), and, in data folders of earlier versions, of
	// the self-signed CA, which LoadOrCreate no longer keeps.
	CAKeyFileName = "ca-key.pem"
	// CertFileName is the server certificate, signed by the CA (PEM).
	CertFileName = "server.pem"
	// KeyFileName is the private key of the server certificate (PEM, mode 0600).
	KeyFileName = "server-key.pem"
)

// ErrBadHost is wrapped by the error for a host that is neither a DNS name
// nor an IP address, from LoadOrCreate, IssueNode and EnsureNode. The CLI
// reports it as a bad command line.
var ErrBadHost = errors.New("bad host")

// Validity and renewal policy of the generated certificates.
const (
	caValidityYears  = 10
	serverValidity   = 825 * 24 * time.Hour
	renewBefore      = 30 * 24 * time.Hour
	backdate         = time.Hour
	caCommonName     = "leased local CA"
	serverCommonName = "leased server"
)

// CAPath returns <dataDir>/tls/ca.pem, where clients find the CA of a server
// started with that data folder. The CLI calls it to build the root pool it
// verifies the server with; LoadOrCreate writes the CA there.
func CAPath(dataDir string) string { return layout.CAPath(dataDir) }

// LoadOrCreate returns the server tls.Config for the data folder dir. The
// server calls it at start-up when no certificate and key files were given
// (see LoadPair for those). The config requires TLS 1.3 and offers only
// the ALPN protocol alpn. It logs to log (nil: slog.Default()) what a user
// must act on: a new CA that replaced one clients trusted, and a CA key of
// an earlier version left in dir/tls.
//
// On first use it creates dir/tls (mode 0700) holding a new self-signed CA
// (ECDSA P-256, CommonName "leased local CA", path length 0) and a server
// certificate signed by it (ECDSA P-256, server-auth only), both valid 825
// days. The server certificate names "localhost", 127.0.0.1, ::1, the host
// name reported by os.Hostname when that call succeeds, and each of
// extraHosts (DNS names or IP addresses; IPv6 may be given in brackets; a
// wildcard only under a domain someone can own, see CheckHost). The CA
// carries critical X.509 name constraints that permit exactly those names
// (and the names under those domains), so that it can vouch for no other
// host. Private keys are written with mode 0600, certificates with mode
// 0644, and every file is written atomically (temporary file in the same
// folder, fsync, rename, fsync of the folder).
//
// The CA's private key is never written: it signs the one server
// certificate and is dropped. So a copy of the data folder, or a server
// that is broken into, gives no key that can sign for another host; the
// server needs none to run, only its own key. The price is that a server
// certificate cannot be reissued from the same CA: when server.pem or
// server-key.pem is missing, the certificate expires within 30 days, is
// not yet valid, is not signed by ca.pem, or lacks one of extraHosts, or
// when ca.pem has expired, LoadOrCreate makes a new CA and server
// certificate, replaces ca.pem, and logs a warning that clients must trust
// the new ca.pem. Later calls otherwise reuse the files.
//
// A data folder made by an earlier version may still hold the CA's key in
// ca-key.pem, beside ca.pem. LoadOrCreate leaves it in place, so as not to
// break the clients that trust that CA: it reissues the server certificate
// from it when it must, as before, and logs at every start that the key
// should be removed (a later reissue then makes a new, constrained CA).
//
// An unreadable or corrupt file (bad PEM, a key that does not match its
// certificate, a ca.pem that is not a CA) is an error naming the file and
// what is wrong: LoadOrCreate replaces nothing it cannot read.
func LoadOrCreate(dir string, extraHosts []string, alpn string, log *slog.Logger) (*tls.Config, error) {
	if log == nil {
		log = slog.Default()
	}
	hosts, err := serverAltNames(extraHosts)
	if err != nil {
		return nil, err
	}
	tlsDir := filepath.Join(dir, DirName)
	if err := ensureDir(tlsDir); err != nil {
		return nil, err
	}
	now := time.Now()
	var (
		caPath    = filepath.Join(tlsDir, CAFileName)
		caKeyPath = filepath.Join(tlsDir, CAKeyFileName)
		certPath  = filepath.Join(tlsDir, CertFileName)
		keyPath   = filepath.Join(tlsDir, KeyFileName)
		caCert    *x509.Certificate
		caKey     crypto.Signer // an earlier version's, or nil
	)

	caPEM, err := readOptional(caPath)
	if err != nil {
		return nil, err
	}
	if caPEM != nil {
		if caCert, err = parseCert(caPath, caPEM); err != nil {
			return nil, err
		}
		if !caCert.IsCA || !caCert.BasicConstraintsValid {
			return nil, fmt.Errorf("tls: CA certificate %s is not a CA certificate", caPath)
		}
		caKeyPEM, err := readOptional(caKeyPath)
		if err != nil {
			return nil, err
		}
		if caKeyPEM != nil {
			if caKey, err = parseKey(caKeyPath, caKeyPEM); err != nil {
				return nil, err
			}
			if !keyMatches(caKey, caCert) {
				return nil, fmt.Errorf("tls: CA key %s does not match CA certificate %s", caKeyPath, caPath)
			}
		}
	}

	certPEM, err := readOptional(certPath)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readOptional(keyPath)
	if err != nil {
		return nil, err
	}

	reason := ""
	switch {
	case caCert == nil:
		reason = fmt.Sprintf("CA certificate %s is missing", caPath)
	case now.After(caCert.NotAfter):
		reason = fmt.Sprintf("CA certificate %s expired on %s", caPath, caCert.NotAfter.UTC().Format(time.RFC3339))
	case certPEM == nil:
		reason = fmt.Sprintf("server certificate %s is missing", certPath)
	case keyPEM == nil:
		reason = fmt.Sprintf("server key %s is missing", keyPath)
	default:
		leaf, err := parseCert(certPath, certPEM)
		if err != nil {
			return nil, err
		}
		key, err := parseKey(keyPath, keyPEM)
		if err != nil {
			return nil, err
		}
		if !keyMatches(key, leaf) {
			return nil, fmt.Errorf("tls: server key %s does not match server certificate %s", keyPath, certPath)
		}
		reason = reissueReason("server certificate", certPath, leaf, caCert, hosts, now)
	}

	switch {
	case reason == "":
	case caKey != nil && now.Before(caCert.NotAfter):
		// An earlier version's folder: keep its CA, which clients trust.
		if certPEM, keyPEM, err = issueServer(certPath, keyPath, caCert, caKey, hosts, now); err != nil {
			return nil, err
		}
		log.Info("issued a new server certificate from the CA key left in the data folder", "reason", reason, "cert", certPath)
	default:
		if certPEM, keyPEM, err = createLocal(caPath, certPath, keyPath, hosts, now); err != nil {
			return nil, err
		}
		if caCert != nil {
			log.Warn("made a new CA and server certificate: clients must trust the new CA certificate; the old one no longer verifies this server",
				"reason", reason, "ca", caPath)
		}
		// The key of a CA just replaced, or left without its ca.pem by an
		// earlier version: it signs nothing clients trust now.
		if err := os.Remove(caKeyPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("tls: remove the old CA key: %w", err)
		}
		caKey = nil
	}
	if caKey != nil {
		log.Warn("the CA's private key is kept beside the server's files, as earlier versions of leased did; the server does not need it: remove it, or move it off this host, so that whoever reads the data folder cannot sign certificates clients trust; a later reissue then makes a new CA limited to the server's names, which clients must then trust",
			"key", caKeyPath)
	}

	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls: server certificate %s with key %s: %w", certPath, keyPath, err)
	}
	return serverConfig(pair, alpn), nil
}

// createLocal makes a new self-signed CA constrained to hosts and a server
// certificate for hosts signed by it, both valid serverValidity, drops the
// CA's key, and writes the server pair and then ca.pem, replacing the old
// files. A crash in between leaves a server.pem that ca.pem did not sign,
// which the next start replaces as well. It returns the pair's PEM.
func createLocal(caPath, certPath, keyPath string, hosts altNames, now time.Time) (certPEM, keyPEM []byte, err error) {
	ca, caKey, caPEM, err := newCA(caCommonName, now, now.Add(serverValidity), &caNames{hosts: hosts})
	if err != nil {
		return nil, nil, err
	}
	if certPEM, keyPEM, err = issueServer(certPath, keyPath, ca, caKey, hosts, now); err != nil {
		return nil, nil, err
	}
	if err := writeFileAtomic(caPath, caPEM, 0o644); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// LoadPair returns a server tls.Config from a user-supplied certificate
// file and key file (PEM). The server calls it at start-up instead of
// LoadOrCreate when the operator names its own certificate and key; the
// certificate file may hold intermediate certificates after the leaf. The
// config requires TLS 1.3 and offers only the ALPN protocol alpn.
func LoadPair(certFile, keyFile, alpn string) (*tls.Config, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("tls: read certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: read key: %w", err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls: certificate %s with key %s: %w", certFile, keyFile, err)
	}
	return serverConfig(pair, alpn), nil
}

// serverConfig is the server configuration shared by LoadOrCreate and
// LoadPair.
func serverConfig(pair tls.Certificate, alpn string) *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		NextProtos:   []string{alpn},
		Certificates: []tls.Certificate{pair},
	}
}

// altNames are the subject alternative names a server certificate must carry.
type altNames struct {
	dns []string
	ips []net.IP
	// extra are the caller's extra hosts; a certificate lacking one of them
	// is reissued.
	extraDNS []string
	extraIPs []net.IP
}

// serverAltNames returns the names for a server certificate: localhost, the
// loopback addresses, extraHosts and the host name, without duplicates. It
// rejects an extra host that is neither an IP address nor a DNS name.
func serverAltNames(extraHosts []string) (altNames, error) {
	h, err := hostAltNames(extraHosts)
	if err != nil {
		return altNames{}, err
	}
	if name, err := os.Hostname(); err == nil && validDNSName(name) {
		h.addDNS(name, false)
	}
	return h, nil
}

// hostAltNames returns localhost, the loopback addresses and hosts, without
// duplicates; hosts are the extra names. A host is a DNS name or an IP
// address, and an IPv6 address may be given in brackets; blank hosts are
// skipped; a wildcard is allowed only as checkWildcard says. It rejects any
// other host with an error wrapping ErrBadHost.
// serverAltNames and the node certificates of pki.go use it.
func hostAltNames(hosts []string) (altNames, error) {
	var h altNames
	h.addDNS("localhost", false)
	h.addIP(net.IPv4(127, 0, 0, 1), false)
	h.addIP(net.IPv6loopback, false)
	for _, raw := range hosts {
		s := strings.TrimSpace(raw)
		if s == "" {
			continue
		}
		if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
			s = s[1 : len(s)-1]
		}
		if ip := net.ParseIP(s); ip != nil {
			h.addIP(ip, true)
			continue
		}
		if err := checkWildcard(s); err != nil {
			return altNames{}, err
		}
		if !validDNSName(s) {
			return altNames{}, fmt.Errorf("tls: %w %q: neither an IP address nor a DNS name", ErrBadHost, raw)
		}
		h.addDNS(s, true)
	}
	return h, nil
}

// addDNS adds the DNS name name, and records it as an extra name if extra.
func (h *altNames) addDNS(name string, extra bool) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if !containsDNS(h.dns, name) {
		h.dns = append(h.dns, name)
	}
	if extra && !containsDNS(h.extraDNS, name) {
		h.extraDNS = append(h.extraDNS, name)
	}
}

// addIP adds the address ip, and records it as an extra name if extra.
func (h *altNames) addIP(ip net.IP, extra bool) {
	if !containsIP(h.ips, ip) {
		h.ips = append(h.ips, ip)
	}
	if extra && !containsIP(h.extraIPs, ip) {
		h.extraIPs = append(h.extraIPs, ip)
	}
}

// validDNSName reports whether s can be a DNS subject alternative name:
// dot-separated labels of letters, digits, '-' and '_', at most 253 bytes,
// with an optional leading "*." wildcard label.
func validDNSName(s string) bool {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return false
	}
	s = strings.TrimPrefix(s, "*.")
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return false
			}
		}
	}
	return true
}

func containsDNS(list []string, name string) bool {
	for _, d := range list {
		if strings.EqualFold(strings.TrimSuffix(d, "."), name) {
			return true
		}
	}
	return false
}

func containsIP(list []net.IP, ip net.IP) bool {
	for _, x := range list {
		if x.Equal(ip) {
			return true
		}
	}
	return false
}

// reissueReason returns why the valid-looking certificate leaf must be
// reissued, or "" when it can be used as it is; what names the kind of
// certificate ("server certificate") in the reason.
func reissueReason(what, certPath string, leaf, ca *x509.Certificate, hosts altNames, now time.Time) string {
	if now.Before(leaf.NotBefore) {
		return fmt.Sprintf("%s %s is not valid until %s", what, certPath, leaf.NotBefore.UTC().Format(time.RFC3339))
	}
	if leaf.NotAfter.Sub(now) < renewBefore {
		return fmt.Sprintf("%s %s expires on %s", what, certPath, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	if err := leaf.CheckSignatureFrom(ca); err != nil {
		return fmt.Sprintf("%s %s is not signed by the CA in %s", what, certPath, CAFileName)
	}
	for _, name := range hosts.extraDNS {
		if !containsDNS(leaf.DNSNames, name) {
			return fmt.Sprintf("%s %s does not name host %q", what, certPath, name)
		}
	}
	for _, ip := range hosts.extraIPs {
		if !containsIP(leaf.IPAddresses, ip) {
			return fmt.Sprintf("%s %s does not name address %s", what, certPath, ip)
		}
	}
	return ""
}

// newCA makes a new self-signed CA named commonName, valid from an hour
// before now until notAfter, and returns its certificate (parsed and in
// PEM) and its key; it writes nothing. With names, the CA carries critical
// name constraints that permit only those names (see constrain); nil
// means a CA that may sign for any name.
func newCA(commonName string, now, notAfter time.Time, names *caNames) (*x509.Certificate, crypto.Signer, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tls: generate CA key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	if names != nil {
		constrain(tmpl, names.hosts, names.ranges)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tls: create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tls: parse new CA certificate: %w", err)
	}
	return cert, key, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// caNames are the names a constrained CA may sign for: hosts, each with
// the names under it, and the address ranges of ranges.
type caNames struct {
	hosts  altNames
	ranges []*net.IPNet
}

// createCA makes a new cluster CA (newCA, valid 10 years) and writes its
// key, then its certificate, with write (writeFileNew, which refuses to
// replace a file). The certificate goes last so that an existing ca.pem
// always has its key next to it.
func createCA(caPath, caKeyPath, commonName string, now time.Time, write writeFunc, names *caNames) error {
	_, key, certPEM, err := newCA(commonName, now, now.AddDate(caValidityYears, 0, 0), names)
	if err != nil {
		return err
	}
	keyPEM, err := encodeKey(key.(*ecdsa.PrivateKey))
	if err != nil {
		return err
	}
	if err := write(caKeyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return write(caPath, certPEM, 0o644)
}

// issueServer makes a new server key and certificate signed by ca,
// replaces the old ones with them (see replacePair) and returns their PEM.
// It refuses, writing nothing, if ca may not sign for hosts.
func issueServer(certPath, keyPath string, ca *x509.Certificate, caKey crypto.Signer, hosts altNames, now time.Time) (certPEM, keyPEM []byte, err error) {
	certPEM, keyPEM, err = issueLeaf(ca, caKey, serverCommonName, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, hosts, now)
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(certPEM)
	if err := checkPermitted(block.Bytes, ca, filepath.Join(filepath.Dir(certPath), CAFileName), now); err != nil {
		return nil, nil, err
	}
	if err := replacePair(certPath, keyPath, certPEM, keyPEM); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// issueLeaf makes a new key (ECDSA P-256) and a certificate for it signed by
// ca: CommonName commonName, the extended key usages usages, the DNS names
// and addresses of hosts, valid from an hour ago for 825 days or until the
// CA expires, whichever is sooner. It returns both in PEM and writes nothing.
func issueLeaf(ca *x509.Certificate, caKey crypto.Signer, commonName string, usages []x509.ExtKeyUsage, hosts altNames, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: generate key: %w", err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(serverValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           usages,
		BasicConstraintsValid: true,
		DNSNames:              hosts.dns,
		IPAddresses:           hosts.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: create certificate for %q: %w", commonName, err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// replacePair replaces a certificate and its key with certPEM and keyPEM. It
// removes the old certificate before writing the new key, so a crash in
// between leaves a missing certificate (reissued on the next start) rather
// than a key that does not match it.
func replacePair(certPath, keyPath string, certPEM, keyPEM []byte) error {
	if err := os.Remove(certPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("tls: remove old certificate: %w", err)
	}
	if err := syncDir(filepath.Dir(certPath)); err != nil {
		return err
	}
	if err := writeFileAtomic(keyPath, keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certPath, certPEM, 0o644)
}

// newSerial returns a random, positive 128-bit certificate serial number.
func newSerial() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("tls: generate serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("tls: encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// parseCert parses the first PEM block of data, read from path, as a
// certificate.
func parseCert(path string, data []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("tls: %s is corrupt: no PEM data found", path)
	}
	if block.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("tls: %s is corrupt: PEM block is %q, want \"CERTIFICATE\"", path, block.Type)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("tls: %s is corrupt: %w", path, err)
	}
	return cert, nil
}

// parseKey parses the first PEM block of data, read from path, as a
// private key in PKCS #8, SEC 1 (EC) or PKCS #1 (RSA) form.
func parseKey(path string, data []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, fmt.Errorf("tls: %s is corrupt: no PEM data found", path)
	}
	var (
		key any
		err error
	)
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("tls: %s is corrupt: PEM block is %q, want a private key", path, block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("tls: %s is corrupt: %w", path, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("tls: %s is corrupt: unsupported private key type %T", path, key)
	}
	return signer, nil
}

// keyMatches reports whether key is the private key of cert.
func keyMatches(key crypto.Signer, cert *x509.Certificate) bool {
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	return ok && pub.Equal(cert.PublicKey)
}

// readOptional returns the contents of path, or nil when it does not
// exist. An empty file is returned as an empty, non-nil slice so that it is
// reported as corrupt rather than missing.
func readOptional(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tls: read %s: %w", path, err)
	}
	if data == nil {
		data = []byte{}
	}
	return data, nil
}

// ensureDir creates dir with mode 0700 (and its missing parents) unless it
// already exists, and checks that it is a folder.
func ensureDir(dir string) error {
	info, err := os.Stat(dir)
	if err == nil {
		if !info.IsDir() {
			return fmt.Errorf("tls: %s is not a folder", dir)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("tls: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("tls: create folder: %w", err)
	}
	// MkdirAll is subject to the umask; make the mode exact.
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	return syncDir(filepath.Dir(dir))
}

// writeFunc writes a file: writeFileAtomic or writeFileNew.
type writeFunc func(path string, data []byte, perm os.FileMode) error

// writeFileAtomic is atomicfile.Write, with errors that begin with "tls: ":
// LoadOrCreate writes every TLS file with it.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := atomicfile.Write(path, data, perm); err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	return nil
}

// writeFileNew is atomicfile.WriteNew, with errors that begin with "tls: ":
// it never replaces a file, and if path exists it returns an error that
// matches fs.ErrExist. CreateCA, IssueNode and IssueClient write with it.
func writeFileNew(path string, data []byte, perm os.FileMode) error {
	err := atomicfile.WriteNew(path, data, perm)
	switch {
	case errors.Is(err, fs.ErrExist):
		return &existsError{path}
	case err != nil:
		return fmt.Errorf("tls: %w", err)
	}
	return nil
}

// existsError is the error for a file that writeFileNew, CreateCA, IssueNode
// or IssueClient will not replace. It matches fs.ErrExist.
type existsError struct{ path string }

func (e *existsError) Error() string {
	return "tls: " + e.path + " already exists; remove it first to replace it"
}

// Is reports whether target is fs.ErrExist.
func (e *existsError) Is(target error) bool { return target == fs.ErrExist }

// syncDir is atomicfile.SyncDir, with errors that begin with "tls: ".
func syncDir(dir string) error {
	if err := atomicfile.SyncDir(dir); err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	return nil
}
