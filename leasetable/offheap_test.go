package leasetable

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// hasPointers reports whether a value of type t holds a pointer.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.UnsafePointer, reflect.String, reflect.Slice, reflect.Map,
		reflect.Chan, reflect.Func, reflect.Interface:
		return true
	case reflect.Array:
		return hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

// TestOffHeapTypesHoldNoPointers: what lives in mapped memory must hold no
// pointers, which the collector would not see there.
func TestOffHeapTypesHoldNoPointers(t *testing.T) {
	for _, v := range []any{readLease{}, keyRec{}, int32(0), byte(0)} {
		if typ := reflect.TypeOf(v); hasPointers(typ) {
			t.Errorf("%v holds a pointer", typ)
		}
	}
	if !hasPointers(reflect.TypeOf(keyState{})) {
		t.Error("hasPointers misses the pointers of keyState")
	}
}

// TestNameArena stores, drops and reuses names of random lengths, up to
// the longest, and checks every live name after every step.
func TestNameArena(t *testing.T) {
	o := newOffHeap()
	var a nameArena
	type entry struct {
		ref  nameRef
		name string
	}
	var live []entry
	rng := rand.New(rand.NewPCG(1, 2))
	for step := range 20000 {
		if len(live) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(live))
			e := live[i]
			a.drop(e.ref)
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		} else {
			n := rng.IntN(40)
			switch rng.IntN(100) {
			case 0:
				n = maxName
			case 1:
				n = rng.IntN(maxName)
			}
			name := strings.Repeat(string(rune('a'+step%26)), n)
			ref := a.put(o, name)
			if ref == 0 {
				t.Fatalf("step %d: put returned the zero nameRef", step)
			}
			live = append(live, entry{ref, name})
		}
		if step%97 == 0 || step > 19900 {
			for _, e := range live {
				if got := string(a.bytes(e.ref)); got != e.name {
					t.Fatalf("step %d: name of %d bytes reads back as %d bytes %.10q", step, len(e.name), len(got), got)
				}
			}
		}
	}
	if len(o.mapped) == 0 {
		t.Error("an arena of many chunks mapped no memory")
	}
}

// TestLargeTableMapsItsStorage: past offHeapAt a Table maps its storage,
// and releases the index and heap arrays it outgrows.
func TestLargeTableMapsItsStorage(t *testing.T) {
	tab := New(Config{Epsilon: eps})
	tab.AddSession(1)
	const n = 20000
	for i := range n {
		if tab.Grant(1, keyOf(i), term, t0) != term {
			t.Fatalf("Grant %d refused", i)
		}
	}
	if len(tab.mem.mapped) == 0 {
		t.Fatal("a Table of 20,000 leases mapped no memory")
	}
	mapped := int(mapped(tab))
	if mapped > tab.mem.used {
		t.Errorf("%d bytes mapped, %d in use: released arrays were not unmapped", mapped, tab.mem.used)
	}
	if st := tab.Stats(); st.StorageBytes != tab.mem.used || st.StorageBytes < mapped {
		t.Errorf("Stats.StorageBytes = %d; %d in use, %d of it mapped", st.StorageBytes, tab.mem.used, mapped)
	}
	for i := range n {
		if tab.Grant(1, keyOf(i), term, t0) != term {
			t.Fatalf("renewing Grant %d refused", i)
		}
	}
	if st := tab.Stats(); st.Leases != n || st.Keys != n {
		t.Fatalf("Stats %+v, want %d leases and keys", st, n)
	}
	tab.CloseSession(1, true, t0)
	if st := tab.Stats(); st.Leases != 0 || st.Keys != 0 {
		t.Fatalf("after relinquishing: Stats %+v", st)
	}
	checkInvariants(t, tab)
}

func keyOf(i int) string { return "/large/" + strconv.Itoa(i) }
