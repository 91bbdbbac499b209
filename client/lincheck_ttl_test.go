//go:build linux

package client_test

// TTL leases (DESIGN §14) in the linearizability histories: a holder per
// key of its own ("ttl/0", "ttl/1", ...) grants short leases one after
// another, attaches its key to each, keeps it alive a while, and then
// revokes it or lets it lapse, while the workers and readers of every
// client read those keys too, from their caches. The checker then finds a
// key that outlives its lease (a stale read after a revocation or an
// expiry), a key gone while its lease must still live, and a lease renewed
// or attached to after it ended.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit/lincheck"
)

// holderTTL is the TTL of the holders' leases, and the servers'
// --ttl-min: short enough that leases let lapse early in a history of
// 2.5 s expire within it.
const holderTTL = time.Second

// ttlKeyPrefix starts the keys of TTL leases, which only holders write.
const ttlKeyPrefix = "ttl/"

// ttlKey returns the key of holder i.
func ttlKey(i int) string { return fmt.Sprintf("%s%d", ttlKeyPrefix, i) }

// readKeyOf returns a random key for a read: a key of a holder one time
// in three, if sc has holders, and otherwise one of the workers' keys.
func (sc scenario) readKeyOf(rng *rand.Rand) string {
	if sc.holders > 0 && rng.IntN(3) == 0 {
		return ttlKey(rng.IntN(sc.holders))
	}
	return workKey(rng.IntN(sc.keys))
}

// ttlTally counts what the holders of a history did. It is safe for
// concurrent use.
type ttlTally struct {
	mu sync.Mutex // guards n
	n  map[string]int
}

func newTTLTally() *ttlTally { return &ttlTally{n: make(map[string]int)} }

// add adds d to counter name.
func (t *ttlTally) add(name string, d int) {
	t.mu.Lock()
	t.n[name] += d
	t.mu.Unlock()
}

// counts returns a copy of the counters.
func (t *ttlTally) counts() map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := make(map[string]int, len(t.n))
	for k, v := range t.n {
		m[k] = v
	}
	return m
}

// ttlCounterOrder is the order in which formatTTL prints the counters.
// Besides the operations and their outcomes: late-puts are puts attached
// to a lease after it was revoked or let lapse (late-puts-attached: the
// lease still lived, which a lapse, lengthened by faults, allows);
// expiries are the leases
// not revoked, whose expiry the holders recorded, and expiries-due those
// of them whose TTL after their last acknowledged renewal ran out before
// the history ended.
var ttlCounterOrder = []string{
	"holders", "grants", "grants-failed", "lease-puts", "lease-puts-not-found", "late-puts", "late-puts-not-found", "late-puts-attached", "puts",
	"keep-alives", "keep-alives-not-found", "keep-alives-unknown", "time-to-lives", "time-to-lives-gone",
	"revocations", "revocations-not-found", "revocations-unknown", "expiries", "expiries-due",
}

// formatTTL prints the holders' counters of a history, or of many.
func formatTTL(m map[string]int) string {
	var parts []string
	for _, k := range ttlCounterOrder {
		if n, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %d", k, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// holder grants TTL leases for its key, one after another, through one
// client, and records what it does as history client id; the expiries of
// the leases it lets lapse are history client id+1. Only runHolder's
// goroutine uses it.
type holder struct {
	key   string
	id    int
	c     *client.Client
	rec   *lincheck.Recorder
	rng   *rand.Rand
	stop  <-chan struct{}
	limit time.Duration // bounds a grant, a put or a revocation
	eps   time.Duration // the server's ε
	tally *ttlTally
	// phantom: the holder's keep-alives never reach the server, yet it
	// records them as acknowledged (the negative control).
	phantom bool
	seq     int
	// lapsed are the moments from which the leases whose expiry it
	// recorded may end.
	lapsed []time.Time
}

// runHolder runs holder i of a history of sc on client lc until stop is
// closed, recording in rec and counting in tally. Client lc must not be a
// liar.
func runHolder(lc *linClient, i, clients int, sc scenario, rec *lincheck.Recorder, seed uint64, tally *ttlTally, stop <-chan struct{}) {
	h := &holder{
		key: ttlKey(i), id: 2*clients + 2*i, c: lc.c, rec: rec,
		rng:  rand.New(rand.NewPCG(seed, uint64(0x7717+i))),
		stop: stop, limit: sc.opLimit(), eps: sc.eps, tally: tally, phantom: sc.phantom,
	}
	for h.waitForGrant() {
		h.cycle()
	}
	now := time.Now()
	for _, from := range h.lapsed {
		if from.Before(now) {
			tally.add("expiries-due", 1)
		}
	}
}

// sleep waits d, or until stop is closed; it reports false if stop came
// first.
func (h *holder) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-h.stop:
		return false
	case <-t.C:
		return true
	}
}

