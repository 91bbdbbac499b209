package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/human"
	"github.com/leased/leased/internal/version"
	"github.com/leased/leased/protocol"
)

// maxStdinValue bounds a value read from stdin: more than the largest
// value any server accepts (63 MiB), so that a longer one is detected.
const maxStdinValue = 64 << 20

// argsExactly returns an Args check that wants the named arguments, with a
// usage error that names them.
func argsExactly(names ...string) cobra.PositionalArgs {
	return argsRange(len(names), names...)
}

// argsRange wants at least min of the named arguments and at most all.
func argsRange(min int, names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || len(args) > len(names) {
			return usagef("%s wants %s; got %d argument(s)", cmd.Name(), argNames(min, names), len(args))
		}
		return nil
	}
}

func argNames(min int, names []string) string {
	s := ""
	for i, n := range names {
		if i > 0 {
			s += " "
		}
		if i >= min {
			n = "[" + n + "]"
		}
		s += n
	}
	return s
}

// readValue returns the value argument, reading stdin when it is "-".
func (a *app) readValue(arg string) ([]byte, error) {
	if arg != "-" {
		return []byte(arg), nil
	}
	b, err := io.ReadAll(io.LimitReader(a.stdin, maxStdinValue+1))
	if err != nil {
		return nil, fmt.Errorf("read value from stdin: %w", err)
	}
	if len(b) > maxStdinValue {
		return nil, usagef("the value on stdin is larger than %s", human.Bytes(maxStdinValue))
	}
	return b, nil
}

