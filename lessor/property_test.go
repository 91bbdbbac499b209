package lessor

import (
	"cmp"
	"flag"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the randomized tests (0: from the clock)")

// newRand returns a random source for a test, and logs its seed if the test
// fails, to replay it with -seed.
func newRand(t *testing.T) *rand.Rand {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("replay with -seed %d", seed)
		}
	})
	return rand.New(rand.NewPCG(seed, seed^0x5eed))
}

// shadow is the simple model of a Lessor: a map, and a linear scan for
// every question. The revocation budget is left out (TestExpiredRateLimit
// and TestRevokeBudgetExactAtAnyCallTimes test it); the Lessor under test
// gets one too large to matter.
type shadow struct {
	eps, interval, retry time.Duration
	m                    map[uint64]*shadowLease
}

type shadowLease struct {
	ttl      time.Duration
	expiry   time.Time
	revoking bool
	retryAt  time.Time
	cpSet    bool
	cpDue    time.Time
	kept     bool
	marked   bool
}

func (s *shadow) live(l *shadowLease, now time.Time) bool {
	return l != nil && !l.revoking
}

func (s *shadow) schedule(l *shadowLease, now time.Time) {
	if l.ttl > s.interval && !l.cpSet && !l.revoking && l.expiry.Sub(now)-s.eps > s.interval {
		l.cpSet, l.cpDue = true, now.Add(s.interval)
	}
}

func (s *shadow) grant(id uint64, ttl time.Duration, now time.Time) bool {
	if s.m[id] != nil {
		return false
	}
	l := &shadowLease{ttl: ttl, expiry: now.Add(ttl + s.eps)}
	s.m[id] = l
	s.schedule(l, now)
	return true
}

func (s *shadow) keepAlive(ids []uint64, now time.Time) (renewed []Renewal, unknown, mark []uint64) {
	renewed = []Renewal{}
	for _, id := range ids {
		l := s.m[id]
		if !s.live(l, now) {
			unknown = append(unknown, id)
			continue
		}
		if e := now.Add(l.ttl + s.eps); e.After(l.expiry) {
			l.expiry = e
		}
		if !l.marked {
			l.kept = true
			mark = append(mark, id)
		}
		s.schedule(l, now)
		renewed = append(renewed, Renewal{id, l.ttl})
	}
	return renewed, unknown, mark
}

func (s *shadow) setMarked(ids []uint64) {
	for _, id := range ids {
		if l := s.m[id]; l != nil && l.kept {
			l.marked = true
		}
	}
}

func (s *shadow) unmark(ids []uint64) {
	for _, id := range ids {
		if l := s.m[id]; l != nil {
			l.kept, l.marked = false, false
		}
	}
}

func (s *shadow) due(l *shadowLease) time.Time {
	if l.revoking {
		return l.retryAt
	}
	return l.expiry
}

type idAt struct {
	id uint64
	at time.Time
}

func byTime(a, b idAt) int {
	return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.id, b.id))
}

func (s *shadow) expired(now time.Time, limit int) []uint64 {
	var c []idAt
	for id, l := range s.m {
		if !s.due(l).After(now) {
			c = append(c, idAt{id, s.due(l)})
		}
	}
	slices.SortFunc(c, byTime)
	var ids []uint64
	for _, x := range c {
		if limit > 0 && len(ids) == limit {
			break
		}
		l := s.m[x.id]
		l.revoking, l.retryAt, l.cpSet = true, now.Add(s.retry), false
		ids = append(ids, x.id)
	}
	return ids
}

func (s *shadow) dueCheckpoints(now time.Time, limit int) []Checkpoint {
	var c []idAt
	for id, l := range s.m {
		if l.cpSet && !l.cpDue.After(now) {
			c = append(c, idAt{id, l.cpDue})
		}
	}
	slices.SortFunc(c, byTime)
	var due []Checkpoint
	for _, x := range c {
		if limit > 0 && len(due) == limit {
			break
		}
		l := s.m[x.id]
		l.cpSet = false
		if !now.Before(l.expiry) {
			continue
		}
		due = append(due, Checkpoint{x.id, max(l.expiry.Sub(now)-s.eps, 0)})
		l.kept, l.marked = false, false
		s.schedule(l, now)
	}
	return due
}

func (s *shadow) resume(ps []Persisted, now time.Time) {
	for _, p := range ps {
		e := now.Add(p.TTL + s.eps)
		if !p.KeptAlive {
			applied := p.AppliedAt
			if applied.IsZero() || applied.After(now) {
				applied = now
			}
			e = applied.Add(max(p.Remaining, 0) + s.eps)
		}
		l := s.m[p.ID]
		if l == nil {
			l = &shadowLease{ttl: p.TTL, expiry: e, kept: p.KeptAlive, marked: p.KeptAlive}
			s.m[p.ID] = l
		} else {
			if e.After(l.expiry) && !l.revoking {
				l.expiry = e
			}
			l.kept = l.kept || p.KeptAlive
			l.marked = l.marked || p.KeptAlive
		}
		s.schedule(l, now)
		if p.KeptAlive && !l.revoking {
			l.cpSet, l.cpDue = true, now
		}
	}
}

