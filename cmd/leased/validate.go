package main

// This file checks the flags and makes the server's configuration of
// them. The flags are checked here for their syntax (a duration, a
// size, host:port, NAME=HOST:PORT) and for what only the command line
// says (which flags go together, the values a flag has no use for); what
// a value means, its bounds and its relations to others, server.Config
// checks (Validate), whose errors name the Config field, and flagsOf
// names the flag too.

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/leased/leased/core"
	"github.com/leased/leased/server"
)

// validate checks the flags and returns a usageError naming the first bad
// one. It checks here what only the command line says: the syntax of the
// values, which flags go together, and the values a flag has no use for
// (checkZeros); what the values mean, their bounds and their relations to
// each other, the server's Config checks (configError names its field and
// the flag). It parses --term and --initial-cluster, and creates nothing.
func (o *options) validate() error {
	if err := checkListen(o.listen); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(o.data) == "":
		return usagef("--data must name a folder")
	case o.retryHandshakes < -1:
		return usagef("--retry-handshakes %d: must be positive, or -1 to ask every connection for a Retry", o.retryHandshakes)
	case o.shutdownTimeout <= 0 || o.shutdownTimeout > maxShutdownTimeout:
		return usagef("--shutdown-timeout %v: must be positive and at most %v", o.shutdownTimeout, maxShutdownTimeout)
	case o.quotaBytes < 0:
		return usagef("--quota-bytes %d: must be 0 (no quota) or more", o.quotaBytes)
	case o.reserveBytes < 0:
		return usagef("--reserve-bytes %d: must be 0 (no reserve) or more", o.reserveBytes)
	}
	if err := o.checkZeros(); err != nil {
		return err
	}
	for _, h := range o.tlsHosts {
		if strings.TrimSpace(h) == "" {
			return usagef("--tls-host must not be empty")
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
	for _, f := range []struct {
		flag     string
		negative bool
	}{{"--history-age", o.historyAge < 0}, {"--history-revisions", o.historyRevisions < 0}, {"--history-bytes", o.historyBytes < 0}} {
		if f.negative {
			return usagef("%s is negative: want a bound, or 0 for none", f.flag)
		}
	}
	o.prefixTerms = nil
	for _, t := range o.terms {
		prefix, d, ok := strings.Cut(t, "=")
		if !ok {
			return usagef("--term %q: want PREFIX=DURATION, such as /hot/=1s", t)
		}
		term, err := time.ParseDuration(d)
		if err != nil {
			return usagef("--term %q: %q is not a duration of 0 or more, such as 1s", t, d)
		}
		o.prefixTerms = append(o.prefixTerms, server.PrefixTerm{Prefix: prefix, Term: term})
	}
	cfg := o.config(nil)
	if cfg.Cluster = o.clusterConfig(); cfg.Cluster != nil {
		// Stand-ins for the node's TLS configurations, which cluster makes
		// (issuing its certificate) only once the flags are good: Validate
		// checks only that they are there.
		cfg.Cluster.PeerTLS, cfg.Cluster.PeerClientTLS = &tls.Config{}, &tls.Config{}
	}
	if err := cfg.Validate(); err != nil {
		return configError(err)
	}
	return nil
}

// checkZeros refuses 0 for the flags that have no use for it. Each has a
// default of its own, which --help shows, and the server's Config reads a
// zero field as its default: 0 would quietly mean the default, not 0.
// (Negative values, and values past their bounds, Config refuses.)
func (o *options) checkZeros() error {
	for _, f := range []struct {
		flag  string
		value any
		want  string
	}{
		{"--lease-term", o.leaseTerm, fmt.Sprintf("must be positive (default %v)", server.DefaultLeaseTerm)},
		{"--epsilon", o.epsilon, fmt.Sprintf("must be positive (default %v)", server.DefaultEpsilon)},
		{"--max-value-size", o.maxValueSize, fmt.Sprintf("must be between 1 and %d bytes (63 MiB)", server.MaxValueSizeLimit)},
		{"--max-sessions", o.maxSessions, "must be positive"},
		{"--max-sessions-per-addr", o.maxSessionsPerAddr, "must be positive"},
		{"--max-leases-per-session", o.maxLeasesPerSession, "must be positive"},
		{"--max-leases", o.maxLeases, "must be positive"},
		{"--max-write-leases-per-session", o.maxWriteLeases, "must be positive"},
		{"--ttl-max", o.ttlMax, "must be positive and at most " + core.MaxTTL.String()},
		{"--max-ttl-leases", o.maxTTLLeases, "must be positive"},
		{"--ttl-checkpoint-interval", o.ttlCheckpoint, "must be positive"},
		{"--ttl-revoke-rate", o.ttlRevokeRate, "must be from 1 to 1e9"},
		{"--max-total-inflight-bytes", o.maxTotalInflightBytes, fmt.Sprintf("must be at least --max-value-size plus the largest key plus 1 KiB (%d bytes)", int64(o.maxValueSize)+server.MaxKeySize+1024)},
		{"--max-frame-bytes-per-addr", o.maxFrameBytesPerAddr, fmt.Sprintf("must be at least --max-value-size plus the largest key plus 1 KiB (%d bytes)", int64(o.maxValueSize)+server.MaxKeySize+1024)},
		{"--frame-timeout", o.frameTimeout, "must be positive and at most " + server.MaxIdleTimeout.String()},
		{"--retry-handshakes", o.retryHandshakes, "must be positive, or -1 to ask every connection for a Retry"},
	} {
		if reflect.ValueOf(f.value).IsZero() {
			return usagef("%s %v: %s", f.flag, f.value, f.want)
		}
	}
	return nil
}

// configFlags maps the fields of server.Config that flags set, as the
// errors of Config.Validate name them (with the path to a field of a
// field), to their flags.
var configFlags = map[string]string{
	"Dir":                      "--data",
	"Addr":                     "--listen",
	"LeaseTerm":                "--lease-term",
	"PrefixTerms":              "--term",
	"Epsilon":                  "--epsilon",
	"MaxValueSize":             "--max-value-size",
	"MaxSessions":              "--max-sessions",
	"MaxSessionsPerAddr":       "--max-sessions-per-addr",
	"MaxLeasesPerSession":      "--max-leases-per-session",
	"MaxLeases":                "--max-leases",
	"MaxWriteLeasesPerSession": "--max-write-leases-per-session",
	"TTL.MinTTL":               "--ttl-min",
	"TTL.MaxTTL":               "--ttl-max",
	"TTL.MaxLeases":            "--max-ttl-leases",
	"TTL.CheckpointInterval":   "--ttl-checkpoint-interval",
	"TTL.MaxRevokesPerSecond":  "--ttl-revoke-rate",
	"MaxTotalInflightBytes":    "--max-total-inflight-bytes",
	"MaxFrameBytesPerAddr":     "--max-frame-bytes-per-addr",
	"MetricsListen":            "--metrics-listen",
	"MetricsPprof":             "--metrics-pprof",
	"FrameTimeout":             "--frame-timeout",
	"RetryHandshakes":          "--retry-handshakes",
	"RetryWindow":              "--retry-window",
	"TLSHosts":                 "--tls-host",
	"QuotaBytes":               "--quota-bytes",
	"ReserveBytes":             "--reserve-bytes",
	"UnsafeSkipHorizonWait":    "--unsafe-skip-horizon-wait",
	"UnsafeNoPrefixRecall":     "--unsafe-no-prefix-recall",
	"UnsafeWatchFault":         "--unsafe-watch-fault",
	"HotPrefixWrites":          "--prefix-hot-writes",
	"PolicyFile":               "--auth-policy",
	"ClientCAs":                "--client-ca",

	"Cluster.Name":                       "--name",
	"Cluster.PeerAddr":                   "--peer-listen",
	"Cluster.Peers":                      "--initial-cluster",
	"Cluster.PeerRoutes":                 "--peer-route",
	"Cluster.Join":                       "--initial-cluster-state",
	"Cluster.Replica.HeartbeatTimeout":   "--heartbeat-timeout",
	"Cluster.Replica.ElectionTimeout":    "--election-timeout",
	"Cluster.Replica.LeaderLeaseTimeout": "--leader-lease-timeout",
	"Cluster.Replica.CommitTimeout":      "--commit-timeout",
	"Cluster.Replica.SnapshotThreshold":  "--snapshot-threshold",
	"Cluster.Replica.TrailingLogs":       "--snapshot-trailing-logs",
	"Cluster.Replica.SnapshotInterval":   "--snapshot-interval",
	"Cluster.Replica.WALSegmentSize":     "--wal-segment-size",
}

// configError makes an error of server.Config.Validate a usage error that
// names first the flags of the fields it names: "--max-value-size:
// MaxValueSize 73400320 is over the limit of 66060288 bytes (63 MiB)".
func configError(err error) error {
	if flags := flagsOf(err.Error()); len(flags) > 0 {
		return usagef("%s: %w", strings.Join(flags, ", "), err)
	}
	return usageError{err}
}

// flagsOf returns the flags of the fields of server.Config that msg, an
// error of Config.Validate, names, in their order. Its first word is the
// bad field, with its path ("TTL.MinTTL"); a field named later without a
// path may be a sibling of the first ("MaxTTL").
func flagsOf(msg string) []string {
	words := strings.FieldsFunc(msg, func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '.'
	})
	if len(words) == 0 {
		return nil
	}
	parent := ""
	if i := strings.LastIndex(words[0], "."); i >= 0 {
		parent = words[0][:i+1]
	}
	var flags []string
	for _, w := range words {
		w = strings.TrimRight(w, ".")
		flag, ok := configFlags[w]
		if !ok && parent != "" {
			flag, ok = configFlags[parent+w]
		}
		if ok && !slices.Contains(flags, flag) {
			flags = append(flags, flag)
		}
	}
	return flags
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
		History: core.HistoryRetention{Age: noBoundIfZero(o.historyAge), Revisions: noneIfZero(o.historyRevisions),
			Bytes: noneIfZero(o.historyBytes)},
		MaxTotalInflightBytes: o.maxTotalInflightBytes,
		MaxFrameBytesPerAddr:  o.maxFrameBytesPerAddr,
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
		UnsafeNoPrefixRecall:  o.unsafeNoRecall,
		UnsafeLockSteal:       o.unsafeLockSteal,
		UnsafeWatchFault:      o.unsafeWatch,
		HotPrefixWrites:       o.hotPrefixWrites,
	}
}

// noBoundIfZero maps a duration flag's 0, which means no bound, to the
// server's negative none (its zero means the default).
func noBoundIfZero(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// noneIfZero maps a size flag's 0, which means none, to the server's
// negative none (its zero means the default).
func noneIfZero(n int64) int64 {
	if n == 0 {
		return -1
	}
	return n
}
