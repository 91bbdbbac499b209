package server

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/diskguard"
	"github.com/leased/leased/internal/testkit/leaktest"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/store"
)

// fixedDisk is a data folder's measurement that a test sets: the injected
// fault of a full disk.
type fixedDisk struct {
	mu  sync.Mutex
	u   diskguard.Usage
	err error // returned instead of u, if set
}

func (d *fixedDisk) set(u diskguard.Usage) { d.mu.Lock(); d.u = u; d.mu.Unlock() }
func (d *fixedDisk) Measure() (diskguard.Usage, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.u, d.err
}

func wantExhausted(t *testing.T, what string, r protocol.Message, words ...string) {
	t.Helper()
	e, ok := r.(*protocol.Error)
	if !ok || e.Code != protocol.CodeResourceExhausted {
		t.Fatalf("%s on a full disk: %#v, want a resource-exhausted error", what, r)
	}
	for _, w := range words {
		if !strings.Contains(e.Message, w) {
			t.Fatalf("%s on a full disk: message %q does not name %q", what, e.Message, w)
		}
	}
}

// TestNoSpaceAlarm: with the data folder's disk below the reserve, or the
// folder past its quota (an injected measurement), a server on its own
// badger and raft log refuses writes and write-lease acquisitions with a
// resource-exhausted error naming the limit and the figures, shows the
// alarm in its stats and status, and goes on serving reads with leases and
// renewals (whose horizon entries it still writes) and deletes; once the
// disk has room again, writes resume by themselves.
func TestNoSpaceAlarm(t *testing.T) {
	const (
		mib  = 1 << 20
		term = 2 * time.Second
	)
	room := diskguard.Usage{Used: mib, Free: 10 << 30}
	d := &fixedDisk{u: room}
	fc := clock.NewFake()
	srv, err := New(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", LeaseTerm: term, Epsilon: eps, Clock: fc, Logger: quietLogger(),
		QuotaBytes: 1 << 30, ReserveBytes: 100 * mib, DiskUsage: d})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv)
	c := dialRaw(t, srv)
	other := dialRaw(t, srv)
	if r, ok := writeOp(t, c, protocol.OpPut, "k", "v1", 0).(*protocol.WriteReply); !ok || r.Version == 0 {
		t.Fatalf("put with room: %#v", r)
	}
	writeOp(t, c, protocol.OpPut, "gone", "x", 0)
	if r := get(t, other, "k"); r.Term != term {
		t.Fatalf("read with room: %+v", r)
	}

	d.set(diskguard.Usage{Used: mib, Free: 80 * mib})
	srv.node.CheckDisk()
	wantExhausted(t, "put", writeOp(t, c, protocol.OpPut, "k", "v2", 0), "reserve", "104857600 bytes (100.0 MiB)", "83886080 bytes (80.0 MiB)")
	wantExhausted(t, "compare-and-swap", call(t, c, &protocol.Write{Op: protocol.OpCAS, Key: []byte("k"), Value: []byte("v2"), Expect: 1}), "reserve")
	wantExhausted(t, "acquire", call(t, c, &protocol.Acquire{Key: []byte("w")}), "reserve")
	if a := srv.Stats().Alarm; !strings.Contains(a, "NOSPACE") || !strings.Contains(a, "reserve") {
		t.Fatalf("stats alarm %q, want NOSPACE naming the reserve", a)
	}
	if a := srv.Status().Alarm; !strings.Contains(a, "NOSPACE") {
		t.Fatalf("status alarm %q", a)
	}
	// Reads, renewals and their horizon entries go on, well past the
	// horizon persisted before the disk filled.
	for range 4 {
		fc.Advance(term)
		if r := get(t, other, "k"); !r.Found || string(r.Value) != "v1" || r.Term != term {
			t.Fatalf("read on a full disk: %+v, want v1 with a lease", r)
		}
		rr, ok := call(t, other, &protocol.Renew{Keys: [][]byte{[]byte("k")}}).(*protocol.RenewReply)
		if !ok || len(rr.Terms) != 1 || rr.Terms[0] != term {
			t.Fatalf("renewal on a full disk: %#v", rr)
		}
	}
	// A delete makes room, and is let through.
	if r, ok := writeOp(t, c, protocol.OpDelete, "gone", "", 0).(*protocol.WriteReply); !ok || r.Version == 0 {
		t.Fatalf("delete on a full disk: %#v", r)
	}

	d.set(diskguard.Usage{Used: 2 << 30, Free: 10 << 30})
	srv.node.CheckDisk()
	wantExhausted(t, "put past the quota", writeOp(t, c, protocol.OpPut, "k", "v2", 0), "quota", "1073741824 bytes (1.0 GiB)")

	d.set(room)
	srv.node.CheckDisk()
	call(t, other, &protocol.Release{Keys: [][]byte{[]byte("k")}}) // the write need not wait for it
	if r, ok := writeOp(t, c, protocol.OpPut, "k", "v3", 0).(*protocol.WriteReply); !ok || r.Version == 0 {
		t.Fatalf("put once there is room again: %#v", r)
	}
	if a := srv.Stats().Alarm; a != "" {
		t.Fatalf("alarm %q once there is room again", a)
	}
}

// TestNoStartBelowReserve: a server does not open its database on a disk
// with less free than the reserve, and says why.
func TestNoStartBelowReserve(t *testing.T) {
	d := &fixedDisk{u: diskguard.Usage{Used: 0, Free: 1 << 20}}
	_, err := New(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quietLogger(), ReserveBytes: 64 << 20, DiskUsage: d})
	if !errors.Is(err, diskguard.ErrNoSpace) || !strings.Contains(err.Error(), "below the reserve") {
		t.Fatalf("New on a full disk: %v, want a NOSPACE error naming the reserve", err)
	}
}

// TestNoStartUnmeasured: a server does not open its database on a data
// folder it cannot measure (its statfs fails): its NOSPACE alarm would be
// off, and a full disk would then crash it.
func TestNoStartUnmeasured(t *testing.T) {
	d := &fixedDisk{err: errors.New("statfs: input/output error")}
	srv, err := New(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quietLogger(), DiskUsage: d})
	if err == nil {
		srv.Close()
	}
	if !errors.Is(err, diskguard.ErrNotMeasured) || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("New on a folder it cannot measure: %v, want ErrNotMeasured naming why", err)
	}
}

// blockingStore is a store whose Close hangs until the test ends, as
// badger's does on a deleted data folder.
type blockingStore struct {
	store.Store
	release chan struct{}
}

func (b blockingStore) Close() error {
	<-b.release
	return b.Store.Close()
}

// TestShutdownBoundedByContext: Shutdown returns when its context ends,
// even if the store never finishes closing.
func TestShutdownBoundedByContext(t *testing.T) {
	leaktest.Check(t)
	st := blockingStore{store.NewMemory(), make(chan struct{})}
	srv, err := New(Config{Dir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quietLogger(), Store: st})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(context.Background())
	c := dialRaw(t, srv)
	writeOp(t, c, protocol.OpPut, "k", "v", 0)
	c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- srv.Shutdown(ctx) }()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Shutdown over a store that hangs: %v, want the context's error", err)
		}
	case <-time.After(testTimeout):
		close(st.release)
		t.Fatal("Shutdown did not return when its context ended: it waits for the store's Close")
	}
	t.Logf("Shutdown returned in %v", time.Since(start))
	close(st.release) // the close it gave up on may end now
	srv.Close()
}
