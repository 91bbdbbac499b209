//go:build linux

package client_test

// The watch checker of the cluster histories (DESIGN §17): beside the
// workers and readers, a client of its own watches every key from
// revision 1 (each history's cluster is new) through the history's faults.
// Once the history has ended and the cluster healed, it must have
// delivered, in revision order and once each, exactly the events that a
// fresh watch from revision 1 reads, up to the last revision; every write
// the history knows took effect is among them, at its revision, and every
// put among them is of a write that may have taken effect (its outcome OK
// or unknown, never one known to have had none). The negative controls
// (TestLinearizableClusterWatchNegative) run nodes that skip or repeat
// events (leased --unsafe-watch-fault), which the checker must find.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/lincheck"
	"github.com/leased/leased/internal/testkit/proccluster"
)

// historyWatch is the watch of a history: what it delivered, and the
// first thing it did wrong.
type historyWatch struct {
	c      *client.Client
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	events   []client.WatchEvent
	progress uint64
	err      error // the watch ended, or broke its order
}

// startHistoryWatch dials cluster c with a client of its own and watches
// every key from revision 1.
func startHistoryWatch(t *testing.T, c *proccluster.Cluster) *historyWatch {
	t.Helper()
	cfg := c.ClientConfig()
	cfg.MaxReconnectDelay = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	cl, err := client.Dial(ctx, c.Endpoints(), cfg)
	cancel()
	if err != nil {
		t.Fatalf("dial the watcher: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	wctx, wcancel := context.WithCancel(context.Background())
	hw := &historyWatch{c: cl, cancel: wcancel, done: make(chan struct{})}
	w := cl.Watch(wctx, "", client.WithPrefix(), client.FromRevision(1))
	go func() {
		defer close(hw.done)
		for r := range w.C {
			hw.mu.Lock()
			if hw.err == nil {
				hw.err = r.Err
				hw.err = cmpErr(hw.err, orderError(hw.events, r))
				hw.events = append(hw.events, r.Events...)
				hw.progress = max(hw.progress, r.Revision)
			}
			hw.mu.Unlock()
		}
	}()
	return hw
}

// cmpErr returns a if it is not nil, else b.
func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// orderError says how r breaks the order of a watch that delivered before
// so far: an event at or below the last revision delivered, or a key twice
// in a revision, or an event past r's progress.
func orderError(before []client.WatchEvent, r client.WatchResponse) error {
	var last client.WatchEvent
	if len(before) > 0 {
		last = before[len(before)-1]
	}
	for _, e := range r.Events {
		switch {
		case last.Revision > 0 && e.Revision < last.Revision, e.Revision == last.Revision && e.Key <= last.Key:
			return fmt.Errorf("event %s %q at %d after %q at %d: out of order, or twice", e.Type, e.Key, e.Revision, last.Key, last.Revision)
		case e.Revision > r.Revision:
			return fmt.Errorf("event at %d in a response whose progress is %d", e.Revision, r.Revision)
		}
		last = e
	}
	return nil
}

// watchSummary is what the checker found, for the history's log line.
type watchSummary struct {
	events, writesOK int
	revision         uint64
}

// check waits for the watch to reach the cluster's last revision, reads
// the history afresh from revision 1 up to it, and compares (see the
// file's comment). It stops the watch.
func (hw *historyWatch) check(t *testing.T, c *proccluster.Cluster, rec *lincheck.Recorder) (watchSummary, error) {
	t.Helper()
	defer func() { hw.cancel(); <-hw.done }()
	fresh := startHistoryWatch(t, c)
	defer func() { fresh.cancel(); <-fresh.done }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	last, err := lastRevision(ctx, fresh.c)
	if err != nil {
		return watchSummary{}, fmt.Errorf("the last revision: %w", err)
	}
	for _, w := range []*historyWatch{hw, fresh} {
		for {
			w.mu.Lock()
			p, werr := w.progress, w.err
			w.mu.Unlock()
			if werr != nil {
				return watchSummary{}, fmt.Errorf("watch: %w", werr)
			}
			if p >= last {
				break
			}
			if ctx.Err() != nil {
				return watchSummary{}, fmt.Errorf("a watch stopped at revision %d, before the last, %d", p, last)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	got, want := hw.upTo(last), fresh.upTo(last)
	for i := range max(len(got), len(want)) {
		switch {
		case i >= len(got):
			return watchSummary{}, fmt.Errorf("the watch lacks event %d of %d: %s %q at %d", i, len(want), want[i].Type, want[i].Key, want[i].Revision)
		case i >= len(want):
			return watchSummary{}, fmt.Errorf("the watch has %d events, the history %d: %s %q at %d is extra", len(got), len(want), got[i].Type, got[i].Key, got[i].Revision)
		case !sameEvent(got[i], want[i]):
			return watchSummary{}, fmt.Errorf("event %d: the watch has %s %q=%q at %d, the history %s %q=%q at %d",
				i, got[i].Type, got[i].Key, got[i].Value, got[i].Revision, want[i].Type, want[i].Key, want[i].Value, want[i].Revision)
		}
	}
	writes := rec.Writes()
	put := make(map[lincheck.KeyValue]client.WatchEvent)
	for _, e := range got {
		if e.Type != client.WatchPut {
			continue
		}
		p := lincheck.KeyValue{Key: e.Key, Value: string(e.Value)}
		w, ok := writes[p]
		switch {
		case !ok:
			continue // a put no recorded operation made (a filler, a TTL holder's)
		case w.Outcome != lincheck.OK && w.Outcome != lincheck.Unknown:
			return watchSummary{}, fmt.Errorf("a put of %q=%q at %d, whose write was %v", p.Key, p.Value, e.Revision, w.Outcome)
		case w.Outcome == lincheck.OK && w.Revision != e.Revision:
			return watchSummary{}, fmt.Errorf("a put of %q=%q at %d, whose write took effect at %d", p.Key, p.Value, e.Revision, w.Revision)
		}
		put[p] = e
	}
	ok := 0
	for p, w := range writes {
		if w.Outcome != lincheck.OK || w.Revision > last {
			continue
		}
		ok++
		if _, found := put[p]; !found {
			return watchSummary{}, fmt.Errorf("the write of %q=%q at %d took effect, and the watch did not deliver it", p.Key, p.Value, w.Revision)
		}
	}
	return watchSummary{events: len(got), writesOK: ok, revision: last}, nil
}

// upTo returns the events delivered up to revision last.
func (hw *historyWatch) upTo(last uint64) []client.WatchEvent {
	hw.mu.Lock()
	defer hw.mu.Unlock()
	var out []client.WatchEvent
	for _, e := range hw.events {
		if e.Revision <= last {
			out = append(out, e)
		}
	}
	return out
}

// lastRevision returns the cluster's revision, read on the leader.
func lastRevision(ctx context.Context, c *client.Client) (uint64, error) {
	for {
		r, err := c.List(ctx, "\x00", client.Limit(1))
		if err == nil {
			return r.Revision, nil
		}
		if !errors.Is(err, client.ErrUnavailable) || ctx.Err() != nil {
			return 0, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func sameEvent(a, b client.WatchEvent) bool {
	return a.Type == b.Type && a.Key == b.Key && a.Revision == b.Revision && string(a.Value) == string(b.Value) && a.Lease == b.Lease
}

// TestLinearizableClusterWatchNegative runs histories of scenario kill on
// nodes whose watches skip or repeat events (leased --unsafe-watch-fault):
// the watch checker must find it, in one of at most negativeAttempts
// histories.
func TestLinearizableClusterWatchNegative(t *testing.T) {
	if testing.Short() {
		t.Skip("real processes and real time")
	}
	for _, fault := range []string{"skip", "repeat"} {
		t.Run(fault, func(t *testing.T) {
			cs := clusterScenarios()[0]
			cs.name = "watch-" + fault
			cs.flags = append(cs.flags, "--unsafe-watch-fault", fault)
			seed := firstSeed(t)
			for i := range negativeAttempts {
				res := runClusterHistory(t, cs, seed+uint64(i), t.TempDir())
				if res.err != nil {
					t.Fatalf("seed %d: %v", seed+uint64(i), res.err)
				}
				if res.watch != nil {
					t.Logf("the watch checker found it in history %d: %v", i+1, res.watch)
					return
				}
				t.Logf("history %d: the watch checker found nothing; trying another", i+1)
			}
			t.Fatalf("negative control %s: %d histories without a broken watch", cs.name, negativeAttempts)
		})
	}
}
