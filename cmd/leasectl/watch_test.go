package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/wait"
)

// TestWatch: real processes. watch --prefix --rev 1 prints every change
// of the range from revision 1 in order, then the changes made while it
// runs, in table and JSON, with --prev-value the previous values; without
// --rev it prints only the changes after its start; SIGINT ends it with
// status 0. A watch from a compacted revision fails with status 1 and
// names the compaction point; one from past the next revision, 2.
func TestWatch(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	ctl := func(args ...string) clitest.Result { t.Helper(); return srv.Ctl(t, args...) }
	start := func(args ...string) *clitest.Proc {
		t.Helper()
		return clitest.Cmd{}.Start(t, bins.Leasectl, append([]string{"--endpoint", srv.Addr, "--cacert", srv.CA}, args...)...)
	}

	ok(t, ctl("put", "/d/a", "a1"))  // 1
	ok(t, ctl("put", "/d/b", "b1"))  // 2
	ok(t, ctl("put", "/other", "x")) // 3, outside the prefix
	ok(t, ctl("put", "/d/a", "a2"))  // 4
	ok(t, ctl("del", "/d/b"))        // 5
	ok(t, ctl("put", "now", "old"))  // 6

	tbl := start("watch", "--prefix", "/d/", "--rev", "1")
	js := start("-o", "json", "watch", "--prefix", "/d/", "--rev", "1", "--prev-value")
	one := start("watch", "/d/a", "--rev", "1", "--prev-value")
	now := start("watch", "now")

	// The history, from revision 1.
	const past = "PUT /d/a 1\na1\nPUT /d/b 2\nb1\nPUT /d/a 4\na2\nDELETE /d/b 5\n"
	tbl.WaitOutput(t, "DELETE /d/b 5\n", clitest.RunTimeout)
	if got := tbl.Stdout.String(); got != past {
		t.Fatalf("watch --prefix /d/ --rev 1 printed\n%s\nwant\n%s", got, past)
	}
	const onePast = "PUT /d/a 1\na1\nprev none\nPUT /d/a 4\na2\nprev 1 a1\n"
	one.WaitOutput(t, "prev 1 a1\n", clitest.RunTimeout)
	if got := one.Stdout.String(); got != onePast {
		t.Fatalf("watch /d/a --rev 1 --prev-value printed\n%s\nwant\n%s", got, onePast)
	}

	// A change made while it runs.
	ok(t, ctl("put", "/d/c", "c1")) // 7
	tbl.WaitOutput(t, "PUT /d/c 7\n", clitest.RunTimeout)
	wait.For(t, clitest.RunTimeout, "the table watch to print the value of /d/c", func() bool {
		return tbl.Stdout.String() == past+"PUT /d/c 7\nc1\n"
	})

	// -o json: a line an event, with its revision and previous value.
	var lines []string
	wait.For(t, clitest.RunTimeout, "five JSON lines", func() bool {
		lines = strings.SplitAfter(js.Stdout.String(), "\n")
		if last := lines[len(lines)-1]; last == "" {
			lines = lines[:len(lines)-1]
		} else {
			lines = lines[:len(lines)-1] // a line not yet whole
		}
		return len(lines) >= 5
	})
	type want struct {
		typ, key, value string
		rev             uint64
		prev            string
		prevRev         uint64
	}
	wants := []want{
		{"PUT", "/d/a", "a1", 1, "", 0},
		{"PUT", "/d/b", "b1", 2, "", 0},
		{"PUT", "/d/a", "a2", 4, "a1", 1},
		{"DELETE", "/d/b", "", 5, "b1", 2},
		{"PUT", "/d/c", "c1", 7, "", 0},
	}
	if len(lines) != len(wants) {
		t.Fatalf("-o json watch printed %d lines, want %d:\n%s", len(lines), len(wants), js.Stdout.String())
	}
	for i, line := range lines {
		var e watchEventJSON
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("JSON line %d %q: %v", i, line, err)
		}
		w := wants[i]
		str := func(p *string) string {
			if p == nil {
				return ""
			}
			return *p
		}
		if e.Type != w.typ || e.Key != w.key || str(e.Value) != w.value || (w.typ == "PUT") != (e.Value != nil) || e.Revision != w.rev ||
			str(e.PrevValue) != w.prev || (w.prevRev != 0) != (e.PrevValue != nil) || e.PrevRevision != w.prevRev || e.Lease != "" {
			t.Errorf("JSON line %d: %s; want %+v", i, strings.TrimSpace(line), w)
		}
	}

	// Without --rev: only the changes after its start. It may start
	// after any of these puts; it prints one of them, and never "old".
	for i := 0; !strings.Contains(now.Stdout.String(), "PUT now "); i++ {
		ok(t, ctl("put", "now", fmt.Sprint("new", i)))
		wait.Until(500*time.Millisecond, func() bool { return strings.Contains(now.Stdout.String(), "PUT now ") })
		select {
		case <-now.Exited():
			t.Fatalf("watch now exited\nstderr: %s", now.Stderr.String())
		default:
		}
		if i == 100 {
			t.Fatalf("watch now printed nothing after %d puts\nstderr: %s", i, now.Stderr.String())
		}
	}
	if got := now.Stdout.String(); strings.Contains(got, "old") || strings.Contains(got, "PUT now 6\n") || !strings.Contains(got, "\nnew") {
		t.Fatalf("watch now, without --rev, printed %q; want the new puts only", got)
	}

	// Ctrl-C: status 0.
	for name, p := range map[string]*clitest.Proc{"table": tbl, "json": js, "one key": one, "now": now} {
		p.Signal(t, syscall.SIGINT)
		if code := p.Wait(t, clitest.RunTimeout); code != exitOK || p.Stderr.String() != "" {
			t.Errorf("the %s watch after SIGINT: status %d, stderr %q; want 0 and nothing", name, code, p.Stderr.String())
		}
	}

	// A compacted history.
	ok(t, ctl("compaction", "3"))
	fails(t, ctl("watch", "k", "--rev", "1"), exitError, "compacted through revision 3")
	fails(t, ctl("watch", "--prefix", "/d/", "--rev", "3"), exitError, "watch from revision 4 or later (--rev 4)")
	fails(t, ctl("watch", "k", "--rev", "1000"), exitUsage, "past the next revision")
	srv.Stop(t)
}

// TestWatchUsage: a bad watch command line is refused before connecting,
// as get's is.
func TestWatchUsage(t *testing.T) {
	env := usableCA(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"watch"}, "watch wants KEY [END]; got 0 argument(s)"},
		{[]string{"watch", "--prefix", "/a/", "/b/"}, "it takes no END"},
		{[]string{"watch", "b", "a"}, `KEY "b" is not before END "a"`},
		{[]string{"watch", "a", "a"}, `KEY "a" is not before END "a"`},
		{[]string{"watch", ""}, "KEY must not be empty"},
		{[]string{"watch", "--rev", "one", "k"}, `invalid argument "one" for "--rev"`},
	} {
		a, stdout, stderr := newTestApp(env)
		if code := a.execute(tc.args); code != exitUsage || stdout.Len() != 0 || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: status %d, stdout %q, stderr %q; want status 2 and %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}
