package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/internal/version"
	"github.com/leased/leased/protocol"
)

// Cluster administration (DESIGN §13): the admin session that any node
// accepts, the membership changes that the leader makes through raft, and
// the one place a leader hands over the lead.

// ErrRemoved is returned by Serve when this node was removed from its
// cluster: it no longer serves, and its process should exit.
var ErrRemoved = errors.New("leased: this node was removed from the cluster")

// Errors of the membership changes.
var (
	errUnknownMember = errors.New("unknown member")
	errNotCluster    = fmt.Errorf("%w: this server is not a node of a cluster (start it with --peer-listen)", errInvalidArgument)
)

// membershipWait bounds how long raft may take to commit a membership
// change.
const membershipWait = 10 * time.Second

// handOffWait bounds the leadership transfer of a graceful shutdown.
const handOffWait = 2 * time.Second

// memberPoll is how many lead polls pass between two checks that this node
// is still a member of its cluster.
const memberPoll = 10

// serveAdmin serves an admin session (Hello.Admin) after its hello: status
// and member list on any node, membership changes on the leader. Requests
// are served one at a time, in order. The session's run calls it.
func (ss *session) serveAdmin(fr *protocol.FrameReader) {
	s := ss.srv
	// An admin session holds no leases: it leaves the core at once, and
	// does not end with the core's term of leadership.
	s.smu.Lock()
	c := ss.core
	ss.core = nil
	s.smu.Unlock()
	if c != nil {
		c.CloseSession(ss.id, true, nil)
	}
	ss.replies.send(ss.helloReply())
	ctx := ss.conn.Context()
	for {
		m, err := ss.read(fr)
		switch {
		case err == nil:
		case errors.Is(err, protocol.ErrMalformed):
			ss.replies.send(errorReply(0, err))
			continue
		case errors.Is(err, protocol.ErrFrameTooLarge), errors.Is(err, errProtocol):
			ss.replies.send(errorReply(0, err))
			ss.replies.flush(s.cfg.HelloTimeout)
			ss.closeWith(err)
			return
		default:
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				s.log.Debug("admin session read failed", "err", err)
			}
			ss.closeWith(fmt.Errorf("%w: request stream ended", errClosed))
			return
		}
		id, _ := protocol.RequestID(m)
		if err := ss.authorize(m); err != nil {
			ss.replies.send(errorReply(id, err))
			continue
		}
		var reply protocol.Message
		switch m := m.(type) {
		case *protocol.EndpointStatus:
			st := s.Status()
			st.ID = m.ID
			reply = st
		case *protocol.MemberList:
			members, err := s.Members()
			reply = &protocol.MemberListReply{ID: m.ID, Members: members}
			if err != nil {
				reply = errorReply(m.ID, err)
			}
		case *protocol.MemberAdd:
			reply = okOrError(m.ID, s.AddMember(ctx, m.Name, m.PeerAddr))
		case *protocol.MemberRemove:
			reply = okOrError(m.ID, s.RemoveMember(ctx, m.Name))
		case *protocol.MemberTransfer:
			reply = okOrError(m.ID, s.TransferLead(ctx, m.To))
		case *protocol.SnapshotSave:
			reply = ss.saveSnapshot(m)
		case *protocol.Stats:
			st := s.Stats()
			st.ID = m.ID
			reply = st
		case *protocol.Goodbye:
			ss.replies.send(&protocol.OK{ID: m.ID})
			ss.farewell()
			return
		default:
			reply = errorReply(id, fmt.Errorf("%w: %s is not a request of an admin session", errProtocol, m.Type()))
		}
		ss.replies.send(reply)
	}
}

// okOrError is OK for request id, or the Error reply for err.
func okOrError(id uint64, err error) protocol.Message {
	if err != nil {
		if nl := (notLeaderError{}); errors.As(err, &nl) {
			e := notLeaderReply(err)
			e.ID = id
			return e
		}
		return errorReply(id, err)
	}
	return &protocol.OK{ID: id}
}

