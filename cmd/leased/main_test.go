package main

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/internal/version"
	"github.com/leased/leased/server"
)

// bins are the binaries built by TestMain.
var bins clitest.Binaries

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, &bins))
}

// TestSIGTERM checks that SIGTERM shuts the server down with status 0
// within a bounded time, and logs where it served and which CA to trust.
func TestSIGTERM(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	srv := clitest.StartServer(t, bins, "", data, "--lease-term", "1s", "--log-format", "json")
	if r := srv.Ctl(t, "put", "k", "v"); r.Code != 0 {
		t.Fatalf("put: %s", r.Stderr)
	}
	start := time.Now()
	srv.Stop(t)
	t.Logf("stopped in %v", time.Since(start))

	// The start-up log names the address, the data folder and the CA.
	var started map[string]any
	sc := bufio.NewScanner(strings.NewReader(srv.Stderr.String()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("--log-format json wrote a line that is not JSON: %q", sc.Text())
		}
		if m["msg"] == "leased started" {
			started = m
		}
	}
	if started == nil {
		t.Fatalf("no start-up log line in:\n%s", srv.Stderr.String())
	}
	if started["listen"] != srv.Addr || started["data"] != data || started["ca"] != server.CAPath(data) ||
		started["version"] != binaryVersion(t, bins.Leased) {
		t.Fatalf("start-up log: %v", started)
	}
	if !strings.Contains(srv.Stderr.String(), `"msg":"stopped"`) {
		t.Fatalf("no stop log line in:\n%s", srv.Stderr.String())
	}
}

// TestSecondSignal checks that a second signal during shutdown still exits
// with status 0, at once.
func TestSecondSignal(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	srv.Signal(t, syscall.SIGINT)
	srv.Signal(t, syscall.SIGINT)
	if code := srv.Wait(t, clitest.ExitTimeout); code != 0 {
		t.Fatalf("exit status %d\nstderr: %s", code, srv.Stderr.String())
	}
}

// TestDefaultDataFolder checks that without --data the server keeps its
// data in ./leased-data, with the CA in leased-data/tls/ca.pem, and that
// leasectl run from the same folder finds it.
func TestDefaultDataFolder(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port, err := clitest.FreeUDPPort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p := clitest.Cmd{Dir: dir}.Start(t, bins.Leased, "--listen", addr)
	ca := filepath.Join(dir, server.DefaultDir, "tls", "ca.pem")
	waitAnswer(t, p, dir, addr)
	if _, err := os.Stat(ca); err != nil {
		t.Fatalf("no CA in the default data folder: %v", err)
	}
	if !strings.Contains(p.Stderr.String(), "ca="+ca) {
		t.Fatalf("the start-up log does not name the CA %s:\n%s", ca, p.Stderr.String())
	}
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, clitest.ExitTimeout); code != 0 {
		t.Fatalf("exit status %d\nstderr: %s", code, p.Stderr.String())
	}
}

// TestNoFlags runs leased with no flags at all: it must serve on
// 127.0.0.1:7400 from ./leased-data. It is skipped if that port is taken,
// for instance by a leased the developer is running.
func TestNoFlags(t *testing.T) {
	pc, err := net.ListenPacket("udp", server.DefaultAddr)
	if err != nil {
		t.Skipf("%s is in use: %v", server.DefaultAddr, err)
	}
	pc.Close()
	dir := t.TempDir()
	p := clitest.Cmd{Dir: dir}.Start(t, bins.Leased)
	waitAnswer(t, p, dir, server.DefaultAddr)
	// leasectl with no flags either, from the same folder.
	r := clitest.Cmd{Dir: dir}.Run(t, bins.Leasectl, "put", "k", "v")
	if r.Code != 0 {
		t.Fatalf("leasectl put with no flags: %s", r.Stderr)
	}
	p.Signal(t, syscall.SIGTERM)
	if code := p.Wait(t, clitest.ExitTimeout); code != 0 {
		t.Fatalf("exit status %d\nstderr: %s", code, p.Stderr.String())
	}
}

