// Command leasectl is the command line of leased, in the manner of etcdctl.
//
//	leasectl put greeting hello
//	leasectl get greeting
//	leasectl -o json get greeting
//	leasectl cas greeting 1 "hello again"
//	leasectl del greeting
//	leasectl write-lease config/primary db1 --hold 30s
//	leasectl lease grant 60
//	leasectl put --lease 694d71ddacfda227 svc/db1 10.0.0.1:5432
//	leasectl lease keep-alive 694d71ddacfda227
//	leasectl stats
//	leasectl status
//	leasectl --endpoints a:7401,b:7402,c:7403 endpoint status
//	leasectl --endpoints a:7401,b:7402,c:7403 member list
//	leasectl snapshot save backup.snap
//	leasectl lock /locks/backup -- ./backup.sh
//	leasectl put --guard /locks/backup=42 /backup/last 2024-06-01
//	leasectl check-token /locks/backup 42
//	leasectl elect /elections/primary node-a
//	leasectl queue put jobs "resize photo 17"
//	leasectl -o json queue claim jobs
//
// Run from the folder that holds leased-data, on the same machine as the
// server, leasectl finds the server's CA by itself; otherwise pass --cacert
// or set LEASECTL_CACERT. See "leasectl --help" for the exit statuses.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/internal/version"
	"github.com/leased/leased/protocol"
)

// Defaults of the global flags.
const (
	defaultEndpoint = "127.0.0.1:7400"
	defaultPort     = "7400"
	defaultTimeout  = 10 * time.Second
	// writeMargin is added to the longest wait a write can meet on a
	// server (see writeLimit) to make the default time limit of writes.
	writeMargin = 5 * time.Second
	// waitNotice is how long a write waits before leasectl says, once,
	// on stderr, that it is still waiting.
	waitNotice = time.Second
	// envCACert names the CA file when --cacert is not given; it comes
	// before a local data folder's.
	envCACert = layout.EnvCACert
	// envCert and envKey name the client certificate and key when --cert
	// and --key are not given.
	envCert = "LEASECTL_CERT"
	envKey  = "LEASECTL_KEY"
)

// app holds the global flags and the process's streams.
type app struct {
	endpoint string
	cacert   string
	cert     string // the client certificate, for a server that requires one
	key      string
	data     string
	output   string
	timeout  time.Duration
	// certFromEnv says that cert and key came from $LEASECTL_CERT and
	// $LEASECTL_KEY.
	certFromEnv bool
	// timeoutSet says that --timeout was given: it then bounds writes too,
	// instead of the limit fitted to the server (writeLimit).
	timeoutSet bool
	// limit is the time limit of the last request, for its error message.
	limit time.Duration

	// usedCA is the CA file the connection was verified with, and tls the
	// TLS configuration made from it and the client certificate: both set
	// by loadTLS before a command that connects runs.
	usedCA string
	tls    *tls.Config

	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// ctx ends on SIGINT or SIGTERM.
	ctx context.Context
}

// cliError is an error with an exit status, and for a bad command line the
// command whose help to point to.
type cliError struct {
	code int
	err  error
	// help is the command whose --help the error points to, such as
	// "leasectl snapshot"; empty for an error whose message says what to
	// fix.
	help string
}

func (e *cliError) Error() string { return e.err.Error() }
func (e *cliError) Unwrap() error { return e.err }

// usagef returns a bad-command-line error (exit status 2) that points to
// leasectl --help.
func usagef(format string, args ...any) error {
	return &cliError{code: exitUsage, err: fmt.Errorf(format, args...), help: "leasectl"}
}

// filef returns the usage error (exit status 2) of a local file that
// cannot be used, such as the CA file; its message says what to fix.
func filef(format string, args ...any) error {
	return &cliError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// errKeyNotFound is returned by get for a missing key in table output.
var errKeyNotFound = errors.New("key not found")

// errLeaseLost is returned by write-lease --hold when the lease is recalled
// or lost while held.
var errLeaseLost = errors.New("write lease lost")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		// After the first signal, a second one kills the process as usual.
		<-ctx.Done()
		stop()
	}()
	a := &app{
		stdin:  os.Stdin,
		stdout: os.Stdout,
		stderr: os.Stderr,
		getenv: os.Getenv,
		ctx:    ctx,
	}
	os.Exit(a.execute(os.Args[1:]))
}

