// Command leasebench runs leased under Gray and Cheriton's workload and
// prints what it measures beside their model: consistency load against the
// lease term, local reads, read and write latency, writes held up by a slow
// holder, and the delay leases add on a slow network. Its logic is package
// bench; see docs/BENCHMARKS.md.
//
//	leasebench                   # the quick run, about 70 s, in-process server
//	leasebench --full            # S = 1, 10, 20, 40 over eleven terms, about 6 min
//	leasebench --endpoint 127.0.0.1:7400 --cacert leased-data/tls/ca.pem
//	leasebench --server-flags    # the leased flags an --endpoint needs
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/leased/leased/bench"
	"github.com/leased/leased/internal/layout"
)

// Exit statuses, documented in the command's help.
const (
	exitOK          = 0
	exitError       = 1
	exitUsage       = 2
	exitViolation   = 3 // a write waited beyond term + ε + margin
	exitInterrupted = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := execute(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// usageError is a bad command line.
type usageError struct{ error }

// options are the flags that are not fields of bench.Config.
type options struct {
	full        bool
	out         string
	data        string
	serverFlags bool
	progress    bool
	verbose     bool
}

// execute runs leasebench with args and returns its exit status.
func execute(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	cmd := newCommand(ctx, stdout, stderr, getenv)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	err := cmd.Execute()
	var ue usageError
	var ve violationError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "leasebench: %v\nRun 'leasebench --help' for usage.\n", err)
		return exitUsage
	case errors.As(err, &ve):
		fmt.Fprintf(stderr, "leasebench: %v\n", err)
		return exitViolation
	case ctx.Err() != nil:
		fmt.Fprintln(stderr, "leasebench: interrupted")
		return exitInterrupted
	}
	fmt.Fprintf(stderr, "leasebench: %v\n", err)
	return exitError
}

// violationError reports measurements that break leased's promises.
type violationError struct{ msg string }

func (e violationError) Error() string { return e.msg }

