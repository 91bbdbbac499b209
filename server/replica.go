package server

import (
	"context"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/replica"
)

// nodeName is the raft name of a server that runs as a cluster of one.
const nodeName = "leased"

// soloTimeout is raft's heartbeat, election and leader-lease timeout in a
// cluster of one.
const soloTimeout = 10 * time.Millisecond

// leaderWait bounds how long New waits for a cluster of one to elect
// itself and apply its log.
const leaderWait = 30 * time.Second

// openReplica opens the server's state as a raft cluster of this node
// alone, on its data folder, and waits until it leads and has applied every
// committed entry, so that the core starts from the whole state.
func openReplica(cfg Config) (*replica.Node, error) {
	_, tr := raft.NewInmemTransport(raft.ServerAddress(nodeName))
	// A cluster of one hears from no peer, and no other node can be
	// elected: it may stand for election, and keep leading, at once,
	// instead of after a LAN's heartbeat timeout. Every start of a single
	// server is 200 to 400 ms shorter.
	n, err := replica.Open(replica.Config{Dir: cfg.Dir, ID: nodeName, Transport: tr, Clock: cfg.Clock, Logger: cfg.Logger,
		HeartbeatTimeout: soloTimeout, ElectionTimeout: soloTimeout, LeaderLeaseTimeout: soloTimeout})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), leaderWait)
	defer cancel()
	if err := n.WaitLeading(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}
