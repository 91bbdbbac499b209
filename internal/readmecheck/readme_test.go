package readmecheck

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/clitest"
)

// bins are the binaries built by TestMain.
var bins clitest.Binaries

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, &bins))
}

// pages are the pages the test follows, in order: the README, then the
// docs pages whose steps continue it.
var pages = []string{"README.md", "docs/SECURITY.md", "docs/OPERATING.md"}

// walkTimeout bounds the whole walk: a cold build cache compiles quic-go
// and the rest of the module graph, which can take minutes on a slow
// machine, and the README's failover waits out a lease term. It stays
// below go test's default timeout of 10 minutes, so that the test, not the
// test binary's panic, ends a walk that hangs, and stops its servers.
const walkTimeout = 8 * time.Minute

// readyTimeout bounds the wait for a background block to be ready; its
// first start may compile the server.
const readyTimeout = 5 * time.Minute

// A block is one fenced block of a page.
type block struct {
	page string // the page's path in the repository
	line int    // the line of its opening fence
	lang string // the fence's language: sh, go, text, ...
	body string // its text, ending with a newline

	name      string // the marker's name, if it has one
	directive string // the marker's directive, if any
}

// where names the block for messages.
func (b block) where() string {
	if b.name != "" {
		return fmt.Sprintf("%s:%d (%s)", b.page, b.line, b.name)
	}
	return fmt.Sprintf("%s:%d", b.page, b.line)
}

// marker matches a marker comment: <!-- readme-check: NAME[; DIRECTIVE] -->.
var marker = regexp.MustCompile(`^<!-- readme-check: ([^;]+?)(?:; (.+?))? -->$`)

// parse returns the fenced blocks of a page, with the marker right before
// each, if any.
func parse(t *testing.T, page, text string) []block {
	t.Helper()
	var (
		blocks []block
		cur    *block
		prev   string // the line before the current one
		lineNo int
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lineNo++
		line := sc.Text()
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &block{page: page, line: lineNo, lang: strings.TrimPrefix(line, "```")}
			if m := marker.FindStringSubmatch(prev); m != nil {
				cur.name, cur.directive = m[1], m[2]
			}
		case cur != nil && line == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.body += line + "\n"
		case strings.Contains(line, "<!-- readme-check:") && !marker.MatchString(line):
			t.Fatalf("%s:%d: malformed marker %q; want <!-- readme-check: NAME[; DIRECTIVE] -->", page, lineNo, line)
		}
		prev = line
	}
	if cur != nil {
		t.Fatalf("%s: the block at line %d does not end", page, cur.line)
	}
	return blocks
}

