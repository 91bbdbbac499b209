// Command leased is the leased lease server.
//
// With no flags it serves on 127.0.0.1:7400 from ./leased-data, creating a
// self-signed CA and server certificate there on first start. Clients trust
// the CA in leased-data/tls/ca.pem; leasectl finds it by itself when run
// from the same folder.
//
//	leased
//	leased --data /var/lib/leased --listen 0.0.0.0:7400 --tls-host db1.example.com
//
// SIGINT or SIGTERM shuts the server down gracefully (bounded by
// --shutdown-timeout); a second signal closes it at once. Exit status: 0
// after a signal, 1 when the server cannot start or fails, 2 for a bad
// command line.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/server"
)

// Exit statuses.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// maxValueSizeLimit is the largest --max-value-size the server accepts.
const maxValueSizeLimit = 64 << 20

// defaultShutdownTimeout bounds a graceful shutdown.
const defaultShutdownTimeout = 10 * time.Second

// options are the command-line flags of leased.
type options struct {
	listen          string
	data            string
	leaseTerm       time.Duration
	epsilon         time.Duration
	maxValueSize    int
	maxSessions     int
	tlsHosts        []string
	terms           []string // PREFIX=DURATION
	prefixTerms     []server.PrefixTerm
	logLevel        string
	logFormat       string
	shutdownTimeout time.Duration
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
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr, sigs))
}

// execute runs leased with args and returns the exit status. Errors are
// printed to stderr as "Error: ...".
func execute(args []string, stdout, stderr io.Writer, sigs <-chan os.Signal) int {
	cmd := newRootCmd(stderr, sigs)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	err := cmd.Execute()
	if err == nil {
		return exitOK
	}
	fmt.Fprintf(stderr, "Error: %s\n", describe(err))
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "Run 'leased --help' for usage.\n")
		return exitUsage
	}
	return exitError
}

// newRootCmd builds the leased command. Log output goes to stderr; sigs
// delivers SIGINT and SIGTERM.
func newRootCmd(stderr io.Writer, sigs <-chan os.Signal) *cobra.Command {
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
holds ` + server.DefaultDir + `.

SIGINT or SIGTERM shuts down gracefully (at most --shutdown-timeout); a second
signal closes at once.

Exit status: 0 after a signal, 1 when the server cannot start or fails,
2 for a bad command line.`,
		Example: `  leased
  leased --data ./leased-data --listen 127.0.0.1:7400
  leased --listen 0.0.0.0:7400 --tls-host db1.example.com --log-format json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("leased takes no arguments, only flags; got %q", args)
			}
			return nil
		},
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(o, stderr, sigs)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", server.DefaultAddr, "UDP address to serve on (host:port)")
	f.StringVar(&o.data, "data", server.DefaultDir, "data folder: database and TLS files (created if missing)")
	f.DurationVar(&o.leaseTerm, "lease-term", server.DefaultLeaseTerm, "term of read and write leases")
	f.DurationVar(&o.epsilon, "epsilon", server.DefaultEpsilon, "clock drift allowance ε added to every lease on the server")
	f.IntVar(&o.maxValueSize, "max-value-size", server.DefaultMaxValueSize, "largest value in bytes (at most 64 MiB)")
	f.IntVar(&o.maxSessions, "max-sessions", server.DefaultMaxSessions, "most client sessions at once")
	f.StringArrayVar(&o.terms, "term", nil, "lease term for keys under a prefix, as PREFIX=DURATION (repeatable; the longest prefix wins; 0 means never cached), e.g. --term /hot/=1s")
	f.StringSliceVar(&o.tlsHosts, "tls-host", nil, "extra host name or IP for the server certificate (repeatable; localhost, 127.0.0.1 and ::1 are always included)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json")
	f.DurationVar(&o.shutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "how long a graceful shutdown may take before the server closes at once")
	return cmd
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
	case o.epsilon <= 0:
		return usagef("--epsilon %v: must be positive (default %v)", o.epsilon, server.DefaultEpsilon)
	case o.maxValueSize <= 0 || o.maxValueSize > maxValueSizeLimit:
		return usagef("--max-value-size %d: must be between 1 and %d bytes (64 MiB)", o.maxValueSize, maxValueSizeLimit)
	case o.maxSessions <= 0:
		return usagef("--max-sessions %d: must be positive", o.maxSessions)
	case o.shutdownTimeout <= 0:
		return usagef("--shutdown-timeout %v: must be positive", o.shutdownTimeout)
	}
	for _, h := range o.tlsHosts {
		if strings.TrimSpace(h) == "" {
			return usagef("--tls-host must not be empty")
		}
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
		if seen[prefix] {
			return usagef("--term %q: prefix %q is given twice", t, prefix)
		}
		seen[prefix] = true
		o.prefixTerms = append(o.prefixTerms, server.PrefixTerm{Prefix: prefix, Term: term})
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
		TLSHosts:     o.tlsHosts,
		Logger:       log,
	}
}

// run starts the server and serves until a signal arrives on sigs. The
// first signal shuts down gracefully within o.shutdownTimeout; a second one
// closes at once. A third one stops waiting for Close.
func run(o *options, stderr io.Writer, sigs <-chan os.Signal) error {
	if err := o.validate(); err != nil {
		return err
	}
	log, err := newLogger(stderr, o.logLevel, o.logFormat)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	srv, err := server.New(o.config(log))
	if err != nil {
		return err
	}
	data, ca := absPath(o.data), absPath(server.CAPath(o.data))
	log.Info("leased started",
		"listen", srv.Addr().String(),
		"data", data,
		"ca", ca,
		"lease_term", o.leaseTerm,
		"epsilon", o.epsilon)
	log.Info("clients must trust the CA", "ca", ca,
		"example", fmt.Sprintf("leasectl --endpoint %s --cacert %s status", srv.Addr(), ca))

	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()

	select {
	case err := <-served:
		// Serve ended although nobody asked it to: a failure.
		srv.Close()
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
	case errors.Is(err, syscall.EADDRINUSE):
		msg += " (is another leased already running? choose another address with --listen)"
	case errors.Is(err, syscall.EACCES) || errors.Is(err, os.ErrPermission):
		msg += " (check the permissions of the --data folder and the --listen port)"
	}
	return msg
}
