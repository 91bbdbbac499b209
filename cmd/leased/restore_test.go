package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/proccluster"
	"github.com/leased/leased/internal/testkit/wait"
)

// backupTerm is the lease term of the servers of the backup tests: long
// enough that a restored server still holds writes back when the test
// first asks, short enough that the test waits it out.
const backupTerm = 4 * time.Second

// savedSnapshot is what leasectl -o json snapshot save prints.
type savedSnapshot struct {
	File         string `json:"file"`
	AppliedIndex uint64 `json:"applied_index"`
	Revision     uint64 `json:"revision"`
	FencingToken uint64 `json:"fencing_token"`
	Keys         int    `json:"keys"`
	WriteLeases  int    `json:"write_leases"`
	Bytes        int64  `json:"bytes"`
	Digest       string `json:"digest"`
}

// backupValue is the value the backup tests write to key i: every tenth
// one is 200 KiB, which badger keeps in its value log.
func backupValue(i int) string {
	if i%10 == 0 {
		return fmt.Sprintf("%d:%s", i, strings.Repeat("v", 200<<10))
	}
	return fmt.Sprintf("value %d", i)
}

// fillForBackup writes n keys through c and returns their versions.
func fillForBackup(t *testing.T, c *client.Client, n int) map[string]uint64 {
	t.Helper()
	versions := map[string]uint64{}
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		k := fmt.Sprintf("key/%03d", i)
		v, err := c.Put(ctx, k, []byte(backupValue(i)))
		cancel()
		if err != nil {
			t.Fatalf("put %s: %v", k, err)
		}
		versions[k] = v
	}
	return versions
}

// saveSnapshot runs leasectl snapshot save into file while writes go on
// through c, and returns what it printed.
func saveSnapshot(t *testing.T, c *client.Client, ctl func(args ...string) clitest.Result, file string) savedSnapshot {
	t.Helper()
	stop, wrote := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { wrote <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, err := c.Put(ctx, fmt.Sprintf("busy/%d", n%50), []byte("x"))
			cancel()
			if err != nil {
				t.Errorf("a write beside the snapshot: %v", err)
				return
			}
			n++
		}
	}()
	r := ctl("-o", "json", "snapshot", "save", file)
	close(stop)
	t.Logf("%d writes went on beside the snapshot", <-wrote)
	if r.Code != 0 {
		t.Fatalf("leasectl snapshot save: status %d\nstderr: %s", r.Code, r.Stderr)
	}
	var saved savedSnapshot
	if err := json.Unmarshal([]byte(r.Stdout), &saved); err != nil {
		t.Fatalf("snapshot save printed %q: %v", r.Stdout, err)
	}
	if _, err := os.Stat(file + ".part"); !os.IsNotExist(err) {
		t.Errorf("%s.part is left behind: %v", file, err)
	}
	return saved
}

