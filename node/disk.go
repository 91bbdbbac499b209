package node

// The data folder's guard (package diskguard): the NOSPACE alarm, which
// refuses writes while the folder is past its quota or its disk below the
// reserve, and the check that the folder is still there; in a cluster,
// the members' NOSPACE alarms that the leader records in the log, and a
// follower's refusal of its leader's entries while its disk is below half
// the reserve.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/leased/leased/client"
	"github.com/leased/leased/core"
	"github.com/leased/leased/internal/diskguard"
	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// MinReserveBytes is the least reserve (Config.ReserveBytes) that keeps a
// full disk from crashing a node: what its database may write by itself
// (store.UnaskedBytes: memtables flushed to tables, a value-log file
// collected) and a segment the log preallocates at once
// (replica.LogSegmentBytes), none of which the guard's Admit counts, and
// all of which may come between two of its measurements. With the
// defaults, 208 MiB. Writes the guard admits are counted against the
// reserve on top of it.
func MinReserveBytes() int64 { return store.UnaskedBytes() + replica.LogSegmentBytes() }

// openGuard starts the guard of the data folder. It refuses to start on a
// file system with less free than the reserve. The folders in which the
// database and the log create files must stay writable (the READONLY
// alarm).
func openGuard(cfg Config) (*diskguard.Guard, error) {
	raft := filepath.Join(cfg.Dir, layout.RaftDir)
	writable := []string{cfg.Dir, filepath.Join(cfg.Dir, layout.DBDir), raft, filepath.Join(raft, "wal"), filepath.Join(raft, "snapshots")}
	g, err := diskguard.Open(diskguard.Config{Dir: cfg.Dir, Quota: cfg.QuotaBytes, Reserve: cfg.ReserveBytes, Meter: cfg.DiskUsage, Writable: writable, Logger: cfg.Logger})
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
// bytes, and then the members' NOSPACE alarms of the applied state
// (State.Alarms): while one is raised, the cluster takes no write but a
// delete, since every member must apply what the leader commits. Nil
// without a guard.
func (n *Node) admitter() func(store.Op, int) error {
	if n.guard == nil {
		return nil
	}
	return func(op store.Op, bytes int) error {
		del := op == store.OpDelete
		if err := n.guard.Admit(int64(bytes), del); err != nil || del {
			return err
		}
		return n.memberAlarm()
	}
}

// memberAlarm returns the NOSPACE alarm of a member other than this node
// recorded in the applied state, as the error that refuses a write, or nil
// if none is raised. This node's own alarm is its guard's.
func (n *Node) memberAlarm() error {
	as := n.alarms.Load()
	if as == nil || n.cfg.Cluster == nil {
		return nil
	}
	for _, a := range *as {
		if a.Member != n.cfg.Cluster.Name {
			return fmt.Errorf("%w %s", diskguard.ErrNoSpace, onMember(a))
		}
	}
	return nil
}

// onMember describes the alarm of a member: "on member NAME: " and what
// its guard said, without its "NOSPACE: ".
func onMember(a store.MemberAlarm) string {
	return "on member " + a.Member + ": " + strings.TrimPrefix(a.Alarm, diskguard.ErrNoSpace.Error()+": ")
}

// loadAlarms reads the members' alarms from the applied state, for
// memberAlarm and Alarm. It keeps what it read before if it cannot.
func (n *Node) loadAlarms() {
	if n.rep == nil || n.cfg.Cluster == nil {
		return
	}
	st, err := n.rep.State()
	if err != nil {
		return
	}
	n.alarms.Store(&st.Alarms)
}

// Alarm returns the alarms as the stats and the status show them, "" if
// none: the guard's, then the NOSPACE alarm of each other member of the
// cluster that the applied state records, each naming its member.
func (n *Node) Alarm() string {
	var out []string
	if n.guard != nil {
		if err := n.guard.Alarm(); err != nil {
			out = append(out, err.Error())
		}
	}
	if as := n.alarms.Load(); as != nil && n.cfg.Cluster != nil {
		for _, a := range *as {
			if a.Member != n.cfg.Cluster.Name {
				out = append(out, diskguard.ErrNoSpace.Error()+" "+onMember(a))
			}
		}
	}
	return strings.Join(out, "; ")
}

// NoSpace returns this node's own NOSPACE alarm, its guard's, "" if none
// is raised: what the leader records for it in the applied state
// (watchAlarms asks each member for it, in its status). The server's
// status calls it.
func (n *Node) NoSpace() string {
	if n.guard == nil {
		return ""
	}
	if err := n.guard.Alarm(); err != nil && errors.Is(err, diskguard.ErrNoSpace) {
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
// half the reserve, and how often it reads the members' alarms.
const floorPoll = time.Second

// refuser returns the replica's Config.Refuse of a node of a cluster: its
// log takes no entry from the leader while the guard's last measurement
// found less than half the reserve free (diskguard.Guard.BelowFloor), so
// little that what the database may write by itself could fill the file
// system. Nil without a guard.
func refuser(g *diskguard.Guard, reserve int64) func() error {
	if g == nil {
		return nil
	}
	return func() error {
		if !g.BelowFloor() {
			return nil
		}
		return fmt.Errorf("%w: %s free on the data folder's file system, below half the reserve of %s (--reserve-bytes)",
			diskguard.ErrNoSpace, diskguard.Bytes(g.Usage().Free), diskguard.Bytes(reserve))
	}
}

// watchDisk stops the node when the guard finds the data folder lost, and
// logs when a follower of a cluster begins and ends refusing its leader's
// entries because its disk is below half the reserve (refuser): the
// leader refuses writes while a member's NOSPACE alarm is raised
// (watchAlarms), but entries that change no key's value go on. It runs
// until the node closes.
func (n *Node) watchDisk() {
	defer n.loops.Done()
	t := time.NewTicker(floorPoll)
	defer t.Stop()
	refusing := false
	for {
		select {
		case <-n.stop:
			return
		case <-n.guard.Lost():
			n.log.Error("the data folder was deleted or replaced: stopping", "dir", n.cfg.Dir, "err", n.guard.Err())
			n.leave(fmt.Errorf("%w: %w", ErrDataFolderLost, n.guard.Err()))
			return
		case <-t.C:
			if n.cfg.Cluster == nil {
				continue
			}
			low := !n.rep.IsLeader() && n.guard.BelowFloor()
			switch {
			case low && !refusing:
				u := n.guard.Usage()
				n.log.Error("this follower refuses its leader's entries until there is room again: its disk is below half the reserve",
					"free", u.Free, "reserve", n.cfg.ReserveBytes, "applied_index", n.rep.AppliedIndex())
			case !low && refusing:
				n.log.Info("this follower takes its leader's entries again", "free", n.guard.Usage().Free)
			}
			refusing = low
		}
	}
}

// alarmAsk bounds a status question to a member, and its dial.
const alarmAsk = time.Second

// watchAlarms keeps the members' NOSPACE alarms of the applied state as
// the members' guards have them (DESIGN §7): every floorPoll it reads them
// from the applied state (loadAlarms), and, on the node that leads, asks
// every other member whose client address it knows for its own alarm
// (EndpointStatusReply.DiskAlarm), in an admin session it keeps with it,
// and records through its core (core.Core.SetAlarm) each alarm raised or
// cleared, its own included; it clears those of nodes that are no longer
// members. A member it cannot ask keeps its alarm as recorded. It runs
// until the node closes.
func (n *Node) watchAlarms() {
	defer n.loops.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-n.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	peers := map[string]*client.Admin{}
	closeAll := func() {
		for name, adm := range peers {
			adm.Close()
			delete(peers, name)
		}
	}
	defer closeAll()
	t := time.NewTicker(floorPoll)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-t.C:
		}
		n.loadAlarms()
		c := n.Core()
		if c == nil {
			closeAll()
			continue
		}
		if n.recordAlarms(ctx, c, peers) {
			n.loadAlarms()
		}
	}
}

// recordAlarms records, through c, the alarms of the members that changed
// since the applied state recorded them, and reports whether it recorded
// any. peers are the admin sessions it keeps with the other members, by
// name. watchAlarms calls it on the node that leads.
func (n *Node) recordAlarms(ctx context.Context, c *core.Core, peers map[string]*client.Admin) bool {
	ms, err := n.configuration()
	if err != nil {
		return false
	}
	have := map[string]string{}
	if as := n.alarms.Load(); as != nil {
		for _, a := range *as {
			have[a.Member] = a.Alarm
		}
	}
	set := func(member, alarm string) bool {
		if err := c.SetAlarm(member, alarm); err != nil {
			n.log.Warn("could not record a member's NOSPACE alarm; trying again", "member", member, "err", err)
			return false
		}
		if alarm != "" {
			n.log.Error("NOSPACE alarm raised for a member: the cluster refuses writes until it has room again", "member", member, "alarm", alarm)
		} else {
			n.log.Info("NOSPACE alarm of a member cleared", "member", member)
		}
		return true
	}
	self := n.cfg.Cluster.Name
	addrs := n.clientAddrs(ms)
	changed := false
	members := map[string]bool{}
	for _, m := range ms {
		members[m.ID] = true
		alarm := n.NoSpace()
		if m.ID != self {
			st, err := askPeer(ctx, n, peers, m.ID, addrs[m.ID])
			if err != nil {
				continue
			}
			alarm = st.DiskAlarm
		}
		if (alarm == "") == (have[m.ID] == "") {
			continue
		}
		changed = set(m.ID, shorten(alarm, store.MaxAlarmBytes)) || changed
	}
	for member := range have {
		if !members[member] {
			changed = set(member, "") || changed
		}
	}
	for name, adm := range peers {
		if !members[name] {
			adm.Close()
			delete(peers, name)
		}
	}
	return changed
}

// askPeer asks member name, at client address addr, for its status, in
// the admin session peers keeps with it, which it opens or opens again if
// needed, and closes on failure. It fails if addr is not known, or the
// node there is not name.
func askPeer(ctx context.Context, n *Node, peers map[string]*client.Admin, name, addr string) (*client.NodeStatus, error) {
	if addr == "" {
		return nil, errors.New("client address not known")
	}
	ctx, cancel := context.WithTimeout(ctx, alarmAsk)
	defer cancel()
	adm := peers[name]
	if adm != nil && adm.Addr() != addr {
		adm.Close()
		adm = nil
	}
	if adm == nil {
		var err error
		if adm, err = client.DialAdmin(ctx, addr, n.adminConfig()); err != nil {
			delete(peers, name)
			return nil, err
		}
		peers[name] = adm
	}
	st, err := adm.Status(ctx)
	if err == nil && st.Name != name {
		err = fmt.Errorf("the node at %s is %q, not %q", addr, st.Name, name)
	}
	if err != nil {
		adm.Close()
		delete(peers, name)
		return nil, err
	}
	return st, nil
}

// shorten cuts s to at most max bytes, on a rune boundary.
func shorten(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
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
