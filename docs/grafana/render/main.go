// Command render draws a Grafana dashboard's panels into one PNG by
// evaluating their PromQL queries against a Prometheus server, for the
// picture in docs/grafana: Grafana itself need not be installed. It is not
// Grafana's rendering, only the same queries over the same time range,
// laid out on the dashboard's grid and drawn with gonum/plot:
//
//   - a timeseries panel is a line plot, one line per series, named by the
//     target's legendFormat, with the panel's unit on the Y axis;
//   - a stat panel is the last value of each series in large type, over a
//     line of its values (Grafana's default sparkline).
//
// Only the template variable $instance is substituted (--instance, every
// node by default). Series that are zero throughout are drawn but left out
// of the legend, which says how many there were, so that a counter by type
// does not list every type that never happened.
//
//	go run ./docs/grafana/render --prometheus http://127.0.0.1:9090 --last 15m
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"log"
	"maps"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// dashboard is the part of a Grafana dashboard's JSON model that render
// draws.
type dashboard struct {
	Title  string  `json:"title"`
	Panels []panel `json:"panels"`
}

// panel is one panel: its type ("timeseries" or "stat"), title, place on
// the 24-column grid, unit and queries.
type panel struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	GridPos struct {
		X int `json:"x"`
		Y int `json:"y"`
		W int `json:"w"`
		H int `json:"h"`
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []target `json:"targets"`
}

// target is one PromQL query of a panel.
type target struct {
	RefID        string `json:"refId"`
	Expr         string `json:"expr"`
	LegendFormat string `json:"legendFormat"`
}

// series is one series a target returned: its legend and its points, X in
// Unix seconds.
type series struct {
	name   string
	points plotter.XYs
}

// gridColumns is the width of Grafana's grid, in columns.
const gridColumns = 24

// options are the command line's.
type options struct {
	prometheus, dashboard, out, instance string
	from, to                             time.Time
	step                                 time.Duration
	width, height                        int
}

func main() {
	var o options
	var from, to string
	var last time.Duration
	flag.StringVar(&o.prometheus, "prometheus", "http://127.0.0.1:9090", "Prometheus server's URL")
	flag.StringVar(&o.dashboard, "dashboard", "docs/grafana/leased-dashboard.json", "Grafana dashboard JSON file")
	flag.StringVar(&o.out, "out", "docs/grafana/leased-dashboard.png", "PNG file to write")
	flag.StringVar(&o.instance, "instance", ".*", "value of $instance: a regular expression of the nodes' instance labels")
	flag.StringVar(&from, "from", "", "start of the time range: Unix seconds or RFC 3339 (default: --to minus --last)")
	flag.StringVar(&to, "to", "", "end of the time range: Unix seconds or RFC 3339 (default: now)")
	flag.DurationVar(&last, "last", 15*time.Minute, "length of the time range when --from is not given")
	flag.DurationVar(&o.step, "step", 0, "query resolution (default: the range over 400, at least 5s)")
	flag.IntVar(&o.width, "width", 1800, "image width in pixels")
	flag.IntVar(&o.height, "height", 2000, "image height in pixels")
	flag.Parse()

	var err error
	o.to = time.Now()
	if to != "" {
		if o.to, err = parseTime(to); err != nil {
			log.Fatalf("--to: %v", err)
		}
	}
	o.from = o.to.Add(-last)
	if from != "" {
		if o.from, err = parseTime(from); err != nil {
			log.Fatalf("--from: %v", err)
		}
	}
	if !o.from.Before(o.to) {
		log.Fatal("the time range is empty: --from must be before --to")
	}
	if o.step == 0 {
		o.step = max(5*time.Second, o.to.Sub(o.from)/400).Round(time.Second)
	}
	if err := run(o); err != nil {
		log.Fatal(err)
	}
}

