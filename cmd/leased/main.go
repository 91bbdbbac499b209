// Command leased is the leased lease server.
//
// With no flags it serves on 127.0.0.1:7400 from ./leased-data, creating a
// self-signed CA and server certificate there on first start. Clients trust
// the CA in leased-data/tls/ca.pem; leasectl finds it by itself when run
// from the same folder.
//
//	leased
//	leased --data /var/lib/leased --listen 0.0.0.0:7400 --tls-host db1.example.com --client-ca ca.pem
//
// Off loopback, clients must present certificates signed by --client-ca
// (or a node's cluster CA), unless --insecure-no-client-auth; an access
// policy (--auth-policy) says what each may do, and SIGHUP rereads it.
//
// SIGINT or SIGTERM shuts the server down gracefully (bounded by
// --shutdown-timeout); a second signal closes it at once. Exit status: 0
// after a signal, 1 when the server cannot start or fails, 2 for a bad
// command line.
//
// The cert subcommands make the certificates of a cluster: a CA, node
// certificates for the peer and client ports, and client certificates.
//
//	leased cert create-ca --dir ./ca
//	leased cert create-node --ca-dir ./ca --name n1 --host n1.example.com --out ./n1
//	leased cert create-client --ca-dir ./ca --name app --out ./app
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/diskguard"
	"github.com/leased/leased/internal/version"
	"github.com/leased/leased/lessor"
	"github.com/leased/leased/server"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// defaultShutdownTimeout bounds a graceful shutdown, and
// maxShutdownTimeout bounds --shutdown-timeout: a graceful shutdown waits
// at most for writes that wait for the longest lease, which is shorter.
const (
	defaultShutdownTimeout = 10 * time.Second
	maxShutdownTimeout     = time.Hour
)

// options are the command-line flags of leased.
type options struct {
	listen          string
	data            string
	leaseTerm       time.Duration
	epsilon         time.Duration
	maxValueSize    int
	maxSessions     int
	retryWindow     time.Duration
	unsafeSkipWait  bool   // hidden: the negative control of the linearizability tests
	unsafeNoRecall  bool   // hidden: likewise, for prefix leases
	unsafeLockSteal bool   // hidden: likewise, for locks
	unsafeWatch     string // hidden: likewise, for watches
	hotPrefixWrites int
	tlsHosts        []string
	terms           []string // PREFIX=DURATION
	prefixTerms     []server.PrefixTerm
	logLevel        string
	logFormat       string
	shutdownTimeout time.Duration
	quotaBytes      int64
	reserveBytes    int64
	// The event history's retention (core.HistoryRetention); 0: no bound.
	historyAge       time.Duration
	historyRevisions int64
	historyBytes     int64

	// Bounds on memory (server.Config).
	maxSessionsPerAddr    int
	maxLeasesPerSession   int
	maxLeases             int
	maxWriteLeases        int
	ttlMin, ttlMax        time.Duration
	maxTTLLeases          int
	ttlCheckpoint         time.Duration
	ttlRevokeRate         int
	metricsListen         string
	metricsPprof          bool
	maxTotalInflightBytes int64
	maxFrameBytesPerAddr  int64
	frameTimeout          time.Duration
	retryHandshakes       int

	// A node of a cluster (DESIGN.md §13).
	name           string
	peerListen     string
	initialCluster string // NAME=HOST:PORT,...
	peers          []server.Peer
	caDir          string
	cacert         string
	cert           string
	key            string
	peer           peerOptions

	// Who may do what (DESIGN.md §15; auth.go).
	clientCA         string
	insecureNoClient bool
	authPolicy       string

	// Joining a running cluster, and raft's timeouts (members.go).
	initialClusterState string // new or existing
	raftTimeouts        raftTimeouts
}

// usageError is a bad command line: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// noArgs refuses positional arguments as a bad command line.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%s takes no arguments, only flags; got %q", cmd.CommandPath(), args)
	}
	return nil
}

// required returns a usage error if the flag's value is blank.
func required(flag, value string) error {
	if strings.TrimSpace(value) == "" {
		return usagef("%s is required", flag)
	}
	return nil
}

func main() {
	sigs := make(chan os.Signal, 3)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	os.Exit(execute(os.Args[1:], os.Environ(), os.Stdout, os.Stderr, sigs))
}

