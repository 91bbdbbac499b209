package bench

import (
	"fmt"
	"image/color"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// modelSharing are the S of the model's curves on the relative-load plot.
var modelSharing = []int{1, 10, 20, 40}

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

// curve samples f over [0, maxX] paper seconds.
func curve(maxX float64, f func(time.Duration) float64) plotter.XYs {
	const n = 400
	xys := make(plotter.XYs, n+1)
	for i := range xys {
		x := maxX * float64(i) / n
		xys[i] = plotter.XY{X: x, Y: f(time.Duration(x * float64(time.Second)))}
	}
	return xys
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

// plotRelativeLoad plots the measured relative load of each sweep against
// the term, with the model's curves for S = 1, 10, 20 and 40.
func (rep *Report) plotRelativeLoad(path string) error {
	p := newPlot(fmt.Sprintf("Consistency load relative to term 0 (time scale %g)", rep.Scale),
		"lease term t_S, paper time (s)", "L(t_S) / L(0)")
	maxX := 0.0
	for _, sw := range rep.Sweeps {
		maxX = max(maxX, sw.Points[len(sw.Points)-1].TermPaperS)
	}
	cal := rep.Sweeps[0]
	colors := map[int]color.Color{}
	for i, s := range modelSharing {
		colors[s] = plotutil.Color(i)
		m := rep.paperModel(cal, s)
		if err := addLine(p, fmt.Sprintf("model S=%d", s), curve(maxX, func(t time.Duration) float64 { return m.RelativeLoad(t) }), colors[s], nil); err != nil {
			return err
		}
	}
	for i, sw := range rep.Sweeps {
		c, ok := colors[sw.S]
		if !ok {
			c = plotutil.Color(len(modelSharing) + i)
		}
		var msgs, unbatched plotter.XYs
		for _, pt := range sw.Points {
			msgs = append(msgs, plotter.XY{X: pt.TermPaperS, Y: pt.RelLoad})
			unbatched = append(unbatched, plotter.XY{X: pt.TermPaperS, Y: pt.RelLeaseOps})
		}
		if err := addPoints(p, "measured "+sw.Name+", messages", msgs, c, draw.CircleGlyph{}); err != nil {
			return err
		}
		if err := addPoints(p, "measured "+sw.Name+", unbatched", unbatched, c, draw.RingGlyph{}); err != nil {
			return err
		}
	}
	// Room above the curves for the legend.
	p.Y.Min, p.Y.Max = 0, max(p.Y.Max, 2.4)
	return save(p, path)
}

// plotWriteLatency plots the latency of writes to a held key against the
// term, with a holder that answers and one that does not, and the bound
// term + ε.
func (rep *Report) plotWriteLatency(path string) error {
	p := newPlot("Write latency with a lease holder that answers or is slow",
		"lease term t_S, real time (ms)", "write latency, real time (ms)")
	var slowAll, slowMax, answerP50, answerAll, bound plotter.XYs
	for _, sp := range rep.Slow {
		if !sp.Slow {
			answerP50 = append(answerP50, plotter.XY{X: sp.TermRealMS, Y: sp.Latency.P50MS})
			for _, w := range sp.Writes {
				answerAll = append(answerAll, plotter.XY{X: sp.TermRealMS, Y: w.LatencyMS})
			}
			continue
		}
		bound = append(bound, plotter.XY{X: sp.TermRealMS, Y: sp.BoundMS})
		slowMax = append(slowMax, plotter.XY{X: sp.TermRealMS, Y: sp.Latency.MaxMS})
		for _, w := range sp.Writes {
			slowAll = append(slowAll, plotter.XY{X: sp.TermRealMS, Y: w.LatencyMS})
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
			return err
		}
	}
	p.X.Min, p.Y.Min = 0, 0
	p.Legend.Left = true
	return save(p, path)
}

// plotAddedDelay plots the delay leases add per operation against the
// term, in paper time, as the paper's Figure 3 does: with the added
// network delay, and on the plain network of the first sweep.
func (rep *Report) plotAddedDelay(path string) error {
	d := rep.Delay
	p := newPlot("Added delay per operation, S=1",
		"lease term t_S, paper time (s)", "mean added delay per operation, paper time (ms)")
	sweeps := []Sweep{*d}
	for _, sw := range rep.Sweeps {
		if sw.S == 1 {
			sweeps = append(sweeps, sw)
			break
		}
	}
	maxX := d.Points[len(d.Points)-1].TermPaperS
	for i, sw := range sweeps {
		name := fmt.Sprintf("round trip %s (scale %g)", fmtMS(sw.RoundTripMS*sw.Scale), sw.Scale)
		m := rep.paperModel(sw, 1)
		if err := addLine(p, "model D, "+name, curve(maxX, func(t time.Duration) float64 { return ms(m.AddedDelay(t)) }), plotutil.Color(i), nil); err != nil {
			return err
		}
		var xys plotter.XYs
		for _, pt := range sw.Points {
			if pt.TermPaperS <= maxX {
				xys = append(xys, plotter.XY{X: pt.TermPaperS, Y: pt.AddedDelayMS * sw.Scale})
			}
		}
		if err := addPoints(p, "measured, "+name, xys, plotutil.Color(i), draw.CircleGlyph{}); err != nil {
			return err
		}
	}
	p.Y.Min = 0
	return save(p, path)
}
