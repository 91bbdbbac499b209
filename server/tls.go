package server

import (
	"crypto/tls"
	"log/slog"

	"github.com/leased/leased/internal/tlsfiles"
	"github.com/leased/leased/protocol"
)

// TLS file names under the data folder. LoadOrCreateTLS keeps ca.pem,
// server.pem and server-key.pem in <data>/TLSDirName; the CLI reads the CA
// from CAPath. Package internal/tlsfiles owns them.
const (
	// TLSDirName is the folder under the data folder that holds the TLS files.
	TLSDirName = tlsfiles.DirName
	// CAFileName is the CA certificate clients trust (PEM).
	CAFileName = tlsfiles.CAFileName
	// CAKeyFileName is the private key of the CA (PEM, mode 0600), which
	// data folders of earlier versions kept beside CAFileName. The server
	// no longer keeps it; it warns while one is there.
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
// the ALPN protocol.ALPN. It logs to slog.Default().
//
// On first use it creates dir/tls (mode 0700) holding a new self-signed CA
// and a server certificate signed by it, which names localhost, the loopback
// addresses, the host name and each of extraHosts (DNS names or IP
// addresses; a wildcard only under a domain someone can own). The CA may
// sign only for those names (X.509 name constraints), and its private key
// is dropped once it has signed. Later calls reuse the files; when the
// server certificate must be issued again (missing, about to expire, or
// lacking one of extraHosts), a new CA is made with it, and a warning says
// that clients must trust the new ca.pem. A corrupt file is an error naming
// the file. tlsfiles.LoadOrCreate gives the details, and what it does with
// the CA key of a data folder of an earlier version.
func LoadOrCreateTLS(dir string, extraHosts []string) (*tls.Config, error) {
	return loadOrCreateTLS(dir, extraHosts, nil)
}

// loadOrCreateTLS is LoadOrCreateTLS, logging to log (nil: slog.Default()).
// New calls it with the server's logger.
func loadOrCreateTLS(dir string, extraHosts []string, log *slog.Logger) (*tls.Config, error) {
	return tlsfiles.LoadOrCreate(dir, extraHosts, protocol.ALPN, log)
}

// LoadTLSFiles returns a server tls.Config from a user-supplied certificate
// file and key file (PEM). The server calls it at start-up instead of
// LoadOrCreateTLS when the operator names its own certificate and key; the
// certificate file may hold intermediate certificates after the leaf. The
// config requires TLS 1.3 and offers only the ALPN protocol.ALPN.
func LoadTLSFiles(certFile, keyFile string) (*tls.Config, error) {
	return tlsfiles.LoadPair(certFile, keyFile, protocol.ALPN)
}
