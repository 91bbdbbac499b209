package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/human"
)

// maxTxnInput bounds what txn reads from stdin, as maxStdinValue bounds a
// value: a transaction's values together are bounded by the server's
// largest value.
const maxTxnInput = maxStdinValue

// txnJSON is the JSON answer of txn.
type txnJSON struct {
	// Succeeded says that every compare held and the success requests
	// were applied; false, the failure requests.
	Succeeded bool `json:"succeeded"`
	// Revision is the version of every key the transaction wrote, or the
	// server's revision if its branch changed nothing.
	Revision uint64 `json:"revision"`
	// WaitedSeconds and Holders are how long the transaction waited for
	// the holders of leases on its keys, and how many it waited for.
	WaitedSeconds float64 `json:"waited_seconds"`
	Holders       int     `json:"holders"`
}

// txnSpec is a transaction as txn reads it from stdin: its compares, and
// the ops of its success and failure branches.
type txnSpec struct {
	compares  []client.Compare
	then, els []client.TxnOp
	// keys are the keys it may write, in the order they first appear.
	keys []string
}

// The prompts of txn --interactive, on stderr. etcdctl's name get as well;
// leased's transactions do not read, so these do not.
const (
	promptCompares = "compares:"
	promptSuccess  = "success requests (put, del):"
	promptFailure  = "failure requests (put, del):"
)

func (a *app) txnCmd() *cobra.Command {
	var (
		interactive bool
		guards      []string
	)
	cmd := &cobra.Command{
		Use:   "txn",
		Short: "Apply puts and deletes on several keys at once, if compares hold",
		Long: `Read a transaction from stdin in etcdctl's syntax and commit it: if every
compare holds, apply the success requests, else the failure requests, all at
one revision, or none. Stdin holds the compares, one a line, then a blank
line, then the success requests, one a line, then a blank line, then the
failure requests, one a line; the end of input ends the list it is in. With
-i, leasectl prompts for each list on stderr.

Compares:
  ver("KEY") = "VERSION"     also !=, > and <; version, mod and m are ver
  val("KEY") = "VALUE"       also !=; a value compare never holds for an
                             absent key
  exists("KEY")              the key is present
  absent("KEY")              the key is absent: never written, or deleted
A key's version in leased is the revision of its last write (etcd's mod
revision), and 0 while it is absent: ver("KEY") = "0" holds for an absent
key. leased keeps no create revision, no per-key count of writes and no
compares on a key's lease, so create, c and lease are refused, and val
takes only = and !=.

Requests:
  put [--lease=ID] KEY VALUE   set KEY; --lease attaches it to a TTL lease
  del KEY                      delete KEY, if it is there
A transaction writes single keys, each once a branch: del --prefix, a range
and --from-key are refused. It does not read: get is refused, as leased's
transactions cannot read; run "leasectl get" after.

KEY and VALUE are bare words, or double-quoted strings with Go's escapes
("a b", "\n", "\x00"); a quoted word is never a flag. A mistake in the input
exits with status 2, naming its line, before anything is sent.

leasectl prints SUCCESS or FAILURE, then OK for each request of the branch
applied. leased does not report whether a deleted key was there, so a del
prints OK, not etcd's count of keys deleted: compare exists("KEY") to know.
With -o json it prints "succeeded", "revision" (the version of every key
written), "waited_seconds" and "holders". FAILURE is not an error: it exits
with status 0, as etcdctl does.

The transaction commits once every other holder of a lease on any key it may
write, in either branch, has dropped it or its lease has run out, as for put.

With --guard LOCK=TOKEN, the transaction applies either branch only if the
lock (write lease) on the key LOCK is held with the fencing token TOKEN when
it commits; otherwise nothing changes and leasectl exits with status 5.
"leasectl lock" gives its command LOCK and TOKEN as $` + envLockKey + ` and
$` + envLockToken + `.`,
		Example: `  # Rename /d/a to /d/b, if /d/a still holds inode7 and /d/b is absent:
  leasectl txn <<'EOF'
  val("/d/a") = "inode7"
  absent("/d/b")

  put /d/b inode7
  del /d/a
  EOF
  leasectl txn -i`,
		Args: argsExactly(),
		RunE: func(cmd *cobra.Command, args []string) error {
			g, err := guardOf(guards)
			if err != nil {
				return err
			}
			spec, err := a.readTxn(interactive)
			if err != nil {
				return err
			}
			return a.withWrite(txnWhat(spec.keys), func(ctx context.Context, c *client.Client) error {
				tx := c.Txn(ctx)
				if g != nil {
					tx = tx.Guard(g.lock, g.token)
				}
				r, err := tx.If(spec.compares...).Then(spec.then...).Else(spec.els...).Commit()
				if err != nil {
					return err
				}
				return a.printTxn(r, len(spec.then), len(spec.els))
			})
		},
	}
	cmd.Flags().BoolVarP(&interactive, "interactive", "i", false, "prompt for each list of the transaction on stderr")
	addGuardFlag(cmd, &guards)
	return cmd
}

