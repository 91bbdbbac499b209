package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
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
	info, err := adm.SaveSnapshot(a.ctx, f, a.timeout)
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
	return a.emit(out, []string{"FILE", "APPLIED_INDEX", "REVISION", "KEYS", "BYTES"},
		[]string{out.File, u(out.AppliedIndex), u(out.Revision), strconv.Itoa(out.Keys), strconv.FormatInt(out.Bytes, 10)})
}
