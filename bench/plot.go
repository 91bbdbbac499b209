package bench

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Every time on the plots is in seconds, so that they read alike; each
// axis says whether it is paper time or real time. The term axes are
// logarithmic, since the terms swept span three decades; term 0 has no
// place on such an axis and is drawn a little left of the shortest term,
// at zeroAt, with the tick label "0".

// zeroFraction places term 0 at this fraction of the shortest positive term.
const zeroFraction = 0.25

// termAxis describes a logarithmic term axis: where term 0 is drawn (0 if
// no term 0 is plotted), and the shortest and longest positive terms.
type termAxis struct {
	zeroAt   float64
	min, max float64
}

// newTermAxis returns the axis for terms, in seconds, of which 0 may be
// one.
func newTermAxis(terms []float64) termAxis {
	var ax termAxis
	hasZero := false
	for _, t := range terms {
		switch {
		case t <= 0:
			hasZero = true
		case ax.min == 0 || t < ax.min:
			ax.min = t
		}
		ax.max = max(ax.max, t)
	}
	if ax.min == 0 {
		// Only term 0: any positive span will do.
		ax.min, ax.max = 1, 1
	}
	if ax.max <= ax.min {
		// One term: a decade around it, which a log axis needs.
		ax.min, ax.max = ax.min/math.Sqrt(10), ax.max*math.Sqrt(10)
	}
	if hasZero {
		ax.zeroAt = ax.min * zeroFraction
	}
	return ax
}

// x returns where term t (seconds) is drawn.
func (ax termAxis) x(t float64) float64 {
	if t <= 0 {
		return ax.zeroAt
	}
	return t
}

// apply makes p's X axis this logarithmic term axis.
func (ax termAxis) apply(p *plot.Plot) {
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = ax
	lo := ax.min
	if ax.zeroAt > 0 {
		lo = ax.zeroAt
	}
	p.X.Min, p.X.Max = lo, ax.max
}

// Ticks marks powers of ten and, if term 0 is drawn, "0" at zeroAt in
// place of the ticks too close to it. It implements plot.Ticker.
func (ax termAxis) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		// Not a range apply set: the axis's own.
		lo, hi = ax.min, ax.max
		if ax.zeroAt > 0 {
			lo = ax.zeroAt
		}
	}
	var ticks []plot.Tick
	if ax.zeroAt > 0 {
		ticks = append(ticks, plot.Tick{Value: ax.zeroAt, Label: "0"})
	}
	for _, t := range (plot.LogTicks{Prec: -1}).Ticks(lo, hi) {
		if ax.zeroAt > 0 && t.Value < ax.zeroAt/zeroFraction*0.99 {
			continue
		}
		ticks = append(ticks, t)
	}
	return ticks
}

// plot writes the PNG plots of the report to dir.
func (rep *Report) plot(dir string) error {
	if len(rep.Sweeps) > 0 {
		if err := rep.plotRelativeLoad(filepath.Join(dir, FileRelativeLoad)); err != nil {
			return err
		}
	}
	if len(rep.Slow) > 0 {
		if err := rep.plotWriteLatency(filepath.Join(dir, FileWriteLatency)); err != nil {
			return err
		}
	}
	if rep.Delay != nil {
		if err := rep.plotAddedDelay(filepath.Join(dir, FileAddedDelay)); err != nil {
			return err
		}
	}
	return nil
}

// paperModel returns the model in paper time, with the configured rates
// and sw's calibration scaled up to paper time.
func (rep *Report) paperModel(sw Sweep, s int) Model {
	return Model{
		N:     sw.Pairs,
		R:     rep.RPaper,
		W:     rep.WPaper,
		S:     s,
		MProp: time.Duration(sw.MPropMS * sw.Scale * float64(time.Millisecond)),
		MProc: time.Duration(sw.MProcMS * sw.Scale * float64(time.Millisecond)),
	}
}

