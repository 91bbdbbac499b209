package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/netfault"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// opTimeout bounds each read and write of the workload, a dial and a
// stats call; the slow-holder writes get term + ε on top.
const opTimeout = 10 * time.Second

// Run runs the benchmark that cfg describes and returns its report. It
// writes the report's files to cfg.OutDir if that is set. An error means
// the run could not be made; what it measured, violations included, is in
// the report. Cancelling ctx stops the run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, log: cfg.Logger}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	// The load before anything starts: other processes' alone.
	startLoad, startOK := sampleLoad(cfg.LoadAverage, cfg.CPUs, "at the start")
	if err := r.start(ctx); err != nil {
		return nil, err
	}
	defer r.stop()
	rep := &Report{
		Started:    time.Now().UTC(),
		GoVersion:  runtime.Version(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		NumCPU:     runtime.NumCPU(),
		Endpoint:   cfg.Endpoint,
		Scale:      cfg.Scale,
		RPaper:     cfg.R,
		WPaper:     cfg.W,
		EpsilonMS:  ms(r.eps),
		InProcess:  cfg.Endpoint == "",
		Config:     cfg,
	}
	sample := func(when string) {
		if s, ok := sampleLoad(cfg.LoadAverage, cfg.CPUs, when); ok {
			rep.Load = append(rep.Load, s)
			if s.Busy {
				r.log.Warn(s.Warning())
			}
		}
	}
	if startOK {
		rep.Load = append(rep.Load, startLoad)
		if startLoad.Busy {
			r.log.Warn(startLoad.Warning())
		}
	}
	r.progress = newProgress(cfg.Progress, r.plan())
	ok := false
	defer func() { r.progress.finish(ok) }()
	for _, s := range cfg.Sharing {
		sw, err := r.sweep(ctx, fmt.Sprintf("S=%d", s), s, cfg.Terms, cfg.Scale, 0)
		if err != nil {
			return nil, err
		}
		rep.Sweeps = append(rep.Sweeps, sw)
		sample("during the sweep S=" + strconv.Itoa(s))
	}
	if len(cfg.DelayTerms) > 0 {
		sw, err := r.sweep(ctx, fmt.Sprintf("S=1, +%v each way", cfg.Delay), 1, cfg.DelayTerms, cfg.DelayScale, cfg.Delay)
		if err != nil {
			return nil, err
		}
		rep.Delay = &sw
		sample("during the added-delay sweep")
	}
	for _, t := range cfg.SlowTerms {
		for _, slow := range []bool{false, true} {
			sp, err := r.slowHolder(ctx, t, slow)
			if err != nil {
				return nil, err
			}
			rep.Slow = append(rep.Slow, sp)
			rep.SlowViolations += sp.Violations
		}
	}
	if len(cfg.SlowTerms) > 0 {
		sample("during the slow-holder experiment")
	}
	rep.Finished = time.Now().UTC()
	ok = true
	if cfg.OutDir != "" {
		if err := rep.WriteFiles(cfg.OutDir); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// runner holds what the steps of a run share.
type runner struct {
	cfg      Config
	log      *slog.Logger
	addr     string
	caFile   string
	srv      *server.Server // nil with cfg.Endpoint
	dir      string         // the in-process server's data folder
	eps      time.Duration  // the server's ε, real
	runID    string
	progress *progress
}

// TermPrefix is the key prefix that leasebench reads and writes under for
// keys of term t (real time). A server for leasebench --endpoint must give
// these prefixes their terms: see ServerFlags.
func TermPrefix(t time.Duration) string { return "leasebench/term-" + t.String() + "/" }

// ServerFlags returns the leased flags that give the prefixes of cfg's
// terms their terms, and set ε, so that leased can serve cfg's run as an
// external endpoint. It returns a ConfigError if cfg cannot run.
func ServerFlags(cfg Config) ([]string, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	return serverFlags(cfg), nil
}

func serverFlags(cfg Config) []string {
	flags := []string{"--epsilon", max(cfg.wall(cfg.Epsilon), time.Microsecond).String()}
	for _, t := range realTerms(cfg) {
		flags = append(flags, "--term", TermPrefix(t)+"="+t.String())
	}
	return flags
}

// realTerms returns every term of cfg's experiments, in real time.
func realTerms(cfg Config) []time.Duration {
	ts := []time.Duration{0}
	for _, t := range slices.Concat(cfg.Terms, cfg.SlowTerms) {
		ts = append(ts, cfg.wall(t))
	}
	for _, t := range cfg.DelayTerms {
		ts = append(ts, realAt(t, cfg.DelayScale))
	}
	return sortedUnique(ts)
}

// start starts the in-process server, or checks that the endpoint serves
// the run's terms.
func (r *runner) start(ctx context.Context) error {
	r.runID = strconv.FormatInt(time.Now().UnixNano(), 36)
	if r.cfg.Endpoint != "" {
		r.addr, r.caFile = r.cfg.Endpoint, r.cfg.CAFile
		if r.caFile == "" {
			return errors.New("leasebench: --endpoint needs the server's CA certificate (--cacert)")
		}
		return r.checkEndpoint(ctx)
	}
	dir, err := os.MkdirTemp("", "leasebench-")
	if err != nil {
		return fmt.Errorf("leasebench: data folder: %w", err)
	}
	r.dir = dir
	var prefixes []server.PrefixTerm
	for _, t := range realTerms(r.cfg) {
		prefixes = append(prefixes, server.PrefixTerm{Prefix: TermPrefix(t), Term: t})
	}
	r.eps = max(r.cfg.wall(r.cfg.Epsilon), time.Microsecond)
	srv, err := server.New(server.Config{
		Dir:         dir,
		Addr:        "127.0.0.1:0",
		PrefixTerms: prefixes,
		Epsilon:     r.eps,
		Logger:      r.log,
	})
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("leasebench: in-process server: %w", err)
	}
	r.srv = srv
	go srv.Serve(context.Background())
	r.addr, r.caFile = srv.Addr().String(), server.CAPath(dir)
	return nil
}

// stop closes the in-process server and removes its data.
func (r *runner) stop() {
	if r.srv != nil {
		r.srv.Close()
		os.RemoveAll(r.dir)
	}
}

// checkEndpoint reads the endpoint's ε, and checks that it grants each
// of the run's prefixes its term: it writes a key under each, and the
// write's reply carries the term of the writer's lease.
func (r *runner) checkEndpoint(ctx context.Context) error {
	c, _, err := r.dial(ctx, "probe", 0)
	if err != nil {
		return err
	}
	defer c.Close()
	st, err := c.ServerStats(ctx)
	if err != nil {
		return fmt.Errorf("leasebench: stats of %s: %w", r.addr, err)
	}
	r.eps = st.Epsilon
	hint := "start leased with: leased " + strings.Join(serverFlags(r.cfg), " ")
	for _, t := range realTerms(r.cfg) {
		key := TermPrefix(t) + r.runID + "/probe"
		var wr client.WriteResult
		pctx, cancel := context.WithTimeout(ctx, opTimeout)
		_, err := c.Put(pctx, key, nil, client.Result(&wr))
		cancel()
		if err != nil {
			return fmt.Errorf("leasebench: probe %q at %s: %w", key, r.addr, err)
		}
		if wr.Term != t {
			return fmt.Errorf("leasebench: %s grants a term of %v under %q, which must have term %v; %s", r.addr, wr.Term, TermPrefix(t), t, hint)
		}
	}
	return nil
}

// dial connects a client. With delay > 0 its packets go through a
// netfault.Conn that delays them by delay each way; the returned conn is
// then that wrapper, which the caller closes after the client.
func (r *runner) dial(ctx context.Context, name string, delay time.Duration) (*client.Client, *netfault.Conn, error) {
	return r.dialConn(ctx, name, delay, delay > 0)
}

func (r *runner) dialConn(ctx context.Context, name string, delay time.Duration, wrap bool) (*client.Client, *netfault.Conn, error) {
	cfg := client.Config{CAFile: r.caFile, Name: "leasebench-" + name, Logger: r.log}
	var fc *netfault.Conn
	if wrap {
		pc, err := net.ListenPacket("udp", r.localAddr())
		if err != nil {
			return nil, nil, fmt.Errorf("leasebench: client socket: %w", err)
		}
		fc = netfault.Wrap(pc, int64(r.cfg.Seed))
		fc.SetFaults(netfault.Faults{Delay: delay}, netfault.Faults{Delay: delay})
		cfg.PacketConn = fc
	}
	dctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	c, err := client.Dial(dctx, r.addr, cfg)
	if err != nil {
		if fc != nil {
			fc.Close()
		}
		return nil, nil, fmt.Errorf("leasebench: dial %s: %w", r.addr, err)
	}
	return c, fc, nil
}

// localAddr is the address for a client's own socket: IPv4 loopback for
// a server there, any interface and family otherwise.
func (r *runner) localAddr() string {
	if host, _, err := net.SplitHostPort(r.addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() && ip.To4() != nil {
			return "127.0.0.1:0"
		}
	}
	return ":0"
}

// pool is the clients of one point.
type pool struct {
	clients []*client.Client
	conns   []*netfault.Conn
	delay   time.Duration
}

func (r *runner) dialPool(ctx context.Context, n int, delay time.Duration) (*pool, error) {
	p := &pool{delay: delay}
	for i := range n {
		c, fc, err := r.dial(ctx, strconv.Itoa(i), delay)
		if err != nil {
			p.close()
			return nil, err
		}
		p.clients = append(p.clients, c)
		if fc != nil {
			p.conns = append(p.conns, fc)
		}
	}
	return p, nil
}

// close closes the clients, in parallel since each says goodbye, and then
// their sockets, once the packets they delay have gone out: the last is
// the close of the client's connection, which ends its session at once.
func (p *pool) close() {
	var wg sync.WaitGroup
	for _, c := range p.clients {
		wg.Go(func() { c.Close() })
	}
	wg.Wait()
	if len(p.conns) > 0 {
		time.Sleep(2*p.delay + 10*time.Millisecond)
	}
	for _, fc := range p.conns {
		fc.Close()
	}
}

// recorder collects the operations of one client–key pair while the
// window is open. Only its own goroutine writes it.
type recorder struct {
	reads, writes, waits []time.Duration
	cached               int
	errs                 int
	err                  error
}

// sweep runs the points of one sweep at a time scale, with a one-way
// delay (paper time) added to every packet: term 0 first, to calibrate
// m_prop and m_proc and as the baseline of the relative load.
func (r *runner) sweep(ctx context.Context, name string, s int, terms []time.Duration, scale float64, delay time.Duration) (Sweep, error) {
	k := r.cfg.keys(s)
	sw := Sweep{Name: name, S: s, Clients: r.cfg.Clients, Keys: k, Pairs: k * s, Scale: scale, DelayMS: ms(realAt(delay, scale))}
	var base *Point
	for _, t := range terms {
		pt, raw, err := r.point(ctx, &sw, t, realAt(delay, scale))
		if err != nil {
			return sw, err
		}
		if base == nil {
			sw.calibrate(raw, r.srv != nil)
			base = &pt
		}
		sw.predict(&pt, base)
		sw.Points = append(sw.Points, pt)
	}
	return sw, nil
}

// rawPoint is what a point measured that the calibration needs.
type rawPoint struct {
	readP50MS float64
	cpu       time.Duration
	messages  uint64 // every message the server received or sent
}

// point runs the workload at one term (paper time) and measures it, with
// delay (real) added to each packet each way.
func (r *runner) point(ctx context.Context, sw *Sweep, term, delay time.Duration) (Point, rawPoint, error) {
	cfg := r.cfg
	wt := realAt(term, sw.Scale)
	warm, window := cfg.windows(wt)
	r.progress.step(fmt.Sprintf("%s, term %v", sw.Name, term), warm+window)
	pt := Point{Sweep: sw.Name, TermPaperS: term.Seconds(), TermRealMS: ms(wt)}
	p, err := r.dialPool(ctx, sw.Clients, delay)
	if err != nil {
		return pt, rawPoint{}, err
	}
	defer p.close()

	prefix := fmt.Sprintf("%s%s/%s/", TermPrefix(wt), r.runID, strings.NewReplacer(" ", "", ",", "").Replace(sw.Name))
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	var measuring atomic.Bool
	recs := make([]recorder, sw.Pairs)
	var wg sync.WaitGroup
	rate, pWrite := (cfg.R+cfg.W)*sw.Scale, cfg.W/(cfg.R+cfg.W)
	for k := range sw.Keys {
		key := prefix + strconv.Itoa(k)
		for j := range sw.S {
			i := k*sw.S + j
			c := p.clients[i%sw.Clients]
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(i)<<32|uint64(term/time.Millisecond)))
			wg.Go(func() { generate(gctx, c, key, rng, rate, pWrite, &measuring, &recs[i]) })
		}
	}
	stats := func() (*client.Stats, error) {
		sctx, cancel := context.WithTimeout(ctx, opTimeout)
		defer cancel()
		return p.clients[0].ServerStats(sctx)
	}
	fail := func(err error) (Point, rawPoint, error) {
		stop()
		wg.Wait()
		return pt, rawPoint{}, fmt.Errorf("leasebench: %s, term %v: %w", sw.Name, term, err)
	}
	if err := sleep(ctx, warm); err != nil {
		return fail(err)
	}
	st0, err := stats()
	if err != nil {
		return fail(err)
	}
	r.log.Debug("measuring", "sweep", sw.Name, "term", term, "sessions", st0.Sessions, "leases", st0.Leases)
	cpu0, t0 := cpuTime(), time.Now()
	measuring.Store(true)
	err = sleep(ctx, window)
	measuring.Store(false)
	cpu1, t1 := cpuTime(), time.Now()
	if err != nil {
		return fail(err)
	}
	st1, err := stats()
	if err != nil {
		return fail(err)
	}
	stop()
	wg.Wait()

	var all recorder
	for _, rc := range recs {
		all.reads = append(all.reads, rc.reads...)
		all.writes = append(all.writes, rc.writes...)
		all.waits = append(all.waits, rc.waits...)
		all.cached += rc.cached
		all.errs += rc.errs
		if all.err == nil {
			all.err = rc.err
		}
	}
	if all.err != nil {
		r.log.Warn("operations failed", "sweep", sw.Name, "term", term, "errors", all.errs, "first", all.err)
	}
	secs := t1.Sub(t0).Seconds()
	pairSecs := secs * float64(sw.Pairs)
	pt.Seconds = secs
	pt.Reads, pt.Writes, pt.CachedReads, pt.Errors = len(all.reads), len(all.writes), all.cached, all.errs
	pt.RPaper = float64(pt.Reads) / pairSecs / sw.Scale
	pt.WPaper = float64(pt.Writes) / pairSecs / sw.Scale
	d := counters(st0, st1)
	pt.Messages = d.consistency()
	pt.MessagesPerS = float64(pt.Messages) / secs
	pt.LeaseOps = 2 * (d.in[protocol.TypeGet.String()] + d.renewed + d.invalidations)
	pt.LeaseOpsPerS = float64(pt.LeaseOps) / secs
	pt.Invalidations, pt.RenewedKeys = d.invalidations, d.renewed
	pt.RenewMessages = d.in[protocol.TypeRenew.String()]
	if pt.Reads > 0 {
		pt.LocalReads = float64(pt.CachedReads) / float64(pt.Reads)
	}
	pt.Read = summarize(all.reads)
	pt.Write = summarize(all.writes)
	pt.Wait = summarize(all.waits)
	var sumRead, sumWait time.Duration
	for _, d := range all.reads {
		sumRead += d
	}
	for _, d := range all.waits {
		sumWait += d
	}
	if n := len(all.reads) + len(all.waits); n > 0 {
		pt.AddedDelayMS = ms(sumRead+sumWait) / float64(n)
	}
	raw := rawPoint{readP50MS: pt.Read.P50MS, cpu: cpu1 - cpu0, messages: d.total}
	r.progress.done()
	return pt, raw, nil
}

