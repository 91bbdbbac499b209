package bench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"time"
)

// Config describes a leasebench run. Rates and the durations marked "paper
// time" are in the model's time; the run multiplies rates by Scale and
// divides those durations by it, which leaves R·t unchanged. Durations
// marked "real" are wall-clock time.
type Config struct {
	// Endpoint is the address of a running leased. Empty means an
	// in-process server in a temporary folder, configured for the run.
	Endpoint string
	// CAFile is the CA of Endpoint's certificate. Empty means the default
	// data folder's CA, as leasectl finds it.
	CAFile string

	// Scale is the time scale factor: rates ×Scale, terms ÷Scale.
	Scale float64
	// Clients is N. It is raised to the largest S if it is smaller.
	Clients int
	// Keys is K, the number of keys of a sweep. 0 means ceil(Pairs/S), so
	// that every sweep has about Pairs client–key pairs and the same load.
	Keys int
	// Pairs is the number of client–key pairs a sweep aims at when Keys is 0.
	Pairs int
	// R and W are the reads and writes per second per client, per key, in
	// paper time (Poisson).
	R, W float64
	// Sharing lists the S of the main sweeps: each key is shared by S
	// clients.
	Sharing []int
	// Terms are the lease terms of the sweeps, in paper time. Term 0, the
	// baseline of the relative load, is always run first.
	Terms []time.Duration
	// Epsilon is the in-process server's clock allowance ε, in paper time.
	// With Endpoint the server's own ε is used.
	Epsilon time.Duration
	// Warmup and Measure are the least warm-up and measuring time of each
	// point, real. Each is also at least 2 and 5 terms.
	Warmup, Measure time.Duration

	// Delay is the one-way delay of the added-delay sweep, in paper time,
	// added to every packet in both directions. DelayTerms are its terms
	// (paper time), run with S = 1; none means no such sweep. DelayScale
	// is that sweep's time scale factor: lower than Scale, so that the
	// real delay (Delay/DelayScale) is a few milliseconds, well above the
	// timer resolution (about 1 ms when a process idles).
	Delay      time.Duration
	DelayTerms []time.Duration
	DelayScale float64

	// SlowTerms are the terms (paper time) of the slow-holder experiment,
	// and SlowWrites the writes at each, with a holder that stops answering
	// and again with one that answers. None means no such experiment.
	SlowTerms  []time.Duration
	SlowWrites int
	// Margin is the scheduling slack, real, that a write with a slow holder
	// may wait beyond term + ε before it counts as a violation.
	Margin time.Duration

	// OutDir receives the CSV, JSON and PNG files. Empty means none.
	OutDir string `json:"-"`
	// Progress, if set, shows a progress bar there.
	Progress io.Writer `json:"-"`
	// Seed seeds the workload's random choices.
	Seed uint64
	// Logger receives the run's logs. Nil means none.
	Logger *slog.Logger `json:"-"`
	// LoadAverage reads the machine's load average, which the run samples
	// at its start and after each sweep and experiment to warn when the
	// machine is busy (Report.Warnings). Nil means ReadLoadAverage.
	LoadAverage LoadReader `json:"-"`
	// CPUs is the number of cores the load average is compared with. 0
	// means runtime.NumCPU.
	CPUs int `json:"-"`
}

// Quick returns the default run: S = 1 and 10 over the paper's terms,
// the slow-holder experiment and the added-delay sweep, in about 70 s.
func Quick() Config {
	s := time.Second
	return Config{
		Scale:      100,
		Clients:    10,
		Pairs:      50,
		R:          0.864,
		W:          0.039,
		Sharing:    []int{1, 10},
		Terms:      []time.Duration{0, s / 10, s, 10 * s, 30 * s, 100 * s},
		Epsilon:    100 * time.Millisecond,
		Warmup:     300 * time.Millisecond,
		Measure:    2 * time.Second,
		Delay:      50 * time.Millisecond,
		DelayTerms: []time.Duration{0, s, 3 * s, 10 * s, 30 * s},
		DelayScale: 20,
		SlowTerms:  []time.Duration{s, 10 * s, 30 * s, 100 * s},
		SlowWrites: 5,
		Margin:     10 * time.Millisecond,
		Seed:       1,
	}
}

// Full returns the full sweep: S = 1, 10, 20 and 40 over eleven terms, with
// longer measurements. It takes about six minutes.
func Full() Config {
	c := Quick()
	s := time.Second
	c.Clients = 40
	c.Sharing = []int{1, 10, 20, 40}
	c.Terms = []time.Duration{0, s / 10, s / 2, s, 2 * s, 5 * s, 10 * s, 20 * s, 30 * s, 50 * s, 100 * s}
	c.Measure = 5 * time.Second
	c.DelayTerms = []time.Duration{0, s / 2, s, 2 * s, 3 * s, 5 * s, 10 * s, 20 * s, 30 * s}
	c.SlowTerms = []time.Duration{s, 2 * s, 5 * s, 10 * s, 20 * s, 30 * s, 50 * s, 100 * s}
	c.SlowWrites = 10
	return c
}

