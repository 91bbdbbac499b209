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
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/diskguard"
	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/internal/tlsfiles"
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

// maxValueSizeLimit is the largest --max-value-size the server accepts.
const maxValueSizeLimit = server.MaxValueSizeLimit

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
	unsafeSkipWait  bool // hidden: the negative control of the linearizability tests
	tlsHosts        []string
	terms           []string // PREFIX=DURATION
	prefixTerms     []server.PrefixTerm
	logLevel        string
	logFormat       string
	shutdownTimeout time.Duration
	quotaBytes      int64
	reserveBytes    int64

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
	f.IntVar(&o.maxValueSize, "max-value-size", server.DefaultMaxValueSize, "largest value in bytes (at most 63 MiB)")
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
	f.Int64Var(&o.maxTotalInflightBytes, "max-total-inflight-bytes", server.DefaultMaxTotalInflightBytes, "most bytes of keys and values that the waiting writes of all sessions hold; a write past it is refused (resource exhausted)")
	f.DurationVar(&o.frameTimeout, "frame-timeout", server.DefaultFrameTimeout, "how long a request may take to arrive once it has begun; a client that stalls mid-request is disconnected")
	f.IntVar(&o.retryHandshakes, "retry-handshakes", server.DefaultRetryHandshakes, "QUIC handshakes in progress past which new connections must prove their source address (a Retry); -1: always")
	f.BoolVar(&o.unsafeSkipWait, "unsafe-skip-horizon-wait", false, "UNSAFE, for tests of the linearizability checker only: write at once after a start or failover, breaking the promise of earlier leases")
	f.MarkHidden("unsafe-skip-horizon-wait")
	f.DurationVar(&o.retryWindow, "retry-window", server.DefaultRetryWindow, "how long after a client's last write its write outcomes are kept, so that a write it sends again after a lost reply (a failover) is applied once (at most "+server.MaxRetryWindow.String()+"; 0: the default)")
	f.StringArrayVar(&o.terms, "term", nil, "lease term for keys under a prefix, as PREFIX=DURATION (repeatable; the longest prefix wins; 0 means never cached; at most "+server.MaxLeaseTerm.String()+"), e.g. --term /hot/=1s")
	f.StringSliceVar(&o.tlsHosts, "tls-host", nil, "extra host name or IP for the server certificate (repeatable; localhost, 127.0.0.1 and ::1 are always included; a wildcard only as *.DOMAIN under a domain you own, not *.com)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "how long a graceful shutdown may take before the server closes at once (at most "+maxShutdownTimeout.String()+"); leased exits within it whatever the store does")
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

// newCertCmd builds `leased cert` and its subcommands, which make the
// certificates of a cluster (DESIGN.md §13) with package tlsfiles. Each
// prints the files it wrote, one a line. A file that exists is never
// replaced: the command fails (status 1) and names it. Missing flags, a bad
// name or a bad host are a bad command line (status 2).
func newCertCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cert",
		Short: "Make the CA, node and client certificates of a cluster",
		Long: `The cert subcommands make the certificates of a cluster.

create-ca makes the CA that every node and client trusts. create-node issues
a node certificate from it: a node serves clients and peers and dials peers
with it, and peers verify it against the address they dial, so --host must
name every address and host name other nodes and clients use to reach it,
within the names the CA permits (create-ca --permit-host).
create-client issues a client certificate, whose name is the client's
identity; it cannot serve, nor join the peer network.

No file is ever replaced. Private keys are written with mode 0600.`,
		Example: `  leased cert create-ca --dir ./ca
  leased cert create-node --ca-dir ./ca --name n1 --host n1.example.com --host 10.0.0.1 --out ./n1
  leased cert create-client --ca-dir ./ca --name app --out ./app`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return usagef("%s needs a subcommand: create-ca, create-node or create-client", cmd.CommandPath())
		},
	}
	cmd.AddCommand(newCreateCACmd(), newCreateNodeCmd(), newCreateClientCmd())
	return cmd
}

