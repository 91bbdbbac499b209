package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/client"
)

// The lock commands (DESIGN §5.1): lock runs a command while it holds a
// lock, check-token tells whether a token is a lock's current one, and
// --guard (put, del, cas, txn) fences a write with a lock's token.

// Defaults of lock's flags.
const (
	defaultLockTTL   = 10 * time.Second
	defaultKillAfter = 5 * time.Second
)

// The environment variables that lock gives its command.
const (
	envLockKey   = "LEASED_LOCK_KEY"
	envLockToken = "LEASED_LOCK_TOKEN"
	envLockLease = "LEASED_LOCK_LEASE"
)

// errLockLost is returned by lock when its lock is lost while its command
// runs, and by elect when its leadership is lost.
var errLockLost = errors.New("lock lost")

// errNotCurrent is returned by check-token for a token that is not the
// lock's current one.
var errNotCurrent = errors.New("token not current")

// commandExit makes leasectl exit with code, printing nothing: lock passes
// on the status of its command, which said why itself.
type commandExit struct{ code int }

func (e *commandExit) Error() string { return fmt.Sprintf("the command exited with status %d", e.code) }

// ttlFlag is a flag of a TTL, in whole seconds or as a Go duration, as
// lease grant takes it (parseTTL).
type ttlFlag struct{ d *time.Duration }

func (f ttlFlag) String() string {
	if f.d == nil {
		return ""
	}
	return f.d.String()
}

