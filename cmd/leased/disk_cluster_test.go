package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/proccluster"
	"github.com/leased/leased/internal/testkit/wait"
)

// moveOntoTmpfs moves the data folder of the stopped node nd onto a tmpfs
// of size bytes mounted in its place, and returns the folder. The test's
// cleanup unmounts it. It skips the test where mounting is not permitted.
func moveOntoTmpfs(t *testing.T, nd *proccluster.Node, size int) string {
	t.Helper()
	old := nd.Data + ".disk"
	if err := os.Rename(nd.Data, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(nd.Data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", nd.Data, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("a full disk needs a small file system of its own: mounting a tmpfs on %s is not permitted here (%v); run as root to include this test", nd.Data, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(nd.Data, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", nd.Data, err)
		}
	})
	if out, err := exec.Command("cp", "-a", old+"/.", nd.Data).CombinedOutput(); err != nil {
		t.Fatalf("copy the data folder onto the tmpfs: %v\n%s", err, out)
	}
	return nd.Data
}

// nodeStatus asks the node at addr for its status.
func nodeStatus(ctx context.Context, cl *proccluster.Cluster, addr string) (*client.NodeStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	adm, err := client.DialAdmin(ctx, addr, cl.ClientConfig())
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	return adm.Status(ctx)
}

