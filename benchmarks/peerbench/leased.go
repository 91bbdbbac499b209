// leased mode: the same load generators (load, tight, fanout, runTest) as the
// etcd and redis modes, against a leased server started by start_leased.sh
// (listen 127.0.0.1:7490, --term /nc/=0: keys under /nc/ are never cached;
// the default 10 s term otherwise; the memory test needs --term /long/=10m).
//
//	bench -mode leased -pid <leased pid> -skip leased.mem,leased.sessions
//	bench -mode leased -pid <pid of a fresh leased> -only leased.mem       # start_leased.sh --term /long/=10m
//	bench -mode leased -pid <pid of a fresh leased> -only leased.sessions
//	bench -mode leased -leased 127.0.0.1:7491,127.0.0.1:7492,127.0.0.1:7493 -leasedca /tmp/peerbase/leased3-ca/ca.pem \
//	    -pid <leader pid> -pids <other pids> -label 3node -only leased.put.seq,leased.put.c   # start_leased3.sh
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/leased/leased/client"
	"github.com/leased/leased/protocol"
)

var (
	flagLeased      = flag.String("leased", "127.0.0.1:7490", "leased address, or a cluster's nodes separated by commas (the library client finds the leader; the renewal tests need one address)")
	flagLeasedData  = flag.String("leaseddata", "/tmp/peerbase/leased-data", "leased data folder; the client trusts <data>/tls/ca.pem")
	flagLeasedCA    = flag.String("leasedca", "", "CA certificate the client trusts instead of <-leaseddata>/tls/ca.pem (a cluster's CA: start_leased3.sh)")
	flagRenewBatch  = flag.Int("renewbatch", 1000, "keys per Renew message in the batched lease-renewal test")
	flagMemLeases   = flag.Int("memleases", 1000000, "read leases the memory test takes")
	flagMemSessions = flag.Int("memsessions", 100, "sessions the memory test spreads its leases over")
	flagSessions    = flag.Int("sessions", 10000, "client sessions the sessions test opens")
	flagDialConc    = flag.Int("dialconc", 32, "concurrent dials in the sessions test")
	flagHolderWrap  = flag.Bool("holderwrap", true, "holders tests: wrap each holder's socket to time the invalidation's arrival (false: plain sockets, last/first = ack)")
)

// Key prefixes; their terms are set by start_leased.sh.
const (
	ncPrefix   = "/nc/"   // --term /nc/=0: never cached, every read goes to the server
	longPrefix = "/long/" // --term /long/=10m: the memory test's leases must not expire
)

var benchLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

func leasedCA() string {
	if *flagLeasedCA != "" {
		return *flagLeasedCA
	}
	return filepath.Join(*flagLeasedData, "tls", "ca.pem")
}

