package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leased/leased/internal/testkit/clitest"
)

// fsTest is one leased and the shared data folder of its file system.
type fsTest struct {
	t    *testing.T
	srv  *clitest.Server
	eps  string // leased's endpoints
	ca   string
	data string
}

// newFS starts a leased with a short lease term, for a file system's
// mounts.
func newFS(t *testing.T) *fsTest {
	needFUSE(t)
	srv := clitest.StartServer(t, bins, t.TempDir(), "data", "--lease-term", "5s")
	return &fsTest{t: t, srv: srv, eps: srv.Addr, ca: srv.CA, data: filepath.Join(t.TempDir(), "fsdata")}
}

// mounts mounts n leasefs processes, m1, m2, ..., with the extra flags.
func (f *fsTest) mounts(n int, extra ...string) []*mount {
	var ms []*mount
	for i := range n {
		ms = append(ms, startMount(f.t, fmt.Sprintf("m%d", i+1), f.eps, f.ca, f.data, extra...))
	}
	return ms
}

// objects counts the data objects in the shared data folder.
func (f *fsTest) objects() int {
	f.t.Helper()
	ents, err := os.ReadDir(f.data)
	if err != nil {
		f.t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if e.Type().IsRegular() {
			n++
		}
	}
	return n
}

// makeTree writes a source tree of about files files under dir: nested
// folders, files of 0 to 40 KiB with several modes, symlinks, hard links,
// empty folders, and times in the past. It returns the number of regular
// files with data (distinct inodes).
func makeTree(t *testing.T, dir string, files int, seed uint64) int {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 1))
	dirs := []string{dir}
	withData := 0
	old := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range files {
		parent := dirs[r.IntN(len(dirs))]
		switch k := r.IntN(20); {
		case k < 3:
			d := filepath.Join(parent, fmt.Sprintf("dir%03d", i))
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
			dirs = append(dirs, d)
		case k == 3:
			if err := os.Symlink(fmt.Sprintf("../target%03d", i), filepath.Join(parent, fmt.Sprintf("link%03d", i))); err != nil {
				t.Fatal(err)
			}
		default:
			p := filepath.Join(parent, fmt.Sprintf("file%03d.txt", i))
			data := make([]byte, r.IntN(40<<10))
			for j := range data {
				data[j] = byte('a' + r.IntN(26))
			}
			mode := []os.FileMode{0o644, 0o600, 0o755}[r.IntN(3)]
			if err := os.WriteFile(p, data, mode); err != nil {
				t.Fatal(err)
			}
			os.Chmod(p, mode)
			if len(data) > 0 {
				withData++
			}
			if k == 4 {
				if err := os.Link(p, p+".hard"); err != nil {
					t.Fatal(err)
				}
			}
			os.Chtimes(p, old, old.Add(time.Duration(i)*time.Second))
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		os.Chtimes(dirs[i], old, old)
	}
	return withData
}

// lister walks root again and again with a real program until stop is
// closed, and records its failures: every line on its stderr but those
// that allowed accepts. It counts the complete passes in passes.
func lister(t *testing.T, wg *sync.WaitGroup, root string, args []string, allowed func(string) bool, stop <-chan struct{}, passes *int, fails *[]string) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Dir = root
			var stderr strings.Builder
			cmd.Stderr = &stderr
			timer := time.AfterFunc(2*time.Minute, func() { cmd.Process.Kill() })
			err := cmd.Run()
			timer.Stop()
			out := stderr.String()
			if err != nil {
				bad := false
				for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
					if !allowed(l) {
						bad = true
					}
				}
				if bad {
					*fails = append(*fails, fmt.Sprintf("%s: %v: %s", strings.Join(args, " "), err, tail(out, 600)))
				}
				continue
			}
			*passes++
		}
	}()
}

