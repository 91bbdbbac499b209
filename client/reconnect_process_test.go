//go:build linux

package client_test

// A client that loses its connection and comes back on a new one, to a
// real leased process, keeps its leases (DESIGN §6): its new session
// renews its write lease, and the recall and the invalidation that a
// conflicting write sends reach it there, so that the write does not
// wait out the lease.

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/netfault"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/wait"
)

// TestE2EReconnectKeepsLeases: the holder's packets are cut both ways
// until it gives its connection up (its idle timeout, 1 s); the server,
// whose idle timeout is 30 s, still holds the old session when the
// holder comes back on a new one, which takes the old one's leases over.
func TestE2EReconnectKeepsLeases(t *testing.T) {
	const (
		term = 5 * time.Second
		eps  = 100 * time.Millisecond
	)
	srv := clitest.StartServer(t, linBinaries(t), t.TempDir(), t.TempDir(), "--lease-term", term.String(), "--epsilon", eps.String())
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pc := netfault.Wrap(udp, 1)
	defer pc.Close()
	ev := newEvents()
	cfg := srv.ClientConfig()
	cfg.Name, cfg.PacketConn, cfg.OnEvent, cfg.MaxReconnectDelay = "holder", pc, ev.on, 100*time.Millisecond
	holder := dialAddr(t, srv.Addr, srv.CA, cfg)
	wcfg := srv.ClientConfig()
	wcfg.Name = "writer"
	writer := dialAddr(t, srv.Addr, srv.CA, wcfg)
	ctx, cancel := context.WithTimeout(context.Background(), 4*testTimeout)
	defer cancel()

	mustPut(t, writer, "r", "v0")
	if it := mustGet(t, holder, "r"); !it.Found {
		t.Fatal("r not found")
	}
	if it := mustGet(t, holder, "r"); !it.Cached {
		t.Fatal("r not cached")
	}
	acquired := time.Now()
	renewed, err := holder.AcquireWriteLease(ctx, "w1")
	if err != nil {
		t.Fatal(err)
	}
	recalled, err := holder.AcquireWriteLease(ctx, "w2")
	if err != nil {
		t.Fatal(err)
	}
	first, _ := holder.Connection()

	// The cut, and two writes while it lasts: one of the key the holder
	// caches, one of a key it holds the write lease on. Their
	// invalidation and recall go to the session the server still holds,
	// and are lost.
	pc.Partition(true, true)
	type write struct {
		key  string
		done time.Time
		err  error
	}
	writes := make(chan write, 2)
	for _, key := range []string{"r", "w2"} {
		go func() {
			wctx, wcancel := context.WithTimeout(ctx, 2*testTimeout)
			defer wcancel()
			_, err := writer.Put(wctx, key, []byte("writer's"))
			writes <- write{key, time.Now(), err}
		}()
	}
	ev.wait(t, client.EventDisconnected, testTimeout, nil)
	pc.Partition(false, false)
	ev.wait(t, client.EventReconnected, testTimeout, nil)
	back := time.Now()
	if s, _ := holder.Connection(); s.ID == first.ID {
		t.Fatalf("still session %d after the reconnection", s.ID)
	}
	t.Logf("the holder reconnected %v after its grants (term %v)", back.Sub(acquired), term)

	// The new session takes the leases over, and hears the invalidation
	// and the recall again: the holder answers, and the writes go at once,
	// not when the leases run out.
	for range 2 {
		w := <-writes
		t.Logf("the write of %s committed %v after the holder reconnected", w.key, w.done.Sub(back))
		if w.err != nil || w.done.Sub(back) > term/2 {
			t.Errorf("the write of %s committed %v after the holder reconnected (%v): its invalidation or recall did not reach the new session",
				w.key, w.done.Sub(back), w.err)
		}
	}
	if it := mustGet(t, holder, "r"); string(it.Value) != "writer's" {
		t.Errorf("the holder reads %s after the write", fmtItem(it))
	}
	// The recall can reach the new session, and the lease be reported
	// lost, before EventReconnected is: look among every event seen.
	wait.For(t, testTimeout, "the write lease on w2 reported lost", func() bool {
		return slices.ContainsFunc(ev.snapshot(), func(e client.Event) bool {
			return e.Kind == client.EventWriteLeaseLost && hasKey(e, "w2")
		})
	})
	if _, err := recalled.Put(ctx, []byte("holder's")); !errors.Is(err, client.ErrFenced) {
		t.Errorf("a write under the recalled lease: %v, want ErrFenced", err)
	}

	// The new session renews the other write lease: it is still valid
	// past the deadline of its grant, and was never reported lost. (A
	// real lease on a real server: the test waits, once, until past that
	// deadline.)
	select {
	case <-renewed.Done():
		t.Fatalf("write lease lost %v after its grant, %v after the reconnection", time.Since(acquired), time.Since(back))
	case <-time.After(time.Until(acquired.Add(term + eps + 500*time.Millisecond))):
	}
	if !renewed.Valid() {
		t.Fatalf("write lease not valid %v after its grant: not renewed on the new session", time.Since(acquired))
	}
	if _, err := renewed.Put(ctx, []byte("holder's")); err != nil {
		t.Fatalf("write under the renewed lease: %v", err)
	}
}