// wantKeys reads every key back through c with its value and version.
func wantKeys(t *testing.T, c *client.Client, versions map[string]uint64) {
	t.Helper()
	for i := range len(versions) {
		k := fmt.Sprintf("key/%03d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		it, err := c.Get(ctx, k)
		cancel()
		if err != nil || !it.Found || string(it.Value) != backupValue(i) || it.Version != versions[k] {
			t.Fatalf("restored %s: found %v, %d bytes, version %d (%v); want %d bytes at version %d",
				k, it.Found, len(it.Value), it.Version, err, len(backupValue(i)), versions[k])
		}
	}
}

// TestSnapshotSaveAndRestore: leasectl snapshot save streams a snapshot of
// a running server while writes go on; leased snapshot status checks the
// file and refuses a corrupt one; leased restore refuses a corrupt file and
// a folder that holds data, and makes a new folder from the file; leased
// started on it serves every key with its value and version, holds writes
// back at most the snapshot's horizon span, and numbers its next write and
// write lease above every version and fencing token the old server handed
// out.
func TestSnapshotSaveAndRestore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	srv := clitest.StartServer(t, bins, "", data, "--lease-term", backupTerm.String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr, srv.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	versions := fillForBackup(t, c, 120)
	wl, err := c.AcquireWriteLease(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "backup.snap")
	saved := saveSnapshot(t, c, func(args ...string) clitest.Result { return srv.Ctl(t, args...) }, file)
	if saved.Keys < 120 || saved.Revision < 120 || saved.WriteLeases != 1 || saved.FencingToken != wl.Token() ||
		saved.AppliedIndex == 0 || saved.File != file {
		t.Errorf("snapshot save printed %+v", saved)
	}
	fi, err := os.Stat(file)
	if err != nil || fi.Size() != saved.Bytes || fi.Size() < 12*200<<10 {
		t.Fatalf("the saved file: %v, %v; want %d bytes", fi, err, saved.Bytes)
	}
	// The old server goes on; the restore is of the file alone.
	last, err := c.Put(ctx, "after", []byte("not in the snapshot"))
	if err != nil {
		t.Fatal(err)
	}

	r := clitest.Cmd{}.Run(t, bins.Leased, "snapshot", "status", file, "-o", "json")
	var st snapshotSummary
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &st) != nil || st.Digest != saved.Digest || st.Revision != saved.Revision ||
		st.Bytes != saved.Bytes || st.Keys != saved.Keys || st.LeaseHorizon == "" {
		t.Errorf("snapshot status: %+v (status %d, stderr %s); saved %+v", st, r.Code, r.Stderr, saved)
	}

	whole, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	flipped := []byte(strings.Clone(string(whole)))
	flipped[len(flipped)/2] ^= 0x20
	for name, b := range map[string][]byte{"cut short": whole[:len(whole)/2], "flipped": flipped} {
		bad := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".snap")
		if err := os.WriteFile(bad, b, 0o600); err != nil {
			t.Fatal(err)
		}
		r := clitest.Cmd{}.Run(t, bins.Leased, "snapshot", "status", bad)
		if r.Code != exitError || !strings.Contains(r.Stderr, "corrupt snapshot") {
			t.Errorf("snapshot status of a %s file: status %d, stderr %q", name, r.Code, r.Stderr)
		}
		into := filepath.Join(dir, "from-"+filepath.Base(bad))
		r = clitest.Cmd{}.Run(t, bins.Leased, "restore", bad, "--data", into)
		if r.Code != exitError || !strings.Contains(r.Stderr, "corrupt snapshot") {
			t.Errorf("restore of a %s file: status %d, stderr %q", name, r.Code, r.Stderr)
		}
		if _, err := os.Stat(into); !os.IsNotExist(err) {
			t.Errorf("restore of a %s file left %s behind: %v", name, into, err)
		}
	}
	r = clitest.Cmd{}.Run(t, bins.Leased, "restore", file, "--data", data)
	if r.Code != exitError || !strings.Contains(r.Stderr, "not empty") {
		t.Errorf("restore into a server's folder: status %d, stderr %q", r.Code, r.Stderr)
	}

	restored := filepath.Join(dir, "restored")
	r = clitest.Cmd{}.Run(t, bins.Leased, "restore", file, "--data", restored, "-o", "json")
	var rs snapshotSummary
	if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &rs) != nil {
		t.Fatalf("restore: status %d\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	if rs.Revision != saved.Revision+defaultBump || rs.FencingToken != saved.FencingToken+defaultBump || rs.Keys != saved.Keys ||
		rs.WriteLeases != 1 || rs.AppliedIndex != saved.AppliedIndex || rs.Data != restored {
		t.Errorf("restore printed %+v; saved %+v", rs, saved)
	}
	if in := runInspect(t, restored); in.Digest != rs.Digest || in.Revision != rs.Revision || in.AppliedIndex != rs.AppliedIndex {
		t.Errorf("inspect of the restored folder: %+v; restore printed %+v", in, rs)
	}

	srv2 := clitest.StartServer(t, bins, "", restored, "--lease-term", "1s")
	c2, err := client.Dial(ctx, srv2.Addr, srv2.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	// The new server cannot tell whether the old one's leases are live:
	// it holds writes, for at most the horizon's span, plus ε, from its
	// start.
	span, err := time.ParseDuration(rs.HorizonSpan)
	if err != nil {
		t.Fatal(err)
	}
	stats, err := c2.ServerStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats.WritesAllowedIn <= 0 || stats.WritesAllowedIn > span+stats.Epsilon {
		t.Errorf("the restored server holds writes for %v; want more than 0 and at most the span %v plus ε", stats.WritesAllowedIn, span)
	}
	wantKeys(t, c2, versions)
	if it, err := c2.Get(ctx, "after"); err != nil || it.Found {
		t.Errorf("a write after the snapshot (version %d) is restored: %+v, %v", last, it, err)
	}
	v, err := c2.Put(ctx, "new", []byte("x"))
	if err != nil || v <= rs.Revision || v <= last {
		t.Errorf("the first write after the restore: version %d, %v; want above the restored revision %d and the old server's %d", v, err, rs.Revision, last)
	}
	wl2, err := c2.AcquireWriteLease(ctx, "held")
	if err != nil || wl2.Token() <= rs.FencingToken || wl2.Token() <= wl.Token() {
		t.Errorf("a write lease after the restore: %v; want a token above %d", err, rs.FencingToken)
	} else {
		wl2.Release(ctx)
	}
	c2.Close()
	srv2.Stop(t)
	wl.Release(ctx)
	c.Close()
	srv.Stop(t)
}

// TestRestoreCluster: a snapshot saved from a three-node cluster (leasectl
// given a follower first finds the leader) restores three members of a new
// cluster, each with the same --initial-cluster; started with no
// --initial-cluster, they elect a leader and serve every key with its
// version.
func TestRestoreCluster(t *testing.T) {
	t.Parallel()
	old := proccluster.Start(t, proccluster.Config{Bins: bins, Direct: true, Flags: []string{"--lease-term", "1s"}})
	lead := old.Leader()
	cfg := old.ClientConfig()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, old.Endpoints(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	versions := fillForBackup(t, c, 40)
	var first *proccluster.Node
	for _, nd := range old.Nodes {
		if nd != lead {
			first = nd
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "cluster.snap")
	ctl := func(args ...string) clitest.Result {
		return clitest.Cmd{}.Run(t, bins.Leasectl, append([]string{"--endpoints", first.Addr + "," + old.Endpoints(), "--cacert", old.CAFile}, args...)...)
	}
	saved := saveSnapshot(t, c, ctl, file)
	c.Close()
	for _, nd := range old.Nodes {
		old.Stop(nd.Name)
	}

	type member struct{ name, addr, peer, data string }
	var members []member
	var initial []string
	for i := 1; i <= 3; i++ {
		udp, err := clitest.FreeUDPPort()
		if err != nil {
			t.Fatal(err)
		}
		tcp, err := clitest.FreeTCPPort()
		if err != nil {
			t.Fatal(err)
		}
		m := member{name: fmt.Sprintf("r%d", i), addr: fmt.Sprintf("127.0.0.1:%d", udp), peer: fmt.Sprintf("127.0.0.1:%d", tcp),
			data: filepath.Join(dir, fmt.Sprintf("r%d", i))}
		members = append(members, m)
		initial = append(initial, m.name+"="+m.peer)
	}
	var endpoints []string
	digest := ""
	for _, m := range members {
		r := clitest.Cmd{}.Run(t, bins.Leased, "restore", file, "--data", m.data, "--name", m.name,
			"--initial-cluster", strings.Join(initial, ","), "-o", "json")
		var rs snapshotSummary
		if r.Code != 0 || json.Unmarshal([]byte(r.Stdout), &rs) != nil {
			t.Fatalf("restore %s: status %d\nstderr: %s", m.name, r.Code, r.Stderr)
		}
		if digest != "" && rs.Digest != digest {
			t.Errorf("%s restored digest %s, the first %s", m.name, rs.Digest, digest)
		}
		digest = rs.Digest
		endpoints = append(endpoints, m.addr)
	}
	caDir := filepath.Dir(old.CAFile)
	for _, m := range members {
		p := clitest.Cmd{}.Start(t, bins.Leased, "--listen", m.addr, "--data", m.data, "--name", m.name,
			"--peer-listen", m.peer, "--ca-dir", caDir, "--lease-term", "1s")
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s stderr:\n%s", m.name, p.Stderr.String())
			}
		})
	}
	var c2 *client.Client
	wait.For(t, proccluster.LeaderTimeout, "the restored cluster to elect a leader", func() bool {
		dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
		defer dcancel()
		c2, err = client.Dial(dctx, strings.Join(endpoints, ","), cfg)
		return err == nil
	})
	defer c2.Close()
	wantKeys(t, c2, versions)
	v, err := c2.Put(ctx, "new", []byte("x"))
	if err != nil || v <= saved.Revision+defaultBump {
		t.Errorf("the restored cluster's first write: version %d, %v; want above %d", v, err, saved.Revision+defaultBump)
	}
	r := clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoints", strings.Join(endpoints, ","), "--cacert", old.CAFile, "-o", "json", "member", "list")
	if r.Code != 0 || strings.Count(r.Stdout, `"name":"r`) != 3 {
		t.Errorf("member list of the restored cluster: status %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}
