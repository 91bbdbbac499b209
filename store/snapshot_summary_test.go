package store_test

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/leased/leased/store"
)

// TestSnapshotSummary: the summary WriteSummary gives of what it streams,
// and the one ReadSnapshot reads back from the stream, are both the
// summary of the database at the snapshot: applied index, counters,
// horizon, write leases, keys and digest; and the byte counts are the
// stream's length.
func TestSnapshotSummary(t *testing.T) {
	src := openBadger(t, t.TempDir())
	h := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	mustApplyEntry(t, src, 4, put("a", "1"), put("b", string(bigValue(2, 200<<10))), del("a"), put("c", "3"))
	mustApplyEntry(t, src, 5, grant("c", 4, time.Second), horizon(h, time.Minute))
	want, err := src.Summarize()
	if err != nil {
		t.Fatal(err)
	}
	s, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	mustApplyEntry(t, src, 6, put("late", "x")) // not in the snapshot
	var buf bytes.Buffer
	got, n, err := s.WriteSummary(&buf)
	s.Release()
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteSummary = %d, %v; wrote %d bytes", n, err, buf.Len())
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("WriteSummary:\n got %+v\nwant %+v", got, want)
	}
	read, rn, err := store.ReadSnapshot(bytes.NewReader(buf.Bytes()))
	if err != nil || rn != n {
		t.Fatalf("ReadSnapshot = %d bytes, %v; want %d", rn, err, n)
	}
	if !reflect.DeepEqual(read, want) {
		t.Errorf("ReadSnapshot:\n got %+v\nwant %+v", read, want)
	}
	if want.Applied != 5 || want.Keys != 2 || want.Deleted != 1 || want.State.Revision != 4 || want.State.Fence != 1 || len(want.State.WriteLeases) != 1 {
		t.Errorf("summary of the source: %+v", want)
	}
}

// TestReadSnapshotRefusesCorruptStreams: ReadSnapshot refuses, with
// ErrCorruptSnapshot, every stream that Restore refuses.
func TestReadSnapshotRefusesCorruptStreams(t *testing.T) {
	src := openBadger(t, t.TempDir())
	mustApplyEntry(t, src, 7, put("a", "1"), put("b", string(bigValue(1, 100<<10))))
	good := snapshotBytes(t, src)
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	for name, data := range map[string][]byte{
		"empty":      nil,
		"not ours":   []byte("hello, world\n"),
		"cut short":  good[:len(good)/2],
		"no sum":     good[:len(good)-4],
		"flipped":    flipped,
		"extra byte": append(bytes.Clone(good), 0),
	} {
		if _, _, err := store.ReadSnapshot(bytes.NewReader(data)); !errors.Is(err, store.ErrCorruptSnapshot) {
			t.Errorf("%s: ReadSnapshot = %v, want ErrCorruptSnapshot", name, err)
		}
	}
}

// TestBump: Bump raises the counters and changes no key, durably; the
// next write, the next write lease and the next TTL lease are numbered
// after the bump.
func TestBump(t *testing.T) {
	dir := t.TempDir()
	b := openBadger(t, dir)
	mustApplyEntry(t, b, 1, put("a", "1"), grant("a", 1, time.Second), grantTTL(time.Second))
	if err := b.Bump(1000); err != nil {
		t.Fatal(err)
	}
	b = reopenBadger(t, b, dir)
	if st := mustState(t, b); st.Revision != 1001 || st.Fence != 1001 || st.TTLLeaseID != 1001 {
		t.Errorf("after a bump of 1000: revision %d, fence %d, TTL lease id %d", st.Revision, st.Fence, st.TTLLeaseID)
	}
	wantRecord(t, b, "a", str("1"), 1)
	rs := mustApplyEntry(t, b, 2, put("b", "2"), grant("b", 1, time.Second), grantTTL(time.Second))
	if rs[0].Version != 1002 || rs[1].Token != 1002 || rs[2].Lease != 1002 {
		t.Errorf("after the bump: %+v; want version 1002, token 1002, TTL lease 1002", rs)
	}
	if err := b.Bump(^uint64(0) - 10); !errors.Is(err, store.ErrBumpTooLarge) {
		t.Errorf("a bump past the largest revision: %v", err)
	}
}