// newCreateCACmd builds `leased cert create-ca`.
func newCreateCACmd() *cobra.Command {
	var dir string
	var permit []string
	cmd := &cobra.Command{
		Use:   "create-ca --dir DIR [--permit-host HOST ...]",
		Short: "Create a cluster CA: DIR/ca.pem and DIR/ca-key.pem",
		Long: `create-ca creates a new cluster CA (ECDSA P-256, valid 10 years) in DIR,
which it creates if missing: ca.pem, the certificate every node and client
trusts, and ca-key.pem, the private key that create-node and create-client
sign with. Keep ca-key.pem secret: only a node that issues its own
certificate needs it.

--permit-host limits the names the CA may sign for (critical X.509 name
constraints): a DNS name permits itself and every name under it, an IP
address itself, and a range such as 10.0.0.0/8 its addresses; localhost,
127.0.0.1 and ::1 are always permitted, since every node certificate names
them. Clients then refuse a certificate from this CA for any other name,
even one signed with a stolen ca-key.pem, and create-node refuses to issue
one. Without --permit-host the CA may sign for any name.`,
		Example: `  leased cert create-ca --dir ./ca
  leased cert create-ca --dir ./ca --permit-host db.example.com --permit-host 10.0.0.0/8`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := required("--dir", dir); err != nil {
				return err
			}
			for _, h := range permit {
				if strings.TrimSpace(h) == "" {
					return usagef("--permit-host must not be empty")
				}
			}
			if err := tlsfiles.CreateCA(dir, permit...); err != nil {
				return certError(err)
			}
			return printFiles(cmd.OutOrStdout(), filepath.Join(dir, tlsfiles.CAFileName), filepath.Join(dir, tlsfiles.CAKeyFileName))
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "folder to create the CA in (created if missing)")
	cmd.Flags().StringArrayVar(&permit, "permit-host", nil, "DNS name (with every name under it), IP address or CIDR range the CA may sign for (repeatable, one a flag; default: any name)")
	return cmd
}

// newCreateNodeCmd builds `leased cert create-node`.
func newCreateNodeCmd() *cobra.Command {
	var caDir, name, out string
	var hosts []string
	cmd := &cobra.Command{
		Use:   "create-node --ca-dir DIR --name NAME [--host HOST ...] --out DIR",
		Short: "Issue a node certificate: OUT/NAME.pem and OUT/NAME-key.pem",
		Long: `create-node issues a node certificate from the CA in --ca-dir and writes it
and its key to --out, as NAME.pem and NAME-key.pem. It is valid for server and
client authentication, names localhost, 127.0.0.1, ::1 and every --host, and
expires after 825 days.`,
		Example: `  leased cert create-node --ca-dir ./ca --name n1 --host n1.example.com --host 10.0.0.1 --out ./n1`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range [][2]string{{"--ca-dir", caDir}, {"--name", name}, {"--out", out}} {
				if err := required(f[0], f[1]); err != nil {
					return err
				}
			}
			for _, h := range hosts {
				if strings.TrimSpace(h) == "" {
					return usagef("--host must not be empty")
				}
			}
			cert, key, err := tlsfiles.IssueNode(caDir, out, name, hosts)
			if err != nil {
				return certError(err)
			}
			return printFiles(cmd.OutOrStdout(), cert, key)
		},
	}
	f := cmd.Flags()
	f.StringVar(&caDir, "ca-dir", "", "folder of the CA (ca.pem and ca-key.pem)")
	f.StringVar(&name, "name", "", "node name: the certificate's CommonName and file names")
	f.StringArrayVar(&hosts, "host", nil, "host name or IP address that peers and clients reach the node at (repeatable, one a flag)")
	f.StringVar(&out, "out", "", "folder to write the certificate and key in (created if missing)")
	return cmd
}

// newCreateClientCmd builds `leased cert create-client`.
func newCreateClientCmd() *cobra.Command {
	var caDir, name, out string
	cmd := &cobra.Command{
		Use:   "create-client --ca-dir DIR --name NAME --out DIR",
		Short: "Issue a client certificate: OUT/NAME.pem and OUT/NAME-key.pem",
		Long: `create-client issues a client certificate from the CA in --ca-dir and writes
it and its key to --out, as NAME.pem and NAME-key.pem. It is valid for client
authentication only, its CommonName NAME is the client's identity, and it
expires after 825 days.`,
		Example: `  leased cert create-client --ca-dir ./ca --name app --out ./app`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range [][2]string{{"--ca-dir", caDir}, {"--name", name}, {"--out", out}} {
				if err := required(f[0], f[1]); err != nil {
					return err
				}
			}
			cert, key, err := tlsfiles.IssueClient(caDir, out, name)
			if err != nil {
				return certError(err)
			}
			return printFiles(cmd.OutOrStdout(), cert, key)
		},
	}
	f := cmd.Flags()
	f.StringVar(&caDir, "ca-dir", "", "folder of the CA (ca.pem and ca-key.pem)")
	f.StringVar(&name, "name", "", "client name: the certificate's CommonName and file names")
	f.StringVar(&out, "out", "", "folder to write the certificate and key in (created if missing)")
	return cmd
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

