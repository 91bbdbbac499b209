package replica

import "github.com/hashicorp/raft"

// RaftOf is n's raft, for the tests of package replica_test that drive raft
// itself (snapshots, leadership transfers to a chosen node).
func RaftOf(n *Node) *raft.Raft { return n.raft }
