// Creates under a prefix that others follow (issue 27), in etcd and leased
// mode: a write to N watchers/holders, as the put.watchers and
// put.holders fan-out rows, but of a new key under a prefix that each
// receiver follows as a whole.
//
//	etcd.put.prefixwatch<N>          N watchers on /pfx/ (WithPrefix); a Put of a new key /pfx/<n>
//	leased.create.prefixholders<N>   N clients hold a leased listing of /pfx<n>/; a Put of /pfx<n>/k
//	leased.put.prefixwatch<N>        N watchers on /wpfx/ (client.Watch WithPrefix); a Put of a new key /wpfx/<n>
//
// N is -watchers (100); -puts writes per run.

package main

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leased/leased/client"
)

// ---------------------------------------------------------------- etcd

// etcdPrefixWatch: n watchers, each on its own client connection, watch
// the prefix /pfx/; write i Puts the new key /pfx/<base+i> (base: the
// store's revision at setup, so that every key is new on a server that
// has run the test before). etcd acknowledges the Put without waiting for
// the watchers: last_* is the time to the n-th watcher's event, and
// lastAfterAck% the writes whose last event came after the ack.
// notCreates counts events of a key that existed already (must be 0).
func etcdPrefixWatch(ctx context.Context, name string, c0 *clientv3.Client, n int) {
	const warmPuts = 20
	const prefix = "/pfx/"
	gr, err := c0.Get(ctx, prefix+"none")
	must(err)
	base := gr.Header.Revision
	f := newFanout(warmPuts+*flagRuns**flagPuts, n)
	var notCreates atomic.Int64
	wctx, cancel := context.WithCancel(ctx)
	var wcl []*clientv3.Client
	var ready sync.WaitGroup
	for w := 0; w < n; w++ {
		c := etcdClient()
		wcl = append(wcl, c)
		ready.Add(1)
		wch := c.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
		go func(w int) {
			created := false
			for resp := range wch {
				if resp.Created && !created {
					created = true
					ready.Done()
				}
				for _, ev := range resp.Events {
					if !ev.IsCreate() {
						notCreates.Add(1)
					}
					f.got(idxOf(ev.Kv.Value), w)
				}
			}
		}(w)
	}
	ready.Wait()
	write := func(i int) error {
		_, err := c0.Put(ctx, fmt.Sprintf("%s%d", prefix, base+int64(i)), string(value(i)))
		return err
	}
	f.measure(0, warmPuts, write, nil)
	notCreates.Store(0)
	runTest(name, func(run int) runResult {
		r := f.measure(warmPuts+run**flagPuts, *flagPuts, write, nil)
		return append(r, metric{"notCreates", float64(notCreates.Swap(0))})
	})
	cancel()
	for _, c := range wcl {
		c.Close()
	}
}

// ---------------------------------------------------------------- leased

