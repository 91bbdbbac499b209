package bench

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"
)

// Report is what a run measured, with the model's predictions beside it.
// Times are in milliseconds of real time, and terms in seconds of paper
// time (TermPaperS) and milliseconds of real time (TermRealMS), unless a
// name says otherwise.
type Report struct {
	Started    time.Time `json:"started"`
	Finished   time.Time `json:"finished"`
	GoVersion  string    `json:"go_version"`
	GOMAXPROCS int       `json:"gomaxprocs"`
	NumCPU     int       `json:"num_cpu"`
	Endpoint   string    `json:"endpoint,omitempty"`
	InProcess  bool      `json:"in_process"`
	// Scale is the time scale factor of the main sweeps and the
	// slow-holder experiment: rates ×Scale, terms ÷Scale. The added-delay
	// sweep has its own (Sweep.Scale).
	Scale float64 `json:"scale"`
	// RPaper and WPaper are the configured rates per client per key, in
	// paper time.
	RPaper    float64 `json:"r_paper"`
	WPaper    float64 `json:"w_paper"`
	EpsilonMS float64 `json:"epsilon_ms"` // the server's ε, real
	// Config is the run's configuration, normalized; its durations are in
	// nanoseconds.
	Config Config  `json:"config"`
	Sweeps []Sweep `json:"sweeps"`
	// Delay is the added-delay sweep, if one was run.
	Delay *Sweep      `json:"delay,omitempty"`
	Slow  []SlowPoint `json:"slow,omitempty"`
	// SlowViolations counts the writes with a slow holder that waited
	// longer than term + ε + margin.
	SlowViolations int `json:"slow_violations"`
	// Load holds the machine's load at the start and after each sweep and
	// experiment; empty where it cannot be read. Warnings names the busy
	// ones.
	Load []LoadSample `json:"load,omitempty"`
}

// Sweep is one sweep over terms, with its calibration.
type Sweep struct {
	Name    string  `json:"name"`
	S       int     `json:"s"`
	Clients int     `json:"clients"`
	Keys    int     `json:"keys"`
	Pairs   int     `json:"pairs"`    // client–key pairs: the model's N
	Scale   float64 `json:"scale"`    // time scale factor of the sweep
	DelayMS float64 `json:"delay_ms"` // added one-way delay, real
	// RoundTripMS is the median read at term 0: a round trip to the server.
	RoundTripMS float64 `json:"round_trip_ms"`
	// MProcMS is m_proc: the process's CPU time per message sent or
	// received at term 0. In process, that CPU also runs the workload, so
	// it is an upper bound.
	MProcMS float64 `json:"m_proc_ms"`
	// MPropMS is m_prop: the rest of the round trip, halved:
	// (RoundTripMS − 4·MProcMS)/2, and at least 0.
	MPropMS float64 `json:"m_prop_ms"`
	Points  []Point `json:"points"`
}

