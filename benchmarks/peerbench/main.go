// Command bench measures baseline figures of etcd (3.4 server) and redis (7.0)
// as anchors for a cache-consistency lease server.
//
// Usage (see README.md beside this file):
//
//	bench -mode etcd  -etcd 127.0.0.1:23790 -pid <etcd pid>
//	bench -mode redis -redis 127.0.0.1:6390 -pid <redis pid> -label nondurable
//	bench -mode leased -leased 127.0.0.1:7490 -pid <leased pid>   (see leased.go)
//	bench -mode fsync -fsyncdir /tmp/peerbase
//	bench -mode floor                                   (see floor.go)
//	bench -mode quicfloor -pid <quicfloor-server pid>   (see floor.go)
//
// Every test runs -runs times (default 3) for -dur (default 5s) after a short
// warm-up; the summary prints median [min-max] of each metric over the runs.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
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

	"github.com/redis/rueidis"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

var (
	flagMode     = flag.String("mode", "etcd", "etcd | redis | leased | fsync | floor | quicfloor | quicfloor-server")
	flagEtcd     = flag.String("etcd", "127.0.0.1:23790", "etcd client address")
	flagRedis    = flag.String("redis", "127.0.0.1:6390", "redis address")
	flagPid      = flag.Int("pid", 0, "server pid for CPU accounting (0 = skip)")
	flagPids     = flag.String("pids", "", "comma-separated extra server pids whose CPU is added to -pid's (e.g. the other members of a cluster)")
	flagDur      = flag.Duration("dur", 5*time.Second, "duration of each timed run")
	flagWarm     = flag.Duration("warm", time.Second, "warm-up before the runs of each test")
	flagRuns     = flag.Int("runs", 3, "runs per test")
	flagConc     = flag.Int("conc", 64, "concurrent goroutines for the concurrent tests")
	flagClients  = flag.Int("clients", 8, "client instances the concurrent goroutines are spread over")
	flagWatchers = flag.Int("watchers", 100, "watchers / caching clients in the fan-out tests")
	flagPuts     = flag.Int("puts", 200, "writes per run in the fan-out tests")
	flagVal      = flag.Int("valsize", 100, "value size in bytes")
	flagOnly     = flag.String("only", "", "comma-separated substrings; run only tests whose name contains one")
	flagSkip     = flag.String("skip", "", "comma-separated substrings; skip tests whose name contains one")
	flagLabel    = flag.String("label", "", "label appended to test names (e.g. nondurable)")
	flagJSON     = flag.String("json", "", "append results as JSON lines to this file")
	flagFsyncDir = flag.String("fsyncdir", "/tmp/peerbase", "directory for -mode fsync")
	flagPrewarm  = flag.Duration("prewarm", 10*time.Second, "mixed get/put load on a fresh server before the first test")
)

// ---------------------------------------------------------------- results

type metric struct {
	name string
	v    float64
}

type runResult []metric

func (r runResult) get(n string) (float64, bool) {
	for _, m := range r {
		if m.name == n {
			return m.v, true
		}
	}
	return 0, false
}

type testResult struct {
	Name string               `json:"name"`
	Runs []map[string]float64 `json:"runs"`
	Med  map[string]float64   `json:"median"`
	Min  map[string]float64   `json:"min"`
	Max  map[string]float64   `json:"max"`
}

var allResults []testResult

func wanted(name string) bool {
	for _, s := range strings.Split(*flagSkip, ",") {
		if s != "" && strings.Contains(name, s) {
			return false
		}
	}
	if *flagOnly == "" {
		return true
	}
	for _, s := range strings.Split(*flagOnly, ",") {
		if s != "" && strings.Contains(name, s) {
			return true
		}
	}
	return false
}

func tname(n string) string {
	if *flagLabel != "" {
		return n + "[" + *flagLabel + "]"
	}
	return n
}

