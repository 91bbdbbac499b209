package lessor

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"
)

// Made-up times: the Lessor never reads a clock.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	eps      = time.Second
	interval = 5 * time.Minute
	ttl      = 10 * time.Second
)

func newLessor(t testing.TB, cfg Config) *Lessor {
	t.Helper()
	ls, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

func grant(t testing.TB, ls *Lessor, id uint64, ttl time.Duration, now time.Time) {
	t.Helper()
	if err := ls.Grant(id, ttl, now); err != nil {
		t.Fatalf("Grant(%d): %v", id, err)
	}
}

// expiresAt asserts that lease id expires at at: a nanosecond before, it
// has time left and Expired does not hand it out; at at, it has none, and
// Expired hands it out, after which TimeToLive and KeepAlive refuse it. It
// leaves the lease handed out by Expired.
func expiresAt(t *testing.T, ls *Lessor, id uint64, at time.Time) {
	t.Helper()
	before := at.Add(-time.Nanosecond)
	if _, _, ok := ls.TimeToLive(id, before); !ok {
		t.Fatalf("lease %d expired a nanosecond before %v", id, at)
	}
	if got := ls.Expired(before, 0); slices.Contains(got, id) {
		t.Fatalf("Expired a nanosecond before %v handed out %d", at, id)
	}
	if left, _, ok := ls.TimeToLive(id, at); !ok || left != 0 {
		t.Fatalf("lease %d at its expiry %v: %v left (%v), want none", id, at, left, ok)
	}
	if got := ls.Expired(at, 0); !slices.Contains(got, id) {
		t.Fatalf("Expired at %v = %v, want %d in it", at, got, id)
	}
	if _, _, ok := ls.TimeToLive(id, at); ok {
		t.Fatalf("lease %d handed out by Expired, still live", id)
	}
	if r, unknown, _ := ls.KeepAlive([]uint64{id}, at); len(r) != 0 || !slices.Equal(unknown, []uint64{id}) {
		t.Fatalf("KeepAlive once handed out: renewed %v, unknown %v; want it refused", r, unknown)
	}
}

func TestConfigEveryFieldValidatedAndDefaulted(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero Config: %v", err)
	}
	// Every field must refuse a negative value (Validate) and, except ε,
	// take a positive default when zero (withDefaults): a field added to
	// Config and handled by neither fails here.
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		var c Config
		reflect.ValueOf(&c).Elem().Field(i).SetInt(-1)
		if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s = -1: Validate = %v, want ErrInvalidConfig", name, err)
		}
		if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s = -1: New = %v, want ErrInvalidConfig", name, err)
		}
		d := reflect.ValueOf(Config{}.withDefaults()).Field(i).Int()
		if name != "Epsilon" && d <= 0 {
			t.Errorf("%s: default %d, want positive", name, d)
		}
	}
	if err := (Config{MaxRevokesPerSecond: 1e9 + 1}).Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("MaxRevokesPerSecond 1e9+1: Validate = %v", err)
	}
}

func TestGrantExpiresAtTTLPlusEpsilon(t *testing.T) {
	ls := newLessor(t, Config{Epsilon: eps})
	grant(t, ls, 1, ttl, t0)
	rem, granted, ok := ls.TimeToLive(1, t0)
	if !ok || rem != ttl || granted != ttl {
		t.Fatalf("TimeToLive at grant = %v, %v, %v; want %v, %v, true", rem, granted, ok, ttl, ttl)
	}
	// The holder sees 0 left from ttl on, the server keeps it ε more.
	if rem, _, ok := ls.TimeToLive(1, t0.Add(ttl+eps/2)); !ok || rem != 0 {
		t.Fatalf("TimeToLive within ε = %v, %v; want 0, true", rem, ok)
	}
	expiresAt(t, ls, 1, t0.Add(ttl+eps))
}