func (s *shadow) timeToLive(id uint64, now time.Time) (time.Duration, time.Duration, bool) {
	l := s.m[id]
	if !s.live(l, now) {
		return 0, 0, false
	}
	return max(l.expiry.Sub(now)-s.eps, 0), l.ttl, true
}

func (s *shadow) nextDeadline() (time.Time, bool) {
	var next time.Time
	ok := false
	consider := func(at time.Time) {
		if !ok || at.Before(next) {
			next, ok = at, true
		}
	}
	for _, l := range s.m {
		consider(s.due(l))
		if l.cpSet {
			consider(l.cpDue)
		}
	}
	return next, ok
}

// TestLessorAgreesWithShadowModel runs random sequences of grants,
// keep-alives, revocations, expiries, checkpoints and resumes on made-up
// times against a Lessor and the shadow model, and checks that they agree
// on every answer: Expired, DueCheckpoints, KeepAlive, TimeToLive,
// NextDeadline, Len.
func TestLessorAgreesWithShadowModel(t *testing.T) {
	rnd := newRand(t)
	const ids = 40
	ttls := []time.Duration{time.Nanosecond, time.Second, ttl, interval, interval + time.Nanosecond, 20 * time.Minute, time.Hour}
	for run := range 200 {
		cfg := Config{Epsilon: eps, CheckpointInterval: interval, MaxRevokesPerSecond: 1e9}
		ls := newLessor(t, cfg)
		sh := &shadow{eps: eps, interval: interval, retry: DefaultRevokeRetry, m: map[uint64]*shadowLease{}}
		now := t0
		randIDs := func() []uint64 {
			out := make([]uint64, rnd.IntN(5))
			for i := range out {
				out[i] = 1 + rnd.Uint64N(ids)
			}
			return out
		}
		for step := range 300 {
			fail := func(format string, args ...any) {
				t.Helper()
				t.Fatalf("run %d step %d at %v: "+format, append([]any{run, step, now.Sub(t0)}, args...)...)
			}
			switch rnd.IntN(4) {
			case 0:
			case 1:
				now = now.Add(time.Nanosecond)
			case 2:
				now = now.Add(time.Duration(rnd.Int64N(int64(10 * time.Second))))
			case 3:
				now = now.Add(time.Duration(rnd.Int64N(int64(10 * time.Minute))))
			}
			switch op := rnd.IntN(10); op {
			case 0, 1:
				id, d := 1+rnd.Uint64N(ids), ttls[rnd.IntN(len(ttls))]
				err, ok := ls.Grant(id, d, now), sh.grant(id, d, now)
				if (err == nil) != ok {
					fail("Grant(%d) = %v, model %v", id, err, ok)
				}
			case 2, 3:
				in := randIDs()
				r, u, m := ls.KeepAlive(in, now)
				sr, su, sm := sh.keepAlive(in, now)
				if !slices.Equal(r, sr) || !slices.Equal(u, su) || !slices.Equal(m, sm) {
					fail("KeepAlive(%v) = %v %v %v, model %v %v %v", in, r, u, m, sr, su, sm)
				}
				// The mark record is applied, still on its way, or lost.
				switch rnd.IntN(3) {
				case 0:
					ls.Marked(m)
					sh.setMarked(m)
				case 2:
					ls.Unmark(m)
					sh.unmark(m)
				}
			case 4:
				id := 1 + rnd.Uint64N(ids)
				ok := sh.m[id] != nil
				delete(sh.m, id)
				if got := ls.Revoke(id); got != ok {
					fail("Revoke(%d) = %v, model %v", id, got, ok)
				}
			case 5, 6:
				max := rnd.IntN(4)
				if got, want := ls.Expired(now, max), sh.expired(now, max); !slices.Equal(got, want) {
					fail("Expired(%d) = %v, model %v", max, got, want)
				}
			case 7, 8:
				max := rnd.IntN(4)
				if got, want := ls.DueCheckpoints(now, max), sh.dueCheckpoints(now, max); !slices.Equal(got, want) {
					fail("DueCheckpoints(%d) = %v, model %v", max, got, want)
				}
			case 9:
				ps := make([]Persisted, rnd.IntN(3))
				for i := range ps {
					d := ttls[rnd.IntN(len(ttls))]
					ps[i] = Persisted{ID: 1 + rnd.Uint64N(ids), TTL: d, Remaining: time.Duration(rnd.Int64N(int64(d + 1))), KeptAlive: rnd.IntN(2) == 0, AppliedAt: now.Add(-time.Duration(rnd.Int64N(int64(time.Minute))))}
				}
				if err := ls.Resume(ps, now); err != nil {
					fail("Resume: %v", err)
				}
				sh.resume(ps, now)
			}
			for id := range uint64(ids) + 1 {
				r, g, ok := ls.TimeToLive(id, now)
				sr, sg, sok := sh.timeToLive(id, now)
				if r != sr || g != sg || ok != sok {
					fail("TimeToLive(%d) = %v %v %v, model %v %v %v", id, r, g, ok, sr, sg, sok)
				}
			}
			next, ok := ls.NextDeadline(now)
			snext, sok := sh.nextDeadline()
			if ok != sok || !next.Equal(snext) {
				fail("NextDeadline = %v %v, model %v %v", next, ok, snext, sok)
			}
			if ls.Len() != len(sh.m) {
				fail("Len = %d, model %d", ls.Len(), len(sh.m))
			}
		}
	}
}
