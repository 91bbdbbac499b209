package node

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/diskguard"
	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// Config configures a Node. Package server fills it from its own Config,
// with defaults applied and validated.
type Config struct {
	// Dir is the data folder: the replica's database and log, and the
	// disk guard's lock file.
	Dir string
	// Core is the configuration of every core the node makes. The node
	// sets Admit, Replicated, Clockname, Inherited, LeaderName and
	// LeaderAddr itself.
	Core core.Config
	// Store, if set, holds the node's state instead of a replica under Dir
	// (tests and embedders: store.NewMemory). Such a node is a cluster of
	// one that takes no snapshots and has no disk guard. The node owns it
	// from Open on, and closes it in Close, or in Open if Open fails.
	Store store.Store
	// Cluster, if set, makes the node one of a replicated cluster. Nil
	// means a cluster of this node alone, with no peer port. Store must
	// then be nil.
	Cluster *Cluster
	// QuotaBytes, ReserveBytes and DiskUsage configure the disk guard of
	// a node that keeps its state in Dir (diskguard.Config).
	QuotaBytes, ReserveBytes int64
	DiskUsage                diskguard.Meter
	// Clock reads time for the replica and every core; nil: the system's.
	Clock clock.Clock
	// Logger receives the node's logs; nil: slog.Default().
	Logger *slog.Logger
}

// Cluster configures a node of a replicated cluster (DESIGN §13). Only the
// node that leads serves clients; the others answer a hello with
// CodeNotLeader and the leader's client address.
type Cluster struct {
	// Name names this node in the cluster. It must not change across
	// restarts.
	Name string
	// PeerAddr is the TCP address the other nodes reach this one at. The
	// node listens on it unless PeerListener is set.
	PeerAddr string
	// PeerListener, if set, is where the node accepts its peers instead
	// of binding PeerAddr (tests and embedders). The node closes it.
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
	// ID, Network, Transport, Bootstrap, Join, Clock, Logger and Refuse
	// are the node's. Its timeouts are checked at start against their
	// bounds and each other (replica.Config.Validate).
	Replica replica.Config
	// Join, for a node that starts with no log, means that it joins a
	// cluster that runs already: it bootstraps nothing and waits until the
	// leader adds it (Node.AddMember, `leasectl member add`). Peers must
	// be nil. A node with a log ignores it.
	Join bool
}

// Peer is one node of the initial cluster.
type Peer struct {
	Name string
	Addr string // its PeerAddr
}

// FailoverTTL is the shortest TTL a TTL lease of the cluster may have:
// three election timeouts (the default's if none is set), which a lease
// must outlive, as no keep-alive gets through during a failover; 0 for an
// election timeout out of bounds, which Validate refuses.
func (c *Cluster) FailoverTTL() time.Duration {
	e := cmp.Or(c.Replica.ElectionTimeout, replica.DefaultElectionTimeout)
	if e < 0 || e > replica.MaxRaftTimeout {
		return 0
	}
	return 3 * e
}

// Validate checks c and returns an error that begins with the name of the
// first bad field, as a field of a Config (Cluster.Name, Cluster.Replica.ElectionTimeout).
func (c *Cluster) Validate() error {
	switch {
	case c.Name == "":
		return errors.New("Cluster.Name is empty")
	case c.PeerAddr == "":
		return errors.New("Cluster.PeerAddr is empty")
	case c.PeerTLS == nil || c.PeerClientTLS == nil:
		return errors.New("Cluster.PeerTLS and PeerClientTLS are required")
	}
	if _, _, err := net.SplitHostPort(c.PeerAddr); err != nil {
		return fmt.Errorf("Cluster.PeerAddr %q: %w", c.PeerAddr, err)
	}
	if err := c.Replica.Validate(); err != nil {
		return fmt.Errorf("Cluster.Replica.%w", err)
	}
	if err := c.validatePeerRoutes(); err != nil {
		return err
	}
	if c.Join && c.Peers != nil {
		return errors.New("Cluster.Join: a node that joins a running cluster takes no initial Peers: the leader sends it the members")
	}
	if c.Peers == nil {
		return nil
	}
	seen := map[string]bool{}
	self := false
	for _, p := range c.Peers {
		if p.Name == "" || p.Addr == "" {
			return fmt.Errorf("Cluster.Peers: peer %q at %q: a peer needs a name and an address", p.Name, p.Addr)
		}
		if seen[p.Name] {
			return fmt.Errorf("Cluster.Peers: peer %q named twice", p.Name)
		}
		seen[p.Name] = true
		if p.Name == c.Name {
			if p.Addr != c.PeerAddr {
				return fmt.Errorf("Cluster.Peers: this node %q is at %q in Peers but its PeerAddr is %q", c.Name, p.Addr, c.PeerAddr)
			}
			self = true
		}
	}
	if !self {
		return fmt.Errorf("Cluster.Peers does not name this node %q", c.Name)
	}
	return nil
}

// validatePeerRoutes checks PeerRoutes: every route names a peer other
// than this node and a host:port address.
func (c *Cluster) validatePeerRoutes() error {
	for name, addr := range c.PeerRoutes {
		if name == "" {
			return fmt.Errorf("Cluster.PeerRoutes: a peer route to %q names no peer", addr)
		}
		if name == c.Name {
			return fmt.Errorf("Cluster.PeerRoutes: a peer route to this node %q: a node does not dial itself", name)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("Cluster.PeerRoutes: peer route %s=%q: %w", name, addr, err)
		}
	}
	return nil
}

// members is the initial cluster as the replica takes it; nil for nil.
func (c *Cluster) members() []replica.Member { return members(c.Peers) }

// members returns peers as replica members, every one a voter; nil for
// nil.
func members(peers []Peer) []replica.Member {
	if peers == nil {
		return nil
	}
	ms := make([]replica.Member, 0, len(peers))
	for _, p := range peers {
		ms = append(ms, replica.Member{ID: p.Name, Address: p.Addr, Voter: true})
	}
	return ms
}