// waitForGrant waits until the holder may grant its next lease, and
// reports false once stop is closed. The model of a key tracks at most
// four of its leases live at once, and a lease let lapse is live until
// its expiry, which may come at the end of the history: so before a grant,
// at most one earlier lease may lapse later than now. It also paces the
// grants.
func (h *holder) waitForGrant() bool {
	d := time.Duration(h.rng.IntN(50)) * time.Millisecond
	if n := len(h.lapsed); n >= 2 {
		d = max(d, time.Until(h.lapsed[n-2]))
	}
	return h.sleep(d)
}

// value returns a value no other write of the history has.
func (h *holder) value() string {
	h.seq++
	return fmt.Sprintf("%s-%d", h.key, h.seq)
}

// cycle runs the life of one lease: a grant, a put attached to it, a few
// keep-alives at a third of its TTL, now and then a plain put (which
// detaches the key), a put that attaches it again or a time-to-live, and
// in the end a revocation or a lapse.
func (h *holder) cycle() {
	g, sent, ok := h.grant()
	if !ok {
		h.sleep(holderTTL / 10)
		return
	}
	id := g.ID
	// lastOK is when the last renewal the server acknowledged was sent:
	// the lease lives its TTL from then, at least.
	lastOK := sent
	h.leasePut(id, "lease-puts")
	n := h.rng.IntN(3)
	revoke := h.rng.IntN(2) == 0
	if h.phantom {
		// Renewals past the lease's first TTL, then a lapse: the server
		// ends the lease while the holder believes it renewed.
		n, revoke = 4+h.rng.IntN(2), false
	}
	stopped := false
	for range n {
		if !h.sleep(g.TTL/3 - g.TTL/20 + time.Duration(h.rng.Int64N(int64(g.TTL/10)))) {
			stopped = true
			break
		}
		if !h.phantom {
			switch h.rng.IntN(8) {
			case 0:
				h.put()
			case 1:
				h.leasePut(id, "lease-puts")
			}
		}
		if sent, ok := h.keepAlive(id); ok {
			lastOK = sent
		}
		if h.rng.IntN(4) == 0 {
			h.timeToLive(id)
		}
	}
	if revoke && !stopped {
		switch h.revoke(id) {
		case lincheck.OK:
			// Ended for good: it is not found any more, and a put can no
			// longer attach the key to it.
			if h.rng.IntN(2) == 0 {
				h.leasePut(id, "late-puts")
			}
			if h.rng.IntN(2) == 0 {
				h.timeToLive(id)
			}
			return
		case lincheck.NotFound:
			// It ended before: faults kept its renewals from the
			// server. Its expiry is recorded below.
		}
	}
	// Let lapse, or revoked with an outcome unknown or none, or the
	// history ends: the server may end it from its TTL after lastOK.
	from := lastOK.Add(g.TTL)
	h.rec.Expiry(h.id+1, h.key, uint64(id), from)
	h.lapsed = append(h.lapsed, from)
	h.tally.add("expiries", 1)
	if stopped || h.rng.IntN(4) == 0 {
		return // the next lease, at once: it takes the key over
	}
	h.watchLapse(id, from)
}