// leasedPrefixHolders: n client instances each hold the listing of a
// prefix under a prefix lease (client.List with client.Leased()); a
// separate writer Puts a new key under it. leased acknowledges the Put
// only after every holder has dropped its listing and acknowledged the
// invalidation of the prefix (or its lease ran out), so ack_* is the time
// to the last holder; last_*/first_* are when the invalidation reached
// each holder's socket, as in leasedHolders (-holderwrap).
//
// A prefix written twice within a term gets no lease for a term (the
// server's hot rule), so write i goes to a prefix of its own,
// /pfx<base+i>/ (base: the server's revision at setup, so that no prefix
// was written before on this server), empty until write i creates
// /pfx<base+i>/k in it. Before write i every holder lists that prefix:
// the first List must go to the server (Cached false), the second come
// from the lease (Cached true; notHeld counts those that did not). After
// the ack every holder lists the written prefix again: the answer must
// not come from memory (cachedAfterPut) and must hold the new key at the
// version the Put returned (staleReads). That listing is leased again,
// and its lease runs out by itself a term later.
func leasedPrefixHolders(ctx context.Context, name string, n int) {
	const warmPuts = 20
	writer, err := leasedDial(ctx, client.Config{Name: "writer"})
	must(err)
	st, err := writer.ServerStats(ctx)
	must(err)
	base := st.Revision
	prefixOf := func(i int) string { return fmt.Sprintf("/pfx%d/", base+uint64(i)) }
	f := newFanout(warmPuts+*flagRuns**flagPuts, n)
	var cur atomic.Int64
	cur.Store(-1)
	holders := make([]*client.Client, n)
	socks := make([]*watchConn, n)
	for w := 0; w < n; w++ {
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
	var want atomic.Uint64 // the version of the last key created
	var stale, notHeld, cachedAfter atomic.Int64
	// eachHolder runs fn on every holder at once and returns the first error.
	eachHolder := func(fn func(c *client.Client) error) error {
		var wg sync.WaitGroup
		var ferr atomic.Value
		for _, c := range holders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := fn(c); err != nil {
					ferr.CompareAndSwap(nil, err)
				}
			}()
		}
		wg.Wait()
		if e := ferr.Load(); e != nil {
			return e.(error)
		}
		return nil
	}
	// hold makes every holder take the lease on write i's prefix, still
	// empty.
	hold := func(i int) error {
		p := prefixOf(i)
		return eachHolder(func(c *client.Client) error {
			r, err := c.List(ctx, p, client.Leased())
			switch {
			case err != nil:
				return err
			case r.Cached || len(r.KVs) != 0:
				return fmt.Errorf("first list of %s: cached %v, %d keys; want it from the server, empty", p, r.Cached, len(r.KVs))
			}
			if r, err = c.List(ctx, p, client.Leased()); err != nil {
				return err
			}
			if !r.Cached {
				notHeld.Add(1) // no lease: write i would not find this holder
			}
			return nil
		})
	}
	// between re-lists write i's prefix on every holder after the ack, and
	// takes the leases on the next write's.
	between := func(i int) error {
		p, key := prefixOf(i), prefixOf(i)+"k"
		err := eachHolder(func(c *client.Client) error {
			r, err := c.List(ctx, p, client.Leased())
			if err != nil {
				return err
			}
			if r.Cached {
				cachedAfter.Add(1)
			}
			if len(r.KVs) != 1 || r.KVs[0].Key != key || r.KVs[0].Version != want.Load() {
				stale.Add(1)
			}
			return nil
		})
		if err != nil {
			return err
		}
		return hold(i + 1)
	}
	must(hold(0))
	if notHeld.Load() > 0 {
		must(fmt.Errorf("%d of %d holders got no lease on the listing of %s: does leased give it a term of 0 (--term)?", notHeld.Load(), n, prefixOf(0)))
	}
	var mu sync.Mutex
	var holderCounts []int
	var waited []time.Duration
	write := func(i int) error {
		cur.Store(int64(i))
		var res client.WriteResult
		v, err := writer.Put(ctx, prefixOf(i)+"k", value(i), client.Result(&res))
		if err != nil {
			return err
		}
		want.Store(v)
		if !*flagHolderWrap {
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
	f.measure(0, warmPuts, write, between)
	reset := func() {
		mu.Lock()
		holderCounts, waited = holderCounts[:0], waited[:0]
		mu.Unlock()
		stale.Store(0)
		notHeld.Store(0)
		cachedAfter.Store(0)
	}
	reset()
	runTest(name, func(run int) runResult {
		r := f.measure(warmPuts+run**flagPuts, *flagPuts, write, between)
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
			metric{"staleReads", float64(stale.Load())}, metric{"cachedAfterPut", float64(cachedAfter.Load())},
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

// leasedPrefixWatch is etcdPrefixWatch for leased's watch (issue 28): n
// client instances, each its own connection, watch the prefix /wpfx/
// (client.Watch with WithPrefix); write i Puts the new key
// /wpfx/<base+i>. As in etcd, the Put is acknowledged without waiting for
// the watchers: last_* is the time to the n-th watcher's event. A watch
// has begun once its first event, of a put made before the run, arrived.
func leasedPrefixWatch(ctx context.Context, name string, n int) {
	const warmPuts = 20
	const prefix = "/wpfx/"
	writer, err := leasedDial(ctx, client.Config{Name: "writer"})
	must(err)
	defer writer.Close()
	st, err := writer.ServerStats(ctx)
	must(err)
	base := st.Revision
	f := newFanout(warmPuts+*flagRuns**flagPuts, n)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var started sync.WaitGroup
	var watchers []*client.Client
	for w := 0; w < n; w++ {
		c, err := leasedDial(ctx, client.Config{Name: fmt.Sprintf("watcher-%d", w)})
		must(err)
		watchers = append(watchers, c)
		started.Add(1)
		wch := c.Watch(wctx, prefix, client.WithPrefix(), client.FromRevision(base+1))
		go func(w int) {
			first := true
			for resp := range wch.C {
				for _, ev := range resp.Events {
					if first {
						first = false
						started.Done()
					}
					f.got(idxOf(ev.Value), w)
				}
			}
		}(w)
	}
	write := func(i int) error {
		_, err := writer.Put(ctx, fmt.Sprintf("%s%d", prefix, base+uint64(i)), value(i))
		return err
	}
	must(write(0))
	started.Wait()
	f.measure(1, warmPuts-1, write, nil)
	runTest(name, func(run int) runResult {
		return f.measure(warmPuts+run**flagPuts, *flagPuts, write, nil)
	})
	cancel()
	for _, c := range watchers {
		c.Close()
	}
}