// runTest runs fn *flagRuns times and prints per-run and summary lines.
func runTest(name string, fn func(run int) runResult) {
	name = tname(name)
	if !wanted(name) {
		return
	}
	var runs []runResult
	for i := 0; i < *flagRuns; i++ {
		r := fn(i)
		runs = append(runs, r)
		fmt.Printf("  %-34s run%d  %s\n", name, i+1, fmtRun(r))
	}
	tr := testResult{Name: name, Med: map[string]float64{}, Min: map[string]float64{}, Max: map[string]float64{}}
	var parts []string
	for _, m := range runs[0] {
		var vs []float64
		for _, r := range runs {
			if v, ok := r.get(m.name); ok {
				vs = append(vs, v)
			}
		}
		sort.Float64s(vs)
		med := vs[len(vs)/2]
		if len(vs)%2 == 0 {
			med = (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2
		}
		tr.Med[m.name], tr.Min[m.name], tr.Max[m.name] = med, vs[0], vs[len(vs)-1]
		parts = append(parts, fmt.Sprintf("%s=%s [%s-%s]", m.name, fv(med), fv(vs[0]), fv(vs[len(vs)-1])))
	}
	for _, r := range runs {
		mm := map[string]float64{}
		for _, m := range r {
			mm[m.name] = m.v
		}
		tr.Runs = append(tr.Runs, mm)
	}
	allResults = append(allResults, tr)
	fmt.Printf("SUMMARY %-34s %s\n", name, strings.Join(parts, "  "))
	if *flagJSON != "" {
		f, err := os.OpenFile(*flagJSON, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err == nil {
			b, _ := json.Marshal(tr)
			f.Write(append(b, '\n'))
			f.Close()
		}
	}
}

func fv(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

func fmtRun(r runResult) string {
	var s []string
	for _, m := range r {
		s = append(s, m.name+"="+fv(m.v))
	}
	return strings.Join(s, " ")
}

// ---------------------------------------------------------------- CPU

type cpuSnap struct {
	at       time.Time
	srvTicks int64 // utime+stime of the server process, clock ticks (1/100 s)
	selfUser time.Duration
	selfSys  time.Duration
	sysBusy  int64 // machine-wide non-idle ticks
	sysTotal int64
}

func readProcTicks(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+2:])
	// fields after ')' start at field 3 (state); utime is field 14, stime 15.
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

func readSysTicks() (busy, total int64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return
	}
	line := strings.SplitN(string(b), "\n", 2)[0]
	f := strings.Fields(line)[1:]
	for i, x := range f {
		v, _ := strconv.ParseInt(x, 10, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return
}

func snap() cpuSnap {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	b, t := readSysTicks()
	srv := readProcTicks(*flagPid)
	for _, p := range strings.Split(*flagPids, ",") {
		if pid, err := strconv.Atoi(strings.TrimSpace(p)); err == nil {
			srv += readProcTicks(pid)
		}
	}
	return cpuSnap{
		at:       time.Now(),
		srvTicks: srv,
		selfUser: time.Duration(ru.Utime.Nano()),
		selfSys:  time.Duration(ru.Stime.Nano()),
		sysBusy:  b, sysTotal: t,
	}
}

// cpuMetrics returns server and bench CPU in percent of one core, and machine busy %.
func cpuMetrics(a, b cpuSnap) runResult {
	el := b.at.Sub(a.at).Seconds()
	var r runResult
	if *flagPid > 0 {
		r = append(r, metric{"srvCPU%", float64(b.srvTicks-a.srvTicks) / 100 / el * 100})
	}
	self := (b.selfUser + b.selfSys - a.selfUser - a.selfSys).Seconds()
	r = append(r, metric{"benchCPU%", self / el * 100})
	if b.sysTotal > a.sysTotal {
		r = append(r, metric{"machBusy%", float64(b.sysBusy-a.sysBusy) / float64(b.sysTotal-a.sysTotal) * 100})
	}
	return r
}

// ---------------------------------------------------------------- load driver

func pct(sorted []int64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return float64(sorted[i])
}

// load runs op from conc goroutines for dur and returns ops/s, p50/p99 (µs), CPU.
func load(conc int, dur time.Duration, op func(g int) error) runResult {
	var stop atomic.Bool
	lats := make([][]int64, conc)
	var nerr atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	var startWG sync.WaitGroup
	startWG.Add(1)
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			l := make([]int64, 0, 1<<15)
			startWG.Wait()
			for !stop.Load() {
				t0 := time.Now()
				err := op(g)
				d := time.Since(t0)
				if err != nil {
					nerr.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					time.Sleep(time.Millisecond)
					continue
				}
				l = append(l, int64(d))
			}
			lats[g] = l
		}(g)
	}
	a := snap()
	startWG.Done()
	time.Sleep(dur)
	stop.Store(true)
	wg.Wait()
	b := snap()
	el := b.at.Sub(a.at).Seconds()
	var all []int64
	for _, l := range lats {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r := runResult{
		{"ops/s", float64(len(all)) / el},
		{"p50us", pct(all, 0.50) / 1e3},
		{"p99us", pct(all, 0.99) / 1e3},
	}
	r = append(r, cpuMetrics(a, b)...)
	if n := nerr.Load(); n > 0 {
		r = append(r, metric{"errors", float64(n)})
		fmt.Fprintf(os.Stderr, "WARN: %d errors, first: %v\n", n, firstErr.Load())
	}
	return r
}

// tight measures a very cheap op: one goroutine times batches of 1000 calls
// (ns/op mean, p50/p99 of batch means); then conc goroutines run untimed
// batches for the aggregate ops/s.
func tight(conc int, dur time.Duration, op func(g int)) runResult {
	const batch = 1000
	var batches []float64
	var total time.Duration
	var n int64
	end := time.Now().Add(dur / 2)
	for time.Now().Before(end) {
		t0 := time.Now()
		for i := 0; i < batch; i++ {
			op(0)
		}
		d := time.Since(t0)
		total += d
		n += batch
		batches = append(batches, float64(d.Nanoseconds())/batch)
	}
	sort.Float64s(batches)
	r := runResult{
		{"seq_ns/op", float64(total.Nanoseconds()) / float64(n)},
		{"seq_p50ns", batches[len(batches)/2]},
		{"seq_p99ns", batches[int(0.99*float64(len(batches)-1))]},
	}
	var stop atomic.Bool
	var ops atomic.Int64
	var wg sync.WaitGroup
	a := snap()
	for g := 0; g < conc; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			var k int64
			for !stop.Load() {
				for i := 0; i < batch; i++ {
					op(g)
				}
				k += batch
			}
			ops.Add(k)
		}(g)
	}
	time.Sleep(dur / 2)
	stop.Store(true)
	wg.Wait()
	b := snap()
	r = append(r, metric{fmt.Sprintf("c%d_Mops/s", conc), float64(ops.Load()) / b.at.Sub(a.at).Seconds() / 1e6})
	r = append(r, cpuMetrics(a, b)...)
	return r
}