// Point is one term of a sweep.
type Point struct {
	Sweep      string  `json:"sweep"`
	TermPaperS float64 `json:"term_paper_s"`
	TermRealMS float64 `json:"term_real_ms"`
	Seconds    float64 `json:"seconds"` // the measuring window, real
	Reads      int     `json:"reads"`
	Writes     int     `json:"writes"`
	// CachedReads were answered from the client's cache.
	CachedReads int `json:"cached_reads"`
	Errors      int `json:"errors"`
	// RPaper and WPaper are the measured rates per client per key, in
	// paper time.
	RPaper float64 `json:"r_paper"`
	WPaper float64 `json:"w_paper"`
	// Messages are the consistency messages the server received and sent:
	// reads that reached it, renewals, invalidations, acknowledgements,
	// releases, and the replies of these.
	Messages     uint64  `json:"messages"`
	MessagesPerS float64 `json:"messages_per_s"`
	// RelLoad is MessagesPerS over the sweep's figure at term 0;
	// ModelRelLoad is L(t_S)/L(0).
	RelLoad      float64 `json:"rel_load"`
	ModelRelLoad float64 `json:"model_rel_load"`
	// LeaseOps counts consistency messages as if nothing were batched, in
	// the model's unit: two for each read that reached the server, each key
	// a renewal extended, and each invalidation.
	LeaseOps      uint64  `json:"lease_ops"`
	LeaseOpsPerS  float64 `json:"lease_ops_per_s"`
	RelLeaseOps   float64 `json:"rel_lease_ops"`
	Invalidations uint64  `json:"invalidations"`
	RenewMessages uint64  `json:"renew_messages"`
	RenewedKeys   uint64  `json:"renewed_keys"`
	// LocalReads is the fraction of reads answered from the cache;
	// ModelLocalReads is R·t_C/(1 + R·t_C).
	LocalReads      float64 `json:"local_reads"`
	ModelLocalReads float64 `json:"model_local_reads"`
	Read            Latency `json:"read"`
	// ModelReadMeanMS is the model's mean read: a round trip for the reads
	// that miss.
	ModelReadMeanMS float64 `json:"model_read_mean_ms"`
	Write           Latency `json:"write"`
	// Wait is how long the server held each write for holders, as it
	// reported; ModelApprovalMS is t_a.
	Wait            Latency `json:"wait"`
	ModelApprovalMS float64 `json:"model_approval_ms"`
	// AddedDelayMS is the delay leases add per operation: the mean of the
	// reads' latency and the writes' waits; ModelAddedDelayMS is D.
	AddedDelayMS      float64 `json:"added_delay_ms"`
	ModelAddedDelayMS float64 `json:"model_added_delay_ms"`
}

// Latency summarizes durations, in milliseconds.
type Latency struct {
	N      int     `json:"n"`
	P50MS  float64 `json:"p50_ms"`
	P99MS  float64 `json:"p99_ms"`
	MaxMS  float64 `json:"max_ms"`
	MeanMS float64 `json:"mean_ms"`
}

// SlowPoint is one term of the slow-holder experiment.
type SlowPoint struct {
	// Slow is true if the holder stopped answering.
	Slow       bool    `json:"slow"`
	TermPaperS float64 `json:"term_paper_s"`
	TermRealMS float64 `json:"term_real_ms"`
	EpsilonMS  float64 `json:"epsilon_ms"`
	// BoundMS is term + ε: no write may wait longer, beyond MarginMS.
	BoundMS     float64     `json:"bound_ms"`
	MarginMS    float64     `json:"margin_ms"`
	Writes      []SlowWrite `json:"writes"`
	Latency     Latency     `json:"latency"`
	WaitedMaxMS float64     `json:"waited_max_ms"`
	Violations  int         `json:"violations"`
}

// SlowWrite is one write of the slow-holder experiment.
type SlowWrite struct {
	OffsetMS  float64 `json:"offset_ms"`  // after the holder's read
	LatencyMS float64 `json:"latency_ms"` // as the writer saw it
	WaitedMS  float64 `json:"waited_ms"`  // for the holder, as the server reported
	Holders   int     `json:"holders"`
	Over      bool    `json:"over"` // waited beyond term + ε + margin
}

// summarize returns the percentiles of ds, which it sorts.
func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	// The nearest rank: the smallest value with at least q of them at or
	// below it.
	at := func(q float64) float64 { return ms(ds[max(0, int(math.Ceil(q*float64(len(ds))))-1)]) }
	return Latency{N: len(ds), P50MS: at(0.5), P99MS: at(0.99), MaxMS: ms(ds[len(ds)-1]), MeanMS: ms(sum) / float64(len(ds))}
}

