package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/leased/leased/internal/atomicfile"
	"github.com/leased/leased/store"
)

// The lease horizon (DESIGN §7): a wall-clock time after which no lease
// this run granted can be live. The core persists it, through the store,
// before it grants a lease that would outlive it, in steps of HorizonStep
// past the longest lease, and mostly ahead of time (horizonLoop), so that a
// grant seldom waits for it. While the core runs, it compares its grants
// with the horizon on the monotonic clock, from the start (Core.horizon), so
// that a wall clock stepped back cannot make a grant seem covered. After a
// crash, writes wait until the leases the earlier run left may have ended:
// the write barrier.
//
// How long that is, the wall clock never says: it may have been stepped
// while the server was down (an NTP step, an operator), and a horizon that
// seemed to have passed would let writes commit inside leases that clients
// still trust. The store records how far ahead of its writing the horizon
// lay (its span), and the wait is that span, plus ε, counted from when the node
// applied the horizon (at its start, for a horizon applied before it).
// Only the boot clock may shorten it: with each horizon it records, the core
// keeps, in a file of its own (Config.BootFile), the machine's boot id and
// the time since boot at which the horizon passes (bootRecord). A restart
// in the same boot that finds the record of the stored horizon waits only
// until that time on the boot clock, which wall-clock steps do not move
// and which counts the time the machine was suspended. Across a reboot, or
// in doubt (no record, or one of another horizon; a system whose boot clock
// cannot be read; a horizon another node recorded), it waits the whole
// span. The record is about this machine, not about the replicated state:
// other nodes must not read it, so it stays out of the store's commands,
// whose state is the same on every node.

// horizonSkew is how far past its span ahead of this node's wall clock a
// stored horizon may lie before the core warns that a wall clock was wrong,
// when the horizon was written or now.
const horizonSkew = time.Minute

// restore reads what an earlier run left in the store: the horizon, whose
// remaining part becomes the write barrier, and the write leases, which
// live until the barrier (their holders may have renewed them up to it).
// Write leases whose barrier has passed already are ended in the store.
func (c *Core) restore() error {
	st, err := c.store.State()
	if err != nil {
		return fmt.Errorf("core: read the stored state: %w", err)
	}
	c.started = c.clock.Now()
	c.revision.Store(st.Revision)
	for _, d := range st.LockDelays {
		// Counted on the wall clock of the leader that recorded it, with
		// ε for the drift between the two clocks.
		if left := d.Until.Sub(c.started) + c.cfg.Epsilon; left > 0 {
			c.table.DelayLock(d.Key, c.started.Add(left))
		}
	}
	held := c.holdInherited(st)
	if st.HandedOff && !st.HorizonApplied.IsZero() {
		if err := c.restoreHandoff(st); err != nil {
			return err
		}
		c.holdWrites(held)
		return nil
	}
	var hold time.Duration
	switch {
	case c.cfg.UnsafeSkipHorizonWait:
		c.log.Warn("unsafe: not waiting for the leases an earlier run or leader may have granted")
	case !st.Horizon.IsZero():
		hold = c.horizonHold(st)
	}
	if hold > 0 {
		// The old horizon holds writes back, but grants no lease here:
		// this run grants only under horizons it persisted itself, which
		// every later leader learns of before it writes (DESIGN §13).
		barrier := c.started.Add(hold)
		for _, wl := range st.WriteLeases {
			c.table.RestoreWriteLease(wl.Key, wl.Token, wl.Client, barrier, wl.Lease)
		}
		c.holdWrites(maxTime(barrier, held))
		return nil
	}
	c.holdWrites(held)
	var ends []store.Command
	for _, wl := range st.WriteLeases {
		if wl.Lease != 0 {
			// A lock lives as long as its TTL lease (DESIGN §5.1).
			c.table.RestoreWriteLease(wl.Key, wl.Token, wl.Client, time.Time{}, wl.Lease)
			continue
		}
		ends = append(ends, store.Command{Op: store.OpEndWriteLease, Key: []byte(wl.Key), Token: wl.Token})
	}
	if len(ends) == 0 {
		return nil
	}
	if _, err := c.writeLog(ends); err != nil {
		return fmt.Errorf("core: end the expired write leases of an earlier run: %w", err)
	}
	return nil
}

