package server

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leased/leased/protocol"
)

func openTestStore(t *testing.T, dir string) *store {
	t.Helper()
	st, err := openStore(dir, quietLogger(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestStoreLargeBatch: a batch larger than one badger transaction takes is
// committed across several, in order, and every mutation succeeds.
func TestStoreLargeBatch(t *testing.T) {
	dir := t.TempDir()
	st := openTestStore(t, dir)
	var batch []*mutation
	for i := range 100 {
		batch = append(batch, &mutation{op: protocol.OpPut, key: fmt.Appendf(nil, "k%03d", i),
			value: bytes.Repeat([]byte{byte(i)}, 60<<10)})
	}
	batch = append(batch, &mutation{}) // a fencing token in the same batch
	st.apply(batch)
	for i, m := range batch[:100] {
		if m.err != nil || m.version != uint64(i+1) {
			t.Fatalf("mutation %d: version %d, err %v; want version %d", i, m.version, m.err, i+1)
		}
	}
	if batch[100].err != nil || batch[100].token != 1 {
		t.Fatalf("token mutation: %+v", batch[100])
	}
	if err := st.close(); err != nil {
		t.Fatal(err)
	}
	st = openTestStore(t, dir)
	defer st.close()
	if st.revision() != 100 || st.fence != 1 {
		t.Fatalf("after reopening: revision %d, fence %d; want 100 and 1", st.revision(), st.fence)
	}
	for i := range 100 {
		r, err := st.get(fmt.Appendf(nil, "k%03d", i))
		if err != nil || !r.Found || r.Version != uint64(i+1) || len(r.Value) != 60<<10 || r.Value[0] != byte(i) {
			t.Fatalf("k%03d after reopening: version %d found %v len %d err %v", i, r.Version, r.Found, len(r.Value), err)
		}
	}
}

// TestStoreCompareAndSwap: a CAS commits only at the expected version;
// version 0 means absent, which a deleted key is too.
func TestStoreCompareAndSwap(t *testing.T) {
	st := openTestStore(t, t.TempDir())
	defer st.close()
	apply := func(op protocol.WriteOp, expect uint64) *mutation {
		m := &mutation{op: op, key: []byte("k"), value: []byte("v"), expect: expect}
		if op == protocol.OpDelete {
			m.value = nil
		}
		st.apply([]*mutation{m})
		return m
	}
	if m := apply(protocol.OpCAS, 0); m.err != nil || m.version != 1 {
		t.Fatalf("CAS on an absent key at 0: %+v", m)
	}
	if m := apply(protocol.OpCAS, 0); !errors.Is(m.err, errVersionMismatch) || m.version != 1 {
		t.Fatalf("CAS on a present key at 0: %+v", m)
	}
	if m := apply(protocol.OpCAS, 7); !errors.Is(m.err, errVersionMismatch) {
		t.Fatalf("CAS at a wrong version: %+v", m)
	}
	if st.revision() != 1 {
		t.Fatalf("failed CAS moved the revision to %d", st.revision())
	}
	if m := apply(protocol.OpDelete, 0); m.err != nil || m.version != 2 {
		t.Fatalf("delete: %+v", m)
	}
	if m := apply(protocol.OpCAS, 0); m.err != nil || m.version != 3 {
		t.Fatalf("CAS on a deleted key at 0: %+v", m)
	}
}

// TestStoreBatchAtTheLimit: whatever the sizes, a batch that fills a badger
// transaction to its limit commits every mutation, across transactions.
func TestStoreBatchAtTheLimit(t *testing.T) {
	st := openTestStore(t, t.TempDir())
	defer st.close()
	big := bytes.Repeat([]byte{'v'}, 60<<10)
	for filler := 0; filler <= 120<<10; filler += 2 << 10 {
		var batch []*mutation
		for i := range 40 {
			batch = append(batch, &mutation{op: protocol.OpPut, key: fmt.Appendf(nil, "k%02d", i), value: big})
		}
		batch = append(batch,
			&mutation{op: protocol.OpPut, key: []byte("filler"), value: make([]byte, filler)},
			&mutation{op: protocol.OpPut, key: []byte("last"), value: big})
		before := st.revision()
		st.apply(batch)
		for i, m := range batch {
			if m.err != nil || m.version != before+uint64(i)+1 {
				t.Fatalf("filler %d: mutation %d: version %d, err %v; want version %d", filler, i, m.version, m.err, before+uint64(i)+1)
			}
		}
	}
}
