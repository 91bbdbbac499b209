package client

import (
	"time"

	"github.com/leased/leased/internal/clock"
)

// suspendShare sets the slack of the suspend check: a suspend of the
// machine of up to ε/suspendShare in all, which the monotonic clock does
// not count, may pass unnoticed; a longer one drops every cached lease
// (DESIGN §8).
const suspendShare = 10

// defaultEpsilon is the server's default ε, which sets the slack before a
// session has told the client the server's own.
const defaultEpsilon = 100 * time.Millisecond

// newSuspendWatch returns the watch for suspends of a client whose clock
// is clk: the system clock, compared with the boot clock (sys), or a
// clock of the caller's, compared with its own ReadBoot if it has one
// (clock.Boot), as the tests' suspending clock has, and otherwise with
// nothing. It drops the cache through c when it finds a suspend. Dial
// calls it once.
func newSuspendWatch(c *Client, sys bool, clk clock.Clock) *clock.SuspendWatch {
	if sys {
		return clock.NewSuspendWatch(nil, nil, c.dropAfterSuspend)
	}
	b, _ := clk.(clock.Boot)
	return clock.NewSuspendWatch(clk, b, c.dropAfterSuspend)
}

// suspendSlack returns how long the machine may have been suspended, in
// all since the cache was last dropped for a suspend, before the client
// treats its leases as lost: a tenth of the ε of the current or last
// session.
func (c *Client) suspendSlack() time.Duration {
	eps := defaultEpsilon
	if h := c.lastHello.Load(); h != nil && h.Epsilon > 0 {
		eps = h.Epsilon
	}
	return eps / suspendShare
}

// dropAfterSuspend treats every lease of the cache as lost after the
// machine slept for asleep, longer than the slack, which no deadline
// counted: the server may have let them all run out, and writes commit,
// meanwhile. It drops every entry, poisons the reads and writes in flight
// (sent before the suspend, perhaps, their answers would carry deadlines
// that do not count it either), queues the leases for release, in case
// the server still has them, and reports them expired; every write lease
// is lost too (loseWriteLeases). The suspend watch
// calls it, under its lock, before any cached read is served again.
func (c *Client) dropAfterSuspend(asleep time.Duration) {
	c.imu.Lock()
	for k, f := range c.fetches {
		f.poisoned = true
		delete(c.fetches, k)
	}
	keys := c.cache.Clear()
	c.dropAllListings()
	c.imu.Unlock()
	c.notifyAll()
	if h := c.cfg.OnInvalidate; h != nil {
		h(nil, []string{""})
	}
	c.relinquish(keys)
	c.loseWriteLeases()
	c.log.Warn("the machine was suspended longer than the clock slack: every cached lease dropped",
		"suspended", asleep, "slack", c.suspendSlack(), "keys", len(keys))
	if len(keys) > 0 {
		c.emit(Event{Kind: EventLeasesExpired, Keys: keys})
	}
}