// validate checks c and returns it normalized: sorted terms starting at
// 0, and N at least the largest S.
func (c Config) validate() (Config, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Scale <= 0 {
		bad("scale %v: must be positive", c.Scale)
	}
	if len(c.DelayTerms) > 0 && c.DelayScale <= 0 {
		bad("delay scale %v: must be positive", c.DelayScale)
	}
	if c.Clients <= 0 {
		bad("clients %d: must be positive", c.Clients)
	}
	if c.Keys < 0 || (c.Keys == 0 && c.Pairs <= 0) {
		bad("keys %d and pairs %d: set a positive number of keys, or of pairs", c.Keys, c.Pairs)
	}
	if c.R <= 0 || c.W < 0 {
		bad("rates R %v and W %v: R must be positive and W not negative", c.R, c.W)
	}
	if len(c.Sharing) == 0 && len(c.SlowTerms) == 0 && len(c.DelayTerms) == 0 {
		bad("nothing to run: no sharing, slow-holder terms or delay terms")
	}
	for _, s := range c.Sharing {
		if s <= 0 {
			bad("sharing %d: must be positive", s)
		}
		c.Clients = max(c.Clients, s)
	}
	if len(c.Sharing) > 0 && len(c.Terms) == 0 {
		bad("no terms to sweep")
	}
	for _, ts := range [][]time.Duration{c.Terms, c.DelayTerms, c.SlowTerms} {
		for _, t := range ts {
			if t < 0 {
				bad("term %v: must not be negative", t)
			}
		}
	}
	if c.Epsilon <= 0 {
		bad("epsilon %v: must be positive", c.Epsilon)
	}
	if c.Measure <= 0 || c.Warmup < 0 {
		bad("measure %v and warm-up %v: measure must be positive, warm-up not negative", c.Measure, c.Warmup)
	}
	if len(c.DelayTerms) > 0 && c.Delay <= 0 {
		bad("delay %v: must be positive for the added-delay sweep", c.Delay)
	}
	if len(c.SlowTerms) > 0 && c.SlowWrites <= 0 {
		bad("slow writes %d: must be positive for the slow-holder experiment", c.SlowWrites)
	}
	for _, t := range c.SlowTerms {
		if t == 0 {
			bad("slow-holder term 0: a holder needs a lease to be slow with")
		}
	}
	if c.Margin < 0 {
		bad("margin %v: must not be negative", c.Margin)
	}
	if c.CPUs < 0 {
		bad("cpus %d: must not be negative (0: the machine's)", c.CPUs)
	}
	if c.LoadAverage == nil {
		c.LoadAverage = ReadLoadAverage
	}
	if c.CPUs == 0 {
		c.CPUs = runtime.NumCPU()
	}
	c.Terms = withZero(c.Terms)
	c.DelayTerms = withZero(c.DelayTerms)
	c.SlowTerms = sortedUnique(c.SlowTerms)
	if len(errs) > 0 {
		return c, &ConfigError{errors.Join(errs...)}
	}
	return c, nil
}

// ConfigError is Run's error for a Config it cannot run.
type ConfigError struct{ err error }

func (e *ConfigError) Error() string { return e.err.Error() }

// Unwrap returns the problems found, joined.
func (e *ConfigError) Unwrap() error { return e.err }

// withZero returns terms sorted, without repeats, and starting with 0, or
// nil if terms is empty.
func withZero(terms []time.Duration) []time.Duration {
	if len(terms) == 0 {
		return nil
	}
	return sortedUnique(append([]time.Duration{0}, terms...))
}

func sortedUnique(ts []time.Duration) []time.Duration {
	ts = slices.Clone(ts)
	slices.Sort(ts)
	return slices.Compact(ts)
}

// wall converts a duration of paper time to real time at Scale.
func (c Config) wall(d time.Duration) time.Duration { return realAt(d, c.Scale) }

// realAt converts a duration of paper time to real time at scale.
func realAt(d time.Duration, scale float64) time.Duration {
	return time.Duration(float64(d) / scale)
}

// windows returns the warm-up and the measuring window of a point whose
// term is wt (real time): at least 2 and 5 terms.
func (c Config) windows(wt time.Duration) (warm, measure time.Duration) {
	return max(c.Warmup, 2*wt), max(c.Measure, 5*wt)
}

// keys returns K for sharing s.
func (c Config) keys(s int) int {
	if c.Keys > 0 {
		return c.Keys
	}
	return (c.Pairs + s - 1) / s
}
