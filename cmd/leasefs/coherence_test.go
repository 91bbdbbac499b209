package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/proccluster"
)

// want is what every mount must show of one name in the model.
type want struct {
	dir     bool
	mode    uint32 // permission bits
	content []byte
	mtime   int64 // seconds, if set explicitly; 0: not checked
}

// TestNoStaleAnswers changes a folder again and again from random mounts,
// and after each change checks, in every mount, the folder's listing and
// every name's type, mode, size, contents and (where set) time, with the
// kernel's caches warm: observers hold descriptors open on some files and
// fstat them, and stat every path before each change. Any difference is a
// stale answer; there must be none.
func TestNoStaleAnswers(t *testing.T) {
	checks, stale, seen := staleAnswers(t)
	if stale > 0 {
		t.Errorf("%d stale answers in %d checks:\n%s", stale, checks, strings.Join(seen, "\n"))
	}
	t.Logf("%d changes from random mounts of 3; %d checks in every mount after each (listings, lstat, reads, fstat of open files); %d stale", staleSteps, checks, stale)
}

// TestStaleAnswersOfATTLCache is the negative control of
// TestNoStaleAnswers: with the kernel keeping attributes and entries for a
// minute whatever the leases say (--kernel-ttl), as a cache by time does,
// the same checks find stale answers.
func TestStaleAnswersOfATTLCache(t *testing.T) {
	checks, stale, seen := staleAnswers(t, "--kernel-ttl", "1m")
	if stale == 0 {
		t.Fatalf("no stale answer in %d checks with a TTL cache: the checks cannot see one", checks)
	}
	t.Logf("a TTL cache of 1 min: %d stale answers in %d checks; the first: %s", stale, checks, seen[0])
}

// staleSteps is how many changes staleAnswers makes.
const staleSteps = 150

