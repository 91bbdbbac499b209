package protocol_test

import (
	"bytes"
	"testing"

	"github.com/leased/leased/protocol"
)

// TestPrefixEnd: the end of a prefix's range is the least key above every
// key that begins with the prefix, and no bound where there is none.
func TestPrefixEnd(t *testing.T) {
	for in, want := range map[string]string{"/a/": "/a0", "a\xff": "b", "a\xff\xff": "b", "\xff\xff": "", "": "", "ab": "ac"} {
		got := protocol.PrefixEnd([]byte(in))
		if string(got) != want || (want == "" && got != nil) {
			t.Errorf("PrefixEnd(%q) = %q, want %q", in, got, want)
		}
		// Every key with the prefix is below the end.
		if got != nil && bytes.Compare(append([]byte(in), 0xff, 0xff), got) >= 0 {
			t.Errorf("PrefixEnd(%q) = %q, not above %q", in, got, append([]byte(in), 0xff, 0xff))
		}
	}
}