// certError makes a bad name or host from tlsfiles a bad command line.
func certError(err error) error {
	if errors.Is(err, tlsfiles.ErrBadName) || errors.Is(err, tlsfiles.ErrBadHost) {
		return usageError{err}
	}
	return err
}

// printFiles prints the paths of the files a cert command wrote.
func printFiles(w io.Writer, paths ...string) error {
	for _, p := range paths {
		if _, err := fmt.Fprintln(w, p); err != nil {
			return err
		}
	}
	return nil
}

// parseLevel parses a --log-level value.
func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, usagef("--log-level %q: want debug, info, warn or error", s)
}

// newLogger returns the logger for --log-level and --log-format, writing to w.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	lvl, err := parseLevel(level)
	if err != nil {
		return nil, err
	}
	hopts := &slog.HandlerOptions{Level: lvl}
	switch strings.ToLower(strings.TrimSpace(format)) {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}

// validate checks the flags and returns a usageError naming the first bad
// one. Zero values are refused rather than silently replaced by defaults.
func (o *options) validate() error {
	if err := checkListen(o.listen); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(o.data) == "":
		return usagef("--data must name a folder")
	case o.leaseTerm <= 0:
		return usagef("--lease-term %v: must be positive (default %v)", o.leaseTerm, server.DefaultLeaseTerm)
	case o.leaseTerm > server.MaxLeaseTerm:
		return usagef("--lease-term %v: must be at most %v", o.leaseTerm, server.MaxLeaseTerm)
	case o.epsilon <= 0:
		return usagef("--epsilon %v: must be positive (default %v)", o.epsilon, server.DefaultEpsilon)
	case o.epsilon > server.MaxEpsilon:
		return usagef("--epsilon %v: must be at most %v", o.epsilon, server.MaxEpsilon)
	case o.maxValueSize <= 0 || o.maxValueSize > maxValueSizeLimit:
		return usagef("--max-value-size %d: must be between 1 and %d bytes (63 MiB)", o.maxValueSize, maxValueSizeLimit)
	case o.maxSessions <= 0:
		return usagef("--max-sessions %d: must be positive", o.maxSessions)
	case o.maxSessionsPerAddr <= 0:
		return usagef("--max-sessions-per-addr %d: must be positive", o.maxSessionsPerAddr)
	case o.maxLeasesPerSession <= 0:
		return usagef("--max-leases-per-session %d: must be positive", o.maxLeasesPerSession)
	case o.maxLeases <= 0:
		return usagef("--max-leases %d: must be positive", o.maxLeases)
	case o.maxWriteLeases <= 0:
		return usagef("--max-write-leases-per-session %d: must be positive", o.maxWriteLeases)
	case o.ttlMin < 0:
		return usagef("--ttl-min %v: must not be negative (0: the default)", o.ttlMin)
	case o.ttlMax <= 0 || o.ttlMax > core.MaxTTL:
		return usagef("--ttl-max %v: must be positive and at most %v", o.ttlMax, core.MaxTTL)
	case o.ttlMin > o.ttlMax:
		return usagef("--ttl-min %v: must not be above --ttl-max %v", o.ttlMin, o.ttlMax)
	case o.maxTTLLeases <= 0:
		return usagef("--max-ttl-leases %d: must be positive", o.maxTTLLeases)
	case o.ttlCheckpoint <= 0:
		return usagef("--ttl-checkpoint-interval %v: must be positive", o.ttlCheckpoint)
	case o.ttlRevokeRate <= 0 || o.ttlRevokeRate > 1e9:
		return usagef("--ttl-revoke-rate %d: must be from 1 to 1e9", o.ttlRevokeRate)
	case o.metricsPprof && o.metricsListen == "":
		return usagef("--metrics-pprof: profiles are served on the metrics listener; give --metrics-listen too")
	case o.maxTotalInflightBytes < int64(o.maxValueSize)+server.MaxKeySize:
		return usagef("--max-total-inflight-bytes %d: must be at least --max-value-size plus the largest key (%d bytes)", o.maxTotalInflightBytes, int64(o.maxValueSize)+server.MaxKeySize)
	case o.frameTimeout <= 0 || o.frameTimeout > server.MaxIdleTimeout:
		return usagef("--frame-timeout %v: must be positive and at most %v", o.frameTimeout, server.MaxIdleTimeout)
	case o.retryHandshakes == 0 || o.retryHandshakes < -1:
		return usagef("--retry-handshakes %d: must be positive, or -1 to ask every connection for a Retry", o.retryHandshakes)
	case o.shutdownTimeout <= 0 || o.shutdownTimeout > maxShutdownTimeout:
		return usagef("--shutdown-timeout %v: must be positive and at most %v", o.shutdownTimeout, maxShutdownTimeout)
	case o.retryWindow < 0 || o.retryWindow > server.MaxRetryWindow:
		return usagef("--retry-window %v: must be 0 (the default, %v) to %v", o.retryWindow, server.DefaultRetryWindow, server.MaxRetryWindow)
	case o.quotaBytes < 0:
		return usagef("--quota-bytes %d: must be 0 (no quota) or more", o.quotaBytes)
	case o.reserveBytes < 0:
		return usagef("--reserve-bytes %d: must be 0 (no reserve) or more", o.reserveBytes)
	}
	for _, h := range o.tlsHosts {
		if strings.TrimSpace(h) == "" {
			return usagef("--tls-host must not be empty")
		}
		if err := tlsfiles.CheckHost(h); err != nil {
			return usagef("--tls-host: %v", strings.TrimPrefix(err.Error(), "tls: "))
		}
	}
	if err := o.validateCluster(); err != nil {
		return err
	}
	if err := o.validateMembership(); err != nil {
		return err
	}
	if err := o.validateAuth(); err != nil {
		return err
	}
	o.prefixTerms = nil
	seen := make(map[string]bool)
	for _, t := range o.terms {
		prefix, d, ok := strings.Cut(t, "=")
		if !ok {
			return usagef("--term %q: want PREFIX=DURATION, such as /hot/=1s", t)
		}
		term, err := time.ParseDuration(d)
		if err != nil || term < 0 {
			return usagef("--term %q: %q is not a duration of 0 or more, such as 1s", t, d)
		}
		if term > server.MaxLeaseTerm {
			return usagef("--term %q: term %v must be at most %v", t, term, server.MaxLeaseTerm)
		}
		if seen[prefix] {
			return usagef("--term %q: prefix %q is given twice", t, prefix)
		}
		seen[prefix] = true
		o.prefixTerms = append(o.prefixTerms, server.PrefixTerm{Prefix: prefix, Term: term})
	}
	return nil
}

