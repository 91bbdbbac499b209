package tlsfiles

// This file holds the certificates of a cluster (DESIGN.md §13): a cluster
// CA, node certificates that serve clients and peers and dial peers, client
// certificates, and the mutual TLS configs of the raft peer port.

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// clusterCACommonName is the CommonName of a CA made by CreateCA.
const clusterCACommonName = "leased cluster CA"

// maxNameLen is the longest node or client name: the upper bound of an
// X.509 CommonName (RFC 5280, ub-common-name).
const maxNameLen = 64

// ErrBadName is wrapped by the error for a node or client name that
// IssueNode, IssueClient and EnsureNode refuse (see IssueNode). The CLI
// reports it as a bad command line.
var ErrBadName = errors.New("bad name")

// Extended key usages of the certificates issued here. A node is a server
// to clients and peers and a client of its peers; a client only dials.
var (
	nodeUsages   = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	clientUsages = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
)

// CreateCA creates a new cluster CA in dir, which it creates (mode 0700) if
// missing: dir/ca.pem, the certificate that nodes and clients trust, and
// dir/ca-key.pem (mode 0600), which IssueNode, IssueClient and EnsureNode
// sign with. The CA is ECDSA P-256, valid 10 years, CommonName "leased
// cluster CA", path length 0. `leased cert create-ca` calls it.
//
// With permit, the CA carries critical X.509 name constraints: it may sign
// only for the DNS names of permit and the names under them, its IP
// addresses and its address ranges (CIDR, such as 10.0.0.0/8), and for
// localhost, 127.0.0.1 and ::1, which every node certificate names.
// Verifiers refuse any other name from it, and IssueNode and EnsureNode
// refuse to issue one. A wildcard or any other bad entry is refused with
// an error wrapping ErrBadHost. Without permit the CA may sign for any
// name.
//
// It refuses, changing nothing, when either file already exists: the error
// names the file and matches fs.ErrExist. Both files are written atomically.
func CreateCA(dir string, permit ...string) error {
	var names *caNames
	if len(permit) > 0 {
		h, ranges, err := permitNames(permit)
		if err != nil {
			return err
		}
		names = &caNames{hosts: h, ranges: ranges}
	}
	caPath, caKeyPath := filepath.Join(dir, CAFileName), filepath.Join(dir, CAKeyFileName)
	for _, p := range []string{caPath, caKeyPath} {
		if err := refuseExisting(p); err != nil {
			return err
		}
	}
	if err := ensureDir(dir); err != nil {
		return err
	}
	return createCA(caPath, caKeyPath, clusterCACommonName, time.Now(), writeFileNew, names)
}

// IssueNode issues a node certificate from the CA in caDir (ca.pem and
// ca-key.pem, as CreateCA writes them) and writes it to outDir/<name>.pem
// and its new key to outDir/<name>-key.pem (mode 0600), creating outDir
// (mode 0700) if missing. It returns the two paths. `leased cert
// create-node` calls it; EnsureNode is the variant for a node that issues
// its own certificate at start-up.
//
// The certificate (ECDSA P-256, valid 825 days or until the CA expires) has
// CommonName name and both extended key usages, server and client
// authentication, because a node serves clients and peers and dials peers.
// It names localhost, 127.0.0.1, ::1 and each of hosts (DNS names or IP
// addresses; IPv6 may be given in brackets); peers verify a node against the
// address they dial, so hosts must hold the address it advertises on its
// peer port. Unlike a server certificate of LoadOrCreate, it does not name
// the host name of the machine that issues it, which need not be the node's.
//
// A name is 1 to 64 letters, digits, '.', '_' and '-', starting with a
// letter or digit, and not "ca" (whose files would be the CA's); any other
// name is refused with an error wrapping ErrBadName. A bad host is refused
// with one wrapping ErrBadHost. IssueNode never replaces a file: if either
// output file exists it refuses with an error that names it and matches
// fs.ErrExist. Both files are written atomically.
func IssueNode(caDir, outDir, name string, hosts []string) (certFile, keyFile string, err error) {
	names, err := hostAltNames(hosts)
	if err != nil {
		return "", "", err
	}
	return issue(caDir, outDir, name, nodeUsages, names)
}

