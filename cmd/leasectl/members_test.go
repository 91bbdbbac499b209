package main

import (
	"errors"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/internal/version"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// clusterCtl runs leasectl against cl with --endpoints eps.
func clusterCtl(t *testing.T, cl *testkit.Cluster, eps string, args ...string) clitest.Result {
	t.Helper()
	return clitest.Cmd{}.Run(t, bins.Leasectl, append([]string{"--endpoints", eps, "--cacert", cl.CAFile}, args...)...)
}

// TestEndpointStatusAndMemberList: endpoint status asks every endpoint,
// followers too, and shows one that does not answer as unreachable (exit
// status 3) without dropping the others; member list shows the members
// from the leader; status adds every member's status.
func TestEndpointStatusAndMemberList(t *testing.T) {
	t.Parallel()
	cl := testkit.NewCluster(t, 3, server.Config{Cluster: testkit.RelaxedRaft(), LeaseTerm: time.Second})
	leader := cl.Leader()

	var st struct {
		Endpoints []endpointJSON `json:"endpoints"`
	}
	decode(t, clusterCtl(t, cl, cl.Endpoints(), "-o", "json", "endpoint", "status"), &st)
	if len(st.Endpoints) != 3 {
		t.Fatalf("endpoint status: %+v", st)
	}
	for i, e := range st.Endpoints {
		name := "n" + strconv.Itoa(i+1)
		wantRole := protocol.RoleFollower
		if name == leader {
			wantRole = protocol.RoleLeader
		}
		if e.Name != name || e.Endpoint != cl.Addrs[name] || e.ClientAddr != cl.Addrs[name] || e.PeerAddr == "" || e.Role != wantRole ||
			e.RaftTerm == 0 || e.AppliedIndex == 0 || e.Leader != leader || e.Error != "" ||
			(e.WritesHeldUntil != "") != (e.WritesHeldForSeconds > 0) {
			t.Errorf("endpoint %d: %+v; %s leads", i, e, leader)
		}
	}
	peers := map[string]string{}
	for _, e := range st.Endpoints {
		peers[e.Name] = e.PeerAddr
	}

	udp, err := clitest.FreeUDPPort()
	if err != nil {
		t.Fatal(err)
	}
	dead := net.JoinHostPort("127.0.0.1", strconv.Itoa(udp))
	r := clusterCtl(t, cl, cl.Endpoints()+","+dead, "--timeout", "2s", "endpoint", "status")
	if r.Code != exitUnavailable || !strings.HasPrefix(r.Stderr, "Error: ") || !strings.Contains(r.Stderr, "1 of 4 unreachable") || !strings.Contains(r.Stderr, dead) {
		t.Errorf("an unreachable endpoint: status %d, stderr %q", r.Code, r.Stderr)
	}
	rows := table(t, r.Stdout)
	if len(rows) != 5 || strings.Join(rows[0], " ") != "ENDPOINT NAME CLIENT_ADDR PEER_ADDR ROLE RAFT_TERM COMMIT APPLIED LEADER VERSION POLICY WRITES" ||
		rows[4][0] != dead || rows[4][4] != "unreachable" {
		t.Fatalf("endpoint status with an unreachable endpoint: %q", rows)
	}
	for _, row := range rows[1:4] {
		name := row[1]
		// WRITES is "-" on a follower, and "allowed" or "until T (Ns)" on
		// the leader.
		writes := strings.Join(row[11:], " ")
		okWrites := writes == "-"
		if name == leader {
			okWrites = writes == "allowed" || regexp.MustCompile(`^until \d\d:\d\d:\d\d\.\d{3} \(\d+\.\ds\)$`).MatchString(writes)
		}
		if row[0] != cl.Addrs[name] || row[2] != cl.Addrs[name] || row[3] != peers[name] ||
			(row[4] != protocol.RoleLeader && row[4] != protocol.RoleFollower) || row[8] != leader || !okWrites ||
			row[9] != version.String() || row[10] != "-" {
			t.Errorf("row %q; %s leads", row, leader)
		}
	}

	// member list from a follower alone: it names the leader, which answers.
	f := follower(cl, leader)
	rows = table(t, ok(t, clusterCtl(t, cl, cl.Addrs[f], "member", "list")).Stdout)
	if len(rows) != 4 || strings.Join(rows[0], " ") != "NAME PEER_ADDR SUFFRAGE LEADER" {
		t.Fatalf("member list: %q", rows)
	}
	leads := 0
	for _, row := range rows[1:] {
		if row[2] != "voter" {
			t.Errorf("member %q", row)
		}
		if row[3] == "true" {
			leads++
			if row[0] != leader {
				t.Errorf("member list marks %s as the leader; %s leads", row[0], leader)
			}
		}
	}
	if leads != 1 {
		t.Errorf("member list marks %d leaders: %q", leads, rows)
	}
	var ml struct {
		Members []memberJSON `json:"members"`
	}
	decode(t, clusterCtl(t, cl, cl.Endpoints(), "-o", "json", "member", "list"), &ml)
	if len(ml.Members) != 3 {
		t.Errorf("member list JSON: %+v", ml)
	}

	var sj statusJSON
	decode(t, clusterCtl(t, cl, cl.Endpoints(), "-o", "json", "status"), &sj)
	if len(sj.Members) != 3 {
		t.Fatalf("status members: %+v", sj.Members)
	}
	for _, m := range sj.Members {
		if m.Status == nil || m.Status.ClientAddr != cl.Addrs[m.Name] || m.Leader != (m.Name == leader) {
			t.Errorf("status member %+v", m)
		}
	}
	out := ok(t, clusterCtl(t, cl, cl.Endpoints(), "status")).Stdout
	if !strings.Contains(out, "MEMBER") || !strings.Contains(out, cl.Addrs[leader]) {
		t.Errorf("status of a cluster:\n%s", out)
	}
}

// TestMemberTransferAddRemove: member transfer hands the lead to the named
// voter, and to one raft picks without a name; member add adds a node
// that waits to join, and member remove stops it; bad changes fail with
// clear errors.
func TestMemberTransferAddRemove(t *testing.T) {
	t.Parallel()
	cl := testkit.NewCluster(t, 3, server.Config{Cluster: testkit.RelaxedRaft(), LeaseTerm: time.Second})
	leader := cl.Leader()
	to := follower(cl, leader)
	var tr struct{ From, To string }
	decode(t, clusterCtl(t, cl, cl.Endpoints(), "-o", "json", "member", "transfer", to), &tr)
	if tr.From != leader || tr.To != to {
		t.Errorf("transfer to %s: %+v", to, tr)
	}
	// The old leader's lead loop stops its core within a poll. (Who leads
	// next is not asserted beyond leasectl's answer: on a loaded machine
	// the lead may move again.)
	wait.For(t, stepWait, leader+" to stop serving", func() bool { return !cl.Nodes[leader].Leads() })
	decode(t, clusterCtl(t, cl, cl.Endpoints(), "-o", "json", "member", "transfer"), &tr)
	if tr.From == "" || tr.To == tr.From || tr.To == "" {
		t.Errorf("transfer without a name: %+v", tr)
	}

	fails(t, clusterCtl(t, cl, cl.Endpoints(), "member", "remove", "nope"), exitNotFound, `no member is named "nope"`)
	fails(t, clusterCtl(t, cl, cl.Endpoints(), "member", "add", "n1", "127.0.0.1:1"), exitUsage, "already a member")
	fails(t, clusterCtl(t, cl, cl.Endpoints(), "member", "add", "n9"), exitUsage, "add wants NAME PEER_ADDR")

	peer := cl.StartJoining("n4")
	ok(t, clusterCtl(t, cl, cl.Endpoints(), "member", "add", "n4", peer))
	rows := table(t, ok(t, clusterCtl(t, cl, cl.Endpoints(), "member", "list")).Stdout)
	if len(rows) != 5 {
		t.Errorf("member list after add: %q", rows)
	}
	ok(t, clusterCtl(t, cl, cl.Endpoints(), "member", "remove", "n4"))
	if err := cl.Served("n4", stepWait); !errors.Is(err, server.ErrRemoved) {
		t.Errorf("the removed node's Serve returned %v, want ErrRemoved", err)
	}
}

// stepWait bounds a wait on a real cluster for something that takes no
// lease time.
const stepWait = 10 * time.Second

// follower returns the name of a running node that does not lead.
func follower(cl *testkit.Cluster, leader string) string {
	for n := range cl.Nodes {
		if n != leader {
			return n
		}
	}
	return ""
}

// TestEndpointRowWrites: on the leader, WRITES shows the local time writes
// are held until and how long that is from when the table is printed;
// JSON has the same time in writes_held_until.
func TestEndpointRowWrites(t *testing.T) {
	at := time.Date(2030, 1, 2, 15, 4, 5, 0, time.Local)
	st := &client.NodeStatus{Name: "n1", ClientAddr: "127.0.0.1:7401", PeerAddr: "127.0.0.1:7501", Role: protocol.RoleLeader,
		RaftTerm: 3, CommitIndex: 9, AppliedIndex: 8, Leader: "n1", WritesHeldFor: 2300 * time.Millisecond,
		Version: "v1.2.3", Policy: "0123456789ab"}
	e := endpointOf("127.0.0.1:7401", st, at, nil)
	if want := at.Add(2300 * time.Millisecond).Format(heldUntilLayout); e.WritesHeldUntil != want || e.WritesHeldForSeconds != 2.3 {
		t.Errorf("held 2.3s at %v: until %q for %v, want until %q", at, e.WritesHeldUntil, e.WritesHeldForSeconds, want)
	}
	if got, want := strings.Join(e.row(at), "|"), "127.0.0.1:7401|n1|127.0.0.1:7401|127.0.0.1:7501|leader|3|9|8|n1|v1.2.3|0123456789ab|until 15:04:07.300 (2.3s)"; got != want {
		t.Errorf("row\n got %s\nwant %s", got, want)
	}
	if got := e.row(at.Add(time.Second))[11]; got != "until 15:04:07.300 (1.3s)" {
		t.Errorf("a second later: %q", got)
	}
	if got := e.row(at.Add(time.Minute))[11]; got != "until 15:04:07.300 (0.0s)" {
		t.Errorf("after the time: %q", got)
	}

	st.WritesHeldFor = 0
	e = endpointOf("127.0.0.1:7401", st, at, nil)
	if e.WritesHeldUntil != "" || e.row(at)[11] != "allowed" {
		t.Errorf("writes not held: %+v, row %q", e, e.row(at))
	}
	st.Role, st.Leader = protocol.RoleFollower, "n2"
	if got := endpointOf("127.0.0.1:7401", st, at, nil).row(at)[11]; got != "-" {
		t.Errorf("a follower's WRITES: %q", got)
	}
	if got := endpointOf("127.0.0.1:7409", nil, at, errors.New("leased: refused")).row(at); got[4] != "unreachable" || len(got) != len(endpointHeader) {
		t.Errorf("unreachable: %q", got)
	}
}