// leasedDial opens a client session with the library.
func leasedDial(ctx context.Context, cfg client.Config) (*client.Client, error) {
	cfg.CAFile = leasedCA()
	if cfg.Logger == nil {
		cfg.Logger = benchLog
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return client.Dial(dctx, *flagLeased, cfg)
}

// readRSS returns VmRSS of pid in bytes (0 if unknown).
func readRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			if len(f) >= 2 {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// runOnce runs a test a single time whatever -runs says: the memory and
// session tests need a fresh server for each measurement.
func runOnce(name string, fn func(run int) runResult) {
	saved := *flagRuns
	*flagRuns = 1
	defer func() { *flagRuns = saved }()
	runTest(name, fn)
}

func pctDur(d []time.Duration, p float64) float64 {
	s := make([]int64, len(d))
	for i, x := range d {
		s[i] = int64(x)
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return pct(s, p)
}

func leasedTests() {
	ctx := context.Background()
	dur, conc := *flagDur, *flagConc
	cl := make([]*client.Client, *flagClients)
	for i := range cl {
		c, err := leasedDial(ctx, client.Config{Name: fmt.Sprintf("bench-%d", i)})
		must(err)
		cl[i] = c
	}
	c0 := cl[0]
	st, err := c0.ServerStats(ctx)
	must(err)
	fmt.Printf("leased at %s: default term %v, epsilon %v, revision %d, sessions %d, leases %d, uptime %v\n",
		*flagLeased, st.DefaultTerm, st.Epsilon, st.Revision, st.Sessions, st.Leases, st.Uptime.Round(time.Millisecond))

	key := "/bench/key"             // default term: cached
	ncKey := ncPrefix + "bench/key" // never cached
	val := value(0)
	warm := func(conc int, op func(g int) error) {
		if *flagWarm > 0 {
			load(conc, *flagWarm, op)
		}
	}
	simple := func(name string, conc int, op func(g int) error) {
		if !wanted(tname(name)) {
			return
		}
		warm(conc, op)
		runTest(name, func(int) runResult { return load(conc, dur, op) })
	}

	getNC := func(g int) error {
		it, err := cl[g%len(cl)].Get(ctx, ncKey)
		if err == nil && it.Cached {
			return errors.New("a key under " + ncPrefix + " was served from the cache")
		}
		return err
	}
	putKeys := make([]string, conc)
	for g := range putKeys {
		putKeys[g] = fmt.Sprintf("/bench/put/%03d", g)
	}
	put := func(g int) error { _, err := cl[g%len(cl)].Put(ctx, putKeys[g], val); return err }

	holderCounts := []int{*flagWatchers}
	if *flagWatchers != 1 {
		holderCounts = append(holderCounts, 1)
	}
	mainTests := []string{
		"leased.get.uncached.seq", fmt.Sprintf("leased.get.uncached.c%d", conc), "leased.get.cached.hit",
		"leased.put.seq", fmt.Sprintf("leased.put.c%d", conc),
		fmt.Sprintf("leased.renew.b1.c%d", conc), fmt.Sprintf("leased.renew.b%d.c%d", *flagRenewBatch, conc),
	}
	for _, n := range holderCounts {
		mainTests = append(mainTests, fmt.Sprintf("leased.put.holders%d", n))
	}
	anyMain := false
	for _, n := range mainTests {
		anyMain = anyMain || wanted(tname(n))
	}
	if anyMain {
		var wr client.WriteResult
		_, err = c0.Put(ctx, ncKey, val, client.Result(&wr))
		must(err)
		if wr.Term != 0 {
			must(fmt.Errorf("%s was granted a term of %v; start leased with --term %s=0", ncKey, wr.Term, ncPrefix))
		}
		_, err = c0.Put(ctx, key, val, client.Result(&wr))
		must(err)
		if wr.Term <= 0 {
			must(fmt.Errorf("%s was granted no term", key))
		}
	}
	if *flagPrewarm > 0 && anyMain {
		load(conc, *flagPrewarm, func(g int) error {
			if g%2 == 0 {
				return put(g)
			}
			return getNC(g)
		})
	}

	// (a) reads that go to the server every time.
	simple("leased.get.uncached.seq", 1, getNC)
	simple(fmt.Sprintf("leased.get.uncached.c%d", conc), conc, getNC)

	// (b) cached hit, like rueidis DoCache: one map lookup under the lease.
	if name := "leased.get.cached.hit"; wanted(tname(name)) {
		for _, c := range cl {
			_, err := c.Get(ctx, key)
			must(err)
			it, err := c.Get(ctx, key)
			must(err)
			if !it.Cached {
				must(fmt.Errorf("%s is not cached after a Get", key))
			}
		}
		var misses atomic.Int64
		read := func(g int) {
			it, err := cl[g%len(cl)].Get(ctx, key)
			if err != nil || !it.Cached {
				misses.Add(1)
			}
		}
		tight(conc, time.Second, read)
		misses.Store(0)
		runTest(name, func(int) runResult {
			r := tight(conc, dur, read)
			return append(r, metric{"misses", float64(misses.Swap(0))})
		})
	}

	// (c) writes to keys no other session holds.
	simple("leased.put.seq", 1, put)
	simple(fmt.Sprintf("leased.put.c%d", conc), conc, put)
	leasedMultiKey(ctx, cl, simple)

	// (d) writes to a key that n other sessions hold cached.
	for _, n := range holderCounts {
		if name := fmt.Sprintf("leased.put.holders%d", n); wanted(tname(name)) {
			leasedHolders(ctx, name, n)
		}
	}
	if name := fmt.Sprintf("leased.create.prefixholders%d", *flagWatchers); wanted(tname(name)) {
		leasedPrefixHolders(ctx, name, *flagWatchers) // prefix.go
	}
	if name := fmt.Sprintf("leased.put.prefixwatch%d", *flagWatchers); wanted(tname(name)) {
		leasedPrefixWatch(ctx, name, *flagWatchers) // prefix.go
	}
	for _, n := range []int{1, *flagWatchers} {
		if name := fmt.Sprintf("leased.watch.events%d", n); wanted(tname(name)) {
			leasedWatchEvents(ctx, name, n) // watch.go
		}
	}

	// (e) lease renewals over raw sessions: Renew messages of 1 and of
	// -renewbatch keys the session holds.
	for _, batch := range []int{1, *flagRenewBatch} {
		if name := fmt.Sprintf("leased.renew.b%d.c%d", batch, conc); wanted(tname(name)) {
			leasedRenew(ctx, name, batch)
		}
	}

	leasedCoord(ctx) // coord.go: locks and task queues

	// (f) server memory per outstanding read lease (fresh server).
	if name := fmt.Sprintf("leased.mem.leases%d", *flagMemLeases); wanted(tname(name)) {
		leasedMem(ctx, name, c0)
	}

	// (g) concurrent sessions (fresh server).
	if name := fmt.Sprintf("leased.sessions%d", *flagSessions); wanted(tname(name)) {
		leasedSessions(ctx, name, c0)
	}
	for _, c := range cl {
		c.Close()
	}
}

// ---------------------------------------------------------------- holders

// watchConn passes a client's packets through to its own UDP socket and
// calls onRead for every packet received. It is deliberately not an
// OOBCapablePacketConn, so quic-go reads packet by packet with ReadFrom.
type watchConn struct {
	pc     *net.UDPConn
	onRead func()
}

func (w *watchConn) ReadFrom(p []byte) (int, net.Addr, error) {
	n, a, err := w.pc.ReadFrom(p)
	if err == nil && w.onRead != nil {
		w.onRead()
	}
	return n, a, err
}
func (w *watchConn) WriteTo(p []byte, a net.Addr) (int, error) { return w.pc.WriteTo(p, a) }
func (w *watchConn) Close() error                              { return w.pc.Close() }
func (w *watchConn) LocalAddr() net.Addr                       { return w.pc.LocalAddr() }
func (w *watchConn) SetDeadline(t time.Time) error             { return w.pc.SetDeadline(t) }
func (w *watchConn) SetReadDeadline(t time.Time) error         { return w.pc.SetReadDeadline(t) }
func (w *watchConn) SetWriteDeadline(t time.Time) error        { return w.pc.SetWriteDeadline(t) }
func (w *watchConn) SetReadBuffer(n int) error                 { return w.pc.SetReadBuffer(n) }
func (w *watchConn) SetWriteBuffer(n int) error                { return w.pc.SetWriteBuffer(n) }
func (w *watchConn) SyscallConn() (syscall.RawConn, error)     { return w.pc.SyscallConn() }

// leasedHolders: n client instances each hold hkey cached; a separate
// writer Puts. leased acknowledges the Put only after every holder has
// dropped its entry and acknowledged the invalidation (or its lease ran
// out), so ack_* is the time to the last holder. last_*/first_* are when
// the invalidation reached each holder's socket (the first packet it
// received after the Put was sent): the holder drops the entry after that
// and before the Put's ack. Between writes every holder reads the key
// again (it must not get the old value) and checks it is cached again.
func leasedHolders(ctx context.Context, name string, n int) {
	const warmPuts = 20
	hkey := fmt.Sprintf("/bench/held%d", n)
	writer, err := leasedDial(ctx, client.Config{Name: "writer"})
	must(err)
	ver, err := writer.Put(ctx, hkey, value(0))
	must(err)
	f := newFanout(warmPuts+*flagRuns**flagPuts, n)
	var cur atomic.Int64
	cur.Store(-1)
	holders := make([]*client.Client, n)
	socks := make([]*watchConn, n)
	for w := 0; w < n; w++ {
		w := w
		cfg := client.Config{Name: fmt.Sprintf("holder-%d", w)}
		if *flagHolderWrap {
			pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			must(err)
			socks[w] = &watchConn{pc: pc, onRead: func() { f.got(int(cur.Load()), w) }}
			cfg.PacketConn = socks[w]
		}
		c, err := leasedDial(ctx, cfg)
		must(err)
		holders[w] = c
	}
	var want atomic.Uint64
	want.Store(ver)
	var stale, notHeld, cachedFirst atomic.Int64
	recache := func(int) error {
		var wg sync.WaitGroup
		var ferr atomic.Value
		for _, c := range holders {
			wg.Add(1)
			go func(c *client.Client) {
				defer wg.Done()
				it, err := c.Get(ctx, hkey)
				if err != nil {
					ferr.CompareAndSwap(nil, err)
					return
				}
				if it.Version != want.Load() {
					stale.Add(1) // the old value after the Put was acknowledged
				}
				if it.Cached {
					cachedFirst.Add(1)
				}
				it, err = c.Get(ctx, hkey)
				if err != nil {
					ferr.CompareAndSwap(nil, err)
					return
				}
				if !it.Cached {
					notHeld.Add(1) // the next Put would not find this holder
				}
			}(c)
		}
		wg.Wait()
		if e := ferr.Load(); e != nil {
			return e.(error)
		}
		return nil
	}
	must(recache(0))
	if notHeld.Load() > 0 {
		must(fmt.Errorf("%d of %d holders do not hold %s cached", notHeld.Load(), n, hkey))
	}
	var mu sync.Mutex
	var holderCounts []int
	var waited []time.Duration
	write := func(i int) error {
		cur.Store(int64(i))
		var res client.WriteResult
		v, err := writer.Put(ctx, hkey, value(i), client.Result(&res))
		if err != nil {
			return err
		}
		want.Store(v)
		if !*flagHolderWrap {
			// not observed: every holder counts as reached at the ack
			for w := 0; w < n; w++ {
				f.got(i, w)
			}
		}
		mu.Lock()
		holderCounts = append(holderCounts, res.Holders)
		waited = append(waited, res.Waited)
		mu.Unlock()
		return nil
	}
	f.measure(0, warmPuts, write, recache)
	reset := func() {
		mu.Lock()
		holderCounts, waited = holderCounts[:0], waited[:0]
		mu.Unlock()
		stale.Store(0)
		notHeld.Store(0)
		cachedFirst.Store(0)
	}
	reset()
	runTest(name, func(run int) runResult {
		r := f.measure(warmPuts+run**flagPuts, *flagPuts, write, recache)
		mu.Lock()
		sum, short := 0, 0
		for _, h := range holderCounts {
			sum += h
			if h != n {
				short++
			}
		}
		hm := float64(sum) / float64(max(len(holderCounts), 1))
		r = append(r,
			metric{"srvWait_p50us", pctDur(waited, .5) / 1e3}, metric{"srvWait_p99us", pctDur(waited, .99) / 1e3},
			metric{"holders", hm}, metric{"putsShort", float64(short)},
			metric{"staleReads", float64(stale.Load())}, metric{"cachedAfterPut", float64(cachedFirst.Load())},
			metric{"notReheld", float64(notHeld.Load())})
		mu.Unlock()
		reset()
		return r
	})
	for w, c := range holders {
		c.Close()
		if socks[w] != nil {
			socks[w].Close()
		}
	}
	writer.Close()
}

// ---------------------------------------------------------------- raw sessions

// rawSess speaks the protocol directly over one QUIC connection: requests
// are pipelined on the request stream and matched to replies by ID, as the
// library does, without the library's cache.
type rawSess struct {
	qc      *quic.Conn
	st      *quic.Stream
	wmu     sync.Mutex
	wbuf    []byte
	next    atomic.Uint64
	pmu     sync.Mutex
	pending map[uint64]chan protocol.Message
	done    chan struct{}
	err     error
}

func rawTLS() (*tls.Config, error) {
	pem, err := os.ReadFile(leasedCA())
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, errors.New("no certificate in " + leasedCA())
	}
	host, _, err := net.SplitHostPort(*flagLeased)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, ServerName: host, NextProtos: []string{protocol.ALPN}, MinVersion: tls.VersionTLS13}, nil
}

func dialRawLeased(ctx context.Context, name string) (*rawSess, error) {
	tlsConf, err := rawTLS()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, *flagLeased, tlsConf, &quic.Config{MaxIdleTimeout: 30 * time.Second, KeepAlivePeriod: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	st, err := qc.OpenStreamSync(ctx)
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, err
	}
	rs := &rawSess{qc: qc, st: st, pending: map[uint64]chan protocol.Message{}, done: make(chan struct{})}
	if err := rs.write(&protocol.Hello{Version: protocol.Version, Client: name}); err != nil {
		qc.CloseWithError(0, "")
		return nil, err
	}
	fr := protocol.NewFrameReader(st, 0)
	st.SetReadDeadline(time.Now().Add(10 * time.Second))
	m, err := fr.ReadMessage()
	st.SetReadDeadline(time.Time{})
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, err
	}
	if _, ok := m.(*protocol.HelloReply); !ok {
		qc.CloseWithError(0, "")
		return nil, fmt.Errorf("hello: got %T", m)
	}
	go rs.readReplies(fr)
	go rs.readNotices()
	return rs, nil
}

