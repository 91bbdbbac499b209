package core

import (
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/store"
)

// gate is a Config.Admit that a test opens and shuts, and that records
// what it was asked.
type gate struct {
	mu     sync.Mutex
	shut   error
	asked  []store.Op
	allowD bool // deletes pass while shut
}

var errFull = errors.New("NOSPACE: test disk full")

func (g *gate) admit(op store.Op, bytes int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked = append(g.asked, op)
	if g.shut != nil && !(g.allowD && op == store.OpDelete) {
		return g.shut
	}
	return nil
}

func (g *gate) set(err error) { g.mu.Lock(); g.shut = err; g.mu.Unlock() }

// TestAdmit checks that writes and acquisitions that Config.Admit refuses
// fail with its error and change nothing, whether refused at Submit or,
// after they waited for a holder, at commit; that reads, renewals (and
// the horizon entries they need) and admitted deletes go on meanwhile; and
// that writes resume once Admit lets them through.
func TestAdmit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gate{allowD: true}
		st := store.NewMemory()
		c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Admit: g.admit,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, &notices{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, s := range []SessionID{1, 2} {
			c.OpenSession(s)
		}
		submit(t, c, put(2, "k", "a")).must(t)
		submit(t, c, put(2, "d", "x")).must(t)

		// Session 1 holds a lease on k; a write of k waits for it, and
		// the disk fills meanwhile.
		if _, got, err := c.Read(1, []byte("k")); err != nil || got != term {
			t.Fatalf("read: term %v, %v", got, err)
		}
		waiting := submit(t, c, put(2, "k", "b"))
		g.set(errFull)
		time.Sleep(term + eps) // session 1 never relinquishes: its lease runs out
		if o, ok := waiting.outcome(); !ok || !errors.Is(o.Err, errFull) {
			t.Fatalf("write that waited for a holder, committed under a full disk: %+v, %v; want refused", o, ok)
		}

		if err := c.Submit(&Request{Session: 2, Op: store.OpPut, Key: []byte("k"), Value: []byte("c"), Done: func(Outcome) {}}); !errors.Is(err, errFull) {
			t.Fatalf("put under a full disk: %v, want the admission's error", err)
		}
		if err := c.Submit(&Request{Session: 2, Acquire: true, Key: []byte("w"), Done: func(Outcome) {}}); !errors.Is(err, errFull) {
			t.Fatalf("write-lease acquisition under a full disk: %v, want the admission's error", err)
		}
		if rec, _ := st.Get([]byte("k")); string(rec.Value) != "a" {
			t.Fatalf("k = %q after refused writes, want %q", rec.Value, "a")
		}

		// Reads and renewals go on, long after the horizon persisted
		// before the disk filled: the new horizon entries are not asked
		// about.
		for range 5 {
			time.Sleep(2 * term)
			rec, got, err := c.Read(1, []byte("k"))
			if err != nil || got != term || string(rec.Value) != "a" {
				t.Fatalf("read under a full disk: %q term %v, %v", rec.Value, got, err)
			}
			if terms := c.Renew(1, []string{"k"}); terms[0] != term {
				t.Fatalf("renewal under a full disk: %v", terms)
			}
		}
		// A delete the admission lets through is applied.
		submit(t, c, &Request{Session: 2, Op: store.OpDelete, Key: []byte("d")}).must(t)

		g.set(nil)
		c.Relinquish(1, []string{"k"})
		if o := submit(t, c, put(2, "k", "d")).must(t); o.Version == 0 {
			t.Fatalf("write after room came back: %+v", o)
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, op := range g.asked {
			switch op {
			case store.OpPut, store.OpDelete, store.OpCAS, store.OpGrantWriteLease:
			default:
				t.Fatalf("Admit asked about %v", op)
			}
		}
	})
}