// execute runs leasectl with args and returns the exit status. Errors are
// printed to stderr as "Error: ...".
func (a *app) execute(args []string) int {
	cmd := a.newRootCmd()
	cmd.SetArgs(args)
	cmd.SetIn(a.stdin)
	cmd.SetOut(a.stdout)
	cmd.SetErr(a.stderr)
	err := cmd.Execute()
	if err == nil {
		return exitOK
	}
	var cx *commandExit
	if errors.As(err, &cx) {
		// lock passes its COMMAND's status on; COMMAND said why.
		return cx.code
	}
	code := a.exitCode(err)
	fmt.Fprintf(a.stderr, "Error: %s\n", a.describe(err))
	var ce *cliError
	if errors.As(err, &ce) && ce.help != "" {
		fmt.Fprintf(a.stderr, "Run '%s --help' for usage.\n", ce.help)
	}
	return code
}

// newRootCmd builds the leasectl command tree.
func (a *app) newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "leasectl",
		Short: "Command line of the leased lease server",
		Long: `leasectl reads and writes keys on a leased server, takes write leases, grants
and keeps alive TTL leases, runs commands under locks, campaigns in and
observes elections, works task queues, and shows the server's status and
counters.

The connection is QUIC with TLS 1.3, and the server's certificate is always
verified. The CA certificate is, in this order: --cacert; the file named by
$` + envCACert + `; for an endpoint on this machine (localhost, 127.0.0.1, ::1),
<--data>/tls/ca.pem if it exists, relative to the working directory (so
running leasectl from the folder where leased keeps leased-data just works).

A server that requires client certificates (leased --client-ca, and any
leased listening beyond loopback) needs --cert and --key, or $` + envCert + ` and
$` + envKey + `: a certificate from 'leased cert create-client', whose name is
the identity the server's access policy knows leasectl by.

Output is a table, or with -o json one JSON object per command. In tables,
values that are not printable text are shown quoted as Go string literals; in
JSON, "value" holds a value that is valid UTF-8, and "value_base64" one that
is not. Durations in JSON are in seconds, in fields ending in _seconds; a TTL
lease has "id" (16 hexadecimal digits), "ttl" and "granted_ttl" (seconds;
"ttl" is -1 for a lease that is gone) and "keys", as in etcdctl.

` + exitStatusHelp(),
		Example: `  leasectl put greeting hello
  leasectl get greeting
  leasectl -o json get greeting
  echo -n "from stdin" | leasectl put greeting -
  leasectl cas greeting 7 "hello again"
  leasectl del greeting
  leasectl write-lease config/primary db1 --hold 30s
  leasectl lease grant 60
  leasectl lock /locks/backup -- ./backup.sh
  leasectl --endpoint db1.example.com:7400 --cacert ./ca.pem status`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// Every command goes through here: the global flags are checked,
		// and for a command that talks to a server, the TLS files are
		// read, before anything is dialled.
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			a.timeoutSet = cmd.Flags().Changed("timeout")
			if err := a.validate(); err != nil {
				return err
			}
			if cmd.Annotations[annotConnects] == "" {
				return nil
			}
			return a.loadTLS()
		},
		// --version prints the build, as the version command does.
		Version: version.Long(),
		// The root command runs only without a command (it prints its
		// help); an unknown one is refused in Args (unknownCommand, set
		// below on every command that has subcommands).
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	root.SetVersionTemplate("leasectl {{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if c.HasSubCommands() && len(c.Flags().Args()) > 0 {
			// "leasectl snapshot restore --data-dir d f": the flag
			// belongs to a command leasectl does not have.
			return unknownCommand(c, c.Flags().Args())
		}
		return &cliError{code: exitUsage, err: err, help: c.CommandPath()}
	})
	f := root.PersistentFlags()
	f.StringVar(&a.endpoint, "endpoints", defaultEndpoint, "server address, host:port, or the nodes of a cluster, separated by commas (the leader is found)")
	f.StringVar(&a.endpoint, "endpoint", defaultEndpoint, "the same as --endpoints")
	f.StringVar(&a.cacert, "cacert", "", "PEM file of the CA that signed the server's certificate (default: see above)")
	f.StringVar(&a.cert, "cert", "", "client certificate (PEM), from 'leased cert create-client', for a server that requires one (default $"+envCert+")")
	f.StringVar(&a.key, "key", "", "private key (PEM) of --cert (default $"+envKey+")")
	f.StringVar(&a.data, "data", layout.DefaultDir, "the server's data folder, to find its CA for a local endpoint")
	f.StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	f.DurationVar(&a.timeout, "timeout", defaultTimeout, "time limit for connecting and each request; by default a write may also wait twice the server's term plus ε, plus "+writeMargin.String()+", for lease holders")
	versionCmd := a.versionCmd()
	root.AddCommand(
		a.getCmd(),
		a.putCmd(),
		a.delCmd(),
		a.casCmd(),
		a.txnCmd(),
		a.writeLeaseCmd(),
		a.leaseCmd(),
		a.lockCmd(),
		a.checkTokenCmd(),
		a.electCmd(),
		a.queueCmd(),
		a.statsCmd(),
		a.statusCmd(),
		a.memberCmd(),
		a.endpointCmd(),
		a.snapshotCmd(),
		a.compactionCmd(),
		a.watchCmd(),
		versionCmd,
	)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.SilenceErrors, c.SilenceUsage = true, true
		// Suggest only a name one edit away, or that the word begins
		// ("stat": stats, status): two edits turn "auth" into "put".
		c.SuggestionsMinimumDistance = 1
		switch {
		case c.HasSubCommands():
			c.Args = unknownCommand
		case c != versionCmd:
			// Every command without subcommands talks to a server but
			// version (cobra's help and completion are added later,
			// by Execute, and connect to nothing either).
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations[annotConnects] = "yes"
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	return root
}