// watchLapse waits for lease id, let lapse, to end from the moment from
// on, and leaves its key attached to it meanwhile, so that the readers see
// the key deleted when the lease ends. Half the time it asks the lease's
// time to live about then; then it sometimes attaches the key to the lease
// once the server must have ended it.
func (h *holder) watchLapse(id client.LeaseID, from time.Time) {
	if h.rng.IntN(2) == 0 {
		at := from.Add(time.Duration(h.rng.Int64N(int64(h.eps+400*time.Millisecond))) - 200*time.Millisecond)
		if !h.sleep(time.Until(at)) {
			return
		}
		h.timeToLive(id)
	}
	// The server ends it ε after from at the earliest, and its
	// revocation waits for the key's readers to acknowledge their
	// invalidations, which they do at once unless faults hold them.
	if !h.sleep(time.Until(from.Add(h.eps + 200*time.Millisecond))) {
		return
	}
	if h.rng.IntN(3) == 0 {
		h.leasePut(id, "late-puts")
	}
}

// grant grants a lease of holderTTL and records it. It returns the lease
// as granted, and when the grant was sent, as the earliest its TTL counts
// from; ok is false if it failed.
func (h *holder) grant() (r client.LeaseGrantResult, sent time.Time, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), h.limit)
	defer cancel()
	in := lincheck.Input{Kind: lincheck.Grant, Key: h.key}
	sent = time.Now()
	call := h.rec.Begin(h.id, in)
	var err error
	r, err = h.c.Grant(ctx, holderTTL)
	if err != nil {
		o := lincheck.Output{Outcome: lincheck.Unknown, Err: err.Error()}
		if errors.Is(err, client.ErrCanceled) || errors.Is(err, client.ErrInvalidArgument) || errors.Is(err, client.ErrResourceExhausted) {
			o.Outcome = lincheck.NoEffect
		}
		h.rec.End(call, o)
		h.tally.add("grants-failed", 1)
		return r, time.Time{}, false
	}
	h.rec.End(call, lincheck.Output{Outcome: lincheck.OK, Lease: uint64(r.ID)})
	h.tally.add("grants", 1)
	return r, sent, true
}

// leasePut puts a new value in the key, attached to lease id, records it,
// and counts it under counter, and its lease's absence under
// counter-not-found.
func (h *holder) leasePut(id client.LeaseID, counter string) {
	ctx, cancel := context.WithTimeout(context.Background(), h.limit)
	defer cancel()
	in := lincheck.Input{Kind: lincheck.LeasePut, Key: h.key, Value: h.value(), Lease: uint64(id)}
	call := h.rec.Begin(h.id, in)
	v, err := h.c.Put(ctx, h.key, []byte(in.Value), client.WithLease(id))
	out := leaseWriteOutput(v, err)
	h.rec.End(call, out)
	h.tally.add(counter, 1)
	switch {
	case out.Outcome == lincheck.NotFound:
		h.tally.add(counter+"-not-found", 1)
	case out.Outcome == lincheck.OK && counter == "late-puts":
		h.tally.add("late-puts-attached", 1)
	}
}

// put puts a new value in the key, detaching it from its lease, and
// records it.
func (h *holder) put() {
	ctx, cancel := context.WithTimeout(context.Background(), h.limit)
	defer cancel()
	in := lincheck.Input{Kind: lincheck.Put, Key: h.key, Value: h.value()}
	call := h.rec.Begin(h.id, in)
	v, err := h.c.Put(ctx, h.key, []byte(in.Value))
	h.rec.End(call, writeOutput(v, err))
	h.tally.add("puts", 1)
}

// keepAlive renews lease id once and records it. It returns when the
// keep-alive was sent, and whether the server acknowledged the renewal. A
// phantom holder sends nothing, and records an acknowledgement.
func (h *holder) keepAlive(id client.LeaseID) (sent time.Time, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), holderTTL/3)
	defer cancel()
	in := lincheck.Input{Kind: lincheck.KeepAlive, Key: h.key, Lease: uint64(id)}
	sent = time.Now()
	call := h.rec.Begin(h.id, in)
	var err error
	if !h.phantom {
		_, err = h.c.KeepAliveOnce(ctx, id)
	}
	out := leaseOutput(err)
	h.rec.End(call, out)
	h.tally.add("keep-alives", 1)
	switch out.Outcome {
	case lincheck.NotFound:
		h.tally.add("keep-alives-not-found", 1)
	case lincheck.Unknown:
		h.tally.add("keep-alives-unknown", 1)
	}
	return sent, out.Outcome == lincheck.OK
}

