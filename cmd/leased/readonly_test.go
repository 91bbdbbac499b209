package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/wait"
)

// asNobody returns binaries whose leased runs as the user nobody (through
// setpriv), and a data folder that user owns, in a folder it can reach.
// A read-only folder stops only a user without root's privileges. It
// skips the test unless it runs as root with setpriv and a user nobody.
func asNobody(t *testing.T) (clitest.Binaries, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a read-only folder needs a server of another user than the test's: run as root to include this test")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skipf("no setpriv to run leased as another user: %v", err)
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	leased := filepath.Join(dir, "leased")
	copyFile(t, bins.Leased, leased, 0o755)
	script := filepath.Join(dir, "leased-as-nobody")
	body := fmt.Sprintf("#!/bin/sh\nexec %s --reuid=%d --regid=%d --clear-groups %s \"$@\"\n", setpriv, uid, gid, leased)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, uid, gid); err != nil {
		t.Fatal(err)
	}
	return clitest.Binaries{Leased: script, Leasectl: bins.Leasectl}, data
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// chmodTree adds (or takes away) the write permission of every file and
// folder under dir.
func chmodTree(t *testing.T, dir string, writable bool) {
	t.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		mode := info.Mode().Perm() &^ 0o222
		if writable {
			mode |= 0o200
		}
		return os.Chmod(path, mode)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestReadOnlyDataFolder makes the data folder of a running leased, which
// runs as another user, read-only, and writes values of 60 KiB (into
// badger's memtable, which needs a new file every 16 MiB): every write is
// refused with ErrResourceExhausted and READONLY, never acknowledged, and
// the process stays up, serving reads and renewing the lease of a reader.
// Once the folder can be written again, writes resume by themselves.
// Without the READONLY alarm, writes went on until badger could not create
// its next memtable, and the next read killed the process (SIGSEGV in
// badger, exit status 2).
func TestReadOnlyDataFolder(t *testing.T) {
	t.Parallel()
	nobody, data := asNobody(t)
	srv := clitest.StartServer(t, nobody, "", data, "--lease-term", "1s")
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

	chmodTree(t, data, false)
	defer chmodTree(t, data, true) // so that the test's cleanup can remove it
	value := []byte(strings.Repeat("v", 60<<10))
	const writes = 400 // 23 MiB: past a memtable of 16 MiB
	refused := 0
	for i := range writes {
		select {
		case <-srv.Exited():
			t.Fatalf("leased died after %d writes to a read-only folder (%s)\nstderr: %s", i, srv.Cmd.ProcessState, tail(srv.Stderr.String()))
		default:
		}
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		ver, err := c.Put(wctx, fmt.Sprintf("fill/%d", i), value)
		wcancel()
		switch {
		case err == nil:
			t.Fatalf("write %d to a read-only folder acknowledged (version %d)", i, ver)
		case !errors.Is(err, client.ErrResourceExhausted) || !strings.Contains(err.Error(), "READONLY"):
			t.Fatalf("write %d to a read-only folder: %v, want ErrResourceExhausted naming READONLY\nstderr: %s", i, err, tail(srv.Stderr.String()))
		}
		refused++
		if i%100 == 0 {
			it, err := reader.Get(ctx, "kept")
			if err != nil || string(it.Value) != "before" {
				t.Fatalf("read after %d refused writes: %+v, %v", i, it, err)
			}
		}
	}
	t.Logf("%d writes refused", refused)
	// Reads and renewals go on, with the 1 s lease renewed meanwhile.
	for range 3 {
		it, err := reader.Get(ctx, "kept")
		if err != nil || string(it.Value) != "before" {
			t.Fatalf("read from a read-only folder: %+v, %v\nstderr: %s", it, err, tail(srv.Stderr.String()))
		}
		time.Sleep(time.Second) // lets the 1 s lease be renewed and the folder checked again; not a wait for lease expiry
	}
	if r := srv.Ctl(t, "status"); r.Code != 0 || !strings.Contains(r.Stdout, "READONLY") {
		t.Fatalf("leasectl status on a read-only folder: %d %s %s", r.Code, r.Stdout, r.Stderr)
	}

	chmodTree(t, data, true)
	wait.For(t, 15*time.Second, "writes to resume once the folder can be written", func() bool {
		_, err := c.Put(ctx, "after", []byte("writable"))
		return err == nil
	})
	if it, err := reader.Get(ctx, "after"); err != nil || string(it.Value) != "writable" {
		t.Fatalf("read of the write after: %+v, %v", it, err)
	}
	c.Close()
	reader.Close()
	srv.Stop(t)
	if ws, ok := srv.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("leased died of %v", ws.Signal())
	}
}