// placeholderGone matches ls's and find's complaint of a symlink's
// placeholder that went between listing and stat.
var placeholderGone = regexp.MustCompile(`/link\d+\W+No such file or directory$`)

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// TestTarAcrossMounts unpacks a tree with tar in one mount while two
// others list and stat it, and compares every mount's view with the
// source the moment tar returns; then changes it from the second mount
// and compares again.
func TestTarAcrossMounts(t *testing.T) {
	f := newFS(t)
	ms := f.mounts(3)
	src := filepath.Join(t.TempDir(), "src")
	os.Mkdir(src, 0o755)
	withData := makeTree(t, src, 600, 1)
	archive := filepath.Join(t.TempDir(), "src.tar")
	run(t, src, "tar", "-cf", archive, ".")
	truth := view(t, src)

	if err := os.Mkdir(ms[0].path("src"), 0o755); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var passes [2]int
	var fails [2][]string
	// tar makes a symlink in two steps: an empty placeholder file first,
	// replaced by the link once the rest is out. A lister may see the
	// placeholder go; nothing else may vanish.
	placeholder := func(l string) bool {
		return placeholderGone.MatchString(l)
	}
	lister(t, &wg, ms[1].path("src"), []string{"ls", "-lR"}, placeholder, stop, &passes[0], &fails[0])
	lister(t, &wg, ms[2].path("src"), []string{"find", ".", "-ls"}, placeholder, stop, &passes[1], &fails[1])
	start := time.Now()
	run(t, ms[0].path("src"), "tar", "-xf", archive)
	took := time.Since(start)
	close(stop)
	wg.Wait()
	sameViews(t, truth, ms[0].path("src"), ms[1].path("src"), ms[2].path("src"))
	for i, fl := range fails {
		if len(fl) > 0 {
			t.Errorf("the lister in m%d failed %d times: %s", i+2, len(fl), strings.Join(fl[:min(3, len(fl))], "\n"))
		}
	}
	if passes[0] == 0 || passes[1] == 0 {
		t.Errorf("the listers made %v passes while tar ran; want at least one each", passes)
	}
	if out, err := runErr(t.TempDir(), "diff", "-r", "--no-dereference", src, ms[2].path("src")); err != nil {
		t.Fatalf("diff -r of the source and m3: %v\n%s", err, tail(out, 2000))
	}
	if got := f.objects(); got != withData {
		t.Errorf("%d data objects for %d files with data", got, withData)
	}
	t.Logf("tar -x of %d paths in m1: %v; while it ran, ls -lR in m2 made %d passes, find -ls in m3 %d", len(truth), took, passes[0], passes[1])

	// Change part of it from m2: the others see the change when the
	// command that made it returns.
	run(t, ms[1].path("src"), "sh", "-c", `set -e
		for f in $(find . -name '*.txt' | sort | head -40); do echo appended >> "$f"; done
		find . -name '*.txt' | sort | sed -n '41,60p' | xargs chmod 640
		mkdir renamed && find . -maxdepth 1 -name '*.txt' | sort | head -10 | xargs -I{} mv {} renamed/
		find . -name '*.hard' | sort | head -5 | xargs rm -f`)
	now := view(t, ms[1].path("src"))
	sameViews(t, now, ms[0].path("src"), ms[2].path("src"))
}

