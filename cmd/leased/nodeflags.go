package main

// This file holds the flags of a node of a cluster (DESIGN.md §13):
// their checks, and the cluster part of the server's configuration.

import (
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"

	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/internal/tlsfiles"
	"github.com/leased/leased/server"
)

// validateCluster checks the flags of a node of a cluster, and parses
// --initial-cluster.
func (o *options) validateCluster() error {
	o.peers = nil
	files := o.cacert != "" || o.cert != "" || o.key != ""
	if o.peerListen == "" {
		for _, f := range [][2]string{{"--name", o.name}, {"--initial-cluster", o.initialCluster}, {"--ca-dir", o.caDir}, {"--cacert", o.cacert}, {"--cert", o.cert}, {"--key", o.key}} {
			if f[1] != "" {
				return usagef("%s is for a node of a cluster: give --peer-listen too", f[0])
			}
		}
		if f := o.peer.set(); f != "" {
			return usagef("%s is for a node of a cluster: give --peer-listen too", f)
		}
		return nil
	}
	if err := checkAddr("--peer-listen", o.peerListen); err != nil {
		return err
	}
	switch {
	case strings.TrimSpace(o.name) == "":
		return usagef("--peer-listen needs --name: the node's name in the cluster")
	case o.caDir != "" && files:
		return usagef("give either --ca-dir or --cacert, --cert and --key, not both")
	case o.caDir == "" && !files:
		return usagef("a node of a cluster needs certificates: --ca-dir, or --cacert, --cert and --key")
	case files && (o.cacert == "" || o.cert == "" || o.key == ""):
		return usagef("--cacert, --cert and --key go together")
	}
	if err := o.peer.validate(o.name); err != nil {
		return err
	}
	if o.initialCluster == "" {
		return nil
	}
	peers, addr, err := parseInitialCluster(o.initialCluster, o.name)
	if err != nil {
		return err
	}
	if addr != o.peerListen {
		return usagef("--initial-cluster gives %s=%s but --peer-listen is %s", o.name, addr, o.peerListen)
	}
	o.peers = peers
	return nil
}

// parseInitialCluster parses --initial-cluster, NAME=HOST:PORT,..., which
// must name the node self, and returns its members and self's address.
// Errors are usage errors.
func parseInitialCluster(list, self string) (peers []server.Peer, selfAddr string, err error) {
	found := false
	for _, item := range strings.Split(list, ",") {
		name, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || name == "" {
			return nil, "", usagef("--initial-cluster %q: want NAME=HOST:PORT,...", list)
		}
		if err := checkAddr("--initial-cluster "+name, addr); err != nil {
			return nil, "", err
		}
		for _, p := range peers {
			if p.Name == name {
				return nil, "", usagef("--initial-cluster names %q twice", name)
			}
		}
		if name == self {
			found, selfAddr = true, addr
		}
		peers = append(peers, server.Peer{Name: name, Addr: addr})
	}
	if !found {
		return nil, "", usagef("--initial-cluster does not name this node (--name %s)", self)
	}
	return peers, selfAddr, nil
}

// clusterConfig returns the cluster part of the server configuration
// without its TLS configurations, which cluster adds; nil without
// --peer-listen.
func (o *options) clusterConfig() *server.Cluster {
	if o.peerListen == "" {
		return nil
	}
	cl := &server.Cluster{Name: o.name, PeerAddr: o.peerListen, Peers: o.peers}
	o.peer.apply(cl)
	o.applyMembership(cl)
	return cl
}

// cluster returns the cluster part of the server configuration, and the
// CA clients must trust: the node's certificate, issued from --ca-dir on
// first start or given, serves clients and peers alike. Nil without
// --peer-listen.
func (o *options) cluster() (*server.Cluster, *tls.Config, string, error) {
	cl := o.clusterConfig()
	if cl == nil {
		return nil, nil, "", nil
	}
	caFile, certFile, keyFile := o.cacert, o.cert, o.key
	if o.caDir != "" {
		var hosts []string
		for _, a := range []string{o.listen, o.peerListen} {
			if h, _, err := net.SplitHostPort(a); err == nil && h != "" && !slices.Contains(hosts, h) {
				hosts = append(hosts, h)
			}
		}
		hosts = append(hosts, o.tlsHosts...)
		var err error
		certFile, keyFile, err = tlsfiles.EnsureNode(o.caDir, filepath.Join(o.data, layout.TLSDir, "node"), o.name, hosts)
		if err != nil {
			return nil, nil, "", err
		}
		caFile = filepath.Join(o.caDir, tlsfiles.CAFileName)
	}
	peerSrv, peerCli, err := tlsfiles.PeerTLS(caFile, certFile, keyFile)
	if err != nil {
		return nil, nil, "", err
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, nil, "", fmt.Errorf("node certificate: %w", err)
	}
	cl.PeerTLS, cl.PeerClientTLS = peerSrv, peerCli
	return cl, &tls.Config{Certificates: []tls.Certificate{pair}}, caFile, nil
}
