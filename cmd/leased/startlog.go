package main

// This file logs the start of the server: where it serves, and the
// leasectl command that reaches it.

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/leased/leased/internal/version"
)

// logStarted logs that the server started and serves on addr: where, from
// which data folder, and with which CA clients must trust (ca; a node of a
// cluster's is its cluster CA), and the leasectl command that reaches it,
// which presents a client certificate if clients must (clientCerts).
func (o *options) logStarted(log *slog.Logger, addr net.Addr, ca string, node, clientCerts bool) {
	data, ca := absPath(o.data), absPath(ca)
	if node {
		log.Info("node of a cluster", "name", o.name, "peer_listen", o.peerListen, "initial_cluster", o.initialCluster)
	}
	log.Info("leased started",
		"version", version.String(),
		"listen", addr.String(),
		"data", data,
		"ca", ca,
		"lease_term", o.leaseTerm,
		"epsilon", o.epsilon)
	// The listen flag's host, which says the address family, and the port
	// bound, in case the flag asked for any.
	listenHost, _, _ := net.SplitHostPort(o.listen)
	_, port, _ := net.SplitHostPort(addr.String())
	local, remote := exampleEndpoints(net.JoinHostPort(listenHost, port), o.tlsHosts, os.Hostname)
	certFlags := ""
	if clientCerts {
		certFlags = " --cert <client>.pem --key <client>-key.pem"
	}
	attrs := []any{"ca", ca, "example", fmt.Sprintf("leasectl --endpoint %s --cacert %s%s status", local, ca, certFlags)}
	if remote != "" {
		attrs = append(attrs, "remote_example", fmt.Sprintf("leasectl --endpoint %s --cacert <a copy of %s>%s status", remote, ca, certFlags))
	}
	log.Info("clients must trust the CA", attrs...)
}

// exampleEndpoints returns the endpoints that the start-up log suggests to
// clients of a server listening on addr. local is addr itself, or, when
// addr's host is unspecified (0.0.0.0, :: or empty), which no client can
// dial, the loopback address of its family (127.0.0.1 for an empty host). remote is set only for an unspecified
// host: the endpoint other machines dial, by the first --tls-host that is
// not a wildcard, else by the host name (both are in the server's
// certificate); it is empty if neither is known. hostname is os.Hostname.
func exampleEndpoints(addr string, tlsHosts []string, hostname func() (string, error)) (local, remote string) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, ""
	}
	ip := net.ParseIP(host)
	if host != "" && (ip == nil || !ip.IsUnspecified()) {
		return addr, ""
	}
	local = net.JoinHostPort("127.0.0.1", port)
	if ip != nil && ip.To4() == nil {
		local = net.JoinHostPort("::1", port)
	}
	for _, h := range tlsHosts {
		if !strings.HasPrefix(h, "*") {
			return local, net.JoinHostPort(h, port)
		}
	}
	if name, err := hostname(); err == nil && name != "" {
		return local, net.JoinHostPort(name, port)
	}
	return local, ""
}
