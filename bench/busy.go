package bench

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// LoadReader returns the machine's load average over the last minute.
// Run calls it from its own goroutine only.
type LoadReader func() (float64, error)

// ReadLoadAverage is the LoadReader of Linux: the first field of
// /proc/loadavg. Elsewhere it returns the error of the missing file.
func ReadLoadAverage() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	return parseLoadAvg(string(b))
}

// parseLoadAvg returns the 1-minute load average of a /proc/loadavg line,
// such as "0.52 0.58 0.59 1/467 12345".
func parseLoadAvg(s string) (float64, error) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, fmt.Errorf("/proc/loadavg: empty")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("/proc/loadavg: %q is not a load average", f[0])
	}
	return v, nil
}

// LoadSample is the machine's load at one moment of a run. The machine is
// busy when its load average is above its cores: processes then wait for
// a core, and the run's latencies and rates measure that wait too.
type LoadSample struct {
	When  string  `json:"when"` // "start", "after S=10", ...
	Load1 float64 `json:"load1"`
	CPUs  int     `json:"cpus"`
	Busy  bool    `json:"busy"`
}

// Warning says why a busy sample makes the figures unreliable.
func (s LoadSample) Warning() string {
	return fmt.Sprintf("the machine was busy %s: load average %.2f above its %d cores, so processes waited for a core and the figures measure that wait too; they are unreliable (run leasebench on an idle machine)",
		s.When, s.Load1, s.CPUs)
}

// sampleLoad reads the load with read and compares it with cpus. ok is
// false if read fails: a machine without /proc/loadavg is not checked.
func sampleLoad(read LoadReader, cpus int, when string) (s LoadSample, ok bool) {
	load, err := read()
	if err != nil {
		return LoadSample{}, false
	}
	return LoadSample{When: when, Load1: load, CPUs: cpus, Busy: load > float64(cpus)}, true
}

// Warnings returns a warning for each moment of the run at which the
// machine was busy.
func (rep *Report) Warnings() []string {
	var ws []string
	for _, s := range rep.Load {
		if s.Busy {
			ws = append(ws, s.Warning())
		}
	}
	return ws
}

// CheckLoad samples the machine's load now with read (nil:
// ReadLoadAverage) against cpus cores (0: runtime.NumCPU), as Run does at
// its start. ok is false if the load cannot be read.
func CheckLoad(read LoadReader, cpus int) (s LoadSample, ok bool) {
	if read == nil {
		read = ReadLoadAverage
	}
	if cpus <= 0 {
		cpus = runtime.NumCPU()
	}
	return sampleLoad(read, cpus, "at the start")
}
