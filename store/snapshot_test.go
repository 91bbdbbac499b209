package store_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/leased/leased/store"
)

func mustApplyEntry(t *testing.T, b *store.Badger, index uint64, cmds ...store.Command) []store.Result {
	t.Helper()
	rs, err := b.ApplyEntry(index, cmds)
	if err != nil {
		t.Fatalf("ApplyEntry %d: %v", index, err)
	}
	return rs
}

func wantApplied(t *testing.T, b *store.Badger, want uint64) {
	t.Helper()
	if got, err := b.AppliedIndex(); err != nil || got != want {
		t.Fatalf("AppliedIndex = %d, %v; want %d", got, err, want)
	}
}

// TestApplyEntryRecordsIndex: each entry's changes and its index are
// committed together, survive a reopen without sync, and an entry at or
// below the applied index is refused without changing anything.
func TestApplyEntryRecordsIndex(t *testing.T) {
	dir := t.TempDir()
	b, err := store.Open(dir, quietLogger(), store.NoSync())
	if err != nil {
		t.Fatal(err)
	}
	wantApplied(t, b, 0)
	rs := mustApplyEntry(t, b, 3, put("a", "1"), put("b", "2"))
	wantVersions(t, rs, 1, 2)
	mustApplyEntry(t, b, 4, grant("a", 9, time.Second))
	wantApplied(t, b, 4)
	if _, err := b.ApplyEntry(4, []store.Command{put("a", "again")}); err == nil {
		t.Fatal("ApplyEntry of the applied index again succeeded")
	}
	wantRecord(t, b, "a", str("1"), 1)
	// A refused entry is not a failure of the store.
	mustApplyEntry(t, b, 5, put("c", "3"))
	b = reopenBadger(t, b, dir)
	wantApplied(t, b, 5)
	wantRecord(t, b, "c", str("3"), 3)
	if st := mustState(t, b); st.Fence != 1 || st.Revision != 3 {
		t.Errorf("state after reopen: %+v", st)
	}
}

// snapshotBytes takes a snapshot of b and streams it.
func snapshotBytes(t *testing.T, b *store.Badger) []byte {
	t.Helper()
	s, err := b.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var buf bytes.Buffer
	n, err := s.WriteTo(&buf)
	if err != nil || n != int64(buf.Len()) {
		t.Fatalf("WriteTo = %d, %v; wrote %d bytes", n, err, buf.Len())
	}
	return buf.Bytes()
}

// TestSnapshotRestore: a snapshot restored into another database gives the
// same values, counters, write leases, horizon and applied index, replacing
// what was there; changes after the snapshot was taken are not in it.
func TestSnapshotRestore(t *testing.T) {
	src := openBadger(t, t.TempDir())
	h := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	mustApplyEntry(t, src, 1, put("a", "1"), put("b", string(bigValue(1, 100<<10))), del("a"))
	mustApplyEntry(t, src, 2, grant("k", 4, time.Second), horizon(h, time.Minute))
	snap, err := src.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if snap.AppliedIndex() != 2 {
		t.Errorf("snapshot's applied index %d, want 2", snap.AppliedIndex())
	}
	want := mustState(t, src)
	// Changes after the snapshot are not in it.
	mustApplyEntry(t, src, 3, put("late", "x"))
	var buf bytes.Buffer
	if _, err := snap.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	snap.Release()

	idx, r, err := store.SnapshotIndex(bytes.NewReader(buf.Bytes()))
	if err != nil || idx != 2 {
		t.Fatalf("SnapshotIndex = %d, %v; want 2", idx, err)
	}
	dst := openBadger(t, t.TempDir())
	mustApplyEntry(t, dst, 9, put("old", "gone"), put("x", "y"))
	if err := dst.Restore(r); err != nil {
		t.Fatal(err)
	}
	wantApplied(t, dst, 2)
	wantSameState(t, mustState(t, dst), want)
	wantRecord(t, dst, "a", nil, 3)
	if rec := mustGet(t, dst, "b"); !bytes.Equal(rec.Value, bigValue(1, 100<<10)) || rec.Version != 2 {
		t.Errorf("large value after restore: version %d, %d bytes", rec.Version, len(rec.Value))
	}
	wantRecord(t, dst, "old", nil, 0)
	wantRecord(t, dst, "late", nil, 0)
	// The history came with it, previous values included.
	hist := readAll(t, dst, 1, store.HistoryOptions{Prev: true})
	wantHist := []store.Event{
		{Kind: store.EventPut, Key: []byte("a"), Revision: 1, Value: []byte("1")},
		{Kind: store.EventPut, Key: []byte("b"), Revision: 2, Value: bigValue(1, 100<<10)},
		{Kind: store.EventDelete, Key: []byte("a"), Revision: 3, PrevFound: true, PrevValue: []byte("1"), PrevRevision: 1},
	}
	if !eventsEqual(hist, wantHist) {
		t.Errorf("history after restore: %+v, want %+v", hist, wantHist)
	}
	// The counters go on from the snapshot's.
	rs := mustApplyEntry(t, dst, 3, put("c", "z"), grant("c", 1, time.Second))
	if rs[0].Version != 4 || rs[1].Token != 2 {
		t.Errorf("after restore: %+v; want version 4, token 2", rs)
	}
}