// curve samples f, evenly on the log axis ax, over its positive terms
// (seconds): from half the shortest to the longest, or from zeroAt's
// right if term 0 is drawn. f's value at term 0 is drawn at zeroAt, so
// that the curve starts where the measured points of term 0 are.
func (ax termAxis) curve(f func(time.Duration) float64) plotter.XYs {
	const n = 400
	lo := ax.min / 2
	var xys plotter.XYs
	if ax.zeroAt > 0 {
		lo = ax.min * (zeroFraction + 1) / 2
		xys = append(xys, plotter.XY{X: ax.zeroAt, Y: f(0)})
	}
	for i := range n + 1 {
		x := lo * math.Pow(ax.max/lo, float64(i)/n)
		xys = append(xys, plotter.XY{X: x, Y: f(time.Duration(x * float64(time.Second)))})
	}
	return xys
}

// sharings returns the S of the sweeps, each once, in their order: the
// model is drawn only for those.
func sharings(sweeps []Sweep) []int {
	var ss []int
	for _, sw := range sweeps {
		if !slices.Contains(ss, sw.S) {
			ss = append(ss, sw.S)
		}
	}
	return ss
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	return p
}

func addLine(p *plot.Plot, name string, xys plotter.XYs, c color.Color, dashes []vg.Length) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color, l.Width, l.Dashes = c, vg.Points(1.2), dashes
	p.Add(l)
	if name != "" {
		p.Legend.Add(name, l)
	}
	return nil
}

func addPoints(p *plot.Plot, name string, xys plotter.XYs, c color.Color, shape draw.GlyphDrawer) error {
	s, err := plotter.NewScatter(xys)
	if err != nil {
		return err
	}
	s.Color, s.Shape, s.Radius = c, shape, vg.Points(3)
	p.Add(s)
	if name != "" {
		p.Legend.Add(name, s)
	}
	return nil
}

func save(p *plot.Plot, path string) error {
	if err := p.Save(7*vg.Inch, 4.5*vg.Inch, path); err != nil {
		return fmt.Errorf("leasebench: %s: %w", path, err)
	}
	return nil
}

// plotRelativeLoad writes the relative-load plot to path.
func (rep *Report) plotRelativeLoad(path string) error {
	p, err := rep.relativeLoadPlot()
	if err != nil {
		return err
	}
	return save(p, path)
}

// relativeLoadPlot plots the measured relative load of each sweep against
// the term, with the model's curve for each S measured.
func (rep *Report) relativeLoadPlot() (*plot.Plot, error) {
	p := newPlot(fmt.Sprintf("Consistency load relative to term 0 (time scale %g)", rep.Scale),
		"lease term t_S, paper time (s)", "L(t_S) / L(0)")
	var terms []float64
	for _, sw := range rep.Sweeps {
		for _, pt := range sw.Points {
			terms = append(terms, pt.TermPaperS)
		}
	}
	ax := newTermAxis(terms)
	cal := rep.Sweeps[0]
	colors := map[int]color.Color{}
	for i, s := range sharings(rep.Sweeps) {
		colors[s] = plotutil.Color(i)
		m := rep.paperModel(cal, s)
		if err := addLine(p, fmt.Sprintf("model S=%d", s), ax.curve(m.RelativeLoad), colors[s], nil); err != nil {
			return nil, err
		}
	}
	for _, sw := range rep.Sweeps {
		c := colors[sw.S]
		var msgs, unbatched plotter.XYs
		for _, pt := range sw.Points {
			msgs = append(msgs, plotter.XY{X: ax.x(pt.TermPaperS), Y: pt.RelLoad})
			unbatched = append(unbatched, plotter.XY{X: ax.x(pt.TermPaperS), Y: pt.RelLeaseOps})
		}
		if err := addPoints(p, "measured "+sw.Name+", messages", msgs, c, draw.CircleGlyph{}); err != nil {
			return nil, err
		}
		if err := addPoints(p, "measured "+sw.Name+", unbatched", unbatched, c, draw.RingGlyph{}); err != nil {
			return nil, err
		}
	}
	ax.apply(p)
	// Room above the curves for the legend.
	p.Y.Min, p.Y.Max = 0, max(p.Y.Max, 2.4)
	return p, nil
}

// plotWriteLatency writes the write-latency plot to path.
func (rep *Report) plotWriteLatency(path string) error {
	p, err := rep.writeLatencyPlot()
	if err != nil {
		return err
	}
	return save(p, path)
}

