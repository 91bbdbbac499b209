package cache

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// t0 is a made-up instant; tests move time by adding durations to it.
var t0 = time.Unix(1_700_000_000, 0)

func at(d time.Duration) time.Time { return t0.Add(d) }

// entrySize is what the cache charges for an entry.
func entrySize(key string, value []byte) int64 {
	return int64(len(key)+len(value)) + entryOverhead
}

// checkInvariants verifies the internal structure of c and its bounds.
func checkInvariants(t testing.TB, c *Cache) {
	t.Helper()
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.m.Size() != len(c.ring) {
		t.Fatalf("map has %d entries, ring %d", c.m.Size(), len(c.ring))
	}
	if len(c.ring) > c.maxEntries {
		t.Fatalf("%d entries exceed MaxEntries %d", len(c.ring), c.maxEntries)
	}
	if c.bytes > c.maxBytes {
		t.Fatalf("%d bytes exceed MaxBytes %d", c.bytes, c.maxBytes)
	}
	if len(c.ring) == 0 && c.hand != 0 || len(c.ring) > 0 && (c.hand < 0 || c.hand >= len(c.ring)) {
		t.Fatalf("hand %d out of range for ring of %d", c.hand, len(c.ring))
	}
	var sum int64
	for i, e := range c.ring {
		if e.idx != i {
			t.Fatalf("ring[%d] has idx %d", i, e.idx)
		}
		if cur, _ := c.m.Load(e.key); cur != e {
			t.Fatalf("ring[%d] (%q) is not the map's entry", i, e.key)
		}
		if e.size != entrySize(e.key, e.Value) {
			t.Fatalf("entry %q has size %d, want %d", e.key, e.size, entrySize(e.key, e.Value))
		}
		sum += e.size
		if e.heapIdx >= 0 && (e.heapIdx >= len(c.exp) || c.exp[e.heapIdx] != e) {
			t.Fatalf("entry %q has bad heapIdx %d", e.key, e.heapIdx)
		}
	}
	if sum != c.bytes {
		t.Fatalf("Bytes() = %d, sum of entries = %d", c.bytes, sum)
	}
	for i, e := range c.exp {
		if e.heapIdx != i || e.idx < 0 {
			t.Fatalf("exp[%d] (%q) has heapIdx %d, idx %d", i, e.key, e.heapIdx, e.idx)
		}
		if i > 0 && e.deadline.Before(c.exp[(i-1)/2].deadline) {
			t.Fatalf("heap order violated at %d", i)
		}
	}
}

func TestNewDefaults(t *testing.T) {
	tests := []struct {
		name         string
		cfg          Config
		wantEntries  int
		wantMaxBytes int64
	}{
		{"zero", Config{}, defaultMaxEntries, defaultMaxBytes},
		{"negative", Config{MaxEntries: -1, MaxBytes: -5}, defaultMaxEntries, defaultMaxBytes},
		{"set", Config{MaxEntries: 7, MaxBytes: 1000}, 7, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(tt.cfg)
			if c.maxEntries != tt.wantEntries || c.maxBytes != tt.wantMaxBytes {
				t.Errorf("bounds = (%d, %d), want (%d, %d)", c.maxEntries, c.maxBytes, tt.wantEntries, tt.wantMaxBytes)
			}
			if c.Len() != 0 || c.Bytes() != 0 || c.Evictions() != 0 {
				t.Errorf("new cache not empty: Len %d Bytes %d Evictions %d", c.Len(), c.Bytes(), c.Evictions())
			}
		})
	}
}

func TestGetDeadline(t *testing.T) {
	deadline := at(10 * time.Second)
	tests := []struct {
		name    string
		found   bool
		value   []byte
		now     time.Time
		wantHit bool
	}{
		{"long before", true, []byte("v"), at(0), true},
		{"just before", true, []byte("v"), deadline.Add(-time.Nanosecond), true},
		{"at deadline", true, []byte("v"), deadline, false},
		{"after deadline", true, []byte("v"), deadline.Add(time.Hour), false},
		{"negative before", false, nil, at(0), true},
		{"negative at deadline", false, nil, deadline, false},
		{"negative after", false, nil, deadline.Add(time.Second), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Config{})
			put, ev := c.Put("k", tt.value, 3, tt.found, deadline)
			if put == nil || ev != nil {
				t.Fatalf("Put = %v, %v", put, ev)
			}
			e, ok := c.Get("k", tt.now)
			if ok != tt.wantHit {
				t.Fatalf("Get hit = %v, want %v", ok, tt.wantHit)
			}
			if ok {
				if e != put || e.Key() != "k" || e.Version != 3 || e.Found != tt.found || string(e.Value) != string(tt.value) {
					t.Fatalf("Get = %+v, want the entry Put returned", e)
				}
			} else if e != nil {
				t.Fatalf("Get miss returned entry %+v", e)
			}
			// Peek sees the entry whatever the time, with its deadline.
			pe, pd, pok := c.Peek("k")
			if !pok || pe != put || !pd.Equal(deadline) {
				t.Fatalf("Peek = %v, %v, %v; want entry, %v, true", pe, pd, pok, deadline)
			}
		})
	}
}