// TestGitAcrossMounts runs git in three mounts of one repository.
func TestGitAcrossMounts(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	f := newFS(t)
	ms := f.mounts(3)
	g := func(m *mount, args ...string) string {
		t.Helper()
		return run(t, m.path("repo"), "git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main", "-c", "core.fsmonitor=false"}, args...)...)
	}
	if err := os.Mkdir(ms[0].path("repo"), 0o755); err != nil {
		t.Fatal(err)
	}
	g(ms[0], "init", "-q")
	makeTree(t, ms[0].path("repo"), 150, 2)
	g(ms[0], "add", "-A")
	g(ms[0], "commit", "-q", "-m", "first")
	if st := g(ms[1], "status", "--porcelain"); st != "" {
		t.Fatalf("git status in m2 after the commit in m1:\n%s", st)
	}
	if n := strings.Count(g(ms[2], "log", "--oneline"), "\n"); n != 1 {
		t.Fatalf("git log in m3: %d commits, want 1", n)
	}
	if err := os.WriteFile(ms[1].path("repo/new.txt"), []byte("from m2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := g(ms[0], "status", "--porcelain"); st != "?? new.txt\n" {
		t.Fatalf("git status in m1 after m2 wrote new.txt: %q", st)
	}
	g(ms[1], "add", "new.txt")
	g(ms[1], "commit", "-q", "-m", "second")
	if n := strings.Count(g(ms[0], "log", "--oneline"), "\n"); n != 2 {
		t.Fatalf("git log in m1: %d commits, want 2", n)
	}
	g(ms[2], "fsck", "--full", "--strict")
	if st := g(ms[2], "status", "--porcelain"); st != "" {
		t.Fatalf("git status in m3: %q", st)
	}
	g(ms[2], "gc", "-q")
	if out := g(ms[0], "show", "HEAD:new.txt"); out != "from m2\n" {
		t.Fatalf("git show in m1: %q", out)
	}
}