// validateCluster checks the flags of a node of a cluster, and parses
// --initial-cluster.
func (o *options) validateCluster() error {
	o.peers = nil
	files := o.cacert != "" || o.cert != "" || o.key != ""
	if o.peerListen == "" {
		for _, f := range [][2]string{{"--name", o.name}, {"--initial-cluster", o.initialCluster}, {"--ca-dir", o.caDir}, {"--cacert", o.cacert}, {"--cert", o.cert}, {"--key", o.key}} {
			if f[1] != "" {
				return usagef("%s is for a node of a cluster: give --peer-listen too", f[0])
			}
		}
		if f := o.peer.set(); f != "" {
			return usagef("%s is for a node of a cluster: give --peer-listen too", f)
		}
		return nil
	}
	if err := checkAddr("--peer-listen", o.peerListen); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(o.name) == "":
		return usagef("--peer-listen needs --name: the node's name in the cluster")
	case o.caDir != "" && files:
		return usagef("give either --ca-dir or --cacert, --cert and --key, not both")
	case o.caDir == "" && !files:
		return usagef("a node of a cluster needs certificates: --ca-dir, or --cacert, --cert and --key")
	case files && (o.cacert == "" || o.cert == "" || o.key == ""):
		return usagef("--cacert, --cert and --key go together")
	}
	if err := o.peer.validate(o.name); err != nil {
		return err
	}
	if o.initialCluster == "" {
		return nil
	}
	peers, addr, err := parseInitialCluster(o.initialCluster, o.name)
	if err != nil {
		return err
	}
	if addr != o.peerListen {
		return usagef("--initial-cluster gives %s=%s but --peer-listen is %s", o.name, addr, o.peerListen)
	}
	o.peers = peers
	return nil
}

