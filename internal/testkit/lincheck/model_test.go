package lincheck

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// op builds an operation of client c called at call and returned at ret.
func op(c int, call, ret int64, in Input, out Output) porcupine.Operation {
	return porcupine.Operation{ClientId: c, Call: call, Return: ret, Input: in, Output: out}
}

func get(k string) Input                     { return Input{Kind: Get, Key: k} }
func listed(k string) Input                  { return Input{Kind: Get, Key: k, Listed: true} }
func put(k, v string) Input                  { return Input{Kind: Put, Key: k, Value: v} }
func del(k string) Input                     { return Input{Kind: Delete, Key: k} }
func cas(k string, e uint64, v string) Input { return Input{Kind: CAS, Key: k, Expect: e, Value: v} }
func acquire(k string) Input                 { return Input{Kind: Acquire, Key: k} }
func fput(k, v string, t uint64) Input       { return Input{Kind: FencedPut, Key: k, Value: v, Token: t} }
func fdel(k string, t uint64) Input          { return Input{Kind: FencedDelete, Key: k, Token: t} }

func wrote(v uint64) Output { return Output{Outcome: OK, Version: v} }

// removed is the output of a delete that removed the key, at version v; a
// delete that removed nothing has absent's.
func removed(v uint64) Output { return Output{Outcome: OK, Found: true, Version: v} }
func read(val string, v uint64) Output {
	return Output{Outcome: OK, Found: true, Value: val, Version: v}
}
func cached(val string, v uint64) Output {
	return Output{Outcome: OK, Found: true, Value: val, Version: v, Cached: true}
}
func absent(v uint64) Output   { return Output{Outcome: OK, Version: v} }
func granted(t uint64) Output  { return Output{Outcome: OK, Token: t} }
func outcome(o Outcome) Output { return Output{Outcome: o} }

// cachedAbsent is the output of a Get that a cached listing answered: the
// key is not in it, at version 0.
func cachedAbsent() Output { return Output{Outcome: OK, Cached: true} }

// TestModel checks small histories whose verdict is known, among them the
// ways a lease cache goes wrong: a read of a value already overwritten, a
// version going back, a fenced write committing after its lease ended.
func TestModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		ops  []porcupine.Operation
	}{
		{"read after write", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(1, 20, 30, get("a"), cached("x", 1)),
		}},
		{"never written", true, []porcupine.Operation{
			op(0, 0, 10, get("a"), absent(0)),
		}},
		{"read concurrent with a write sees either", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 50, put("a", "y"), wrote(2)),
			op(1, 25, 30, get("a"), cached("x", 1)),
			op(2, 26, 31, get("a"), read("y", 2)),
		}},
		{"stale read after the write returned", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, put("a", "y"), wrote(2)),
			op(1, 40, 41, get("a"), cached("x", 1)),
		}},
		{"reads go back in time", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 100, put("a", "y"), wrote(2)),
			op(1, 30, 40, get("a"), read("y", 2)),
			op(2, 50, 60, get("a"), cached("x", 1)),
		}},
		{"wrong version for the value", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(3)),
			op(1, 20, 30, get("a"), read("x", 4)),
		}},
		{"versions go back", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(5)),
			op(0, 20, 30, put("a", "y"), wrote(4)),
		}},
		{"delete", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, del("a"), removed(2)),
			op(1, 40, 50, get("a"), absent(2)),
		}},
		{"a delete of a missing key removes nothing", true, []porcupine.Operation{
			op(0, 0, 10, del("a"), absent(0)),
			op(1, 20, 30, get("a"), absent(0)),
			op(0, 40, 50, put("a", "x"), wrote(1)),
			op(0, 60, 70, del("a"), removed(2)),
			op(1, 80, 90, del("a"), absent(2)),
			op(1, 100, 110, cas("a", 0, "y"), wrote(3)),
		}},
		{"a delete that removed nothing while the key existed", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(1, 20, 30, del("a"), absent(1)),
		}},
		{"a delete that removed a key that never existed", false, []porcupine.Operation{
			op(0, 0, 10, del("a"), removed(1)),
		}},
		{"a delete that removed nothing at another version", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, del("a"), removed(2)),
			op(1, 40, 50, del("a"), absent(5)),
		}},
		{"a listing sees a deleted key absent, at whatever version", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(1, 15, 18, listed("a"), read("x", 1)),
			op(0, 20, 30, del("a"), removed(2)),
			op(1, 40, 50, listed("a"), absent(0)),
			op(2, 55, 60, listed("b"), absent(0)),
		}},
		{"a listing that misses a key written before it", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(1, 20, 30, listed("a"), absent(0)),
		}},
		{"a listing that shows a deleted key", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, del("a"), removed(2)),
			op(1, 40, 50, listed("a"), read("x", 1)),
		}},
		{"a Get from a cached listing sees a deleted key absent at version 0", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, del("a"), removed(2)),
			op(1, 40, 50, get("a"), cachedAbsent()),
			op(1, 60, 70, get("a"), absent(2)),
		}},
		{"a Get at version 0 of a key that is present", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(1, 20, 30, get("a"), cachedAbsent()),
		}},
		{"a Get at version 0 of a key deleted and created again", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, del("a"), removed(2)),
			op(0, 40, 50, put("a", "y"), wrote(3)),
			op(1, 60, 70, get("a"), cachedAbsent()),
		}},
		{"a Get of a deleted key at another version than 0 or its deletion's", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, del("a"), removed(2)),
			op(1, 40, 50, get("a"), absent(5)),
		}},
		{"read of a deleted value", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, del("a"), removed(2)),
			op(1, 40, 50, get("a"), read("x", 1)),
		}},
		{"cas", true, []porcupine.Operation{
			op(0, 0, 10, cas("a", 0, "x"), wrote(1)),
			op(0, 20, 30, cas("a", 0, "y"), outcome(Mismatch)),
			op(0, 40, 50, cas("a", 1, "z"), wrote(2)),
			op(1, 60, 70, get("a"), read("z", 2)),
		}},
		{"cas matches 0 on a deleted key", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, del("a"), removed(2)),
			op(0, 40, 50, cas("a", 0, "y"), wrote(3)),
		}},
		{"cas mismatch at the expected version", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(1, 20, 30, cas("a", 1, "y"), outcome(Mismatch)),
		}},
		{"cas success at another version", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, put("a", "y"), wrote(2)),
			op(1, 40, 50, cas("a", 1, "z"), wrote(3)),
		}},
		{"unknown write read later", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), outcome(Unknown)),
			op(1, 20, 30, get("a"), read("x", 7)),
			op(1, 40, 50, get("a"), cached("x", 7)),
		}},
		{"unknown write read before its call", false, []porcupine.Operation{
			op(0, 20, 30, put("a", "x"), outcome(Unknown)),
			op(1, 0, 10, get("a"), read("x", 7)),
		}},
		{"unknown write read at two versions", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), outcome(Unknown)),
			op(1, 20, 30, get("a"), read("x", 7)),
			op(1, 40, 50, get("a"), read("x", 8)),
		}},
		{"unknown write may never happen", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, put("a", "y"), outcome(Unknown)),
			op(1, 40, 50, get("a"), read("x", 1)),
		}},
		{"unknown delete", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, del("a"), outcome(Unknown)),
			op(1, 40, 50, get("a"), absent(9)),
			op(1, 60, 70, cas("a", 0, "y"), wrote(10)),
		}},
		{"abandoned write changes nothing", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, put("a", "y"), outcome(NoEffect)),
			op(1, 40, 50, get("a"), read("y", 2)),
		}},
		{"write lease", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(1, 20, 30, acquire("a"), granted(5)),
			op(1, 40, 50, fput("a", "y", 5), wrote(2)),
			op(1, 60, 61, get("a"), cached("y", 2)),
			op(1, 70, 80, fdel("a", 5), removed(3)),
			op(2, 90, 100, get("a"), absent(3)),
		}},
		{"fenced write after another client's write", false, []porcupine.Operation{
			op(1, 0, 10, acquire("a"), granted(5)),
			op(0, 20, 30, put("a", "x"), wrote(1)),
			op(1, 40, 50, fput("a", "y", 5), wrote(2)),
		}},
		{"fenced write after a newer grant", false, []porcupine.Operation{
			op(1, 0, 10, acquire("a"), granted(5)),
			op(2, 20, 30, acquire("a"), granted(6)),
			op(1, 40, 50, fput("a", "y", 5), wrote(1)),
		}},
		{"fenced write after a failed cas", false, []porcupine.Operation{
			op(1, 0, 10, acquire("a"), granted(5)),
			op(0, 20, 30, cas("a", 3, "x"), outcome(Mismatch)),
			op(1, 40, 50, fput("a", "y", 5), wrote(1)),
		}},
		{"fenced write refused", true, []porcupine.Operation{
			op(1, 0, 10, acquire("a"), granted(5)),
			op(1, 40, 50, fput("a", "y", 5), outcome(Fenced)),
			op(2, 60, 70, get("a"), absent(0)),
		}},
		{"fenced write concurrent with a newer grant", true, []porcupine.Operation{
			op(1, 0, 10, acquire("a"), granted(5)),
			op(2, 20, 60, acquire("a"), granted(6)),
			op(1, 30, 40, fput("a", "y", 5), wrote(1)),
		}},
		{"tokens go back", false, []porcupine.Operation{
			op(1, 0, 10, acquire("a"), granted(5)),
			op(2, 20, 30, acquire("a"), granted(4)),
		}},
		{"unknown acquisition ends the old token", false, []porcupine.Operation{
			op(1, 0, 10, acquire("a"), granted(5)),
			op(2, 20, 30, acquire("a"), outcome(Unknown)),
			op(2, 40, 50, put("a", "x"), wrote(1)),
			op(1, 60, 70, fput("a", "y", 5), wrote(2)),
		}},
		{"keys are independent", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(2)),
			op(0, 20, 30, put("b", "y"), wrote(1)),
			op(1, 40, 50, get("b"), read("y", 1)),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := porcupine.CheckOperations(Model, tc.ops)
			if res != tc.ok {
				t.Errorf("linearizable = %v, want %v", res, tc.ok)
			}
		})
	}
}