// Status returns this node's status: its role, raft term and indexes, the
// leader it knows, and, on the leader, how long it still holds writes.
// A server that is not a node of a cluster reports itself as the leader of
// a cluster of one. Admin sessions and tests call it.
func (s *Server) Status() *protocol.EndpointStatusReply {
	st := &protocol.EndpointStatusReply{ClientAddr: s.Addr().String(), Alarm: s.alarm(), Version: version.String()}
	if p := s.Policy(); p != nil {
		st.Policy = p.Digest()
	}
	if c := s.currentCore(); c != nil {
		st.WritesHeldFor = c.WritesAllowedIn()
	}
	if s.node == nil {
		st.Name, st.Role, st.Leader, st.LeaderAddr = nodeName, protocol.RoleLeader, nodeName, st.ClientAddr
		return st
	}
	r := s.node.Raft()
	st.Name, st.PeerAddr = s.cfg.Cluster.Name, s.cfg.Cluster.PeerAddr
	switch r.State() {
	case raft.Leader:
		st.Role = protocol.RoleLeader
	case raft.Candidate:
		st.Role = protocol.RoleCandidate
	case raft.Follower:
		st.Role = protocol.RoleFollower
	default:
		st.Role = "shutdown"
	}
	st.RaftTerm, st.CommitIndex, st.AppliedIndex = r.CurrentTerm(), r.CommitIndex(), r.AppliedIndex()
	_, leader := r.LeaderWithID()
	st.Leader = string(leader)
	switch {
	case st.Leader == st.Name:
		st.LeaderAddr = st.ClientAddr
	case st.Leader != "":
		if ns, err := s.node.State(); err == nil && ns.Leader == st.Leader {
			st.LeaderAddr = ns.LeaderAddr
		}
	}
	return st
}

// configuration returns the latest raft configuration this node knows.
func (s *Server) configuration() ([]raft.Server, error) {
	f := s.node.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("%w: raft configuration: %v", errUnavailable, err)
	}
	return f.Configuration().Servers, nil
}

// Members returns the members of the cluster as this node's latest raft
// configuration has them, in its order, and marks the one it takes to
// lead. Admin sessions and tests call it.
func (s *Server) Members() ([]protocol.Member, error) {
	if s.node == nil {
		return []protocol.Member{{Name: nodeName, Voter: true, Leads: true}}, nil
	}
	servers, err := s.configuration()
	if err != nil {
		return nil, err
	}
	_, leader := s.node.Raft().LeaderWithID()
	out := make([]protocol.Member, 0, len(servers))
	for _, sv := range servers {
		out = append(out, protocol.Member{Name: string(sv.ID), PeerAddr: string(sv.Address),
			Voter: sv.Suffrage == raft.Voter, Leads: sv.ID == leader && leader != ""})
	}
	return out, nil
}

// leaderConfiguration returns the latest configuration, or an error that
// names the leader if this node does not lead.
func (s *Server) leaderConfiguration() ([]raft.Server, error) {
	if s.node == nil {
		return nil, errNotCluster
	}
	if !s.node.IsLeader() {
		return nil, s.notLeader()
	}
	return s.configuration()
}

// AddMember adds a voter named name, which its peers reach at peerAddr,
// and returns once the new configuration is committed (within ctx and
// membershipWait). The new node must have started with no bootstrap
// (Cluster.Join). Only the leader adds; another node returns an error with
// the leader's client address.
func (s *Server) AddMember(ctx context.Context, name, peerAddr string) error {
	if name == "" || peerAddr == "" {
		return fmt.Errorf("%w: a member needs a name and a peer address", errInvalidArgument)
	}
	if _, _, err := net.SplitHostPort(peerAddr); err != nil {
		return fmt.Errorf("%w: peer address %q: want host:port", errInvalidArgument, peerAddr)
	}
	servers, err := s.leaderConfiguration()
	if err != nil {
		return err
	}
	for _, sv := range servers {
		switch {
		case string(sv.ID) == name:
			return fmt.Errorf("%w: %q is already a member, at %s", errInvalidArgument, name, sv.Address)
		case string(sv.Address) == peerAddr:
			return fmt.Errorf("%w: member %q is already at %s", errInvalidArgument, sv.ID, peerAddr)
		}
	}
	f := s.node.Raft().AddVoter(raft.ServerID(name), raft.ServerAddress(peerAddr), 0, membershipWait)
	if err := s.waitRaft(ctx, f); err != nil {
		return fmt.Errorf("add member %q: %w", name, err)
	}
	s.log.Info("member added", "member", name, "peer_addr", peerAddr)
	return nil
}

// RemoveMember removes member name and returns once the new configuration
// is committed. It refuses to remove the last voter. The removed node,
// when it learns of it, stops serving (ErrRemoved). Only the leader
// removes.
func (s *Server) RemoveMember(ctx context.Context, name string) error {
	servers, err := s.leaderConfiguration()
	if err != nil {
		return err
	}
	found := false
	for _, sv := range servers {
		if string(sv.ID) != name {
			continue
		}
		found = true
		if sv.Suffrage == raft.Voter && countVoters(servers) == 1 {
			return fmt.Errorf("%w: %q is the last voter of the cluster; removing it is refused", errInvalidArgument, name)
		}
	}
	if !found {
		return fmt.Errorf("%w: no member is named %q", errUnknownMember, name)
	}
	f := s.node.Raft().RemoveServer(raft.ServerID(name), 0, membershipWait)
	if err := s.waitRaft(ctx, f); err != nil {
		return fmt.Errorf("remove member %q: %w", name, err)
	}
	s.log.Info("member removed", "member", name)
	return nil
}

