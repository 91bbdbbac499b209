package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/clitest"
)

// TestParseTxn: what parseTxn makes of etcdctl's transaction syntax, with
// leased's compares and its bare and quoted words.
func TestParseTxn(t *testing.T) {
	lease := client.LeaseID(0x694d71ddacfda227)
	for _, tc := range []struct {
		name, in  string
		compares  []client.Compare
		then, els []client.TxnOp
		keys      []string
	}{
		{
			name:     "rename",
			in:       "val(\"/d/a\") = \"inode7\"\nabsent(\"/d/b\")\n\nput /d/b inode7\ndel /d/a\n\nput /d/conflict 1\n",
			compares: []client.Compare{client.ValueIs("/d/a", []byte("inode7")), client.Absent("/d/b")},
			then:     []client.TxnOp{client.PutOp("/d/b", []byte("inode7")), client.DeleteOp("/d/a")},
			els:      []client.TxnOp{client.PutOp("/d/conflict", []byte("1"))},
			keys:     []string{"/d/b", "/d/a", "/d/conflict"},
		},
		{
			name: "every version compare, every target name",
			in:   "ver(\"a\") = \"3\"\nversion(a) != 4\nmod( \"a\" ) > \"0\"\nm(\"a\")<\"9\"\nexists(a)\nvalue(\"a\") != \"x y\"\n",
			compares: []client.Compare{client.VersionIs("a", 3), client.VersionIsNot("a", 4), client.VersionAbove("a", 0),
				client.VersionBelow("a", 9), client.Exists("a"), client.ValueIsNot("a", []byte("x y"))},
		},
		{
			name: "no compares; quotes, escapes, a lease, tabs, CRLF; no newline at the end",
			in:   "\r\nput --lease=694d71ddacfda227 \"a b\" \"x\\ny\\x00\"\r\ndelete\t\"-k\"\n   \n put --lease 694d71ddacfda227 k -- -5",
			then: []client.TxnOp{client.PutOp("a b", []byte("x\ny\x00"), client.WithLease(lease)), client.DeleteOp("-k")},
			els:  []client.TxnOp{client.PutOp("k", []byte("-5"), client.WithLease(lease))},
			keys: []string{"a b", "-k", "k"},
		},
		{
			name:     "compares only; bare words keep inner quotes; trailing blank lines",
			in:       "ver(\"k\") = \"0\"\n\nput k a\"b\n\n\n\n",
			compares: []client.Compare{client.VersionIs("k", 0)},
			then:     []client.TxnOp{client.PutOp("k", []byte(`a"b`))},
			keys:     []string{"k"},
		},
		{
			name:     "the same key in both branches",
			in:       "exists(k)\n\ndel k\n\nput k v\n",
			compares: []client.Compare{client.Exists("k")},
			then:     []client.TxnOp{client.DeleteOp("k")},
			els:      []client.TxnOp{client.PutOp("k", []byte("v"))},
			keys:     []string{"k"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := parseTxn(strings.NewReader(tc.in), nil)
			if err != nil {
				t.Fatal(err)
			}
			want := &txnSpec{compares: tc.compares, then: tc.then, els: tc.els, keys: tc.keys}
			if !reflect.DeepEqual(spec, want) {
				t.Fatalf("parseTxn(%q) =\n%+v\nwant\n%+v", tc.in, spec, want)
			}
		})
	}
}

