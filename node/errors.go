package node

import (
	"errors"
	"fmt"

	"github.com/leased/leased/core"
)

// Why a node stopped serving for good: Host.Stop gets one of them, and
// package server's Serve returns it.
var (
	// ErrRemoved: this node was removed from its cluster. It no longer
	// serves, and its process should exit.
	ErrRemoved = errors.New("leased: this node was removed from the cluster")
	// ErrStateMachineStopped: this node's state machine stopped applying
	// the log (its database failed to apply a committed entry). The node
	// stops serving, so that another node leads and its clients follow; a
	// restart applies the log again.
	ErrStateMachineStopped = errors.New("leased: this node's state machine stopped applying the log; restart it to apply the log again")
	// ErrDataFolderLost: the data folder, or the lock file the node keeps
	// in it, was deleted or replaced while the node ran: writes
	// acknowledged from then on would be lost, so it refuses them and
	// stops. Its process should exit, and be started again on a whole
	// data folder.
	ErrDataFolderLost = errors.New("leased: the data folder was deleted or replaced while the server ran; it stopped, refusing writes, so that none is acknowledged and then lost")
)

// Errors of the node's requests (membership, transfers, snapshots).
// Package server maps them to wire codes.
var (
	// ErrNotLeader: this node does not lead; NotLeaderError names the
	// leader when the node knows it.
	ErrNotLeader = errors.New("this node does not lead the cluster")
	// ErrUnknownMember: no member has the name given.
	ErrUnknownMember = errors.New("unknown member")
	// ErrInvalidArgument: a request no node would take, such as the
	// removal of the last voter.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnavailable: the request could not be carried out now (raft
	// failed or the caller's context ended); it may succeed later.
	ErrUnavailable = core.ErrUnavailable

	errNotCluster = fmt.Errorf("%w: this server is not a node of a cluster (start it with --peer-listen)", ErrInvalidArgument)
)

// NotLeaderError is ErrNotLeader with the leader's client address, if this
// node knows it.
type NotLeaderError struct {
	// Leader is the client address of the leader; "" if it is not known.
	Leader string
}

func (e NotLeaderError) Error() string {
	if e.Leader == "" {
		return ErrNotLeader.Error() + "; the leader is not known yet"
	}
	return ErrNotLeader.Error() + "; the leader serves clients at " + e.Leader
}

func (e NotLeaderError) Unwrap() error { return ErrNotLeader }
