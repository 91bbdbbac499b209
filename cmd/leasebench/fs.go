package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/bench"
)

// fsCommand is `leasebench fs`, the leasefs scenario.
func fsCommand(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	cfg := bench.QuickFS()
	out := "leasebench-out"
	verbose := false
	cmd := &cobra.Command{
		Use:   "fs",
		Short: "Measure leasefs, the FUSE file system on leased, on a real workload",
		Long: `leasebench fs mounts leasefs several times on a leased in this process (it
needs root and /dev/fuse), unpacks a tree with tar in one mount, and then runs
find -ls over it again and again in the other mounts while the first changes a
few of its files (chmod, append, replace). It does so at each lease term, from 0
(no caching), and again with the kernel keeping entries and attributes for a
fixed time instead (--ttls: a cache by time, as NFS keeps attributes, whose
stale answers it counts: right after each change returns, every reading mount
stats the changed file).

For each point it prints the unpack time, the time of a find pass, the latency
of the writer's changes, leased's messages per second, and the consistency
traffic relative to term 0 beside Gray and Cheriton's model, whose rates it
takes from term 0. It writes fs.json, fs-points.csv and PNG plots to --out.

Exit status: 0 on success; 1 when the run fails or an operation failed; 2 for a
bad command line or a machine without FUSE; 3 when a mount with leases gave a
stale answer, which breaks leasefs's promise; 130 when interrupted.`,
		Example: `  sudo leasebench fs
  sudo leasebench fs --files 500 --terms 0,1s,10s --ttls 1s,5s --measure 5s`,
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(*cobra.Command, []string) error {
			exe, err := os.Executable()
			if err != nil {
				return err
			}
			cfg.Mounter = []string{exe, "fs-mount"}
			cfg.OutDir = out
			cfg.Progress = stderr
			level := slog.LevelError
			if verbose {
				level = slog.LevelDebug
			}
			cfg.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
			rep, err := bench.RunFS(ctx, cfg)
			var ce *bench.ConfigError
			switch {
			case errors.As(err, &ce):
				return usageError{ce}
			case rep == nil:
				return err
			}
			if terr := rep.WriteTable(stdout); terr != nil {
				return terr
			}
			if err != nil {
				return err
			}
			if out != "" {
				fmt.Fprintf(stdout, "\nfiles in %s: %s\n", out, strings.Join([]string{bench.FileFSJSON, bench.FileFSCSV, bench.FileFSLoad, bench.FileFSFind, bench.FileFSChange}, ", "))
			}
			errs, stale := 0, 0
			for _, p := range rep.Points {
				errs += p.Errors
				if p.Mode == "lease" {
					stale += p.Stale
				}
			}
			switch {
			case stale > 0:
				return violationError{fmt.Sprintf("%d stale answers from mounts with leases", stale)}
			case errs > 0:
				return fmt.Errorf("%d operations failed (run with -v to see why)", errs)
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := cmd.Flags()
	f.IntVar(&cfg.Files, "files", cfg.Files, "paths in the tree")
	f.IntVar(&cfg.Readers, "readers", cfg.Readers, "mounts that run find over the tree (one more writes)")
	f.Var((*durations)(&cfg.Terms), "terms", "lease terms, real time (0 is always run)")
	f.Var((*durations)(&cfg.TTLs), "ttls", "TTLs of the kernel's cache in the runs without leases (none: no such run)")
	f.DurationVar(&cfg.Measure, "measure", cfg.Measure, "measuring time of each point")
	f.DurationVar(&cfg.ChangeEvery, "change-every", cfg.ChangeEvery, "the writer's pace")
	f.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the tree and of the writer's choices")
	f.StringVar(&out, "out", out, "folder for the JSON, CSV and PNG files (empty: none)")
	f.BoolVarP(&verbose, "verbose", "v", false, "log the server's and the mounts' messages to stderr")
	return cmd
}

// fsMountCommand is the hidden `leasebench fs-mount`, which serves one
// mount of `leasebench fs` in a process of its own until SIGTERM.
func fsMountCommand(ctx context.Context, stdout, stderr io.Writer) *cobra.Command {
	var dir, endpoint, ca, data, prefix string
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:           "fs-mount",
		Short:         "Serve one mount of leasebench fs (for leasebench fs itself)",
		Hidden:        true,
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(*cobra.Command, []string) error {
			log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			return bench.MountMain(ctx, dir, endpoint, ca, data, prefix, ttl, stdout, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "mount", "", "the folder to mount on")
	f.StringVar(&endpoint, "endpoint", "", "leased's address")
	f.StringVar(&ca, "cacert", "", "leased's CA")
	f.StringVar(&data, "data", "", "the shared data folder")
	f.StringVar(&prefix, "prefix", "", "the file system's prefix")
	f.DurationVar(&ttl, "kernel-ttl", 0, "the kernel's TTL cache, 0 for leases")
	return cmd
}
