package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leased/leased/client"
	"github.com/leased/leased/protocol"
)

// The cluster commands (DESIGN §13): member list|add|remove|transfer,
// endpoint status, and the cluster part of status. They talk to nodes in
// admin sessions (client.Admin), which followers accept too.

// memberJSON is one member in the JSON answers of member list and status.
type memberJSON struct {
	Name     string `json:"name"`
	PeerAddr string `json:"peer_addr"`
	Voter    bool   `json:"voter"`
	Leader   bool   `json:"leader"`
	// Status is the member's own answer, absent if no endpoint reached it.
	Status *endpointJSON `json:"status,omitempty"`
}

// endpointJSON is one node's status in the JSON answers of endpoint status
// and status.
type endpointJSON struct {
	Endpoint             string  `json:"endpoint"`
	Name                 string  `json:"name,omitempty"`
	ClientAddr           string  `json:"client_addr,omitempty"`
	PeerAddr             string  `json:"peer_addr,omitempty"`
	Role                 string  `json:"role,omitempty"`
	RaftTerm             uint64  `json:"raft_term"`
	CommitIndex          uint64  `json:"commit_index"`
	AppliedIndex         uint64  `json:"applied_index"`
	Leader               string  `json:"leader,omitempty"`
	LeaderAddr           string  `json:"leader_addr,omitempty"`
	WritesHeldForSeconds float64 `json:"writes_held_for_seconds"`
	// WritesHeldUntil is, while the leader holds writes, the local time
	// (RFC 3339, milliseconds) until which it holds them: when its answer
	// came plus WritesHeldForSeconds. Absent when writes are not held.
	WritesHeldUntil string `json:"writes_held_until,omitempty"`
	// Alarm is the node's NOSPACE alarm, or why its data folder is lost;
	// absent when none.
	Alarm string `json:"alarm,omitempty"`
	// Version is the node's build, and Policy the digest of its access
	// policy (absent without one): every node should show the same.
	Version string `json:"version,omitempty"`
	Policy  string `json:"policy,omitempty"`
	// Error says why the endpoint did not answer.
	Error string `json:"error,omitempty"`
	// err is the error that Error says.
	err error
}

// heldUntilLayout is the layout of writes_held_until: RFC 3339 with
// milliseconds.
const heldUntilLayout = "2006-01-02T15:04:05.000Z07:00"

// endpointOf is the status st that the node at ep answered at time at, or
// err.
func endpointOf(ep string, st *client.NodeStatus, at time.Time, err error) endpointJSON {
	if err != nil {
		return endpointJSON{Endpoint: ep, Error: withoutLibraryHint(strings.TrimPrefix(err.Error(), "leased: "), err), err: err}
	}
	e := endpointJSON{Endpoint: ep, Name: st.Name, ClientAddr: st.ClientAddr, PeerAddr: st.PeerAddr, Role: st.Role,
		RaftTerm: st.RaftTerm, CommitIndex: st.CommitIndex, AppliedIndex: st.AppliedIndex,
		Leader: st.Leader, LeaderAddr: st.LeaderAddr, WritesHeldForSeconds: seconds(st.WritesHeldFor), Alarm: st.Alarm,
		Version: st.Version, Policy: st.Policy}
	if st.WritesHeldFor > 0 {
		// The answer's time bounds the node's from above, so the time is
		// never earlier than the node's own.
		e.WritesHeldUntil = at.Add(st.WritesHeldFor).Format(heldUntilLayout)
	}
	return e
}

// row is the endpoint's row in the endpoint status table, printed at time
// now. On the leader, WRITES is "allowed", or "until" the local time it
// holds writes until and, in parentheses, how long that is from now; it
// comes last, as it may hold spaces.
func (e endpointJSON) row(now time.Time) []string {
	if e.Error != "" {
		return []string{e.Endpoint, "-", "-", "-", "unreachable", "-", "-", "-", "-", "-", "-", "-"}
	}
	writes := "allowed"
	if e.Role != protocol.RoleLeader {
		writes = "-"
	} else if until, err := time.Parse(heldUntilLayout, e.WritesHeldUntil); err == nil {
		left := max(until.Sub(now), 0)
		writes = "until " + until.Format("15:04:05.000") + " (" + strconv.FormatFloat(left.Seconds(), 'f', 1, 64) + "s)"
	}
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	return []string{e.Endpoint, dash(e.Name), dash(e.ClientAddr), dash(e.PeerAddr), e.Role,
		u(e.RaftTerm), u(e.CommitIndex), u(e.AppliedIndex), dash(e.Leader), dash(e.Version), dash(e.Policy), writes}
}