// IssueClient issues a client certificate from the CA in caDir and writes
// it to outDir/<name>.pem and its key to outDir/<name>-key.pem (mode 0600),
// as IssueNode does, and returns the two paths. `leased cert create-client`
// calls it.
//
// The certificate has CommonName name, the identity of the client, and only
// the client authentication key usage, so it can never serve or join the
// peer network (PeerTLS refuses it). It names no hosts. Names and existing
// files are refused as by IssueNode.
func IssueClient(caDir, outDir, name string) (certFile, keyFile string, err error) {
	return issue(caDir, outDir, name, clientUsages, altNames{})
}

// issue is IssueNode and IssueClient.
func issue(caDir, outDir, name string, usages []x509.ExtKeyUsage, hosts altNames) (certFile, keyFile string, err error) {
	if err := checkName(name); err != nil {
		return "", "", err
	}
	certFile, keyFile = leafPaths(outDir, name)
	for _, p := range []string{certFile, keyFile} {
		if err := refuseExisting(p); err != nil {
			return "", "", err
		}
	}
	now := time.Now()
	ca, caKey, err := loadCA(caDir, true, now)
	if err != nil {
		return "", "", err
	}
	certPEM, keyPEM, err := issueLeaf(ca, caKey, name, usages, hosts, now)
	if err != nil {
		return "", "", err
	}
	block, _ := pem.Decode(certPEM)
	if err := checkPermitted(block.Bytes, ca, filepath.Join(caDir, CAFileName), now); err != nil {
		return "", "", err
	}
	if err := ensureDir(outDir); err != nil {
		return "", "", err
	}
	// The key first, so that an existing certificate always has its key.
	if err := writeFileNew(keyFile, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := writeFileNew(certFile, certPEM, 0o644); err != nil {
		// Take back the key written above; nothing else can be using it.
		os.Remove(keyFile)
		return "", "", err
	}
	return certFile, keyFile, nil
}

// EnsureNode returns the node certificate and key files for name in nodeDir
// (<name>.pem and <name>-key.pem, as IssueNode names them), issuing them
// from the CA in caDir when they are missing or can no longer be used. A
// node started with --ca-dir calls it at start-up, so that nodes given the
// same CA folder trust one another with no further setup.
//
// It reuses the files when the certificate is signed by caDir's ca.pem, is
// valid now and for at least 30 more days, and names every one of hosts.
// Otherwise it issues a new certificate and key as IssueNode does, replacing
// the old files; only then does it need caDir's ca-key.pem. nodeDir is
// created (mode 0700) if missing.
//
// It never silently replaces something it did not make: an unreadable or
// corrupt file, a key that does not match its certificate, or a certificate
// that is not the node certificate of name (another CommonName, or lacking
// server or client authentication) is an error naming the file, and so is a
// CA that is missing, corrupt or expired. Names and hosts are refused as by
// IssueNode.
func EnsureNode(caDir, nodeDir, name string, hosts []string) (certFile, keyFile string, err error) {
	if err := checkName(name); err != nil {
		return "", "", err
	}
	names, err := hostAltNames(hosts)
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	ca, _, err := loadCA(caDir, false, now)
	if err != nil {
		return "", "", err
	}
	if err := ensureDir(nodeDir); err != nil {
		return "", "", err
	}
	certFile, keyFile = leafPaths(nodeDir, name)
	certPEM, err := readOptional(certFile)
	if err != nil {
		return "", "", err
	}
	keyPEM, err := readOptional(keyFile)
	if err != nil {
		return "", "", err
	}

	var reason string
	switch {
	case certPEM == nil:
		reason = fmt.Sprintf("node certificate %s is missing", certFile)
	case keyPEM == nil:
		reason = fmt.Sprintf("node key %s is missing", keyFile)
	default:
		leaf, err := parseCert(certFile, certPEM)
		if err != nil {
			return "", "", err
		}
		key, err := parseKey(keyFile, keyPEM)
		if err != nil {
			return "", "", err
		}
		if !keyMatches(key, leaf) {
			return "", "", fmt.Errorf("tls: node key %s does not match node certificate %s", keyFile, certFile)
		}
		if leaf.Subject.CommonName != name || leaf.IsCA || checkNodeUsage(leaf) != nil {
			return "", "", fmt.Errorf("tls: %s is not the node certificate of %q (CommonName %q, key usages %s); move it away to issue a new one",
				certFile, name, leaf.Subject.CommonName, usageNames(leaf.ExtKeyUsage))
		}
		reason = reissueReason("node certificate", certFile, leaf, ca, names, now)
	}
	if reason == "" {
		return certFile, keyFile, nil
	}

	ca, caKey, err := loadCA(caDir, true, now)
	if err != nil {
		return "", "", fmt.Errorf("%w; %s and cannot be issued without it", err, reason)
	}
	certPEM, keyPEM, err = issueLeaf(ca, caKey, name, nodeUsages, names, now)
	if err != nil {
		return "", "", err
	}
	block, _ := pem.Decode(certPEM)
	if err := checkPermitted(block.Bytes, ca, filepath.Join(caDir, CAFileName), now); err != nil {
		return "", "", err
	}
	if err := replacePair(certFile, keyFile, certPEM, keyPEM); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

// PeerTLS returns the TLS configs of the raft peer port of a node: server
// for the connections it accepts, client for those it dials. caFile holds
// the CA certificates that peers must be signed by (PEM, one or more);
// certFile and keyFile are the node's own certificate (from IssueNode or
// EnsureNode) and key. The node's transport (package replica) calls it at
// start-up.
//
// Both configs require TLS 1.3 and present the node's certificate: the
// authentication is mutual. The server config requires a client certificate
// that verifies against the CA. The client config verifies the server's
// chain against the CA and, since it leaves ServerName empty for the
// dialler to fill in with the host it dials (tls.Dialer does so by itself),
// also its name: a peer must hold a certificate for the address it is
// dialled at. A certificate from the CA is thus not enough to answer for
// another node's address, at the cost that node certificates must name the
// addresses their nodes advertise, which IssueNode's hosts are for.
//
// Both configs also refuse a peer whose certificate lacks either the server
// or the client authentication key usage, so that a client certificate
// from IssueClient, signed by the same CA, can never join the peer network.
// The usages must be named: a certificate with no extended key usage, or
// only "any", which Go's verifier takes as allowing every usage, is refused.
//
// PeerTLS returns an error naming the file when a file cannot be read or
// parsed, when the key does not match the certificate, or when the node's
// own certificate is not a node certificate or does not verify against the
// CA, so that a misconfigured node fails at start-up rather than at every
// handshake.
func PeerTLS(caFile, certFile, keyFile string) (server, client *tls.Config, err error) {
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: read CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("tls: %s is corrupt: no PEM certificate found", caFile)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("tls: certificate %s with key %s: %w", certFile, keyFile, err)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, nil, fmt.Errorf("tls: %s is corrupt: %w", certFile, err)
		}
	}
	if err := checkNodeUsage(leaf); err != nil {
		return nil, nil, fmt.Errorf("tls: %s cannot be used on the peer port: %w", certFile, err)
	}
	intermediates := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, nil, fmt.Errorf("tls: %s is corrupt: %w", certFile, err)
		}
		intermediates.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{
		Roots:         pool,
		Intermediates: intermediates,
		KeyUsages:     nodeUsages,
	}); err != nil {
		return nil, nil, fmt.Errorf("tls: %s does not verify against the CA in %s: %w", certFile, caFile, err)
	}

	server = &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{pair},
		ClientAuth:       tls.RequireAndVerifyClientCert,
		ClientCAs:        pool,
		VerifyConnection: verifyPeer,
	}
	client = &tls.Config{
		MinVersion:       tls.VersionTLS13,
		Certificates:     []tls.Certificate{pair},
		RootCAs:          pool,
		VerifyConnection: verifyPeer,
	}
	return server, client, nil
}

