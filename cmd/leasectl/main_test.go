package main

import (
	"bytes"
	"context"
	"crypto/x509"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/version"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// bins are the binaries built by TestMain.
var bins clitest.Binaries

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, &bins))
}

// table parses a leasectl table into rows of fields, header first.
func table(t *testing.T, out string) [][]string {
	t.Helper()
	var rows [][]string
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	if len(rows) < 2 {
		t.Fatalf("want a header and rows, got %q", out)
	}
	return rows
}

// decode parses the JSON answer of a successful command into v.
func decode(t *testing.T, r clitest.Result, v any) {
	t.Helper()
	if r.Code != 0 {
		t.Fatalf("exit status %d\nstderr: %s", r.Code, r.Stderr)
	}
	if err := json.Unmarshal([]byte(r.Stdout), v); err != nil {
		t.Fatalf("bad JSON %q: %v", r.Stdout, err)
	}
}

// ok checks that r succeeded.
func ok(t *testing.T, r clitest.Result) clitest.Result {
	t.Helper()
	if r.Code != 0 {
		t.Fatalf("exit status %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	return r
}

// fails checks that r exited with code and that stderr contains want.
func fails(t *testing.T, r clitest.Result, code int, want string) {
	t.Helper()
	if r.Code != code || !strings.Contains(r.Stderr, want) {
		t.Fatalf("want exit status %d and stderr containing %q; got %d\nstdout: %s\nstderr: %s", code, want, r.Code, r.Stdout, r.Stderr)
	}
	if !strings.HasPrefix(r.Stderr, "Error: ") {
		t.Fatalf("stderr should start with \"Error: \": %q", r.Stderr)
	}
}

func parseVersion(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("version %q: %v", s, err)
	}
	return v
}

// TestCommands runs every command against one real server, in table and
// JSON output.
func TestCommands(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	ctl := func(args ...string) clitest.Result { t.Helper(); return srv.Ctl(t, args...) }

	// put, table and JSON.
	rows := table(t, ok(t, ctl("put", "greeting", "hello")).Stdout)
	if strings.Join(rows[0], " ") != "KEY VERSION" || rows[1][0] != "greeting" {
		t.Fatalf("put table: %q", rows)
	}
	v1 := parseVersion(t, rows[1][1])
	var pj writeJSON
	decode(t, ctl("-o", "json", "put", "greeting", "hello world"), &pj)
	if pj.Key != "greeting" || pj.Version <= v1 {
		t.Fatalf("put json: %+v after version %d", pj, v1)
	}
	v2 := pj.Version

	// get, table and JSON.
	r := ok(t, ctl("get", "greeting"))
	if want := "KEY       VALUE        VERSION  FOUND\ngreeting  hello world  " + strconv.FormatUint(v2, 10) + "        true\n"; r.Stdout != want {
		t.Fatalf("get table:\n%s\nwant:\n%s", r.Stdout, want)
	}
	// getMap decodes the JSON answer of get into a fresh map, so that
	// absent fields are absent.
	getMap := func(key string) map[string]any {
		t.Helper()
		var m map[string]any
		decode(t, ctl("-o", "json", "get", key), &m)
		return m
	}
	gj := getMap("greeting")
	if gj["key"] != "greeting" || gj["value"] != "hello world" || gj["version"] != float64(v2) || gj["found"] != true {
		t.Fatalf("get json: %v", gj)
	}
	if _, ok := gj["value_base64"]; ok {
		t.Fatalf("get json of UTF-8 value has value_base64: %v", gj)
	}

	// A missing key: status 4 in table output, found=false in JSON.
	fails(t, ctl("get", "nothing-here"), exitNotFound, "key not found")
	gj = getMap("nothing-here")
	if gj["found"] != false || gj["value"] != nil || gj["version"] != float64(0) {
		t.Fatalf("get json of missing key: %v", gj)
	}

	// put from stdin, byte for byte; binary values come back in base64.
	bin := []byte("a\tb\x00\xff\n")
	r = clitest.Cmd{Stdin: bytes.NewReader(bin)}.Run(t, bins.Leasectl, "--endpoint", srv.Addr, "--cacert", srv.CA, "put", "bin", "-")
	ok(t, r)
	gj = getMap("bin")
	if b, err := base64.StdEncoding.DecodeString(fmt.Sprint(gj["value_base64"])); err != nil || !bytes.Equal(b, bin) || gj["value"] != nil {
		t.Fatalf("get json of binary value: %v", gj)
	}
	if rows := table(t, ok(t, ctl("get", "bin")).Stdout); rows[1][1] != strconv.Quote(string(bin)) {
		t.Fatalf("get table of binary value: %q", rows)
	}

	// cas: a match commits, a mismatch exits 5 and changes nothing.
	rows = table(t, ok(t, ctl("cas", "greeting", strconv.FormatUint(v2, 10), "swapped")).Stdout)
	v3 := parseVersion(t, rows[1][1])
	if v3 <= v2 {
		t.Fatalf("cas version %d after %d", v3, v2)
	}
	fails(t, ctl("cas", "greeting", strconv.FormatUint(v2, 10), "lost"), exitConflict, "version mismatch")
	fails(t, ctl("-o", "json", "cas", "greeting", strconv.FormatUint(v2, 10), "lost"), exitConflict, "version mismatch")
	gj = getMap("greeting")
	if gj["value"] != "swapped" || gj["version"] != float64(v3) {
		t.Fatalf("after cas mismatch: %v", gj)
	}
	decode(t, ctl("-o", "json", "cas", "fresh", "0", "first"), &pj)
	if pj.Key != "fresh" || pj.Version <= v3 {
		t.Fatalf("cas of a new key: %+v", pj)
	}

	// del, table and JSON.
	rows = table(t, ok(t, ctl("del", "greeting")).Stdout)
	if strings.Join(rows[0], " ") != "KEY DELETED VERSION" || rows[1][0] != "greeting" || rows[1][1] != "1" {
		t.Fatalf("del table: %q", rows)
	}
	vd := parseVersion(t, rows[1][2])
	fails(t, ctl("get", "greeting"), exitNotFound, "key not found")
	var dj struct {
		Key     string `json:"key"`
		Deleted int    `json:"deleted"`
		Version uint64 `json:"version"`
	}
	decode(t, ctl("-o", "json", "del", "fresh"), &dj)
	if dj.Key != "fresh" || dj.Deleted != 1 || dj.Version <= vd {
		t.Fatalf("del json: %+v after %d", dj, vd)
	}
	// A key that is not there: nothing removed, no revision spent, the
	// version of its deletion.
	first := dj.Version
	decode(t, ctl("-o", "json", "del", "fresh"), &dj)
	if dj.Deleted != 0 || dj.Version != first {
		t.Fatalf("del of a deleted key: %+v, want 0 deleted at version %d", dj, first)
	}

	// write-lease with a value, table and JSON; tokens grow.
	rows = table(t, ok(t, ctl("write-lease", "wl", "one")).Stdout)
	if strings.Join(rows[0], " ") != "KEY TOKEN TERM VERSION" || rows[1][0] != "wl" || rows[1][2] != "1s" {
		t.Fatalf("write-lease table: %q", rows)
	}
	tok1, wv1 := parseVersion(t, rows[1][1]), parseVersion(t, rows[1][3])
	var wj writeLeaseJSON
	decode(t, ctl("-o", "json", "write-lease", "wl", "two"), &wj)
	if wj.Key != "wl" || wj.Token <= tok1 || wj.TermSeconds != 1 || wj.Version <= wv1 {
		t.Fatalf("write-lease json: %+v after token %d version %d", wj, tok1, wv1)
	}
	gj = getMap("wl")
	if gj["value"] != "two" || gj["version"] != float64(wj.Version) {
		t.Fatalf("get after write-lease: %v (write-lease %+v)", gj, wj)
	}
	// Without a value: no version.
	var wm map[string]any
	decode(t, ctl("-o", "json", "write-lease", "wl"), &wm)
	if _, ok := wm["version"]; ok || wm["token"].(float64) <= float64(wj.Token) {
		t.Fatalf("write-lease json without value: %v", wm)
	}
	// --hold for a moment, then release.
	r = ok(t, ctl("write-lease", "wl", "--hold", "50ms"))
	if !strings.Contains(r.Stderr, "Released the write lease") {
		t.Fatalf("write-lease --hold: stderr %q", r.Stderr)
	}

	// stats, table and JSON.
	rows = table(t, ok(t, ctl("stats")).Stdout)
	names := map[string]string{}
	for _, row := range rows[1:] {
		names[row[0]] = row[1]
	}
	for _, n := range []string{"revision", "sessions", "leases", "default_term", "epsilon", "alarm", "inflight_bytes", "leases_refused", "writes_refused", "sessions_refused", "retries", "messages_in.write", "messages_out.write_reply"} {
		if names[n] == "" {
			t.Fatalf("stats table lacks %s:\n%v", n, rows)
		}
	}
	var sj statsJSON
	decode(t, ctl("-o", "json", "stats"), &sj)
	if sj.Revision < wj.Version || sj.Sessions < 1 || sj.MessagesIn["write"] == 0 || sj.MessagesIn["acquire"] == 0 ||
		sj.DefaultTermSeconds != 1 || sj.EpsilonSeconds != 0.1 || sj.UptimeSeconds <= 0 {
		t.Fatalf("stats json: %+v", sj)
	}

	// status, table and JSON.
	rows = table(t, ok(t, ctl("status")).Stdout)
	serverVersion := binaryVersion(t, bins.Leased)
	if strings.Join(rows[0], " ") != "ENDPOINT VERSION SESSION EPSILON TERM REVISION COMPACTED SESSIONS UPTIME WRITES RTT" ||
		rows[1][0] != srv.Addr || rows[1][1] != serverVersion || rows[1][3] != "100ms" || rows[1][4] != "1s" || rows[1][6] != "0" || rows[1][9] != "allowed" {
		t.Fatalf("status table: %q, want server version %q", rows, serverVersion)
	}
	var st statusJSON
	decode(t, ctl("-o", "json", "status"), &st)
	if st.Endpoint != srv.Addr || st.ServerVersion != serverVersion || st.SessionID == 0 || st.EpsilonSeconds != 0.1 || st.DefaultTermSeconds != 1 ||
		st.Revision < wj.Version || st.Sessions < 1 || st.WritesHeld || st.RTTSeconds <= 0 ||
		st.MaxValueSize != server.DefaultMaxValueSize || st.CAFile != srv.CA {
		t.Fatalf("status json: %+v", st)
	}

	// Usage errors exit 2 before connecting.
	fails(t, ctl("get"), exitUsage, "get wants KEY")
	fails(t, ctl("put", "k"), exitUsage, "put wants KEY VALUE")
	fails(t, ctl("cas", "k", "seven", "v"), exitUsage, "not a version number")
	fails(t, ctl("-o", "yaml", "status"), exitUsage, "want table or json")
	fails(t, ctl("--timeout", "0s", "status"), exitUsage, "--timeout")
	fails(t, ctl("write-lease", "k", "--hold", "-1s"), exitUsage, "--hold")
	fails(t, ctl("frobnicate"), exitUsage, "unknown command")
	// Errors from the server keep their message.
	// A key the server refuses as too large is a bad command line too.
	fails(t, ctl("put", strings.Repeat("k", server.MaxKeySize+1), "v"), exitUsage, "too large")
}

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

// TestVersion checks that leasectl version and --version print the
// binary's own build, in table and JSON output, without a server.
func TestVersion(t *testing.T) {
	t.Parallel()
	bi, err := buildinfo.ReadFile(bins.Leasectl)
	if err != nil {
		t.Fatal(err)
	}
	want := version.From(bi, true)
	if want == version.Unknown || strings.ContainsAny(want, " \t") {
		t.Fatalf("leasectl's version %q: want a known version of one word", want)
	}
	// An endpoint that nobody serves: version must not connect.
	ctl := func(args ...string) clitest.Result {
		t.Helper()
		return clitest.Cmd{}.Run(t, bins.Leasectl, append([]string{"--endpoint", "127.0.0.1:1", "--timeout", "1s"}, args...)...)
	}
	rows := table(t, ok(t, ctl("version")).Stdout)
	if strings.Join(rows[0], " ") != "VERSION GO" || rows[1][0] != want || rows[1][1] != bi.GoVersion {
		t.Fatalf("version table: %q, want %s %s", rows, want, bi.GoVersion)
	}
	var vj versionJSON
	decode(t, ctl("-o", "json", "version"), &vj)
	if vj.Version != want || vj.GoVersion != bi.GoVersion {
		t.Fatalf("version json: %+v, want %s %s", vj, want, bi.GoVersion)
	}
	if r := ok(t, ctl("--version")); r.Stdout != "leasectl "+want+" "+bi.GoVersion+"\n" {
		t.Fatalf("--version printed %q, want leasectl %s %s", r.Stdout, want, bi.GoVersion)
	}
	fails(t, ctl("version", "extra"), exitUsage, "version")
}

// TestWriteLeaseHoldInterrupt checks that Ctrl-C ends --hold, releases the
// lease and exits 0, and that another client can take the lease after.
func TestWriteLeaseHoldInterrupt(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	p := clitest.Cmd{}.Start(t, bins.Leasectl, "--endpoint", srv.Addr, "--cacert", srv.CA, "-o", "json", "write-lease", "held", "mine", "--hold", "10m")
	// The answer is printed before holding; wait for it, bounded so that a
	// broken write-lease fails instead of hanging.
	p.WaitOutput(t, `"token"`, clitest.RunTimeout)
	var wj writeLeaseJSON
	if err := json.Unmarshal([]byte(p.Stdout.String()), &wj); err != nil {
		t.Fatal(err)
	}
	p.Signal(t, syscall.SIGINT)
	// Release takes one round trip; the bound only catches a hang.
	if code := p.Wait(t, clitest.RunTimeout); code != 0 {
		t.Fatalf("write-lease --hold after SIGINT: exit status %d\nstderr: %s", code, p.Stderr.String())
	}
	if !strings.Contains(p.Stderr.String(), "Released") {
		t.Fatalf("stderr: %q", p.Stderr.String())
	}
	var again writeLeaseJSON
	decode(t, srv.Ctl(t, "-o", "json", "write-lease", "held", "theirs"), &again)
	if again.Token <= wj.Token || again.Version <= wj.Version {
		t.Fatalf("second write lease %+v after %+v", again, wj)
	}
}

// TestCADiscovery checks that leasectl finds the CA of a local server by
// itself: from the folder holding leased-data, from --data, and from
// LEASECTL_CACERT.
func TestCADiscovery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := clitest.StartServer(t, bins, dir, server.DefaultDir, "--lease-term", "1s")
	ep := []string{"--endpoint", srv.Addr}

	// From the folder where leased keeps its data: no --cacert.
	r := ok(t, clitest.Cmd{Dir: dir}.Run(t, bins.Leasectl, append(ep, "-o", "json", "put", "k", "v")...))
	var pj writeJSON
	decode(t, r, &pj)
	var st statusJSON
	decode(t, clitest.Cmd{Dir: dir}.Run(t, bins.Leasectl, append(ep, "-o", "json", "status")...), &st)
	if st.CAFile != filepath.Join(dir, server.DefaultDir, "tls", "ca.pem") {
		t.Fatalf("status ca_file %q", st.CAFile)
	}
	// localhost and ::1-style names count as local too.
	_, port, _ := net.SplitHostPort(srv.Addr)
	ok(t, clitest.Cmd{Dir: dir}.Run(t, bins.Leasectl, "--endpoint", "localhost:"+port, "get", "k"))

	other := t.TempDir()
	// From elsewhere, with --data.
	ok(t, clitest.Cmd{Dir: other}.Run(t, bins.Leasectl, append(ep, "--data", filepath.Join(dir, server.DefaultDir), "get", "k")...))
	// From elsewhere, with LEASECTL_CACERT.
	ok(t, clitest.Cmd{Dir: other, Env: []string{envCACert + "=" + srv.CA}}.Run(t, bins.Leasectl, append(ep, "get", "k")...))

	// Nowhere to find it: a clear error, status 2.
	const noCA = "Error: no CA certificate: pass --cacert, or run leasectl from the folder where leased keeps its data (leased-data/tls/ca.pem)"
	r = clitest.Cmd{Dir: other}.Run(t, bins.Leasectl, append(ep, "get", "k")...)
	if r.Code != exitUsage || !strings.HasPrefix(r.Stderr, noCA) {
		t.Fatalf("no CA: status %d, stderr %q", r.Code, r.Stderr)
	}
	// A remote endpoint never uses the local data folder.
	r = clitest.Cmd{Dir: dir}.Run(t, bins.Leasectl, "--endpoint", "leased.example.invalid:7400", "get", "k")
	fails(t, r, exitUsage, "no CA certificate for leased.example.invalid:7400")
}

