package replica

import (
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// TestPeerRoutes: a routed peer is dialled at its route; any other, before
// the node is open, makes raft fall back to its configured address.
func TestPeerRoutes(t *testing.T) {
	p := newPeerRoutes(map[string]string{"n2": "127.0.0.1:9002"})
	if addr, err := p.ServerAddr("n2"); err != nil || addr != "127.0.0.1:9002" {
		t.Errorf("ServerAddr(n2) = %q, %v; want the route", addr, err)
	}
	if addr, err := p.ServerAddr("n3"); err == nil || !strings.Contains(err.Error(), `"n3"`) {
		t.Errorf("ServerAddr(n3) = %q, %v; want an error naming n3, before the node is open", addr, err)
	}

	// Once the node is open, an unrouted peer is dialled at its address in
	// the latest configuration.
	cfg := raft.DefaultConfig()
	cfg.LocalID = "n1"
	cfg.LogOutput = io.Discard
	store := raft.NewInmemStore()
	_, trans := raft.NewInmemTransport("127.0.0.1:9001")
	conf := raft.Configuration{Servers: []raft.Server{
		{ID: "n1", Address: "127.0.0.1:9001"}, {ID: "n2", Address: "127.0.0.1:7502"}, {ID: "n3", Address: "127.0.0.1:7503"}}}
	if err := raft.BootstrapCluster(cfg, store, store, raft.NewInmemSnapshotStore(), trans, conf); err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(cfg, &raft.MockFSM{}, store, store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Shutdown().Error()
	p.raft.Store(r)
	if addr, err := p.ServerAddr("n3"); err != nil || addr != "127.0.0.1:7503" {
		t.Errorf("ServerAddr(n3) = %q, %v; want its configured address", addr, err)
	}
	if addr, err := p.ServerAddr("n2"); err != nil || addr != "127.0.0.1:9002" {
		t.Errorf("ServerAddr(n2) = %q, %v; want the route still", addr, err)
	}
	if _, err := p.ServerAddr("n9"); err == nil {
		t.Errorf("ServerAddr(n9), a node not in the configuration, found an address")
	}
}