// annotConnects marks, in a command's Annotations, a command that talks to
// a server: its TLS files are read before it runs (loadTLS).
const annotConnects = "leasectl.connects"

// validate checks the global flags.
func (a *app) validate() error {
	switch a.output {
	case "table", "json":
	default:
		return usagef("-o/--output %q: want table or json", a.output)
	}
	if a.timeout <= 0 {
		return usagef("--timeout %v: must be positive", a.timeout)
	}
	if a.cert == "" && a.key == "" {
		a.cert, a.key = a.getenv(envCert), a.getenv(envKey)
		a.certFromEnv = a.cert != "" || a.key != ""
	}
	if (a.cert == "") != (a.key == "") {
		return usagef("--cert and --key go together (or $%s and $%s)", envCert, envKey)
	}
	var eps []string
	for _, ep := range strings.Split(a.endpoint, ",") {
		ep, err := normalizeEndpoint(ep)
		if err != nil {
			return err
		}
		eps = append(eps, ep)
	}
	a.endpoint = strings.Join(eps, ",")
	return nil
}

// firstEndpoint is the first of the endpoints: the one whose host decides
// whether the CA is looked for locally.
func (a *app) firstEndpoint() string {
	ep, _, _ := strings.Cut(a.endpoint, ",")
	return ep
}