// calibrate sets m_prop and m_proc from the sweep's term-0 point: every
// read is then a round trip, 2·m_prop + 4·m_proc. In process, each
// message is sent by one side and received by the other within the
// process, so it counts twice.
func (sw *Sweep) calibrate(raw rawPoint, inProcess bool) {
	events := raw.messages
	if inProcess {
		events *= 2
	}
	sw.RoundTripMS = raw.readP50MS
	if events > 0 {
		sw.MProcMS = ms(raw.cpu) / float64(events)
	}
	sw.MPropMS = max(0, (sw.RoundTripMS-4*sw.MProcMS)/2)
}

// model returns the model fed with the sweep's calibration and the
// point's measured rates, in real time. The client's ε is 0: leased adds
// ε to the lease on the server, and the client trusts the whole term from
// the moment it sent the read.
func (sw *Sweep) model(pt *Point) Model {
	return Model{
		N:     sw.Pairs,
		R:     pt.RPaper * sw.Scale,
		W:     pt.WPaper * sw.Scale,
		S:     sw.S,
		MProp: time.Duration(sw.MPropMS * float64(time.Millisecond)),
		MProc: time.Duration(sw.MProcMS * float64(time.Millisecond)),
	}
}

// predict fills in pt's relative figures and the model's predictions.
func (sw *Sweep) predict(pt *Point, base *Point) {
	m := sw.model(pt)
	t := time.Duration(pt.TermRealMS * float64(time.Millisecond))
	if base.MessagesPerS > 0 {
		pt.RelLoad = pt.MessagesPerS / base.MessagesPerS
	}
	if base.LeaseOpsPerS > 0 {
		pt.RelLeaseOps = pt.LeaseOpsPerS / base.LeaseOpsPerS
	}
	pt.ModelRelLoad = m.RelativeLoad(t)
	pt.ModelLocalReads = m.LocalReadFraction(t)
	pt.ModelReadMeanMS = ms(m.ReadDelay(t))
	pt.ModelApprovalMS = ms(m.ApprovalDelay())
	pt.ModelAddedDelayMS = ms(m.AddedDelay(t))
}

