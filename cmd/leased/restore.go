package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/leased/leased/internal/human"
	"github.com/leased/leased/server"
	"github.com/leased/leased/store"
)

// defaultBump is how far leased restore raises the revision and
// fencing-token counters by default: past any number of writes and write
// leases the old cluster may have made after the snapshot, so that no
// version or fencing token it handed out is handed out again.
const defaultBump = 1_000_000_000

// snapshotSummary is what leased restore and leased snapshot status print,
// and its JSON form (--output json).
type snapshotSummary struct {
	File string `json:"file"`
	Data string `json:"data,omitempty"` // restore: the new data folder
	figures
	Bytes  int64  `json:"bytes,omitempty"` // status: the file's length
	Digest string `json:"digest"`
}

func summaryOf(file string, sum store.Summary, n int64) snapshotSummary {
	return snapshotSummary{File: absPath(file), figures: figuresOf(sum), Bytes: n, Digest: sum.Digest.String()}
}

// print prints s as text, one figure a line, or as one JSON object.
func (s snapshotSummary) print(w io.Writer, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(s)
	}
	horizon := "none recorded"
	if s.LeaseHorizon != "" {
		horizon = fmt.Sprintf("%s (span %s)", s.LeaseHorizon, s.HorizonSpan)
	}
	rows := [][2]any{{"file", s.File}}
	if s.Data != "" {
		rows = append(rows, [2]any{"data", s.Data})
	}
	rows = append(rows, [][2]any{
		{"applied index", s.AppliedIndex},
		{"revision", s.Revision},
		{"fencing token", s.FencingToken},
		{"keys", fmt.Sprintf("%d (and %d deleted)", s.Keys, s.DeletedKeys)},
		{"write leases", s.WriteLeases},
		{"lease horizon", horizon},
	}...)
	if s.Bytes > 0 {
		rows = append(rows, [2]any{"length", human.Bytes(s.Bytes)})
	}
	rows = append(rows, [2]any{"digest", s.Digest})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintf(tw, "%s:\t%v\n", row[0], row[1])
	}
	return tw.Flush()
}

// minProgressBytes is the smallest file whose reading shows a progress bar.
const minProgressBytes = 1 << 20

// readProgress returns f as a reader that shows, on stderr if it is a
// terminal, a progress bar of what has been read of f, described by what;
// and a function that ends the bar. For a small file, or a stderr that is
// not a terminal (a pipe, a log), it returns f and a function that does
// nothing: only a person watching gets the bar.
func readProgress(stderr io.Writer, f *os.File, what string) (io.Reader, func()) {
	if !human.IsTerminal(stderr) {
		return f, func() {}
	}
	st, err := f.Stat()
	if err != nil || st.Size() < minProgressBytes {
		return f, func() {}
	}
	bar := human.NewBar(stderr, st.Size(), what)
	r := progressbar.NewReader(f, bar)
	return &r, func() { bar.Finish() }
}

// outputFormat checks an --output value.
func outputFormat(output string) (string, error) {
	format := strings.ToLower(strings.TrimSpace(output))
	if format != "text" && format != "json" {
		return "", usagef("--output %q: want text or json", output)
	}
	return format, nil
}

// newSnapshotCmd builds `leased snapshot status`, which checks a snapshot
// file and prints what it holds.
func newSnapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Check a snapshot file that leasectl snapshot save wrote",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return usagef("%s needs a subcommand: status", cmd.CommandPath())
		},
	}
	var output string
	status := &cobra.Command{
		Use:   "status FILE [--output text|json]",
		Short: "Check a snapshot file and print what it holds",
		Long: `status reads a whole snapshot file, checks it (a file cut short or changed is
refused as a corrupt snapshot, exit status 1), and prints its applied index,
revision, last fencing token, number of keys, write leases, lease horizon,
length (in binary units and exactly; --output json: "bytes", exact), and
digest: the same digest that leased inspect prints of a data folder restored
from it, before that node changes anything. A bad command line is exit
status 2. On a terminal, a progress bar runs on stderr while it reads a file
of 1 MiB or more.`,
		Example: `  leased snapshot status backup.snap
  leased snapshot status backup.snap --output json`,
		Args: oneSnapshotFile,
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := outputFormat(output)
			if err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			r, done := readProgress(cmd.ErrOrStderr(), f, "checking")
			sum, n, err := store.ReadSnapshot(r)
			done()
			if err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			return summaryOf(args[0], sum, n).print(cmd.OutOrStdout(), format)
		},
	}
	status.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.AddCommand(status)
	return cmd
}

