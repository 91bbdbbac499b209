package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/wait"
)

// Sizes of the full-disk tests, on a tmpfs of their own.
const (
	mib = 1 << 20
	// tmpfsSize is the whole file system. Right after its start, leased
	// occupies about 64 MiB of it: raft-wal preallocates its first
	// segment.
	tmpfsSize = 400 * mib
	// fillerSize is the file placed beside the data folder, and deleted
	// to make room.
	fillerSize = 96 * mib
	// testReserve is the --reserve-bytes of the test: below
	// diskguard.DefaultReserve, which a small tmpfs could not hold, and
	// the least leased takes (node.MinReserveBytes: memtables flushed to
	// tables, a value-log file collected, a log segment preallocated).
	testReserve = 208 * mib
	// fillValue is the size of each value written to fill the disk: over
	// the store's 64 KiB value threshold, so that values go to badger's
	// value log, a mapped file. Without the reserve, the first write into
	// a page of it that the full tmpfs cannot back kills the process
	// with SIGBUS (seen after 765 writes with these sizes).
	fillValue = 128 << 10
)

// mountTmpfs mounts a tmpfs of size bytes on a new folder and returns it;
// the test's cleanup unmounts it. It skips the test where mounting is not
// permitted (it needs root, or CAP_SYS_ADMIN).
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("a full disk needs a small file system of its own: mounting a tmpfs on %s is not permitted here (%v); run as root to include this test", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// writeFiller writes a file of size bytes of data (not a sparse one).
func writeFiller(t *testing.T, path string, size int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, mib)
	for i := range buf {
		buf[i] = byte(i)
	}
	for n := 0; n < size; n += len(buf) {
		if _, err := f.Write(buf[:min(len(buf), size-n)]); err != nil {
			t.Fatalf("filler: %v", err)
		}
	}
}

