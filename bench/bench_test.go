package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/leaktest"
)

// tinyConfig is a run of a few seconds: S = 1 and 4 at terms 0, 10 s and
// 30 s (paper time), a short added-delay sweep, and the slow-holder
// experiment at 10 s and 30 s.
func tinyConfig(t *testing.T) Config {
	s := time.Second
	return Config{
		Scale:      100,
		Clients:    4,
		Pairs:      8,
		R:          0.864,
		W:          0.039,
		Sharing:    []int{1, 4},
		Terms:      []time.Duration{10 * s, 30 * s},
		Epsilon:    100 * time.Millisecond,
		Warmup:     200 * time.Millisecond,
		Measure:    700 * time.Millisecond,
		Delay:      50 * time.Millisecond,
		DelayTerms: []time.Duration{3 * s},
		DelayScale: 20,
		SlowTerms:  []time.Duration{10 * s, 30 * s},
		SlowWrites: 3,
		// Scheduling slack on a busy 2-core machine under -race, where
		// other packages' tests run meanwhile.
		Margin: 100 * time.Millisecond,
		OutDir: t.TempDir(),
		Seed:   1,
	}
}

// TestTinySweep runs a tiny sweep against an in-process server and checks
// what leasebench promises: its files, leases cutting the consistency load
// with S = 1, and writes held up by a slow holder for no longer than
// term + ε.
func TestTinySweep(t *testing.T) {
	leaktest.Check(t)
	cfg := tinyConfig(t)
	// A machine that is idle at the start and busy from then on.
	loads := []float64{0.5}
	cfg.LoadAverage = func() (float64, error) {
		if len(loads) == 0 {
			return 3, nil
		}
		l := loads[0]
		loads = loads[1:]
		return l, nil
	}
	cfg.CPUs = 2
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", table.String())

	// The load is sampled at the start and after each sweep and
	// experiment, and each busy sample is a warning, in the table too.
	var whens []string
	for _, s := range rep.Load {
		whens = append(whens, s.When)
	}
	wantWhens := []string{"at the start", "during the sweep S=1", "during the sweep S=4", "during the added-delay sweep", "during the slow-holder experiment"}
	if !slices.Equal(whens, wantWhens) || rep.Load[0].Busy || len(rep.Warnings()) != 4 {
		t.Errorf("load samples %+v, warnings %q; want %q, busy after the start", rep.Load, rep.Warnings(), wantWhens)
	}
	if strings.Count(table.String(), "WARNING: the machine was busy") != 4 {
		t.Errorf("the table does not give the 4 warnings")
	}

	if len(rep.Sweeps) != 2 || rep.Delay == nil || len(rep.Slow) != 4 {
		t.Fatalf("report has %d sweeps, delay sweep %v, %d slow-holder points; want 2, one, 4", len(rep.Sweeps), rep.Delay != nil, len(rep.Slow))
	}
	for _, sw := range rep.AllSweeps() {
		if len(sw.Points) == 0 || sw.Points[0].TermPaperS != 0 {
			t.Fatalf("%s: points %+v; want term 0 first", sw.Name, sw.Points)
		}
		if sw.RoundTripMS <= 0 || (sw.MProcMS <= 0 && cpuTime() > 0) {
			t.Errorf("%s: not calibrated: round trip %v ms, m_proc %v ms", sw.Name, sw.RoundTripMS, sw.MProcMS)
		}
		writes := 0
		for _, pt := range sw.Points {
			if pt.Errors != 0 || pt.Reads == 0 || pt.Messages == 0 {
				t.Errorf("%s, term %gs: %d errors, %d reads, %d messages", sw.Name, pt.TermPaperS, pt.Errors, pt.Reads, pt.Messages)
			}
			writes += pt.Writes
		}
		// A point of the added-delay sweep expects only about 5 writes.
		if writes == 0 {
			t.Errorf("%s: no writes", sw.Name)
		}
		base := sw.Points[0]
		if base.CachedReads != 0 || base.RelLoad != 1 || base.ModelRelLoad != 1 {
			t.Errorf("%s, term 0: %d cached reads, relative load %v, model %v; want 0, 1, 1", sw.Name, base.CachedReads, base.RelLoad, base.ModelRelLoad)
		}
	}

	s1 := rep.Sweeps[0]
	last := s1.Points[len(s1.Points)-1]
	if last.TermPaperS != 30 || last.RelLoad >= 0.25 || last.RelLeaseOps >= 0.25 || last.LocalReads < 0.9 {
		t.Errorf("S=1 at %gs: relative load %.3f (unbatched %.3f), local reads %.3f; want well below 1 and most reads local (model: %.3f, %.3f)",
			last.TermPaperS, last.RelLoad, last.RelLeaseOps, last.LocalReads, last.ModelRelLoad, last.ModelLocalReads)
	}
	if d := rep.Delay; d.RoundTripMS < 2*d.DelayMS {
		t.Errorf("added-delay sweep: a read took %v ms with %v ms added each way", d.RoundTripMS, d.DelayMS)
	}

	if rep.SlowViolations != 0 {
		t.Errorf("%d writes waited longer than term + ε + %v", rep.SlowViolations, cfg.Margin)
	}
	for _, sp := range rep.Slow {
		if len(sp.Writes) != cfg.SlowWrites {
			t.Fatalf("term %gs: %d writes, want %d", sp.TermPaperS, len(sp.Writes), cfg.SlowWrites)
		}
		for _, w := range sp.Writes {
			if w.WaitedMS > sp.BoundMS+sp.MarginMS {
				t.Errorf("term %gs, slow %v: a write waited %v ms, beyond term + ε = %v ms", sp.TermPaperS, sp.Slow, w.WaitedMS, sp.BoundMS)
			}
		}
		// The first write comes right after the holder's read: a slow
		// holder makes it wait out most of the term, and an answering one
		// does not.
		first := sp.Writes[0]
		if first.Holders != 1 {
			t.Errorf("term %gs, slow %v: the first write had %d holders, want 1", sp.TermPaperS, sp.Slow, first.Holders)
		}
		if sp.Slow && first.WaitedMS < sp.TermRealMS/2 {
			t.Errorf("term %gs: a write waited %v ms for a slow holder that had just read", sp.TermPaperS, first.WaitedMS)
		}
		if !sp.Slow && first.WaitedMS > sp.TermRealMS/2 {
			t.Errorf("term %gs: a write waited %v ms for a holder that answers", sp.TermPaperS, first.WaitedMS)
		}
	}

	checkFiles(t, cfg.OutDir, rep)
}