// newRestoreCmd builds `leased restore`, which makes a new node's data
// folder from a snapshot file.
func newRestoreCmd(stderr io.Writer) *cobra.Command {
	var data, output, name, initialCluster string
	var bump uint64
	cmd := &cobra.Command{
		Use:   "restore FILE --data DIR [--name NAME --initial-cluster NAME=HOST:PORT,...] [--bump-revision N]",
		Short: "Make a new node's data folder from a snapshot file",
		Long: `restore makes DIR, which must be missing or empty, the data folder of a new
leased from a snapshot that leasectl snapshot save wrote: every key with its
value and version, the write leases and the lease horizon. It checks the
whole file first: one cut short or changed is refused as a corrupt snapshot,
and DIR is left as it was.

Without --initial-cluster, DIR is for a server alone: start it with
leased --data DIR. For a node of a new cluster, give its --name and the new
cluster's --initial-cluster, and restore every member from the same file
with the same --initial-cluster and --bump-revision; then start each with
leased --data DIR --name NAME --peer-listen HOST:PORT and its certificates
(--initial-cluster is not needed again). The members start from the
snapshot, elect a leader and serve its keys.

--bump-revision raises the revision, fencing-token and TTL lease id
counters, so that the next write gets a version, the next write lease a
fencing token, and the next TTL lease an id, above any the old cluster may
have handed out after the snapshot: a client that cached a later value never
revalidates a different one with the same version. Give 0 to keep them as
the snapshot has them.

The new node holds writes back at its first start, for the span of the
snapshot's lease horizon plus epsilon, since it cannot tell whether leases
granted before the snapshot are still live; it serves reads at once. The
data folder has no TLS files: a server alone creates a new CA on its first
start.

On a terminal, a progress bar runs on stderr while it reads a FILE of 1 MiB
or more.

Exit status: 0 when DIR is made; 1 when the restore fails, and DIR is then
left as it was: FILE cannot be read or is corrupt, DIR holds anything, or
--bump-revision would take a counter past its largest value; 2 for a bad
command line.`,
		Example: `  leased restore backup.snap --data ./leased-data
  leased restore backup.snap --data ./n1 --name n1 --initial-cluster n1=10.0.0.1:7410,n2=10.0.0.2:7410,n3=10.0.0.3:7410`,
		Args: oneSnapshotFile,
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := outputFormat(output)
			if err != nil {
				return err
			}
			if err := required("--data", data); err != nil {
				return err
			}
			peers, err := restorePeers(name, initialCluster)
			if err != nil {
				return err
			}
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			r, done := readProgress(stderr, f, "restoring")
			sum, err := server.Restore(data, r, name, peers, bump, log)
			done()
			if err != nil {
				return fmt.Errorf("restore %s: %w", args[0], err)
			}
			out := summaryOf(args[0], sum, 0)
			out.Data = absPath(data)
			return out.print(cmd.OutOrStdout(), format)
		},
	}
	f := cmd.Flags()
	f.StringVar(&data, "data", "", "the new data folder: missing or empty")
	f.StringVar(&name, "name", "", "this node's name in the new cluster (with --initial-cluster)")
	f.StringVar(&initialCluster, "initial-cluster", "", "the members of the new cluster, this one included, as NAME=HOST:PORT,... (their --peer-listen); empty: a server alone")
	f.Uint64Var(&bump, "bump-revision", defaultBump, "raise the revision, fencing-token and TTL lease id counters by this much (0: keep the snapshot's)")
	f.StringVarP(&output, "output", "o", "text", "output format: text or json")
	return cmd
}

// restorePeers parses --initial-cluster for a restore, which must name
// --name; none for a server alone.
func restorePeers(name, initialCluster string) ([]server.Peer, error) {
	if initialCluster == "" {
		if name != "" {
			return nil, usagef("--name is for a node of a new cluster: give --initial-cluster too")
		}
		return nil, nil
	}
	if strings.TrimSpace(name) == "" {
		return nil, usagef("--initial-cluster needs --name: this node's name in it")
	}
	peers, _, err := parseInitialCluster(initialCluster, name)
	return peers, err
}

// oneSnapshotFile checks that a command got one argument, the snapshot FILE.
func oneSnapshotFile(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usagef("%s takes one argument, the snapshot FILE; got %q", cmd.CommandPath(), args)
	}
	return nil
}