func (rs *rawSess) write(m protocol.Message) error {
	rs.wmu.Lock()
	defer rs.wmu.Unlock()
	var err error
	rs.wbuf, err = protocol.AppendFrame(rs.wbuf[:0], m)
	if err != nil {
		return err
	}
	_, err = rs.st.Write(rs.wbuf)
	return err
}

func setRawID(m protocol.Message, id uint64) {
	switch m := m.(type) {
	case *protocol.Get:
		m.ID = id
	case *protocol.Renew:
		m.ID = id
	case *protocol.Release:
		m.ID = id
	case *protocol.Stats:
		m.ID = id
	case *protocol.Goodbye:
		m.ID = id
	}
}

// call sends a request and waits for its reply (an Error reply becomes an error).
func (rs *rawSess) call(ctx context.Context, m protocol.Message) (protocol.Message, error) {
	id := rs.next.Add(1)
	setRawID(m, id)
	ch := make(chan protocol.Message, 1)
	rs.pmu.Lock()
	rs.pending[id] = ch
	rs.pmu.Unlock()
	if err := rs.write(m); err != nil {
		return nil, err
	}
	select {
	case r := <-ch:
		if e, ok := r.(*protocol.Error); ok {
			return nil, fmt.Errorf("server error %v: %s", e.Code, e.Message)
		}
		return r, nil
	case <-rs.done:
		return nil, rs.err
	case <-ctx.Done():
		rs.pmu.Lock()
		delete(rs.pending, id)
		rs.pmu.Unlock()
		return nil, ctx.Err()
	}
}

