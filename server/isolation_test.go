package server

import (
	"context"
	"testing"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/protocol"
)

// TestSessionsCannotTouchEachOthersLeases: a session that releases,
// acknowledges, renews or releases the write lease of keys another
// session holds changes nothing for that session: a write still has to
// invalidate the holder, the holder's renewal still works, and its write
// lease still fences writes and is its own to release.
func TestSessionsCannotTouchEachOthersLeases(t *testing.T) {
	fc := clock.NewFake()
	const term = 10 * time.Second
	srv := startServer(t, t.TempDir(), fc, term)
	holder := dialRaw(t, srv)
	other := dialRaw(t, srv)
	writer := dialRaw(t, srv)
	writeOp(t, writer, protocol.OpPut, "k", "v1", 0)
	send(t, writer, &protocol.Ack{Keys: [][]byte{[]byte("k")}}) // the writer's own lease on what it wrote
	if r := get(t, holder, "k"); r.Term != term {
		t.Fatalf("holder's read: %+v", r)
	}
	acq, ok := call(t, holder, &protocol.Acquire{Key: []byte("w")}).(*protocol.AcquireReply)
	if !ok {
		t.Fatal("holder's acquisition failed")
	}

	// The other session tries everything on the holder's leases.
	if _, ok := call(t, other, &protocol.Release{Keys: [][]byte{[]byte("k")}}).(*protocol.OK); !ok {
		t.Fatal("release of keys the session does not hold is not OK")
	}
	send(t, other, &protocol.Ack{Keys: [][]byte{[]byte("k"), []byte("w")}})
	if r, ok := call(t, other, &protocol.Renew{Keys: [][]byte{[]byte("k")}}).(*protocol.RenewReply); !ok || len(r.Terms) != 1 || r.Terms[0] != 0 {
		t.Fatalf("renewal of a key the session does not hold: %#v, want term 0", r)
	}
	wantCode(t, "release of another session's write lease", call(t, other, &protocol.ReleaseWrite{Key: []byte("w"), Token: acq.Token}), protocol.CodeNotFound)
	wantCode(t, "write under another session's token", writeOp(t, other, protocol.OpPut, "w", "x", acq.Token), protocol.CodeFenced)

	// The holder's leases are intact: a write to k must invalidate it and
	// wait for its acknowledgement; its renewal works.
	if r, ok := call(t, holder, &protocol.Renew{Keys: [][]byte{[]byte("k")}}).(*protocol.RenewReply); !ok || r.Terms[0] != term {
		t.Fatalf("holder's renewal after the other session's attempts: %#v", r)
	}
	send(t, writer, &protocol.Write{ID: 500, Op: protocol.OpPut, Key: []byte("k"), Value: []byte("v2")})
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	m, err := holder.RecvNotice(ctx)
	if inv, ok := m.(*protocol.Invalidate); err != nil || !ok || string(inv.Keys[0]) != "k" {
		t.Fatalf("holder's notice: %#v, %v; want an invalidation of k", m, err)
	}
	if n := srv.Stats().WritesWaiting; n != 1 {
		t.Fatalf("%d writes waiting, want the write waiting for the holder", n)
	}
	send(t, holder, &protocol.Ack{Keys: [][]byte{[]byte("k")}})
	if r, ok := recv(t, writer).(*protocol.WriteReply); !ok || r.ID != 500 || r.Holders != 1 {
		t.Fatalf("write after the holder acknowledged: %#v", r)
	}
	// The write lease is still the holder's.
	if r, ok := writeOp(t, holder, protocol.OpPut, "w", "mine", acq.Token).(*protocol.WriteReply); !ok || r.Version == 0 {
		t.Fatalf("holder's fenced write: %#v", r)
	}
	if _, ok := call(t, holder, &protocol.ReleaseWrite{Key: []byte("w"), Token: acq.Token}).(*protocol.OK); !ok {
		t.Fatal("holder's release of its write lease")
	}
}
