package server

import (
	"errors"
	"fmt"
	"time"

	"github.com/leased/leased/internal/diskguard"
	"github.com/leased/leased/store"
)

// The data folder's guard (package diskguard): the NOSPACE alarm, which
// refuses writes while the folder is past its quota or its disk below the
// reserve, and the check that the folder is still there.

// ErrDataFolderLost is returned by Serve when the data folder, or the lock
// file the server keeps in it, was deleted or replaced while the server
// ran: writes acknowledged from then on would be lost, so the server
// refuses them and stops. Its process should exit, and be started again on
// a whole data folder.
var ErrDataFolderLost = errors.New("leased: the data folder was deleted or replaced while the server ran; it stopped, refusing writes, so that none is acknowledged and then lost")

// openGuard starts the guard of the data folder of a server that keeps
// its state there (no Config.Store). It refuses to start on a file system
// with less free than the reserve.
func openGuard(cfg Config) (*diskguard.Guard, error) {
	if cfg.Store != nil {
		return nil, nil
	}
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

// admitter returns the core's Config.Admit: the guard's, with a write's
// bytes. Nil without a guard.
func (s *Server) admitter() func(store.Op, int) error {
	if s.guard == nil {
		return nil
	}
	return func(op store.Op, bytes int) error {
		return s.guard.Admit(int64(bytes), op == store.OpDelete)
	}
}

// alarm returns the guard's alarm as the stats show it, "" if none.
func (s *Server) alarm() string {
	if s.guard == nil {
		return ""
	}
	if err := s.guard.Alarm(); err != nil {
		return err.Error()
	}
	return ""
}

// floorPoll is how often a node of a cluster looks whether it is below
// half the reserve.
const floorPoll = time.Second

// watchDisk stops the server when the guard finds the data folder lost,
// and stops a follower of a cluster whose disk is below half the reserve:
// the leader refuses writes only for its own disk, so a follower applies
// whatever the leader commits, and left running it would go on until the
// database's next write into a mapped file crashes it. It runs until the
// server stops.
func (s *Server) watchDisk() {
	defer close(s.diskDone)
	t := time.NewTicker(floorPoll)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.guard.Lost():
			s.log.Error("the data folder was deleted or replaced: stopping", "dir", s.cfg.Dir, "err", s.guard.Err())
			s.stopWith(fmt.Errorf("%w: %w", ErrDataFolderLost, s.guard.Err()))
			return
		case <-t.C:
			if s.node != nil && !s.node.IsLeader() && s.guard.BelowFloor() {
				u := s.guard.Usage()
				s.leaveOnFailure(fmt.Errorf("%w: %s free on the data folder's file system, below half the reserve of %s (--reserve-bytes): a follower cannot refuse the entries its leader commits",
					diskguard.ErrNoSpace, diskguard.Bytes(u.Free), diskguard.Bytes(s.cfg.ReserveBytes)))
				return
			}
		}
	}
}

// stopWith stops serving; Serve then returns why.
func (s *Server) stopWith(why error) {
	if s.node != nil {
		s.leave(why)
		return
	}
	s.left.Store(&why)
	s.beginClose()
}