var endpointHeader = []string{"ENDPOINT", "NAME", "CLIENT_ADDR", "PEER_ADDR", "ROLE", "RAFT_TERM", "COMMIT", "APPLIED", "LEADER", "VERSION", "POLICY", "WRITES"}

// endpoints returns the --endpoints list.
func (a *app) endpoints() []string { return strings.Split(a.endpoint, ",") }

// dialAdmin opens an admin session with the node at addr, within ctx.
func (a *app) dialAdmin(ctx context.Context, addr string) (*client.Admin, error) {
	cfg, err := a.clientConfig()
	if err != nil {
		return nil, err
	}
	adm, err := client.DialAdmin(ctx, addr, cfg)
	if err != nil {
		return nil, &dialError{ca: a.usedCA, err: err}
	}
	return adm, nil
}

// eachStatus asks every endpoint for its status, each within --timeout,
// and returns the answers in the order of --endpoints. An endpoint that
// does not answer has its error in its entry.
func (a *app) eachStatus() []endpointJSON {
	eps := a.endpoints()
	out := make([]endpointJSON, len(eps))
	done := make(chan struct{})
	for i, ep := range eps {
		go func() {
			defer func() { done <- struct{}{} }()
			ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
			defer cancel()
			adm, err := a.dialAdmin(ctx, ep)
			if err != nil {
				out[i] = endpointOf(ep, nil, time.Time{}, err)
				return
			}
			defer adm.Close()
			st, err := adm.Status(ctx)
			out[i] = endpointOf(ep, st, time.Now(), err)
		}()
	}
	for range eps {
		<-done
	}
	return out
}

// errSomeUnreachable is the error of endpoint status when an endpoint did
// not answer (exit status 3).
var errSomeUnreachable = errors.New("not every endpoint answered")

func (a *app) endpointCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "endpoint",
		Short: "Ask each node of --endpoints about itself",
		RunE:  func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Print each endpoint's addresses, role, raft term, commit and applied index, and leader",
		Long: `Ask every node given with --endpoints, each directly and followers too, for
its name, client and peer address, role (leader, follower or candidate), raft
term, commit and applied index, the leader it knows, and, on the leader,
whether it still holds writes after taking the lead: WRITES shows "allowed",
or the local time until which it holds them and how long that is from now
(until 15:04:05.000 (2.3s)). An endpoint that does not answer is shown as
unreachable, the error is printed on stderr, and leasectl exits with status 3;
with status 2 if the cause is the command line, such as TLS files that do not
fit that node (see "leasectl --help").

It needs no right under an access policy: any client a node lets in may ask.`,
		Example: `  leasectl --endpoints 127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403 endpoint status`,
		Args:    argsExactly(),
		RunE: func(cmd *cobra.Command, args []string) error {
			sts := a.eachStatus()
			rows := make([][]string, len(sts))
			failed := 0
			now := time.Now()
			for i, st := range sts {
				rows[i] = st.row(now)
				if st.Error != "" {
					failed++
				}
			}
			if err := a.emit(struct {
				Endpoints []endpointJSON `json:"endpoints"`
			}{sts}, endpointHeader, rows...); err != nil {
				return err
			}
			if failed == 0 {
				return nil
			}
			why := ""
			for _, st := range sts {
				if st.Error != "" {
					why += "\n  " + st.Endpoint + ": " + st.Error
				}
			}
			err := fmt.Errorf("%w: %d of %d unreachable:%s", errSomeUnreachable, failed, len(sts), why)
			if cause := commandLineCause(sts); cause != nil {
				// The TLS files do not fit, or an argument: status 2,
				// with the hint for the cause.
				return causedBy{err, cause}
			}
			return &cliError{code: exitUnavailable, err: err}
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "health",
		Short: "Check that each endpoint answers, knows a leader, and takes writes",
		Long: `Ask every node given with --endpoints, each directly, whether it is healthy:
it answers within --timeout, it knows the leader of its cluster (a server
alone leads itself), and it has no NOSPACE alarm, which would refuse writes.
Each endpoint's line says how long its answer took, or why it is unhealthy.
leasectl exits with status 3 if any endpoint is unhealthy; with status 2 if
the cause is the command line, such as TLS files that do not fit that node
(see "leasectl --help").

It needs no right under an access policy: any client a node lets in may ask.`,
		Example: `  leasectl --endpoints 127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403 endpoint health`,
		Args:    argsExactly(),
		RunE:    func(cmd *cobra.Command, args []string) error { return a.endpointHealth() },
	})
	return cmd
}