// parseInitialCluster parses --initial-cluster, NAME=HOST:PORT,..., which
// must name the node self, and returns its members and self's address.
// Errors are usage errors.
func parseInitialCluster(list, self string) (peers []server.Peer, selfAddr string, err error) {
	found := false
	for _, item := range strings.Split(list, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" {
			return nil, "", usagef("--initial-cluster %q: want NAME=HOST:PORT,...", list)
		}
		if err := checkAddr("--initial-cluster "+name, addr); err != nil {
			return nil, "", err
		}
		for _, p := range peers {
			if p.Name == name {
				return nil, "", usagef("--initial-cluster names %q twice", name)
			}
		}
		if name == self {
			found, selfAddr = true, addr
		}
		peers = append(peers, server.Peer{Name: name, Addr: addr})
	}
	if !found {
		return nil, "", usagef("--initial-cluster does not name this node (--name %s)", self)
	}
	return peers, selfAddr, nil
}

// checkAddr checks that a flag's value is host:port with a numeric port.
func checkAddr(flag, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return usagef("%s %q: want host:port", flag, addr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return usagef("%s %q: port %q is not a number from 0 to 65535", flag, addr, port)
	}
	return nil
}

// checkListen checks that addr is host:port with a numeric port. Port 0
// picks a free port, which the start-up log reports.
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		reason := err.Error()
		var ae *net.AddrError
		if errors.As(err, &ae) {
			reason = ae.Err
		}
		return usagef("--listen %q: %s; want host:port, such as %s", addr, reason, server.DefaultAddr)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return usagef("--listen %q: port %q is not a number from 0 to 65535", addr, port)
	}
	return nil
}