// TestParseTxnErrors: every mistake in a transaction is a usage error
// (status 2) that names its line, and what was expected.
func TestParseTxnErrors(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"", "stdin holds no compare and no request"},
		{"\n\n\n", "stdin holds no compare and no request"},
		{"put a b\n", `line 1: want a compare: ver("KEY") = "VERSION", val("KEY") = "VALUE", exists("KEY") or absent("KEY"); got "put a b" (a blank line ends the compares)`},
		{"exists(a)\nver a = 1\n", `line 2: want a compare`},
		{"my ver(a) = 1\n", `line 1: want a compare`},
		{"(a) = 1\n", `line 1: want a compare`},
		{"create(\"a\") = \"1\"\n", `line 1: create(...): leased keeps no create revision; compare ver("KEY")`},
		{"c(\"a\") = \"1\"\n", `line 1: c(...): leased keeps no create revision`},
		{"lease(\"a\") = \"694d71ddacfda227\"\n", `line 1: lease(...): leased cannot compare a key's TTL lease`},
		{"vers(\"a\") = \"1\"\n", `line 1: unknown compare "vers": want ver (or version, mod), val (or value), exists or absent`},
		{"ver(\"a\n", `line 1: ver(...): the key: a quoted string that does not end`},
		{"ver(\"a\\q\") = 1\n", `line 1: ver(...): the key: a quoted string that does not end, or holds an escape Go does not know`},
		{"ver(\"a\" = 1\n", `line 1: ver("a": want ) after the key`},
		{"ver(a b) = 1\n", `line 1: ver("a": want ) after the key`},
		{"ver(\"\") = 1\n", `line 1: ver(""): the key must not be empty`},
		{"exists(a) = 1\n", `line 1: exists("a") takes no operator or value; got "= 1"`},
		{"absent(a) x\n", `line 1: absent("a") takes no operator or value`},
		{"ver(a)\n", `line 1: ver("a"): want an operator, = != > or <, then a value; got ""`},
		{"ver(a) >= 1\n", `line 1: ver("a"): want = != > or <, not >=`},
		{"ver(a) <= 1\n", `line 1: ver("a"): want = != > or <, not <=`},
		{"ver(a) == 1\n", `line 1: ver("a"): want = != > or <, not ==`},
		{"ver(a) = \"1\n", `line 1: ver("a") =: the value: a quoted string that does not end`},
		{"ver(a) = 1 2\n", `line 1: ver("a") = "1": want the end of the line after the value; got "2"`},
		{"ver(a) = x\n", `line 1: ver("a") = "x": want a version, a number 0 or more (0: absent)`},
		{"ver(a) = -1\n", `line 1: ver("a") = "-1": want a version`},
		{"val(a) > x\n", `line 1: val("a") >: leased compares values with = and != only`},
		{"value(a) < x\n", `line 1: value("a") <: leased compares values with = and != only`},
		{"\nget a\n", `line 2: success requests: get is not supported in a transaction: leased's transactions do not read; run "leasectl get" after it`},
		{"\nput a\n", `line 2: success requests: put wants KEY VALUE; got 1 argument(s)`},
		{"\nput a b c\n", `line 2: success requests: put wants KEY VALUE; got 3 argument(s)`},
		{"\nput \"\" b\n", `line 2: success requests: put: the key must not be empty`},
		{"\nput --prev-kv a b\n", `line 2: success requests: put: unknown flag --prev-kv; put takes --lease=ID only`},
		{"\nput a -5\n", `put: unknown flag -5; put takes --lease=ID only (a KEY or VALUE that begins with - is quoted, or follows --)`},
		{"\nput a b --lease\n", `line 2: success requests: put --lease: want a lease id after it`},
		{"\nput --lease=xyz a b\n", `line 2: success requests: put --lease: lease id "xyz": want 1 to 16 hexadecimal digits`},
		{"\nput --lease=0 a b\n", `put --lease: lease id "0": 0 names no lease`},
		{"\nput \"a\"b c\n", `line 2: success requests: word 2: want a space after the quoted "a"; got "b c"`},
		{"\nput a \"b\n", `line 2: success requests: word 3: a quoted string that does not end`},
		{"\ndel a b\n", `line 2: success requests: del KEY END: a transaction writes single keys`},
		{"\ndel --prefix a\n", `line 2: success requests: del --prefix: a transaction writes single keys`},
		{"\ndel --from-key a\n", `del --from-key: a transaction writes single keys`},
		{"\ndel --prev-kv a\n", `del: unknown flag --prev-kv; del takes a KEY only`},
		{"\ndel\n", `line 2: success requests: del wants KEY; got 0 argument(s)`},
		{"\ndel \"\"\n", `del: the key must not be empty`},
		{"\n\nrm a\n", `line 3: failure requests: want put KEY VALUE or del KEY; got rm`},
		{"\n\n\"put\" a b\n", `line 3: failure requests: want put KEY VALUE or del KEY; got "put"`},
		{"\nput a 1\ndel a\n", `line 3: success requests: "a" is written on line 2 already; a branch writes a key once`},
		{"\n\nput a 1\nput b 1\nput a 2\n", `line 5: failure requests: "a" is written on line 3 already`},
		{"\n\nput a 1\n\nput b 2\n", `line 5: the failure requests ended with the blank line 4; a transaction has no fourth list`},
	} {
		_, err := parseTxn(strings.NewReader(tc.in), nil)
		var ce *cliError
		if !errors.As(err, &ce) || ce.code != exitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseTxn(%q) = %v; want a usage error containing %q", tc.in, err, tc.want)
		}
	}
}

