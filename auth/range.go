package auth

import (
	"bytes"
	"fmt"
	"slices"
)

// CheckRange returns nil if client has right on every key k with
// start <= k < end (an empty end: no upper bound), and otherwise an error
// wrapping ErrPermissionDenied that names the client, the range and the
// right. Rights add up where grants nest or adjoin, so the range passes if
// the prefixes of the grants that give right, together, cover it; a range
// that reaches one key outside them fails whole, so that no key leaks
// through a listing.
func (p *Policy) CheckRange(client string, start, end []byte, right Right) error {
	if client != "" && covered(p.spans(client, right), start, end) {
		return nil
	}
	if len(end) == 0 {
		return fmt.Errorf("%w: %s lacks the %s right on some keys from %q on", ErrPermissionDenied, who(client), right, start)
	}
	return fmt.Errorf("%w: %s lacks the %s right on some keys in [%q, %q)", ErrPermissionDenied, who(client), right, start, end)
}

// span is the range of the keys under one grant's prefix: lo <= k < hi,
// hi nil for no upper bound.
type span struct{ lo, hi []byte }

// spans returns the ranges of the grants, of client's and of Anyone's, that
// give right, sorted by their starts. The rights of nested grants add up,
// so a key has right if the grants over it give it together: a grant is
// taken with the rights of every grant whose prefix is a prefix of its own.
func (p *Policy) spans(client string, right Right) []span {
	var out []span
	for _, id := range []string{client, Anyone} {
		g := p.clients[id]
		if g == nil {
			continue
		}
		for _, gr := range g.keys {
			if p.Rights(client, gr.prefix)&right == right {
				out = append(out, span{gr.prefix, prefixEnd(gr.prefix)})
			}
		}
	}
	slices.SortFunc(out, func(a, b span) int { return bytes.Compare(a.lo, b.lo) })
	return out
}

// covered reports whether spans, sorted by their starts, cover every key
// k with start <= k < end (an empty end: no upper bound).
func covered(spans []span, start, end []byte) bool {
	cur := start // every key below cur is covered
	for _, s := range spans {
		if bytes.Compare(s.lo, cur) > 0 {
			break // a gap at cur
		}
		if s.hi == nil {
			return true
		}
		if bytes.Compare(s.hi, cur) > 0 {
			cur = s.hi
		}
		if len(end) > 0 && bytes.Compare(cur, end) >= 0 {
			return true
		}
	}
	return false
}

// prefixEnd returns the least key greater than every key that begins with
// prefix, or nil if there is none (prefix empty or all 0xff): the same as
// protocol.PrefixEnd, which auth, importing no package of this module,
// does not call.
func prefixEnd(prefix []byte) []byte {
	end := bytes.Clone(prefix)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}
