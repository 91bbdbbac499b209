package server

import (
	"crypto/tls"

	"github.com/leased/leased/internal/tlsfiles"
	"github.com/leased/leased/protocol"
)

// TLS file names under the data folder. LoadOrCreateTLS keeps all four files
// in <data>/TLSDirName; the CLI reads the CA from CAPath. Package
// internal/tlsfiles owns them.
const (
	// TLSDirName is the folder under the data folder that holds the TLS files.
	TLSDirName = tlsfiles.DirName
	// CAFileName is the CA certificate clients trust (PEM).
	CAFileName = tlsfiles.CAFileName
	// CAKeyFileName is the private key of the CA (PEM, mode 0600). The server
	// needs it only to issue a new server certificate.
	CAKeyFileName = tlsfiles.CAKeyFileName
	// CertFileName is the server certificate, signed by the CA (PEM).
	CertFileName = tlsfiles.CertFileName
	// KeyFileName is the private key of the server certificate (PEM, mode 0600).
	KeyFileName = tlsfiles.KeyFileName
)

// CAPath returns <dataDir>/tls/ca.pem, where clients find the CA of a server
// started with that data folder. The CLI calls it to build the root pool it
// verifies the server with; LoadOrCreateTLS writes the CA there.
func CAPath(dataDir string) string { return tlsfiles.CAPath(dataDir) }

// LoadOrCreateTLS returns the server tls.Config for the data folder dir. The
// server calls it at start-up when no certificate and key files were given
// (see LoadTLSFiles for those). The config requires TLS 1.3 and offers only
// the ALPN protocol.ALPN.
//
// On first use it creates dir/tls (mode 0700) holding a new self-signed CA
// and a server certificate signed by it, which names localhost, the loopback
// addresses, the host name and each of extraHosts (DNS names or IP
// addresses). Later calls reuse the files, and issue a new server
// certificate from the CA when the old one is missing, about to expire or
// lacks one of extraHosts. It never silently replaces a CA that clients may
// already trust: a missing CA key or a corrupt file is an error naming the
// file. tlsfiles.LoadOrCreate gives the details.
func LoadOrCreateTLS(dir string, extraHosts []string) (*tls.Config, error) {
	return tlsfiles.LoadOrCreate(dir, extraHosts, protocol.ALPN)
}

// LoadTLSFiles returns a server tls.Config from a user-supplied certificate
// file and key file (PEM). The server calls it at start-up instead of
// LoadOrCreateTLS when the operator names its own certificate and key; the
// certificate file may hold intermediate certificates after the leaf. The
// config requires TLS 1.3 and offers only the ALPN protocol.ALPN.
func LoadTLSFiles(certFile, keyFile string) (*tls.Config, error) {
	return tlsfiles.LoadPair(certFile, keyFile, protocol.ALPN)
}
