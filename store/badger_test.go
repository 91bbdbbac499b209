package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leased/leased/store"
)

// reopenBadger closes b and opens its directory again.
func reopenBadger(t *testing.T, b *store.Badger, dir string) *store.Badger {
	t.Helper()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return openBadger(t, dir)
}

func TestBadgerCloseAndOpenKeepEverything(t *testing.T) {
	dir := t.TempDir()
	b := openBadger(t, dir)
	h := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	mustApply(t, b,
		put("a", "1"), put("b", "2"), del("b"), put("e", ""), del("never"),
		grant("a", 7, time.Second), grant("b", 8, 2*time.Second), grant("c", 9, time.Second),
		end("c", 3), horizon(h, time.Minute),
	)
	before := mustState(t, b)

	b = reopenBadger(t, b, dir)
	wantSameState(t, mustState(t, b), before)
	wantRecord(t, b, "a", str("1"), 1)
	wantRecord(t, b, "b", nil, 3)
	wantRecord(t, b, "e", str(""), 4)
	wantRecord(t, b, "never", nil, 0)
	wantRecord(t, b, "c", nil, 0)
	// The counters go on from where they were.
	rs := mustApply(t, b, put("c", "3"), grant("c", 9, time.Second))
	if rs[0].Version != 5 || rs[1].Token != 4 {
		t.Errorf("after reopening: %+v; want version 5, token 4", rs)
	}
}

// bigValue is a value of n bytes that tells i apart.
func bigValue(i, n int) []byte {
	v := bytes.Repeat([]byte{byte(i)}, n)
	copy(v, fmt.Sprint(i))
	return v
}

// TestBadgerLargeBatch applies a batch far larger than one badger
// transaction takes: 6 MB of values, each under the value threshold, so
// that they count against the transaction's size.
func TestBadgerLargeBatch(t *testing.T) {
	const n, size = 100, 60 << 10
	dir := t.TempDir()
	b := openBadger(t, dir)
	cmds := []store.Command{grant("w", 1, time.Second)}
	for i := range n {
		cmds = append(cmds, store.Command{Op: store.OpPut, Key: fmt.Appendf(nil, "k%03d", i), Value: bigValue(i, size)})
	}
	cmds = append(cmds, cas("k000", 1, "small"), grant("w", 2, time.Second))
	rs := mustApply(t, b, cmds...)
	if rs[0].Token != 1 || rs[n+2].Token != 2 {
		t.Errorf("grants = %+v, %+v; want tokens 1, 2", rs[0], rs[n+2])
	}
	for i := range n {
		if r := rs[1+i]; r.Version != uint64(i+1) || r.Err != nil {
			t.Errorf("put %d = %+v, want version %d", i, r, i+1)
		}
	}
	wantVersions(t, rs[n+1:n+2], n+1)

	check := func(s store.Store) {
		t.Helper()
		for i := 1; i < n; i++ {
			r := mustGet(t, s, fmt.Sprintf("k%03d", i))
			if !r.Found || r.Version != uint64(i+1) || !bytes.Equal(r.Value, bigValue(i, size)) {
				t.Errorf("k%03d: found %v at version %d, %d bytes; want version %d", i, r.Found, r.Version, len(r.Value), i+1)
			}
		}
		wantRecord(t, s, "k000", str("small"), n+1)
		st := mustState(t, s)
		if st.Revision != n+1 || st.Fence != 2 || len(st.WriteLeases) != 1 || st.WriteLeases[0].Token != 2 {
			t.Errorf("State = %+v; want revision %d, fence 2, w's lease with token 2", st, n+1)
		}
	}
	check(b)
	check(reopenBadger(t, b, dir))
}