// waitAnswer polls leasectl status, run from dir without --cacert, until
// the server at addr answers, for at most clitest.ReadyTimeout.
func waitAnswer(t *testing.T, p *clitest.Proc, dir, addr string) {
	t.Helper()
	var last clitest.Result
	answered := false
	defer func() { // a failed wait unwinds through here
		if !answered {
			t.Logf("last leasectl status: %s\nleased stderr: %s", last.Stderr, p.Stderr.String())
		}
	}()
	wait.For(t, clitest.ReadyTimeout, "leased at "+addr+" to answer", func() bool {
		select {
		case <-p.Exited():
			t.Fatal("leased exited")
		default:
		}
		last = clitest.Cmd{Dir: dir}.Run(t, bins.Leasectl, "--endpoint", addr, "--timeout", "1s", "status")
		return last.Code == 0
	})
	answered = true
}

// TestRestartKeepsValue checks that a value written before a restart on the
// same data folder is there after it, with the same CA.
func TestRestartKeepsValue(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	srv := clitest.StartServer(t, bins, "", data, "--lease-term", "1s")
	if r := srv.Ctl(t, "put", "durable", "survives"); r.Code != 0 {
		t.Fatalf("put: %s", r.Stderr)
	}
	ca1, err := os.ReadFile(srv.CA)
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)

	srv = clitest.StartServer(t, bins, "", data, "--lease-term", "1s")
	r := srv.Ctl(t, "-o", "json", "get", "durable")
	var got struct {
		Value string `json:"value"`
		Found bool   `json:"found"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &got); err != nil || !got.Found || got.Value != "survives" {
		t.Fatalf("get after restart: %q %q: %v", r.Stdout, r.Stderr, err)
	}
	if ca2, _ := os.ReadFile(srv.CA); !bytes.Equal(ca1, ca2) {
		t.Fatal("the CA changed across a restart")
	}
	srv.Stop(t)
}

// TestStartupErrors checks that leased exits non-zero with a clear message
// when it cannot start.
func TestStartupErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	// Port in use: hold a UDP port and ask leased to listen on it.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	r := clitest.Cmd{}.Run(t, bins.Leased, "--listen", pc.LocalAddr().String(), "--data", filepath.Join(dir, "a"))
	expectError(t, r, 1, "address already in use")

	// A data folder that is a file.
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	port, err := clitest.FreeUDPPort()
	if err != nil {
		t.Fatal(err)
	}
	r = clitest.Cmd{}.Run(t, bins.Leased, "--listen", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), "--data", file)
	expectError(t, r, 1, "data folder")

	// Bad flags: status 2, before anything is created. A term so long
	// that term + ε would wrap around time.Duration is one.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--lease-term", "-1s"}, "--lease-term: LeaseTerm -1s is not positive"},
		{[]string{"--lease-term", "2562047h"}, "--lease-term: LeaseTerm 2562047h0m0s is longer than 1h0m0s, the longest allowed"},
		{[]string{"--term", "/a/=2562047h"}, `--term: PrefixTerms: term 2562047h0m0s for prefix "/a/" is longer than 1h0m0s`},
		{[]string{"--epsilon", "2562047h"}, "--epsilon: Epsilon 2562047h0m0s is longer than 1m0s, the longest allowed"},
	} {
		r = clitest.Cmd{Dir: dir}.Run(t, bins.Leased, tc.args...)
		expectError(t, r, 2, tc.want)
		if _, err := os.Stat(filepath.Join(dir, server.DefaultDir)); err == nil {
			t.Fatalf("leased %q created its data folder despite a bad flag", tc.args)
		}
	}
}

func expectError(t *testing.T, r clitest.Result, code int, want string) {
	t.Helper()
	if r.Code != code || !strings.HasPrefix(r.Stderr, "Error: ") || !strings.Contains(r.Stderr, want) {
		t.Fatalf("want status %d and an error containing %q; got %d\nstderr: %s", code, want, r.Code, r.Stderr)
	}
}

// goodOptions returns the flags of a good server alone, which the tests
// of validate change one at a time.
func goodOptions() *options {
	return &options{
		listen: server.DefaultAddr, data: server.DefaultDir,
		leaseTerm: time.Second, epsilon: time.Millisecond,
		maxValueSize: 1, maxSessions: 1, shutdownTimeout: time.Second, retryWindow: time.Minute,
		maxSessionsPerAddr: 1, maxLeasesPerSession: 1, maxLeases: 1, maxWriteLeases: 1, maxTotalInflightBytes: 1 << 20, maxFrameBytesPerAddr: 1 << 20, frameTimeout: time.Second, retryHandshakes: -1,
		ttlMax: time.Hour, maxTTLLeases: 1, ttlCheckpoint: time.Minute, ttlRevokeRate: 1,
		initialClusterState: clusterStateNew, raftTimeouts: defaultRaftTimeouts,
	}
}

// cluster makes o the flags of a good node of a cluster.
func cluster(o *options) {
	o.name, o.peerListen, o.caDir = "n1", "127.0.0.1:7501", "ca"
}

// TestValidate checks flag validation without starting a server.
func TestValidate(t *testing.T) {
	good := goodOptions
	if err := good().validate(); err != nil {
		t.Fatalf("good options: %v", err)
	}
	for _, tc := range []struct {
		change func(*options)
		want   string
	}{
		{func(o *options) { o.listen = "7400" }, "--listen"},
		{func(o *options) { o.listen = "127.0.0.1:http" }, "not a number"},
		{func(o *options) { o.listen = "127.0.0.1:70000" }, "not a number"},
		{func(o *options) { o.data = " " }, "--data"},
		{func(o *options) { o.leaseTerm = 0 }, "--lease-term"},
		{func(o *options) { o.leaseTerm = -time.Second }, "--lease-term"},
		{func(o *options) { o.epsilon = -time.Millisecond }, "--epsilon"},
		{func(o *options) { o.maxValueSize = 0 }, "--max-value-size"},
		{func(o *options) { o.maxValueSize = server.MaxValueSizeLimit + 1 }, "--max-value-size"},
		{func(o *options) { o.maxSessions = -1 }, "--max-sessions"},
		{func(o *options) { o.maxSessionsPerAddr = 0 }, "--max-sessions-per-addr"},
		{func(o *options) { o.maxLeasesPerSession = -1 }, "--max-leases-per-session"},
		{func(o *options) { o.maxLeases = 0 }, "--max-leases"},
		{func(o *options) { o.maxWriteLeases = 0 }, "--max-write-leases-per-session"},
		{func(o *options) { o.ttlMin = -time.Second }, "--ttl-min"},
		{func(o *options) { o.ttlMax = 0 }, "--ttl-max"},
		{func(o *options) { o.ttlMax = 2562047 * time.Hour }, "--ttl-max: TTL.MaxTTL 2562047h0m0s is longer than 720h0m0s, the longest allowed"},
		{func(o *options) { o.ttlMin = time.Hour; o.ttlMax = time.Minute }, "--ttl-min, --ttl-max: TTL.MinTTL 1h0m0s is above MaxTTL 1m0s"},
		{func(o *options) { o.maxTTLLeases = 0 }, "--max-ttl-leases"},
		{func(o *options) { o.ttlCheckpoint = 0 }, "--ttl-checkpoint-interval"},
		{func(o *options) { o.ttlRevokeRate = 0 }, "--ttl-revoke-rate"},
		{func(o *options) { o.metricsPprof = true }, "--metrics-pprof"},
		{func(o *options) { o.maxTotalInflightBytes = 100 }, "--max-total-inflight-bytes"},
		{func(o *options) { o.frameTimeout = 0 }, "--frame-timeout"},
		{func(o *options) { o.retryHandshakes = 0 }, "--retry-handshakes"},
		{func(o *options) { o.retryHandshakes = -2 }, "--retry-handshakes"},
		{func(o *options) { o.retryWindow = -time.Second }, "--retry-window"},
		{func(o *options) { o.shutdownTimeout = 0 }, "--shutdown-timeout"},
		{func(o *options) { o.leaseTerm = 2562047 * time.Hour }, "--lease-term: LeaseTerm 2562047h0m0s is longer than 1h0m0s, the longest allowed"},
		{func(o *options) { o.leaseTerm = time.Hour + time.Nanosecond }, "--lease-term: LeaseTerm 1h0m0.000000001s is longer than 1h0m0s"},
		{func(o *options) { o.epsilon = 2562047 * time.Hour }, "--epsilon: Epsilon 2562047h0m0s is longer than 1m0s"},
		{func(o *options) { o.retryWindow = 25 * time.Hour }, "--retry-window: RetryWindow 25h0m0s is longer than 24h0m0s"},
		{func(o *options) { o.shutdownTimeout = 2562047 * time.Hour }, "--shutdown-timeout 2562047h0m0s: must be positive and at most 1h0m0s"},
		{func(o *options) { o.terms = []string{"/hot/=2562047h"} }, `--term: PrefixTerms: term 2562047h0m0s for prefix "/hot/" is longer than 1h0m0s`},
		{func(o *options) { o.tlsHosts = []string{""} }, "--tls-host"},
		{func(o *options) { o.tlsHosts = []string{"*.com"} }, `--tls-host: TLSHosts: a TLS host is refused: bad host "*.com": "com" is a public suffix`},
		{func(o *options) { o.tlsHosts = []string{"*.co.uk"} }, `"co.uk" is a public suffix`},
		{func(o *options) { o.tlsHosts = []string{"*"} }, `bad host "*": a wildcard must be the whole first label`},
		{func(o *options) { o.tlsHosts = []string{"*.*.example.com"} }, "a wildcard must be the whole first label"},
		{func(o *options) { o.tlsHosts = []string{"a.*.example.com"} }, "a wildcard must be the whole first label"},
		{func(o *options) { o.terms = []string{"/hot/"} }, "PREFIX=DURATION"},
		{func(o *options) { o.terms = []string{"/hot/=soon"} }, "not a duration"},
		{func(o *options) { o.terms = []string{"/hot/=-1s"} }, `--term: PrefixTerms: term -1s for prefix "/hot/" is negative`},
		{func(o *options) { o.terms = []string{"/a=1s", "/a=2s"} }, `--term: PrefixTerms: prefix "/a" is given twice`},
		{func(o *options) { o.name = "n1" }, "give --peer-listen too"},
		{func(o *options) { o.caDir = "ca" }, "give --peer-listen too"},
		{func(o *options) { cluster(o); o.peerListen = "nohost" }, "--peer-listen"},
		{func(o *options) { cluster(o); o.name = "" }, "needs --name"},
		{func(o *options) { cluster(o); o.caDir = "" }, "needs certificates"},
		{func(o *options) { cluster(o); o.cacert = "ca.pem" }, "not both"},
		{func(o *options) { cluster(o); o.caDir, o.cacert, o.cert = "", "ca.pem", "n1.pem" }, "go together"},
		{func(o *options) { cluster(o); o.initialCluster = "n1" }, "NAME=HOST:PORT"},
		{func(o *options) { cluster(o); o.initialCluster = "n1=127.0.0.1:7501,n2=nohost" }, "--initial-cluster n2"},
		{func(o *options) { cluster(o); o.initialCluster = "n1=127.0.0.1:7501,n1=127.0.0.1:7502" }, "twice"},
		{func(o *options) { cluster(o); o.initialCluster = "n1=127.0.0.1:7509" }, "but --peer-listen is"},
		{func(o *options) { cluster(o); o.initialCluster = "n2=127.0.0.1:7502" }, "does not name this node"},
	} {
		o := good()
		tc.change(o)
		err := o.validate()
		if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want a usage error about %s", o, err, tc.want)
		}
	}
	o := good()
	cluster(o)
	o.initialCluster = "n1=127.0.0.1:7501, n2=127.0.0.1:7502,n3=127.0.0.1:7503"
	if err := o.validate(); err != nil {
		t.Fatalf("a node of a cluster: %v", err)
	}
	if wantPeers := []server.Peer{{Name: "n1", Addr: "127.0.0.1:7501"}, {Name: "n2", Addr: "127.0.0.1:7502"}, {Name: "n3", Addr: "127.0.0.1:7503"}}; !slices.Equal(o.peers, wantPeers) {
		t.Errorf("--initial-cluster parsed as %v, want %v", o.peers, wantPeers)
	}
	o = good()
	o.leaseTerm, o.epsilon, o.retryWindow, o.shutdownTimeout = server.MaxLeaseTerm, server.MaxEpsilon, server.MaxRetryWindow, maxShutdownTimeout
	o.terms = []string{"/long/=1h"}
	if err := o.validate(); err != nil {
		t.Fatalf("the largest durations allowed: %v", err)
	}
	o = good()
	o.tlsHosts = []string{"*.example.com", "db1.example.com", "10.0.0.1"}
	if err := o.validate(); err != nil {
		t.Fatalf("--tls-host under a domain one can own: %v", err)
	}
	o = good()
	o.terms = []string{"/hot/=1s", "/nocache/=0", "=5s"}
	if err := o.validate(); err != nil {
		t.Fatalf("--term: %v", err)
	}
	want := []server.PrefixTerm{{Prefix: "/hot/", Term: time.Second}, {Prefix: "/nocache/"}, {Prefix: "", Term: 5 * time.Second}}
	if !slices.Equal(o.prefixTerms, want) {
		t.Errorf("--term parsed as %v, want %v", o.prefixTerms, want)
	}
	for _, tc := range []struct{ level, format string }{{"loud", "text"}, {"info", "xml"}} {
		if _, err := newLogger(&bytes.Buffer{}, tc.level, tc.format); err == nil {
			t.Errorf("newLogger(%q, %q) accepted", tc.level, tc.format)
		}
	}
	for _, lvl := range []string{"debug", "INFO", "warn", "warning", "error"} {
		if _, err := newLogger(&bytes.Buffer{}, lvl, "json"); err != nil {
			t.Errorf("newLogger(%q): %v", lvl, err)
		}
	}
}

// TestExecuteUsage checks the exit status of bad command lines, in
// process: validation fails before a server starts.
// binaryVersion is the version the binary at path reports of itself: the
// one its build information gives.
func binaryVersion(t *testing.T, path string) string {
	t.Helper()
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatalf("build information of %s: %v", path, err)
	}
	return version.From(bi, true)
}

// TestVersionFlag checks that leased --version prints the binary's own
// build and the toolchain, exits 0 and starts no server.
func TestVersionFlag(t *testing.T) {
	t.Parallel()
	bi, err := buildinfo.ReadFile(bins.Leased)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := clitest.Cmd{Dir: dir}.Run(t, bins.Leased, "--version")
	if want := "leased " + version.From(bi, true) + " " + bi.GoVersion + "\n"; r.Code != 0 || r.Stdout != want {
		t.Fatalf("--version: status %d, stdout %q, want %q; stderr %q", r.Code, r.Stdout, want, r.Stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, server.DefaultDir)); !os.IsNotExist(err) {
		t.Fatalf("--version made a data folder: %v", err)
	}
}

func TestExecuteUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--lease-term", "soon"},
		{"--epsilon", "-1ms"},
		{"--log-format", "xml"},
		{"--unknown"},
		{"extra"},
	} {
		var stdout, stderr bytes.Buffer
		if code := execute(args, nil, &stdout, &stderr, nil); code != exitUsage || !strings.HasPrefix(stderr.String(), "Error: ") {
			t.Errorf("%q: status %d, stderr %q", args, code, stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := execute([]string{"--help"}, nil, &stdout, &stderr, nil); code != 0 || !strings.Contains(stdout.String(), "--lease-term") {
		t.Errorf("--help: status %d, %q", code, stdout.String())
	}
}

// TestMetricsListener: leased --metrics-listen serves metrics, liveness and
// readiness on a real process, and profiles with --metrics-pprof.
func TestMetricsListener(t *testing.T) {
	t.Parallel()
	port, err := clitest.FreeTCPPort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s", "--metrics-listen", addr, "--metrics-pprof")
	ok := func(r clitest.Result) {
		t.Helper()
		if r.Code != 0 {
			t.Fatalf("leasectl: %d %s", r.Code, r.Stderr)
		}
	}
	ok(srv.Ctl(t, "put", "k", "v"))
	ok(srv.Ctl(t, "get", "k"))
	hc := http.Client{Timeout: 10 * time.Second}
	for path, want := range map[string]string{
		"/healthz":      "ok",
		"/readyz":       "ok",
		"/metrics":      `leased_requests_total{type="write"} 1`,
		"/debug/pprof/": "goroutine",
	} {
		resp, err := hc.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("GET %s: %d, want %q in\n%.500s", path, resp.StatusCode, want, b)
		}
	}
}

// TestSecondServerSameFolder checks that a second leased on the data folder
// of a running one exits with status 1 and asks whether another leased runs
// on that folder, instead of the lock's own error, and that the first one
// goes on serving.
func TestSecondServerSameFolder(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	srv := clitest.StartServer(t, bins, "", data, "--lease-term", "1s")
	if r := srv.Ctl(t, "put", "k", "v"); r.Code != 0 {
		t.Fatalf("put: %s", r.Stderr)
	}
	port, err := clitest.FreeUDPPort()
	if err != nil {
		t.Fatal(err)
	}
	// On another address, and on the same one (two `go run ./cmd/leased`
	// in one folder): the folder is named first.
	for _, addr := range []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), srv.Addr} {
		r := clitest.Cmd{}.Run(t, bins.Leased, "--listen", addr, "--data", data)
		expectError(t, r, 1, "is another leased already running on this folder?")
		if !strings.Contains(r.Stderr, "leased.lock") {
			t.Errorf("on %s, the error does not name the lock file: %s", addr, r.Stderr)
		}
	}
	if r := srv.Ctl(t, "get", "k"); r.Code != 0 || !strings.Contains(r.Stdout, "v") {
		t.Fatalf("the first server stopped serving: status %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	srv.Stop(t)
}

// TestExampleEndpoints checks the endpoints the start-up log suggests: a
// listen address that no client can dial (0.0.0.0, ::) becomes loopback,
// and other machines are shown the --tls-host or the host name.
func TestExampleEndpoints(t *testing.T) {
	host := func() (string, error) { return "db1", nil }
	noHost := func() (string, error) { return "", errors.New("no host name") }
	for _, tc := range []struct {
		addr                string
		tlsHosts            []string
		hostname            func() (string, error)
		wantLocal, wantRemo string
	}{
		{"127.0.0.1:7400", nil, host, "127.0.0.1:7400", ""},
		{"[::1]:7400", nil, host, "[::1]:7400", ""},
		{"10.0.0.7:7400", nil, host, "10.0.0.7:7400", ""},
		{"0.0.0.0:7400", nil, host, "127.0.0.1:7400", "db1:7400"},
		{"0.0.0.0:7400", []string{"*.example.com", "db1.example.com"}, host, "127.0.0.1:7400", "db1.example.com:7400"},
		{"[::]:7401", nil, host, "[::1]:7401", "db1:7401"},
		{":7400", nil, host, "127.0.0.1:7400", "db1:7400"},
		{"0.0.0.0:7400", nil, noHost, "127.0.0.1:7400", ""},
	} {
		local, remote := exampleEndpoints(tc.addr, tc.tlsHosts, tc.hostname)
		if local != tc.wantLocal || remote != tc.wantRemo {
			t.Errorf("exampleEndpoints(%q, %q) = %q, %q; want %q, %q", tc.addr, tc.tlsHosts, local, remote, tc.wantLocal, tc.wantRemo)
		}
	}
}

// TestStartLogExampleWorks runs the leasectl command that the start-up log
// suggests, as written, and checks that it reaches the server.
func TestStartLogExampleWorks(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	srv := clitest.StartServer(t, bins, "", data, "--log-format", "json")
	var example string
	sc := bufio.NewScanner(strings.NewReader(srv.Stderr.String()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "clients must trust the CA" {
			example, _ = m["example"].(string)
		}
	}
	args := strings.Fields(example)
	if len(args) < 2 || args[0] != "leasectl" {
		t.Fatalf("no leasectl example in the start-up log:\n%s", srv.Stderr.String())
	}
	r := clitest.Cmd{Dir: t.TempDir()}.Run(t, bins.Leasectl, args[1:]...)
	if r.Code != 0 || !strings.Contains(r.Stdout, srv.Addr) {
		t.Fatalf("%s: status %d\nstdout: %s\nstderr: %s", example, r.Code, r.Stdout, r.Stderr)
	}
	srv.Stop(t)
}
