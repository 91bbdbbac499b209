package main

import (
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/server"
)

// TestEndpointsOfACluster: with --endpoints naming every node of a
// cluster, leasectl finds the leader whichever node comes first; with
// only a follower, it fails and names the leader.
func TestEndpointsOfACluster(t *testing.T) {
	t.Parallel()
	cl := testkit.NewCluster(t, 3, server.Config{LeaseTerm: time.Second})
	leader := cl.Leader()
	var follower string
	for name := range cl.Nodes {
		if name != leader {
			follower = name
		}
	}
	eps := cl.Addrs[follower] + "," + cl.Endpoints()
	ok(t, clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoints", eps, "--cacert", cl.CAFile, "put", "k", "v1"))
	r := ok(t, clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoints", eps, "--cacert", cl.CAFile, "-o", "json", "get", "k"))
	if !strings.Contains(r.Stdout, `"value":"v1"`) {
		t.Errorf("get through --endpoints: %s", r.Stdout)
	}
	// --endpoint is the same flag.
	ok(t, clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoint", eps, "--cacert", cl.CAFile, "get", "k"))
	r = clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoints", cl.Addrs[follower], "--cacert", cl.CAFile, "get", "k")
	if r.Code != exitUnavailable || !strings.Contains(r.Stderr, "does not lead its cluster: give every node with --endpoints, or the leader, "+cl.Addrs[leader]) {
		t.Errorf("a follower alone: status %d, stderr %q; want status %d and a hint naming the leader %s", r.Code, r.Stderr, exitUnavailable, cl.Addrs[leader])
	}
}
