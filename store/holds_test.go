package store_test

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/leased/leased/store"
)

// The keys a leader holds for an earlier one are recorded with its horizon
// (OpSetHorizon's Holds, State.Holds): each horizon replaces those of the
// one before, a horizon without any clears them, and so does a handoff.
// They are replicated state: a snapshot carries them, and the digest
// covers them; a snapshot without them, as older ones are, restores none.
func TestHoldsReplacedByEachHorizon(t *testing.T) {
	h := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	holds := []store.HeldKey{{Key: "a", Left: time.Second}, {Key: "b", Left: 0}}
	withHolds := func(hs []store.HeldKey) store.Command {
		return store.Command{Op: store.OpSetHorizon, Horizon: h, Span: time.Minute, Holds: hs}
	}
	for _, im := range impls {
		t.Run(im.name, func(t *testing.T) {
			s := im.open(t)
			mustApply(t, s, withHolds(holds))
			if got := mustState(t, s).Holds; !reflect.DeepEqual(got, holds) {
				t.Errorf("holds %+v, want %+v", got, holds)
			}
			mustApply(t, s, withHolds(holds[1:]))
			if got := mustState(t, s).Holds; !reflect.DeepEqual(got, holds[1:]) {
				t.Errorf("holds after a horizon with fewer %+v, want %+v", got, holds[1:])
			}
			mustApply(t, s, horizon(h, time.Minute))
			if got := mustState(t, s).Holds; len(got) != 0 {
				t.Errorf("holds after a horizon without any: %+v", got)
			}
			mustApply(t, s, withHolds(holds), store.Command{Op: store.OpHandoff, At: h})
			if got := mustState(t, s).Holds; len(got) != 0 {
				t.Errorf("holds after a handoff: %+v", got)
			}
		})
	}
}

func TestHoldsInSnapshot(t *testing.T) {
	h := time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
	holds := []store.HeldKey{{Key: "k", Left: 3 * time.Second}}
	src := openBadger(t, t.TempDir())
	mustApplyEntry(t, src, 1, put("k", "v"), store.Command{Op: store.OpSetHorizon, Horizon: h, Span: time.Minute, Holds: holds})
	plain := openBadger(t, t.TempDir())
	mustApplyEntry(t, plain, 1, put("k", "v"), horizon(h, time.Minute))
	sumOf := func(b *store.Badger) store.Summary {
		t.Helper()
		s, err := b.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		defer s.Release()
		sum, _, err := s.WriteSummary(new(bytes.Buffer))
		if err != nil {
			t.Fatal(err)
		}
		return sum
	}
	if sumOf(src).Digest == sumOf(plain).Digest {
		t.Error("the digest does not cover the holds")
	}
	for _, tc := range []struct {
		name string
		from *store.Badger
		want []store.HeldKey
	}{
		{"with holds", src, holds},
		{"without holds, as older snapshots", plain, nil},
	} {
		dst := openBadger(t, t.TempDir())
		if err := dst.Restore(bytes.NewReader(snapshotBytes(t, tc.from))); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := mustState(t, dst).Holds; !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: restored holds %+v, want %+v", tc.name, got, tc.want)
		}
		if sumOf(dst).Digest != sumOf(tc.from).Digest {
			t.Errorf("%s: the restored state has another digest", tc.name)
		}
	}
}
