package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leased/leased/client"
)

// watchEventJSON is one event of watch -o json, a line of its own.
type watchEventJSON struct {
	// Type is PUT, DELETE or EXPIRE.
	Type string `json:"type"`
	Key  string `json:"key"`
	// Value is the value a PUT set; absent for DELETE and EXPIRE.
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
	// Revision is the revision of the change.
	Revision uint64 `json:"revision"`
	// Lease is the TTL lease a PUT attached the key to, or whose
	// revocation (DELETE) or expiry (EXPIRE) deleted it; absent if none.
	Lease string `json:"lease,omitempty"`
	// PrevValue is the value the key held before the change, set at
	// PrevRevision; with --prev-value only, and absent if the key did
	// not exist.
	PrevValue       *string `json:"prev_value,omitempty"`
	PrevValueBase64 *string `json:"prev_value_base64,omitempty"`
	PrevRevision    uint64  `json:"prev_revision,omitempty"`
}

// watchCmd builds "leasectl watch KEY [END]".
func (a *app) watchCmd() *cobra.Command {
	var (
		prefix, prev bool
		rev          uint64
	)
	cmd := &cobra.Command{
		Use:   "watch KEY [END]",
		Short: "Print the changes of a key, or of the keys under a prefix or in a range",
		Long: `Watch KEY and print each change of it as it happens, until Ctrl-C or SIGTERM
(exit status 0). "watch --prefix KEY" watches every key that begins with KEY
(an empty KEY: every key), and "watch KEY END" every key from KEY up to, not
including, END, as get lists them.

Without --rev, the watch starts after the current revision: it prints the
changes made from then on. With --rev R, it first prints every change from
revision R on, in revision order, as long as the server's event history
still holds R (see leasectl compaction), then goes on with the new ones. To
follow a listing without missing a change, watch from its revision plus one
(leasectl -o json get --prefix KEY gives "revision"). If the connection is
lost, the watch waits for the server, or the next leader, and resumes after
the last revision it printed: no change is printed twice or left out. Only
connecting is bounded by --timeout.

Each change is printed as a line "TYPE KEY REVISION", such as "PUT /svc/a 7":
TYPE is PUT, DELETE, or EXPIRE (the key was deleted when its TTL lease ran
out; a revoked lease's keys are DELETEd), and REVISION the revision of the
change. A PUT is followed by a line with the value it set. With
--prev-value, each change is then followed by a line "prev REVISION VALUE"
with the value the key held before and the revision it was set at, or
"prev none" if the key did not exist. Keys and values that are not
printable text are quoted as Go string literals, as in tables, so that each
takes one line. The changes of one revision (a transaction, a revocation)
come one after the other; progress reports print nothing.

With -o json, each change is one JSON object on a line of its own, written
as soon as it arrives: "type", "key", "value" (or "value_base64"; PUT only),
"revision", "lease" (16 hexadecimal digits, if the change was made under a
TTL lease or by its end) and, with --prev-value, "prev_value" (or
"prev_value_base64") and "prev_revision", absent if the key did not exist.

Under an access policy (leased --auth-policy), a watch needs the read right
on the whole range it watches, on every key the range may hold, not only on
those it holds; otherwise it is refused with "permission denied".

Exit status: 0 after Ctrl-C or SIGTERM; 1 if the server's history no longer
holds the revision the watch needs (it was compacted: the message names the
compaction point; watch from a later revision), or for a refusal by the
access policy; 2 for a --rev past the next revision; 3 if the server cannot
be reached within --timeout.`,
		Example: `  leasectl watch config/app
  leasectl watch --prefix /svc/
  leasectl watch --prefix /svc/ --rev 1200 --prev-value
  leasectl -o json watch /svc/a /svc/m | jq -r .key`,
		Args: argsRange(1, "KEY", "END"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			var opts []client.WatchOption
			switch {
			case prefix && len(args) == 2:
				return usagef("watch --prefix KEY watches the keys under KEY; it takes no END")
			case prefix:
				opts = append(opts, client.WithPrefix())
			case len(args) == 2 && key >= args[1]:
				return usagef("watch KEY END: KEY %q is not before END %q: the range holds no key", key, args[1])
			case len(args) == 2:
				opts = append(opts, client.WithRange(args[1]))
			}
			if !prefix {
				if err := checkKey(key); err != nil {
					return err
				}
			}
			if rev > 0 {
				opts = append(opts, client.FromRevision(rev))
			}
			if prev {
				opts = append(opts, client.WithPrevValue())
			}
			return a.watch(key, prev, opts)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&prefix, "prefix", false, "watch the keys that begin with KEY (an empty KEY: every key)")
	f.Uint64Var(&rev, "rev", 0, "print the changes from this revision on (0: from after the current revision)")
	f.BoolVar(&prev, "prev-value", false, "print, with each change, the value the key held before it")
	return cmd
}

// watch connects, within --timeout, and prints the changes of the watch
// opts describe until Ctrl-C (nil) or until the watch ends with an error.
func (a *app) watch(key string, prev bool, opts []client.WatchOption) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	a.limit = a.timeout
	c, err := a.connect(ctx)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	w := c.Watch(a.ctx, key, opts...)
	var last uint64 // the revision of the last change printed
	for resp := range w.C {
		for _, e := range resp.Events {
			if err := a.printWatchEvent(e, prev); err != nil {
				return err
			}
			last = e.Revision
		}
		if resp.Err != nil {
			if a.ctx.Err() != nil {
				return nil // Ctrl-C: done
			}
			return watchError(resp, last)
		}
	}
	if a.ctx.Err() != nil {
		return nil // Ctrl-C: done
	}
	// The channel closes after a response with Err, or when a.ctx ends.
	return fmt.Errorf("%w: the watch ended", client.ErrClosed)
}

