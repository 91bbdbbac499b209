package snapstream_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/leased/leased/internal/snapstream"
	"github.com/leased/leased/store"
)

// stream returns a real snapshot stream of a database at applied index 9.
func stream(t *testing.T) []byte {
	t.Helper()
	b, err := store.Open(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.ApplyEntry(9, []store.Command{{Op: store.OpPut, Key: []byte("a"), Value: bytes.Repeat([]byte("v"), 70<<10)}}); err != nil {
		t.Fatal(err)
	}
	s, err := b.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var buf bytes.Buffer
	if _, err := s.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// check writes data to a Checker in pieces of size n.
func check(data []byte, n int) (*snapstream.Checker, uint64, error) {
	var c snapstream.Checker
	for len(data) > 0 {
		k := min(n, len(data))
		c.Write(data[:k])
		data = data[k:]
	}
	idx, err := c.Check()
	return &c, idx, err
}

// TestChecker: a whole stream passes, written in pieces of any size, and
// gives its applied index; a stream that is empty, not a snapshot, cut
// short, changed or longer is ErrCorrupt.
func TestChecker(t *testing.T) {
	good := stream(t)
	for _, n := range []int{1, 3, 4, 5, 7, 4096, len(good)} {
		c, idx, err := check(good, n)
		if err != nil || idx != 9 || c.Len() != int64(len(good)) {
			t.Errorf("pieces of %d: index %d, %d bytes, %v; want 9, %d", n, idx, c.Len(), err, len(good))
		}
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x10
	sumFlipped := bytes.Clone(good)
	sumFlipped[len(sumFlipped)-1] ^= 1
	for name, data := range map[string][]byte{
		"empty":        nil,
		"not ours":     []byte("hello, world, this is not a snapshot\n"),
		"head only":    good[:len(snapstream.Magic)+1],
		"cut short":    good[:len(good)/2],
		"no sum":       good[:len(good)-4],
		"flipped":      flipped,
		"sum flipped":  sumFlipped,
		"extra byte":   append(bytes.Clone(good), 0),
		"extra stream": append(bytes.Clone(good), good...),
	} {
		for _, n := range []int{1, 5, 4096} {
			if _, _, err := check(data, n); !errors.Is(err, snapstream.ErrCorrupt) {
				t.Errorf("%s, in pieces of %d: %v, want ErrCorrupt", name, n, err)
			}
		}
	}
}
