package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/proccluster"
)

// TestDamagedNodeRefusesThenCatchesUp: a follower whose log is damaged
// while it is stopped refuses to start, with an error that names the
// damage and says how to recover; once its db and raft folders are
// deleted as the error says (its tls folder kept), it starts again with
// the same flags, catches up from its peers, and holds the same state as
// they do: every node's folder has the same digest in leased inspect.
func TestDamagedNodeRefusesThenCatchesUp(t *testing.T) {
	t.Parallel()
	c := proccluster.Start(t, proccluster.Config{Bins: bins, Flags: append(append([]string(nil), partitionFlags...), snapshotFlags...)})
	cl := dialCluster(t, c)
	value := func(i int) string { return fmt.Sprintf("damage-test-value-%03d-%s", i, strings.Repeat("x", 100)) }
	for i := range 40 {
		put(t, cl, fmt.Sprintf("k%03d", i), value(i))
	}
	lead := c.Leader()
	f := c.Others(lead.Name)[0]
	// The damage must reach an entry above the follower's newest
	// snapshot, which it reads at its start. Under load, leaders that
	// step down add entries of their own (who leads, the horizon) after
	// the values, and a snapshot may cover every value: the follower
	// then has nothing damaged to read, and starts. It is stopped, and
	// the values are written again, up to three times.
	var r clitest.Result
	for attempt := 1; ; attempt++ {
		c.Stop(f.Name)
		flipValues(t, f.Data, value)
		var started bool
		r, started = runUntil(t, 15*time.Second, bins.Leased, f.Args()...)
		if !started {
			break
		}
		if attempt == 3 {
			t.Fatalf("%s started on a damaged log three times: every damaged entry lay below its snapshot\nstderr: %s", f.Name, r.Stderr)
		}
		t.Logf("attempt %d: every damaged entry of %s lay below its snapshot; writing the values again", attempt, f.Name)
		c.Restart(f.Name)
		for i := range 40 {
			put(t, cl, fmt.Sprintf("k%03d", i), value(i))
		}
	}
	if r.Code == 0 {
		t.Fatalf("%s started on a damaged log\nstderr: %s", f.Name, r.Stderr)
	}
	t.Logf("%s refused to start (status %d): %s", f.Name, r.Code, strings.TrimSpace(r.Stderr))
	for _, want := range []string{"is damaged", "log entry", "leased restore", "catches up from its peers", "keep tls"} {
		if !strings.Contains(r.Stderr, want) {
			t.Errorf("the refusal does not say %q\nstderr: %s", want, r.Stderr)
		}
	}

	// More writes while it is down, and the others compact their logs
	// (snapshotFlags): it must catch up by a snapshot and the log.
	for i := 40; i < 80; i++ {
		put(t, cl, fmt.Sprintf("k%03d", i), value(i))
	}
	cl.Close()
	for _, sub := range []string{layout.DBDir, layout.RaftDir} {
		if err := os.RemoveAll(filepath.Join(f.Data, sub)); err != nil {
			t.Fatal(err)
		}
	}
	c.Restart(f.Name)
	ins := stopSettled(t, c)
	for i, in := range ins {
		if in.Digest != ins[0].Digest || in.Revision != ins[0].Revision {
			t.Errorf("%s: revision %d digest %s; %s: revision %d digest %s", c.Nodes[i].Name, in.Revision, in.Digest,
				c.Nodes[0].Name, ins[0].Revision, ins[0].Digest)
		}
		if in.Keys != 80 {
			t.Errorf("%s holds %d keys, want 80", c.Nodes[i].Name, in.Keys)
		}
	}
}

// flipValues flips a byte in the middle of every value of value(0..39) in
// the log segments of the data folder data. Not only the newest: the log's
// last batch, if damaged, reads as a write torn by a crash, which raft-wal
// drops, and which is no damage when the database and a snapshot hold its
// entries already; and the entries below the newest snapshot may be
// compacted away, still in a segment but no longer read.
func flipValues(t *testing.T, data string, value func(int) string) {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(data, layout.RaftDir, "wal", "*.wal"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no log segment in %s: %v", data, err)
	}
	flipped := false
	for _, seg := range segs {
		b, err := os.ReadFile(seg)
		if err != nil {
			t.Fatal(err)
		}
		changed := false
		for v := range 40 {
			val := []byte(value(v))
			for off := 0; ; {
				i := bytes.Index(b[off:], val)
				if i < 0 {
					break
				}
				b[off+i+len(val)/2] ^= 0xff
				off += i + len(val)
				changed = true
			}
		}
		if changed {
			if err := os.WriteFile(seg, b, 0o600); err != nil {
				t.Fatal(err)
			}
			flipped = true
		}
	}
	if !flipped {
		t.Fatalf("no value is in any of the log segments %v", segs)
	}
}

// runUntil runs bin with args for at most d. It reports started if bin
// was still running then (a server that serves), after it stopped it;
// otherwise the result of its run.
func runUntil(t *testing.T, d time.Duration, bin string, args ...string) (clitest.Result, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = clitest.Env()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := clitest.Result{Stdout: stdout.String(), Stderr: stderr.String(), Code: cmd.ProcessState.ExitCode()}
	if ctx.Err() != nil {
		return r, true
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run %s: %v", bin, err)
	}
	return r, false
}