// readTxn reads and parses the transaction on stdin, prompting on stderr
// if interactive. Reading is given up on SIGINT or SIGTERM: the goroutine
// that reads stdin then ends with the process.
func (a *app) readTxn(interactive bool) (*txnSpec, error) {
	type result struct {
		spec *txnSpec
		err  error
	}
	done := make(chan result, 1)
	go func() {
		var prompt io.Writer
		if interactive {
			prompt = a.stderr
		}
		spec, err := parseTxn(a.stdin, prompt)
		done <- result{spec, err}
	}()
	select {
	case r := <-done:
		return r.spec, r.err
	case <-a.ctx.Done():
		return nil, fmt.Errorf("read the transaction from stdin: %w", a.ctx.Err())
	}
}

// txnWhat names a transaction writing keys, for the notice that it waits.
func txnWhat(keys []string) string {
	const named = 3
	q := make([]string, 0, named)
	for _, k := range keys[:min(len(keys), named)] {
		q = append(q, strconv.Quote(k))
	}
	switch {
	case len(keys) == 0:
		return "the transaction"
	case len(keys) > named:
		return fmt.Sprintf("the transaction on %s and %d more keys", strings.Join(q, ", "), len(keys)-named)
	}
	return "the transaction on " + strings.Join(q, ", ")
}

// printTxn prints a committed transaction: SUCCESS or FAILURE, then OK for
// each op of the branch applied, or with -o json its result.
func (a *app) printTxn(r client.TxnResult, then, els int) error {
	if a.output == "json" {
		return a.emit(txnJSON{Succeeded: r.Succeeded, Revision: r.Revision, WaitedSeconds: seconds(r.Waited), Holders: r.Holders}, nil)
	}
	var b strings.Builder
	ops := els
	if r.Succeeded {
		b.WriteString("SUCCESS\n")
		ops = then
	} else {
		b.WriteString("FAILURE\n")
	}
	b.WriteString(strings.Repeat("OK\n", ops))
	_, err := io.WriteString(a.stdout, b.String())
	return err
}

// txnSyntaxError is a mistake in the transaction on stdin, on line line
// (from 1).
func txnSyntaxError(line int, format string, args ...any) error {
	return &cliError{code: exitUsage, err: fmt.Errorf("txn: line %d: %s", line, fmt.Sprintf(format, args...)), help: "leasectl txn"}
}

// The lists of a transaction, in the order stdin holds them.
const (
	listCompares = iota
	listSuccess
	listFailure
	listsEnded // after the failure requests' blank line
)

// listNames name the lists in error messages.
var listNames = [...]string{"compares", "success requests", "failure requests"}

