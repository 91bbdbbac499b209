package bench

import (
	"fmt"
	"path/filepath"
	"time"

	"gonum.org/v1/plot/plotter"
)

// plot draws the leasefs scenario's figures into dir.
func (rep *FSReport) plot(dir string) error {
	if len(rep.Points) == 0 {
		return nil
	}
	for file, mk := range map[string]func() (*figure, error){
		FileFSLoad: rep.loadPlot, FileFSFind: rep.findPlot, FileFSChange: rep.changePlot,
	} {
		f, err := mk()
		if err != nil {
			return err
		}
		if err := f.save(filepath.Join(dir, file)); err != nil {
			return err
		}
	}
	return nil
}

// fsAxis is the logarithmic axis of the points' terms and TTLs, seconds;
// a TTL cache is drawn at its TTL.
func (rep *FSReport) fsAxis() logAxis {
	var xs []float64
	for _, p := range rep.Points {
		xs = append(xs, p.x())
	}
	return newLogAxis(xs)
}

// x is where the point is drawn: its term, or its TTL, in seconds.
func (p FSPoint) x() float64 {
	if p.Mode == "ttl" {
		return p.TTLMS / 1000
	}
	return p.TermMS / 1000
}

// series returns the points of the lease runs and of the TTL caches, at
// y(point).
func (rep *FSReport) series(ax logAxis, y func(FSPoint) float64) (leases, ttls plotter.XYs) {
	for _, p := range rep.Points {
		xy := plotter.XY{X: ax.at(p.x()), Y: y(p)}
		if p.Mode == "ttl" {
			ttls = append(ttls, xy)
		} else {
			leases = append(leases, xy)
		}
	}
	return leases, ttls
}

func (rep *FSReport) loadPlot() (*figure, error) {
	p := newPlot("leasefs: consistency traffic against lease term",
		"lease term, or the kernel's TTL (s)", "consistency messages per second ÷ same at term 0")
	ax := rep.fsAxis()
	hi := 1.0
	if rep.Model.N > 0 {
		xys := ax.curve(rep.Model.RelativeLoad)
		for _, xy := range xys {
			hi = max(hi, xy.Y)
		}
		if err := addLine(p, fmt.Sprintf("model (Gray and Cheriton), N = S = %d", rep.Model.N), xys, oiBlack, lineWidth, nil); err != nil {
			return nil, err
		}
	}
	leases, ttls := rep.series(ax, func(p FSPoint) float64 { return p.RelLoad })
	for _, xy := range append(leases, ttls...) {
		hi = max(hi, xy.Y)
	}
	filled, open := glyphPair(0)
	if err := addPoints(p, "leasefs with leases", leases, seriesColor(0), filled); err != nil {
		return nil, err
	}
	if len(ttls) > 0 {
		if err := addPoints(p, "TTL cache of the kernel, leases of term 0 (stale answers)", ttls, seriesColor(1), open); err != nil {
			return nil, err
		}
	}
	ax.apply(&p.X)
	padLinear(&p.Y, 0, hi*1.6)
	return &figure{p, fmt.Sprintf("The reads, listings, renewals, invalidations and their replies that leased carried while %d mounts "+
		"ran find -ls over a tree of %d paths and one mount changed a file every %v, as a fraction of the same at term 0 "+
		"(no caching); lower is better. The line is Gray and Cheriton's model with the rates measured at term 0. "+
		"A TTL cache is drawn at its TTL; its answers may be stale (the table counts them).",
		rep.Config.Readers, rep.Paths, rep.Config.ChangeEvery)}, nil
}

func (rep *FSReport) findPlot() (*figure, error) {
	p := newPlot("leasefs: find -ls over the tree", "lease term, or the kernel's TTL (s)", "one pass, p50 (ms)")
	ax := rep.fsAxis()
	leases, ttls := rep.series(ax, func(p FSPoint) float64 { return p.Find.P50MS })
	hi := 0.0
	for _, xy := range append(leases, ttls...) {
		hi = max(hi, xy.Y)
	}
	filled, open := glyphPair(0)
	if err := addPoints(p, "leases", leases, seriesColor(0), filled); err != nil {
		return nil, err
	}
	if len(ttls) > 0 {
		if err := addPoints(p, "TTL cache (stale answers)", ttls, seriesColor(1), open); err != nil {
			return nil, err
		}
	}
	ax.apply(&p.X)
	padLinear(&p.Y, 0, hi*1.6)
	return &figure{p, fmt.Sprintf("The median time of one find -ls pass over %d paths in a reading mount, while the writer changed "+
		"a file every %v; lower is better.", rep.Paths, rep.Config.ChangeEvery)}, nil
}

func (rep *FSReport) changePlot() (*figure, error) {
	p := newPlot("leasefs: the writer's changes", "lease term, or the kernel's TTL (s)", "latency (ms)")
	ax := rep.fsAxis()
	hi := 0.0
	for i, q := range []struct {
		name string
		y    func(FSPoint) float64
	}{{"p50", func(p FSPoint) float64 { return p.Change.P50MS }}, {"p99", func(p FSPoint) float64 { return p.Change.P99MS }}} {
		leases, ttls := rep.series(ax, q.y)
		for _, xy := range append(leases, ttls...) {
			hi = max(hi, xy.Y)
		}
		filled, open := glyphPair(i)
		if err := addPoints(p, "leases, "+q.name, leases, seriesColor(i), filled); err != nil {
			return nil, err
		}
		if len(ttls) > 0 {
			if err := addPoints(p, "TTL cache, "+q.name, ttls, seriesColor(i), open); err != nil {
				return nil, err
			}
		}
	}
	ax.apply(&p.X)
	padLinear(&p.Y, 0, hi*1.6)
	return &figure{p, fmt.Sprintf("The latency of the writer's changes (a chmod, an append through open–write–close, or a new "+
		"version renamed over the file), which wait for every reading mount's lease on what they change to be given up; the readers "+
		"answer at once, so a longer term costs little. ε = %v.", time.Duration(rep.Model.Epsilon))}, nil
}
