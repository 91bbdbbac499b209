package core

import (
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leased/leased/leasetable"
	"github.com/leased/leased/store"
)

// txnReq is a transaction of session s.
func txnReq(s SessionID, ifs []store.Compare, then, els []store.TxnOp) *Request {
	return &Request{Session: s, Op: store.OpTxn, Txn: &store.Txn{If: ifs, Then: then, Else: els}}
}

func tput(key, value string) store.TxnOp {
	return store.TxnOp{Op: store.OpPut, Key: []byte(key), Value: []byte(value)}
}

func tdel(key string) store.TxnOp { return store.TxnOp{Op: store.OpDelete, Key: []byte(key)} }

// rename is a file system's rename of src to dst as a transaction.
func rename(s SessionID, src, dst, value string) *Request {
	return txnReq(s,
		[]store.Compare{{Key: []byte(src), Op: store.CmpExists}, {Key: []byte(dst), Op: store.CmpAbsent}},
		[]store.TxnOp{tput(dst, value), tdel(src)}, nil)
}

// TestTxnWaitsForEveryHolder: a transaction invalidates the read leases on
// every key it may write, in either branch (the absent destination's
// too), and commits only when all of them are gone, at one revision.
// Keys it only compares are not invalidated.
func TestTxnWaitsForEveryHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, n := newCore(t, newMemory(t))
		defer c.Close()
		for _, s := range []SessionID{1, 2} {
			c.OpenSession(s)
		}
		submit(t, c, put(2, "dir/a", "inode7")).must(t)
		submit(t, c, put(2, "cmp", "x")).must(t)
		for _, k := range []string{"dir/a", "dir/b", "cmp", "other"} {
			if _, term, err := c.Read(1, []byte(k)); err != nil || term == 0 {
				t.Fatalf("read %q: term %v, %v", k, term, err)
			}
		}
		r := rename(2, "dir/a", "dir/b", "inode7")
		r.Txn.If = append(r.Txn.If, store.Compare{Key: []byte("cmp"), Op: store.CmpValueEqual, Value: []byte("x")})
		r.Txn.Else = []store.TxnOp{tput("other", "y")}
		p := submit(t, c, r)
		if _, ok := p.outcome(); ok {
			t.Fatal("the transaction committed while its keys were leased")
		}
		got := slices.Sorted(slices.Values(n.inv[1]))
		if want := []string{"dir/a", "dir/b", "other"}; !slices.Equal(got, want) {
			t.Fatalf("invalidated %q; want %q (the keys of both branches, not the compared one)", got, want)
		}
		// Leases are no longer granted on them meanwhile.
		if _, term, _ := c.Read(2, []byte("dir/b")); term != 0 {
			t.Fatalf("a lease of %v on a key a transaction waits for", term)
		}
		c.Relinquish(1, []string{"dir/a", "dir/b"})
		if _, ok := p.outcome(); ok {
			t.Fatal("the transaction committed while one of its keys was leased")
		}
		c.Relinquish(1, []string{"other"})
		o := p.must(t)
		if !o.Succeeded || o.Version != 3 || o.Holders != 3 {
			t.Fatalf("outcome %+v; want succeeded at revision 3, after 3 holders", o)
		}
		for k, want := range map[string]store.Record{"dir/a": {Version: 3}, "dir/b": {Version: 3, Found: true, Value: []byte("inode7")}} {
			if rec, _, err := c.Read(2, []byte(k)); err != nil || rec.Version != want.Version || rec.Found != want.Found || string(rec.Value) != string(want.Value) {
				t.Errorf("%q after the rename: %+v, %v; want %+v", k, rec, err, want)
			}
		}
	})
}

// TestTxnsNeverDeadlock: two transactions on the same keys, named in
// opposite orders, and single writes between them, all waiting for
// holders, all commit once the holders let go, in the order they were
// submitted, each at a revision of its own.
func TestTxnsNeverDeadlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := newCore(t, newMemory(t))
		defer c.Close()
		for _, s := range []SessionID{1, 2, 3, 4} {
			c.OpenSession(s)
		}
		for _, k := range []string{"a", "b", "c"} {
			c.Read(1, []byte(k))
		}
		ps := []*pending{
			submit(t, c, txnReq(2, nil, []store.TxnOp{tput("a", "t1"), tput("b", "t1")}, nil)),
			submit(t, c, put(3, "b", "w")),
			submit(t, c, txnReq(4, nil, []store.TxnOp{tput("b", "t2"), tput("a", "t2")}, []store.TxnOp{tput("c", "t2")})),
			submit(t, c, txnReq(3, nil, []store.TxnOp{tput("c", "t3"), tput("a", "t3")}, nil)),
		}
		time.Sleep(time.Second)
		for i, p := range ps {
			if _, ok := p.outcome(); ok {
				t.Fatalf("request %d committed while its keys were leased", i)
			}
		}
		c.Relinquish(1, []string{"c", "a", "b"})
		var last uint64
		for i, p := range ps {
			o := p.must(t)
			if o.Version <= last {
				t.Errorf("request %d committed at %d, after %d: out of order", i, o.Version, last)
			}
			last = o.Version
		}
		rec, _, _ := c.Read(2, []byte("a"))
		if string(rec.Value) != "t3" {
			t.Errorf("a = %q after all; want the last transaction's", rec.Value)
		}
	})
}