func value(i int) []byte {
	v := []byte(fmt.Sprintf("%08d", i))
	for len(v) < *flagVal {
		v = append(v, 'x')
	}
	return v[:*flagVal]
}

func idxOf(v []byte) int {
	if len(v) < 8 {
		return -1
	}
	i, err := strconv.Atoi(string(v[:8]))
	if err != nil {
		return -1
	}
	return i
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "FATAL:", err)
		os.Exit(1)
	}
}

// fan-out bookkeeping shared by the etcd watch and redis invalidation tests.
type fanout struct {
	n     int
	base  time.Time
	recv  [][]int64 // [write][receiver] ns since base
	count []atomic.Int32
	done  []chan struct{}
}

func newFanout(writes, receivers int) *fanout {
	f := &fanout{n: receivers, base: time.Now(), recv: make([][]int64, writes),
		count: make([]atomic.Int32, writes), done: make([]chan struct{}, writes)}
	for i := range f.recv {
		f.recv[i] = make([]int64, receivers)
		f.done[i] = make(chan struct{})
	}
	return f
}

func (f *fanout) now() int64 { return int64(time.Since(f.base)) }

func (f *fanout) got(write, receiver int) {
	if write < 0 || write >= len(f.recv) {
		return
	}
	if f.recv[write][receiver] != 0 {
		return // duplicate
	}
	f.recv[write][receiver] = f.now()
	if f.count[write].Add(1) == int32(f.n) {
		close(f.done[write])
	}
}

