package replica_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/core"
	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// TestHandedOverWriteLeaseKeepsItsClient: a write lease goes to the next
// leader in a handoff with its holder's client identity. There, a session
// of another client that presents its token is fenced and cannot release
// it; a session of the holder's client writes under it at once.
func TestHandedOverWriteLeaseKeepsItsClient(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const holder, other = 100, 200
		c := newCluster(t, 3, func(cfg *replica.Config) {
			s := raft.NewInmemStore()
			cfg.LogStore, cfg.StableStore = s, s
		})
		l := c.leader()
		oc := newCore(t, l)
		oc.OpenSession(1)
		oc.SetClient(1, holder)
		got := make(chan core.Outcome, 1)
		if err := oc.Submit(&core.Request{Session: 1, Op: store.OpGrantWriteLease, Key: []byte("w"), Done: func(o core.Outcome) { got <- o }}); err != nil {
			t.Fatal(err)
		}
		acq := <-got
		if acq.Err != nil || acq.Token == 0 {
			t.Fatalf("acquire: %+v", acq)
		}
		if err := oc.HandOff(); err != nil {
			t.Fatal(err)
		}
		var next raft.ServerID
		for _, id := range ids(3) {
			if c.nodes[id] != l {
				next = id
				break
			}
		}
		if err := replica.RaftOf(l).LeadershipTransferToServer(next, raft.ServerAddress(next)).Error(); err != nil {
			t.Fatal(err)
		}
		nl := c.leader()
		oc.Close()
		if err := nl.WaitLeading(context.Background()); err != nil {
			t.Fatal(err)
		}
		st, err := nl.State()
		if err != nil || len(st.Handoff) != 1 || st.Handoff[0].Token != acq.Token || st.Handoff[0].Client != holder {
			t.Fatalf("the leases handed over: %+v, %v; want the write lease of token %d, client %d", st.Handoff, err, acq.Token, holder)
		}
		nc := newCore(t, nl)
		nc.OpenSession(11)
		nc.SetClient(11, other)
		stolen := &core.Request{Session: 11, Op: store.OpPut, Key: []byte("w"), Value: []byte("stolen"), Token: acq.Token,
			Done: func(o core.Outcome) { t.Errorf("another client's write with the live token has an outcome: %+v", o) }}
		if err := nc.Submit(stolen); !errors.Is(err, leasetable.ErrFenced) {
			t.Fatalf("another client's write with the handed-over token: %v, want ErrFenced", err)
		}
		if err := nc.ReleaseWriteLease(11, "w", acq.Token, 0, nil); !errors.Is(err, leasetable.ErrNotFound) {
			t.Fatalf("another client's release of the handed-over lease: %v, want ErrNotFound", err)
		}
		start := time.Now()
		nc.OpenSession(12)
		nc.SetClient(12, holder) // the holder's client comes back
		out := make(chan done, 1)
		if err := nc.Submit(&core.Request{Session: 12, Op: store.OpPut, Key: []byte("w"), Value: []byte("mine"), Token: acq.Token,
			Done: func(o core.Outcome) { out <- done{o, time.Now()} }}); err != nil {
			t.Fatalf("the holder's client's write with its token: %v", err)
		}
		if o := <-out; o.Err != nil || !o.at.Equal(start) {
			t.Fatalf("the holder's client's write: %v, %v after the new leader started; want at once", o.Err, o.at.Sub(start))
		}
		if err := nc.ReleaseWriteLease(12, "w", acq.Token, 0, nil); err != nil {
			t.Fatalf("the holder's client releases its lease: %v", err)
		}
	})
}