// TestParseTxnLimits: input past maxTxnInput is refused, and a read error
// is returned as it is.
func TestParseTxnLimits(t *testing.T) {
	big := "\nput k " + strings.Repeat("x", maxTxnInput) + "\n"
	_, err := parseTxn(strings.NewReader(big), nil)
	var ce *cliError
	if !errors.As(err, &ce) || ce.code != exitUsage || !strings.Contains(err.Error(), "the transaction on stdin is larger than 64 MiB") {
		t.Fatalf("a transaction of %d bytes: %v", len(big), err)
	}
	boom := errors.New("boom")
	if _, err := parseTxn(&failingReader{data: "exists(a)\n", err: boom}, nil); !errors.Is(err, boom) {
		t.Fatalf("a read error: %v", err)
	}
}

// failingReader returns data, then err.
type failingReader struct {
	data string
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.data == "" {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestParseTxnPrompts: with a prompt writer, each list is prompted for
// before it is read, as etcdctl's txn -i does, and only the lists reached.
func TestParseTxnPrompts(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"exists(a)\n", promptCompares + "\n"},
		{"exists(a)\n\nput a b\n", promptCompares + "\n" + promptSuccess + "\n"},
		{"exists(a)\n\nput a b\n\ndel a\n\n", promptCompares + "\n" + promptSuccess + "\n" + promptFailure + "\n"},
	} {
		var prompts bytes.Buffer
		if _, err := parseTxn(strings.NewReader(tc.in), &prompts); err != nil || prompts.String() != tc.want {
			t.Errorf("parseTxn(%q): prompts %q, %v; want %q", tc.in, prompts.String(), err, tc.want)
		}
	}
}

// TestTxnWhat: the notice that a transaction waits names its first keys.
func TestTxnWhat(t *testing.T) {
	for _, tc := range []struct {
		keys []string
		want string
	}{
		{nil, "the transaction"},
		{[]string{"a", "b"}, `the transaction on "a", "b"`},
		{[]string{"a", "b", "c", "d", "e"}, `the transaction on "a", "b", "c" and 2 more keys`},
	} {
		if got := txnWhat(tc.keys); got != tc.want {
			t.Errorf("txnWhat(%q) = %q; want %q", tc.keys, got, tc.want)
		}
	}
}

