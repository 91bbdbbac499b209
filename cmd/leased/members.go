package main

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/leased/leased/replica"
	"github.com/leased/leased/server"
)

// Values of --initial-cluster-state.
const (
	clusterStateNew      = "new"
	clusterStateExisting = "existing"
)

// raftTimeouts are raft's timeout flags, mapped to server.Cluster.Replica.
type raftTimeouts struct {
	heartbeat, election, leaderLease, commit time.Duration
}

// defaultRaftTimeouts are the flags' defaults: replica's.
var defaultRaftTimeouts = raftTimeouts{replica.DefaultHeartbeatTimeout, replica.DefaultElectionTimeout,
	replica.DefaultLeaderLeaseTimeout, replica.DefaultCommitTimeout}

// memberFlags adds the flags of joining a cluster and of raft's timeouts.
// newRootCmd calls it.
func (o *options) memberFlags(f *pflag.FlagSet) {
	f.StringVar(&o.initialClusterState, "initial-cluster-state", clusterStateNew,
		`"new": a node with no data bootstraps the cluster of --initial-cluster (or of itself); "existing": it bootstraps nothing and waits until 'leasectl member add' adds it to a running cluster`)
	t := &o.raftTimeouts
	f.DurationVar(&t.heartbeat, "heartbeat-timeout", defaultRaftTimeouts.heartbeat, "raft: how long a follower waits without hearing from the leader before it stands for election (a node of a cluster; at most "+replica.MaxRaftTimeout.String()+")")
	f.DurationVar(&t.election, "election-timeout", defaultRaftTimeouts.election, "raft: how long a candidate waits for votes before it tries again; at least --heartbeat-timeout and at most "+replica.MaxRaftTimeout.String())
	f.DurationVar(&t.leaderLease, "leader-lease-timeout", defaultRaftTimeouts.leaderLease, "raft: how long a leader keeps leading without hearing from a quorum; at most --heartbeat-timeout")
	f.DurationVar(&t.commit, "commit-timeout", defaultRaftTimeouts.commit, "raft: the longest a leader waits before it sends an entry or heartbeat to a follower that is up to date; at most --heartbeat-timeout")
}

// validateMembership checks --initial-cluster-state and that raft's
// timeouts are for a node of a cluster, after validateCluster.
func (o *options) validateMembership() error {
	switch o.initialClusterState {
	case clusterStateNew:
	case clusterStateExisting:
		if o.peerListen == "" {
			return usagef("--initial-cluster-state existing is for a node that joins a cluster: give --peer-listen, --name and its certificates too")
		}
		if o.initialCluster != "" {
			return usagef("--initial-cluster is for bootstrapping a new cluster; a node that joins a running one (--initial-cluster-state existing) learns the members when 'leasectl member add' adds it: drop --initial-cluster")
		}
	default:
		return usagef("--initial-cluster-state %q: want new or existing", o.initialClusterState)
	}
	t := o.raftTimeouts
	if o.peerListen == "" && t != defaultRaftTimeouts {
		return usagef("the raft timeout flags are for a node of a cluster: give --peer-listen too")
	}
	// 0 is no value of theirs (see checkZeros): the server's Config would
	// read it as raft's default. Their bounds, and how they relate, the
	// Config checks (Cluster.Replica).
	for _, d := range []struct {
		flag string
		v    time.Duration
		min  time.Duration
	}{
		{"--heartbeat-timeout", t.heartbeat, replica.MinRaftTimeout},
		{"--election-timeout", t.election, replica.MinRaftTimeout},
		{"--leader-lease-timeout", t.leaderLease, replica.MinRaftTimeout},
		{"--commit-timeout", t.commit, replica.MinCommitTimeout},
	} {
		if d.v == 0 {
			return usagef("%s %v: must be at least %v", d.flag, d.v, d.min)
		}
	}
	return nil
}

// applyMembership sets the cluster's Join and raft timeouts from the
// flags. cluster calls it.
func (o *options) applyMembership(cl *server.Cluster) {
	cl.Join = o.initialClusterState == clusterStateExisting
	t := o.raftTimeouts
	cl.Replica.HeartbeatTimeout, cl.Replica.ElectionTimeout = t.heartbeat, t.election
	cl.Replica.LeaderLeaseTimeout, cl.Replica.CommitTimeout = t.leaderLease, t.commit
}
