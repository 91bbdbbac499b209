package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// TestExitStatusTable brings the real leasectl, against a real server, to
// every row of exitStatuses, and fails if a row has no case here.
func TestExitStatusTable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// One TTL lease at most, so that a second grant is refused (status 1);
	// a long term, so that a write waits for a holder until interrupted.
	srv := clitest.StartServer(t, bins, "", filepath.Join(dir, "data"), "--lease-term", "30s", "--max-ttl-leases", "1")
	otherCA := filepath.Join(dir, "other")
	if _, err := server.LoadOrCreateTLS(otherCA, nil); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	udp, err := clitest.FreeUDPPort()
	if err != nil {
		t.Fatal(err)
	}
	dead := net.JoinHostPort("127.0.0.1", strconv.Itoa(udp))
	missing := filepath.Join(dir, "missing", "ca.pem")
	ok(t, srv.Ctl(t, "put", "k", "v"))
	ok(t, srv.Ctl(t, "lease", "grant", "60"))

	covered := map[int]bool{}
	for _, tc := range []struct {
		name string
		code int
		// args follow --endpoint and --cacert, unless raw.
		args []string
		raw  bool
		want string
		// quick says the command must end before it could dial.
		quick bool
	}{
		{name: "put", code: exitOK, args: []string{"put", "k", "v2"}},
		{name: "a TTL lease past --max-ttl-leases", code: exitError, args: []string{"lease", "grant", "60"}, want: "maximum of TTL leases"},
		{name: "snapshot restore", code: exitUsage, args: []string{"snapshot", "restore", "backup.snap"}, want: "leased restore FILE", quick: true},
		{name: "a TTL below the server's minimum", code: exitUsage, args: []string{"lease", "grant", "1"}, want: "below the minimum"},
		{name: "a key over the server's limit", code: exitUsage, args: []string{"put", strings.Repeat("k", server.MaxKeySize+1), "v"}, want: "too large"},
		{name: "a CA that did not sign the server's certificate", code: exitUsage, raw: true,
			args: []string{"--endpoint", srv.Addr, "--cacert", server.CAPath(otherCA), "get", "k"}, want: "not signed by the CA"},
		{name: "the same, asking for the leader", code: exitUsage, raw: true,
			args: []string{"--endpoint", srv.Addr, "--cacert", server.CAPath(otherCA), "member", "list"}, want: "not signed by the CA", quick: true},
		{name: "a missing CA file, endpoint status", code: exitUsage, raw: true,
			args: []string{"--endpoints", srv.Addr + "," + dead, "--cacert", missing, "endpoint", "status"}, want: "the CA file " + missing + " (--cacert) cannot be read", quick: true},
		{name: "a missing CA file, member list", code: exitUsage, raw: true,
			args: []string{"--endpoints", dead, "--cacert", missing, "member", "list"}, want: "cannot be read: no such file or directory", quick: true},
		{name: "a CA file without a certificate", code: exitUsage, raw: true,
			args: []string{"--endpoint", srv.Addr, "--cacert", notPEM, "endpoint", "health"}, want: "holds no PEM certificate", quick: true},
		{name: "a missing client certificate", code: exitUsage,
			args: []string{"--cert", missing, "--key", missing, "status"}, want: "the client certificate " + missing, quick: true},
		{name: "a snapshot into a missing folder", code: exitUsage,
			args: []string{"snapshot", "save", filepath.Join(dir, "missing", "backup.snap")}, want: "cannot write", quick: true},
		{name: "nothing listens", code: exitUnavailable, raw: true,
			args: []string{"--endpoint", dead, "--cacert", srv.CA, "--timeout", "500ms", "get", "k"}, want: "Is leased running at " + dead},
		{name: "get of a missing key", code: exitNotFound, args: []string{"get", "nothing"}, want: "key not found"},
		{name: "a lease that does not exist", code: exitNotFound, args: []string{"lease", "revoke", "00000000000000ab"}, want: "not found"},
		{name: "cas of another version", code: exitConflict, args: []string{"cas", "k", "1", "v3"}, want: "version mismatch"},
		{name: "check-token of a lock nobody holds", code: exitLockLost, args: []string{"check-token", "k", "1"}, want: `token not current: the lock on "k" is not held`},
	} {
		args := tc.args
		if !tc.raw {
			args = append([]string{"--endpoint", srv.Addr, "--cacert", srv.CA}, args...)
		}
		start := time.Now()
		r := clitest.Cmd{}.Run(t, bins.Leasectl, args...)
		took := time.Since(start)
		if r.Code != tc.code || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%s: status %d, want %d and stderr with %q\nstderr: %s", tc.name, r.Code, tc.code, tc.want, r.Stderr)
		}
		// The client library's hints speak to programs (Config.CAFile);
		// leasectl gives its own.
		if strings.Contains(r.Stderr, "Config.") {
			t.Errorf("%s: stderr in the library's terms:\n%s", tc.name, r.Stderr)
		}
		// Dialling a dead endpoint, or asking again for a leader, takes
		// the 10 s of --timeout; starting a process takes far less, even
		// on a loaded machine.
		if tc.quick && took > 5*time.Second {
			t.Errorf("%s: took %v, want an answer before any dial", tc.name, took)
		}
		covered[tc.code] = true
	}

	// Interrupted: a write that waits for a holder that never answers,
	// cut short by SIGINT.
	ctx, cancel := context.WithTimeout(context.Background(), clitest.RunTimeout)
	defer cancel()
	holder, err := protoclient.Dial(ctx, srv.Addr, protoclient.Options{CAFile: srv.CA})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if reply, err := holder.Call(ctx, &protocol.Get{Key: []byte("k")}); err != nil {
		t.Fatal(err)
	} else if g, isGet := reply.(*protocol.GetReply); !isGet || g.Term <= 0 {
		t.Fatalf("holder's get: %#v, want a lease", reply)
	}
	p := clitest.Cmd{}.Start(t, bins.Leasectl, "--endpoint", srv.Addr, "--cacert", srv.CA, "put", "k", "v4")
	// The notice comes after a second of waiting; the bound only catches
	// a write that does not wait.
	wait.For(t, clitest.RunTimeout, "the write to wait for the holder", func() bool {
		return strings.Contains(p.Stderr.String(), "is waiting for lease holders")
	})
	p.Signal(t, syscall.SIGINT)
	if code := p.Wait(t, clitest.RunTimeout); code != exitInterrupted || !strings.Contains(p.Stderr.String(), "interrupted") {
		t.Errorf("an interrupted write: status %d, want %d\nstderr: %s", code, exitInterrupted, p.Stderr.String())
	}
	covered[exitInterrupted] = true

	for _, s := range exitStatuses {
		if !covered[s.code] {
			t.Errorf("exit status %d (%s) has no case in this test", s.code, s.meaning)
		}
	}
	srv.Stop(t)
}