// staleAnswers runs TestNoStaleAnswers's changes and checks on mounts
// with the extra flags: the number of checks, of stale answers, and the
// first few of those.
func staleAnswers(t *testing.T, extra ...string) (checks, stale int, staleSeen []string) {
	f := newFS(t)
	ms := f.mounts(3, extra...)
	r := rand.New(rand.NewPCG(7, 7))
	model := map[string]*want{}
	const permanent = 4 // p0..p3: never removed; observers hold them open
	if err := os.Mkdir(ms[0].path("c"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range permanent {
		name := fmt.Sprintf("p%d", i)
		if err := os.WriteFile(ms[0].path("c/"+name), []byte("v0"), 0o644); err != nil {
			t.Fatal(err)
		}
		model[name] = &want{mode: 0o644, content: []byte("v0")}
	}
	var fds [][]*os.File // by mount, by permanent file
	for _, m := range ms {
		var l []*os.File
		for i := range permanent {
			fd, err := os.Open(m.path(fmt.Sprintf("c/p%d", i)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { fd.Close() })
			l = append(l, fd)
		}
		fds = append(fds, l)
	}
	rootMode := uint32(0o755)
	check := func(step int, what string) {
		for mi, m := range ms {
			report := func(format string, args ...any) {
				stale++
				if len(staleSeen) < 10 {
					staleSeen = append(staleSeen, fmt.Sprintf("step %d (%s), m%d: %s", step, what, mi+1, fmt.Sprintf(format, args...)))
				}
			}
			for name, w := range model {
				var st syscall.Stat_t
				checks++
				if err := syscall.Lstat(m.path("c/"+name), &st); err != nil {
					report("lstat %s: %v", name, err)
					continue
				}
				isDir := st.Mode&syscall.S_IFMT == syscall.S_IFDIR
				if isDir != w.dir || st.Mode&0o7777 != w.mode || (!w.dir && st.Size != int64(len(w.content))) || (w.mtime != 0 && st.Mtim.Sec != w.mtime) {
					report("%s: mode %o size %d mtime %d; want dir=%v mode %o size %d mtime %d", name, st.Mode, st.Size, st.Mtim.Sec, w.dir, w.mode, len(w.content), w.mtime)
				}
				if !w.dir {
					checks++
					if data, err := os.ReadFile(m.path("c/" + name)); err != nil || !bytes.Equal(data, w.content) {
						report("%s: read %q, %v; want %q", name, data, err, w.content)
					}
				}
			}
			var rst syscall.Stat_t
			checks++
			if err := syscall.Lstat(m.dir, &rst); err != nil || rst.Mode&0o7777 != rootMode {
				report("the root: mode %o, %v; want %o", rst.Mode&0o7777, err, rootMode)
			}
			for i, fd := range fds[mi] {
				w := model[fmt.Sprintf("p%d", i)]
				fi, err := fd.Stat()
				checks++
				if err != nil || uint32(fi.Mode().Perm()) != w.mode&0o777 || fi.Size() != int64(len(w.content)) {
					report("fstat p%d: %v, %v; want mode %o size %d", i, fi, err, w.mode, len(w.content))
				}
			}
			// The listing last: a listing fills the kernel's attributes of the
			// names it lists (READDIRPLUS), which would hide stale ones.
			ents, err := os.ReadDir(m.path("c"))
			if err != nil {
				t.Fatalf("readdir in m%d: %v", mi+1, err)
			}
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			wantNames := make([]string, 0, len(model))
			for n := range model {
				wantNames = append(wantNames, n)
			}
			slices.Sort(wantNames)
			checks++
			if !slices.Equal(names, wantNames) {
				report("listing %v, want %v", names, wantNames)
			}
		}
	}
	check(0, "start")
	for step := 1; step <= staleSteps; step++ {
		m := ms[r.IntN(len(ms))]
		var names, files, dirs []string
		for n, w := range model {
			names = append(names, n)
			if w.dir {
				dirs = append(dirs, n)
			} else {
				files = append(files, n)
			}
		}
		slices.Sort(names)
		slices.Sort(files)
		slices.Sort(dirs)
		pick := func(l []string) string { return l[r.IntN(len(l))] }
		var what string
		var err error
		switch op := r.IntN(10); op {
		case 9: // chmod the root
			rootMode = []uint32{0o755, 0o750, 0o700}[r.IntN(3)]
			what, err = "chmod the root", os.Chmod(m.dir, os.FileMode(rootMode))
		case 0: // chmod
			n := pick(names)
			mode := uint32([]int{0o600, 0o640, 0o644, 0o700, 0o755}[r.IntN(5)])
			what, err = "chmod "+n, os.Chmod(m.path("c/"+n), os.FileMode(mode))
			model[n].mode = mode
		case 1: // write a file whole
			n := pick(files)
			data := []byte(fmt.Sprintf("step %d %s", step, strings.Repeat("x", r.IntN(5000))))
			what, err = "write "+n, os.WriteFile(m.path("c/"+n), data, 0)
			model[n].content, model[n].mtime = data, 0
		case 2: // truncate
			n := pick(files)
			size := r.IntN(len(model[n].content) + 1)
			what, err = "truncate "+n, os.Truncate(m.path("c/"+n), int64(size))
			model[n].content, model[n].mtime = model[n].content[:size], 0
		case 3: // times
			n := pick(names)
			ts := time.Unix(1_600_000_000+int64(step), 0)
			what, err = "chtimes "+n, os.Chtimes(m.path("c/"+n), ts, ts)
			model[n].mtime = ts.Unix()
		case 4: // create
			n := fmt.Sprintf("n%d", step)
			data := []byte(fmt.Sprintf("new %d", step))
			what, err = "create "+n, os.WriteFile(m.path("c/"+n), data, 0o644)
			model[n] = &want{mode: 0o644, content: data}
		case 5: // mkdir
			n := fmt.Sprintf("d%d", step)
			what, err = "mkdir "+n, os.Mkdir(m.path("c/"+n), 0o755)
			model[n] = &want{dir: true, mode: 0o755}
		case 6: // remove a file or an empty folder that is not permanent
			var l []string
			for _, n := range names {
				if !strings.HasPrefix(n, "p") {
					l = append(l, n)
				}
			}
			if len(l) == 0 {
				continue
			}
			n := pick(l)
			what, err = "remove "+n, os.Remove(m.path("c/"+n))
			delete(model, n)
		case 7, 8: // rename, over another name at times
			var l []string
			for _, n := range names {
				if !strings.HasPrefix(n, "p") {
					l = append(l, n)
				}
			}
			if len(l) == 0 {
				continue
			}
			from := pick(l)
			to := fmt.Sprintf("r%d", step)
			if op == 8 && len(l) > 1 {
				if other := pick(l); other != from && model[other].dir == model[from].dir && !model[other].dir {
					to = other
				}
			}
			what, err = "rename "+from+" "+to, os.Rename(m.path("c/"+from), m.path("c/"+to))
			model[to] = model[from]
			delete(model, from)
		}
		if err != nil {
			t.Fatalf("step %d, %s in %s: %v", step, what, m.dir, err)
		}
		check(step, what)
	}
	return checks, stale, staleSeen
}

// TestUnmount: SIGINT and SIGTERM unmount and exit 0; a busy mount is
// detached; a mount whose leasefs was killed is mounted again on the same
// folder, with the data intact.
func TestUnmount(t *testing.T) {
	f := newFS(t)
	m := startMount(t, "m", f.eps, f.ca, f.data)
	if err := os.WriteFile(m.path("kept"), []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.proc.Signal(t, syscall.SIGINT)
	if code := m.proc.Wait(t, mountTimeout); code != 0 || mounted(m.dir) {
		t.Fatalf("after SIGINT: exit status %d, mounted %v\nstderr: %s", code, mounted(m.dir), m.proc.Stderr.String())
	}

	// Killed: the folder is left mounted with nobody serving it.
	m = startMountAt(t, m.dir, f.eps, f.ca, f.data)
	m.proc.Signal(t, syscall.SIGKILL)
	m.proc.Wait(t, mountTimeout)
	if _, err := os.ReadDir(m.dir); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("a killed mount: reading it gives %v, want ENOTCONN", err)
	}
	m = startMountAt(t, m.dir, f.eps, f.ca, f.data)
	if data, err := os.ReadFile(m.path("kept")); err != nil || string(data) != "kept\n" {
		t.Fatalf("kept after a remount: %q, %v", data, err)
	}

	// Busy: a process works in it. SIGTERM detaches the mount at once;
	// leasefs ends once the process leaves it.
	busy := clitest.Cmd{Dir: m.dir}.Start(t, "sleep", "60")
	m.proc.Signal(t, syscall.SIGTERM)
	deadline := time.Now().Add(mountTimeout)
	for mounted(m.dir) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if mounted(m.dir) {
		t.Fatalf("a busy mount is still mounted %v after SIGTERM", mountTimeout)
	}
	busy.Cmd.Process.Kill()
	if code := m.proc.Wait(t, mountTimeout); code != 0 {
		t.Fatalf("leasefs exited with %d after its busy mount was left\nstderr: %s", code, m.proc.Stderr.String())
	}
	if !strings.Contains(m.proc.Stderr.String(), "busy") {
		t.Errorf("leasefs did not say the mount was busy:\n%s", m.proc.Stderr.String())
	}
}

// TestNotRoot: without root, leasefs says why it cannot mount and exits
// with status 2 at once.
func TestNotRoot(t *testing.T) {
	needFUSE(t)
	// A folder that nobody may enter, with a copy of leasefs nobody may
	// run (the built one's folder is root's alone).
	dir, err := os.MkdirTemp("", "leasefs-notroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	bin := filepath.Join(dir, "leasefs")
	exe, err := os.ReadFile(leasefsBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, exe, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), mountTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--mount", dir)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "needs root") {
		t.Fatalf("leasefs as nobody: %v\n%s", err, out)
	}
}

// TestClusterFailover unpacks a tree in one mount of a three-node
// cluster while its leader is killed: tar succeeds, and both mounts show
// the whole tree.
func TestClusterFailover(t *testing.T) {
	needFUSE(t)
	cl := proccluster.Start(t, proccluster.Config{Bins: bins, Direct: true, Flags: []string{"--lease-term", "2s"}})
	eps := cl.Endpoints()
	data := filepath.Join(t.TempDir(), "fsdata")
	m1 := startMount(t, "m1", eps, cl.CAFile, data)
	m2 := startMount(t, "m2", eps, cl.CAFile, data)
	src := filepath.Join(t.TempDir(), "src")
	os.Mkdir(src, 0o755)
	makeTree(t, src, 300, 4)
	archive := filepath.Join(t.TempDir(), "src.tar")
	run(t, src, "tar", "-cf", archive, ".")
	if err := os.Mkdir(m1.path("src"), 0o755); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	var out string
	start := time.Now()
	go func() {
		var err error
		out, err = runErr(m1.path("src"), "tar", "-xf", archive)
		done <- err
	}()
	time.Sleep(time.Second) // let tar get going
	leader := cl.Leader()
	cl.Kill(leader.Name)
	killed := time.Since(start)
	if err := <-done; err != nil {
		t.Fatalf("tar while the leader %s was killed: %v\n%s", leader.Name, err, out)
	}
	t.Logf("tar -x ran %v; the leader was killed %v in", time.Since(start), killed)
	truth := view(t, src)
	sameViews(t, truth, m1.path("src"), m2.path("src"))
}

// TestNoDevFuse: on a machine without /dev/fuse (here, an empty /dev in a
// mount namespace of its own), leasefs says so and exits with status 2 at
// once, instead of hanging.
func TestNoDevFuse(t *testing.T) {
	needFUSE(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare is not installed")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), mountTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, "unshare", "-m", "sh", "-c", `mount -t tmpfs none /dev && exec "$0" --mount "$1"`, leasefsBin, dir).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), "FUSE is not available here: /dev/fuse") {
		t.Fatalf("leasefs without /dev/fuse: %v\n%s", err, out)
	}
}
