package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/client"
)

// The TTL lease commands (DESIGN §14), after etcdctl's: lease grant,
// revoke, keep-alive, timetolive and list, and put --lease. Their table
// output is etcdctl's lines; in JSON a lease has "id" (16 hex digits),
// "ttl" (seconds left, -1 if gone), "granted_ttl" and "keys".

// leaseJSON is a lease in the JSON answers of the lease commands.
type leaseJSON struct {
	ID string `json:"id"`
	// TTL is the time the lease has left, or was renewed for, in seconds;
	// -1 if it has expired or never existed.
	TTL float64 `json:"ttl"`
	// GrantedTTL is the TTL the lease was granted with, in seconds
	// (timetolive only).
	GrantedTTL *float64 `json:"granted_ttl,omitempty"`
	// Keys are the keys attached to it (timetolive --keys only).
	Keys *[]string `json:"keys,omitempty"`
}

// revokeJSON is the JSON answer of lease revoke.
type revokeJSON struct {
	ID string `json:"id"`
	// Revision is the revision at which the lease's keys were deleted, 0
	// if it had none; Deleted is how many.
	Revision uint64 `json:"revision"`
	Deleted  int    `json:"deleted"`
}

// leaseListJSON is the JSON answer of lease list.
type leaseListJSON struct {
	Leases []leaseJSON `json:"leases"`
}

// ttlSeconds returns d in seconds, to the millisecond, for a lease's TTL;
// -1 for a negative d, a lease that is gone.
func ttlSeconds(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return d.Round(time.Millisecond).Seconds()
}

// ttlText returns d in seconds without a unit, as etcdctl prints TTLs:
// "60", "1.5".
func ttlText(d time.Duration) string {
	return strconv.FormatFloat(ttlSeconds(d), 'f', -1, 64)
}

// parseTTL parses a TTL argument: whole seconds ("60"), as etcdctl takes
// it, or a Go duration ("30s", "1m30s"). It must be positive.
func parseTTL(s string) (time.Duration, error) {
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		if n == 0 || n > uint64(math.MaxInt64/int64(time.Second)) {
			return 0, usagef("TTL %q: want a positive number of seconds, up to %d", s, math.MaxInt64/int64(time.Second))
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, usagef("TTL %q: want seconds (60) or a positive duration (30s, 1m30s)", s)
	}
	return d, nil
}

// parseLease parses a lease id argument.
func parseLease(s string) (client.LeaseID, error) {
	id, err := client.ParseLeaseID(s)
	if err != nil {
		return 0, usagef("%s", strings.TrimPrefix(err.Error(), "leased: invalid argument: "))
	}
	return id, nil
}

// emitLine prints one answer: v as a JSON object with -o json, or line
// otherwise.
func (a *app) emitLine(v any, line string) error {
	if a.output == "json" {
		return a.emit(v, nil)
	}
	_, err := fmt.Fprintln(a.stdout, line)
	return err
}

func (a *app) leaseCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "lease",
		Short: "Grant, keep alive, inspect and revoke TTL leases",
		Long: `TTL leases, as in etcd: a lease lives for its TTL unless it is kept alive,
and keys attached to it ("leasectl put --lease ID") are deleted when it is
revoked or runs out. Lease ids are 16 hexadecimal digits. Without an access
policy on the server, any client may keep alive, attach keys to, look up or
revoke any lease. Under one, these need the ttl-lease right, and a lease
belongs to the certificate that granted it: only that client, or one with
the admin right, may use it, with the ttl-lease right on its keys (and write,
to attach a key or revoke); another gets "permission denied" (status 1).

A lease that does not exist makes revoke and keep-alive exit with status 4;
timetolive reports it with TTL -1 (JSON "ttl": -1) and exits 0.`,
		Example: `  leasectl lease grant 60
  leasectl put --lease 694d71ddacfda227 svc/db1 10.0.0.1:5432
  leasectl lease keep-alive 694d71ddacfda227
  leasectl lease timetolive --keys 694d71ddacfda227
  leasectl lease list
  leasectl lease revoke 694d71ddacfda227`,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.leaseGrantCmd(), a.leaseRevokeCmd(), a.leaseKeepAliveCmd(), a.leaseTimeToLiveCmd(), a.leaseListCmd())
	return cmd
}