// parseTime reads Unix seconds or an RFC 3339 time.
func parseTime(s string) (time.Time, error) {
	if sec, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Unix(0, int64(sec*1e9)), nil
	}
	return time.Parse(time.RFC3339, s)
}

// run reads the dashboard, queries Prometheus for every panel and writes
// the image.
func run(o options) error {
	b, err := os.ReadFile(o.dashboard)
	if err != nil {
		return err
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return fmt.Errorf("%s: %w", o.dashboard, err)
	}
	if len(d.Panels) == 0 {
		return errNoPanels
	}
	c, err := api.NewClient(api.Config{Address: o.prometheus})
	if err != nil {
		return err
	}
	prom := c

	img := vgimg.NewWith(vgimg.UseWH(px(o.width), px(o.height)), vgimg.UseDPI(dpi),
		vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)

	// A heading across the top, then the panels on the grid below it.
	const headingPx = 64
	heading := fmt.Sprintf("%s — %s to %s UTC, step %s", d.Title,
		o.from.UTC().Format("2006-01-02 15:04:05"), o.to.UTC().Format("15:04:05"), o.step)
	top := dc.Max.Y
	dc.FillText(textStyle(16, color.Black), vg.Point{X: px(12), Y: top - px(8)}, heading)
	dc.FillText(textStyle(11, color.Gray{Y: 80}), vg.Point{X: px(12), Y: top - px(36)},
		"Rendered from the dashboard's own PromQL queries against Prometheus, drawn with gonum/plot by docs/grafana/render: not Grafana's own pixels.")
	grid := dc
	grid.Max.Y -= px(headingPx)

	rows := 0
	for _, p := range d.Panels {
		rows = max(rows, p.GridPos.Y+p.GridPos.H)
	}
	colW := (grid.Max.X - grid.Min.X) / gridColumns
	rowH := (grid.Max.Y - grid.Min.Y) / vg.Length(rows)
	for _, p := range d.Panels {
		// Grid rows count down from the top; the canvas's Y counts up.
		pc := grid
		pc.Min.X = grid.Min.X + colW*vg.Length(p.GridPos.X)
		pc.Max.X = pc.Min.X + colW*vg.Length(p.GridPos.W)
		pc.Max.Y = grid.Max.Y - rowH*vg.Length(p.GridPos.Y)
		pc.Min.Y = pc.Max.Y - rowH*vg.Length(p.GridPos.H)
		pc = draw.Crop(pc, px(4), -px(4), px(4), -px(4))
		frame(pc)
		ss, err := query(prom, p, o)
		if err != nil {
			return fmt.Errorf("panel %q: %w", p.Title, err)
		}
		inner := draw.Crop(pc, px(6), -px(6), px(6), -px(6))
		switch p.Type {
		case "stat":
			drawStat(inner, p, ss, o)
		case "timeseries":
			if err := drawTimeseries(inner, p, ss, o); err != nil {
				return fmt.Errorf("panel %q: %w", p.Title, err)
			}
		default:
			log.Printf("panel %q: type %q is not drawn", p.Title, p.Type)
		}
	}

	f, err := os.Create(o.out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// dpi is the image's resolution: at 96 dots per inch a pixel is 0.75 pt.
const dpi = 96

// px converts pixels of the image to the canvas's length.
func px(n int) vg.Length { return vg.Length(n) * vg.Inch / dpi }

// textStyle is plain text in the default font at size points.
func textStyle(size vg.Length, c color.Color) draw.TextStyle {
	return draw.TextStyle{Color: c, Font: font.From(plot.DefaultFont, size), Handler: plot.DefaultTextHandler,
		YAlign: text.YTop}
}

// frame draws a panel's border.
func frame(c draw.Canvas) {
	r := c.Rectangle
	c.StrokeLines(draw.LineStyle{Color: color.Gray{Y: 200}, Width: vg.Points(1)}, []vg.Point{
		r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}, r.Min,
	})
}

// legendLabel matches {{label}} in a legendFormat.
var legendLabel = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// query evaluates every target of p over the time range, with $instance
// substituted, and returns the series in the order of the targets.
func query(prom api.Client, p panel, o options) ([]series, error) {
	var out []series
	for _, t := range p.Targets {
		expr := strings.NewReplacer("${instance}", o.instance, "$instance", o.instance).Replace(t.Expr)
		m, err := queryRange(prom, expr, o)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", expr, err)
		}
		for _, s := range m {
			xys := make(plotter.XYs, len(s.Values))
			for i, v := range s.Values {
				if xys[i], err = v.xy(); err != nil {
					return nil, fmt.Errorf("%s: %w", expr, err)
				}
			}
			out = append(out, series{name: legend(t.LegendFormat, s.Metric), points: xys})
		}
	}
	return out, nil
}

