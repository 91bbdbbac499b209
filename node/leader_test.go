package node

import (
	"fmt"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/internal/tlsfiles"
	"github.com/leased/leased/replica"
)

// addrHost is a host that gives addr as its client address, where no
// leased serves.
type addrHost struct {
	host
	addr string
}

func (h *addrHost) ClientAddr() string { return h.addr }

// silentAddr returns a UDP address on 127.0.0.1 where nothing answers: a
// socket bound, then closed.
func silentAddr(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

// startNodes starts a cluster of k nodes in this process, with raft on
// real TCP and mutual TLS, each with a host from hostFor, and closes them
// in t.Cleanup.
func startNodes(t *testing.T, k int, hostFor func(name string) Host) map[string]*Node {
	t.Helper()
	caDir := t.TempDir()
	if err := tlsfiles.CreateCA(caDir); err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(caDir, tlsfiles.CAFileName)
	lns := make(map[string]net.Listener, k)
	var peers []Peer
	for i := 1; i <= k; i++ {
		name := fmt.Sprintf("n%d", i)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[name] = ln
		peers = append(peers, Peer{Name: name, Addr: ln.Addr().String()})
	}
	nodes := make(map[string]*Node, k)
	t.Cleanup(func() {
		for _, n := range nodes {
			n.Close()
		}
	})
	for _, p := range peers {
		cert, key, err := tlsfiles.IssueNode(caDir, t.TempDir(), p.Name, nil)
		if err != nil {
			t.Fatal(err)
		}
		srv, cli, err := tlsfiles.PeerTLS(caFile, cert, key)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		cfg := Config{Dir: dir, Core: coreConfig(dir), QuotaBytes: -1, ReserveBytes: -1, Logger: quiet(),
			Cluster: &Cluster{Name: p.Name, PeerAddr: p.Addr, PeerListener: lns[p.Name], Peers: peers,
				PeerTLS: srv, PeerClientTLS: cli,
				Replica: replica.Config{HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond,
					LeaderLeaseTimeout: 250 * time.Millisecond}}}
		n, err := open(cfg, hostFor(p.Name))
		if err != nil {
			t.Fatalf("node %s: %v", p.Name, err)
		}
		nodes[p.Name] = n
		n.Start()
	}
	return nodes
}

// TestFollowerNamesNoUnconfirmedLeader: a follower names the leader to a
// client only once the node at the client address the log records for the
// leader has answered, in this raft term, that it is that leader and
// serves (DESIGN §13). Here every leader records an address where nothing
// answers, as a leader that restarted at another address, or whose record
// a node applied from an earlier term, would leave it: the followers
// know the leader and its recorded address, and must still name no
// leader rather than send clients there.
func TestFollowerNamesNoUnconfirmedLeader(t *testing.T) {
	addrs := make(map[string]string)
	nodes := startNodes(t, 3, func(name string) Host {
		addrs[name] = silentAddr(t)
		return &addrHost{addr: addrs[name]}
	})
	var leader string
	wait.For(t, 20*time.Second, "a node to lead", func() bool {
		for name, n := range nodes {
			if n.Leads() {
				leader = name
				return true
			}
		}
		return false
	})
	// Each follower knows the leader from raft and has applied its record.
	for name, n := range nodes {
		if name == leader {
			continue
		}
		wait.For(t, 20*time.Second, "follower "+name+" to apply the leader's record", func() bool {
			st, err := n.rep.State()
			return err == nil && n.rep.Leader() == leader && st.Leader == leader && st.LeaderAddr == addrs[leader]
		})
	}
	// The membership watch asks the recorded address within a few lead
	// polls, and again and again while no answer comes; none ever will.
	deadline := time.Now().Add(3 * confirmRetry * 4)
	for time.Now().Before(deadline) {
		for name, n := range nodes {
			if name == leader {
				continue
			}
			err := n.NotLeader()
			nl, ok := err.(NotLeaderError)
			if !ok {
				t.Fatalf("follower %s: NotLeader is %T %v", name, err, err)
			}
			if nl.Leader != "" {
				t.Fatalf("follower %s names %s as the leader's address, which no node confirmed", name, nl.Leader)
			}
			if st := n.Status(); st.Leader != leader || st.LeaderAddr != "" {
				t.Fatalf("follower %s: status names leader %q at %q; want %q at no address", name, st.Leader, st.LeaderAddr, leader)
			}
		}
		time.Sleep(leadPoll)
	}
}
