package node

// Cluster administration (DESIGN §13): status and member list on any node,
// the membership changes that the leader makes through raft, the one place
// a leader hands over the lead, and how a node finds out that it was
// removed.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// handOffWait bounds the leadership transfer of a graceful shutdown, and
// how long a transfer waits to learn the new leader.
const handOffWait = 2 * time.Second

// memberPoll is how many lead polls pass between two checks that this node
// is still a member of its cluster.
const memberPoll = 10

// Status is a node's role in its cluster, as an admin session's endpoint
// status shows it.
type Status struct {
	Name, PeerAddr string
	Role           string // replica.RoleLeader, RoleFollower, RoleCandidate or RoleShutdown
	// RaftTerm, CommitIndex and AppliedIndex are raft's; 0 for a node
	// alone.
	RaftTerm, CommitIndex, AppliedIndex uint64
	// Leader names the leader this node knows, and LeaderAddr is the
	// address it serves clients at, if known.
	Leader, LeaderAddr string
	// Revision is the revision of this node's applied state, and
	// Compacted the compaction point of its event history; 0 if its
	// store cannot be read.
	Revision, Compacted uint64
}

// Status returns this node's role, raft term and indexes, and the leader
// it knows. A node alone reports itself as the leader of a cluster of one.
func (n *Node) Status() Status {
	self := n.host.ClientAddr()
	var rev, compacted uint64
	if s, err := n.st.State(); err == nil {
		rev, compacted = s.Revision, s.History.Compacted
	}
	if n.cfg.Cluster == nil {
		return Status{Name: soloName, Role: replica.RoleLeader, Leader: soloName, LeaderAddr: self, Revision: rev, Compacted: compacted}
	}
	rs := n.rep.Status()
	st := Status{Name: n.cfg.Cluster.Name, PeerAddr: n.cfg.Cluster.PeerAddr, Role: rs.Role,
		RaftTerm: rs.Term, CommitIndex: rs.CommitIndex, AppliedIndex: rs.AppliedIndex, Leader: rs.Leader,
		Revision: rev, Compacted: compacted}
	switch {
	case st.Leader == st.Name:
		st.LeaderAddr = self
	case st.Leader != "":
		st.LeaderAddr = n.leaderAddr()
	}
	return st
}

// Member is one member of the cluster.
type Member struct {
	Name, PeerAddr string
	Voter          bool
	// Leads says that this node takes it to lead.
	Leads bool
	// ClientAddr is the address it serves clients at, if this node knows
	// it (directory); "" otherwise.
	ClientAddr string
}

// Members returns the members of the cluster as this node's latest raft
// configuration has them, in its order, and marks the one it takes to
// lead.
func (n *Node) Members() ([]Member, error) {
	if n.cfg.Cluster == nil {
		return []Member{{Name: soloName, Voter: true, Leads: true, ClientAddr: n.host.ClientAddr()}}, nil
	}
	ms, err := n.configuration()
	if err != nil {
		return nil, err
	}
	leader := n.rep.Leader()
	addrs := n.clientAddrs(ms)
	out := make([]Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, Member{Name: m.ID, PeerAddr: m.Address, Voter: m.Voter, Leads: m.ID == leader && leader != "",
			ClientAddr: addrs[m.ID]})
	}
	return out, nil
}

// directory is what a node of a cluster knows of where its members serve
// clients (DESIGN §13): the client addresses that members announced, or
// that the leader listed, and the leader this node confirmed. Its zero
// value is empty and ready. mu is a leaf.
type directory struct {
	mu     sync.Mutex
	addrs  map[string]string // member name → client address
	leader confirmedLeader   // the leader this node last confirmed
}

// confirmedLeader is a leader that this node asked, at the client address
// its applied state records (store.OpSetLeader), and that answered that it
// is name and leads in raft term term.
type confirmedLeader struct {
	name, addr string
	term       uint64
}

// note records that member name serves clients at addr.
func (d *directory) note(name, addr string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.addrs == nil {
		d.addrs = make(map[string]string)
	}
	d.addrs[name] = addr
}

// lookup returns the client address noted for member name, if any.
func (d *directory) lookup(name string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.addrs[name]
}