// healthJSON is one endpoint's answer in endpoint health.
type healthJSON struct {
	Endpoint    string  `json:"endpoint"`
	Health      bool    `json:"health"`
	TookSeconds float64 `json:"took_seconds"`
	// Error says why the endpoint is unhealthy.
	Error string `json:"error,omitempty"`
}

// endpointHealth runs endpoint health.
func (a *app) endpointHealth() error {
	start := time.Now()
	sts := a.eachStatus()
	took := time.Since(start)
	out := make([]healthJSON, len(sts))
	rows := make([][]string, len(sts))
	var why []string
	for i, st := range sts {
		h := healthJSON{Endpoint: st.Endpoint, Health: true, TookSeconds: took.Seconds(), Error: st.Error}
		switch {
		case st.Error != "":
		case st.Alarm != "":
			h.Error = st.Alarm
		case st.Leader == "" && st.Role != "leader":
			h.Error = "it knows no leader"
		}
		if h.Error != "" {
			h.Health = false
			why = append(why, st.Endpoint+": "+h.Error)
		}
		out[i] = h
		rows[i] = []string{h.Endpoint, strconv.FormatBool(h.Health), took.Round(time.Millisecond).String(), cmp.Or(h.Error, "-")}
	}
	if err := a.emit(struct {
		Endpoints []healthJSON `json:"endpoints"`
	}{out}, []string{"ENDPOINT", "HEALTH", "TOOK", "ERROR"}, rows...); err != nil {
		return err
	}
	if len(why) == 0 {
		return nil
	}
	err := fmt.Errorf("%d of %d endpoints unhealthy:\n  %s", len(why), len(sts), strings.Join(why, "\n  "))
	if cause := commandLineCause(sts); cause != nil {
		return causedBy{err, cause}
	}
	return &cliError{code: exitUnavailable, err: err}
}

// causedBy is err, whose message it keeps, with the error that caused it,
// which errors.Is and errors.As find too.
type causedBy struct{ err, cause error }

func (e causedBy) Error() string   { return e.err.Error() }
func (e causedBy) Unwrap() []error { return []error{e.err, e.cause} }

// commandLineCause returns the first error of sts that says the command
// line cannot work with that endpoint (refusesCommandLine), or nil.
func commandLineCause(sts []endpointJSON) error {
	for _, st := range sts {
		if st.err != nil && refusesCommandLine(st.err) {
			return st.err
		}
	}
	return nil
}

// leaderRetry is how long leaderAdmin waits before it asks the endpoints
// again, while none leads or knows the leader (an election).
const leaderRetry = 100 * time.Millisecond

