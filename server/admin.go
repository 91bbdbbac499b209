package server

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/leased/leased/internal/version"
	"github.com/leased/leased/node"
	"github.com/leased/leased/protocol"
)

// The admin session that any node accepts (DESIGN §13): status and member
// list on any node, membership changes and backups on the leader, each
// served by calling the node (package node).

// goneAway reports whether the server told the admin session to go
// (goAway); if so, it closes the session's connection once the replies
// queued are written (within HelloTimeout).
func (ss *session) goneAway() bool {
	ss.mu.Lock()
	leaving := ss.leaving
	ss.mu.Unlock()
	if leaving {
		ss.replies.flush(ss.srv.cfg.HelloTimeout)
		ss.closeWith(fmt.Errorf("%w: the server is shutting down", errClosed))
	}
	return leaving
}

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
		if ss.goneAway() {
			return
		}
		m, err := ss.read(fr)
		switch {
		case ss.goneAway():
			return
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
			if m.From != "" {
				// A node of the cluster announces its client address.
				if err := s.node.NoteMember(ctx, m.From, m.FromAddr); err != nil {
					s.log.Debug("a member's client address was not noted", "member", m.From, "client_addr", m.FromAddr, "err", err)
				}
			}
			members, err := s.Members()
			reply = &protocol.MemberListReply{ID: m.ID, Members: members}
			if err != nil {
				reply = errorReply(m.ID, err)
			}
		case *protocol.MemberAdd:
			reply = okOrError(m.ID, s.node.AddMember(ctx, m.Name, m.PeerAddr))
		case *protocol.MemberRemove:
			reply = okOrError(m.ID, s.node.RemoveMember(ctx, m.Name))
		case *protocol.MemberTransfer:
			reply = okOrError(m.ID, s.node.TransferLead(ctx, m.To))
		case *protocol.SnapshotSave:
			reply = ss.saveSnapshot(m)
		case *protocol.Compact:
			reply = s.compact(m)
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

// compact compacts the event history through m.Revision, on the leader
// (core.Core.Compact), and answers with its state after.
func (s *Server) compact(m *protocol.Compact) protocol.Message {
	c := s.node.Core()
	if c == nil {
		return okOrError(m.ID, s.node.NotLeader())
	}
	h, err := c.Compact(m.Revision)
	if err != nil {
		return errorReply(m.ID, err)
	}
	return &protocol.CompactReply{ID: m.ID, Compacted: h.Compacted, Bytes: h.Bytes, Events: h.Events}
}

// okOrError is OK for request id, or the Error reply for err.
func okOrError(id uint64, err error) protocol.Message {
	if err != nil {
		if nl := (node.NotLeaderError{}); errors.As(err, &nl) {
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
	ns := s.node.Status()
	st := &protocol.EndpointStatusReply{ClientAddr: s.Addr().String(), Alarm: s.node.Alarm(), DiskAlarm: s.node.NoSpace(), Version: version.String(),
		Name: ns.Name, PeerAddr: ns.PeerAddr, Role: ns.Role, RaftTerm: ns.RaftTerm, CommitIndex: ns.CommitIndex,
		AppliedIndex: ns.AppliedIndex, Leader: ns.Leader, LeaderAddr: ns.LeaderAddr, Revision: ns.Revision, Compacted: ns.Compacted}
	if p := s.Policy(); p != nil {
		st.Policy = p.Digest()
	}
	if c := s.node.Core(); c != nil {
		st.WritesHeldFor = c.WritesAllowedIn()
		st.Serving = true
	}
	return st
}

// Members returns the members of the cluster as this node's latest raft
// configuration has them, in its order, marks the one it takes to lead,
// and gives the client address of each that it knows. Admin sessions and tests call it.
func (s *Server) Members() ([]protocol.Member, error) {
	ms, err := s.node.Members()
	if err != nil {
		return nil, err
	}
	out := make([]protocol.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, protocol.Member{Name: m.Name, PeerAddr: m.PeerAddr, Voter: m.Voter, Leads: m.Leads, ClientAddr: m.ClientAddr})
	}
	return out, nil
}

// TransferLead hands the lead to voter to, or to the one raft picks if to
// is empty (node.Node.TransferLead), as `leasectl member transfer` does.
func (s *Server) TransferLead(ctx context.Context, to string) error {
	return s.node.TransferLead(ctx, to)
}