// queryResponse is the body of Prometheus's /api/v1/query_range.
type queryResponse struct {
	Status string `json:"status"`
	Data   struct {
		ResultType string       `json:"resultType"`
		Result     []promSeries `json:"result"`
	} `json:"data"`
	ErrorType string   `json:"errorType"`
	Error     string   `json:"error"`
	Warnings  []string `json:"warnings"`
}

// promSeries is one series of a range query's answer: its labels, and
// its samples as [Unix seconds, "value"].
type promSeries struct {
	Metric map[string]string `json:"metric"`
	Values []sample          `json:"values"`
}

// sample is one [Unix seconds, "value"] pair of a promSeries.
type sample [2]any

// xy returns the sample as a point, X in Unix seconds. Values come as
// strings so that "NaN" and "+Inf" survive JSON.
func (s sample) xy() (plotter.XY, error) {
	t, ok1 := s[0].(float64)
	v, ok2 := s[1].(string)
	if !ok1 || !ok2 {
		return plotter.XY{}, fmt.Errorf("a sample %v, not [time, \"value\"]", s)
	}
	y, err := strconv.ParseFloat(v, 64)
	return plotter.XY{X: t, Y: y}, err
}

// queryRange asks Prometheus's HTTP API for expr over the time range. It
// decodes the answer itself rather than with client_golang's api/v1, which
// before Go 1.27 needs a JSON module that leased does not otherwise use,
// and prometheus/common's model types, which leased does not import.
func queryRange(prom api.Client, expr string, o options) ([]promSeries, error) {
	u := prom.URL("/api/v1/query_range", nil)
	q := u.Query()
	q.Set("query", expr)
	q.Set("start", strconv.FormatInt(o.from.Unix(), 10))
	q.Set("end", strconv.FormatInt(o.to.Unix(), 10))
	q.Set("step", strconv.FormatFloat(o.step.Seconds(), 'f', -1, 64))
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	_, body, err := prom.Do(ctx, req)
	if err != nil {
		return nil, err
	}
	var r queryResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("the answer: %w", err)
	}
	for _, w := range r.Warnings {
		log.Printf("%s: %s", expr, w)
	}
	switch {
	case r.Status != "success":
		return nil, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	case r.Data.ResultType != "matrix":
		return nil, fmt.Errorf("a %s, not a range of series", r.Data.ResultType)
	}
	return r.Data.Result, nil
}

// legend names a series as Grafana does: the legendFormat with each
// {{label}} replaced, or else the series' labels.
func legend(format string, m map[string]string) string {
	if format != "" {
		return legendLabel.ReplaceAllStringFunc(format, func(s string) string {
			return m[legendLabel.FindStringSubmatch(s)[1]]
		})
	}
	if len(m) == 0 {
		return "value"
	}
	var labels []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if k != "__name__" {
			labels = append(labels, fmt.Sprintf("%s=%q", k, m[k]))
		}
	}
	return m["__name__"] + "{" + strings.Join(labels, ", ") + "}"
}