// horizonHold returns how long, from the start, writes wait for the leases
// granted under the stored horizon of st: at most its span, plus ε, from
// when this node applied it, or, for a horizon this node recorded in this
// boot of the machine, until it passes on the boot clock. The wall clock
// shortens it in no case, and lengthens it in none: a horizon that lies
// further ahead than its span (a wall clock once set years ahead) is
// named in a warning, and waited for no longer than its span.
func (c *Core) horizonHold(st store.State) time.Duration {
	if ahead := st.Horizon.Sub(c.started); ahead > st.Span+horizonSkew {
		c.log.Warn("the stored lease horizon lies further ahead of this node's wall clock than when it was recorded: a wall clock was wrong then or is now; writes wait no longer than its span",
			"horizon", st.Horizon.UTC().Format(time.RFC3339Nano), "span", st.Span, "ahead", ahead)
	}
	applied := st.HorizonApplied
	if applied.IsZero() {
		// A store that is not replicated: the horizon counts as applied
		// at this start.
		applied = c.started
	}
	// The leader that recorded the horizon granted no lease past its span
	// from then, and this node applied it later. ε covers the drift of
	// the two clocks over the span (DESIGN §13).
	hold := max(applied.Add(st.Span+c.cfg.Epsilon).Sub(c.started), 0)
	how := "the whole span"
	// A node running alone recorded its horizons with no clock name
	// before it had one: they are its own too.
	own := (c.cfg.Clockname != "" && st.HorizonBy == c.cfg.Clockname) || (!c.cfg.Replicated && st.HorizonBy == "")
	if !own {
		how = "the whole span: another node recorded the horizon"
	} else if left, doubt := c.bootHold(st); doubt != "" {
		how = "the whole span: " + doubt
	} else {
		hold, how = min(hold, left), "on the boot clock"
	}
	if hold > 0 {
		c.log.Info("restarted: holding writes until leases granted before the restart have expired",
			"wait", hold, "counted", how, "horizon", st.Horizon.UTC().Format(time.RFC3339Nano), "span", st.Span, "write_leases", len(st.WriteLeases))
	}
	return hold
}

// bootRecord is what a core keeps in Config.BootFile of a horizon it
// recorded: the horizon as the store holds it, by which a later core knows
// that the record is of the stored horizon, and when it passes on the boot
// clock of the machine. JSON; the wall-clock horizon in Unix ns, the
// durations in ns.
type bootRecord struct {
	By      string        `json:"by"` // the clock name (store.State.HorizonBy)
	Horizon int64         `json:"horizon_unix_ns"`
	Span    time.Duration `json:"span_ns"`
	BootID  string        `json:"boot_id"`
	// BootHorizon is the time since boot at which the horizon passes:
	// the time since boot when it was recorded, plus its span.
	BootHorizon time.Duration `json:"boot_horizon_ns"`
}

// of reports whether r is the record of the stored horizon of st.
func (r bootRecord) of(st store.State) bool {
	return r.By == st.HorizonBy && r.Horizon == st.Horizon.UnixNano() && r.Span == st.Span
}

// recordBoot writes to Config.BootFile, and syncs, the boot record of
// horizon h, of span, before the horizon is persisted and relied on, and
// returns it (nil if none is kept). The file keeps the record of the
// horizon the store holds now (Core.bootKept) beside it, for the store
// may keep that one if persisting h fails. A record that cannot be written
// costs only the next start the whole span: a record of another horizon
// never matches the stored one.
func (c *Core) recordBoot(h time.Time, span time.Duration) *bootRecord {
	if c.cfg.BootFile == "" {
		return nil
	}
	id, since, ok := c.boot.ReadBoot()
	if !ok {
		return nil
	}
	rec := &bootRecord{By: c.cfg.Clockname, Horizon: h.UnixNano(), Span: span, BootID: id, BootHorizon: since + span}
	recs := []bootRecord{*rec}
	if c.bootKept != nil && *c.bootKept != *rec {
		recs = append(recs, *c.bootKept)
	}
	b, err := json.Marshal(recs)
	if err == nil {
		err = atomicfile.Write(c.cfg.BootFile, b, 0o600)
	}
	if err != nil {
		c.log.Warn("cannot record the lease horizon on the boot clock; a start after it waits out its whole span", "file", c.cfg.BootFile, "err", err)
	}
	return rec
}