// measure performs writes [from, from+cnt) with write(i) and summarises
// put-to-last-receiver, put-to-first-receiver and write ack latency.
func (f *fanout) measure(from, cnt int, write func(i int) error, between func(i int) error) runResult {
	var last, first, ack []int64
	lateAfterAck := 0
	a := snap()
	for i := from; i < from+cnt; i++ {
		t0 := f.now()
		must(write(i))
		tack := f.now()
		select {
		case <-f.done[i]:
		case <-time.After(10 * time.Second):
			must(fmt.Errorf("write %d: only %d/%d receivers notified after 10s", i, f.count[i].Load(), f.n))
		}
		mx, mn := int64(0), int64(1<<62)
		for _, t := range f.recv[i] {
			mx = max(mx, t)
			mn = min(mn, t)
		}
		last = append(last, mx-t0)
		first = append(first, mn-t0)
		ack = append(ack, tack-t0)
		if mx > tack {
			lateAfterAck++
		}
		if between != nil {
			must(between(i))
		}
	}
	b := snap()
	for _, s := range [][]int64{last, first, ack} {
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	}
	r := runResult{
		{"last_p50us", pct(last, .5) / 1e3}, {"last_p99us", pct(last, .99) / 1e3},
		{"first_p50us", pct(first, .5) / 1e3},
		{"ack_p50us", pct(ack, .5) / 1e3}, {"ack_p99us", pct(ack, .99) / 1e3},
		{"lastAfterAck%", float64(lateAfterAck) / float64(cnt) * 100},
	}
	return append(r, cpuMetrics(a, b)...)
}

// ---------------------------------------------------------------- etcd

func etcdClient() *clientv3.Client {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://" + *flagEtcd},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	must(err)
	return c
}