func TestGrantRefusesBadInput(t *testing.T) {
	ls := newLessor(t, Config{})
	grant(t, ls, 1, ttl, t0)
	for _, tc := range []struct {
		id   uint64
		ttl  time.Duration
		want error
	}{
		{1, ttl, ErrExists},
		{2, 0, ErrInvalidTTL},
		{3, -time.Second, ErrInvalidTTL},
	} {
		if err := ls.Grant(tc.id, tc.ttl, t0); !errors.Is(err, tc.want) {
			t.Errorf("Grant(%d, %v) = %v, want %v", tc.id, tc.ttl, err, tc.want)
		}
	}
	if ls.Len() != 1 {
		t.Fatalf("Len = %d after refused grants, want 1", ls.Len())
	}
	// The refused re-grant did not touch lease 1.
	if _, g, _ := ls.TimeToLive(1, t0); g != ttl {
		t.Fatalf("granted TTL %v, want %v", g, ttl)
	}
}

func TestKeepAliveRenewsAndMarksOncePerCheckpoint(t *testing.T) {
	long := time.Hour
	ls := newLessor(t, Config{Epsilon: eps, CheckpointInterval: interval})
	grant(t, ls, 1, long, t0)
	grant(t, ls, 2, ttl, t0)

	t1 := t0.Add(3 * time.Second)
	renewed, unknown, mark := ls.KeepAlive([]uint64{1, 2, 99}, t1)
	if want := []Renewal{{1, long}, {2, ttl}}; !slices.Equal(renewed, want) {
		t.Fatalf("renewed %v, want %v", renewed, want)
	}
	if !slices.Equal(unknown, []uint64{99}) || !slices.Equal(mark, []uint64{1, 2}) {
		t.Fatalf("unknown %v, mark %v; want [99], [1 2]", unknown, mark)
	}
	// Kept alive again while that mark is on its way: marked again, for
	// the mark may be lost with this leader, and this renewal with it.
	t2 := t1.Add(3 * time.Second)
	if _, _, mark := ls.KeepAlive([]uint64{1, 2}, t2); !slices.Equal(mark, []uint64{1, 2}) {
		t.Fatalf("a keep-alive while the mark is on its way marked %v, want [1 2]", mark)
	}
	// Once the mark is applied, no more marks before a checkpoint.
	ls.Marked([]uint64{1, 2})
	if _, _, mark := ls.KeepAlive([]uint64{1, 2}, t2); len(mark) != 0 {
		t.Fatalf("a keep-alive after the mark was applied marked %v, want none", mark)
	}
	expiresAt(t, ls, 2, t2.Add(ttl+eps))

	// Lease 1's checkpoint clears its mark: its next keep-alive is marked.
	due := ls.DueCheckpoints(t0.Add(interval), 0)
	if want := []Checkpoint{{1, long - (interval - 6*time.Second)}}; !slices.Equal(due, want) {
		t.Fatalf("DueCheckpoints = %v, want %v", due, want)
	}
	if _, _, mark := ls.KeepAlive([]uint64{1}, t0.Add(interval+time.Second)); !slices.Equal(mark, []uint64{1}) {
		t.Fatalf("keep-alive after the checkpoint marked %v, want [1]", mark)
	}
}

// A keep-alive that arrives while a checkpoint record is being written must
// be marked: the checkpoint's remaining time was computed before it.
func TestKeepAliveWhileCheckpointInFlightIsMarked(t *testing.T) {
	ls := newLessor(t, Config{Epsilon: eps, CheckpointInterval: interval})
	grant(t, ls, 1, time.Hour, t0)
	ls.KeepAlive([]uint64{1}, t0.Add(time.Second)) // marked
	if due := ls.DueCheckpoints(t0.Add(interval), 0); len(due) != 1 {
		t.Fatalf("DueCheckpoints = %v, want lease 1", due)
	}
	// The checkpoint is not applied yet; a keep-alive comes in.
	if _, _, mark := ls.KeepAlive([]uint64{1}, t0.Add(interval+time.Millisecond)); !slices.Equal(mark, []uint64{1}) {
		t.Fatalf("keep-alive during the checkpoint marked %v, want [1]", mark)
	}
}

