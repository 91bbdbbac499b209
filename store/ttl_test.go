package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/store"
)

// TTL lease commands, briefly.

func grantTTL(ttl time.Duration) store.Command { return store.Command{Op: store.OpGrantTTL, Term: ttl} }

// grantOwned grants a TTL lease of ttl owned by owner.
func grantOwned(ttl time.Duration, owner uint64) store.Command {
	return store.Command{Op: store.OpGrantTTL, Term: ttl, Owner: owner}
}

func revokeTTL(id uint64) store.Command { return store.Command{Op: store.OpRevokeTTL, Lease: id} }

// revokeExpect revokes lease id if its attachment generation is gen.
func revokeExpect(id, gen uint64) store.Command {
	return store.Command{Op: store.OpRevokeTTL, Lease: id, Expect: gen}
}

func withLease(c store.Command, id uint64) store.Command {
	c.Lease = id
	return c
}

func checkpoint(cps ...store.TTLCheckpoint) store.Command {
	return store.Command{Op: store.OpCheckpointTTL, Checkpoints: cps}
}

func keptAlive(ids ...uint64) store.Command {
	return store.Command{Op: store.OpKeptAliveTTL, Leases: ids}
}

// wantTTL fails t unless lease want.ID is want, with keys attached; a
// want.Gen of 0 stands for any attachment generation.
func wantTTL(t *testing.T, s store.Store, want store.TTLLease, keys ...string) {
	t.Helper()
	l, ks, ok, err := s.TTLLease(want.ID)
	if err != nil || !ok {
		t.Fatalf("TTLLease(%d) = %v, %v; want it found", want.ID, ok, err)
	}
	want.Keys = len(keys)
	want.KeyBytes = len(strings.Join(keys, ""))
	if want.Gen == 0 {
		want.Gen = l.Gen
	}
	if !reflect.DeepEqual(l, want) || !slices.Equal(ks, keys) {
		t.Errorf("TTLLease(%d) = %+v, keys %q\nwant           %+v, keys %q", want.ID, l, ks, want, keys)
	}
}

// wantNoTTL fails t unless lease id does not exist.
func wantNoTTL(t *testing.T, s store.Store, id uint64) {
	t.Helper()
	if l, ks, ok, err := s.TTLLease(id); err != nil || ok {
		t.Errorf("TTLLease(%d) = %+v, %q, %v, %v; want none", id, l, ks, ok, err)
	}
}

// listTTL returns every lease TTLLeases lists.
func listTTL(t *testing.T, s store.Store) []store.TTLLease {
	t.Helper()
	var ls []store.TTLLease
	if err := s.TTLLeases(func(l store.TTLLease) error { ls = append(ls, l); return nil }); err != nil {
		t.Fatalf("TTLLeases: %v", err)
	}
	return ls
}

func wantLeaseNotFound(t *testing.T, r store.Result) {
	t.Helper()
	if !errors.Is(r.Err, store.ErrLeaseNotFound) || r.Version != 0 || r.Keys != nil {
		t.Errorf("result %+v; want ErrLeaseNotFound and nothing written", r)
	}
}

