package core

import (
	"time"

	"github.com/leased/leased/store"
)

// minTombstoneAge is the least time a deletion's record (its tombstone,
// store.OpCollectTombstones) is kept, whatever the terms: for so long, a
// client that read a deleted key may still compare-and-swap it expecting
// the version of its deletion.
const minTombstoneAge = time.Minute

// tombstoneAge is how long the core waits between two collections of
// tombstones, and the least age of those it collects: the longest lease
// (the longest term plus ε) or minTombstoneAge, whichever is longer.
func (c *Core) tombstoneAge() time.Duration { return max(c.life, minTombstoneAge) }

// collectLoop collects, every tombstoneAge, the tombstones of the
// deletions committed before its previous round (store.OpCollectTombstones):
// each is at least tombstoneAge old on this core's clock, and at most
// about twice that. A new core starts counting afresh, so a failover
// only delays a collection. The revision bound travels in the command, so
// every replica collects the same records. New starts it, with the
// revision committed before it starts; Close stops it.
func (c *Core) collectLoop(noted uint64) {
	defer c.loops.Done()
	var collected uint64
	for {
		t := c.clock.NewTimer(c.tombstoneAge())
		select {
		case <-c.queue.closed:
			t.Stop()
			return
		case <-t.Chan():
		}
		through := noted
		noted = c.revision.Load()
		if through > collected && c.collectTombstones(through) {
			collected = through
		}
	}
}

// collectTombstones collects the tombstones of deletions at revision
// through or earlier, a command at a time, and reports whether it
// collected them all; a failure is logged, and the next round tries
// again.
func (c *Core) collectTombstones(through uint64) bool {
	for {
		rs, err := c.apply([]store.Command{{Op: store.OpCollectTombstones, Through: through}})
		if err != nil {
			c.log.Warn("cannot collect the records of deletions; trying again later", "err", err)
			return false
		}
		if !rs[0].More {
			return true
		}
	}
}
