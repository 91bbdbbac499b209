package server

import (
	"bytes"
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
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

// TestTLSHostsChecked: a wildcard host that is not under a domain someone
// can own is refused by Validate and New, before the data folder is made.
func TestTLSHostsChecked(t *testing.T) {
	for _, host := range []string{"*.com", "*.co.uk", "*", "*.*.example.com", "a.*.example.com"} {
		cfg := Config{TLSHosts: []string{host}}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "TLS host") || !strings.Contains(err.Error(), host) {
			t.Errorf("Validate with TLS host %q: %v, want an error naming it", host, err)
		}
		cfg.Dir, cfg.Addr, cfg.Store = filepath.Join(t.TempDir(), "data"), "127.0.0.1:0", store.NewMemory()
		if srv, err := New(cfg); err == nil {
			srv.Close()
			t.Errorf("New accepted TLS host %q", host)
		}
		if _, err := os.Stat(cfg.Dir); err == nil {
			t.Errorf("New with TLS host %q made the data folder", host)
		}
	}
	if err := (Config{TLSHosts: []string{"*.example.com"}}).Validate(); err != nil {
		t.Errorf("*.example.com: %v", err)
	}
}

// TestTLSNewCAWarned: a server started with a new TLS host gets a new CA,
// since the old one's key is not kept and it may not sign for the host,
// and its logger warns that clients must trust the new ca.pem.
func TestTLSNewCAWarned(t *testing.T) {
	dir := t.TempDir()
	start := func(hosts ...string) string {
		t.Helper()
		var logged bytes.Buffer
		srv, err := New(Config{Dir: dir, Addr: "127.0.0.1:0", Store: store.NewMemory(), TLSHosts: hosts,
			Logger: slog.New(slog.NewTextHandler(&logged, nil))})
		if err != nil {
			t.Fatal(err)
		}
		srv.Close()
		return logged.String()
	}
	start()
	ca, err := os.ReadFile(CAPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	if logged := start(); strings.Contains(logged, "new CA") {
		t.Errorf("a restart with the same hosts: %s", logged)
	}
	logged := start("db1.example.com")
	if !strings.Contains(logged, "level=WARN") || !strings.Contains(logged, "clients must trust the new CA certificate") || !strings.Contains(logged, CAPath(dir)) {
		t.Errorf("a new TLS host: log %q, want a warning that clients must trust the new %s", logged, CAPath(dir))
	}
	if now, _ := os.ReadFile(CAPath(dir)); bytes.Equal(ca, now) {
		t.Error("ca.pem kept for a host its CA may not sign for")
	}
	if _, err := os.Stat(filepath.Join(dir, TLSDirName, CAKeyFileName)); err == nil {
		t.Error("the CA key is kept in the data folder")
	}
}

// TestNoSessionTickets: the server issues no TLS session tickets (a ticket
// would only cost memory and work, since no client resumes), so a client
// that keeps a session cache does a full handshake every time, and is
// served.
func TestNoSessionTickets(t *testing.T) {
	srv := startServer(t, t.TempDir(), clock.NewFake(), time.Second)
	tlsConf, err := protoclient.TLSConfig(protoclient.Options{CAFile: CAPath(srv.cfg.Dir)}, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	tlsConf.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	for i := range 2 {
		c := dial(t, srv, protoclient.Options{TLSConfig: tlsConf})
		if err := c.Conn().Context().Err(); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if c.Conn().ConnectionState().TLS.DidResume {
			t.Fatalf("connection %d resumed a TLS session", i)
		}
		get(t, c, "k")
		c.Close()
	}
}
