package server

import (
	"context"
	"testing"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/version"
	"github.com/leased/leased/protocol"
)

// TestHelloReplyCarriesServerVersion checks that the hello reply of a
// client session and of an admin session names the server's build.
func TestHelloReplyCarriesServerVersion(t *testing.T) {
	fc := clock.NewFake()
	srv := startServer(t, t.TempDir(), fc, time.Second)
	want := version.String()
	if want == "" {
		t.Fatal("version.String is empty")
	}

	_, hello := dialHello(t, srv, nil)
	if hello.ServerVersion != want {
		t.Errorf("client session: ServerVersion = %q, want %q", hello.ServerVersion, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := protoclient.Dial(ctx, srv.Addr().String(), protoclient.Options{CAFile: CAPath(srv.cfg.Dir), NoHello: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Send(&protocol.Hello{Version: protocol.Version, Client: "version test", Admin: true}); err != nil {
		t.Fatal(err)
	}
	m, err := c.Recv(ctx)
	if err != nil {
		t.Fatalf("admin hello: %v", err)
	}
	if h, ok := m.(*protocol.HelloReply); !ok || h.ServerVersion != want {
		t.Errorf("admin session: hello answered with %#v, want ServerVersion %q", m, want)
	}
}
