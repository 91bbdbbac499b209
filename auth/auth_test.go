package auth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// docExample returns the policy file of the package doc, as it stands in
// auth.go, so that the example cannot drift from what Parse accepts.
func docExample(t testing.TB) []byte {
	t.Helper()
	src, err := os.ReadFile("auth.go")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	in := false
	for line := range strings.Lines(string(src)) {
		switch {
		case strings.HasPrefix(line, "// A policy file is YAML:"):
			in = true
		case in && strings.HasPrefix(line, "//\t"):
			b.WriteString(strings.TrimPrefix(line, "//\t"))
		case in && b.Len() > 0 && !strings.HasPrefix(line, "//\t"):
			return []byte(b.String())
		}
	}
	t.Fatal("no policy file example in the package doc")
	return nil
}

// mustParse parses data, failing the test on an error.
func mustParse(t testing.TB, data string) *Policy {
	t.Helper()
	p, err := Parse([]byte(data), "test.yaml")
	if err != nil {
		t.Fatalf("Parse:\n%s\n%v", data, err)
	}
	return p
}

// TestParseDocExample: the policy of the package doc parses and grants
// what its comments say: app everything on /app/, dashboard reading it,
// ops admin, prometheus the metrics, and every client with a certificate
// reading /public/.
func TestParseDocExample(t *testing.T) {
	p, err := Parse(docExample(t), "doc")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Clients(), []string{"*", "app", "dashboard", "ops", "prometheus"}; !slices.Equal(got, want) {
		t.Fatalf("Clients() = %q, want %q", got, want)
	}
	if p.Source() != "doc" {
		t.Fatalf("Source() = %q, want %q", p.Source(), "doc")
	}
	all := Read | Write | WriteLease | TTLLease
	for _, tc := range []struct {
		client, key string
		want        Right
	}{
		{"app", "/app/x", all},
		{"app", "/public/x", Read},
		{"app", "/other", 0},
		{"dashboard", "/app/x", Read},
		{"ops", "/app/x", Admin | Metrics},
		{"ops", "/public/x", Admin | Metrics | Read},
		{"prometheus", "/app/x", Metrics},
		{"prometheus", "/public/x", Metrics | Read},
		{"stranger", "/public/x", Read},
		{"stranger", "/app/x", 0},
	} {
		if got := p.Rights(tc.client, []byte(tc.key)); got != tc.want {
			t.Errorf("Rights(%q, %q) = %v, want %v", tc.client, tc.key, got, tc.want)
		}
	}
}

// rightsPolicy grants in ways that must add up: two grants on one prefix,
// a longer prefix under a shorter one, the empty prefix, and "*".
const rightsPolicy = `
clients:
  app:
    keys:
      - prefix: /app/
        rights: [read]
      - prefix: /app/
        rights: [write]
      - prefix: /app/private/
        rights: [ttl-lease]
  reader:
    keys:
      - prefix: ""
        rights: [read]
  ops:
    admin: true
  prom:
    metrics: true
  "*":
    keys:
      - prefix: /app/
        rights: [write-lease]
      - prefix: /public/
        rights: [read]
`

