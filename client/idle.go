package client

import (
	"fmt"
	"runtime"
	"time"
)

// How a session notices that its server is gone (DESIGN §6). QUIC's own
// idle timer counts wall time since the connection last processed a
// packet, so a client whose process keeps every core busy, or that the
// machine starves, mistakes the wait for a core for a silent server, and
// loses its session while the server's answers sit in its socket. The
// session's watchdog counts silence only while the process runs: it looks
// every tick, and a look that comes late adds at most watchLateCap ticks,
// however late it is. QUIC's idle timer stays as a backstop, much longer.
const (
	// watchTicks is how many looks the watchdog takes per IdleTimeout.
	watchTicks = 4
	// watchLateCap is the most ticks that one look adds to the silence:
	// the rest of a late look's wait is the process's, not the server's.
	watchLateCap = 1.5
	// keepAliveTicks is how many keep-alives per IdleTimeout the client
	// sends while it hears nothing, so that a server that is up is heard
	// several times within it.
	keepAliveTicks = 4
	// backstopFactor and minBackstop give QUIC's idle timeout of a
	// session: backstopFactor times IdleTimeout, and at least minBackstop.
	// A process starved longer than that, by wall time, still loses its
	// session. The server closes a session silent this long too (or for
	// its own IdleTimeout, if that is shorter).
	backstopFactor = 10
	minBackstop    = 10 * time.Second
	// maxAckDelay is QUIC's default max_ack_delay (RFC 9000 §18.2), part
	// of the probe timeout that bounds the silence of a live path.
	maxAckDelay = 25 * time.Millisecond
)

// quicIdle returns the QUIC idle timeout and keep-alive period of a
// connection whose Config.IdleTimeout is idle.
func quicIdle(idle time.Duration) (timeout, keepAlive time.Duration) {
	return max(backstopFactor*idle, minBackstop), idle / keepAliveTicks
}

// silence counts how long a server has been silent, counting only time in
// which the process that looks ran. Its owner calls observe about every
// tick; it reads no clock and is not safe for concurrent use.
type silence struct {
	tick    time.Duration // how often the owner looks
	last    time.Time     // when it last looked
	packets uint64        // the packets received by then
	silent  time.Duration // the silence counted since a packet was last seen
}

// newSilence starts counting at now, when packets had been received.
func newSilence(now time.Time, tick time.Duration, packets uint64) *silence {
	return &silence{tick: tick, last: now, packets: packets}
}

// observe records a look at now, when packets had been received, and
// returns the silence counted: zero if a packet came since the last look,
// and otherwise the time since the last packet, each look adding at most
// watchLateCap ticks.
func (s *silence) observe(now time.Time, packets uint64) time.Duration {
	gap := max(now.Sub(s.last), 0)
	s.last = now
	if packets != s.packets {
		s.packets, s.silent = packets, 0
		return 0
	}
	s.silent += min(gap, time.Duration(watchLateCap*float64(s.tick)))
	return s.silent
}

// watchServer is the session's watchdog (see silence): it fails the
// connection once the server has been silent for idle, or for three probe
// timeouts if they are longer (as QUIC's idle timer does, so that a slow
// path has time to answer a keep-alive), counting only time in which this
// process ran. It runs in its own goroutine, counted in cn.wg, until the
// connection is gone.
func (cn *conn) watchServer(idle time.Duration) {
	defer cn.wg.Done()
	tick := max(idle/watchTicks, time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	s := newSilence(time.Now(), tick, cn.qc.ConnectionStats().PacketsReceived)
	for {
		select {
		case <-cn.done:
			return
		case <-t.C:
		}
		// A timer wakes this goroutine ahead of others that are ready to
		// run; the goroutine that reads the socket, woken by the network,
		// waits in the scheduler's global queue. Wait behind it, so that a
		// packet it holds is counted before the silence is.
		runtime.Gosched()
		st := cn.qc.ConnectionStats()
		limit := max(idle, 3*(st.SmoothedRTT+4*st.MeanDeviation+maxAckDelay))
		if silent := s.observe(time.Now(), st.PacketsReceived); silent >= limit {
			cn.fail(fmt.Errorf("timeout: no packet from the server for %v (time this process ran)", silent.Round(time.Millisecond)))
			return
		}
	}
}