// watchError returns the error that ended a watch, after the change of
// revision last (0: none printed); for a compacted history, one that names
// the compaction point and where a watch may start.
func watchError(resp client.WatchResponse, last uint64) error {
	if !errors.Is(resp.Err, client.ErrCompacted) {
		return resp.Err
	}
	point := resp.CompactRevision
	after := ""
	if last > 0 {
		after = fmt.Sprintf(" after revision %d (the watch fell behind)", last)
	}
	return fmt.Errorf("%w%s: the server's history is compacted through revision %d; watch from revision %d or later (--rev %d), "+
		"or without --rev for the changes from now on, after listing the keys again (leasectl -o json get) if the changes in between matter",
		client.ErrCompacted, after, point, point+1, point+1)
}

// printWatchEvent prints one change: a JSON line with -o json, else its
// lines (see watch --help). Each change is written at once, in one write.
func (a *app) printWatchEvent(e client.WatchEvent, prev bool) error {
	if a.output == "json" {
		j := watchEventJSON{Type: e.Type.String(), Key: e.Key, Revision: e.Revision}
		if e.Type == client.WatchPut {
			j.Value, j.ValueBase64 = jsonValue(e.Value)
		}
		if e.Lease != 0 {
			j.Lease = e.Lease.String()
		}
		if prev && e.PrevFound {
			j.PrevValue, j.PrevValueBase64 = jsonValue(e.PrevValue)
			j.PrevRevision = e.PrevRevision
		}
		return a.emit(j, nil)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %d\n", e.Type, tableText([]byte(e.Key)), e.Revision)
	if e.Type == client.WatchPut {
		b.WriteString(tableText(e.Value) + "\n")
	}
	if prev {
		if e.PrevFound {
			fmt.Fprintf(&b, "prev %d %s\n", e.PrevRevision, tableText(e.PrevValue))
		} else {
			b.WriteString("prev none\n")
		}
	}
	_, err := a.stdout.Write([]byte(b.String()))
	return err
}
