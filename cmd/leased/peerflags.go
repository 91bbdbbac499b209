package main

import (
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/leased/leased/replica"
	"github.com/leased/leased/server"
)

// peerOptions are the flags that tune how a node of a cluster reaches its
// peers and compacts its log. newRootCmd registers them; validateCluster
// checks them and cluster copies them into the server's Cluster.
type peerOptions struct {
	routes            []string          // NAME=HOST:PORT, from --peer-route
	routeMap          map[string]string // parsed routes; nil if none
	snapshotThreshold uint64
	trailingLogs      uint64
	snapshotInterval  time.Duration
	walSegmentSize    int // hidden: tests make the log drop compacted entries sooner
}

// addFlags registers the flags on f.
func (p *peerOptions) addFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&p.routes, "peer-route", nil, "dial peer NAME at HOST:PORT instead of its address in the cluster's configuration, as NAME=HOST:PORT (repeatable or comma-separated): for tunnels, NAT and fault-injection proxies; the peer's certificate must name HOST")
	f.Uint64Var(&p.snapshotThreshold, "snapshot-threshold", 0, "take a snapshot of the replicated state after this many new log entries (0: the default, "+strconv.FormatUint(replica.DefaultSnapshotThreshold, 10)+")")
	f.Uint64Var(&p.trailingLogs, "snapshot-trailing-logs", 0, "log entries kept behind a snapshot for followers that lag; one further behind is sent the snapshot (0: the default, "+strconv.FormatUint(replica.DefaultTrailingLogs, 10)+")")
	f.DurationVar(&p.snapshotInterval, "snapshot-interval", 0, "how often to check whether to take a snapshot (0: the default, 2m; at most "+replica.MaxSnapshotInterval.String()+")")
	// The log drops compacted entries a whole segment at a time: with the
	// default 64 MiB segments, a test's leader keeps every entry and never
	// needs to send a lagging follower a snapshot. Not for production.
	f.IntVar(&p.walSegmentSize, "wal-segment-size", 0, "size in bytes of one segment of the raft log on disk (0: 64 MiB)")
	if err := f.MarkHidden("wal-segment-size"); err != nil {
		panic(err)
	}
}

// set reports the first of the flags given, for the error of a node that
// is not in a cluster; empty if none is.
func (p *peerOptions) set() string {
	switch {
	case len(p.routes) > 0:
		return "--peer-route"
	case p.snapshotThreshold != 0:
		return "--snapshot-threshold"
	case p.trailingLogs != 0:
		return "--snapshot-trailing-logs"
	case p.snapshotInterval != 0:
		return "--snapshot-interval"
	case p.walSegmentSize != 0:
		return "--wal-segment-size"
	}
	return ""
}

// validate checks the flags of node self and parses --peer-route. The
// snapshot settings the server's Config checks (Cluster.Replica).
func (p *peerOptions) validate(self string) error {
	p.routeMap = nil
	if p.walSegmentSize < 0 {
		return usagef("--wal-segment-size %d: must be 0 (the default) or positive", p.walSegmentSize)
	}
	for _, r := range p.routes {
		name, addr, ok := strings.Cut(strings.TrimSpace(r), "=")
		if !ok || name == "" || addr == "" {
			return usagef("--peer-route %q: want NAME=HOST:PORT", r)
		}
		if name == self {
			return usagef("--peer-route %q: a route to this node (--name %s); a node does not dial itself", r, self)
		}
		if err := checkAddr("--peer-route "+name, addr); err != nil {
			return err
		}
		if host, _, _ := net.SplitHostPort(addr); host == "" {
			return usagef("--peer-route %q: want NAME=HOST:PORT, with a host", r)
		}
		if _, dup := p.routeMap[name]; dup {
			return usagef("--peer-route names %q twice", name)
		}
		if p.routeMap == nil {
			p.routeMap = map[string]string{}
		}
		p.routeMap[name] = addr
	}
	return nil
}

// apply sets the cluster's peer routes and snapshot settings.
func (p *peerOptions) apply(cl *server.Cluster) {
	cl.PeerRoutes = p.routeMap
	cl.Replica.SnapshotThreshold = p.snapshotThreshold
	cl.Replica.TrailingLogs = p.trailingLogs
	cl.Replica.SnapshotInterval = p.snapshotInterval
	cl.Replica.WALSegmentSize = p.walSegmentSize
}
