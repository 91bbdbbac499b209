// Package node owns one leased node's life, from New to Close: it takes
// the data folder (New), opens the node's state (Open: a replica, raft over
// badger in the data folder; or, for tests, the store.Store it is given,
// Config.Store), runs the leadership loop that makes a core for each term
// in which the node leads and closes it when the term ends, and owns what
// else a node does beside serving requests: membership changes and handing
// over the lead, backups, the disk guard, and its status and health.
//
// A server alone is a cluster of one node: the same Open, the same first
// step of the loop (takeLead), the same ownership rule. It leads from Open
// to Close, so its loop has nothing more to do after that first step.
//
// Package server is the transport above a Node: it serves each session
// with the core that serves now (Core), and is the node's Host, which the
// node tells when a core stops serving (Drop) and when the node stops for
// good (Stop). The node owns its store (the replica, or Config.Store) and
// every core it makes, and closes them; a core never closes its store.
//
// Lock order: Host's locks (the server's smu) may be held while calling
// Core, Leads and BeginStop. Core and Leads take only Node.mu; BeginStop
// takes Node.mu and, once it has let it go, the core's mu
// (core.Core.BeginStop). The node never holds mu while calling the Host or
// a core.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/diskguard"
	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// Host is the transport that serves a node's cores to clients: package
// server. The node calls it from its own goroutines.
type Host interface {
	// Invalidate and Recall carry the notices of every core the node
	// makes (core.Notifier).
	core.Notifier
	// ClientAddr returns the address clients reach this node at, which
	// the node records with each term it leads, for the other nodes to
	// send clients to.
	ClientAddr() string
	// Drop ends every session served by core c, which no longer serves,
	// with err, and returns how many it ended, once they have ended: c
	// must outlive its sessions (core.Core.Close).
	Drop(c *core.Core, err error) int
	// Stop stops serving clients for good, because of why (ErrRemoved,
	// ErrStateMachineStopped or ErrDataFolderLost, wrapped). It must not
	// wait for the node.
	Stop(why error)
}

// soloName is the raft name of a node alone, and what its status reports.
const soloName = "leased"

// soloTimeout is raft's heartbeat, election and leader-lease timeout in a
// cluster of one. It hears from no peer, and no other node can be
// elected: it may stand for election, and keep leading, at once, instead
// of after a LAN's heartbeat timeout. Every start of a server alone is
// 200 to 400 ms shorter.
const soloTimeout = 10 * time.Millisecond

// leaderWait bounds how long taking the lead may wait for this node to
// lead and to apply every committed entry.
const leaderWait = 30 * time.Second

// leadPoll is how often the loop of a node of a cluster checks whether it
// leads.
const leadPoll = 10 * time.Millisecond

// Node is one leased node. See the package comment. Its methods are safe
// for concurrent use.
type Node struct {
	cfg  Config
	log  *slog.Logger
	host Host
	// rep is the node's replica; nil for a node over Config.Store.
	rep *replica.Node
	// st is what each core applies its commands through: rep, or
	// Config.Store.
	st store.Store
	// guard watches the data folder (disk.go); nil with Config.Store.
	guard *diskguard.Guard
	// peerLn is Cluster.PeerListener until Open hands it to the replica.
	peerLn net.Listener

	mu      sync.Mutex // guards core, term and closing
	core    *core.Core // serves now; nil while the node does not lead
	term    uint64     // the raft term in which core took the lead
	closing bool

	leaderChanges atomic.Uint64

	dir directory // the members' client addresses and the confirmed leader (membership.go)
	// alarms are the members' NOSPACE alarms as this node last read them
	// from its applied state (disk.go); nil before the first read.
	alarms atomic.Pointer[[]store.MemberAlarm]

	stop      chan struct{} // closed by BeginStop
	stopOnce  sync.Once
	loops     sync.WaitGroup // the leadership loop, the disk watch and the alarm watch
	closeOnce sync.Once
	closeErr  error
}

// New makes the node of cfg and takes its data folder: it starts the disk
// guard, which refuses a folder another process holds, or a file system
// with less free than the reserve. It opens nothing else, so that the host
// may bind its socket between New and Open. The node owns cfg.Store and
// cfg.Cluster.PeerListener from New on: it closes them in Close, and a New
// that fails closes them too.
func New(cfg Config) (_ *Node, err error) {
	cfg.Clock = clock.OrReal(cfg.Clock)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	n := &Node{cfg: cfg, log: cfg.Logger, st: cfg.Store, stop: make(chan struct{})}
	if cfg.Cluster != nil {
		n.peerLn = cfg.Cluster.PeerListener
	}
	if cfg.Store == nil {
		if n.guard, err = openGuard(cfg); err != nil {
			n.closeState()
			return nil, err
		}
	}
	return n, nil
}