// execute runs leased with args and the environment environ (KEY=VALUE,
// as os.Environ returns it), and returns the exit status. Errors are
// printed to stderr as "Error: ...".
func execute(args, environ []string, stdout, stderr io.Writer, sigs <-chan os.Signal) int {
	cmd := newRootCmd(stderr, sigs, environ)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	failed, err := cmd.ExecuteC()
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "Error: %s\n", describe(err))
	var ue usageError
	if errors.As(err, &ue) {
		path := "leased"
		if failed != nil {
			path = failed.CommandPath()
		}
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", path)
		return exitUsage
	}
	return exitError
}

// newRootCmd builds the leased command. Log output goes to stderr; sigs
// delivers SIGINT and SIGTERM; environ (KEY=VALUE) holds the LEASED_
// variables that flags not on the command line are taken from.
func newRootCmd(stderr io.Writer, sigs <-chan os.Signal, environ []string) *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "leased",
		Short: "The leased lease server: cache consistency over QUIC and TLS 1.3",
		Long: `leased is a lease server for cache consistency. Clients cache values under
time-bound read leases; a write waits until every holder has dropped its lease
or the lease has run out.

With no flags it serves on ` + server.DefaultAddr + ` from ./` + server.DefaultDir + `, creating a
self-signed CA and server certificate there on first start. Clients must trust
<data>/tls/ca.pem; leasectl finds it by itself when run from the folder that
holds ` + server.DefaultDir + `. The CA may sign only for the server's names
(localhost, the loopback addresses, the host name and each --tls-host), and
its key is not kept: when the server certificate must be issued again (a new
--tls-host, or near its expiry after 825 days), a new CA is made, and the log
says that clients must trust the new ca.pem.

Listening beyond loopback, leased requires client certificates signed by
--client-ca (a node of a cluster: its cluster CA by default); the
certificate's name is the client's identity. --insecure-no-client-auth lets
any client in instead. --auth-policy names a YAML file of what each identity
may do under which key prefixes (read, write, write-lease, ttl-lease; admin).

SIGINT or SIGTERM shuts down gracefully (at most --shutdown-timeout); a second
signal closes at once. SIGHUP rereads the access policy file.

` + envHelp + `

Exit status: 0 after a signal, 1 when the server cannot start or fails,
2 for a bad command line.`,
		Example: `  leased
  leased --data ./leased-data --listen 127.0.0.1:7400
  leased --listen 0.0.0.0:7400 --tls-host db1.example.com --client-ca ./ca/ca.pem --auth-policy ./policy.yaml`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("leased takes no arguments, only flags; got %q", args)
			}
			return nil
		},
		SilenceErrors: true,
		SilenceUsage:  true,
		// --version prints the build (package internal/version) and exits.
		Version: version.Long(),
		RunE: func(cmd *cobra.Command, args []string) error {
			ef, err := applyEnv(cmd.Flags(), environ)
			if err != nil {
				return err
			}
			return ef.explain(run(o, ef, stderr, sigs))
		},
	}
	cmd.SetVersionTemplate("leased {{.Version}}\n")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	// The subcommands are cert's; leased itself still takes only flags,
	// and a completion command is not worth the change.
	cmd.CompletionOptions.DisableDefaultCmd = true
	cmd.AddCommand(newCertCmd())
	cmd.AddCommand(newInspectCmd(stderr))
	cmd.AddCommand(newRestoreCmd(stderr), newSnapshotCmd())
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", server.DefaultAddr, "UDP address to serve on (host:port)")
	f.StringVar(&o.data, "data", server.DefaultDir, "data folder: database and TLS files (created if missing)")
	f.DurationVar(&o.leaseTerm, "lease-term", server.DefaultLeaseTerm, "term of read and write leases (at most "+server.MaxLeaseTerm.String()+")")
	f.DurationVar(&o.epsilon, "epsilon", server.DefaultEpsilon, "clock drift allowance ε added to every lease on the server (at most "+server.MaxEpsilon.String()+")")
	f.IntVar(&o.maxValueSize, "max-value-size", server.DefaultMaxValueSize, "largest value in bytes (at most "+fmt.Sprint(server.MaxValueSizeLimit>>20)+" MiB)")
	f.IntVar(&o.maxSessions, "max-sessions", server.DefaultMaxSessions, "most client sessions at once")
	f.IntVar(&o.maxSessionsPerAddr, "max-sessions-per-addr", server.DefaultMaxSessionsPerAddr, "most client sessions at once from one IP address")
	f.IntVar(&o.maxLeasesPerSession, "max-leases-per-session", server.DefaultMaxLeasesPerSession, "most read leases one session holds; a read that needs another is refused (resource exhausted)")
	f.IntVar(&o.maxLeases, "max-leases", server.DefaultMaxLeases, "most read leases all sessions together hold; a read that needs another is refused (resource exhausted)")
	f.IntVar(&o.maxWriteLeases, "max-write-leases-per-session", server.DefaultMaxWriteLeasesPerSession, "most write leases one session holds; an acquisition of another is refused (resource exhausted)")
	f.DurationVar(&o.ttlMin, "ttl-min", 0, "shortest TTL a TTL lease may be granted with; it must outlive a failover (0: "+core.DefaultMinTTL.String()+", or three election timeouts in a cluster if that is longer)")
	f.DurationVar(&o.ttlMax, "ttl-max", core.DefaultMaxTTL, "longest TTL a TTL lease may be granted with (at most "+core.MaxTTL.String()+")")
	f.IntVar(&o.maxTTLLeases, "max-ttl-leases", core.DefaultMaxTTLLeases, "most TTL leases held at once; a grant past it is refused (resource exhausted)")
	f.DurationVar(&o.ttlCheckpoint, "ttl-checkpoint-interval", lessor.DefaultCheckpointInterval, "how often the remaining TTL of a TTL lease longer than it is recorded in the log, so that a failover resumes it from there")
	f.IntVar(&o.ttlRevokeRate, "ttl-revoke-rate", lessor.DefaultMaxRevokesPerSecond, "most expired TTL leases revoked per second, so that a mass expiry does not stall other writes")
	f.StringVar(&o.metricsListen, "metrics-listen", "", "TCP address (host:port) of the operator's listener: Prometheus metrics on /metrics, /healthz and /readyz; plain HTTP on loopback, HTTPS with the server's certificate elsewhere; empty: off")
	f.BoolVar(&o.metricsPprof, "metrics-pprof", false, "serve Go's profiles on the metrics listener under /debug/pprof/ (needs --metrics-listen)")
	f.Int64Var(&o.maxTotalInflightBytes, "max-total-inflight-bytes", server.DefaultMaxTotalInflightBytes, "most bytes of keys and values that the waiting writes of all sessions hold, with the requests of over 4 KiB still arriving; a write or request past it is refused (resource exhausted)")
	f.Int64Var(&o.maxFrameBytesPerAddr, "max-frame-bytes-per-addr", server.DefaultMaxFrameBytesPerAddr, "most bytes the requests still arriving from one IP address hold; a request past it is refused (resource exhausted)")
	f.DurationVar(&o.frameTimeout, "frame-timeout", server.DefaultFrameTimeout, "how long a request may take to arrive once it has begun; a client that stalls mid-request is disconnected")
	f.IntVar(&o.retryHandshakes, "retry-handshakes", server.DefaultRetryHandshakes, "QUIC handshakes in progress past which new connections must prove their source address (a Retry); -1: always")
	f.BoolVar(&o.unsafeSkipWait, "unsafe-skip-horizon-wait", false, "UNSAFE, for tests of the linearizability checker only: write at once after a start or failover, breaking the promise of earlier leases")
	f.MarkHidden("unsafe-skip-horizon-wait")
	f.IntVar(&o.hotPrefixWrites, "prefix-hot-writes", 2, "writes under a directory within its term that stop caching its listing for a term (-1: never)")
	f.BoolVar(&o.unsafeNoRecall, "unsafe-no-prefix-recall", false, "UNSAFE, for tests of the linearizability checker only: grant prefix leases that no write recalls, breaking their promise")
	f.MarkHidden("unsafe-no-prefix-recall")
	f.BoolVar(&o.unsafeLockSteal, "unsafe-lock-steal", false, "UNSAFE, for tests of the linearizability checker only: grant a waiting acquisition over a lock still held, breaking the promise of locks")
	f.MarkHidden("unsafe-lock-steal")
	f.StringVar(&o.unsafeWatch, "unsafe-watch-fault", "", "UNSAFE, for tests of the watch checker only: skip (an event of every fifth frame) or repeat (the last event of every fifth frame), breaking the promise of watches")
	f.MarkHidden("unsafe-watch-fault")
	f.DurationVar(&o.retryWindow, "retry-window", server.DefaultRetryWindow, "how long after a client's last write its write outcomes are kept, so that a write it sends again after a lost reply (a failover) is applied once (at most "+server.MaxRetryWindow.String()+"; 0: the default)")
	f.StringArrayVar(&o.terms, "term", nil, "lease term for keys under a prefix, as PREFIX=DURATION (repeatable; the longest prefix wins; 0 means never cached; at most "+server.MaxLeaseTerm.String()+"), e.g. --term /hot/=1s")
	f.StringSliceVar(&o.tlsHosts, "tls-host", nil, "extra host name or IP for the server certificate (repeatable; localhost, 127.0.0.1 and ::1 are always included; a wildcard only as *.DOMAIN under a domain you own, not *.com)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "how long a graceful shutdown may take before the server closes at once (at most "+maxShutdownTimeout.String()+"); leased exits within it whatever the store does")
	f.DurationVar(&o.historyAge, "history-age", core.DefaultHistoryAge, "how long the event history keeps a revision, for watches that resume from it; older ones are compacted (0: no bound)")
	f.Int64Var(&o.historyRevisions, "history-revisions", core.DefaultHistoryRevisions, "most revisions the event history keeps; older ones are compacted (0: no bound)")
	f.Int64Var(&o.historyBytes, "history-bytes", core.DefaultHistoryBytes, "most bytes of events, keys and values, the event history keeps; the oldest revisions are compacted first (0: no bound)")
	f.Int64Var(&o.quotaBytes, "quota-bytes", diskguard.DefaultQuota, "most bytes the data folder's database, raft log and snapshots may occupy; past it writes are refused (the NOSPACE alarm) until they occupy less; 0: no quota")
	f.Int64Var(&o.reserveBytes, "reserve-bytes", diskguard.DefaultReserve, "bytes kept free on the data folder's file system for what the database and log write by themselves; below it writes are refused (NOSPACE) and leased does not start; 0: no reserve (a full disk may then crash the server)")
	f.StringVar(&o.name, "name", "", "this node's name in a cluster (with --peer-listen)")
	f.StringVar(&o.peerListen, "peer-listen", "", "TCP address (host:port) that the other nodes of a cluster reach this one at; makes leased a node of a cluster")
	f.StringVar(&o.initialCluster, "initial-cluster", "", "the nodes of a new cluster, this one included, as NAME=HOST:PORT,... (their --peer-listen); used only on a node's first start; empty: a cluster of this node alone")
	f.StringVar(&o.caDir, "ca-dir", "", "cluster CA folder (ca.pem, ca-key.pem) from which the node issues its own certificate on first start, under <data>/tls/node")
	f.StringVar(&o.cacert, "cacert", "", "cluster CA certificate (PEM), with --cert and --key: certificates made with 'leased cert'")
	f.StringVar(&o.cert, "cert", "", "this node's certificate (PEM), from 'leased cert create-node'")
	f.StringVar(&o.key, "key", "", "this node's private key (PEM)")
	o.peer.addFlags(f)
	o.memberFlags(f)
	o.authFlags(f)
	noteEnvInUsage(f)
	return cmd
}