// TestRenameRaces has three mounts move the same files at once, each to a
// folder of its own: exactly one move of each file wins, and no name is
// lost or doubled. Then they move different files onto one name.
func TestRenameRaces(t *testing.T) {
	f := newFS(t)
	ms := f.mounts(3)
	const files = 40
	for _, d := range []string{"src", "d1", "d2", "d3", "onto"} {
		if err := os.Mkdir(ms[0].path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := range files {
		if err := os.WriteFile(ms[0].path(fmt.Sprintf("src/f%02d", i)), []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wins := make([]int, files)
	for i := range files {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for k, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := fmt.Sprintf("f%02d", i)
				out, err := runErr(m.dir, "mv", "src/"+name, fmt.Sprintf("d%d/%s", k+1, name))
				switch {
				case err == nil:
					mu.Lock()
					wins[i]++
					mu.Unlock()
				case !strings.Contains(out, "No such file or directory"):
					t.Errorf("mv in m%d: %v: %s", k+1, err, out)
				}
			}()
		}
		wg.Wait()
	}
	for i, w := range wins {
		if w != 1 {
			t.Errorf("f%02d: %d moves won; want exactly 1", i, w)
		}
	}
	for _, m := range ms {
		seen := map[string]int{}
		for _, d := range []string{"src", "d1", "d2", "d3"} {
			ents, err := os.ReadDir(m.path(d))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				seen[e.Name()]++
				var i int
				fmt.Sscanf(e.Name(), "f%d", &i)
				data, err := os.ReadFile(m.path(d + "/" + e.Name()))
				if err != nil || string(data) != fmt.Sprintf("file %d\n", i) {
					t.Errorf("%s/%s in %s: %q, %v", d, e.Name(), m.dir, data, err)
				}
			}
		}
		if len(seen) != files {
			t.Errorf("%s: %d names after the moves, want %d", m.dir, len(seen), files)
		}
		for n, c := range seen {
			if c != 1 {
				t.Errorf("%s: %s appears %d times", m.dir, n, c)
			}
		}
	}
	sameViews(t, view(t, ms[0].dir), ms[1].dir, ms[2].dir)

	// Three files moved onto one name at once: every move succeeds, one
	// after another, and one file is left there, with one link; the others'
	// data is gone with their last link.
	for round := range 10 {
		var wg sync.WaitGroup
		for k, m := range ms {
			p := m.path(fmt.Sprintf("onto/from%d", k))
			if err := os.WriteFile(p, []byte(fmt.Sprintf("round %d from m%d\n", round, k+1)), 0o644); err != nil {
				t.Fatal(err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if out, err := runErr(m.dir, "mv", "-f", fmt.Sprintf("onto/from%d", k), "onto/target"); err != nil {
					t.Errorf("mv onto the target in m%d: %v: %s", k+1, err, out)
				}
			}()
		}
		wg.Wait()
		for _, m := range ms {
			ents, err := os.ReadDir(m.path("onto"))
			if err != nil || len(ents) != 1 || ents[0].Name() != "target" {
				t.Fatalf("onto in %s after round %d: %v, %v", m.dir, round, ents, err)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(m.path("onto/target"), &st); err != nil || st.Nlink != 1 {
				t.Fatalf("onto/target in %s: %d links, %v", m.dir, st.Nlink, err)
			}
			if data, err := os.ReadFile(m.path("onto/target")); err != nil || !strings.HasPrefix(string(data), fmt.Sprintf("round %d from", round)) {
				t.Fatalf("onto/target in %s: %q, %v", m.dir, data, err)
			}
		}
	}
	if got := f.objects(); got != files+1 {
		t.Errorf("%d data objects; want %d: %d moved files and one target", got, files+1, files)
	}
}

// TestRemoveWhileListing removes a tree with rm -r in one mount while the
// two others list it: they see it go, nothing else fails, and no mount
// shows any of it once rm returns; its data is gone too.
func TestRemoveWhileListing(t *testing.T) {
	f := newFS(t)
	ms := f.mounts(3)
	src := filepath.Join(t.TempDir(), "src")
	os.Mkdir(src, 0o755)
	makeTree(t, src, 400, 3)
	run(t, ms[0].dir, "cp", "-a", src, "tree")
	sameViews(t, view(t, src), ms[1].path("tree"), ms[2].path("tree"))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var passes [2]int
	var fails [2][]string
	vanished := func(l string) bool { return strings.Contains(l, "No such file or directory") }
	lister(t, &wg, ms[0].dir, []string{"ls", "-lR", "tree"}, vanished, stop, &passes[0], &fails[0])
	lister(t, &wg, ms[2].dir, []string{"find", "tree", "-ls"}, vanished, stop, &passes[1], &fails[1])
	time.Sleep(50 * time.Millisecond) // let both listers start a pass before the removal
	run(t, ms[1].dir, "rm", "-r", "tree")
	close(stop)
	wg.Wait()
	for i, fl := range fails {
		if len(fl) > 0 {
			t.Errorf("the lister in m%d failed for more than a vanished path %d times: %s", []int{1, 3}[i], len(fl), strings.Join(fl[:min(3, len(fl))], "\n"))
		}
	}
	for _, m := range ms {
		if _, err := os.Lstat(m.path("tree")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("tree in %s after rm -r returned: %v", m.dir, err)
		}
		if ents, err := os.ReadDir(m.dir); err != nil || len(ents) != 0 {
			t.Errorf("the root of %s: %v, %v", m.dir, ents, err)
		}
	}
	if got := f.objects(); got != 0 {
		t.Errorf("%d data objects left after the tree was removed", got)
	}
}

// TestLargeDirectory lists a folder of more entries than one leased
// listing holds (1,000): every mount sees every name, and a change made
// after the listing.
func TestLargeDirectory(t *testing.T) {
	f := newFS(t)
	ms := f.mounts(2)
	const n = 1100
	run(t, ms[0].dir, "sh", "-c", fmt.Sprintf("mkdir big && cd big && seq -f 'n%%04g' 1 %d | xargs touch", n))
	for _, m := range ms {
		ents, err := os.ReadDir(m.path("big"))
		if err != nil || len(ents) != n {
			t.Fatalf("big in %s: %d entries, %v; want %d", m.dir, len(ents), err, n)
		}
	}
	if err := os.Remove(ms[1].path("big/n0500")); err != nil {
		t.Fatal(err)
	}
	if ents, err := os.ReadDir(ms[0].path("big")); err != nil || len(ents) != n-1 {
		t.Fatalf("big in m1 after m2 removed a name: %d entries, %v", len(ents), err)
	}
}

// TestRenameCycleRace has two mounts move two folders into each other at
// once, again and again: at most one move of each pair wins, so the tree
// never loses a folder into a cycle, and every mount sees both folders.
func TestRenameCycleRace(t *testing.T) {
	f := newFS(t)
	ms := f.mounts(2)
	for round := range 15 {
		x, y := fmt.Sprintf("x%d", round), fmt.Sprintf("y%d", round)
		for _, d := range []string{x, y} {
			if err := os.Mkdir(ms[0].path(d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, mv := range [][2]string{{x, y + "/" + x}, {y, x + "/" + y}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = os.Rename(ms[i].path(mv[0]), ms[i].path(mv[1]))
			}()
		}
		wg.Wait()
		if errs[0] == nil && errs[1] == nil {
			t.Fatalf("round %d: both moves succeeded: %s and %s are cut off in a cycle", round, x, y)
		}
		for _, m := range ms {
			found := 0
			filepath.WalkDir(m.dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() && (d.Name() == x || d.Name() == y) {
					found++
				}
				return nil
			})
			if found != 2 {
				t.Fatalf("round %d: %s reaches %d of %s and %s (errors %v)", round, m.dir, found, x, y, errs)
			}
		}
	}
}

// TestCrashesLoseNothing: what close returned for survives a SIGKILL of
// the mount and of leased: after both restart, a mount on the same folder
// and a new one show the same tree, and take changes.
func TestCrashesLoseNothing(t *testing.T) {
	f := newFS(t)
	m := startMount(t, "m1", f.eps, f.ca, f.data)
	makeTree(t, m.dir, 120, 5)
	if err := os.Rename(m.path("file010.txt"), m.path("renamed.txt")); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	truth := view(t, m.dir)
	m.proc.Signal(t, syscall.SIGKILL)
	m.proc.Wait(t, mountTimeout)
	f.srv.Kill(t)
	f.srv = f.srv.Restart(t)
	m = startMountAt(t, m.dir, f.eps, f.ca, f.data)
	m2 := startMount(t, "m2", f.eps, f.ca, f.data)
	sameViews(t, truth, m.dir, m2.dir)
	if err := os.Mkdir(m2.path("after"), 0o755); err != nil {
		t.Fatalf("a change after the restarts: %v", err)
	}
	if _, err := os.Stat(m.path("after")); err != nil {
		t.Fatalf("the other mount does not see it: %v", err)
	}
}

// TestRenameFlags: renameat2's RENAME_NOREPLACE refuses to replace a name
// (EEXIST) and moves onto a free one; RENAME_EXCHANGE is refused with
// EINVAL and changes nothing; the other mount sees each outcome.
func TestRenameFlags(t *testing.T) {
	f := newFS(t)
	ms := f.mounts(2)
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(ms[0].path(n), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rename2 := func(from, to string, flags uint) error {
		return unix.Renameat2(unix.AT_FDCWD, ms[0].path(from), unix.AT_FDCWD, ms[0].path(to), flags)
	}
	if err := rename2("a", "b", unix.RENAME_NOREPLACE); !errors.Is(err, unix.EEXIST) {
		t.Fatalf("RENAME_NOREPLACE onto an existing name: %v, want EEXIST", err)
	}
	if err := rename2("a", "b", unix.RENAME_EXCHANGE); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("RENAME_EXCHANGE: %v, want EINVAL", err)
	}
	if err := rename2("a", "c", unix.RENAME_NOREPLACE); err != nil {
		t.Fatalf("RENAME_NOREPLACE onto a free name: %v", err)
	}
	for name, want := range map[string]string{"b": "b", "c": "a"} {
		if data, err := os.ReadFile(ms[1].path(name)); err != nil || string(data) != want {
			t.Errorf("%s in the other mount: %q, %v; want %q", name, data, err, want)
		}
	}
	if _, err := os.Lstat(ms[1].path("a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a in the other mount after it moved: %v", err)
	}
}
