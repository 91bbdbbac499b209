// Package netfault injects network and clock faults: a packet conn that
// delays, drops, duplicates, reorders and partitions the datagrams of a
// real socket, and a clock that drifts from the one it is built on.
//
// It is not test-only: leasebench (package bench) adds network delay with
// a Conn and cuts a slow holder off with Partition, and the end-to-end and
// linearizability tests inject their faults with it.
// Delays work in real time with Go's timers, so a delay much below a
// millisecond comes out near a millisecond on an idle machine.
package netfault

import (
	"container/heap"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"time"
)

// queueLimit bounds each direction's queue of delayed or held packets, like
// a kernel socket buffer: a packet that finds its queue full is lost and
// counted in Stats.Overflowed.
const queueLimit = 4096

// Faults are the faults of one direction. The zero value passes packets
// unchanged. Negative durations count as zero; probabilities at or below 0
// never happen and at or above 1 always do.
type Faults struct {
	Delay     time.Duration // added to every packet
	Jitter    time.Duration // uniform random extra delay in [0, Jitter): packets are reordered
	Drop      float64       // probability that a packet is lost
	Duplicate float64       // probability that a packet is delivered twice (the copy with its own random delay)
}

// Stats counts what a Conn did to its packets, in both directions.
type Stats struct {
	Sent            uint64 // packets passed to WriteTo
	Received        uint64 // packets read from the wrapped conn
	Dropped         uint64 // packets lost to Drop or Partition
	Duplicated      uint64 // extra copies made by Duplicate
	Delayed         uint64 // packets and copies held back by Delay or Jitter
	HeldWhilePaused uint64 // incoming packets that arrived while paused
	Overflowed      uint64 // packets lost because their direction's queue was full
}

// Conn wraps a net.PacketConn and injects faults into the packets it sends
// (WriteTo: "out") and receives (ReadFrom: "in"). It works in real time, as
// the socket it wraps does. Delays never block WriteTo; only Pause does.
//
// Tests make a Conn with Wrap, hand it to the code under test (quic-go
// takes any net.PacketConn: quic.Transport{Conn: c}) and change its faults
// at any time from any goroutine. Conn is safe for concurrent use. Wrap
// starts two goroutines, one reading the wrapped conn and one sending
// delayed packets; Close stops both and waits for them.
type Conn struct {
	pc     net.PacketConn
	closed chan struct{} // closed by Close
	wg     sync.WaitGroup
	once   sync.Once // runs Close's work
	// outWake (capacity 1) tells the send loop that outq has a new packet.
	outWake chan struct{}

	mu              sync.Mutex // protects the fields below
	rng             *rand.Rand
	out, in         Faults
	partOut, partIn bool
	paused          bool
	resumed         chan struct{} // closed by Resume; made by Pause
	readDeadline    time.Time
	changed         chan struct{} // closed and replaced when ReadFrom may have something new to see
	readErr         error         // the error that ended the read loop, if not Close
	inq, outq       packetQueue
	seq             uint64 // orders packets due at the same instant
	stats           Stats
}

// Wrap returns a Conn that owns pc: closing the Conn closes pc. The faults
// start at zero. seed seeds the random choices of drops, duplicates and
// jitter. Until Close, nobody else may read from pc.
func Wrap(pc net.PacketConn, seed int64) *Conn {
	c := &Conn{
		pc:      pc,
		closed:  make(chan struct{}),
		outWake: make(chan struct{}, 1),
		rng:     rand.New(rand.NewPCG(uint64(seed), 0)),
		changed: make(chan struct{}),
	}
	c.wg.Add(2)
	go c.readLoop()
	go c.sendLoop()
	return c
}

// SetFaults sets the faults of packets sent (out) and received (in) from
// now on. Packets already delayed keep their delay.
func (c *Conn) SetFaults(out, in Faults) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out, c.in = out, in
}

// Partition loses every packet sent (out) or received (in) from now on,
// until the next call sets that direction to false. Partition(false, false)
// heals. Packets already delayed are still delivered.
func (c *Conn) Partition(out, in bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.partOut, c.partIn = out, in
}

// Pause emulates a frozen (SIGSTOP'd) process: WriteTo blocks until Resume
// or Close, whatever its write deadline, and ReadFrom returns no packet
// until Resume, though its read deadline and Close still end it. Incoming
// packets wait, like in a kernel socket buffer, in a queue of at most 4096
// packets (delayed ones included; more are lost and counted in
// Stats.Overflowed), and are delivered after Resume. Packets already delayed on the way out are
// still sent. A quic-go connection on a paused Conn may block while it
// closes, so resume or close the Conn first.
func (c *Conn) Pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.paused {
		c.paused = true
		c.resumed = make(chan struct{})
	}
}