// Open opens the node's state in its data folder (or takes Config.Store).
// A node alone waits until it leads and starts its core (the loop's first
// step), so that it serves as soon as Open returns; a node of a cluster
// starts serving once Start's loop finds it leads. host serves the node's
// cores; Open calls only its Invalidate and Recall (through a core). An
// Open that fails closes the node (Close).
func (n *Node) Open(host Host) (err error) {
	n.host = host
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if n.cfg.Store == nil {
		ln := n.peerLn
		n.peerLn = nil // the replica owns it from here on, whatever it returns
		if n.rep, err = openReplica(n.cfg, ln, n.guard); err != nil {
			return err
		}
		n.st = n.rep
	}
	if n.cfg.Cluster == nil {
		return n.takeLead()
	}
	return nil
}

// openReplica opens the node's replica: of a cluster on its peer port,
// or of a node alone, which talks to no peer.
// ln is Cluster.PeerListener, or nil to listen on Cluster.PeerAddr.
// guard, if not nil, makes it refuse its leader's entries while its disk
// is below the floor (refuser).
func openReplica(cfg Config, ln net.Listener, guard *diskguard.Guard) (*replica.Node, error) {
	cl := cfg.Cluster
	if cl == nil {
		return replica.Open(replica.Config{Dir: cfg.Dir, ID: soloName, Clock: cfg.Clock, Logger: cfg.Logger,
			HeartbeatTimeout: soloTimeout, ElectionTimeout: soloTimeout, LeaderLeaseTimeout: soloTimeout})
	}
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cl.PeerAddr); err != nil {
			return nil, fmt.Errorf("peer listen: %w", err)
		}
	}
	rc := cl.Replica
	rc.Dir, rc.ID, rc.Clock, rc.Logger = cfg.Dir, cl.Name, cfg.Clock, cfg.Logger
	rc.Refuse = refuser(guard, cfg.ReserveBytes)
	rc.Network = &replica.Network{Listener: ln, Advertise: cl.PeerAddr, TLS: cl.PeerTLS, ClientTLS: cl.PeerClientTLS, Routes: cl.PeerRoutes}
	rc.Transport, rc.Bootstrap, rc.Join = nil, cl.members(), cl.Join
	return replica.Open(rc)
}

// Start starts the node's goroutines: the leadership loop of a node of a
// cluster, and the disk guard's watch. The host must serve by then: the
// loop records the host's client address with each term it leads.
func (n *Node) Start() {
	if n.cfg.Cluster != nil {
		n.loops.Add(1)
		go n.lead()
	}
	if n.guard != nil {
		n.loops.Add(1)
		go n.watchDisk()
		if n.cfg.Cluster != nil {
			n.loops.Add(1)
			go n.watchAlarms()
		}
	}
}

// Core returns the core that serves now, nil while the node does not
// lead. A session is served by the core it was admitted with, for as long
// as that core serves.
func (n *Node) Core() *core.Core {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.core
}

// Leads reports whether the node serves clients: always for a node alone,
// and for a node of a cluster while it leads and its core runs.
func (n *Node) Leads() bool { return n.Core() != nil }

// LeaderChanges is the number of times this node of a cluster took or
// lost the lead.
func (n *Node) LeaderChanges() uint64 { return n.leaderChanges.Load() }

// lead is the leadership loop of a node of a cluster: it starts a core
// when the node comes to lead, and stops it, closing its sessions, when
// the node stops leading. It also leaves the cluster when the node was
// removed or its state machine stopped.
func (n *Node) lead() {
	defer n.loops.Done()
	t := time.NewTicker(leadPoll)
	defer t.Stop()
	w := n.watchMembership()
	defer w.stop()
	for polls := 1; ; polls++ {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		if w.removed(polls) {
			n.leaveCluster()
			return
		}
		if err := n.rep.Failure(); err != nil {
			n.leaveOnFailure(err)
			return
		}
		leading := n.rep.IsLeader()
		n.mu.Lock()
		c, term := n.core, n.term
		n.mu.Unlock()
		if c != nil && n.rep.Term() != term {
			// The node lost the lead and won it back between two polls:
			// another leader may have granted leases meanwhile, which
			// only a new core, which reads the store again, respects.
			leading = false
		}
		switch {
		case leading && c == nil:
			if err := n.takeLead(); err != nil {
				n.log.Warn("could not take the lead", "err", err)
			}
		case !leading && c != nil:
			n.dropLead()
		}
	}
}

