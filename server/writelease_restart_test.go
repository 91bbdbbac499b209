package server_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
	"github.com/leased/leased/store"
)

// Write leases across a restart (DESIGN §7), on the wire: the in-memory
// server of internal/testkit under testing/synctest, so the server, its
// raw protocol clients and the network share one fake clock, and the
// restart keeps the store. A write lease granted before the restart keeps
// its holder's token, term and client identity: the holder's fenced write,
// from a new session of the same client, commits at once; another
// client's write with the token is fenced; and another writer's write
// waits for the lease, until the holder releases it or, if the holder
// never comes back, until the lease could have run out.

const (
	wlTerm = 10 * time.Second
	wlEps  = 100 * time.Millisecond
	// holderID is the client identity of the write lease's holder.
	holderID = 0x5eed
)

// acquireBeforeRestart starts a server, acquires the write lease on key
// through a raw session, writes under it, and restarts the server on the
// same store without the holder saying goodbye. It returns the server, the
// token, when the lease was granted, and the stored state the restart
// found: its horizon holds every write back (the holder's read lease on
// what it wrote was lost with the restart), and its write leases.
func acquireBeforeRestart(t *testing.T, key string) (*testkit.Server, uint64, time.Time, store.State) {
	t.Helper()
	srv := testkit.NewServer(t, server.Config{LeaseTerm: wlTerm, Epsilon: wlEps})
	h := srv.Raw(protoclient.Options{Name: "holder", ClientID: holderID})
	granted := time.Now()
	r, ok := call(t, h, &protocol.Acquire{Key: []byte(key)}, testkit.StepTimeout).(*protocol.AcquireReply)
	if !ok || r.Token == 0 || r.Term != wlTerm {
		t.Fatalf("acquire: %#v", r)
	}
	if w, ok := call(t, h, &protocol.Write{Op: protocol.OpPut, Key: []byte(key), Value: []byte("v1"), Token: r.Token}, testkit.StepTimeout).(*protocol.WriteReply); !ok || w.Version == 0 {
		t.Fatalf("fenced write before the restart: %#v", w)
	}
	time.Sleep(time.Second)
	srv.Restart(nil)
	st, err := srv.Store.State()
	if err != nil || len(st.WriteLeases) != 1 || st.WriteLeases[0].Token != r.Token || st.WriteLeases[0].Client != server.ClientIdentity(holderID, "") {
		t.Fatalf("the stored write leases after the restart: %+v, %v; want the one of token %d, client %#x", st.WriteLeases, err, r.Token, server.ClientIdentity(holderID, ""))
	}
	return srv, r.Token, granted, st
}

// holderAgain opens a new session of the write lease's holder. A client's
// request IDs go on across its sessions, as the client library's do: the
// server applies each of a client's writes once per ID, and would answer
// a reused one with the first outcome.
func holderAgain(srv *testkit.Server, name string) *protoclient.Client {
	h := srv.Raw(protoclient.Options{Name: name, ClientID: holderID})
	for range 100 {
		h.NextID()
	}
	return h
}

// pending sends a write of key with no token from a new session, and
// returns a channel of its reply and when it came.
func pending(t *testing.T, srv *testkit.Server, key string) <-chan reply {
	t.Helper()
	o := srv.Raw(protoclient.Options{Name: "other writer"})
	out := make(chan reply, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*wlTerm)
		defer cancel()
		m, err := o.Call(ctx, &protocol.Write{Op: protocol.OpPut, Key: []byte(key), Value: []byte("other")})
		out <- reply{m, err, time.Now()}
	}()
	return out
}

type reply struct {
	m   protocol.Message
	err error
	at  time.Time
}