func (a *app) leaseGrantCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "grant TTL",
		Short: "Grant a TTL lease and print its id",
		Long: `Grant a lease of TTL, in seconds (60) or as a duration (30s, 1m30s), and
print its id. The server refuses a TTL below its minimum or above its maximum.
The lease runs out after TTL unless it is kept alive (lease keep-alive).`,
		Args: argsExactly("TTL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ttl, err := parseTTL(args[0])
			if err != nil {
				return err
			}
			return a.withClient(func(ctx context.Context, c *client.Client) error {
				g, err := c.Grant(ctx, ttl)
				if err != nil {
					return err
				}
				return a.printGrant(g)
			})
		},
	}
}

// printGrant prints the answer of lease grant.
func (a *app) printGrant(g client.LeaseGrantResult) error {
	return a.emitLine(leaseJSON{ID: g.ID.String(), TTL: ttlSeconds(g.TTL)},
		fmt.Sprintf("lease %s granted with TTL(%ss)", g.ID, ttlText(g.TTL)))
}

func (a *app) leaseRevokeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a lease, deleting the keys attached to it",
		Long: `Revoke lease ID: the keys attached to it are deleted at once, at one revision,
as a write deletes them (their cached readers are invalidated first). A lease
that does not exist exits with status 4.`,
		Args: argsExactly("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseLease(args[0])
			if err != nil {
				return err
			}
			return a.withWrite(fmt.Sprintf("the revocation of lease %s", id), func(ctx context.Context, c *client.Client) error {
				r, err := c.Revoke(ctx, id)
				if err != nil {
					return err
				}
				return a.printRevoke(id, r)
			})
		},
	}
}

// printRevoke prints the answer of lease revoke.
func (a *app) printRevoke(id client.LeaseID, r client.RevokeResult) error {
	return a.emitLine(revokeJSON{ID: id.String(), Revision: r.Revision, Deleted: r.Keys},
		fmt.Sprintf("lease %s revoked", id))
}

func (a *app) leaseKeepAliveCmd() *cobra.Command {
	var once bool
	cmd := &cobra.Command{
		Use:   "keep-alive [--once] ID",
		Short: "Keep a lease alive, printing each renewal",
		Long: `Keep lease ID alive, renewing it every third of its TTL and printing each
renewal, until Ctrl-C (exit status 0) or until the lease is lost: exit status
4 if the server says it expired or was revoked, 3 if its TTL ran out while
the server could not be reached. With --once, renew it once and exit. Only
connecting, and --once, are bounded by --timeout.`,
		Example: `  leasectl lease keep-alive 694d71ddacfda227
  leasectl lease keep-alive --once 694d71ddacfda227`,
		Args: argsExactly("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseLease(args[0])
			if err != nil {
				return err
			}
			if once {
				return a.withClient(func(ctx context.Context, c *client.Client) error {
					r, err := c.KeepAliveOnce(ctx, id)
					if err != nil {
						return err
					}
					return a.printRenewal(r)
				})
			}
			return a.keepAlive(id)
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "renew the lease once and exit")
	return cmd
}

// printRenewal prints one renewal, as etcdctl does.
func (a *app) printRenewal(r client.KeepAliveResponse) error {
	return a.emitLine(leaseJSON{ID: r.ID.String(), TTL: ttlSeconds(r.TTL)},
		fmt.Sprintf("lease %s keepalived with TTL(%s)", r.ID, ttlText(r.TTL)))
}

// keepAlive keeps lease id alive until Ctrl-C, printing each renewal, and
// says why it was lost if it was.
func (a *app) keepAlive(id client.LeaseID) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	c, err := a.connect(ctx)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close()
	ch, err := c.KeepAlive(a.ctx, id)
	if err != nil {
		return err
	}
	for r := range ch {
		if err := a.printRenewal(r); err != nil {
			return err
		}
	}
	if a.ctx.Err() != nil {
		return nil // Ctrl-C: done
	}
	// Lost: ask the server whether the lease is gone.
	ctx, cancel = context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	tl, err := c.TimeToLive(ctx, id, false)
	switch {
	case err != nil:
		return fmt.Errorf("lease %s lost: its TTL ran out without a renewal: %w", id, err)
	case tl.TTL < 0:
		return fmt.Errorf("%w: lease %s expired or was revoked", client.ErrNotFound, id)
	}
	return fmt.Errorf("%w: lease %s lost: its TTL ran out on this client without a renewal (the server says %ss are left)", client.ErrUnavailable, id, ttlText(tl.TTL))
}