func TestUnmarkAsksForTheMarkAgain(t *testing.T) {
	ls := newLessor(t, Config{})
	grant(t, ls, 1, ttl, t0)
	ls.KeepAlive([]uint64{1}, t0)
	ls.Unmark([]uint64{1, 42})
	if _, _, mark := ls.KeepAlive([]uint64{1}, t0.Add(time.Second)); !slices.Equal(mark, []uint64{1}) {
		t.Fatalf("keep-alive after Unmark marked %v, want [1]", mark)
	}
}

func TestKeepAliveNeverShortens(t *testing.T) {
	// A lease resumed with more than its TTL left keeps it through a
	// keep-alive.
	ls := newLessor(t, Config{})
	if err := ls.Resume([]Persisted{{ID: 1, TTL: ttl, Remaining: 3 * ttl, AppliedAt: t0}}, t0); err != nil {
		t.Fatal(err)
	}
	ls.KeepAlive([]uint64{1}, t0.Add(time.Second))
	if rem, _, _ := ls.TimeToLive(1, t0.Add(time.Second)); rem != 3*ttl-time.Second {
		t.Fatalf("remaining %v after keep-alive, want %v", rem, 3*ttl-time.Second)
	}
}

// TestExpiredLeaseIsNotRevived: a lease past its expiry lives until
// Expired hands it out, as its keys do until its revocation is applied: a
// keep-alive before then renews it, with no time left in between. Once
// handed out, nothing revives it.
func TestExpiredLeaseIsNotRevived(t *testing.T) {
	end := t0.Add(ttl + eps)
	// Expired, not handed out yet (the revocation budget may hold it
	// back): it has no time left, and a keep-alive renews it.
	early := newLessor(t, Config{Epsilon: eps})
	grant(t, early, 2, ttl, t0)
	if left, granted, ok := early.TimeToLive(2, end.Add(time.Minute)); !ok || left != 0 || granted != ttl {
		t.Fatalf("TimeToLive past the expiry = %v of %v (%v), want 0 of %v", left, granted, ok, ttl)
	}
	if r, unknown, _ := early.KeepAlive([]uint64{2}, end.Add(time.Minute)); len(r) != 1 || len(unknown) != 0 {
		t.Fatalf("KeepAlive past the expiry, before the revocation: renewed %v, unknown %v", r, unknown)
	}
	expiresAt(t, early, 2, end.Add(time.Minute+ttl+eps))

	ls := newLessor(t, Config{Epsilon: eps, RevokeRetry: time.Second})
	grant(t, ls, 1, ttl, t0)
	// Handed out for revocation, and its retry time passes: refused, not
	// listed, and handed out again.
	at := end.Add(time.Minute)
	if got := ls.Expired(at, 0); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("Expired = %v", got)
	}
	if r, unknown, mark := ls.KeepAlive([]uint64{1}, at); len(r) != 0 || len(mark) != 0 || !slices.Equal(unknown, []uint64{1}) {
		t.Fatalf("KeepAlive once handed out: renewed %v, unknown %v, mark %v", r, unknown, mark)
	}
	later := at.Add(time.Second)
	if r, _, _ := ls.KeepAlive([]uint64{1}, later.Add(-time.Nanosecond)); len(r) != 0 {
		t.Fatalf("lease renewed while its revocation is under way")
	}
	if got := ls.Expired(later.Add(-time.Nanosecond), 0); len(got) != 0 {
		t.Fatalf("Expired before the retry = %v", got)
	}
	if _, _, ok := ls.TimeToLive(1, later); ok {
		t.Fatal("TimeToLive ok for a lease being revoked")
	}
	for range ls.Leases() {
		t.Fatal("Leases lists a lease being revoked")
	}
	if got := ls.Expired(later, 0); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("Expired at the retry = %v, want [1]", got)
	}
	if !ls.Revoke(1) || ls.Len() != 0 || ls.Revoke(1) {
		t.Fatal("Revoke after expiry")
	}
}

