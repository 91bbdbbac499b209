package store_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leased/leased/store"
)

// txnCmd is an OpTxn of if, then and els.
func txnCmd(ifs []store.Compare, then, els []store.TxnOp) store.Command {
	return store.Command{Op: store.OpTxn, Txn: &store.Txn{If: ifs, Then: then, Else: els}}
}

func tput(key, value string) store.TxnOp {
	return store.TxnOp{Op: store.OpPut, Key: []byte(key), Value: []byte(value)}
}

func tdel(key string) store.TxnOp { return store.TxnOp{Op: store.OpDelete, Key: []byte(key)} }

func cmp(key string, op store.CompareOp, version uint64, value string) store.Compare {
	c := store.Compare{Key: []byte(key), Op: op, Version: version}
	if value != "" {
		c.Value = []byte(value)
	}
	return c
}

// txnContract: transactions apply one branch, whole, at one revision, on
// every store.
var txnContract = []struct {
	name string
	run  func(t *testing.T, s store.Store)
}{
	{"a rename applies both writes at one revision", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("dir/a", "inode7"))
		rename := txnCmd(
			[]store.Compare{cmp("dir/a", store.CmpExists, 0, ""), cmp("dir/b", store.CmpAbsent, 0, "")},
			[]store.TxnOp{tput("dir/b", "inode7"), tdel("dir/a")}, nil)
		r := mustApply(t, s, rename)[0]
		if r.Err != nil || !r.Succeeded || r.Version != 2 {
			t.Fatalf("rename = %+v; want succeeded at revision 2", r)
		}
		wantRecord(t, s, "dir/a", nil, 2)
		wantRecord(t, s, "dir/b", str("inode7"), 2)
		// Again: the source is gone, so the compares fail and the empty
		// Else branch changes nothing and takes no revision.
		r = mustApply(t, s, rename)[0]
		if r.Err != nil || r.Succeeded || r.Version != 2 {
			t.Fatalf("rename again = %+v; want not succeeded, revision 2", r)
		}
		if st := mustState(t, s); st.Revision != 2 {
			t.Errorf("revision %d after a transaction that changed nothing; want 2", st.Revision)
		}
	}},
	{"each compare, on a present and an absent key", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("x", "v"), put("gone", "1"), del("gone")) // x at 1, gone deleted at 3
		cases := []struct {
			c    store.Compare
			want bool
		}{
			{cmp("x", store.CmpExists, 0, ""), true},
			{cmp("x", store.CmpAbsent, 0, ""), false},
			{cmp("gone", store.CmpExists, 0, ""), false},
			{cmp("gone", store.CmpAbsent, 0, ""), true},
			{cmp("never", store.CmpAbsent, 0, ""), true},
			{cmp("x", store.CmpVersionEqual, 1, ""), true},
			{cmp("x", store.CmpVersionEqual, 2, ""), false},
			{cmp("gone", store.CmpVersionEqual, 0, ""), true}, // absent is version 0, as for a compare-and-swap
			{cmp("x", store.CmpVersionNotEqual, 1, ""), false},
			{cmp("x", store.CmpVersionGreater, 0, ""), true},
			{cmp("gone", store.CmpVersionGreater, 0, ""), false},
			{cmp("x", store.CmpVersionLess, 2, ""), true},
			{cmp("x", store.CmpVersionLess, 1, ""), false},
			{cmp("x", store.CmpValueEqual, 0, "v"), true},
			{cmp("x", store.CmpValueEqual, 0, "w"), false},
			{cmp("gone", store.CmpValueEqual, 0, ""), false}, // no value compare holds of an absent key
			{cmp("x", store.CmpValueNotEqual, 0, "w"), true},
			{cmp("never", store.CmpValueNotEqual, 0, "w"), false},
		}
		for _, c := range cases {
			r := mustApply(t, s, txnCmd([]store.Compare{c.c}, nil, nil))[0]
			if r.Err != nil || r.Succeeded != c.want || r.Version != 3 {
				t.Errorf("%q %v %d %q: %+v; want succeeded %v at revision 3", c.c.Key, c.c.Op, c.c.Version, c.c.Value, r, c.want)
			}
		}
	}},
	{"the else branch, and a delete of an absent key", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"))
		r := mustApply(t, s, txnCmd([]store.Compare{cmp("a", store.CmpValueEqual, 0, "2")},
			[]store.TxnOp{tput("then", "x")}, []store.TxnOp{tput("else", "y"), tdel("nothing")}))[0]
		if r.Err != nil || r.Succeeded || r.Version != 2 {
			t.Fatalf("txn = %+v; want else at revision 2", r)
		}
		wantRecord(t, s, "then", nil, 0)
		wantRecord(t, s, "else", str("y"), 2)
		wantRecord(t, s, "nothing", nil, 0)
	}},
	{"a refused transaction changes nothing", func(t *testing.T, s store.Store) {
		mustApply(t, s, put("a", "1"))
		for _, tx := range []*store.Txn{
			nil,
			{Then: []store.TxnOp{tput("a", "2"), tput("a", "3")}},
			{Then: []store.TxnOp{tput("", "2")}},
			{Then: []store.TxnOp{{Op: store.OpCAS, Key: []byte("a")}}},
			{Then: []store.TxnOp{{Op: store.OpDelete, Key: []byte("a"), Value: []byte("v")}}},
			{If: []store.Compare{{Key: []byte("a"), Op: 99}}},
			{If: []store.Compare{{Op: store.CmpExists}}},
			{Then: make([]store.TxnOp, store.MaxTxnOps+1)},
		} {
			r := mustApply(t, s, store.Command{Op: store.OpTxn, Txn: tx})[0]
			if !errors.Is(r.Err, store.ErrInvalidCommand) {
				t.Errorf("txn %+v: %+v; want ErrInvalidCommand", tx, r)
			}
		}
		wantRecord(t, s, "a", str("1"), 1)
		if st := mustState(t, s); st.Revision != 1 {
			t.Errorf("revision %d; want 1", st.Revision)
		}
	}},
	{"TTL leases: attach, and a missing or full lease refuses the whole branch", func(t *testing.T, s store.Store) {
		id := mustApply(t, s, grantTTL(time.Minute))[0].Lease
		withL := func(op store.TxnOp, l uint64) store.TxnOp { op.Lease = l; return op }
		r := mustApply(t, s, txnCmd(nil, []store.TxnOp{withL(tput("a", "1"), id), withL(tput("b", "1"), id)}, nil))[0]
		if r.Err != nil || r.Version != 1 {
			t.Fatalf("attach = %+v", r)
		}
		if _, keys, ok, err := s.TTLLease(id); err != nil || !ok || !slices.Equal(keys, []string{"a", "b"}) {
			t.Fatalf("TTLLease = %v %v %v; want a, b attached", keys, ok, err)
		}
		// A branch that names a lease that does not exist applies none
		// of its writes, not even those before it.
		r = mustApply(t, s, txnCmd(nil, []store.TxnOp{tput("c", "1"), withL(tput("d", "1"), id+7)}, nil))[0]
		if !errors.Is(r.Err, store.ErrLeaseNotFound) {
			t.Fatalf("missing lease: %+v; want ErrLeaseNotFound", r)
		}
		wantRecord(t, s, "c", nil, 0)
		// A delete detaches; a put without a lease detaches too.
		r = mustApply(t, s, txnCmd(nil, []store.TxnOp{tdel("a"), tput("b", "2")}, nil))[0]
		if r.Err != nil || r.Version != 2 {
			t.Fatalf("detach = %+v", r)
		}
		if _, keys, _, _ := s.TTLLease(id); len(keys) != 0 {
			t.Errorf("keys still attached: %v", keys)
		}
		// A lease that has room for one key less than the branch adds.
		var fill []store.Command
		for i := range store.MaxTTLKeys - 1 {
			fill = append(fill, store.Command{Op: store.OpPut, Key: []byte(fmt.Sprintf("f%04d", i)), Lease: id})
		}
		mustApply(t, s, fill...)
		rev := mustState(t, s).Revision
		r = mustApply(t, s, txnCmd(nil, []store.TxnOp{withL(tput("x", "1"), id), withL(tput("y", "1"), id)}, nil))[0]
		if !errors.Is(r.Err, store.ErrLeaseFull) {
			t.Fatalf("overfull: %+v; want ErrLeaseFull", r)
		}
		if st := mustState(t, s); st.Revision != rev {
			t.Errorf("revision moved from %d to %d", rev, st.Revision)
		}
		wantRecord(t, s, "x", nil, 0)
	}},
	{"a retried transaction is applied once", func(t *testing.T, s store.Store) {
		tx := txnCmd([]store.Compare{cmp("n", store.CmpAbsent, 0, "")}, []store.TxnOp{tput("n", "1")}, []store.TxnOp{tput("n", "again")})
		r := mustApply(t, s, write(tx, 9, 1, 1, 100))[0]
		if r.Err != nil || !r.Succeeded || r.Version != 1 || r.Duplicate {
			t.Fatalf("first = %+v", r)
		}
		// The retry would take the else branch if applied again: it gets
		// the first outcome, and changes nothing.
		r = mustApply(t, s, write(tx, 9, 1, 1, 101))[0]
		if r.Err != nil || !r.Succeeded || r.Version != 1 || !r.Duplicate {
			t.Fatalf("retry = %+v; want the first outcome, Duplicate", r)
		}
		wantRecord(t, s, "n", str("1"), 1)
		// One that took the else branch, and one refused for its lease,
		// are kept so too.
		r = mustApply(t, s, write(tx, 9, 2, 1, 102))[0]
		if r.Err != nil || r.Succeeded || r.Version != 2 {
			t.Fatalf("else = %+v", r)
		}
		if r = mustApply(t, s, write(tx, 9, 2, 1, 103))[0]; r.Succeeded || r.Version != 2 || !r.Duplicate {
			t.Fatalf("else retried = %+v", r)
		}
		bad := txnCmd(nil, []store.TxnOp{{Op: store.OpPut, Key: []byte("z"), Lease: 77}}, nil)
		if r = mustApply(t, s, write(bad, 9, 3, 1, 104))[0]; !errors.Is(r.Err, store.ErrLeaseNotFound) {
			t.Fatalf("missing lease = %+v", r)
		}
		if r = mustApply(t, s, write(bad, 9, 3, 1, 105))[0]; !errors.Is(r.Err, store.ErrLeaseNotFound) || !r.Duplicate {
			t.Fatalf("missing lease retried = %+v", r)
		}
		if k, ok, err := s.Kept(write(bad, 9, 3, 1, 106)); err != nil || !ok || !errors.Is(k.Err, store.ErrLeaseNotFound) {
			t.Errorf("Kept = %+v %v %v", k, ok, err)
		}
	}},
}

func TestTxnContract(t *testing.T) {
	for _, im := range impls {
		for _, c := range txnContract {
			t.Run(im.name+"/"+c.name, func(t *testing.T) { c.run(t, im.open(t)) })
		}
	}
}

func TestTxnKeys(t *testing.T) {
	tx := &store.Txn{Then: []store.TxnOp{tput("b", ""), tdel("a")}, Else: []store.TxnOp{tput("a", ""), tput("c", "")}}
	var got []string
	for _, k := range tx.Keys() {
		got = append(got, string(k))
	}
	if !slices.Equal(got, []string{"b", "a", "c"}) {
		t.Errorf("Keys = %q", got)
	}
	c := store.Command{Op: store.OpTxn, Txn: tx}
	if n := len(c.WrittenKeys()); n != 3 {
		t.Errorf("WrittenKeys: %d keys", n)
	}
	if store.Cost(c) <= store.Cost(store.Command{Op: store.OpPut, Key: []byte("a")}) {
		t.Errorf("a transaction of three writes costs no more than one write")
	}
}