// TestFollowerFullDisk fills the disk of a follower of a real three-node
// cluster, its data folder alone on a small tmpfs: once its free space is
// below the reserve, the cluster refuses writes with NOSPACE naming the
// follower, in the writer's error and in every node's status and health,
// and reads go on; below half the reserve the follower refuses its
// leader's entries instead of exiting, and the others commit without it.
// Once space is freed, the alarm clears, writes resume, and the follower
// catches up. (Before, the cluster went on writing, and the follower left
// the cluster and exited once it was below half the reserve.)
func TestFollowerFullDisk(t *testing.T) {
	// Raft's timeouts are relaxed: the fillers' writes, on two shared
	// cores, may hold a heartbeat back, and the lead would move.
	cl := proccluster.Start(t, proccluster.Config{Bins: bins, Flags: []string{"--lease-term", "1s", "--reserve-bytes", fmt.Sprint(testReserve),
		"--heartbeat-timeout", "1s", "--election-timeout", "1s"}})
	leader := cl.Leader()
	f := cl.Others(leader.Name)[0]
	cl.Stop(f.Name)
	fs := moveOntoTmpfs(t, f, tmpfsSize)
	cl.Restart(f.Name)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cfg := cl.ClientConfig()
	c, err := client.Dial(ctx, cl.Endpoints(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, k := range []string{"kept", "gone"} {
		if _, err := c.Put(ctx, k, []byte("before")); err != nil {
			t.Fatal(err)
		}
	}
	// The lead may move meanwhile: two cores, shared, and the fillers'
	// writes may hold a heartbeat back.
	leaderStatus := func() (*client.NodeStatus, error) {
		for _, nd := range cl.Others(f.Name) {
			if st, err := nodeStatus(ctx, cl, nd.Addr); err == nil && st.Serving {
				return st, nil
			}
		}
		return nil, errors.New("no node leads")
	}
	// The follower on the tmpfs must stay a follower: if an election
	// gives it the lead, it hands the lead back.
	keepLeadOff := func() {
		st, err := nodeStatus(ctx, cl, f.Addr)
		if err != nil || !st.Serving {
			return
		}
		t.Logf("%s took the lead; handing it to %s", f.Name, leader.Name)
		tctx, tcancel := context.WithTimeout(ctx, 5*time.Second)
		defer tcancel()
		adm, err := client.DialAdmin(tctx, f.Addr, cfg)
		if err != nil {
			return
		}
		defer adm.Close()
		if err := adm.TransferLead(tctx, leader.Name); err != nil {
			t.Logf("transfer the lead: %v", err)
		}
	}
	read := func(when string) {
		t.Helper()
		wait.For(t, 30*time.Second, "a read "+when, func() bool {
			rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
			defer rcancel()
			it, err := c.Get(rctx, "kept")
			if err != nil {
				t.Logf("read %s: %v", when, err)
			}
			return err == nil && string(it.Value) == "before"
		})
	}
	follows := func() bool {
		l, err := leaderStatus()
		if err != nil {
			return false
		}
		st, err := nodeStatus(ctx, cl, f.Addr)
		return err == nil && st.Role == "follower" && st.AppliedIndex >= l.CommitIndex
	}
	wait.For(t, time.Minute, f.Name+" to follow from its tmpfs", follows)
	exited := func() {
		t.Helper()
		if !f.Running() {
			t.Fatalf("the follower %s exited: %s\nstderr: %s", f.Name, f.Proc.Cmd.ProcessState, tail(f.Proc.Stderr.String()))
		}
	}

	// Below the reserve: the cluster refuses writes, naming the follower.
	free := statfsFree(t, fs)
	writeFiller(t, filepath.Join(fs, "filler1"), int(free-(testReserve-40*mib)))
	t.Logf("tmpfs %d MiB, reserve %d MiB: %d MiB free on %s's, then %d MiB", tmpfsSize/mib, testReserve/mib, free/mib, f.Name, statfsFree(t, fs)/mib)
	var refused error
	wait.For(t, time.Minute, "the cluster to refuse writes", func() bool {
		exited()
		keepLeadOff()
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		_, err := c.Put(wctx, "refused", []byte("x"))
		if errors.Is(err, client.ErrResourceExhausted) {
			refused = err
			return strings.Contains(err.Error(), "member "+f.Name)
		}
		if err != nil {
			t.Logf("write: %v", err)
		}
		return false
	})
	if msg := refused.Error(); !strings.Contains(msg, "NOSPACE") || !strings.Contains(msg, "member "+f.Name) || !strings.Contains(msg, "reserve") {
		t.Fatalf("refusal %q does not name NOSPACE, the member %s and the reserve", msg, f.Name)
	}
	// Each node reads the alarms from its applied state every second.
	for _, nd := range cl.Nodes {
		var st *client.NodeStatus
		wait.For(t, 15*time.Second, nd.Name+"'s status to show the alarm", func() bool {
			st, err = nodeStatus(ctx, cl, nd.Addr)
			if err != nil {
				return false
			}
			if nd == f {
				return strings.Contains(st.DiskAlarm, "NOSPACE") && strings.Contains(st.Alarm, st.DiskAlarm)
			}
			return st.DiskAlarm == "" && strings.Contains(st.Alarm, "NOSPACE on member "+f.Name)
		})
	}
	r := clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoints", leader.Addr, "--cacert", cl.CAFile, "--timeout", "5s", "endpoint", "health")
	if r.Code == 0 || !strings.Contains(r.Stdout+r.Stderr, "member "+f.Name) {
		t.Errorf("leasectl endpoint health on the leader: status %d, want a failure naming member %s\n%s%s", r.Code, f.Name, r.Stdout, r.Stderr)
	}
	read("under the cluster's NOSPACE alarm")

	// Below half the reserve: the follower refuses its leader's entries,
	// and keeps running; the others commit a delete without it.
	writeFiller(t, filepath.Join(fs, "filler2"), int(statfsFree(t, fs)-(testReserve/2-24*mib)))
	t.Logf("%d MiB free on %s's tmpfs", statfsFree(t, fs)/mib, f.Name)
	wait.For(t, 30*time.Second, f.Name+" to refuse its leader's entries", func() bool {
		exited()
		keepLeadOff()
		return strings.Contains(f.Proc.Stderr.String(), "refuses its leader's entries")
	})
	wait.For(t, 30*time.Second, "a delete under the cluster's NOSPACE alarm", func() bool {
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		defer dcancel()
		_, err := c.Delete(dctx, "gone")
		if err != nil {
			t.Logf("delete: %v", err)
		}
		return err == nil
	})
	wait.For(t, 30*time.Second, f.Name+" to refuse an append", func() bool {
		exited()
		keepLeadOff()
		return strings.Contains(f.Proc.Stderr.String(), "failed to append to logs")
	})
	l, err := leaderStatus()
	if err != nil {
		t.Fatal(err)
	}
	st, err := nodeStatus(ctx, cl, f.Addr)
	if err != nil {
		t.Fatalf("the refusing follower does not answer: %v", err)
	}
	if st.AppliedIndex >= l.CommitIndex {
		t.Errorf("the refusing follower applied up to %d, the leader committed %d", st.AppliedIndex, l.CommitIndex)
	}
	read("while a follower refuses entries")
	exited()

	// Space freed: the alarm clears, writes resume, the follower catches up.
	for _, name := range []string{"filler1", "filler2"} {
		if err := os.Remove(filepath.Join(fs, name)); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	wait.For(t, time.Minute, "writes to resume once space is freed", func() bool {
		exited()
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		defer wcancel()
		_, err := c.Put(wctx, "after", []byte("room"))
		return err == nil
	})
	t.Logf("writes resumed %v after the fillers were deleted", time.Since(start).Round(time.Millisecond))
	wait.For(t, time.Minute, f.Name+" to catch up", follows)
	t.Logf("%s caught up %v after the fillers were deleted", f.Name, time.Since(start).Round(time.Millisecond))
	for _, nd := range cl.Nodes {
		wait.For(t, 15*time.Second, nd.Name+"'s status to show no alarm", func() bool {
			st, err := nodeStatus(ctx, cl, nd.Addr)
			return err == nil && st.Alarm == "" && st.DiskAlarm == ""
		})
	}
	if out := f.Proc.Stderr.String(); strings.Contains(out, "SIGBUS") || !strings.Contains(out, "takes its leader's entries again") {
		t.Errorf("%s's log does not show it refuse entries and take them again:\n%s", f.Name, tail(out))
	}
	var logs string // the leaders', which may have been any node for a moment
	for _, nd := range cl.Nodes {
		logs += nd.Proc.Stderr.String()
	}
	if !strings.Contains(logs, "NOSPACE alarm raised for a member") || !strings.Contains(logs, "NOSPACE alarm of a member cleared") {
		t.Errorf("the nodes' logs do not show the alarm raised and cleared")
	}
}