func (a *app) getCmd() *cobra.Command {
	var (
		valueOnly, prefix, keysOnly bool
		limit                       int
	)
	cmd := &cobra.Command{
		Use:   "get KEY [END]",
		Short: "Print the value of a key, or the keys under a prefix or in a range",
		Long: `Print the value, version and presence of KEY.

A missing key: with table output, leasectl prints "key not found" on stderr
and exits with status 4; with -o json it prints the answer with
"found": false (and the version of the deletion, or 0) and exits 0.

With --print-value-only, leasectl writes the value's bytes to stdout exactly
as stored, with no newline added (etcdctl adds one): "get --print-value-only
KEY > FILE" gives back the file that "put KEY - < FILE" stored. A missing key
writes nothing and exits with status 4; it does not go with -o json.

A listing: "get --prefix KEY" prints every key that begins with KEY, and
"get KEY END" every key from KEY up to, not including, END, in key order,
with their values and versions; --keys-only leaves the values out, and
--limit N stops after N keys. A listing reads from the leader, a page of up
to 1,000 keys at a time (each page at one revision; -o json gives the first
page's "revision", and "more": true when --limit stopped it before the end),
and caches nothing. A listing that finds no key prints nothing and exits 0,
as etcdctl's does. Under an access policy it needs the read right on every
key the range may hold, not only on those it holds.`,
		Example: `  leasectl get greeting
  leasectl -o json get greeting | jq -r .value
  leasectl get --print-value-only config/app > app.json
  leasectl get --prefix /svc/
  leasectl get --prefix --keys-only --limit 10 /svc/
  leasectl get /svc/a /svc/m`,
		Args: argsRange(1, "KEY", "END"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if valueOnly && a.output == "json" {
				return usagef("get --print-value-only writes the raw value; it does not go with -o json")
			}
			key := args[0]
			listed := prefix || keysOnly || len(args) == 2 || cmd.Flags().Changed("limit")
			switch {
			case limit < 0:
				return usagef("--limit %d: want 0 (no limit) or more", limit)
			case prefix && len(args) == 2:
				return usagef("get --prefix KEY lists the keys under KEY; it takes no END")
			case listed && valueOnly:
				return usagef("get --print-value-only reads one key; it does not go with a listing")
			case !prefix && len(args) == 2 && key > args[1]:
				return usagef("get KEY END: KEY %q is past END %q", key, args[1])
			}
			if !prefix {
				if err := checkKey(key); err != nil {
					return err
				}
			}
			return a.withClient(func(ctx context.Context, c *client.Client) error {
				if listed {
					l := listing{start: key, limit: limit, keysOnly: keysOnly}
					switch {
					case prefix:
						l.end = prefixEnd(key)
					case len(args) == 2:
						l.end = args[1]
					default: // the one key, --keys-only or --limit
						l.end = key + "\x00"
					}
					return a.list(ctx, c, l)
				}
				it, err := c.Get(ctx, key)
				if err != nil {
					return err
				}
				if !it.Found && a.output != "json" {
					return fmt.Errorf("%w: %q", errKeyNotFound, key)
				}
				if valueOnly {
					_, err := a.stdout.Write(it.Value)
					return err
				}
				out := getJSON{Key: key, Version: it.Version, Found: it.Found}
				if it.Found {
					out.Value, out.ValueBase64 = jsonValue(it.Value)
				}
				return a.emit(out, []string{"KEY", "VALUE", "VERSION", "FOUND"},
					[]string{key, tableText(it.Value), strconv.FormatUint(it.Version, 10), strconv.FormatBool(it.Found)})
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&valueOnly, "print-value-only", false, "write only the value's bytes, as stored, with no newline added")
	f.BoolVar(&prefix, "prefix", false, "list the keys that begin with KEY (an empty KEY: every key)")
	f.BoolVar(&keysOnly, "keys-only", false, "list keys and versions, without values")
	f.IntVar(&limit, "limit", 0, "list at most this many keys (0: all)")
	return cmd
}

// prefixEnd returns the end of the range of the keys that begin with
// prefix, as a string: "" (no end) for an empty prefix.
func prefixEnd(prefix string) string {
	return string(protocol.PrefixEnd([]byte(prefix)))
}

// checkKey refuses an empty key as a bad command line, before connecting.
func checkKey(key string) error {
	if key == "" {
		return usagef("KEY must not be empty")
	}
	return nil
}

func (a *app) putCmd() *cobra.Command {
	var (
		lease  string
		guards []string
	)
	cmd := &cobra.Command{
		Use:   "put KEY VALUE",
		Short: "Set a key and print the committed version",
		Long: `Set KEY to VALUE and print the version it committed. With VALUE "-", the
value is read from stdin, byte for byte.

The write commits once every other client holding a lease on KEY has dropped
it, or its lease has run out.

With --lease, KEY is attached to that TTL lease (see "leasectl lease"), and
deleted when the lease is revoked or runs out; a lease that does not exist
exits with status 4. Without --lease, KEY is detached from any lease.

` + guardHelp + `

A VALUE that starts with "-" must follow "--", which ends the flags.`,
		Example: `  leasectl put greeting hello
  leasectl put config/app - < app.json
  leasectl put --lease 694d71ddacfda227 svc/db1 10.0.0.1:5432
  leasectl put --guard /locks/backup=42 /backup/last 2024-06-01
  leasectl put -- offset -5`,
		Args: argsExactly("KEY", "VALUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := checkKey(key); err != nil {
				return err
			}
			g, err := guardOf(guards)
			if err != nil {
				return err
			}
			opts := g.options()
			if cmd.Flags().Changed("lease") {
				id, err := parseLease(lease)
				if err != nil {
					return err
				}
				opts = append(opts, client.WithLease(id))
			}
			value, err := a.readValue(args[1])
			if err != nil {
				return err
			}
			return a.withWrite(fmt.Sprintf("the write to %q", key), func(ctx context.Context, c *client.Client) error {
				ver, err := c.Put(ctx, key, value, opts...)
				if err != nil {
					return err
				}
				return a.printWrite(key, ver)
			})
		},
	}
	cmd.Flags().StringVar(&lease, "lease", "", "attach KEY to this TTL lease (16 hexadecimal digits)")
	addGuardFlag(cmd, &guards)
	return cmd
}

func (a *app) delCmd() *cobra.Command {
	var guards []string
	cmd := &cobra.Command{
		Use:     "del KEY",
		Aliases: []string{"delete"},
		Short:   "Delete a key and print how many keys it removed (0 or 1) and the deletion's version",
		Long: `Delete KEY and print how many keys the delete removed (etcd's deleted) and the
version of the deletion. A key that does not exist, or is deleted already, is
not an error: the delete removes nothing (DELETED 0), spends no revision, and
prints the key's version (that of its last deletion, or 0).

` + guardHelp + `
A guarded delete of a key that is not there removes nothing, as any delete.`,
		Args: argsExactly("KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := checkKey(key); err != nil {
				return err
			}
			g, err := guardOf(guards)
			if err != nil {
				return err
			}
			return a.withWrite(fmt.Sprintf("the deletion of %q", key), func(ctx context.Context, c *client.Client) error {
				d, err := c.Delete(ctx, key, g.options()...)
				if err != nil {
					return err
				}
				return a.emit(deleteJSON{Key: key, Deleted: d.Deleted, Version: d.Version}, []string{"KEY", "DELETED", "VERSION"},
					[]string{key, strconv.Itoa(d.Deleted), strconv.FormatUint(d.Version, 10)})
			})
		},
	}
	addGuardFlag(cmd, &guards)
	return cmd
}

func (a *app) casCmd() *cobra.Command {
	var guards []string
	cmd := &cobra.Command{
		Use:   "cas KEY OLD_VERSION VALUE",
		Short: "Set a key only if its version is still OLD_VERSION",
		Long: `Compare and swap: set KEY to VALUE if its version is still OLD_VERSION, and
print the new version. OLD_VERSION 0 means the key must not exist. With VALUE
"-", the value is read from stdin.

If the version differs, nothing changes and leasectl exits with status 5.

` + guardHelp,
		Example: `  leasectl cas greeting 7 "hello again"
  leasectl cas new-key 0 first`,
		Args: argsExactly("KEY", "OLD_VERSION", "VALUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := checkKey(key); err != nil {
				return err
			}
			old, err := strconv.ParseUint(args[1], 10, 64)
			if err != nil {
				return usagef("OLD_VERSION %q is not a version number (0 or more)", args[1])
			}
			g, err := guardOf(guards)
			if err != nil {
				return err
			}
			value, err := a.readValue(args[2])
			if err != nil {
				return err
			}
			return a.withWrite(fmt.Sprintf("the write to %q", key), func(ctx context.Context, c *client.Client) error {
				ver, err := c.CompareAndSwap(ctx, key, old, value, g.options()...)
				if err != nil {
					return err
				}
				return a.printWrite(key, ver)
			})
		},
	}
	addGuardFlag(cmd, &guards)
	return cmd
}