// run starts the server and serves until a signal arrives on sigs. The
// first signal shuts down gracefully within o.shutdownTimeout; a second one
// closes at once. A third one stops waiting for Close. SIGHUP is not one
// of them: it reloads the access policy (filterHUP). ef says which flags
// came from the environment, for the log.
func run(o *options, ef envFlags, stderr io.Writer, sigs <-chan os.Signal) error {
	if err := o.validate(); err != nil {
		return err
	}
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	// SIGHUP reloads the access policy once the server runs; any other
	// signal stops.
	hup := filterHUP(log, sigs, o.authPolicy != "")
	defer hup.stop()
	sigs = hup.out
	if names := ef.names(); len(names) > 0 {
		log.Info("flags from the environment", "vars", strings.Join(names, ","))
	}
	for _, name := range ef.unknown {
		log.Warn("environment variable names no flag of leased; ignored", "var", name)
	}
	cfg := o.config(log)
	cl, clientTLS, clusterCA, err := o.cluster()
	if err != nil {
		return err
	}
	cfg.Cluster, cfg.TLSConfig = cl, clientTLS
	if cfg.ClientCAs, err = o.clientCAs(clusterCA); err != nil {
		return err
	}
	cfg.PolicyFile = o.authPolicy
	o.warnAuth(log)
	// A signal during the start (a database that takes long to open, a
	// cluster that takes long to elect) ends it, within the timeout.
	type started struct {
		srv *server.Server
		err error
	}
	starting := make(chan started, 1)
	go func() {
		srv, err := server.New(cfg)
		starting <- started{srv, err}
	}()
	var srv *server.Server
	select {
	case st := <-starting:
		if st.err != nil {
			return st.err
		}
		srv = st.srv
	case sig := <-sigs:
		log.Info("signal during the start: stopping", "signal", sig.String(), "timeout", o.shutdownTimeout)
		select {
		case st := <-starting:
			if st.err == nil {
				stopWithin(log, st.srv, o.shutdownTimeout)
			}
		case <-time.After(o.shutdownTimeout):
			log.Warn("the start did not end within the shutdown timeout: exiting without waiting for it", "timeout", o.shutdownTimeout)
		case sig := <-sigs:
			log.Warn("second signal: exiting at once", "signal", sig.String())
		}
		return nil
	}
	hup.serving(srv)
	ca := server.CAPath(o.data)
	if cl != nil {
		ca = clusterCA
	}
	o.logStarted(log, srv.Addr(), ca, cl != nil, cfg.ClientCAs != nil)

	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()

	select {
	case err := <-served:
		// Serve ended although nobody asked it to: a failure, such as a
		// data folder that was deleted. Its store may hang: close within
		// the shutdown timeout, and exit anyway.
		stopWithin(log, srv, o.shutdownTimeout)
		if errors.Is(err, server.ErrServerClosed) {
			return errors.New("server closed unexpectedly")
		}
		return err
	case sig := <-sigs:
		log.Info("shutting down", "signal", sig.String(), "timeout", o.shutdownTimeout)
	}

	ctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(ctx) }()
	select {
	case err := <-shut:
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			// Shutdown gave up waiting, and closes at once: wait for
			// that, so that the database is closed before the process
			// exits.
			log.Warn("graceful shutdown took too long; closing at once", "timeout", o.shutdownTimeout)
			if err := closeNow(log, srv, sigs); err != nil {
				return err
			}
		case err != nil:
			return fmt.Errorf("shutdown: %w", err)
		}
	case sig := <-sigs:
		log.Warn("second signal: closing at once", "signal", sig.String())
		if err := closeNow(log, srv, sigs); err != nil {
			return err
		}
	}
	log.Info("stopped")
	return nil
}