// TestRights: a client's rights on a key are the union of every grant to
// it and to "*" whose prefix the key starts with; a longer prefix adds and
// never takes away; prefix "" covers every key, the empty key too; admin
// comes only from admin: true, and brings metrics; and a client without a certificate ("")
// gets nothing, not even what "*" grants.
func TestRights(t *testing.T) {
	p := mustParse(t, rightsPolicy)
	for _, tc := range []struct {
		client, key string
		want        Right
	}{
		{"app", "/app/x", Read | Write | WriteLease},
		{"app", "/app/private/x", Read | Write | WriteLease | TTLLease},
		{"app", "/app/private/", Read | Write | WriteLease | TTLLease},
		{"app", "/app/privat", Read | Write | WriteLease},
		{"app", "/app", 0},
		{"app", "/public/p", Read},
		{"app", "/other", 0},
		{"reader", "", Read},
		{"reader", "anything", Read},
		{"reader", "/app/x", Read | WriteLease},
		{"ops", "/other", Admin | Metrics},
		{"ops", "/app/x", Admin | Metrics | WriteLease},
		{"prom", "/other", Metrics},
		{"prom", "/app/x", Metrics | WriteLease},
		{"stranger", "/app/x", WriteLease},
		{"stranger", "/public/p", Read},
		{"stranger", "/other", 0},
		{"", "/app/x", 0},
		{"", "/public/p", 0},
	} {
		if got := p.Rights(tc.client, []byte(tc.key)); got != tc.want {
			t.Errorf("Rights(%q, %q) = %v, want %v", tc.client, tc.key, got, tc.want)
		}
	}
	for _, c := range []string{"app", "reader", "prom", "stranger", ""} {
		for _, k := range []string{"", "/app/x", "/app/private/x", "/public/p"} {
			if p.Rights(c, []byte(k))&Admin != 0 {
				t.Errorf("client %q has admin on %q without admin: true", c, k)
			}
		}
	}
}

// TestNoCertificateNoRights: "*" grants every client with a certificate;
// a session without one (identity "") has no right on any key, however
// broad the "*" grants, and may not do anything that CheckAny guards. Its
// errors say it has no certificate rather than naming an empty client.
func TestNoCertificateNoRights(t *testing.T) {
	p := mustParse(t, `
clients:
  "*":
    admin: true
    keys:
      - prefix: ""
        rights: [read, write, write-lease, ttl-lease]
`)
	if r := p.Rights("someone", []byte("k")); r != Read|Write|WriteLease|TTLLease|Admin|Metrics {
		t.Fatalf(`a client with a certificate: Rights = %v, want all of "*"'s`, r)
	}
	if r := p.Rights("", []byte("k")); r != 0 {
		t.Fatalf(`a client without a certificate: Rights = %v, want none`, r)
	}
	for _, right := range []Right{Read, Write, WriteLease, TTLLease, Admin} {
		err := p.Check("", []byte("k"), right)
		if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), "a client without a certificate") || strings.Contains(err.Error(), `client ""`) {
			t.Errorf("Check without a certificate, %v: %v; want it denied, naming a client without a certificate", right, err)
		}
	}
	err := p.CheckAny("", TTLLease)
	if !errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), "a client without a certificate") {
		t.Errorf("CheckAny without a certificate: %v; want it denied, naming a client without a certificate", err)
	}
}

