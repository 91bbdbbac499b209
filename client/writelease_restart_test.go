package client_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/server"
)

// DESIGN §7: a write lease survives a restart of the server with its token
// and term. The library reports it lost when its session goes (it cannot
// renew it from another session), but its fenced writes, sent from the new
// session, still commit while the lease lasts on the server; once it has
// run out they are fenced, and another client's write waits for it.
func TestWriteLeaseFencedWritesAfterRestart(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		ev := newEvents()
		h := srv.Dial(client.Config{OnEvent: ev.on})
		ctx, cancel := context.WithTimeout(context.Background(), testkit.StepTimeout)
		defer cancel()
		wl, err := h.AcquireWriteLease(ctx, "owned")
		if err != nil {
			t.Fatal(err)
		}
		granted := time.Now()
		if _, err := wl.Put(ctx, []byte("v1")); err != nil {
			t.Fatal(err)
		}
		srv.Restart(nil)
		select {
		case <-wl.Done():
		case <-time.After(testkit.StepTimeout):
			t.Fatal("the write lease is not reported lost after its session went")
		}
		ver, err := wl.Put(ctx, []byte("v2"))
		if err != nil {
			t.Fatalf("the holder's fenced write after the restart: %v", err)
		}
		if it, err := h.Get(ctx, "owned"); err != nil || string(it.Value) != "v2" || it.Version != ver {
			t.Fatalf("read after the fenced write: %+v, %v; want v2 at version %d", it, err, ver)
		}
		// Another client's write waits for the lease, which nobody
		// renews, until it could have run out.
		o := srv.Dial(client.Config{})
		octx, ocancel := context.WithTimeout(context.Background(), 2*timeTerm)
		defer ocancel()
		if _, err := o.Put(octx, "owned", []byte("other")); err != nil {
			t.Fatal(err)
		}
		if end := granted.Add(timeTerm + srv.Config.Epsilon); time.Now().Before(end) {
			t.Errorf("another client's write committed %v before the write lease could have run out", time.Until(end))
		}
		if _, err := wl.Put(octx, []byte("late")); !errors.Is(err, client.ErrFenced) {
			t.Errorf("the holder's write after another client's: %v, want ErrFenced", err)
		}
	})
}

// A write under a write lease begun while the server is down waits for the
// next session only while the lease could still live on the server: it
// fails, unsent, when the lease's deadline plus ε has passed on the
// client's clock, not after half the retry window (2.5 minutes).
func TestWriteLeaseWriteWhileDownBoundedByLease(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		h := srv.Dial(client.Config{})
		sess, ok := h.Session()
		if !ok {
			t.Fatal("no session after Dial")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		granted := time.Now()
		wl, err := h.AcquireWriteLease(ctx, "owned")
		if err != nil {
			t.Fatal(err)
		}
		srv.Close() // not restarted
		select {
		case <-wl.Done():
		case <-time.After(testkit.StepTimeout):
			t.Fatal("the write lease is not reported lost after its session went")
		}
		_, err = wl.Put(ctx, []byte("v"))
		took := time.Since(granted)
		if !errors.Is(err, client.ErrUnavailable) || errors.Is(err, client.ErrCanceled) {
			t.Fatalf("write under the lease with the server down: %v, want ErrUnavailable (not ErrCanceled)", err)
		}
		if !strings.Contains(err.Error(), "nothing changed") {
			t.Errorf("the error does not say that the unsent write changed nothing: %v", err)
		}
		if want := wl.Term() + sess.Epsilon; took != want {
			t.Errorf("the write failed %v after the grant, want the lease's term plus ε, %v (retry bound %v)", took, want, server.DefaultRetryWindow/2)
		}
	})
}