// WriteTable prints the report as tables.
func (rep *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	where := "in-process server"
	if !rep.InProcess {
		where = "server at " + rep.Endpoint
	}
	p("leasebench: %s, %s, GOMAXPROCS %d\n", where, rep.GoVersion, rep.GOMAXPROCS)
	p("time scale %g: rates ×%g, terms ÷%g (R·t unchanged); terms in paper time, latencies in real time\n",
		rep.Scale, rep.Scale, rep.Scale)
	if rep.Delay != nil && rep.Delay.Scale != rep.Scale {
		p("the added-delay sweep runs at time scale %g, so that its delay is %s real each way\n", rep.Delay.Scale, fmtMS(rep.Delay.DelayMS))
	}
	p("workload: R %.3g and W %.3g per second per client per key (paper time), Poisson; server ε %s (real)\n",
		rep.RPaper, rep.WPaper, fmtMS(rep.EpsilonMS))
	for _, sw := range rep.AllSweeps() {
		p("\n%s, time scale %g: %d clients, %d keys, %d client–key pairs; at term 0 a read takes %s: m_prop %s, m_proc %s\n",
			sw.Name, sw.Scale, sw.Clients, sw.Keys, sw.Pairs, fmtMS(sw.RoundTripMS), fmtMS(sw.MPropMS), fmtMS(sw.MProcMS))
		p("term\treal\tR\tW\tmsgs/s\trel.load\tmodel\tunbatched\tlocal reads\tmodel\tinval/s\tkeys/renew\t\n")
		for _, pt := range sw.Points {
			keysPerRenew := "-"
			if pt.RenewMessages > 0 {
				keysPerRenew = fmt.Sprintf("%.1f", float64(pt.RenewedKeys)/float64(pt.RenewMessages))
			}
			p("%gs\t%s\t%.3f\t%.3f\t%.0f\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t%.0f\t%s\t\n",
				pt.TermPaperS, fmtMS(pt.TermRealMS), pt.RPaper, pt.WPaper, pt.MessagesPerS,
				pt.RelLoad, pt.ModelRelLoad, pt.RelLeaseOps, pt.LocalReads, pt.ModelLocalReads,
				float64(pt.Invalidations)/pt.Seconds, keysPerRenew)
		}
		p("term\tread p50\tp99\tmax\tmean\tmodel\twrite p50\tp99\tmax\twait mean\tmodel t_a\tdelay/op\tmodel D\terrors\t\n")
		for _, pt := range sw.Points {
			p("%gs\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n",
				pt.TermPaperS, fmtMS(pt.Read.P50MS), fmtMS(pt.Read.P99MS), fmtMS(pt.Read.MaxMS),
				fmtMS(pt.Read.MeanMS), fmtMS(pt.ModelReadMeanMS),
				fmtMS(pt.Write.P50MS), fmtMS(pt.Write.P99MS), fmtMS(pt.Write.MaxMS),
				fmtMS(pt.Wait.MeanMS), fmtMS(pt.ModelApprovalMS),
				fmtMS(pt.AddedDelayMS), fmtMS(pt.ModelAddedDelayMS), pt.Errors)
		}
	}
	if len(rep.Slow) > 0 {
		p("\nwrites to a key another client holds, which answers or stops answering (waits as the server reported)\n")
		p("term\treal\tholder\twrites\tlatency p50\tmax\twaited max\tterm+ε\tover\t\n")
		for _, sp := range rep.Slow {
			holder := "answers"
			if sp.Slow {
				holder = "slow"
			}
			p("%gs\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\t\n", sp.TermPaperS, fmtMS(sp.TermRealMS), holder, len(sp.Writes),
				fmtMS(sp.Latency.P50MS), fmtMS(sp.Latency.MaxMS), fmtMS(sp.WaitedMaxMS), fmtMS(sp.BoundMS), sp.Violations)
		}
		p("writes that waited beyond term + ε + %s: %d\n", fmtMS(rep.Slow[0].MarginMS), rep.SlowViolations)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// Outside the table, so that the tab writer does not align them.
	for _, warning := range rep.Warnings() {
		if _, err := fmt.Fprintf(w, "\nWARNING: %s\n", warning); err != nil {
			return err
		}
	}
	return nil
}

// fmtMS formats milliseconds with three significant digits and a unit.
func fmtMS(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 0.001:
		return strconv.FormatFloat(v*1e6, 'f', 0, 64) + "ns"
	case v < 1:
		return strconv.FormatFloat(v*1e3, 'g', 3, 64) + "µs"
	case v < 1000:
		return strconv.FormatFloat(v, 'g', 3, 64) + "ms"
	}
	return strconv.FormatFloat(v/1000, 'g', 3, 64) + "s"
}

// Files are the names of the files WriteFiles writes.
const (
	FileJSON         = "leasebench.json"
	FilePointsCSV    = "points.csv"
	FileSlowCSV      = "slow-holder.csv"
	FileRelativeLoad = "relative-load.png"
	FileWriteLatency = "write-latency.png"
	FileAddedDelay   = "added-delay.png"
)

// AllSweeps returns the main sweeps and then the added-delay sweep, if any.
func (rep *Report) AllSweeps() []Sweep {
	sweeps := slices.Clone(rep.Sweeps)
	if rep.Delay != nil {
		sweeps = append(sweeps, *rep.Delay)
	}
	return sweeps
}

// Files returns the names of the files WriteFiles writes for rep.
func (rep *Report) Files() []string {
	files := []string{FileJSON, FilePointsCSV}
	if len(rep.Slow) > 0 {
		files = append(files, FileSlowCSV)
	}
	if len(rep.Sweeps) > 0 {
		files = append(files, FileRelativeLoad)
	}
	if len(rep.Slow) > 0 {
		files = append(files, FileWriteLatency)
	}
	if rep.Delay != nil {
		files = append(files, FileAddedDelay)
	}
	return files
}