func (rs *rawSess) readReplies(fr *protocol.FrameReader) {
	for {
		m, err := fr.ReadMessage()
		if err != nil {
			rs.err = fmt.Errorf("raw session: %w", err)
			close(rs.done)
			return
		}
		id, _ := protocol.RequestID(m)
		rs.pmu.Lock()
		ch := rs.pending[id]
		delete(rs.pending, id)
		rs.pmu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// readNotices acknowledges invalidations (none are expected) so that no
// write ever waits on a raw session.
func (rs *rawSess) readNotices() {
	us, err := rs.qc.AcceptUniStream(rs.qc.Context())
	if err != nil {
		return
	}
	fr := protocol.NewFrameReader(us, 0)
	for {
		m, err := fr.ReadMessage()
		if err != nil {
			return
		}
		if inv, ok := m.(*protocol.Invalidate); ok {
			rs.write(&protocol.Ack{Keys: inv.Keys})
		}
	}
}

func (rs *rawSess) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	rs.call(ctx, &protocol.Goodbye{})
	cancel()
	rs.qc.CloseWithError(0, "")
}

// leasedRenew: conc goroutines over -clients raw sessions; goroutine g owns
// batch keys that its session holds read leases on (taken with Gets first),
// and renews them all with one Renew message per op. leases/s counts keys
// the server gave a new term.
func leasedRenew(ctx context.Context, name string, batch int) {
	conc := *flagConc
	rs := make([]*rawSess, *flagClients)
	for i := range rs {
		s, err := dialRawLeased(ctx, fmt.Sprintf("renew-%d", i))
		must(err)
		rs[i] = s
	}
	keys := make([][][]byte, conc)
	var wg sync.WaitGroup
	var ferr atomic.Value
	t0 := time.Now()
	for g := 0; g < conc; g++ {
		keys[g] = make([][]byte, batch)
		for j := range keys[g] {
			keys[g][j] = []byte(fmt.Sprintf("/bench/renew/b%d/%03d/%05d", batch, g, j))
		}
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for _, k := range keys[g] {
				m, err := rs[g%len(rs)].call(ctx, &protocol.Get{Key: k})
				if err != nil {
					ferr.CompareAndSwap(nil, err)
					return
				}
				if r, ok := m.(*protocol.GetReply); !ok || r.Term <= 0 {
					ferr.CompareAndSwap(nil, fmt.Errorf("get %s: no lease (%T %+v)", k, m, m))
					return
				}
			}
		}(g)
	}
	wg.Wait()
	if e := ferr.Load(); e != nil {
		must(e.(error))
	}
	fmt.Printf("  (%d sessions took %d leases in %v)\n", len(rs), conc*batch, time.Since(t0).Round(time.Millisecond))
	var renewed, calls atomic.Int64
	op := func(g int) error {
		m, err := rs[g%len(rs)].call(ctx, &protocol.Renew{Keys: keys[g]})
		if err != nil {
			return err
		}
		r, ok := m.(*protocol.RenewReply)
		if !ok || len(r.Terms) != len(keys[g]) {
			return fmt.Errorf("bad renew reply %T", m)
		}
		n := 0
		for _, t := range r.Terms {
			if t > 0 {
				n++
			}
		}
		renewed.Add(int64(n))
		calls.Add(1)
		if n != len(keys[g]) {
			return fmt.Errorf("renewed %d of %d leases", n, len(keys[g]))
		}
		return nil
	}
	if *flagWarm > 0 {
		load(conc, *flagWarm, op)
	}
	runTest(name, func(int) runResult {
		renewed.Store(0)
		calls.Store(0)
		r := load(conc, *flagDur, op)
		ops, _ := r.get("ops/s")
		frac := 0.0
		if c := calls.Load(); c > 0 {
			frac = float64(renewed.Load()) / float64(c*int64(batch))
		}
		return append(runResult{{"leases/s", ops * float64(batch) * frac}}, r...)
	})
	for _, s := range rs {
		s.close()
	}
}