func countVoters(servers []raft.Server) int {
	n := 0
	for _, sv := range servers {
		if sv.Suffrage == raft.Voter {
			n++
		}
	}
	return n
}

// TransferLead hands the lead of the cluster to voter to, or, if to is
// empty, to the voter raft picks, and returns once this node no longer
// leads or the transfer failed (raft bounds it by its election timeout;
// ctx may end it sooner). It is the one place a leader hands over:
// `leasectl member transfer` and a graceful Shutdown call it.
func (s *Server) TransferLead(ctx context.Context, to string) error {
	servers, err := s.leaderConfiguration()
	if err != nil {
		return err
	}
	self := s.cfg.Cluster.Name
	var target *raft.Server
	others := 0
	for i, sv := range servers {
		if string(sv.ID) != self && sv.Suffrage == raft.Voter {
			others++
		}
		if string(sv.ID) == to {
			target = &servers[i]
		}
	}
	switch {
	case to == self:
		return fmt.Errorf("%w: %q already leads", errInvalidArgument, to)
	case to != "" && target == nil:
		return fmt.Errorf("%w: no member is named %q", errUnknownMember, to)
	case target != nil && target.Suffrage != raft.Voter:
		return fmt.Errorf("%w: %q does not vote, and cannot lead", errInvalidArgument, to)
	case others == 0:
		return fmt.Errorf("%w: no other voter to hand the lead to", errInvalidArgument)
	}
	start := time.Now()
	// The leases go to the next leader through the log first, so that it
	// need not wait for this node's horizon (DESIGN §13). From here on
	// this node grants no lease and serves no read; it resumes if the
	// transfer fails.
	c := s.currentCore()
	if c == nil {
		return s.notLeader()
	}
	if err := c.HandOff(); err != nil {
		return err
	}
	r := s.node.Raft()
	var f raft.Future
	if target != nil {
		f = r.LeadershipTransferToServer(target.ID, target.Address)
	} else {
		f = r.LeadershipTransfer()
	}
	if err := s.waitRaft(ctx, f); err != nil {
		c.Resume()
		return fmt.Errorf("transfer the lead: %w", err)
	}
	// The new leader is known here once its first heartbeat arrives:
	// wait for it a little, so that the caller can ask who leads.
	var leader raft.ServerID
	t := time.NewTicker(leadPoll)
	defer t.Stop()
	give := time.NewTimer(handOffWait)
	defer give.Stop()
	for {
		if _, leader = r.LeaderWithID(); leader != "" && string(leader) != self {
			break
		}
		select {
		case <-t.C:
			continue
		case <-give.C:
		case <-ctx.Done():
		case <-s.stop:
		}
		break
	}
	s.log.Info("handed the lead over", "node", self, "to", string(leader), "took", time.Since(start))
	return nil
}

// handOff is the first step of a graceful Shutdown of a node that leads a
// cluster with other voters: it transfers the lead, within handOffWait,
// so that clients move to the new leader at once. On failure it logs and
// the shutdown goes on.
func (s *Server) handOff(ctx context.Context) {
	if s.node == nil || !s.node.IsLeader() {
		return
	}
	servers, err := s.configuration()
	if err != nil || countVoters(servers) < 2 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, handOffWait)
	defer cancel()
	if err := s.TransferLead(ctx, ""); err != nil {
		s.log.Warn("could not hand the lead over before shutting down", "err", err)
	}
}

// waitRaft waits for a raft future within ctx, and turns raft's errors into
// the server's. If ctx ends first, the future is left to raft, which
// resolves it within its own timeout.
func (s *Server) waitRaft(ctx context.Context, f raft.Future) error {
	done := make(chan error, 1)
	go func() { done <- f.Error() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		return fmt.Errorf("%w: %v", errUnavailable, ctx.Err())
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost):
		return s.notLeader()
	}
	return fmt.Errorf("%w: %v", errUnavailable, err)
}

// orphanAfter is how long a member goes without hearing from a leader
// before it asks the last leader it knew whether it is still a member,
// and how long it waits between two such questions.
const orphanAfter = 2 * time.Second

// askWait bounds one such question.
const askWait = time.Second

