package tlsfiles

// This file holds what limits the names a CA may sign for: the X.509 name
// constraints of the CAs made here, the check of a certificate against its
// CA's constraints before it is written, and the refusal of wildcard host
// names that are not under a domain the operator can own.

import (
	"crypto/x509"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/publicsuffix"
)

// checkWildcard returns an error wrapping ErrBadHost if host is a wildcard
// name that a certificate of leased must not carry; nil for any other
// host. A wildcard is allowed only as the whole first label of a name
// under a domain that someone can own: "*.example.com" is allowed, but
// "*", "*.com" and "*.co.uk" (every name under a public suffix, as the
// public suffix list of golang.org/x/net/publicsuffix has it, including
// the private suffixes of hosting services) are not, nor is a '*' in any
// other place ("*.*.example.com", "a.*.example.com", "a*.example.com").
// Top-level names that are not on the list, such as "localhost" or
// "internal", count as public suffixes too, so "*.localhost" is refused.
func checkWildcard(host string) error {
	if !strings.Contains(host, "*") {
		return nil
	}
	base, ok := strings.CutPrefix(strings.TrimSuffix(strings.ToLower(host), "."), "*.")
	if !ok || strings.Contains(base, "*") || base == "" {
		return fmt.Errorf("tls: %w %q: a wildcard must be the whole first label of a name, and only it, as in *.example.com", ErrBadHost, host)
	}
	if _, err := publicsuffix.EffectiveTLDPlusOne(base); err != nil {
		return fmt.Errorf("tls: %w %q: %q is a public suffix, under which anyone may register names; a wildcard must be under a domain you own, as in *.example.com", ErrBadHost, host, base)
	}
	return nil
}

// isPublicSuffix reports whether the DNS name name is itself a public
// suffix on the list of golang.org/x/net/publicsuffix: one of its ICANN
// suffixes (com, co.uk), or one of the private suffixes of hosting services
// (github.io). A single label that is not on the list, such as a host name
// of a private network, is not one.
func isPublicSuffix(name string) bool {
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if net.ParseIP(name) != nil {
		return false
	}
	ps, icann := publicsuffix.PublicSuffix(name)
	return ps == name && (icann || strings.Contains(name, "."))
}

// CheckHost returns an error wrapping ErrBadHost unless host can be named
// in a certificate made here: a DNS name, or an IP address (IPv6 may be in
// brackets), and a wildcard only as checkWildcard allows. The CLI calls it
// to refuse a bad --tls-host as a bad command line before it starts.
func CheckHost(host string) error {
	_, err := hostAltNames([]string{host})
	return err
}

// constrain sets on the CA template tmpl the X.509 name constraints that
// permit exactly the names of h and the names under them, each DNS name (a
// wildcard's base domain) and each address as a range of one, and the
// address ranges of ranges. Go's verifier, like every other, then refuses
// a certificate from the CA for any other name, even one made with the
// CA's key. Both lists are never empty, since h always holds localhost and
// the loopback addresses: an empty list would permit every name of its
// kind.
func constrain(tmpl *x509.Certificate, h altNames, ranges []*net.IPNet) {
	for _, d := range h.dns {
		d = strings.TrimPrefix(d, "*.")
		if !slices.Contains(tmpl.PermittedDNSDomains, d) {
			tmpl.PermittedDNSDomains = append(tmpl.PermittedDNSDomains, d)
		}
	}
	for _, ip := range h.ips {
		tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, single(ip))
	}
	tmpl.PermittedIPRanges = append(tmpl.PermittedIPRanges, ranges...)
	// Critical, so that a verifier that does not understand the
	// constraints refuses the CA rather than ignoring them (RFC 5280
	// 4.2.1.10 requires it).
	tmpl.PermittedDNSDomainsCritical = true
}

// single returns the range that holds ip alone.
func single(ip net.IP) *net.IPNet {
	if v4 := ip.To4(); v4 != nil {
		return &net.IPNet{IP: v4, Mask: net.CIDRMask(32, 32)}
	}
	return &net.IPNet{IP: ip.To16(), Mask: net.CIDRMask(128, 128)}
}

// permitNames parses the --permit-host values of a cluster CA: DNS names
// (each permits itself and every name under it), IP addresses, and
// address ranges in CIDR form. It adds localhost and the loopback
// addresses, which every node certificate names. It refuses a wildcard
// (give the domain itself) and anything else that is neither, with an
// error wrapping ErrBadHost.
func permitNames(permit []string) (altNames, []*net.IPNet, error) {
	h, err := hostAltNames(nil)
	if err != nil {
		return altNames{}, nil, err
	}
	var ranges []*net.IPNet
	for _, raw := range permit {
		s := strings.TrimSpace(raw)
		if _, n, err := net.ParseCIDR(s); err == nil {
			ranges = append(ranges, n)
			continue
		}
		if strings.Contains(s, "*") {
			return altNames{}, nil, fmt.Errorf("tls: %w %q: a CA permits a domain and every name under it; give the domain alone, as in example.com", ErrBadHost, raw)
		}
		one, err := hostAltNames([]string{s})
		if err != nil || s == "" {
			return altNames{}, nil, fmt.Errorf("tls: %w %q: want a DNS name, an IP address or an address range such as 10.0.0.0/8", ErrBadHost, raw)
		}
		if isPublicSuffix(s) {
			return altNames{}, nil, fmt.Errorf("tls: %w %q: it is a public suffix, under which anyone may register names, so permitting it would constrain nothing; permit a domain you own, as in example.com", ErrBadHost, raw)
		}
		for _, d := range one.extraDNS {
			h.addDNS(d, true)
		}
		for _, ip := range one.extraIPs {
			h.addIP(ip, true)
		}
	}
	return h, ranges, nil
}

// checkPermitted returns an error wrapping ErrBadHost if the CA ca, read
// from caPath, may not sign for the names of the certificate leaf (DER) it
// signed: it runs Go's verifier, which checks the CA's name constraints,
// so that a certificate that every client would refuse is never written.
func checkPermitted(leafDER []byte, ca *x509.Certificate, caPath string, now time.Time) error {
	leaf, err := x509.ParseCertificate(leafDER)
	if err != nil {
		return fmt.Errorf("tls: parse new certificate: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	if err == nil {
		return nil
	}
	if ie, ok := err.(x509.CertificateInvalidError); ok && ie.Reason == x509.CANotAuthorizedForThisName {
		return fmt.Errorf("tls: %w: the CA in %s may not sign for it (%s); it permits %s", ErrBadHost, caPath, ie.Detail, describeConstraints(ca))
	}
	return fmt.Errorf("tls: the new certificate does not verify against the CA in %s: %w", caPath, err)
}

// describeConstraints lists the names a CA permits, for an error message.
func describeConstraints(ca *x509.Certificate) string {
	var names []string
	names = append(names, ca.PermittedDNSDomains...)
	for _, n := range ca.PermittedIPRanges {
		names = append(names, n.String())
	}
	if len(names) == 0 {
		return "no names"
	}
	return "only " + strings.Join(names, ", ") + " (and the names under those domains)"
}
