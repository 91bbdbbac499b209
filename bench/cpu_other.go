//go:build !unix

package bench

import "time"

// cpuTime returns 0: the process's CPU time is read on Unix only, and
// m_proc is then not measured.
func cpuTime() time.Duration { return 0 }