func newCommand(ctx context.Context, stdout, stderr io.Writer, getenv func(string) string) *cobra.Command {
	cfg := bench.Quick()
	var o options
	cmd := &cobra.Command{
		Use:   "leasebench",
		Short: "Measure leased against Gray and Cheriton's lease model",
		Long: `leasebench runs leased under Gray and Cheriton's workload: N clients, K keys each
shared by S clients, Poisson reads and writes at R and W per second per client
per key. It sweeps the lease term and prints, for each term, the consistency
messages relative to term 0, the fraction of reads served locally, and read and
write latency, each beside the model's prediction. It then measures writes to a
key whose holder stops answering, and the sweep again with added network delay.

Rates and terms are in the paper's time; a time scale factor (--scale) multiplies
rates and divides terms, leaving R·t unchanged, so the paper's sweep of terms up
to 100 s runs in minutes.

By default it starts a server in the process. With --endpoint it uses a running
leased, which must give leasebench's key prefixes their terms: --server-flags
prints the flags to start it with.

It writes a table to the terminal, and leasebench.json, points.csv,
slow-holder.csv and PNG plots to --out.

Exit status: 0 on success; 1 when the run fails or an operation of the
workload failed; 2 for a bad command line; 3 when a write waited longer than
term + ε + margin for a holder that stopped answering, which breaks a promise
of leased; 130 when interrupted.`,
		Example: `  leasebench
  leasebench --full --out results
  leasebench --sharing 1,10,40 --terms 0,1s,10s,30s --scale 50
  leased $(leasebench --server-flags) &
  leasebench --endpoint 127.0.0.1:7400`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError{fmt.Errorf("leasebench takes no arguments, only flags; got %q", args)}
			}
			return nil
		},
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.full {
				cfg = withChanged(bench.Full(), cfg, cmd)
			}
			if len(cfg.Sharing) == 1 && cfg.Sharing[0] == 0 {
				cfg.Sharing = nil
			}
			return run(ctx, cfg, o, stdout, stderr, getenv)
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	cmd.AddCommand(fsCommand(ctx, stdout, stderr), fsMountCommand(ctx, stdout, stderr))
	f := cmd.Flags()
	f.BoolVar(&o.full, "full", false, "the full sweep: S = 1, 10, 20, 40 over eleven terms, longer measurements (other flags still apply)")
	f.StringVar(&o.out, "out", "leasebench-out", "folder for the JSON, CSV and PNG files (empty: none)")
	f.StringVar(&cfg.Endpoint, "endpoint", "", "address of a running leased (default: a server in this process)")
	f.StringVar(&cfg.CAFile, "cacert", "", "CA of the endpoint's certificate (default: $"+layout.EnvCACert+", then <--data>/tls/ca.pem for a local endpoint)")
	f.StringVar(&o.data, "data", layout.DefaultDir, "the endpoint's data folder, to find its CA for a local endpoint")
	f.BoolVar(&o.serverFlags, "server-flags", false, "print the leased flags that an --endpoint needs for this run's terms, and exit")
	f.Float64Var(&cfg.Scale, "scale", cfg.Scale, "time scale factor: rates ×scale, terms ÷scale")
	f.IntVar(&cfg.Clients, "clients", cfg.Clients, "N, clients (raised to the largest S)")
	f.IntVar(&cfg.Keys, "keys", cfg.Keys, "K, keys per sweep (0: enough for about --pairs client–key pairs)")
	f.IntVar(&cfg.Pairs, "pairs", cfg.Pairs, "client–key pairs per sweep when --keys is 0")
	f.Float64Var(&cfg.R, "reads", cfg.R, "R, reads per second per client per key, paper time")
	f.Float64Var(&cfg.W, "writes", cfg.W, "W, writes per second per client per key, paper time")
	f.IntSliceVar(&cfg.Sharing, "sharing", cfg.Sharing, "S of each sweep: clients sharing a key (0: no sweep)")
	f.Var((*durations)(&cfg.Terms), "terms", "lease terms to sweep, paper time (0 is always run)")
	f.DurationVar(&cfg.Epsilon, "epsilon", cfg.Epsilon, "clock allowance ε of the in-process server, paper time")
	f.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "least warm-up per term, real time (at least 2 terms)")
	f.DurationVar(&cfg.Measure, "measure", cfg.Measure, "least measuring time per term, real time (at least 5 terms)")
	f.DurationVar(&cfg.Delay, "delay", cfg.Delay, "one-way network delay of the added-delay sweep, paper time")
	f.Var((*durations)(&cfg.DelayTerms), "delay-terms", "terms of the added-delay sweep, paper time (none: no such sweep)")
	f.Float64Var(&cfg.DelayScale, "delay-scale", cfg.DelayScale, "time scale factor of the added-delay sweep (its real delay should be a few ms)")
	f.Var((*durations)(&cfg.SlowTerms), "slow-terms", "terms of the slow-holder experiment, paper time (none: no such experiment)")
	f.IntVar(&cfg.SlowWrites, "slow-writes", cfg.SlowWrites, "writes per term in the slow-holder experiment, each way")
	f.DurationVar(&cfg.Margin, "margin", cfg.Margin, "scheduling slack, real time, beyond term + ε for a write with a slow holder")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the workload's random choices")
	f.BoolVar(&o.progress, "progress", isTerminal(stderr), "show a progress bar on stderr (default: if stderr is a terminal)")
	f.BoolVarP(&o.verbose, "verbose", "v", false, "log the server's, the clients' and the run's messages to stderr")
	return cmd
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// withChanged returns base with the fields of the flags the user set
// taken from set.
func withChanged(base, set bench.Config, cmd *cobra.Command) bench.Config {
	f := cmd.Flags()
	for name, copyField := range configFlags(&base, &set) {
		if f.Changed(name) {
			copyField()
		}
	}
	return base
}