// timeToLive asks whether lease id lives and records the answer, unless
// the question failed: that reveals nothing, as a failed read.
func (h *holder) timeToLive(id client.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), holderTTL/3)
	defer cancel()
	call := h.rec.Begin(h.id, lincheck.Input{Kind: lincheck.TimeToLive, Key: h.key, Lease: uint64(id)})
	r, err := h.c.TimeToLive(ctx, id, false)
	if err != nil {
		return
	}
	out := lincheck.Output{Outcome: lincheck.OK}
	if r.TTL < 0 {
		out.Outcome = lincheck.NotFound
		h.tally.add("time-to-lives-gone", 1)
	}
	h.rec.End(call, out)
	h.tally.add("time-to-lives", 1)
}

// revoke revokes lease id, records it, and returns its outcome.
func (h *holder) revoke(id client.LeaseID) lincheck.Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), h.limit)
	defer cancel()
	call := h.rec.Begin(h.id, lincheck.Input{Kind: lincheck.Revoke, Key: h.key, Lease: uint64(id)})
	r, err := h.c.Revoke(ctx, id)
	out := leaseOutput(err)
	if err == nil {
		out.Version = r.Revision
	}
	h.rec.End(call, out)
	h.tally.add("revocations", 1)
	switch out.Outcome {
	case lincheck.NotFound:
		h.tally.add("revocations-not-found", 1)
	case lincheck.Unknown, lincheck.NoEffect:
		h.tally.add("revocations-unknown", 1)
	}
	return out.Outcome
}

// leaseOutput classifies the result of an operation that names a TTL
// lease.
func leaseOutput(err error) lincheck.Output {
	switch {
	case err == nil:
		return lincheck.Output{Outcome: lincheck.OK}
	case errors.Is(err, client.ErrNotFound):
		return lincheck.Output{Outcome: lincheck.NotFound, Err: err.Error()}
	case errors.Is(err, client.ErrCanceled):
		return lincheck.Output{Outcome: lincheck.NoEffect, Err: err.Error()}
	}
	// Lost connections, no answer in time, a server that is not the
	// leader: it may or may not have happened.
	return lincheck.Output{Outcome: lincheck.Unknown, Err: err.Error()}
}

// leaseWriteOutput classifies the result of a put attached to a TTL lease.
func leaseWriteOutput(v uint64, err error) lincheck.Output {
	if errors.Is(err, client.ErrNotFound) {
		return lincheck.Output{Outcome: lincheck.NotFound, Err: err.Error()}
	}
	return writeOutput(v, err)
}

// phantomScenario is the negative control of TTL leases, which
// TestLinearizableNegative runs: holders whose keep-alives are
// acknowledged but never reach the server, which is what a server that
// acknowledges renewals and then loses them looks like from the holder's
// side. The server, rightly, ends each lease its TTL after its grant, and
// deletes its key, while the holder believes the lease renewed for a TTL
// after its last acknowledged keep-alive, and records the expiry from
// then: the readers see the key gone while its lease must still live, and
// the checker must find that in the keys of the TTL leases
// (checkTTLViolation).
func phantomScenario() scenario {
	return scenario{name: "phantom-keep-alives", clients: 5, keys: 3, holders: 3, phantom: true,
		term: 300 * time.Millisecond, eps: 100 * time.Millisecond}
}

// checkTTLViolation fails the test unless the operations of res's history
// on the keys of TTL leases alone are not linearizable; their
// visualisation goes to the folder out. It returns its path.
func checkTTLViolation(t *testing.T, res historyResult, seed uint64, out string) string {
	t.Helper()
	var ops []porcupine.Operation
	for _, op := range res.history {
		if strings.HasPrefix(op.Input.(lincheck.Input).Key, ttlKeyPrefix) {
			ops = append(ops, op)
		}
	}
	viz := filepath.Join(out, fmt.Sprintf("lincheck-ttl-keys-seed%d.html", seed))
	if verdict, _ := lincheck.Check(ops, 2*time.Minute, viz); verdict != porcupine.Illegal {
		t.Fatalf("seed %d: the %d operations on the keys of TTL leases are %s, want a violation", seed, len(ops), verdict)
	}
	return viz
}