// ---------------------------------------------------------------- memory

// warnNotFresh warns when the server has served writes or run for a while:
// the memory and sessions tests compare RSS readings of a fresh server.
func warnNotFresh(ctx context.Context, c0 *client.Client, name string) {
	st, err := c0.ServerStats(ctx)
	must(err)
	if st.Revision > 0 || st.Uptime > 2*time.Minute {
		fmt.Fprintf(os.Stderr, "WARN: %s wants a fresh server; this one has revision %d and uptime %v\n",
			name, st.Revision, st.Uptime.Round(time.Second))
	}
}

// leasedMem: -memsessions library clients take -memleases read leases on
// distinct keys under /long/ (10 min term; the keys do not exist: negative
// answers are leased too). bytes/lease is the growth of the server's RSS
// from after the sessions opened to after the leases were taken.
func leasedMem(ctx context.Context, name string, c0 *client.Client) {
	if *flagPid <= 0 {
		must(errors.New(name + " needs -pid (the server's RSS)"))
	}
	runOnce(name, func(int) runResult {
		warnNotFresh(ctx, c0, name)
		S := *flagMemSessions
		N := *flagMemLeases
		per := (N + S - 1) / S
		probe := longPrefix + "mem/probe"
		var wr client.WriteResult
		_, err := c0.Put(ctx, probe, nil, client.Result(&wr))
		must(err)
		if wr.Term < time.Minute {
			must(fmt.Errorf("%s gets a term of %v; start leased with --term %s=10m", probe, wr.Term, longPrefix))
		}
		_, err = c0.Delete(ctx, probe)
		must(err)
		time.Sleep(time.Second)
		rss0 := readRSS(*flagPid)
		cs := make([]*client.Client, S)
		for i := range cs {
			c, err := leasedDial(ctx, client.Config{Name: fmt.Sprintf("mem-%d", i), CacheEntries: 2*per + 1000, CacheBytes: 1 << 30})
			must(err)
			cs[i] = c
		}
		time.Sleep(time.Second)
		rss1 := readRSS(*flagPid)
		st1, err := c0.ServerStats(ctx)
		must(err)
		a := snap()
		t0 := time.Now()
		const perSessConc = 8
		var wg sync.WaitGroup
		var ferr atomic.Value
		var found atomic.Int64
		var taken atomic.Int64
		for s := range cs {
			var next atomic.Int64
			for g := 0; g < perSessConc; g++ {
				wg.Add(1)
				go func(s int) {
					defer wg.Done()
					for {
						j := int(next.Add(1)) - 1
						if j >= per || s*per+j >= N {
							return
						}
						it, err := cs[s].Get(ctx, fmt.Sprintf("%smem/%03d/%07d", longPrefix, s, j))
						if err != nil {
							ferr.CompareAndSwap(nil, err)
							return
						}
						if it.Found {
							found.Add(1)
						}
						taken.Add(1)
					}
				}(s)
			}
		}
		wg.Wait()
		took := time.Since(t0)
		b := snap()
		if e := ferr.Load(); e != nil {
			must(e.(error))
		}
		time.Sleep(2 * time.Second)
		rss2 := readRSS(*flagPid)
		st2, err := c0.ServerStats(ctx)
		must(err)
		// every entry must be cached (nothing evicted, every read leased)
		notCached := 0
		for s := range cs {
			for _, j := range []int{0, per / 2, per - 1} {
				if s*per+j >= N {
					continue
				}
				it, err := cs[s].Get(ctx, fmt.Sprintf("%smem/%03d/%07d", longPrefix, s, j))
				if err != nil || !it.Cached {
					notCached++
				}
			}
		}
		leases := st2.Leases - st1.Leases
		fmt.Printf("  (%d sessions took %d leases in %v; server leases %d -> %d; RSS %.1f -> %.1f -> %.1f MB; %d spot checks not cached)\n",
			S, taken.Load(), took.Round(time.Millisecond), st1.Leases, st2.Leases,
			float64(rss0)/1e6, float64(rss1)/1e6, float64(rss2)/1e6, notCached)
		r := runResult{
			{"B/lease", float64(rss2-rss1) / float64(max(leases, 1))},
			{"leases", float64(st2.Leases)},
			{"rssFreshMB", float64(rss0) / 1e6},
			{"rssSessMB", float64(rss1) / 1e6},
			{"rssLeasesMB", float64(rss2) / 1e6},
			{"grants/s", float64(taken.Load()) / took.Seconds()},
			{"notCached", float64(notCached)},
			{"found", float64(found.Load())},
		}
		r = append(r, cpuMetrics(a, b)...)
		var cw sync.WaitGroup
		for _, c := range cs {
			cw.Add(1)
			go func(c *client.Client) { defer cw.Done(); c.Close() }(c)
		}
		cw.Wait()
		return r
	})
}