// TestBadgerHorizonAcrossTransactions applies so many horizons in one
// batch that badger takes them in several transactions, then fails the
// batch's last step. Each OpSetHorizon writes two keys; whichever
// transaction its writes fall into, what Reopen finds durable must be one
// command's horizon and span, never the horizon of one and the span of
// the one before. The batch is applied twice, the second time after one
// more write, so that in one of them a transaction fills up between the
// two writes of a command.
func TestBadgerHorizonAcrossTransactions(t *testing.T) {
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, shift := range []int{0, 1} {
		t.Run(fmt.Sprint("shift ", shift), func(t *testing.T) {
			b := openBadger(t, t.TempDir())
			// The extra write ends a write lease, which moves no
			// counter. After a put, the counters' own writes would not
			// fit in the full transaction either, and the step would
			// start over without the command cut in two anyway.
			var cmds []store.Command
			if shift == 1 {
				mustApply(t, b, grant("a", 1, time.Second))
				cmds = append(cmds, end("a", 1))
			}
			const n = 20000 // 40000 writes, over the ~26000 of one transaction
			for i := 1; i <= n; i++ {
				cmds = append(cmds, horizon(base.Add(time.Duration(i)*time.Second), time.Duration(i)*time.Millisecond))
			}
			cmds = append(cmds, unknown)
			rs, err := b.Apply(cmds)
			if err == nil {
				t.Fatal("Apply with an unknown op succeeded")
			}
			if len(rs) <= shift || len(rs) >= len(cmds)-1 {
				t.Fatalf("%d results of %d commands: the batch did not take several transactions", len(rs), len(cmds))
			}
			if err := b.Reopen(); err != nil {
				t.Fatal(err)
			}
			st := mustState(t, b)
			i := st.Span / time.Millisecond
			if !st.Horizon.Equal(base.Add(i * time.Second)) {
				t.Errorf("horizon %v with span %v: from different commands", st.Horizon, st.Span)
			}
			if last := time.Duration(len(rs) - shift); i != last {
				t.Errorf("span %v after Reopen; the last result was of horizon %d", st.Span, last)
			}
		})
	}
}

// TestBadgerFailedBatchLeavesDurablePrefix fails a batch that badger
// splits into several transactions: Apply returns the results of the
// transactions committed before the failure, and they are exactly what
// Reopen finds.
func TestBadgerFailedBatchLeavesDurablePrefix(t *testing.T) {
	const n, size = 100, 60 << 10
	b := openBadger(t, t.TempDir())
	var cmds []store.Command
	for i := range n {
		cmds = append(cmds, store.Command{Op: store.OpPut, Key: fmt.Appendf(nil, "k%03d", i), Value: bigValue(i, size)})
	}
	cmds = append(cmds, unknown)
	rs, err := b.Apply(cmds)
	if err == nil || errors.Is(err, store.ErrFailed) {
		t.Fatalf("Apply with an unknown op = %v, want its failure", err)
	}
	if len(rs) == 0 || len(rs) >= n {
		t.Fatalf("%d results of %d commands: the batch did not take several transactions", len(rs), len(cmds))
	}
	wantVersions(t, rs, func() []uint64 {
		v := make([]uint64, len(rs))
		for i := range v {
			v[i] = uint64(i + 1)
		}
		return v
	}()...)
	if _, err := b.Apply([]store.Command{put("x", "1")}); !errors.Is(err, store.ErrFailed) {
		t.Fatalf("Apply after a failure = %v, want ErrFailed", err)
	}
	if err := b.Reopen(); err != nil {
		t.Fatal(err)
	}
	if st := mustState(t, b); st.Revision != uint64(len(rs)) {
		t.Errorf("revision %d after Reopen, want %d", st.Revision, len(rs))
	}
	for i := range n {
		r := mustGet(t, b, fmt.Sprintf("k%03d", i))
		if r.Found != (i < len(rs)) {
			t.Errorf("k%03d found %v after Reopen, with %d results", i, r.Found, len(rs))
		}
	}
	wantVersions(t, mustApply(t, b, put("x", "1")), uint64(len(rs)+1))
}
