package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The plots are for a reader who has not read the paper. Each uses one
// kind of time on its axes: the write-latency plot real time in
// milliseconds; the others paper time in seconds, which the caption
// explains. Axes whose values span orders of magnitude are logarithmic,
// with every tick labelled; term 0 has no place on such an axis and is
// drawn a little below the smallest positive value, at zeroAt, with the
// tick label "0". Colours are the Okabe–Ito palette, which colour-blind
// readers can tell apart, and each series has its own marker as well.
// Every axis is padded so that no point or marker touches its edge, and
// a sentence under each plot says what it shows.

// zeroFraction places 0 at this fraction of the smallest positive value.
const zeroFraction = 0.25

// logPad is the factor by which a logarithmic axis reaches beyond the
// values drawn, and linPad the fraction of its span by which a linear one
// does: room for the markers at either end.
const (
	logPad = 1.25
	linPad = 0.06
)

// Okabe–Ito colours (Okabe and Ito, "Color Universal Design", 2008).
var (
	oiBlack     = color.RGBA{0x00, 0x00, 0x00, 0xff}
	oiOrange    = color.RGBA{0xe6, 0x9f, 0x00, 0xff}
	oiSkyBlue   = color.RGBA{0x56, 0xb4, 0xe9, 0xff}
	oiGreen     = color.RGBA{0x00, 0x9e, 0x73, 0xff}
	oiBlue      = color.RGBA{0x00, 0x72, 0xb2, 0xff}
	oiVermilion = color.RGBA{0xd5, 0x5e, 0x00, 0xff}
	oiPurple    = color.RGBA{0xcc, 0x79, 0xa7, 0xff}
)

// palette is the order in which series take their colours; black is kept
// for bounds, and yellow left out, too pale on white.
var palette = []color.Color{oiBlue, oiVermilion, oiGreen, oiPurple, oiOrange, oiSkyBlue}

// seriesColor returns the colour of the i-th series.
func seriesColor(i int) color.Color { return palette[i%len(palette)] }

// glyphPair returns the i-th pair of markers: a filled one and an open
// one of the same shape.
func glyphPair(i int) (filled, open draw.GlyphDrawer) {
	switch i % 4 {
	case 0:
		return draw.CircleGlyph{}, draw.RingGlyph{}
	case 1:
		return draw.PyramidGlyph{}, draw.TriangleGlyph{}
	case 2:
		return draw.BoxGlyph{}, draw.SquareGlyph{}
	default:
		return draw.PlusGlyph{}, draw.CrossGlyph{}
	}
}

// logAxis describes a logarithmic axis: where 0 is drawn (0 if no value
// is 0), and the smallest and largest positive values.
type logAxis struct {
	zeroAt   float64
	min, max float64
}

// newLogAxis returns the axis for values, of which some may be 0 (or
// less, drawn as 0).
func newLogAxis(values []float64) logAxis {
	var ax logAxis
	hasZero := false
	for _, v := range values {
		switch {
		case v <= 0:
			hasZero = true
		case ax.min == 0 || v < ax.min:
			ax.min = v
		}
		ax.max = max(ax.max, v)
	}
	if ax.min == 0 {
		// Only 0: any positive span will do.
		ax.min, ax.max = 1, 1
	}
	if ax.max <= ax.min {
		// One value: a decade around it, which a log axis needs.
		ax.min, ax.max = ax.min/math.Sqrt(10), ax.max*math.Sqrt(10)
	}
	if hasZero {
		ax.zeroAt = ax.min * zeroFraction
	}
	return ax
}

// at returns where value v is drawn.
func (ax logAxis) at(v float64) float64 {
	if v <= 0 {
		return ax.zeroAt
	}
	return v
}

// lo returns the smallest value drawn: zeroAt, or else min.
func (ax logAxis) lo() float64 {
	if ax.zeroAt > 0 {
		return ax.zeroAt
	}
	return ax.min
}

// apply makes a this logarithmic axis, padded beyond its values.
func (ax logAxis) apply(a *plot.Axis) {
	a.Scale = plot.LogScale{}
	a.Tick.Marker = ax
	a.Min, a.Max = ax.lo()/logPad, ax.max*logPad
}