// TestRestoreRefusesCorruptSnapshots: a stream cut short, with a byte
// changed, or with something after its end is refused with
// ErrCorruptSnapshot and leaves an empty database at applied index 0,
// which a whole snapshot then restores.
func TestRestoreRefusesCorruptSnapshots(t *testing.T) {
	src := openBadger(t, t.TempDir())
	mustApplyEntry(t, src, 7, put("a", "1"), put("b", "2"))
	good := snapshotBytes(t, src)
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x40
	cases := map[string][]byte{
		"empty":      nil,
		"not ours":   []byte("hello, world\n"),
		"cut short":  good[:len(good)-3],
		"no sum":     good[:len(good)-4],
		"flipped":    flipped,
		"extra byte": append(bytes.Clone(good), 0),
	}
	dst := openBadger(t, t.TempDir())
	for name, data := range cases {
		mustApplyEntry(t, dst, 100, put("x", "y"))
		err := dst.Restore(bytes.NewReader(data))
		if !errors.Is(err, store.ErrCorruptSnapshot) {
			t.Errorf("%s: Restore = %v, want ErrCorruptSnapshot", name, err)
		}
		wantApplied(t, dst, 0)
		wantRecord(t, dst, "x", nil, 0)
	}
	if err := dst.Restore(bytes.NewReader(good)); err != nil {
		t.Fatal(err)
	}
	wantApplied(t, dst, 7)
	wantRecord(t, dst, "b", str("2"), 2)
}

// TestLeaderRecord: the leader record is the last one set, in badger, in
// memory, across a reopen and through a snapshot.
func TestLeaderRecord(t *testing.T) {
	setLeader := func(name, addr string) store.Command {
		return store.Command{Op: store.OpSetLeader, Key: []byte(name), Value: []byte(addr)}
	}
	dir := t.TempDir()
	b := openBadger(t, dir)
	m := store.NewMemory()
	for _, s := range []store.Store{b, m} {
		if st := mustState(t, s); st.Leader != "" || st.LeaderAddr != "" {
			t.Errorf("%T: leader %q at %q before any was set", s, st.Leader, st.LeaderAddr)
		}
		mustApply(t, s, setLeader("n1", "10.0.0.1:7400"), put("k", "v"), setLeader("n2", "[::1]:7402"))
		if st := mustState(t, s); st.Leader != "n2" || st.LeaderAddr != "[::1]:7402" || st.Revision != 1 {
			t.Errorf("%T: state %+v, want leader n2 at [::1]:7402 and revision 1", s, st)
		}
	}
	b = reopenBadger(t, b, dir)
	if st := mustState(t, b); st.Leader != "n2" {
		t.Errorf("after reopen: leader %q", st.Leader)
	}
	dst := openBadger(t, t.TempDir())
	if err := dst.Restore(bytes.NewReader(snapshotBytes(t, b))); err != nil {
		t.Fatal(err)
	}
	if st := mustState(t, dst); st.Leader != "n2" || st.LeaderAddr != "[::1]:7402" {
		t.Errorf("after restore: leader %q at %q", st.Leader, st.LeaderAddr)
	}
}
