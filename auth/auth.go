// Package auth holds leased's access policy: which client, known by the
// CommonName of its certificate, may do what to which keys (DESIGN.md §15).
//
// A policy grants rights on key prefixes to client identities. A request
// needs a right on each key it names; package server checks it before the
// request changes anything, so a denied request is never half-applied.
// Rights add up: a client has a right on a key if any grant to it, or to
// every client ("*"), names that right and a prefix of the key. There are
// no denials, so the order of grants does not matter.
//
// A policy file is YAML:
//
//	# Identities are the CommonNames of client certificates, from
//	# `leased cert create-client --name NAME`.
//	clients:
//	  app:
//	    keys:
//	      - prefix: /app/
//	        rights: [read, write, write-lease, ttl-lease]
//	  dashboard:
//	    keys:
//	      - prefix: /app/
//	        rights: [read]
//	  ops:
//	    admin: true         # cluster membership and snapshots
//	  prometheus:
//	    metrics: true       # scrape /metrics off loopback
//	  "*":                  # every client with a certificate
//	    keys:
//	      - prefix: /public/
//	        rights: [read]
//
// A Policy is immutable once made; any goroutine may use it.
package auth

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// Right is one right, or a set of them, on keys.
type Right uint8

// The rights a grant may name.
const (
	// Read: read the key under a read lease, and renew that lease.
	Read Right = 1 << iota
	// Write: put, delete or compare-and-swap the key, with or without a
	// write lease's fencing token.
	Write
	// WriteLease: acquire the key's exclusive write lease, and renew it.
	// The server asks for Read too, since the holder caches the value.
	WriteLease
	// TTLLease: attach the key to a TTL lease, and keep alive, look up or
	// revoke a TTL lease the key is attached to. Granting or listing TTL
	// leases needs it on some prefix. The server also holds a request on a
	// lease to the lease's owner, the client that granted it, unless the
	// client has Admin (DESIGN.md §15).
	TTLLease
	// Admin is not tied to keys: change the cluster's members, hand over
	// its lead, and save snapshots of every key. A grant gives it with
	// `admin: true`. It includes Metrics.
	Admin
	// Metrics is not tied to keys: scrape the operator's listener
	// (/metrics, and the profiles) when it is not on loopback, where it
	// asks for client certificates. A grant gives it with `metrics: true`;
	// Admin includes it.
	Metrics
)

// rightNames are the names of the rights in policy files and errors, in
// the order of their bits; the first keyRights are those tied to keys.
var rightNames = []string{"read", "write", "write-lease", "ttl-lease", "admin", "metrics"}

// keyRights is the number of rights tied to keys, which a grant of keys
// names: the first of rightNames.
const keyRights = 4

// String returns the names of the rights in r, joined by "+".
func (r Right) String() string {
	var names []string
	for i, n := range rightNames {
		if r&(1<<i) != 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, "+")
}

// parseRight returns the key right named s. Admin and Metrics are not
// ones: they are given with `admin: true` and `metrics: true`.
func parseRight(s string) (Right, bool) {
	for i, n := range rightNames[:keyRights] {
		if s == n {
			return 1 << i, true
		}
	}
	return 0, false
}

// Anyone is the identity in a policy file whose grants every client with a
// certificate has.
const Anyone = "*"

// ErrPermissionDenied is wrapped by the errors of Check and CheckAny.
var ErrPermissionDenied = errors.New("permission denied")

// ErrBadPolicy is wrapped by the errors of Parse and Load.
var ErrBadPolicy = errors.New("bad access policy")

// Policy maps client identities to their rights. The zero Policy grants
// nothing.
type Policy struct {
	clients map[string]*grants // by identity; Anyone's too
	source  string             // where it came from, for messages
	digest  string             // of the text it was parsed from
}

// grants are the rights of one identity.
type grants struct {
	admin, metrics bool
	keys           []grant
}

// grant is a set of rights on the keys under one prefix.
type grant struct {
	prefix []byte
	rights Right
}

// file is the YAML form of a policy.
type file struct {
	Clients map[string]fileClient `yaml:"clients"`
}

type fileClient struct {
	Admin   bool        `yaml:"admin"`
	Metrics bool        `yaml:"metrics"`
	Keys    []fileGrant `yaml:"keys"`
}

type fileGrant struct {
	Prefix *string  `yaml:"prefix"`
	Rights []string `yaml:"rights"`
}

// maxIdentity is the longest identity: the upper bound of an X.509
// CommonName (RFC 5280), as `leased cert create-client` allows.
const maxIdentity = 64

