package server

import (
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leased/leased/protocol"
)

// sender writes frames to one stream from its own goroutine. send never
// blocks: frames queue in memory, up to maxQueuedBytes; past that the peer
// is not reading, the sender closes, dropping what is queued, and overflow
// is called once.
type sender struct {
	w        io.Writer
	counts   *[protocol.NumTypes]atomic.Uint64
	metrics  *metrics // counts the error replies sent, if not nil
	overflow func()

	mu        sync.Mutex // guards buf, writing, closed, finishing, flushed
	buf       []byte
	writing   bool // run is writing a batch taken from buf
	closed    bool
	finishing bool       // finish was called: close the stream once buf is written
	flushed   *sync.Cond // signalled when buf has been written out

	wake chan struct{} // capacity 1
	done chan struct{} // closed by close
	over sync.Once
}

func newSender(w io.Writer, counts *[protocol.NumTypes]atomic.Uint64, overflow func()) *sender {
	s := &sender{w: w, counts: counts, overflow: overflow, wake: make(chan struct{}, 1), done: make(chan struct{})}
	s.flushed = sync.NewCond(&s.mu)
	return s
}

// send queues m. It reports false if the sender is closed or overflowed.
func (s *sender) send(m protocol.Message) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	var err error
	s.buf, err = protocol.AppendFrame(s.buf, m)
	full := len(s.buf) > maxQueuedBytes
	if full {
		// Whatever comes next would only pile up behind what the peer does
		// not read.
		s.buf = nil
		s.closeLocked()
	}
	s.mu.Unlock()
	if err != nil {
		return false
	}
	if full {
		s.over.Do(s.overflow)
		return false
	}
	s.counts[m.Type()].Add(1)
	if e, ok := m.(*protocol.Error); ok && s.metrics != nil {
		s.metrics.countError(e.Code)
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
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
		s.flushed.Broadcast()
		s.mu.Unlock()
	})
	defer t.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for (len(s.buf) > 0 || s.writing) && !s.closed {
		if !time.Now().Before(deadline) {
			return false
		}
		s.flushed.Wait()
	}
	return len(s.buf) == 0 && !s.writing
}

// run writes queued frames until close. It is the sender's one goroutine.
func (s *sender) run() {
	var spare []byte
	for {
		select {
		case <-s.wake:
		case <-s.done:
			return
		}
		s.mu.Lock()
		b := s.buf
		s.buf = spare[:0]
		s.writing = true
		s.mu.Unlock()
		if len(b) > 0 {
			if _, err := s.w.Write(b); err != nil {
				s.close()
				return
			}
		}
		// Keep a large buffer only while it is in use, so that one burst
		// does not pin megabytes for the rest of the session.
		spare = nil
		if cap(b) <= 64<<10 {
			spare = b
		}
		s.mu.Lock()
		s.writing = false
		fin := s.finishing && len(s.buf) == 0
		s.flushed.Broadcast()
		s.mu.Unlock()
		if fin {
			if c, ok := s.w.(io.Closer); ok {
				c.Close()
			}
			s.close()
			return
		}
	}
}

// finish makes run write what is queued, then close the stream's write
// side (a clean end of stream for the peer, after every frame sent before
// it), and stop.
func (s *sender) finish() {
	s.mu.Lock()
	s.finishing = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
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
		close(s.done)
		s.flushed.Broadcast()
	}
}