func TestGetPeekMissing(t *testing.T) {
	c := New(Config{})
	c.Put("a", []byte("1"), 1, true, at(time.Minute))
	if e, ok := c.Get("b", at(0)); ok || e != nil {
		t.Errorf("Get(b) = %v, %v", e, ok)
	}
	if e, d, ok := c.Peek("b"); ok || e != nil || !d.IsZero() {
		t.Errorf("Peek(b) = %v, %v, %v", e, d, ok)
	}
}

func TestPeekDoesNotMarkUsed(t *testing.T) {
	c := New(Config{})
	c.Put("k", []byte("v"), 1, true, at(10*time.Second))
	c.Peek("k")
	if got := c.TakeRenewals(at(0), at(time.Minute), nil); len(got) != 0 {
		t.Fatalf("TakeRenewals after Peek = %d entries, want 0", len(got))
	}
}

// TestBounds puts many entries of varying size and checks after each Put that
// both bounds hold, that each evicted key is reported exactly once and is
// gone, and that the accounting is exact.
func TestBounds(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		maxValue int
	}{
		{"count bound", Config{MaxEntries: 50, MaxBytes: 1 << 30}, 16},
		{"byte bound", Config{MaxEntries: 1 << 20, MaxBytes: 4096}, 200},
		{"both bounds", Config{MaxEntries: 30, MaxBytes: 3000}, 100},
		{"single entry", Config{MaxEntries: 1}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			c := New(tt.cfg)
			present := map[string]bool{}
			var nevicted uint64
			for i := range 2000 {
				key := "k" + strconv.Itoa(r.IntN(300))
				value := make([]byte, r.IntN(tt.maxValue))
				if r.IntN(3) == 0 {
					c.Get("k"+strconv.Itoa(r.IntN(300)), at(0))
				}
				e, evicted := c.Put(key, value, uint64(i), true, at(time.Hour))
				if e == nil {
					t.Fatalf("Put(%q) not stored", key)
				}
				seen := map[string]bool{}
				for _, k := range evicted {
					if k == key {
						t.Fatalf("Put(%q) reported its own key as evicted", key)
					}
					if seen[k] || !present[k] {
						t.Fatalf("evicted key %q reported twice or was not present", k)
					}
					seen[k] = true
					delete(present, k)
					if _, _, ok := c.Peek(k); ok {
						t.Fatalf("evicted key %q still present", k)
					}
				}
				nevicted += uint64(len(evicted))
				present[key] = true
				if c.Len() != len(present) {
					t.Fatalf("Len() = %d, model has %d", c.Len(), len(present))
				}
				checkInvariants(t, c)
			}
			if c.Evictions() != nevicted {
				t.Errorf("Evictions() = %d, reported %d", c.Evictions(), nevicted)
			}
			if nevicted == 0 {
				t.Errorf("no evictions: test does not exercise the bounds")
			}
		})
	}
}

func TestReferencedSurviveSweep(t *testing.T) {
	c := New(Config{MaxEntries: 10})
	for i := range 10 {
		c.Put(strconv.Itoa(i), nil, 0, true, at(time.Hour))
	}
	// Reference the even keys; the odd ones must go first.
	for i := 0; i < 10; i += 2 {
		if _, ok := c.Get(strconv.Itoa(i), at(0)); !ok {
			t.Fatalf("Get(%d) missed", i)
		}
	}
	var evicted []string
	for i := range 5 {
		_, ev := c.Put("new"+strconv.Itoa(i), nil, 0, true, at(time.Hour))
		evicted = append(evicted, ev...)
	}
	if want := []string{"1", "3", "5", "7", "9"}; !slices.Equal(evicted, want) {
		t.Fatalf("evicted %v, want %v", evicted, want)
	}
	for i := 0; i < 10; i += 2 {
		if _, _, ok := c.Peek(strconv.Itoa(i)); !ok {
			t.Errorf("referenced key %d was evicted", i)
		}
	}
	// The sweep cleared the bits it passed: with no further Gets, the
	// next evictions take the oldest entries.
	_, ev := c.Put("more", nil, 0, true, at(time.Hour))
	if len(ev) != 1 || ev[0] != "0" {
		t.Errorf("next eviction = %v, want [0]", ev)
	}
	checkInvariants(t, c)
}

