// Package layout names the parts of a leased data folder that both the
// server and its tools know: where the database lives and where clients find
// the CA that signed the server's certificate. The server and leasectl use
// it, so the CLI need not link the server.
package layout

import "path/filepath"

const (
	// DefaultDir is the data folder of a server started with no flags,
	// relative to its working directory.
	DefaultDir = "leased-data"
	// TLSDir is the folder, under the data folder, of the TLS files.
	TLSDir = "tls"
	// CAFile is the CA certificate clients trust (PEM), in TLSDir.
	CAFile = "ca.pem"
	// DBDir is the folder, under the data folder, of the database.
	DBDir = "db"
)

// CAPath returns <dataDir>/tls/ca.pem, where clients find the CA of a server
// started with that data folder.
func CAPath(dataDir string) string {
	return filepath.Join(dataDir, TLSDir, CAFile)
}
