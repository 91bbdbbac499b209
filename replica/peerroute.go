// This file routes a node's raft connections to its peers through other
// addresses than the cluster's configuration gives (Network.Routes).

package replica

import (
	"fmt"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// peerRoutes is the raft.ServerAddressProvider of a node with peer routes:
// raft's NetworkTransport asks it for the address of a peer each time it
// dials one, from several goroutines. A peer with a route is dialled at
// the route's address; any other at the address of the latest raft
// configuration. The peer's TLS certificate is checked against the host
// that is dialled (StreamLayer.Dial), so it must name the route's
// host too; every node certificate names 127.0.0.1 and localhost.
type peerRoutes struct {
	routes map[raft.ServerID]raft.ServerAddress // fixed at start
	raft   atomic.Pointer[raft.Raft]            // set once the node is open
}

var _ raft.ServerAddressProvider = (*peerRoutes)(nil)

func newPeerRoutes(routes map[string]string) *peerRoutes {
	p := &peerRoutes{routes: make(map[raft.ServerID]raft.ServerAddress, len(routes))}
	for name, addr := range routes {
		p.routes[raft.ServerID(name)] = raft.ServerAddress(addr)
	}
	return p
}

// ServerAddr returns the address to dial peer id at. An error makes raft
// fall back to the address it has for the peer, with a warning: that
// happens only for a peer without a route before the node has opened, or
// for a peer that is no longer in the configuration.
func (p *peerRoutes) ServerAddr(id raft.ServerID) (raft.ServerAddress, error) {
	if addr, ok := p.routes[id]; ok {
		return addr, nil
	}
	if r := p.raft.Load(); r != nil {
		// GetConfiguration reads the latest configuration without a
		// round trip through raft's main loop, so it is safe here.
		f := r.GetConfiguration()
		if err := f.Error(); err == nil {
			for _, s := range f.Configuration().Servers {
				if s.ID == id {
					return s.Address, nil
				}
			}
		}
	}
	return "", fmt.Errorf("no route to peer %q and it is not in the configuration", id)
}
