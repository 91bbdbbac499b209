package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/leased/leased/protocol"
)

// The operator's listener (Config.MetricsListen): Prometheus metrics on
// /metrics, liveness on /healthz, readiness on /readyz, and, with
// Config.MetricsPprof, Go's profiles on /debug/pprof/. Plain HTTP on a
// loopback address; on any other, HTTPS with the server's certificate,
// which asks for client certificates as the client port does; then, under
// an access policy, metrics and profiles need the metrics right
// (Server.mayScrape in auth.go).

// metrics are the server's own instruments, beside the counters that
// Stats reads (which a collector turns into metrics at each scrape).
type metrics struct {
	reg *prometheus.Registry
	// read is how long a read took to serve, from its arrival to its
	// reply; write, from a write's arrival to its outcome; wait, how long
	// a committed write waited for holders (Outcome.Waited).
	read, write, wait prometheus.Histogram
	// errors counts error replies by code.
	errors [maxCode + 1]atomic.Uint64
	// policyReloads counts the reloads of the access policy file, by
	// result: ok, or error (the policy in force stayed).
	policyReloads *prometheus.CounterVec
}

// maxCode bounds the error codes counted: codes above it count as it.
const maxCode = 31

// latencyBuckets cover a cached revalidation (tens of µs) to a write that
// waits out a term (seconds).
var latencyBuckets = prometheus.ExponentialBuckets(25e-6, 2, 20) // 25 µs … 13 s

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.read = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "leased_read_duration_seconds",
		Help: "Time from a Get's arrival to its reply.", Buckets: latencyBuckets})
	m.write = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "leased_write_duration_seconds",
		Help: "Time from a write's arrival (Put, Delete, CompareAndSwap) to its outcome.", Buckets: latencyBuckets})
	m.wait = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "leased_write_wait_seconds",
		Help: "Time a committed write waited for the holders of its key to let go.", Buckets: latencyBuckets})
	m.policyReloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "leased_auth_policy_reloads_total",
		Help: "Reloads of the access policy file, by result: ok, or error (the policy in force stayed)."}, []string{"result"})
	for _, result := range []string{"ok", "error"} {
		m.policyReloads.WithLabelValues(result) // scraped as 0 from the start
	}
	m.reg.MustRegister(m.read, m.write, m.wait, m.policyReloads, serverCollector{s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// countError counts an error reply of code.
func (m *metrics) countError(code protocol.Code) {
	m.errors[min(int(code), maxCode)].Add(1)
}

// serverCollector turns the server's counters into metrics at each scrape.
// Stats costs the same however many leases there are.
type serverCollector struct{ s *Server }

var (
	descRequests      = prometheus.NewDesc("leased_requests_total", "Messages received from clients, by type.", []string{"type"}, nil)
	descReplies       = prometheus.NewDesc("leased_replies_total", "Messages sent to clients, by type.", []string{"type"}, nil)
	descErrors        = prometheus.NewDesc("leased_errors_total", "Error replies, by code.", []string{"code"}, nil)
	descSessions      = prometheus.NewDesc("leased_sessions", "Client sessions open.", nil, nil)
	descLeases        = prometheus.NewDesc("leased_leases", "Read leases outstanding.", nil, nil)
	descLeaseStorage  = prometheus.NewDesc("leased_lease_storage_bytes", "Memory of the lease table's storage: read-lease and key records, key names, the key index and the expiry heap; a large table maps it outside the Go heap, so that the Go memory metrics do not count it. It keeps its peak.", nil, nil)
	descWriteLeases   = prometheus.NewDesc("leased_write_leases", "Write leases outstanding.", nil, nil)
	descPrefixLeases  = prometheus.NewDesc("leased_prefix_leases", "Prefix (directory) leases outstanding.", nil, nil)
	descWritesWaiting = prometheus.NewDesc("leased_writes_waiting", "Writes waiting for holders or their turn.", nil, nil)
	descInvSent       = prometheus.NewDesc("leased_invalidations_sent_total", "Invalidations sent to holders.", nil, nil)
	descInvAcked      = prometheus.NewDesc("leased_invalidations_acked_total", "Invalidations holders acknowledged.", nil, nil)
	descInvExpired    = prometheus.NewDesc("leased_invalidations_expired_total", "Invalidations whose lease ran out before an acknowledgement.", nil, nil)
	descInvCancelled  = prometheus.NewDesc("leased_invalidations_cancelled_total", "Invalidations neither acknowledged nor expired: their write was abandoned and the holder granted the key again, or a handed-over lease merged into its client's own.", nil, nil)
	descRecalls       = prometheus.NewDesc("leased_recalls_total", "Write leases recalled.", nil, nil)
	descRenewed       = prometheus.NewDesc("leased_leases_renewed_total", "Read leases renewed.", nil, nil)
	descTTLLeases     = prometheus.NewDesc("leased_ttl_leases", "TTL leases the leader tracks.", nil, nil)
	descTTLRevoked    = prometheus.NewDesc("leased_ttl_revocations_total", "TTL lease revocations applied, expiries included.", nil, nil)
	descTTLExpired    = prometheus.NewDesc("leased_ttl_expirations_total", "TTL leases revoked because they expired.", nil, nil)
	descTTLKeys       = prometheus.NewDesc("leased_ttl_keys_deleted_total", "Keys deleted by TTL lease revocations.", nil, nil)
	descTTLKeepAlives = prometheus.NewDesc("leased_ttl_keepalives_total", "TTL leases renewed by keep-alives.", nil, nil)
	descRevision      = prometheus.NewDesc("leased_revision", "Revision of the last committed change.", nil, nil)
	descCompacted     = prometheus.NewDesc("leased_history_compacted_revision", "Compaction point of the event history: a watch may start from the revision after it, and no earlier. On the leader, as last read (within its compaction interval); on a follower, as applied.", nil, nil)
	descHistoryBytes  = prometheus.NewDesc("leased_history_bytes", "Bytes of events, keys and values, that the event history holds, as the leader last read them.", nil, nil)
	descHistoryEvents = prometheus.NewDesc("leased_history_events", "Events the event history holds, as the leader last read them.", nil, nil)
	descHorizonWait   = prometheus.NewDesc("leased_horizon_wait_seconds", "Time left before writes are allowed after a restart or failover.", nil, nil)
	descInflightBytes = prometheus.NewDesc("leased_inflight_bytes", "Bytes of keys and values of the writes waiting, and of the buffers of request frames arriving.", nil, nil)
	descFrameBytes    = prometheus.NewDesc("leased_frame_bytes", "Bytes of the buffers of request frames arriving, counted in leased_inflight_bytes too.", nil, nil)
	descRefused       = prometheus.NewDesc("leased_refused_total", "Requests refused by a bound, by what was refused.", []string{"what"}, nil)
	descAlarm         = prometheus.NewDesc("leased_nospace_alarm", "1 while writes are refused for lack of disk space (the NOSPACE alarm).", nil, nil)
	descStoreBytes    = prometheus.NewDesc("leased_store_bytes", "Bytes the data folder's database, log and snapshots occupy on disk, as last measured.", nil, nil)
	descLeader        = prometheus.NewDesc("leased_raft_leader", "1 while this node leads its cluster (a server alone always leads).", nil, nil)
	descTerm          = prometheus.NewDesc("leased_raft_term", "Raft term of this node.", nil, nil)
	descCommit        = prometheus.NewDesc("leased_raft_commit_index", "Raft commit index of this node.", nil, nil)
	descApplied       = prometheus.NewDesc("leased_raft_applied_index", "Raft index applied on this node.", nil, nil)
	descLeaderChanges = prometheus.NewDesc("leased_raft_leader_changes_total", "Times this node took or lost the lead.", nil, nil)
)

func (serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descReplies, descErrors, descSessions, descLeases, descLeaseStorage, descWriteLeases, descPrefixLeases,
		descWritesWaiting, descInvSent, descInvAcked, descInvExpired, descInvCancelled, descRecalls, descRenewed, descTTLLeases, descTTLRevoked,
		descTTLExpired, descTTLKeys, descTTLKeepAlives, descRevision, descCompacted, descHistoryBytes, descHistoryEvents, descHorizonWait, descInflightBytes, descFrameBytes, descRefused,
		descAlarm, descStoreBytes, descLeader, descTerm, descCommit, descApplied, descLeaderChanges} {
		ch <- d
	}
}

func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	st := s.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	for t := range protocol.NumTypes {
		typ := protocol.Type(t)
		if !typ.Valid() {
			continue
		}
		counter(descRequests, s.msgsIn[t].Load(), typ.String())
		counter(descReplies, s.msgsOut[t].Load(), typ.String())
	}
	for code := range s.metrics.errors {
		if c := protocol.Code(code); c.Valid() && c != protocol.CodeOK {
			counter(descErrors, s.metrics.errors[code].Load(), strings.ReplaceAll(c.String(), " ", "_"))
		}
	}
	gauge(descSessions, float64(st.Sessions))
	gauge(descLeases, float64(st.Leases))
	gauge(descLeaseStorage, float64(st.LeaseStorageBytes))
	gauge(descWriteLeases, float64(st.WriteLeases))
	gauge(descPrefixLeases, float64(st.PrefixLeases))
	gauge(descWritesWaiting, float64(st.WritesWaiting))
	counter(descInvSent, st.InvalidationsSent)
	counter(descInvAcked, st.InvalidationsAcked)
	counter(descInvExpired, st.InvalidationsExpired)
	counter(descInvCancelled, st.InvalidationsCancelled)
	counter(descRecalls, st.Recalls)
	counter(descRenewed, st.LeasesRenewed)
	gauge(descTTLLeases, float64(st.TTLLeases))
	counter(descTTLRevoked, st.TTLRevoked)
	counter(descTTLExpired, st.TTLExpired)
	counter(descTTLKeys, st.TTLKeysDeleted)
	counter(descTTLKeepAlives, st.TTLKeepAlives)
	gauge(descRevision, float64(st.Revision))
	if s.Leads() {
		gauge(descCompacted, float64(st.HistoryCompacted))
		gauge(descHistoryBytes, float64(st.HistoryBytes))
		gauge(descHistoryEvents, float64(st.HistoryEvents))
	} else if ns := s.node.Status(); ns.Revision > 0 {
		gauge(descCompacted, float64(ns.Compacted))
	}
	gauge(descHorizonWait, st.WritesAllowedIn.Seconds())
	gauge(descInflightBytes, float64(st.InflightBytes))
	gauge(descFrameBytes, float64(s.frames.total.Load()))
	for what, n := range map[string]uint64{"lease": st.LeasesRefused, "write": st.WritesRefused, "session": st.SessionsRefused, "frame": s.frames.refused.Load()} {
		counter(descRefused, n, what)
	}
	alarm := 0.0
	if st.Alarm != "" {
		alarm = 1
	}
	gauge(descAlarm, alarm)
	if used, ok := s.node.DiskUsed(); ok {
		gauge(descStoreBytes, float64(used))
	}
	leads := 0.0
	if s.Leads() {
		leads = 1
	}
	gauge(descLeader, leads)
	// A node of a cluster, or a server alone on its own one-node raft
	// (not one over Config.Store).
	if rs, ok := s.node.RaftStatus(); ok {
		gauge(descTerm, float64(rs.Term))
		gauge(descCommit, float64(rs.CommitIndex))
		gauge(descApplied, float64(rs.AppliedIndex))
	}
	counter(descLeaderChanges, s.node.LeaderChanges())
}

