package server

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/testkit/faultstore"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// errDiskFull is the injected storage fault: what a write to a full disk
// returns.
var errDiskFull = syscall.ENOSPC

// writeOp writes key with op under token and returns the reply, whatever
// it is.
func writeOp(t *testing.T, c *protoclient.Client, op protocol.WriteOp, key, value string, token uint64) protocol.Message {
	t.Helper()
	m := &protocol.Write{Op: op, Key: []byte(key), Token: token}
	if op != protocol.OpDelete {
		m.Value = []byte(value)
	}
	return call(t, c, m)
}

func wantStorageError(t *testing.T, what string, r protocol.Message) {
	t.Helper()
	e, ok := r.(*protocol.Error)
	if !ok || e.Code != protocol.CodeInternal || !strings.Contains(e.Message, "storage") || !strings.Contains(e.Message, errDiskFull.Error()) {
		t.Fatalf("%s under a storage fault: got %#v, want an internal error naming the storage fault", what, r)
	}
}

// TestStorageFault: while the store fails every commit (an injected full
// disk), writes and write-lease grants are reported to their writers as
// errors and never acknowledged, nothing of them is visible, and reads keep
// being served, without leases once the horizon cannot be moved. The store
// is reopened no sooner than its retry is due; when the fault clears,
// writes go on, and after a restart nothing of the failed writes is there.
func TestStorageFault(t *testing.T) {
	fc := clock.NewFake()
	const term = 2 * time.Second
	dir := t.TempDir()
	db, err := store.Open(filepath.Join(dir, "db"), quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	fs := faultstore.New(db)
	srv, err := New(Config{Dir: dir, Addr: "127.0.0.1:0", LeaseTerm: term, Epsilon: eps, Clock: fc, Logger: quietLogger(), Store: fs})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv)
	c := dialRaw(t, srv)
	other := dialRaw(t, srv)

	if r, ok := writeOp(t, c, protocol.OpPut, "k", "v1", 0).(*protocol.WriteReply); !ok || r.Version != 1 {
		t.Fatalf("put before the fault: %#v", r)
	}
	send(t, c, &protocol.Acquire{ID: 100, Key: []byte("w")})
	ar, ok := recv(t, c).(*protocol.AcquireReply)
	if !ok || ar.Token != 1 {
		t.Fatalf("acquire before the fault: %#v", ar)
	}
	send(t, c, &protocol.ReleaseWrite{ID: 101, Key: []byte("w"), Token: ar.Token})
	if _, ok := recv(t, c).(*protocol.OK); !ok {
		t.Fatal("release of the write lease failed")
	}
	// The release ends the write lease once its end is durable.
	wait.For(t, testTimeout, "the released write lease to end in the store", func() bool { return len(storedState(t, srv).WriteLeases) == 0 })
	horizon := persistedHorizon(t, srv)

	fs.Fail(errDiskFull)
	wantStorageError(t, "put", writeOp(t, c, protocol.OpPut, "k", "v2", 0))
	wantStorageError(t, "delete", writeOp(t, c, protocol.OpDelete, "k", "", 0))
	wantStorageError(t, "put of a new key", writeOp(t, other, protocol.OpPut, "new", "x", 0))
	send(t, c, &protocol.Acquire{ID: 102, Key: []byte("w")})
	wantStorageError(t, "acquire", recv(t, c))
	if st := srv.Stats(); st.WriteLeases != 0 || st.WritesWaiting != 0 || st.Revision != 1 {
		t.Fatalf("after failed commits: %d write leases, %d writes waiting, revision %d; want 0, 0, 1", st.WriteLeases, st.WritesWaiting, st.Revision)
	}

	// Reads go on, and see only what was acknowledged. Within the horizon
	// they are leased.
	if r := get(t, other, "k"); !r.Found || string(r.Value) != "v1" || r.Version != 1 || r.Term != term {
		t.Fatalf("read under the fault: %+v, want v1 at version 1 with a lease", r)
	}
	if r := get(t, other, "new"); r.Found {
		t.Fatalf("a failed put is visible: %+v", r)
	}
	// Past the horizon no lease can be promised: reads are served uncached.
	fc.Advance(horizon.Sub(fc.Now()))
	if r := get(t, other, "k"); !r.Found || string(r.Value) != "v1" || r.Term != 0 {
		t.Fatalf("read past the horizon under the fault: %+v, want v1 with no lease", r)
	}
	if got := persistedHorizon(t, srv); !got.Equal(horizon) {
		t.Fatalf("the horizon moved to %v under the fault", got)
	}
	if fs.Faults() == 0 {
		t.Fatal("the fault was never hit")
	}
	// Until the retry is due, reads do not queue behind a failing fsync:
	// they do not try to persist the horizon at all.
	tries := fs.Faults()
	for range 20 {
		if r := get(t, other, "k"); r.Term != 0 {
			t.Fatalf("read with a lease past the horizon: %+v", r)
		}
	}
	if n := fs.Faults() - tries; n != 0 {
		t.Fatalf("%d more attempts to persist the horizon before the retry was due", n)
	}

	// The fault clears: once the retry is due the store is reopened, and
	// writes go on; reads are leased again.
	fs.Heal()
	fc.Advance(srv.cfg.HorizonStep / 2)
	r, ok := writeOp(t, c, protocol.OpPut, "k", "v3", 0).(*protocol.WriteReply)
	if !ok || r.Version <= 1 {
		t.Fatalf("put after the fault: %#v", r)
	}
	if g := get(t, other, "k"); string(g.Value) != "v3" || g.Version != r.Version || g.Term != term {
		t.Fatalf("read after the fault: %+v, want v3 at %d with a lease", g, r.Version)
	}
	send(t, c, &protocol.Acquire{ID: 103, Key: []byte("w")})
	if ar2, ok := recv(t, c).(*protocol.AcquireReply); !ok || ar2.Token <= ar.Token {
		t.Fatalf("acquire after the fault: %#v, want a token above %d", ar2, ar.Token)
	}

	c.Close()
	other.Close()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	srv = startServer(t, dir, fc, term) // on badger alone, as after a restart
	c = dialRaw(t, srv)
	if g := get(t, c, "k"); string(g.Value) != "v3" || g.Version != r.Version {
		t.Fatalf("after a restart: %+v, want v3 at %d", g, r.Version)
	}
	if g := get(t, c, "new"); g.Found {
		t.Fatalf("a failed put appeared after a restart: %+v", g)
	}
}