// checkFiles checks that the files of rep were written to dir and hold
// what it does.
func checkFiles(t *testing.T, dir string, rep *Report) {
	t.Helper()
	want := []string{FileJSON, FilePointsCSV, FileSlowCSV, FileRelativeLoad, FileWriteLatency, FileAddedDelay}
	if got := rep.Files(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Files() = %v, want %v", got, want)
	}
	for _, name := range want {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		switch filepath.Ext(name) {
		case ".png":
			if !bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")) || len(data) < 10_000 {
				t.Errorf("%s: %d bytes, not a plot", name, len(data))
			}
		case ".json":
			var back Report
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if len(back.Sweeps) != len(rep.Sweeps) || back.Sweeps[0].Points[1].Messages != rep.Sweeps[0].Points[1].Messages || len(back.Slow) != len(rep.Slow) {
				t.Errorf("%s does not hold the report", name)
			}
		case ".csv":
			rows, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			n := 0
			if name == FilePointsCSV {
				for _, sw := range rep.AllSweeps() {
					n += len(sw.Points)
				}
			} else {
				for _, sp := range rep.Slow {
					n += len(sp.Writes)
				}
			}
			if len(rows) != 1+n {
				t.Errorf("%s: %d rows, want a header and %d", name, len(rows), n)
			}
		}
	}
}

// TestConfigErrors checks that Run refuses a bad Config with a
// ConfigError that names every problem, before it starts anything.
func TestConfigErrors(t *testing.T) {
	cfg := Quick()
	cfg.Scale = 0
	cfg.Sharing = []int{1, -2}
	cfg.Terms = []time.Duration{time.Second, -time.Second}
	cfg.SlowTerms = []time.Duration{0}
	cfg.Margin = -1
	_, err := Run(context.Background(), cfg)
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("Run = %v, want a ConfigError", err)
	}
	for _, want := range []string{"scale 0", "sharing -2", "term -1s", "slow-holder term 0", "margin -1ns"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := Run(context.Background(), Config{}); !errors.As(err, &ce) {
		t.Errorf("Run(Config{}) = %v, want a ConfigError", err)
	}
}

// TestConfigNormalized checks that the sweeps start at term 0, in order,
// and that N is raised to the largest S.
func TestConfigNormalized(t *testing.T) {
	cfg := Quick()
	cfg.Terms = []time.Duration{30 * time.Second, time.Second, time.Second}
	cfg.Clients = 3
	cfg.Sharing = []int{1, 10}
	got, err := cfg.validate()
	if err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{0, time.Second, 30 * time.Second}; !slices.Equal(got.Terms, want) {
		t.Errorf("terms %v, want %v", got.Terms, want)
	}
	if got.Clients != 10 {
		t.Errorf("clients %d, want 10", got.Clients)
	}
	if k := got.keys(10); k != 5 {
		t.Errorf("keys for S=10 with 50 pairs: %d, want 5", k)
	}
	if k := got.keys(40); k != 2 {
		t.Errorf("keys for S=40 with 50 pairs: %d, want 2", k)
	}
}

// TestConsistencyMessages checks which of the server's counters count as
// consistency traffic, and the unbatched count.
func TestConsistencyMessages(t *testing.T) {
	a := &client.Stats{MessagesIn: map[string]uint64{"get": 10}, LeasesRenewed: 5, InvalidationsSent: 1}
	b := &client.Stats{
		MessagesIn: map[string]uint64{"get": 110, "renew": 20, "ack": 7, "release": 3, "write": 50, "stats": 2, "hello": 1},
		MessagesOut: map[string]uint64{"get_reply": 100, "renew_reply": 20, "invalidate": 7, "ok": 3,
			"write_reply": 50, "stats_reply": 2, "error": 4},
		LeasesRenewed: 65, InvalidationsSent: 9,
	}
	d := counters(a, b)
	// 100 reads, 20 renewals and 7 invalidations with their answers, and 3
	// releases with their replies; writes, stats, hello and errors are not
	// consistency traffic.
	if got, want := d.consistency(), uint64(100+100+20+20+7+7+3+3); got != want {
		t.Errorf("consistency messages %d, want %d", got, want)
	}
	if d.renewed != 60 || d.invalidations != 8 || d.total != 100+20+7+3+50+2+1+100+20+7+3+50+2+4 {
		t.Errorf("delta %+v", d)
	}
}

func TestSummarize(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	got := summarize(ds)
	want := Latency{N: 100, P50MS: 50, P99MS: 99, MaxMS: 100, MeanMS: 50.5}
	if got != want {
		t.Errorf("summarize = %+v, want %+v", got, want)
	}
	if (summarize(nil) != Latency{}) {
		t.Error("summarize(nil) is not zero")
	}
	if got := summarize([]time.Duration{3 * time.Millisecond}); got.P50MS != 3 || got.P99MS != 3 {
		t.Errorf("summarize of one = %+v", got)
	}
}