func TestWriteLeaseSurvivesRestartHolderComesBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, token, _, st := acquireBeforeRestart(t, "k")
		// Another client that guesses the token writes nothing under it,
		// and cannot release it.
		thief := srv.Raw(protoclient.Options{Name: "another client", ClientID: holderID + 1})
		if e, ok := call(t, thief, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("stolen"), Token: token}, testkit.StepTimeout).(*protocol.Error); !ok || e.Code != protocol.CodeFenced {
			t.Fatalf("another client's write with the live token after the restart: %#v, want CodeFenced", e)
		}
		// Nor can one that read the holder's identity from the store (a
		// snapshot carries it) and presents it as its own.
		copycat := srv.Raw(protoclient.Options{Name: "a client with the stored identity", ClientID: st.WriteLeases[0].Client})
		if e, ok := call(t, copycat, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("stolen"), Token: token}, testkit.StepTimeout).(*protocol.Error); !ok || e.Code != protocol.CodeFenced {
			t.Fatalf("a write with the live token from a client presenting the stored identity: %#v, want CodeFenced", e)
		}
		if e, ok := call(t, thief, &protocol.ReleaseWrite{Key: []byte("k"), Token: token}, testkit.StepTimeout).(*protocol.Error); !ok || e.Code != protocol.CodeNotFound {
			t.Fatalf("another client's release with the live token after the restart: %#v, want CodeNotFound", e)
		}
		h := holderAgain(srv, "holder again")
		start := time.Now()
		w, ok := call(t, h, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v2"), Token: token}, testkit.StepTimeout).(*protocol.WriteReply)
		if !ok || w.Version == 0 {
			t.Fatalf("the holder's fenced write after the restart: %#v, want committed", w)
		}
		if took := time.Since(start); took != 0 {
			t.Errorf("the holder's fenced write after the restart took %v, want at once", took)
		}
		if e, ok := call(t, h, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v"), Token: token + 1}, testkit.StepTimeout).(*protocol.Error); !ok || e.Code != protocol.CodeFenced {
			t.Errorf("a write with another token after the restart: %#v, want CodeFenced", e)
		}
		out := pending(t, srv, "k")
		ctx, cancel := context.WithTimeout(context.Background(), testkit.StepTimeout)
		defer cancel()
		// The holder's fenced write gave it a read lease on what it wrote:
		// the conflicting write invalidates that, and recalls the write
		// lease.
		for recalled := false; !recalled; {
			n, err := h.RecvNotice(ctx)
			switch n := n.(type) {
			case *protocol.Invalidate:
				if err := h.Send(&protocol.Ack{Keys: n.Keys}); err != nil {
					t.Fatal(err)
				}
			case *protocol.Recall:
				if string(n.Key) != "k" || n.Token != token {
					t.Fatalf("recall of %q, token %d; want k, %d", n.Key, n.Token, token)
				}
				recalled = true
			default:
				t.Fatalf("the holder's notice after a conflicting write: %#v, %v; want a recall of its token", n, err)
			}
		}
		time.Sleep(time.Second)
		released := time.Now()
		if _, ok := call(t, h, &protocol.ReleaseWrite{Key: []byte("k"), Token: token}, testkit.StepTimeout).(*protocol.OK); !ok {
			t.Fatal("the release of the taken-over write lease was not OK")
		}
		r := <-out
		if w, ok := r.m.(*protocol.WriteReply); r.err != nil || !ok || w.Version == 0 {
			t.Fatalf("the conflicting write: %#v, %v", r.m, r.err)
		}
		if want := maxTime(released, st.Horizon); !r.at.Equal(want) {
			t.Errorf("the conflicting write committed at %v, want at the later of the release (%v) and the horizon the restart found (%v)", r.at, released, st.Horizon)
		}
	})
}

func TestWriteLeaseSurvivesRestartHolderGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, token, granted, st := acquireBeforeRestart(t, "k")
		out := pending(t, srv, "k")
		r := <-out
		if w, ok := r.m.(*protocol.WriteReply); r.err != nil || !ok || w.Version == 0 {
			t.Fatalf("the conflicting write: %#v, %v", r.m, r.err)
		}
		if end := granted.Add(wlTerm + wlEps); r.at.Before(end) {
			t.Errorf("the conflicting write committed %v before the write lease could have run out", end.Sub(r.at))
		}
		if !r.at.Equal(st.Horizon) {
			t.Errorf("the conflicting write committed at %v, want at the horizon %v the restart found", r.at, st.Horizon)
		}
		h := holderAgain(srv, "holder, too late")
		if e, ok := call(t, h, &protocol.Write{Op: protocol.OpPut, Key: []byte("k"), Value: []byte("late"), Token: token}, testkit.StepTimeout).(*protocol.Error); !ok || e.Code != protocol.CodeFenced {
			t.Errorf("the holder's fenced write after its lease ended: %#v, want CodeFenced", e)
		}
	})
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