// TestTxnCommand: the real binary against a real server. A rename through
// stdin prints SUCCESS and OK for each request and moves the key; the same
// rename again prints FAILURE, applies the failure requests and exits 0;
// -o json prints the result; a put with --lease attaches the key; and a
// mistake exits with status 2, naming its line, having sent nothing.
func TestTxnCommand(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	ctl := func(args ...string) clitest.Result { t.Helper(); return srv.Ctl(t, args...) }
	txn := func(stdin string, args ...string) clitest.Result {
		t.Helper()
		return clitest.Cmd{Stdin: strings.NewReader(stdin)}.Run(t, bins.Leasectl,
			append([]string{"--endpoint", srv.Addr, "--cacert", srv.CA}, args...)...)
	}
	ok(t, ctl("put", "/d/a", "inode7"))
	const rename = `val("/d/a") = "inode7"
absent("/d/b")

put /d/b inode7
del /d/a

put /d/conflict "renamed already"
`
	if r := ok(t, txn(rename, "txn")); r.Stdout != "SUCCESS\nOK\nOK\n" || r.Stderr != "" {
		t.Fatalf("rename: stdout %q, stderr %q", r.Stdout, r.Stderr)
	}
	var gj getJSON
	decode(t, ctl("-o", "json", "get", "/d/b"), &gj)
	ver := gj.Version
	if !gj.Found || gj.Value == nil || *gj.Value != "inode7" {
		t.Fatalf("after the rename, /d/b: %+v", gj)
	}
	decode(t, ctl("-o", "json", "get", "/d/a"), &gj)
	if gj.Found || gj.Version != ver {
		t.Fatalf("after the rename, /d/a: %+v; want deleted at the revision of /d/b, %d", gj, ver)
	}

	if r := ok(t, txn(rename, "txn")); r.Stdout != "FAILURE\nOK\n" {
		t.Fatalf("rename again: stdout %q; want FAILURE and the failure request's OK", r.Stdout)
	}
	decode(t, ctl("-o", "json", "get", "/d/conflict"), &gj)
	if !gj.Found || *gj.Value != "renamed already" || gj.Version != ver+1 {
		t.Fatalf("the failure request's put: %+v", gj)
	}

	// -o json, into a fresh map so that the field names are checked.
	var m map[string]any
	decode(t, txn("ver(\"/d/b\") = \""+strconv.FormatUint(ver, 10)+"\"\n\nput /d/b inode8\n", "-o", "json", "txn"), &m)
	if m["succeeded"] != true || m["revision"] != float64(ver+2) || m["holders"] == nil || m["waited_seconds"] == nil || len(m) != 4 {
		t.Fatalf("txn -o json: %v; want succeeded at revision %d", m, ver+2)
	}
	decode(t, txn("ver(\"/d/b\") < \""+strconv.FormatUint(ver, 10)+"\"\n", "-o", "json", "txn"), &m)
	if m["succeeded"] != false || m["revision"] != float64(ver+2) {
		t.Fatalf("a failed compare with nothing to apply, -o json: %v; want revision %d unchanged", m, ver+2)
	}

	// A put with --lease attaches its key to the lease.
	var lj leaseJSON
	decode(t, ctl("-o", "json", "lease", "grant", "60"), &lj)
	ok(t, txn("\nput --lease="+lj.ID+" /svc/x up\n", "txn"))
	decode(t, ctl("-o", "json", "lease", "timetolive", "--keys", lj.ID), &lj)
	if lj.Keys == nil || !reflect.DeepEqual(*lj.Keys, []string{"/svc/x"}) {
		t.Fatalf("after put --lease in a transaction, the lease's keys: %+v", lj.Keys)
	}
	// A lease that does not exist: not found, and nothing written.
	fails(t, txn("\nput --lease=7fffffffffffffff /svc/y up\n", "txn"), exitNotFound, "not found")
	fails(t, ctl("get", "/svc/y"), exitNotFound, "key not found")

	// A mistake: status 2, its line, and nothing written.
	r := txn("exists(\"/d/b\")\n\nput /d/c x\nput /d/b\n", "txn")
	fails(t, r, exitUsage, "txn: line 4: success requests: put wants KEY VALUE; got 1 argument(s)")
	if r.Stdout != "" || !strings.Contains(r.Stderr, "Run 'leasectl txn --help' for usage.") {
		t.Fatalf("a mistake: stdout %q, stderr %q", r.Stdout, r.Stderr)
	}
	fails(t, ctl("get", "/d/c"), exitNotFound, "key not found")

	// -i prompts on stderr, and prints the same answer.
	r = ok(t, txn("exists(\"/d/b\")\n\ndel /d/b\n", "txn", "-i"))
	if r.Stdout != "SUCCESS\nOK\n" || r.Stderr != promptCompares+"\n"+promptSuccess+"\n" {
		t.Fatalf("txn -i: stdout %q, stderr %q", r.Stdout, r.Stderr)
	}
}

// TestTxnInterrupted: Ctrl-C while txn -i waits for its input ends it at
// once with status 130, as any interrupted command, though stdin is still
// open. The wait is bounded: a real process and a real signal.
func TestTxnInterrupted(t *testing.T) {
	t.Parallel()
	srv := clitest.StartServer(t, bins, "", filepath.Join(t.TempDir(), "data"), "--lease-term", "1s")
	in, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	defer w.Close()
	p := clitest.Cmd{Stdin: in}.Start(t, bins.Leasectl, "--endpoint", srv.Addr, "--cacert", srv.CA, "txn", "-i")
	if _, err := w.WriteString("exists(a)\n\n"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.Stderr.String(), promptSuccess) {
		if time.Now().After(deadline) {
			t.Fatalf("no prompt for the success requests within 30s; stderr %q", p.Stderr.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the output of a real process
	}
	p.Signal(t, syscall.SIGINT)
	if code := p.Wait(t, 30*time.Second); code != exitInterrupted || !strings.Contains(p.Stderr.String(), "Error: interrupted") {
		t.Fatalf("txn -i after Ctrl-C: status %d, stderr %q; want 130 and interrupted", code, p.Stderr.String())
	}
	if p.Stdout.String() != "" {
		t.Fatalf("an interrupted txn printed %q", p.Stdout.String())
	}
}