// WriteFiles writes the report to dir, which it creates if needed: JSON,
// CSV of the points and of the slow-holder writes, and the PNG plots.
func (rep *Report) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("leasebench: output folder: %w", err)
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return fmt.Errorf("leasebench: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileJSON), append(js, '\n'), 0o644); err != nil {
		return fmt.Errorf("leasebench: %w", err)
	}
	if err := writeCSV(filepath.Join(dir, FilePointsCSV), rep.pointRows()); err != nil {
		return err
	}
	if len(rep.Slow) > 0 {
		if err := writeCSV(filepath.Join(dir, FileSlowCSV), rep.slowRows()); err != nil {
			return err
		}
	}
	return rep.plot(dir)
}

func (rep *Report) pointRows() [][]string {
	rows := [][]string{{"sweep", "s", "delay_ms", "term_paper_s", "term_real_ms", "seconds", "reads", "writes", "cached_reads", "errors",
		"r_paper", "w_paper", "messages", "messages_per_s", "rel_load", "model_rel_load", "lease_ops", "rel_lease_ops",
		"invalidations", "renew_messages", "renewed_keys", "local_reads", "model_local_reads",
		"read_p50_ms", "read_p99_ms", "read_max_ms", "read_mean_ms", "model_read_mean_ms",
		"write_p50_ms", "write_p99_ms", "write_max_ms", "wait_mean_ms", "model_approval_ms",
		"added_delay_ms", "model_added_delay_ms", "m_prop_ms", "m_proc_ms"}}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	i := strconv.Itoa
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	for _, sw := range rep.AllSweeps() {
		for _, pt := range sw.Points {
			rows = append(rows, []string{sw.Name, i(sw.S), f(sw.DelayMS), f(pt.TermPaperS), f(pt.TermRealMS), f(pt.Seconds),
				i(pt.Reads), i(pt.Writes), i(pt.CachedReads), i(pt.Errors), f(pt.RPaper), f(pt.WPaper),
				u(pt.Messages), f(pt.MessagesPerS), f(pt.RelLoad), f(pt.ModelRelLoad), u(pt.LeaseOps), f(pt.RelLeaseOps),
				u(pt.Invalidations), u(pt.RenewMessages), u(pt.RenewedKeys), f(pt.LocalReads), f(pt.ModelLocalReads),
				f(pt.Read.P50MS), f(pt.Read.P99MS), f(pt.Read.MaxMS), f(pt.Read.MeanMS), f(pt.ModelReadMeanMS),
				f(pt.Write.P50MS), f(pt.Write.P99MS), f(pt.Write.MaxMS), f(pt.Wait.MeanMS), f(pt.ModelApprovalMS),
				f(pt.AddedDelayMS), f(pt.ModelAddedDelayMS), f(sw.MPropMS), f(sw.MProcMS)})
		}
	}
	return rows
}

func (rep *Report) slowRows() [][]string {
	rows := [][]string{{"term_paper_s", "term_real_ms", "slow", "epsilon_ms", "bound_ms", "offset_ms", "latency_ms", "waited_ms", "holders", "over"}}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, sp := range rep.Slow {
		for _, w := range sp.Writes {
			rows = append(rows, []string{f(sp.TermPaperS), f(sp.TermRealMS), strconv.FormatBool(sp.Slow), f(sp.EpsilonMS), f(sp.BoundMS),
				f(w.OffsetMS), f(w.LatencyMS), f(w.WaitedMS), strconv.Itoa(w.Holders), strconv.FormatBool(w.Over)})
		}
	}
	return rows
}

func writeCSV(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("leasebench: %w", err)
	}
	w := csv.NewWriter(f)
	w.WriteAll(rows)
	if err := w.Error(); err != nil {
		f.Close()
		return fmt.Errorf("leasebench: %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("leasebench: %s: %w", path, err)
	}
	return nil
}