func TestNewEntryNotEvictedFirst(t *testing.T) {
	// A new entry goes behind the hand: with all entries unreferenced,
	// eviction is FIFO and never takes the entry just stored.
	c := New(Config{MaxEntries: 3})
	var evicted []string
	for i := range 10 {
		_, ev := c.Put(strconv.Itoa(i), nil, 0, true, at(time.Hour))
		evicted = append(evicted, ev...)
	}
	if want := []string{"0", "1", "2", "3", "4", "5", "6"}; !slices.Equal(evicted, want) {
		t.Fatalf("evicted %v, want %v", evicted, want)
	}
}

func TestExpiredEvictedFirst(t *testing.T) {
	c := New(Config{MaxEntries: 4})
	c.Put("a", nil, 0, true, at(time.Hour))
	c.Put("b", nil, 0, true, at(time.Hour))
	c.Put("c", nil, 0, true, at(time.Second))
	c.Put("d", nil, 0, true, at(time.Hour))
	for _, k := range []string{"a", "b", "c", "d"} {
		c.Get(k, at(0)) // all referenced
	}
	// Tell the cache the time: c has expired.
	if got := c.Expired(at(2*time.Second), nil); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("Expired = %v, want [c]", got)
	}
	_, ev := c.Put("e", nil, 0, true, at(time.Hour))
	if !slices.Equal(ev, []string{"c"}) {
		t.Fatalf("evicted %v, want [c] (expired entry, despite its reference bit)", ev)
	}
	checkInvariants(t, c)
}

func TestOversize(t *testing.T) {
	const maxBytes = 200
	big := make([]byte, maxBytes)
	tests := []struct {
		name     string
		existing bool
	}{
		{"new key", false},
		{"replacing an entry", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Config{MaxBytes: maxBytes})
			c.Put("other", []byte("x"), 1, true, at(time.Hour))
			if tt.existing {
				c.Put("k", []byte("small"), 1, true, at(time.Hour))
			}
			e, ev := c.Put("k", big, 2, true, at(time.Hour))
			if e != nil || !slices.Equal(ev, []string{"k"}) {
				t.Fatalf("Put oversize = %v, %v; want nil, [k]", e, ev)
			}
			if _, _, ok := c.Peek("k"); ok {
				t.Fatalf("oversize key is present")
			}
			if _, _, ok := c.Peek("other"); !ok {
				t.Fatalf("oversize Put evicted another entry")
			}
			if c.Bytes() != entrySize("other", []byte("x")) || c.Len() != 1 {
				t.Fatalf("Len %d Bytes %d after oversize Put", c.Len(), c.Bytes())
			}
			if c.Evictions() != 1 {
				t.Fatalf("Evictions() = %d, want 1", c.Evictions())
			}
			checkInvariants(t, c)
		})
	}
	// An entry of exactly MaxBytes fits.
	c := New(Config{MaxBytes: maxBytes})
	if e, ev := c.Put("k", big[:maxBytes-1-entryOverhead], 1, true, at(time.Hour)); e == nil || ev != nil {
		t.Fatalf("Put of exactly MaxBytes = %v, %v", e, ev)
	}
}

func TestReplace(t *testing.T) {
	c := New(Config{MaxEntries: 2})
	a1, _ := c.Put("a", []byte("one"), 1, true, at(time.Hour))
	c.Put("b", []byte("bb"), 1, true, at(time.Hour))
	a2, ev := c.Put("a", []byte("three!"), 2, true, at(2*time.Hour))
	if ev != nil {
		t.Fatalf("replacing Put evicted %v", ev)
	}
	if a2 == a1 || a1.Version != 1 || string(a1.Value) != "one" {
		t.Fatalf("old entry changed or reused")
	}
	if e, ok := c.Get("a", at(0)); !ok || e != a2 || e.Version != 2 {
		t.Fatalf("Get after replace = %v, %v", e, ok)
	}
	if want := entrySize("a", []byte("three!")) + entrySize("b", []byte("bb")); c.Bytes() != want || c.Len() != 2 {
		t.Fatalf("Len %d Bytes %d, want 2, %d", c.Len(), c.Bytes(), want)
	}
	// Replacing with a negative answer.
	a3, ev := c.Put("a", nil, 3, false, at(time.Hour))
	if ev != nil || a3.Found {
		t.Fatalf("Put negative = %+v, %v", a3, ev)
	}
	if want := entrySize("a", nil) + entrySize("b", []byte("bb")); c.Bytes() != want {
		t.Fatalf("Bytes %d, want %d", c.Bytes(), want)
	}
	if c.Evictions() != 0 {
		t.Fatalf("Evictions() = %d after replacements", c.Evictions())
	}
	checkInvariants(t, c)
}

