// Package faultproxy is a TCP proxy that tests put between two processes to
// cut, heal and slow the link between them, where the processes all listen
// on 127.0.0.1 and no firewall is at hand. The cluster tests of cmd/leased
// route each node's raft traffic to each peer through a Proxy of its own
// (leased --peer-route), so that cutting the proxies of one node partitions
// it.
package faultproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards the connections it accepts on 127.0.0.1 to one target
// address, byte for byte in both directions. Cut drops every connection and
// refuses new ones until Heal; Delay holds back the data of new and open
// connections. All methods are safe for concurrent use. Close stops the
// proxy and returns after every goroutine it started has ended.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup // the accept loop and every connection's pumps

	mu     sync.Mutex // guards the fields below
	conns  map[*link]struct{}
	cut    bool
	delay  time.Duration
	closed bool
	stats  Stats
}

// Stats counts what a Proxy did, for tests that check that traffic went
// through it.
type Stats struct {
	// Accepted is how many connections were forwarded to the target.
	Accepted int
	// Refused is how many connections were closed at once because the
	// proxy was cut, or because the target could not be reached.
	Refused int
	// Dropped is how many open connections Cut closed.
	Dropped int
}

// link is one forwarded connection: the accepted one and the one dialled
// to the target.
type link struct {
	in, out net.Conn
	once    sync.Once
}

func (l *link) close() {
	l.once.Do(func() {
		l.in.Close()
		l.out.Close()
	})
}

// New starts a proxy on a free port of 127.0.0.1 that forwards to target
// (host:port). The target need not be up yet: a connection that cannot
// reach it is closed.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address the proxy listens on, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Cut closes every open connection and makes the proxy close new ones as
// soon as it accepts them, until Heal. Both ends see their connections
// reset or closed, as after a broken link, not silence. Cutting a cut
// proxy does nothing.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.takeConns()
	p.stats.Dropped += len(conns)
	p.mu.Unlock()
	for _, l := range conns {
		l.close()
	}
}

// Heal undoes Cut: new connections are forwarded again. The connections
// Cut closed stay closed; the processes on either side dial again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// IsCut reports whether the proxy is cut.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Delay makes the proxy hold back each chunk of data it forwards, in
// either direction, by d before it writes it on; 0 forwards at once. It
// applies to the next chunk of every connection, open or new. Chunks of
// one connection keep their order: the delay adds latency, it does not
// reorder.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close stops accepting, closes every open connection, and waits until
// every goroutine of the proxy has ended: at most one Delay longer than
// the connections take to close. Closing twice does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := p.takeConns()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range conns {
		l.close()
	}
	p.wg.Wait()
	return err
}

// takeConns empties the set of open connections and returns them. p.mu
// must be held.
func (p *Proxy) takeConns() []*link {
	conns := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		conns = append(conns, l)
	}
	clear(p.conns)
	return conns
}

// accept runs in its own goroutine until the listener is closed.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient error, such as too many open files: go on
			// after a pause rather than spin.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		refuse := p.cut || p.closed
		if refuse {
			p.stats.Refused++
		} else {
			p.wg.Add(1) // under mu, so that Close's Wait sees it
		}
		p.mu.Unlock()
		if refuse {
			in.Close()
			continue
		}
		go p.forward(in)
	}
}

// dialTimeout bounds the dial of the target for one connection.
const dialTimeout = 5 * time.Second

// forward dials the target for the accepted connection in and copies
// between the two until either side ends or the proxy drops them. It runs
// in a goroutine of its own, counted in p.wg.
func (p *Proxy) forward(in net.Conn) {
	defer p.wg.Done()
	out, err := net.DialTimeout("tcp", p.target, dialTimeout)
	if err != nil {
		in.Close()
		p.mu.Lock()
		p.stats.Refused++
		p.mu.Unlock()
		return
	}
	l := &link{in: in, out: out}
	p.mu.Lock()
	if p.cut || p.closed {
		// Cut or closed while the dial was under way.
		p.stats.Refused++
		p.mu.Unlock()
		l.close()
		return
	}
	p.conns[l] = struct{}{}
	p.stats.Accepted++
	p.mu.Unlock()

	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() { defer pumps.Done(); p.pump(out, in); l.close() }()
	go func() { defer pumps.Done(); p.pump(in, out); l.close() }()
	pumps.Wait()
	p.mu.Lock()
	delete(p.conns, l)
	p.mu.Unlock()
}

// pump copies from src to dst, each chunk after the proxy's delay, until
// either fails.
func (p *Proxy) pump(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			d := p.delay
			p.mu.Unlock()
			if d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