func TestExpiredOldestFirst(t *testing.T) {
	ls := newLessor(t, Config{Epsilon: eps})
	// id: TTL. 4 and 2 expire together; ties go to the lower id.
	ttls := map[uint64]time.Duration{1: 50 * time.Second, 2: 20 * time.Second, 3: 30 * time.Second, 4: 20 * time.Second, 5: 10 * time.Second}
	for id, d := range ttls {
		grant(t, ls, id, d, t0)
	}
	ls.KeepAlive([]uint64{5}, t0.Add(9*time.Second))
	ls.KeepAlive([]uint64{5}, t0.Add(19*time.Second)) // now ends at 30 s
	ls.Revoke(3)
	now := t0.Add(time.Hour)
	if got, want := ls.Expired(now, 2), []uint64{2, 4}; !slices.Equal(got, want) {
		t.Fatalf("Expired(max 2) = %v, want %v", got, want)
	}
	if got, want := ls.Expired(now, 0), []uint64{5, 1}; !slices.Equal(got, want) {
		t.Fatalf("Expired = %v, want %v", got, want)
	}
	if got := ls.Expired(now, 0); len(got) != 0 {
		t.Fatalf("Expired again before the retry = %v", got)
	}
}

func TestCheckpointHeap(t *testing.T) {
	ls := newLessor(t, Config{Epsilon: eps, CheckpointInterval: interval})
	grant(t, ls, 1, time.Hour, t0)
	grant(t, ls, 2, 30*time.Minute, t0.Add(time.Minute))
	grant(t, ls, 3, interval, t0) // not longer than the interval: never checkpointed
	grant(t, ls, 4, 7*time.Minute, t0)

	if due := ls.DueCheckpoints(t0.Add(interval-time.Nanosecond), 0); len(due) != 0 {
		t.Fatalf("checkpoints due early: %v", due)
	}
	if next, _ := ls.NextDeadline(t0); !next.Equal(t0.Add(interval)) {
		t.Fatalf("NextDeadline = %v, want the first checkpoint at %v", next, t0.Add(interval))
	}
	at := t0.Add(interval)
	want := []Checkpoint{{1, time.Hour - interval}, {4, 7*time.Minute - interval}}
	if due := ls.DueCheckpoints(at, 0); !slices.Equal(due, want) {
		t.Fatalf("DueCheckpoints = %v, want %v", due, want)
	}
	at2 := t0.Add(interval + time.Minute)
	if due := ls.DueCheckpoints(at2, 0); !slices.Equal(due, []Checkpoint{{2, 30*time.Minute - interval}}) {
		t.Fatalf("DueCheckpoints = %v, want lease 2", due)
	}
	// Lease 4 had 2 minutes left: no next checkpoint unless renewed.
	// Renewed, it is due one interval later.
	ls.KeepAlive([]uint64{4}, at2.Add(30*time.Second)) // ends at 13m31s
	// Lease 1 is due again one interval after its first; max caps the batch.
	at3 := t0.Add(2 * interval)
	if due := ls.DueCheckpoints(at3, 1); !slices.Equal(due, []Checkpoint{{1, time.Hour - 2*interval}}) {
		t.Fatalf("DueCheckpoints = %v, want lease 1", due)
	}
	at4 := at2.Add(interval + 30*time.Second)
	if due := ls.DueCheckpoints(at4, 0); !slices.Equal(due, []Checkpoint{{2, 19*time.Minute + 30*time.Second}, {4, 2 * time.Minute}}) {
		t.Fatalf("DueCheckpoints = %v, want leases 2 and 4", due)
	}
	// A lease revoked or expired is no longer checkpointed.
	ls.Revoke(2)
	if due := ls.DueCheckpoints(t0.Add(20*time.Minute), 0); !slices.Equal(due, []Checkpoint{{1, time.Hour - 4*interval}}) {
		t.Fatalf("DueCheckpoints = %v, want lease 1 only", due)
	}
	if due := ls.DueCheckpoints(t0.Add(2*time.Hour), 0); len(due) != 0 {
		t.Fatalf("checkpoints of expired leases: %v", due)
	}
}

