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
// only a follower, it follows the leader the follower names.
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
	// A follower alone: leasectl follows the leader it names.
	r = ok(t, clitest.Cmd{}.Run(t, bins.Leasectl, "--endpoints", cl.Addrs[follower], "--cacert", cl.CAFile, "-o", "json", "get", "k"))
	if !strings.Contains(r.Stdout, `"value":"v1"`) {
		t.Errorf("get through a follower alone: %s", r.Stdout)
	}
}