func (f ttlFlag) Set(s string) error {
	d, err := parseTTL(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

func (f ttlFlag) Type() string { return "ttl" }

func (a *app) lockCmd() *cobra.Command {
	ttl, killAfter := defaultLockTTL, defaultKillAfter
	cmd := &cobra.Command{
		Use: "lock [flags] NAME -- COMMAND [ARG...]",
		// The flags go before "--": the usage line says where.
		DisableFlagsInUseLine: true,
		Short:                 "Run a command while holding a lock, with the lock's fencing token in its environment",
		Long: `Acquire the lock NAME and run COMMAND while holding it; release it when
COMMAND exits, and exit with COMMAND's status (128 plus the signal's number
if a signal ended it).

The lock lives as long as a TTL lease of --ttl (default 10s) that leasectl
keeps alive while COMMAND runs: if leasectl dies, or is cut off from the
server for longer than the TTL, the lock ends and another process may take
it. Acquiring waits in line, first come first served, behind the lock's
holder and those who asked before, until it is granted or Ctrl-C; it is not
bounded by --timeout. Locks are write leases: NAME is a key, and a lock is
exclusive with the write lease on that key ("leasectl write-lease").

COMMAND runs with stdin, stdout and stderr of leasectl, and these
environment variables:
  ` + envLockKey + `     NAME
  ` + envLockToken + `   the lock's fencing token, a number that grows with
                      every grant of the lock
  ` + envLockLease + `   the TTL lease the lock lives by (16 hexadecimal digits)
Give the token to what the lock guards, so that a holder that lost the lock
unawares cannot change it: "leasectl put --guard NAME=TOKEN KEY VALUE"
commits only while the lock is held with TOKEN, and "leasectl check-token
NAME TOKEN" tells whether it still is.

If the lock is lost while COMMAND runs (its lease was revoked, or could not
be renewed in time), leasectl says so on stderr, stops COMMAND with SIGTERM,
then SIGKILL if it has not exited --kill-after later (default 5s; 0: SIGKILL
at once), and exits with status 6. SIGINT and SIGTERM sent to leasectl are
passed on to COMMAND (at a terminal, Ctrl-C reaches COMMAND directly too),
and leasectl exits with COMMAND's status once it has exited; before COMMAND
starts they give up waiting for the lock (status 130). On Linux, COMMAND is
killed if leasectl is.

COMMAND follows "--", so that its flags are not taken for leasectl's. A
COMMAND that cannot be found exits with status 2 before anything connects.
leasectl prints nothing on stdout itself; a notice on stderr says so if the
lock is not granted within a second.`,
		Example: `  leasectl lock /locks/backup -- ./backup.sh --full
  leasectl lock --ttl 30s /locks/migrate -- sh -c 'migrate && leasectl put --guard "$LEASED_LOCK_KEY=$LEASED_LOCK_TOKEN" /schema/version 42'`,
		Args: func(cmd *cobra.Command, args []string) error {
			const want = "lock wants NAME -- COMMAND [ARG...]"
			switch dash := cmd.ArgsLenAtDash(); {
			case len(args) == 0 || dash == 0:
				return usagef("%s; got no NAME", want)
			case len(args) == 1:
				return usagef("%s; got no COMMAND", want)
			case dash > 1:
				return usagef("%s; got %d arguments before --: %q (one NAME)", want, dash, args[:dash])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if name == "" {
				return usagef("NAME must not be empty")
			}
			if killAfter < 0 {
				return usagef("--kill-after %v: must not be negative", killAfter)
			}
			path, err := exec.LookPath(args[1])
			if err != nil {
				return usagef("COMMAND %q cannot be run: %v", args[1], pathErr(err))
			}
			return a.lock(name, ttl, killAfter, path, args[1:])
		},
	}
	f := cmd.Flags()
	f.Var(ttlFlag{&ttl}, "ttl", "TTL of the lease the lock lives by, in seconds (10) or as a duration (10s)")
	f.DurationVar(&killAfter, "kill-after", killAfter, "if the lock is lost, send SIGKILL this long after SIGTERM")
	return cmd
}

// lock holds the lock name, under a session of ttl, while the command at
// path runs with argv; see lock --help.
func (a *app) lock(name string, ttl, killAfter time.Duration, path string, argv []string) error {
	// From here on SIGINT and SIGTERM come here too, and never kill
	// leasectl: while the command runs, they are passed on to it.
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)

	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	defer cancel()
	a.limit = a.timeout
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	s, err := client.NewSession(ctx, c, ttl)
	if err != nil {
		return err
	}
	cancel()
	closeSession := func() {
		if err := s.Close(); err != nil {
			fmt.Fprintf(a.stderr, "leasectl: revoke the lease %s of the lock on %q: %v (it runs out within %v)\n",
				s.Lease(), name, a.describe(err), s.TTL())
		}
	}
	m := client.NewMutex(s, name)
	if err := a.acquire(m, s, name); err != nil {
		closeSession()
		return err
	}

	token := m.Token()
	cmd := &exec.Cmd{Path: path, Args: argv}
	cmd.Env = append(os.Environ(),
		envLockKey+"="+name,
		envLockToken+"="+strconv.FormatUint(token, 10),
		envLockLease+"="+s.Lease().String())
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.stdin, a.stdout, a.stderr
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		a.unlock(m, name)
		closeSession()
		return fmt.Errorf("start %s: %w", argv[0], err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// Until the command exits: pass signals on, and stop it if the lock is
	// lost.
	lockCtx := m.Context()
	lost := lockCtx.Done()
	var (
		lostErr error
		kill    <-chan time.Time
		waitErr error
	)
run:
	for {
		select {
		case waitErr = <-exited:
			break run
		case sig := <-sigc:
			cmd.Process.Signal(sig)
		case <-lost:
			lost = nil
			lostErr = lockLostError(fmt.Sprintf("lock on %q", name), s, lockCtx.Err())
			if killAfter == 0 {
				fmt.Fprintf(a.stderr, "leasectl: %v; killing %s\n", lostErr, argv[0])
				cmd.Process.Kill()
				continue
			}
			fmt.Fprintf(a.stderr, "leasectl: %v; stopping %s: SIGTERM, then SIGKILL after %v\n", lostErr, argv[0], killAfter)
			cmd.Process.Signal(syscall.SIGTERM)
			t := time.NewTimer(killAfter)
			defer t.Stop()
			kill = t.C
		case <-kill:
			kill = nil
			fmt.Fprintf(a.stderr, "leasectl: %s did not exit within %v of SIGTERM; killing it\n", argv[0], killAfter)
			cmd.Process.Kill()
		}
	}
	if lostErr == nil && lockCtx.Err() != nil {
		// The command ended as the lock was lost: it may have worked
		// without the lock for a moment.
		lostErr = lockLostError(fmt.Sprintf("lock on %q", name), s, lockCtx.Err())
		fmt.Fprintf(a.stderr, "leasectl: %v before %s exited\n", lostErr, argv[0])
	}
	if lostErr == nil {
		a.unlock(m, name)
	}
	closeSession()
	if lostErr != nil {
		return lostErr
	}
	if cmd.ProcessState == nil {
		return fmt.Errorf("wait for %s: %w", argv[0], waitErr)
	}
	if code := childStatus(cmd.ProcessState); code != 0 {
		return &commandExit{code}
	}
	return nil
}

// acquire takes the lock of m, waiting until Ctrl-C or until s ends.
func (a *app) acquire(m *client.Mutex, s *client.Session, name string) error {
	ctx, cancel := context.WithCancel(a.ctx)
	defer cancel()
	go func() {
		select {
		case <-s.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	stop := a.noticeAfter(waitNotice, func() string {
		return fmt.Sprintf("leasectl: waiting for the lock on %q: another process holds it, or asked for it first\n", name)
	})
	err := m.Lock(ctx)
	stop()
	switch {
	case err == nil:
		return nil
	case a.ctx.Err() != nil:
		return fmt.Errorf("wait for the lock on %q: %w", name, a.ctx.Err())
	case isClosed(s.Done()):
		return fmt.Errorf("%w: the TTL lease %s was lost while waiting for the lock on %q", client.ErrUnavailable, s.Lease(), name)
	}
	return err
}

// unlock releases the lock of m, or says on stderr why it could not: it
// then ends with its TTL lease, which is revoked next.
func (a *app) unlock(m *client.Mutex, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	if err := m.Unlock(ctx); err != nil {
		fmt.Fprintf(a.stderr, "leasectl: release the lock on %q: %s\n", name, a.describe(err))
	}
}

// isClosed reports whether ch is closed.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// lockLostError says that what (such as `lock on "k"`) was lost, from the
// error of its context.
func lockLostError(what string, s *client.Session, cause error) error {
	why := fmt.Sprintf("its TTL lease %s was revoked or ran out", s.Lease())
	if errors.Is(cause, context.DeadlineExceeded) {
		why = fmt.Sprintf("its TTL lease %s could not be renewed in time, so the server may end it", s.Lease())
	}
	return fmt.Errorf("%w: the %s ended: %s", errLockLost, what, why)
}

// childStatus returns the status a shell gives an exited process: its exit
// code, or 128 plus the signal's number if a signal ended it.
func childStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func (a *app) checkTokenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "check-token KEY TOKEN",
		Short: "Tell whether TOKEN is the current fencing token of the lock on KEY",
		Long: `Tell whether the lock (write lease) on KEY is held now with the fencing token
TOKEN: exit status 0 if it is, 6 if it is not (the lock is free, or held
with another token; a TOKEN of 0 is never current), as grep tells a match.
It is the question a service asks before it lets a lock's holder change what
the lock guards; the answer comes from a read lease on the lock's record,
which the server invalidates before the lock changes hands, so a "current"
is never stale.

It prints KEY, TOKEN, whether it is CURRENT, and the lock's record: whether
it is HELD, the token it is held with (LOCK_TOKEN) and the TTL lease it
lives by (LEASE, "-" for a write lease of no TTL lease). With -o json:
"key", "token", "current" and "lock", the record: "held", "token", "lease"
(absent if none) and "cached" (the answer came from the client's cache).`,
		Example: `  leasectl check-token /locks/backup 42
  if leasectl check-token /locks/backup "$TOKEN" >/dev/null 2>&1; then echo current; fi`,
		Args: argsExactly("KEY", "TOKEN"),
		RunE: func(cmd *cobra.Command, args []string) error {
			key := args[0]
			if err := checkKey(key); err != nil {
				return err
			}
			token, err := strconv.ParseUint(args[1], 10, 64)
			if err != nil {
				return usagef("TOKEN %q is not a fencing token: want a number, 0 or more", args[1])
			}
			return a.withClient(func(ctx context.Context, c *client.Client) error {
				r, err := c.Lock(ctx, key)
				if err != nil {
					return err
				}
				// As client.CheckToken decides, on the record just read.
				current := token != 0 && r.Held && r.Token == token
				if err := a.printCheckToken(key, token, current, r); err != nil {
					return err
				}
				switch {
				case current:
					return nil
				case r.Held:
					return fmt.Errorf("%w: the lock on %q is held with token %d, not %d", errNotCurrent, key, r.Token, token)
				}
				return fmt.Errorf("%w: the lock on %q is not held", errNotCurrent, key)
			})
		},
	}
}

// checkTokenJSON is the JSON answer of check-token.
type checkTokenJSON struct {
	Key     string         `json:"key"`
	Token   uint64         `json:"token"`
	Current bool           `json:"current"`
	Lock    lockRecordJSON `json:"lock"`
}

// lockRecordJSON is the record of a lock (client.LockRecord).
type lockRecordJSON struct {
	Held  bool   `json:"held"`
	Token uint64 `json:"token"`
	// Lease is the TTL lease the lock lives by; absent if none.
	Lease  string `json:"lease,omitempty"`
	Cached bool   `json:"cached"`
}

// printCheckToken prints the answer of check-token.
func (a *app) printCheckToken(key string, token uint64, current bool, r client.LockRecord) error {
	out := checkTokenJSON{Key: key, Token: token, Current: current, Lock: lockRecordJSON{Held: r.Held, Token: r.Token, Cached: r.Cached}}
	lockToken, lease := "-", "-"
	if r.Held {
		lockToken = strconv.FormatUint(r.Token, 10)
	}
	if r.Lease != 0 {
		out.Lock.Lease, lease = r.Lease.String(), r.Lease.String()
	}
	return a.emit(out, []string{"KEY", "TOKEN", "CURRENT", "HELD", "LOCK_TOKEN", "LEASE"},
		[]string{tableText([]byte(key)), strconv.FormatUint(token, 10), strconv.FormatBool(current), strconv.FormatBool(r.Held), lockToken, lease})
}

// guardHelp is what the help of the commands with --guard says of it.
const guardHelp = `With --guard LOCK=TOKEN, the write commits only if the lock (write lease)
on the key LOCK is held with the fencing token TOKEN when it commits;
otherwise nothing changes and leasectl exits with status 5. "leasectl lock"
gives its command LOCK and TOKEN as $` + envLockKey + ` and $` + envLockToken + `.`

// addGuardFlag adds --guard to cmd; guardOf reads it.
func addGuardFlag(cmd *cobra.Command, vals *[]string) {
	cmd.Flags().StringArrayVar(vals, "guard", nil, "commit only while the lock on LOCK is held with TOKEN: LOCK=TOKEN")
}

// guard is a parsed --guard: the lock's key and token.
type guard struct {
	lock  string
	token uint64
}

// guardOf parses the --guard flags given, at most one; nil if none.
func guardOf(vals []string) (*guard, error) {
	switch len(vals) {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, usagef("--guard given %d times: a write has one guard", len(vals))
	}
	s := vals[0]
	i := strings.LastIndexByte(s, '=')
	if i < 0 {
		return nil, usagef("--guard %q: want LOCK=TOKEN, the key of the lock and its fencing token", s)
	}
	lock, tok := s[:i], s[i+1:]
	if lock == "" {
		return nil, usagef("--guard %q: the key of the lock must not be empty", s)
	}
	token, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || token == 0 {
		return nil, usagef("--guard %q: TOKEN %q is not a fencing token: want a number above 0", s, tok)
	}
	return &guard{lock: lock, token: token}, nil
}

// options returns the write options of g; none for nil.
func (g *guard) options() []client.WriteOption {
	if g == nil {
		return nil
	}
	return []client.WriteOption{client.WithGuard(g.lock, g.token)}
}