// TestStepUnknownOutcomes checks the states an unknown write leads to.
func TestStepUnknownOutcomes(t *testing.T) {
	s := keyState{found: true, value: "x", version: 3, pinned: true, token: 5, tokenKnown: true, live: true}
	for _, tc := range []struct {
		in   Input
		want int
	}{
		{put("a", "y"), 2},
		{del("a"), 2},
		{cas("a", 3, "y"), 2},
		{cas("a", 2, "y"), 1}, // cannot match: only the unchanged state
		{fput("a", "y", 5), 2},
		{fput("a", "y", 4), 1},
		{acquire("a"), 2},
	} {
		next := stepKey(s, tc.in, outcome(Unknown))
		if len(next) != tc.want {
			t.Errorf("%s: %d next states %v, want %d", describe(tc.in, outcome(Unknown)), len(next), next, tc.want)
		}
		if next[0] != s {
			t.Errorf("%s: first state %v, want unchanged", describe(tc.in, outcome(Unknown)), next[0])
		}
	}
}

// TestRecorderHistory checks the history the recorder builds: failed reads
// and unknown writes that nobody read are left out, and unknown operations
// return after everything else.
func TestRecorderHistory(t *testing.T) {
	r := NewRecorder()
	end := func(c int, in Input, out Output) { r.End(r.Begin(c, in), out) }
	end(0, put("a", "x"), wrote(1))
	end(1, get("a"), cached("x", 1))
	end(1, get("a"), Output{Outcome: NoEffect, Err: "unavailable"})
	end(0, put("a", "seen"), outcome(Unknown))
	end(0, del("a"), outcome(Unknown))
	end(2, get("a"), read("seen", 9))
	end(2, cas("a", 1, "z"), outcome(Mismatch))
	end(0, put("a", "lost"), outcome(Unknown)) // after the mismatch: nothing can see it

	h, s := r.History()
	want := Summary{Ops: 6, Reads: 2, Cached: 1, Writes: 1, Refused: 1, Unknown: 3, Unneeded: 1}
	if s != want {
		t.Errorf("summary %+v, want %+v", s, want)
	}
	var last int64
	for _, o := range h {
		if o.Output.(Output).Outcome != Unknown {
			last = max(last, o.Return)
		}
	}
	for _, o := range h {
		in := o.Input.(Input)
		if in.Value == "lost" {
			t.Errorf("unknown write nobody read is in the history")
		}
		if o.Output.(Output).Outcome == Unknown && o.Return <= last {
			t.Errorf("%s returns at %d, before the end %d", describe(in, o.Output.(Output)), o.Return, last)
		}
		if o.Return < o.Call {
			t.Errorf("%s returns before its call", describe(in, o.Output.(Output)))
		}
	}
	if res, err := Check(h, time.Minute, filepath.Join(t.TempDir(), "viz.html")); res != porcupine.Ok || err != nil {
		t.Errorf("Check = %s, %v; want Ok", res, err)
	}
}

// TestRecorderHistoryMismatch checks that a write of unknown outcome that
// nobody read stays in the history when a compare-and-swap on its key
// mismatched after its call: the mismatch may be its effect. Left out,
// each history would be illegal: a CAS of an absent key expecting 0, or of
// a key at the version just read, cannot mismatch unless a write took
// effect in between (TestLinearizableCluster/cut, where the write was a
// fenced put that a deposed leader appended and the next one committed).
func TestRecorderHistoryMismatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
	}{
		{"absent key, expecting 0", []porcupine.Operation{
			op(0, 0, 10, acquire("a"), granted(2)),
			op(0, 20, 30, fdel("a", 2), absent(0)),
			op(1, 31, 35, get("a"), absent(0)),
			op(0, 40, 50, fput("a", "unread", 2), outcome(Unknown)),
			op(0, 60, 70, cas("a", 0, "z"), outcome(Mismatch)),
		}},
		{"version just read", []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(1, 20, 30, get("a"), read("x", 1)),
			op(0, 40, 50, put("a", "unread"), outcome(Unknown)),
			op(1, 60, 70, cas("a", 1, "z"), outcome(Mismatch)),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRecorder()
			r.ops = tc.ops
			h, s := r.History()
			if s.Unneeded != 0 {
				t.Errorf("%d operations left out, want 0", s.Unneeded)
			}
			if res, err := Check(h, time.Minute, filepath.Join(t.TempDir(), "viz.html")); res != porcupine.Ok {
				t.Errorf("Check = %s, %v; want Ok", res, err)
			}
		})
	}
}

// TestRecorderHistoryTTL checks that the writes of unknown outcome on a
// key with TTL leases stay in the history, read or not: whether one took
// effect shows when the lease ends. Left out, the first history would
// read the key deleted at a revision that nothing deleted it at, and the
// second would revoke a lease the key was still attached to without
// deleting it. Grants and keep-alives of unknown outcome, which change no
// key, are still left out.
func TestRecorderHistoryTTL(t *testing.T) {
	for _, tc := range []struct {
		name     string
		ops      []porcupine.Operation
		unneeded int
	}{
		{"attached, unread, deleted by the revocation", []porcupine.Operation{
			op(0, 0, 10, grantTTL("a"), leaseGranted(5)),
			op(0, 20, 30, leasePut("a", "lost", 5), outcome(Unknown)),
			op(0, 40, 50, revoke("a", 5), revoked(2)),
			op(1, 60, 70, get("a"), absent(2)),
			op(0, 80, 90, grantTTL("a"), outcome(Unknown)),
		}, 1},
		{"detached, unread, so the revocation deletes nothing", []porcupine.Operation{
			op(0, 0, 10, grantTTL("a"), leaseGranted(5)),
			op(0, 20, 30, leasePut("a", "x", 5), wrote(1)),
			op(0, 40, 50, put("a", "lost"), outcome(Unknown)),
			op(0, 55, 58, keepAlive("a", 5), outcome(Unknown)),
			op(0, 60, 70, revoke("a", 5), revoked(0)),
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRecorder()
			r.ops = tc.ops
			h, s := r.History()
			if s.Unneeded != tc.unneeded {
				t.Errorf("%d operations left out, want %d", s.Unneeded, tc.unneeded)
			}
			if res, err := Check(h, time.Minute, filepath.Join(t.TempDir(), "viz.html")); res != porcupine.Ok {
				t.Errorf("Check = %s, %v; want Ok", res, err)
			}
		})
	}
}

