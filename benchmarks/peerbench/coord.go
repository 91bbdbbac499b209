// Locks and task queues (issue 29 item 7), in etcd and leased mode: the
// leased client library's Mutex and Queue beside etcd's concurrency.Mutex
// and a task queue built on etcd transactions.
//
//	etcd.lock.uncontended / leased.lock.uncontended   one client, one session: Lock then Unlock of one key
//	etcd.lock.handover / leased.lock.handover         two clients: the holder's Unlock → the waiter's Lock returning; roles swap
//	etcd.queue.claims8 / leased.queue.claims8         8 workers claim and complete tasks that a producer keeps ≥ 64 waiting
//	leased.queue.takeover                             a worker dies (Session.Orphan) holding a task: → another worker's Claim of it
//
// Each timed run lasts -lockdur (2 s; at most -dur), and the takeover row
// takes one takeover per run (each > the session's TTL, 5 s).

package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/leased/leased/client"
)

var (
	flagLockDur = flag.Duration("lockdur", 2*time.Second, "duration of each timed run of the lock and queue rows (at most -dur)")
	// The handover rows wait this long after the server shows the waiter
	// in line before the holder unlocks, so that the waiter waits as a
	// waiter does that has waited a while: etcd moves a new watcher that
	// starts at a past revision (as Mutex.Lock's) to its synced set
	// only every 100 ms, and until then delivers it no event.
	flagHandoverSettle = flag.Duration("handoversettle", 150*time.Millisecond, "handover rows: wait in line this long before the holder unlocks (etcd syncs a new watcher within 100 ms)")
)

const (
	// coordTTL is the TTL of the sessions of the lock and claims rows,
	// on both sides.
	coordTTL = 10 * time.Second
	// takeoverTTL is the TTL of the dying worker's session in
	// leased.queue.takeover: the least leased allows (core.DefaultMinTTL).
	takeoverTTL = 5 * time.Second
	// queueWorkers claim in the claims rows; queueWaiting is the number
	// of tasks the producer keeps waiting (enqueued, not yet claimed).
	queueWorkers = 8
	queueWaiting = 64
)

// coordNames are the rows of this file, per peer.
func coordNames(peer string) []string {
	n := []string{peer + ".lock.uncontended", peer + ".lock.handover", fmt.Sprintf("%s.queue.claims%d", peer, queueWorkers)}
	if peer == "leased" {
		n = append(n, "leased.queue.takeover")
	}
	return n
}

// coordDur is the duration of a timed run of these rows.
func coordDur() time.Duration { return min(*flagDur, *flagLockDur) }

// coordLoad runs a load row (load: ops/s, p50us, p99us) with coordDur.
func coordLoad(name string, conc int, op func(g int) error) {
	if !wanted(tname(name)) {
		return
	}
	if *flagWarm > 0 {
		load(conc, min(*flagWarm, coordDur()), op)
	}
	runTest(name, func(int) runResult { return load(conc, coordDur(), op) })
}

// handover measures lock handovers for coordDur: the holder (side h)
// unlocks at t0 while the other side waits in lock; the time to the
// waiter's lock returning is one sample; then the roles swap. queued(w)
// returns once the server shows side w waiting in line (false: it did not
// within a second).
func handover(lock, unlock func(side int) error, queued func(side int) bool) runResult {
	type got struct {
		at  time.Time
		err error
	}
	var lats, unl []int64
	var nerr, notQueued int
	var firstErr error
	fail := func(err error) {
		nerr++
		if firstErr == nil {
			firstErr = err
		}
	}
	h := 0
	if err := lock(h); err != nil {
		must(fmt.Errorf("first lock: %w", err))
	}
	a := snap()
	end := time.Now().Add(coordDur())
	for time.Now().Before(end) {
		w := 1 - h
		done := make(chan got, 1)
		go func() {
			err := lock(w)
			done <- got{time.Now(), err}
		}()
		if !queued(w) {
			notQueued++
		}
		time.Sleep(*flagHandoverSettle)
		select {
		case g := <-done:
			// the waiter got the lock while it was held
			must(fmt.Errorf("side %d locked while side %d held the lock (err %v)", w, h, g.err))
		default:
		}
		t0 := time.Now()
		if err := unlock(h); err != nil {
			fail(fmt.Errorf("unlock: %w", err))
		}
		unl = append(unl, int64(time.Since(t0)))
		select {
		case g := <-done:
			if g.err != nil {
				fail(fmt.Errorf("lock: %w", g.err))
				must(lock(w)) // the lock is free: take it, or give up
			} else {
				lats = append(lats, int64(g.at.Sub(t0)))
			}
		case <-time.After(30 * time.Second):
			must(fmt.Errorf("side %d did not get the lock within 30 s of side %d's unlock", w, h))
		}
		h = w
	}
	b := snap()
	if err := unlock(h); err != nil {
		fail(fmt.Errorf("last unlock: %w", err))
	}
	sort.Slice(lats, func(i, j int) bool { return lats[i] < lats[j] })
	sort.Slice(unl, func(i, j int) bool { return unl[i] < unl[j] })
	r := runResult{
		{"handovers", float64(len(lats))},
		{"p50us", pct(lats, .5) / 1e3}, {"p90us", pct(lats, .9) / 1e3},
		{"maxus", pct(lats, 1) / 1e3},
		{"unlock_p50us", pct(unl, .5) / 1e3},
	}
	r = append(r, cpuMetrics(a, b)...)
	if notQueued > 0 {
		r = append(r, metric{"notQueued", float64(notQueued)})
	}
	if nerr > 0 {
		r = append(r, metric{"errors", float64(nerr)})
		fmt.Fprintf(os.Stderr, "WARN: %d errors, first: %v\n", nerr, firstErr)
	}
	return r
}