func TestCheckpointRemainingIsTheHoldersView(t *testing.T) {
	ls := newLessor(t, Config{Epsilon: eps, CheckpointInterval: time.Minute})
	grant(t, ls, 1, 2*time.Minute, t0)
	// The holder's view: TTL minus the time since the renewal, floored at 0.
	due := ls.DueCheckpoints(t0.Add(time.Minute), 0)
	if !slices.Equal(due, []Checkpoint{{1, time.Minute}}) {
		t.Fatalf("DueCheckpoints = %v", due)
	}
	rem, _, _ := ls.TimeToLive(1, t0.Add(time.Minute))
	if rem != due[0].Remaining {
		t.Fatalf("TimeToLive %v and the checkpoint %v disagree", rem, due[0].Remaining)
	}
}

func TestResume(t *testing.T) {
	// The new leader takes over at now; AppliedAt is when it applied the
	// last checkpoint (or grant) record.
	now := t0.Add(time.Hour)
	applied := now.Add(-2 * time.Minute)
	for _, tc := range []struct {
		name string
		p    Persisted
		end  time.Time
	}{
		// Kept alive after its checkpoint: its whole TTL from the takeover,
		// however little the checkpoint said.
		{"kept alive", Persisted{ID: 1, TTL: time.Hour, Remaining: time.Minute, KeptAlive: true, AppliedAt: applied}, now.Add(time.Hour + eps)},
		// Kept alive, and the last leader may acknowledge keep-alives until
		// its horizon, after the takeover: its whole TTL from that horizon.
		{"kept alive, old horizon later", Persisted{ID: 1, TTL: time.Hour, Remaining: time.Minute, KeptAlive: true, AppliedAt: applied,
			KeptSince: now.Add(20 * time.Second)}, now.Add(20*time.Second + time.Hour + eps)},
		// An old horizon that passed before the takeover changes nothing.
		{"kept alive, old horizon passed", Persisted{ID: 1, TTL: time.Hour, Remaining: time.Minute, KeptAlive: true, AppliedAt: applied,
			KeptSince: now.Add(-time.Minute)}, now.Add(time.Hour + eps)},
		// KeptSince is for kept leases only.
		{"checkpointed, old horizon later", Persisted{ID: 1, TTL: time.Hour, Remaining: 10 * time.Minute, AppliedAt: applied,
			KeptSince: now.Add(time.Hour)}, applied.Add(10*time.Minute + eps)},
		// Not kept alive: the checkpoint's remaining time from when it was
		// applied, never the whole TTL (etcd issue #9395).
		{"checkpointed", Persisted{ID: 1, TTL: time.Hour, Remaining: 10 * time.Minute, AppliedAt: applied}, applied.Add(10*time.Minute + eps)},
		// Never kept alive nor checkpointed: the grant's TTL from its
		// record.
		{"granted", Persisted{ID: 1, TTL: ttl, Remaining: ttl, AppliedAt: now.Add(-time.Second)}, now.Add(ttl - time.Second + eps)},
		// Its time ran out before the takeover: it expires at once.
		{"ran out", Persisted{ID: 1, TTL: ttl, Remaining: time.Second, AppliedAt: applied}, applied.Add(time.Second + eps)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ls := newLessor(t, Config{Epsilon: eps, CheckpointInterval: interval})
			if err := ls.Resume([]Persisted{tc.p}, now); err != nil {
				t.Fatal(err)
			}
			if !tc.end.After(now) {
				if got := ls.Expired(now, 0); !slices.Equal(got, []uint64{1}) {
					t.Fatalf("Expired at takeover = %v, want [1]", got)
				}
				return
			}
			expiresAt(t, ls, 1, tc.end)
		})
	}
}