// ttlContract: TTL leases, their keys, and their checkpoints.
var ttlContract = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"attaching a key raises its lease's attachment generation", func(t *testing.T, s store.Store) {
		const ttl = 5 * time.Second
		mustApply(t, s, grantTTL(ttl), grantTTL(ttl))
		wantTTL(t, s, store.TTLLease{ID: 1, TTL: ttl, Remaining: ttl, Gen: 1})
		mustApply(t, s, withLease(put("a", "1"), 1), withLease(cas("b", 0, "2"), 2))
		wantTTL(t, s, store.TTLLease{ID: 1, TTL: ttl, Remaining: ttl, Gen: 2}, "a")
		wantTTL(t, s, store.TTLLease{ID: 2, TTL: ttl, Remaining: ttl, Gen: 2}, "b")
		// A write of a key attached already leaves it; so do a write that
		// fails and a detach.
		rs := mustApply(t, s, withLease(put("a", "3"), 1), withLease(cas("c", 9, "x"), 1), withLease(put("a", "4"), 7), put("b", "5"))
		if !errors.Is(rs[1].Err, store.ErrVersionMismatch) || !errors.Is(rs[2].Err, store.ErrLeaseNotFound) {
			t.Fatalf("results %+v; want a mismatch and ErrLeaseNotFound", rs)
		}
		wantTTL(t, s, store.TTLLease{ID: 1, TTL: ttl, Remaining: ttl, Gen: 2}, "a")
		wantTTL(t, s, store.TTLLease{ID: 2, TTL: ttl, Remaining: ttl, Gen: 2})
		// Moving a key in raises it; the lease it left keeps its own.
		mustApply(t, s, withLease(put("b", "6"), 2), withLease(put("b", "7"), 1))
		wantTTL(t, s, store.TTLLease{ID: 1, TTL: ttl, Remaining: ttl, Gen: 3}, "a", "b")
		wantTTL(t, s, store.TTLLease{ID: 2, TTL: ttl, Remaining: ttl, Gen: 3})
		// Checkpoints and keep-alives leave it.
		mustApply(t, s, checkpoint(store.TTLCheckpoint{ID: 1, Remaining: time.Second}), keptAlive(1))
		wantTTL(t, s, store.TTLLease{ID: 1, TTL: ttl, Remaining: time.Second, KeptAlive: true, Gen: 3}, "a", "b")
	}},
	{"a revoke expecting an older attachment generation changes nothing", func(t *testing.T, s store.Store) {
		const ttl = 5 * time.Second
		mustApply(t, s, grantTTL(ttl), withLease(put("a", "1"), 1))
		l, keys, _, err := s.TTLLease(1)
		if err != nil || l.Gen != 2 || !slices.Equal(keys, []string{"a"}) {
			t.Fatalf("TTLLease(1) = %+v, %q, %v", l, keys, err)
		}
		// The revoker read generation 2 and key a; b is attached since.
		mustApply(t, s, withLease(put("b", "2"), 1))
		before := mustState(t, s)
		r := mustApply(t, s, revokeExpect(1, l.Gen))[0]
		if !errors.Is(r.Err, store.ErrLeaseChanged) || r.Version != 0 || r.Keys != nil {
			t.Fatalf("revoke expecting generation 2 = %+v; want ErrLeaseChanged and nothing written", r)
		}
		if st := mustState(t, s); st.Revision != before.Revision {
			t.Errorf("revision %d after a refused revoke, want %d", st.Revision, before.Revision)
		}
		wantTTL(t, s, store.TTLLease{ID: 1, TTL: ttl, Remaining: ttl, Gen: 3}, "a", "b")
		wantRecord(t, s, "b", str("2"), 2)
		// An unknown lease is not found, whatever is expected.
		wantLeaseNotFound(t, mustApply(t, s, revokeExpect(9, 1))[0])
		// At the generation it is at, the revoke applies.
		r = mustApply(t, s, revokeExpect(1, 3))[0]
		if r.Err != nil || r.Version != 3 || !slices.Equal(r.Keys, []string{"a", "b"}) {
			t.Errorf("revoke expecting generation 3 = %+v; want a and b deleted at 3", r)
		}
		wantNoTTL(t, s, 1)
		wantRecord(t, s, "b", nil, 3)
		// Expect 0 revokes whatever is attached.
		mustApply(t, s, grantTTL(ttl), withLease(put("c", "5"), 2), withLease(put("d", "6"), 2))
		if r := mustApply(t, s, revokeTTL(2))[0]; r.Err != nil || !slices.Equal(r.Keys, []string{"c", "d"}) {
			t.Errorf("revoke expecting nothing = %+v; want c and d deleted", r)
		}
	}},
	{"a retried grant is granted once", func(t *testing.T, s store.Store) {
		g := write(grantTTL(10*time.Second), 7, 1, 1, 100)
		rs := mustApply(t, s, g, g)
		if rs[0].Lease != 1 || rs[0].Duplicate || rs[1].Lease != 1 || !rs[1].Duplicate {
			t.Fatalf("grant and its copy = %+v; want lease 1, then it as a duplicate", rs)
		}
		// Retried in another batch, with another TTL: the kept outcome.
		retry := write(grantTTL(time.Hour), 7, 1, 1, 101)
		if r := mustApply(t, s, retry)[0]; r.Lease != 1 || !r.Duplicate || r.Err != nil {
			t.Errorf("retried grant = %+v; want lease 1 as a duplicate", r)
		}
		if r, ok, err := s.Kept(retry); err != nil || !ok || r.Lease != 1 || !r.Duplicate {
			t.Errorf("Kept(grant) = %+v, %v, %v; want lease 1 as a duplicate", r, ok, err)
		}
		if r, ok, err := s.Kept(write(grantTTL(time.Second), 7, 2, 1, 101)); err != nil || ok {
			t.Errorf("Kept(grant never applied) = %+v, %v, %v; want none", r, ok, err)
		}
		if st := mustState(t, s); st.TTLLeaseID != 1 {
			t.Errorf("TTL lease id %d after retries, want 1", st.TTLLeaseID)
		}
		wantTTL(t, s, store.TTLLease{ID: 1, TTL: 10 * time.Second, Remaining: 10 * time.Second, Gen: 1})
		wantNoTTL(t, s, 2)
		// The next request is a new grant; a refused one is refused again.
		rs = mustApply(t, s, write(grantTTL(time.Second), 7, 2, 1, 102), write(grantTTL(0), 7, 3, 1, 102), write(grantTTL(0), 7, 3, 1, 102))
		if rs[0].Lease != 2 || rs[0].Duplicate {
			t.Errorf("grant of request 2 = %+v; want lease 2", rs[0])
		}
		for _, r := range rs[1:] {
			if !errors.Is(r.Err, store.ErrInvalidCommand) || r.Lease != 0 {
				t.Errorf("grant of TTL 0 = %+v; want ErrInvalidCommand", r)
			}
		}
		if !rs[2].Duplicate {
			t.Errorf("retried grant of TTL 0 = %+v; want a duplicate", rs[2])
		}
		// Acked forgets the outcomes below it: a copy of request 1 now is
		// stale, and grants nothing.
		mustApply(t, s, write(grantTTL(time.Second), 7, 4, 4, 103))
		if r := mustApply(t, s, retry)[0]; !errors.Is(r.Err, store.ErrAnswered) || r.Lease != 0 {
			t.Errorf("grant below Acked = %+v; want ErrAnswered", r)
		}
		if st := mustState(t, s); st.TTLLeaseID != 3 {
			t.Errorf("TTL lease id %d, want 3", st.TTLLeaseID)
		}
	}},
	{"a forgotten client's grant is granted again", func(t *testing.T, s store.Store) {
		g := write(grantTTL(time.Second), 1, 1, 1, 100)
		mustApply(t, s, g, write(grantTTL(time.Second), 2, 1, 1, 300))
		ids, err := s.IdleClients(time.Unix(250, 0), 10)
		if err != nil || !slices.Equal(ids, []uint64{1}) {
			t.Fatalf("IdleClients(250) = %v, %v; want [1]", ids, err)
		}
		mustApply(t, s, store.Command{Op: store.OpForgetClients, Clients: []uint64{1, 2}, At: time.Unix(250, 0)})
		rs := mustApply(t, s, g, write(grantTTL(time.Second), 2, 1, 1, 400))
		if rs[0].Duplicate || rs[0].Lease != 3 || !rs[1].Duplicate || rs[1].Lease != 2 {
			t.Errorf("after forgetting client 1: %+v; want a new lease 3 for it, lease 2 kept for client 2", rs)
		}
	}},
	{"TTL leases are granted from a counter and take no revision", func(t *testing.T, s store.Store) {
		rs := mustApply(t, s, grantTTL(10*time.Second), put("x", "1"), grantTTL(time.Minute))
		if rs[0].Lease != 1 || rs[2].Lease != 2 || rs[0].Version != 0 || rs[2].Version != 0 || rs[1].Version != 1 {
			t.Errorf("grants = %+v; want leases 1 and 2, no version", rs)
		}
		wantTTL(t, s, store.TTLLease{ID: 1, TTL: 10 * time.Second, Remaining: 10 * time.Second})
		wantTTL(t, s, store.TTLLease{ID: 2, TTL: time.Minute, Remaining: time.Minute})
		wantNoTTL(t, s, 3)
		wantNoTTL(t, s, 0)
		// A TTL of 0 or less is refused and takes no id.
		for _, ttl := range []time.Duration{0, -time.Second} {
			if r := mustApply(t, s, grantTTL(ttl))[0]; !errors.Is(r.Err, store.ErrInvalidCommand) || r.Lease != 0 {
				t.Errorf("grant of %v = %+v; want ErrInvalidCommand", ttl, r)
			}
		}
		if st := mustState(t, s); st.TTLLeaseID != 2 || st.Revision != 1 {
			t.Errorf("State = %+v; want TTL lease id 2, revision 1", st)
		}
		if r := mustApply(t, s, grantTTL(time.Second))[0]; r.Lease != 3 {
			t.Errorf("grant = %+v, want lease 3", r)
		}
	}},
	{"a put or compare-and-swap attaches its key, moves it, and detaches it", func(t *testing.T, s store.Store) {
		const ttl = 5 * time.Second
		l1 := store.TTLLease{ID: 1, TTL: ttl, Remaining: ttl}
		l2 := store.TTLLease{ID: 2, TTL: ttl, Remaining: ttl}
		mustApply(t, s, grantTTL(ttl), grantTTL(ttl))
		rs := mustApply(t, s, withLease(put("a", "1"), 1), withLease(put("bb", "2"), 1), withLease(cas("c", 0, "3"), 2))
		wantVersions(t, rs, 1, 2, 3)
		wantTTL(t, s, l1, "a", "bb")
		wantTTL(t, s, l2, "c")
		wantRecord(t, s, "a", str("1"), 1)
		// Put again on the same lease: it stays, counted once.
		mustApply(t, s, withLease(put("a", "4"), 1))
		wantTTL(t, s, l1, "a", "bb")
		// Attached to another lease, it moves.
		mustApply(t, s, withLease(put("a", "5"), 2))
		wantTTL(t, s, l1, "bb")
		wantTTL(t, s, l2, "a", "c")
		// A compare-and-swap that does not match moves nothing.
		wantMismatch(t, mustApply(t, s, withLease(cas("a", 1, "x"), 1))[0], 5)
		wantTTL(t, s, l2, "a", "c")
		mustApply(t, s, withLease(cas("a", 5, "6"), 1))
		wantTTL(t, s, l1, "a", "bb")
		wantTTL(t, s, l2, "c")
		// A put without a lease detaches, and a delete does, whatever
		// lease it names.
		rs = mustApply(t, s, put("a", "7"), withLease(del("c"), 2), cas("bb", 2, "8"))
		wantVersions(t, rs, 7, 8, 9)
		wantTTL(t, s, l1)
		wantTTL(t, s, l2)
		wantRecord(t, s, "a", str("7"), 7)
		wantRecord(t, s, "c", nil, 8)
		// A deleted key attaches again when put with a lease.
		mustApply(t, s, withLease(put("c", "9"), 2))
		wantTTL(t, s, l2, "c")
		if st := mustState(t, s); st.Revision != 10 {
			t.Errorf("revision %d, want 10", st.Revision)
		}
	}},
	{"a write naming an unknown lease changes nothing", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"), grantTTL(time.Second))
		rs := mustApply(t, s, withLease(put("a", "2"), 9), withLease(cas("a", 1, "3"), 9), withLease(cas("a", 7, "3"), 9))
		for _, r := range rs {
			wantLeaseNotFound(t, r)
		}
		wantRecord(t, s, "a", str("1"), 1)
		wantTTL(t, s, store.TTLLease{ID: 1, TTL: time.Second, Remaining: time.Second})
		if st := mustState(t, s); st.Revision != 1 {
			t.Errorf("revision %d, want 1: refused writes take no revision", st.Revision)
		}
		// A client's write keeps the outcome: retried once lease 2 exists,
		// it is refused again, a duplicate.
		wantLeaseNotFound(t, mustApply(t, s, write(withLease(put("b", "x"), 2), 5, 1, 1, 100))[0])
		if r := mustApply(t, s, grantTTL(time.Second))[0]; r.Lease != 2 {
			t.Fatalf("grant = %+v, want lease 2", r)
		}
		r := mustApply(t, s, write(withLease(put("b", "x"), 2), 5, 1, 1, 100))[0]
		if !r.Duplicate || !errors.Is(r.Err, store.ErrLeaseNotFound) || r.Version != 0 {
			t.Errorf("retry = %+v; want a duplicate of ErrLeaseNotFound", r)
		}
		if r, ok, err := s.Kept(write(withLease(put("b", "x"), 2), 5, 1, 1, 100)); err != nil || !ok || !errors.Is(r.Err, store.ErrLeaseNotFound) {
			t.Errorf("Kept = %+v, %v, %v; want ErrLeaseNotFound", r, ok, err)
		}
		wantRecord(t, s, "b", nil, 0)
		// The next request of the client applies.
		wantVersions(t, mustApply(t, s, write(withLease(put("b", "y"), 2), 5, 2, 2, 100)), 2)
		wantTTL(t, s, store.TTLLease{ID: 2, TTL: time.Second, Remaining: time.Second}, "b")
	}},
	{"revoke deletes every attached key at one revision", func(t *testing.T, s store.Store) {
		mustApply(t, s, grantTTL(time.Second), grantTTL(time.Second))
		mustApply(t, s, withLease(put("b", "1"), 1), withLease(put("a", "2"), 1), withLease(put("c", "3"), 2), put("x", "4"))
		r := mustApply(t, s, revokeTTL(1))[0]
		if r.Err != nil || r.Version != 5 || !reflect.DeepEqual(r.Keys, []string{"a", "b"}) {
			t.Errorf("revoke = %+v; want version 5, keys [a b]", r)
		}
		wantRecord(t, s, "a", nil, 5)
		wantRecord(t, s, "b", nil, 5)
		wantRecord(t, s, "c", str("3"), 3)
		wantRecord(t, s, "x", str("4"), 4)
		wantNoTTL(t, s, 1)
		if st := mustState(t, s); st.Revision != 5 {
			t.Errorf("revision %d, want 5", st.Revision)
		}
		// Revoked, it is not found, and nothing changes.
		wantLeaseNotFound(t, mustApply(t, s, revokeTTL(1))[0])
		wantLeaseNotFound(t, mustApply(t, s, withLease(put("a", "x"), 1))[0])
		wantLeaseNotFound(t, mustApply(t, s, revokeTTL(7))[0])
		// A lease whose keys all left takes no revision to revoke.
		mustApply(t, s, put("c", "5"))
		if r := mustApply(t, s, revokeTTL(2))[0]; r.Err != nil || r.Version != 0 || r.Keys != nil {
			t.Errorf("revoke of a lease with no key = %+v; want no version", r)
		}
		wantNoTTL(t, s, 2)
		if st := mustState(t, s); st.Revision != 6 {
			t.Errorf("revision %d, want 6", st.Revision)
		}
		// A revoked key may be put again, on no lease.
		wantVersions(t, mustApply(t, s, put("a", "6")), 7)
		if ls := listTTL(t, s); len(ls) != 0 {
			t.Errorf("TTLLeases after revoking all = %+v", ls)
		}
	}},
	{"checkpoints and keep-alives", func(t *testing.T, s store.Store) {
		mustApply(t, s, grantTTL(10*time.Second), grantTTL(20*time.Second), withLease(put("k", "v"), 2))
		rs := mustApply(t, s, keptAlive(1, 99))
		if !reflect.DeepEqual(rs[0], store.Result{}) {
			t.Errorf("kept alive = %+v, want a zero result", rs[0])
		}
		wantTTL(t, s, store.TTLLease{ID: 1, TTL: 10 * time.Second, Remaining: 10 * time.Second, KeptAlive: true})
		mustApply(t, s, checkpoint(store.TTLCheckpoint{ID: 1, Remaining: 4 * time.Second}, store.TTLCheckpoint{ID: 2, Remaining: 7 * time.Second}, store.TTLCheckpoint{ID: 99, Remaining: time.Second}))
		wantTTL(t, s, store.TTLLease{ID: 1, TTL: 10 * time.Second, Remaining: 4 * time.Second})
		wantTTL(t, s, store.TTLLease{ID: 2, TTL: 20 * time.Second, Remaining: 7 * time.Second}, "k")
		mustApply(t, s, keptAlive(2))
		wantTTL(t, s, store.TTLLease{ID: 2, TTL: 20 * time.Second, Remaining: 7 * time.Second, KeptAlive: true}, "k")
		wantNoTTL(t, s, 99)
		// Too many, or a negative remaining TTL: refused, nothing
		// changes.
		many := make([]store.TTLCheckpoint, store.MaxTTLLeasesPerCommand+1)
		ids := make([]uint64, store.MaxTTLLeasesPerCommand+1)
		for i := range many {
			many[i] = store.TTLCheckpoint{ID: 1, Remaining: time.Second}
			ids[i] = 1
		}
		for _, c := range []store.Command{
			checkpoint(many...),
			keptAlive(ids...),
			checkpoint(store.TTLCheckpoint{ID: 1, Remaining: time.Second}, store.TTLCheckpoint{ID: 2, Remaining: -1}),
		} {
			if r := mustApply(t, s, c)[0]; !errors.Is(r.Err, store.ErrInvalidCommand) {
				t.Errorf("%v of %d leases = %+v; want ErrInvalidCommand", c.Op, len(c.Checkpoints)+len(c.Leases), r)
			}
		}
		wantTTL(t, s, store.TTLLease{ID: 1, TTL: 10 * time.Second, Remaining: 4 * time.Second})
		// The most a command may carry is taken.
		mustApply(t, s, keptAlive(ids[1:]...), checkpoint(many[1:]...))
		wantTTL(t, s, store.TTLLease{ID: 1, TTL: 10 * time.Second, Remaining: time.Second})
		if st := mustState(t, s); st.Revision != 1 {
			t.Errorf("revision %d, want 1: checkpoints take none", st.Revision)
		}
	}},
	{"a lease holds a bounded number of keys", func(t *testing.T, s store.Store) {
		mustApply(t, s, grantTTL(time.Second), grantTTL(time.Second))
		cmds := make([]store.Command, store.MaxTTLKeys)
		for i := range cmds {
			cmds[i] = withLease(put(fmt.Sprintf("k%04d", i), "v"), 1)
		}
		mustApply(t, s, cmds...)
		rev := mustState(t, s).Revision
		if r := mustApply(t, s, withLease(put("one more", "v"), 1))[0]; !errors.Is(r.Err, store.ErrLeaseFull) || r.Version != 0 {
			t.Errorf("put on a full lease = %+v; want ErrLeaseFull", r)
		}
		wantRecord(t, s, "one more", nil, 0)
		// A key attached already may be put again.
		wantVersions(t, mustApply(t, s, withLease(put("k0000", "w"), 1)), rev+1)
		// And in bytes of keys.
		long := strings.Repeat("x", 4096)
		n := store.MaxTTLKeyBytes / len(long)
		cmds = cmds[:0]
		for i := range n {
			cmds = append(cmds, withLease(put(fmt.Sprintf("%s%04d", long[4:], i), "v"), 2))
		}
		mustApply(t, s, cmds...)
		if r := mustApply(t, s, withLease(put("y", "v"), 2))[0]; !errors.Is(r.Err, store.ErrLeaseFull) {
			t.Errorf("put on a lease full of bytes = %+v; want ErrLeaseFull", r)
		}
		r := mustApply(t, s, revokeTTL(1))[0]
		if r.Err != nil || len(r.Keys) != store.MaxTTLKeys {
			t.Errorf("revoke of a full lease: %v, %d keys", r.Err, len(r.Keys))
		}
		wantRecord(t, s, "k0999", nil, r.Version)
	}},
	{"the fullest lease is revoked in one step", func(t *testing.T, s store.Store) {
		// MaxTTLKeys keys of MaxTTLKeyBytes in all: the most one
		// revocation deletes, which store.Cost counts, and which one
		// transaction of the database must take.
		mustApply(t, s, grantTTL(time.Minute))
		per := store.MaxTTLKeyBytes / store.MaxTTLKeys
		cmds := make([]store.Command, store.MaxTTLKeys)
		for i := range cmds {
			key := fmt.Sprintf("%04d%s", i, strings.Repeat("k", per-4))
			cmds[i] = withLease(put(key, "v"), 1)
		}
		for _, r := range mustApply(t, s, cmds...) {
			if r.Err != nil {
				t.Fatalf("filling the lease: %v", r.Err)
			}
		}
		r := mustApply(t, s, revokeTTL(1))[0]
		if r.Err != nil || len(r.Keys) != store.MaxTTLKeys {
			t.Fatalf("revoke of the fullest lease: %v, %d keys", r.Err, len(r.Keys))
		}
		wantRecord(t, s, string(cmds[store.MaxTTLKeys-1].Key), nil, r.Version)
	}},
	{"TTL leases are listed in id order, a page at a time", func(t *testing.T, s store.Store) {
		const n = 2500
		cmds := make([]store.Command, n)
		for i := range cmds {
			cmds[i] = grantTTL(time.Duration(i+1) * time.Second)
		}
		mustApply(t, s, cmds...)
		mustApply(t, s, revokeTTL(2), revokeTTL(1500), withLease(put("k", "v"), 3))
		var ids []uint64
		err := s.TTLLeases(func(l store.TTLLease) error {
			want := store.TTLLease{ID: l.ID, TTL: time.Duration(l.ID) * time.Second, Remaining: time.Duration(l.ID) * time.Second, Gen: 1}
			if l.ID == 3 {
				want.Keys, want.KeyBytes, want.Gen = 1, 1, 2
			}
			if !reflect.DeepEqual(l, want) && l.ID <= n {
				t.Errorf("listed %+v, want %+v", l, want)
			}
			ids = append(ids, l.ID)
			// The store is not locked meanwhile.
			if l.ID == 1 {
				mustApply(t, s, grantTTL(time.Second))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(ids) < n-2 || ids[0] != 1 || ids[1] != 3 {
			t.Fatalf("listed %d leases, first %v", len(ids), ids[:min(len(ids), 3)])
		}
		for i := 1; i < len(ids); i++ {
			if ids[i] <= ids[i-1] || ids[i] == 1500 {
				t.Fatalf("listed %d after %d", ids[i], ids[i-1])
			}
		}
		// An error of fn stops the listing.
		stop := errors.New("stop")
		calls := 0
		err = s.TTLLeases(func(store.TTLLease) error { calls++; return stop })
		if !errors.Is(err, stop) || calls != 1 {
			t.Errorf("TTLLeases with fn failing = %v after %d calls; want stop after 1", err, calls)
		}
	}},
	{"TTL lease ids are never reused", func(t *testing.T, s store.Store) {
		mustApply(t, s, grantTTL(time.Second), grantTTL(time.Second), revokeTTL(2))
		if err := s.Reopen(); err != nil {
			t.Fatal(err)
		}
		if r := mustApply(t, s, grantTTL(time.Second))[0]; r.Lease != 3 {
			t.Errorf("grant after a revoke and Reopen = %+v, want lease 3", r)
		}
	}},
}

// TestTTLLeasesSurviveRestart: TTL leases, their owners, keys,
// checkpoints and the lease counter are durable: a Badger closed and
// opened again holds them, gives the next id, revokes with the keys it
// held, and passes Check.
func TestTTLLeasesSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	b := openBadger(t, dir)
	mustApply(t, b, grantTTL(time.Minute), grantOwned(time.Hour, 0xa11ce), grantTTL(time.Second))
	mustApply(t, b, withLease(put("a", "1"), 1), withLease(put("b", "2"), 1), withLease(put("c", "3"), 2), revokeTTL(3),
		checkpoint(store.TTLCheckpoint{ID: 1, Remaining: 30 * time.Second}), keptAlive(2))
	before := listTTL(t, b)
	if err := b.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	b = reopenBadger(t, b, dir)
	if err := b.Check(); err != nil {
		t.Fatalf("Check after a restart: %v", err)
	}
	if after := listTTL(t, b); !reflect.DeepEqual(after, before) {
		t.Errorf("leases after a restart = %+v\nwant %+v", after, before)
	}
	wantTTL(t, b, store.TTLLease{ID: 1, TTL: time.Minute, Remaining: 30 * time.Second}, "a", "b")
	wantTTL(t, b, store.TTLLease{ID: 2, TTL: time.Hour, Remaining: time.Hour, KeptAlive: true, Owner: 0xa11ce}, "c")
	rs := mustApply(t, b, grantTTL(time.Second), revokeTTL(1))
	if rs[0].Lease != 4 || rs[1].Version != 4 || !reflect.DeepEqual(rs[1].Keys, []string{"a", "b"}) {
		t.Errorf("after a restart: %+v; want lease 4, a revoke of [a b] at 4", rs)
	}
	if err := b.Check(); err != nil {
		t.Fatalf("Check after the revoke: %v", err)
	}
}

// TestSnapshotRestoreTTLLeases: a snapshot carries the TTL leases, their
// owners and keys, and the lease counter; the restored database has the
// digest of the one it came from, and revokes and grants as it would have.
func TestSnapshotRestoreTTLLeases(t *testing.T) {
	src := openBadger(t, t.TempDir())
	mustApplyEntry(t, src, 1, grantTTL(time.Minute), grantOwned(time.Hour, 0xa11ce), grantTTL(time.Second))
	mustApplyEntry(t, src, 2, withLease(put("a", "1"), 1), withLease(put("b", "2"), 2), withLease(put("c", "3"), 2), revokeTTL(3),
		checkpoint(store.TTLCheckpoint{ID: 2, Remaining: time.Minute}), keptAlive(1))
	want := listTTL(t, src)
	wantDigest := mustSummarize(t, src).Digest
	buf := snapshotBytes(t, src)
	sum, _, err := store.ReadSnapshot(bytes.NewReader(buf))
	if err != nil || sum.Digest != wantDigest || sum.State.TTLLeaseID != 3 {
		t.Errorf("ReadSnapshot = %+v, %v; want digest %v, TTL lease id 3", sum, err, wantDigest)
	}

	dst := openBadger(t, t.TempDir())
	mustApplyEntry(t, dst, 7, grantTTL(time.Second), withLease(put("old", "x"), 1))
	if err := dst.Restore(bytes.NewReader(buf)); err != nil {
		t.Fatal(err)
	}
	if err := dst.Check(); err != nil {
		t.Fatalf("Check after a restore: %v", err)
	}
	if got := listTTL(t, dst); !reflect.DeepEqual(got, want) {
		t.Errorf("leases after a restore = %+v\nwant %+v", got, want)
	}
	if got := mustSummarize(t, dst).Digest; got != wantDigest {
		t.Errorf("digest after a restore %v, want %v", got, wantDigest)
	}
	wantTTL(t, dst, store.TTLLease{ID: 2, TTL: time.Hour, Remaining: time.Minute, Owner: 0xa11ce}, "b", "c")
	rs := mustApplyEntry(t, dst, 3, revokeTTL(2), grantTTL(time.Second))
	if rs[0].Version != 4 || !reflect.DeepEqual(rs[0].Keys, []string{"b", "c"}) || rs[1].Lease != 4 {
		t.Errorf("after a restore: %+v; want a revoke of [b c] at 4, lease 4", rs)
	}
	wantRecord(t, dst, "old", nil, 0)
}