func TestRemoveAndClear(t *testing.T) {
	c := New(Config{})
	for i := range 5 {
		c.Put(strconv.Itoa(i), []byte("v"), 0, i%2 == 0, at(time.Hour))
	}
	if !c.Remove("2") {
		t.Fatal("Remove(2) = false")
	}
	if c.Remove("2") || c.Remove("nope") {
		t.Fatal("Remove of absent key = true")
	}
	if _, _, ok := c.Peek("2"); ok {
		t.Fatal("removed key present")
	}
	checkInvariants(t, c)
	keys := c.Clear()
	slices.Sort(keys)
	if want := []string{"0", "1", "3", "4"}; !slices.Equal(keys, want) {
		t.Fatalf("Clear = %v, want %v", keys, want)
	}
	if c.Len() != 0 || c.Bytes() != 0 || c.Evictions() != 0 {
		t.Fatalf("after Clear: Len %d Bytes %d Evictions %d", c.Len(), c.Bytes(), c.Evictions())
	}
	if got := c.Expired(at(2*time.Hour), nil); len(got) != 0 {
		t.Fatalf("Expired after Clear = %v", got)
	}
	if c.Clear() != nil {
		t.Fatal("Clear of empty cache returned keys")
	}
	checkInvariants(t, c)
	// The cache is usable after Clear.
	c.Put("x", nil, 0, false, at(time.Hour))
	if _, ok := c.Get("x", at(0)); !ok {
		t.Fatal("Get after Clear+Put missed")
	}
	checkInvariants(t, c)
}

func TestExtend(t *testing.T) {
	tests := []struct {
		name      string
		setup     func(c *Cache, old *Entry) // runs after Put("k") returned old
		extendTo  time.Duration
		wantOK    bool
		wantStore time.Duration // deadline of the entry stored for "k"; -1: none
	}{
		{"later", nil, 20 * time.Second, true, 20 * time.Second},
		{"earlier never shortens", nil, 5 * time.Second, true, 10 * time.Second},
		{"equal", nil, 10 * time.Second, true, 10 * time.Second},
		{"after Remove", func(c *Cache, _ *Entry) { c.Remove("k") }, 20 * time.Second, false, -1},
		{"after replacing Put", func(c *Cache, _ *Entry) {
			c.Put("k", []byte("new"), 2, true, at(15*time.Second))
		}, 20 * time.Second, false, 15 * time.Second},
		{"after Clear", func(c *Cache, _ *Entry) { c.Clear() }, 20 * time.Second, false, -1},
		{"after Remove and re-Put", func(c *Cache, _ *Entry) {
			c.Remove("k")
			c.Put("k", nil, 3, false, at(12*time.Second))
		}, 20 * time.Second, false, 12 * time.Second},
		{"after eviction", func(c *Cache, _ *Entry) {
			c.Put("other", nil, 0, true, at(time.Hour)) // MaxEntries 1
		}, 20 * time.Second, false, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := New(Config{MaxEntries: 1})
			old, _ := c.Put("k", []byte("old"), 1, true, at(10*time.Second))
			if tt.setup != nil {
				tt.setup(c, old)
			}
			if got := c.Extend(old, at(0), at(tt.extendTo)); got != tt.wantOK {
				t.Fatalf("Extend = %v, want %v", got, tt.wantOK)
			}
			e, d, ok := c.Peek("k")
			if tt.wantStore < 0 {
				if ok {
					t.Fatalf("Extend resurrected the entry")
				}
			} else if !ok || !d.Equal(at(tt.wantStore)) {
				t.Fatalf("stored deadline = %v (present %v), want %v", d, ok, at(tt.wantStore))
			} else if tt.wantOK != (e == old) {
				t.Fatalf("stored entry is old = %v", e == old)
			}
			checkInvariants(t, c)
		})
	}
	if New(Config{}).Extend(nil, at(0), at(0)) {
		t.Error("Extend(nil) = true")
	}
	// An entry of another cache is not extended.
	c1, c2 := New(Config{}), New(Config{})
	e1, _ := c1.Put("k", nil, 0, true, at(time.Second))
	c2.Put("k", nil, 0, true, at(time.Second))
	if c2.Extend(e1, at(0), at(time.Hour)) {
		t.Error("Extend of another cache's entry = true")
	}
}

