// Command load drives a mixed load against a leased server or cluster, so
// that every panel of the Grafana dashboard has something to show: clients
// that read shared keys and hold their read leases, a writer whose writes
// wait for those holders, write leases that readers recall, TTL leases kept
// alive and then revoked or left to expire, a compare-and-swap now and then
// that loses, and a client that reads more keys than a session may hold.
//
// render.sh runs two of them: one with every role, and one with only
// holders, which it stops (SIGSTOP) for a while so that invalidations to
// it run out unacknowledged. It is a tool for the dashboard's screenshot,
// not a benchmark: see leasebench for measurements.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leased/leased/client"
)

// config is the command line.
type config struct {
	endpoints string
	cacert    string
	duration  time.Duration
	readers   int
	keys      int
	sweepKeys int
	holders   bool
}

// counts tallies what the load did, for its periodic log line.
type counts struct {
	reads, writes, writeLeases, grants, revokes, orphans, errs atomic.Int64
}

func main() {
	var cfg config
	flag.StringVar(&cfg.endpoints, "endpoints", "127.0.0.1:7400", "the server, or the nodes of a cluster separated by commas")
	flag.StringVar(&cfg.cacert, "cacert", "", "CA certificate (PEM) of the server")
	flag.DurationVar(&cfg.duration, "duration", 10*time.Minute, "how long to run")
	flag.IntVar(&cfg.readers, "readers", 6, "reading clients, each holding read leases on the shared keys")
	flag.IntVar(&cfg.keys, "keys", 40, "shared keys that readers read and the writer writes")
	flag.IntVar(&cfg.sweepKeys, "sweep-keys", 300, "keys one client reads in turn, more than --max-leases-per-session lets it hold (0: no such client)")
	flag.BoolVar(&cfg.holders, "holders-only", false, "run only the readers: a process to stop and continue")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	if err := run(ctx, cfg); err != nil {
		log.Fatal(err)
	}
}

// run starts every role's goroutines and waits for them and ctx's end.
func run(ctx context.Context, cfg config) error {
	var n counts
	var wg sync.WaitGroup
	start := func(name string, f func(context.Context, *client.Client, *counts)) error {
		dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
		defer dcancel()
		c, err := client.Dial(dctx, cfg.endpoints, client.Config{CAFile: cfg.cacert, Name: name})
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		wg.Go(func() {
			defer c.Close()
			f(ctx, c, &n)
		})
		return nil
	}
	for i := range cfg.readers {
		if err := start(fmt.Sprintf("reader-%d", i), func(ctx context.Context, c *client.Client, n *counts) {
			every(ctx, 50*time.Millisecond, func() { read(ctx, c, n, sharedKey(rand.IntN(cfg.keys))) })
		}); err != nil {
			return err
		}
	}
	if !cfg.holders {
		roles := []struct {
			name string
			f    func(context.Context, *client.Client, *counts)
		}{
			{"writer", func(ctx context.Context, c *client.Client, n *counts) { writer(ctx, c, n, cfg.keys) }},
			{"write-leaser", func(ctx context.Context, c *client.Client, n *counts) { writeLeaser(ctx, c, n, cfg.keys) }},
			{"ttl", ttlLeases},
		}
		if cfg.sweepKeys > 0 {
			roles = append(roles, struct {
				name string
				f    func(context.Context, *client.Client, *counts)
			}{"sweeper", func(ctx context.Context, c *client.Client, n *counts) {
				i := 0
				every(ctx, 20*time.Millisecond, func() {
					read(ctx, c, n, fmt.Sprintf("dash/sweep/%03d", i%cfg.sweepKeys))
					i++
				})
			}})
		}
		for _, r := range roles {
			if err := start(r.name, r.f); err != nil {
				return err
			}
		}
	}
	wg.Go(func() {
		every(ctx, 30*time.Second, func() {
			log.Printf("reads %d, writes %d, write leases %d, TTL grants %d (revoked %d, left to expire %d), errors %d",
				n.reads.Load(), n.writes.Load(), n.writeLeases.Load(), n.grants.Load(), n.revokes.Load(), n.orphans.Load(), n.errs.Load())
		})
	})
	wg.Wait()
	return nil
}

// sharedKey names the i-th key that readers, the writer and the write
// leaser share.
func sharedKey(i int) string { return fmt.Sprintf("dash/shared/%02d", i) }

// every calls f every d, with ±25% jitter, until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	for {
		t := time.NewTimer(d*3/4 + rand.N(d/2))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		f()
	}
}

// opContext bounds one operation: long enough for a write that waits a
// whole lease term (10 s by default) for a holder, twice, or for a new
// leader's horizon after a failover.
func opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 30*time.Second)
}

