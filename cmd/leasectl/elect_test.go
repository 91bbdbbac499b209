package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/wait"
)

// TestElect: real processes. elect --listen prints "no leader", then the
// leader a campaign elects; a second campaigner waits until the first
// resigns on SIGINT (status 0), and is then elected with a greater token,
// which is the current token of the election's lock; once it resigns
// too, the listeners print "no leader" again. -o json prints one object a
// line. A leader whose lease is revoked exits with status 6.
func TestElect(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	ctl := func(args ...string) clitest.Result { t.Helper(); return srv.Ctl(t, args...) }
	start := func(args ...string) *clitest.Proc {
		t.Helper()
		return clitest.Cmd{}.Start(t, bins.Leasectl, ctlArgs(srv, args...)...)
	}
	// An observer hears of a change within about a lease term (see the
	// report of client.Observe); the bounds here only catch one that
	// never comes.
	waitFor := func(p *clitest.Proc, what string, cond func(out string) bool) {
		t.Helper()
		wait.For(t, clitest.RunTimeout, what, func() bool { return cond(p.Stdout.String()) })
	}
	jsonLeaders := func(out string) []electionJSON {
		t.Helper()
		var ls []electionJSON
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line == "" {
				continue
			}
			var l electionJSON
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("elect -o json --listen: line %q: %v", line, err)
			}
			ls = append(ls, l)
		}
		return ls
	}

	listener := start("elect", "--listen", "/el/x")
	jsonListener := start("-o", "json", "elect", "--listen", "/el/x")
	listener.WaitOutput(t, "no leader\n", clitest.RunTimeout)
	jsonListener.WaitOutput(t, "\n", clitest.RunTimeout)
	if ls := jsonLeaders(jsonListener.Stdout.String()); len(ls) != 1 || ls[0] != (electionJSON{Name: "/el/x"}) {
		t.Fatalf("elect -o json --listen before any campaign: %+v", ls)
	}

	first := start("elect", "/el/x", "node a")
	first.WaitOutput(t, "\n", clitest.RunTimeout)
	m := regexp.MustCompile(`^leader (\d+) node a\n`).FindStringSubmatch(first.Stdout.String())
	if m == nil {
		t.Fatalf("the first campaigner printed %q, want itself as leader", first.Stdout.String())
	}
	firstToken := m[1]
	if !strings.Contains(first.Stderr.String(), `elected in "/el/x" with token `+firstToken) {
		t.Fatalf("the first campaigner's stderr: %q", first.Stderr.String())
	}
	waitFor(listener, "the listener to see the first leader", func(out string) bool {
		return strings.HasSuffix(out, "no leader\nleader "+firstToken+" node a\n")
	})

	second := start("elect", "/el/x", "node b")
	wait.For(t, clitest.RunTimeout, "the second campaigner to wait", func() bool {
		return strings.Contains(second.Stderr.String(), `campaigning in election "/el/x"`)
	})
	if out := second.Stdout.String(); out != "" {
		t.Fatalf("the second campaigner printed %q while the first led", out)
	}
	first.Signal(t, syscall.SIGINT)
	if code := first.Wait(t, clitest.RunTimeout); code != 0 {
		t.Fatalf("the first campaigner after SIGINT: status %d\nstderr: %s", code, first.Stderr.String())
	}
	second.WaitOutput(t, "\n", clitest.RunTimeout)
	m = regexp.MustCompile(`^leader (\d+) node b\n`).FindStringSubmatch(second.Stdout.String())
	if m == nil || parseVersion(t, m[1]) <= parseVersion(t, firstToken) {
		t.Fatalf("the second campaigner printed %q; want itself, with a token above %s", second.Stdout.String(), firstToken)
	}
	secondToken := m[1]
	waitFor(listener, "the listener to see the second leader", func(out string) bool {
		return strings.HasSuffix(out, "leader "+secondToken+" node b\n")
	})
	ok(t, ctl("check-token", "/el/x/lock", secondToken))
	fails(t, ctl("check-token", "/el/x/lock", firstToken), exitLockLost, "token not current")

	second.Signal(t, syscall.SIGTERM)
	if code := second.Wait(t, clitest.RunTimeout); code != 0 {
		t.Fatalf("the second campaigner after SIGTERM: status %d\nstderr: %s", code, second.Stderr.String())
	}
	waitFor(listener, "the listener to see nobody lead", func(out string) bool {
		return strings.HasSuffix(out, "leader "+secondToken+" node b\nno leader\n")
	})
	waitFor(jsonListener, "the JSON listener to see the second leader resign", func(out string) bool {
		ls := jsonLeaders(out)
		n := len(ls)
		return n >= 2 && ls[n-1] == (electionJSON{Name: "/el/x"}) && ls[n-2].Elected && *ls[n-2].Value == "node b" &&
			ls[n-2].Token == parseVersion(t, secondToken) && ls[n-2].Version > 0
	})
	for _, p := range []*clitest.Proc{listener, jsonListener} {
		p.Signal(t, syscall.SIGINT)
		if code := p.Wait(t, clitest.RunTimeout); code != 0 {
			t.Fatalf("elect --listen after SIGINT: status %d\nstderr: %s", code, p.Stderr.String())
		}
	}

	// A leader whose lease is revoked learns it no longer leads.
	third := start("-o", "json", "elect", "/el/x", "node c")
	third.WaitOutput(t, "\n", clitest.RunTimeout)
	var l electionJSON
	if err := json.Unmarshal([]byte(third.Stdout.String()), &l); err != nil || !l.Elected || *l.Value != "node c" {
		t.Fatalf("elect -o json printed %q (%v), want itself as leader", third.Stdout.String(), err)
	}
	lease := regexp.MustCompile(`under the TTL lease ([0-9a-f]{16})`).FindStringSubmatch(third.Stderr.String())
	if lease == nil {
		t.Fatalf("the third campaigner's stderr names no lease: %q", third.Stderr.String())
	}
	ok(t, ctl("lease", "revoke", lease[1]))
	if code := third.Wait(t, clitest.RunTimeout); code != exitLockLost ||
		!strings.Contains(third.Stderr.String(), `lock lost: the leadership of election "/el/x" ended`) {
		t.Fatalf("a leader whose lease was revoked: status %d, want %d\nstderr: %s", code, exitLockLost, third.Stderr.String())
	}
	srv.Stop(t)
}
