package server

import (
	"io"
	"sync"
	"sync/atomic"

	"github.com/leased/leased/protocol"
)

// sender writes frames to one stream from its own goroutine. send never
// blocks: frames queue in memory, up to maxQueuedBytes; past that the peer
// is not reading and overflow is called once.
type sender struct {
	w        io.Writer
	counts   *[protocol.NumTypes]atomic.Uint64
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
	s.mu.Unlock()
	if err != nil {
		return false
	}
	s.counts[m.Type()].Add(1)
	if full {
		s.over.Do(s.overflow)
		return false
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return true
}

// flush waits until what was queued has been written, or the sender closed.
func (s *sender) flush() {
	s.mu.Lock()
	for (len(s.buf) > 0 || s.writing) && !s.closed {
		s.flushed.Wait()
	}
	s.mu.Unlock()
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
		spare = b
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
	if !s.closed {
		s.closed = true
		close(s.done)
		s.flushed.Broadcast()
	}
	s.mu.Unlock()
}
