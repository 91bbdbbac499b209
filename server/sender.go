package server

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leased/leased/protocol"
)

// sender writes frames to one stream. send never blocks: frames queue in
// memory, and the queue without its largest frame stays within
// maxQueuedBytes; a frame that would pass that means the peer is not
// reading, and the sender closes, dropping what is queued, and overflow is
// called once. A reply larger than the cap (a value up to MaxValueSize,
// 63 MiB at most) thus goes out whatever small frames sit beside it, before
// or after it, but two such replies do not queue together.
//
// The batch the goroutine is writing has left the queue and does not count
// toward the cap: it too was a queue, so a stream's frames take at most
// 2 × (maxQueuedBytes + the largest frame) bytes, about 158 MiB with the
// largest MaxValueSize, 34 MiB with the default. Counting it would bound
// that by half, but a client reading one large value would then lose its
// session to a second one it asked for meanwhile.
//
// A goroutine writes the queue out, started by the send that finds no
// other writing and ending once the queue is empty: an idle sender, like
// most of a server's, holds no goroutine and no buffer, only itself.
type sender struct {
	w        io.Writer
	counts   *[protocol.NumTypes]atomic.Uint64
	metrics  *metrics // counts the error replies sent, if not nil
	overflow func()

	mu sync.Mutex // guards buf, writing, closed, failed, finishing, flushed
	// buf is the frames queued and not yet taken to be written.
	buf []byte
	// largest is the size of the largest frame in buf.
	largest int
	// writing: a goroutine of drain runs, and will write buf out (or see
	// the sender closed) before it ends. At most one runs at a time.
	writing bool
	closed  bool
	// failed: a write failed, or the queue overflowed; what was queued was
	// not all written.
	failed    bool
	finishing bool // finish was called: close the stream once buf is written
	// flushed is signalled when buf has been written out, or the sender
	// closed. flush makes it: most senders are never flushed.
	flushed *sync.Cond

	drains sync.WaitGroup // the goroutine of drain, while one runs
	over   sync.Once
}

func newSender(w io.Writer, counts *[protocol.NumTypes]atomic.Uint64, overflow func()) *sender {
	return &sender{w: w, counts: counts, overflow: overflow}
}

// send queues m. It reports false if the sender is closed or overflowed.
func (s *sender) send(m protocol.Message) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	var err error
	queued := len(s.buf)
	s.buf, err = protocol.AppendFrame(s.buf, m)
	largest := max(s.largest, len(s.buf)-queued)
	// One frame may pass the cap: a reply that carries a value larger than
	// it must still go out, whether a small reply was queued before it or
	// comes after it. The queue holds at most maxQueuedBytes and one frame.
	full := len(s.buf)-largest > maxQueuedBytes
	start := false
	if full {
		// Whatever comes next would only pile up behind what the peer does
		// not read.
		s.buf = nil
		s.largest = 0
		s.failed = true
		s.closeLocked()
	} else if err == nil {
		s.largest = largest
		start = s.startLocked()
	}
	s.mu.Unlock()
	if err != nil {
		return false
	}
	if full {
		s.over.Do(s.overflow)
		return false
	}
	if start {
		go s.drain()
	}
	s.counts[m.Type()].Add(1)
	if e, ok := m.(*protocol.Error); ok && s.metrics != nil {
		s.metrics.countError(e.Code)
	}
	return true
}

// startLocked reports whether the caller must start a goroutine of drain,
// which it then counts: none runs yet. s.mu is held, and s is not closed,
// so that wait, which is called once s is closed, never races the count.
func (s *sender) startLocked() bool {
	if s.writing {
		return false
	}
	s.writing = true
	s.drains.Add(1)
	return true
}

// flush waits until what was queued has been written, the sender closed,
// or timeout passed: a peer that does not read must not hold it up. It
// reports whether everything queued was written.
func (s *sender) flush(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	// The timer fires at or after deadline, and its broadcast takes s.mu, so
	// the loop below sees the deadline passed or is woken.
	t := time.AfterFunc(timeout, func() {
		s.mu.Lock()
		s.broadcastLocked()
		s.mu.Unlock()
	})
	defer t.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flushed == nil {
		s.flushed = sync.NewCond(&s.mu)
	}
	for (len(s.buf) > 0 || s.writing) && !s.closed {
		if !time.Now().Before(deadline) {
			return false
		}
		s.flushed.Wait()
	}
	return len(s.buf) == 0 && !s.writing && !s.failed
}

// drain writes the queue out until it is empty, then ends; if finish was
// called, it closes the stream first. It ends at once if the sender closes.
func (s *sender) drain() {
	defer s.drains.Done()
	var spare []byte
	s.mu.Lock()
	for {
		b := s.buf
		if s.closed || len(b) == 0 {
			break
		}
		// Take the whole queue; send appends the frames that come meanwhile
		// to the spare buffer of the last batch.
		s.buf = spare[:0]
		s.largest = 0
		s.mu.Unlock()
		if _, err := s.w.Write(b); err != nil {
			s.mu.Lock()
			s.failed = true
			s.closeLocked()
			break
		}
		// Reuse a buffer for the next batch of a burst, unless it is large:
		// one big value must not make every later batch pin its size.
		spare = nil
		if cap(b) <= 64<<10 {
			spare = b
		}
		s.mu.Lock()
	}
	// The queue is empty (or the sender closed), and s.mu is held: the next
	// send starts another goroutine. Nothing is kept for it, not even the
	// spare buffer that the last batch left in buf.
	if len(s.buf) == 0 {
		s.buf = nil
	}
	s.writing = false
	fin := s.finishing && !s.closed
	if fin {
		s.closeLocked() // no frame may follow the end of the stream
	}
	s.broadcastLocked()
	s.mu.Unlock()
	if fin {
		if c, ok := s.w.(io.Closer); ok {
			c.Close()
		}
	}
}

// wait waits until no goroutine of the sender runs. Call it once the
// sender is closed: then none starts again.
func (s *sender) wait() { s.drains.Wait() }

// finish makes the sender write what is queued, then close the stream's
// write side (a clean end of stream for the peer, after every frame sent
// before it), and close.
func (s *sender) finish() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.finishing = true
	start := s.startLocked()
	s.mu.Unlock()
	if start {
		go s.drain()
	}
}

// close stops the sender; queued frames are dropped.
func (s *sender) close() {
	s.mu.Lock()
	s.closeLocked()
	s.mu.Unlock()
}

func (s *sender) closeLocked() {
	if !s.closed {
		s.closed = true
		s.broadcastLocked()
	}
}

// broadcastLocked wakes the flushes that wait, if any. s.mu is held.
func (s *sender) broadcastLocked() {
	if s.flushed != nil {
		s.flushed.Broadcast()
	}
}