// unit says how values of a panel's unit up to top are shown: the label
// of the axis or value (a scaled unit, such as ms or MiB) and the factor
// that scales them to it.
func unit(u string, top float64) (label string, factor float64) {
	switch u {
	case "s":
		switch {
		case top == 0 || top >= 1:
			return "s", 1
		case top >= 1e-3:
			return "ms", 1e3
		default:
			return "µs", 1e6
		}
	case "bytes":
		for i, suffix := range []string{"B", "KiB", "MiB", "GiB", "TiB"} {
			if top < math.Pow(1024, float64(i+1)) || suffix == "TiB" {
				return suffix, 1 / math.Pow(1024, float64(i))
			}
		}
	case "reqps":
		return "req/s", 1
	case "ops":
		return "ops/s", 1
	}
	return "", 1
}

// stats returns the largest absolute finite value of ss, and whether every
// value is zero (or not a number).
func stats(ss []series) (top float64, allZero bool) {
	allZero = true
	for _, s := range ss {
		for _, p := range s.points {
			if math.IsNaN(p.Y) || math.IsInf(p.Y, 0) {
				continue
			}
			top = max(top, math.Abs(p.Y))
			if p.Y != 0 {
				allZero = false
			}
		}
	}
	return top, allZero
}

// segments splits points where a value is not a number or where a gap is
// longer than two steps, as Grafana leaves such stretches blank.
func segments(points plotter.XYs, step time.Duration) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	gap := 2 * step.Seconds()
	for _, p := range points {
		bad := math.IsNaN(p.Y) || math.IsInf(p.Y, 0)
		if bad || (len(cur) > 0 && p.X-cur[len(cur)-1].X > gap*1.01) {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
		}
		if !bad {
			cur = append(cur, p)
		}
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// drawTimeseries draws a line plot of ss in c, the legend to its right.
func drawTimeseries(c draw.Canvas, p panel, ss []series, o options) error {
	top, _ := stats(ss)
	label, factor := unit(p.FieldConfig.Defaults.Unit, top)

	pl := plot.New()
	pl.Title.Text = p.Title
	pl.Title.TextStyle.Font.Size = 13
	pl.Y.Label.Text = label
	pl.X.Tick.Marker = plot.TimeTicks{Format: "15:04"}
	pl.X.Min, pl.X.Max = float64(o.from.Unix()), float64(o.to.Unix())
	pl.Y.Min = 0
	pl.Add(plotter.NewGrid())

	// The legend is drawn apart from the plot, in a strip on its right.
	lg := plot.NewLegend()
	lg.Top, lg.Left = true, true
	lg.TextStyle.Font.Size = 10
	var hidden int
	for i, s := range ss {
		sty := draw.LineStyle{Color: plotutil.Color(i), Width: vg.Points(1.3), Dashes: plotutil.Dashes(i / 7)}
		var thumb plot.Thumbnailer
		for _, seg := range segments(s.points, o.step) {
			scaled := make(plotter.XYs, len(seg))
			for j, pt := range seg {
				scaled[j] = plotter.XY{X: pt.X, Y: pt.Y * factor}
			}
			l, err := plotter.NewLine(scaled)
			if err != nil {
				return err
			}
			l.LineStyle = sty
			pl.Add(l)
			thumb = l
		}
		switch _, zero := stats([]series{s}); {
		case zero:
			hidden++
		case thumb != nil:
			lg.Add(s.name, thumb)
		}
	}
	if len(ss) == 0 {
		lg.Add("no data")
	}
	if hidden > 0 {
		lg.Add(fmt.Sprintf("(%d zero throughout)", hidden))
	}
	if top == 0 {
		pl.Y.Max = 1
	}

	strip := (c.Max.X - c.Min.X) * 0.24
	pl.Draw(draw.Crop(c, 0, -strip, 0, 0))
	lg.Draw(draw.Crop(c, c.Max.X-c.Min.X-strip+px(6), 0, 0, -px(24)))
	return nil
}

// drawStat draws the last value of each series of ss in large type, each
// in a column of its own over a line of its values, and the title above.
func drawStat(c draw.Canvas, p panel, ss []series, o options) {
	title := textStyle(13, color.Black)
	title.XAlign = text.XCenter
	c.FillText(title, vg.Point{X: (c.Min.X + c.Max.X) / 2, Y: c.Max.Y}, p.Title)
	body := draw.Crop(c, 0, 0, 0, -px(24))
	if len(ss) == 0 {
		body.FillText(textStyle(12, color.Gray{Y: 120}), vg.Point{X: body.Min.X, Y: body.Max.Y}, "no data")
		return
	}
	// One column per series, in the order of their names.
	slices.SortFunc(ss, func(a, b series) int { return strings.Compare(a.name, b.name) })
	colW := (body.Max.X - body.Min.X) / vg.Length(len(ss))
	for i, s := range ss {
		col := body
		col.Min.X = body.Min.X + colW*vg.Length(i)
		col.Max.X = col.Min.X + colW
		col = draw.Crop(col, px(3), -px(3), 0, 0)
		sparkline(col, segments(s.points, o.step), float64(o.from.Unix()), float64(o.to.Unix()), plotutil.Color(i))

		last, peak := math.NaN(), math.Inf(-1)
		for _, pt := range s.points {
			if !math.IsNaN(pt.Y) {
				last, peak = pt.Y, max(peak, pt.Y)
			}
		}
		value := format(last, p.FieldConfig.Defaults.Unit)
		big := textStyle(26, plotutil.Color(i))
		big.XAlign = text.XCenter
		for big.Font.Size > 12 && big.Width(value) > col.Max.X-col.Min.X {
			big.Font.Size -= 2 // smaller type for a value wider than its column
		}
		mid := (col.Min.X + col.Max.X) / 2
		col.FillText(big, vg.Point{X: mid, Y: col.Max.Y - px(4)}, value)
		small := textStyle(10, color.Gray{Y: 60})
		small.XAlign = text.XCenter
		name := s.name
		if peak > last {
			name += ", max " + format(peak, p.FieldConfig.Defaults.Unit)
		}
		col.FillText(small, vg.Point{X: mid, Y: col.Max.Y - px(44)}, name)
	}
}

// sparkline draws the segments of a series in the lower half of c: X
// from lo to hi (the time range), Y from zero to the largest value.
func sparkline(c draw.Canvas, segs []plotter.XYs, lo, hi float64, clr color.Color) {
	top := 0.0
	for _, seg := range segs {
		for _, p := range seg {
			top = max(top, p.Y)
		}
	}
	if top == 0 {
		top = 1
	}
	h := (c.Max.Y - c.Min.Y) * 0.45
	r, g, b, _ := clr.RGBA()
	light := color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 140}
	for _, seg := range segs {
		line := make([]vg.Point, len(seg))
		for i, p := range seg {
			line[i] = vg.Point{
				X: c.Min.X + (c.Max.X-c.Min.X)*vg.Length((p.X-lo)/(hi-lo)),
				Y: c.Min.Y + h*vg.Length(p.Y/top),
			}
		}
		c.StrokeLines(draw.LineStyle{Color: light, Width: vg.Points(1.2)}, line)
	}
}

// format shows a stat's value in its unit.
func format(v float64, u string) string {
	if math.IsNaN(v) {
		return "–"
	}
	label, factor := unit(u, math.Abs(v))
	s := strconv.FormatFloat(v*factor, 'f', -1, 64)
	if v*factor != math.Trunc(v*factor) {
		s = strconv.FormatFloat(v*factor, 'f', 2, 64)
	}
	if label != "" {
		s += " " + label
	}
	return s
}

// errNoPanels is returned for a dashboard without panels.
var errNoPanels = errors.New("the dashboard has no panels")
