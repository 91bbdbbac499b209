package bench

import (
	"errors"
	"strings"
	"testing"
)

func TestParseLoadAvg(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"0.52 0.58 0.59 1/467 12345\n", 0.52, true},
		{"12.00 3.1 2 4/900 1", 12, true},
		{"3", 3, true},
		{"", 0, false},
		{"  \n", 0, false},
		{"busy 1 2", 0, false},
		{"-1 0 0", 0, false},
		{"NaN 0 0", 0, false},
		{"+Inf 0 0", 0, false},
	} {
		got, err := parseLoadAvg(tt.in)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("parseLoadAvg(%q) = %v, %v; want %v, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}

func TestSampleLoad(t *testing.T) {
	load := func(v float64) LoadReader { return func() (float64, error) { return v, nil } }
	for _, tt := range []struct {
		load float64
		cpus int
		busy bool
	}{
		{0.5, 2, false},
		{2, 2, false}, // as many runnable as cores: none waits
		{2.01, 2, true},
		{7.5, 4, true},
	} {
		s, ok := sampleLoad(load(tt.load), tt.cpus, "at the start")
		if !ok || s.Busy != tt.busy || s.Load1 != tt.load || s.CPUs != tt.cpus {
			t.Errorf("load %v on %d cores: %+v, %v; want busy %v", tt.load, tt.cpus, s, ok, tt.busy)
		}
	}
	if _, ok := sampleLoad(func() (float64, error) { return 0, errors.New("no /proc") }, 2, "x"); ok {
		t.Error("a load that cannot be read gave a sample")
	}

	rep := &Report{Load: []LoadSample{
		{When: "at the start", Load1: 0.3, CPUs: 2},
		{When: "during the sweep S=10", Load1: 3.5, CPUs: 2, Busy: true},
	}}
	ws := rep.Warnings()
	if len(ws) != 1 || !strings.Contains(ws[0], "during the sweep S=10") || !strings.Contains(ws[0], "3.50 above its 2 cores") ||
		!strings.Contains(ws[0], "unreliable") {
		t.Errorf("warnings %q", ws)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "WARNING: the machine was busy during the sweep S=10") {
		t.Errorf("the table does not warn:\n%s", b.String())
	}
}

func TestCheckLoad(t *testing.T) {
	s, ok := CheckLoad(func() (float64, error) { return 9, nil }, 8)
	if !ok || !s.Busy || s.When != "at the start" {
		t.Errorf("CheckLoad = %+v, %v", s, ok)
	}
	// The defaults read this machine: whatever its load, no panic, and
	// the cores are counted.
	if s, ok := CheckLoad(nil, 0); ok && s.CPUs <= 0 {
		t.Errorf("CheckLoad(nil, 0) = %+v", s)
	}
}