// clientAddrs returns the client address this node knows of each member of
// ms: its own, the confirmed leader's, and those noted in its directory.
// Members no longer in ms are forgotten.
func (n *Node) clientAddrs(ms []replica.Member) map[string]string {
	out := make(map[string]string, len(ms))
	n.dir.mu.Lock()
	for _, m := range ms {
		if a := n.dir.addrs[m.ID]; a != "" {
			out[m.ID] = a
		}
	}
	for name := range n.dir.addrs {
		if _, ok := out[name]; !ok {
			delete(n.dir.addrs, name)
		}
	}
	n.dir.mu.Unlock()
	if n.rep != nil {
		if l := n.rep.Leader(); l != "" {
			if a := n.leaderAddr(); a != "" {
				out[l] = a
			}
		}
	}
	out[n.cfg.Cluster.Name] = n.host.ClientAddr()
	return out
}

// leaderAddr returns the client address of the node that leads, when this
// node can vouch for it: raft knows that node as the leader in the
// current raft term, the applied state records it at that address
// (store.OpSetLeader), and the node at that address confirmed, in this
// term, that it is that node, leads and serves clients (memberWatch asks
// it). Otherwise it
// returns "": the leader is not known. So a node that restarted, or whose
// applied state still names the leader of an earlier term, or an address
// that leader no longer serves at, names no leader rather than a stale one,
// until it has asked (within a few lead polls). A node never names itself
// here: it is asked only while it does not serve.
func (n *Node) leaderAddr() string {
	if n.rep == nil || n.cfg.Cluster == nil {
		return ""
	}
	rs := n.rep.Status()
	if rs.Leader == "" || rs.Leader == n.cfg.Cluster.Name {
		return ""
	}
	st, err := n.rep.State()
	if err != nil || st.Leader != rs.Leader || st.LeaderAddr == "" {
		return ""
	}
	n.dir.mu.Lock()
	c := n.dir.leader
	n.dir.mu.Unlock()
	if c != (confirmedLeader{name: st.Leader, addr: st.LeaderAddr, term: rs.Term}) {
		return ""
	}
	return st.LeaderAddr
}

// NoteMember records that member name serves clients at addr, as that
// node announced when it asked this one for the member list
// (protocol.MemberList.From), so that the member list this node answers
// with names it. The node at addr must confirm first, in an admin session
// whose server certificate the cluster CA signed (Cluster.PeerClientTLS),
// that it is name; a name that is not a member, or an address already
// noted, is left alone. The server calls it from an admin session.
func (n *Node) NoteMember(ctx context.Context, name, addr string) error {
	if n.cfg.Cluster == nil || name == "" || name == n.cfg.Cluster.Name {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%w: client address %q of member %q: want host:port", ErrInvalidArgument, addr, name)
	}
	if n.dir.lookup(name) == addr {
		return nil
	}
	ms, err := n.configuration()
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(ms, func(m replica.Member) bool { return m.ID == name }) {
		return fmt.Errorf("%w: no member is named %q", ErrUnknownMember, name)
	}
	ctx, cancel := context.WithTimeout(ctx, askWait)
	defer cancel()
	adm, err := client.DialAdmin(ctx, addr, n.adminConfig())
	if err != nil {
		return err
	}
	defer adm.Close()
	st, err := adm.Status(ctx)
	if err != nil {
		return err
	}
	if st.Name != name {
		return fmt.Errorf("%w: the node at %s is %q, not %q", ErrInvalidArgument, addr, st.Name, name)
	}
	n.dir.note(name, addr)
	n.log.Debug("noted a member's client address", "member", name, "client_addr", addr)
	return nil
}

// adminConfig is the client configuration of this node's admin sessions
// with its peers: its node certificate, and the cluster CA.
func (n *Node) adminConfig() client.Config {
	return client.Config{TLSConfig: n.cfg.Cluster.PeerClientTLS, Name: "leased " + n.cfg.Cluster.Name, Logger: n.log}
}

// configuration returns the latest raft configuration this node knows.
func (n *Node) configuration() ([]replica.Member, error) {
	ms, err := n.rep.Members()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return ms, nil
}

