package bench

import (
	"bytes"
	"fmt"
	"html"
	"image/color"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg/draw"
)

// plotReport is a report as a run with S = 1 and 10 at terms 0 to 100 s,
// an added-delay sweep and the slow-holder experiment would give.
func plotReport() *Report {
	sweep := func(name string, s int, scale float64, terms ...float64) Sweep {
		sw := Sweep{Name: name, S: s, Clients: 10, Keys: 50 / s, Pairs: 50, Scale: scale, RoundTripMS: 0.4, MPropMS: 0.1, MProcMS: 0.05}
		for i, t := range terms {
			sw.Points = append(sw.Points, Point{TermPaperS: t, TermRealMS: t * 1000 / scale, RelLoad: 1 / float64(i+1), RelLeaseOps: 1.1 / float64(i+1), AddedDelayMS: 0.02 / float64(i+1)})
		}
		return sw
	}
	delay := sweep("S=1, +50ms each way", 1, 20, 0, 1, 3, 10, 30)
	rep := &Report{Scale: 100, RPaper: 0.864, WPaper: 0.039,
		Sweeps: []Sweep{sweep("S=1", 1, 100, 0, 0.1, 1, 10, 30, 100), sweep("S=10", 10, 100, 0, 0.1, 1, 10, 30, 100)},
		Delay:  &delay}
	for _, t := range []float64{10, 100, 300, 1000} { // real ms
		for _, slow := range []bool{false, true} {
			lat := 1.0
			if slow {
				lat = t
			}
			rep.Slow = append(rep.Slow, SlowPoint{Slow: slow, TermPaperS: t / 10, TermRealMS: t, BoundMS: t + 100,
				Writes: []SlowWrite{{LatencyMS: lat}}, Latency: Latency{P50MS: lat, MaxMS: lat}})
		}
	}
	return rep
}

