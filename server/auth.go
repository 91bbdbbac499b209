package server

// This file holds who may do what (DESIGN.md §15): client certificates
// identify clients, and an access policy (package auth) says what each may
// do to which keys. Each request is checked before it changes anything.

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"

	"github.com/leased/leased/auth"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// identityOf returns the identity of the client of a TLS connection: the
// CommonName of the certificate it presented, if the server verified it,
// and "" otherwise.
func identityOf(cs tls.ConnectionState) string {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return ""
	}
	return cs.VerifiedChains[0][0].Subject.CommonName
}

// SetPolicy replaces the access policy that requests are checked against
// (nil: every client may do everything). Each request checked from then on
// is checked against p. Leases granted before stay until they end, as
// their holders were promised, but are renewed only if p allows it; the
// recalls of those leases still reach their holders, so no session learns
// through them of a key it was never allowed to read. Any goroutine may
// call it.
func (s *Server) SetPolicy(p *auth.Policy) { s.policy.Store(p) }

// Policy returns the access policy requests are checked against, nil for
// none. Any goroutine may call it.
func (s *Server) Policy() *auth.Policy { return s.policy.Load() }

// ReloadPolicy reads Config.PolicyFile again and, if it parses, makes it
// the policy (SetPolicy); otherwise it keeps the policy in force and
// returns why. leased calls it on SIGHUP. It logs and counts the outcome
// (leased_auth_policy_reloads_total). Without a PolicyFile it returns an
// error.
func (s *Server) ReloadPolicy() error {
	if s.cfg.PolicyFile == "" {
		return fmt.Errorf("leased: no access policy file to reload (Config.PolicyFile)")
	}
	p, err := loadPolicy(s.cfg.PolicyFile, s.log)
	if err != nil {
		s.metrics.policyReloads.WithLabelValues("error").Inc()
		s.log.Error("access policy not reloaded; the one in force stays", "file", s.cfg.PolicyFile, "err", err)
		return fmt.Errorf("leased: %w", err)
	}
	s.SetPolicy(p)
	s.metrics.policyReloads.WithLabelValues("ok").Inc()
	s.log.Info("access policy reloaded", "file", s.cfg.PolicyFile, "clients", len(p.Clients()))
	return nil
}

// loadPolicy reads the access policy file at path (auth.Load), and warns
// on log when the file may be written by others than its owner (its group,
// or everyone): whoever may write it decides who may do what. New calls
// it at the start, and ReloadPolicy at each reload.
func loadPolicy(path string, log *slog.Logger) (*auth.Policy, error) {
	p, err := auth.Load(path)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o022 != 0 {
		log.Warn("the access policy file may be written by others than its owner, who could then grant themselves every right: make it writable by its owner only (chmod go-w)",
			"file", path, "mode", fmt.Sprintf("%04o", fi.Mode().Perm()))
	}
	return p, nil
}

// mayScrape returns nil if the request r to the operator's listener may
// read what the server measures (/metrics, the profiles), and otherwise
// an error wrapping auth.ErrPermissionDenied that names the client. Off
// loopback, under an access policy, the client's certificate needs the
// metrics right (or admin); on loopback (plain HTTP, no certificate) and
// without a policy, every request may. The listener's handlers call it
// for each request, under the policy in force then.
func (s *Server) mayScrape(r *http.Request) error {
	p := s.policy.Load()
	if p == nil || r.TLS == nil {
		return nil
	}
	return p.Check(identityOf(*r.TLS), nil, auth.Metrics)
}

// allowed returns nil if the session's client has right on key under the
// policy in force, and otherwise an error wrapping auth.ErrPermissionDenied
// that names the client, the key and the right.
func (ss *session) allowed(key []byte, right auth.Right) error {
	p := ss.srv.policy.Load()
	if p == nil {
		return nil
	}
	return p.Check(ss.identity, key, right)
}

// rightsKey returns the key whose rights a read of key needs: the lock's
// key for the record of a lock (protocol.LockRecordKey), which tells who
// holds it; key itself otherwise.
func rightsKey(key []byte) []byte {
	if k, ok := bytes.CutPrefix(key, []byte(protocol.LockRecordPrefix)); ok {
		return k
	}
	return key
}

// mayRead reports whether the session's client may read key: always
// without a policy. Unlike allowed, it makes no error, for the writes
// that ask it whether to leave their writer a read lease.
func (ss *session) mayRead(key []byte) bool {
	p := ss.srv.policy.Load()
	return p == nil || p.Rights(ss.identity, key)&auth.Read != 0
}

// allowedAny returns nil if the session's client has right on some key.
func (ss *session) allowedAny(right auth.Right) error {
	p := ss.srv.policy.Load()
	if p == nil {
		return nil
	}
	return p.CheckAny(ss.identity, right)
}

