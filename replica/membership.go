// This file is what the rest of leased may know of raft: the node's peer
// network, its role and indexes, who leads, and the membership changes.
// No other package imports raft (DESIGN §1).

package replica

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/store"
)

// Network is a node's peer port: raft's messages to and from the other
// nodes travel over TCP with mutual TLS 1.3 (StreamLayer).
type Network struct {
	// Listener accepts the peers' connections. The node owns it from
	// Open on, and closes it in Close (or in Open, if Open fails).
	Listener net.Listener
	// Advertise is the address, host:port, that the other nodes dial to
	// reach this one, which raft records in the cluster's configuration.
	Advertise string
	// TLS and ClientTLS are the two sides of the peer port's mutual TLS
	// (see internal/tlsfiles.PeerTLS).
	TLS, ClientTLS *tls.Config
	// Routes maps the names of peers to the addresses this node dials
	// them at instead of their address in the configuration (tunnels,
	// NAT, and the fault-injection proxies of tests). Nil: none.
	Routes map[string]string
}

// transport builds raft's network transport on the peer port, and the
// routes it dials by, nil if there are none.
func (nw *Network) transport(log *slog.Logger) (*raft.NetworkTransport, *peerRoutes, error) {
	adv, err := net.ResolveTCPAddr("tcp", nw.Advertise)
	if err != nil {
		nw.Listener.Close()
		return nil, nil, fmt.Errorf("peer address %q: %w", nw.Advertise, err)
	}
	tc := &raft.NetworkTransportConfig{
		Stream:  NewStreamLayer(nw.Listener, adv, nw.TLS, nw.ClientTLS),
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  HCLogger(log),
		// 1 turns raft's pipelined replication off: every AppendEntries
		// waits for its answer. With pipelining (raft v1.8.0), a follower
		// that refuses an entry ends the pipeline's decoder while the
		// sender may block handing it the next request, for good: that
		// follower gets no entry again until the leader restarts, and the
		// leader's raft never shuts down (seen here as a test whose
		// cluster's Close hung, with the sender parked in
		// netPipeline.AppendEntries).
		MaxRPCsInFlight: 1,
	}
	var routes *peerRoutes
	if len(nw.Routes) > 0 {
		routes = newPeerRoutes(nw.Routes)
		tc.ServerAddressProvider = routes
	}
	return raft.NewNetworkTransportWithConfig(tc), routes, nil
}

// Member is one node of a cluster's configuration.
type Member struct {
	ID      string
	Address string // its peer address
	// Voter says that it votes, and may lead; a node being added does
	// not vote until it has caught up.
	Voter bool
}

// raftServers is ms as raft's configuration, every member a voter; nil
// for nil.
func raftServers(ms []Member) []raft.Server {
	if ms == nil {
		return nil
	}
	out := make([]raft.Server, 0, len(ms))
	for _, m := range ms {
		out = append(out, raft.Server{ID: raft.ServerID(m.ID), Address: raft.ServerAddress(m.Address)})
	}
	return out
}

// Roles of a node, as Status reports them.
const (
	RoleLeader    = "leader"
	RoleFollower  = "follower"
	RoleCandidate = "candidate"
	RoleShutdown  = "shutdown"
)

// Status is a node's view of raft at one moment.
type Status struct {
	Role string // RoleLeader, RoleFollower, RoleCandidate or RoleShutdown
	// Term is the raft term, CommitIndex the last entry known committed,
	// and AppliedIndex the last one raft handed the state machine.
	Term, CommitIndex, AppliedIndex uint64
	// Leader is the ID of the leader this node knows, "" if none.
	Leader string
	// LastContact is when this node last heard from a leader; zero if it
	// leads or never did.
	LastContact time.Time
}

// Status returns the node's role, term, indexes and the leader it knows.
func (n *Node) Status() Status {
	r := n.raft
	st := Status{Term: r.CurrentTerm(), CommitIndex: r.CommitIndex(), AppliedIndex: r.AppliedIndex(), LastContact: r.LastContact()}
	switch r.State() {
	case raft.Leader:
		st.Role = RoleLeader
	case raft.Candidate:
		st.Role = RoleCandidate
	case raft.Follower:
		st.Role = RoleFollower
	default:
		st.Role = RoleShutdown
	}
	_, id := r.LeaderWithID()
	st.Leader = string(id)
	return st
}

// Term is the node's current raft term.
func (n *Node) Term() uint64 { return n.raft.CurrentTerm() }

// Leader returns the ID of the leader this node knows, "" if none.
func (n *Node) Leader() string {
	_, id := n.raft.LeaderWithID()
	return string(id)
}

// Members returns the latest configuration this node knows (which may not
// be committed yet), in raft's order.
func (n *Node) Members() ([]Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("replica: raft configuration: %w", err)
	}
	servers := f.Configuration().Servers
	out := make([]Member, 0, len(servers))
	for _, sv := range servers {
		out = append(out, Member{ID: string(sv.ID), Address: string(sv.Address), Voter: sv.Suffrage == raft.Voter})
	}
	return out, nil
}

// membershipWait bounds how long raft may take to commit a membership
// change.
const membershipWait = 10 * time.Second

// AddVoter adds the voter id, reached at peer address addr, and returns
// once the new configuration is committed, within ctx. Only the leader
// adds: elsewhere the error wraps store.ErrNotLeader.
func (n *Node) AddVoter(ctx context.Context, id, addr string) error {
	return awaitFuture(ctx, n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, membershipWait))
}

// RemoveMember removes member id and returns once the new configuration is
// committed, within ctx. Only the leader removes: elsewhere the error
// wraps store.ErrNotLeader.
func (n *Node) RemoveMember(ctx context.Context, id string) error {
	return awaitFuture(ctx, n.raft.RemoveServer(raft.ServerID(id), 0, membershipWait))
}

// TransferLead hands the lead to member to, at peer address addr, or, if
// to is empty, to the voter raft picks. It returns once this node stepped
// down or the transfer failed (raft bounds it by its election timeout),
// within ctx. Only the leader hands over: elsewhere the error wraps
// store.ErrNotLeader.
func (n *Node) TransferLead(ctx context.Context, to, addr string) error {
	if to == "" {
		return awaitFuture(ctx, n.raft.LeadershipTransfer())
	}
	return awaitFuture(ctx, n.raft.LeadershipTransferToServer(raft.ServerID(to), raft.ServerAddress(addr)))
}

// StopRaft stops raft on this node, which neither keeps the lead nor wins
// it again, while the state and the log stay open until Close: for a node
// whose state machine stopped (Failure).
func (n *Node) StopRaft() error { return n.raft.Shutdown().Error() }

// awaitFuture waits for a raft future within ctx. raft's errors of a node that
// does not lead wrap store.ErrNotLeader; a ctx that ends first returns
// its error, and leaves the future to raft, which resolves it within its
// own timeout.
func awaitFuture(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return fmt.Errorf("%w: %w", store.ErrNotLeader, err)
		}
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
