package node

// The data folder's guard (package diskguard): the NOSPACE alarm, which
// refuses writes while the folder is past its quota or its disk below the
// reserve, and the check that the folder is still there.

import (
	"fmt"
	"time"

	"github.com/leased/leased/internal/diskguard"
	"github.com/leased/leased/store"
)

// openGuard starts the guard of the data folder. It refuses to start on a
// file system with less free than the reserve.
func openGuard(cfg Config) (*diskguard.Guard, error) {
	g, err := diskguard.Open(diskguard.Config{Dir: cfg.Dir, Quota: cfg.QuotaBytes, Reserve: cfg.ReserveBytes, Meter: cfg.DiskUsage, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	if err := g.StartErr(); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// admitter returns the cores' Config.Admit: the guard's, with a write's
// bytes. Nil without a guard.
func (n *Node) admitter() func(store.Op, int) error {
	if n.guard == nil {
		return nil
	}
	return func(op store.Op, bytes int) error {
		return n.guard.Admit(int64(bytes), op == store.OpDelete)
	}
}

// Alarm returns the guard's alarm as the stats show it, "" if none.
func (n *Node) Alarm() string {
	if n.guard == nil {
		return ""
	}
	if err := n.guard.Alarm(); err != nil {
		return err.Error()
	}
	return ""
}

// DiskUsed returns the bytes the data folder holds, as the guard last
// measured them, and false for a node without a guard (Config.Store).
func (n *Node) DiskUsed() (int64, bool) {
	if n.guard == nil {
		return 0, false
	}
	return n.guard.Usage().Used, true
}

// floorPoll is how often a node of a cluster looks whether it is below
// half the reserve.
const floorPoll = time.Second

// watchDisk stops the node when the guard finds the data folder lost, and
// stops a follower of a cluster whose disk is below half the reserve: the
// leader refuses writes only for its own disk, so a follower applies
// whatever the leader commits, and left running it would go on until the
// database's next write into a mapped file crashes it. It runs until the
// node closes.
func (n *Node) watchDisk() {
	defer n.loops.Done()
	t := time.NewTicker(floorPoll)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.guard.Lost():
			n.log.Error("the data folder was deleted or replaced: stopping", "dir", n.cfg.Dir, "err", n.guard.Err())
			n.leave(fmt.Errorf("%w: %w", ErrDataFolderLost, n.guard.Err()))
			return
		case <-t.C:
			if n.cfg.Cluster != nil && !n.rep.IsLeader() && n.guard.BelowFloor() {
				u := n.guard.Usage()
				n.leaveOnFailure(fmt.Errorf("%w: %s free on the data folder's file system, below half the reserve of %s (--reserve-bytes): a follower cannot refuse the entries its leader commits",
					diskguard.ErrNoSpace, diskguard.Bytes(u.Free), diskguard.Bytes(n.cfg.ReserveBytes)))
				return
			}
		}
	}
}

// CheckDisk measures the data folder now, instead of at the guard's next
// poll, and raises or clears the alarm by it (diskguard.Guard.Check): for
// tests that change what the guard's meter reports. It does nothing on a
// node without a guard.
func (n *Node) CheckDisk() {
	if n.guard != nil {
		n.guard.Check()
	}
}
