package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/leasefs"
)

// bins are leased and leasectl (clitest.Build), and leasefsBin leasefs,
// built once by TestMain.
var (
	bins       clitest.Binaries
	leasefsBin string
)

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(mainWithLeasefs{m}, &bins))
}

// mainWithLeasefs builds leasefs beside the binaries clitest.Main built.
type mainWithLeasefs struct{ m *testing.M }

func (w mainWithLeasefs) Run() int {
	if bins.Leased != "" {
		leasefsBin = filepath.Join(filepath.Dir(bins.Leased), "leasefs")
		out, err := exec.Command("go", "build", "-o", leasefsBin, "github.com/leased/leased/cmd/leasefs").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "go build leasefs: %v\n%s", err, out)
			return 1
		}
	}
	return w.m.Run()
}

// needFUSE skips a test on a machine where leasefs cannot mount: FUSE
// mounts need root and /dev/fuse.
func needFUSE(t *testing.T) {
	t.Helper()
	if err := leasefs.CheckFUSE(); err != nil {
		t.Skipf("no FUSE mounts here: %v", err)
	}
}

// mountTimeout bounds the wait for a mount to appear and to go.
const mountTimeout = 30 * time.Second

// mount is a running leasefs process and its mount point.
type mount struct {
	dir  string
	proc *clitest.Proc
}

// startMount runs leasefs on a new folder under t's temporary folder,
// against endpoints with the CA ca and the shared data folder data, and
// waits until it says that the folder is mounted. The test's cleanup unmounts it.
func startMount(t *testing.T, name, endpoints, ca, data string, extra ...string) *mount {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return startMountAt(t, dir, endpoints, ca, data, extra...)
}

// startMountAt is startMount on the folder dir.
func startMountAt(t *testing.T, dir, endpoints, ca, data string, extra ...string) *mount {
	t.Helper()
	args := append([]string{"--mount", dir, "--endpoints", endpoints, "--cacert", ca, "--data", data, "--name", filepath.Base(dir)}, extra...)
	p := clitest.Cmd{}.Start(t, leasefsBin, args...)
	m := &mount{dir: dir, proc: p}
	deadline := time.Now().Add(mountTimeout)
	for !strings.Contains(p.Stderr.String(), "leasefs mounted") {
		select {
		case <-p.Exited():
			t.Fatalf("leasefs exited before mounting %s\nstderr: %s", dir, p.Stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("leasefs did not mount %s within %v\nstderr: %s", dir, mountTimeout, p.Stderr.String())
		}
	}
	t.Cleanup(func() { m.stop(t) })
	return m
}

// stop unmounts with SIGTERM and waits for leasefs to exit; a mount left
// behind is detached, so that the temporary folder can go.
func (m *mount) stop(t *testing.T) {
	select {
	case <-m.proc.Exited():
	default:
		m.proc.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.proc.Exited():
		case <-time.After(mountTimeout):
			t.Errorf("leasefs on %s did not exit within %v of SIGTERM\nstderr: %s", m.dir, mountTimeout, m.proc.Stderr.String())
			m.proc.Cmd.Process.Kill()
		}
	}
	if mounted(m.dir) {
		syscall.Unmount(m.dir, syscall.MNT_DETACH)
	}
}

// path returns rel's path in the mount.
func (m *mount) path(rel string) string { return filepath.Join(m.dir, rel) }

// mounted says whether dir is a mount point, from /proc/self/mountinfo.
func mounted(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && unescapeMount(fields[4]) == dir {
			return true
		}
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes of spaces and the like.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// run runs a program in dir, and fails the test if it fails.
func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	out, err := runErr(dir, name, args...)
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return out
}

// runErr runs a program in dir, for at most two minutes, and returns its
// combined output.
func runErr(dir string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// view describes a tree as a program sees it through one mount: a line per
// path, with its type, permissions, size, link count, owner, its data's
// hash or its link's target. Two mounts that agree have equal views.
func view(t *testing.T, root string) []string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return fmt.Errorf("lstat %s: %w", rel, err)
		}
		line := fmt.Sprintf("%s %o", rel, st.Mode)
		if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
			line += fmt.Sprintf(" size=%d links=%d", st.Size, st.Nlink)
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			h, err := hashFile(p)
			if err != nil {
				return err
			}
			line += " sha=" + h
		case syscall.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line += " -> " + target
		}
		line += fmt.Sprintf(" mtime=%d", st.Mtim.Sec)
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	sort.Strings(lines)
	return lines
}

func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// sameViews fails the test unless every tree's view is want's.
func sameViews(t *testing.T, want []string, roots ...string) {
	t.Helper()
	for _, r := range roots {
		got := view(t, r)
		if d := diffLines(want, got); d != "" {
			t.Fatalf("%s differs from the ground truth (%d paths; %d seen):\n%s", r, len(want), len(got), d)
		}
	}
}

// diffLines returns the lines only in a (-) and only in b (+), at most 20.
func diffLines(a, b []string) string {
	in := func(l []string) map[string]bool {
		m := make(map[string]bool, len(l))
		for _, s := range l {
			m[s] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for _, s := range a {
		if !mb[s] {
			out = append(out, "- "+s)
		}
	}
	for _, s := range b {
		if !ma[s] {
			out = append(out, "+ "+s)
		}
	}
	if len(out) > 20 {
		out = append(out[:20], fmt.Sprintf("... and %d more", len(out)-20))
	}
	return strings.Join(out, "\n")
}
