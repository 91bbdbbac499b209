package server

import (
	"errors"

	"github.com/leased/leased/core"
	"github.com/leased/leased/node"
	"github.com/leased/leased/protocol"
)

// The server's side of its node (package node), which owns the node's life:
// the server is the node's Host, which it tells when a core stops serving
// and when the node stops for good.

// Cluster configures a server that is one node of a replicated cluster
// (DESIGN §13): node.Cluster.
type Cluster = node.Cluster

// Peer is one node of the initial cluster: node.Peer.
type Peer = node.Peer

// Why Serve returns when this node stopped serving for good (node's
// errors, which cmd/leased tells apart).
var (
	// ErrRemoved: this node was removed from its cluster.
	ErrRemoved = node.ErrRemoved
	// ErrStateMachineStopped: this node's state machine stopped applying
	// the log.
	ErrStateMachineStopped = node.ErrStateMachineStopped
	// ErrDataFolderLost: the data folder was deleted or replaced while
	// the server ran.
	ErrDataFolderLost = node.ErrDataFolderLost
)

var _ node.Host = (*Server)(nil)

// Leads reports whether the server serves clients: always for a server
// alone, and for a node of a cluster while it leads and its core runs.
func (s *Server) Leads() bool { return s.node.Leads() }

// ClientAddr is the address the server listens on, as the node records it
// for the other nodes to send clients to (node.Host).
func (s *Server) ClientAddr() string { return s.Addr().String() }

// Drop closes the sessions of core c, which no longer serves, with err,
// and returns how many, once they have ended. The node calls it (node.Host) before
// it closes c: a session that ends after c would abandon its writes into
// a core that no longer commits them, and their writers, and the bytes
// they hold against MaxTotalInflightBytes, would never be answered. Their
// connections are closed, so they end at once.
func (s *Server) Drop(c *core.Core, err error) int {
	s.smu.Lock()
	var gone []*session
	for _, sess := range s.sessions {
		if sess.core == c {
			gone = append(gone, sess)
		}
	}
	s.smu.Unlock()
	for _, sess := range gone {
		sess.closeWith(err)
	}
	for _, sess := range gone {
		<-sess.ended
	}
	return len(gone)
}

// Stop stops serving because of why, which Serve then returns. The node
// calls it (node.Host) when it was removed from its cluster, its state
// machine stopped, or the data folder was lost.
func (s *Server) Stop(why error) {
	s.left.Store(&why)
	s.beginClose()
}

// notLeaderReply is the answer to a hello on a node that does not lead.
func notLeaderReply(err error) *protocol.Error {
	e := &protocol.Error{Code: protocol.CodeNotLeader, Message: err.Error()}
	var nl node.NotLeaderError
	if errors.As(err, &nl) {
		e.Leader = nl.Leader
	}
	return e
}
