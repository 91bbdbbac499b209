package bench

import (
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows a run's progress as a bar measured in planned time: each
// step advances it with the clock, up to its plan, and to its plan when
// it is done. A nil *progress shows nothing.
type progress struct {
	bar   *progressbar.ProgressBar
	mu    sync.Mutex
	base  int64 // ms planned for the steps before this one
	plan  int64 // ms planned for this step
	begun time.Time
	stop  chan struct{}
	wg    sync.WaitGroup
}

// minBarPlan is the shortest run that gets a progress bar.
const minBarPlan = 3 * time.Second

// newProgress returns a progress bar on w for a run planned to take about
// total, or nil if w is nil or the run is short.
func newProgress(w io.Writer, total time.Duration) *progress {
	if w == nil || total < minBarPlan {
		return nil
	}
	p := &progress{
		bar: progressbar.NewOptions64(total.Milliseconds(),
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetWidth(30),
			progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionOnCompletion(func() { io.WriteString(w, "\n") }),
		),
		stop: make(chan struct{}),
	}
	p.wg.Go(p.tick)
	return p
}

func (p *progress) tick() {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			if !p.begun.IsZero() {
				p.bar.Set64(p.base + min(time.Since(p.begun).Milliseconds(), p.plan))
			}
			p.mu.Unlock()
		}
	}
}

// step starts a step named what, planned to take plan.
func (p *progress) step(what string, plan time.Duration) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.plan, p.begun = plan.Milliseconds(), time.Now()
	p.bar.Describe(what)
}

// done ends the current step.
func (p *progress) done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.base += p.plan
	p.plan, p.begun = 0, time.Time{}
	p.bar.Set64(p.base)
}

// finish stops the bar: filled if the run completed, left where it
// stopped otherwise.
func (p *progress) finish(completed bool) {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	if completed {
		p.bar.Finish()
	} else {
		p.bar.Exit()
	}
}

// plan estimates how long the run takes.
func (r *runner) plan() time.Duration {
	cfg := r.cfg
	var total time.Duration
	point := func(t time.Duration, scale float64) time.Duration {
		warm, window := cfg.windows(realAt(t, scale))
		return warm + window
	}
	for range cfg.Sharing {
		for _, t := range cfg.Terms {
			total += point(t, cfg.Scale)
		}
	}
	for _, t := range cfg.DelayTerms {
		total += point(t, cfg.DelayScale)
	}
	for _, t := range cfg.SlowTerms {
		wt := cfg.wall(t)
		total += slowPlan(wt, r.eps, cfg.SlowWrites, false) + slowPlan(wt, r.eps, cfg.SlowWrites, true)
	}
	return total
}
