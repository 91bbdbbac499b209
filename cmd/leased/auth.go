package main

// This file holds leased's flags for who may do what (DESIGN.md §15):
// client certificates, the access policy file, and its reload on SIGHUP.

import (
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/leased/leased/internal/tlsfiles"
)

// authFlags adds the flags of client authentication and the access policy.
func (o *options) authFlags(f *pflag.FlagSet) {
	f.StringVar(&o.clientCA, "client-ca", "", "CA certificates (PEM) that client certificates must be signed by: every client must then present one ('leased cert create-client'), whose name is its identity; default off loopback for a node with --ca-dir or --cacert: the cluster CA")
	f.BoolVar(&o.insecureNoClient, "insecure-no-client-auth", false, "INSECURE: serve a --listen address other than loopback without client certificates: anyone who reaches the port may read and write every key")
	f.StringVar(&o.authPolicy, "auth-policy", "", "access policy file (YAML): which client identity may read, write, take write leases and use TTL leases under which prefixes, who is admin, and who may scrape --metrics-listen off loopback (metrics: true); reloaded on SIGHUP, with a warning if others than its owner may write it; needs client certificates")
}

// loopback reports whether the host of --listen reaches only this machine:
// a loopback address, or a name (localhost) whose every address is one.
// A name that does not resolve is not loopback, so leased asks for client
// certificates rather than trust it.
func (o *options) loopback() bool {
	host, _, err := net.SplitHostPort(o.listen)
	if err != nil {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	if host == "" {
		return false
	}
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// clusterCAFile returns the cluster CA a node was given (--ca-dir or
// --cacert), or "".
func (o *options) clusterCAFile() string {
	if o.caDir != "" {
		return filepath.Join(o.caDir, tlsfiles.CAFileName)
	}
	return o.cacert
}

// clientCAFile returns the CA file client certificates must be signed by,
// or "" when clients present none: --client-ca; else, off loopback or with
// --auth-policy, the cluster CA, unless --insecure-no-client-auth.
func (o *options) clientCAFile() string {
	switch {
	case o.clientCA != "":
		return o.clientCA
	case o.insecureNoClient:
		return ""
	case !o.loopback() || o.authPolicy != "":
		return o.clusterCAFile()
	}
	return ""
}

// validateAuth checks the flags of client authentication: off loopback,
// clients must present certificates unless the operator says
// --insecure-no-client-auth, and a policy needs them.
func (o *options) validateAuth() error {
	switch {
	case o.insecureNoClient && o.clientCA != "":
		return usagef("--insecure-no-client-auth and --client-ca contradict each other: give one")
	case o.insecureNoClient && o.authPolicy != "":
		return usagef("--auth-policy knows clients by their certificates, which --insecure-no-client-auth turns off: give one")
	case o.authPolicy != "" && o.clientCAFile() == "":
		return usagef("--auth-policy knows clients by their certificates: give --client-ca with the CA that signs them (make one with 'leased cert create-ca --dir ./ca', then 'leased cert create-client --ca-dir ./ca --name NAME --out ./NAME')")
	case !o.loopback() && !o.insecureNoClient && o.clientCAFile() == "":
		return usagef("--listen %s is reachable from other machines, so clients must present certificates: "+
			"make a CA ('leased cert create-ca --dir ./ca') and give --client-ca ./ca/ca.pem, then issue each client one ('leased cert create-client --ca-dir ./ca --name NAME --out ./NAME'); "+
			"or say --insecure-no-client-auth to let anyone who reaches the port in", o.listen)
	}
	return nil
}

// clientCAs returns the pool client certificates must verify against (nil:
// clients present none). A node of a cluster also trusts its cluster CA
// (clusterCA), whose node certificates its peers present when they ask
// it for the members.
func (o *options) clientCAs(clusterCA string) (*x509.CertPool, error) {
	file := o.clientCAFile()
	if file == "" {
		return nil, nil
	}
	pool := x509.NewCertPool()
	for _, f := range []string{file, clusterCA} {
		if f == "" {
			continue
		}
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, errors.New(f + " holds no PEM certificate")
		}
	}
	return pool, nil
}

// warnAuth logs how clients are authenticated when it deserves a word.
func (o *options) warnAuth(log *slog.Logger) {
	switch {
	case o.insecureNoClient && !o.loopback():
		log.Warn("clients present no certificates (--insecure-no-client-auth): anyone who reaches the port may read and write every key and take over write leases", "listen", o.listen)
	case o.clientCAFile() != "":
		log.Info("clients must present certificates", "client_ca", absPath(o.clientCAFile()), "auth_policy", o.authPolicy)
	}
}

// hupFilter passes on the signals of a channel other than SIGHUP, on out;
// a SIGHUP reloads the access policy of the server once serving has been
// called, and is otherwise ignored.
type hupFilter struct {
	log    *slog.Logger
	policy bool
	out    chan os.Signal
	done   chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	srv     reloader // set by serving
	pending bool     // a SIGHUP came before serving
}

// reloader reloads an access policy; *server.Server is one.
type reloader interface{ ReloadPolicy() error }

// filterHUP starts passing on sigs (nil: none) until stop. policy says
// whether there is an access policy file to reload.
func filterHUP(log *slog.Logger, sigs <-chan os.Signal, policy bool) *hupFilter {
	h := &hupFilter{log: log, out: make(chan os.Signal, 3), done: make(chan struct{}), policy: policy}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			select {
			case <-h.done:
				return
			case sig := <-sigs:
				if sig != syscall.SIGHUP {
					select {
					case h.out <- sig:
					case <-h.done:
						return
					}
					continue
				}
				if !h.policy {
					h.log.Info("SIGHUP: there is no access policy to reload (--auth-policy)")
					continue
				}
				h.mu.Lock()
				srv := h.srv
				if srv == nil {
					h.pending = true
				}
				h.mu.Unlock()
				if srv == nil {
					h.log.Info("SIGHUP before the server started: the access policy is read again once it serves")
					continue
				}
				srv.ReloadPolicy() // logs its outcome
			}
		}
	}()
	return h
}

// serving makes SIGHUP reload srv's access policy, and reloads it at once
// if a SIGHUP came while the server started: the file may have changed
// since the server read it.
func (h *hupFilter) serving(srv reloader) {
	h.mu.Lock()
	h.srv = srv
	pending := h.pending
	h.pending = false
	h.mu.Unlock()
	if pending {
		srv.ReloadPolicy() // logs its outcome
	}
}

// stop ends the filter.
func (h *hupFilter) stop() {
	close(h.done)
	h.wg.Wait()
}