// leaderConfiguration returns the latest configuration, or an error that
// names the leader if this node does not lead.
func (n *Node) leaderConfiguration() ([]replica.Member, error) {
	if n.cfg.Cluster == nil {
		return nil, errNotCluster
	}
	if !n.rep.IsLeader() {
		return nil, n.NotLeader()
	}
	return n.configuration()
}

// AddMember adds a voter named name, which its peers reach at peerAddr,
// and returns once the new configuration is committed (within ctx and
// raft's bound). The new node must have started with no bootstrap
// (Cluster.Join). Only the leader adds; another node returns a
// NotLeaderError.
func (n *Node) AddMember(ctx context.Context, name, peerAddr string) error {
	if name == "" || peerAddr == "" {
		return fmt.Errorf("%w: a member needs a name and a peer address", ErrInvalidArgument)
	}
	if _, _, err := net.SplitHostPort(peerAddr); err != nil {
		return fmt.Errorf("%w: peer address %q: want host:port", ErrInvalidArgument, peerAddr)
	}
	ms, err := n.leaderConfiguration()
	if err != nil {
		return err
	}
	for _, m := range ms {
		switch {
		case m.ID == name:
			return fmt.Errorf("%w: %q is already a member, at %s", ErrInvalidArgument, name, m.Address)
		case m.Address == peerAddr:
			return fmt.Errorf("%w: member %q is already at %s", ErrInvalidArgument, m.ID, peerAddr)
		}
	}
	if err := n.raftErr(n.rep.AddVoter(ctx, name, peerAddr)); err != nil {
		return fmt.Errorf("add member %q: %w", name, err)
	}
	n.log.Info("member added", "member", name, "peer_addr", peerAddr)
	return nil
}

// RemoveMember removes member name and returns once the new configuration
// is committed. It refuses to remove the last voter. The removed node,
// when it learns of it, stops serving (ErrRemoved). Only the leader
// removes.
func (n *Node) RemoveMember(ctx context.Context, name string) error {
	ms, err := n.leaderConfiguration()
	if err != nil {
		return err
	}
	found := false
	for _, m := range ms {
		if m.ID != name {
			continue
		}
		found = true
		if m.Voter && countVoters(ms) == 1 {
			return fmt.Errorf("%w: %q is the last voter of the cluster; removing it is refused", ErrInvalidArgument, name)
		}
	}
	if !found {
		return fmt.Errorf("%w: no member is named %q", ErrUnknownMember, name)
	}
	if err := n.raftErr(n.rep.RemoveMember(ctx, name)); err != nil {
		return fmt.Errorf("remove member %q: %w", name, err)
	}
	n.log.Info("member removed", "member", name)
	return nil
}

func countVoters(ms []replica.Member) int {
	k := 0
	for _, m := range ms {
		if m.Voter {
			k++
		}
	}
	return k
}

// TransferLead hands the lead of the cluster to voter to, or, if to is
// empty, to the voter raft picks, and returns once this node no longer
// leads or the transfer failed (raft bounds it by its election timeout;
// ctx may end it sooner). It is the one place a leader hands over:
// `leasectl member transfer` and a graceful shutdown (HandOff) call it.
func (n *Node) TransferLead(ctx context.Context, to string) error {
	ms, err := n.leaderConfiguration()
	if err != nil {
		return err
	}
	self := n.cfg.Cluster.Name
	var target *replica.Member
	others := 0
	for i, m := range ms {
		if m.ID != self && m.Voter {
			others++
		}
		if m.ID == to {
			target = &ms[i]
		}
	}
	switch {
	case to == self:
		// The lead is where it was asked to be: nothing to do, as for
		// etcd's move-leader, so that a script may ask for it again.
		return nil
	case to != "" && target == nil:
		return fmt.Errorf("%w: no member is named %q", ErrUnknownMember, to)
	case target != nil && !target.Voter:
		return fmt.Errorf("%w: %q does not vote, and cannot lead", ErrInvalidArgument, to)
	case others == 0:
		return fmt.Errorf("%w: no other voter to hand the lead to", ErrInvalidArgument)
	}
	start := time.Now()
	// The leases go to the next leader through the log first, so that it
	// need not wait for this node's horizon (DESIGN §13). From here on
	// this node grants no lease and serves no read; it resumes if the
	// transfer fails.
	c := n.Core()
	if c == nil {
		return n.NotLeader()
	}
	if err := c.HandOff(); err != nil {
		return err
	}
	addr := ""
	if target != nil {
		addr = target.Address
	}
	if err := n.raftErr(n.rep.TransferLead(ctx, to, addr)); err != nil {
		c.Resume()
		return fmt.Errorf("transfer the lead: %w", err)
	}
	// The new leader is known here once its first heartbeat arrives:
	// wait for it a little, so that the caller can ask who leads.
	var leader string
	t := time.NewTicker(leadPoll)
	defer t.Stop()
	give := time.NewTimer(handOffWait)
	defer give.Stop()
	for {
		if leader = n.rep.Leader(); leader != "" && leader != self {
			break
		}
		select {
		case <-t.C:
			continue
		case <-give.C:
		case <-ctx.Done():
		case <-n.stop:
		}
		break
	}
	n.log.Info("handed the lead over", "node", self, "to", leader, "took", time.Since(start))
	return nil
}