// Resume ends a Pause. It does nothing when the Conn is not paused.
func (c *Conn) Resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused {
		c.paused = false
		close(c.resumed)
		c.notifyLocked()
	}
}

// Stats returns the counters so far.
func (c *Conn) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// ReadFrom returns the next incoming packet that is due. It blocks until
// one is, the read deadline passes (an error satisfying
// os.ErrDeadlineExceeded), or the Conn is closed (net.ErrClosed). A packet
// longer than p is truncated, as on a UDP socket.
func (c *Conn) ReadFrom(p []byte) (int, net.Addr, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-c.closed:
			return 0, nil, c.opError("read", net.ErrClosed)
		default:
		}
		c.mu.Lock()
		now := time.Now()
		wait := time.Duration(-1) // none
		if !c.readDeadline.IsZero() {
			// Like a socket, a passed deadline wins over a waiting packet.
			wait = c.readDeadline.Sub(now)
			if wait <= 0 {
				c.mu.Unlock()
				return 0, nil, c.opError("read", os.ErrDeadlineExceeded)
			}
		}
		if !c.paused && len(c.inq) > 0 && !c.inq[0].due.After(now) {
			pk := heap.Pop(&c.inq).(*packet)
			c.mu.Unlock()
			return copy(p, pk.data), pk.addr, nil
		}
		if c.readErr != nil && len(c.inq) == 0 {
			err := c.readErr
			c.mu.Unlock()
			return 0, nil, err
		}
		if !c.paused && len(c.inq) > 0 {
			if due := c.inq[0].due.Sub(now); wait < 0 || due < wait {
				wait = due
			}
		}
		changed := c.changed
		c.mu.Unlock()

		var fire <-chan time.Time
		if wait >= 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			fire = timer.C
		}
		select {
		case <-c.closed:
		case <-changed:
		case <-fire:
		}
	}
}

// WriteTo sends p to addr through the out faults and returns len(p) even
// when the packet is lost. A packet without delay is written at once and a
// write error of the wrapped conn is returned; a delayed packet is copied
// and sent later, and an error then loses it. WriteTo blocks only while the
// Conn is paused.
func (c *Conn) WriteTo(p []byte, addr net.Addr) (int, error) {
	c.mu.Lock()
	for c.paused {
		resumed := c.resumed
		c.mu.Unlock()
		select {
		case <-resumed:
		case <-c.closed:
			return 0, c.opError("write", net.ErrClosed)
		}
		c.mu.Lock()
	}
	select {
	case <-c.closed:
		c.mu.Unlock()
		return 0, c.opError("write", net.ErrClosed)
	default:
	}
	c.stats.Sent++
	delays, ok := c.faultLocked(c.out, c.partOut)
	now := time.Now()
	direct := 0
	for _, d := range delays {
		if d <= 0 {
			direct++
			continue
		}
		c.pushLocked(&c.outq, p, addr, now.Add(d))
	}
	c.mu.Unlock()
	if !ok {
		return len(p), nil
	}
	if len(delays) > direct {
		select {
		case c.outWake <- struct{}{}:
		default:
		}
	}
	for range direct {
		if _, err := c.pc.WriteTo(p, addr); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Close closes the wrapped conn, ends every blocked ReadFrom and WriteTo
// with net.ErrClosed, loses the packets still delayed, and returns after the
// Conn's goroutines have ended. Later calls return an error.
func (c *Conn) Close() error {
	err := c.opError("close", net.ErrClosed)
	c.once.Do(func() {
		close(c.closed)
		err = c.pc.Close()
		c.wg.Wait()
	})
	return err
}

// LocalAddr returns the wrapped conn's local address.
func (c *Conn) LocalAddr() net.Addr { return c.pc.LocalAddr() }

// SetDeadline sets the read and write deadlines, as SetReadDeadline and
// SetWriteDeadline do.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// SetReadDeadline sets when blocked and future ReadFrom calls give up; the
// zero time means never. quic-go sets it to now to stop its read loop.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDeadline = t
	c.notifyLocked()
	return nil
}

// SetWriteDeadline sets the wrapped conn's write deadline, which bounds its
// writes, delayed ones included, but not a WriteTo blocked by Pause.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	return c.pc.SetWriteDeadline(t)
}

// SetReadBuffer sets the wrapped conn's receive buffer size when it has
// one, as quic-go asks of every conn. It fails otherwise.
func (c *Conn) SetReadBuffer(bytes int) error {
	if b, ok := c.pc.(interface{ SetReadBuffer(int) error }); ok {
		return b.SetReadBuffer(bytes)
	}
	return c.opError("set", errNoBuffer)
}

// SetWriteBuffer sets the wrapped conn's send buffer size when it has one,
// as quic-go asks of every conn. It fails otherwise.
func (c *Conn) SetWriteBuffer(bytes int) error {
	if b, ok := c.pc.(interface{ SetWriteBuffer(int) error }); ok {
		return b.SetWriteBuffer(bytes)
	}
	return c.opError("set", errNoBuffer)
}

