package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/core"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// Cluster configures a server that is one node of a replicated cluster
// (DESIGN §13). Only the node that leads serves clients; the others answer
// a hello with CodeNotLeader and the leader's client address.
type Cluster struct {
	// Name names this node in the cluster. It must not change across
	// restarts.
	Name string
	// PeerAddr is the TCP address the other nodes reach this one at. The
	// node listens on it unless PeerListener is set.
	PeerAddr string
	// PeerListener, if set, is where the node accepts its peers instead
	// of binding PeerAddr (tests and embedders). The server closes it.
	PeerListener net.Listener
	// Peers is the initial cluster, this node included, used only when
	// the node starts with no log: every node of a new cluster gets the
	// same list. Nil means a cluster of this node alone.
	Peers []Peer
	// PeerTLS and PeerClientTLS are the two sides of the peer port's
	// mutual TLS (see internal/tlsfiles.PeerTLS). Both are required.
	PeerTLS, PeerClientTLS *tls.Config
	// PeerRoutes maps the names of peers to the addresses this node
	// dials them at, in place of their PeerAddr in the cluster's
	// configuration: for tunnels, NAT, and the fault-injection proxies of
	// tests. The peer's certificate must name the route's host. Nil means
	// every peer is dialled at its PeerAddr.
	PeerRoutes map[string]string
	// Replica tunes raft: its timeouts, snapshots and entry size. Dir,
	// ID, Transport, Bootstrap, Join, Clock and Logger are the server's.
	// Its timeouts are checked at start against their bounds and each
	// other (replica.Config.Validate).
	Replica replica.Config
	// Join, for a node that starts with no log, means that it joins a
	// cluster that runs already: it bootstraps nothing and waits until the
	// leader adds it (Server.AddMember, `leasectl member add`). Peers must
	// be nil. A node with a log ignores it.
	Join bool
}

// Peer is one node of the initial cluster.
type Peer struct {
	Name string
	Addr string // its PeerAddr
}

// failoverTTL is the shortest TTL a TTL lease of the cluster may have:
// three election timeouts (the default's if none is set), which a lease
// must outlive, as no keep-alive gets through during a failover; 0 for an
// election timeout out of bounds, which validate refuses.
func (c *Cluster) failoverTTL() time.Duration {
	e := cmp.Or(c.Replica.ElectionTimeout, replica.DefaultElectionTimeout)
	if e < 0 || e > replica.MaxRaftTimeout {
		return 0
	}
	return 3 * e
}

func (c *Cluster) validate() error {
	switch {
	case c.Name == "":
		return errors.New("cluster: Name is empty")
	case c.PeerAddr == "":
		return errors.New("cluster: PeerAddr is empty")
	case c.PeerTLS == nil || c.PeerClientTLS == nil:
		return errors.New("cluster: PeerTLS and PeerClientTLS are required")
	}
	if _, _, err := net.SplitHostPort(c.PeerAddr); err != nil {
		return fmt.Errorf("cluster: PeerAddr %q: %w", c.PeerAddr, err)
	}
	if err := c.Replica.Validate(); err != nil {
		return fmt.Errorf("cluster: Replica.%w", err)
	}
	if err := c.validatePeerRoutes(); err != nil {
		return err
	}
	if c.Join && c.Peers != nil {
		return errors.New("cluster: a node that joins a running cluster (Join) takes no initial Peers: the leader sends it the members")
	}
	if c.Peers == nil {
		return nil
	}
	seen := map[string]bool{}
	self := false
	for _, p := range c.Peers {
		if p.Name == "" || p.Addr == "" {
			return fmt.Errorf("cluster: peer %q at %q: a peer needs a name and an address", p.Name, p.Addr)
		}
		if seen[p.Name] {
			return fmt.Errorf("cluster: peer %q named twice", p.Name)
		}
		seen[p.Name] = true
		if p.Name == c.Name {
			if p.Addr != c.PeerAddr {
				return fmt.Errorf("cluster: this node %q is at %q in Peers but its PeerAddr is %q", c.Name, p.Addr, c.PeerAddr)
			}
			self = true
		}
	}
	if !self {
		return fmt.Errorf("cluster: Peers does not name this node %q", c.Name)
	}
	return nil
}

// openCluster starts this node's raft on the peer port.
func openCluster(cfg Config) (*replica.Node, error) {
	cl := cfg.Cluster
	ln := cl.PeerListener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cl.PeerAddr); err != nil {
			return nil, fmt.Errorf("peer listen: %w", err)
		}
	}
	adv, err := net.ResolveTCPAddr("tcp", cl.PeerAddr)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("peer address %q: %w", cl.PeerAddr, err)
	}
	stream := replica.NewStreamLayer(ln, adv, cl.PeerTLS, cl.PeerClientTLS)
	tc := &raft.NetworkTransportConfig{
		Stream:  stream,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  replica.HCLogger(cfg.Logger),
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
	if len(cl.PeerRoutes) > 0 {
		routes = newPeerRoutes(cl.PeerRoutes)
		tc.ServerAddressProvider = routes
	}
	trans := raft.NewNetworkTransportWithConfig(tc)
	rc := cl.Replica
	rc.Dir, rc.ID, rc.Transport, rc.Clock, rc.Logger = cfg.Dir, raft.ServerID(cl.Name), trans, cfg.Clock, cfg.Logger
	rc.Bootstrap, rc.Join = nil, cl.Join
	for _, p := range cl.Peers {
		rc.Bootstrap = append(rc.Bootstrap, raft.Server{ID: raft.ServerID(p.Name), Address: raft.ServerAddress(p.Addr)})
	}
	n, err := replica.Open(rc)
	if err != nil {
		trans.Close()
		return nil, err
	}
	if routes != nil {
		routes.raft.Store(n.Raft())
	}
	return n, nil
}

