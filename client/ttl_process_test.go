//go:build linux

package client_test

// TTL leases end to end, with real processes: a holder process grants a
// lease, attaches keys and keeps it alive, and is killed with SIGKILL;
// another process's client caches the keys. The keys must vanish no sooner
// than ttl + ε after the holder's last acknowledged keep-alive was sent,
// and no later than ttl + ε after it was acknowledged plus the revocation
// delay; the caching client never serves a key once its deletion is
// applied. Then the same with the leader of a cluster killed while the
// holder keeps its lease alive, and with a single server killed and
// restarted.

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/helperproc"
	"github.com/leased/leased/internal/testkit/proccluster"
	"github.com/leased/leased/internal/testkit/wait"
)

const (
	helperTTLHolder = "ttl-holder"
	helperTTL       = "LEASED_E2E_TTL"
	helperKeys      = "LEASED_E2E_KEYS"
	// helperReread, set, makes the holder read its keys after each
	// renewal, as a worker that checks its task does.
	helperReread = "LEASED_E2E_REREAD"
)

// TestHelperTTLHolder is not a test: it is the body of the TTL lease
// holder process of the tests below, which re-execute the test binary with
// only this test selected and helperEnv set. It dials the endpoints,
// grants a lease of the TTL it is given, puts its keys attached to it, and
// prints "ready lease=ID"; then it renews the lease once a third of its
// TTL, printing "renewed sent=NS acked=NS" (Unix nanoseconds) for each
// renewal acknowledged, and "failed ..." for each attempt that was not,
// until it is killed or its stdin closes.
func TestHelperTTLHolder(t *testing.T) {
	if os.Getenv(helperEnv) != helperTTLHolder {
		t.Skip("helper process for the TTL lease process tests")
	}
	err := func() error {
		ttl, err := time.ParseDuration(os.Getenv(helperTTL))
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		c, err := client.Dial(ctx, os.Getenv(helperAddr), client.Config{CAFile: os.Getenv(helperCA), Name: "ttl-holder", Logger: testkit.Discard()})
		if err != nil {
			return err
		}
		defer c.Close()
		g, err := c.Grant(ctx, ttl)
		if err != nil {
			return err
		}
		for _, k := range strings.Split(os.Getenv(helperKeys), ",") {
			if _, err := c.Put(ctx, k, []byte("up"), client.WithLease(g.ID)); err != nil {
				return err
			}
		}
		fmt.Printf("ready lease=%s\n", g.ID)
		go func() {
			io.Copy(io.Discard, os.Stdin)
			os.Exit(0) // the parent died
		}()
		for {
			time.Sleep(ttl / 3)
			sent := time.Now()
			kctx, kcancel := context.WithTimeout(context.Background(), ttl/3)
			_, err := c.KeepAliveOnce(kctx, g.ID)
			kcancel()
			if err != nil {
				fmt.Printf("failed sent=%d err=%q\n", sent.UnixNano(), err)
				continue
			}
			fmt.Printf("renewed sent=%d acked=%d\n", sent.UnixNano(), time.Now().UnixNano())
			if os.Getenv(helperReread) != "" {
				for _, k := range strings.Split(os.Getenv(helperKeys), ",") {
					rctx, rcancel := context.WithTimeout(context.Background(), ttl/3)
					c.Get(rctx, k) // cached, or a read lease taken again
					rcancel()
				}
			}
		}
	}()
	fmt.Printf("error %v\n", err)
	os.Exit(1)
}

// ttlHolder is a running holder process.
type ttlHolder struct {
	proc  *helperproc.Proc
	lease client.LeaseID
	mu    sync.Mutex
	// sent and acked are the times of the last renewal acknowledged;
	// renewals counts them, and fails the attempts that were not.
	sent, acked     time.Time
	renewals, fails int
	done            chan struct{} // closed when its stdout ends
}