// generate runs the Poisson reads and writes of one client on one key, at
// rate operations per second (real), each a write with probability pWrite,
// until ctx ends. It keeps to its schedule: an operation that runs late
// does not thin the later ones. Operations begun while measuring is set go
// to rec.
func generate(ctx context.Context, c *client.Client, key string, rng *rand.Rand, rate, pWrite float64, measuring *atomic.Bool, rec *recorder) {
	gap := func() time.Duration { return time.Duration(rng.ExpFloat64() / rate * float64(time.Second)) }
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	next := time.Now().Add(gap())
	var value []byte
	for n := 0; ; n++ {
		if d := time.Until(next); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		next = next.Add(gap())
		write := rng.Float64() < pWrite
		on := measuring.Load()
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		start := time.Now()
		var err error
		var cached bool
		var wr client.WriteResult
		if write {
			value = strconv.AppendInt(value[:0], int64(n), 10)
			_, err = c.Put(octx, key, value, client.Result(&wr))
		} else {
			var it client.Item
			it, err = c.Get(octx, key)
			cached = it.Cached
		}
		took := time.Since(start)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return // the point is over; the operation was cut short
		case !on:
		case err != nil:
			rec.errs++
			if rec.err == nil {
				rec.err = err
			}
		case write:
			rec.writes = append(rec.writes, took)
			rec.waits = append(rec.waits, wr.Waited)
		default:
			rec.reads = append(rec.reads, took)
			if cached {
				rec.cached++
			}
		}
	}
}