// printWrite prints the answer of put, del and cas.
func (a *app) printWrite(key string, ver uint64) error {
	return a.emit(writeJSON{Key: key, Version: ver}, []string{"KEY", "VERSION"},
		[]string{key, strconv.FormatUint(ver, 10)})
}

func (a *app) writeLeaseCmd() *cobra.Command {
	var hold time.Duration
	cmd := &cobra.Command{
		Use:   "write-lease KEY [VALUE]",
		Short: "Acquire the exclusive write lease on a key, optionally write it, and release",
		Long: `Acquire the exclusive write lease on KEY and print its fencing token and term.
If VALUE is given ("-" reads stdin), write it under the lease and print the
version written.

With --hold, keep the lease (renewed in the background) for that long or
until Ctrl-C, then release it; the answer is printed before holding. Without
--hold, the lease is released at once. If the lease is recalled by another
client or lost while held, leasectl exits with status 5.`,
		Example: `  leasectl write-lease config/primary
  leasectl write-lease config/primary db1
  leasectl write-lease config/primary db1 --hold 30s`,
		Args: argsRange(1, "KEY", "VALUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if hold < 0 {
				return usagef("--hold %v: must not be negative", hold)
			}
			key := args[0]
			if err := checkKey(key); err != nil {
				return err
			}
			var value []byte
			if len(args) == 2 {
				var err error
				if value, err = a.readValue(args[1]); err != nil {
					return err
				}
			}
			return a.writeLease(key, value, len(args) == 2, hold)
		},
	}
	cmd.Flags().DurationVar(&hold, "hold", 0, "keep the lease this long (or until Ctrl-C) before releasing it")
	return cmd
}