// TestCheck: Check passes when the client has every right asked for, and
// otherwise its error wraps ErrPermissionDenied and names the client, the
// key and only the rights it lacks; for admin, the admin right alone.
func TestCheck(t *testing.T) {
	p := mustParse(t, rightsPolicy)
	for _, tc := range []struct {
		name        string
		client, key string
		right       Right
		want        []string // in the error; none: no error
		not         []string // not in the error
	}{
		{name: "has it", client: "app", key: "/app/x", right: Read},
		{name: "has both, from two grants", client: "app", key: "/app/x", right: Read | Write},
		{name: "has it from *", client: "app", key: "/app/x", right: Write | WriteLease},
		{name: "nothing asked", client: "stranger", key: "/other", right: 0},
		{name: "admin", client: "ops", key: "", right: Admin},
		{name: "admin ignores the key", client: "ops", key: "/anything", right: Admin},
		{name: "lacks part of a combined right", client: "app", key: "/app/x", right: Write | TTLLease,
			want: []string{`client "app"`, "lacks the ttl-lease right", `key "/app/x"`}, not: []string{"write+", "+ttl"}},
		{name: "lacks it all", client: "stranger", key: "/other", right: Read | Write,
			want: []string{`client "stranger"`, "lacks the read+write right", `key "/other"`}},
		{name: "lacks admin", client: "app", key: "/app/x", right: Admin,
			want: []string{`client "app" lacks the admin right`}, not: []string{"/app/x"}},
		{name: "metrics from admin", client: "ops", key: "/anything", right: Metrics},
		{name: "lacks metrics", client: "app", key: "/app/x", right: Metrics,
			want: []string{`client "app" lacks the metrics right`}, not: []string{"/app/x"}},
		{name: "lacks admin, has metrics", client: "prom", key: "", right: Admin | Metrics,
			want: []string{`client "prom" lacks the admin right`}, not: []string{"metrics"}},
		{name: "shorter key than the prefix", client: "app", key: "/app", right: Read,
			want: []string{`lacks the read right on key "/app"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Check(tc.client, []byte(tc.key), tc.right)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Check(%q, %q, %v) = %v, want nil", tc.client, tc.key, tc.right, err)
				}
				return
			}
			if !errors.Is(err, ErrPermissionDenied) {
				t.Fatalf("Check(%q, %q, %v) = %v, want ErrPermissionDenied", tc.client, tc.key, tc.right, err)
			}
			for _, s := range tc.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q says %q", err, s)
				}
			}
		})
	}
}

// TestCheckAny: CheckAny passes if some grant to the client or to "*"
// gives the right, on whatever prefix, and otherwise its error wraps
// ErrPermissionDenied and names the client and the right.
func TestCheckAny(t *testing.T) {
	p := mustParse(t, rightsPolicy)
	for _, tc := range []struct {
		client string
		right  Right
		ok     bool
	}{
		{"app", TTLLease, true},   // on /app/private/ only
		{"app", WriteLease, true}, // from "*"
		{"reader", Read, true},
		{"reader", TTLLease, false},
		{"stranger", Read, true}, // from "*"
		{"stranger", Write, false},
		{"ops", TTLLease, false}, // admin is no key right
		{"", Read, false},
	} {
		err := p.CheckAny(tc.client, tc.right)
		switch {
		case tc.ok && err != nil:
			t.Errorf("CheckAny(%q, %v) = %v, want nil", tc.client, tc.right, err)
		case !tc.ok && !errors.Is(err, ErrPermissionDenied):
			t.Errorf("CheckAny(%q, %v) = %v, want ErrPermissionDenied", tc.client, tc.right, err)
		case !tc.ok && !strings.Contains(err.Error(), tc.right.String()+" right on no key"):
			t.Errorf("CheckAny(%q, %v) = %v, want it to name the right", tc.client, tc.right, err)
		case !tc.ok && tc.client != "" && !strings.Contains(err.Error(), `client "`+tc.client+`"`):
			t.Errorf("CheckAny(%q, %v) = %v, want it to name the client", tc.client, tc.right, err)
		}
	}
}

// TestEmptyPolicy: an empty file, one of comments only, and one with no
// clients are policies that grant nothing, as is the zero Policy: every
// Check and CheckAny fails.
func TestEmptyPolicy(t *testing.T) {
	for _, data := range []string{"", "\n", "# nobody yet\n", "clients:\n", "clients: {}\n", "---\n"} {
		p, err := Parse([]byte(data), "empty.yaml")
		if err != nil {
			t.Fatalf("Parse(%q): %v", data, err)
		}
		checkGrantsNothing(t, p, data)
	}
	checkGrantsNothing(t, &Policy{}, "the zero Policy")
}

func checkGrantsNothing(t *testing.T, p *Policy, what string) {
	t.Helper()
	if ids := p.Clients(); len(ids) != 0 {
		t.Errorf("%q: Clients() = %q, want none", what, ids)
	}
	for _, c := range []string{"app", "*", ""} {
		for _, r := range []Right{Read, Write, WriteLease, TTLLease, Admin} {
			if err := p.Check(c, []byte("k"), r); !errors.Is(err, ErrPermissionDenied) {
				t.Errorf("%q: Check(%q, k, %v) = %v, want ErrPermissionDenied", what, c, r, err)
			}
			if err := p.CheckAny(c, r); !errors.Is(err, ErrPermissionDenied) {
				t.Errorf("%q: CheckAny(%q, %v) = %v, want ErrPermissionDenied", what, c, r, err)
			}
		}
	}
}

// TestParseIdentityBounds: an identity of 1 to 64 printable characters,
// as a certificate's CommonName may be, is accepted, "*" among them.
func TestParseIdentityBounds(t *testing.T) {
	for _, id := range []string{"a", strings.Repeat("x", 64), "*", "app.example.com", "with space", "日本"} {
		p := mustParse(t, "clients:\n  "+quote(id)+":\n    admin: true\n")
		if !slices.Equal(p.Clients(), []string{id}) {
			t.Errorf("identity %q: Clients() = %q", id, p.Clients())
		}
	}
}

// quote returns s as a YAML double-quoted string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			b.WriteString(`\x`)
			b.WriteString(string("0123456789abcdef"[r>>4]) + string("0123456789abcdef"[r&0xf]))
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// badPolicies are policy files Parse must refuse, with what its error must
// say to show where the fault is.
var badPolicies = []struct {
	name, data string
	want       []string
}{
	{"unknown top-level field", "client:\n  app:\n    admin: true\n",
		[]string{"line 1", "field client not found"}},
	{"unknown client field", "clients:\n  app:\n    admn: true\n",
		[]string{"line 3", "field admn not found"}},
	{"unknown grant field", "clients:\n  app:\n    keys:\n      - prefix: /a/\n        right: [read]\n",
		[]string{"line 5", "field right not found"}},
	{"unknown right", "clients:\n  app:\n    keys:\n      - prefix: /a/\n        rights: [read, reed]\n",
		[]string{`client "app", grant 1 (prefix "/a/")`, `unknown right "reed"`, "read, write, write-lease, ttl-lease"}},
	{"admin as a right", "clients:\n  ops:\n    keys:\n      - prefix: \"\"\n        rights: [admin]\n",
		[]string{`client "ops", grant 1`, `unknown right "admin"`, "give the client admin: true"}},
	{"metrics as a right", "clients:\n  prom:\n    keys:\n      - prefix: \"\"\n        rights: [metrics]\n",
		[]string{`client "prom", grant 1`, `unknown right "metrics"`, "give the client metrics: true"}},
	{"grant without a prefix", "clients:\n  app:\n    keys:\n      - prefix: /a/\n        rights: [read]\n      - rights: [write]\n",
		[]string{`client "app", grant 2`, "no prefix", `prefix: ""`}},
	{"a pattern", "clients:\n  app:\n    keys:\n      - prefix: /a/*\n        rights: [read]\n",
		[]string{`client "app", grant 1 (prefix "/a/*")`, "not as a pattern", `"" for every key`}},
	{"every key as a pattern", "clients:\n  app:\n    keys:\n      - prefix: \"*\"\n        rights: [read]\n",
		[]string{`(prefix "*")`, "not as a pattern"}},
	{"grant with empty rights", "clients:\n  app:\n    keys:\n      - prefix: /a/\n        rights: []\n",
		[]string{`client "app", grant 1 (prefix "/a/")`, "no rights"}},
	{"grant without rights", "clients:\n  app:\n    keys:\n      - prefix: /a/\n",
		[]string{`client "app", grant 1 (prefix "/a/")`, "no rights"}},
	{"empty identity", "clients:\n  \"\":\n    admin: true\n",
		[]string{`client ""`, "1 to 64 printable characters"}},
	{"identity over 64 characters", "clients:\n  " + strings.Repeat("x", 65) + ":\n    admin: true\n",
		[]string{`client "` + strings.Repeat("x", 65) + `"`, "1 to 64"}},
	{"identity with a tab", "clients:\n  \"a\\tb\":\n    admin: true\n",
		[]string{`client "a\tb"`, "printable"}},
	{"identity with a newline", "clients:\n  \"a\\nb\":\n    admin: true\n",
		[]string{`client "a\nb"`, "printable"}},
	{"identity with DEL", "clients:\n  \"a\\x7fb\":\n    admin: true\n",
		[]string{`client "a\x7fb"`, "printable"}},
	{"two YAML documents", "clients: {}\n---\nclients: {}\n",
		[]string{"more than one YAML document"}},
	{"a second, empty document", "clients: {}\n---\n# nothing\n---\n",
		[]string{"more than one YAML document"}},
	{"garbage", "{{{ not: yaml",
		[]string{"yaml"}},
	{"plain text", "just some words\n",
		[]string{"cannot unmarshal"}},
	{"rights as a string", "clients:\n  app:\n    keys:\n      - prefix: /a/\n        rights: read\n",
		[]string{"line 5", "cannot unmarshal", "read"}},
	{"clients as a list", "clients:\n  - app\n",
		[]string{"line 2", "cannot unmarshal"}},
	{"admin as a word", "clients:\n  ops:\n    admin: sure\n",
		[]string{"line 3", "cannot unmarshal", "sure"}},
	{"a client named twice", "clients:\n  app:\n    admin: true\n  app:\n    admin: false\n",
		[]string{"line 4", `"app" already defined`}},
}

// TestParseErrors: every bad policy file is refused with an error that
// wraps ErrBadPolicy, names the file, and says where the fault is.
func TestParseErrors(t *testing.T) {
	for _, tc := range badPolicies {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.data), "policy.yaml")
			if !errors.Is(err, ErrBadPolicy) || p != nil {
				t.Fatalf("Parse:\n%s\n= %v, %v; want ErrBadPolicy and no policy", tc.data, p, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "policy.yaml: ") {
				t.Errorf("error %q does not name the file", msg)
			}
			for _, s := range tc.want {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not say %q", msg, s)
				}
			}
		})
	}
}

// TestLoad: Load parses a file and names it in its errors and as the
// policy's Source; a file it cannot read is a bad policy too.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, docExample(t), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(good)
	if err != nil || p.Source() != good {
		t.Fatalf("Load(%s) = %v, %v", good, p, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("clients:\n  app:\n    admn: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); !errors.Is(err, ErrBadPolicy) || !strings.Contains(err.Error(), bad+": ") {
		t.Fatalf("Load(%s) = %v, want ErrBadPolicy naming the file", bad, err)
	}
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := Load(missing); !errors.Is(err, ErrBadPolicy) || !errors.Is(err, os.ErrNotExist) && !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("Load(%s) = %v, want ErrBadPolicy naming the file", missing, err)
	}
}

// TestRightString: a set of rights reads as the names a policy file uses,
// joined by "+", in a fixed order; no right is "none".
func TestRightString(t *testing.T) {
	for _, tc := range []struct {
		r    Right
		want string
	}{
		{0, "none"},
		{Read, "read"},
		{TTLLease | Write, "write+ttl-lease"},
		{Read | Write | WriteLease | TTLLease | Admin, "read+write+write-lease+ttl-lease+admin"},
		{Metrics, "metrics"},
	} {
		if got := tc.r.String(); got != tc.want {
			t.Errorf("Right(%d).String() = %q, want %q", tc.r, got, tc.want)
		}
	}
	for _, name := range []string{"read", "write", "write-lease", "ttl-lease"} {
		if r, ok := parseRight(name); !ok || r.String() != name {
			t.Errorf("parseRight(%q) = %v, %v", name, r, ok)
		}
	}
}

// FuzzParse: Parse never panics; a policy it returns answers Rights,
// Check and CheckAny for any client, key and rights without panicking,
// Check passes exactly when Rights holds every right asked for, a denial
// wraps ErrPermissionDenied, and a client without a certificate has no
// rights.
func FuzzParse(f *testing.F) {
	f.Add(docExample(f), "app", []byte("/app/x"), uint8(Write|TTLLease))
	f.Add([]byte(rightsPolicy), "", []byte("/public/p"), uint8(Read))
	f.Add([]byte(rightsPolicy), "ops", []byte(""), uint8(Admin))
	f.Add([]byte(""), "*", []byte("k"), uint8(0))
	for _, tc := range badPolicies {
		f.Add([]byte(tc.data), "app", []byte("/a/b"), uint8(Read))
	}
	f.Add([]byte("a: &a [*a, *a]\nclients: *a\n"), "x", []byte("y"), uint8(0xff))
	f.Fuzz(func(t *testing.T, data []byte, client string, key []byte, r uint8) {
		p, err := Parse(data, "fuzz")
		if err != nil {
			if !errors.Is(err, ErrBadPolicy) || p != nil {
				t.Fatalf("Parse error %v (policy %v), want ErrBadPolicy and no policy", err, p)
			}
			return
		}
		if !slices.IsSorted(p.Clients()) || p.Source() != "fuzz" {
			t.Fatalf("Clients() = %q, Source() = %q", p.Clients(), p.Source())
		}
		right := Right(r)
		ids := append(p.Clients(), client, "")
		for _, id := range ids {
			have := p.Rights(id, key)
			err := p.Check(id, key, right)
			if (err == nil) != (have&right == right) {
				t.Fatalf("Check(%q, %q, %v) = %v, but Rights = %v", id, key, right, err, have)
			}
			if err != nil && !errors.Is(err, ErrPermissionDenied) {
				t.Fatalf("Check(%q, %q, %v) = %v, want ErrPermissionDenied", id, key, right, err)
			}
			if err := p.CheckAny(id, right); err != nil && !errors.Is(err, ErrPermissionDenied) {
				t.Fatalf("CheckAny(%q, %v) = %v, want ErrPermissionDenied", id, right, err)
			}
		}
		if have := p.Rights("", key); have != 0 {
			t.Fatalf("Rights without a certificate on %q = %v, want none", key, have)
		}
	})
}

// TestCheckAnyAddsUp: CheckAny finds rights that two grants give together
// where their prefixes nest, as Rights does for a key.
func TestCheckAnyAddsUp(t *testing.T) {
	p, err := Parse([]byte("clients:\n  app:\n    keys:\n      - prefix: a/\n        rights: [read]\n      - prefix: a/b/\n        rights: [write]\n  \"*\":\n    keys:\n      - prefix: \"\"\n        rights: [ttl-lease]\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckAny("app", Read|Write|TTLLease); err != nil {
		t.Fatalf("read on a/, write on a/b/ and ttl-lease everywhere: %v", err)
	}
	if err := p.CheckAny("app", WriteLease); err == nil {
		t.Fatal("CheckAny granted write-lease, which no grant gives")
	}
}

// BenchmarkCheck is the cost a policy adds to each request: a check of a
// client with ten grants, beside a hundred other clients and "*".
func BenchmarkCheck(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("clients:\n")
	for c := range 100 {
		fmt.Fprintf(&sb, "  c%d:\n    keys:\n", c)
		for g := range 10 {
			fmt.Fprintf(&sb, "      - prefix: /svc/%d/%d/\n        rights: [read, write]\n", c, g)
		}
	}
	sb.WriteString("  \"*\":\n    keys:\n      - prefix: /public/\n        rights: [read]\n")
	p, err := Parse([]byte(sb.String()), "")
	if err != nil {
		b.Fatal(err)
	}
	key := []byte("/svc/42/9/some/key")
	for b.Loop() {
		if err := p.Check("c42", key, Write); err != nil {
			b.Fatal(err)
		}
	}
}

// TestDigest: a policy's digest names the text it came from: the same
// text gives the same digest, other text (a comment too) another.
func TestDigest(t *testing.T) {
	a, b := mustParse(t, rightsPolicy), mustParse(t, rightsPolicy)
	c := mustParse(t, rightsPolicy+"# edited\n")
	if len(a.Digest()) != 12 || a.Digest() != b.Digest() {
		t.Fatalf("digests of the same text: %q, %q", a.Digest(), b.Digest())
	}
	if c.Digest() == a.Digest() {
		t.Fatalf("other text has the same digest %q", c.Digest())
	}
}