// Ticks marks 1, 2 and 5 times the powers of ten, or 1 and 3 times them,
// or the powers of ten alone, the fewer the more decades [lo, hi] spans,
// each with its label; and, if 0 is drawn, "0" at zeroAt in place of the
// ticks too close to it. It implements plot.Ticker.
func (ax logAxis) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		// Not a range apply set: the axis's own.
		lo, hi = ax.lo(), ax.max
	}
	mantissas := []float64{1}
	switch decades := math.Log10(hi / lo); {
	case decades <= 2.5:
		mantissas = []float64{1, 2, 5}
	case decades <= 4.5:
		mantissas = []float64{1, 3}
	}
	var ticks []plot.Tick
	if ax.zeroAt > 0 {
		ticks = append(ticks, plot.Tick{Value: ax.zeroAt, Label: "0"})
	}
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for _, m := range mantissas {
			v := roundSig(m * math.Pow(10, e))
			if v < lo*0.999 || v > hi*1.001 || ax.zeroAt > 0 && v < ax.min*0.99 {
				continue
			}
			ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		}
	}
	return ticks
}

// roundSig rounds v to 3 significant digits, so that 3·0.1 is 0.3.
func roundSig(v float64) float64 {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 3, 64), 64)
	return r
}

// headroom raises the top of the logarithmic axis a, set by apply, by
// frac of its decades: room for the legend above the data.
func headroom(a *plot.Axis, frac float64) {
	a.Max *= math.Pow(a.Max/a.Min, frac)
}

// padLinear sets a linear axis to run from lo to hi, padded.
func padLinear(a *plot.Axis, lo, hi float64) {
	pad := (hi - lo) * linPad
	a.Min, a.Max = lo-pad, hi+pad
}

// linearTicks is the default ticker with a label on every tick: the
// default leaves its minor ticks unlabelled.
type linearTicks struct{}

// Ticks implements plot.Ticker.
func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for _, t := range (plot.DefaultTicks{}).Ticks(lo, hi) {
		if t.Label != "" {
			ticks = append(ticks, t)
		}
	}
	return ticks
}

// figure is a plot with a caption: sentences drawn under it that say what
// it shows.
type figure struct {
	*plot.Plot
	Caption string
}

// figure size, and the caption's type size.
const (
	figWidth    = 7 * vg.Inch
	figHeight   = 5.2 * vg.Inch
	captionSize = vg.Length(10)
)

// captionLines wraps f's caption into lines no wider than width.
func (f *figure) captionLines(sty draw.TextStyle, width vg.Length) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(f.Caption) {
		if line != "" && sty.Width(line+" "+w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// draw draws the plot on c with the caption under it.
func (f *figure) draw(c draw.Canvas) {
	sty := f.Title.TextStyle
	sty.Font.Size = captionSize
	sty.XAlign, sty.YAlign = draw.XLeft, draw.YTop
	margin := vg.Points(10)
	lines := f.captionLines(sty, c.Max.X-c.Min.X-2*margin)
	lineH := sty.Height("Mg") * 1.15
	capH := lineH*vg.Length(len(lines)) + margin
	f.Plot.Draw(draw.Crop(c, 0, 0, capH, 0))
	y := c.Min.Y + capH - margin/2
	for _, l := range lines {
		c.FillText(sty, vg.Point{X: c.Min.X + margin, Y: y}, l)
		y -= lineH
	}
}

// writeTo renders f in format ("png", "svg", ...) to w.
func (f *figure) writeTo(w io.Writer, format string) error {
	c, err := draw.NewFormattedCanvas(figWidth, figHeight, format)
	if err != nil {
		return err
	}
	f.draw(draw.New(c))
	_, err = c.WriteTo(w)
	return err
}

// save writes f as a PNG to path.
func (f *figure) save(path string) (err error) {
	file, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("leasebench: %w", err)
	}
	defer func() {
		if cerr := file.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("leasebench: %w", cerr)
		}
	}()
	if err := f.writeTo(file, "png"); err != nil {
		return fmt.Errorf("leasebench: %s: %w", path, err)
	}
	return nil
}

