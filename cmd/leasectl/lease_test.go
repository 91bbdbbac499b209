package main

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/protocol"
)

// Bad lease ids and TTLs are usage errors (exit status 2), found before
// anything connects, with a message that says what was expected.
func TestLeaseUsage(t *testing.T) {
	env := usableCA(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"lease", "grant"}, "grant wants TTL; got 0"},
		{[]string{"lease", "grant", "60", "70"}, "grant wants TTL; got 2"},
		{[]string{"lease", "grant", "0"}, `TTL "0": want a positive number of seconds`},
		{[]string{"lease", "grant", "0s"}, `TTL "0s": want seconds (60) or a positive duration`},
		{[]string{"lease", "grant", "1.5"}, `TTL "1.5"`},
		{[]string{"lease", "grant", "sixty"}, `TTL "sixty"`},
		{[]string{"lease", "grant", "99999999999"}, `TTL "99999999999": want a positive number of seconds, up to`},
		{[]string{"lease", "grant", "--", "-5"}, `TTL "-5"`},
		{[]string{"lease", "grant", "-5s"}, "unknown shorthand flag"},
		{[]string{"lease", "revoke"}, "revoke wants ID; got 0"},
		{[]string{"lease", "revoke", "xyz"}, `lease id "xyz": want 1 to 16 hexadecimal digits`},
		{[]string{"lease", "revoke", "0"}, `lease id "0": 0 names no lease`},
		{[]string{"lease", "revoke", "694d71ddacfda2270"}, "want 1 to 16 hexadecimal digits"},
		{[]string{"lease", "keep-alive"}, "keep-alive wants ID; got 0"},
		{[]string{"lease", "keep-alive", "--once", "0x12"}, `lease id "0x12"`},
		{[]string{"lease", "keep-alive", "--twice", "12"}, "unknown flag: --twice"},
		{[]string{"lease", "timetolive", "--keys", "g"}, `lease id "g"`},
		{[]string{"lease", "list", "extra"}, "list wants "},
		{[]string{"lease", "frobnicate"}, `unknown command "frobnicate" for "leasectl lease"`},
		{[]string{"put", "--lease", "zz", "k", "v"}, `lease id "zz"`},
		{[]string{"put", "--lease", "", "k", "v"}, `lease id ""`},
		{[]string{"put", "--lease"}, "flag needs an argument"},
	} {
		a, stdout, stderr := newTestApp(env)
		if code := a.execute(tc.args); code != exitUsage || !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("%q: status %d, stdout %q, stderr %q; want status 2 and %q", tc.args, code, stdout, stderr, tc.want)
		}
	}
}

