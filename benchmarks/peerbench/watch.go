// Watch throughput (issue 28), in etcd and leased mode: how many events
// per second a prefix's watchers receive while writers put as fast as they
// can under it.
//
//	etcd.watch.events<N>     N watchers on /tpw/ (WithPrefix), each its own client; -conc writers Put /tpw/<g>
//	leased.watch.events<N>   the same with client.Watch(WithPrefix)
//
// N is 1 and -watchers (100). A run lasts -dur: events/s is the events all
// watchers received in it, per second; perWatcher/s the same for one
// watcher; puts/s the writers' rate; lagMax the most events a watcher was
// behind the writes at the end of the run (it must catch up before the
// next run starts).

package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/leased/leased/client"
)

// watchThroughput runs the event-throughput test: start(i, got) starts
// watcher i, which calls got for each event it receives, and returns its
// closer; put(g, i) is writer g's i-th put.
func watchThroughput(name string, n int, start func(i int, got func()) func(), put func(g, i int) error) {
	counts := make([]atomic.Int64, n)
	var closers []func()
	for i := range n {
		closers = append(closers, start(i, func() { counts[i].Add(1) }))
	}
	defer func() {
		for _, c := range closers {
			c()
		}
	}()
	conc := min(*flagConc, 8)
	var seq atomic.Int64
	var puts atomic.Int64
	// Every watcher sees a first put before the runs begin.
	must(put(0, int(seq.Add(1))))
	puts.Add(1)
	waitAll := func(want int64) int64 {
		deadline := time.Now().Add(30 * time.Second)
		for {
			lag := int64(0)
			for i := range counts {
				lag = max(lag, want-counts[i].Load())
			}
			if lag <= 0 || time.Now().After(deadline) {
				return lag
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitAll(puts.Load())
	runTest(name, func(int) runResult {
		before := int64(0)
		for i := range counts {
			before += counts[i].Load()
		}
		p0 := puts.Load()
		r := load(conc, *flagDur, func(g int) error {
			err := put(g, int(seq.Add(1)))
			if err == nil {
				puts.Add(1)
			}
			return err
		})
		// The events of the run: those received by the time the run ends.
		var after int64
		for i := range counts {
			after += counts[i].Load()
		}
		el := (*flagDur).Seconds()
		lag := waitAll(puts.Load())
		return runResult{
			{"events/s", float64(after-before) / el},
			{"perWatcher/s", float64(after-before) / el / float64(n)},
			{"puts/s", float64(puts.Load()-p0) / el},
			{"lagMax", float64(lag)},
			r[1], r[2],
		}
	})
}

// etcdWatchEvents is watchThroughput for etcd.
func etcdWatchEvents(ctx context.Context, name string, c0 *clientv3.Client, n int) {
	const prefix = "/tpw/"
	watchThroughput(name, n, func(i int, got func()) func() {
		c := etcdClient()
		wctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		wch := c.Watch(wctx, prefix, clientv3.WithPrefix())
		go func() {
			defer wg.Done()
			for resp := range wch {
				for range resp.Events {
					got()
				}
			}
		}()
		return func() { cancel(); wg.Wait(); c.Close() }
	}, func(g, i int) error {
		_, err := c0.Put(ctx, fmt.Sprintf("%s%d", prefix, g), string(value(i)))
		return err
	})
}

// leasedWatchEvents is watchThroughput for leased.
func leasedWatchEvents(ctx context.Context, name string, n int) {
	const prefix = "/tpw/"
	writers := make([]*client.Client, min(*flagConc, 8))
	for g := range writers {
		c, err := leasedDial(ctx, client.Config{Name: fmt.Sprintf("writer-%d", g)})
		must(err)
		writers[g] = c
	}
	defer func() {
		for _, c := range writers {
			c.Close()
		}
	}()
	watchThroughput(name, n, func(i int, got func()) func() {
		c, err := leasedDial(ctx, client.Config{Name: fmt.Sprintf("watcher-%d", i)})
		must(err)
		wctx, cancel := context.WithCancel(ctx)
		w := c.Watch(wctx, prefix, client.WithPrefix())
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for resp := range w.C {
				for range resp.Events {
					got()
				}
			}
		}()
		return func() { cancel(); wg.Wait(); c.Close() }
	}, func(g, i int) error {
		_, err := writers[g].Put(ctx, fmt.Sprintf("%s%d", prefix, g), value(i))
		return err
	})
}