// TestRecorderConcurrent records from many goroutines, under -race.
func TestRecorderConcurrent(t *testing.T) {
	r := NewRecorder()
	var wg sync.WaitGroup
	for c := range 8 {
		wg.Go(func() {
			for range 100 {
				r.End(r.Begin(c, get("a")), absent(0))
			}
		})
	}
	wg.Wait()
	h, s := r.History()
	if len(h) != 800 || s.Reads != 800 {
		t.Fatalf("%d ops, summary %v; want 800 reads", len(h), s)
	}
	if res, err := Check(h, time.Minute, filepath.Join(t.TempDir(), "viz.html")); res != porcupine.Ok {
		t.Fatalf("Check = %s, %v", res, err)
	}
}

// TestCheckWritesVisualisation checks that a violation names a
// visualisation file that exists and shows the operations.
func TestCheckWritesVisualisation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "violation.html")
	h := []porcupine.Operation{
		op(0, 0, 10, put("k", "new"), wrote(2)),
		op(1, 20, 30, get("k"), cached("old", 1)),
	}
	res, err := Check(h, time.Minute, path)
	if res != porcupine.Illegal || err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Check = %s, %v; want Illegal naming %s", res, err, path)
	}
	html, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`get(k) → \"old\" v1 (cached)`, `put(k, \"new\") → v2`} {
		if !strings.Contains(string(html), want) {
			t.Errorf("visualisation lacks %s", want)
		}
	}
	if _, err := Check(h[:1], time.Minute, path+".ok"); err != nil {
		t.Errorf("linearizable history: %v", err)
	}
	if _, err := os.Stat(path + ".ok"); !os.IsNotExist(err) {
		t.Errorf("linearizable history wrote a visualisation: %v", err)
	}
}

func grantTTL(k string) Input              { return Input{Kind: Grant, Key: k} }
func leasePut(k, v string, l uint64) Input { return Input{Kind: LeasePut, Key: k, Value: v, Lease: l} }
func keepAlive(k string, l uint64) Input   { return Input{Kind: KeepAlive, Key: k, Lease: l} }
func revoke(k string, l uint64) Input      { return Input{Kind: Revoke, Key: k, Lease: l} }
func timeToLive(k string, l uint64) Input  { return Input{Kind: TimeToLive, Key: k, Lease: l} }
func expire(k string, l uint64) Input      { return Input{Kind: Expire, Key: k, Lease: l} }
func leaseGranted(l uint64) Output         { return Output{Outcome: OK, Lease: l} }
func lives() Output                        { return Output{Outcome: OK} }
func revoked(v uint64) Output              { return Output{Outcome: OK, Version: v} }
func notFound() Output                     { return Output{Outcome: NotFound} }

// TestModelTTLLeases checks small histories of TTL leases whose verdict is
// known: a key attached to a lease disappears when the lease ends, by
// revocation or expiry, not before, and not after; a lease that ended is
// never renewed, nor attached to.
func TestModelTTLLeases(t *testing.T) {
	const end = 1000 // the history's end, where an expiry returns
	for _, tc := range []struct {
		name string
		ok   bool
		ops  []porcupine.Operation
	}{
		{"attach, renew, revoke", true, []porcupine.Operation{
			op(0, 0, 10, grantTTL("a"), leaseGranted(5)),
			op(0, 20, 30, leasePut("a", "x", 5), wrote(1)),
			op(0, 40, 50, keepAlive("a", 5), lives()),
			op(1, 55, 60, get("a"), cached("x", 1)),
			op(0, 70, 80, revoke("a", 5), revoked(2)),
			op(1, 90, 95, get("a"), absent(2)),
			op(0, 100, 110, keepAlive("a", 5), notFound()),
			op(0, 120, 130, timeToLive("a", 5), notFound()),
			op(0, 140, 150, leasePut("a", "y", 5), notFound()),
		}},
		{"key gone before its lease was revoked", false, []porcupine.Operation{
			op(0, 0, 10, grantTTL("a"), leaseGranted(5)),
			op(0, 20, 30, leasePut("a", "x", 5), wrote(1)),
			op(1, 40, 50, get("a"), absent(2)),
			op(0, 60, 70, revoke("a", 5), revoked(2)),
		}},
		{"key still there after its lease was revoked", false, []porcupine.Operation{
			op(0, 0, 10, grantTTL("a"), leaseGranted(5)),
			op(0, 20, 30, leasePut("a", "x", 5), wrote(1)),
			op(0, 40, 50, revoke("a", 5), revoked(2)),
			op(1, 60, 70, get("a"), cached("x", 1)),
		}},
		{"renewed after it was revoked", false, []porcupine.Operation{
			op(0, 0, 10, grantTTL("a"), leaseGranted(5)),
			op(0, 40, 50, revoke("a", 5), revoked(0)),
			op(1, 60, 70, keepAlive("a", 5), lives()),
		}},
		{"attached to a lease never granted", false, []porcupine.Operation{
			op(0, 0, 10, leasePut("a", "x", 7), wrote(1)),
		}},
		{"a lease never granted is not found", true, []porcupine.Operation{
			op(0, 0, 10, leasePut("a", "x", 7), notFound()),
			op(0, 20, 30, keepAlive("a", 7), notFound()),
		}},
		{"not found while it lives", false, []porcupine.Operation{
			op(0, 0, 10, grantTTL("a"), leaseGranted(5)),
			op(0, 20, 30, keepAlive("a", 5), notFound()),
		}},
		{"lease ids go back", false, []porcupine.Operation{
			op(0, 0, 10, grantTTL("a"), leaseGranted(5)),
			op(1, 20, 30, grantTTL("a"), leaseGranted(4)),
		}},
		{"expired once it might", true, []porcupine.Operation{
			op(0, 0, 10, grantTTL("a"), leaseGranted(5)),
			op(0, 20, 30, leasePut("a", "x", 5), wrote(1)),
			op(1, 100, 110, get("a"), read("x", 1)),
			op(2, 100, end, expire("a", 5), lives()),
			op(1, 200, 210, get("a"), absent(2)),
			op(1, 220, 230, keepAlive("a", 5), notFound()),
		}},
		{"expired before it might", false, []porcupine.Operation{
			op(0, 0, 10, grantTTL("a"), leaseGranted(5)),
			op(0, 20, 30, leasePut("a", "x", 5), wrote(1)),
			op(1, 50, 60, get("a"), absent(2)),
			op(2, 100, end, expire("a", 5), lives()),
		}},
		{"a key put again without the lease stays", true, []porcupine.Operation{
			op(0, 0, 10, grantTTL("a"), leaseGranted(5)),
			op(0, 20, 30, leasePut("a", "x", 5), wrote(1)),
			op(0, 40, 50, put("a", "y"), wrote(2)),
			op(0, 60, 70, revoke("a", 5), revoked(0)),
			op(1, 80, 90, get("a"), read("y", 2)),
		}},
		{"a key moved to another lease stays when the first ends", true, []porcupine.Operation{
			op(0, 0, 10, grantTTL("a"), leaseGranted(5)),
			op(0, 20, 30, leasePut("a", "x", 5), wrote(1)),
			op(1, 35, 38, grantTTL("a"), leaseGranted(6)),
			op(1, 40, 50, leasePut("a", "y", 6), wrote(2)),
			op(2, 30, end, expire("a", 5), lives()),
			op(1, 80, 90, get("a"), read("y", 2)),
			op(1, 100, 110, keepAlive("a", 6), lives()),
		}},
		{"a revocation of unknown outcome may delete the key", true, []porcupine.Operation{
			op(0, 0, 10, grantTTL("a"), leaseGranted(5)),
			op(0, 20, 30, leasePut("a", "x", 5), wrote(1)),
			op(0, 40, end, revoke("a", 5), outcome(Unknown)),
			op(1, 60, 70, get("a"), absent(2)),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if res := porcupine.CheckOperations(Model, tc.ops); res != tc.ok {
				t.Errorf("linearizable = %v, want %v", res, tc.ok)
			}
		})
	}
}

func txn(ifs []Compare, then, els []TxnOp) Input {
	return Input{Kind: Txn, If: ifs, Then: then, Else: els}
}
func putOp(k, v string) TxnOp { return TxnOp{Key: k, Value: v} }
func delOp(k string) TxnOp    { return TxnOp{Key: k, Delete: true} }
func under(op TxnOp, token uint64) TxnOp {
	op.Token = token
	return op
}
func cmp(k string, o CompareOp, v uint64) Compare { return Compare{Key: k, Op: o, Version: v} }