// HandOff is the first step of a graceful shutdown of a node that leads a
// cluster with other voters: it transfers the lead, within handOffWait,
// so that clients move to the new leader at once. On failure it logs, and
// the shutdown goes on.
func (n *Node) HandOff(ctx context.Context) {
	if n.cfg.Cluster == nil || !n.rep.IsLeader() {
		return
	}
	ms, err := n.configuration()
	if err != nil || countVoters(ms) < 2 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, handOffWait)
	defer cancel()
	if err := n.TransferLead(ctx, ""); err != nil {
		n.log.Warn("could not hand the lead over before shutting down", "err", err)
	}
}

// raftErr turns the replica's errors of a raft request into the node's: a
// node that does not lead names the leader, and anything else, the
// caller's context that ended included, is ErrUnavailable.
func (n *Node) raftErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNotLeader):
		return n.NotLeader()
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// orphanAfter is how long a member goes without hearing from a leader
// before it asks the last leader it knew whether it is still a member,
// and how long it waits between two such questions.
const orphanAfter = 2 * time.Second

// askWait bounds one such question.
const askWait = time.Second

// memberWatch finds out, for the loop, that this node was removed from its
// cluster. Usually the node learns it from the log: raft sends the removed
// node the configuration that leaves it out. But raft sends it only once,
// and a node that misses it hears from no leader again; so a member that
// has heard from no leader for orphanAfter asks the last leader it knew,
// in an admin session, for the member list. Only the loop's goroutine
// calls its methods.
type memberWatch struct {
	n *Node
	// member: this node has been in the cluster's configuration, in this
	// process or, as the file marker records, in an earlier one. A node
	// that joins sees configurations without itself while it catches up.
	member  bool
	marker  string
	lastAsk time.Time // when the last question went out
	// asked is the leader the last questions went to, and retry how long
	// after one the next goes while it is not confirmed: doubled each
	// time, from confirmRetry.
	asked  confirmedLeader
	retry  time.Duration
	asking chan bool // the answer to the question out; nil if none is
	ctx    context.Context
	cancel context.CancelFunc
}

func (n *Node) watchMembership() *memberWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &memberWatch{n: n, ctx: ctx, cancel: cancel, marker: filepath.Join(n.cfg.Dir, layout.RaftDir, memberMarker)}
	_, err := os.Stat(w.marker)
	w.member = err == nil
	return w
}

// memberMarker is the file, in the raft folder, whose presence records
// that the node has been a member of its cluster.
const memberMarker = "member"

// stop abandons a question that is out and waits for its goroutine.
func (w *memberWatch) stop() {
	w.cancel()
	if w.asking != nil {
		<-w.asking
	}
}