func TestResumeMarkState(t *testing.T) {
	// A lease resumed as kept alive needs no new mark; one resumed from a
	// checkpoint does.
	ls := newLessor(t, Config{})
	err := ls.Resume([]Persisted{
		{ID: 1, TTL: ttl, Remaining: ttl, KeptAlive: true, AppliedAt: t0},
		{ID: 2, TTL: ttl, Remaining: ttl, AppliedAt: t0},
	}, t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, mark := ls.KeepAlive([]uint64{1, 2}, t0); !slices.Equal(mark, []uint64{2}) {
		t.Fatalf("mark %v, want [2]", mark)
	}
}

func TestResumeRefusesBadRecordsWhole(t *testing.T) {
	ls := newLessor(t, Config{})
	err := ls.Resume([]Persisted{{ID: 1, TTL: ttl, Remaining: ttl, AppliedAt: t0}, {ID: 2, TTL: 0}}, t0)
	if !errors.Is(err, ErrInvalidTTL) || ls.Len() != 0 {
		t.Fatalf("Resume = %v, Len %d; want ErrInvalidTTL and nothing tracked", err, ls.Len())
	}
}

func TestResumeKeepsTheLaterExpiry(t *testing.T) {
	ls := newLessor(t, Config{})
	grant(t, ls, 1, ttl, t0)
	if err := ls.Resume([]Persisted{{ID: 1, TTL: ttl, Remaining: time.Second, AppliedAt: t0}}, t0); err != nil {
		t.Fatal(err)
	}
	expiresAt(t, ls, 1, t0.Add(ttl))
}

// The failover promise end to end on made-up times: the old leader's
// records (grant, marks, checkpoints) go to a log; a new leader resumes from
// them. Whenever the takeover comes, the new expiry is never before what the
// holder may believe (its last acknowledged keep-alive + ttl + ε), and a
// lease not kept alive after its last checkpoint is not lengthened by more
// than the time between that checkpoint and its application.
func TestFailoverResumesInTheHoldersFavour(t *testing.T) {
	const long = time.Hour
	cfg := Config{Epsilon: eps, CheckpointInterval: interval}
	old := newLessor(t, cfg)
	durable := Persisted{ID: 1, TTL: long, Remaining: long}
	lag := 10 * time.Millisecond // from a record's proposal to its application
	grant(t, old, 1, long, t0)
	durable.AppliedAt = t0.Add(lag)
	holderEnd := t0.Add(long + eps)
	now := t0
	for step := range 400 {
		now = now.Add(time.Minute)
		if step < 100 && step%7 == 0 { // keep-alives for a while, then the holder dies
			_, _, mark := old.KeepAlive([]uint64{1}, now)
			if len(mark) > 0 {
				durable.KeptAlive = true
			}
			holderEnd = now.Add(long + eps) // acknowledged once the mark is applied
		}
		for _, c := range old.DueCheckpoints(now, 0) {
			durable.Remaining, durable.KeptAlive, durable.AppliedAt = c.Remaining, false, now.Add(lag)
		}
		// A new leader takes over right now.
		takeover := now.Add(lag)
		nl := newLessor(t, cfg)
		if err := nl.Resume([]Persisted{durable}, takeover); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := nl.TimeToLive(1, holderEnd.Add(-time.Nanosecond)); holderEnd.After(takeover) && !ok {
			t.Fatalf("step %d: the new leader ended the lease before the holder's %v", step, holderEnd)
		}
		if !durable.KeptAlive {
			rem, _, _ := old.TimeToLive(1, now)
			if nrem, _, _ := nl.TimeToLive(1, now); nrem > rem+lag {
				t.Fatalf("step %d: resumed with %v left, the old leader had %v", step, nrem, rem)
			}
		}
	}
	if left, _, _ := old.TimeToLive(1, now); left > 0 {
		t.Fatal("the dead holder's lease never expired")
	}
}

// 100,000 leases expiring at once come out at exactly the configured rate:
// a tenth of a second's worth at once, then a hundredth of a second's worth
// every 10 ms, which NextDeadline asks for.
func TestExpiredRateLimit(t *testing.T) {
	const n, rate = 100_000, 1000
	ls := newLessor(t, Config{Epsilon: eps, MaxRevokesPerSecond: rate})
	for id := range uint64(n) {
		grant(t, ls, id+1, ttl, t0)
	}
	now := t0.Add(ttl + eps)
	first := ls.Expired(now, 0)
	if len(first) != rate/10 {
		t.Fatalf("first batch %d, want the burst of %d", len(first), rate/10)
	}
	total, calls := len(first), 1
	for total < n {
		next, ok := ls.NextDeadline(now)
		if !ok || next.Sub(now) != 10*time.Millisecond {
			t.Fatalf("after %d revocations NextDeadline is %v later, want 10ms", total, next.Sub(now))
		}
		now = next
		got := ls.Expired(now, 0)
		if len(got) != rate/100 {
			t.Fatalf("batch %d has %d leases, want %d", calls, len(got), rate/100)
		}
		if got[0] != uint64(total+1) {
			t.Fatalf("batch %d starts at lease %d, want %d: oldest first", calls, got[0], total+1)
		}
		total += len(got)
		calls++
		for _, id := range got {
			ls.Revoke(id)
		}
	}
	if took, want := now.Sub(t0.Add(ttl+eps)), (n-rate/10)*time.Second/rate; took != want {
		t.Fatalf("the mass expiry took %v, want %v", took, want)
	}
}

// The budget is exact whatever the call times: with demand always ahead of
// it, the revocations handed out by time T are the burst plus rate × T.
func TestRevokeBudgetExactAtAnyCallTimes(t *testing.T) {
	const rate, burst = 1000, 100
	b := newTokenBucket(rate, burst)
	var now, taken int64
	rnd := newRand(t)
	start := rnd.Int64N(int64(time.Second)) // the bucket is full at its first call
	now = start
	for range 100_000 {
		k := b.available(now)
		b.take(k)
		taken += int64(k)
		if want := burst + (now-start)*rate/1e9; taken != want {
			t.Fatalf("at %v: %d taken, want %d", time.Duration(now), taken, want)
		}
		// when is exact: one token at w, none a nanosecond before.
		w := b.when(now, 1)
		at, before := b, b
		if w <= now || at.available(w) != 1 || before.available(w-1) != 0 {
			t.Fatalf("when(1) = %v at %v", time.Duration(w), time.Duration(now))
		}
		now += rnd.Int64N(int64(40 * time.Millisecond)) // accrues under the burst per step
	}
	// Idle for long, the bucket holds its burst and no more.
	if got := b.available(now + int64(time.Hour)); got != burst {
		t.Fatalf("after an idle hour %d tokens, want %d", got, burst)
	}
}

func TestNextDeadline(t *testing.T) {
	ls := newLessor(t, Config{Epsilon: eps, CheckpointInterval: interval})
	if _, ok := ls.NextDeadline(t0); ok {
		t.Fatal("NextDeadline ok with no lease")
	}
	grant(t, ls, 1, time.Hour, t0)
	grant(t, ls, 2, ttl, t0)
	if next, _ := ls.NextDeadline(t0); !next.Equal(t0.Add(ttl + eps)) {
		t.Fatalf("NextDeadline = %v, want lease 2's expiry", next)
	}
	ls.Revoke(2)
	if next, _ := ls.NextDeadline(t0); !next.Equal(t0.Add(interval)) {
		t.Fatalf("NextDeadline = %v, want lease 1's checkpoint", next)
	}
}

func TestLeasesListsLiveLeases(t *testing.T) {
	ls := newLessor(t, Config{})
	grant(t, ls, 1, ttl, t0)
	grant(t, ls, 2, 2*ttl, t0)
	if got := ls.Expired(t0.Add(ttl), 0); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("Expired = %v", got)
	}
	got := map[uint64]time.Duration{}
	for id, d := range ls.Leases() {
		got[id] = d
	}
	if want := map[uint64]time.Duration{2: 2 * ttl}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Leases = %v, want %v", got, want)
	}
}