// rename is a file system's rename of a to b, putting v: if a exists and
// b does not, b is put and a deleted; else a is put.
func rename(a, b, v string) Input {
	return txn([]Compare{cmp(a, Exists, 0), cmp(b, Absent, 0)}, []TxnOp{putOp(b, v), delOp(a)}, []TxnOp{putOp(a, v)})
}

// casBoth puts a and b if both are at the versions given, and else does
// nothing.
func casBoth(a string, va uint64, b string, vb uint64, v string) Input {
	return txn([]Compare{cmp(a, VersionIs, va), cmp(b, VersionIs, vb)}, []TxnOp{putOp(a, v), putOp(b, v)}, nil)
}

func committed(succeeded bool, rev uint64) Output {
	return Output{Outcome: OK, Succeeded: succeeded, Version: rev}
}

// TestModelTxn checks small histories of transactions whose verdict is
// known: a transaction's writes are seen all or none, at one revision; the
// branch it says it applied must be the one its compares chose; a branch
// that changes nothing takes the store's revision; its fenced writes need
// their write leases, and its other writes recall theirs.
func TestModelTxn(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
		ops  []porcupine.Operation
	}{
		{"rename", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, rename("a", "b", "y"), committed(true, 2)),
			op(1, 40, 50, get("b"), read("y", 2)),
			op(1, 60, 70, get("a"), absent(2)),
			op(1, 80, 90, listed("a"), absent(0)),
		}},
		{"rename onto a key that exists takes the else branch", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, put("b", "z"), wrote(2)),
			op(0, 40, 50, rename("a", "b", "y"), committed(false, 3)),
			op(1, 60, 70, get("a"), read("y", 3)),
			op(1, 80, 90, get("b"), read("z", 2)),
		}},
		{"a reader sees one key of a transaction's writes and not the other", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, rename("a", "b", "y"), committed(true, 2)),
			op(1, 40, 50, get("b"), read("y", 2)),
			op(1, 60, 70, get("a"), cached("x", 1)),
		}},
		{"a reader sees the old of one key after the new of the other, the transaction concurrent", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, put("b", "z"), wrote(2)),
			op(0, 40, 200, casBoth("a", 1, "b", 2, "y"), committed(true, 3)),
			op(1, 50, 60, get("a"), read("y", 3)),
			op(2, 70, 80, get("b"), read("z", 2)),
		}},
		{"succeeded though a compare could not hold", false, []porcupine.Operation{
			op(0, 0, 10, put("b", "z"), wrote(1)),
			op(0, 20, 30, rename("a", "b", "y"), committed(true, 2)),
		}},
		{"else though every compare held", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, rename("a", "b", "y"), committed(false, 2)),
		}},
		{"compare-and-swap of two keys", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, put("b", "z"), wrote(2)),
			op(0, 40, 50, casBoth("a", 1, "b", 2, "y"), committed(true, 3)),
			op(1, 60, 70, get("a"), read("y", 3)),
			op(1, 80, 90, get("b"), cached("y", 3)),
			op(0, 100, 110, casBoth("a", 1, "b", 3, "w"), committed(false, 3)),
			op(0, 120, 130, casBoth("a", 0, "c", 0, "v"), committed(false, 3)),
		}},
		{"compare-and-swap of two keys at versions they were never at", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, put("b", "z"), wrote(2)),
			op(0, 40, 50, casBoth("a", 1, "b", 1, "y"), committed(true, 3)),
		}},
		{"a branch that changes nothing takes the store's revision", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, put("b", "z"), wrote(2)),
			op(0, 40, 50, casBoth("a", 5, "b", 2, "y"), committed(false, 2)),
			op(0, 60, 70, txn(nil, []TxnOp{delOp("c"), delOp("d")}, nil), committed(true, 0)),
			op(0, 80, 90, txn([]Compare{cmp("c", Absent, 0)}, []TxnOp{delOp("c")}, nil), committed(true, 0)),
		}},
		{"a branch that changes nothing at a revision the store has passed", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, put("b", "z"), wrote(2)),
			op(0, 40, 50, casBoth("a", 5, "b", 2, "y"), committed(false, 1)),
		}},
		{"a transaction's revision not above its keys' versions", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(5)),
			op(0, 20, 30, txn([]Compare{cmp("a", Exists, 0)}, []TxnOp{putOp("b", "y")}, nil), committed(true, 5)),
		}},
		{"a delete in a transaction leaves the key absent at its revision", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, rename("a", "b", "y"), committed(true, 2)),
			op(1, 40, 50, get("a"), absent(1)),
		}},
		{"value compares", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, txn([]Compare{{Key: "a", Op: ValueIs, Value: "x"}, {Key: "b", Op: ValueIsNot, Value: "x"}}, nil, []TxnOp{putOp("c", "y")}), committed(false, 2)),
			op(0, 40, 50, txn([]Compare{{Key: "a", Op: ValueIsNot, Value: "w"}, cmp("a", VersionAbove, 0), cmp("a", VersionBelow, 2), cmp("b", VersionIsNot, 3)}, []TxnOp{putOp("b", "y")}, nil), committed(true, 3)),
		}},
		{"a value compare held of an absent key", false, []porcupine.Operation{
			op(0, 0, 10, txn([]Compare{{Key: "a", Op: ValueIsNot, Value: "x"}}, []TxnOp{putOp("a", "y")}, nil), committed(true, 1)),
		}},
		{"concurrent renames: one wins", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 50, rename("a", "b", "y"), committed(false, 3)),
			op(1, 20, 50, rename("a", "b", "z"), committed(true, 2)),
			op(2, 60, 70, get("a"), read("y", 3)),
			op(2, 80, 90, get("b"), read("z", 2)),
		}},
		{"a transaction of unknown outcome applies whole", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 1000, rename("a", "b", "y"), outcome(Unknown)),
			op(1, 40, 50, get("b"), read("y", 7)),
			op(1, 60, 70, get("a"), absent(7)),
		}},
		{"a transaction of unknown outcome applied in part", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 1000, rename("a", "b", "y"), outcome(Unknown)),
			op(1, 40, 50, get("b"), read("y", 7)),
			op(1, 60, 70, get("a"), read("x", 1)),
		}},
		{"a transaction of unknown outcome applied at two revisions", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 1000, rename("a", "b", "y"), outcome(Unknown)),
			op(1, 40, 50, get("b"), read("y", 7)),
			op(1, 60, 70, get("a"), absent(8)),
		}},
		{"a transaction of unknown outcome compared at an unknown version", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 1000, put("a", "y"), outcome(Unknown)),
			op(1, 40, 50, txn([]Compare{cmp("a", VersionIs, 1)}, nil, []TxnOp{putOp("b", "z")}), committed(false, 4)),
			op(1, 60, 70, casBoth("a", 3, "b", 4, "w"), committed(true, 5)),
		}},
		{"a compare that failed shows a write of unknown outcome", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 1000, put("a", "y"), outcome(Unknown)),
			op(1, 40, 50, txn([]Compare{cmp("a", VersionBelow, 2)}, nil, []TxnOp{putOp("b", "z")}), committed(false, 4)),
			op(1, 60, 70, txn([]Compare{cmp("a", VersionAbove, 1)}, []TxnOp{putOp("b", "w")}, nil), committed(true, 5)),
		}},
		{"a compare that held at a version a write of unknown outcome left", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 1000, put("a", "y"), outcome(Unknown)),
			op(1, 40, 50, txn([]Compare{cmp("a", VersionBelow, 2)}, nil, []TxnOp{putOp("b", "z")}), committed(false, 4)),
			op(1, 60, 70, txn([]Compare{cmp("a", VersionIs, 1)}, []TxnOp{putOp("b", "w")}, nil), committed(true, 5)),
		}},
		{"an abandoned transaction changes nothing", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 30, rename("a", "b", "y"), outcome(NoEffect)),
			op(1, 40, 50, get("b"), read("y", 2)),
		}},
		{"a transaction under a write lease", true, []porcupine.Operation{
			op(0, 0, 10, acquire("a"), granted(5)),
			op(0, 20, 30, txn([]Compare{cmp("b", Exists, 0)}, []TxnOp{under(putOp("a", "x"), 5), putOp("b", "y")}, []TxnOp{under(putOp("a", "z"), 5)}), committed(false, 1)),
			op(0, 40, 50, get("a"), cached("z", 1)),
			op(0, 60, 70, fput("a", "w", 5), wrote(2)),
			op(1, 80, 90, txn([]Compare{cmp("a", Exists, 0)}, []TxnOp{putOp("b", "v")}, nil), committed(true, 3)),
			op(0, 100, 110, fput("a", "u", 5), wrote(4)),
		}},
		{"a transaction under a write lease another client's write recalled", false, []porcupine.Operation{
			op(0, 0, 10, acquire("a"), granted(5)),
			op(1, 20, 30, put("a", "x"), wrote(1)),
			op(0, 40, 50, txn(nil, []TxnOp{under(putOp("a", "y"), 5)}, nil), committed(true, 2)),
		}},
		{"a transaction's write recalls the write lease", false, []porcupine.Operation{
			op(0, 0, 10, acquire("a"), granted(5)),
			op(1, 20, 30, txn([]Compare{cmp("a", VersionIs, 9)}, []TxnOp{putOp("a", "x")}, []TxnOp{delOp("a")}), committed(false, 0)),
			op(0, 40, 50, fput("a", "y", 5), wrote(1)),
		}},
		{"a transaction under a write lease refused", true, []porcupine.Operation{
			op(0, 0, 10, acquire("a"), granted(5)),
			op(1, 20, 30, acquire("a"), granted(6)),
			op(0, 40, 50, txn(nil, []TxnOp{under(putOp("a", "y"), 5)}, nil), outcome(Fenced)),
			op(1, 60, 70, get("a"), absent(0)),
		}},
		{"a transaction under no write lease refused as fenced", false, []porcupine.Operation{
			op(0, 0, 10, txn(nil, []TxnOp{putOp("a", "y")}, nil), outcome(Fenced)),
		}},
		{"a listing sees a transaction whole", true, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 100, rename("a", "b", "y"), committed(true, 2)),
			op(1, 30, 40, listed("a"), read("x", 1)),
			op(1, 30, 40, listed("b"), absent(0)),
			op(1, 50, 60, listed("a"), absent(0)),
			op(1, 50, 60, listed("b"), read("y", 2)),
		}},
		{"a listing sees half a transaction", false, []porcupine.Operation{
			op(0, 0, 10, put("a", "x"), wrote(1)),
			op(0, 20, 100, rename("a", "b", "y"), committed(true, 2)),
			op(1, 30, 40, listed("a"), read("x", 1)),
			op(1, 30, 40, listed("b"), read("y", 2)),
		}},
		{"two listings see two writes in opposite orders, the keys joined", false, []porcupine.Operation{
			op(0, 0, 10, txn([]Compare{cmp("a", Absent, 0), cmp("c", Absent, 0)}, nil, nil), committed(true, 0)),
			op(0, 20, 100, put("a", "x"), wrote(1)),
			op(2, 20, 100, put("c", "z"), wrote(2)),
			op(1, 30, 40, listed("a"), read("x", 1)),
			op(1, 30, 40, listed("c"), absent(0)),
			op(3, 30, 40, listed("a"), absent(0)),
			op(3, 30, 40, listed("c"), read("z", 2)),
		}},
		{"two listings see two writes in opposite orders, each key a part", true, []porcupine.Operation{
			op(0, 20, 100, put("a", "x"), wrote(1)),
			op(2, 20, 100, put("c", "z"), wrote(2)),
			op(1, 30, 40, listed("a"), read("x", 1)),
			op(1, 30, 40, listed("c"), absent(0)),
			op(3, 30, 40, listed("a"), absent(0)),
			op(3, 30, 40, listed("c"), read("z", 2)),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if res := porcupine.CheckOperations(Model, tc.ops); res != tc.ok {
				t.Errorf("linearizable = %v, want %v", res, tc.ok)
			}
		})
	}
}

