package core

import (
	"fmt"
	"strings"
	"time"

	"github.com/leased/leased/store"
)

// A graceful leader handoff (DESIGN §13). The old leader's core stops
// granting leases, holds new writes, lets the committing ones finish, and
// records every live lease through the log (store.OpHandoff). The next
// leader's core restores them as its own, each counted from when it applied
// the entry: a write waits for the holders of its key only, not for the old
// leader's whole horizon. A handed-over lease is held by a closed session
// until a session of the same client claims it (SetClient); until then a
// write on its key waits for it to run out.

// handedBase is the first session ID of the holders of handed-over leases,
// above any ID a server gives its sessions. handedBase itself holds the
// leases of sessions that gave no client identity.
const handedBase SessionID = 1 << 63

// HandOff prepares the core's leases for the next leader: it stops granting
// leases and serving reads (they fail with ErrUnavailable: the next leader
// writes at once), holds new writes, waits for the committing ones, and
// applies an OpHandoff with every live lease. A core that still holds
// writes for an earlier leader's leases (Stats.WritesAllowedIn) applies
// none: the next leader then waits out the newest horizon instead. The
// caller (node.Node.TransferLead) then transfers the leadership, and calls Resume
// if that fails. Writes held meanwhile are abandoned when their sessions
// close; their clients send them again to the next leader.
func (c *Core) HandOff() error {
	now := c.clock.Now()
	c.readMu.Lock() // waits for the reads in progress
	c.mu.Lock()
	c.handingOff.Store(true)
	c.table.SetWriteBarrier(now.Add(1 << 62))
	c.mu.Unlock()
	c.readMu.Unlock()
	c.queue.drain()
	c.horizonMu.Lock() // no horizon is persisted after the handoff
	defer c.horizonMu.Unlock()
	now = c.clock.Now()
	if now.Before(c.barrier) {
		// This core still waits out leases that an earlier run or leader
		// may have granted (restore). They are not in its table, so a
		// handoff could not carry them: it hands nothing over, and the
		// next leader holds its writes until the newest horizon has
		// passed, as a failover does. That horizon covers the barrier
		// too, since this core's own horizons reach past it
		// (advanceHorizon).
		c.log.Info("not handing the leases over: writes are still held for the leases of an earlier leader; the next leader holds them too",
			"until", c.barrier, "wait", c.barrier.Sub(now))
		return nil
	}
	c.mu.Lock()
	infos := c.table.Leases()
	c.mu.Unlock()
	ls := make([]store.HandedLease, 0, len(infos))
	var longest time.Duration
	for _, l := range infos {
		left := l.Expiry.Sub(now)
		if left <= 0 {
			continue
		}
		h := store.HandedLease{Key: l.Key, Left: left}
		if l.Write {
			// A write lease keeps the client it was granted to, even while
			// a restored one waits for that client to come back.
			h.Client, h.Token = l.Client, l.Token
		} else {
			h.Client, h.Prefix = c.clientOf(l.Session), l.Prefix
		}
		ls = append(ls, h)
		longest = max(longest, left)
	}
	if _, err := c.apply([]store.Command{{Op: store.OpHandoff, Key: []byte(c.cfg.Clockname), Handoff: ls, At: now}}); err != nil {
		c.resume()
		return fmt.Errorf("hand the leases over: %w", err)
	}
	// The store's horizon is the end of the longest lease now: a lease
	// granted after a Resume persists a new one first.
	c.horizon.Store(c.sinceStart(now.Add(longest)))
	c.log.Info("handed the leases over", "leases", len(ls), "longest", longest)
	return nil
}

// Resume undoes HandOff after the leadership could not be transferred: the
// core grants leases and lets writes go again.
func (c *Core) Resume() {
	c.horizonMu.Lock()
	c.resume()
	c.horizonMu.Unlock()
	// A horizon of its own replaces the handoff in the store at once: the
	// next leader must wait for this core again.
	if err := c.advanceHorizon(c.clock.Now(), 0); err != nil {
		c.log.Warn("cannot persist a horizon after resuming", "err", err)
	}
}

// resume lifts HandOff's holds. The caller holds c.horizonMu.
func (c *Core) resume() {
	c.mu.Lock()
	c.handingOff.Store(false)
	c.table.SetWriteBarrier(c.barrier)
	c.mu.Unlock()
	c.poke()
}

