package node

import (
	"errors"

	"github.com/leased/leased/replica"
)

// Health reports why this node cannot serve clients now, nil if it can: a
// leader must be known (this node, or the one raft names), and its store
// must take writes (no failed commit, no NOSPACE alarm).
func (n *Node) Health() error {
	if n.cfg.Cluster != nil {
		if err := n.rep.Failure(); err != nil {
			return err
		}
		rs := n.rep.Status()
		if rs.Leader == "" && !n.Leads() {
			return errors.New("no leader is known")
		}
		if rs.Role == replica.RoleLeader && !n.Leads() {
			return errors.New("this node leads raft but does not serve yet (it is taking the lead)")
		}
	} else if !n.Leads() {
		return errors.New("not serving")
	}
	if c := n.Core(); c != nil {
		if err := c.StoreErr(); err != nil {
			return err
		}
	}
	if a := n.Alarm(); a != "" {
		return errors.New(a)
	}
	return nil
}

// RaftStatus returns raft's view on this node, and false for a node over
// Config.Store, which has no raft.
func (n *Node) RaftStatus() (replica.Status, bool) {
	if n.rep == nil {
		return replica.Status{}, false
	}
	return n.rep.Status(), true
}