// TestTxnDeadlineAbandonsAll: a transaction that cannot commit by its
// timeout leaves every key it waited on, nothing of it applied, and a
// write queued behind it on another of its keys goes ahead at once.
func TestTxnDeadlineAbandonsAll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := newCore(t, newMemory(t))
		defer c.Close()
		for _, s := range []SessionID{1, 2, 3} {
			c.OpenSession(s)
		}
		c.Read(1, []byte("b"))
		r := txnReq(2, nil, []store.TxnOp{tput("a", "t"), tput("b", "t")}, nil)
		r.Timeout = term / 4
		p := submit(t, c, r)
		behind := submit(t, c, put(3, "a", "w"))
		time.Sleep(term / 4)
		o, ok := p.outcome()
		if !ok || !errors.Is(o.Err, ErrCanceled) {
			t.Fatalf("transaction past its timeout: %+v, %v; want ErrCanceled", o, ok)
		}
		if w := behind.must(t); w.Version != 1 {
			t.Fatalf("the write behind it: version %d, want 1 (nothing of the transaction applied)", w.Version)
		}
		if rec, _, _ := c.Read(3, []byte("b")); rec.Found {
			t.Fatalf("b = %+v: the abandoned transaction applied", rec)
		}
	})
}

// TestTxnFenced: a transaction's write under a write lease carries its
// token: the holder's commits, another session's with a wrong token is
// refused and leaves nothing queued, and one whose lease ended while it
// waited for a key's holder is refused, nothing applied.
func TestTxnFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := newCore(t, newMemory(t))
		defer c.Close()
		for _, s := range []SessionID{1, 2, 3} {
			c.OpenSession(s)
		}
		tok := submit(t, c, &Request{Session: 1, Op: store.OpGrantWriteLease, Key: []byte("a")}).must(t).Token
		r := txnReq(1, nil, []store.TxnOp{tput("a", "1"), tput("b", "1")}, nil)
		r.Fence = map[string]uint64{"a": tok}
		if o := submit(t, c, r).must(t); o.Version != 1 {
			t.Fatalf("holder's transaction: %+v", o)
		}

		bad := txnReq(2, nil, []store.TxnOp{tput("b", "2"), tput("a", "2")}, nil)
		bad.Fence = map[string]uint64{"a": tok}
		bad.Done = func(o Outcome) { t.Errorf("a refused transaction has an outcome: %+v", o) }
		if err := c.Submit(bad); !errors.Is(err, leasetable.ErrFenced) {
			t.Fatalf("another session's transaction with the holder's token: %v, want ErrFenced", err)
		}
		if o := submit(t, c, put(3, "b", "free")).must(t); o.Version != 2 {
			t.Fatalf("a write to b after the refused transaction: %+v", o)
		}

		c.Read(3, []byte("c"))
		late := txnReq(1, nil, []store.TxnOp{tput("a", "late"), tput("c", "late")}, nil)
		late.Fence = map[string]uint64{"a": tok}
		p := submit(t, c, late)
		if err := c.ReleaseWriteLease(1, "a", tok, 0, nil); err != nil {
			t.Fatal(err)
		}
		time.Sleep(term + eps)
		o, ok := p.outcome()
		if !ok || !errors.Is(o.Err, leasetable.ErrFenced) {
			t.Fatalf("transaction whose write lease ended while it waited: %+v, %v; want ErrFenced", o, ok)
		}
		if rec, _, _ := c.Read(3, []byte("a")); string(rec.Value) != "1" {
			t.Fatalf("a = %q; the fenced transaction applied", rec.Value)
		}
	})
}