// configFlags maps the name of each flag bound to a bench.Config field to
// a function that copies that field from set to base.
func configFlags(base, set *bench.Config) map[string]func() {
	return map[string]func(){
		"endpoint":    func() { base.Endpoint = set.Endpoint },
		"cacert":      func() { base.CAFile = set.CAFile },
		"scale":       func() { base.Scale = set.Scale },
		"clients":     func() { base.Clients = set.Clients },
		"keys":        func() { base.Keys = set.Keys },
		"pairs":       func() { base.Pairs = set.Pairs },
		"reads":       func() { base.R = set.R },
		"writes":      func() { base.W = set.W },
		"sharing":     func() { base.Sharing = set.Sharing },
		"terms":       func() { base.Terms = set.Terms },
		"epsilon":     func() { base.Epsilon = set.Epsilon },
		"warmup":      func() { base.Warmup = set.Warmup },
		"measure":     func() { base.Measure = set.Measure },
		"delay":       func() { base.Delay = set.Delay },
		"delay-terms": func() { base.DelayTerms = set.DelayTerms },
		"delay-scale": func() { base.DelayScale = set.DelayScale },
		"slow-terms":  func() { base.SlowTerms = set.SlowTerms },
		"slow-writes": func() { base.SlowWrites = set.SlowWrites },
		"margin":      func() { base.Margin = set.Margin },
		"seed":        func() { base.Seed = set.Seed },
	}
}

func run(ctx context.Context, cfg bench.Config, o options, stdout, stderr io.Writer, getenv func(string) string) error {
	if o.serverFlags {
		flags, err := bench.ServerFlags(cfg)
		if err != nil {
			return usageError{err}
		}
		fmt.Fprintln(stdout, strings.Join(flags, " "))
		return nil
	}
	if cfg.Endpoint != "" {
		ca, local := layout.FindCA(cfg.Endpoint, o.data, cfg.CAFile, getenv(layout.EnvCACert))
		if ca == "" {
			where := "the server's <data>/tls/ca.pem"
			if local {
				where = "run leasebench from the folder that holds " + o.data
			}
			return usageError{fmt.Errorf("no CA certificate for %s: pass --cacert (%s), or set %s", cfg.Endpoint, where, layout.EnvCACert)}
		}
		cfg.CAFile = ca
	}
	cfg.OutDir = o.out
	if o.progress {
		cfg.Progress = stderr
	}
	level := slog.LevelError
	if o.verbose {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	// Warn before the run, so that one can stop it and run it later; the
	// report repeats the warnings of every busy moment at its end.
	if s, ok := bench.CheckLoad(cfg.LoadAverage, cfg.CPUs); ok && s.Busy {
		fmt.Fprintf(stderr, "leasebench: warning: %s\n", s.Warning())
	}
	rep, err := bench.Run(ctx, cfg)
	var ce *bench.ConfigError
	switch {
	case errors.As(err, &ce):
		return usageError{ce}
	case rep == nil:
		return err
	}
	// The report is whole even if its files could not be written.
	if terr := rep.WriteTable(stdout); terr != nil {
		return terr
	}
	if err != nil {
		return err
	}
	if o.out != "" {
		fmt.Fprintf(stdout, "\nfiles in %s: %s\n", o.out, strings.Join(rep.Files(), ", "))
	}
	for _, warning := range rep.Warnings() {
		fmt.Fprintf(stderr, "leasebench: warning: %s\n", warning)
	}
	var errs int
	for _, sw := range rep.AllSweeps() {
		for _, pt := range sw.Points {
			errs += pt.Errors
		}
	}
	switch {
	case rep.SlowViolations > 0:
		return violationError{fmt.Sprintf("%d writes waited longer than term + ε + margin for a slow holder", rep.SlowViolations)}
	case errs > 0:
		return fmt.Errorf("%d operations failed (run with -v to see why)", errs)
	}
	return nil
}

// durations is a flag of comma-separated durations; "none" or "" is the
// empty list.
type durations []time.Duration

func (d *durations) String() string {
	if len(*d) == 0 {
		return "none"
	}
	parts := make([]string, len(*d))
	for i, t := range *d {
		parts[i] = t.String()
	}
	return strings.Join(parts, ",")
}

func (d *durations) Set(s string) error {
	*d = nil
	if s = strings.TrimSpace(s); s == "" || s == "none" {
		return nil
	}
	for _, part := range strings.Split(s, ",") {
		t, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return err
		}
		*d = append(*d, t)
	}
	return nil
}

func (d *durations) Type() string { return "durations" }
