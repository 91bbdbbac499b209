// Package bench holds the logic of leasebench, the benchmark that runs
// leased under Gray and Cheriton's workload and prints what it measures
// beside their model's predictions (Model). Run runs it and returns a
// Report, which prints itself as tables and writes CSV, JSON and PNG
// files; cmd/leasebench is its command line.
package bench

import "time"

// Model is Gray and Cheriton's model of a lease server's consistency
// traffic (SOSP 1989), with their parameters. Its methods are pure; any
// caller may use them.
type Model struct {
	N       int           // clients
	R       float64       // reads per second per client, per key
	W       float64       // writes per second per client, per key
	S       int           // caches sharing a key
	MProp   time.Duration // one-way propagation delay
	MProc   time.Duration // time to send or receive one message
	Epsilon time.Duration // clock allowance ε
}

// PaperModel returns the model with the values of the paper's trace (its
// Table 2) for N clients and sharing S.
func PaperModel(n, s int) Model {
	return Model{N: n, R: 0.864, W: 0.039, S: s, MProp: time.Millisecond, MProc: 250 * time.Microsecond, Epsilon: 100 * time.Millisecond}
}

// EffectiveTerm is t_C, the part of a term t_S that the client can use:
// max(0, t_S − (m_prop + 2·m_proc) − ε).
func (m Model) EffectiveTerm(tS time.Duration) time.Duration {
	return max(0, tS-(m.MProp+2*m.MProc)-m.Epsilon)
}

// Alpha is the lease benefit factor α = 2R/(S·W). Leases pay off only when
// it is above 1.
func (m Model) Alpha() float64 { return 2 * m.R / (float64(m.S) * m.W) }

// Load is the server's consistency load L(t_S) in messages per second:
// 2·N·R at term 0, and 2·N·R/(1 + R·t_C) + N·S·W above it. With S = 1 no
// other holder is asked to give up its lease, so the second term is 0.
func (m Model) Load(tS time.Duration) float64 {
	n := float64(m.N)
	if tS <= 0 {
		return 2 * n * m.R
	}
	l := 2 * n * m.R / (1 + m.R*m.EffectiveTerm(tS).Seconds())
	if m.S > 1 {
		l += n * float64(m.S) * m.W
	}
	return l
}

// RelativeLoad is L(t_S)/L(0).
func (m Model) RelativeLoad(tS time.Duration) float64 { return m.Load(tS) / m.Load(0) }

// ApprovalDelay is t_a, how long a write waits for every other holder to
// answer: 2·m_prop + (S+2)·m_proc. With S = 1 there is nobody to ask, and
// it is 0.
func (m Model) ApprovalDelay() time.Duration {
	if m.S <= 1 {
		return 0
	}
	return 2*m.MProp + time.Duration(m.S+2)*m.MProc
}

// AddedDelay is D, the delay leases add per operation on average:
// [2R·(m_prop + 2·m_proc)/(1 + R·t_C) + W·t_a] / (R + W).
func (m Model) AddedDelay(tS time.Duration) time.Duration {
	rt := m.R * m.EffectiveTerm(tS).Seconds()
	d := (2*m.R*(m.MProp+2*m.MProc).Seconds()/(1+rt) + m.W*m.ApprovalDelay().Seconds()) / (m.R + m.W)
	return time.Duration(d * float64(time.Second))
}

// ReadDelay is the mean delay of a read: a round trip, 2·(m_prop +
// 2·m_proc), for the fraction 1/(1 + R·t_C) of reads that miss the cache.
func (m Model) ReadDelay(tS time.Duration) time.Duration {
	rt := m.R * m.EffectiveTerm(tS).Seconds()
	return time.Duration(float64(2*(m.MProp+2*m.MProc)) / (1 + rt))
}

// LocalReadFraction is the fraction of reads served from the cache:
// R·t_C/(1 + R·t_C).
func (m Model) LocalReadFraction(tS time.Duration) float64 {
	rt := m.R * m.EffectiveTerm(tS).Seconds()
	return rt / (1 + rt)
}