// takeLead makes this node serve: it waits until every committed entry is
// applied here and starts a core, which records this node as the leader
// for the other nodes to send clients to (its first command) and holds
// writes back until the old leader's leases have run out (the failover
// rule). Open calls it for a node alone, and the loop for a node of a
// cluster.
func (n *Node) takeLead() error {
	ctx, cancel := context.WithTimeout(context.Background(), leaderWait)
	defer cancel()
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	cfg := n.cfg.Core
	cfg.Admit = n.admitter()
	n.loadAlarms()
	var term uint64
	if n.rep != nil {
		term = n.rep.Term()
		if err := n.rep.WaitLeading(ctx); err != nil {
			return err
		}
		// The horizons this node records are on its own clock, which it
		// may trust after a restart.
		cfg.Clockname = n.rep.Clockname()
	}
	if cl := n.cfg.Cluster; cl != nil {
		cfg.Replicated = true
		cfg.Inherited = n.rep.Inherited()
		cfg.LeaderName, cfg.LeaderAddr = cl.Name, n.host.ClientAddr()
	}
	c, err := core.New(cfg, n.st, n.host)
	if err != nil {
		return err
	}
	if n.cfg.Cluster != nil && (n.rep.Term() != term || !n.rep.IsLeader()) {
		c.Close()
		return errors.New("lost the lead while taking it")
	}
	n.mu.Lock()
	if n.closing {
		n.mu.Unlock()
		c.Close()
		return nil
	}
	n.core, n.term = c, term
	n.mu.Unlock()
	if n.cfg.Cluster != nil {
		n.leaderChanges.Add(1)
		n.log.Info("leading the cluster", "node", n.cfg.Cluster.Name, "writes_held_for", c.WritesAllowedIn())
	}
	return nil
}

// dropLead stops serving after this node lost the lead, or as it leaves
// its cluster: the host closes the sessions of the core that served, whose
// clients go to the new leader, and then the core stops. Only the first
// of two concurrent calls finds the core.
func (n *Node) dropLead() {
	n.mu.Lock()
	c := n.core
	n.core = nil
	n.mu.Unlock()
	if c == nil {
		return
	}
	n.leaderChanges.Add(1)
	closed := n.host.Drop(c, n.NotLeader())
	n.log.Info("no longer leading the cluster", "node", n.cfg.Cluster.Name, "sessions_closed", closed)
	c.Close()
}

// BeginStop makes the node start no core from now on, and the core that
// serves refuse new writes (core.Core.BeginStop); it stops the leadership
// loop and the disk watch, so that the core that serves now serves until
// Close, whatever raft does meanwhile: the host's sessions end as its
// shutdown says, not as a lost lead would. The host calls it when it
// begins to close.
func (n *Node) BeginStop() {
	n.mu.Lock()
	n.closing = true
	c := n.core
	n.mu.Unlock()
	n.stopOnce.Do(func() { close(n.stop) })
	if c != nil {
		c.BeginStop()
	}
}

// Close stops the node: its loop and disk watch, then its core, then its
// replica (raft, its log and the database) or Config.Store, and the disk
// guard. The host must have ended every session first. It may be called
// more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.BeginStop()
		n.loops.Wait() // no core starts after this
		var errs []error
		n.mu.Lock()
		c := n.core
		n.core = nil
		n.mu.Unlock()
		if c != nil {
			errs = append(errs, c.Close())
		}
		errs = append(errs, n.closeState())
		n.closeErr = errors.Join(errs...)
	})
	return n.closeErr
}

// closeState closes the node's state: its replica or Config.Store, the
// peer listener if the replica never had it, and the disk guard.
func (n *Node) closeState() error {
	var err error
	if n.st != nil {
		err = n.st.Close()
	}
	if n.peerLn != nil {
		n.peerLn.Close()
	}
	if n.guard != nil {
		n.guard.Close()
	}
	return err
}

// leave stops this node for good: a node of a cluster drops the lead, if
// it has it, and the host stops serving, because of why. (A node alone
// keeps its core until Close, which the host's stop leads to: its
// sessions end with the server.)
func (n *Node) leave(why error) {
	// No core starts from here on, while the lead is dropped: the loop
	// and the disk watch stop.
	n.mu.Lock()
	n.closing = true
	n.mu.Unlock()
	n.stopOnce.Do(func() { close(n.stop) })
	if n.cfg.Cluster != nil {
		n.dropLead()
	}
	n.host.Stop(why)
}

// leaveOnFailure stops a node of a cluster whose state machine stopped:
// as a follower it could never catch up, and as a leader it would hold
// the lead and commit nothing, so it leaves raft at once, so that it
// neither keeps the lead nor wins it again, and stops serving. The loop
// and the disk watch call it, and return.
func (n *Node) leaveOnFailure(err error) {
	n.log.Error("this node's state machine stopped: it stops serving so that another node leads; restart it to apply the log again",
		"node", n.cfg.Cluster.Name, "err", err)
	if err := n.rep.StopRaft(); err != nil {
		n.log.Warn("raft did not shut down cleanly", "err", err)
	}
	n.leave(fmt.Errorf("%w: %w", ErrStateMachineStopped, err))
}

// leaveCluster stops a node that was removed from its cluster. The loop
// calls it, and returns.
func (n *Node) leaveCluster() {
	n.log.Error("this node was removed from the cluster: it stops serving; remove its data folder before it joins again", "node", n.cfg.Cluster.Name)
	n.leave(ErrRemoved)
}

// NotLeader returns the error a node that does not lead answers a client
// with: it names the leader's client address only when this node has
// confirmed it in the current raft term (leaderAddr), and says that the
// leader is not known otherwise.
func (n *Node) NotLeader() error {
	return NotLeaderError{Leader: n.leaderAddr()}
}