// cluster returns the cluster part of the server configuration, and the
// CA clients must trust: the node's certificate, issued from --ca-dir on
// first start or given, serves clients and peers alike. Nil without
// --peer-listen.
func (o *options) cluster() (*server.Cluster, *tls.Config, string, error) {
	if o.peerListen == "" {
		return nil, nil, "", nil
	}
	caFile, certFile, keyFile := o.cacert, o.cert, o.key
	if o.caDir != "" {
		var hosts []string
		for _, a := range []string{o.listen, o.peerListen} {
			if h, _, err := net.SplitHostPort(a); err == nil && h != "" && !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
		hosts = append(hosts, o.tlsHosts...)
		var err error
		certFile, keyFile, err = tlsfiles.EnsureNode(o.caDir, filepath.Join(o.data, layout.TLSDir, "node"), o.name, hosts)
		if err != nil {
			return nil, nil, "", err
		}
		caFile = filepath.Join(o.caDir, tlsfiles.CAFileName)
	}
	peerSrv, peerCli, err := tlsfiles.PeerTLS(caFile, certFile, keyFile)
	if err != nil {
		return nil, nil, "", err
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, "", fmt.Errorf("node certificate: %w", err)
	}
	cl := &server.Cluster{Name: o.name, PeerAddr: o.peerListen, Peers: o.peers, PeerTLS: peerSrv, PeerClientTLS: peerCli}
	o.peer.apply(cl)
	o.applyMembership(cl)
	return cl, &tls.Config{Certificates: []tls.Certificate{pair}}, caFile, nil
}

// config returns the server configuration for the flags.
func (o *options) config(log *slog.Logger) server.Config {
	return server.Config{
		Dir:          o.data,
		Addr:         o.listen,
		LeaseTerm:    o.leaseTerm,
		PrefixTerms:  o.prefixTerms,
		Epsilon:      o.epsilon,
		MaxValueSize: o.maxValueSize,
		MaxSessions:  o.maxSessions,

		MaxSessionsPerAddr:  o.maxSessionsPerAddr,
		MaxLeasesPerSession: o.maxLeasesPerSession,
		MaxLeases:           o.maxLeases,

		MaxWriteLeasesPerSession: o.maxWriteLeases,
		TTL: core.TTLConfig{MinTTL: o.ttlMin, MaxTTL: o.ttlMax, MaxLeases: o.maxTTLLeases,
			CheckpointInterval: o.ttlCheckpoint, MaxRevokesPerSecond: o.ttlRevokeRate},
		MaxTotalInflightBytes: o.maxTotalInflightBytes,
		MetricsListen:         o.metricsListen,
		MetricsPprof:          o.metricsPprof,
		FrameTimeout:          o.frameTimeout,
		RetryHandshakes:       o.retryHandshakes,
		RetryWindow:           o.retryWindow,
		TLSHosts:              o.tlsHosts,
		QuotaBytes:            noneIfZero(o.quotaBytes),
		ReserveBytes:          noneIfZero(o.reserveBytes),
		Logger:                log,

		UnsafeSkipHorizonWait: o.unsafeSkipWait,
	}
}

// noneIfZero maps a size flag's 0, which means none, to the server's
// negative none (its zero means the default).
func noneIfZero(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
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
	data, ca := absPath(o.data), absPath(server.CAPath(o.data))
	if cl != nil {
		ca = absPath(clusterCA)
		log.Info("node of a cluster", "name", o.name, "peer_listen", o.peerListen, "initial_cluster", o.initialCluster)
	}
	log.Info("leased started",
		"version", version.String(),
		"listen", srv.Addr().String(),
		"data", data,
		"ca", ca,
		"lease_term", o.leaseTerm,
		"epsilon", o.epsilon)
	// The listen flag's host, which says the address family, and the port
	// bound, in case the flag asked for any.
	listenHost, _, _ := net.SplitHostPort(o.listen)
	_, port, _ := net.SplitHostPort(srv.Addr().String())
	local, remote := exampleEndpoints(net.JoinHostPort(listenHost, port), o.tlsHosts, os.Hostname)
	certFlags := ""
	if cfg.ClientCAs != nil {
		certFlags = " --cert <client>.pem --key <client>-key.pem"
	}
	attrs := []any{"ca", ca, "example", fmt.Sprintf("leasectl --endpoint %s --cacert %s%s status", local, ca, certFlags)}
	if remote != "" {
		attrs = append(attrs, "remote_example", fmt.Sprintf("leasectl --endpoint %s --cacert <a copy of %s>%s status", remote, ca, certFlags))
	}
	log.Info("clients must trust the CA", attrs...)

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
			log.Warn("graceful shutdown took too long; closed at once", "timeout", o.shutdownTimeout)
		case err != nil:
			return fmt.Errorf("shutdown: %w", err)
		}
	case sig := <-sigs:
		log.Warn("second signal: closing at once", "signal", sig.String())
		closed := make(chan error, 1)
		go func() { closed <- srv.Close() }()
		select {
		case err := <-closed:
			if err != nil {
				return fmt.Errorf("close: %w", err)
			}
		case sig := <-sigs:
			log.Warn("third signal: exiting without waiting for close", "signal", sig.String())
			return nil
		}
	}
	log.Info("stopped")
	return nil
}

// exampleEndpoints returns the endpoints that the start-up log suggests to
// clients of a server listening on addr. local is addr itself, or, when
// addr's host is unspecified (0.0.0.0, :: or empty), which no client can
// dial, the loopback address of its family (127.0.0.1 for an empty host). remote is set only for an unspecified
// host: the endpoint other machines dial, by the first --tls-host that is
// not a wildcard, else by the host name (both are in the server's
// certificate); it is empty if neither is known. hostname is os.Hostname.
func exampleEndpoints(addr string, tlsHosts []string, hostname func() (string, error)) (local, remote string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, ""
	}
	ip := net.ParseIP(host)
	if host != "" && (ip == nil || !ip.IsUnspecified()) {
		return addr, ""
	}
	local = net.JoinHostPort("127.0.0.1", port)
	if ip != nil && ip.To4() == nil {
		local = net.JoinHostPort("::1", port)
	}
	for _, h := range tlsHosts {
		if !strings.HasPrefix(h, "*") {
			return local, net.JoinHostPort(h, port)
		}
	}
	if name, err := hostname(); err == nil && name != "" {
		return local, net.JoinHostPort(name, port)
	}
	return local, ""
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