// delta is the change of the server's counters over a window.
type delta struct {
	in, out       map[string]uint64
	total         uint64 // every message in and out
	renewed       uint64 // keys whose lease a renewal extended
	invalidations uint64 // read leases asked to be dropped
}

func counters(a, b *client.Stats) delta {
	d := delta{in: map[string]uint64{}, out: map[string]uint64{},
		renewed: b.LeasesRenewed - a.LeasesRenewed, invalidations: b.InvalidationsSent - a.InvalidationsSent}
	for name, n := range b.MessagesIn {
		d.in[name] = n - a.MessagesIn[name]
		d.total += d.in[name]
	}
	for name, n := range b.MessagesOut {
		d.out[name] = n - a.MessagesOut[name]
		d.total += d.out[name]
	}
	return d
}

// consistency counts the consistency messages: reads that reached the
// server and their replies, renewals and theirs, invalidations and their
// acknowledgements, and releases with their replies. Writes and their
// replies are not consistency traffic: they go to the server with or
// without leases.
func (d delta) consistency() uint64 {
	in := d.in[protocol.TypeGet.String()] + d.in[protocol.TypeRenew.String()] + d.in[protocol.TypeAck.String()]
	out := d.out[protocol.TypeGetReply.String()] + d.out[protocol.TypeRenewReply.String()] + d.out[protocol.TypeInvalidate.String()]
	return in + out + 2*d.in[protocol.TypeRelease.String()]
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
