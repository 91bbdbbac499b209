package main

import (
	"encoding/json"
	"io"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/wait"
)

// Bad command lines of lock, check-token, --guard, elect and queue are
// usage errors (exit status 2), found before anything connects, with a
// message that says what was expected.
func TestLockUsage(t *testing.T) {
	env := usableCA(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lock"}, "lock wants NAME -- COMMAND [ARG...]; got no NAME"},
		{[]string{"lock", "n"}, "lock wants NAME -- COMMAND [ARG...]; got no COMMAND"},
		{[]string{"lock", "--", "true"}, "got no NAME"},
		{[]string{"lock", "a", "b", "--", "true"}, `got 2 arguments before --: ["a" "b"] (one NAME)`},
		{[]string{"lock", "", "--", "true"}, "NAME must not be empty"},
		{[]string{"lock", "n", "--", "leasectl-test-no-such-command"}, `COMMAND "leasectl-test-no-such-command" cannot be run`},
		{[]string{"lock", "--kill-after", "-1s", "n", "--", "true"}, "--kill-after -1s: must not be negative"},
		{[]string{"lock", "--ttl", "0", "n", "--", "true"}, `TTL "0": want a positive number of seconds`},
		{[]string{"lock", "--ttl", "soon", "n", "--", "true"}, `TTL "soon"`},
		{[]string{"check-token", "k"}, "check-token wants KEY TOKEN; got 1"},
		{[]string{"check-token", "k", "x"}, `TOKEN "x" is not a fencing token`},
		{[]string{"check-token", "", "1"}, "KEY must not be empty"},
		{[]string{"put", "--guard", "lock", "k", "v"}, `--guard "lock": want LOCK=TOKEN`},
		{[]string{"put", "--guard", "lock=x", "k", "v"}, `--guard "lock=x": TOKEN "x" is not a fencing token`},
		{[]string{"del", "--guard", "=1", "k"}, `--guard "=1": the key of the lock must not be empty`},
		{[]string{"cas", "--guard", "lock=0", "k", "0", "v"}, `TOKEN "0" is not a fencing token: want a number above 0`},
		{[]string{"txn", "--guard", "a=1", "--guard", "b=2"}, "--guard given 2 times: a write has one guard"},
		{[]string{"elect", "n"}, "elect wants NAME VALUE to campaign, or --listen NAME to observe"},
		{[]string{"elect", "--listen", "n", "v"}, "it takes no VALUE"},
		{[]string{"elect", "--listen", "--ttl", "5s", "n"}, "it takes no --ttl"},
		{[]string{"elect", "", "v"}, "NAME must not be empty"},
		{[]string{"elect", "a", "b", "c"}, "elect wants NAME [VALUE]; got 3"},
		{[]string{"queue", "put", "", "v"}, "QUEUE must not be empty"},
		{[]string{"queue", "put", "q"}, "put wants QUEUE VALUE; got 1"},
		{[]string{"queue", "claim", "--ttl", "5s", "--lease", "1", "q"}, "--ttl (a new lease) or --lease (an existing one), not both"},
		{[]string{"queue", "claim", "--lease", "zz", "q"}, `lease id "zz"`},
		{[]string{"queue", "claim", "--ttl", "0s", "q"}, `TTL "0s"`},
		{[]string{"queue", "complete", "q", "q/tasks/x"}, "complete wants --token TOKEN and --lease ID"},
		{[]string{"queue", "complete", "q", "q/tasks/x", "--token", "1"}, "complete wants --token TOKEN and --lease ID"},
		{[]string{"queue", "complete", "q", "q/tasks/x", "--token", "0", "--lease", "1"}, `--token "0" is not a fencing token`},
		{[]string{"queue", "complete", "q", "q/tasks/x", "--token", "1", "--lease", "xyz"}, `lease id "xyz"`},
		{[]string{"queue", "fail", "q", "q/tasks/x", "--token", "1", "--lease", "1", "--delay", "-1s"}, "--delay -1s: must not be negative"},
		{[]string{"queue", "fail", "q", "q/tasks/x", "--token", "1", "--lease", "1", "--max-attempts", "-1"}, "--max-attempts -1"},
		{[]string{"queue", "list"}, "list wants QUEUE; got 0"},
		{[]string{"queue", "frobnicate"}, `unknown command "frobnicate" for "leasectl queue"`},
	} {
		a, stdout, stderr := newTestApp(env)
		if code := a.execute(tc.args); code != exitUsage || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("%q: status %d, stdout %q, stderr %q; want status 2 and %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

// lockShell returns a Cmd whose shell commands, run by lock, reach the
// server with "$LC" --endpoint "$EP" (leasectl finds the CA in its
// environment).
func lockShell(srv *clitest.Server) clitest.Cmd {
	return clitest.Cmd{Env: []string{envCACert + "=" + srv.CA, "LC=" + bins.Leasectl, "EP=" + srv.Addr}}
}

// ctlArgs returns the arguments of a leasectl command against srv.
func ctlArgs(srv *clitest.Server, args ...string) []string {
	return append([]string{"--endpoint", srv.Addr, "--cacert", srv.CA}, args...)
}

// TestLock: real processes. lock runs its command with the lock's key,
// token and lease in its environment and exits with its status; while it
// runs, check-token says the token is current and a write guarded with it
// commits; once it has exited, the lock is released and its lease
// revoked: check-token says the token is not current (status 6) and the
// guarded write is fenced (status 5). A second lock of the same name
// waits until the first's command has exited, and gets a greater token.
func TestLock(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	ctl := func(args ...string) clitest.Result { t.Helper(); return srv.Ctl(t, args...) }

	const script = `echo "$LEASED_LOCK_KEY $LEASED_LOCK_TOKEN $LEASED_LOCK_LEASE"
"$LC" --endpoint "$EP" -o json check-token "$LEASED_LOCK_KEY" "$LEASED_LOCK_TOKEN" || exit 10
"$LC" --endpoint "$EP" put --guard "$LEASED_LOCK_KEY=$LEASED_LOCK_TOKEN" /guarded by-holder >/dev/null || exit 11
exit 3`
	r := lockShell(srv).Run(t, bins.Leasectl, ctlArgs(srv, "lock", "/locks/a", "--", "sh", "-c", script)...)
	if r.Code != 3 {
		t.Fatalf("lock: status %d, want the command's 3\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("lock's command printed %q, want its environment and check-token's answer", r.Stdout)
	}
	env := strings.Fields(lines[0])
	if len(env) != 3 || env[0] != "/locks/a" || !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(env[2]) {
		t.Fatalf("the command's environment: %q, want the key, the token and the lease", lines[0])
	}
	token, lease := env[1], env[2]
	if parseVersion(t, token) == 0 {
		t.Fatalf("token %s", token)
	}
	var held checkTokenJSON
	if err := json.Unmarshal([]byte(lines[1]), &held); err != nil {
		t.Fatalf("check-token -o json: %q: %v", lines[1], err)
	}
	if !held.Current || !held.Lock.Held || strconv.FormatUint(held.Lock.Token, 10) != token || held.Lock.Lease != lease || held.Key != "/locks/a" {
		t.Fatalf("check-token while held: %+v, want current, token %s, lease %s", held, token, lease)
	}
	if r.Stderr != "" {
		t.Errorf("lock wrote to stderr: %q", r.Stderr)
	}
	if got := ok(t, ctl("get", "--print-value-only", "/guarded")).Stdout; got != "by-holder" {
		t.Fatalf("the guarded write under the lock: /guarded holds %q", got)
	}

	// Released, and its lease revoked.
	r = ctl("check-token", "/locks/a", token)
	fails(t, r, exitLockLost, `token not current: the lock on "/locks/a" is not held`)
	if rows := table(t, r.Stdout); strings.Join(rows[0], " ") != "KEY TOKEN CURRENT HELD LOCK_TOKEN LEASE" ||
		strings.Join(rows[1], " ") != "/locks/a "+token+" false false - -" {
		t.Fatalf("check-token table after release: %q", rows)
	}
	fails(t, ctl("put", "--guard", "/locks/a="+token, "/guarded", "late"), exitConflict, "guard failed")
	fails(t, ctl("del", "--guard", "/locks/a="+token, "/guarded"), exitConflict, "guard failed")
	r = clitest.Cmd{Stdin: strings.NewReader("\nput /guarded late\n")}.Run(t, bins.Leasectl, ctlArgs(srv, "txn", "--guard", "/locks/a="+token)...)
	fails(t, r, exitConflict, "guard failed")
	if got := ok(t, ctl("get", "--print-value-only", "/guarded")).Stdout; got != "by-holder" {
		t.Fatalf("fenced writes changed /guarded: %q", got)
	}
	if r := ok(t, ctl("lease", "timetolive", lease)); !strings.Contains(r.Stdout, "already expired") {
		t.Fatalf("lock's lease after it exited: %q, want it revoked", r.Stdout)
	}

	// A second lock waits until the first's command has exited.
	in, feed := io.Pipe()
	first := clitest.Cmd{Stdin: in}.Start(t, bins.Leasectl, ctlArgs(srv, "lock", "/locks/w", "--", "sh", "-c",
		`echo "first $LEASED_LOCK_TOKEN"; read line; echo "first done"`)...)
	first.WaitOutput(t, "first ", clitest.RunTimeout)
	second := clitest.Cmd{}.Start(t, bins.Leasectl, ctlArgs(srv, "lock", "/locks/w", "--", "sh", "-c", `echo "second $LEASED_LOCK_TOKEN"`)...)
	// The notice comes after a second of waiting.
	wait.For(t, clitest.RunTimeout, "the second lock to wait for the first", func() bool {
		return strings.Contains(second.Stderr.String(), `waiting for the lock on "/locks/w"`)
	})
	if out := second.Stdout.String(); out != "" {
		t.Fatalf("the second lock's command ran while the first held the lock: %q", out)
	}
	if _, err := feed.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	feed.Close()
	if code := first.Wait(t, clitest.RunTimeout); code != 0 {
		t.Fatalf("first lock: status %d\nstderr: %s", code, first.Stderr.String())
	}
	if code := second.Wait(t, clitest.RunTimeout); code != 0 {
		t.Fatalf("second lock: status %d\nstderr: %s", code, second.Stderr.String())
	}
	firstToken := strings.Fields(first.Stdout.String())[1]
	secondOut := strings.Fields(second.Stdout.String())
	if len(secondOut) != 2 || parseVersion(t, secondOut[1]) <= parseVersion(t, firstToken) {
		t.Fatalf("tokens: first %s, second %q; want the second greater", firstToken, secondOut)
	}
	srv.Stop(t)
}

// TestLockLost: real processes. When lock's lease is revoked while its
// command runs, lock says the lock was lost, stops the command with
// SIGTERM (then SIGKILL after --kill-after, for a command that ignores
// SIGTERM) and exits with status 6; the lock is free at once. SIGINT sent
// to lock reaches its command, and lock exits with the command's status,
// after releasing the lock.
func TestLockLost(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	ctl := func(args ...string) clitest.Result { t.Helper(); return srv.Ctl(t, args...) }
	leaseLine := regexp.MustCompile(`lease ([0-9a-f]{16})\n`)
	// The loop of short sleeps leaves no process behind that would keep
	// the test's pipes open once the shell is gone.
	const loop = `while :; do sleep 0.05; done`

	for _, tc := range []struct {
		name, trap, killAfter, want, out string
	}{
		{"stops on SIGTERM", `trap 'echo stopped; exit 9' TERM`, "30s", "stopping sh: SIGTERM, then SIGKILL after 30s", "stopped"},
		{"killed after --kill-after", `trap '' TERM`, "100ms", "sh did not exit within 100ms of SIGTERM; killing it", ""},
	} {
		p := clitest.Cmd{}.Start(t, bins.Leasectl, ctlArgs(srv, "lock", "--kill-after", tc.killAfter, "/locks/l", "--", "sh", "-c",
			tc.trap+`; echo "lease $LEASED_LOCK_LEASE"; `+loop)...)
		p.WaitOutput(t, "\n", clitest.RunTimeout)
		m := leaseLine.FindStringSubmatch(p.Stdout.String())
		if m == nil {
			t.Fatalf("%s: the command printed %q, want its lease", tc.name, p.Stdout.String())
		}
		ok(t, ctl("lease", "revoke", m[1]))
		if code := p.Wait(t, clitest.RunTimeout); code != exitLockLost ||
			!strings.Contains(p.Stderr.String(), `lock lost: the lock on "/locks/l" ended: its TTL lease `+m[1]+` was revoked or ran out`) ||
			!strings.Contains(p.Stderr.String(), tc.want) || !strings.Contains(p.Stdout.String(), tc.out) {
			t.Fatalf("%s: status %d, want %d\nstdout: %s\nstderr: %s", tc.name, code, exitLockLost, p.Stdout.String(), p.Stderr.String())
		}
		// Free at once: another lock takes it without waiting.
		r := ok(t, clitest.Cmd{}.Run(t, bins.Leasectl, ctlArgs(srv, "lock", "/locks/l", "--", "true")...))
		if r.Stderr != "" {
			t.Fatalf("%s: the next lock: %q", tc.name, r.Stderr)
		}
	}

	// SIGINT reaches the command.
	p := clitest.Cmd{}.Start(t, bins.Leasectl, ctlArgs(srv, "lock", "/locks/s", "--", "sh", "-c",
		`trap 'echo interrupted; exit 42' INT; echo "ready $LEASED_LOCK_TOKEN"; `+loop)...)
	p.WaitOutput(t, "\n", clitest.RunTimeout)
	token := strings.Fields(p.Stdout.String())[1]
	p.Signal(t, syscall.SIGINT)
	if code := p.Wait(t, clitest.RunTimeout); code != 42 || !strings.Contains(p.Stdout.String(), "interrupted") {
		t.Fatalf("lock after SIGINT: status %d, want the command's 42\nstdout: %s\nstderr: %s", code, p.Stdout.String(), p.Stderr.String())
	}
	fails(t, ctl("check-token", "/locks/s", token), exitLockLost, "is not held")

	// A command killed by a signal: 128 plus its number, as a shell says.
	r := clitest.Cmd{}.Run(t, bins.Leasectl, ctlArgs(srv, "lock", "/locks/s", "--", "sh", "-c", "kill -KILL $$")...)
	if r.Code != 128+int(syscall.SIGKILL) {
		t.Fatalf("lock of a command killed by SIGKILL: status %d\nstderr: %s", r.Code, r.Stderr)
	}
	srv.Stop(t)
}
