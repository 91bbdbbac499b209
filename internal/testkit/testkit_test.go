package testkit_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// TestServer: clients of the library and raw clients reach the in-memory
// server over verified TLS, time is the bubble's, and a restart on the same
// store keeps what was written and holds writes for the old leases. The
// bubble also checks that the server, its clients and the network leave no
// goroutine behind.
func TestServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const term = 10 * time.Second
		srv := testkit.NewServer(t, server.Config{LeaseTerm: term})
		ctx := context.Background()
		a := srv.Dial(client.Config{})
		v, err := a.Put(ctx, "k", []byte("v1"))
		if err != nil {
			t.Fatal(err)
		}
		raw := srv.Raw(protoclient.Options{})
		if raw.Hello().DefaultTerm != term {
			t.Errorf("hello reports term %v, want %v", raw.Hello().DefaultTerm, term)
		}
		m, err := raw.Call(ctx, &protocol.Get{Key: []byte("k")})
		if g, ok := m.(*protocol.GetReply); err != nil || !ok || string(g.Value) != "v1" || g.Version != v || g.Term != term {
			t.Fatalf("raw read: %+v, %v", m, err)
		}
		if err := raw.Close(); err != nil {
			t.Fatal(err)
		}

		start := time.Now()
		srv.Restart(nil)
		b := srv.Dial(client.Config{})
		it, err := b.Get(ctx, "k")
		if err != nil || string(it.Value) != "v1" || it.Version != v {
			t.Fatalf("read after the restart: %+v, %v", it, err)
		}
		// The raw client's lease was granted before the restart; a write
		// waits until it can have run out.
		if _, err := b.Put(ctx, "k", []byte("v2")); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited < term {
			t.Errorf("the first write after the restart committed after %v, before the old leases' term %v", waited, term)
		}
	})
}