// writeLatencyPlot plots the latency of writes to a held key against the
// term, with a holder that answers and one that does not, and the bound
// term + ε, all in real time: what the writer waits for is the server's
// clock.
func (rep *Report) writeLatencyPlot() (*plot.Plot, error) {
	p := newPlot("Write latency with a lease holder that answers or is slow",
		"lease term t_S, real time (s)", "write latency, real time (s)")
	var terms []float64
	for _, sp := range rep.Slow {
		terms = append(terms, sp.TermRealMS/1000)
	}
	ax := newTermAxis(terms)
	sec := func(ms float64) float64 { return ms / 1000 }
	var slowAll, slowMax, answerP50, answerAll, bound plotter.XYs
	for _, sp := range rep.Slow {
		x := ax.x(sec(sp.TermRealMS))
		if !sp.Slow {
			answerP50 = append(answerP50, plotter.XY{X: x, Y: sec(sp.Latency.P50MS)})
			for _, w := range sp.Writes {
				answerAll = append(answerAll, plotter.XY{X: x, Y: sec(w.LatencyMS)})
			}
			continue
		}
		bound = append(bound, plotter.XY{X: x, Y: sec(sp.BoundMS)})
		slowMax = append(slowMax, plotter.XY{X: x, Y: sec(sp.Latency.MaxMS)})
		for _, w := range sp.Writes {
			slowAll = append(slowAll, plotter.XY{X: x, Y: sec(w.LatencyMS)})
		}
	}
	for _, step := range []func() error{
		func() error {
			return addLine(p, "bound: term + ε", bound, color.Gray{Y: 90}, []vg.Length{vg.Points(4), vg.Points(3)})
		},
		func() error { return addLine(p, "slow holder, max", slowMax, plotutil.Color(1), nil) },
		func() error {
			return addPoints(p, "slow holder, each write", slowAll, plotutil.Color(1), draw.RingGlyph{})
		},
		func() error { return addLine(p, "answering holder, p50", answerP50, plotutil.Color(0), nil) },
		func() error {
			return addPoints(p, "answering holder, each write", answerAll, plotutil.Color(0), draw.CircleGlyph{})
		},
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	ax.apply(p)
	p.Y.Min = 0
	p.Legend.Left = true
	return p, nil
}

// plotAddedDelay writes the added-delay plot to path.
func (rep *Report) plotAddedDelay(path string) error {
	p, err := rep.addedDelayPlot()
	if err != nil {
		return err
	}
	return save(p, path)
}

// addedDelayPlot plots the delay leases add per operation against the
// term, in paper time, as the paper's Figure 3 does: with the added
// network delay, and on the plain network of the first sweep with S = 1.
func (rep *Report) addedDelayPlot() (*plot.Plot, error) {
	d := rep.Delay
	p := newPlot("Added delay per operation, S=1",
		"lease term t_S, paper time (s)", "mean added delay per operation, paper time (s)")
	sweeps := []Sweep{*d}
	for _, sw := range rep.Sweeps {
		if sw.S == 1 {
			sweeps = append(sweeps, sw)
			break
		}
	}
	maxX := d.Points[len(d.Points)-1].TermPaperS
	var terms []float64
	for _, sw := range sweeps {
		for _, pt := range sw.Points {
			if pt.TermPaperS <= maxX {
				terms = append(terms, pt.TermPaperS)
			}
		}
	}
	ax := newTermAxis(terms)
	for i, sw := range sweeps {
		name := fmt.Sprintf("round trip %.3g s (scale %g)", sw.RoundTripMS*sw.Scale/1000, sw.Scale)
		m := rep.paperModel(sw, 1)
		if err := addLine(p, "model D, "+name, ax.curve(func(t time.Duration) float64 { return m.AddedDelay(t).Seconds() }), plotutil.Color(i), nil); err != nil {
			return nil, err
		}
		var xys plotter.XYs
		for _, pt := range sw.Points {
			if pt.TermPaperS <= maxX {
				xys = append(xys, plotter.XY{X: ax.x(pt.TermPaperS), Y: pt.AddedDelayMS * sw.Scale / 1000})
			}
		}
		if err := addPoints(p, "measured, "+name, xys, plotutil.Color(i), draw.CircleGlyph{}); err != nil {
			return nil, err
		}
	}
	ax.apply(p)
	p.Y.Min = 0
	return p, nil
}
