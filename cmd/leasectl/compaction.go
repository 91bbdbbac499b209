package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/leased/leased/internal/human"
)

// compactionJSON is the JSON answer of compaction.
type compactionJSON struct {
	Compacted uint64 `json:"compacted_revision"`
	Bytes     uint64 `json:"history_bytes"`
	Events    uint64 `json:"history_events"`
}

// compactionCmd builds "leasectl compaction REV".
func (a *app) compactionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "compaction REV",
		Short: "Compact the event history through revision REV",
		Long: `Find the leader among --endpoints and compact the event history through
revision REV at once: the history keeps the revisions after REV only, and a
watch from REV or earlier fails with "compacted" from then on (its watcher
lists again). The leader compacts on its own as well, within leased's
--history-age, --history-revisions and --history-bytes; this is for an
operator who wants the space back sooner. A REV at or below the compaction
point changes nothing; a REV above the current revision is refused.

The answer is the compaction point after it (COMPACTED), and the bytes and
events the history still holds.

Under an access policy (leased --auth-policy), compaction needs the admin
right ("admin: true" for the identity of --cert).

Exit status: 2 if REV is not a number or is above the current revision; 3
if no endpoint leads or names the leader within --timeout; 1 for a refusal
by the access policy.`,
		Example: `  leasectl compaction 1200
  leasectl -o json compaction "$(leasectl -o json status | jq .revision)"`,
		Args: argsExactly("REV"),
		RunE: func(cmd *cobra.Command, args []string) error {
			rev, err := strconv.ParseUint(args[0], 10, 64)
			if err != nil {
				return usagef("compaction: REV %q is not a revision (a whole number)", args[0])
			}
			ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
			defer cancel()
			adm, err := a.leaderAdmin(ctx)
			if err != nil {
				return err
			}
			defer adm.Close()
			h, err := adm.Compact(ctx, rev)
			if err != nil {
				return fmt.Errorf("compaction through %d on %s: %w", rev, adm.Addr(), err)
			}
			out := compactionJSON{Compacted: h.Compacted, Bytes: h.Bytes, Events: h.Events}
			return a.emit(out, []string{"COMPACTED", "HISTORY_BYTES", "HISTORY_EVENTS"},
				[]string{strconv.FormatUint(h.Compacted, 10), human.Bytes(int64(h.Bytes)), strconv.FormatUint(h.Events, 10)})
		},
	}
}
