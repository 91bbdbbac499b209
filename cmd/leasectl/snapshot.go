package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/leased/leased/internal/human"
)

// snapshotJSON is the answer of snapshot save.
type snapshotJSON struct {
	File         string `json:"file"`
	AppliedIndex uint64 `json:"applied_index"`
	Revision     uint64 `json:"revision"`
	FencingToken uint64 `json:"fencing_token"`
	Keys         int    `json:"keys"`
	DeletedKeys  int    `json:"deleted_keys"`
	WriteLeases  int    `json:"write_leases"`
	Bytes        int64  `json:"bytes"`
	Digest       string `json:"digest"`
}

func (a *app) snapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Save a snapshot of the leader's state to a file (a backup)",
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "save FILE",
		Short: "Stream a consistent snapshot from the leader into FILE",
		Long: `Find the leader among --endpoints and stream a snapshot of its applied state
into FILE: every key with its value and version, the revision and
fencing-token counters, the write leases and the lease horizon, as they were
at one point (the leader's applied index), while writes go on beside it.

The stream goes to FILE.part as it arrives; leasectl checks its checksum and
length against what the leader reports, syncs it to disk and renames it to
FILE, replacing any FILE there. A stream that does not pass is removed and
nothing is written to FILE. --timeout bounds the search for the leader and
every wait for the stream to make progress, not the whole transfer.

On a terminal, a count of the bytes saved so far runs on stderr while the
stream arrives, and is cleared before the answer; a stderr that is a pipe
or a file gets none. The answer gives the SIZE in binary units and exactly
(-o json: "bytes", an exact integer).

Under an access policy (leased --auth-policy), saving needs the admin right
("admin: true" for the identity of --cert): the leader refuses any other
client with "permission denied", naming it.

Exit status: 2 if FILE.part cannot be written (found before connecting);
3 if no endpoint leads or names the leader within --timeout, or the stream
stalls for --timeout; 1 for a stream that does not pass, or a refusal by the
access policy.

"leased snapshot status FILE" checks a saved file again; "leased restore FILE"
makes the data folder of a new node from it.`,
		Example: `  leasectl snapshot save backup.snap
  leasectl --endpoints 10.0.0.1:7400,10.0.0.2:7400 -o json snapshot save /backups/leased-$(date +%F).snap`,
		Args: argsExactly("FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.saveSnapshot(args[0])
		},
	})
	return cmd
}

// saveSnapshot streams the leader's snapshot into file, through file.part.
// It creates file.part before it looks for the leader, so that a file
// that cannot be written is a usage error at once.
func (a *app) saveSnapshot(file string) (err error) {
	part := file + ".part"
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return filef("snapshot save: cannot write %s: %v", part, pathErr(err))
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(part)
		}
	}()
	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	adm, err := a.leaderAdmin(ctx)
	cancel()
	if err != nil {
		return err
	}
	defer adm.Close()
	w, done := saveProgress(f, a.stderr, human.IsTerminal(a.stderr))
	info, err := adm.SaveSnapshot(a.ctx, w, a.timeout)
	done()
	if err != nil {
		return fmt.Errorf("snapshot from %s: %w", adm.Addr(), err)
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(part, file); err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(file)); err == nil {
		d.Sync() // the rename, where the system allows
		d.Close()
	}
	out := snapshotJSON{File: absPath(file), AppliedIndex: info.AppliedIndex, Revision: info.Revision, FencingToken: info.Fence,
		Keys: info.Keys, DeletedKeys: info.Deleted, WriteLeases: info.WriteLeases, Bytes: info.Bytes, Digest: info.Digest}
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	return a.emit(out, []string{"FILE", "APPLIED_INDEX", "REVISION", "KEYS", "SIZE"},
		[]string{out.File, u(out.AppliedIndex), u(out.Revision), strconv.Itoa(out.Keys), human.Bytes(out.Bytes)})
}

// saveProgress returns w as a writer that counts, on stderr, the bytes of
// the snapshot written to it, when tty says that stderr is a terminal; and
// a function that ends the count and clears it, which the caller calls
// once the stream has ended, before it prints anything else. The count is
// a spinner with the bytes so far: the leader reports the snapshot's
// length only after the stream. With tty false (a pipe, a file, a log) it
// returns w itself and a function that does nothing: only a person
// watching sees the count, never a script.
func saveProgress(w, stderr io.Writer, tty bool) (io.Writer, func()) {
	if !tty {
		return w, func() {}
	}
	bar := human.NewBar(stderr, -1, "saving snapshot")
	return progressWriter{w, bar}, func() { bar.Finish() }
}

// progressWriter is w, adding to bar what is written to it.
type progressWriter struct {
	w   io.Writer
	bar *progressbar.ProgressBar
}

// Write writes b to w and counts on bar what w took. A bar that cannot be
// drawn does not fail the write.
func (p progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	p.bar.Add(n)
	return n, err
}