// memberWatch finds out, for lead, that this node was removed from its
// cluster. Usually the node learns it from the log: raft sends the removed
// node the configuration that leaves it out. But raft sends it only once,
// and a node that misses it hears from no leader again; so a member that
// has heard from no leader for orphanAfter asks the last leader it knew,
// in an admin session, for the member list. Only lead's goroutine calls
// its methods.
type memberWatch struct {
	s *Server
	// member: this node has been in the cluster's configuration, in this
	// process or, as the file marker records, in an earlier one. A node
	// that joins sees configurations without itself while it catches up.
	member  bool
	marker  string
	lastAsk time.Time // when the last question went out
	asking  chan bool // the answer to the question out; nil if none is
	ctx     context.Context
	cancel  context.CancelFunc
}

func (s *Server) watchMembership() *memberWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &memberWatch{s: s, ctx: ctx, cancel: cancel, marker: filepath.Join(s.cfg.Dir, layout.RaftDir, memberMarker)}
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
// leader it knew. lead calls it on every poll; it looks every memberPoll
// polls.
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
	s := w.s
	servers, err := s.configuration()
	if err != nil {
		return false
	}
	in := false
	for _, sv := range servers {
		in = in || string(sv.ID) == s.cfg.Cluster.Name
	}
	switch {
	case in && !w.member:
		w.member = true
		if err := os.WriteFile(w.marker, nil, 0o600); err != nil {
			s.log.Warn("could not record that this node is a member", "err", err)
		}
	case !in && w.member:
		return true
	}
	// A node that was added and removed between two looks never saw
	// itself a member: it asks too. A node that waits to be added knows no
	// leader to ask.
	r := s.node.Raft()
	if w.asking != nil || r.State() == raft.Leader ||
		time.Since(r.LastContact()) < orphanAfter || time.Since(w.lastAsk) < orphanAfter {
		return false
	}
	st, err := s.node.State()
	if err != nil || st.LeaderAddr == "" || st.Leader == s.cfg.Cluster.Name {
		return false
	}
	w.lastAsk = time.Now()
	w.asking = make(chan bool, 1)
	go func() { w.asking <- s.listedBy(w.ctx, st.LeaderAddr) == errUnlisted }()
	return false
}

// errUnlisted is listedBy's answer when the node asked lists the members
// and this node is not one of them.
var errUnlisted = errors.New("not a member")

// listedBy asks the node at client address addr, within askWait, for the
// member list, and returns errUnlisted if it lists members but not this
// node, nil if it lists this node, or why it could not tell.
func (s *Server) listedBy(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, askWait)
	defer cancel()
	adm, err := client.DialAdmin(ctx, addr, client.Config{TLSConfig: s.cfg.Cluster.PeerClientTLS, Name: "leased " + s.cfg.Cluster.Name, Logger: s.log})
	if err != nil {
		return err
	}
	defer adm.Close()
	ms, err := adm.Members(ctx)
	if err != nil {
		return err
	}
	if len(ms) == 0 {
		return errors.New("no members listed")
	}
	for _, m := range ms {
		if m.Name == s.cfg.Cluster.Name {
			return nil
		}
	}
	s.log.Warn("heard from no leader lately, and the last one no longer lists this node", "leader_addr", addr)
	return errUnlisted
}

// ErrStateMachineStopped is returned by Serve when this node's state
// machine stopped applying the log (its database failed to apply a
// committed entry). The node stops serving, so that another node leads
// and its clients follow; a restart applies the log again.
var ErrStateMachineStopped = errors.New("leased: this node's state machine stopped applying the log; restart it to apply the log again")

// leaveOnFailure stops a node of a cluster whose state machine stopped:
// as a follower it could never catch up, and as a leader it would hold
// the lead and commit nothing, so it leaves raft at once, so that it
// neither keeps the lead nor wins it again, and stops serving; Serve
// returns ErrStateMachineStopped. lead calls it, and returns.
func (s *Server) leaveOnFailure(err error) {
	s.log.Error("this node's state machine stopped: it stops serving so that another node leads; restart it to apply the log again",
		"node", s.cfg.Cluster.Name, "err", err)
	if err := s.node.Raft().Shutdown().Error(); err != nil {
		s.log.Warn("raft did not shut down cleanly", "err", err)
	}
	s.leave(fmt.Errorf("%w: %w", ErrStateMachineStopped, err))
}

// leaveCluster stops a node that was removed from its cluster: it stops
// serving, and Serve returns ErrRemoved. lead calls it, and returns.
func (s *Server) leaveCluster() {
	s.log.Error("this node was removed from the cluster: it stops serving; remove its data folder before it joins again", "node", s.cfg.Cluster.Name)
	s.leave(ErrRemoved)
}

// leave stops serving: it drops the lead, if this node has it, and closes
// the server; Serve then returns why.
func (s *Server) leave(why error) {
	s.left.Store(&why)
	if c := s.currentCore(); c != nil {
		s.dropLead(c)
	}
	s.beginClose()
}