// leaderAdmin opens an admin session with the node that leads: the first
// endpoint that answers says whether it leads or names the leader. While
// no endpoint does, it asks again until ctx ends, unless the command line
// cannot work with an endpoint (refusesCommandLine): that error it returns
// at once.
func (a *app) leaderAdmin(ctx context.Context) (*client.Admin, error) {
	for {
		adm, err := a.findLeader(ctx)
		if err == nil || refusesCommandLine(err) {
			return adm, err
		}
		t := time.NewTimer(leaderRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// findLeader is one round of leaderAdmin.
func (a *app) findLeader(ctx context.Context) (*client.Admin, error) {
	var errs []error
	for _, ep := range a.endpoints() {
		adm, err := a.dialAdmin(ctx, ep)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st, err := adm.Status(ctx)
		switch {
		case err != nil:
			adm.Close()
			errs = append(errs, err)
			continue
		case st.Role == protocol.RoleLeader:
			return adm, nil
		}
		adm.Close()
		if st.LeaderAddr == "" {
			errs = append(errs, fmt.Errorf("%s (%s) does not know the leader yet", ep, st.Name))
			continue
		}
		if adm, err = a.dialAdmin(ctx, st.LeaderAddr); err != nil {
			errs = append(errs, err)
			continue
		}
		return adm, nil
	}
	for _, err := range errs {
		if refusesCommandLine(err) {
			return nil, err
		}
	}
	return nil, &cliError{code: exitUnavailable, err: fmt.Errorf("no endpoint leads or names the leader: %w", errors.Join(errs...))}
}

// withLeader runs fn in an admin session with the leader, within
// --timeout.
func (a *app) withLeader(fn func(ctx context.Context, adm *client.Admin) error) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.timeout)
	defer cancel()
	adm, err := a.leaderAdmin(ctx)
	if err != nil {
		return err
	}
	defer adm.Close()
	return fn(ctx, adm)
}

func memberRows(ms []client.Member) ([]memberJSON, [][]string) {
	out := make([]memberJSON, len(ms))
	rows := make([][]string, len(ms))
	for i, m := range ms {
		out[i] = memberJSON{Name: m.Name, PeerAddr: m.PeerAddr, Voter: m.Voter, Leader: m.Leads}
		suffrage := "voter"
		if !m.Voter {
			suffrage = "nonvoter"
		}
		rows[i] = []string{m.Name, m.PeerAddr, suffrage, strconv.FormatBool(m.Leads)}
	}
	return out, rows
}

func (a *app) memberCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "member",
		Short: "List and change the members of a cluster",
		Long: `List the members of a cluster, add and remove voters, and hand the lead to
another voter. leasectl finds the leader among --endpoints (any node names it)
and asks it.

Under an access policy (leased --auth-policy), add, remove and transfer need
the admin right ("admin: true" for the identity of --cert): the leader
refuses any other client with "permission denied", naming it (exit status 1).
list needs no right.

Exit status: 4 for a NAME that is no member; 2 for a change the cluster
cannot take (a name or peer address a member has already, the removal of the
last voter, a transfer to a non-voter, any change on a
server alone); 3 if no endpoint leads or names the leader within --timeout.`,
		RunE: func(cmd *cobra.Command, args []string) error { return cmd.Help() },
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "list",
		Short: "Print the members: name, peer address, suffrage, and which leads",
		Long: `Print the members as the leader's latest configuration has them: name, peer
address, suffrage (voter or nonvoter), and which leads. A server alone lists
itself. It needs no right under an access policy.`,
		Args: argsExactly(),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withLeader(func(ctx context.Context, adm *client.Admin) error {
				ms, err := adm.Members(ctx)
				if err != nil {
					return err
				}
				out, rows := memberRows(ms)
				return a.emit(struct {
					Members []memberJSON `json:"members"`
				}{out}, []string{"NAME", "PEER_ADDR", "SUFFRAGE", "LEADER"}, rows...)
			})
		},
	}, &cobra.Command{
		Use:   "add NAME PEER_ADDR",
		Short: "Add a voter that its peers reach at PEER_ADDR",
		Long: `Add a voter named NAME, which the other nodes reach at PEER_ADDR (its
--peer-listen). Start the new node first, with --initial-cluster-state
existing and no --initial-cluster: it waits until it is added, then receives
the log from the leader. A name or peer address that a member has already is
refused (status 2).

Under an access policy it needs the admin right.`,
		Example: `  leasectl --endpoints 127.0.0.1:7401 member add n4 127.0.0.1:7514`,
		Args:    argsExactly("NAME", "PEER_ADDR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withLeader(func(ctx context.Context, adm *client.Admin) error {
				if err := adm.AddMember(ctx, args[0], args[1]); err != nil {
					return err
				}
				return a.emit(memberJSON{Name: args[0], PeerAddr: args[1], Voter: true},
					[]string{"ADDED", "PEER_ADDR"}, []string{args[0], args[1]})
			})
		},
	}, &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a member; the removed node stops",
		Long: `Remove member NAME. Once it learns of it, the removed node stops serving and
its leased exits with status 1. Removing the last voter is refused (status 2);
a NAME that is no member is not found (status 4).

Under an access policy it needs the admin right.`,
		Args: argsExactly("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withLeader(func(ctx context.Context, adm *client.Admin) error {
				if err := adm.RemoveMember(ctx, args[0]); err != nil {
					return err
				}
				return a.emit(struct {
					Removed string `json:"removed"`
				}{args[0]}, []string{"REMOVED"}, []string{args[0]})
			})
		},
	}, &cobra.Command{
		Use:   "transfer [NAME]",
		Short: "Hand the lead to voter NAME, or to the one raft picks",
		Long: `Hand the lead to voter NAME, or without NAME to the voter raft picks, and
print the leader before and after (TO is "-" if no new leader is known yet).
A NAME that leads already is left leading (status 0; FROM and TO are the
same), as etcd's move-leader does. A non-voter is refused (status 2), and so
is a transfer with no other voter; a NAME that is no member is not found
(status 4).

Under an access policy it needs the admin right.`,
		Args: argsRange(0, "NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			to := ""
			if len(args) == 1 {
				to = args[0]
			}
			return a.withLeader(func(ctx context.Context, adm *client.Admin) error {
				before, err := adm.Status(ctx)
				if err != nil {
					return err
				}
				if err := adm.TransferLead(ctx, to); err != nil {
					return err
				}
				after, err := adm.Status(ctx)
				if err != nil {
					return err
				}
				leader := after.Leader
				if leader == "" {
					leader = "-"
				}
				return a.emit(struct {
					From string `json:"from"`
					To   string `json:"to,omitempty"`
				}{before.Name, after.Leader}, []string{"FROM", "TO"}, []string{before.Name, leader})
			})
		},
	})
	return cmd
}