// TestPartition checks that a history is split by the keys transactions
// join, and only by them.
func TestPartition(t *testing.T) {
	h := []porcupine.Operation{
		op(0, 0, 10, put("a", "x"), wrote(1)),
		op(0, 0, 10, put("b", "x"), wrote(2)),
		op(0, 0, 10, put("c", "x"), wrote(3)),
		op(0, 0, 10, put("d", "x"), wrote(4)),
		op(0, 0, 10, put("e", "x"), wrote(5)),
		op(0, 20, 30, rename("a", "b", "y"), committed(false, 6)),
		op(0, 20, 30, txn([]Compare{cmp("c", Exists, 0)}, nil, []TxnOp{putOp("e", "y")}), committed(true, 5)),
		op(0, 20, 30, txn(nil, nil, nil), committed(true, 6)),
	}
	var got []string
	for _, p := range partition(h) {
		keys := make(map[string]bool)
		for _, o := range p {
			for _, k := range o.Input.(Input).keys() {
				keys[k] = true
			}
		}
		got = append(got, strings.Join(slices.Sorted(maps.Keys(keys)), ""))
	}
	slices.Sort(got)
	if want := []string{"", "ab", "ce", "d"}; !slices.Equal(got, want) {
		t.Errorf("parts of keys %q, want %q", got, want)
	}
}