// parseTxn reads a transaction in etcdctl's syntax from r: compares, a
// blank line, success requests, a blank line, failure requests. If prompt
// is not nil, it writes the prompt of each list to it before reading the
// list. Errors are usage errors that name the line.
func parseTxn(r io.Reader, prompt io.Writer) (*txnSpec, error) {
	spec := &txnSpec{}
	br := bufio.NewReader(io.LimitReader(r, maxTxnInput+1))
	var (
		list    = listCompares
		read    int // bytes read
		lineNo  int
		written [2]map[string]int // the line of each key a branch writes
		ended   int               // the line of the failure requests' blank line
	)
	prompts := [...]string{promptCompares, promptSuccess, promptFailure}
	if prompt != nil {
		fmt.Fprintln(prompt, prompts[list])
	}
	for {
		raw, rerr := br.ReadString('\n')
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, fmt.Errorf("txn: read stdin: %w", rerr)
		}
		read += len(raw)
		if read > maxTxnInput {
			return nil, &cliError{code: exitUsage, err: fmt.Errorf("txn: the transaction on stdin is larger than %s", human.Bytes(maxTxnInput))}
		}
		if raw == "" && rerr != nil {
			break // end of input
		}
		lineNo++
		line := strings.TrimSpace(raw)
		switch {
		case line == "":
			if list < listsEnded {
				list++
				if list == listsEnded {
					ended = lineNo
				}
				if prompt != nil && list < listsEnded {
					fmt.Fprintln(prompt, prompts[list])
				}
			}
		case list == listsEnded:
			return nil, txnSyntaxError(lineNo, "the failure requests ended with the blank line %d; a transaction has no fourth list", ended)
		case list == listCompares:
			cmp, err := parseCompare(line)
			if err != nil {
				return nil, txnSyntaxError(lineNo, "%v", err)
			}
			spec.compares = append(spec.compares, cmp)
		default:
			op, key, err := parseOp(line)
			if err != nil {
				return nil, txnSyntaxError(lineNo, "%s: %v", listNames[list], err)
			}
			branch := list - listSuccess
			if written[branch] == nil {
				written[branch] = make(map[string]int)
			}
			if prev, ok := written[branch][key]; ok {
				return nil, txnSyntaxError(lineNo, "%s: %q is written on line %d already; a branch writes a key once", listNames[list], key, prev)
			}
			written[branch][key] = lineNo
			if !slices.Contains(spec.keys, key) {
				spec.keys = append(spec.keys, key)
			}
			if list == listSuccess {
				spec.then = append(spec.then, op)
			} else {
				spec.els = append(spec.els, op)
			}
		}
		if rerr != nil {
			break // a last line without a newline
		}
	}
	if len(spec.compares)+len(spec.then)+len(spec.els) == 0 {
		return nil, &cliError{code: exitUsage, err: errors.New("txn: stdin holds no compare and no request: want the compares, one a line, a blank line, the success requests, a blank line, and the failure requests"), help: "leasectl txn"}
	}
	return spec, nil
}

// compareUsage is what a compare line should look like.
const compareUsage = `want a compare: ver("KEY") = "VERSION", val("KEY") = "VALUE", exists("KEY") or absent("KEY")`