// normalizeEndpoint checks a --endpoint value and adds the default port
// when it has none.
func normalizeEndpoint(ep string) (string, error) {
	ep = strings.TrimSpace(ep)
	if ep == "" {
		return "", usagef("--endpoints must not be empty, nor name an empty endpoint")
	}
	if strings.Contains(ep, "://") {
		return "", usagef("--endpoint %q: want host:port, without a scheme", ep)
	}
	if host, port, err := net.SplitHostPort(ep); err == nil {
		if host == "" {
			return "", usagef("--endpoint %q: want host:port, such as %s", ep, defaultEndpoint)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", usagef("--endpoint %q: port %q is not a number from 1 to 65535", ep, port)
		}
		return ep, nil
	}
	// A bare host or IP: add the default port.
	host := strings.TrimSuffix(strings.TrimPrefix(ep, "["), "]")
	if strings.Contains(host, ":") && net.ParseIP(host) == nil {
		return "", usagef("--endpoint %q: want host:port, such as %s", ep, defaultEndpoint)
	}
	return net.JoinHostPort(host, defaultPort), nil
}

// errNoCA is returned when no CA certificate can be found.
var errNoCA = errors.New("no CA certificate")

// caFile returns the CA file to verify the server with: --cacert; then
// $LEASECTL_CACERT; for a local endpoint, <--data>/tls/ca.pem if it exists
// (relative to the working directory).
func (a *app) caFile() (string, error) {
	ca, local := layout.FindCA(a.firstEndpoint(), a.data, a.cacert, a.getenv(envCACert))
	if ca != "" {
		return ca, nil
	}
	if local {
		return "", &cliError{code: exitUsage, err: fmt.Errorf(
			"%w: pass --cacert, or run leasectl from the folder where leased keeps its data (%s); or set %s",
			errNoCA, filepath.ToSlash(layout.CAPath(a.data)), envCACert)}
	}
	return "", &cliError{code: exitUsage, err: fmt.Errorf(
		"%w for %s: pass --cacert with the server's CA (<data>/tls/ca.pem on the server), or set %s",
		errNoCA, a.endpoint, envCACert)}
}

// caSource names where the CA file came from, for its error messages.
func (a *app) caSource() string {
	switch {
	case a.cacert != "":
		return "--cacert"
	case strings.TrimSpace(a.getenv(envCACert)) != "":
		return "$" + envCACert
	}
	return "found through --data"
}

