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
// and term. The library keeps it when its session goes (DESIGN §6), and
// its fenced writes, sent from the new session, still commit while the
// lease lasts on the server; the first takes the lease over for the new
// session, which renews it from then on and hears its recall: another
// client's write recalls it, the holder releases it, and the holder's
// later writes are fenced.
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
		ev.wait(t, client.EventReconnected, testkit.StepTimeout, nil)
		select {
		case <-wl.Done():
			t.Fatal("the write lease is reported lost when its session went")
		default:
		}
		ver, err := wl.Put(ctx, []byte("v2"))
		if err != nil {
			t.Fatalf("the holder's fenced write after the restart: %v", err)
		}
		if it, err := h.Get(ctx, "owned"); err != nil || string(it.Value) != "v2" || it.Version != ver {
			t.Fatalf("read after the fenced write: %+v, %v; want v2 at version %d", it, err, ver)
		}
		// Past its first term, the new session has renewed it.
		time.Sleep(time.Until(granted.Add(timeTerm + srv.Config.Epsilon)))
		if !wl.Valid() {
			t.Fatal("the write lease is not renewed on the new session after its fenced write")
		}
		// Another client's write recalls it from the new session.
		o := srv.Dial(client.Config{})
		octx, ocancel := context.WithTimeout(context.Background(), 2*timeTerm)
		defer ocancel()
		start := time.Now()
		if _, err := o.Put(octx, "owned", []byte("other")); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took >= timeTerm {
			t.Errorf("another client's write took %v: the holder did not answer the recall", took)
		}
		select {
		case <-wl.Done():
		default:
			t.Error("the write lease is not lost after its recall")
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
		sess, ok := h.Connection()
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
		if !wl.Valid() {
			t.Fatal("the write lease is reported lost when its session went, before its deadline")
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
		// Not renewed by its deadline, the lease is lost within an eighth
		// of a term (the maintenance loop's pace).
		select {
		case <-wl.Done():
		case <-time.After(timeTerm / 8):
			t.Fatal("the write lease is not reported lost after its deadline")
		}
	})
}