func TestExtendMakesGetHitLonger(t *testing.T) {
	c := New(Config{})
	e, _ := c.Put("k", nil, 0, true, at(time.Second))
	if !c.Extend(e, at(500*time.Millisecond), at(time.Minute)) {
		t.Fatal("Extend of a live entry failed")
	}
	if _, ok := c.Get("k", at(2*time.Second)); !ok {
		t.Fatal("Get missed after Extend")
	}
}

// TestEntryUntil: Until is the entry's deadline as a duration since the
// cache's epoch, the scale of GetAt's now, from Put on; a renewal (Extend)
// moves it to the new deadline, and neither a shorter deadline nor a
// refused Extend moves it back. With no Epoch, the epoch is the time New
// was called.
func TestEntryUntil(t *testing.T) {
	c := New(Config{Epoch: t0})
	e, _ := c.Put("k", []byte("v"), 1, true, at(10*time.Second))
	if got := e.Until(); got != 10*time.Second {
		t.Fatalf("Until after Put = %v, want 10s", got)
	}
	if _, ok := c.GetAt("k", e.Until()-1); !ok {
		t.Error("GetAt just before Until missed")
	}
	if _, ok := c.GetAt("k", e.Until()); ok {
		t.Error("GetAt at Until hit")
	}
	if !c.Extend(e, at(time.Second), at(25*time.Second)) {
		t.Fatal("Extend of a live entry failed")
	}
	if got := e.Until(); got != 25*time.Second {
		t.Fatalf("Until after Extend to 25s = %v, want 25s", got)
	}
	if !c.Extend(e, at(time.Second), at(20*time.Second)) {
		t.Fatal("Extend of a live entry to an earlier deadline failed")
	}
	if got := e.Until(); got != 25*time.Second {
		t.Errorf("Until after Extend to the earlier 20s = %v, want 25s still", got)
	}
	if c.Extend(e, at(25*time.Second), at(time.Hour)) {
		t.Fatal("Extend at the deadline revived the entry")
	}
	if got := e.Until(); got != 25*time.Second {
		t.Errorf("Until after a refused Extend = %v, want 25s still", got)
	}

	// The default epoch, and an entry of a negative lease.
	d := New(Config{})
	deadline := time.Now().Add(time.Minute)
	f, _ := d.Put("k", nil, 0, false, deadline)
	if want := deadline.Sub(d.epoch); f.Until() != want {
		t.Errorf("Until with the default epoch = %v, want %v (deadline - epoch)", f.Until(), want)
	}
}

// TestExtendDoesNotRevive: once an entry's lease has run out, a late
// renewal reply does not bring it back, whether or not Expired reported it.
func TestExtendDoesNotRevive(t *testing.T) {
	for _, report := range []bool{false, true} {
		c := New(Config{})
		e, _ := c.Put("k", []byte("old"), 1, true, at(10*time.Second))
		if report {
			c.Expired(at(11*time.Second), nil)
		}
		for _, now := range []time.Duration{10 * time.Second, 11 * time.Second} {
			if c.Extend(e, at(now), at(time.Hour)) {
				t.Fatalf("Extend at %v revived an entry whose lease ran out at 10s", now)
			}
		}
		if _, d, ok := c.Peek("k"); !ok || !d.Equal(at(10*time.Second)) {
			t.Fatalf("deadline %v after a refused Extend, want 10s", d)
		}
		if _, ok := c.Get("k", at(11*time.Second)); ok {
			t.Fatal("Get hit after a refused Extend")
		}
		checkInvariants(t, c)
	}
}