// failed counts err, if it is one that the load did not cause on purpose
// and that is not the end of the run, and reports whether err is non-nil.
func failed(ctx context.Context, n *counts, what string, err error) bool {
	if err == nil {
		return false
	}
	if ctx.Err() == nil {
		n.errs.Add(1)
		if n.errs.Load()%100 == 1 {
			log.Printf("%s: %v", what, err)
		}
	}
	return true
}

// read reads key, from the cache while its lease lasts.
func read(ctx context.Context, c *client.Client, n *counts, key string) {
	octx, cancel := opContext(ctx)
	defer cancel()
	_, err := c.Get(octx, key)
	if errors.Is(err, client.ErrResourceExhausted) {
		return // the sweeper past --max-leases-per-session: on purpose
	}
	if !failed(ctx, n, "get "+key, err) {
		n.reads.Add(1)
	}
}

// writer writes the shared keys, five a second, with up to eight writes
// in flight: each write waits for the readers holding the key to drop
// their leases, or, while a holder is stopped, for its lease to run out,
// and the writes after it go on meanwhile. Every tenth write is a
// compare-and-swap with a version that is out of date, which loses.
func writer(ctx context.Context, c *client.Client, n *counts, keys int) {
	var wg sync.WaitGroup
	defer wg.Wait()
	inflight := make(chan struct{}, 8)
	i := 0
	every(ctx, 200*time.Millisecond, func() {
		select {
		case inflight <- struct{}{}:
		default:
			return // eight writes wait already
		}
		key := sharedKey(rand.IntN(keys))
		value := fmt.Appendf(nil, "value %d at %s", i, time.Now().Format(time.RFC3339Nano))
		cas := i%10 == 9
		i++
		wg.Go(func() {
			defer func() { <-inflight }()
			octx, cancel := opContext(ctx)
			defer cancel()
			if cas {
				_, err := c.CompareAndSwap(octx, key, 1, value)
				if !errors.Is(err, client.ErrVersionMismatch) {
					failed(ctx, n, "cas "+key, err)
				}
				return
			}
			if _, err := c.Put(octx, key, value); !failed(ctx, n, "put "+key, err) {
				n.writes.Add(1)
			}
		})
	})
}

// writeLeaser takes the write lease on a shared key every couple of
// seconds, writes through it and holds it a moment: readers of the key
// recall it.
func writeLeaser(ctx context.Context, c *client.Client, n *counts, keys int) {
	every(ctx, 2*time.Second, func() {
		octx, cancel := opContext(ctx)
		defer cancel()
		key := sharedKey(rand.IntN(keys))
		wl, err := c.AcquireWriteLease(octx, key)
		if failed(ctx, n, "write lease "+key, err) {
			return
		}
		n.writeLeases.Add(1)
		if _, err := wl.Put(octx, []byte("under a write lease")); !errors.Is(err, client.ErrFenced) {
			failed(ctx, n, "put under write lease "+key, err)
		}
		select {
		case <-wl.Done(): // recalled by a reader
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
		}
		if err := wl.Release(octx); !errors.Is(err, client.ErrFenced) {
			failed(ctx, n, "release "+key, err)
		}
	})
}

// ttlLeases grants a TTL lease of a few seconds every few seconds,
// attaches a key to it and keeps it alive for a while; then it revokes
// half of them and lets the others expire.
func ttlLeases(ctx context.Context, c *client.Client, n *counts) {
	var wg sync.WaitGroup
	defer wg.Wait()
	i := 0
	every(ctx, 3*time.Second, func() {
		octx, cancel := opContext(ctx)
		defer cancel()
		g, err := c.Grant(octx, 6*time.Second)
		if failed(ctx, n, "lease grant", err) {
			return
		}
		n.grants.Add(1)
		key := fmt.Sprintf("dash/ttl/%04d", i)
		revoke := i%2 == 0
		i++
		if _, err := c.Put(octx, key, []byte("alive"), client.WithLease(g.ID)); failed(ctx, n, "put --lease "+key, err) {
			return
		}
		wg.Go(func() {
			kctx, kcancel := context.WithTimeout(ctx, 5*time.Second+rand.N(25*time.Second))
			defer kcancel()
			ch, err := c.KeepAlive(kctx, g.ID)
			if failed(ctx, n, "keep-alive", err) {
				return
			}
			for range ch {
			}
			if ctx.Err() != nil {
				return
			}
			if !revoke {
				n.orphans.Add(1) // no more keep-alives: it expires
				return
			}
			rctx, rcancel := opContext(ctx)
			defer rcancel()
			if _, err := c.Revoke(rctx, g.ID); !failed(ctx, n, "lease revoke", err) {
				n.revokes.Add(1)
			}
		})
	})
}
