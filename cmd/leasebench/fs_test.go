package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/leased/leased/bench"
	"github.com/leased/leased/leasefs"
)

// TestFS runs a small leasebench fs as a process (its mounts are
// processes of their own, leasebench fs-mount): it succeeds, writes its
// files, and its report says what the scenario promises: no stale answer
// with leases, every check made, a find pass and a change measured at
// every point, and consistency traffic that falls with the term.
func TestFS(t *testing.T) {
	if err := leasefs.CheckFUSE(); err != nil {
		t.Skipf("no FUSE mounts here: %v", err)
	}
	dir := t.TempDir()
	exe := filepath.Join(dir, "leasebench")
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "out")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "fs", "--files", "80", "--readers", "2", "--terms", "0,2s", "--ttls", "1m",
		"--measure", "2s", "--change-every", "50ms", "--out", out)
	res, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("leasebench fs: %v\n%s", err, res)
	}
	t.Logf("%s", res)
	for _, f := range []string{bench.FileFSJSON, bench.FileFSCSV, bench.FileFSLoad, bench.FileFSFind, bench.FileFSChange} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	js, err := os.ReadFile(filepath.Join(out, bench.FileFSJSON))
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.FSReport
	if err := json.Unmarshal(js, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Points) != 3 || rep.Points[0].Mode != "lease" || rep.Points[1].Mode != "lease" || rep.Points[2].Mode != "ttl" {
		t.Fatalf("points: %+v", rep.Points)
	}
	for _, p := range rep.Points {
		if p.Find.N == 0 || p.Change.N == 0 || p.Checks != 2*p.Change.N || p.Errors != 0 || p.UnpackS <= 0 {
			t.Errorf("%s term %v ms: %d finds, %d changes, %d checks, %d errors, unpack %v s", p.Mode, p.TermMS, p.Find.N, p.Change.N, p.Checks, p.Errors, p.UnpackS)
		}
		if p.Mode == "lease" && p.Stale != 0 {
			t.Errorf("term %v ms: %d stale answers with leases", p.TermMS, p.Stale)
		}
	}
	if base, leased := rep.Points[0], rep.Points[1]; leased.ConsistencyPerS >= base.ConsistencyPerS || leased.RelLoad >= 1 {
		t.Errorf("consistency traffic at a 2 s term (%.0f/s) is not below term 0's (%.0f/s)", leased.ConsistencyPerS, base.ConsistencyPerS)
	}
	if ttl := rep.Points[2]; ttl.Stale == 0 {
		t.Errorf("a TTL cache of a minute gave no stale answer in %d checks", ttl.Checks)
	}
	if rep.Model.N != 3 || rep.Model.R <= 0 {
		t.Errorf("model: %+v", rep.Model)
	}
}
