package readmecheck

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/clitest"
)

// bins are the binaries built by TestMain.
var bins clitest.Binaries

func TestMain(m *testing.M) {
	os.Exit(clitest.Main(m, &bins))
}

// clone is the placeholder the README's steps use for the path of the
// repository's clone.
const clone = "PATH/TO/CLONE"

// goTimeout bounds one go command of the test: a cold build cache compiles
// quic-go, which can take minutes on a slow machine.
const goTimeout = 10 * time.Minute

// block returns the fenced block of README text that comes right after the
// marker <!-- readme-check: name --> and opens with ```lang, without its
// fences.
func block(t *testing.T, readme, name, lang string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "<!-- readme-check: "+name+" -->\n```"+lang+"\n")
	if !ok {
		t.Fatalf("README.md has no ```%s block right after <!-- readme-check: %s -->", lang, name)
	}
	body, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("README.md's block %q does not end", name)
	}
	return body + "\n"
}

// goEnv is the environment of the go commands: the module cache only, which
// building this repository filled (its modules were verified against the
// checksum database when they were downloaded), no workspace of the
// caller's, this toolchain, and the -mod flag mod.
func goEnv(mod string) []string {
	return append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOFLAGS=-mod="+mod, "GOWORK=off", "GOTOOLCHAIN=local")
}

// run runs the shell script script in dir with the go environment, go
// commands free to update go.mod and go.sum, and returns its combined
// output and error.
func run(t *testing.T, dir, script string) (string, error) {
	t.Helper()
	return runMod(t, dir, "mod", script)
}

// runMod is run with the -mod flag mod.
func runMod(t *testing.T, dir, mod, script string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), goTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-e", "-x", "-c", script)
	cmd.Dir = dir
	cmd.Env = goEnv(mod)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s: did not finish within %v\n%s", script, goTimeout, out)
	}
	return string(out), err
}

// TestREADMELibrary follows the README's section on the Go library in a
// fresh module: its recipe to depend on a clone, its main.go, and its
// command to run it, against a real leased; the program must exit 0 and
// print the README's output. It also runs the program from the folder
// where leased runs with no -cacert, as the README says the default works
// there, and from elsewhere, where the client's error must say that the
// relative path was taken from the program's folder.
func TestREADMELibrary(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	setup := block(t, readme, "library setup", "sh")
	mainGo := block(t, readme, "library main.go", "go")
	runCmd := strings.TrimSpace(block(t, readme, "library run", "sh"))
	want := block(t, readme, "library output", "text")

	// The test works offline: it needs the modules of this repository's
	// graph in the module cache, as building the repository leaves them.
	// Without them it cannot tell a broken recipe from a missing download.
	if out, err := runMod(t, root, "readonly", "go list -m all >/dev/null"); err != nil {
		t.Skipf("the module cache lacks modules of this repository, and this test works offline (GOPROXY=off): "+
			"run go mod download in the repository first\n%s", out)
	}

	// The recipe, as the README gives it, in an empty folder, with the
	// clone's path filled in.
	work := t.TempDir()
	if out, err := run(t, work, strings.ReplaceAll(setup, clone, root)); err != nil {
		t.Fatalf("README's library setup failed: %v\n%s", err, out)
	}
	mods, err := filepath.Glob(filepath.Join(work, "*", "go.mod"))
	if err != nil || len(mods) != 1 {
		t.Fatalf("README's library setup made %d modules (%v); want one folder with a go.mod", len(mods), err)
	}
	mod := filepath.Dir(mods[0])
	if err := os.WriteFile(filepath.Join(mod, "main.go"), []byte(mainGo), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, mod, "go vet . && go build -o hello . && go list -deps ."); err != nil {
		t.Fatalf("README's main.go does not build in a fresh module: %v\n%s", err, out)
	} else if strings.Contains(out, "github.com/leased/leased/server\n") {
		t.Errorf("README's main.go links the server; a client program must not:\n%s", out)
	}
	hello := filepath.Join(mod, "hello")

	srvDir := t.TempDir()
	srv := clitest.StartServer(t, bins, srvDir, "leased-data")
	defer srv.Stop(t)

	// The README's command: go run . with its arguments, given the test
	// server's data folder for the clone's and its address.
	args, ok := strings.CutPrefix(runCmd, "go run . ")
	if !ok || strings.Contains(args, "\n") {
		t.Fatalf("README's library run block is %q; want one line, go run . ARGS", runCmd)
	}
	args = strings.ReplaceAll(args, clone+"/leased-data", filepath.Join(srvDir, "leased-data"))
	argv := append(strings.Fields(args), "-endpoint", srv.Addr)
	for _, tc := range []struct {
		name string
		dir  string
		args []string
	}{
		{"as the README runs it", mod, argv},
		{"from leased's folder with the default CA", srvDir, []string{"-endpoint", srv.Addr}},
	} {
		r := clitest.Cmd{Dir: tc.dir}.Run(t, hello, tc.args...)
		if r.Code != 0 || r.Stdout != want {
			t.Errorf("%s (hello %q in %s): status %d\nstdout:\n%s\nwant the README's output:\n%s\nstderr: %s",
				tc.name, tc.args, tc.dir, r.Code, r.Stdout, want, r.Stderr)
		}
	}

	// Elsewhere, the default CA path names no file: the error says why.
	r := clitest.Cmd{Dir: mod}.Run(t, hello, "-endpoint", srv.Addr)
	if hint := "a relative path is taken from this program's working folder"; r.Code == 0 || !strings.Contains(r.Stderr, hint) {
		t.Errorf("hello with the default CA outside leased's folder: status %d, stderr %q; want a failure that says %q",
			r.Code, r.Stderr, hint)
	}
}
