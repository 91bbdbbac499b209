package client_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/server"
)

// deafConn is a client's socket that drops every packet it receives while
// deaf is set, as a network that loses the server's answers does.
type deafConn struct {
	net.PacketConn
	deaf atomic.Bool
}

func (d *deafConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := d.PacketConn.ReadFrom(p)
		if err != nil || !d.deaf.Load() {
			return n, addr, err
		}
	}
}

// A write whose reply is lost, with its connection, after the server
// committed it is sent again on the next session and applied once: the
// retry gets the first commit's version back, marked Replayed, and no
// later revision is spent on it.
func TestLostReplyWriteAppliedOnce(t *testing.T) {
	bubble(t, nil, func(t *testing.T, srv *testkit.Server) {
		ev := newEvents()
		pc := &deafConn{PacketConn: srv.Endpoint()}
		a := srv.Dial(client.Config{PacketConn: pc, OnEvent: ev.on, MaxReconnectDelay: 100 * time.Millisecond})
		b := srv.Dial(client.Config{})
		v1 := mustPut(t, b, "k", "v1")

		pc.deaf.Store(true)
		var res client.WriteResult
		type result struct {
			v   uint64
			err error
		}
		done := make(chan result, 1)
		go func() {
			v, err := a.Put(stepCtx(t), "k", []byte("v2"), client.Result(&res))
			done <- result{v, err}
		}()
		// The server commits the write; its reply is lost, and the client
		// gives the connection up after its idle timeout.
		ev.wait(t, client.EventDisconnected, testTimeout, nil)
		committed := mustGet(t, b, "k").Version
		if committed <= v1 {
			t.Fatalf("the write was not committed before the connection was lost: k at %d", committed)
		}
		pc.deaf.Store(false)
		r := <-done
		if r.err != nil {
			t.Fatalf("Put across the lost connection: %v", r.err)
		}
		if r.v != committed || !res.Replayed || res.Term != 0 {
			t.Errorf("Put = %d, %+v; want the first commit's version %d, replayed, with no lease", r.v, res, committed)
		}
		st := srv.Stats()
		if st.Revision != committed {
			t.Errorf("revision %d after the retry, want %d: the write was applied twice", st.Revision, committed)
		}
		if it := mustGet(t, b, "k"); string(it.Value) != "v2" || it.Version != committed {
			t.Errorf("k = %s", fmtItem(it))
		}
	})
}

// While the client is disconnected, a write waits for it to reconnect,
// within its context, and then commits; one whose context ends first was
// never sent, and says so.
func TestWriteWaitsForReconnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := testkit.NewServer(t, server.Config{LeaseTerm: time.Second})
		ev := newEvents()
		a := srv.Dial(client.Config{OnEvent: ev.on, MaxReconnectDelay: 100 * time.Millisecond})
		mustPut(t, a, "k", "v1")
		srv.Close()
		ev.wait(t, client.EventDisconnected, testTimeout, nil)

		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := a.Put(ctx, "k", []byte("never"))
		cancel()
		if !errors.Is(err, client.ErrUnavailable) || !errors.Is(err, client.ErrCanceled) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("write while disconnected, context ending first: %v; want ErrUnavailable, ErrCanceled and the deadline", err)
		}

		done := make(chan error, 1)
		go func() {
			_, err := a.Put(stepCtx(t), "k", []byte("v2"))
			done <- err
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("write ended while the server was down: %v", err)
		default:
		}
		srv.Restart(nil)
		if err := <-done; err != nil {
			t.Fatalf("write after the server came back: %v", err)
		}
		if it := mustGet(t, a, "k"); string(it.Value) != "v2" {
			t.Errorf("k = %s, want v2", fmtItem(it))
		}
	})
}