// parseCompare parses one compare line, such as ver("k") > "3".
func parseCompare(line string) (client.Compare, error) {
	target, rest, ok := strings.Cut(line, "(")
	target = strings.TrimSpace(target)
	if !ok || target == "" || strings.ContainsFunc(target, unicode.IsSpace) {
		hint := ""
		if w, _, _ := strings.Cut(line, " "); w == "put" || w == "del" || w == "delete" || w == "get" {
			hint = " (a blank line ends the compares)"
		}
		return client.Compare{}, fmt.Errorf("%s; got %q%s", compareUsage, line, hint)
	}
	switch target {
	case "ver", "version", "mod", "m", "val", "value", "exists", "absent":
	case "c", "create":
		return client.Compare{}, fmt.Errorf(`%s(...): leased keeps no create revision; compare ver("KEY") (the revision of the key's last write, 0 while it is absent), or use exists("KEY") or absent("KEY")`, target)
	case "lease":
		return client.Compare{}, fmt.Errorf(`lease(...): leased cannot compare a key's TTL lease; compare ver, val, exists or absent`)
	default:
		return client.Compare{}, fmt.Errorf("unknown compare %q: want ver (or version, mod), val (or value), exists or absent", target)
	}
	key, rest, err := cutWord(rest, func(r rune) bool { return r == ')' || unicode.IsSpace(r) })
	if err != nil {
		return client.Compare{}, fmt.Errorf("%s(...): the key: %v", target, err)
	}
	rest = strings.TrimLeftFunc(rest, unicode.IsSpace)
	if !strings.HasPrefix(rest, ")") {
		return client.Compare{}, fmt.Errorf("%s(%q: want ) after the key", target, key)
	}
	if key == "" {
		return client.Compare{}, fmt.Errorf("%s(%q): the key must not be empty", target, key)
	}
	rest = strings.TrimSpace(rest[1:])
	if target == "exists" || target == "absent" {
		if rest != "" {
			return client.Compare{}, fmt.Errorf("%s(%q) takes no operator or value; got %q after it", target, key, rest)
		}
		if target == "exists" {
			return client.Exists(key), nil
		}
		return client.Absent(key), nil
	}
	var op string
	for _, o := range []string{"!=", "==", ">=", "<=", "=", ">", "<"} {
		if strings.HasPrefix(rest, o) {
			op = o
			break
		}
	}
	switch op {
	case "":
		return client.Compare{}, fmt.Errorf("%s(%q): want an operator, = != > or <, then a value; got %q", target, key, rest)
	case "==", ">=", "<=":
		return client.Compare{}, fmt.Errorf("%s(%q): want = != > or <, not %s", target, key, op)
	}
	value, rest, err := cutWord(rest[len(op):], unicode.IsSpace)
	if err != nil {
		return client.Compare{}, fmt.Errorf("%s(%q) %s: the value: %v", target, key, op, err)
	}
	if rest = strings.TrimSpace(rest); rest != "" {
		return client.Compare{}, fmt.Errorf("%s(%q) %s %q: want the end of the line after the value; got %q", target, key, op, value, rest)
	}
	if target == "val" || target == "value" {
		switch op {
		case "=":
			return client.ValueIs(key, []byte(value)), nil
		case "!=":
			return client.ValueIsNot(key, []byte(value)), nil
		}
		return client.Compare{}, fmt.Errorf("%s(%q) %s: leased compares values with = and != only", target, key, op)
	}
	ver, err := strconv.ParseUint(value, 10, 64)
	if err != nil {
		return client.Compare{}, fmt.Errorf("%s(%q) %s %q: want a version, a number 0 or more (0: absent)", target, key, op, value)
	}
	switch op {
	case "=":
		return client.VersionIs(key, ver), nil
	case "!=":
		return client.VersionIsNot(key, ver), nil
	case ">":
		return client.VersionAbove(key, ver), nil
	}
	return client.VersionBelow(key, ver), nil
}