// TestFailoversDoNotKeepADeadHoldersLeaseAlive: a lease kept alive, then
// left by its holder, is resumed by each new leader; failovers that come
// faster than its TTL must not renew it forever (etcd issue #9395). The
// first new leader resumes it with its whole TTL, as the holder may have
// renewed just before the takeover, but checkpoints it at once, so the
// next one resumes it from that checkpoint, and it expires.
func TestFailoversDoNotKeepADeadHoldersLeaseAlive(t *testing.T) {
	const ttl, eps = 10 * time.Second, 100 * time.Millisecond
	cfg := Config{Epsilon: eps}
	a := newLessor(t, cfg)
	if err := a.Grant(1, ttl, t0); err != nil {
		t.Fatal(err)
	}
	if _, _, mark := a.KeepAlive([]uint64{1}, t0.Add(time.Second)); len(mark) != 1 {
		t.Fatalf("the first keep-alive marked %v", mark)
	}
	// The record after it: kept alive. The holder dies; a takeover at 5 s.
	rec := Persisted{ID: 1, TTL: ttl, Remaining: ttl, KeptAlive: true}
	b := newLessor(t, cfg)
	takeover := t0.Add(5 * time.Second)
	if err := b.Resume([]Persisted{rec}, takeover); err != nil {
		t.Fatal(err)
	}
	cps := b.DueCheckpoints(takeover, 0)
	if len(cps) != 1 || cps[0].ID != 1 || cps[0].Remaining != ttl {
		t.Fatalf("checkpoints due at the takeover: %v, want lease 1 with its whole TTL", cps)
	}
	// That checkpoint is applied at once; the next takeover, 8 s later,
	// resumes from it.
	rec = Persisted{ID: 1, TTL: ttl, Remaining: cps[0].Remaining, AppliedAt: takeover}
	c := newLessor(t, cfg)
	if err := c.Resume([]Persisted{rec}, takeover.Add(8*time.Second)); err != nil {
		t.Fatal(err)
	}
	end := takeover.Add(ttl + eps)
	if got := c.Expired(end.Add(-time.Nanosecond), 0); len(got) != 0 {
		t.Fatalf("expired before the checkpoint's remaining TTL plus ε: %v", got)
	}
	if got := c.Expired(end, 0); len(got) != 1 || got[0] != 1 {
		t.Fatalf("at the checkpoint's remaining TTL plus ε, expired %v, want lease 1", got)
	}
}

// TestResumeWithoutAppliedTime: a record with no time it was applied at
// counts from the resume, never from the zero time (which would expire
// every lease at once).
func TestResumeWithoutAppliedTime(t *testing.T) {
	const ttl = 10 * time.Second
	ls := newLessor(t, Config{Epsilon: 0})
	if err := ls.Resume([]Persisted{{ID: 1, TTL: ttl, Remaining: 4 * time.Second}}, t0); err != nil {
		t.Fatal(err)
	}
	if r, _, ok := ls.TimeToLive(1, t0); !ok || r != 4*time.Second {
		t.Fatalf("TimeToLive after a resume with no applied time: %v %v, want 4s", r, ok)
	}
}
