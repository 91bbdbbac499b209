package store_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/leased/leased/store"
)

// digestCommands is a history with every kind of command: values,
// a deletion, a compare-and-swap that matches and one that does not, write
// leases granted and ended, a horizon and a leader.
func digestCommands() []store.Command {
	h := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	return []store.Command{
		put("a", "1"), put("b", "2"), del("b"), cas("a", 1, "1b"), cas("a", 1, "no"),
		grant("a", 7, time.Second), grant("c", 8, time.Second), end("c", 2),
		horizon(h, 3*time.Second),
		{Op: store.OpSetLeader, Key: []byte("n1"), Value: []byte("127.0.0.1:7401")},
		put("big", string(bytes.Repeat([]byte("v"), 100<<10))), // in the value log
	}
}

func mustSummarize(t *testing.T, s interface{ Summarize() (store.Summary, error) }) store.Summary {
	t.Helper()
	sum, err := s.Summarize()
	if err != nil {
		t.Fatalf("Summarize: %v", err)
	}
	return sum
}

// TestDigestSameCommandsSameDigest: stores that applied the same commands
// have the same digest, whether they took them one entry at a time with an
// applied index, in one batch, in memory, after a reopen, or from a
// snapshot; the applied index is not in it.
func TestDigestSameCommandsSameDigest(t *testing.T) {
	cmds := digestCommands()
	entries, err := store.Open(t.TempDir(), quietLogger(), store.NoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer entries.Close()
	for i, c := range cmds {
		mustApplyEntry(t, entries, uint64(10+3*i), c)
	}
	dir := t.TempDir()
	batch := openBadger(t, dir)
	mustApply(t, batch, cmds...)
	mem := store.NewMemory()
	mustApply(t, mem, cmds...)

	want := mustSummarize(t, entries)
	if want.Applied != uint64(10+3*(len(cmds)-1)) || want.Keys != 2 || want.Deleted != 1 ||
		want.State.Revision != 5 || want.State.Fence != 2 || len(want.State.WriteLeases) != 1 ||
		want.State.Leader != "n1" || want.State.Span != 3*time.Second {
		t.Fatalf("summary: %+v", want)
	}
	restored := openBadger(t, t.TempDir())
	if err := restored.Restore(bytes.NewReader(snapshotBytes(t, entries))); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		s    interface{ Summarize() (store.Summary, error) }
	}{
		{"batch", batch},
		{"memory", mem},
		{"restored", restored},
	} {
		got := mustSummarize(t, c.s)
		if got.Digest != want.Digest || got.Keys != want.Keys || got.Deleted != want.Deleted ||
			got.State.Revision != want.State.Revision || got.State.Fence != want.State.Fence {
			t.Errorf("%s: %+v, want %+v", c.name, got, want)
		}
	}
	if got := mustSummarize(t, reopenBadger(t, batch, dir)); got.Digest != want.Digest {
		t.Errorf("reopened: %+v, want %+v", got, want)
	}
	if d, err := entries.Digest(); err != nil || d != want.Digest || len(d.String()) != 64 {
		t.Errorf("Digest = %v, %v; want %v", d, err, want.Digest)
	}
}

// TestDigestDiffers: one difference of value, version, write lease,
// horizon or leader gives another digest.
func TestDigestDiffers(t *testing.T) {
	base := digestCommands()
	digest := func(extra ...store.Command) store.Digest {
		m := store.NewMemory()
		mustApply(t, m, append(append([]store.Command(nil), base...), extra...)...)
		return mustSummarize(t, m).Digest
	}
	same := digest()
	for _, c := range []struct {
		name  string
		extra []store.Command
	}{
		{"another value", []store.Command{put("a", "other")}},
		{"the same value at another version", []store.Command{put("a", "1b")}},
		{"a deletion", []store.Command{del("a")}},
		{"a write lease", []store.Command{grant("b", 1, time.Second)}},
		{"a write lease ended", []store.Command{end("a", 1)}},
		{"another horizon", []store.Command{horizon(time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC), time.Second)}},
		{"another leader", []store.Command{{Op: store.OpSetLeader, Key: []byte("n2"), Value: []byte("127.0.0.1:7402")}}},
	} {
		if d := digest(c.extra...); d == same {
			t.Errorf("%s: the digest did not change", c.name)
		}
	}
	if digest() != same {
		t.Error("the same commands gave another digest")
	}
	if digest(del("missing")) != same {
		t.Error("a deletion of a missing key, which changes nothing, changed the digest")
	}
}

// TestOpenReadOnly: a database another open holds is refused with
// ErrLocked; once it is closed, a read-only open reads it, changes
// nothing, and a writer can open it again beside nothing.
func TestOpenReadOnly(t *testing.T) {
	dir := t.TempDir()
	if _, err := store.OpenReadOnly(dir, quietLogger()); err == nil {
		t.Fatal("OpenReadOnly of an empty folder succeeded")
	}
	b := openBadger(t, dir)
	mustApply(t, b, digestCommands()...)
	want := mustSummarize(t, b)
	if _, err := store.OpenReadOnly(dir, quietLogger()); !errors.Is(err, store.ErrLocked) {
		t.Fatalf("OpenReadOnly of an open database: %v, want ErrLocked", err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := store.OpenReadOnly(dir, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	if got := mustSummarize(t, ro); got.Digest != want.Digest || got.State.Revision != want.State.Revision {
		t.Errorf("read-only summary %+v, want %+v", got, want)
	}
	if _, err := ro.Apply([]store.Command{put("x", "y")}); err == nil {
		t.Error("Apply on a read-only database succeeded")
	}
	if err := ro.Close(); err != nil {
		t.Fatal(err)
	}
	if got := mustSummarize(t, openBadger(t, dir)); got.Digest != want.Digest {
		t.Errorf("after the read-only open: %+v, want %+v", got, want)
	}
}