// parseOp parses one request line, put or del, and returns it and the key
// it writes.
func parseOp(line string) (client.TxnOp, string, error) {
	ws, err := words(line)
	if err != nil {
		return client.TxnOp{}, "", err
	}
	var (
		args     []string
		lease    string
		hasLease bool
		dashes   bool // "--" ended the flags
	)
	verb := ws[0].s
	if ws[0].quoted {
		verb = strconv.Quote(verb)
	}
	for i := 1; i < len(ws); i++ {
		w := ws[i]
		if w.quoted || dashes || !strings.HasPrefix(w.s, "-") || w.s == "-" {
			args = append(args, w.s)
			continue
		}
		name, val, hasVal := strings.Cut(w.s, "=")
		switch {
		case name == "--":
			dashes = true
		case verb == "put" && name == "--lease":
			if !hasVal {
				if i+1 == len(ws) {
					return client.TxnOp{}, "", errors.New("put --lease: want a lease id after it")
				}
				i++
				val = ws[i].s
			}
			lease, hasLease = val, true
		case verb == "del" || verb == "delete":
			if name == "--prefix" || name == "--from-key" {
				return client.TxnOp{}, "", fmt.Errorf("del %s: a transaction writes single keys; name each key on a line of its own", name)
			}
			return client.TxnOp{}, "", fmt.Errorf("del: unknown flag %s; del takes a KEY only", name)
		case verb == "put":
			return client.TxnOp{}, "", fmt.Errorf("put: unknown flag %s; put takes --lease=ID only (a KEY or VALUE that begins with - is quoted, or follows --)", name)
		default:
			args = append(args, w.s) // refused below, with the verb
		}
	}
	switch verb {
	case "put":
		if len(args) != 2 {
			return client.TxnOp{}, "", fmt.Errorf("put wants KEY VALUE; got %d argument(s)", len(args))
		}
		if args[0] == "" {
			return client.TxnOp{}, "", errors.New("put: the key must not be empty")
		}
		var opts []client.WriteOption
		if hasLease {
			id, err := client.ParseLeaseID(lease)
			if err != nil {
				return client.TxnOp{}, "", fmt.Errorf("put --lease: %s", strings.TrimPrefix(err.Error(), "leased: invalid argument: "))
			}
			opts = append(opts, client.WithLease(id))
		}
		return client.PutOp(args[0], []byte(args[1]), opts...), args[0], nil
	case "del", "delete":
		switch {
		case len(args) == 2:
			return client.TxnOp{}, "", errors.New("del KEY END: a transaction writes single keys; name each key on a line of its own")
		case len(args) != 1:
			return client.TxnOp{}, "", fmt.Errorf("del wants KEY; got %d argument(s)", len(args))
		case args[0] == "":
			return client.TxnOp{}, "", errors.New("del: the key must not be empty")
		}
		return client.DeleteOp(args[0]), args[0], nil
	case "get":
		return client.TxnOp{}, "", errors.New(`get is not supported in a transaction: leased's transactions do not read; run "leasectl get" after it`)
	}
	return client.TxnOp{}, "", fmt.Errorf("want put KEY VALUE or del KEY; got %s", verb)
}

// word is a word of a request line, and whether it was quoted.
type word struct {
	s      string
	quoted bool
}

// words splits a request line into words: double-quoted strings with Go's
// escapes, or runs of characters other than spaces. The line is not empty.
func words(line string) ([]word, error) {
	var ws []word
	for {
		line = strings.TrimLeftFunc(line, unicode.IsSpace)
		if line == "" {
			return ws, nil
		}
		quoted := line[0] == '"'
		s, rest, err := cutWord(line, unicode.IsSpace)
		if err != nil {
			return nil, fmt.Errorf("word %d: %v", len(ws)+1, err)
		}
		if r, _ := utf8.DecodeRuneInString(rest); rest != "" && !unicode.IsSpace(r) {
			return nil, fmt.Errorf("word %d: want a space after the quoted %q; got %q", len(ws)+1, s, rest)
		}
		ws = append(ws, word{s, quoted})
		line = rest
	}
}

// cutWord cuts the word that s begins with, after spaces: a double-quoted
// string with Go's escapes, or the characters up to the first for which
// end is true. It returns the word, unquoted, and what follows it.
func cutWord(s string, end func(rune) bool) (w, rest string, err error) {
	s = strings.TrimLeftFunc(s, unicode.IsSpace)
	if !strings.HasPrefix(s, `"`) {
		i := strings.IndexFunc(s, end)
		if i < 0 {
			i = len(s)
		}
		return s[:i], s[i:], nil
	}
	q, err := strconv.QuotedPrefix(s)
	if err != nil {
		return "", "", fmt.Errorf("a quoted string that does not end, or holds an escape Go does not know: %s", s)
	}
	w, err = strconv.Unquote(q)
	if err != nil { // not reached: QuotedPrefix checked it
		return "", "", fmt.Errorf("the quoted string %s: %v", q, err)
	}
	return w, s[len(q):], nil
}
