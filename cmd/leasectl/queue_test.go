package main

import (
	"encoding/binary"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/wait"
)

// TestQueue: real processes, as a shell worker uses them. Tasks put in a
// queue are listed oldest first; a claim by one leasectl outlives it (the
// task stays claimed, its lease alive) and is completed, or failed, by
// another, given the token and lease; a wrong token is fenced (status 5);
// the lease serves the next claim (--lease), and a task failed
// --max-attempts times moves to the dead letters. A task whose claim's
// lease is revoked is free again. A claim waits for a task to be put.
func TestQueue(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	ctl := func(args ...string) clitest.Result { t.Helper(); return srv.Ctl(t, args...) }
	list := func() []queueTaskJSON {
		t.Helper()
		var l queueListJSON
		decode(t, ctl("-o", "json", "queue", "list", "jobs"), &l)
		if l.Queue != "jobs" {
			t.Fatalf("queue list -o json: %+v", l)
		}
		return l.Tasks
	}
	claim := func(args ...string) queueClaimJSON {
		t.Helper()
		var c queueClaimJSON
		decode(t, ctl(append([]string{"-o", "json", "queue", "claim"}, args...)...), &c)
		return c
	}
	tok := func(n uint64) string { return strconv.FormatUint(n, 10) }

	// put: the table gives the key; JSON too; "-" reads stdin.
	rows := table(t, ok(t, ctl("queue", "put", "jobs", "one")).Stdout)
	if len(rows) != 2 || rows[0][0] != "KEY" || !strings.HasPrefix(rows[1][0], "jobs/tasks/") {
		t.Fatalf("queue put table: %q", rows)
	}
	one := rows[1][0]
	var put queuePutJSON
	decode(t, ctl("-o", "json", "queue", "put", "jobs", "two words"), &put)
	two := put.Key
	if put.Queue != "jobs" || !strings.HasPrefix(two, "jobs/tasks/") || two == one {
		t.Fatalf("queue put -o json: %+v", put)
	}
	r := clitest.Cmd{Stdin: strings.NewReader("three\n")}.Run(t, bins.Leasectl, ctlArgs(srv, "-o", "json", "queue", "put", "jobs", "-")...)
	decode(t, r, &put)
	three := put.Key
	ts := list()
	if len(ts) != 3 || ts[0].Key != one || ts[1].Key != two || ts[2].Key != three || *ts[1].Value != "two words" || *ts[2].Value != "three\n" ||
		ts[0].Claimed || ts[0].Attempt != 0 || ts[0].Token != 0 {
		t.Fatalf("queue list: %+v", ts)
	}
	rows = table(t, ok(t, ctl("queue", "list", "jobs")).Stdout)
	if strings.Join(rows[0], " ") != "KEY ATTEMPT VERSION CLAIMED TOKEN VALUE" || strings.Join(rows[1][3:], " ") != "false - one" {
		t.Fatalf("queue list table: %q", rows)
	}

	// Claim the oldest, in one leasectl: it stays claimed after it exits.
	c1 := claim("--ttl", "60s", "jobs")
	if c1.Queue != "jobs" || c1.Key != one || *c1.Value != "one" || c1.Attempt != 1 || c1.Token == 0 || len(c1.Lease) != 16 {
		t.Fatalf("queue claim: %+v", c1)
	}
	if ts := list(); !ts[2].Claimed || ts[2].Key != one || ts[2].Token != c1.Token || ts[2].Attempt != 1 {
		t.Fatalf("queue list after a claim (the claimed task, rewritten, comes last): %+v", ts)
	}
	if r := ok(t, ctl("lease", "timetolive", c1.Lease)); strings.Contains(r.Stdout, "expired") {
		t.Fatalf("the claim's lease after queue claim exited: %q", r.Stdout)
	}
	// The table: KEY VALUE TOKEN ATTEMPT LEASE.
	rows = table(t, ok(t, ctl("queue", "claim", "--ttl", "60", "jobs")).Stdout)
	// (The value "two words" takes two fields.)
	if strings.Join(rows[0], " ") != "KEY VALUE TOKEN ATTEMPT LEASE" || len(rows[1]) != 6 || rows[1][0] != two || rows[1][2] != "words" ||
		rows[1][4] != "1" || rows[1][5] == c1.Lease {
		t.Fatalf("queue claim table: %q", rows)
	}
	c2 := queueClaimJSON{Key: two, Token: parseVersion(t, rows[1][3]), Lease: rows[1][5]}

	// Complete it in another leasectl; a wrong token is fenced.
	fails(t, ctl("queue", "complete", "jobs", one, "--token", tok(c2.Token), "--lease", c1.Lease), exitConflict, "fenc")
	rows = table(t, ok(t, ctl("queue", "complete", "jobs", one, "--token", tok(c1.Token), "--lease", c1.Lease)).Stdout)
	if strings.Join(rows[1], " ") != one+" completed 1" {
		t.Fatalf("queue complete: %q", rows)
	}
	fails(t, ctl("queue", "complete", "jobs", one, "--token", tok(c1.Token), "--lease", c1.Lease), exitNotFound, "not found")
	fails(t, ctl("queue", "complete", "jobs", "other/tasks/x", "--token", tok(c1.Token), "--lease", c1.Lease), exitUsage, "is not a task of queue")

	// Fail the second, after a delay: it goes back to the end.
	var done queueDoneJSON
	decode(t, ctl("-o", "json", "queue", "fail", "jobs", two, "--token", tok(c2.Token), "--lease", c2.Lease, "--delay", "100ms"), &done)
	if done != (queueDoneJSON{Queue: "jobs", Key: two, Outcome: "requeued", Attempt: 1}) {
		t.Fatalf("queue fail: %+v", done)
	}
	if ts := list(); len(ts) != 2 || ts[0].Key != three || ts[1].Key != two || ts[1].Claimed || ts[1].Attempt != 1 {
		t.Fatalf("queue list after complete and fail: %+v", ts)
	}

	// The first claim's lease serves the next claims.
	c3 := claim("--lease", c1.Lease, "jobs")
	c4 := claim("--lease", c1.Lease, "jobs")
	if c3.Key != three || c3.Attempt != 1 || c3.Lease != c1.Lease || c3.Token <= c1.Token ||
		c4.Key != two || c4.Attempt != 2 || c4.Lease != c1.Lease {
		t.Fatalf("claims under --lease: %+v, %+v", c3, c4)
	}
	decode(t, ctl("-o", "json", "queue", "fail", "jobs", two, "--token", tok(c4.Token), "--lease", c1.Lease, "--max-attempts", "2"), &done)
	dead := "jobs/dead/" + strings.TrimPrefix(two, "jobs/tasks/")
	if done != (queueDoneJSON{Queue: "jobs", Key: two, Outcome: "dead", Attempt: 2, DeadKey: dead}) {
		t.Fatalf("queue fail at --max-attempts: %+v", done)
	}
	// The dead letter is the task's record: its attempt, then its value.
	rec := []byte(ok(t, ctl("get", "--print-value-only", dead)).Stdout)
	if a, n := binary.Uvarint(rec); a != 2 || string(rec[n:]) != "two words" {
		t.Fatalf("the dead letter %s holds %q", dead, rec)
	}

	// A task whose claim's lease is revoked is free again.
	ok(t, ctl("lease", "revoke", c1.Lease))
	if ts := list(); len(ts) != 1 || ts[0].Key != three || ts[0].Claimed {
		t.Fatalf("queue list after the claim's lease was revoked: %+v", ts)
	}
	fails(t, ctl("queue", "complete", "jobs", three, "--token", tok(c3.Token), "--lease", c1.Lease), exitConflict, "fenc")
	c5 := claim("jobs")
	if c5.Key != three || c5.Attempt != 2 || c5.Token <= c3.Token {
		t.Fatalf("the claim after a lost one: %+v after %+v", c5, c3)
	}
	ok(t, ctl("queue", "complete", "jobs", three, "--token", tok(c5.Token), "--lease", c5.Lease))
	if ts := list(); len(ts) != 0 {
		t.Fatalf("queue list at the end: %+v", ts)
	}
	fails(t, ctl("queue", "claim", "--lease", c1.Lease, "jobs"), exitNotFound, "lease "+c1.Lease+" expired or was revoked")

	// A claim waits for a task; SIGINT ends a wait with status 130 and
	// revokes the lease granted for it.
	waiter := clitest.Cmd{}.Start(t, bins.Leasectl, ctlArgs(srv, "-o", "json", "queue", "claim", "jobs")...)
	wait.For(t, clitest.RunTimeout, "queue claim to wait", func() bool {
		return strings.Contains(waiter.Stderr.String(), `waiting for a free task in queue "jobs"`)
	})
	ok(t, ctl("queue", "put", "jobs", "four"))
	if code := waiter.Wait(t, clitest.RunTimeout); code != 0 || !strings.Contains(waiter.Stdout.String(), `"value":"four"`) {
		t.Fatalf("a waiting claim: status %d\nstdout: %s\nstderr: %s", code, waiter.Stdout.String(), waiter.Stderr.String())
	}
	leases := ok(t, ctl("lease", "list")).Stdout
	waiter = clitest.Cmd{}.Start(t, bins.Leasectl, ctlArgs(srv, "queue", "claim", "empty")...)
	wait.For(t, clitest.RunTimeout, "queue claim to wait", func() bool {
		return strings.Contains(waiter.Stderr.String(), `waiting for a free task in queue "empty"`)
	})
	waiter.Signal(t, syscall.SIGINT)
	if code := waiter.Wait(t, clitest.RunTimeout); code != exitInterrupted || waiter.Stdout.String() != "" {
		t.Fatalf("an interrupted claim: status %d\nstdout: %s\nstderr: %s", code, waiter.Stdout.String(), waiter.Stderr.String())
	}
	// No new lease (one may have run out meanwhile).
	for _, id := range strings.Fields(ok(t, ctl("lease", "list")).Stdout) {
		if len(id) == 16 && !strings.Contains(leases, id) {
			t.Fatalf("an interrupted claim left its lease %s; leases before:\n%s", id, leases)
		}
	}
	srv.Stop(t)
}
