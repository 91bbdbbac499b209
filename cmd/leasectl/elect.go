package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/client"
)

// electionJSON is one leader of elect -o json, a line of its own.
type electionJSON struct {
	Name string `json:"name"`
	// Elected is false when nobody leads; the other fields are then
	// absent or 0.
	Elected     bool    `json:"elected"`
	Value       *string `json:"value,omitempty"`
	ValueBase64 *string `json:"value_base64,omitempty"`
	// Token is the leader's fencing token, Version the version of the
	// election's record.
	Token   uint64 `json:"token"`
	Version uint64 `json:"version"`
}

func (a *app) electCmd() *cobra.Command {
	var (
		listen bool
		ttl    = defaultLockTTL
	)
	cmd := &cobra.Command{
		Use:   "elect NAME [VALUE]",
		Short: "Campaign in an election and print its leaders, or with --listen only print them",
		Long: `Campaign in the election NAME with VALUE ("-" reads stdin): wait until elected,
proclaim VALUE, and print the election's leaders, from this one on, until
Ctrl-C or SIGTERM, which resign (exit status 0). With --listen, only observe
the election: print its leader now, and each new one, until Ctrl-C.

Campaigners are elected one at a time, in the order they asked. A leader
leads while the TTL lease of --ttl (default 10s) that its leasectl keeps
alive lasts: if leasectl dies, or is cut off from the server longer than
that, the next campaigner is elected. A leader that learns it is no longer
one (its lease was revoked or could not be renewed in time) says so on
stderr and exits with status 6. Waiting to be elected is not bounded by
--timeout; connecting is.

Each leader is printed as a line "leader TOKEN VALUE", TOKEN being its
fencing token (it grows with every election: give it to the resources the
leader changes, "leasectl put --guard NAME/lock=TOKEN", or have them ask
"leasectl check-token NAME/lock TOKEN"); a VALUE that is not printable
text is quoted as a Go string literal, as in tables. "no leader" is printed
when nobody leads. With -o json, each is a JSON object on a line of its own:
"name", "elected" (false when nobody leads), "value" (or "value_base64"),
"token" and "version", the version of the election's record.

The election keeps its record in the key NAME (the token, 8 bytes, then
VALUE), which only its leader may write, and its lock in NAME/lock.`,
		Example: `  leasectl elect /elections/primary node-a
  leasectl elect --listen /elections/primary
  leasectl -o json elect --listen /elections/primary | jq -r .value`,
		Args: argsRange(1, "NAME", "VALUE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if name == "" {
				return usagef("NAME must not be empty")
			}
			switch {
			case listen && len(args) == 2:
				return usagef("elect --listen NAME observes the election; it takes no VALUE")
			case listen && cmd.Flags().Changed("ttl"):
				return usagef("elect --listen does not campaign: it takes no --ttl")
			case listen:
				return a.observe(name)
			case len(args) == 1:
				return usagef("elect wants NAME VALUE to campaign, or --listen NAME to observe")
			}
			value, err := a.readValue(args[1])
			if err != nil {
				return err
			}
			return a.campaign(name, value, ttl)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&listen, "listen", "l", false, "observe the election without campaigning: print each leader")
	f.Var(ttlFlag{&ttl}, "ttl", "TTL of the lease the leadership lives by, in seconds (10) or as a duration (10s)")
	return cmd
}

// observe prints the leaders of the election on name until Ctrl-C.
func (a *app) observe(name string) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	defer cancel()
	a.limit = a.timeout
	c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	// client.Observe tries again, quietly, after any error: a first read
	// here reports one that would last, such as a refusal.
	if _, err := c.Get(ctx, name); err != nil {
		return err
	}
	cancel()
	for l := range client.Observe(a.ctx, c, name) {
		if err := a.printLeader(name, l); err != nil {
			return err
		}
	}
	if a.ctx.Err() != nil {
		return nil // Ctrl-C: done
	}
	return fmt.Errorf("%w: the observation of election %q ended", client.ErrClosed, name)
}

// campaign campaigns in the election on name with value, under a session
// of ttl, and once elected prints the leaders until Ctrl-C, then resigns.
func (a *app) campaign(name string, value []byte, ttl time.Duration) error {
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
	defer func() {
		if err := s.Close(); err != nil {
			fmt.Fprintf(a.stderr, "leasectl: revoke the lease %s of the campaign in %q: %s (it runs out within %v)\n",
				s.Lease(), name, a.describe(err), s.TTL())
		}
	}()
	e := client.NewElection(s, name)

	// Campaign until elected, Ctrl-C, or the end of the session.
	wctx, wcancel := context.WithCancel(a.ctx)
	defer wcancel()
	go func() {
		select {
		case <-s.Done():
			wcancel()
		case <-wctx.Done():
		}
	}()
	stop := a.noticeAfter(waitNotice, func() string {
		return fmt.Sprintf("leasectl: campaigning in election %q: waiting for its leader, and those who campaigned first, to resign or be gone\n", name)
	})
	err = e.Campaign(wctx, value)
	stop()
	switch {
	case err == nil:
	case a.ctx.Err() != nil:
		return nil // Ctrl-C before being elected: done
	case isClosed(s.Done()):
		return fmt.Errorf("%w: the TTL lease %s was lost while campaigning in election %q", client.ErrUnavailable, s.Lease(), name)
	default:
		return err
	}

	lead := e.Context()
	fmt.Fprintf(a.stderr, "leasectl: elected in %q with token %d, under the TTL lease %s; Ctrl-C resigns\n", name, e.Token(), s.Lease())
	octx, ocancel := context.WithCancel(a.ctx)
	defer ocancel()
	leaders := client.Observe(octx, c, name)
	for {
		select {
		case l, ok := <-leaders:
			if !ok {
				leaders = nil
				continue
			}
			if err := a.printLeader(name, l); err != nil {
				a.resign(e, name)
				return err
			}
		case <-lead.Done():
			return lockLostError(fmt.Sprintf("leadership of election %q", name), s, lead.Err())
		case <-a.ctx.Done():
			a.resign(e, name)
			return nil
		}
	}
}

// resign gives up the leadership of e, or says on stderr why it could not:
// it then ends with the session's lease, which is revoked next.
func (a *app) resign(e *client.Election, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	if err := e.Resign(ctx); err != nil {
		fmt.Fprintf(a.stderr, "leasectl: resign from election %q: %s\n", name, a.describe(err))
	}
}

// printLeader prints one leader of the election on name: a line, or a JSON
// object on a line of its own. Each is written at once, in one write.
func (a *app) printLeader(name string, l client.Leader) error {
	elected := l.Token != 0
	if a.output == "json" {
		j := electionJSON{Name: name, Elected: elected, Token: l.Token, Version: l.Version}
		if elected {
			j.Value, j.ValueBase64 = jsonValue(l.Value)
		}
		return a.emit(j, nil)
	}
	line := "no leader\n"
	if elected {
		line = "leader " + strconv.FormatUint(l.Token, 10) + " " + tableText(l.Value) + "\n"
	}
	_, err := a.stdout.Write([]byte(line))
	return err
}