// TestRecorderListing checks that the reads of a listing share a call and
// a return, and become one operation where transactions join their keys.
func TestRecorderListing(t *testing.T) {
	r := NewRecorder()
	r.End(r.Begin(0, rename("a", "b", "y")), committed(false, 1))
	list := func(outs ...Output) {
		calls := []Call{r.Begin(1, listed("a")), r.Begin(1, listed("b")), r.Begin(1, listed("c"))}
		r.EndListing(calls, outs)
	}
	list(read("y", 1), absent(0), absent(0))
	list(read("y", 1), outcome(NoEffect), absent(0)) // a read that failed is not recorded
	h, s := r.History()
	if want := (Summary{Ops: 6, Reads: 5, Listed: 5, Listings: 2, Writes: 1, Txns: 1}); s != want {
		t.Errorf("summary %+v, want %+v", s, want)
	}
	for i, o := range h[1:] {
		first := h[1+i/3*3] // the first read of its listing
		if o.Call != first.Call || o.Return != first.Return || o.Call >= o.Return {
			t.Errorf("%s at %d–%d, the first of its listing at %d–%d", describe(o.Input.(Input), o.Output.(Output)), o.Call, o.Return, first.Call, first.Return)
		}
	}
	var got []string
	for _, p := range partition(h) {
		for _, o := range p {
			got = append(got, describe(o.Input.(Input), o.Output.(Output)))
		}
	}
	want := []string{
		`txn(if a exists, b absent then put(b, "y"), delete(a) else put(a, "y")) → else v1`,
		`listing(a → "y" v1, b → absent)`,
		`get(a) → "y" v1 (listed)`, // b failed: a read alone
		`get(c) → absent (listed)`,
		`get(c) → absent (listed)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("partitioned:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if res, err := Check(h, time.Minute, filepath.Join(t.TempDir(), "viz.html")); res != porcupine.Ok {
		t.Errorf("Check = %s, %v; want Ok", res, err)
	}
}

// TestRecorderCachedListings checks that the summary counts each listing
// once, however many keys it covers, and those served from a cache, and
// that a Get answered from a cached listing checks.
func TestRecorderCachedListings(t *testing.T) {
	r := NewRecorder()
	r.End(r.Begin(0, put("b", "x")), wrote(1))
	for i, cached := range []bool{false, true, true} {
		calls := []Call{r.Begin(1+i, listed("a")), r.Begin(1+i, listed("b"))}
		r.EndListing(calls, []Output{{Outcome: OK, Cached: cached}, {Outcome: OK, Found: true, Value: "x", Version: 1, Cached: cached}})
	}
	r.End(r.Begin(4, get("a")), cachedAbsent())
	h, s := r.History()
	if want := (Summary{Ops: 8, Reads: 7, Cached: 5, Listed: 6, Listings: 3, CachedListings: 2, Writes: 1}); s != want {
		t.Errorf("summary %+v, want %+v", s, want)
	}
	if res, err := Check(h, time.Minute, filepath.Join(t.TempDir(), "viz.html")); res != porcupine.Ok {
		t.Errorf("Check = %s, %v; want Ok", res, err)
	}
}

// TestRecorderHistoryTxn checks which transactions of unknown outcome the
// recorder leaves out: one that deletes, or whose value was read, or that
// wrote a key another transaction compared after its call, stays; one
// that only puts values nobody read goes.
func TestRecorderHistoryTxn(t *testing.T) {
	r := NewRecorder()
	r.ops = []porcupine.Operation{
		op(0, 0, 10, put("a", "x"), wrote(1)),
		op(0, 20, 30, casBoth("a", 1, "b", 0, "lost"), outcome(Unknown)),
		op(0, 40, 50, casBoth("a", 1, "b", 0, "read"), outcome(Unknown)),
		op(1, 60, 70, get("b"), read("read", 4)),
		op(0, 80, 90, rename("a", "c", "renamed"), outcome(Unknown)),
		op(0, 100, 110, casBoth("c", 0, "d", 0, "compared"), outcome(Unknown)),
		op(1, 120, 130, txn([]Compare{cmp("d", Exists, 0)}, nil, nil), committed(true, 8)),
		op(0, 140, 150, casBoth("a", 9, "b", 9, "after"), outcome(Unknown)),
	}
	h, s := r.History()
	want := Summary{Ops: 6, Reads: 1, Writes: 2, Unknown: 5, Unneeded: 2, Txns: 6}
	if s != want {
		t.Errorf("summary %+v, want %+v", s, want)
	}
	for _, o := range h {
		for _, w := range slices.Concat(o.Input.(Input).Then, o.Input.(Input).Else) {
			if w.Value == "lost" || w.Value == "after" {
				t.Errorf("%s is in the history", describe(o.Input.(Input), o.Output.(Output)))
			}
		}
	}
	if res, err := Check(h, time.Minute, filepath.Join(t.TempDir(), "viz.html")); res != porcupine.Ok {
		t.Errorf("Check = %s, %v; want Ok", res, err)
	}
}

// TestDescribeTxn checks how a transaction shows in a visualisation.
func TestDescribeTxn(t *testing.T) {
	in := rename("a", "b", "y")
	in.Else[0] = under(in.Else[0], 5)
	got := describe(in, committed(true, 7))
	want := `txn(if a exists, b absent then put(b, "y"), delete(a) else put(a, "y", token 5)) → then v7`
	if got != want {
		t.Errorf("describe = %s, want %s", got, want)
	}
}

// simStore is a sequential store of a few keys, as leased's applies
// writes: the history generator of TestModelSimulatedStore.
type simStore struct {
	rev  uint64
	keys map[string]Output // Found, Value, Version: the key's record
}

// holds reports whether c holds in st, as store.Compare does.
func (st *simStore) holds(c Compare) bool {
	r := st.keys[c.Key]
	v := uint64(0)
	if r.Found {
		v = r.Version
	}
	switch c.Op {
	case Exists:
		return r.Found
	case Absent:
		return !r.Found
	case VersionIs:
		return v == c.Version
	case VersionIsNot:
		return v != c.Version
	case VersionAbove:
		return v > c.Version
	case VersionBelow:
		return v < c.Version
	case ValueIs:
		return r.Found && r.Value == c.Value
	case ValueIsNot:
		return r.Found && r.Value != c.Value
	}
	return false
}

// apply applies in, if do, and returns its output.
func (st *simStore) apply(in Input, do bool) Output {
	r := st.keys[in.Key]
	switch in.Kind {
	case Get:
		out := r
		out.Outcome = OK
		if in.Listed && !r.Found {
			out.Version = 0
		}
		return out
	case Put, CAS:
		if in.Kind == CAS && !(in.Expect == 0 && !r.Found || r.Found && r.Version == in.Expect) {
			return Output{Outcome: Mismatch}
		}
		if do {
			st.rev++
			st.keys[in.Key] = Output{Found: true, Value: in.Value, Version: st.rev}
		}
		return Output{Outcome: OK, Version: st.rev}
	case Delete:
		if !r.Found || !do {
			return Output{Outcome: OK, Version: r.Version}
		}
		st.rev++
		st.keys[in.Key] = Output{Version: st.rev}
		return Output{Outcome: OK, Found: true, Version: st.rev}
	}
	succeeded := true
	for _, c := range in.If {
		succeeded = succeeded && st.holds(c)
	}
	ops := in.Then
	if !succeeded {
		ops = in.Else
	}
	changes := false
	for _, op := range ops {
		changes = changes || !op.Delete || st.keys[op.Key].Found
	}
	if changes && do {
		st.rev++
		for _, op := range ops {
			if !op.Delete {
				st.keys[op.Key] = Output{Found: true, Value: op.Value, Version: st.rev}
			} else if st.keys[op.Key].Found {
				st.keys[op.Key] = Output{Version: st.rev}
			}
		}
	}
	return committed(succeeded, st.rev)
}

// TestModelSimulatedStore checks histories of a correct store: random
// operations on three keys, listings of them, a third of the writes
// transactions, from
// clients whose calls overlap, some of them of unknown outcome, taking
// effect or not. Every history must check as linearizable, and in a few
// seconds at most: about as many operations as a history of the
// harness's workers, on keys that the transactions join into one part.
func TestModelSimulatedStore(t *testing.T) {
	const ops = 4000
	keys := []string{"k0", "k1", "k2"}
	for seed := range uint64(4) {
		rng := rand.New(rand.NewPCG(seed, 27))
		st := &simStore{keys: make(map[string]Output)}
		r := NewRecorder()
		seq := 0
		value := func() string { seq++; return fmt.Sprintf("v%d", seq) }
		seen := make(map[string]uint64)
		for i := range ops {
			k := keys[rng.IntN(len(keys))]
			other := keys[(slices.Index(keys, k)+1+rng.IntN(len(keys)-1))%len(keys)]
			var in Input
			switch p := rng.IntN(100); {
			case p < 40:
				in = get(k)
			case p < 45:
				in = listed(k)
			case p < 60:
				in = put(k, value())
			case p < 66:
				in = del(k)
			case p < 80:
				in = cas(k, seen[k], value())
			case p < 90:
				in = rename(k, other, value())
			default:
				in = casBoth(k, seen[k], other, seen[other], value())
			}
			// Each operation takes effect at 100·i, and its call and
			// return are up to 300 before and after: about six overlap.
			lin := int64(100 * (i + 1))
			call, ret := lin-rng.Int64N(300), lin+rng.Int64N(300)
			o := Outcome(OK)
			if in.Kind != Get && rng.IntN(20) == 0 {
				o = []Outcome{Unknown, NoEffect}[rng.IntN(2)]
			}
			out := st.apply(in, o == OK || o == Unknown && rng.IntN(2) == 0)
			if in.Kind == Get && out.Found {
				seen[k] = out.Version
			}
			if o != OK && out.Outcome == OK {
				out = Output{Outcome: o}
			}
			r.ops = append(r.ops, op(i%8, call, ret, in, out))
			if in.Listed {
				// A listing: the other keys too, at the same moment.
				for _, k := range keys {
					if k != in.Key {
						r.ops = append(r.ops, op(i%8, call, ret, listed(k), st.apply(listed(k), true)))
					}
				}
			}
		}
		h, s := r.History()
		start := time.Now()
		res, err := Check(h, time.Minute, filepath.Join(t.TempDir(), "viz.html"))
		t.Logf("seed %d: %s, checked in %v", seed, s, time.Since(start).Round(time.Millisecond))
		if res != porcupine.Ok {
			t.Fatalf("seed %d: %s, %v", seed, res, err)
		}
	}
}

// lockUnder is client owner's acquisition of the lock on k in mode m,
// bound to TTL lease l of key "s<owner>" (0: a plain write lease).
func lockUnder(k string, m AcquireMode, l uint64, owner int) Input {
	in := Input{Kind: LockAcquire, Key: k, Mode: m, Lease: l, Owner: owner}
	if l != 0 {
		in.LeaseKey = sessKey(owner)
	}
	return in
}
func sessKey(owner int) string                { return fmt.Sprintf("s%d", owner) }
func sess(owner int) Input                    { return grantTTL(sessKey(owner)) }
func sessEnd(owner int, l uint64) Input       { return expire(sessKey(owner), l) }
func unlock(k string, token uint64) Input     { return Input{Kind: LockRelease, Key: k, Token: token} }
func record(k string) Input                   { return Input{Kind: CheckToken, Key: k} }
func checkToken(k string, token uint64) Input { return Input{Kind: CheckToken, Key: k, Token: token} }
func gput(k, v, lock string, token uint64) Input {
	return Input{Kind: GuardedPut, Key: k, Value: v, Guard: lock, Token: token}
}
func gdel(k, lock string, token uint64) Input {
	return Input{Kind: GuardedDelete, Key: k, Guard: lock, Token: token}
}
func held(token, lease uint64) Output {
	return Output{Outcome: OK, Found: true, Token: token, Lease: lease}
}
func free() Output          { return Output{Outcome: OK} }
func current(b bool) Output { return Output{Outcome: OK, Found: b} }

// TestModelLocks checks the rules of locks (lockState) on small histories:
// each rule, a history that keeps it and one that breaks it.
func TestModelLocks(t *testing.T) {
	const end = 1000 // the history's end, where an expiry or an unknown outcome returns
	for _, tc := range []struct {
		name string
		ok   bool
		ops  []porcupine.Operation
	}{
		{"acquire, guarded writes, check, release, acquire again", true, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 30, 40, gput("d", "x", "l", 10), wrote(1)),
			op(1, 45, 50, record("l"), held(10, 5)),
			op(1, 51, 52, checkToken("l", 10), current(true)),
			op(0, 55, 60, gdel("d", "l", 10), removed(2)),
			op(0, 70, 80, unlock("l", 10), outcome(OK)),
			op(1, 85, 90, record("l"), free()),
			op(0, 91, 95, gput("d", "late", "l", 10), outcome(Fenced)),
			op(2, 0, 5, sess(2), leaseGranted(6)),
			op(2, 100, 110, lockUnder("l", Try, 6, 2), granted(11)),
			op(1, 115, 120, checkToken("l", 10), current(false)),
		}},
		{"a waiter is granted once the holder releases", true, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(1, 0, 5, sess(2), leaseGranted(6)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(1, 25, 90, lockUnder("l", Wait, 6, 2), granted(11)),
			op(0, 30, 40, gput("d", "x", "l", 10), wrote(1)),
			op(0, 50, 60, unlock("l", 10), outcome(OK)),
			op(1, 95, 99, gput("d", "y", "l", 11), wrote(2)),
		}},
		{"two holders at once", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(1, 0, 5, sess(2), leaseGranted(6)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(1, 25, 30, lockUnder("l", Wait, 6, 2), granted(11)),
			op(0, 50, 60, unlock("l", 10), outcome(OK)),
		}},
		{"a grant while the bound lease lives", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(1, 0, 5, sess(2), leaseGranted(6)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 300, end, sessEnd(1, 5), lives()),
			op(1, 25, 200, lockUnder("l", Wait, 6, 2), granted(11)),
		}},
		{"a grant once the bound lease may have expired", true, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(1, 0, 5, sess(2), leaseGranted(6)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 30, 40, gput("d", "x", "l", 10), wrote(1)),
			op(0, 100, end, sessEnd(1, 5), lives()),
			op(1, 25, 200, lockUnder("l", Wait, 6, 2), granted(11)),
			op(0, 210, 220, gput("d", "stale", "l", 10), outcome(Fenced)),
			op(2, 230, 240, record("l"), held(11, 6)),
		}},
		{"a guarded write of the expired holder commits after the next grant", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(1, 0, 5, sess(2), leaseGranted(6)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 100, end, sessEnd(1, 5), lives()),
			op(1, 25, 200, lockUnder("l", Wait, 6, 2), granted(11)),
			op(0, 210, 220, gput("d", "stale", "l", 10), wrote(1)),
		}},
		{"a bound lock ends with its lease's revocation", true, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(1, 0, 5, sess(2), leaseGranted(6)),
			op(0, 10, 20, lockUnder("l", Recall, 5, 1), granted(10)),
			op(0, 30, 40, revoke(sessKey(1), 5), revoked(0)),
			op(2, 45, 50, record("l"), free()),
			op(1, 60, 70, lockUnder("l", Try, 6, 2), granted(11)),
		}},
		{"a lock held after its lease was revoked", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Recall, 5, 1), granted(10)),
			op(0, 30, 40, revoke(sessKey(1), 5), revoked(0)),
			op(2, 45, 50, record("l"), held(10, 5)),
		}},
		{"a guarded put commits after the lock was released", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 30, 40, unlock("l", 10), outcome(OK)),
			op(0, 50, 60, gput("d", "x", "l", 10), wrote(1)),
		}},
		{"a guarded put is fenced while the lock is held", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 30, 40, gput("d", "x", "l", 10), outcome(Fenced)),
			op(0, 50, 60, unlock("l", 10), outcome(OK)),
		}},
		{"a guarded put under a token never granted", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 30, 40, gput("d", "x", "l", 9), wrote(1)),
		}},
		{"a plain write lease may end at any moment", true, []porcupine.Operation{
			op(0, 10, 20, lockUnder("l", Recall, 0, 1), granted(10)),
			op(0, 30, 40, gput("d", "x", "l", 10), wrote(1)),
			op(1, 45, 50, lockUnder("l", Recall, 0, 2), granted(11)),
			op(0, 60, 70, gput("d", "y", "l", 10), outcome(Fenced)),
			op(1, 80, 90, gput("d", "z", "l", 11), wrote(2)),
		}},
		{"a plain write lease does not come back once it ended", false, []porcupine.Operation{
			op(0, 10, 20, lockUnder("l", Recall, 0, 1), granted(10)),
			op(1, 30, 40, record("l"), free()),
			op(0, 50, 60, gput("d", "x", "l", 10), wrote(1)),
		}},
		{"a client acquires over its own lock", true, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 30, 35, sess(1), leaseGranted(7)),
			op(0, 40, 50, lockUnder("l", Try, 7, 1), granted(12)),
			op(0, 300, end, sessEnd(1, 5), lives()),
			op(1, 310, 320, record("l"), held(12, 7)),
		}},
		{"the end of a lease ends only the locks still bound to it", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 30, 35, sess(1), leaseGranted(7)),
			op(0, 40, 50, lockUnder("l", Try, 7, 1), granted(12)),
			op(0, 60, 70, revoke(sessKey(1), 5), revoked(0)),
			op(1, 80, 90, record("l"), free()),
		}},
		{"tokens go back", false, []porcupine.Operation{
			op(0, 10, 20, lockUnder("l", Recall, 0, 1), granted(10)),
			op(0, 30, 40, unlock("l", 10), outcome(OK)),
			op(1, 50, 60, lockUnder("l", Recall, 0, 2), granted(9)),
		}},
		{"a check sees another token", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(1, 30, 40, record("l"), held(11, 5)),
		}},
		{"a check sees another TTL lease", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(1, 30, 40, record("l"), held(10, 6)),
		}},
		{"a check sees a bound lock free", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(1, 30, 40, checkToken("l", 10), current(false)),
		}},
		{"granted under a lease that has ended", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, revoke(sessKey(1), 5), revoked(0)),
			op(0, 30, 40, lockUnder("l", Wait, 5, 1), granted(10)),
		}},
		{"not found under a lease that has ended", true, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, end, sessEnd(1, 5), lives()),
			op(0, 30, 40, lockUnder("l", Wait, 5, 1), notFound()),
		}},
		{"not found under a lease that lives", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 30, 40, lockUnder("l", Wait, 5, 1), notFound()),
		}},
		{"a try fails while another client holds the lock", true, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(1, 30, 40, lockUnder("l", Try, 0, 2), outcome(Locked)),
		}},
		{"a try fails on its own client's lock", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 30, 40, lockUnder("l", Try, 0, 1), outcome(Locked)),
		}},
		{"a try fails though the lock is free and nobody waits", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 30, 40, unlock("l", 10), outcome(OK)),
			op(1, 50, 60, lockUnder("l", Try, 0, 2), outcome(Locked)),
		}},
		{"a try fails while an acquisition waits", true, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 30, 40, unlock("l", 10), outcome(OK)),
			op(2, 45, 80, lockUnder("l", Wait, 0, 3), outcome(NoEffect)),
			op(1, 50, 60, lockUnder("l", Try, 0, 2), outcome(Locked)),
		}},
		{"a try fails while a release is under way", true, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 30, 70, unlock("l", 10), outcome(OK)),
			op(2, 35, 40, record("l"), free()),
			op(1, 50, 60, lockUnder("l", Try, 0, 2), outcome(Locked)),
		}},
		{"a try fails a moment after the lock expired", true, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 25, end, sessEnd(1, 5), lives()),
			op(2, 35, 40, record("l"), free()),
			op(1, 50, 60, lockUnder("l", Try, 0, 2), outcome(Locked)),
		}},
		{"only a try fails Locked", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(1, 30, 40, lockUnder("l", Wait, 0, 2), outcome(Locked)),
		}},
		{"an acquisition of unknown outcome may hold the lock", true, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, end, lockUnder("l", Wait, 5, 1), outcome(Unknown)),
			op(1, 30, 40, record("l"), held(12, 5)),
			op(1, 45, 50, gput("d", "x", "l", 12), wrote(1)),
			op(2, 55, 60, lockUnder("l", Try, 0, 2), outcome(Locked)),
		}},
		{"an acquisition of unknown outcome holds one token", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, end, lockUnder("l", Wait, 5, 1), outcome(Unknown)),
			op(1, 30, 40, record("l"), held(12, 5)),
			op(1, 45, 50, record("l"), held(13, 5)),
		}},
		{"a grant its client never learned of takes effect before it returns", false, []porcupine.Operation{
			op(0, 10, 20, lockUnder("l", Wait, 0, 1), outcome(Maybe)),
			op(1, 30, 40, lockUnder("l", Recall, 0, 2), granted(11)),
			op(2, 50, 60, record("l"), held(12, 0)),
		}},
		{"an acquisition of unknown outcome may take effect after it returns", true, []porcupine.Operation{
			op(0, 10, end, lockUnder("l", Wait, 0, 1), outcome(Unknown)),
			op(1, 30, 40, lockUnder("l", Recall, 0, 2), granted(11)),
			op(2, 50, 60, record("l"), held(12, 0)),
		}},
		{"a release of unknown outcome may end the lock", true, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 30, end, unlock("l", 10), outcome(Unknown)),
			op(1, 50, 60, lockUnder("l", Wait, 0, 2), granted(11)),
		}},
		{"a grant before the release of unknown outcome was called", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(1, 25, 30, lockUnder("l", Wait, 0, 2), granted(11)),
			op(0, 40, end, unlock("l", 10), outcome(Unknown)),
		}},
		{"a guarded write of unknown outcome may commit", true, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 30, end, gput("d", "x", "l", 10), outcome(Unknown)),
			op(0, 40, 50, unlock("l", 10), outcome(OK)),
			op(1, 60, 70, get("d"), read("x", 1)),
		}},
		{"a guarded write of unknown outcome commits only under its lock", false, []porcupine.Operation{
			op(0, 0, 5, sess(1), leaseGranted(5)),
			op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
			op(0, 40, 50, unlock("l", 10), outcome(OK)),
			op(0, 55, end, gput("d", "x", "l", 10), outcome(Unknown)),
			op(1, 60, 70, get("d"), read("x", 1)),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if res := porcupine.CheckOperations(Model, tc.ops); res != tc.ok {
				t.Errorf("linearizable = %v, want %v", res, tc.ok)
			}
		})
	}
}

// TestPartitionLocks checks that an acquisition under a TTL lease joins
// the lock's key and the lease's, a guarded write its key and the lock's,
// and that a try that failed Locked is marked when an acquisition or a
// release of its key overlaps it.
func TestPartitionLocks(t *testing.T) {
	h := []porcupine.Operation{
		op(0, 0, 5, sess(1), leaseGranted(5)),
		op(0, 10, 20, lockUnder("l", Wait, 5, 1), granted(10)),
		op(0, 30, 40, gput("d", "x", "l", 10), wrote(1)),
		op(0, 50, 60, sessEnd(1, 5), lives()),
		op(1, 0, 5, sess(2), leaseGranted(6)),
		op(1, 12, 18, lockUnder("l", Try, 6, 2), outcome(Locked)),
		op(1, 21, 29, lockUnder("l", Try, 6, 2), outcome(Locked)),
		op(2, 0, 10, lockUnder("m", Recall, 0, 3), granted(11)),
		op(2, 0, 10, get("e"), absent(0)),
	}
	parts := partition(h)
	var got []string
	for _, p := range parts {
		keys := make(map[string]bool)
		for _, o := range p {
			for _, k := range o.Input.(Input).keys() {
				keys[k] = true
			}
		}
		got = append(got, strings.Join(slices.Sorted(maps.Keys(keys)), ","))
	}
	slices.Sort(got)
	if want := []string{"d,l,s1,s2", "e", "m"}; !slices.Equal(got, want) {
		t.Errorf("parts of keys %q, want %q", got, want)
	}
	for _, p := range parts {
		for _, o := range p {
			in := o.Input.(Input)
			if in.Kind != LockAcquire || o.Output.(Output).Outcome != Locked {
				continue
			}
			if want := o.Call == 12; in.waiters != want {
				t.Errorf("try called at %d: waiters %v, want %v", o.Call, in.waiters, want)
			}
		}
	}
	if h[5].Input.(Input).waiters {
		t.Errorf("partition changed the history it was given")
	}
}

// TestHistoryWithLocks checks that acquisitions, releases and guarded
// deletes of unknown outcome stay in the history, returning after its
// end, while a guarded put of unknown outcome nobody read is left out.
func TestHistoryWithLocks(t *testing.T) {
	r := NewRecorder()
	end := func(c int, in Input, out Output) { r.End(r.Begin(c, in), out) }
	end(0, sess(1), leaseGranted(5))
	end(0, lockUnder("l", Wait, 5, 1), granted(10))
	end(0, gput("d", "lost", "l", 10), outcome(Unknown))
	end(0, gdel("d", "l", 10), outcome(Unknown))
	end(0, unlock("l", 10), outcome(Unknown))
	end(1, lockUnder("l", Wait, 0, 2), outcome(Unknown))
	end(1, record("l"), held(12, 0))
	h, s := r.HistoryWithLocks()
	if want := (Summary{Ops: 6, Writes: 3, Unknown: 4, Unneeded: 1}); s != want {
		t.Errorf("summary %+v, want %+v", s, want)
	}
	var last int64
	for _, o := range h {
		if o.Output.(Output).Outcome != Unknown {
			last = max(last, o.Return)
		}
	}
	for _, o := range h {
		in, out := o.Input.(Input), o.Output.(Output)
		if in.Value == "lost" {
			t.Errorf("a guarded put of unknown outcome that nobody read is in the history")
		}
		if out.Outcome == Unknown && o.Return <= last {
			t.Errorf("%s returns at %d, before the end %d", describe(in, out), o.Return, last)
		}
	}
	if res, err := Check(h, time.Minute, filepath.Join(t.TempDir(), "viz.html")); res != porcupine.Ok {
		t.Errorf("Check = %s, %v; want Ok", res, err)
	}
}

// TestDescribeLocks checks the descriptions of the operations on locks.
func TestDescribeLocks(t *testing.T) {
	for _, tc := range []struct {
		in   Input
		out  Output
		want string
	}{
		{lockUnder("l", Wait, 5, 1), granted(10), "lock(l, wait, client 1, TTL lease 5) → token 10"},
		{Input{Kind: LockAcquire, Key: "l", Mode: Try, Owner: 2, waiters: true}, outcome(Locked), "lock(l, try, client 2) → locked (others acquire or release meanwhile)"},
		{unlock("l", 10), outcome(OK), "unlock(l, token 10) → released"},
		{gput("d", "x", "l", 10), wrote(3), `guarded-put(d, "x", guard l, token 10) → v3`},
		{gdel("d", "l", 10), outcome(Fenced), "guarded-delete(d, guard l, token 10) → fenced"},
		{record("l"), held(10, 5), "check-token(l) → held, token 10, TTL lease 5"},
		{checkToken("l", 10), current(false), "check-token(l, token 10) → current false"},
	} {
		if got := describe(tc.in, tc.out); got != tc.want {
			t.Errorf("describe = %q, want %q", got, tc.want)
		}
	}
	s := state{}.withLock("l", lockState{token: 10, floor: 10, lease: 5, owner: 1, held: true})
	if got, want := s.String(), "l: absent v0, lock held with token 10 by client 1 under TTL lease 5"; got != want {
		t.Errorf("state %q, want %q", got, want)
	}
}