func TestTakeRenewals(t *testing.T) {
	c := New(Config{})
	deadlines := map[string]time.Duration{
		"past":       1 * time.Second,  // before now
		"atNow":      5 * time.Second,  // exactly now: in window
		"soon":       7 * time.Second,  // in window
		"soonUnused": 8 * time.Second,  // in window but never read
		"atHorizon":  15 * time.Second, // exactly horizon: out
		"late":       time.Minute,      // beyond horizon
	}
	for k, d := range deadlines {
		c.Put(k, []byte(k), 0, true, at(d))
	}
	for k := range deadlines {
		if k != "soonUnused" {
			c.Get(k, at(0))
		}
	}
	now, horizon := at(5*time.Second), at(15*time.Second)
	keysOf := func(es []*Entry) []string {
		var ks []string
		for _, e := range es {
			ks = append(ks, e.Key())
		}
		slices.Sort(ks)
		return ks
	}
	got := c.TakeRenewals(now, horizon, nil)
	if want := []string{"atNow", "soon"}; !slices.Equal(keysOf(got), want) {
		t.Fatalf("TakeRenewals = %v, want %v", keysOf(got), want)
	}
	if again := c.TakeRenewals(now, horizon, nil); len(again) != 0 {
		t.Fatalf("second TakeRenewals = %v, want none", keysOf(again))
	}
	// Reading again marks it used again; dst is appended to.
	c.Get("soon", at(6*time.Second))
	dst := []*Entry{nil}
	got = c.TakeRenewals(at(6*time.Second), horizon, dst)
	if len(got) != 2 || got[0] != nil || got[1].Key() != "soon" {
		t.Fatalf("TakeRenewals after Get = %v", got)
	}
	// "late" comes into the window later; its used mark is still set.
	got = c.TakeRenewals(at(50*time.Second), at(70*time.Second), nil)
	if want := []string{"late"}; !slices.Equal(keysOf(got), want) {
		t.Fatalf("TakeRenewals later = %v, want %v", keysOf(got), want)
	}
	// A replacing Put clears the used mark.
	c.Get("soonUnused", at(0))
	c.Put("soonUnused", nil, 1, false, at(8*time.Second))
	if got := c.TakeRenewals(now, horizon, nil); len(got) != 0 {
		t.Fatalf("TakeRenewals after replace = %v, want none", keysOf(got))
	}
}

func TestTakeRenewalsManyEntries(t *testing.T) {
	// Exercise the pruned heap walk against a brute-force answer.
	r := rand.New(rand.NewPCG(3, 4))
	c := New(Config{})
	want := map[string]bool{}
	now, horizon := at(100*time.Second), at(200*time.Second)
	for i := range 1000 {
		k := strconv.Itoa(i)
		d := at(time.Duration(r.IntN(300)) * time.Second)
		c.Put(k, nil, 0, true, d)
		if r.IntN(2) == 0 {
			c.Get(k, at(0))
			if !d.Before(now) && d.Before(horizon) {
				want[k] = true
			}
		}
	}
	got := c.TakeRenewals(now, horizon, nil)
	if len(got) != len(want) {
		t.Fatalf("TakeRenewals returned %d entries, want %d", len(got), len(want))
	}
	for _, e := range got {
		if !want[e.Key()] {
			t.Fatalf("unexpected entry %q", e.Key())
		}
	}
}

func TestExpired(t *testing.T) {
	c := New(Config{})
	c.Put("a", nil, 0, true, at(1*time.Second))
	c.Put("b", nil, 0, false, at(3*time.Second))
	c.Put("c", nil, 0, true, at(2*time.Second))
	c.Put("d", nil, 0, true, at(time.Hour))

	if got := c.Expired(at(0), nil); len(got) != 0 {
		t.Fatalf("Expired(0) = %v", got)
	}
	if got := c.Expired(at(3*time.Second), nil); !slices.Equal(got, []string{"a", "c", "b"}) {
		t.Fatalf("Expired(3s) = %v, want [a c b] (deadline order, at-deadline included)", got)
	}
	if got := c.Expired(at(4*time.Second), []string{"x"}); !slices.Equal(got, []string{"x"}) {
		t.Fatalf("Expired again = %v, want only dst", got)
	}
	// Expired entries stay for stale reads.
	if _, _, ok := c.Peek("a"); !ok || c.Len() != 4 {
		t.Fatal("expired entry removed")
	}
	// A new Put of a key re-arms its expiry.
	c.Put("a", nil, 1, true, at(5*time.Second))
	if got := c.Expired(at(4*time.Second), nil); len(got) != 0 {
		t.Fatalf("Expired before new deadline = %v", got)
	}
	if got := c.Expired(at(5*time.Second), nil); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("Expired after re-Put = %v, want [a]", got)
	}
	// So does an Extend that moves the deadline; one that does not, does not.
	eb, _, _ := c.Peek("b")
	c.Extend(eb, at(0), at(2*time.Second))
	if got := c.Expired(at(10*time.Second), nil); len(got) != 0 {
		t.Fatalf("Expired after non-moving Extend = %v", got)
	}
	c.Extend(eb, at(0), at(20*time.Second))
	if got := c.Expired(at(20*time.Second), nil); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("Expired after Extend = %v, want [b]", got)
	}
	// Removed entries are not reported.
	c.Remove("d")
	if got := c.Expired(at(2*time.Hour), nil); len(got) != 0 {
		t.Fatalf("Expired after Remove = %v", got)
	}
	checkInvariants(t, c)
}