// verifyPeer is the VerifyConnection of both PeerTLS configs. It runs after
// the chain (and on the client, the name) has been verified, on full and
// resumed handshakes alike, and refuses a peer that is not a node.
func verifyPeer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: peer presented no certificate")
	}
	leaf := cs.PeerCertificates[0]
	if err := checkNodeUsage(leaf); err != nil {
		return fmt.Errorf("tls: peer %q is not a node: %w", leaf.Subject.CommonName, err)
	}
	return nil
}

// checkNodeUsage returns an error unless cert names both the server and the
// client authentication key usage, as node certificates do.
func checkNodeUsage(cert *x509.Certificate) error {
	var server, client bool
	for _, u := range cert.ExtKeyUsage {
		server = server || u == x509.ExtKeyUsageServerAuth
		client = client || u == x509.ExtKeyUsageClientAuth
	}
	if !server || !client {
		return fmt.Errorf("its certificate has key usages %s, want both server and client authentication", usageNames(cert.ExtKeyUsage))
	}
	return nil
}

// usageNames lists usages for an error message.
func usageNames(usages []x509.ExtKeyUsage) string {
	if len(usages) == 0 {
		return "(none)"
	}
	names := make([]string, len(usages))
	for i, u := range usages {
		switch u {
		case x509.ExtKeyUsageServerAuth:
			names[i] = "server authentication"
		case x509.ExtKeyUsageClientAuth:
			names[i] = "client authentication"
		case x509.ExtKeyUsageAny:
			names[i] = "any"
		default:
			names[i] = fmt.Sprintf("usage %d", u)
		}
	}
	return "[" + strings.Join(names, ", ") + "]"
}