// svgOf renders f as SVG.
func svgOf(t *testing.T, f *figure) string {
	t.Helper()
	var b bytes.Buffer
	if err := f.writeTo(&b, "svg"); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// svgText renders f and returns the text it shows, a line for each text
// element.
func svgText(t *testing.T, f *figure) string {
	t.Helper()
	var texts []string
	for _, m := range regexp.MustCompile(`<text[^>]*>([^<]*)</text>`).FindAllStringSubmatch(svgOf(t, f), -1) {
		texts = append(texts, html.UnescapeString(m[1]))
	}
	return strings.Join(texts, "\n")
}

// figures returns the plots of rep by name.
func figures(rep *Report) map[string]func() (*figure, error) {
	return map[string]func() (*figure, error){
		"relative load": rep.relativeLoadPlot,
		"write latency": rep.writeLatencyPlot,
		"added delay":   rep.addedDelayPlot,
	}
}

// timeUnit matches an axis label's unit and kind of time, as in
// "(s, paper time)" or "(ms, real time)".
var timeUnit = regexp.MustCompile(`\((s|ms), (paper|real) time\)$`)

// TestPlots checks the promises of every plot: a logarithmic term axis
// with term 0 drawn and labelled "0" left of the shortest term; axes
// named with their units and one kind and unit of time per plot; a label
// on every tick; no point at the edge of the axes; and a caption under
// the plot.
func TestPlots(t *testing.T) {
	rep := plotReport()
	for name, f := range figures(rep) {
		t.Run(name, func(t *testing.T) {
			fig, err := f()
			if err != nil {
				t.Fatal(err)
			}
			p := fig.Plot
			if _, ok := p.X.Scale.(plot.LogScale); !ok {
				t.Errorf("term axis scale %T, want plot.LogScale", p.X.Scale)
			}
			if !strings.HasPrefix(p.X.Label.Text, "lease term (") {
				t.Errorf("term axis %q: want it named plainly, with its unit", p.X.Label.Text)
			}
			// Each time axis says its unit and kind of time, and they are
			// the same on both axes.
			var units []string
			for _, label := range []string{p.X.Label.Text, p.Y.Label.Text} {
				if m := timeUnit.FindStringSubmatch(label); m != nil {
					units = append(units, m[0])
				} else if strings.Contains(label, "time") || strings.Contains(label, "latency") || strings.Contains(label, "delay") {
					t.Errorf("axis %q: a time without its unit and kind", label)
				}
			}
			if len(units) == 0 || slices.ContainsFunc(units, func(u string) bool { return u != units[0] }) {
				t.Errorf("time axes %q: want one unit and kind of time", units)
			}
			// Every tick the axes draw has a label.
			for _, a := range []*plot.Axis{&p.X, &p.Y} {
				ticks := a.Tick.Marker.Ticks(a.Min, a.Max)
				if len(ticks) < 2 {
					t.Errorf("axis %q: ticks %+v, want at least 2", a.Label.Text, ticks)
				}
				for _, tk := range ticks {
					if tk.Label == "" {
						t.Errorf("axis %q: tick at %v without a label", a.Label.Text, tk.Value)
					}
				}
			}
			// No point or marker at the edge: every glyph lies inside the
			// axes' ranges with room to spare.
			for _, b := range p.GlyphBoxes(p) {
				if b.X < 0.02 || b.X > 0.98 || b.Y < 0.02 || b.Y > 0.98 {
					t.Errorf("a point at (%.3f, %.3f) of the axes: at or past the edge", b.X, b.Y)
				}
			}
			text := svgText(t, fig)
			if len(fig.Caption) < 100 {
				t.Errorf("caption %q: want a sentence or two under the plot", fig.Caption)
			}
			for _, w := range strings.Fields(fig.Caption) {
				if !strings.Contains(text, w) {
					t.Errorf("caption word %q not drawn; text:\n%s", w, text)
					break
				}
			}
		})
	}

	// Term 0 is on the relative-load and added-delay plots, left of the
	// shortest term, and the shortest term's decade tick is left out
	// beside it; the terms of the sweep (0.1, 0.3, 1, 3, ...) are labelled.
	fig, err := rep.relativeLoadPlot()
	if err != nil {
		t.Fatal(err)
	}
	p := fig.Plot
	if p.X.Min >= 0.1*zeroFraction || p.X.Max <= 100 {
		t.Errorf("relative load: x from %v to %v, want beyond %v to 100", p.X.Min, p.X.Max, 0.1*zeroFraction)
	}
	ticks := p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max)
	if ticks[0].Value != 0.1*zeroFraction || ticks[0].Label != "0" {
		t.Errorf("first tick %+v, want 0 at %v", ticks[0], 0.1*zeroFraction)
	}
	var labels []string
	for _, tk := range ticks[1:] {
		if tk.Value < 0.1*0.99 {
			t.Errorf("tick %+v crowds the 0 tick", tk)
		}
		labels = append(labels, tk.Label)
	}
	if want := []string{"0.1", "0.3", "1", "3", "10", "30", "100"}; !slices.Equal(labels, want) {
		t.Errorf("relative load: term ticks %q, want %q", labels, want)
	}
	text := svgText(t, fig)
	for _, want := range []string{"model, S=1", "model, S=10", "measured S=10, messages"} {
		if !strings.Contains(text, want) {
			t.Errorf("relative load: no %q in the legend:\n%s", want, text)
		}
	}
	for _, unwanted := range []string{"model, S=20", "model, S=40"} {
		if strings.Contains(text, unwanted) {
			t.Errorf("relative load: %q drawn, but S=20 and 40 were not measured", unwanted)
		}
	}

	// The write-latency plot has no term 0 and no "0" tick on its x
	// axis, and its latencies, from 1 ms to 1 s, are on a log axis.
	fig, err = rep.writeLatencyPlot()
	if err != nil {
		t.Fatal(err)
	}
	p = fig.Plot
	if p.X.Min >= 10 || p.X.Min < 5 || p.X.Max <= 1000 || p.X.Max > 2000 {
		t.Errorf("write latency: x from %v to %v ms, want a little beyond 10 to 1000", p.X.Min, p.X.Max)
	}
	for _, tk := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
		if tk.Label == "0" {
			t.Errorf("write latency: a 0 tick on an axis without term 0: %+v", tk)
		}
	}
	for name, a := range map[string]plot.Axis{"write latency": p.Y, "added delay": mustFigure(t, rep.addedDelayPlot).Y} {
		if _, ok := a.Scale.(plot.LogScale); !ok {
			t.Errorf("%s: y scale %T, want plot.LogScale: the values span decades", name, a.Scale)
		}
	}
}

func mustFigure(t *testing.T, f func() (*figure, error)) *figure {
	t.Helper()
	fig, err := f()
	if err != nil {
		t.Fatal(err)
	}
	return fig
}

// svgColors returns the colours the SVG strokes and fills with.
func svgColors(svg string) map[string]bool {
	colors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?:stroke|fill):(#[0-9a-fA-F]{6})`).FindAllStringSubmatch(svg, -1) {
		colors[m[1]] = true
	}
	return colors
}