// TestWrongCA checks that a server whose certificate the CA did not sign is
// refused, with a hint.
func TestWrongCA(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	otherData := t.TempDir()
	if _, err := server.LoadOrCreateTLS(otherData, nil); err != nil {
		t.Fatal(err)
	}
	r := clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoint", srv.Addr, "--cacert", server.CAPath(otherData), "status")
	fails(t, r, exitUsage, "not signed by the CA in "+server.CAPath(otherData))
	r = clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoint", srv.Addr, "--cacert", filepath.Join(otherData, "missing.pem"), "status")
	fails(t, r, exitUsage, "CA file")
}

// TestUnavailable checks the error when nothing listens at the endpoint.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	port, err := clitest.FreeUDPPort()
	if err != nil {
		t.Fatal(err)
	}
	// Any CA will do: the handshake never starts.
	caDir := t.TempDir()
	if _, err := server.LoadOrCreateTLS(caDir, nil); err != nil {
		t.Fatal(err)
	}
	ep := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	start := time.Now()
	r := clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoint", ep, "--cacert", server.CAPath(caDir), "--timeout", "500ms", "get", "k")
	fails(t, r, exitUnavailable, "Is leased running at "+ep+"?")
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("--timeout 500ms took %v", d)
	}
}

// TestRestartKeepsValue checks that a value survives a crash and a restart
// on the same data folder, and that status reports writes held after it.
func TestRestartKeepsValue(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	// A long term, so that writes are still held when status asks after the
	// restart, however slow the machine. Nothing waits for it to pass.
	srv := clitest.StartServer(t, bins, "", data, "--lease-term", "1m")
	var pj writeJSON
	decode(t, srv.Ctl(t, "-o", "json", "put", "durable", "yes"), &pj)
	// A crash: a clean stop would lower the lease horizon to the leases
	// still live, and leasectl relinquished its own when it exited.
	srv.Kill(t)

	srv = clitest.StartServer(t, bins, "", data, "--lease-term", "1m")
	var gj getJSON
	decode(t, srv.Ctl(t, "-o", "json", "get", "durable"), &gj)
	if !gj.Found || gj.Value == nil || *gj.Value != "yes" || gj.Version != pj.Version {
		t.Fatalf("after restart: %+v, want version %d", gj, pj.Version)
	}
	var st statusJSON
	decode(t, srv.Ctl(t, "-o", "json", "status"), &st)
	if !st.WritesHeld || st.WritesAllowedInSeconds <= 0 || st.Revision != pj.Version {
		t.Fatalf("status after restart: %+v", st)
	}
	rows := table(t, ok(t, srv.Ctl(t, "status")).Stdout)
	if !strings.HasPrefix(strings.Join(rows[1][9:], " "), "held for") {
		t.Fatalf("status table after restart: %q", rows)
	}
	srv.Stop(t)
}