func statfsFree(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// TestFullDisk fills a real, small file system (a tmpfs) with writes to a
// real leased process: the writes are refused with ErrResourceExhausted
// once the free space falls below the reserve, and the process stays up,
// serving reads and renewals; once space is freed (a filler file on the
// same file system is deleted), writes resume by themselves.
func TestFullDisk(t *testing.T) {
	fs := mountTmpfs(t, tmpfsSize)
	writeFiller(t, filepath.Join(fs, "filler"), fillerSize)
	data := filepath.Join(fs, "data")
	srv := clitest.StartServer(t, bins, "", data, "--lease-term", "1s", "--reserve-bytes", fmt.Sprint(testReserve))
	t.Logf("tmpfs %d MiB, filler %d MiB, reserve %d MiB; %d MiB free after the start", tmpfsSize/mib, fillerSize/mib, testReserve/mib, statfsFree(t, fs)/mib)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := srv.ClientConfig()
	c, err := client.Dial(ctx, srv.Addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	reader, err := client.Dial(ctx, srv.Addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if _, err := c.Put(ctx, "kept", []byte("before")); err != nil {
		t.Fatal(err)
	}
	if _, err := reader.Get(ctx, "kept"); err != nil {
		t.Fatal(err)
	}

	value := make([]byte, fillValue)
	writes := 0
	var refused error
	for refused == nil {
		select {
		case <-srv.Exited():
			t.Fatalf("leased died after %d writes of %d KiB (%s)\nstderr: %s", writes, fillValue>>10, srv.Cmd.ProcessState, tail(srv.Stderr.String()))
		default:
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := c.Put(wctx, fmt.Sprintf("fill/%d", writes), value)
		wcancel()
		switch {
		case err == nil:
			writes++
		case errors.Is(err, client.ErrResourceExhausted):
			// Refused on the bytes admitted since the last measurement,
			// or on the measurement itself: once the guard has measured
			// again (each second), the alarm shows only in the latter.
			deadline := time.Now().Add(2500 * time.Millisecond) // two measurements
			for refused == nil && time.Now().Before(deadline) {
				if r := srv.Ctl(t, "status"); r.Code == 0 && strings.Contains(r.Stdout, "NOSPACE") {
					refused = err
				}
			}
		default:
			t.Fatalf("write %d: %v, want success or ErrResourceExhausted\nstderr: %s", writes, err, tail(srv.Stderr.String()))
		}
		if writes > 2*tmpfsSize/fillValue {
			t.Fatalf("%d writes of %d KiB on a %d MiB file system, none refused", writes, fillValue>>10, tmpfsSize/mib)
		}
	}
	t.Logf("refused after %d writes of %d KiB, %d MiB free: %v", writes, fillValue>>10, statfsFree(t, fs)/mib, refused)
	if !strings.Contains(refused.Error(), "reserve") {
		t.Fatalf("refusal %q does not name the reserve", refused)
	}

	// The process stays up; reads, renewals and leasectl go on.
	for range 3 {
		it, err := reader.Get(ctx, "kept")
		if err != nil || string(it.Value) != "before" {
			t.Fatalf("read on a full disk: %+v, %v", it, err)
		}
		time.Sleep(time.Second) // lets the 1 s lease be renewed and the disk measured again; not a wait for lease expiry
	}
	if r := srv.Ctl(t, "status"); r.Code != 0 || !strings.Contains(r.Stdout, "NOSPACE") {
		t.Fatalf("leasectl status on a full disk: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}
	if _, err := c.Put(ctx, "more", value); !errors.Is(err, client.ErrResourceExhausted) {
		t.Fatalf("write on a full disk, seconds later: %v", err)
	}

	if err := os.Remove(filepath.Join(fs, "filler")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	wait.For(t, 15*time.Second, "writes to resume once space is freed", func() bool {
		_, err := c.Put(ctx, "after", []byte("room"))
		return err == nil
	})
	t.Logf("writes resumed %v after the filler was deleted (%d MiB free)", time.Since(start).Round(time.Millisecond), statfsFree(t, fs)/mib)
	if r := srv.Ctl(t, "status"); r.Code != 0 || strings.Contains(r.Stdout, "NOSPACE") {
		t.Fatalf("leasectl status once there is room: %s %s", r.Stdout, r.Stderr)
	}
	c.Close()
	reader.Close()
	srv.Stop(t)
	if strings.Contains(srv.Stderr.String(), "SIGBUS") || !strings.Contains(srv.Stderr.String(), "alarm raised") || !strings.Contains(srv.Stderr.String(), "alarm cleared") {
		t.Fatalf("log does not show the alarm raised and cleared:\n%s", tail(srv.Stderr.String()))
	}
}

// TestStartOnFullDisk starts leased on a file system with less free than
// the reserve: it exits with status 1 and says why, instead of crashing in
// its database.
func TestStartOnFullDisk(t *testing.T) {
	fs := mountTmpfs(t, 64*mib)
	writeFiller(t, filepath.Join(fs, "filler"), 63*mib)
	r := clitest.Cmd{}.Run(t, bins.Leased, "--listen", "127.0.0.1:0", "--data", filepath.Join(fs, "data"))
	if r.Code != 1 || !strings.Contains(r.Stderr, "Error: NOSPACE: only") || !strings.Contains(r.Stderr, "below the reserve") {
		t.Fatalf("start on a full disk: status %d, want 1 and an error naming the reserve\nstderr: %s", r.Code, r.Stderr)
	}
}

// TestSmallReserveRefused starts leased on a small file system (a 100 MiB
// tmpfs) with a reserve below the least that covers what the database and
// the log write by themselves: it exits with status 2, naming the flag and
// that least, instead of starting and dying of SIGBUS once the disk fills
// (with --reserve-bytes 16 MiB, it died in badger's value-log write
// without refusing one write).
func TestSmallReserveRefused(t *testing.T) {
	fs := mountTmpfs(t, 100*mib)
	least := fmt.Sprint(208 * mib)
	for _, reserve := range []string{fmt.Sprint(16 * mib), fmt.Sprint(208*mib - 1)} {
		r := clitest.Cmd{}.Run(t, bins.Leased, "--listen", "127.0.0.1:0", "--data", filepath.Join(fs, "data"), "--reserve-bytes", reserve)
		if r.Code != exitUsage || !strings.Contains(r.Stderr, "--reserve-bytes") || !strings.Contains(r.Stderr, least) {
			t.Errorf("--reserve-bytes %s: status %d, want %d and the least reserve %s\nstderr: %s", reserve, r.Code, exitUsage, least, r.Stderr)
		}
	}
	if ents, _ := os.ReadDir(fs); len(ents) != 0 {
		t.Errorf("a refused start left %v on the file system", ents)
	}
}

// TestDataFolderDeleted deletes the data folder of a running leased: the
// next write gets an error, not an acknowledgement, and the process exits
// with status 1 and a message naming the folder, within its shutdown
// timeout, however its store takes it.
func TestDataFolderDeleted(t *testing.T) {
	t.Parallel()
	const shutdownTimeout = 2 * time.Second
	data := filepath.Join(t.TempDir(), "data")
	srv := clitest.StartServer(t, bins, "", data, "--lease-term", "1s", "--shutdown-timeout", shutdownTimeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, srv.Addr, srv.ClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}

	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	ver, err := c.Put(wctx, "k", []byte("lost"))
	wcancel()
	if err == nil {
		t.Fatalf("a write into the deleted data folder was acknowledged (version %d)", ver)
	}
	t.Logf("write after the deletion: %v", err)

	// At most a second to notice, then the shutdown timeout, and slack
	// for a loaded machine.
	code := srv.Wait(t, time.Second+shutdownTimeout+5*time.Second)
	t.Logf("leased exited with status %d, %v after the deletion", code, time.Since(removed).Round(time.Millisecond))
	if code != 1 {
		t.Fatalf("exit status %d, want 1\nstderr: %s", code, tail(srv.Stderr.String()))
	}
	if ws, ok := srv.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("leased died of %v", ws.Signal())
	}
	if s := srv.Stderr.String(); !strings.Contains(s, "Error: the data folder was deleted or replaced") || !strings.Contains(s, data) {
		t.Fatalf("no clear exit message naming the data folder:\n%s", tail(s))
	}
}

// tail returns the last lines of a log.
func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}
