package client_test

// End-to-end tests of the coordination types (DESIGN §5.1): Mutex,
// Election and Queue, on a real server.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/server"
)

func newSession(t *testing.T, c *client.Client, ttl time.Duration) *client.Session {
	t.Helper()
	s, err := client.NewSession(stepCtx(t), c, ttl)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestE2EMutex(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Second})
	a := dial(t, srv, client.Config{Name: "a"})
	b := dial(t, srv, client.Config{Name: "b"})
	ctx := stepCtx(t)
	ma := client.NewMutex(newSession(t, a, 5*time.Second), "m")
	mb := client.NewMutex(newSession(t, b, 5*time.Second), "m")
	if err := ma.Context().Err(); err == nil {
		t.Fatal("the context of a mutex not held is live")
	}
	if err := ma.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ma.Lock(ctx); !errors.Is(err, client.ErrLockHeld) {
		t.Fatalf("Lock of a held mutex = %v, want ErrLockHeld", err)
	}
	lctx := ma.Context()
	if lctx.Err() != nil {
		t.Fatalf("the held lock's context: %v", lctx.Err())
	}
	if d, ok := lctx.Deadline(); !ok || time.Until(d) <= 0 || time.Until(d) > 5*time.Second {
		t.Fatalf("the lock's safe deadline is %v away (%v)", time.Until(d), ok)
	}
	if err := mb.TryLock(ctx); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("TryLock of a held lock = %v, want ErrLocked", err)
	}
	locked := make(chan error, 1)
	go func() { locked <- mb.Lock(ctx) }()
	select {
	case err := <-locked:
		t.Fatalf("b locked a held mutex: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	first := ma.Token()
	if err := ma.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lctx.Done():
	default:
		t.Fatal("the released lock's context is live")
	}
	if err := <-locked; err != nil {
		t.Fatalf("b's Lock: %v", err)
	}
	if mb.Token() <= first {
		t.Fatalf("tokens %d then %d", first, mb.Token())
	}
	if ok, _ := a.CheckToken(ctx, "m", mb.Token()); !ok {
		t.Fatal("CheckToken of b's token = false")
	}
	if err := mb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestE2EElection(t *testing.T) {
	leaktest.Check(t)
	// Observers hear of each change from the server's invalidation, not at
	// the end of their lease: with a term of 10 s, each change must be seen
	// within a bound far below it.
	const term, seenWithin = 10 * time.Second, 3 * time.Second
	srv := startServer(t, server.Config{LeaseTerm: term})
	a := dial(t, srv, client.Config{Name: "a"})
	b := dial(t, srv, client.Config{Name: "b"})
	o := dial(t, srv, client.Config{Name: "observer"})
	ctx := stepCtx(t)
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	seen := client.Observe(octx, o, "svc/leader")
	next := func(want string) client.Leader {
		t.Helper()
		select {
		case l := <-seen:
			if string(l.Value) != want {
				t.Fatalf("observed leader %q (token %d), want %q", l.Value, l.Token, want)
			}
			return l
		case <-time.After(seenWithin):
			t.Fatalf("no leader observed within %v; want %q", seenWithin, want)
		}
		return client.Leader{}
	}
	next("") // nobody leads yet
	ea := client.NewElection(newSession(t, a, 5*time.Second), "svc/leader")
	eb := client.NewElection(newSession(t, b, 5*time.Second), "svc/leader")
	if err := ea.Campaign(ctx, []byte("a")); err != nil {
		t.Fatal(err)
	}
	la := next("a")
	if la.Token != ea.Token() {
		t.Fatalf("observed token %d, leader's %d", la.Token, ea.Token())
	}
	won := make(chan error, 1)
	go func() { won <- eb.Campaign(ctx, []byte("b")) }()
	if err := eb.Proclaim(ctx, []byte("b?")); !errors.Is(err, client.ErrNotLeader) {
		t.Fatalf("Proclaim by a campaigner that does not lead = %v, want ErrNotLeader", err)
	}
	if err := ea.Proclaim(ctx, []byte("a2")); err != nil {
		t.Fatal(err)
	}
	next("a2")
	if l, err := eb.Leader(ctx); err != nil || string(l.Value) != "a2" {
		t.Fatalf("Leader = %q, %v", l.Value, err)
	}
	if err := ea.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-won; err != nil {
		t.Fatalf("b's campaign: %v", err)
	}
	// Resigning deletes the record, and b then proclaims: an observer
	// sees no leader in between, or, reading late, b at once.
	select {
	case l := <-seen:
		if v := string(l.Value); v != "b" && (v != "" || l.Token != 0) {
			t.Fatalf("observed %q (token %d) after a resigned; want none, or b", v, l.Token)
		} else if v == "" {
			next("b")
		}
	case <-time.After(seenWithin):
		t.Fatal("no change observed after a resigned")
	}
	if err := ea.Proclaim(ctx, []byte("a3")); !errors.Is(err, client.ErrNotLeader) {
		t.Fatalf("Proclaim after Resign = %v, want ErrNotLeader", err)
	}
}

func TestE2EQueue(t *testing.T) {
	leaktest.Check(t)
	// A waiting claim hears of an enqueue at once, not at the end of a
	// term, even while another task is claimed (which keeps the prefix
	// from being leased): with a term of 10 s, it must get its task within
	// a bound far below it.
	const term, within = 10 * time.Second, 3 * time.Second
	srv := startServer(t, server.Config{LeaseTerm: term})
	p := dial(t, srv, client.Config{Name: "producer"})
	w1 := dial(t, srv, client.Config{Name: "w1"})
	w2 := dial(t, srv, client.Config{Name: "w2"})
	ctx := stepCtx(t)
	q := client.NewQueue(p, "jobs")
	q1, q2 := client.NewQueue(w1, "jobs"), client.NewQueue(w2, "jobs")
	q1.MaxAttempts = 2
	s1, s2 := newSession(t, w1, 5*time.Second), newSession(t, w2, 5*time.Second)
	for i := range 3 {
		if _, err := q.Enqueue(ctx, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	// Claims come oldest first, and never twice.
	t0, err := q1.Claim(ctx, s1)
	if err != nil || string(t0.Value) != "0" || t0.Attempt != 1 || t0.Token() == 0 {
		t.Fatalf("first claim = %+v, %v", t0, err)
	}
	t1, err := q2.Claim(ctx, s2)
	if err != nil || string(t1.Value) != "1" {
		t.Fatalf("second claim = %+v, %v", t1, err)
	}
	ls, err := q.List(ctx)
	if err != nil || len(ls) != 3 {
		t.Fatalf("List = %+v, %v", ls, err)
	}
	claimed := 0
	for _, s := range ls {
		if s.Claimed {
			claimed++
		}
	}
	if claimed != 2 {
		t.Fatalf("List says %d claimed, want 2: %+v", claimed, ls)
	}
	if err := t1.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	// A failed task goes back to the end; past MaxAttempts, to the dead.
	if err := t0.Fail(ctx, 0); err != nil {
		t.Fatal(err)
	}
	t2, err := q1.Claim(ctx, s1)
	if err != nil || string(t2.Value) != "2" {
		t.Fatalf("claim after a failure = %+v, %v; want task 2 first", t2, err)
	}
	t0b, err := q1.Claim(ctx, s1)
	if err != nil || string(t0b.Value) != "0" || t0b.Attempt != 2 {
		t.Fatalf("claim of the failed task = %+v, %v; want attempt 2", t0b, err)
	}
	if err := t0b.Fail(ctx, 0); err != nil {
		t.Fatal(err)
	}
	dead, err := p.List(ctx, q.DeadPrefix())
	if err != nil || len(dead.KVs) != 1 {
		t.Fatalf("dead letters = %+v, %v; want the task failed twice", dead.KVs, err)
	}
	// A claim with nothing free waits for an enqueue, and wakes on it.
	got := make(chan *client.Task, 1)
	go func() {
		t3, err := q2.Claim(ctx, s2)
		if err != nil {
			t.Errorf("waiting claim: %v", err)
		}
		got <- t3
	}()
	select {
	case t3 := <-got:
		t.Fatalf("claimed %+v with no free task", t3)
	case <-time.After(300 * time.Millisecond):
	}
	start := time.Now()
	if _, err := q.Enqueue(ctx, []byte("3")); err != nil {
		t.Fatal(err)
	}
	var t3 *client.Task
	select {
	case t3 = <-got:
	case <-time.After(within):
		t.Fatalf("the waiting claim got no task within %v of the enqueue", within)
	}
	if t3 == nil || string(t3.Value) != "3" {
		t.Fatalf("the waiting claim got %+v", t3)
	}
	t.Logf("a waiting claim got its task %v after the enqueue", time.Since(start))
	// The claim's token fences: completed, its old holder's write fails.
	if err := t2.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := t2.Complete(ctx); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("a second Complete = %v, want ErrFenced", err)
	}
	if err := t3.Complete(ctx); err != nil {
		t.Fatal(err)
	}
}

// A claim made by one client is finished by another that may use its TTL
// lease (a shell worker's leasectl processes): Resume, then Complete; the
// first client's writes under the claim are fenced from then on.
func TestE2EQueueResume(t *testing.T) {
	leaktest.Check(t)
	srv := startServer(t, server.Config{LeaseTerm: time.Second})
	a := dial(t, srv, client.Config{Name: "claimer"})
	b := dial(t, srv, client.Config{Name: "finisher"})
	ctx := stepCtx(t)
	qa, qb := client.NewQueue(a, "jobs"), client.NewQueue(b, "jobs")
	if _, err := qa.Enqueue(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	s := newSession(t, a, 5*time.Second)
	task, err := qa.Claim(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := qb.Resume(ctx, task.Key, task.Token()+1, s.Lease()); err != nil {
		t.Fatalf("Resume with a wrong token reads the task: %v", err)
	}
	wrong, _ := qb.Resume(ctx, task.Key, task.Token()+1, s.Lease())
	if err := wrong.Complete(ctx); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("Complete under a wrong token = %v, want ErrFenced", err)
	}
	other, err := client.NewSession(ctx, b, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if bad, err := qb.Resume(ctx, task.Key, task.Token(), other.Lease()); err != nil {
		t.Fatal(err)
	} else if err := bad.Complete(ctx); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("Complete under another TTL lease = %v, want ErrFenced", err)
	}
	res, err := qb.Resume(ctx, task.Key, task.Token(), s.Lease())
	if err != nil || string(res.Value) != "x" || res.Attempt != 1 {
		t.Fatalf("Resume = %+v, %v", res, err)
	}
	if err := res.Complete(ctx); err != nil {
		t.Fatalf("Complete of the resumed claim: %v", err)
	}
	if it := mustGet(t, a, task.Key); it.Found {
		t.Fatalf("the task is still there: %s", fmtItem(it))
	}
	if err := task.Complete(ctx); !errors.Is(err, client.ErrFenced) {
		t.Fatalf("the first claimer's Complete = %v, want ErrFenced", err)
	}
}

// A task claimed by a worker that dies is taken over by a waiting claimer
// once the worker's lease runs out, not a lease term later: the claimer
// hears of the claim's end from the invalidation of its lock record.
func TestE2EQueueTakeover(t *testing.T) {
	leaktest.Check(t)
	const ttl, term = 5 * time.Second, 10 * time.Second
	srv := startServer(t, server.Config{LeaseTerm: term})
	dead := dial(t, srv, client.Config{Name: "dead"})
	next := dial(t, srv, client.Config{Name: "next"})
	ctx := stepCtx(t)
	qd, qn := client.NewQueue(dead, "jobs"), client.NewQueue(next, "jobs")
	if _, err := qd.Enqueue(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	s, err := client.NewSession(ctx, dead, ttl)
	if err != nil {
		t.Fatal(err)
	}
	task, err := qd.Claim(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *client.Task, 1)
	wctx, cancel := context.WithTimeout(ctx, ttl+term)
	defer cancel()
	go func() {
		tk, err := qn.Claim(wctx, newSession(t, next, ttl))
		if err != nil {
			t.Errorf("the waiting claim: %v", err)
		}
		got <- tk
	}()
	time.Sleep(200 * time.Millisecond) // the claimer waits
	if _, err := dead.KeepAliveOnce(ctx, s.Lease()); err != nil {
		t.Fatal(err)
	}
	s.Orphan() // the worker dies: its lease has ttl left
	died := time.Now()
	tk := <-got
	took := time.Since(died)
	t.Logf("the task was taken over %v after the worker's last keep-alive (TTL %v, term %v)", took, ttl, term)
	if tk == nil || tk.Key != task.Key || tk.Token() <= task.Token() {
		t.Fatalf("the takeover got %+v", tk)
	}
	if took < ttl || took > ttl+2*time.Second {
		t.Fatalf("taken over %v after the last keep-alive; want between the TTL %v and 2 s past it, not a term (%v) later", took, ttl, term)
	}
	if err := tk.Complete(ctx); err != nil {
		t.Fatal(err)
	}
}