// removed reports whether this node, once a member, is no longer one, or,
// having heard from no leader for orphanAfter, is not listed by the last
// leader it knew. The loop calls it on every poll; it looks every
// memberPoll polls.
func (w *memberWatch) removed(polls int) bool {
	if w.asking != nil {
		select {
		case gone := <-w.asking:
			w.asking = nil
			if gone {
				return true
			}
		default:
		}
	}
	if polls%memberPoll != 0 {
		return false
	}
	n := w.n
	ms, err := n.configuration()
	if err != nil {
		return false
	}
	name := n.cfg.Cluster.Name
	in := false
	for _, m := range ms {
		in = in || m.ID == name
	}
	switch {
	case in && !w.member:
		w.member = true
		if err := os.WriteFile(w.marker, nil, 0o600); err != nil {
			n.log.Warn("could not record that this node is a member", "err", err)
		}
	case !in && w.member:
		return true
	}
	// A node that was added and removed between two looks never saw
	// itself a member: it asks too. A node that waits to be added knows no
	// leader to ask.
	rs := n.rep.Status()
	if w.asking != nil || rs.Role == replica.RoleLeader {
		return false
	}
	st, err := n.rep.State()
	if err != nil || st.LeaderAddr == "" || st.Leader == name {
		return false
	}
	want := confirmedLeader{name: st.Leader, addr: st.LeaderAddr, term: rs.Term}
	since := time.Since(w.lastAsk)
	switch {
	case rs.Leader != "" && rs.Leader == st.Leader:
		// Confirm the leader the applied state names, then ask it again
		// now and then, to announce this node and learn the others.
		n.dir.mu.Lock()
		confirmed := n.dir.leader == want
		n.dir.mu.Unlock()
		if w.asked != want {
			w.asked, w.retry = want, confirmRetry
		}
		if confirmed && since < announceEvery || !confirmed && since < w.retry {
			return false
		}
		if !confirmed {
			w.retry = min(2*w.retry, announceEvery)
		}
	case time.Since(rs.LastContact) < orphanAfter || since < orphanAfter:
		return false
	}
	w.lastAsk = time.Now()
	w.asking = make(chan bool, 1)
	go func() { w.asking <- n.listedBy(w.ctx, want) == errUnlisted }()
	return false
}

// errUnlisted is listedBy's answer when the node asked lists the members
// and this node is not one of them.
var errUnlisted = errors.New("not a member")

// announceEvery is how often a follower asks the leader it confirmed for
// the member list again, announcing its own client address; confirmRetry
// is how soon it first asks again while it has not confirmed the leader
// (then twice as long each time, up to announceEvery).
const (
	announceEvery = 30 * time.Second
	confirmRetry  = 200 * time.Millisecond
)

// listedBy asks the node at client address leader.addr, within askWait,
// for its status and for the member list, announcing this node's client
// address (NoteMember, on that node). If the node answers that it is
// leader.name, leads in raft term leader.term and serves clients
// (EndpointStatusReply.Serving), this node confirms it
// (leaderAddr names it from then on); the client addresses the list gives
// go into this node's directory. It returns errUnlisted if the node lists
// members but not this node, nil if it lists this node, or why it could
// not tell. The membership watch calls it.
func (n *Node) listedBy(ctx context.Context, leader confirmedLeader) error {
	ctx, cancel := context.WithTimeout(ctx, askWait)
	defer cancel()
	name := n.cfg.Cluster.Name
	adm, err := client.DialAdmin(ctx, leader.addr, n.adminConfig())
	if err != nil {
		return err
	}
	defer adm.Close()
	st, err := adm.Status(ctx)
	if err != nil {
		return err
	}
	if st.Name == leader.name && st.Role == replica.RoleLeader && st.RaftTerm == leader.term && st.Serving {
		n.dir.mu.Lock()
		n.dir.leader = leader
		n.dir.mu.Unlock()
	}
	ms, err := adm.Announce(ctx, name, n.host.ClientAddr())
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return errors.New("no members listed")
	}
	listed := false
	for _, m := range ms {
		switch {
		case m.Name == name:
			listed = true
		case m.ClientAddr != "":
			n.dir.note(m.Name, m.ClientAddr)
		}
	}
	if listed {
		return nil
	}
	n.log.Warn("the leader this node last knew no longer lists it", "leader_addr", leader.addr)
	return errUnlisted
}
