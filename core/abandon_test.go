package core

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/store"
)

// TestAbandonedRetryOutcomeUnknown: a write abandoned before it committed
// tells its writer that nothing changed (ErrCanceled), unless an earlier
// copy of it was applied or may be: a retry of an inherited write held
// behind its key, or one whose first copy still waits for a holder, ends
// with ErrUnavailable (the outcome is unknown) when it is cancelled or its
// deadline passes. Told ErrCanceled, a writer would take a committed write
// for one that never happened.
func TestAbandonedRetryOutcomeUnknown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		now := time.Now()
		// The old leader's horizon, and its last write, whose writer was
		// not told.
		if _, err := st.Apply([]store.Command{
			{Op: store.OpSetHorizon, Horizon: now.Add(3 * time.Second), Span: 3 * time.Second},
			{Op: store.OpPut, Key: []byte("k"), Value: []byte("new"), Client: 7, Request: 1, Acked: 1, At: now},
		}); err != nil {
			t.Fatal(err)
		}
		// A node always admits through its disk guard; a core tells the
		// copies of a write apart only then (Core.track).
		admit := func(store.Op, int) error { return nil }
		c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Replicated: true, Admit: admit,
			Inherited: map[string]time.Time{"k": now.Add(3 * time.Second)},
			Logger:    slog.New(slog.NewTextHandler(io.Discard, nil))}, st, &notices{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, s := range []SessionID{1, 2, 3} {
			c.OpenSession(s)
		}
		write := func(s SessionID, key, value string, client, id uint64) *Request {
			return &Request{Session: s, Op: store.OpPut, Key: []byte(key), Value: []byte(value), Client: client, ID: id, Acked: id}
		}
		cancelled := fmt.Errorf("%w: the client cancelled it", ErrCanceled)
		ended := func(what string, p *pending) Outcome {
			t.Helper()
			o, ok := p.outcome()
			if !ok {
				t.Fatalf("%s: no outcome", what)
			}
			return o
		}
		unknown := func(what string, p *pending) {
			t.Helper()
			if o := ended(what, p); !errors.Is(o.Err, ErrUnavailable) || errors.Is(o.Err, ErrCanceled) {
				t.Errorf("%s: %v; want ErrUnavailable (the outcome is unknown), not ErrCanceled", what, o.Err)
			}
		}

		// The inherited write's retry waits for the key's hold; cancelled
		// meanwhile, it committed all the same.
		retry := submit(t, c, write(1, "k", "new", 7, 1))
		if _, ok := retry.outcome(); ok {
			t.Fatal("retry of the inherited write answered inside the hold")
		}
		c.Cancel(retry.r, cancelled)
		unknown("cancelled retry of an inherited write", retry)

		// Session 1 holds a lease on m; client 8's write of m waits for
		// it, and its retry waits behind it. The retry's deadline passes,
		// then a cancelled retry: the first copy may still commit.
		if _, _, err := c.Read(1, []byte("m")); err != nil {
			t.Fatal(err)
		}
		first := submit(t, c, write(2, "m", "v", 8, 1))
		timed := write(3, "m", "v", 8, 1)
		timed.Timeout = time.Second
		again := submit(t, c, timed)
		time.Sleep(time.Second + time.Millisecond)
		unknown("retry of a waiting write, past its deadline", again)
		third := submit(t, c, write(3, "m", "v", 8, 1))
		c.Cancel(third.r, cancelled)
		unknown("cancelled retry of a waiting write", third)

		// A fresh write, cancelled while it waits: nothing changed.
		fresh := submit(t, c, write(3, "m", "w", 9, 1))
		c.Cancel(fresh.r, cancelled)
		if o := ended("cancelled fresh write", fresh); !errors.Is(o.Err, ErrCanceled) {
			t.Errorf("cancelled fresh write: %v; want ErrCanceled", o.Err)
		}
		time.Sleep(term + eps) // session 1 never relinquishes: its lease runs out
		if o := first.must(t); o.Err != nil {
			t.Fatalf("first copy of the waiting write: %v", o.Err)
		}
		if rec, _ := st.Get([]byte("m")); string(rec.Value) != "v" {
			t.Fatalf("m = %q, want %q: the first copy committed", rec.Value, "v")
		}
	})
}