var errNoBuffer = errors.New("netfault: the wrapped conn has no socket buffer to set")

// readLoop reads the wrapped conn until it fails, and queues each packet
// through the in faults for ReadFrom.
func (c *Conn) readLoop() {
	defer c.wg.Done()
	buf := make([]byte, 1<<16)
	for {
		n, addr, err := c.pc.ReadFrom(buf)
		c.mu.Lock()
		if err != nil {
			select {
			case <-c.closed:
			default:
				c.readErr = err
				c.notifyLocked()
			}
			c.mu.Unlock()
			return
		}
		c.stats.Received++
		if c.paused {
			c.stats.HeldWhilePaused++
		}
		delays, _ := c.faultLocked(c.in, c.partIn)
		now := time.Now()
		for _, d := range delays {
			c.pushLocked(&c.inq, buf[:n], addr, now.Add(d))
		}
		if len(delays) > 0 {
			c.notifyLocked()
		}
		c.mu.Unlock()
	}
}

// sendLoop writes delayed outgoing packets when they fall due, until Close.
func (c *Conn) sendLoop() {
	defer c.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var due []*packet
	for {
		c.mu.Lock()
		now := time.Now()
		due = due[:0]
		for len(c.outq) > 0 && !c.outq[0].due.After(now) {
			due = append(due, heap.Pop(&c.outq).(*packet))
		}
		wait := time.Duration(-1)
		if len(c.outq) > 0 {
			wait = c.outq[0].due.Sub(now)
		}
		c.mu.Unlock()
		for _, pk := range due {
			c.pc.WriteTo(pk.data, pk.addr) // an error loses the packet, as on the wire
		}
		var fire <-chan time.Time
		if wait >= 0 {
			timer.Reset(wait)
			fire = timer.C
		}
		select {
		case <-c.closed:
			return
		case <-c.outWake:
		case <-fire:
		}
		timer.Stop()
	}
}

// faultLocked decides the fate of one packet in a direction with faults f
// and partition part: the delay of each copy to deliver (none when it is
// lost), and whether it is delivered at all. The caller holds c.mu.
func (c *Conn) faultLocked(f Faults, part bool) ([]time.Duration, bool) {
	if part || (f.Drop > 0 && c.rng.Float64() < f.Drop) {
		c.stats.Dropped++
		return nil, false
	}
	delays := []time.Duration{c.delayLocked(f)}
	if f.Duplicate > 0 && c.rng.Float64() < f.Duplicate {
		c.stats.Duplicated++
		delays = append(delays, c.delayLocked(f))
	}
	return delays, true
}

// delayLocked draws one packet's delay under f and counts it if it is not
// zero. The caller holds c.mu.
func (c *Conn) delayLocked(f Faults) time.Duration {
	d := max(f.Delay, 0)
	if f.Jitter > 0 {
		d += time.Duration(c.rng.Int64N(int64(f.Jitter)))
	}
	if d > 0 {
		c.stats.Delayed++
	}
	return d
}

// pushLocked queues a copy of data for addr, due at due, unless q is full.
// The caller holds c.mu.
func (c *Conn) pushLocked(q *packetQueue, data []byte, addr net.Addr, due time.Time) {
	if len(*q) >= queueLimit {
		c.stats.Overflowed++
		return
	}
	c.seq++
	heap.Push(q, &packet{data: append([]byte(nil), data...), addr: addr, due: due, seq: c.seq})
}

// notifyLocked wakes every ReadFrom waiting for a change. The caller holds
// c.mu.
func (c *Conn) notifyLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// opError returns err as the wrapped conn would report it.
func (c *Conn) opError(op string, err error) error {
	e := &net.OpError{Op: op, Err: err}
	if addr := c.pc.LocalAddr(); addr != nil {
		e.Net, e.Source = addr.Network(), addr
	}
	return e
}

// packet is a datagram waiting in a queue until it is due.
type packet struct {
	data []byte
	addr net.Addr
	due  time.Time
	seq  uint64
}

// packetQueue is a container/heap of packets, earliest due first, and in
// the order they were queued when due at the same instant.
type packetQueue []*packet

func (q packetQueue) Len() int { return len(q) }

func (q packetQueue) Less(i, j int) bool {
	if c := q[i].due.Compare(q[j].due); c != 0 {
		return c < 0
	}
	return q[i].seq < q[j].seq
}

func (q packetQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }

func (q *packetQueue) Push(x any) { *q = append(*q, x.(*packet)) }

func (q *packetQueue) Pop() any {
	old := *q
	n := len(old)
	pk := old[n-1]
	old[n-1] = nil
	*q = old[:n-1]
	return pk
}