// TestREADMEExitStatuses checks that README.md holds the table of exit
// statuses as exitStatuses has it, and that --help prints it.
func TestREADMEExitStatuses(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := exitStatusMarkdown(); !strings.Contains(string(readme), want) {
		t.Errorf("README.md does not hold leasectl's exit statuses as exitStatuses has them; want this table in its leasectl section:\n%s", want)
	}
	a, stdout, _ := newTestApp(nil)
	if code := a.execute([]string{"--help"}); code != 0 || !strings.Contains(stdout.String(), exitStatusHelp()) {
		t.Errorf("--help: status %d, without the table of exit statuses:\n%s", code, stdout)
	}
	for _, s := range exitStatuses {
		if !strings.Contains(exitStatusHelp(), strconv.Itoa(s.code)+" ") {
			t.Errorf("the help's table lacks status %d", s.code)
		}
	}
}

// TestUnknownCommands: a command leasectl does not have is refused as a bad
// command line that names it and lists the known ones; for an etcdctl
// command, it says where leased does the same, or that it has none, and
// suggests nothing unrelated.
func TestUnknownCommands(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"snapshot", "restore", "backup.snap"}, []string{`unknown command "restore" for "leasectl snapshot"`, `"leased restore FILE --data DIR"`, "The commands of leasectl snapshot: save."}},
		{[]string{"snapshot", "restore", "backup.snap", "--data-dir", "x"}, []string{`unknown command "restore" for "leasectl snapshot"`, `"leased restore FILE --data DIR"`}},
		{[]string{"member", "update", "n1", "--peer-urls", "x"}, []string{`unknown command "update" for "leasectl member"`, "member remove NAME", "The commands of leasectl member: add, list, remove, transfer."}},
		{[]string{"endpoint", "hashkv"}, []string{`unknown command "hashkv" for "leasectl endpoint"`, "no hash", "The commands of leasectl endpoint: health, status."}},
		{[]string{"lease", "foo"}, []string{`unknown command "foo" for "leasectl lease"`, "The commands of leasectl lease: grant, keep-alive, list, revoke, timetolive."}},
		{[]string{"lease", "keepalive", "1"}, []string{`did you mean "keep-alive"?`}},
		{[]string{"move-leader", "n2"}, []string{`unknown command "move-leader" for "leasectl"`, `"leasectl member transfer NAME"`}},
		{[]string{"auth", "enable"}, []string{`unknown command "auth" for "leasectl"`, "no users, roles or passwords", "The commands of leasectl: cas, check-token, compaction, completion, del, elect, endpoint, get, lease, lock, member, put, queue, snapshot, stats, status, txn, version, watch, write-lease."}},
		{[]string{"stat"}, []string{`did you mean "stats" or "status"?`}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate" for "leasectl"`}},
	} {
		a, stdout, stderr := newTestApp(nil)
		code := a.execute(tc.args)
		for _, want := range tc.want {
			if !strings.Contains(stderr.String(), want) {
				t.Errorf("%q: stderr lacks %q:\n%s", tc.args, want, stderr)
			}
		}
		if code != exitUsage || stdout.Len() != 0 || strings.Contains(stderr.String(), "wants") {
			t.Errorf("%q: status %d, stdout %q, stderr %q; want status 2 and no argument count", tc.args, code, stdout, stderr)
		}
		if tc.args[0] == "auth" {
			if strings.Contains(stderr.String(), "did you mean") {
				t.Errorf("%q suggests an unrelated command:\n%s", tc.args, stderr)
			}
		}
	}
	// Every etcdctl command in the table is reached, whether leasectl has
	// the group it belongs to or not.
	for cmdline, where := range etcdctlElsewhere {
		a, _, stderr := newTestApp(nil)
		if code := a.execute(strings.Fields(cmdline)); code != exitUsage || !strings.Contains(stderr.String(), where) || strings.Contains(stderr.String(), "did you mean") {
			t.Errorf("%s: status %d, stderr %q; want status 2 and %q", cmdline, code, stderr, where)
		}
	}
}