// queueClaims runs the claims row: two producer goroutines keep
// queueWaiting+2*queueWorkers tasks outstanding (enqueued, not completed;
// enqueue(i) adds task i), so that at least queueWaiting wait, while
// queueWorkers workers each claim a task (claim(w)) and complete it
// (complete(w)). claims/s is the tasks completed per second, p50us/p99us
// the time of a claim and its completion, claim_p50us and complete_p50us
// those of each part, minWaiting the fewest tasks that were waiting
// (enqueued, not claimed) when a claim returned; extra, if not nil, adds
// its metrics to each run's.
func queueClaims(name string, enqueue, claim, complete func(int) error, extra func() runResult) {
	if !wanted(tname(name)) {
		return
	}
	// outstanding tasks (enqueued, not completed): a slot each
	slots := make(chan struct{}, queueWaiting+2*queueWorkers)
	var enqueued, claimed atomic.Int64
	var minWaiting atomic.Int64
	minWaiting.Store(1 << 62)
	pctx, stopProducer := context.WithCancel(context.Background())
	var pwg sync.WaitGroup
	var nextTask atomic.Int64
	var nperr atomic.Int64
	var perr atomic.Value
	const producers = 2
	for range producers {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			for {
				select {
				case slots <- struct{}{}:
				case <-pctx.Done():
					return
				}
				if err := enqueue(int(nextTask.Add(1))); err != nil {
					nperr.Add(1)
					perr.CompareAndSwap(nil, err.Error())
					<-slots
					time.Sleep(time.Millisecond)
					continue
				}
				enqueued.Add(1)
			}
		}()
	}
	// wait for the queue to fill
	for deadline := time.Now().Add(30 * time.Second); enqueued.Load() < int64(cap(slots)); {
		if time.Now().After(deadline) {
			must(fmt.Errorf("%s: the producer enqueued %d tasks in 30 s (first error: %v)", name, enqueued.Load(), perr.Load()))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// the times of each worker's claims and completions (load calls op(w)
	// from worker w's goroutine only)
	var claimLat, completeLat [queueWorkers][]int64
	op := func(w int) error {
		t0 := time.Now()
		if err := claim(w); err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		t1 := time.Now()
		waiting := enqueued.Load() - claimed.Add(1)
		for m := minWaiting.Load(); waiting < m && !minWaiting.CompareAndSwap(m, waiting); m = minWaiting.Load() {
		}
		if err := complete(w); err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		claimLat[w] = append(claimLat[w], int64(t1.Sub(t0)))
		completeLat[w] = append(completeLat[w], int64(time.Since(t1)))
		<-slots
		return nil
	}
	// gather returns the p50 of the times in lat, and empties it.
	gather := func(lat *[queueWorkers][]int64) float64 {
		var all []int64
		for w := range lat {
			all = append(all, lat[w]...)
			lat[w] = lat[w][:0]
		}
		sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
		return pct(all, .5) / 1e3
	}
	if *flagWarm > 0 {
		load(queueWorkers, min(*flagWarm, coordDur()), op)
	}
	minWaiting.Store(1 << 62)
	gather(&claimLat)
	gather(&completeLat)
	if extra != nil {
		extra()
	}
	runTest(name, func(int) runResult {
		r := load(queueWorkers, coordDur(), op)
		if len(r) > 0 && r[0].name == "ops/s" {
			r[0].name = "claims/s"
		}
		r = append(r, metric{"claim_p50us", gather(&claimLat)}, metric{"complete_p50us", gather(&completeLat)})
		r = append(r, metric{"minWaiting", float64(minWaiting.Swap(1 << 62))})
		if extra != nil {
			r = append(r, extra()...)
		}
		if n := nperr.Swap(0); n > 0 {
			r = append(r, metric{"enqueueErrors", float64(n)})
			fmt.Fprintf(os.Stderr, "WARN: %d enqueues failed, first: %v\n", n, perr.Load())
		}
		return r
	})
	stopProducer()
	pwg.Wait()
}

// ---------------------------------------------------------------- etcd

// etcdCoord runs the etcd lock and queue rows; called by etcdTests.
func etcdCoord(ctx context.Context) {
	if !anyWanted(coordNames("etcd")...) {
		return
	}
	ttl := int(coordTTL / time.Second)
	newSide := func() (*clientv3.Client, *concurrency.Session) {
		c := etcdClient()
		s, err := concurrency.NewSession(c, concurrency.WithTTL(ttl))
		must(err)
		return c, s
	}
	closeSide := func(c *clientv3.Client, s *concurrency.Session) {
		s.Close() // revokes the lease
		c.Close()
	}
	base := time.Now().UnixNano()

	// Lock then Unlock of one key, one client, one session.
	if name := "etcd.lock.uncontended"; wanted(tname(name)) {
		c, s := newSide()
		m := concurrency.NewMutex(s, fmt.Sprintf("/bench/elock/uncontended-%d", base))
		coordLoad(name, 1, func(int) error {
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		})
		closeSide(c, s)
	}

	// Handover between two clients of one lock.
	if name := "etcd.lock.handover"; wanted(tname(name)) {
		pfx := fmt.Sprintf("/bench/elock/handover-%d", base)
		var cs [2]*clientv3.Client
		var ss [2]*concurrency.Session
		var ms [2]*concurrency.Mutex
		for i := range cs {
			cs[i], ss[i] = newSide()
			ms[i] = concurrency.NewMutex(ss[i], pfx)
		}
		lock := func(side int) error {
			lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return ms[side].Lock(lctx)
		}
		unlock := func(side int) error { return ms[side].Unlock(ctx) }
		// the waiter is in line once its key exists under the prefix
		// (the holder's and its own)
		queued := func(side int) bool {
			for end := time.Now().Add(time.Second); time.Now().Before(end); {
				r, err := cs[1-side].Get(ctx, pfx+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
				if err == nil && r.Count >= 2 {
					return true
				}
				time.Sleep(200 * time.Microsecond)
			}
			return false
		}
		if *flagWarm > 0 {
			saved := *flagLockDur
			*flagLockDur = min(*flagWarm, coordDur())
			handover(lock, unlock, queued)
			*flagLockDur = saved
		}
		runTest(name, func(int) runResult { return handover(lock, unlock, queued) })
		for i := range cs {
			closeSide(cs[i], ss[i])
		}
	}

	// Tasks: a key per task under <root>tasks/; a claim is a transaction
	// that creates <root>claim/<task> under the worker's lease if it is
	// absent; completion deletes both under the claim.
	if name := fmt.Sprintf("etcd.queue.claims%d", queueWorkers); wanted(tname(name)) {
		root := fmt.Sprintf("/bench/equeue/%d/", base)
		tasks, claims := root+"tasks/", root+"claim/"
		prod := etcdClient()
		var cs [queueWorkers]*clientv3.Client
		var ss [queueWorkers]*concurrency.Session
		for w := range cs {
			cs[w], ss[w] = newSide()
		}
		type held struct {
			task, claim string
			rev         int64
		}
		var mine [queueWorkers]held
		var relists, waits atomic.Int64
		val := string(value(0))
		enqueue := func(i int) error {
			_, err := prod.Put(ctx, fmt.Sprintf("%s%010d", tasks, i), val)
			return err
		}
		claim := func(w int) error {
			c := cs[w]
			for {
				// the tasks, oldest first, and the claims, at one revision
				r, err := c.Txn(ctx).Then(
					clientv3.OpGet(tasks, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
					clientv3.OpGet(claims, clientv3.WithPrefix(), clientv3.WithKeysOnly()),
				).Commit()
				if err != nil {
					return err
				}
				taken := map[string]bool{}
				for _, kv := range r.Responses[1].GetResponseRange().Kvs {
					taken[strings.TrimPrefix(string(kv.Key), claims)] = true
				}
				for _, kv := range r.Responses[0].GetResponseRange().Kvs {
					id := strings.TrimPrefix(string(kv.Key), tasks)
					if taken[id] {
						continue
					}
					ck := claims + id
					tr, err := c.Txn(ctx).If(
						clientv3.Compare(clientv3.CreateRevision(ck), "=", 0),
						clientv3.Compare(clientv3.CreateRevision(string(kv.Key)), "=", kv.CreateRevision),
					).Then(clientv3.OpPut(ck, "", clientv3.WithLease(ss[w].Lease()))).Commit()
					if err != nil {
						return err
					}
					if tr.Succeeded {
						mine[w] = held{string(kv.Key), ck, tr.Header.Revision}
						return nil
					}
				}
				if len(r.Responses[0].GetResponseRange().Kvs) > len(taken) {
					relists.Add(1)
					continue // others claimed the free ones first: list again
				}
				// none free: wait for a change under root since the listing
				waits.Add(1)
				wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				wch := c.Watch(wctx, root, clientv3.WithPrefix(), clientv3.WithRev(r.Header.Revision+1))
				<-wch
				cancel()
			}
		}
		complete := func(w int) error {
			h := mine[w]
			r, err := cs[w].Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(h.claim), "=", h.rev)).
				Then(clientv3.OpDelete(h.task), clientv3.OpDelete(h.claim)).Commit()
			if err == nil && !r.Succeeded {
				err = fmt.Errorf("the claim of %s is lost", h.task)
			}
			return err
		}
		extra := func() runResult {
			return runResult{{"relists", float64(relists.Swap(0))}, {"claimWaits", float64(waits.Swap(0))}}
		}
		queueClaims(name, enqueue, claim, complete, extra)
		prod.Delete(ctx, root, clientv3.WithPrefix())
		prod.Close()
		for w := range cs {
			closeSide(cs[w], ss[w])
		}
	}
}

// ---------------------------------------------------------------- leased

// leasedCoord runs the leased lock and queue rows; called by leasedTests.
func leasedCoord(ctx context.Context) {
	if !anyWanted(coordNames("leased")...) {
		return
	}
	newSide := func(name string, ttl time.Duration) (*client.Client, *client.Session) {
		c, err := leasedDial(ctx, client.Config{Name: name})
		must(err)
		s, err := client.NewSession(ctx, c, ttl)
		must(err)
		return c, s
	}
	closeSide := func(c *client.Client, s *client.Session) {
		s.Close() // revokes the lease
		c.Close()
	}
	base := time.Now().UnixNano()

	// Lock then Unlock of one key, one client, one session.
	if name := "leased.lock.uncontended"; wanted(tname(name)) {
		c, s := newSide("lock", coordTTL)
		m := client.NewMutex(s, fmt.Sprintf("/bench/lock/uncontended-%d", base))
		coordLoad(name, 1, func(int) error {
			if err := m.Lock(ctx); err != nil {
				return err
			}
			return m.Unlock(ctx)
		})
		closeSide(c, s)
	}

	// Handover between two clients of one lock.
	if name := "leased.lock.handover"; wanted(tname(name)) {
		key := fmt.Sprintf("/bench/lock/handover-%d", base)
		var cs [2]*client.Client
		var ss [2]*client.Session
		var ms [2]*client.Mutex
		for i := range cs {
			cs[i], ss[i] = newSide(fmt.Sprintf("lock-%d", i), coordTTL)
			ms[i] = client.NewMutex(ss[i], key)
		}
		lock := func(side int) error {
			lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return ms[side].Lock(lctx)
		}
		unlock := func(side int) error { return ms[side].Unlock(ctx) }
		// the waiter is in line once the server counts a write (the
		// acquisition) waiting
		queued := func(side int) bool {
			for end := time.Now().Add(time.Second); time.Now().Before(end); {
				st, err := cs[1-side].ServerStats(ctx)
				if err == nil && st.WritesWaiting >= 1 {
					return true
				}
				time.Sleep(200 * time.Microsecond)
			}
			return false
		}
		if *flagWarm > 0 {
			saved := *flagLockDur
			*flagLockDur = min(*flagWarm, coordDur())
			handover(lock, unlock, queued)
			*flagLockDur = saved
		}
		runTest(name, func(int) runResult { return handover(lock, unlock, queued) })
		for i := range cs {
			closeSide(cs[i], ss[i])
		}
	}

	// Workers claim and complete the tasks of one queue.
	if name := fmt.Sprintf("leased.queue.claims%d", queueWorkers); wanted(tname(name)) {
		qname := fmt.Sprintf("/bench/queue/%d", base)
		prod, err := leasedDial(ctx, client.Config{Name: "producer"})
		must(err)
		pq := client.NewQueue(prod, qname)
		var cs [queueWorkers]*client.Client
		var ss [queueWorkers]*client.Session
		var qs [queueWorkers]*client.Queue
		var mine [queueWorkers]*client.Task
		for w := range cs {
			cs[w], ss[w] = newSide(fmt.Sprintf("worker-%d", w), coordTTL)
			qs[w] = client.NewQueue(cs[w], qname)
		}
		val := value(0)
		enqueue := func(int) error { _, err := pq.Enqueue(ctx, val); return err }
		claim := func(w int) error {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			t, err := qs[w].Claim(cctx, ss[w])
			mine[w] = t
			return err
		}
		complete := func(w int) error { return mine[w].Complete(ctx) }
		queueClaims(name, enqueue, claim, complete, nil)
		prod.Close()
		for w := range cs {
			closeSide(cs[w], ss[w])
		}
	}

	// A worker dies holding a task; another takes it over.
	if name := "leased.queue.takeover"; wanted(tname(name)) {
		leasedTakeover(ctx, name, base)
	}
}

// leasedTakeover: worker 1 (session TTL takeoverTTL) claims the only task
// of a fresh queue while worker 2 waits in Claim; then worker 1 dies: its
// session is orphaned (no more keep-alives) right after one last
// keep-alive (KeepAliveOnce), sent at t0, so that its lease has exactly
// its TTL left at t0. takeover_ms is t0 → worker 2's Claim returning the
// task; over_ms is that minus the TTL: the server's revocation delay and
// the wake-up and claim of worker 2.
func leasedTakeover(ctx context.Context, name string, base int64) {
	c1, err := leasedDial(ctx, client.Config{Name: "dying-worker"})
	must(err)
	c2, err := leasedDial(ctx, client.Config{Name: "taker"})
	must(err)
	s2, err := client.NewSession(ctx, c2, coordTTL)
	must(err)
	runTest(name, func(run int) runResult {
		qname := fmt.Sprintf("/bench/takeover/%d-%d", base, run)
		q1, q2 := client.NewQueue(c1, qname), client.NewQueue(c2, qname)
		key, err := q1.Enqueue(ctx, value(run))
		must(err)
		s1, err := client.NewSession(ctx, c1, takeoverTTL)
		must(err)
		t1, err := q1.Claim(ctx, s1)
		must(err)
		if t1.Key != key {
			must(fmt.Errorf("worker 1 claimed %s, want %s", t1.Key, key))
		}
		type got struct {
			t   *client.Task
			err error
			at  time.Time
		}
		done := make(chan got, 1)
		cctx, cancel := context.WithTimeout(ctx, 3*s1.TTL()+30*time.Second)
		defer cancel()
		go func() {
			t, err := q2.Claim(cctx, s2)
			done <- got{t, err, time.Now()}
		}()
		time.Sleep(300 * time.Millisecond) // worker 2 lists the queue and waits
		select {
		case g := <-done:
			must(fmt.Errorf("worker 2's Claim returned while worker 1 held the only task: %v, %v", g.t, g.err))
		default:
		}
		s1.Orphan()
		t0 := time.Now()
		_, err = c1.KeepAliveOnce(ctx, s1.Lease())
		must(err)
		ka := time.Since(t0)
		g := <-done
		if g.err != nil {
			must(fmt.Errorf("worker 2's Claim: %w", g.err))
		}
		if g.t.Key != key {
			must(fmt.Errorf("worker 2 claimed %s, want %s", g.t.Key, key))
		}
		d := g.at.Sub(t0)
		must(g.t.Complete(ctx))
		return runResult{
			{"takeover_ms", float64(d) / 1e6},
			{"ttl_ms", float64(s1.TTL()) / 1e6},
			{"over_ms", float64(d-s1.TTL()) / 1e6},
			{"attempt", float64(g.t.Attempt)},
			{"lastKeepAlive_us", float64(ka) / 1e3},
		}
	})
	s2.Close()
	c2.Close()
	c1.Close()
}