func etcdTests() {
	ctx := context.Background()
	dur, conc := *flagDur, *flagConc
	cl := make([]*clientv3.Client, *flagClients)
	for i := range cl {
		cl[i] = etcdClient()
	}
	c0 := cl[0]
	key := "/bench/key"
	val := string(value(0))
	_, err := c0.Put(ctx, key, val)
	must(err)
	sv, err := c0.Status(ctx, "http://"+*flagEtcd)
	must(err)
	fmt.Printf("etcd server version %s, db size %d\n", sv.Version, sv.DbSize)

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

	getSer := func(g int) error { _, err := cl[g%len(cl)].Get(ctx, key, clientv3.WithSerializable()); return err }
	getLin := func(g int) error { _, err := cl[g%len(cl)].Get(ctx, key); return err }
	putKeys := make([]string, conc)
	for g := range putKeys {
		putKeys[g] = fmt.Sprintf("/bench/put/%03d", g)
	}
	put := func(g int) error { _, err := cl[g%len(cl)].Put(ctx, putKeys[g], val); return err }

	if *flagPrewarm > 0 {
		load(conc, *flagPrewarm, func(g int) error {
			if g%2 == 0 {
				return put(g)
			}
			return getSer(g)
		})
	}
	simple("etcd.get.serializable.seq", 1, getSer)
	simple(fmt.Sprintf("etcd.get.serializable.c%d", conc), conc, getSer)
	simple("etcd.get.linearizable.seq", 1, getLin)
	simple(fmt.Sprintf("etcd.get.linearizable.c%d", conc), conc, getLin)
	simple("etcd.put.seq", 1, put)
	simple(fmt.Sprintf("etcd.put.c%d", conc), conc, put)
	etcdMultiKey(ctx, cl, simple)

	// (e) LeaseGrant(10s), revoking everything after each run so that lease
	// expiry does not load later runs.
	if name := fmt.Sprintf("etcd.leasegrant.c%d", conc); wanted(tname(name)) {
		ids := make([][]clientv3.LeaseID, conc)
		grant := func(g int) error {
			r, err := cl[g%len(cl)].Grant(ctx, 10)
			if err == nil {
				ids[g] = append(ids[g], r.ID)
			}
			return err
		}
		cleanup := func() {
			t0 := time.Now()
			var wg sync.WaitGroup
			n := 0
			for g := range ids {
				n += len(ids[g])
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					for _, id := range ids[g] {
						cl[g%len(cl)].Revoke(ctx, id) // may already have expired
					}
					ids[g] = ids[g][:0]
				}(g)
			}
			wg.Wait()
			for i := 0; i < 60; i++ {
				lr, err := c0.Leases(ctx)
				if err == nil && len(lr.Leases) == 0 {
					break
				}
				time.Sleep(time.Second)
			}
			fmt.Printf("  (revoked %d leases in %v)\n", n, time.Since(t0).Round(time.Millisecond))
		}
		warm(conc, grant)
		cleanup()
		runTest(name, func(int) runResult {
			r := load(conc, dur, grant)
			cleanup()
			return r
		})
	}

	// (f) LeaseKeepAliveOnce, one lease per goroutine.
	if name := fmt.Sprintf("etcd.keepaliveonce.c%d", conc); wanted(tname(name)) {
		ids := make([]clientv3.LeaseID, conc)
		for g := range ids {
			r, err := c0.Grant(ctx, 60)
			must(err)
			ids[g] = r.ID
		}
		ka := func(g int) error { _, err := cl[g%len(cl)].KeepAliveOnce(ctx, ids[g]); return err }
		warm(conc, ka)
		runTest(name, func(int) runResult { return load(conc, dur, ka) })
		for _, id := range ids {
			c0.Revoke(ctx, id)
		}
	}

	// (g) write latency with N watchers, each on its own client connection.
	if name := fmt.Sprintf("etcd.put.watchers%d", *flagWatchers); wanted(tname(name)) {
		const warmPuts = 20
		wkey := "/bench/watched"
		f := newFanout(warmPuts+*flagRuns**flagPuts, *flagWatchers)
		wctx, cancel := context.WithCancel(ctx)
		var wcl []*clientv3.Client
		var ready sync.WaitGroup
		for w := 0; w < *flagWatchers; w++ {
			c := etcdClient()
			wcl = append(wcl, c)
			ready.Add(1)
			wch := c.Watch(wctx, wkey, clientv3.WithCreatedNotify())
			go func(w int) {
				created := false
				for resp := range wch {
					if resp.Created && !created {
						created = true
						ready.Done()
					}
					for _, ev := range resp.Events {
						f.got(idxOf(ev.Kv.Value), w)
					}
				}
			}(w)
		}
		ready.Wait()
		write := func(i int) error { _, err := c0.Put(ctx, wkey, string(value(i))); return err }
		f.measure(0, warmPuts, write, nil)
		runTest(name, func(run int) runResult {
			return f.measure(warmPuts+run**flagPuts, *flagPuts, write, nil)
		})
		cancel()
		for _, c := range wcl {
			c.Close()
		}
	}

	if name := fmt.Sprintf("etcd.put.prefixwatch%d", *flagWatchers); wanted(tname(name)) {
		etcdPrefixWatch(ctx, name, c0, *flagWatchers) // prefix.go
	}
	for _, n := range []int{1, *flagWatchers} {
		if name := fmt.Sprintf("etcd.watch.events%d", n); wanted(tname(name)) {
			etcdWatchEvents(ctx, name, c0, n) // watch.go
		}
	}

	// (h) local cache kept current by an etcd watch; reads are a map lookup under a mutex.
	if name := "etcd.watchcache.read"; wanted(tname(name)) {
		var mu sync.Mutex
		cache := map[string][]byte{}
		gr, err := c0.Get(ctx, key)
		must(err)
		for _, kv := range gr.Kvs {
			cache[string(kv.Key)] = kv.Value
		}
		wctx, cancel := context.WithCancel(ctx)
		updated := make(chan struct{}, 1)
		wch := c0.Watch(wctx, key, clientv3.WithRev(gr.Header.Revision+1))
		go func() {
			for resp := range wch {
				mu.Lock()
				for _, ev := range resp.Events {
					if ev.Type == clientv3.EventTypeDelete {
						delete(cache, string(ev.Kv.Key))
					} else {
						cache[string(ev.Kv.Key)] = ev.Kv.Value
					}
				}
				mu.Unlock()
				select {
				case updated <- struct{}{}:
				default:
				}
			}
		}()
		// sanity: a put reaches the cache.
		_, err = c0.Put(ctx, key, string(value(7)))
		must(err)
		select {
		case <-updated:
		case <-time.After(5 * time.Second):
			must(errors.New("watch cache not updated"))
		}
		mu.Lock()
		ok := idxOf(cache[key]) == 7
		mu.Unlock()
		if !ok {
			must(errors.New("watch cache has wrong value"))
		}
		var sink atomic.Int64
		read := func(g int) {
			mu.Lock()
			v := cache[key]
			mu.Unlock()
			if len(v) == 0 {
				sink.Add(1)
			}
		}
		tight(conc, time.Second, read)
		runTest(name, func(int) runResult { return tight(conc, dur, read) })
		cancel()
	}
	etcdCoord(ctx) // coord.go: locks and task queues
	for _, c := range cl {
		c.Close()
	}
}

