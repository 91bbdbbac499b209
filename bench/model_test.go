package bench

import (
	"math"
	"testing"
	"time"
)

// TestModelPaperTable reproduces the predicted relative consistency load
// with the paper's values, as MODEL.md tabulates it.
func TestModelPaperTable(t *testing.T) {
	sharing := []int{1, 10, 20, 40}
	for _, row := range []struct {
		term time.Duration
		want []float64 // for S = 1, 10, 20, 40
	}{
		{0, []float64{1, 1, 1, 1}},
		{100 * time.Millisecond, []float64{1.000, 1.226, 1.451, 1.903}},
		{time.Second, []float64{0.563, 0.789, 1.014, 1.466}},
		{10 * time.Second, []float64{0.105, 0.330, 0.556, 1.007}},
		{30 * time.Second, []float64{0.037, 0.263, 0.489, 0.940}},
		{100 * time.Second, []float64{0.011, 0.237, 0.463, 0.914}},
	} {
		for i, s := range sharing {
			got := PaperModel(100, s).RelativeLoad(row.term)
			if math.Abs(got-row.want[i]) > 0.0005 {
				t.Errorf("t_S %v, S %d: relative load %.4f, want %.3f", row.term, s, got, row.want[i])
			}
		}
	}
}

// TestModelPaperDelay reproduces the paper's added delay for S = 1, on a
// LAN and with a 100 ms round trip.
func TestModelPaperDelay(t *testing.T) {
	lan, wan := PaperModel(1, 1), PaperModel(1, 1)
	wan.MProp = 50 * time.Millisecond
	for _, tc := range []struct {
		m    Model
		term time.Duration
		want time.Duration
		tol  time.Duration
	}{
		{lan, 0, 2870 * time.Microsecond, 5 * time.Microsecond},
		{lan, 10 * time.Second, 300 * time.Microsecond, 5 * time.Microsecond},
		{lan, 30 * time.Second, 110 * time.Microsecond, 5 * time.Microsecond},
		{wan, 0, 96600 * time.Microsecond, 50 * time.Microsecond},
		{wan, 10 * time.Second, 10200 * time.Microsecond, 50 * time.Microsecond},
		{wan, 30 * time.Second, 3600 * time.Microsecond, 50 * time.Microsecond},
	} {
		if got := tc.m.AddedDelay(tc.term); (got - tc.want).Abs() > tc.tol {
			t.Errorf("m_prop %v, t_S %v: added delay %v, want %v", tc.m.MProp, tc.term, got, tc.want)
		}
	}
}

func TestModelParts(t *testing.T) {
	m := PaperModel(10, 10)
	if got := m.EffectiveTerm(50 * time.Millisecond); got != 0 {
		t.Errorf("effective term of a term shorter than ε: %v", got)
	}
	if got, want := m.EffectiveTerm(time.Second), 898500*time.Microsecond; got != want {
		t.Errorf("effective term: %v, want %v", got, want)
	}
	if got := m.Alpha(); math.Abs(got-4.4308) > 0.0001 {
		t.Errorf("α = %.4f, want 4.4308", got)
	}
	if got, want := m.ApprovalDelay(), 5*time.Millisecond; got != want {
		t.Errorf("t_a = %v, want %v", got, want)
	}
	if got := PaperModel(10, 1).ApprovalDelay(); got != 0 {
		t.Errorf("t_a with nobody to ask: %v", got)
	}
	if got := m.LocalReadFraction(0); got != 0 {
		t.Errorf("local reads at term 0: %v", got)
	}
	// R·t_C = 0.864 × 9.8985 s.
	if got, want := m.LocalReadFraction(10*time.Second), 8.5523/9.5523; math.Abs(got-want) > 0.0001 {
		t.Errorf("local reads at 10 s: %.4f, want %.4f", got, want)
	}
	// A read costs a round trip of 2·(1 + 2·0.25) ms = 3 ms when it
	// misses, and it misses 1/(1 + R·t_C) of the time.
	if got, want := m.ReadDelay(0), 3*time.Millisecond; got != want {
		t.Errorf("read delay at term 0: %v, want %v", got, want)
	}
	if got, want := m.ReadDelay(10*time.Second), 314060*time.Nanosecond; /* 3 ms / 9.5523 */ (got - want).Abs() > time.Microsecond {
		t.Errorf("read delay at 10 s: %v, want %v", got, want)
	}
	// With no writes, the added delay per operation is the read delay.
	noWrites := m
	noWrites.W = 0
	if got, want := noWrites.AddedDelay(10*time.Second), m.ReadDelay(10*time.Second); (got - want).Abs() > time.Microsecond {
		t.Errorf("added delay without writes %v, read delay %v", got, want)
	}
	if got, want := m.Load(0), 2*10*0.864; got != want {
		t.Errorf("L(0) = %v, want %v", got, want)
	}
	// Relative load falls with the term and tends to 1/α.
	prev := math.Inf(1)
	for _, term := range []time.Duration{time.Second, 10 * time.Second, 100 * time.Second, time.Hour} {
		r := m.RelativeLoad(term)
		if r >= prev || r < 1/m.Alpha() {
			t.Errorf("relative load %v at %v after %v", r, term, prev)
		}
		prev = r
	}
}
