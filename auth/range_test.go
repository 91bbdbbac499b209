package auth

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckRange: a range passes only if the grants that give the right
// cover every key it may hold, alone, nested or side by side; one key
// outside them fails the whole range, with a message that names the client,
// the range and the right.
func TestCheckRange(t *testing.T) {
	p := mustParse(t, `
clients:
  app:
    keys:
      - prefix: /a/
        rights: [read]
      - prefix: /b
        rights: [read]
      - prefix: /c/
        rights: [write]
      - prefix: /c/r/
        rights: [read]
      - prefix: /w/
        rights: [write]
  root:
    keys:
      - prefix: ""
        rights: [read]
  "*":
    keys:
      - prefix: /pub/
        rights: [read]
`)
	for _, tc := range []struct {
		client     string
		start, end string
		right      Right
		ok         bool
	}{
		{"app", "/a/", "/a0", Read, true},             // exactly the grant
		{"app", "/a/x", "/a/y", Read, true},           // inside it
		{"app", "/a/", "/a1", Read, false},            // /a0... is outside
		{"app", "/a/", "", Read, false},               // no end
		{"app", "/a/", "/c", Read, false},             // the gap /a0 to /b
		{"app", "/b", "/c", Read, true},               // /b covers /b... up to /c
		{"app", "/b/x", "/c", Read, true},             // inside /b
		{"app", "/c/r/", "/c/r0", Read, true},         // a nested grant
		{"app", "/c/", "/c0", Read, false},            // /c/ gives write only
		{"app", "/c/r/", "/c/r0", Read | Write, true}, // nested rights add up
		{"app", "/w/", "/w0", Read, false},
		{"app", "/pub/", "/pub0", Read, true}, // Anyone's grant
		{"app", "/a/", "/b", Read, false},     // /a0 to /b uncovered
		{"root", "", "", Read, true},          // everything
		{"root", "/x", "/y", Write, false},
		{"", "/pub/", "/pub0", Read, false}, // no certificate, no rights
		{"other", "/pub/x", "/pub/y", Read, true},
	} {
		err := p.CheckRange(tc.client, []byte(tc.start), []byte(tc.end), tc.right)
		if (err == nil) != tc.ok {
			t.Errorf("CheckRange(%q, [%q, %q), %s) = %v, want ok %v", tc.client, tc.start, tc.end, tc.right, err, tc.ok)
			continue
		}
		if err != nil && (!errors.Is(err, ErrPermissionDenied) || !strings.Contains(err.Error(), tc.start) || !strings.Contains(err.Error(), tc.right.String())) {
			t.Errorf("CheckRange(%q, [%q, %q)): %v; want ErrPermissionDenied naming the range and the right", tc.client, tc.start, tc.end, err)
		}
	}
}

// TestPrefixEnd: the end of a prefix's range is the least key above all
// its keys.
func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{"/a/": "/a0", "a\xff": "b", "\xff\xff": "", "": "", "ab": "ac"} {
		if got := string(prefixEnd([]byte(in))); got != want {
			t.Errorf("prefixEnd(%q) = %q, want %q", in, got, want)
		}
	}
}
