package bench

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/leased/leased/client"
)

// slowHolder measures writes to keys that another client holds a lease
// on, at one term (paper time). The holder reads a key, and a writer
// writes it a fraction i/n of the term later, for i = 0 … n−1. With slow
// set, the holder stops answering (all its packets are dropped) just
// before the write, as a paused process would, so the server must wait
// out its lease: at most term + ε. Otherwise the holder answers and the
// write waits only for its acknowledgement.
func (r *runner) slowHolder(ctx context.Context, term time.Duration, slow bool) (SlowPoint, error) {
	cfg := r.cfg
	wt := cfg.wall(term)
	n := cfg.SlowWrites
	bound := wt + r.eps
	sp := SlowPoint{Slow: slow, TermPaperS: term.Seconds(), TermRealMS: ms(wt), EpsilonMS: ms(r.eps), BoundMS: ms(bound), MarginMS: ms(cfg.Margin)}
	plan := slowPlan(wt, r.eps, n, slow)
	what := "answering holder"
	if slow {
		what = "slow holder"
	}
	r.progress.step(fmt.Sprintf("%s, term %v", what, term), plan)
	fail := func(err error) (SlowPoint, error) {
		return sp, fmt.Errorf("leasebench: %s, term %v: %w", what, term, err)
	}
	holder, fc, err := r.dialConn(ctx, "holder", 0, true)
	if err != nil {
		return fail(err)
	}
	defer fc.Close()
	defer holder.Close()
	writer, _, err := r.dial(ctx, "writer", 0)
	if err != nil {
		return fail(err)
	}
	defer writer.Close()

	prefix := fmt.Sprintf("%s%s/%s/", TermPrefix(wt), r.runID, map[bool]string{false: "answering", true: "slow"}[slow])
	var lats []time.Duration
	for i := range n {
		key := prefix + strconv.Itoa(i)
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		_, err := holder.Get(octx, key)
		cancel()
		if err != nil {
			return fail(fmt.Errorf("holder's read: %w", err))
		}
		granted := time.Now()
		offset := wt * time.Duration(i) / time.Duration(n)
		if err := sleep(ctx, time.Until(granted.Add(offset))); err != nil {
			return fail(err)
		}
		if slow {
			fc.Partition(true, true)
		}
		var wr client.WriteResult
		octx, cancel = context.WithTimeout(ctx, opTimeout+bound)
		start := time.Now()
		_, err = writer.Put(octx, key, []byte(strconv.Itoa(i)), client.Result(&wr))
		took := time.Since(start)
		cancel()
		fc.Partition(false, false)
		if err != nil {
			return fail(fmt.Errorf("write: %w", err))
		}
		w := SlowWrite{OffsetMS: ms(offset), LatencyMS: ms(took), WaitedMS: ms(wr.Waited), Holders: wr.Holders}
		if wr.Waited > bound+cfg.Margin {
			w.Over = true
			sp.Violations++
		}
		sp.Writes = append(sp.Writes, w)
		lats = append(lats, took)
		sp.WaitedMaxMS = max(sp.WaitedMaxMS, w.WaitedMS)
	}
	sp.Latency = summarize(lats)
	r.progress.done()
	return sp, nil
}

// slowPlan estimates how long slowHolder takes: a write every 1/n of a
// term, and with a slow holder a wait for the rest of the term and ε.
func slowPlan(wt, eps time.Duration, n int, slow bool) time.Duration {
	if slow {
		return time.Duration(n) * (wt + eps)
	}
	return time.Duration(n) * (wt/2 + time.Millisecond)
}
