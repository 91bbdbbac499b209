package client_test

import (
	"fmt"
	"net"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/protoclient"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// neverHot leaves every prefix leasable, however often it is written, so
// that a test lists right after a write (server.Config.HotPrefixWrites).
func neverHot(c *server.Config) { c.HotPrefixWrites = -1 }

// TestListRevalidatedOnTheWire: a leased List that names the revision of
// the client's copy (Known) is answered Unchanged, without keys and under a
// new lease, while nothing under the prefix changed, whatever changed
// elsewhere; after a create under it, with the new listing; without Lease,
// with the listing.
func TestListRevalidatedOnTheWire(t *testing.T) {
	bubble(t, neverHot, func(t *testing.T, srv *testkit.Server) {
		writer := srv.Dial(client.Config{})
		mustPut(t, writer, "/d/a", "1")
		mustPut(t, writer, "/d/b", "2")
		raw := srv.Raw(protoclient.Options{}) // a holder that never acknowledges
		list := func(known uint64, lease bool) *protocol.ListReply {
			t.Helper()
			m, err := raw.Call(stepCtx(t), &protocol.List{Start: []byte("/d/"), End: []byte("/d0"), Lease: lease, Known: known})
			r, ok := m.(*protocol.ListReply)
			if err != nil || !ok {
				t.Fatalf("List known at %d: %#v, %v", known, m, err)
			}
			return r
		}
		first := list(0, true)
		if first.Term == 0 || first.Unchanged || len(first.KVs) != 2 {
			t.Fatalf("first listing: %+v; want 2 keys, leased", first)
		}
		time.Sleep(timeTerm + time.Second) // the lease runs out
		mustPut(t, writer, "/e", "outside")
		r := list(first.Revision, true)
		if !r.Unchanged || r.Term != timeTerm || r.KVs != nil || r.Revision != first.Revision+1 {
			t.Fatalf("revalidation: %+v; want unchanged at %d, leased", r, first.Revision+1)
		}
		if r := list(first.Revision, false); r.Unchanged || r.Term != 0 || len(r.KVs) != 2 {
			t.Fatalf("revalidation without a lease: %+v; want the listing", r)
		}
		// The holder never lets go: the create waits out its lease.
		created := mustPutWithin(t, writer, "/d/c", "3", 2*timeTerm)
		r = list(r.Revision, true)
		if r.Unchanged || r.Term == 0 || len(r.KVs) != 3 || string(r.KVs[2].Key) != "/d/c" || r.Revision != created {
			t.Fatalf("revalidation after a create: %+v; want the new listing at %d, leased", r, created)
		}
	})
}

// countingConn is a client's socket that counts the bytes it receives.
type countingConn struct {
	net.PacketConn
	in atomic.Int64
}

func (c *countingConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, addr, err := c.PacketConn.ReadFrom(p)
	c.in.Add(int64(n))
	return n, addr, err
}

// TestListRevalidated: a listing whose lease ran out, or that an
// invalidation dropped, is revalidated by the next List: while nothing
// under the prefix changed, the client's copy answers it (not cached: a
// round trip, but its keys do not cross the network) and is cached again;
// after a change, the new listing answers it; a keys-only copy answers
// only a keys-only List.
func TestListRevalidated(t *testing.T) {
	bubble(t, neverHot, func(t *testing.T, srv *testkit.Server) {
		const keys, size = 16, 8 << 10
		writer := srv.Dial(client.Config{})
		for i := range keys {
			mustPut(t, writer, fmt.Sprintf("/d/%02d", i), strings.Repeat("v", size))
		}
		pc := &countingConn{PacketConn: srv.Endpoint()}
		reader := srv.Dial(client.Config{PacketConn: pc})
		// list lists /d/ and returns what the reader received meanwhile.
		list := func(opts ...client.ListOption) (client.ListResult, int64) {
			t.Helper()
			before := pc.in.Load()
			r, err := reader.List(stepCtx(t), "/d/", append(opts, client.Leased())...)
			if err != nil {
				t.Fatal(err)
			}
			return r, pc.in.Load() - before
		}
		first, firstIn := list()
		if first.Cached || len(first.KVs) != keys || firstIn < keys*size {
			t.Fatalf("first listing: %d keys, cached %v, %d bytes received", len(first.KVs), first.Cached, firstIn)
		}
		if r, _ := list(); !r.Cached {
			t.Fatal("second listing: not cached")
		}

		// The lease runs out; a key outside the prefix changes.
		time.Sleep(timeTerm + time.Second)
		mustPut(t, writer, "/e", "outside")
		r, in := list()
		if r.Cached || !reflect.DeepEqual(r.KVs, first.KVs) || r.Revision != first.Revision+1 || in > size {
			t.Fatalf("revalidation after the lease ran out: %d keys, cached %v, revision %d, %d bytes received; want the copy, at %d, with no keys sent",
				len(r.KVs), r.Cached, r.Revision, in, first.Revision+1)
		}
		t.Logf("bytes received: %d for the listing, %d for its revalidation", firstIn, in)
		if again, _ := list(); !again.Cached || again.Revision != r.Revision {
			t.Fatalf("after the revalidation: cached %v, revision %d; want the copy cached again at %d", again.Cached, again.Revision, r.Revision)
		}
		if it := mustGet(t, reader, "/d/03"); !it.Cached || len(it.Value) != size {
			t.Fatalf("Get under the revalidated listing: %+v; want it from the listing", it)
		}

		// An invalidation for a write that changes nothing (a delete of an
		// absent key) drops the listing; the copy is still good.
		if _, err := writer.Delete(stepCtx(t), "/d/none"); err != nil {
			t.Fatal(err)
		}
		if r, in = list(); r.Cached || !reflect.DeepEqual(r.KVs, first.KVs) || in > size {
			t.Fatalf("revalidation after an invalidation: %d keys, cached %v, %d bytes received; want the copy, with no keys sent", len(r.KVs), r.Cached, in)
		}

		// A create under the prefix: the new listing.
		created := mustPut(t, writer, "/d/new", "x")
		if r, in = list(); r.Cached || len(r.KVs) != keys+1 || r.KVs[keys].Key != "/d/new" || r.Revision != created || in < keys*size {
			t.Fatalf("listing after a create: %d keys, cached %v, revision %d, %d bytes received; want the new listing at %d", len(r.KVs), r.Cached, r.Revision, in, created)
		}

		// A keys-only copy answers a keys-only List only.
		mustPut(t, writer, "/d/new", "y") // the listing changes
		if r, _ = list(client.KeysOnly()); r.Cached || r.KVs[0].Value != nil {
			t.Fatalf("keys-only listing: cached %v, %+v", r.Cached, r.KVs[0])
		}
		time.Sleep(timeTerm + time.Second)
		if r, in = list(client.KeysOnly()); r.Cached || len(r.KVs) != keys+1 || r.KVs[0].Value != nil || in > size {
			t.Fatalf("keys-only revalidation: %d keys, cached %v, %d bytes received; want the copy, with no keys sent", len(r.KVs), r.Cached, in)
		}
		time.Sleep(timeTerm + time.Second)
		if r, in = list(); r.Cached || len(r.KVs) != keys+1 || len(r.KVs[0].Value) != size || in < keys*size {
			t.Fatalf("listing with values after a keys-only copy: %d keys, cached %v, %d bytes received; want it read whole", len(r.KVs), r.Cached, in)
		}
	})
}