// loadCA reads and checks the CA in dir: ca.pem must be a CA certificate
// valid at now. With needKey it also reads ca-key.pem, which must match;
// otherwise the returned key is nil. Every error names the file.
func loadCA(dir string, needKey bool, now time.Time) (*x509.Certificate, crypto.Signer, error) {
	caPath, caKeyPath := filepath.Join(dir, CAFileName), filepath.Join(dir, CAKeyFileName)
	caPEM, err := readOptional(caPath)
	if err != nil {
		return nil, nil, err
	}
	if caPEM == nil {
		return nil, nil, fmt.Errorf("tls: CA certificate %s does not exist", caPath)
	}
	ca, err := parseCert(caPath, caPEM)
	if err != nil {
		return nil, nil, err
	}
	if !ca.IsCA || !ca.BasicConstraintsValid {
		return nil, nil, fmt.Errorf("tls: CA certificate %s is not a CA certificate", caPath)
	}
	if now.Before(ca.NotBefore) {
		return nil, nil, fmt.Errorf("tls: CA certificate %s is not valid until %s", caPath, ca.NotBefore.UTC().Format(time.RFC3339))
	}
	if now.After(ca.NotAfter) {
		return nil, nil, fmt.Errorf("tls: CA certificate %s expired on %s", caPath, ca.NotAfter.UTC().Format(time.RFC3339))
	}
	if !needKey {
		return ca, nil, nil
	}
	keyPEM, err := readOptional(caKeyPath)
	if err != nil {
		return nil, nil, err
	}
	if keyPEM == nil {
		return nil, nil, fmt.Errorf("tls: CA key %s does not exist", caKeyPath)
	}
	key, err := parseKey(caKeyPath, keyPEM)
	if err != nil {
		return nil, nil, err
	}
	if !keyMatches(key, ca) {
		return nil, nil, fmt.Errorf("tls: CA key %s does not match CA certificate %s", caKeyPath, caPath)
	}
	return ca, key, nil
}

// leafPaths returns the certificate and key paths of name in dir.
func leafPaths(dir, name string) (certFile, keyFile string) {
	return filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
}

// checkName returns an error wrapping ErrBadName unless name can name a
// node or client: it is a CommonName and the stem of two file names.
func checkName(name string) error {
	bad := func(why string) error {
		return fmt.Errorf("tls: %w %q: %s", ErrBadName, name, why)
	}
	if name == "" || len(name) > maxNameLen {
		return bad(fmt.Sprintf("want 1 to %d characters", maxNameLen))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return bad("must start with a letter or digit")
		}
		if !alnum && c != '.' && c != '_' && c != '-' {
			return bad("want only letters, digits, '.', '_' and '-'")
		}
	}
	if strings.EqualFold(name, "ca") {
		return bad(`"ca" would name the CA's own files`)
	}
	return nil
}

// refuseExisting returns an error matching fs.ErrExist if path exists, and
// any error other than its absence from looking.
func refuseExisting(path string) error {
	_, err := os.Lstat(path)
	switch {
	case err == nil:
		return &existsError{path}
	case errors.Is(err, os.ErrNotExist):
		return nil
	}
	return fmt.Errorf("tls: %w", err)
}
