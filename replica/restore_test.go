package replica_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// snapshotOf streams a snapshot of n's applied state.
func snapshotOf(t *testing.T, n *replica.Node) []byte {
	t.Helper()
	s, err := n.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Release()
	var buf bytes.Buffer
	if _, err := s.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestRestoreNewCluster: three nodes restored from one node's snapshot,
// with the configuration of a new cluster, elect a leader with nothing
// bootstrapped; every node holds every key at its version, the write
// lease and the horizon; the counters are raised by the bump, so the next
// write and write lease are numbered above anything restored.
func TestRestoreNewCluster(t *testing.T) {
	t.Parallel()
	old := newRealTimeCluster(t, 1, nil)
	l := old.leader()
	big := bytes.Repeat([]byte("v"), 200<<10)
	mustApply(t, l, put("a", "1"), put("b", string(big)), put("a", "2"),
		store.Command{Op: store.OpGrantWriteLease, Key: []byte("w"), Session: 7, Term: time.Second},
		store.Command{Op: store.OpSetHorizon, Horizon: time.Unix(2000000000, 0), Span: time.Minute})
	snap := snapshotOf(t, l)
	want, err := l.State()
	if err != nil {
		t.Fatal(err)
	}

	const bump = 1000
	c := &cluster{t: t, dirs: map[raft.ServerID]string{}, nodes: map[raft.ServerID]*replica.Node{},
		trans: map[raft.ServerID]*raft.InmemTransport{}}
	var servers []replica.Member
	for _, id := range ids(3) {
		c.dirs[id] = filepath.Join(t.TempDir(), "data")
		servers = append(servers, replica.Member{ID: string(id), Address: string(id)})
	}
	var digest store.Digest
	for i, id := range ids(3) {
		sum, err := replica.Restore(c.dirs[id], bytes.NewReader(snap), servers, bump, quiet())
		if err != nil {
			t.Fatalf("restore %s: %v", id, err)
		}
		if i > 0 && sum.Digest != digest {
			t.Errorf("%s restored digest %s, %s the first", id, sum.Digest, digest)
		}
		digest = sum.Digest
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.Close()
		}
	})
	c.change = func(cfg *replica.Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, 500*time.Millisecond
	}
	for _, id := range ids(3) {
		c.start(id, nil) // nothing to bootstrap: raft starts from the snapshot
	}
	nl := c.leader()
	if got := replica.RaftOf(nl).GetConfiguration().Configuration().Servers; len(got) != 3 {
		t.Errorf("configuration of the restored cluster: %+v", got)
	}
	for _, n := range c.nodes {
		st, err := n.State()
		if err != nil {
			t.Fatal(err)
		}
		if st.Revision != want.Revision+bump || st.Fence != want.Fence+bump || !st.Horizon.Equal(want.Horizon) ||
			st.Span != want.Span || len(st.WriteLeases) != 1 || st.WriteLeases[0].Token != 1 || st.HorizonApplied.IsZero() {
			t.Errorf("restored state %+v, snapshot's %+v", st, want)
		}
		for k, v := range map[string]struct {
			value   []byte
			version uint64
		}{"a": {[]byte("2"), 3}, "b": {big, 2}} {
			r, err := n.Get([]byte(k))
			if err != nil || !bytes.Equal(r.Value, v.value) || r.Version != v.version {
				t.Errorf("%q: version %d, %d bytes (%v); want version %d", k, r.Version, len(r.Value), err, v.version)
			}
		}
	}
	rs := mustApply(t, nl, put("a", "3"), store.Command{Op: store.OpGrantWriteLease, Key: []byte("x"), Session: 1, Term: time.Second})
	if rs[0].Version != want.Revision+bump+1 || rs[1].Token != want.Fence+bump+1 {
		t.Errorf("first write and grant of the restored cluster: %+v", rs)
	}
	c.converge(nl)
	c.wantSame(nl, "a", "b")
}

// TestRestoreRefuses: a data folder that holds anything is refused and left
// alone; a stream cut short or corrupt is refused with ErrCorruptSnapshot,
// and the folder is left as it was found, missing or empty.
func TestRestoreRefuses(t *testing.T) {
	t.Parallel()
	old := newRealTimeCluster(t, 1, nil)
	l := old.leader()
	mustApply(t, l, put("a", "1"), put("b", string(bytes.Repeat([]byte("v"), 100<<10))))
	good := snapshotOf(t, l)
	servers := []replica.Member{{ID: "n1", Address: "n1"}}

	used := t.TempDir()
	if err := os.WriteFile(filepath.Join(used, "keep"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := replica.Restore(used, bytes.NewReader(good), servers, 0, quiet()); !errors.Is(err, replica.ErrNotEmpty) {
		t.Errorf("restore into a folder with a file: %v, want ErrNotEmpty", err)
	}
	if es, _ := os.ReadDir(used); len(es) != 1 {
		t.Errorf("the refused folder holds %d entries, want its one file", len(es))
	}

	flipped := bytes.Clone(good)
	flipped[len(flipped)/3] ^= 1
	for name, data := range map[string][]byte{
		"empty":     nil,
		"cut short": good[:len(good)/2],
		"flipped":   flipped,
	} {
		missing := filepath.Join(t.TempDir(), "new")
		if _, err := replica.Restore(missing, bytes.NewReader(data), servers, 0, quiet()); !errors.Is(err, store.ErrCorruptSnapshot) {
			t.Errorf("%s, into a new folder: %v, want ErrCorruptSnapshot", name, err)
		}
		if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: the new folder was left behind: %v", name, err)
		}
		empty := t.TempDir()
		if _, err := replica.Restore(empty, bytes.NewReader(data), servers, 0, quiet()); !errors.Is(err, store.ErrCorruptSnapshot) {
			t.Errorf("%s, into an empty folder: %v, want ErrCorruptSnapshot", name, err)
		}
		if es, _ := os.ReadDir(empty); len(es) != 0 {
			t.Errorf("%s: the empty folder holds %d entries after the refusal", name, len(es))
		}
	}
}