func TestConcurrent(t *testing.T) {
	c := New(Config{MaxEntries: 64, MaxBytes: 64 * (entryOverhead + 40)})
	const (
		workers = 8
		iters   = 3000
		keys    = 200
	)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 99))
			var ren []*Entry
			var exp []string
			for i := range iters {
				key := "key" + strconv.Itoa(r.IntN(keys))
				now := at(time.Duration(i) * time.Millisecond)
				switch op := r.IntN(10); {
				case op < 5:
					if e, ok := c.Get(key, now); ok && (e.Key() != key || len(e.Value) > 40) {
						t.Errorf("Get(%q) returned entry for %q", key, e.Key())
					}
				case op < 7:
					e, ev := c.Put(key, make([]byte, r.IntN(40)), uint64(i), r.IntN(4) != 0, now.Add(time.Duration(r.IntN(100))*time.Millisecond))
					if e == nil || slices.Contains(ev, key) {
						t.Errorf("Put(%q) = %v, %v", key, e, ev)
					}
				case op < 8:
					c.Remove(key)
				case op < 9:
					if e, _, ok := c.Peek(key); ok {
						c.Extend(e, now, now.Add(50*time.Millisecond))
					}
				default:
					ren = c.TakeRenewals(now, now.Add(20*time.Millisecond), ren[:0])
					exp = c.Expired(now, exp[:0])
				}
				if i%500 == 0 {
					if n, b := c.Len(), c.Bytes(); n > 64 || b > c.maxBytes {
						t.Errorf("bounds exceeded: Len %d Bytes %d", n, b)
					}
				}
			}
		})
	}
	wg.Wait()
	checkInvariants(t, c)
}

// TestModel runs random operations against a reference map of which keys are
// present and with what, and checks that Get and Peek agree with it.
func TestModel(t *testing.T) {
	type modelEntry struct {
		version  uint64
		found    bool
		deadline time.Time
	}
	for seed := range uint64(5) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			c := New(Config{MaxEntries: 1 + r.IntN(40), MaxBytes: 300 + r.Int64N(3000)})
			model := map[string]modelEntry{}
			reported := map[string]bool{} // keys whose current expiry Expired reported
			now := at(0)
			for i := range 5000 {
				key := "k" + strconv.Itoa(r.IntN(60))
				switch op := r.IntN(100); {
				case op < 40:
					e, ok := c.Get(key, now)
					m, present := model[string(key)]
					wantHit := present && now.Before(m.deadline)
					if ok != wantHit {
						t.Fatalf("op %d: Get(%s) hit=%v, want %v", i, key, ok, wantHit)
					}
					if ok && (e.Version != m.version || e.Found != m.found) {
						t.Fatalf("op %d: Get(%s) = %+v, model %+v", i, key, e, m)
					}
				case op < 50:
					e, d, ok := c.Peek(key)
					m, present := model[string(key)]
					if ok != present || ok && (e.Version != m.version || !d.Equal(m.deadline)) {
						t.Fatalf("op %d: Peek(%s) = %v %v %v, model %+v %v", i, key, e, d, ok, m, present)
					}
				case op < 75:
					v := make([]byte, r.IntN(400))
					m := modelEntry{uint64(i), r.IntN(3) != 0, now.Add(time.Duration(r.IntN(20)) * time.Second)}
					e, ev := c.Put(string(key), v, m.version, m.found, m.deadline)
					delete(model, string(key))
					delete(reported, string(key))
					for _, k := range ev {
						if _, ok := model[k]; !ok && k != string(key) {
							t.Fatalf("op %d: evicted %q not in model", i, k)
						}
						delete(model, k)
						delete(reported, k)
					}
					if e != nil {
						model[string(key)] = m
					} else if entrySize(string(key), v) <= c.maxBytes {
						t.Fatalf("op %d: Put rejected an entry that fits", i)
					}
				case op < 82:
					_, present := model[string(key)]
					if got := c.Remove(key); got != present {
						t.Fatalf("op %d: Remove(%s) = %v, want %v", i, key, got, present)
					}
					delete(model, string(key))
					delete(reported, string(key))
				case op < 88:
					e, _, ok := c.Peek(key)
					if !ok {
						continue
					}
					nd := now.Add(time.Duration(r.IntN(20)) * time.Second)
					m := model[string(key)]
					live := now.Before(m.deadline)
					if got := c.Extend(e, now, nd); got != live {
						t.Fatalf("op %d: Extend of the current entry = %v, want %v (live)", i, got, live)
					}
					if live && nd.After(m.deadline) {
						m.deadline = nd
						model[string(key)] = m
						delete(reported, string(key))
					}
				case op < 93:
					for _, k := range c.Expired(now, nil) {
						m, ok := model[k]
						if !ok || now.Before(m.deadline) || reported[k] {
							t.Fatalf("op %d: Expired reported %q wrongly (model %+v %v, reported %v)", i, k, m, ok, reported[k])
						}
						reported[k] = true
					}
					for k, m := range model {
						if !now.Before(m.deadline) && !reported[k] {
							t.Fatalf("op %d: Expired missed %q", i, k)
						}
					}
				case op < 96:
					c.TakeRenewals(now, now.Add(5*time.Second), nil)
				case op < 97:
					keys := c.Clear()
					if len(keys) != len(model) {
						t.Fatalf("op %d: Clear returned %d keys, model has %d", i, len(keys), len(model))
					}
					clear(model)
					clear(reported)
				default:
					now = now.Add(time.Duration(r.IntN(3000)) * time.Millisecond)
				}
				if c.Len() != len(model) {
					t.Fatalf("op %d: Len() = %d, model has %d", i, c.Len(), len(model))
				}
				if i%100 == 0 {
					checkInvariants(t, c)
				}
			}
			checkInvariants(t, c)
		})
	}
}

