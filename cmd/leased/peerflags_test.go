package main

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/server"
)

// TestValidatePeerFlags: --peer-route and the snapshot flags are checked,
// and a node parses its routes into the server's Cluster.
func TestValidatePeerFlags(t *testing.T) {
	node := func() *options {
		o := &options{
			listen: server.DefaultAddr, data: server.DefaultDir,
			leaseTerm: time.Second, epsilon: time.Millisecond,
			maxValueSize: 1, maxSessions: 1, shutdownTimeout: time.Second,
			maxSessionsPerAddr: 1, maxLeasesPerSession: 1, maxLeases: 1, maxWriteLeases: 1, maxTotalInflightBytes: 1 << 20, maxFrameBytesPerAddr: 1 << 20, frameTimeout: time.Second, retryHandshakes: 1,
			ttlMax: time.Hour, maxTTLLeases: 1, ttlCheckpoint: time.Minute, ttlRevokeRate: 1,
			initialClusterState: clusterStateNew, raftTimeouts: defaultRaftTimeouts,
		}
		cluster(o)
		return o
	}
	for _, tc := range []struct {
		change func(*options)
		want   string
	}{
		{func(o *options) {
			o.peerListen, o.name, o.caDir = "", "", ""
			o.peer.routes = []string{"n2=127.0.0.1:1"}
		}, "--peer-route is for a node of a cluster"},
		{func(o *options) { o.peerListen, o.name, o.caDir = "", "", ""; o.peer.snapshotThreshold = 8 }, "--snapshot-threshold is for a node"},
		{func(o *options) { o.peer.routes = []string{"n2"} }, "want NAME=HOST:PORT"},
		{func(o *options) { o.peer.routes = []string{"=127.0.0.1:1"} }, "want NAME=HOST:PORT"},
		{func(o *options) { o.peer.routes = []string{"n2="} }, "want NAME=HOST:PORT"},
		{func(o *options) { o.peer.routes = []string{"n2=nohost"} }, "--peer-route n2"},
		{func(o *options) { o.peer.routes = []string{"n2=:7502"} }, "with a host"},
		{func(o *options) { o.peer.routes = []string{"n2=127.0.0.1:x"} }, "not a number"},
		{func(o *options) { o.peer.routes = []string{"n1=127.0.0.1:1"} }, "does not dial itself"},
		{func(o *options) { o.peer.routes = []string{"n2=127.0.0.1:1", "n2=127.0.0.1:2"} }, "twice"},
		{func(o *options) { o.peer.snapshotInterval = time.Millisecond }, "--snapshot-interval"},
		{func(o *options) { o.peer.snapshotInterval = -time.Second }, "--snapshot-interval"},
		{func(o *options) { o.peer.snapshotInterval = 25 * time.Hour }, "--snapshot-interval: Cluster.Replica.SnapshotInterval 25h0m0s is outside 5ms..24h0m0s"},
		{func(o *options) { o.peer.walSegmentSize = -1 }, "--wal-segment-size"},
	} {
		o := node()
		tc.change(o)
		err := o.validate()
		if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want a usage error about %s", o.peer, err, tc.want)
		}
	}
	o := node()
	o.peer = peerOptions{routes: []string{"n2=127.0.0.1:9002", " n3=tunnel.example:9003"}, snapshotThreshold: 16,
		trailingLogs: 4, snapshotInterval: 50 * time.Millisecond, walSegmentSize: 1 << 16}
	if err := o.validate(); err != nil {
		t.Fatalf("good peer flags: %v", err)
	}
	var cl server.Cluster
	o.peer.apply(&cl)
	if want := map[string]string{"n2": "127.0.0.1:9002", "n3": "tunnel.example:9003"}; !maps.Equal(cl.PeerRoutes, want) {
		t.Errorf("routes %v, want %v", cl.PeerRoutes, want)
	}
	if r := cl.Replica; r.SnapshotThreshold != 16 || r.TrailingLogs != 4 || r.SnapshotInterval != 50*time.Millisecond || r.WALSegmentSize != 1<<16 {
		t.Errorf("snapshot settings %+v", r)
	}
}