// TestEveryCommandChecksFilesFirst runs every command of the tree that
// talks to a server with a CA file that does not exist, and endpoints
// where nothing listens: each refuses it at once, as a bad command line,
// before it dials. The commands that talk to no server run without one.
func TestEveryCommandChecksFilesFirst(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "ca.pem")
	var dead []string
	for range 2 {
		port, err := clitest.FreeUDPPort()
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	}
	global := []string{"--endpoints", strings.Join(dead, ","), "--cacert", missing, "--timeout", "20s"}

	a, _, _ := newTestApp(nil)
	root := a.newRootCmd()
	var connecting []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Annotations[annotConnects] != "" {
			connecting = append(connecting, c.CommandPath())
		}
		if !c.HasSubCommands() && c.Annotations[annotConnects] == "" && c.Name() != "version" {
			t.Errorf("%s talks to no server, yet is not version", c.CommandPath())
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	for _, name := range []string{"leasectl get", "leasectl put", "leasectl endpoint status", "leasectl member list", "leasectl snapshot save", "leasectl lease grant"} {
		if !slices.Contains(connecting, name) {
			t.Errorf("%s is not marked as a command that connects: %q", name, connecting)
		}
	}
	for _, path := range connecting {
		args := append(strings.Fields(path)[1:], placeholders(t, root, path)...)
		start := time.Now()
		a, stdout, stderr := newTestApp(nil)
		code := a.execute(append(global, args...))
		if took := time.Since(start); code != exitUsage || !strings.Contains(stderr.String(), "the CA file "+missing+" (--cacert) cannot be read") || took > 5*time.Second {
			t.Errorf("%q: status %d after %v, stdout %q, stderr %q; want status 2 at once, naming the CA file", args, code, took, stdout, stderr)
		}
	}
	for _, args := range [][]string{{"version"}, {"help", "get"}, {"completion", "bash"}, {"lease"}, {"snapshot", "--help"}, {}} {
		a, stdout, stderr := newTestApp(nil)
		if code := a.execute(append(global, args...)); code != exitOK || stdout.Len() == 0 {
			t.Errorf("%q: status %d, stdout %d bytes, stderr %q; want status 0 without a CA", args, code, stdout.Len(), stderr)
		}
	}
}

// usableCA returns the environment of a test app with a CA file that can
// be read (of no running server), so that a command's arguments are
// checked after its files.
func usableCA(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	if _, err := server.LoadOrCreateTLS(dir, nil); err != nil {
		t.Fatal(err)
	}
	return map[string]string{envCACert: server.CAPath(dir)}
}

// placeholders returns arguments for the command at path (such as
// "leasectl lease grant") that its Args take: one for each required
// argument its Use names.
func placeholders(t *testing.T, root *cobra.Command, path string) []string {
	t.Helper()
	c, _, err := root.Find(strings.Fields(path)[1:])
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var args []string
	for _, w := range strings.Fields(c.Use)[1:] {
		if !strings.HasPrefix(w, "[") {
			args = append(args, "x")
		}
	}
	return args
}