// bootHold returns how long, from now, writes wait for the stored horizon
// of st by its boot record: until the horizon passes on the boot clock, at
// most its span. If there is no record of it that can be trusted, it says
// why instead. restore calls it.
func (c *Core) bootHold(st store.State) (time.Duration, string) {
	if c.cfg.BootFile == "" {
		return 0, "no boot record is kept"
	}
	b, err := os.ReadFile(c.cfg.BootFile)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, "no boot record"
	}
	var recs []bootRecord
	if err == nil {
		err = json.Unmarshal(b, &recs)
	}
	if err != nil {
		c.log.Warn("cannot read the boot record of the lease horizon", "file", c.cfg.BootFile, "err", err)
		return 0, "the boot record cannot be read"
	}
	i := slices.IndexFunc(recs, func(r bootRecord) bool { return r.of(st) })
	if i < 0 {
		return 0, "the boot record is of another horizon"
	}
	r := recs[i]
	c.bootKept = &r
	id, now, ok := c.boot.ReadBoot()
	switch {
	case !ok:
		return 0, "the boot clock cannot be read"
	case id != r.BootID:
		return 0, "the machine rebooted"
	}
	return max(min(r.BootHorizon-now, st.Span), 0), ""
}

// holdInherited sets the reads held of the keys of Config.Inherited, and
// of the holds that an earlier leader recorded with the newest horizon of
// st (store.State.Holds, counted from when this node applied it), whose
// bound, plus ε, has not passed at the start, and returns when the last of
// them is released (zero if none is held). The holds recorded survive a
// restart of this node and a snapshot it restored, which Config.Inherited
// does not: a node counts a horizon entry applied before either as applied
// then.
func (c *Core) holdInherited(st store.State) time.Time {
	if c.cfg.UnsafeSkipHorizonWait {
		return time.Time{}
	}
	var last time.Time
	hold := func(k string, bound time.Time) {
		until := bound.Add(c.cfg.Epsilon)
		if !until.After(c.started) || !until.After(c.held[k]) {
			return
		}
		if c.held == nil {
			c.held = make(map[string]time.Time)
		}
		c.held[k] = until
		last = maxTime(last, until)
	}
	for k, bound := range c.cfg.Inherited {
		hold(k, bound)
	}
	applied := st.HorizonApplied
	if applied.IsZero() {
		applied = c.started // a store that is not replicated, as in horizonHold
	}
	for _, h := range st.Holds {
		hold(h.Key, applied.Add(h.Left))
	}
	if len(c.held) > 0 {
		c.log.Info("holding reads of keys an earlier leader was writing", "keys", len(c.held), "wait", last.Sub(c.started))
	}
	return last
}

// recordHolds persists, before the core serves, a horizon that records the
// reads it holds (setHorizon), so that a later leader holds them too, even
// one that restarted or restored a snapshot since: it knows of the writes
// that an earlier leader's term left only from the log. Nothing if it holds
// none. New calls it after restore.
func (c *Core) recordHolds() error {
	if len(c.held) == 0 {
		return nil
	}
	if err := c.advanceHorizon(c.clock.Now(), 0); err != nil {
		return fmt.Errorf("core: record the keys held for an earlier leader: %w", err)
	}
	return nil
}

// liveHolds returns the keys whose reads are held past now, sorted, each
// with the time its hold has left, without ε (store.HeldKey), for the
// horizon written at now.
func (c *Core) liveHolds(now time.Time) []store.HeldKey {
	var hs []store.HeldKey
	for k, until := range c.held {
		if until.After(now) {
			hs = append(hs, store.HeldKey{Key: k, Left: max(until.Sub(now)-c.cfg.Epsilon, 0)})
		}
	}
	slices.SortFunc(hs, func(a, b store.HeldKey) int { return strings.Compare(a.Key, b.Key) })
	return hs
}

// holdWrites holds every write until barrier, if it is after the start:
// the write barrier.
func (c *Core) holdWrites(barrier time.Time) {
	if !barrier.After(c.started) {
		return
	}
	c.barrier = barrier
	c.table.SetWriteBarrier(barrier)
}

// ensureHorizon makes sure that the persisted lease horizon covers every
// lease granted at now. It persists a new horizon only when one could
// outlive the current one, which a background move ahead (horizonLoop)
// normally prevents: the usual cost is one atomic load. Callers call it
// before they grant or extend a lease at now, and grant none if it fails.
func (c *Core) ensureHorizon(now time.Time) error {
	need := c.sinceStart(now.Add(c.life))
	h := c.horizon.Load()
	if need <= h && !c.bootBehind(0) {
		if h-need < int64(c.cfg.HorizonStep/2) {
			select {
			case c.horizonKick <- struct{}{}:
			default:
			}
		}
		return nil
	}
	return c.advanceHorizon(now, 0)
}