func (a *app) leaseTimeToLiveCmd() *cobra.Command {
	var keys bool
	cmd := &cobra.Command{
		Use:   "timetolive [--keys] ID",
		Short: "Print the time a lease has left, and with --keys its keys",
		Long: `Print the TTL lease ID was granted with and the time it has left, and with
--keys the keys attached to it. A lease that has expired or never existed is
not an error: it is reported with TTL -1.`,
		Args: argsExactly("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseLease(args[0])
			if err != nil {
				return err
			}
			return a.withClient(func(ctx context.Context, c *client.Client) error {
				tl, err := c.TimeToLive(ctx, id, keys)
				if err != nil {
					return err
				}
				return a.printTimeToLive(tl, keys)
			})
		},
	}
	cmd.Flags().BoolVar(&keys, "keys", false, "also print the keys attached to the lease")
	return cmd
}

// printTimeToLive prints the answer of lease timetolive.
func (a *app) printTimeToLive(tl client.TimeToLiveResult, keys bool) error {
	granted := ttlSeconds(tl.GrantedTTL)
	out := leaseJSON{ID: tl.ID.String(), TTL: ttlSeconds(tl.TTL), GrantedTTL: &granted}
	if keys {
		ks := tl.Keys
		if ks == nil {
			ks = []string{}
		}
		out.Keys = &ks
	}
	if tl.TTL < 0 {
		return a.emitLine(out, fmt.Sprintf("lease %s already expired", tl.ID))
	}
	line := fmt.Sprintf("lease %s granted with TTL(%ss), remaining(%ss)", tl.ID, ttlText(tl.GrantedTTL), ttlText(tl.TTL))
	if keys {
		shown := make([]string, len(tl.Keys))
		for i, k := range tl.Keys {
			shown[i] = tableText([]byte(k))
		}
		line += fmt.Sprintf(", attached keys([%s])", strings.Join(shown, " "))
	}
	return a.emitLine(out, line)
}

func (a *app) leaseListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the live leases",
		Long: `Print how many leases live and their ids, in id order; with -o json, each
with the time it has left. Without an access policy on the server, these are
the leases of every client; under one, the client's own and those granted
without a certificate, or every lease for a client with the admin right.`,
		Args: argsExactly(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(ctx context.Context, c *client.Client) error {
				ls, err := c.Leases(ctx)
				if err != nil {
					return err
				}
				return a.printLeases(ls)
			})
		},
	}
}

// printLeases prints the answer of lease list.
func (a *app) printLeases(ls []client.LeaseStatus) error {
	out := leaseListJSON{Leases: make([]leaseJSON, 0, len(ls))}
	var b strings.Builder
	fmt.Fprintf(&b, "found %d leases", len(ls))
	for _, l := range ls {
		out.Leases = append(out.Leases, leaseJSON{ID: l.ID.String(), TTL: ttlSeconds(l.TTL)})
		fmt.Fprintf(&b, "\n%s", l.ID)
	}
	return a.emitLine(out, b.String())
}