// ---------------------------------------------------------------- sessions

// leasedSessions opens -sessions library clients (one UDP socket each),
// then checks that a Put and a Get still work, and reports the server's
// session count and RSS.
func leasedSessions(ctx context.Context, name string, c0 *client.Client) {
	runOnce(name, func(int) runResult {
		warnNotFresh(ctx, c0, name)
		N := *flagSessions
		time.Sleep(time.Second)
		rss0 := readRSS(*flagPid)
		st0, err := c0.ServerStats(ctx)
		must(err)
		cs := make([]*client.Client, N)
		var next atomic.Int64
		var failed atomic.Int64
		var firstErr atomic.Value
		var wg sync.WaitGroup
		a := snap()
		t0 := time.Now()
		for g := 0; g < *flagDialConc; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= N {
						return
					}
					var c *client.Client
					var err error
					for try := 0; try < 3; try++ {
						if c, err = leasedDial(ctx, client.Config{Name: fmt.Sprintf("s%d", i)}); err == nil {
							break
						}
					}
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						continue
					}
					cs[i] = c
				}
			}()
		}
		wg.Wait()
		took := time.Since(t0)
		b := snap()
		if n := failed.Load(); n > 0 {
			fmt.Fprintf(os.Stderr, "WARN: %d dials failed, first: %v\n", n, firstErr.Load())
		}
		time.Sleep(2 * time.Second)
		rss1 := readRSS(*flagPid)
		st1, err := c0.ServerStats(ctx)
		must(err)
		// a Put and a Get still work: from a new session, and between two of the N.
		var putUS, getUS float64
		check := func() error {
			fresh, err := leasedDial(ctx, client.Config{Name: "check"})
			if err != nil {
				return fmt.Errorf("dial with %d sessions open: %w", st1.Sessions, err)
			}
			defer fresh.Close()
			k := "/bench/sessions/check"
			t := time.Now()
			v, err := fresh.Put(ctx, k, value(42))
			putUS = float64(time.Since(t).Microseconds())
			if err != nil {
				return err
			}
			var last *client.Client
			for i := N - 1; i >= 0 && last == nil; i-- {
				last = cs[i]
			}
			if last == nil {
				return errors.New("no session opened")
			}
			t = time.Now()
			it, err := last.Get(ctx, k)
			getUS = float64(time.Since(t).Microseconds())
			if err != nil {
				return err
			}
			if it.Version != v || idxOf(it.Value) != 42 {
				return fmt.Errorf("get after put: version %d value %q, want version %d", it.Version, it.Value, v)
			}
			return nil
		}
		must(check())
		fmt.Printf("  (%d sessions opened in %v, %d failed; server sessions %d -> %d; RSS %.1f -> %.1f MB; bench RSS %.1f MB)\n",
			N-int(failed.Load()), took.Round(time.Millisecond), failed.Load(), st0.Sessions, st1.Sessions,
			float64(rss0)/1e6, float64(rss1)/1e6, float64(readRSS(os.Getpid()))/1e6)
		r := runResult{
			{"sessions", float64(st1.Sessions)},
			{"dialFailed", float64(failed.Load())},
			{"dials/s", float64(N-int(failed.Load())) / took.Seconds()},
			{"rssMB", float64(rss1) / 1e6},
			{"KB/session", float64(rss1-rss0) / 1024 / float64(max(st1.Sessions-st0.Sessions, 1))},
			{"put_us", putUS},
			{"get_us", getUS},
		}
		r = append(r, cpuMetrics(a, b)...)
		t1 := time.Now()
		var cw sync.WaitGroup
		var ci atomic.Int64
		for g := 0; g < 64; g++ {
			cw.Add(1)
			go func() {
				defer cw.Done()
				for {
					i := int(ci.Add(1)) - 1
					if i >= N {
						return
					}
					if cs[i] != nil {
						cs[i].Close()
					}
				}
			}()
		}
		cw.Wait()
		fmt.Printf("  (closed %d sessions in %v)\n", N, time.Since(t1).Round(time.Millisecond))
		return r
	})
}