// clusterStatus is the cluster part of status: the members from the
// leader, each with the status of the endpoint that is that member, if
// one of --endpoints is. It returns nil for a server that is not a node of
// a cluster.
func (a *app) clusterStatus(ctx context.Context) ([]memberJSON, error) {
	sts := a.eachStatus()
	clustered := false
	for _, st := range sts {
		if st.Error == "" && st.PeerAddr != "" {
			clustered = true
		}
	}
	if !clustered {
		return nil, nil
	}
	adm, err := a.leaderAdmin(ctx)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	ms, err := adm.Members(ctx)
	if err != nil {
		return nil, err
	}
	out, _ := memberRows(ms)
	for i := range out {
		for j := range sts {
			if sts[j].Error == "" && sts[j].Name == out[i].Name {
				out[i].Status = &sts[j]
			}
		}
	}
	return out, nil
}

// printClusterStatus prints the members table of status.
func (a *app) printClusterStatus(ms []memberJSON) error {
	rows := make([][]string, len(ms))
	for i, m := range ms {
		if m.Status == nil {
			rows[i] = []string{m.Name, m.PeerAddr, "-", "unknown", "-", "-", "-"}
			continue
		}
		s := m.Status
		u := func(n uint64) string { return strconv.FormatUint(n, 10) }
		rows[i] = []string{m.Name, m.PeerAddr, s.ClientAddr, s.Role, u(s.RaftTerm), u(s.CommitIndex), u(s.AppliedIndex)}
	}
	fmt.Fprintln(a.stdout)
	return a.emit(nil, []string{"MEMBER", "PEER_ADDR", "CLIENT_ADDR", "ROLE", "RAFT_TERM", "COMMIT", "APPLIED"}, rows...)
}
