package bench

import (
	"bytes"
	"image/color"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
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

// svgText renders p and returns the text it shows.
func svgText(t *testing.T, p *plot.Plot) string {
	t.Helper()
	w, err := p.WriterTo(7*vg.Inch, 4.5*vg.Inch, "svg")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := w.WriteTo(&b); err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range regexp.MustCompile(`<text[^>]*>([^<]*)</text>`).FindAllStringSubmatch(b.String(), -1) {
		texts = append(texts, m[1])
	}
	return strings.Join(texts, "\n")
}

// TestPlots checks the promises of every plot: a logarithmic term axis
// with term 0 drawn and labelled "0" left of the shortest term, times in
// seconds only, and the model drawn for the S measured and no other.
func TestPlots(t *testing.T) {
	rep := plotReport()
	build := map[string]func() (*plot.Plot, error){
		"relative load": rep.relativeLoadPlot,
		"write latency": rep.writeLatencyPlot,
		"added delay":   rep.addedDelayPlot,
	}
	for name, f := range build {
		t.Run(name, func(t *testing.T) {
			p, err := f()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := p.X.Scale.(plot.LogScale); !ok {
				t.Errorf("term axis scale %T, want plot.LogScale", p.X.Scale)
			}
			for _, label := range []string{p.X.Label.Text, p.Y.Label.Text} {
				if strings.Contains(label, "(ms)") {
					t.Errorf("axis %q is not in seconds", label)
				}
			}
			if !strings.HasSuffix(p.X.Label.Text, "time (s)") {
				t.Errorf("term axis %q: want seconds", p.X.Label.Text)
			}
			text := svgText(t, p)
			for _, tick := range []string{"0.1", "1"} {
				if !slices.Contains(strings.Split(text, "\n"), tick) {
					t.Errorf("no tick %q on the log axis; text:\n%s", tick, text)
				}
			}
		})
	}

	// Term 0 is on the relative-load and added-delay plots, left of the
	// shortest term, and the shortest term's decade tick is left out
	// beside it.
	p, err := rep.relativeLoadPlot()
	if err != nil {
		t.Fatal(err)
	}
	if p.X.Min != 0.1*zeroFraction || p.X.Max != 100 {
		t.Errorf("relative load: x from %v to %v, want %v to 100", p.X.Min, p.X.Max, 0.1*zeroFraction)
	}
	ticks := p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max)
	if ticks[0].Value != 0.1*zeroFraction || ticks[0].Label != "0" {
		t.Errorf("first tick %+v, want 0 at %v", ticks[0], 0.1*zeroFraction)
	}
	for _, tk := range ticks[1:] {
		if tk.Value < 0.1*0.99 {
			t.Errorf("tick %+v crowds the 0 tick", tk)
		}
	}
	text := svgText(t, p)
	for _, want := range []string{"model S=1", "model S=10", "measured S=10, messages"} {
		if !strings.Contains(text, want) {
			t.Errorf("relative load: no %q in the legend:\n%s", want, text)
		}
	}
	for _, unwanted := range []string{"model S=20", "model S=40"} {
		if strings.Contains(text, unwanted) {
			t.Errorf("relative load: %q drawn, but S=20 and 40 were not measured", unwanted)
		}
	}

	// The write-latency plot has no term 0 and no "0" tick on its x axis.
	p, err = rep.writeLatencyPlot()
	if err != nil {
		t.Fatal(err)
	}
	if p.X.Min != 0.01 || p.X.Max != 1 {
		t.Errorf("write latency: x from %v to %v s, want 0.01 to 1", p.X.Min, p.X.Max)
	}
	for _, tk := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
		if tk.Label == "0" {
			t.Errorf("write latency: a 0 tick on an axis without term 0: %+v", tk)
		}
	}
}

func TestTermAxisCurve(t *testing.T) {
	ax := newTermAxis([]float64{0, 0.5, 100})
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
		ax := newTermAxis(terms)
		if ax.min <= 0 || ax.max <= ax.min {
			t.Errorf("terms %v: axis %+v", terms, ax)
		}
		p := newPlot("t", "x", "y")
		var xys plotter.XYs
		for _, term := range terms {
			xys = append(xys, plotter.XY{X: ax.x(term), Y: 1})
		}
		if len(xys) > 0 {
			if err := addPoints(p, "p", xys, color.Black, draw.CircleGlyph{}); err != nil {
				t.Fatal(err)
			}
		}
		ax.apply(p)
		svgText(t, p)
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