// Leads reports whether the server serves clients: always for a server
// alone, and for a node of a cluster while it leads and its core runs.
func (s *Server) Leads() bool { return s.currentCore() != nil }

// leadPoll is how often a node of a cluster checks whether it leads.
const leadPoll = 10 * time.Millisecond

// lead runs while a node of a cluster serves: it starts a core when the
// node comes to lead, and stops it, closing its sessions, when the node
// stops leading.
func (s *Server) lead() {
	defer close(s.leadDone)
	t := time.NewTicker(leadPoll)
	defer t.Stop()
	w := s.watchMembership()
	defer w.stop()
	for polls := 1; ; polls++ {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if w.removed(polls) {
			s.leaveCluster()
			return
		}
		if err := s.node.Failure(); err != nil {
			s.leaveOnFailure(err)
			return
		}
		leading := s.node.IsLeader()
		s.smu.Lock()
		c, term := s.core, s.leadTerm
		s.smu.Unlock()
		if c != nil && s.node.Raft().CurrentTerm() != term {
			// The node lost the lead and won it back between two polls:
			// another leader may have granted leases meanwhile, which
			// only a new core, which reads the store again, respects.
			leading = false
		}
		switch {
		case leading && c == nil:
			if err := s.takeLead(); err != nil {
				s.log.Warn("could not take the lead", "err", err)
			}
		case !leading && c != nil:
			s.dropLead(c)
		}
	}
}

// takeLead makes this node serve: it waits until every committed entry is
// applied here, records itself as the leader for the other nodes to send
// clients to, and starts a core, which holds writes back until the old
// leader's leases have run out (the failover rule).
func (s *Server) takeLead() error {
	ctx, cancel := context.WithTimeout(context.Background(), leaderWait)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	term := s.node.Raft().CurrentTerm()
	if err := s.node.WaitLeading(ctx); err != nil {
		return err
	}
	if _, err := s.node.Apply([]store.Command{{Op: store.OpSetLeader, Key: []byte(s.cfg.Cluster.Name), Value: []byte(s.Addr().String())}}); err != nil {
		return err
	}
	cfg := s.cfg.coreConfig()
	cfg.Admit = s.admitter()
	cfg.Replicated = true
	cfg.Clockname = s.node.Clockname()
	cfg.Inherited = s.node.Inherited()
	c, err := core.New(cfg, nodeStore{s.node}, s)
	if err != nil {
		return err
	}
	if s.node.Raft().CurrentTerm() != term || !s.node.IsLeader() {
		c.Close()
		return errors.New("lost the lead while taking it")
	}
	s.smu.Lock()
	if s.closing {
		s.smu.Unlock()
		c.Close()
		return nil
	}
	s.core, s.leadTerm = c, term
	s.smu.Unlock()
	s.metrics.leaderChanges.Add(1)
	s.log.Info("leading the cluster", "node", s.cfg.Cluster.Name, "writes_held_for", c.WritesAllowedIn())
	return nil
}

// dropLead stops serving after this node lost the lead: it closes the
// sessions of core c, whose clients go to the new leader, and stops c.
func (s *Server) dropLead(c *core.Core) {
	s.metrics.leaderChanges.Add(1)
	s.smu.Lock()
	s.core = nil
	var gone []*session
	for _, sess := range s.sessions {
		if sess.core == c {
			gone = append(gone, sess)
		}
	}
	s.smu.Unlock()
	s.log.Info("no longer leading the cluster", "node", s.cfg.Cluster.Name, "sessions_closed", len(gone))
	err := s.notLeader()
	for _, sess := range gone {
		sess.closeWith(err)
	}
	// c must outlive its sessions (core.Core.Close): a session that ends
	// after it would abandon its writes into a core that no longer commits
	// them, and their writers, and the bytes they hold against
	// MaxTotalInflightBytes, would never be answered. Their connections
	// are closed, so they end at once.
	for _, sess := range gone {
		<-sess.ended
	}
	c.Close()
}

// errNotLeader is the error of a node that does not lead.
var errNotLeader = errors.New("this node does not lead the cluster")

// notLeaderError is errNotLeader with the leader's client address, if this
// node knows it.
type notLeaderError struct{ leader string }

func (e notLeaderError) Error() string {
	if e.leader == "" {
		return errNotLeader.Error() + "; the leader is not known yet"
	}
	return errNotLeader.Error() + "; the leader serves clients at " + e.leader
}

func (e notLeaderError) Unwrap() error { return errNotLeader }

// notLeader returns the error a follower answers a client with: it names
// the leader's client address when the leader raft knows of has recorded
// one.
func (s *Server) notLeader() error {
	_, id := s.node.Raft().LeaderWithID()
	st, err := s.node.State()
	if err != nil || id == "" || string(id) != st.Leader {
		return notLeaderError{}
	}
	return notLeaderError{leader: st.LeaderAddr}
}

// nodeStore is the node as the store of one core: the server, not the
// core, closes the node, which outlives each term of leadership.
type nodeStore struct{ *replica.Node }

func (nodeStore) Close() error { return nil }

// notLeaderReply is the answer to a hello on a node that does not lead.
func notLeaderReply(err error) *protocol.Error {
	e := &protocol.Error{Code: protocol.CodeNotLeader, Message: err.Error()}
	var nl notLeaderError
	if errors.As(err, &nl) {
		e.Leader = nl.leader
	}
	return e
}
