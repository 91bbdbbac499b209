package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/leased/leased/bench"
	"github.com/leased/leased/internal/testkit/clitest"
)

// bins are the binaries built by TestMain: the endpoint tests run a real
// leased.
var bins clitest.Binaries

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, &bins))
}

// tiny are the flags of a run of a few seconds.
var tiny = []string{"--sharing", "1", "--terms", "10s", "--delay-terms", "none", "--slow-terms", "10s", "--slow-writes", "2",
	"--warmup", "100ms", "--measure", "300ms", "--pairs", "4", "--clients", "2", "--margin", "100ms", "--progress=false"}

// leasebench runs execute with args and an environment without
// LEASECTL_CACERT.
func leasebench(t *testing.T, ctx context.Context, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = execute(ctx, args, &out, &errb, func(string) string { return "" })
	return code, out.String(), errb.String()
}

func TestServerFlags(t *testing.T) {
	code, out, errs := leasebench(t, context.Background(), "--server-flags", "--terms", "0,10s,30s", "--slow-terms", "30s", "--delay-terms", "none")
	want := "--epsilon 1ms --term leasebench/term-0s/=0s --term leasebench/term-100ms/=100ms --term leasebench/term-300ms/=300ms\n"
	if code != exitOK || out != want {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 0 and %q", code, out, errs, want)
	}
}

// TestFull checks that --full starts from the full sweep and that the
// flags given beside it still apply, and that every flag bound to a
// bench.Config field is carried over (configFlags).
func TestFull(t *testing.T) {
	code, out, _ := leasebench(t, context.Background(), "--full", "--server-flags")
	if code != exitOK || !strings.Contains(out, "--term leasebench/term-20ms/=20ms") {
		t.Errorf("--full --server-flags: exit %d, %q; want the full sweep's 2 s term (20ms real)", code, out)
	}
	code, out, _ = leasebench(t, context.Background(), "--full", "--terms", "0,1s", "--slow-terms", "none", "--delay-terms", "none", "--server-flags")
	if want := "--epsilon 1ms --term leasebench/term-0s/=0s --term leasebench/term-10ms/=10ms\n"; code != exitOK || out != want {
		t.Errorf("--full with terms: exit %d, %q; want %q", code, out, want)
	}

	var cfg bench.Config
	fields := configFlags(&cfg, &cfg)
	own := map[string]bool{"full": true, "out": true, "data": true, "server-flags": true, "progress": true, "verbose": true, "help": true}
	cmd := newCommand(context.Background(), io.Discard, io.Discard, func(string) string { return "" })
	cmd.InitDefaultHelpFlag()
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if _, ok := fields[f.Name]; !ok && !own[f.Name] {
			t.Errorf("flag --%s is neither carried over by --full nor one of leasebench's own", f.Name)
		}
	})
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--no-such-flag"}, "unknown flag"},
		{[]string{"extra"}, "takes no arguments"},
		{[]string{"--terms", "10s,x"}, `invalid argument "10s,x"`},
		{[]string{"--scale", "0"}, "scale 0: must be positive"},
		{[]string{"--sharing", "1,-1"}, "sharing -1"},
		{[]string{"--endpoint", "10.0.0.1:7400"}, "no CA certificate for 10.0.0.1:7400"},
		{[]string{"--server-flags", "--scale", "0"}, "scale 0: must be positive"},
	} {
		code, out, errs := leasebench(t, context.Background(), tc.args...)
		if code != exitUsage || out != "" || !strings.Contains(errs, tc.want) || !strings.Contains(errs, "leasebench --help") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d and %q", tc.args, code, out, errs, exitUsage, tc.want)
		}
	}
}

func TestInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	code, _, errs := leasebench(t, ctx, tiny...)
	if code != exitInterrupted || !strings.Contains(errs, "interrupted") {
		t.Fatalf("exit %d, stderr %q; want %d", code, errs, exitInterrupted)
	}
}

// TestInProcess runs a tiny benchmark against the in-process server.
func TestInProcess(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := leasebench(t, context.Background(), append(tiny, "--out", dir)...)
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, want := range []string{"in-process server", "time scale 100", "S=1, time scale 100: 2 clients, 4 keys", "rel.load", "slow", "files in " + dir} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout lacks %q:\n%s", want, out)
		}
	}
	for _, name := range []string{bench.FileJSON, bench.FilePointsCSV, bench.FileSlowCSV, bench.FileRelativeLoad, bench.FileWriteLatency} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestEndpoint runs a tiny benchmark against a leased process started with
// the flags --server-flags prints, and checks that one started without
// them is refused with those flags in the message.
func TestEndpoint(t *testing.T) {
	code, flags, _ := leasebench(t, context.Background(), append(tiny, "--server-flags")...)
	if code != exitOK {
		t.Fatalf("--server-flags: exit %d", code)
	}
	srv := clitest.StartServer(t, bins, t.TempDir(), "data", strings.Fields(flags)...)
	code, out, errs := leasebench(t, context.Background(), append(tiny, "--endpoint", srv.Addr, "--cacert", srv.CA, "--out", "")...)
	if code != exitOK || !strings.Contains(out, "server at "+srv.Addr) || strings.Contains(out, "files in") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}

	plain := clitest.StartServer(t, bins, t.TempDir(), "data")
	code, _, errs = leasebench(t, context.Background(), append(tiny, "--endpoint", plain.Addr, "--cacert", plain.CA, "--out", "")...)
	if code != exitError || !strings.Contains(errs, "start leased with: leased "+strings.TrimSpace(flags)) {
		t.Fatalf("server without the terms: exit %d, stderr %q", code, errs)
	}
}