// writeLease acquires the write lease on key, writes value if write is
// set, prints the answer, holds the lease for hold, and releases it.
func (a *app) writeLease(key string, value []byte, write bool, hold time.Duration) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	defer cancel()
	a.limit = a.timeout
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if !a.timeoutSet {
		// As withWrite: the acquisition waits for the key's holders.
		a.limit = a.writeLimit(c)
		ctx, cancel = context.WithTimeout(a.ctx, a.limit)
		defer cancel()
	}
	stop := a.noticeWaiting(fmt.Sprintf("the write lease on %q", key), c)
	wl, err := c.AcquireWriteLease(ctx, key)
	if err != nil {
		stop()
		return err
	}
	// Release on a context of its own: it must run after Ctrl-C too.
	release := func() error {
		rctx, rcancel := context.WithTimeout(context.Background(), a.timeout)
		defer rcancel()
		if err := wl.Release(rctx); err != nil {
			return fmt.Errorf("release the write lease on %q: %w", key, err)
		}
		return nil
	}
	var version uint64
	if write {
		if version, err = wl.Put(ctx, value); err != nil {
			stop()
			release()
			return err
		}
	}
	stop()
	header := []string{"KEY", "TOKEN", "TERM"}
	row := []string{key, strconv.FormatUint(wl.Token(), 10), fmtDur(wl.Term())}
	if write {
		header = append(header, "VERSION")
		row = append(row, strconv.FormatUint(version, 10))
	}
	out := writeLeaseJSON{Key: key, Token: wl.Token(), TermSeconds: seconds(wl.Term()), Version: version}
	if err := a.emit(out, header, row); err != nil {
		release()
		return err
	}
	if hold > 0 {
		fmt.Fprintf(a.stderr, "Holding the write lease on %q for %v; press Ctrl-C to release it.\n", key, hold)
		t := time.NewTimer(hold)
		defer t.Stop()
		select {
		case <-t.C:
		case <-a.ctx.Done():
		case <-wl.Done():
			return fmt.Errorf("%w: the write lease on %q was recalled by another client or ran out", errLeaseLost, key)
		}
	}
	if err := release(); err != nil {
		return err
	}
	if hold > 0 {
		fmt.Fprintf(a.stderr, "Released the write lease on %q.\n", key)
	}
	return nil
}

func (a *app) statsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "stats",
		Short: "Print the server's counters",
		Long: `Print the server's counters: revision, sessions, leases, invalidations,
recalls, the NOSPACE alarm, what the bounds on memory hold and refused
(inflight_bytes, handshakes, leases_refused, writes_refused,
sessions_refused, retries), TTL leases (ttl_leases, ttl_revoked,
ttl_expired, ttl_keys_deleted, ttl_revoke_waited, ttl_revoke_holders,
ttl_keep_alives), the event history (history_compacted, its compaction
point: a watch may start from the revision after it; history_bytes and
history_events, what it holds, as the leader last read them), and messages
in and out by type (messages_in.<type>, messages_out.<type>). In the
table, sizes (lease_storage_bytes, inflight_bytes, history_bytes) are in
binary units with the exact figure, such as
"12 MiB (12582912 bytes)"; -o json gives every number exactly.

Stats names no key, so it needs no right under an access policy: any client
the server lets in may ask.`,
		Args: argsExactly(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(ctx context.Context, c *client.Client) error {
				st, err := c.ServerStats(ctx)
				if err != nil {
					return err
				}
				return a.printStats(st)
			})
		},
	}
}