// script makes the shell script that follows one page: each sh block in
// order, as its marker says, in a subshell that starts in the repository's
// root. It writes what a "prints" block expects under rc, and returns the
// block whose body is the README's test command, if it has one.
func script(t *testing.T, blocks []block, rc string) (string, *block) {
	t.Helper()
	var (
		sb    strings.Builder
		tests *block
	)
	sb.WriteString("(\nset -x\ncd \"$RC_ROOT\"\n")
	for i, b := range blocks {
		// A text block the sh block before must print: capture that
		// block's output in the current shell (a pipe would run it in a
		// subshell, and lose its cd), then compare.
		var want string
		if i+1 < len(blocks) && blocks[i+1].directive == "prints the block before" {
			want = filepath.Join(rc, fmt.Sprintf("want-%d", i))
			if err := os.WriteFile(want, []byte(blocks[i+1].body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		fmt.Fprintf(&sb, "echo %q\n", "readme-check: "+b.where())
		switch d := b.directive; {
		case d == "prints the block before":
			if i == 0 || blocks[i-1].lang != "sh" {
				t.Fatalf("%s: prints the block before, but the block before is not a sh block", b.where())
			}
		case strings.HasPrefix(d, "skip: "):
			if b.name == "tests" {
				tests = &blocks[i]
			}
		case strings.HasPrefix(d, "save as "):
			file := strings.TrimPrefix(d, "save as ")
			fmt.Fprintf(&sb, "cat > %q <<'READMECHECK_EOF'\n%sREADMECHECK_EOF\n", file, b.body)
		case strings.HasPrefix(d, "background until ") && strings.HasSuffix(d, " succeeds"):
			cmd := strings.TrimSuffix(strings.TrimPrefix(d, "background until "), " succeeds")
			args, ok := strings.CutPrefix(cmd, "leasectl ")
			if !ok || b.lang != "sh" {
				t.Fatalf("%s: background until %q: want a sh block and a leasectl command", b.where(), cmd)
			}
			log := filepath.Join(rc, fmt.Sprintf("background-%s-%d.log", strings.ReplaceAll(b.page, "/", "-"), b.line))
			fmt.Fprintf(&sb, "(\n%s) >%q 2>&1 &\nreadme_ready $! %q \"$RC_LEASECTL\" %s\n", b.body, log, log, args)
		case d != "":
			t.Fatalf("%s: unknown directive %q", b.where(), d)
		case b.lang != "sh":
			// Code and output for the reader, not run.
		case want != "":
			out := strings.TrimSuffix(want, filepath.Base(want)) + fmt.Sprintf("out-%d", i)
			fmt.Fprintf(&sb, "{\n%s} >%q\ncat %q\n", b.body, out, out)
			fmt.Fprintf(&sb, "if ! diff -u %q %q; then echo %q; exit 1; fi\n", want, out,
				"readme-check: "+b.where()+" printed otherwise than the block after it says")
		default:
			sb.WriteString(b.body)
		}
	}
	sb.WriteString(")\n")
	return sb.String(), tests
}

// prelude starts every walk: strict mode, and readme_ready PID LOG CMD...,
// which waits until CMD succeeds, failing with the log if the background
// block PID ends first or readyTimeout passes.
var prelude = fmt.Sprintf(`set -eo pipefail
readme_ready() (
	set +x
	pid=$1 log=$2 deadline=$((SECONDS + %d))
	shift 2
	until "$@" >/dev/null 2>&1; do
		if ! kill -0 "$pid" 2>/dev/null; then
			echo "readme-check: the background block ended before it was ready; its output:"; cat "$log"; exit 1
		fi
		if [ "$SECONDS" -ge "$deadline" ]; then
			echo "readme-check: the background block was not ready within %v; its output:"; cat "$log"; exit 1
		fi
		sleep 0.2
	done
)
`, int(readyTimeout.Seconds()), readyTimeout)

// goEnv is the environment of the walk: the module cache only, which
// building this repository filled (its modules were verified against the
// checksum database when they were downloaded), no workspace of the
// caller's, this toolchain, and go commands free to update go.mod and go.sum.
func goEnv() []string {
	return append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
}

// copyRepo copies the repository at root as a fresh clone would hold it,
// with the work tree's changes (the files git tracks, and new ones it does
// not ignore), into dst, and commits it there, so that git status in dst
// shows what the walk adds.
func copyRepo(t *testing.T, root, dst string) {
	t.Helper()
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v", root, err)
	}
	for _, name := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		st, err := os.Lstat(src)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, st.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	git(t, dst, "init", "-q")
	git(t, dst, "add", "-A")
	git(t, dst, "-c", "user.name=readmecheck", "-c", "user.email=readmecheck@localhost", "commit", "-q", "-m", "copy")
}

// git runs git with args in dir and returns its output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return string(out)
}

// stopGroup ends the process group pgid: SIGTERM, as Ctrl-C in the
// terminals would, then SIGKILL for whatever still runs after grace.
func stopGroup(pgid int, grace time.Duration) {
	syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// TestREADMEInOrder follows README.md, then docs/SECURITY.md and
// docs/OPERATING.md, as a new user would on a fresh clone: every sh block
// in order, as the package documentation describes, with the servers and
// the cluster the pages start. Every command must succeed, and the library
// program must print what the README says. Then it checks the library
// program further (it links no server; the default CA works from leased's
// folder; elsewhere the error says why), that the README's test command is
// the one CI and make run, and that the walk left the work tree clean.
func TestREADMEInOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("the walk builds the binaries and runs a server and a cluster for about two minutes")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	// The walk works offline: it needs the modules of this repository's
	// graph in the module cache, as building the repository leaves them.
	// Without them it cannot tell a broken step from a missing download.
	list := exec.Command("go", "list", "-m", "all")
	list.Dir, list.Env = root, append(goEnv(), "GOFLAGS=-mod=readonly")
	if out, err := list.CombinedOutput(); err != nil {
		t.Skipf("the module cache lacks modules of this repository, and this test works offline (GOPROXY=off): "+
			"run go mod download in the repository first\n%s", out)
	}

	work := t.TempDir()
	clone := filepath.Join(work, "leased")
	rc := filepath.Join(work, "readme-check")
	for _, d := range []string{clone, rc} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	copyRepo(t, root, clone)

	var (
		walk  strings.Builder
		tests *block
		lib   = map[string]block{}
	)
	walk.WriteString(prelude)
	for _, page := range pages {
		text, err := os.ReadFile(filepath.Join(clone, page))
		if err != nil {
			t.Fatal(err)
		}
		blocks := parse(t, page, string(text))
		for _, b := range blocks {
			if strings.HasPrefix(b.name, "library ") {
				lib[b.name] = b
			}
		}
		s, tb := script(t, blocks, rc)
		if tb != nil {
			tests = tb
		}
		walk.WriteString(s)
	}
	if err := os.WriteFile(filepath.Join(rc, "walk.sh"), []byte(walk.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), walkTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(rc, "walk.sh"))
	cmd.Dir = clone
	cmd.Env = append(goEnv(), "RC_ROOT="+clone, "RC_LEASECTL="+bins.Leasectl)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// The output goes to a file, not a pipe: the servers the walk leaves
	// running hold it open, and Wait would wait for them to close a pipe.
	outFile, err := os.Create(filepath.Join(rc, "walk.out"))
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	cmd.Stdout, cmd.Stderr = outFile, outFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The servers the pages started run on after the walk, in its process
	// group, until the end of the test.
	t.Cleanup(func() { stopGroup(cmd.Process.Pid, 20*time.Second) })
	err = cmd.Wait()
	out, rerr := os.ReadFile(outFile.Name())
	if rerr != nil {
		t.Fatal(rerr)
	}
	if err != nil {
		t.Fatalf("following the pages failed (%v); the script is %s, and it printed:\n%s", err,
			filepath.Join(rc, "walk.sh"), tail(string(out), 300))
	}
	t.Logf("the walk took its steps; its output ends:\n%s", tail(string(out), 20))

	t.Run("test command", func(t *testing.T) {
		if tests == nil {
			t.Fatal("README.md has no block marked <!-- readme-check: tests; skip: ... -->")
		}
		command := strings.TrimSpace(tests.body)
		ci, err := os.ReadFile(filepath.Join(clone, ".ci", "run"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains("\n"+string(ci)+"\n", "\n"+command+"\n") {
			t.Errorf(".ci/run does not run the README's test command %q on a line of its own", command)
		}
		mk, err := os.ReadFile(filepath.Join(clone, "Makefile"))
		if err != nil {
			t.Fatal(err)
		}
		if want := "\t$(GO) " + strings.TrimPrefix(command, "go "); !strings.Contains(string(mk), "test:\n"+want+"\n") {
			t.Errorf("make test does not run the README's test command: want %q under test:", want)
		}
	})

	t.Run("library", func(t *testing.T) {
		checkLibrary(t, clone, lib)
	})

	t.Run("clean work tree", func(t *testing.T) {
		if st := git(t, clone, "status", "--porcelain", "--untracked-files=all"); st != "" {
			t.Errorf("following the pages left files in the work tree that git does not ignore "+
				"(a later build would be stamped +dirty):\n%s", st)
		}
	})
}

// checkLibrary checks the README's library program beyond what the walk
// did: it builds with no server linked in, and, against the quickstart's
// server that still runs, it prints the README's output when run from
// leased's folder with the default CA, while from its own folder the
// default fails with an error that says the relative path was taken from
// the program's folder.
func checkLibrary(t *testing.T, clone string, lib map[string]block) {
	want, ok := lib["library output"]
	if !ok {
		t.Fatal("README.md has no block marked <!-- readme-check: library output; ... -->")
	}
	mod := filepath.Join(filepath.Dir(clone), "hello-leased")
	build := exec.Command("sh", "-c", "go vet . && go build -o hello . && go list -deps .")
	build.Dir, build.Env = mod, goEnv()
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's main.go does not build in %s: %v\n%s", mod, err, out)
	}
	if strings.Contains(string(out), "github.com/leased/leased/server\n") {
		t.Errorf("the README's main.go links the server; a client program must not:\n%s", out)
	}
	hello := filepath.Join(mod, "hello")
	r := clitest.Cmd{Dir: clone}.Run(t, hello)
	if r.Code != 0 || r.Stdout != want.body {
		t.Errorf("hello from leased's folder with the default CA: status %d\nstdout:\n%s\nwant the README's output:\n%s\nstderr: %s",
			r.Code, r.Stdout, want.body, r.Stderr)
	}
	r = clitest.Cmd{Dir: mod}.Run(t, hello)
	if hint := "a relative path is taken from this program's working folder"; r.Code == 0 || !strings.Contains(r.Stderr, hint) {
		t.Errorf("hello with the default CA outside leased's folder: status %d, stderr %q; want a failure that says %q",
			r.Code, r.Stderr, hint)
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines before]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
