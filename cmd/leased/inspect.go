package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// inspection is what `leased inspect` prints, and its JSON form
// (--output json), which tests and scripts compare across the nodes of a
// cluster.
type inspection struct {
	Data     string `json:"data"`
	Database string `json:"database"`
	figures
	Leader     string `json:"leader"`
	LeaderAddr string `json:"leader_addr"`
	// Digest is store.Digest in hex: equal on every node that applied the
	// same commands.
	Digest string `json:"digest"`
}

// newInspectCmd builds `leased inspect`, which reads a stopped node's data
// folder and prints its applied state (see inspect).
func newInspectCmd(stderr io.Writer) *cobra.Command {
	var data, output string
	cmd := &cobra.Command{
		Use:   "inspect [--data DIR] [--output text|json]",
		Short: "Print the applied state of a stopped node's data folder",
		Long: `inspect opens the database of a data folder read-only and prints its applied
raft index, revision, last fencing token, number of keys, number of write
leases, lease horizon, the leader it recorded, and a digest: a SHA-256 of
the replicated state in key order (values with their versions, counters,
write leases, horizon and leader, but not the applied index). Nodes of a
cluster that applied the same log have the same digest.

The node must be stopped: inspect refuses a folder whose database a running
leased holds, and writes nothing to it. A single server's folder and a
cluster node's folder have the same layout.

Exit status: 0 when it printed the state; 1 when the folder cannot be read:
missing, held by a running leased, left open by a crash, or damaged (the
message says what to do); 2 for a bad command line.`,
		Example: `  leased inspect --data ./leased-data
  leased inspect --data ./n1 --output json`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			format := strings.ToLower(strings.TrimSpace(output))
			if format != "text" && format != "json" {
				return usagef("--output %q: want text or json", output)
			}
			if err := required("--data", data); err != nil {
				return err
			}
			log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			in, err := inspect(data, log)
			if err != nil {
				return err
			}
			return printInspection(cmd.OutOrStdout(), in, format)
		},
	}
	f := cmd.Flags()
	f.StringVar(&data, "data", layout.DefaultDir, "data folder of a stopped leased")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

// inspect opens the database under the data folder read-only and
// summarizes it. A database held by a running leased is refused with an
// error that says so.
func inspect(data string, log *slog.Logger) (inspection, error) {
	dbDir := filepath.Join(data, layout.DBDir)
	b, err := store.OpenReadOnly(dbDir, log)
	if err == nil {
		// Every table block and value must pass its checksum, and the
		// keys agree with the counters, as at a node's start.
		if err = b.Check(); err != nil {
			b.Close()
		}
	}
	if errors.Is(err, store.ErrDamaged) {
		return inspection{}, replica.DamagedDatabase(absPath(data), err)
	}
	if errors.Is(err, store.ErrLocked) {
		return inspection{}, fmt.Errorf("%w: stop the leased that serves from %s first; inspect reads only a stopped node's folder", err, absPath(data))
	}
	if errors.Is(err, store.ErrNotClosed) {
		return inspection{}, fmt.Errorf("%w: start leased on %s and stop it gracefully (it replays what the crash left), then inspect again", err, absPath(data))
	}
	if err != nil {
		return inspection{}, err
	}
	sum, err := b.Summarize()
	if cerr := b.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return inspection{}, fmt.Errorf("read %s: %w", dbDir, err)
	}
	st := sum.State
	return inspection{
		Data:       absPath(data),
		Database:   absPath(dbDir),
		figures:    figuresOf(sum),
		Leader:     st.Leader,
		LeaderAddr: st.LeaderAddr,
		Digest:     sum.Digest.String(),
	}, nil
}

// figures are what leased inspect, leased restore and leased snapshot
// status print of a state (store.Summary).
type figures struct {
	AppliedIndex uint64 `json:"applied_index"`
	Revision     uint64 `json:"revision"`
	FencingToken uint64 `json:"fencing_token"`
	Keys         int    `json:"keys"`
	DeletedKeys  int    `json:"deleted_keys"`
	WriteLeases  int    `json:"write_leases"`
	// LeaseHorizon is RFC 3339 with nanoseconds; empty if none was
	// recorded. HorizonSpan is how far ahead of its writing it lay.
	LeaseHorizon string `json:"lease_horizon"`
	HorizonSpan  string `json:"horizon_span"`
}

func figuresOf(sum store.Summary) figures {
	st := sum.State
	f := figures{AppliedIndex: sum.Applied, Revision: st.Revision, FencingToken: st.Fence,
		Keys: sum.Keys, DeletedKeys: sum.Deleted, WriteLeases: len(st.WriteLeases)}
	if !st.Horizon.IsZero() {
		f.LeaseHorizon = st.Horizon.UTC().Format(time.RFC3339Nano)
		f.HorizonSpan = st.Span.String()
	}
	return f
}

// printInspection prints in as text, one figure a line, or as one JSON
// object.
func printInspection(w io.Writer, in inspection, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(in)
	}
	horizon, leader := "none recorded", "none recorded"
	if in.LeaseHorizon != "" {
		horizon = fmt.Sprintf("%s (span %s)", in.LeaseHorizon, in.HorizonSpan)
	}
	if in.Leader != "" {
		leader = fmt.Sprintf("%s (clients at %s)", in.Leader, in.LeaderAddr)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range [][2]any{
		{"data", in.Data},
		{"database", in.Database},
		{"applied index", in.AppliedIndex},
		{"revision", in.Revision},
		{"fencing token", in.FencingToken},
		{"keys", fmt.Sprintf("%d (and %d deleted)", in.Keys, in.DeletedKeys)},
		{"write leases", in.WriteLeases},
		{"lease horizon", horizon},
		{"leader", leader},
		{"digest", in.Digest},
	} {
		fmt.Fprintf(tw, "%s:\t%v\n", row[0], row[1])
	}
	return tw.Flush()
}