func TestGetAllocs(t *testing.T) {
	c := New(Config{})
	c.Put("some/key", []byte("value"), 1, true, at(time.Hour))
	key := "some/key"
	now := at(0)
	if n := testing.AllocsPerRun(100, func() { c.Get(key, now) }); n != 0 {
		t.Errorf("Get allocates %v times", n)
	}
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "/tenant/42/object/" + strconv.Itoa(i)
	}
	return keys
}

func BenchmarkGet(b *testing.B) {
	c := New(Config{})
	keys := benchKeys(1000)
	for _, k := range keys {
		c.Put(string(k), []byte("value"), 1, true, at(time.Hour))
	}
	key, now := keys[500], at(0)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := c.Get(key, now); !ok {
			b.Fatal("miss")
		}
	}
}

func BenchmarkGetParallel(b *testing.B) {
	c := New(Config{})
	keys := benchKeys(1000)
	for _, k := range keys {
		c.Put(string(k), []byte("value"), 1, true, at(time.Hour))
	}
	now := at(0)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, ok := c.Get(keys[i%len(keys)], now); !ok {
				b.Fatal("miss")
			}
			i++
		}
	})
}

func BenchmarkPut(b *testing.B) {
	c := New(Config{MaxEntries: 10_000})
	keys := benchKeys(100_000)
	skeys := make([]string, len(keys))
	for i, k := range keys {
		skeys[i] = string(k)
	}
	value := []byte("value")
	now := at(0)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := i % len(skeys)
		c.Put(skeys[k], value, 1, true, now.Add(time.Hour))
		if i%4 == 0 {
			c.Get(keys[(k+len(keys)-5000)%len(keys)], now) // keep some entries referenced
		}
		i++
	}
	b.ReportMetric(float64(c.Evictions())/float64(b.N), "evictions/op")
}

func BenchmarkMaintenance(b *testing.B) {
	// Cost of the periodic TakeRenewals+Expired with a full default cache
	// whose deadlines are spread over 10s and a 1s renewal window.
	c := New(Config{})
	keys := benchKeys(100_000)
	for i, k := range keys {
		c.Put(string(k), []byte("value"), 1, true, at(time.Duration(i%10_000)*time.Millisecond))
	}
	var ren []*Entry
	var exp []string
	b.ReportAllocs()
	for b.Loop() {
		ren = c.TakeRenewals(at(0), at(time.Second), ren[:0])
		exp = c.Expired(at(0), exp[:0])
	}
}
