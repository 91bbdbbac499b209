package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/client"
)

// The task queue commands (client.Queue): put, claim, complete, fail and
// list. A claim outlives the leasectl that made it: it is a lock bound to
// a TTL lease, which a shell worker keeps alive ("leasectl lease
// keep-alive") until it completes or fails the task with another leasectl.

const (
	// defaultClaimTTL is the TTL of the lease queue claim grants.
	defaultClaimTTL = 30 * time.Second
	// defaultMaxAttempts is client.Queue's default MaxAttempts.
	defaultMaxAttempts = 5
)

// queuePutJSON is the JSON answer of queue put.
type queuePutJSON struct {
	Queue string `json:"queue"`
	Key   string `json:"key"`
}

// queueClaimJSON is the JSON answer of queue claim.
type queueClaimJSON struct {
	Queue       string  `json:"queue"`
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
	Token       uint64  `json:"token"`
	Attempt     int     `json:"attempt"`
	// Lease is the TTL lease the claim lives by, 16 hexadecimal digits.
	Lease string `json:"lease"`
}

// queueDoneJSON is the JSON answer of queue complete and queue fail.
type queueDoneJSON struct {
	Queue string `json:"queue"`
	Key   string `json:"key"`
	// Outcome is "completed" (deleted), "requeued" (put back at the end
	// of the queue) or "dead" (moved to the dead letters, at DeadKey).
	Outcome string `json:"outcome"`
	Attempt int    `json:"attempt"`
	DeadKey string `json:"dead_key,omitempty"`
}