// SetClient records the client identity that session id gave (0: none),
// and gives the session the leases of that client's earlier session on
// this core, and those handed over to this core for that client. The
// server calls it once a session's hello has been read, before the
// session's first request.
//
// A client that lost its connection and came back on a new one (DESIGN
// §6) so keeps its read and write leases: they are renewed on the new
// session, and invalidations and recalls reach it there, those the earlier
// session may have missed included (leasetable.Table.AdoptClient). If
// the earlier session is still open, because the server has not noticed
// the loss yet, it is closed in the lease table and returned as
// superseded (0: none); the caller closes its connection. The identity is
// bound to the client's certificate where it has one (the server hashes
// both), so no other client can take the leases.
//
// The write leases the session acquires record the identity, durably, and
// a later session of the same client, after a restart or a failover too,
// may take them over by presenting their fencing token; no other session
// may write under them.
func (c *Core) SetClient(id SessionID, client uint64) (superseded SessionID) {
	if client == 0 {
		return 0
	}
	now := c.clock.Now()
	c.mu.Lock()
	c.clients[id] = client
	c.table.SetClient(id, client)
	eff, superseded := c.table.AdoptClient(id, now)
	if superseded != 0 {
		delete(c.clients, superseded)
	}
	if from, ok := c.handed[client]; ok {
		delete(c.handed, client)
		handed := c.table.AdoptSession(from, id, now) // invalidations only
		eff.Invalidate = append(eff.Invalidate, handed.Invalidate...)
		eff.InvalidatePrefix = append(eff.InvalidatePrefix, handed.InvalidatePrefix...)
	}
	c.enqueueReady(eff)
	c.mu.Unlock()
	c.carryOut(eff)
	return superseded
}

// clientOf returns the client identity of session id, 0 if unknown.
func (c *Core) clientOf(id SessionID) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if id >= handedBase {
		for client, s := range c.handed {
			if s == id {
				return client
			}
		}
		return 0
	}
	return c.clients[id]
}

// restoreHandoff takes over the leases an earlier leader handed over, each
// live until its time left, counted from applied, when this node applied
// the handoff, plus ε for the drift of the two clocks. Write leases it did
// not hand over, or whose time has run out, are ended.
func (c *Core) restoreHandoff(st store.State) error {
	applied := st.HorizonApplied
	kept := make(map[string]uint64)
	checked := make(map[string]bool) // keys whose lock records have handed read leases
	next := handedBase + 1
	for _, l := range st.Handoff {
		expiry := applied.Add(l.Left + c.cfg.Epsilon)
		if !expiry.After(c.started) {
			continue
		}
		c.inherited = maxTime(c.inherited, expiry)
		if l.Token != 0 {
			c.table.RestoreWriteLease(l.Key, l.Token, l.Client, expiry, 0)
			kept[l.Key] = l.Token
			continue
		}
		holder := handedBase
		if l.Client != 0 {
			if holder = c.handed[l.Client]; holder == 0 {
				holder = next
				next++
				c.handed[l.Client] = holder
			}
		}
		if l.Prefix {
			c.table.RestorePrefixLease(holder, l.Key, expiry)
			continue
		}
		c.table.RestoreReadLease(holder, l.Key, expiry)
		if lock, ok := strings.CutPrefix(l.Key, store.LockRecordPrefix); ok {
			checked[lock] = true
		}
	}
	var ends []store.Command
	for _, wl := range st.WriteLeases {
		if wl.Lease != 0 {
			// A lock is not handed over: it lives as long as its TTL
			// lease (DESIGN §5.1).
			c.table.RestoreWriteLease(wl.Key, wl.Token, wl.Client, time.Time{}, wl.Lease)
			continue
		}
		switch {
		case kept[wl.Key] == wl.Token:
		case checked[wl.Key]:
			// Readers of its record were handed over: it ends through the
			// table, which invalidates them first (core/lock.go).
			c.table.RestoreWriteLease(wl.Key, wl.Token, wl.Client, c.started, 0)
		default:
			ends = append(ends, store.Command{Op: store.OpEndWriteLease, Key: []byte(wl.Key), Token: wl.Token})
		}
	}
	c.log.Info("took over the leases handed over by the last leader", "leases", len(st.Handoff), "live_until", c.inherited)
	if len(ends) == 0 {
		return nil
	}
	if _, err := c.writeLog(ends); err != nil {
		return fmt.Errorf("core: end the write leases the last leader did not hand over: %w", err)
	}
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
