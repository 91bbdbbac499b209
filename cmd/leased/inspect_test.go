package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leased/leased/internal/testkit/clitest"
)

// runInspect runs `leased inspect --output json` on the data folder and
// returns what it printed. Callers: the inspect and cluster crash tests.
func runInspect(t *testing.T, data string) inspection {
	t.Helper()
	r := clitest.Cmd{}.Run(t, bins.Leased, "inspect", "--data", data, "--output", "json")
	if r.Code != 0 {
		t.Fatalf("leased inspect --data %s: status %d\nstderr: %s", data, r.Code, r.Stderr)
	}
	var in inspection
	if err := json.Unmarshal([]byte(r.Stdout), &in); err != nil {
		t.Fatalf("leased inspect --output json printed %q: %v", r.Stdout, err)
	}
	return in
}

// TestInspect: leased inspect refuses the folder of a running server, and
// names the process; once the server is stopped it prints the figures of
// what was written, in text and in JSON, and reading changes nothing.
func TestInspect(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	srv := clitest.StartServer(t, bins, "", data, "--lease-term", "1s")
	for _, args := range [][]string{{"put", "a", "1"}, {"put", "b", "2"}, {"put", "a", "3"}, {"del", "b"}, {"put", "c", "4"}} {
		if r := srv.Ctl(t, args...); r.Code != 0 {
			t.Fatalf("leasectl %q: %s", args, r.Stderr)
		}
	}
	r := clitest.Cmd{}.Run(t, bins.Leased, "inspect", "--data", data)
	if r.Code != exitError || !strings.Contains(r.Stderr, "in use by a running process") || !strings.Contains(r.Stderr, "stop the leased") {
		t.Fatalf("inspect of a running server's folder: status %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	srv.Stop(t)

	in := runInspect(t, data)
	if in.Revision != 5 || in.Keys != 2 || in.DeletedKeys != 1 || in.WriteLeases != 0 || in.AppliedIndex == 0 ||
		in.LeaseHorizon == "" || len(in.Digest) != 64 || in.Database != filepath.Join(data, "db") {
		t.Errorf("inspect: %+v", in)
	}
	r = clitest.Cmd{}.Run(t, bins.Leased, "inspect", "--data", data)
	for _, want := range []string{"applied index:", "revision:       5", "keys:           2 (and 1 deleted)", "digest:         " + in.Digest} {
		if r.Code != 0 || !strings.Contains(r.Stdout, want) {
			t.Errorf("inspect printed no %q: status %d\nstdout: %s\nstderr: %s", want, r.Code, r.Stdout, r.Stderr)
		}
	}
	if again := runInspect(t, data); again != in {
		t.Errorf("a second inspect: %+v, want %+v", again, in)
	}

	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--data", filepath.Join(t.TempDir(), "none")}, exitError, "no database"},
		{[]string{"--data", data, "--output", "yaml"}, exitUsage, "want text or json"},
		{[]string{"--data", data, "extra"}, exitUsage, "takes no arguments"},
	} {
		r := clitest.Cmd{}.Run(t, bins.Leased, append([]string{"inspect"}, c.args...)...)
		if r.Code != c.code || !strings.Contains(r.Stderr, c.want) {
			t.Errorf("inspect %q: status %d, stderr %q; want %d and %q", c.args, r.Code, r.Stderr, c.code, c.want)
		}
	}
}

// TestInspectKilled: the folder of a killed leased holds writes that only a
// start replays, so inspect refuses it and says what to do; after a start
// and a graceful stop, inspect finds every acknowledged write.
func TestInspectKilled(t *testing.T) {
	t.Parallel()
	data := filepath.Join(t.TempDir(), "data")
	srv := clitest.StartServer(t, bins, "", data, "--lease-term", "1s")
	for _, k := range []string{"a", "b", "c"} {
		if r := srv.Ctl(t, "put", k, "v"); r.Code != 0 {
			t.Fatalf("put %s: %s", k, r.Stderr)
		}
	}
	srv.Kill(t)
	r := clitest.Cmd{}.Run(t, bins.Leased, "inspect", "--data", data)
	if r.Code != exitError || !strings.Contains(r.Stderr, "not closed cleanly") || !strings.Contains(r.Stderr, "stop it gracefully") {
		t.Fatalf("inspect of a killed server's folder: status %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	srv = srv.Restart(t)
	srv.Stop(t)
	if in := runInspect(t, data); in.Revision != 3 || in.Keys != 3 {
		t.Errorf("inspect after a restart: %+v", in)
	}
}