// Parse parses a policy file's contents; source names it in errors (a
// path, or "" for none). Every error wraps ErrBadPolicy and says where the
// fault is: an unknown field, an unknown right, a grant without a prefix
// or without rights, a prefix written as a pattern ("/app/*"), an identity
// that no certificate can carry. An empty
// file is a policy that grants nothing.
func Parse(data []byte, source string) (*Policy, error) {
	bad := func(format string, args ...any) error {
		where := ""
		if source != "" {
			where = source + ": "
		}
		return fmt.Errorf("%w: %s%s", ErrBadPolicy, where, fmt.Sprintf(format, args...))
	}
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, bad("%v", err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, bad("more than one YAML document")
	}
	sum := sha256.Sum256(data)
	p := &Policy{clients: make(map[string]*grants, len(f.Clients)), source: source, digest: hex.EncodeToString(sum[:6])}
	for id, c := range f.Clients {
		if id == "" || len(id) > maxIdentity || strings.ContainsFunc(id, unicode.IsControl) {
			return nil, bad("client %q: an identity is a certificate's CommonName, 1 to %d printable characters", id, maxIdentity)
		}
		g := &grants{admin: c.Admin, metrics: c.Metrics}
		for i, fg := range c.Keys {
			if fg.Prefix == nil {
				return nil, bad(`client %q, grant %d: no prefix (use prefix: "" for every key)`, id, i+1)
			}
			if strings.HasSuffix(*fg.Prefix, "*") {
				return nil, bad(`client %q, grant %d (prefix %q): a prefix is matched byte for byte, not as a pattern: write "/app/" for the keys under /app/, or "" for every key`, id, i+1, *fg.Prefix)
			}
			if len(fg.Rights) == 0 {
				return nil, bad("client %q, grant %d (prefix %q): no rights; want some of %s", id, i+1, *fg.Prefix, strings.Join(rightNames[:keyRights], ", "))
			}
			var r Right
			for _, name := range fg.Rights {
				one, ok := parseRight(name)
				if !ok {
					hint := ""
					if name == "admin" || name == "metrics" {
						hint = fmt.Sprintf(" (%s is not tied to keys: give the client %s: true)", name, name)
					}
					return nil, bad("client %q, grant %d (prefix %q): unknown right %q; want %s%s", id, i+1, *fg.Prefix, name, strings.Join(rightNames[:keyRights], ", "), hint)
				}
				r |= one
			}
			g.keys = append(g.keys, grant{prefix: []byte(*fg.Prefix), rights: r})
		}
		p.clients[id] = g
	}
	return p, nil
}

// Load reads and parses the policy file at path (see Parse).
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPolicy, err)
	}
	return Parse(data, path)
}

// Digest names the text the policy was parsed from: the first 12 hex
// digits of its SHA-256. Nodes of a cluster that read the same file show
// the same digest (leasectl endpoint status), so a node left on an older
// copy stands out.
func (p *Policy) Digest() string { return p.digest }

// Rights returns the rights client has on key. A client without a
// certificate (identity "") has none: Anyone's grants are for clients
// with one.
func (p *Policy) Rights(client string, key []byte) Right {
	if client == "" {
		return 0
	}
	var r Right
	for _, id := range []string{client, Anyone} {
		g := p.clients[id]
		if g == nil {
			continue
		}
		for _, gr := range g.keys {
			if bytes.HasPrefix(key, gr.prefix) {
				r |= gr.rights
			}
		}
		if g.admin {
			r |= Admin | Metrics
		}
		if g.metrics {
			r |= Metrics
		}
	}
	return r
}

// Check returns nil if client has right on key, and otherwise an error
// wrapping ErrPermissionDenied that names the client, the key and the
// right. For Admin and Metrics, which are not tied to keys, key is
// ignored.
func (p *Policy) Check(client string, key []byte, right Right) error {
	missing := right &^ p.Rights(client, key)
	const notKeys = Admin | Metrics
	switch {
	case missing == 0:
		return nil
	case missing&^notKeys == 0:
		return fmt.Errorf("%w: %s lacks the %s right", ErrPermissionDenied, who(client), missing)
	}
	return fmt.Errorf("%w: %s lacks the %s right on key %q", ErrPermissionDenied, who(client), missing&^notKeys, key)
}

// who names client in errors.
func who(client string) string {
	if client == "" {
		return "a client without a certificate"
	}
	return fmt.Sprintf("client %q", client)
}

// CheckAny returns nil if client has right on some key, and otherwise an
// error wrapping ErrPermissionDenied naming the client and the right. It
// is the check of requests that name no key, such as a TTL lease grant.
func (p *Policy) CheckAny(client string, right Right) error {
	// Rights add up where prefixes nest, so the keys that have the most
	// are the grants' own prefixes. A client without a certificate has
	// no rights (Rights).
	for _, id := range []string{client, Anyone} {
		if g := p.clients[id]; client != "" && g != nil && slices.ContainsFunc(g.keys, func(gr grant) bool { return p.Rights(client, gr.prefix)&right == right }) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s has the %s right on no key", ErrPermissionDenied, who(client), right)
}

// Clients returns the identities the policy names, sorted; Anyone among
// them if it grants every client something.
func (p *Policy) Clients() []string {
	ids := make([]string, 0, len(p.clients))
	for id := range p.clients {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Source returns where the policy came from, as given to Parse.
func (p *Policy) Source() string { return p.source }