// loadTLS reads the files leasectl connects with, the CA (see caFile) and
// the client certificate and key, into a.tls. The root command's
// PersistentPreRunE calls it before any command that connects runs, so
// that a file that is missing, unreadable or not what it should be is a
// usage error (status 2) at once, before anything is dialled, however many
// endpoints the command would ask.
func (a *app) loadTLS() error {
	ca, err := a.caFile()
	if err != nil {
		return err
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return filef("the CA file %s (%s) cannot be read: %v", ca, a.caSource(), pathErr(err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return filef("the CA file %s (%s) holds no PEM certificate: want the server's <data>/tls/ca.pem, or the ca.pem of 'leased cert create-ca'", ca, a.caSource())
	}
	conf := &tls.Config{RootCAs: pool}
	if a.cert != "" {
		pair, err := tls.LoadX509KeyPair(a.cert, a.key)
		if err != nil {
			from := "--cert and --key"
			if a.certFromEnv {
				from = "$" + envCert + " and $" + envKey
			}
			return filef("the client certificate %s with key %s (%s) cannot be used: %v", a.cert, a.key, from, err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	a.usedCA, a.tls = ca, conf
	return nil
}

// pathErr returns the cause of a *fs.PathError without the operation and
// path it repeats, for a message that names the file already.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// errTLSNotLoaded is a command that dials without having had its TLS files
// read: a bug, which TestEveryCommandChecksFilesFirst catches.
var errTLSNotLoaded = errors.New("leasectl: this command connects, but its TLS files were not read first")

// clientConfig returns the client configuration of leasectl, with the TLS
// configuration loadTLS made.
func (a *app) clientConfig() (client.Config, error) {
	if a.tls == nil {
		return client.Config{}, errTLSNotLoaded
	}
	return client.Config{
		TLSConfig: a.tls,
		Name:      "leasectl",
		Logger:    slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, nil
}

// connect dials the server, verifying it with the CA that loadTLS read.
func (a *app) connect(ctx context.Context) (*client.Client, error) {
	cfg, err := a.clientConfig()
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(ctx, a.endpoint, cfg)
	if err != nil {
		return nil, &dialError{ca: a.usedCA, err: err}
	}
	return c, nil
}

// dialError is a failure to connect, with the CA file that was used.
type dialError struct {
	ca  string
	err error
}

func (e *dialError) Error() string { return e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// withClient connects, runs fn with a context bounded by --timeout, and
// closes the client.
func (a *app) withClient(fn func(ctx context.Context, c *client.Client) error) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	defer cancel()
	a.limit = a.timeout
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(ctx, c)
}

// withWrite is withClient for a request that may wait for lease holders,
// what (such as `the write to "k"`). Connecting is bounded by --timeout.
// Given --timeout, it bounds the request too, counted from the start;
// otherwise the request gets writeLimit from the time it is sent. Once the
// request has waited waitNotice, withWrite says so on stderr, once.
func (a *app) withWrite(what string, fn func(ctx context.Context, c *client.Client) error) error {
	return a.withWriteAfter(what, 0, fn)
}

// withWriteAfter is withWrite for a request that first waits extra on
// purpose (queue fail --delay): its time limit, and the notice that it
// waits, come that much later.
func (a *app) withWriteAfter(what string, extra time.Duration, fn func(ctx context.Context, c *client.Client) error) error {
	cctx, ccancel := context.WithTimeout(a.ctx, a.timeout)
	defer ccancel()
	a.limit = a.timeout
	c, err := a.connect(cctx)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := cctx
	if !a.timeoutSet {
		a.limit = a.writeLimit(c)
	}
	if !a.timeoutSet || extra > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(a.ctx, a.limit+extra)
		defer cancel()
	}
	stop := a.noticeWaitingAfter(ctx, what, c, extra)
	defer stop()
	return fn(ctx, c)
}

// writeLimit is the default time limit of a write to c's server: the
// longest wait it can meet, twice the server's default term plus ε (a
// holder that does not answer costs a term plus ε; a restarted server holds
// writes until the leases it may have granted before have run out, up to a
// term plus ε and a quarter), plus writeMargin; never less than --timeout.
// Keys under a --term prefix longer than the default term may need more:
// the error message then says to raise --timeout.
func (a *app) writeLimit(c *client.Client) time.Duration {
	info, ok := c.Connection()
	if !ok {
		return a.timeout
	}
	return max(a.timeout, 2*(info.DefaultTerm+info.Epsilon)+writeMargin)
}

// noticeWaiting prints, once, on stderr, that what is still waiting, if it
// has not ended within waitNotice. The returned stop must be called when
// it ends; it returns once nothing more will be printed.
func (a *app) noticeWaiting(what string, c *client.Client) (stop func()) {
	return a.noticeWaitingAfter(context.Background(), what, c, 0)
}

// noticeWaitingAfter is noticeWaiting for a request that waits extra on
// purpose first, bounded by ctx: once ctx has ended, the request is over,
// and nothing is printed.
func (a *app) noticeWaitingAfter(ctx context.Context, what string, c *client.Client, extra time.Duration) (stop func()) {
	term := "a lease term"
	if info, ok := c.Connection(); ok {
		term = fmt.Sprintf("a term plus ε, %v", info.DefaultTerm+info.Epsilon)
	}
	return a.noticeAfter(waitNotice+extra, func() string {
		if dl, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(dl) {
			return ""
		}
		return fmt.Sprintf("leasectl: %s is waiting for lease holders to let go, or for their leases to run out "+
			"(at most %s; after a restart or a failover, until the leases granted before it have run out); time limit %v\n",
			what, term, a.limit)
	})
}

// noticeAfter prints msg(), once, on stderr, after d, unless the returned
// stop is called first (or msg returns ""); stop returns once nothing more
// will be printed.
func (a *app) noticeAfter(d time.Duration, msg func() string) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			fmt.Fprint(a.stderr, msg())
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-ended
	}
}

// interrupted reports whether err is the end of a request cut short by
// SIGINT or SIGTERM.
func (a *app) interrupted(err error) bool {
	return a.ctx.Err() != nil && errors.Is(err, context.Canceled)
}

// absPath returns p made absolute, or p if that fails.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// withoutLibraryHint returns msg, the message of err or one that holds
// it, without what the client library adds on the same line after the
// text of a certificate error that err holds: a hint in a program's terms
// (Config.CAFile, RootCAs), where describe gives leasectl's own.
func withoutLibraryHint(msg string, err error) string {
	var cert error
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var verifyErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &verifyErr):
		cert = verifyErr
	case errors.As(err, &hostErr):
		cert = hostErr
	case errors.As(err, &unknownCA):
		cert = unknownCA
	default:
		return msg
	}
	text := cert.Error()
	i := strings.Index(msg, text)
	if i < 0 {
		return msg
	}
	end := i + len(text)
	if nl := strings.IndexByte(msg[end:], '\n'); nl >= 0 {
		return msg[:end] + msg[end+nl:]
	}
	return msg[:end]
}

// describe returns the message for err with a hint for common mistakes.
func (a *app) describe(err error) string {
	msg := err.Error()
	if a.interrupted(err) {
		switch {
		case errors.Is(err, client.ErrCanceled):
			return "interrupted; the write was abandoned and nothing changed"
		case errors.Is(err, client.ErrUnavailable):
			// For instance, a write whose outcome is unknown.
			return "interrupted: " + strings.TrimPrefix(msg, "leased: ")
		}
		return "interrupted"
	}
	var se *client.ServerError
	if errors.As(err, &se) && se == err {
		// The server's own message already names the kind of error.
		msg = se.Message
	}
	msg = strings.TrimPrefix(msg, "leased: ")

	var de *dialError
	isDial := errors.As(err, &de)
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var verifyErr *tls.CertificateVerificationError
	msg = withoutLibraryHint(msg, err)
	switch {
	case errors.As(err, &unknownCA) || (errors.As(err, &verifyErr) && !errors.As(err, &hostErr)):
		ca := ""
		if isDial {
			ca = de.ca
		}
		return fmt.Sprintf("%s\nThe server's certificate is not signed by the CA in %s. Pass this server's CA with --cacert (it is <data>/tls/ca.pem where leased runs).", msg, ca)
	case errors.Is(err, client.ErrUnauthenticated) && a.cert == "":
		return fmt.Sprintf("%s\nThe server requires a client certificate: pass --cert and --key, from 'leased cert create-client --ca-dir CA --name NAME --out DIR' with the CA the server trusts (its --client-ca).", msg)
	case errors.Is(err, client.ErrUnauthenticated):
		return fmt.Sprintf("%s\nThe server does not accept the certificate in %s: it must be signed by the CA the server trusts for clients (its --client-ca), and not expired.", msg, a.cert)
	case errors.As(err, &hostErr):
		host, _, _ := net.SplitHostPort(a.firstEndpoint())
		return fmt.Sprintf("%s\nThe server's certificate does not name %q: restart leased with --tls-host %s, or connect by a name it has.", msg, host, host)
	case isDial && errors.As(err, &se) && se.Code == protocol.CodeNotLeader:
		if se.Leader != "" {
			return fmt.Sprintf("%s\nNo node took the session within --timeout, though one named the leader %s: it may have just lost the lead. Try again, or give every node with --endpoints.", msg, se.Leader)
		}
		return fmt.Sprintf("%s\nThat node does not lead its cluster, and no leader was known within --timeout (an election may be under way): try again, or give every node with --endpoints.", msg)
	case isDial && (errors.Is(err, client.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded)):
		return fmt.Sprintf("%s\nIs leased running at %s?", msg, a.endpoint)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, client.ErrCanceled):
		return fmt.Sprintf("%s\nNo answer within %v. A write waits until lease holders drop their leases or the leases run out (at most one lease term), and writes are held for a term after a server restart: raise --timeout if needed.", msg, a.limit)
	}
	return msg
}
