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
	fill   bool // the next write admitted at commit fills the disk: the gate shuts after it
}

var errFull = errors.New("NOSPACE: test disk full")

func (g *gate) admit(op store.Op, bytes int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked = append(g.asked, op)
	if g.shut != nil && !(g.allowD && op == store.OpDelete) {
		return g.shut
	}
	if g.fill && bytes > 0 {
		g.fill, g.shut = false, errFull
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
		st := newMemory(t)
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
		if err := c.Submit(&Request{Session: 2, Op: store.OpGrantWriteLease, Key: []byte("w"), Done: func(Outcome) {}}); !errors.Is(err, errFull) {
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
			if terms := c.Renew(1, []string{"k"}, nil); terms[0] != term {
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

// TestAdmitRetry checks that Config.Admit never refuses a retry of a write
// with a Client whose first copy may have committed: under a full disk, a
// retry of a write committed by an earlier leader on a key this core holds
// gets, once the hold ends, that write's outcome (Duplicate); a retry sent
// while its first copy waits for a holder is accepted, and gets the first
// copy's outcome although the disk filled as that copy committed; while
// fresh writes of the same client are refused at once.
func TestAdmitRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gate{}
		g.set(errFull)
		st := newMemory(t)
		now := time.Now()
		// The old leader's horizon, and its last write, whose writer was
		// not told.
		res, err := st.Apply([]store.Command{
			{Op: store.OpSetHorizon, Horizon: now.Add(3 * time.Second), Span: 3 * time.Second},
			{Op: store.OpPut, Key: []byte("k"), Value: []byte("new"), Client: 7, Request: 1, Acked: 1, At: now},
		})
		if err != nil {
			t.Fatal(err)
		}
		inherited := res[1].Version
		c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Replicated: true, Admit: g.admit,
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
		refused := func(r *Request) {
			t.Helper()
			r.Done = func(Outcome) {
				t.Errorf("refused write %q by client %d, request %d, has an outcome", r.Key, r.Client, r.ID)
			}
			if err := c.Submit(r); !errors.Is(err, errFull) {
				t.Fatalf("fresh write %q by client %d, request %d, under a full disk: %v, want the admission's error", r.Key, r.Client, r.ID, err)
			}
		}

		// The inherited write's retry, under a full disk: accepted, and
		// answered with the kept outcome once the key's hold ends.
		retry := submit(t, c, write(1, "k", "new", 7, 1))
		refused(write(1, "k", "newer", 7, 2))
		refused(write(1, "other", "x", 7, 2))
		time.Sleep(3*time.Second + eps)
		if o := retry.must(t); !o.Duplicate || o.Version != inherited {
			t.Fatalf("retry of the inherited write under a full disk: %+v; want the kept outcome, version %d", o, inherited)
		}
		// Another retry, now that the key is not held: at once.
		if o := submit(t, c, write(2, "k", "new", 7, 1)).must(t); !o.Duplicate || o.Version != inherited {
			t.Fatalf("second retry of the inherited write: %+v; want the kept outcome, version %d", o, inherited)
		}

		// Session 1 holds a lease on m; client 8's write of m, sent on
		// session 2, waits for it, and the disk fills meanwhile. The
		// client, whose session 2 is lost, retries on session 3.
		g.set(nil)
		if _, _, err := c.Read(1, []byte("m")); err != nil {
			t.Fatal(err)
		}
		first := submit(t, c, write(2, "m", "v", 8, 1))
		g.set(errFull)
		again := submit(t, c, write(3, "m", "v", 8, 1))
		refused(write(3, "m", "w", 8, 2))
		// Room comes back, and the first copy fills the disk as it
		// commits: its retry, asked about at commit after it, gets its
		// outcome.
		g.mu.Lock()
		g.shut, g.fill = nil, true
		g.mu.Unlock()
		time.Sleep(term + eps) // session 1 never relinquishes: its lease runs out
		o1 := first.must(t)
		if o := again.must(t); !o.Duplicate || o.Version != o1.Version {
			t.Fatalf("retry of a write that committed as the disk filled: %+v; want the first copy's outcome, version %d", o, o1.Version)
		}
		if rec, _ := st.Get([]byte("m")); string(rec.Value) != "v" || rec.Version != o1.Version {
			t.Fatalf("m = %q version %d, want %q version %d", rec.Value, rec.Version, "v", o1.Version)
		}
		refused(write(3, "m", "w", 8, 2))

		synctest.Wait()
		c.copiesMu.Lock()
		defer c.copiesMu.Unlock()
		if len(c.copies) != 0 {
			t.Errorf("writes counted on their way after all ended: %v", c.copies)
		}
	})
}