func TestParseTTL(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"60":     time.Minute,
		"1":      time.Second,
		"30s":    30 * time.Second,
		"1m30s":  90 * time.Second,
		"1500ms": 1500 * time.Millisecond,
	} {
		if got, err := parseTTL(in); err != nil || got != want {
			t.Errorf("parseTTL(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "-1s", "0s", "1.5", "1e3", "s", "9223372037"} {
		if got, err := parseTTL(in); err == nil || (&app{}).exitCode(err) != exitUsage {
			t.Errorf("parseTTL(%q) = %v, %v; want a usage error", in, got, err)
		}
	}
}

// The lease commands print etcdctl's lines, and in JSON the fields of
// DESIGN §14: id in 16 hex digits, ttl and granted_ttl in seconds (ttl -1
// for a lease that is gone), keys.
func TestLeaseOutput(t *testing.T) {
	const id = client.LeaseID(0x694d71ddacfda227)
	for _, tc := range []struct {
		name       string
		print      func(a *app) error
		table      string
		jsonFields map[string]any
	}{
		{
			name:       "grant",
			print:      func(a *app) error { return a.printGrant(client.LeaseGrantResult{ID: id, TTL: time.Minute}) },
			table:      "lease 694d71ddacfda227 granted with TTL(60s)\n",
			jsonFields: map[string]any{"id": "694d71ddacfda227", "ttl": 60.0},
		},
		{
			name: "grant of a fraction of seconds",
			print: func(a *app) error {
				return a.printGrant(client.LeaseGrantResult{ID: 0xab, TTL: 1500 * time.Millisecond})
			},
			table:      "lease 00000000000000ab granted with TTL(1.5s)\n",
			jsonFields: map[string]any{"id": "00000000000000ab", "ttl": 1.5},
		},
		{
			name:       "revoke",
			print:      func(a *app) error { return a.printRevoke(id, client.RevokeResult{Revision: 42, Keys: 2}) },
			table:      "lease 694d71ddacfda227 revoked\n",
			jsonFields: map[string]any{"id": "694d71ddacfda227", "revision": 42.0, "deleted": 2.0},
		},
		{
			name:       "keep-alive",
			print:      func(a *app) error { return a.printRenewal(client.KeepAliveResponse{ID: id, TTL: time.Minute}) },
			table:      "lease 694d71ddacfda227 keepalived with TTL(60)\n",
			jsonFields: map[string]any{"id": "694d71ddacfda227", "ttl": 60.0},
		},
		{
			name: "timetolive",
			print: func(a *app) error {
				return a.printTimeToLive(client.TimeToLiveResult{ID: id, TTL: 52*time.Second + 400*time.Microsecond, GrantedTTL: time.Minute}, false)
			},
			table:      "lease 694d71ddacfda227 granted with TTL(60s), remaining(52s)\n",
			jsonFields: map[string]any{"id": "694d71ddacfda227", "ttl": 52.0, "granted_ttl": 60.0},
		},
		{
			name: "timetolive --keys",
			print: func(a *app) error {
				return a.printTimeToLive(client.TimeToLiveResult{ID: id, TTL: 52 * time.Second, GrantedTTL: time.Minute, Keys: []string{"foo", "a b"}}, true)
			},
			table:      "lease 694d71ddacfda227 granted with TTL(60s), remaining(52s), attached keys([foo a b])\n",
			jsonFields: map[string]any{"id": "694d71ddacfda227", "ttl": 52.0, "granted_ttl": 60.0, "keys": []any{"foo", "a b"}},
		},
		{
			name: "timetolive --keys of none",
			print: func(a *app) error {
				return a.printTimeToLive(client.TimeToLiveResult{ID: id, TTL: time.Second, GrantedTTL: time.Minute}, true)
			},
			table:      "lease 694d71ddacfda227 granted with TTL(60s), remaining(1s), attached keys([])\n",
			jsonFields: map[string]any{"id": "694d71ddacfda227", "ttl": 1.0, "granted_ttl": 60.0, "keys": []any{}},
		},
		{
			name:       "timetolive of a lease that is gone",
			print:      func(a *app) error { return a.printTimeToLive(client.TimeToLiveResult{ID: id, TTL: -1}, true) },
			table:      "lease 694d71ddacfda227 already expired\n",
			jsonFields: map[string]any{"id": "694d71ddacfda227", "ttl": -1.0, "granted_ttl": 0.0, "keys": []any{}},
		},
		{
			name: "list",
			print: func(a *app) error {
				return a.printLeases([]client.LeaseStatus{{ID: 0xab, TTL: 9 * time.Second}, {ID: id, TTL: 52 * time.Second}})
			},
			table: "found 2 leases\n00000000000000ab\n694d71ddacfda227\n",
			jsonFields: map[string]any{"leases": []any{
				map[string]any{"id": "00000000000000ab", "ttl": 9.0},
				map[string]any{"id": "694d71ddacfda227", "ttl": 52.0},
			}},
		},
		{
			name:       "list of none",
			print:      func(a *app) error { return a.printLeases(nil) },
			table:      "found 0 leases\n",
			jsonFields: map[string]any{"leases": []any{}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, stdout, _ := newTestApp(nil)
			a.output = "table"
			if err := tc.print(a); err != nil || stdout.String() != tc.table {
				t.Errorf("table: %q, %v; want %q", stdout, err, tc.table)
			}
			a, stdout, _ = newTestApp(nil)
			a.output = "json"
			if err := tc.print(a); err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("JSON %q: %v", stdout, err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.jsonFields) {
				t.Errorf("JSON %s\nwant fields %v", stdout, tc.jsonFields)
			}
		})
	}
}

// A lease that does not exist exits with the not-found status, as any
// not-found error does (exitStatuses).
func TestLeaseExitCodes(t *testing.T) {
	a, _, _ := newTestApp(nil)
	notFound := &client.ServerError{Code: protocol.CodeNotFound, Message: "TTL lease 00000000000000ab not found"}
	if got := a.exitCode(fmt.Errorf("revoke: %w", notFound)); got != exitNotFound {
		t.Errorf("lease not found: status %d, want %d", got, exitNotFound)
	}
	if got := a.describe(notFound); got != "TTL lease 00000000000000ab not found" {
		t.Errorf("describe: %q", got)
	}
}

// TestLeaseCommands runs the lease commands against a real server: grant,
// put --lease, timetolive --keys, keep-alive --once, list, a streaming
// keep-alive stopped with SIGINT, revoke (which deletes the key), and the
// lease gone afterwards, in text and JSON; stats count the revocation.
func TestLeaseCommands(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	ctl := func(args ...string) clitest.Result { t.Helper(); return srv.Ctl(t, args...) }

	var g leaseJSON
	decode(t, ctl("-o", "json", "lease", "grant", "60"), &g)
	if len(g.ID) != 16 || g.TTL != 60 {
		t.Fatalf("grant: %+v", g)
	}
	ok(t, ctl("put", "--lease", g.ID, "svc/a", "up"))
	r := ok(t, ctl("lease", "timetolive", "--keys", g.ID))
	if !strings.Contains(r.Stdout, "lease "+g.ID+" granted with TTL(60s), remaining(") || !strings.Contains(r.Stdout, "attached keys([svc/a])") {
		t.Fatalf("timetolive --keys: %q", r.Stdout)
	}
	if r := ok(t, ctl("lease", "keep-alive", "--once", g.ID)); !strings.Contains(r.Stdout, "lease "+g.ID+" keepalived with TTL(60)") {
		t.Fatalf("keep-alive --once: %q", r.Stdout)
	}
	if r := ok(t, ctl("lease", "list")); !strings.Contains(r.Stdout, "found 1 leases") || !strings.Contains(r.Stdout, g.ID) {
		t.Fatalf("list: %q", r.Stdout)
	}

	p := clitest.Cmd{}.Start(t, bins.Leasectl, "--endpoint", srv.Addr, "--cacert", srv.CA, "lease", "keep-alive", g.ID)
	p.WaitOutput(t, "keepalived with TTL(60)", clitest.RunTimeout)
	p.Signal(t, syscall.SIGINT)
	if code := p.Wait(t, clitest.RunTimeout); code != 0 {
		t.Fatalf("keep-alive after SIGINT: exit status %d\nstderr: %s", code, p.Stderr.String())
	}

	var rv revokeJSON
	decode(t, ctl("-o", "json", "lease", "revoke", g.ID), &rv)
	if rv.ID != g.ID || rv.Deleted != 1 || rv.Revision == 0 {
		t.Fatalf("revoke: %+v", rv)
	}
	var gj map[string]any
	decode(t, ctl("-o", "json", "get", "svc/a"), &gj)
	if gj["found"] != false {
		t.Fatalf("svc/a after the revocation: %v", gj)
	}
	var tl leaseJSON
	decode(t, ctl("-o", "json", "lease", "timetolive", g.ID), &tl)
	if tl.TTL != -1 {
		t.Fatalf("timetolive of the revoked lease: %+v", tl)
	}
	for _, args := range [][]string{{"lease", "revoke", g.ID}, {"lease", "keep-alive", "--once", g.ID}, {"put", "--lease", g.ID, "svc/b", "up"}} {
		r := ctl(args...)
		if r.Code != exitNotFound || !strings.Contains(r.Stderr, g.ID) {
			t.Errorf("%q on the revoked lease: status %d, stderr %q; want %d naming the lease", args, r.Code, r.Stderr, exitNotFound)
		}
	}
	var st statsJSON
	decode(t, ctl("-o", "json", "stats"), &st)
	if st.TTLRevoked != 1 || st.TTLKeysDeleted != 1 || st.TTLLeases != 0 || st.TTLKeepAlives < 2 {
		t.Fatalf("stats: %+v", st)
	}
}
