package server

import (
	"crypto/tls"
	"path/filepath"
	"slices"
	"testing"

	"github.com/leased/leased/protocol"
)

// TestTLSWrappers checks what the wrappers over internal/tlsfiles add: the
// file names and paths they export, and configs that offer protocol.ALPN.
// tlsfiles tests the certificates themselves.
func TestTLSWrappers(t *testing.T) {
	data := t.TempDir()
	if got, want := CAPath(data), filepath.Join(data, "tls", "ca.pem"); got != want {
		t.Errorf("CAPath = %q, want %q", got, want)
	}
	for name, got := range map[string]string{
		"TLSDirName": TLSDirName, "CAFileName": CAFileName, "CAKeyFileName": CAKeyFileName,
		"CertFileName": CertFileName, "KeyFileName": KeyFileName,
	} {
		want := map[string]string{
			"TLSDirName": "tls", "CAFileName": "ca.pem", "CAKeyFileName": "ca-key.pem",
			"CertFileName": "server.pem", "KeyFileName": "server-key.pem",
		}[name]
		if got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}

	check := func(what string, cfg *tls.Config, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if cfg.MinVersion != tls.VersionTLS13 {
			t.Errorf("%s: MinVersion = %#x, want TLS 1.3", what, cfg.MinVersion)
		}
		if !slices.Equal(cfg.NextProtos, []string{protocol.ALPN}) {
			t.Errorf("%s: NextProtos = %q, want [%q]", what, cfg.NextProtos, protocol.ALPN)
		}
		if len(cfg.Certificates) != 1 {
			t.Errorf("%s: %d certificates, want 1", what, len(cfg.Certificates))
		}
	}
	cfg, err := LoadOrCreateTLS(data, nil)
	check("LoadOrCreateTLS", cfg, err)
	dir := filepath.Join(data, TLSDirName)
	cfg, err = LoadTLSFiles(filepath.Join(dir, CertFileName), filepath.Join(dir, KeyFileName))
	check("LoadTLSFiles", cfg, err)
}