// plot writes the PNG plots of the report to dir.
func (rep *Report) plot(dir string) error {
	type job struct {
		file string
		make func() (*figure, error)
	}
	var todo []job
	if len(rep.Sweeps) > 0 {
		todo = append(todo, job{FileRelativeLoad, rep.relativeLoadPlot})
	}
	if len(rep.Slow) > 0 {
		todo = append(todo, job{FileWriteLatency, rep.writeLatencyPlot})
	}
	if rep.Delay != nil {
		todo = append(todo, job{FileAddedDelay, rep.addedDelayPlot})
	}
	for _, t := range todo {
		f, err := t.make()
		if err != nil {
			return err
		}
		if err := f.save(filepath.Join(dir, t.file)); err != nil {
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
func (ax logAxis) curve(f func(time.Duration) float64) plotter.XYs {
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
	p.Y.Tick.Marker = linearTicks{}
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	return p
}

func addLine(p *plot.Plot, name string, xys plotter.XYs, c color.Color, width vg.Length, dashes []vg.Length) error {
	l, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	l.Color, l.Width, l.Dashes = c, width, dashes
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
	s.Color, s.Shape, s.Radius = c, shape, vg.Points(3.5)
	p.Add(s)
	if name != "" {
		p.Legend.Add(name, s)
	}
	return nil
}

// lineWidth is that of the series' lines; boundWidth that of the bound,
// drawn dashed over them so that both show where they meet.
const (
	lineWidth  = vg.Length(2)
	boundWidth = vg.Length(1.2)
)

// relativeLoadPlot plots the measured relative load of each sweep against
// the term, with the model's curve for each S measured.
func (rep *Report) relativeLoadPlot() (*figure, error) {
	p := newPlot("Consistency traffic against lease term",
		"lease term (s, paper time)", "messages per second ÷ same at term 0")
	var terms []float64
	for _, sw := range rep.Sweeps {
		for _, pt := range sw.Points {
			terms = append(terms, pt.TermPaperS)
		}
	}
	ax := newLogAxis(terms)
	cal := rep.Sweeps[0]
	colors := map[int]color.Color{}
	hi := 1.0
	for i, s := range sharings(rep.Sweeps) {
		colors[s] = seriesColor(i)
		m := rep.paperModel(cal, s)
		xys := ax.curve(m.RelativeLoad)
		for _, xy := range xys {
			hi = max(hi, xy.Y)
		}
		if err := addLine(p, fmt.Sprintf("model, S=%d", s), xys, colors[s], lineWidth, nil); err != nil {
			return nil, err
		}
	}
	for i, sw := range rep.Sweeps {
		c := colors[sw.S]
		filled, open := glyphPair(i)
		var msgs, unbatched plotter.XYs
		for _, pt := range sw.Points {
			msgs = append(msgs, plotter.XY{X: ax.at(pt.TermPaperS), Y: pt.RelLoad})
			unbatched = append(unbatched, plotter.XY{X: ax.at(pt.TermPaperS), Y: pt.RelLeaseOps})
			hi = max(hi, pt.RelLoad, pt.RelLeaseOps)
		}
		if err := addPoints(p, "measured "+sw.Name+", messages", msgs, c, filled); err != nil {
			return nil, err
		}
		if err := addPoints(p, "measured "+sw.Name+", unbatched", unbatched, c, open); err != nil {
			return nil, err
		}
	}
	ax.apply(&p.X)
	// Room above the data for the legend.
	padLinear(&p.Y, 0, max(hi*1.1, 0.8+0.2*float64(len(sharings(rep.Sweeps))+2*len(rep.Sweeps))))
	return &figure{p, fmt.Sprintf("How much consistency traffic (reads that reach the server, renewals, invalidations "+
		"and their replies) the server carries at each lease term, as a fraction of the same workload with no "+
		"leases (term 0); lower is better. S clients share each key. Filled markers: messages as sent; open "+
		"markers: counted unbatched, as the model counts them; lines: the model of Gray and Cheriton. "+
		"Paper time: the run went %g times faster than the paper's workload, so a 10 s term ran as %s.",
		rep.Scale, fmtMS(10000/rep.Scale))}, nil
}

// writeLatencyPlot plots the latency of writes to a held key against the
// term, with a holder that answers and one that does not, and the bound
// term + ε, all in real milliseconds: what the writer waits for is the
// server's clock.
func (rep *Report) writeLatencyPlot() (*figure, error) {
	p := newPlot("Write latency when a lease holder answers or stops answering",
		"lease term (ms, real time)", "write latency (ms, real time)")
	var terms, lats []float64
	for _, sp := range rep.Slow {
		terms = append(terms, sp.TermRealMS)
		lats = append(lats, sp.Latency.P50MS, sp.Latency.MaxMS)
		if sp.Slow {
			lats = append(lats, sp.BoundMS)
		}
		for _, w := range sp.Writes {
			lats = append(lats, w.LatencyMS)
		}
	}
	ax, ay := newLogAxis(terms), newLogAxis(lats)
	var slowAll, slowMax, answerP50, answerAll, bound plotter.XYs
	for _, sp := range rep.Slow {
		x := ax.at(sp.TermRealMS)
		if !sp.Slow {
			answerP50 = append(answerP50, plotter.XY{X: x, Y: ay.at(sp.Latency.P50MS)})
			for _, w := range sp.Writes {
				answerAll = append(answerAll, plotter.XY{X: x, Y: ay.at(w.LatencyMS)})
			}
			continue
		}
		bound = append(bound, plotter.XY{X: x, Y: ay.at(sp.BoundMS)})
		slowMax = append(slowMax, plotter.XY{X: x, Y: ay.at(sp.Latency.MaxMS)})
		for _, w := range sp.Writes {
			slowAll = append(slowAll, plotter.XY{X: x, Y: ay.at(w.LatencyMS)})
		}
	}
	answerGlyph, _ := glyphPair(0)
	slowGlyph, _ := glyphPair(1)
	dashes := []vg.Length{vg.Points(5), vg.Points(3)}
	for _, step := range []func() error{
		func() error { return addLine(p, "answering holder, median", answerP50, seriesColor(0), lineWidth, nil) },
		func() error {
			return addPoints(p, "answering holder, each write", answerAll, seriesColor(0), answerGlyph)
		},
		func() error { return addLine(p, "stopped holder, longest", slowMax, seriesColor(1), lineWidth, nil) },
		func() error {
			return addPoints(p, "stopped holder, each write", slowAll, seriesColor(1), slowGlyph)
		},
		// Last, so that it is drawn over the longest waits it bounds.
		func() error { return addLine(p, "bound: term + ε", bound, oiBlack, boundWidth, dashes) },
	} {
		if err := step(); err != nil {
			return nil, err
		}
	}
	ax.apply(&p.X)
	ay.apply(&p.Y)
	headroom(&p.Y, 0.3)
	p.Legend.Left = true
	return &figure{p, "How long a write waits when another client holds a lease on its key. If the holder " +
		"answers (circles), the write waits for its acknowledgement, about a round trip. If it has stopped " +
		"answering (triangles; it stopped at a different point of its term for each write), the write waits " +
		"until its lease runs out: never longer than the term + ε (dashed line). " +
		fmt.Sprintf("Real time: the terms are the paper's divided by %g.", rep.Scale)}, nil
}

// addedDelayPlot plots the delay leases add per operation against the
// term, in paper time, as the paper's Figure 3 does: with the added
// network delay, and on the plain network of the first sweep with S = 1.
func (rep *Report) addedDelayPlot() (*figure, error) {
	d := rep.Delay
	p := newPlot("Delay added to each operation, on a slow and a fast network (S=1)",
		"lease term (s, paper time)", "mean added delay per operation (s, paper time)")
	sweeps := []Sweep{*d}
	for _, sw := range rep.Sweeps {
		if sw.S == 1 {
			sweeps = append(sweeps, sw)
			break
		}
	}
	maxX := d.Points[len(d.Points)-1].TermPaperS
	var terms, delays []float64
	paperS := func(sw Sweep, ms float64) float64 { return ms * sw.Scale / 1000 }
	for _, sw := range sweeps {
		m := rep.paperModel(sw, 1)
		for _, pt := range sw.Points {
			if pt.TermPaperS <= maxX {
				terms = append(terms, pt.TermPaperS)
				// The model at the measured terms too, so that its curve
				// shows beside them.
				delays = append(delays, paperS(sw, pt.AddedDelayMS), m.AddedDelay(time.Duration(pt.TermPaperS*float64(time.Second))).Seconds())
			}
		}
	}
	ax, ay := newLogAxis(terms), newLogAxis(delays)
	var scales []string
	for i, sw := range sweeps {
		name := fmt.Sprintf("round trip %s", fmtMS(sw.RoundTripMS*sw.Scale))
		if sw.DelayMS > 0 {
			name += fmt.Sprintf(" (+%s each way)", fmtMS(sw.DelayMS*sw.Scale))
		}
		scales = append(scales, fmt.Sprintf("%g", sw.Scale))
		m := rep.paperModel(sw, 1)
		curve := ax.curve(func(t time.Duration) float64 { return m.AddedDelay(t).Seconds() })
		for j := range curve {
			curve[j].Y = ay.at(curve[j].Y)
		}
		if err := addLine(p, "model, "+name, curve, seriesColor(i), lineWidth, nil); err != nil {
			return nil, err
		}
		var xys plotter.XYs
		for _, pt := range sw.Points {
			if pt.TermPaperS <= maxX {
				xys = append(xys, plotter.XY{X: ax.at(pt.TermPaperS), Y: ay.at(paperS(sw, pt.AddedDelayMS))})
			}
		}
		glyph, _ := glyphPair(i)
		if err := addPoints(p, "measured, "+name, xys, seriesColor(i), glyph); err != nil {
			return nil, err
		}
	}
	ax.apply(&p.X)
	ay.apply(&p.Y)
	headroom(&p.Y, 0.3)
	return &figure{p, "How much a lease term saves on a slow network: the mean delay that waiting for the " +
		"server adds to a read or write, with and without extra network delay. A read the cache cannot serve " +
		"waits a round trip; longer terms serve more reads from the cache. Lines: the model of Gray and " +
		"Cheriton. Paper time: the runs went " + strings.Join(scales, " and ") +
		" times faster than the paper's workload, and their times are scaled back."}, nil
}