// startTTLHolder starts a holder process of a lease of ttl for keys on
// the endpoints addr, and waits for it to be ready.
func startTTLHolder(t *testing.T, addr, ca string, ttl time.Duration, keys ...string) *ttlHolder {
	t.Helper()
	p := helperproc.Start(t, "TestHelperTTLHolder", helperEnv+"="+helperTTLHolder, helperAddr+"="+addr, helperCA+"="+ca,
		helperTTL+"="+ttl.String(), helperKeys+"="+strings.Join(keys, ","))
	p.Name = "holder process"
	h := &ttlHolder{proc: p, done: make(chan struct{})}
	l := p.Next(2 * testTimeout)
	id, ok := strings.CutPrefix(l, "ready lease=")
	if !ok {
		t.Fatalf("holder process: %q", l)
	}
	var err error
	if h.lease, err = client.ParseLeaseID(id); err != nil {
		t.Fatalf("holder process: %q: %v", l, err)
	}
	go func() {
		defer close(h.done)
		for l := range p.Lines() {
			switch {
			case strings.HasPrefix(l, "renewed"):
				var sent, acked int64
				if _, err := fmt.Sscanf(l, "renewed sent=%d acked=%d", &sent, &acked); err == nil {
					h.mu.Lock()
					h.sent, h.acked = time.Unix(0, sent), time.Unix(0, acked)
					h.renewals++
					h.mu.Unlock()
				}
			case strings.HasPrefix(l, "failed"):
				h.mu.Lock()
				h.fails++
				h.mu.Unlock()
			}
		}
	}()
	// Before the process's own cleanup: the reader above ends with its
	// stdout.
	t.Cleanup(func() {
		p.Cmd.Process.Kill()
		<-h.done
	})
	return h
}

// waitRenewals waits until the holder has had n more renewals
// acknowledged.
func (h *ttlHolder) waitRenewals(t *testing.T, n int, within time.Duration) {
	t.Helper()
	h.mu.Lock()
	want := h.renewals + n
	h.mu.Unlock()
	wait.For(t, within, strconv.Itoa(n)+" renewals of the holder", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.renewals >= want
	})
}

// kill kills the holder with SIGKILL and returns the times of its last
// renewal acknowledged: sent and acknowledged.
func (h *ttlHolder) kill(t *testing.T) (sent, acked time.Time) {
	t.Helper()
	if err := h.proc.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent, h.acked
}

// cacheWatch reads keys with a caching client as often as it can, and
// records, for each read, when it began and whether it found the key.
type cacheWatch struct {
	mu    sync.Mutex
	reads []watchedRead
	stop  chan struct{}
	done  chan struct{}
}

type watchedRead struct {
	key    string
	begun  time.Time
	found  bool
	cached bool
}

func watchKeys(t *testing.T, c *client.Client, keys ...string) *cacheWatch {
	w := &cacheWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			for _, k := range keys {
				select {
				case <-w.stop:
					return
				default:
				}
				begun := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				it, err := c.Get(ctx, k)
				cancel()
				if err != nil {
					continue // a failover: the reads that failed reveal nothing
				}
				w.mu.Lock()
				w.reads = append(w.reads, watchedRead{k, begun, it.Found, it.Cached})
				w.mu.Unlock()
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	t.Cleanup(w.end)
	return w
}

func (w *cacheWatch) end() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// checkExpiry checks the life of the keys of a lease whose holder was
// killed after its last renewal was sent at sent and acknowledged at
// acked: the keys exist, cached or not, until sent + ttl + ε (the server
// counts from the acknowledgement, which came later); the server applies
// their deletion by acked + ttl + ε + delay; and the watcher never reads
// one once it is gone. stats tells whether the server (or the cluster's
// leader) has applied the expiry.
func checkExpiry(t *testing.T, w *cacheWatch, stats func() bool, ttl, eps, delay time.Duration, sent, acked time.Time) {
	t.Helper()
	var gone time.Time
	wait.For(t, ttl+eps+delay+testTimeout, "the expiry to be applied", func() bool {
		if stats() {
			gone = time.Now()
			return true
		}
		return false
	})
	// The expiry was applied before gone was read.
	if earliest := sent.Add(ttl + eps); gone.Before(earliest) {
		t.Errorf("keys deleted by %v, before ttl + ε after the last acknowledged keep-alive was sent (%v)", gone.Format(time.StampMicro), earliest.Format(time.StampMicro))
	}
	if latest := acked.Add(ttl + eps + delay); gone.After(latest.Add(250 * time.Millisecond)) {
		t.Errorf("keys deleted only by %v, %v after ttl + ε + %v past the last acknowledgement", gone.Format(time.StampMicro), gone.Sub(latest), delay)
	}
	// Enough reads begun after the expiry was applied to see a stale one.
	wait.For(t, testTimeout, "reads after the expiry", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		after := 0
		for _, r := range w.reads {
			if r.begun.After(gone) {
				after++
			}
		}
		return after >= 20
	})
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	before, after := 0, 0
	for _, r := range w.reads {
		switch {
		case r.begun.Before(sent.Add(ttl)):
			before++
			if !r.found {
				t.Errorf("read of %s begun at %v, while the lease lived, found nothing", r.key, r.begun.Format(time.StampMicro))
			}
		case r.begun.After(gone):
			after++
			if r.found {
				t.Errorf("read of %s begun at %v, after the expiry was applied, found the key (cached %v)", r.key, r.begun.Format(time.StampMicro), r.cached)
			}
		}
	}
	if before == 0 || after == 0 {
		t.Errorf("%d reads while the lease lived and %d after it ended: too few to check", before, after)
	}
}