// TestTxnSessionCloseAbandons: a transaction whose session closes before
// it is ready is abandoned whole.
func TestTxnSessionCloseAbandons(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := newCore(t, newMemory(t))
		defer c.Close()
		for _, s := range []SessionID{1, 2, 3} {
			c.OpenSession(s)
		}
		c.Read(1, []byte("b"))
		p := submit(t, c, txnReq(2, nil, []store.TxnOp{tput("a", "t"), tput("b", "t")}, nil))
		c.CloseSession(2, true, nil)
		if o, ok := p.outcome(); !ok || !errors.Is(o.Err, ErrCanceled) {
			t.Fatalf("after its session closed: %+v, %v; want ErrCanceled", o, ok)
		}
		if o := submit(t, c, put(3, "a", "w")).must(t); o.Version != 1 {
			t.Fatalf("a write to a after: %+v", o)
		}
	})
}

// TestTxnUnderRecalledWriteLease: the holder of a recalled write lease
// finishes its writes before it releases. Its transaction goes ahead of a
// single write that recalled the lease, as a single fenced write does;
// behind another transaction that recalled it (which holds a key the
// holder's needs), it waits its turn instead, so that neither waits for
// the other forever: the lease runs out, the other commits, and the
// holder's is refused as fenced, nothing of it applied.
func TestTxnUnderRecalledWriteLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, n := newCore(t, newMemory(t))
		defer c.Close()
		for _, s := range []SessionID{1, 2} {
			c.OpenSession(s)
		}
		tok := submit(t, c, &Request{Session: 1, Op: store.OpGrantWriteLease, Key: []byte("a")}).must(t).Token
		single := submit(t, c, put(2, "a", "single"))
		if len(n.recalls) != 1 {
			t.Fatalf("recalls %+v; want the single write's", n.recalls)
		}
		r := txnReq(1, nil, []store.TxnOp{tput("a", "holder"), tput("b", "holder")}, nil)
		r.Fence = map[string]uint64{"a": tok}
		if o := submit(t, c, r).must(t); o.Version != 1 {
			t.Fatalf("holder's transaction ahead of a single write: %+v", o)
		}
		if err := c.ReleaseWriteLease(1, "a", tok, 0, nil); err != nil {
			t.Fatal(err)
		}
		if o := single.must(t); o.Version != 2 {
			t.Fatalf("the single write: %+v", o)
		}
		c.Relinquish(2, []string{"a"}) // the single writer's read lease on its value

		start := time.Now()
		tok = submit(t, c, &Request{Session: 1, Op: store.OpGrantWriteLease, Key: []byte("a")}).must(t).Token
		other := submit(t, c, txnReq(2, nil, []store.TxnOp{tput("b", "other"), tput("a", "other")}, nil))
		r = txnReq(1, nil, []store.TxnOp{tput("a", "late"), tput("b", "late")}, nil)
		r.Fence = map[string]uint64{"a": tok}
		late := submit(t, c, r)
		time.Sleep(term + eps - time.Since(start))
		o := other.must(t)
		if o.Version != 3 {
			t.Fatalf("the other transaction, once the lease ran out: %+v", o)
		}
		lo, ok := late.outcome()
		if !ok || !errors.Is(lo.Err, leasetable.ErrFenced) {
			t.Fatalf("the holder's transaction behind it: %+v, %v; want ErrFenced", lo, ok)
		}
		if rec, _, _ := c.Read(2, []byte("b")); string(rec.Value) != "other" {
			t.Fatalf("b = %q", rec.Value)
		}
	})
}

// TestTxnAdmit: on a full disk, where Config.Admit lets deletes through, a
// transaction that only deletes goes through too, and one that puts is
// refused, nothing of it applied.
func TestTxnAdmit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := &gate{allowD: true}
		c, err := New(Config{LeaseTerm: term, Epsilon: eps, HorizonStep: time.Second, Admit: g.admit,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, newMemory(t), &notices{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.OpenSession(1)
		submit(t, c, put(1, "a", "1")).must(t)
		g.set(errFull)
		if o := submit(t, c, txnReq(1, nil, []store.TxnOp{tdel("a")}, []store.TxnOp{tdel("b")})).must(t); o.Version != 2 {
			t.Fatalf("a delete-only transaction on a full disk: %+v", o)
		}
		r := txnReq(1, nil, []store.TxnOp{tdel("x")}, []store.TxnOp{tput("a", "2")})
		r.Done = func(o Outcome) { t.Errorf("a refused transaction has an outcome: %+v", o) }
		if err := c.Submit(r); !errors.Is(err, errFull) {
			t.Fatalf("a transaction that may put, on a full disk: %v, want the disk's error", err)
		}
	})
}