// printStats prints the server's counters.
func (a *app) printStats(st *client.Stats) error {
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	i := strconv.Itoa
	rows := [][]string{
		{"revision", u(st.Revision)},
		{"sessions", i(st.Sessions)},
		{"leases", i(st.Leases)},
		{"prefix_leases", i(st.PrefixLeases)},
		{"lease_storage_bytes", human.Bytes(st.LeaseStorageBytes)},
		{"write_leases", i(st.WriteLeases)},
		{"writes_waiting", i(st.WritesWaiting)},
		{"invalidations_sent", u(st.InvalidationsSent)},
		{"invalidations_acked", u(st.InvalidationsAcked)},
		{"invalidations_expired", u(st.InvalidationsExpired)},
		{"invalidations_cancelled", u(st.InvalidationsCancelled)},
		{"recalls", u(st.Recalls)},
		{"leases_renewed", u(st.LeasesRenewed)},
		{"uptime", fmtDur(st.Uptime)},
		{"default_term", fmtDur(st.DefaultTerm)},
		{"epsilon", fmtDur(st.Epsilon)},
		{"writes_allowed_in", fmtDur(st.WritesAllowedIn)},
		{"alarm", cmp.Or(st.Alarm, "none")},
		{"inflight_bytes", human.Bytes(st.InflightBytes)},
		{"handshakes", strconv.FormatInt(st.Handshakes, 10)},
		{"leases_refused", u(st.LeasesRefused)},
		{"writes_refused", u(st.WritesRefused)},
		{"sessions_refused", u(st.SessionsRefused)},
		{"retries", u(st.Retries)},
		{"ttl_leases", i(st.TTLLeases)},
		{"ttl_revoked", u(st.TTLRevoked)},
		{"ttl_expired", u(st.TTLExpired)},
		{"ttl_keys_deleted", u(st.TTLKeysDeleted)},
		{"ttl_revoke_waited", fmtDur(st.TTLRevokeWaited)},
		{"ttl_revoke_holders", u(st.TTLRevokeHolders)},
		{"ttl_keep_alives", u(st.TTLKeepAlives)},
		{"history_compacted", u(st.HistoryCompacted)},
		{"history_bytes", human.Bytes(int64(st.HistoryBytes))},
		{"history_events", u(st.HistoryEvents)},
	}
	for _, dir := range []struct {
		name string
		m    map[string]uint64
	}{{"messages_in", st.MessagesIn}, {"messages_out", st.MessagesOut}} {
		types := make([]string, 0, len(dir.m))
		for t := range dir.m {
			types = append(types, t)
		}
		slices.Sort(types)
		for _, t := range types {
			rows = append(rows, []string{dir.name + "." + t, u(dir.m[t])})
		}
	}
	out := statsJSON{
		Revision:               st.Revision,
		Sessions:               st.Sessions,
		Leases:                 st.Leases,
		LeaseStorageBytes:      st.LeaseStorageBytes,
		WriteLeases:            st.WriteLeases,
		WritesWaiting:          st.WritesWaiting,
		InvalidationsSent:      st.InvalidationsSent,
		InvalidationsAcked:     st.InvalidationsAcked,
		InvalidationsExpired:   st.InvalidationsExpired,
		InvalidationsCancelled: st.InvalidationsCancelled,
		Recalls:                st.Recalls,
		LeasesRenewed:          st.LeasesRenewed,
		MessagesIn:             nonNil(st.MessagesIn),
		MessagesOut:            nonNil(st.MessagesOut),
		UptimeSeconds:          seconds(st.Uptime),
		DefaultTermSeconds:     seconds(st.DefaultTerm),
		EpsilonSeconds:         seconds(st.Epsilon),
		WritesAllowedInSeconds: seconds(st.WritesAllowedIn),
		Alarm:                  st.Alarm,
		InflightBytes:          st.InflightBytes,
		Handshakes:             st.Handshakes,
		LeasesRefused:          st.LeasesRefused,
		WritesRefused:          st.WritesRefused,
		SessionsRefused:        st.SessionsRefused,
		Retries:                st.Retries,
		TTLLeases:              st.TTLLeases,
		TTLRevoked:             st.TTLRevoked,
		TTLExpired:             st.TTLExpired,
		TTLKeysDeleted:         st.TTLKeysDeleted,
		TTLRevokeWaitedSeconds: seconds(st.TTLRevokeWaited),
		TTLRevokeHolders:       st.TTLRevokeHolders,
		TTLKeepAlives:          st.TTLKeepAlives,
		HistoryCompacted:       st.HistoryCompacted,
		HistoryBytes:           st.HistoryBytes,
		HistoryEvents:          st.HistoryEvents,
	}
	return a.emit(out, []string{"NAME", "VALUE"}, rows...)
}