// TestE2ETTLHolderKilled: a single server; the holder is killed with
// SIGKILL, after the server itself was killed and restarted once while it
// held its lease.
func TestE2ETTLHolderKilled(t *testing.T) {
	const (
		ttl  = 2 * time.Second
		eps  = 100 * time.Millisecond
		term = time.Second
	)
	bins := linBinaries(t)
	srv := clitest.StartServer(t, bins, t.TempDir(), t.TempDir(), "--ttl-min", "1s", "--lease-term", term.String(), "--epsilon", eps.String())
	keys := []string{"svc/a", "svc/b"}
	h := startTTLHolder(t, srv.Addr, srv.CA, ttl, keys...)
	h.waitRenewals(t, 2, 2*ttl)

	// The server crashes and restarts: the lease and its keys survive,
	// and the holder renews it on the new process.
	srv.Kill(t)
	srv = srv.Restart(t)
	h.waitRenewals(t, 2, 2*ttl+testTimeout)

	cfg := srv.ClientConfig()
	cfg.Name = "reader"
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	reader, err := client.Dial(ctx, srv.Addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	tl, err := reader.TimeToLive(ctx, h.lease, true)
	if err != nil || tl.TTL <= 0 || tl.GrantedTTL != ttl || strings.Join(tl.Keys, ",") != strings.Join(keys, ",") {
		t.Fatalf("TimeToLive after the restart: %+v, %v", tl, err)
	}
	w := watchKeys(t, reader, keys...)
	h.waitRenewals(t, 1, ttl)
	sent, acked := h.kill(t)
	// A revocation waits for nobody here (the reader acknowledges at
	// once); the expiry is found by the server's timer within a few
	// milliseconds.
	checkExpiry(t, w, func() bool {
		st, err := reader.ServerStats(context.Background())
		return err == nil && st.TTLExpired > 0
	}, ttl, eps, 0, sent, acked)
	if tl, err := reader.TimeToLive(ctx, h.lease, false); err != nil || tl.TTL != -1 {
		t.Errorf("TimeToLive of the expired lease: %+v, %v; want TTL -1", tl, err)
	}
}

// TestE2ETTLLeaderKilled: a cluster of three; its leader is killed while
// the holder keeps its lease alive, which goes on with the new leader;
// then the holder is killed.
func TestE2ETTLLeaderKilled(t *testing.T) {
	const (
		ttl  = 3 * time.Second
		eps  = 100 * time.Millisecond
		term = time.Second
	)
	cl := proccluster.Start(t, proccluster.Config{Bins: linBinaries(t), Direct: true,
		Flags: []string{"--ttl-min", "1s", "--lease-term", term.String(), "--epsilon", eps.String()}})
	old := cl.Leader()
	keys := []string{"svc/a", "svc/b"}
	h := startTTLHolder(t, cl.Endpoints(), cl.CAFile, ttl, keys...)
	h.waitRenewals(t, 2, 2*ttl)

	cfg := cl.ClientConfig()
	cfg.Name = "reader"
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	reader, err := client.Dial(ctx, cl.Endpoints(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	w := watchKeys(t, reader, keys...)

	cl.Kill(old.Name)
	// The holder's renewals go on with the new leader, and the lease and
	// its keys are still there.
	h.waitRenewals(t, 2, 2*ttl+proccluster.LeaderTimeout)
	if tl, err := reader.TimeToLive(ctx, h.lease, true); err != nil || tl.TTL <= 0 || len(tl.Keys) != len(keys) {
		t.Fatalf("TimeToLive after the failover: %+v, %v", tl, err)
	}
	sent, acked := h.kill(t)
	// The new leader's writes, the revocation among them, may wait for
	// the old leader's horizon: the longest lease (term + ε) plus a
	// horizon step, counted from the takeover.
	delay := term + eps + (term+eps)/4
	checkExpiry(t, w, func() bool {
		st, err := reader.ServerStats(context.Background())
		return err == nil && st.TTLExpired > 0
	}, ttl, eps, delay, sent, acked)
}
