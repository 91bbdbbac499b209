package server

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/protocol"
)

// TestErrorReplyBounded: an error that quotes a key of the largest size,
// of bytes that quote long, still makes a reply far below any frame limit,
// cut on a rune boundary, with its code intact.
func TestErrorReplyBounded(t *testing.T) {
	key := strings.Repeat("\xff", MaxKeySize)
	err := fmt.Errorf("write to %q with token %d: %w", key, 7, leasetable.ErrFenced)
	r := errorReply(3, err)
	if r.Code != protocol.CodeFenced || r.ID != 3 {
		t.Fatalf("reply %d %v", r.ID, r.Code)
	}
	if len(r.Message) > maxErrorMessage || !strings.HasPrefix(r.Message, "write to ") || !strings.HasSuffix(r.Message, "…") {
		t.Fatalf("message of %d bytes: %.40q…", len(r.Message), r.Message)
	}
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijkl", 10, "abcdefg…"},
		{"ééééé", 8, "éé…"}, // a cut inside a rune backs off to its start
	} {
		got := shorten(tc.in, tc.n)
		if got != tc.want || len(got) > tc.n || !utf8.ValidString(got) {
			t.Errorf("shorten(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
