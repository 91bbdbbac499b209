//go:build linux

package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/proccluster"
)

// TestWatchAcrossFailovers: on a cluster of three real processes whose
// leader is killed (and restarted) twice while a writer writes, a watch from revision 1
// delivers every acknowledged write exactly once, in revision order, and
// nothing that was never written; writes whose outcome the writer could
// not learn appear at most once. It resumes on each new leader from the
// revision after the last it delivered.
func TestWatchAcrossFailovers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three leased processes")
	}
	cl := proccluster.Start(t, proccluster.Config{Bins: linBinaries(t), Direct: true, Flags: []string{"--lease-term", "1s"}})
	cl.Leader()
	cfg := cl.ClientConfig()
	cfg.MaxReconnectDelay = 200 * time.Millisecond
	var reconnects atomic.Int64 // the watcher's
	dialC := func(count bool) *client.Client {
		cfg := cfg
		if count {
			cfg.OnEvent = func(e client.Event) {
				if e.Kind == client.EventReconnected {
					reconnects.Add(1)
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), proccluster.LeaderTimeout)
		defer cancel()
		c, err := client.Dial(ctx, cl.Endpoints(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	watcher, writer := dialC(true), dialC(false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := watcher.Watch(ctx, "w/", client.WithPrefix(), client.FromRevision(1))

	var mu sync.Mutex
	acked := make(map[string]uint64) // value → revision
	tried := make(map[string]bool)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			v := fmt.Sprint(i)
			mu.Lock()
			tried[v] = true
			mu.Unlock()
			wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
			rev, err := writer.Put(wctx, fmt.Sprintf("w/%d", i%7), []byte(v))
			wcancel()
			if err == nil {
				mu.Lock()
				acked[v] = rev
				mu.Unlock()
			}
		}
	}()
	for range 2 {
		time.Sleep(time.Second)
		old := cl.Leader().Name
		cl.Kill(old)
		cl.Leader()
		cl.Restart(old)
	}
	time.Sleep(time.Second)
	close(stop)
	<-done
	mu.Lock()
	var last uint64
	for _, rev := range acked {
		last = max(last, rev)
	}
	mu.Unlock()
	if len(acked) < 10 {
		t.Fatalf("only %d writes acknowledged", len(acked))
	}
	seen := make(map[string]uint64)
	var prev uint64
	deadline := time.After(30 * time.Second)
	for prev < last {
		var r client.WatchResponse
		select {
		case r = <-w.C:
		case <-deadline:
			t.Fatalf("the watch stopped at revision %d, before the last acknowledged write's %d", prev, last)
		}
		if r.Err != nil {
			t.Fatalf("the watch ended: %v", r.Err)
		}
		for _, e := range r.Events {
			v := string(e.Value)
			switch {
			case e.Revision <= prev:
				t.Fatalf("event at %d after %d: out of order or twice", e.Revision, prev)
			case !tried[v]:
				t.Fatalf("event of %q at %d: a value never written", v, e.Revision)
			case seen[v] != 0:
				t.Fatalf("the write of %q delivered twice, at %d and %d", v, seen[v], e.Revision)
			}
			seen[v], prev = e.Revision, e.Revision
		}
		prev = max(prev, r.Revision)
	}
	for v, rev := range acked {
		if seen[v] != rev {
			t.Errorf("acknowledged write of %q at %d: delivered at %d", v, rev, seen[v])
		}
	}
	t.Logf("%d writes acknowledged, %d tried, %d events delivered, up to revision %d; %d reconnections", len(acked), len(tried), len(seen), last, reconnects.Load())
	if reconnects.Load() < 2 {
		t.Errorf("the watcher reconnected %d times, want at each of the two failovers", reconnects.Load())
	}
	cancel()
	for r := range w.C {
		if r.Err != nil && !errors.Is(r.Err, context.Canceled) {
			t.Errorf("the watch ended with %v", r.Err)
		}
	}
}