// closeNow closes srv at once and waits until it is closed (its sessions,
// the core, raft and the database), unless a signal comes first: then it
// returns without waiting.
func closeNow(log *slog.Logger, srv *server.Server, sigs <-chan os.Signal) error {
	closed := make(chan error, 1)
	go func() { closed <- srv.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			return fmt.Errorf("close: %w", err)
		}
		return nil
	case sig := <-sigs:
		log.Warn("another signal: exiting without waiting for close", "signal", sig.String())
		return nil
	}
}

// stopWithin shuts srv down, waiting at most timeout (Shutdown logs what
// it gave up waiting for).
func stopWithin(log *slog.Logger, srv *server.Server, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil && !errors.Is(err, server.ErrServerClosed) {
		log.Warn("shutdown after the failure", "err", err)
	}
}

// absPath returns p made absolute, or p if that fails.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// describe returns the message for err, with a hint for common start-up
// failures.
func describe(err error) string {
	msg := strings.TrimPrefix(err.Error(), "leased: ")
	switch {
	case errors.Is(err, diskguard.ErrLocked):
		msg += " (is another leased already running on this folder?)"
	case errors.Is(err, syscall.EADDRINUSE):
		msg += " (is another leased already running? choose another address with --listen)"
	case errors.Is(err, syscall.EACCES) || errors.Is(err, os.ErrPermission):
		msg += " (check the permissions of the --data folder and the --listen port)"
	}
	return msg
}
