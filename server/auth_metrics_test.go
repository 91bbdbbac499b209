package server

import (
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/leased/leased/internal/testkit/logbuf"
)

// TestPolicyFileWritableWarned: a policy file that its group or everyone
// may write is named in a warning, with its mode, at the start and again
// at a reload; one that only its owner may write is not.
func TestPolicyFileWritableWarned(t *testing.T) {
	a := startAuthServer(t, testPolicy)
	restart := func() *logbuf.Buffer {
		logs := &logbuf.Buffer{}
		a.cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
		a.restart(t, nil)
		return logs
	}
	if logs := restart(); warnings(logs, a.policy, 0o600) != 0 || strings.Contains(logs.String(), "may be written by others") {
		t.Fatalf("a warning for a policy file of mode 0600:\n%s", logs)
	}
	for _, mode := range []os.FileMode{0o666, 0o620, 0o602} {
		if err := os.Chmod(a.policy, mode); err != nil {
			t.Fatal(err)
		}
		logs := restart()
		if n := warnings(logs, a.policy, mode); n != 1 {
			t.Fatalf("mode %04o: %d warnings at the start, want 1:\n%s", mode, n, logs)
		}
		if err := a.srv.ReloadPolicy(); err != nil {
			t.Fatal(err)
		}
		if n := warnings(logs, a.policy, mode); n != 2 {
			t.Fatalf("mode %04o: %d warnings after a reload, want 2:\n%s", mode, n, logs)
		}
	}
}

// warnings counts the lines of logs that warn that the policy file at
// path, of mode, may be written by others.
func warnings(logs *logbuf.Buffer, path string, mode os.FileMode) int {
	n := 0
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "may be written by others") &&
			strings.Contains(line, "file="+path) && strings.Contains(line, fmt.Sprintf("mode=%04o", mode)) {
			n++
		}
	}
	return n
}

// TestMetricsNeedRightOffLoopback: off loopback, under an access policy,
// the operator's listener serves metrics and profiles only to a client
// whose certificate the policy gives the metrics right, or admin; any
// other client of the CA gets 403 naming it and the right, and health
// stays open to it. A reload that grants the right lets the client in.
func TestMetricsNeedRightOffLoopback(t *testing.T) {
	const policy = testPolicy + `
  prometheus:
    metrics: true
`
	a := startAuthServer(t, policy)
	a.cfg.MetricsListen, a.cfg.MetricsPprof = "0.0.0.0:0", true // not loopback: HTTPS
	a.restart(t, nil)
	_, port, err := net.SplitHostPort(a.srv.MetricsAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	scrapeAs := func(name, path string) (int, string) {
		t.Helper()
		hc := http.Client{Timeout: testTimeout, Transport: &http.Transport{TLSClientConfig: a.clientTLS(t, a.caDir, name)}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get("https://" + net.JoinHostPort("127.0.0.1", port) + path)
		if err != nil {
			t.Fatalf("%s GET %s: %v", name, path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	for _, name := range []string{"prometheus", "ops"} {
		for _, path := range []string{"/metrics", "/debug/pprof/"} {
			if code, body := scrapeAs(name, path); code != http.StatusOK {
				t.Errorf("%s GET %s: %d %s, want 200", name, path, code, body)
			}
		}
	}
	if code, body := scrapeAs("prometheus", "/metrics"); code != http.StatusOK || !strings.Contains(body, "leased_requests_total") {
		t.Errorf("prometheus GET /metrics: %d, without the server's metrics", code)
	}
	for _, name := range []string{"app", "stranger", "nobody"} {
		for _, path := range []string{"/metrics", "/debug/pprof/", "/debug/pprof/cmdline"} {
			code, body := scrapeAs(name, path)
			if code != http.StatusForbidden || !strings.Contains(body, fmt.Sprintf("client %q lacks the metrics right", name)) || strings.Contains(body, "leased_") {
				t.Errorf("%s GET %s: %d %q, want 403 naming the client and the metrics right", name, path, code, body[:min(len(body), 100)])
			}
		}
		if code, _ := scrapeAs(name, "/healthz"); code != http.StatusOK {
			t.Errorf("%s GET /healthz: %d, want 200", name, code)
		}
	}
	// A client without a certificate of the CA is not let in at all.
	hc := http.Client{Timeout: testTimeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: certPool(t, CAPath(a.srv.cfg.Dir))}}}
	if resp, err := hc.Get("https://" + net.JoinHostPort("127.0.0.1", port) + "/metrics"); err == nil {
		resp.Body.Close()
		t.Errorf("GET /metrics without a certificate: %d, want a refused handshake", resp.StatusCode)
	}
	if err := a.writePolicy(t, strings.Replace(policy, "  app:\n", "  app:\n    metrics: true\n", 1)); err != nil {
		t.Fatal(err)
	}
	if code, body := scrapeAs("app", "/metrics"); code != http.StatusOK {
		t.Errorf("app GET /metrics after the reload that grants it metrics: %d %s", code, body)
	}
}
