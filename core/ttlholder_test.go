package core

import (
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/store"
)

// TestTTLHolderReadLeaseBounded: the holder of a TTL lease (the client
// that granted it, then the one that kept it alive) takes read leases on
// the lease's keys that end no later than the lease could: the one its
// attaching write leaves it, a read and a renewal. So when it dies
// holding them, the expiry deletes the keys about ttl + ε after its last
// keep-alive, not a whole read term after its last read; other readers
// keep their whole terms, and the expiry waits for them as before.
func TestTTLHolderReadLeaseBounded(t *testing.T) {
	const (
		readTerm = 10 * time.Second // longer than the TTL, as leased's default 10 s is than a 5 s TTL
		leaseTTL = 3 * time.Second
	)
	synctest.Test(t, func(t *testing.T) {
		st := newMemory(t)
		c, err := New(Config{LeaseTerm: readTerm, Epsilon: eps, HorizonStep: time.Second, TTL: TTLConfig{MinTTL: time.Second},
			BootFile: bootFile(t, st), BootClock: clock.NewFakeBoot(nil),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st, &notices{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		const worker, reader, later = 1, 2, 3
		for _, s := range []SessionID{worker, reader, later} {
			c.OpenSession(s)
		}
		c.SetClient(worker, holderClient)
		c.SetClient(reader, otherClient)
		start := time.Now()
		o := submit(t, c, &Request{Session: worker, Client: holderClient, ID: 1, Op: store.OpGrantTTL, TTL: leaseTTL}).must(t)
		id := o.Lease

		// The worker claims its task: the read lease its write leaves it
		// ends with the TTL lease, not after a whole read term.
		w := put(worker, "task", "mine")
		w.Lease = id
		if got := submit(t, c, w).must(t).Term; got <= 0 || got > leaseTTL {
			t.Fatalf("the holder's read lease on the key it attached: term %v, want (0, %v]", got, leaseTTL)
		}
		// A key not attached, and another client's read, get whole terms.
		submit(t, c, put(worker, "plain", "x")).must(t)
		c.Relinquish(worker, []string{"plain"})
		if _, got, err := c.Read(worker, []byte("plain")); err != nil || got != readTerm {
			t.Fatalf("the holder's read of a key not attached: term %v, %v; want %v", got, err, readTerm)
		}
		if _, got, err := c.Read(reader, []byte("task")); err != nil || got != readTerm {
			t.Fatalf("another client's read of the key: term %v, %v; want %v", got, err, readTerm)
		}
		c.Relinquish(reader, []string{"task"}) // the expiry below waits only for the worker

		// A second later, a keep-alive from a new session of the same
		// client: that client holds the lease, its read leases are bounded
		// by the renewed lease, and a read by the old session too.
		time.Sleep(time.Second)
		c.OpenSession(4)
		c.SetClient(4, holderClient) // adopts the worker's leases
		kept := make(chan KeepAliveOutcome, 1)
		c.KeepAliveFor(holderClient, []uint64{id}, func(o KeepAliveOutcome) { kept <- o })
		synctest.Wait()
		if o := <-kept; o.Err != nil || len(o.Renewed) != 1 {
			t.Fatalf("keep-alive: %+v", o)
		}
		keptAt := time.Now()
		if got := c.Renew(4, []string{"task"}, nil); got[0] <= 0 || got[0] > leaseTTL {
			t.Fatalf("the holder's renewal of its key: term %v, want (0, %v]", got[0], leaseTTL)
		}
		if _, got, err := c.Read(later, []byte("task")); err != nil || got != readTerm {
			t.Fatalf("a session with no client identity: term %v, %v; want %v", got, err, readTerm)
		}
		c.Relinquish(later, []string{"task"})

		// The worker dies: no more keep-alives, no acknowledgement. The
		// key goes once the TTL lease has run out, ttl + ε after the last
		// keep-alive, not a read term after the write.
		time.Sleep(time.Until(keptAt.Add(leaseTTL + eps - time.Millisecond)))
		synctest.Wait()
		if !exists(t, st, "task") {
			t.Fatalf("task deleted %v after the last keep-alive, before ttl + ε", time.Since(keptAt))
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if exists(t, st, "task") {
			t.Fatalf("task still there %v after the last keep-alive (%v after the grant): the expiry waits for its dead holder's read lease",
				time.Since(keptAt), time.Since(start))
		}
		if !exists(t, st, "plain") {
			t.Fatal("a key not attached was deleted")
		}
	})
}