// authorize returns nil if the session may make request m, and otherwise
// why not, for the requests whose rights follow from the request alone.
// Relinquishing (Release, Ack, ReleaseWrite, Cancel, Goodbye) needs no
// right, nor do Stats, MemberList and EndpointStatus, which name no key.
// Renew and the requests on an existing TTL lease are checked where they
// are served: Renew key by key, the others against the lease's owner
// (mayUseLease) and its keys.
func (ss *session) authorize(m protocol.Message) error {
	switch m := m.(type) {
	case *protocol.Get:
		return ss.allowed(rightsKey(m.Key), auth.Read)
	case *protocol.List:
		// Every key the range may hold, not only those it holds now: a
		// listing must not tell which keys exist where the client may not
		// read.
		if p := ss.srv.policy.Load(); p != nil {
			return p.CheckRange(ss.identity, m.Start, m.End, auth.Read)
		}
		return nil
	case *protocol.Watch:
		// Every key the range may hold: a watch must not tell which keys
		// change where the client may not read.
		if p := ss.srv.policy.Load(); p != nil {
			return p.CheckRange(ss.identity, m.Start, m.End, auth.Read)
		}
		return nil
	case *protocol.Write:
		need := auth.Write
		if m.Lease != 0 && m.Op != protocol.OpDelete {
			need |= auth.TTLLease
		}
		if m.Guard != nil {
			// A guard tells whether the lock is held with its token.
			if err := ss.allowed(m.Guard.Key, auth.Read); err != nil {
				return err
			}
		}
		return ss.allowed(m.Key, need)
	case *protocol.Txn:
		return ss.authorizeTxn(m)
	case *protocol.Acquire:
		// The holder caches the key's value under its write lease, so it
		// must be allowed to read it.
		need := auth.Read | auth.WriteLease
		if m.Lease != 0 {
			need |= auth.TTLLease
		}
		return ss.allowed(m.Key, need)
	case *protocol.LeaseGrant, *protocol.LeaseList, *protocol.LeaseKeepAlive, *protocol.LeaseTimeToLive, *protocol.LeaseRevoke:
		return ss.allowedAny(auth.TTLLease)
	case *protocol.MemberAdd, *protocol.MemberRemove, *protocol.MemberTransfer, *protocol.SnapshotSave, *protocol.Compact:
		return ss.allowed(nil, auth.Admin)
	}
	return nil
}

// renewable returns, for each of keys, whether the session's client may
// still read it, and whether it may still hold its write lease: a Renew
// gives the keys it may not read no new term, and renews no write lease
// without the read and write-lease rights. Both are nil without a policy.
func (ss *session) renewable(keys []string) (read, readOnly []bool) {
	p := ss.srv.policy.Load()
	if p == nil {
		return nil, nil
	}
	read, readOnly = make([]bool, len(keys)), make([]bool, len(keys))
	for i, k := range keys {
		r := p.Rights(ss.identity, rightsKey([]byte(k)))
		read[i] = r&auth.Read != 0
		readOnly[i] = r&auth.WriteLease == 0
	}
	return read, readOnly
}

// allowedKeys returns nil if the session's client has right on each of
// keys, and otherwise the error for the first it lacks it on.
func (ss *session) allowedKeys(keys []string, right auth.Right) error {
	p := ss.srv.policy.Load()
	if p == nil {
		return nil
	}
	for _, k := range keys {
		if err := p.Check(ss.identity, []byte(k), right); err != nil {
			return err
		}
	}
	return nil
}

// mayUseLease returns nil if the session's client may use TTL lease id
// (attach a key to it, keep it alive, look it up or revoke it) as far as
// its owner goes: it owns the lease, the lease has no owner, or the client
// has the admin right; without a policy, every client may. Otherwise it
// returns an error wrapping auth.ErrPermissionDenied that names the
// client and the lease; and for a lease that does not exist, one wrapping
// store.ErrLeaseNotFound, as the request would otherwise reach a lease of
// that id granted to another client meanwhile. A lease's owner never
// changes, so the answer for a lease that exists stays true. The rights on
// the lease's keys are checked apart.
func (ss *session) mayUseLease(id uint64) error {
	p := ss.srv.policy.Load()
	if p == nil || p.Check(ss.identity, nil, auth.Admin) == nil {
		return nil
	}
	owner, ok := ss.core.TTLOwner(id)
	switch {
	case !ok:
		return fmt.Errorf("%w: %016x", store.ErrLeaseNotFound, id)
	case owner != 0 && owner != ss.owner:
		return fmt.Errorf("%w: client %q may not use TTL lease %016x: it belongs to another client", auth.ErrPermissionDenied, ss.identity, id)
	}
	return nil
}

// listsAllLeases reports whether LeaseList shows the session every TTL
// lease: without a policy, or to a client with the admin right. Others
// see their own leases and those with no owner.
func (ss *session) listsAllLeases() bool {
	p := ss.srv.policy.Load()
	return p == nil || p.Check(ss.identity, nil, auth.Admin) == nil
}

// keepable sorts the leases of a keep-alive into those the session's
// client may keep alive, those it may not (denied: another client's, or
// with an attached key it lacks the TTL lease right on), and those that do
// not exist. Without a policy it keeps them all. Under one, it reads each
// lease's keys from the store.
func (ss *session) keepable(leases []uint64) (keep, denied, unknown []uint64, err error) {
	if ss.srv.policy.Load() == nil {
		return leases, nil, nil, nil
	}
	for _, id := range leases {
		err := ss.mayUseLease(id)
		if err == nil {
			var keys []string
			if _, _, keys, _, err = ss.core.TTLLease(id, true); err != nil {
				return nil, nil, nil, err
			}
			err = ss.allowedKeys(keys, auth.TTLLease)
		}
		switch {
		case err == nil:
			keep = append(keep, id)
		case errors.Is(err, store.ErrLeaseNotFound):
			unknown = append(unknown, id)
		default:
			denied = append(denied, id)
		}
	}
	return keep, denied, unknown, nil
}
