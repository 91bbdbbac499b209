package lincheck

import (
	"os"
	"path/filepath"
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
	s := state{found: true, value: "x", version: 3, pinned: true, token: 5, tokenKnown: true, live: true}
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
		next := step(s, tc.in, outcome(Unknown))
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
