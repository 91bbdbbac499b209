package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leased/leased/internal/testkit/clitest"
)

// TestHelpStatesRightsAndExits: the help of each admin and cluster command
// says which right it needs under an access policy, and how it exits;
// TestRightsUnderAPolicy and the exit-status tests check that it is so.
// Each case wants a few facts, not the whole text.
func TestHelpStatesRightsAndExits(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		want []string
	}{
		{"snapshot save", []string{"needs the admin right", `"admin: true"`, "Exit status: 2 if FILE.part cannot be written",
			"3 if no endpoint leads or names the leader within --timeout", "1 for a stream that does not pass, or a refusal by the access policy",
			"SIZE in binary units and exactly", `-o json: "bytes", an exact integer`, "a stderr that is a pipe or a file gets none"}},
		{"stats", []string{"needs no right under an access policy", "sizes (lease_storage_bytes, inflight_bytes, history_bytes) are in binary units"}},
		{"compaction", []string{"needs the admin right", `"admin: true"`, "Exit status: 2 if REV is not a number or is above the current revision",
			"3 if no endpoint leads or names the leader within --timeout", "1 for a refusal by the access policy"}},
		{"watch", []string{"needs the read right on the whole range it watches", `"permission denied"`, "Exit status: 0 after Ctrl-C or SIGTERM",
			"1 if the server's history no longer holds the revision the watch needs", "names the compaction point", "or for a refusal by the access policy",
			"2 for a --rev past the next revision", "3 if the server cannot be reached within --timeout", `"TYPE KEY REVISION"`, `"prev REVISION VALUE"`}},
		{"endpoint status", []string{"exits with status 3", "with status 2 if the cause is the command line", "needs no right"}},
		{"endpoint health", []string{"exits with status 3 if any endpoint is unhealthy", "with status 2 if the cause is the command line", "needs no right"}},
		{"member", []string{"add, remove and transfer need the admin right", "list needs no right", "(exit status 1)",
			"Exit status: 4 for a NAME that is no member", "2 for a change the cluster cannot take", "3 if no endpoint leads"}},
		{"member list", []string{"needs no right"}},
		{"member add", []string{"needs the admin right", "refused (status 2)"}},
		{"member remove", []string{"needs the admin right", "last voter is refused (status 2)", "not found (status 4)", "its leased exits with status 1"}},
		{"member transfer", []string{"needs the admin right", "(status 2)", "not found (status 4)"}},
	} {
		a, stdout, stderr := newTestApp(nil)
		if code := a.execute(append(strings.Fields(tc.cmd), "--help")); code != exitOK {
			t.Fatalf("%s --help: status %d, stderr %q", tc.cmd, code, stderr)
		}
		help := strings.Join(strings.Fields(stdout.String()), " ") // unwrapped
		for _, want := range tc.want {
			if !strings.Contains(help, want) {
				t.Errorf("leasectl %s --help does not say %q:\n%s", tc.cmd, want, stdout)
			}
		}
	}
}

// TestRightsUnderAPolicy: real processes. Under an access policy, snapshot
// save and the member changes need the admin right, as their help says:
// another client is refused with status 1 and a message that names it,
// and no file is left behind; stats, endpoint status and member list need
// no right.
func TestRightsUnderAPolicy(t *testing.T) {
	dir := t.TempDir()
	ca, certs, policy := filepath.Join(dir, "ca"), filepath.Join(dir, "certs"), filepath.Join(dir, "policy.yaml")
	for _, args := range [][]string{
		{"cert", "create-ca", "--dir", ca},
		{"cert", "create-client", "--ca-dir", ca, "--name", "app", "--out", certs},
		{"cert", "create-client", "--ca-dir", ca, "--name", "ops", "--out", certs},
	} {
		ok(t, clitest.Cmd{}.Run(t, bins.Leased, args...))
	}
	const rules = "clients:\n  app:\n    keys:\n      - prefix: app/\n        rights: [read, write]\n  ops:\n    admin: true\n"
	if err := os.WriteFile(policy, []byte(rules), 0o600); err != nil {
		t.Fatal(err)
	}
	// leasectl, and StartServer's check that the server answers, present
	// app's certificate unless told otherwise.
	t.Setenv("LEASECTL_CERT", filepath.Join(certs, "app.pem"))
	t.Setenv("LEASECTL_KEY", filepath.Join(certs, "app-key.pem"))
	srv := clitest.StartServer(t, bins, "", filepath.Join(dir, "data"),
		"--client-ca", filepath.Join(ca, "ca.pem"), "--auth-policy", policy)

	file := filepath.Join(dir, "backup.snap")
	for _, args := range [][]string{{"snapshot", "save", file}, {"member", "add", "n2", "127.0.0.1:7410"}, {"member", "remove", "n2"}, {"member", "transfer"}, {"compaction", "0"}} {
		fails(t, srv.Ctl(t, args...), exitError, `permission denied: client "app" lacks the admin right`)
	}
	for _, f := range []string{file, file + ".part"} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Errorf("a refused snapshot save left %s: %v", f, err)
		}
	}
	for _, args := range [][]string{{"stats"}, {"endpoint", "status"}, {"endpoint", "health"}, {"member", "list"}} {
		ok(t, srv.Ctl(t, args...))
	}
	ops := []string{"--cert", filepath.Join(certs, "ops.pem"), "--key", filepath.Join(certs, "ops-key.pem")}
	ok(t, srv.Ctl(t, append(ops, "snapshot", "save", file)...))
	ok(t, srv.Ctl(t, append(ops, "compaction", "0")...))
	srv.Stop(t)
}