// queueTaskJSON is a task in the JSON answer of queue list.
type queueTaskJSON struct {
	Key         string  `json:"key"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
	Attempt     int     `json:"attempt"`
	Version     uint64  `json:"version"`
	Claimed     bool    `json:"claimed"`
	// Token is the claim's fencing token, 0 if the task is not claimed.
	Token uint64 `json:"token"`
}

// queueListJSON is the JSON answer of queue list.
type queueListJSON struct {
	Queue string          `json:"queue"`
	Tasks []queueTaskJSON `json:"tasks"`
}

func (a *app) queueCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Put, claim, complete, fail and list the tasks of a task queue",
		Long: `A task queue whose workers claim tasks, each task by one worker at a time,
oldest first, without polling the server. The tasks of queue QUEUE are keys
under QUEUE/tasks/; those that failed too often move under QUEUE/dead/.

A claim is a lock on the task's key, bound to a TTL lease: it lasts until
the task is completed or failed, or until the lease is revoked or runs out,
when the task is free again for the next worker (delivery is at least once).
Its fencing token grows with every claim: a worker whose claim was lost
cannot complete or fail the task (status 5), and its writes guarded with
the token ("leasectl put --guard KEY=TOKEN") are refused.

A shell worker claims with one leasectl, which prints the task, its token
and the lease, and exits leaving the task claimed; it keeps the lease alive
with "leasectl lease keep-alive ID" while it works, and ends with "queue
complete" or "queue fail", giving the key, --token and --lease. The lease
may be used again for the next claim ("queue claim --lease ID"), and
revoked at the end.

Exit status of complete and fail: 5 if the claim was lost (the token is not
the task's claim's, or the lease ended); 4 if the task is gone.`,
		Example: `  leasectl queue put jobs "resize photo 17"
  task=$(leasectl -o json queue claim jobs)
  key=$(echo "$task" | jq -r .key) token=$(echo "$task" | jq -r .token) lease=$(echo "$task" | jq -r .lease)
  leasectl lease keep-alive "$lease" >/dev/null & keeper=$!
  if work "$(echo "$task" | jq -r .value)"; then
    leasectl queue complete jobs "$key" --token "$token" --lease "$lease"
  else
    leasectl queue fail jobs "$key" --token "$token" --lease "$lease" --delay 10s
  fi
  kill "$keeper"; leasectl lease revoke "$lease"
  leasectl queue list jobs`,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(a.queuePutCmd(), a.queueClaimCmd(), a.queueCompleteCmd(), a.queueFailCmd(), a.queueListCmd())
	return cmd
}

// checkQueue refuses an empty queue name before connecting.
func checkQueue(name string) error {
	if name == "" {
		return usagef("QUEUE must not be empty")
	}
	return nil
}

func (a *app) queuePutCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "put QUEUE VALUE",
		Short: "Add a task to the end of a queue and print its key",
		Long: `Add a task of VALUE at the end of QUEUE and print its key, QUEUE/tasks/
followed by 24 random hexadecimal digits. With VALUE "-", the value is read
from stdin, byte for byte. A VALUE that starts with "-" must follow "--".`,
		Example: `  leasectl queue put jobs "resize photo 17"
  leasectl queue put jobs - < job.json`,
		Args: argsExactly("QUEUE", "VALUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkQueue(name); err != nil {
				return err
			}
			value, err := a.readValue(args[1])
			if err != nil {
				return err
			}
			return a.withWrite(fmt.Sprintf("the task put in queue %q", name), func(ctx context.Context, c *client.Client) error {
				key, err := client.NewQueue(c, name).Enqueue(ctx, value)
				if err != nil {
					return err
				}
				return a.emit(queuePutJSON{Queue: name, Key: key}, []string{"KEY"}, []string{tableText([]byte(key))})
			})
		},
	}
}

func (a *app) queueClaimCmd() *cobra.Command {
	var (
		ttl   = defaultClaimTTL
		lease string
	)
	cmd := &cobra.Command{
		Use:   "claim QUEUE",
		Short: "Claim the oldest free task of a queue, print it, and exit leaving it claimed",
		Long: `Claim the oldest task of QUEUE that nobody holds, waiting until one is free
(until Ctrl-C: status 130; only connecting is bounded by --timeout), and
print its KEY, VALUE, fencing TOKEN, ATTEMPT (1 the first time it is
claimed, counting this claim) and the TTL lease the claim lives by, LEASE.
leasectl then exits, leaving the task claimed: keep the lease alive
("leasectl lease keep-alive LEASE") while working on it, and end with
"leasectl queue complete" or "queue fail".

The claim lives by a new TTL lease of --ttl (default 30s), which leasectl
keeps alive while it waits for a task, and neither keeps alive nor revokes
once it exits: it runs out --ttl after its last renewal unless kept alive;
if no task was claimed, it is revoked. With --lease ID, the claim lives by
that existing lease instead (one that an earlier claim printed, say), which
leasectl keeps alive while it waits; a lease that does not exist exits with
status 4.

With -o json: "queue", "key", "value" (or "value_base64"), "token",
"attempt" and "lease".`,
		Example: `  leasectl queue claim jobs
  leasectl -o json queue claim --ttl 2m jobs
  leasectl queue claim --lease 694d71ddacfda227 jobs`,
		Args: argsExactly("QUEUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkQueue(name); err != nil {
				return err
			}
			var id client.LeaseID
			if cmd.Flags().Changed("lease") {
				if cmd.Flags().Changed("ttl") {
					return usagef("queue claim takes --ttl (a new lease) or --lease (an existing one), not both")
				}
				var err error
				if id, err = parseLease(lease); err != nil {
					return err
				}
			}
			return a.claim(name, ttl, id)
		},
	}
	f := cmd.Flags()
	f.Var(ttlFlag{&ttl}, "ttl", "TTL of the new lease the claim lives by, in seconds (30) or as a duration (30s)")
	f.StringVar(&lease, "lease", "", "claim under this existing TTL lease (16 hexadecimal digits) instead of a new one")
	return cmd
}

// claim claims a task of queue name, under a new lease of ttl, or under
// lease id if it is not 0, and prints it.
func (a *app) claim(name string, ttl time.Duration, id client.LeaseID) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	defer cancel()
	a.limit = a.timeout
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	q := client.NewQueue(c, name)
	stop := a.noticeAfter(waitNotice, func() string {
		return fmt.Sprintf("leasectl: waiting for a free task in queue %q\n", name)
	})
	defer stop()

	if id != 0 {
		tl, err := c.TimeToLive(ctx, id, false)
		if err != nil {
			return err
		}
		if tl.TTL < 0 {
			return fmt.Errorf("%w: lease %s expired or was revoked", client.ErrNotFound, id)
		}
		cancel()
		t, err := claimUnder(a.ctx, c, q, name, id, a.timeout)
		if err != nil {
			return err
		}
		stop()
		return a.printClaim(name, t, id)
	}

	s, err := client.NewSession(ctx, c, ttl)
	if err != nil {
		return err
	}
	cancel()
	t, err := q.Claim(a.ctx, s)
	if err != nil {
		lost := isClosed(s.Done())
		if cerr := s.Close(); cerr != nil {
			fmt.Fprintf(a.stderr, "leasectl: revoke the lease %s granted for the claim: %s (it runs out within %v)\n", s.Lease(), a.describe(cerr), s.TTL())
		}
		if lost && a.ctx.Err() == nil {
			return fmt.Errorf("%w: the TTL lease %s was lost while waiting for a task of queue %q", client.ErrUnavailable, s.Lease(), name)
		}
		return err
	}
	// The claim is the shell worker's now: stop keeping the lease alive,
	// and do not revoke it.
	s.Orphan()
	stop()
	return a.printClaim(name, &claimedTask{key: t.Key, value: t.Value, attempt: t.Attempt, token: t.Token()}, s.Lease())
}

// claimedTask is a task that queue claim claimed.
type claimedTask struct {
	key     string
	value   []byte
	attempt int
	token   uint64
}

// printClaim prints the answer of queue claim.
func (a *app) printClaim(name string, t *claimedTask, id client.LeaseID) error {
	out := queueClaimJSON{Queue: name, Key: t.key, Token: t.token, Attempt: t.attempt, Lease: id.String()}
	out.Value, out.ValueBase64 = jsonValue(t.value)
	return a.emit(out, []string{"KEY", "VALUE", "TOKEN", "ATTEMPT", "LEASE"},
		[]string{tableText([]byte(t.key)), tableText(t.value), strconv.FormatUint(t.token, 10), strconv.Itoa(t.attempt), id.String()})
}

// claimUnder claims the oldest free task of q, the queue name, under the
// existing TTL lease id (client.Queue.ClaimUnder), which it keeps alive
// meanwhile. limit bounds the question asked if the lease is lost.
func claimUnder(ctx context.Context, c *client.Client, q *client.Queue, name string, id client.LeaseID, limit time.Duration) (*claimedTask, error) {
	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	kept, err := c.KeepAlive(kctx, id)
	if err != nil {
		return nil, err
	}
	// The claim waits while the lease is kept alive; a lease lost ends it.
	cctx, ccancel := context.WithCancel(ctx)
	defer ccancel()
	lost := make(chan struct{})
	go func() {
		for range kept {
		}
		if kctx.Err() == nil {
			close(lost)
			ccancel()
		}
	}()
	t, err := q.ClaimUnder(cctx, id)
	if err != nil {
		select {
		case <-lost:
			if ctx.Err() == nil {
				return nil, leaseLostError(c, id, limit)
			}
		default:
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: claim from queue %q: %w", client.ErrCanceled, name, ctx.Err())
		}
		return nil, err
	}
	return &claimedTask{key: t.Key, value: t.Value, attempt: t.Attempt, token: t.Token()}, nil
}

// leaseLostError says why lease id, which the client kept alive, was lost.
func leaseLostError(c *client.Client, id client.LeaseID, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	tl, err := c.TimeToLive(ctx, id, false)
	switch {
	case err != nil:
		return fmt.Errorf("lease %s lost while waiting for a task: its TTL ran out without a renewal: %w", id, err)
	case tl.TTL < 0:
		return fmt.Errorf("%w: lease %s expired or was revoked while waiting for a task", client.ErrNotFound, id)
	}
	return fmt.Errorf("%w: lease %s lost while waiting for a task: its TTL ran out on this client without a renewal", client.ErrUnavailable, id)
}

// claimFlags are the flags that name a claim: --token and --lease.
type claimFlags struct {
	token, lease string
}

func (f *claimFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.token, "token", "", "the claim's fencing token, as queue claim printed it (required)")
	cmd.Flags().StringVar(&f.lease, "lease", "", "the TTL lease the claim lives by, as queue claim printed it (required)")
}

// parse checks the flags, which are required.
func (f *claimFlags) parse(cmd *cobra.Command) (uint64, client.LeaseID, error) {
	if !cmd.Flags().Changed("token") || !cmd.Flags().Changed("lease") {
		return 0, 0, usagef("%s wants --token TOKEN and --lease ID: the token and lease queue claim printed", cmd.Name())
	}
	token, err := strconv.ParseUint(f.token, 10, 64)
	if err != nil || token == 0 {
		return 0, 0, usagef("--token %q is not a fencing token: want a number above 0", f.token)
	}
	id, err := parseLease(f.lease)
	if err != nil {
		return 0, 0, err
	}
	return token, id, nil
}

// checkTask checks the arguments of queue complete and fail.
func checkTask(name, key string) error {
	if err := checkQueue(name); err != nil {
		return err
	}
	return checkKey(key)
}

func (a *app) queueCompleteCmd() *cobra.Command {
	var claim claimFlags
	cmd := &cobra.Command{
		Use:   "complete QUEUE KEY",
		Short: "Complete a claimed task: delete it and end its claim",
		Long: `Complete the task KEY of QUEUE, claimed with --token under --lease (as queue
claim printed them): delete it under its claim, and end the claim. The
lease is left alone: revoke it, or claim the next task under it.

If the claim was lost (the lease ended, and another worker may have claimed
the task since, or the token is not the claim's), nothing changes and
leasectl exits with status 5; a task that is gone, 4.`,
		Example: `  leasectl queue complete jobs jobs/tasks/5d1c0e9a2b7f4c3d8e6a1b0c --token 42 --lease 694d71ddacfda227`,
		Args:    argsExactly("QUEUE", "KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, key := args[0], args[1]
			if err := checkTask(name, key); err != nil {
				return err
			}
			token, id, err := claim.parse(cmd)
			if err != nil {
				return err
			}
			return a.withWrite(fmt.Sprintf("the completion of task %q", key), func(ctx context.Context, c *client.Client) error {
				t, err := client.NewQueue(c, name).Resume(ctx, key, token, id)
				if err != nil {
					return err
				}
				if err := t.Complete(ctx); err != nil {
					return err
				}
				return a.printDone(queueDoneJSON{Queue: name, Key: key, Outcome: "completed", Attempt: t.Attempt})
			})
		},
	}
	claim.add(cmd)
	return cmd
}

func (a *app) queueFailCmd() *cobra.Command {
	var (
		claim       claimFlags
		delay       time.Duration
		maxAttempts int
	)
	cmd := &cobra.Command{
		Use:   "fail QUEUE KEY",
		Short: "Fail a claimed task: put it back at the end of the queue, or among the dead letters",
		Long: `Fail the task KEY of QUEUE, claimed with --token under --lease (as queue claim
printed them): after --delay (leasectl waits, and the claim is kept, so
that no worker takes the task sooner), put it back at the end of the queue
(OUTCOME requeued), or, if it has been claimed --max-attempts times
(default 5; 0: no limit), move it to QUEUE/dead/ (OUTCOME dead), and end
the claim. The lease is left alone.

If the claim was lost, nothing changes and leasectl exits with status 5; a
task that is gone, 4. The time limit of the write counts from the end of
--delay.`,
		Example: `  leasectl queue fail jobs jobs/tasks/5d1c0e9a2b7f4c3d8e6a1b0c --token 42 --lease 694d71ddacfda227 --delay 10s`,
		Args:    argsExactly("QUEUE", "KEY"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name, key := args[0], args[1]
			if err := checkTask(name, key); err != nil {
				return err
			}
			token, id, err := claim.parse(cmd)
			if err != nil {
				return err
			}
			if delay < 0 {
				return usagef("--delay %v: must not be negative", delay)
			}
			if maxAttempts < 0 {
				return usagef("--max-attempts %d: want 0 (no limit) or more", maxAttempts)
			}
			return a.withWriteAfter(fmt.Sprintf("the failure of task %q", key), delay, func(ctx context.Context, c *client.Client) error {
				q := client.NewQueue(c, name)
				q.MaxAttempts = maxAttempts
				t, err := q.Resume(ctx, key, token, id)
				if err != nil {
					return err
				}
				if err := t.Fail(ctx, delay); err != nil {
					return err
				}
				out := queueDoneJSON{Queue: name, Key: key, Outcome: "requeued", Attempt: t.Attempt}
				if maxAttempts > 0 && t.Attempt >= maxAttempts {
					out.Outcome, out.DeadKey = "dead", q.DeadPrefix()+key[len(q.Prefix()):]
				}
				return a.printDone(out)
			})
		},
	}
	claim.add(cmd)
	f := cmd.Flags()
	f.DurationVar(&delay, "delay", 0, "keep the claim this long before putting the task back")
	f.IntVar(&maxAttempts, "max-attempts", defaultMaxAttempts, "move the task to the dead letters once claimed this many times (0: never)")
	return cmd
}

// printDone prints the answer of queue complete and queue fail.
func (a *app) printDone(out queueDoneJSON) error {
	header := []string{"KEY", "OUTCOME", "ATTEMPT"}
	row := []string{tableText([]byte(out.Key)), out.Outcome, strconv.Itoa(out.Attempt)}
	if out.DeadKey != "" {
		header = append(header, "DEAD_KEY")
		row = append(row, tableText([]byte(out.DeadKey)))
	}
	return a.emit(out, header, row)
}

func (a *app) queueListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list QUEUE",
		Short: "List the tasks of a queue, oldest first, with their claims",
		Long: `List the tasks of QUEUE in the order they are claimed, oldest first: each
with its KEY, ATTEMPT (how many times it has been claimed), VERSION, whether
it is CLAIMED now, by any worker, with which TOKEN ("-" if not), and its
VALUE. The dead letters are not listed. A queue with no task prints the
header only. With -o json: "queue" and "tasks", each with "key", "value"
(or "value_base64"), "attempt", "version", "claimed" and "token" (0 if not
claimed).`,
		Args: argsExactly("QUEUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkQueue(name); err != nil {
				return err
			}
			return a.withClient(func(ctx context.Context, c *client.Client) error {
				tasks, err := client.NewQueue(c, name).List(ctx)
				if err != nil {
					return err
				}
				return a.printTasks(name, tasks)
			})
		},
	}
}

// printTasks prints the answer of queue list.
func (a *app) printTasks(name string, tasks []client.TaskStatus) error {
	out := queueListJSON{Queue: name, Tasks: make([]queueTaskJSON, 0, len(tasks))}
	rows := make([][]string, 0, len(tasks))
	for _, t := range tasks {
		j := queueTaskJSON{Key: t.Key, Attempt: t.Attempt, Version: t.Version, Claimed: t.Claimed, Token: t.Token}
		j.Value, j.ValueBase64 = jsonValue(t.Value)
		out.Tasks = append(out.Tasks, j)
		token := "-"
		if t.Claimed {
			token = strconv.FormatUint(t.Token, 10)
		}
		rows = append(rows, []string{tableText([]byte(t.Key)), strconv.Itoa(t.Attempt), strconv.FormatUint(t.Version, 10),
			strconv.FormatBool(t.Claimed), token, tableText(t.Value)})
	}
	return a.emit(out, []string{"KEY", "ATTEMPT", "VERSION", "CLAIMED", "TOKEN", "VALUE"}, rows...)
}
