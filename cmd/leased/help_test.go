package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestHelpStatesBoundsAndExits: the help of the cert, restore, inspect and
// snapshot commands states their bounds, the rights a certificate's name
// is given, and their exit statuses (which cert_test.go, restore_test.go
// and inspect_test.go check). Each case wants a few facts, not the whole
// text.
func TestHelpStatesBoundsAndExits(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		want []string
	}{
		{"cert", []string{"1 to 64 letters, digits, '.', '_' and '-', starting with a letter or digit, and not \"ca\"",
			"Exit status: 0 when the files are written; 1 when", "when one exists already", "2 for a bad command line"}},
		{"cert create-ca", []string{`Exit statuses: see "leased cert --help"`}},
		{"cert create-node", []string{"expires after 825 days, or with the CA if that is sooner", "1 to 64 letters", `Exit statuses: see "leased cert --help"`}},
		{"cert create-client", []string{"expires after 825 days, or with the CA if that is sooner", "1 to 64 letters",
			"--client-ca", "NAME is the identity the policy grants rights to", `Exit statuses: see "leased cert --help"`, `"admin: true" to change the members of a cluster, save snapshots`}},
		{"restore", []string{"revision, fencing-token and TTL lease id counters", "Exit status: 0 when DIR is made; 1 when the restore fails",
			"DIR holds anything", "2 for a bad command line", "a FILE of 1 MiB or more"}},
		{"inspect", []string{"Exit status: 0", "1 when the folder cannot be read", "held by a running leased", "2 for a bad command line"}},
		{"snapshot status", []string{"corrupt snapshot, exit status 1", "A bad command line is exit status 2", "in binary units and exactly"}},
	} {
		code, stdout, stderr := runLeased(append(strings.Fields(tc.cmd), "--help")...)
		if code != exitOK {
			t.Fatalf("leased %s --help: status %d, stderr %q", tc.cmd, code, stderr)
		}
		help := strings.Join(strings.Fields(stdout), " ") // unwrapped
		for _, want := range tc.want {
			if !strings.Contains(help, want) {
				t.Errorf("leased %s --help does not say %q:\n%s", tc.cmd, want, stdout)
			}
		}
	}
}

// TestCertNameBound: a certificate's name is what leased cert --help
// says: up to 64 characters, not "ca"; a longer one is a bad command line.
func TestCertNameBound(t *testing.T) {
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca")
	mustRun(t, "cert", "create-ca", "--dir", ca)
	mustRun(t, "cert", "create-client", "--ca-dir", ca, "--name", strings.Repeat("n", 64), "--out", filepath.Join(dir, "a"))
	for _, name := range []string{strings.Repeat("n", 65), "ca", "_n"} {
		code, _, stderr := runLeased("cert", "create-client", "--ca-dir", ca, "--name", name, "--out", filepath.Join(dir, "b"))
		if code != exitUsage {
			t.Errorf("a client named %q: status %d, want %d\nstderr: %s", name, code, exitUsage, stderr)
		}
	}
}