// TestPlotColorsAndMarkers checks that the series are drawn in colours of
// the Okabe–Ito palette, which colour-blind readers can tell apart, each
// with its own marker, and that the bound is drawn over the data it
// bounds.
func TestPlotColorsAndMarkers(t *testing.T) {
	rep := plotReport()
	allowed := map[color.Color]bool{oiBlack: true}
	for _, c := range palette {
		allowed[c] = true
	}
	if len(allowed) != len(palette)+1 {
		t.Errorf("palette %v: colours repeat", palette)
	}
	for name, f := range figures(rep) {
		fig := mustFigure(t, f)
		used := svgColors(svgOf(t, fig))
		for _, c := range []color.Color{plotutil.Color(0), plotutil.Color(1), color.RGBA{R: 0xff, A: 0xff}, color.RGBA{G: 0xff, A: 0xff}} {
			if used[svgColor(c)] {
				t.Errorf("%s: drawn in %v, not a colour-blind safe colour", name, c)
			}
		}
		for _, c := range palette[:2] {
			if !used[svgColor(c)] {
				t.Errorf("%s: %v of the palette not used; colours %v", name, c, used)
			}
		}
	}
	seen := map[string]bool{}
	for i := range 4 {
		filled, open := glyphPair(i)
		for _, g := range []draw.GlyphDrawer{filled, open} {
			k := fmt.Sprintf("%T", g)
			if seen[k] {
				t.Errorf("marker %s used twice", k)
			}
			seen[k] = true
		}
	}

	// The bound is dashed, and drawn after (over) the longest waits and
	// the slow holder's writes: the data come before the legend.
	svg := svgOf(t, mustFigure(t, rep.writeLatencyPlot))
	dashed := strings.Index(svg, "stroke-dasharray")
	longest := strings.Index(svg, "stroke:"+svgColor(seriesColor(1)))
	if dashed < 0 || longest < 0 || dashed < longest {
		t.Errorf("write latency: the dashed bound (at %d) is not drawn after the slow holder's line (at %d)", dashed, longest)
	}
}

// svgColor returns c as the SVG writes it.
func svgColor(c color.Color) string {
	r, g, b, _ := c.RGBA()
	return fmt.Sprintf("#%02X%02X%02X", r>>8, g>>8, b>>8)
}

func TestLogAxisCurve(t *testing.T) {
	ax := newLogAxis([]float64{0, 0.5, 100})
	xys := ax.curve(func(d time.Duration) float64 { return d.Seconds() })
	if xys[0].X != ax.zeroAt || xys[0].Y != 0 {
		t.Errorf("curve starts at %+v, want term 0 at %v", xys[0], ax.zeroAt)
	}
	for i := 1; i < len(xys); i++ {
		if xys[i].X <= xys[i-1].X || xys[i].X <= 0 {
			t.Fatalf("curve x not increasing and positive at %d: %v then %v", i, xys[i-1].X, xys[i].X)
		}
		// Away from term 0 the curve is sampled at the term it shows.
		if math.Abs(xys[i].Y-xys[i].X) > 1e-6*xys[i].X {
			t.Fatalf("curve at x %v has y %v", xys[i].X, xys[i].Y)
		}
	}
	if last := xys[len(xys)-1].X; math.Abs(last-100) > 1e-9 {
		t.Errorf("curve ends at %v, want 100", last)
	}

	// Only term 0, one term, or none at all: still a valid log axis,
	// which draws and whose ticks ask for no value of 0 or less.
	for _, terms := range [][]float64{{0}, nil, {0.3}, {0.3, 0.3}, {0, 2}} {
		ax := newLogAxis(terms)
		if ax.min <= 0 || ax.max <= ax.min {
			t.Errorf("terms %v: axis %+v", terms, ax)
		}
		p := newPlot("t", "x", "y")
		var xys plotter.XYs
		for _, term := range terms {
			xys = append(xys, plotter.XY{X: ax.at(term), Y: 1})
		}
		if len(xys) > 0 {
			if err := addPoints(p, "p", xys, color.Black, draw.CircleGlyph{}); err != nil {
				t.Fatal(err)
			}
		}
		ax.apply(&p.X)
		svgText(t, &figure{p, "a caption"})
		if ticks := ax.Ticks(-1, 1); len(ticks) == 0 {
			t.Errorf("terms %v: no ticks for a range that is not the axis's", terms)
		}
	}
}

func TestSharings(t *testing.T) {
	got := sharings([]Sweep{{S: 10}, {S: 1}, {S: 10}, {S: 40}})
	if want := []int{10, 1, 40}; !slices.Equal(got, want) {
		t.Errorf("sharings = %v, want %v", got, want)
	}
}