// ---------------------------------------------------------------- redis

func redisClient(opt rueidis.ClientOption) rueidis.Client {
	opt.InitAddress = []string{*flagRedis}
	c, err := rueidis.NewClient(opt)
	must(err)
	return c
}

func redisTests() {
	ctx := context.Background()
	dur, conc := *flagDur, *flagConc
	cl := make([]rueidis.Client, *flagClients)
	for i := range cl {
		cl[i] = redisClient(rueidis.ClientOption{})
	}
	c0 := cl[0]
	info, err := c0.Do(ctx, c0.B().Info().Section("server").Build()).ToString()
	must(err)
	for _, l := range strings.Split(info, "\n") {
		if strings.HasPrefix(l, "redis_version") {
			fmt.Println("redis", strings.TrimSpace(l))
		}
	}
	cfg, _ := c0.Do(ctx, c0.B().ConfigGet().Parameter("appendonly").Build()).AsStrMap()
	cfg2, _ := c0.Do(ctx, c0.B().ConfigGet().Parameter("appendfsync").Build()).AsStrMap()
	cfg3, _ := c0.Do(ctx, c0.B().ConfigGet().Parameter("save").Build()).AsStrMap()
	fmt.Printf("redis appendonly=%s appendfsync=%s save=%q\n", cfg["appendonly"], cfg2["appendfsync"], cfg3["save"])

	key := "bench:key"
	val := string(value(0))
	must(c0.Do(ctx, c0.B().Set().Key(key).Value(val).Build()).Error())

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
	getCmd := c0.B().Get().Key(key).Build().Pin()
	get := func(g int) error { return cl[g%len(cl)].Do(ctx, getCmd).Error() }
	setCmds := make([]rueidis.Completed, conc)
	for g := range setCmds {
		setCmds[g] = c0.B().Set().Key(fmt.Sprintf("bench:put:%03d", g)).Value(val).Build().Pin()
	}
	set := func(g int) error { return cl[g%len(cl)].Do(ctx, setCmds[g]).Error() }

	if *flagPrewarm > 0 {
		load(conc, *flagPrewarm, func(g int) error {
			if g%2 == 0 {
				return set(g)
			}
			return get(g)
		})
	}
	simple("redis.get.seq", 1, get)
	simple(fmt.Sprintf("redis.get.c%d", conc), conc, get)
	simple("redis.set.seq", 1, set)
	simple(fmt.Sprintf("redis.set.c%d", conc), conc, set)

	// Same concurrent GET/SET without rueidis auto-pipelining: every request
	// takes a dedicated connection from the client's pool (64 connections in
	// all), i.e. one request in flight per connection.
	if wanted(tname(fmt.Sprintf("redis.get.c%d.noautopipe", conc))) || wanted(tname(fmt.Sprintf("redis.set.c%d.noautopipe", conc))) {
		np := make([]rueidis.Client, len(cl))
		for i := range np {
			np[i] = redisClient(rueidis.ClientOption{DisableAutoPipelining: true, DisableCache: true})
		}
		simple(fmt.Sprintf("redis.get.c%d.noautopipe", conc), conc, func(g int) error { return np[g%len(np)].Do(ctx, getCmd).Error() })
		simple(fmt.Sprintf("redis.set.c%d.noautopipe", conc), conc, func(g int) error { return np[g%len(np)].Do(ctx, setCmds[g]).Error() })
		for _, c := range np {
			c.Close()
		}
	}

	// (c) client-side cached GET, cache hit.
	if name := "redis.docache.hit"; wanted(tname(name)) {
		cc := c0.B().Get().Key(key).Cache().Pin()
		for _, c := range cl {
			must(c.DoCache(ctx, cc, time.Hour).Error())
		}
		var misses atomic.Int64
		read := func(g int) {
			r := cl[g%len(cl)].DoCache(ctx, cc, time.Hour)
			if !r.IsCacheHit() {
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

	// (d) invalidation fan-out through rueidis: N clients each hold the key in
	// their client-side cache; time from SET to the last OnInvalidations.
	if name := fmt.Sprintf("redis.inval.rueidis%d", *flagWatchers); wanted(tname(name)) {
		const warmPuts = 20
		ikey := "bench:watched"
		must(c0.Do(ctx, c0.B().Set().Key(ikey).Value(string(value(0))).Build()).Error())
		f := newFanout(warmPuts+*flagRuns**flagPuts, *flagWatchers)
		var cur atomic.Int64
		cur.Store(-1)
		var rc []rueidis.Client
		for w := 0; w < *flagWatchers; w++ {
			w := w
			rc = append(rc, redisClient(rueidis.ClientOption{
				PipelineMultiplex: -1, // one connection per client
				OnInvalidations: func(ms []rueidis.RedisMessage) {
					for _, m := range ms {
						if s, _ := m.ToString(); s == ikey {
							f.got(int(cur.Load()), w)
						}
					}
				},
			}))
		}
		cc := c0.B().Get().Key(ikey).Cache().Pin()
		var hits atomic.Int64
		recache := func(int) error {
			var wg sync.WaitGroup
			var ferr atomic.Value
			for _, c := range rc {
				wg.Add(1)
				go func(c rueidis.Client) {
					defer wg.Done()
					r := c.DoCache(ctx, cc, time.Hour)
					if err := r.Error(); err != nil {
						ferr.CompareAndSwap(nil, err)
					}
					if r.IsCacheHit() {
						hits.Add(1)
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
		hits.Store(0)
		writer := redisClient(rueidis.ClientOption{DisableCache: true})
		write := func(i int) error {
			cur.Store(int64(i))
			return writer.Do(ctx, writer.B().Set().Key(ikey).Value(string(value(i))).Build()).Error()
		}
		f.measure(0, warmPuts, write, recache)
		hits.Store(0)
		runTest(name, func(run int) runResult {
			r := f.measure(warmPuts+run**flagPuts, *flagPuts, write, recache)
			return append(r, metric{"unexpectedHits", float64(hits.Swap(0))})
		})
		for _, c := range rc {
			c.Close()
		}
		writer.Close()
	}

	// (d') same with raw RESP3 connections (CLIENT TRACKING ON, default mode):
	// time from SET to the last connection reading the invalidate push.
	if name := fmt.Sprintf("redis.inval.raw%d", *flagWatchers); wanted(tname(name)) {
		const warmPuts = 20
		ikey := "bench:watched.raw"
		must(c0.Do(ctx, c0.B().Set().Key(ikey).Value(string(value(0))).Build()).Error())
		f := newFanout(warmPuts+*flagRuns**flagPuts, *flagWatchers)
		var cur atomic.Int64
		cur.Store(-1)
		var conns []*rawConn
		for w := 0; w < *flagWatchers; w++ {
			w := w
			rcn, err := dialRaw(*flagRedis, func(keys []string) {
				for _, k := range keys {
					if k == ikey {
						f.got(int(cur.Load()), w)
					}
				}
			})
			must(err)
			must(rcn.cmd("CLIENT", "TRACKING", "ON"))
			conns = append(conns, rcn)
		}
		recache := func(int) error {
			var wg sync.WaitGroup
			var ferr atomic.Value
			for _, c := range conns {
				wg.Add(1)
				go func(c *rawConn) {
					defer wg.Done()
					if err := c.cmd("GET", ikey); err != nil {
						ferr.CompareAndSwap(nil, err)
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
		writer, err := dialRaw(*flagRedis, nil)
		must(err)
		write := func(i int) error {
			cur.Store(int64(i))
			return writer.cmd("SET", ikey, string(value(i)))
		}
		f.measure(0, warmPuts, write, recache)
		runTest(name, func(run int) runResult {
			return f.measure(warmPuts+run**flagPuts, *flagPuts, write, recache)
		})
		for _, c := range conns {
			c.close()
		}
		writer.close()
	}
	for _, c := range cl {
		c.Close()
	}
}

// ---------------------------------------------------------------- raw RESP3

type respVal struct {
	typ byte
	str string
	arr []respVal
}

type rawConn struct {
	c       net.Conn
	w       *bufio.Writer
	replies chan respVal
	onInval func([]string)
	mu      sync.Mutex
}

func dialRaw(addr string, onInval func([]string)) (*rawConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	rc := &rawConn{c: c, w: bufio.NewWriter(c), replies: make(chan respVal, 16), onInval: onInval}
	go rc.readLoop()
	if err := rc.cmd("HELLO", "3"); err != nil {
		return nil, err
	}
	return rc, nil
}

func (rc *rawConn) close() { rc.c.Close() }

// cmd sends a command and waits for its (non-push) reply.
func (rc *rawConn) cmd(args ...string) error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	fmt.Fprintf(rc.w, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(rc.w, "$%d\r\n%s\r\n", len(a), a)
	}
	if err := rc.w.Flush(); err != nil {
		return err
	}
	v, ok := <-rc.replies
	if !ok {
		return errors.New("connection closed")
	}
	if v.typ == '-' || v.typ == '!' {
		return errors.New(v.str)
	}
	return nil
}

func (rc *rawConn) readLoop() {
	r := bufio.NewReader(rc.c)
	defer close(rc.replies)
	for {
		v, err := readResp(r)
		if err != nil {
			return
		}
		if v.typ == '>' {
			if len(v.arr) >= 2 && v.arr[0].str == "invalidate" && rc.onInval != nil {
				var keys []string
				for _, k := range v.arr[1].arr {
					keys = append(keys, k.str)
				}
				rc.onInval(keys)
			}
			continue
		}
		rc.replies <- v
	}
}

func readResp(r *bufio.Reader) (respVal, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return respVal{}, err
	}
	if len(line) < 3 {
		return respVal{}, fmt.Errorf("short line %q", line)
	}
	t, body := line[0], line[1:len(line)-2]
	switch t {
	case '+', '-', ':', ',', '(', '#', '_':
		return respVal{typ: t, str: body}, nil
	case '$', '!', '=':
		n, _ := strconv.Atoi(body)
		if n < 0 {
			return respVal{typ: '_'}, nil
		}
		buf := make([]byte, n+2)
		if _, err := ioReadFull(r, buf); err != nil {
			return respVal{}, err
		}
		return respVal{typ: t, str: string(buf[:n])}, nil
	case '*', '>', '~', '%', '|':
		n, _ := strconv.Atoi(body)
		if t == '%' || t == '|' {
			n *= 2
		}
		v := respVal{typ: t}
		for i := 0; i < n; i++ {
			e, err := readResp(r)
			if err != nil {
				return respVal{}, err
			}
			v.arr = append(v.arr, e)
		}
		if t == '|' { // attribute: skip, the real value follows
			return readResp(r)
		}
		return v, nil
	}
	return respVal{}, fmt.Errorf("unknown RESP type %q", t)
}

func ioReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// ---------------------------------------------------------------- fsync

func fsyncTest() {
	path := filepath.Join(*flagFsyncDir, "fsync.probe")
	defer os.Remove(path)
	for _, sz := range []int{100, 4096} {
		buf := make([]byte, sz)
		for i := range buf {
			buf[i] = 'x'
		}
		name := fmt.Sprintf("fs.append%d+fdatasync", sz)
		runTest(name, func(int) runResult {
			f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY|os.O_APPEND, 0o644)
			must(err)
			defer f.Close()
			return load(1, *flagDur, func(int) error {
				if _, err := f.Write(buf); err != nil {
					return err
				}
				return syscall.Fdatasync(int(f.Fd()))
			})
		})
	}
}

func main() {
	flag.Parse()
	fmt.Printf("bench mode=%s dur=%v runs=%d conc=%d clients=%d watchers=%d puts=%d valsize=%d pid=%d pids=%q label=%q\n",
		*flagMode, *flagDur, *flagRuns, *flagConc, *flagClients, *flagWatchers, *flagPuts, *flagVal, *flagPid, *flagPids, *flagLabel)
	switch *flagMode {
	case "etcd":
		etcdTests()
	case "redis":
		redisTests()
	case "leased":
		leasedTests()
	case "fsync":
		fsyncTest()
	case "floor":
		floorTests()
	case "quicfloor":
		quicFloorTests()
	case "quicfloor-server":
		quicFloorServer()
	default:
		must(fmt.Errorf("unknown mode %q", *flagMode))
	}
}
