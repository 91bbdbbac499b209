package server

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/diskguard"
	"github.com/leased/leased/internal/testkit/faultstore"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// scrape GETs path from the operator's listener of srv and returns the
// status and the body.
func scrape(t *testing.T, srv *Server, path string) (int, string) {
	t.Helper()
	hc := http.Client{Timeout: testTimeout}
	resp, err := hc.Get("http://" + srv.MetricsAddr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestMetricsAndHealth: the operator's listener serves what the server
// did as Prometheus metrics (requests and errors by type, latency
// histograms, leases, TTL leases, sessions, the NOSPACE alarm), liveness,
// readiness (which fails while writes are refused), and profiles when
// asked.
func TestMetricsAndHealth(t *testing.T) {
	const mib = 1 << 20
	d := &fixedDisk{u: diskguard.Usage{Used: mib, Free: 10 << 30}}
	srv, err := New(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", LeaseTerm: 2 * time.Second, Epsilon: eps, Clock: clock.NewFake(),
		Logger: quietLogger(), MetricsListen: "127.0.0.1:0", MetricsPprof: true, QuotaBytes: 1 << 30, ReserveBytes: 100 * mib, DiskUsage: d})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv)
	c := dialRaw(t, srv)
	if _, ok := writeOp(t, c, protocol.OpPut, "k", "v", 0).(*protocol.WriteReply); !ok {
		t.Fatal("put failed")
	}
	get(t, c, "k")
	get(t, c, "k")
	wantCode(t, "empty key", call(t, c, &protocol.Get{}), protocol.CodeInvalidArgument)
	if _, ok := call(t, c, &protocol.LeaseGrant{TTL: time.Minute}).(*protocol.LeaseGrantReply); !ok {
		t.Fatal("grant failed")
	}

	code, body := scrape(t, srv, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	for _, want := range []string{
		`leased_requests_total{type="get"} 3`,
		`leased_requests_total{type="write"} 1`,
		`leased_replies_total{type="get_reply"} 2`,
		`leased_errors_total{code="invalid_argument"} 1`,
		"leased_read_duration_seconds_count 3",
		"leased_write_duration_seconds_count 1",
		"leased_write_wait_seconds_count 1",
		"leased_sessions 1",
		"leased_leases 1",
		"leased_lease_storage_bytes ",
		"leased_ttl_leases 1",
		"leased_raft_leader 1",
		"leased_nospace_alarm 0",
		`leased_auth_policy_reloads_total{result="error"} 0`,
		"leased_store_bytes 1.048576e+06",
		"go_goroutines ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(body, want+"\n") && !strings.Contains(body, want) {
			t.Errorf("/metrics has no %q", want)
		}
	}
	if strings.Contains(body, "leased_lease_storage_bytes 0\n") {
		t.Error("leased_lease_storage_bytes is 0 with a lease outstanding")
	}
	if code, body := scrape(t, srv, "/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := scrape(t, srv, "/readyz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("/readyz: %d %q", code, body)
	}
	if code, body := scrape(t, srv, "/debug/pprof/"); code != http.StatusOK || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/: %d", code)
	}

	// Past the reserve, writes are refused: the node is alive but not
	// ready, and says why.
	d.set(diskguard.Usage{Used: mib, Free: 80 * mib})
	srv.node.CheckDisk()
	if code, body := scrape(t, srv, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "NOSPACE") {
		t.Errorf("/readyz past the reserve: %d %q", code, body)
	}
	if code, _ := scrape(t, srv, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz past the reserve: %d", code)
	}
	if _, body := scrape(t, srv, "/metrics"); !strings.Contains(body, "leased_nospace_alarm 1") {
		t.Error("/metrics does not show the alarm")
	}
}

// TestMetricsOff: without MetricsListen there is no listener, and without
// MetricsPprof no profiles.
func TestMetricsOff(t *testing.T) {
	srv := startServer(t, t.TempDir(), clock.NewFake(), time.Second)
	if srv.MetricsAddr() != nil {
		t.Fatalf("a metrics listener at %v nobody asked for", srv.MetricsAddr())
	}
	srv2, err := New(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quietLogger(), MetricsListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv2)
	if code, _ := scrape(t, srv2, "/debug/pprof/"); code != http.StatusNotFound {
		t.Errorf("/debug/pprof/ without MetricsPprof: %d, want 404", code)
	}
}

// TestMetricsTLSOffLoopback: the listener is plain HTTP only on a
// loopback address.
func TestMetricsTLSOffLoopback(t *testing.T) {
	for addr, loop := range map[string]bool{"127.0.0.1:1": true, "[::1]:1": true, "0.0.0.0:1": false, "10.1.2.3:1": false} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := isLoopback(a); got != loop {
			t.Errorf("isLoopback(%s) = %v, want %v", addr, got, loop)
		}
	}
}

// TestDashboardMetricsExist: every metric that the Grafana dashboard in
// docs/grafana queries is one the server exports, so that no panel stays
// empty after a rename.
func TestDashboardMetricsExist(t *testing.T) {
	raw, err := os.ReadFile("../docs/grafana/leased-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	srv, err := New(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quietLogger(), MetricsListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv)
	_, body := scrape(t, srv, "/metrics")
	exported := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, kind, _ := strings.Cut(name, " ")
			exported[name] = true
			if kind == "histogram" {
				for _, s := range []string{"_bucket", "_sum", "_count"} {
					exported[name+s] = true
				}
			}
		}
	}
	metric := regexp.MustCompile(`\b(leased_[a-z_]+|process_[a-z_]+|go_[a-z_]+)\b`)
	n := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range metric.FindAllString(tg.Expr, -1) {
				n++
				if !exported[m] {
					t.Errorf("panel %q queries %s, which the server does not export", p.Title, m)
				}
			}
		}
	}
	if n < 20 {
		t.Fatalf("only %d metric references in the dashboard", n)
	}
}

// TestReadyzStoreDown: after a commit failed, the node is not ready until
// its store is reopened.
func TestReadyzStoreDown(t *testing.T) {
	fs := faultstore.New(store.NewMemory())
	srv, err := New(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quietLogger(), MetricsListen: "127.0.0.1:0",
		Store: fs, Clock: clock.NewFake(), HorizonStep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv)
	if code, _ := scrape(t, srv, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz: %d", code)
	}
	fs.Fail(errors.New("disk on fire"))
	c := dialRaw(t, srv)
	wantCode(t, "put while the store fails", writeOp(t, c, protocol.OpPut, "k", "v", 0), protocol.CodeInternal)
	if code, body := scrape(t, srv, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "disk on fire") {
		t.Fatalf("/readyz with the store down: %d %q", code, body)
	}
}
