package server

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// The lease horizon (DESIGN §7), on a fake clock. A crash is simulated by
// putting back, after Close, the horizon the server had persisted while it
// ran, and its boot record: Close itself lowers them to what the lease
// table still needs, which a crash would not do.

const eps = 100 * time.Millisecond

// persistedHorizon reads the lease horizon from srv's store.
func persistedHorizon(t *testing.T, srv *Server) time.Time {
	t.Helper()
	return storedState(t, srv).Horizon
}

// bootRecord reads the boot record of the horizon srv persisted last
// (core.Config.BootFile).
func bootRecord(t *testing.T, srv *Server) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(srv.cfg.Dir, bootFile))
	if err != nil {
		t.Fatalf("no boot record: %v", err)
	}
	return b
}

// crashedAt makes the closed data folder dir look as if the server had
// crashed with horizon h persisted, written at now, and boot, its boot
// record (bootRecord), beside it.
func crashedAt(t *testing.T, dir string, h, now time.Time, boot []byte) {
	t.Helper()
	st, err := store.Open(dir+"/db", quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Apply([]store.Command{{Op: store.OpSetHorizon, Horizon: h, Span: h.Sub(now)}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, bootFile), boot, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestHorizonCoversEveryGrant: before any lease is granted, the persisted
// horizon covers it; the horizon moves in steps, far fewer times than there
// are grants; a server that never granted a lease persists none.
func TestHorizonCoversEveryGrant(t *testing.T) {
	fc := clock.NewFake()
	const term = 2 * time.Second
	srv := startServer(t, t.TempDir(), fc, term)
	c := dialRaw(t, srv)
	send(t, c, &protocol.Write{ID: 1, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v")})
	if _, ok := recv(t, c).(*protocol.WriteReply); !ok {
		t.Fatal("want a write reply")
	}
	// The writer got a fresh lease with its write, so a horizon exists.
	if h := persistedHorizon(t, srv); h.Before(fc.Now().Add(term + eps)) {
		t.Fatalf("after a write with a lease, horizon %v is before its expiry %v", h, fc.Now().Add(term+eps))
	}

	step := srv.cfg.HorizonStep
	const grants = 2000
	const every = 10 * time.Millisecond
	moves := 0
	last := persistedHorizon(t, srv)
	for i := range grants {
		now := fc.Now()
		if r := get(t, c, "k"); r.Term != term {
			t.Fatalf("grant %d: term %v", i, r.Term)
		}
		h := persistedHorizon(t, srv)
		if h.Before(now.Add(term + eps)) {
			t.Fatalf("grant %d at %v lives until %v, past the persisted horizon %v", i, now, now.Add(term+eps), h)
		}
		if !h.Equal(last) {
			moves++
			last = h
		}
		fc.Advance(every)
	}
	// The background move comes when less than half a step is left, so at
	// most one move per half step of time, and a few more for scheduling.
	span := time.Duration(grants) * every
	if limit := int(span/(step/2)) + 3; moves > limit {
		t.Fatalf("the horizon moved %d times for %d grants over %v (step %v), want at most %d", moves, grants, span, step, limit)
	}
	t.Logf("%d grants over %v: horizon persisted %d times (step %v)", grants, span, moves, step)
}

// TestHorizonNotPersistedWithoutLeases: a server that grants no lease (all
// keys uncached) writes no horizon, so a crash holds no writes after it.
func TestHorizonNotPersistedWithoutLeases(t *testing.T) {
	fc := clock.NewFake()
	dir := t.TempDir()
	srv := newServerWith(t, Config{Dir: dir, Addr: "127.0.0.1:0", LeaseTerm: time.Second, Epsilon: eps, Clock: fc, Logger: quietLogger(),
		PrefixTerms: []PrefixTerm{{Prefix: "", Term: 0}}})
	serve(t, srv)
	c := dialRaw(t, srv)
	if r := get(t, c, "k"); r.Term != 0 {
		t.Fatalf("term %v for an uncached key", r.Term)
	}
	if h := persistedHorizon(t, srv); !h.IsZero() {
		t.Fatalf("horizon %v persisted with no lease granted", h)
	}
	srv.Close()
	srv = newServer(t, dir, fc, time.Second)
	defer srv.Close()
	if left := srv.Stats().WritesAllowedIn; left != 0 {
		t.Fatalf("writes held for %v after a run that granted no lease", left)
	}
}

// TestRestartAfterCrash: after a crash, a write waits exactly until the
// persisted horizon: not a moment less, not at all if it passed while the
// server was down, and not less with a shorter term. It counts the time the
// server was down on the boot clock: a wall clock stepped forward by hours,
// or back, while the server was down moves the wait not at all. After a
// reboot, it waits the horizon's whole span, plus ε, from the start.
func TestRestartAfterCrash(t *testing.T) {
	const term = 10 * time.Second
	// run grants a lease at the fake clock's start and crashes; it returns
	// the data folder, the fake clock and the horizon left behind.
	run := func(t *testing.T) (string, *clock.Fake, time.Time) {
		dir := t.TempDir()
		fc := clock.NewFake()
		srv := newServer(t, dir, fc, term)
		serve(t, srv)
		c := dialRaw(t, srv)
		granted := fc.Now()
		get(t, c, "k")
		h := persistedHorizon(t, srv)
		if h.Before(granted.Add(term + eps)) {
			t.Fatalf("horizon %v before the lease's end %v", h, granted.Add(term+eps))
		}
		boot := bootRecord(t, srv)
		c.Close()
		srv.Close()
		crashedAt(t, dir, h, granted, boot)
		return dir, fc, h
	}
	writeAt := func(t *testing.T, srv *Server, fc *clock.Fake, h time.Time) {
		t.Helper()
		c := dialRaw(t, srv)
		if r := get(t, c, "k"); r.Term == 0 {
			t.Fatal("reads after a restart must be served with leases")
		}
		send(t, c, &protocol.Write{ID: 9, Op: protocol.OpPut, Key: []byte("other"), Value: []byte("v")})
		wait.For(t, testTimeout, "the write to be held", func() bool { return srv.Stats().WritesWaiting == 1 })
		fc.Advance(h.Sub(fc.Now()) - time.Millisecond)
		settle(t, srv, fc)
		if n := srv.Stats().WritesWaiting; n != 1 {
			t.Fatalf("a write committed before the horizon %v", h)
		}
		fc.Advance(time.Millisecond)
		if r, ok := recv(t, c).(*protocol.WriteReply); !ok || r.ID != 9 {
			t.Fatalf("want the write reply, got %#v", r)
		}
	}
	// restart starts the server again on the wall clock wall, which the
	// test set anew, and the boot clock boot.
	restart := func(t *testing.T, dir string, wall *clock.Fake, boot clock.Boot) *Server {
		return serve(t, newServerWith(t, Config{Dir: dir, Addr: "127.0.0.1:0", LeaseTerm: term, Epsilon: eps,
			Clock: wall, BootClock: boot, Logger: quietLogger()}))
	}

	t.Run("waits until the horizon", func(t *testing.T) {
		dir, fc, h := run(t)
		fc.Advance(time.Second) // down for a second
		srv := startServer(t, dir, fc, term)
		if got, want := srv.Stats().WritesAllowedIn, h.Sub(fc.Now()); got != want {
			t.Fatalf("writes allowed in %v, want %v", got, want)
		}
		writeAt(t, srv, fc, h)
	})
	t.Run("shorter term does not shorten it", func(t *testing.T) {
		dir, fc, h := run(t)
		srv := startServer(t, dir, fc, time.Second)
		writeAt(t, srv, fc, h)
	})
	t.Run("passed while down", func(t *testing.T) {
		dir, fc, h := run(t)
		fc.Advance(h.Sub(fc.Now()))
		srv := startServer(t, dir, fc, term)
		if left := srv.Stats().WritesAllowedIn; left != 0 {
			t.Fatalf("writes held for %v after the horizon passed", left)
		}
		c := dialRaw(t, srv)
		send(t, c, &protocol.Write{ID: 9, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v")})
		if r, ok := recv(t, c).(*protocol.WriteReply); !ok || r.Waited != 0 {
			t.Fatalf("want an immediate write reply, got %#v", r)
		}
	})
	for _, step := range []time.Duration{5 * time.Hour, -time.Hour} {
		t.Run(fmt.Sprintf("wall clock stepped by %v", step), func(t *testing.T) {
			dir, fc, h := run(t)
			boot := clock.NewFakeBoot(fc)
			boot.Advance(time.Second) // down for a second
			wall := clockwork.NewFakeClockAt(fc.Now().Add(step + time.Second))
			srv := restart(t, dir, wall, boot)
			left := h.Sub(fc.Now()) - time.Second // on the boot clock
			if got := srv.Stats().WritesAllowedIn; got != left {
				t.Fatalf("writes allowed in %v, want %v: the horizon on the boot clock", got, left)
			}
			writeAt(t, srv, wall, wall.Now().Add(left))
		})
	}
	t.Run("rebooted", func(t *testing.T) {
		dir, fc, h := run(t)
		boot := clock.NewFakeBoot(fc)
		boot.Reboot("another-boot")
		wall := clockwork.NewFakeClockAt(fc.Now().Add(5 * time.Hour))
		srv := restart(t, dir, wall, boot)
		whole := h.Sub(fc.Now()) + eps // the span, written at fc's start, plus ε
		if got := srv.Stats().WritesAllowedIn; got != whole {
			t.Fatalf("writes allowed in %v after a reboot, want the whole span plus ε, %v", got, whole)
		}
		writeAt(t, srv, wall, wall.Now().Add(whole))
	})
}

// TestCloseLowersHorizon: a server that closes knows which leases are
// still live, and persists a horizon that covers exactly those: a restart
// waits for the lease of a client that was cut off, and not at all when
// every holder relinquished its leases.
func TestCloseLowersHorizon(t *testing.T) {
	const term = 10 * time.Second
	t.Run("live lease", func(t *testing.T) {
		dir, fc := t.TempDir(), clock.NewFake()
		srv := newServer(t, dir, fc, term)
		serve(t, srv)
		c := dialRaw(t, srv)
		granted := fc.Now()
		get(t, c, "k")
		fc.Advance(3 * time.Second)
		srv.Close()
		srv = startServer(t, dir, fc, term)
		if got, want := srv.Stats().WritesAllowedIn, granted.Add(term+eps).Sub(fc.Now()); got != want {
			t.Fatalf("writes allowed in %v, want %v: the rest of the live lease", got, want)
		}
	})
	t.Run("all relinquished", func(t *testing.T) {
		dir, fc := t.TempDir(), clock.NewFake()
		srv := newServer(t, dir, fc, term)
		serve(t, srv)
		c := dialRaw(t, srv)
		get(t, c, "k")
		if _, ok := call(t, c, &protocol.Goodbye{}).(*protocol.OK); !ok {
			t.Fatal("want OK to goodbye")
		}
		wait.For(t, testTimeout, "the lease to be relinquished", func() bool { return srv.Stats().Leases == 0 })
		srv.Close()
		srv = startServer(t, dir, fc, term)
		if left := srv.Stats().WritesAllowedIn; left != 0 {
			t.Fatalf("writes held for %v though every lease was relinquished", left)
		}
	})
}

// persistedSpan reads how far the persisted horizon reached when written.
func persistedSpan(t *testing.T, srv *Server) time.Duration {
	t.Helper()
	return storedState(t, srv).Span
}

// TestHorizonAfterClockStepBack: a run that starts after the wall clock
// stepped back trusts the old horizon only as far as its span, so the
// leases it grants are covered by a horizon of its own, and the run after
// its crash waits for them.
func TestHorizonAfterClockStepBack(t *testing.T) {
	dir := t.TempDir()
	fc := clock.NewFake()
	a := newServer(t, dir, fc, time.Second)
	serve(t, a)
	get(t, dialRaw(t, a), "k")
	fc.Advance(500 * time.Millisecond)
	a.Close() // lowers the horizon to the live lease: about 0.6 s ahead

	const longTerm = 30 * time.Second
	back := clockwork.NewFakeClockAt(fc.Now().Add(-time.Hour))
	b := newServer(t, dir, back, longTerm)
	serve(t, b)
	granted := back.Now()
	if r := get(t, dialRaw(t, b), "k"); r.Term != longTerm {
		t.Fatalf("grant after the step back: term %v", r.Term)
	}
	h, span := persistedHorizon(t, b), persistedSpan(t, b)
	if end := granted.Add(longTerm + eps); h.Before(end) {
		t.Fatalf("after the step back, the persisted horizon %v does not cover the lease granted until %v", h, end)
	}
	boot := bootRecord(t, b)
	b.Close()
	crashedAt(t, dir, h, h.Add(-span), boot) // b crashed instead

	back.Advance(time.Second)
	c := startServer(t, dir, back, time.Second)
	if got, want := c.Stats().WritesAllowedIn, granted.Add(longTerm+eps).Sub(back.Now()); got < want {
		t.Fatalf("after the crash of the run that granted a %v lease, writes are held %v, less than the %v it may still live", longTerm, got, want)
	}
}