// newTestApp returns an app with fake streams and environment.
func newTestApp(env map[string]string) (*app, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	return &app{
		stdin:  strings.NewReader(""),
		stdout: &stdout,
		stderr: &stderr,
		getenv: func(k string) string { return env[k] },
		ctx:    context.Background(),
	}, &stdout, &stderr
}

func TestExecuteUsage(t *testing.T) {
	env := usableCA(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-o", "xml", "status"}, "want table or json"},
		{[]string{"--timeout", "-1s", "status"}, "must be positive"},
		{[]string{"--endpoint", "http://x:1", "status"}, "without a scheme"},
		{[]string{"--endpoints", "a:1,,b:2", "status"}, "must not be empty"},
		{[]string{"--endpoints", "a:1,quic://b:2", "status"}, "without a scheme"},
		{[]string{"--bogus"}, "unknown flag"},
		{[]string{"get", "a", "b", "c"}, "get wants KEY [END]; got 3"},
		{[]string{"write-lease"}, "write-lease wants KEY [VALUE]; got 0"},
		{[]string{"cas", "k", "1.5", "v"}, "not a version number"},
		{[]string{"cas", "k", "-3", "v"}, "unknown shorthand flag"},
		{[]string{"stats", "extra"}, "stats wants "},
		{[]string{"get", "--prefix", "/svc", "/svd"}, "it takes no END"},
		{[]string{"get", "/b", "/a"}, `KEY "/b" is past END "/a"`},
		{[]string{"get", "--limit", "-1", "/svc"}, "--limit -1"},
		{[]string{"get", "--prefix", "--print-value-only", "/svc"}, "does not go with a listing"},
		{[]string{"-o", "json", "get", "--print-value-only", "k"}, "does not go with -o json"},
		{[]string{"get", ""}, "KEY must not be empty"},
		{[]string{"put", "", "v"}, "KEY must not be empty"},
		{[]string{"del", ""}, "KEY must not be empty"},
		{[]string{"cas", "", "0", "v"}, "KEY must not be empty"},
		{[]string{"write-lease", ""}, "KEY must not be empty"},
		{[]string{"--endpoint", "127.0.0.1:abc", "status"}, `port "abc" is not a number`},
		{[]string{"--endpoint", "127.0.0.1:70000", "status"}, `port "70000" is not a number`},
		{[]string{"--endpoint", ":7400", "status"}, "want host:port"},
	} {
		a, stdout, stderr := newTestApp(env)
		if code := a.execute(tc.args); code != exitUsage || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("%q: status %d, stdout %q, stderr %q; want status 2 and %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

func TestHelpDocumentsExitStatus(t *testing.T) {
	a, stdout, _ := newTestApp(nil)
	if code := a.execute([]string{"--help"}); code != 0 || !strings.Contains(stdout.String(), "Exit status:") {
		t.Fatalf("--help: status %d, %q", code, stdout)
	}
	a, stdout, _ = newTestApp(nil)
	if code := a.execute([]string{"get", "--help"}); code != 0 || !strings.Contains(stdout.String(), `"found": false`) {
		t.Fatalf("get --help: status %d, %q", code, stdout)
	}
}

func TestNormalizeEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:7400": "127.0.0.1:7400",
		"localhost":      "localhost:7400",
		"db1.example":    "db1.example:7400",
		"::1":            "[::1]:7400",
		"[::1]":          "[::1]:7400",
		"[::1]:9000":     "[::1]:9000",
		" 10.0.0.1:1 ":   "10.0.0.1:1",
	} {
		if got, err := normalizeEndpoint(in); err != nil || got != want {
			t.Errorf("normalizeEndpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "quic://x:1", "a:b:c", "127.0.0.1:abc", "127.0.0.1:0", "127.0.0.1:65536", ":7400", "[::1]:x"} {
		if got, err := normalizeEndpoint(in); err == nil {
			t.Errorf("normalizeEndpoint(%q) = %q, want an error", in, got)
		}
	}
}

func TestCAFile(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "leased-data")
	if err := os.MkdirAll(filepath.Join(data, "tls"), 0o700); err != nil {
		t.Fatal(err)
	}
	ca := server.CAPath(data)
	if err := os.WriteFile(ca, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, endpoint, cacert, data, env, want string
	}{
		{"flag wins", "127.0.0.1:7400", "/given.pem", data, "/env.pem", "/given.pem"},
		{"env before the local data folder", "127.0.0.1:7400", "", data, "/env.pem", "/env.pem"},
		{"local data folder", "127.0.0.1:7400", "", data, "", ca},
		{"localhost", "localhost:7400", "", data, "", ca},
		{"ipv6 loopback", "[::1]:7400", "", data, "", ca},
		{"no data folder: env", "127.0.0.1:7400", "", filepath.Join(dir, "none"), "/env.pem", "/env.pem"},
		{"remote: env, not data", "10.1.2.3:7400", "", data, "/env.pem", "/env.pem"},
		{"remote: nothing", "10.1.2.3:7400", "", data, "", ""},
		{"local: nothing", "127.0.0.1:7400", "", filepath.Join(dir, "none"), "", ""},
	} {
		a, _, _ := newTestApp(map[string]string{envCACert: tc.env})
		a.endpoint, a.cacert, a.data = tc.endpoint, tc.cacert, tc.data
		got, err := a.caFile()
		if tc.want == "" {
			if !errors.Is(err, errNoCA) || a.exitCode(err) != exitUsage {
				t.Errorf("%s: got %q, %v; want errNoCA", tc.name, got, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}

func TestExitCodes(t *testing.T) {
	a, _, _ := newTestApp(nil)
	for _, tc := range []struct {
		err  error
		want int
	}{
		{errors.New("boom"), exitError},
		{fmt.Errorf("%w: x", errKeyNotFound), exitNotFound},
		{&client.ServerError{Code: protocol.CodeVersionMismatch, Message: "version mismatch: x"}, exitConflict},
		{fmt.Errorf("w: %w", client.ErrFenced), exitConflict},
		{fmt.Errorf("%w: x", errLeaseLost), exitConflict},
		{fmt.Errorf("%w: connect", client.ErrUnavailable), exitUnavailable},
		{context.DeadlineExceeded, exitUnavailable},
		{&client.ServerError{Code: protocol.CodeCanceled, Message: "write abandoned"}, exitUnavailable},
		{usagef("bad"), exitUsage},
		{&dialError{err: fmt.Errorf("%w: CA file", client.ErrInvalidArgument)}, exitUsage},
		{&client.ServerError{Code: protocol.CodeInvalidArgument, Message: "TTL out of range: TTL 1s is below the minimum of 5s"}, exitUsage},
		{&client.ServerError{Code: protocol.CodeTooLarge, Message: "too large: key of 5000 bytes"}, exitUsage},
		{&dialError{err: fmt.Errorf("%w: connect: %w", client.ErrUnavailable, x509.UnknownAuthorityError{})}, exitUsage},
		{fmt.Errorf("%w: certificate required", client.ErrUnauthenticated), exitUsage},
		{&client.ServerError{Code: protocol.CodeNotFound, Message: "TTL lease 00000000000000ab not found"}, exitNotFound},
		{&client.ServerError{Code: protocol.CodeNotFound, Message: "no member is named \"nope\""}, exitNotFound},
		{&client.ServerError{Code: protocol.CodePermissionDenied, Message: "permission denied"}, exitError},
		{&client.ServerError{Code: protocol.CodeResourceExhausted, Message: "NOSPACE"}, exitError},
	} {
		if got := a.exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	// A ServerError is shown with the server's own message only.
	if got := a.describe(&client.ServerError{Code: protocol.CodeVersionMismatch, Message: "version mismatch: key is at version 3, not 2"}); got != "version mismatch: key is at version 3, not 2" {
		t.Errorf("describe: %q", got)
	}
}

func TestTableText(t *testing.T) {
	for in, want := range map[string]string{
		"hello":       "hello",
		"hello world": "hello world",
		"héllo":       "héllo",
		"":            `""`,
		"a\tb":        `"a\tb"`,
		"line\n":      `"line\n"`,
		"\xff":        `"\xff"`,
	} {
		if got := tableText([]byte(in)); got != want {
			t.Errorf("tableText(%q) = %s, want %s", in, got, want)
		}
	}
	if s, b := jsonValue([]byte("ok")); s == nil || *s != "ok" || b != nil {
		t.Errorf("jsonValue(ok) = %v, %v", s, b)
	}
	if s, b := jsonValue([]byte{0xff}); s != nil || b == nil || *b != "/w==" {
		t.Errorf("jsonValue(0xff) = %v, %v", s, b)
	}
}

// TestEndpointHealth: endpoint health says a running server is healthy, and
// an endpoint that does not answer is not, with exit status 3.
func TestEndpointHealth(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	var h struct {
		Endpoints []struct {
			Endpoint string `json:"endpoint"`
			Health   bool   `json:"health"`
			Error    string `json:"error"`
		} `json:"endpoints"`
	}
	decode(t, srv.Ctl(t, "-o", "json", "endpoint", "health"), &h)
	if len(h.Endpoints) != 1 || !h.Endpoints[0].Health || h.Endpoints[0].Error != "" {
		t.Fatalf("endpoint health of a running server: %+v", h)
	}
	port, err := clitest.FreeUDPPort()
	if err != nil {
		t.Fatal(err)
	}
	dead := "127.0.0.1:" + strconv.Itoa(port)
	r := clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoints", srv.Addr+","+dead, "--cacert", srv.CA, "--timeout", "1s", "endpoint", "health")
	if r.Code != exitUnavailable || !strings.Contains(r.Stdout, srv.Addr) || !strings.Contains(r.Stderr, "1 of 2 endpoints unhealthy") || !strings.Contains(r.Stderr, dead) {
		t.Fatalf("endpoint health with one dead endpoint: status %d\nstdout %s\nstderr %s", r.Code, r.Stdout, r.Stderr)
	}
}

// TestPrintValueOnly checks that get --print-value-only writes the stored
// bytes and nothing else, binary bytes and trailing newlines included, and
// that a missing key writes nothing and exits with status 4.
func TestPrintValueOnly(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	for _, tc := range []struct {
		key   string
		value []byte
	}{
		{"bin", []byte{0, 0xff, 0xfe, '\n', 'a', 0x1b, '\r', '\n'}},
		{"text", []byte("10.0.0.8:5432")},
		{"empty", nil},
	} {
		r := clitest.Cmd{Stdin: bytes.NewReader(tc.value)}.Run(t, bins.Leasectl,
			"--endpoint", srv.Addr, "--cacert", srv.CA, "put", tc.key, "-")
		ok(t, r)
		r = ok(t, srv.Ctl(t, "get", "--print-value-only", tc.key))
		if !bytes.Equal([]byte(r.Stdout), tc.value) {
			t.Errorf("get --print-value-only %s: stdout %q, want %q", tc.key, r.Stdout, tc.value)
		}
	}
	r := srv.Ctl(t, "get", "--print-value-only", "missing")
	fails(t, r, exitNotFound, "key not found")
	if r.Stdout != "" {
		t.Errorf("a missing key wrote %q to stdout", r.Stdout)
	}
	srv.Stop(t)
}

// TestWriteOutlastsSilentHolder checks that leasectl's default time limit
// fits a write held up by a holder that never answers, on a server with
// the default term (10s): the write commits after the term plus ε, longer
// than the default --timeout, and says once on stderr that it is waiting.
// Given --timeout, the write gives up within it.
func TestWriteOutlastsSilentHolder(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"))
	ok(t, srv.Ctl(t, "put", "k", "v1"))

	// A holder that reads k, taking a lease for a term, and never
	// acknowledges its invalidation.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	holder, err := protoclient.Dial(ctx, srv.Addr, protoclient.Options{CAFile: srv.CA})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	leased := time.Now()
	reply, err := holder.Call(ctx, &protocol.Get{Key: []byte("k")})
	if err != nil {
		t.Fatal(err)
	}
	if g, isGet := reply.(*protocol.GetReply); !isGet || g.Term <= 0 {
		t.Fatalf("holder's get: %#v, want a lease", reply)
	}

	// With --timeout 1s, the write gives up within it (plus the time to
	// start and connect), and says why.
	start := time.Now()
	r := srv.Ctl(t, "--timeout", "1s", "put", "k", "v2")
	fails(t, r, exitUnavailable, "No answer within 1s")
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("put --timeout 1s took %v", d)
	}

	// By default it waits out the holder's lease, 10s + 100ms from the
	// holder's read, longer than --timeout's default.
	start = time.Now()
	r = ok(t, srv.Ctl(t, "put", "k", "v3"))
	if d := time.Since(leased); d < 10*time.Second {
		t.Fatalf("the write committed %v after the holder's read, before its lease ran out", d)
	}
	t.Logf("the write committed %v after the holder's read, after waiting %v", time.Since(leased), time.Since(start))
	if d := time.Since(start); d < time.Second {
		t.Fatalf("the write committed after %v: it did not wait for the holder", d)
	}
	if n := strings.Count(r.Stderr, "is waiting for lease holders to let go"); n != 1 {
		t.Fatalf("want one notice of the wait on stderr, got %d:\n%s", n, r.Stderr)
	}
	if !strings.Contains(r.Stderr, `the write to "k"`) || !strings.Contains(r.Stderr, "at most a term plus ε, 10.1s;") {
		t.Fatalf("the notice does not name the write and its bound:\n%s", r.Stderr)
	}
	if r := ok(t, srv.Ctl(t, "get", "--print-value-only", "k")); r.Stdout != "v3" {
		t.Fatalf("after the write: %q", r.Stdout)
	}
	holder.Close()
	srv.Stop(t)
}
