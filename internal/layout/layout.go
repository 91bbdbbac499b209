// Package layout names the parts of a leased data folder that both the
// server and its tools know: where the database lives and where clients find
// the CA that signed the server's certificate. The server and leasectl use
// it, so the CLI need not link the server.
package layout

import (
	"net"
	"os"
	"path/filepath"
	"strings"
)

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
	// RaftDir is the folder, under the data folder, of the replicated log
	// (RaftDir/wal) and its snapshots (RaftDir/snapshots).
	RaftDir = "raft"
	// EnvCACert names the environment variable that gives the command-line
	// tools the CA file when --cacert is not given; it comes before a local
	// data folder's CA.
	EnvCACert = "LEASECTL_CACERT"
)

// CAPath returns <dataDir>/tls/ca.pem, where clients find the CA of a server
// started with that data folder.
func CAPath(dataDir string) string {
	return filepath.Join(dataDir, TLSDir, CAFile)
}

// IsLoopback reports whether host names this machine's loopback interface.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// FindCA returns the CA file that a command-line tool verifies the server
// at endpoint with: cacert if it is set; then env, the value of EnvCACert,
// which the user set on purpose; then, for a loopback endpoint, dataDir's
// CA if that file exists. It returns "" if none applies, and whether the
// endpoint is on loopback, for the tool's error message.
func FindCA(endpoint, dataDir, cacert, env string) (path string, local bool) {
	host, _, _ := net.SplitHostPort(endpoint)
	local = IsLoopback(host)
	if cacert != "" {
		return cacert, local
	}
	if env = strings.TrimSpace(env); env != "" {
		return env, local
	}
	if local {
		p := CAPath(dataDir)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, local
		}
	}
	return "", local
}