// ready reports why this node cannot serve clients now, nil if it can
// (node.Node.Health).
func (s *Server) ready() error { return s.node.Health() }

// startMetrics starts the operator's listener, if Config.MetricsListen
// asks for one. Close stops it.
func (s *Server) startMetrics(tlsConf *tls.Config) error {
	if s.cfg.MetricsListen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.MetricsListen)
	if err != nil {
		return fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", s.scrapers(promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{s}})))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := s.ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if s.cfg.MetricsPprof {
		mux.Handle("/debug/pprof/", s.scrapers(http.HandlerFunc(pprof.Index)))
		mux.Handle("/debug/pprof/cmdline", s.scrapers(http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("/debug/pprof/profile", s.scrapers(http.HandlerFunc(pprof.Profile)))
		mux.Handle("/debug/pprof/symbol", s.scrapers(http.HandlerFunc(pprof.Symbol)))
		mux.Handle("/debug/pprof/trace", s.scrapers(http.HandlerFunc(pprof.Trace)))
	}
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	if !isLoopback(ln.Addr()) {
		tc := tlsConf.Clone()
		tc.NextProtos = []string{"h2", "http/1.1"}
		hs.TLSConfig = tc
		ln = tls.NewListener(ln, tc)
	}
	scheme := "http"
	if hs.TLSConfig != nil {
		scheme = "https"
	}
	s.metricsLn, s.metricsSrv = ln, hs
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Warn("metrics listener stopped", "err", err)
		}
	}()
	s.log.Info("metrics and health", "url", scheme+"://"+ln.Addr().String()+"/metrics", "pprof", s.cfg.MetricsPprof)
	return nil
}

// scrapers serves h only to the requests that may read what the server
// measures (mayScrape), and answers the others 403 Forbidden with why.
// Health and readiness need no right: they tell no more than whether the
// port answers.
func (s *Server) scrapers(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.mayScrape(r); err != nil {
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// MetricsAddr returns the address of the operator's listener, nil if
// there is none.
func (s *Server) MetricsAddr() net.Addr {
	if s.metricsLn == nil {
		return nil
	}
	return s.metricsLn.Addr()
}

// stopMetrics stops the operator's listener, within a second.
func (s *Server) stopMetrics() {
	if s.metricsSrv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.metricsSrv.Shutdown(ctx); err != nil {
		s.metricsSrv.Close()
	}
}

// isLoopback reports whether addr is a loopback address.
func isLoopback(addr net.Addr) bool {
	ta, ok := addr.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// slogPrinter is promhttp's error log, on the server's logger.
type slogPrinter struct{ s *Server }

func (p slogPrinter) Println(v ...any) { p.s.log.Warn("metrics: " + fmt.Sprint(v...)) }
