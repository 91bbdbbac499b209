package protocol

import (
	"bytes"
	"slices"
	"testing"
)

func TestSplitKeys(t *testing.T) {
	var keys [][]byte
	for i := range 1000 {
		keys = append(keys, bytes.Repeat([]byte{'k'}, 1+i%97))
	}
	for _, limit := range []int{1, 100, 4096, 1 << 20} {
		batches := SplitKeys(keys, limit)
		var joined [][]byte
		for _, b := range batches {
			if len(b) == 0 {
				t.Fatalf("limit %d: empty batch", limit)
			}
			size := 0
			for _, k := range b {
				size += len(k) + 8
			}
			if len(b) > 1 && size > limit {
				t.Fatalf("limit %d: batch of %d keys holds %d bytes", limit, len(b), size)
			}
			// The encoded message stays under a frame limit of twice limit.
			frame, err := AppendFrame(nil, &Renew{ID: 1, Keys: b})
			if err != nil {
				t.Fatal(err)
			}
			if len(b) > 1 && len(frame) > 2*limit {
				t.Fatalf("limit %d: frame of %d bytes", limit, len(frame))
			}
			joined = append(joined, b...)
		}
		if !slices.EqualFunc(joined, keys, bytes.Equal) {
			t.Fatalf("limit %d: batches do not rejoin to the keys", limit)
		}
	}
	if got := SplitKeys(nil, 10); len(got) != 0 {
		t.Fatalf("SplitKeys(nil) = %v", got)
	}
}