// nonNil returns m, or an empty map for nil, so JSON shows {} not null.
func nonNil(m map[string]uint64) map[string]uint64 {
	if m == nil {
		return map[string]uint64{}
	}
	return m
}

func (a *app) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Print the server's status and the round-trip time of one request",
		Long: `Print the endpoint, the server's version (its build, as "leased --version"
prints it), this session's id, the server's clock allowance ε and
default lease term, its revision and the compaction point of its event
history (COMPACTED: a watch may start from the revision after it), number
of sessions and uptime, whether it
still holds writes after a restart (WRITES: "held for ..." until the leases
granted before the restart have run out) or refuses them (WRITES: "refused:
NOSPACE: ..." while its data folder is past --quota-bytes or its disk below
--reserve-bytes; JSON "alarm"), and the round-trip time of one
stats request. For a cluster, a second table follows: every member, from the
leader, with the role, raft term and indexes of those that --endpoints names.`,
		Args: argsExactly(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withClient(func(ctx context.Context, c *client.Client) error {
				start := time.Now()
				st, err := c.ServerStats(ctx)
				rtt := time.Since(start)
				if err != nil {
					return err
				}
				sess, _ := c.Connection()
				writes := "allowed"
				if st.WritesAllowedIn > 0 {
					writes = "held for " + fmtDur(st.WritesAllowedIn)
				}
				if st.Alarm != "" {
					writes = "refused: " + st.Alarm
				}
				out := statusJSON{
					Endpoint:               a.endpoint,
					ServerVersion:          sess.ServerVersion,
					CAFile:                 absPath(a.usedCA),
					SessionID:              sess.ID,
					EpsilonSeconds:         seconds(st.Epsilon),
					DefaultTermSeconds:     seconds(st.DefaultTerm),
					MaxValueSize:           sess.MaxValueSize,
					Revision:               st.Revision,
					Compacted:              st.HistoryCompacted,
					Sessions:               st.Sessions,
					UptimeSeconds:          seconds(st.Uptime),
					WritesHeld:             st.WritesAllowedIn > 0,
					WritesAllowedInSeconds: seconds(st.WritesAllowedIn),
					RTTSeconds:             seconds(rtt),
					Alarm:                  st.Alarm,
				}
				if out.Members, err = a.clusterStatus(ctx); err != nil {
					return err
				}
				if err := a.emit(out,
					[]string{"ENDPOINT", "VERSION", "SESSION", "EPSILON", "TERM", "REVISION", "COMPACTED", "SESSIONS", "UPTIME", "WRITES", "RTT"},
					[]string{a.endpoint, orUnknown(sess.ServerVersion), strconv.FormatUint(sess.ID, 10), fmtDur(st.Epsilon), fmtDur(st.DefaultTerm),
						strconv.FormatUint(st.Revision, 10), strconv.FormatUint(st.HistoryCompacted, 10), strconv.Itoa(st.Sessions), fmtDur(st.Uptime), writes, fmtDur(rtt)}); err != nil {
					return err
				}
				if a.output == "json" || out.Members == nil {
					return nil
				}
				return a.printClusterStatus(out.Members)
			})
		},
	}
}

// orUnknown returns v, or "unknown" for the empty version of a server that
// does not send one.
func orUnknown(v string) string {
	if v == "" {
		return version.Unknown
	}
	return v
}

// versionCmd builds "leasectl version", which prints leasectl's own build;
// "leasectl status" shows the server's.
func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print leasectl's version and the Go toolchain that built it",
		Long: `Print leasectl's version: the module version it was built as, such as
v1.2.0, or for a development build "(devel)" with the VCS revision, its
commit time and "modified" when the work tree had changes; and the Go
toolchain that built it. It connects to no server: "leasectl status" shows
the server's version.`,
		Args: argsExactly(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.emit(versionJSON{Version: version.String(), GoVersion: version.Go()},
				[]string{"VERSION", "GO"}, []string{version.String(), version.Go()})
		},
	}
}