// advanceHorizon persists a horizon a full step past the longest lease
// granted at now, unless the current one already covers such a lease and
// ahead more. The new horizon also covers the leases of an earlier run
// (the barrier), which a shorter term could otherwise leave out.
func (c *Core) advanceHorizon(now time.Time, ahead time.Duration) error {
	c.horizonMu.Lock()
	defer c.horizonMu.Unlock()
	if c.sinceStart(now.Add(c.life+ahead)) <= c.horizon.Load() && !c.bootBehind(ahead) {
		return nil
	}
	if c.handingOff.Load() {
		return fmt.Errorf("%w: the leases are being handed over to the next leader", ErrUnavailable)
	}
	h := now.Add(c.life + c.cfg.HorizonStep)
	if cover := maxTime(c.barrier, c.inherited); cover.After(h) {
		h = now.Add(cover.Sub(now)) // on the monotonic clock, as in lowerHorizon
	}
	if err := c.setHorizon(h, now); err != nil {
		return fmt.Errorf("persist the lease horizon: %w", err)
	}
	c.horizon.Store(c.sinceStart(h))
	return nil
}

// setHorizon persists horizon h, written at now, after its boot record,
// with the reads still held then (liveHolds), which every horizon records
// until they have passed. The caller holds horizonMu.
func (c *Core) setHorizon(h, now time.Time) error {
	span := max(h.Sub(now), 0)
	rec := c.recordBoot(h, span)
	cmd := store.Command{Op: store.OpSetHorizon, Key: []byte(c.cfg.Clockname), Horizon: h, Span: span, Holds: c.liveHolds(now)}
	if _, err := c.apply([]store.Command{cmd}); err != nil {
		return err
	}
	c.bootKept = rec
	if rec != nil {
		c.bootHorizon.Store(int64(rec.BootHorizon))
	} else {
		c.bootHorizon.Store(0)
	}
	return nil
}

// bootBehind reports whether a lease granted now, of the longest term and
// lasting ahead more, would outlive the horizon's boot record, though not
// the horizon on the monotonic clock, which the running core counts by:
// the machine was suspended since the record was written, which moves the
// boot clock (and the clients' clocks) but not the monotonic one. A
// restart in the same boot would then wait too little; so the horizon is
// recorded again, from now. False when the horizon has no boot record.
func (c *Core) bootBehind(ahead time.Duration) bool {
	bh := c.bootHorizon.Load()
	if bh == 0 {
		return false
	}
	_, since, ok := c.boot.ReadBoot()
	return ok && int64(since+c.life+ahead) > bh
}

// sinceStart returns t as nanoseconds past the start, on the monotonic
// clock where t carries its reading (Core.horizon).
func (c *Core) sinceStart(t time.Time) int64 { return int64(t.Sub(c.started)) }

// horizonLoop moves the horizon ahead when leases granted near it ask, so
// that grants seldom wait for it to be persisted.
func (c *Core) horizonLoop() {
	defer c.loops.Done()
	for {
		select {
		case <-c.queue.closed:
			return
		case <-c.horizonKick:
			c.advanceHorizon(c.clock.Now(), c.cfg.HorizonStep/2)
		}
	}
}

// lowerHorizon persists, once no lease can be granted any more, the
// earliest horizon that still covers every live lease: the latest expiry in
// the table, or the bound of an earlier run's leases (the barrier). When
// every holder relinquished its leases, the next run does not hold writes
// at all. Close calls it, after the core's loops have ended.
func (c *Core) lowerHorizon() error {
	c.horizonMu.Lock()
	defer c.horizonMu.Unlock()
	now := c.clock.Now()
	c.mu.Lock()
	latest := c.table.LatestExpiry()
	c.mu.Unlock()
	if c.barrier.After(latest) {
		latest = c.barrier
	}
	// Measured on the monotonic clock from now: the wall clock may have
	// stepped since the lease was granted.
	h := now.Add(max(latest.Sub(now), 0))
	if c.horizon.Load() == 0 || c.sinceStart(h) >= c.horizon.Load() {
		return nil
	}
	if err := c.setHorizon(h, now); err != nil {
		return err
	}
	c.horizon.Store(c.sinceStart(h))
	return nil
}
