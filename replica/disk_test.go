package replica_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/hashicorp/raft"

	"github.com/leased/leased/internal/testkit/wait"
	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// diskBytes is what the files under dir take on disk (allocated blocks,
// not apparent sizes: the log preallocates its segments).
func diskBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil // removed while the walk ran, as an old snapshot is
		}
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		n += fi.Sys().(*syscall.Stat_t).Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// openSolo opens a node that is a cluster of itself in dir and waits until
// it leads.
func openSolo(t *testing.T, dir string, change func(*replica.Config)) (*replica.Node, error) {
	t.Helper()
	_, tr := raft.NewInmemTransport("solo")
	cfg := replica.Config{Dir: dir, ID: "solo", Transport: tr, Logger: quiet()}
	if change != nil {
		change(&cfg)
	}
	n, err := replica.Open(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := n.WaitLeading(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

const mib = 1 << 20

// TestOverwritesUseBoundedDisk: overwriting one key with 1 MiB values 300
// times, with the history's retention at two revisions, keeps the data
// folder within a bound set by the configuration, not by the number of
// writes, and the garbage collector's schedule brings
// it down to little more than its fixed overheads. Before byte-bounded
// snapshots and value-log GC, the folder grew by every value written, twice
// (log and value log): 621 MiB after these 300 writes, which a restart
// kept.
//
// The configuration: log segments of 8 MiB, a snapshot every 8 MiB of
// entries keeping 8 MiB behind it, value-log files of 16 MiB. The bounds:
//   - the log holds at most SnapshotBytes + TrailingBytes of entries, plus
//     two segments (it drops whole ones only, and preallocates the one it
//     writes): 8 + 8 + 16 = 32 MiB, plus an entry of slack;
//   - the value log holds the file being written, the one before (the
//     collector flushes once a file is sealed), and the sealed files the
//     collector keeps, each at least half live: 16 + 16 + 2 × 1 MiB live,
//     plus what was written since its last run;
//   - two snapshots of the live set, and badger's tables and memtable:
//     a few MiB.
//
// So 80 MiB at the end of the writes (the collector runs every 50 ms,
// while the writes run), and, once it has run, 56 MiB: the value log down
// to the two newest files.
func TestOverwritesUseBoundedDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	change := func(c *replica.Config) {
		c.WALSegmentSize = 8 * mib
		c.SnapshotBytes, c.TrailingBytes = 8*mib, 8*mib
		c.GCInterval = 50 * time.Millisecond
		c.StoreOptions = []store.Option{func(o *badger.Options) { o.ValueLogFileSize = 16 * mib }}
	}
	n, err := openSolo(t, dir, change)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { n.Close() }()
	val := []byte(strings.Repeat("x", mib))
	var peak int64
	for i := range 300 {
		val[0] = byte(i)
		// The history keeps the last two revisions, as its retention
		// would on a leader (core's compaction), each value once more.
		mustApply(t, n, store.Command{Op: store.OpPut, Key: []byte("k"), Value: val},
			store.Command{Op: store.OpCompact, Through: uint64(max(i-1, 0))})
		if i%20 == 0 {
			peak = max(peak, diskBytes(t, dir))
		}
	}
	after := diskBytes(t, dir)
	peak = max(peak, after)
	t.Logf("after 300 overwrites of 1 MiB: %.1f MiB on disk (peak %.1f MiB)", float64(after)/mib, float64(peak)/mib)
	if peak > 80*mib {
		t.Errorf("the data folder reached %.1f MiB, want at most 80 MiB", float64(peak)/mib)
	}
	wait.For(t, 30*time.Second, "the collector to bring the folder under 56 MiB", func() bool {
		return diskBytes(t, dir) <= 56*mib
	})
	settled := diskBytes(t, dir)
	t.Logf("after the collector ran: %.1f MiB (db %.1f MiB, raft %.1f MiB)", float64(settled)/mib,
		float64(diskBytes(t, filepath.Join(dir, "db")))/mib, float64(diskBytes(t, filepath.Join(dir, "raft")))/mib)

	// A restart keeps the value and the bound.
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err = openSolo(t, dir, change); err != nil {
		t.Fatal(err)
	}
	r, err := n.Get([]byte("k"))
	if err != nil || !r.Found || r.Version != 300 || r.Value[0] != byte(299%256) || len(r.Value) != mib {
		t.Fatalf("after a restart: version %d, %d bytes, %v", r.Version, len(r.Value), err)
	}
	if got := diskBytes(t, dir); got > 56*mib {
		t.Errorf("after a restart: %.1f MiB on disk", float64(got)/mib)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "raft", "snapshots", "*"))
	if len(snaps) > replica.DefaultSnapshotRetain {
		t.Errorf("%d snapshots kept, want at most %d: %v", len(snaps), replica.DefaultSnapshotRetain, snaps)
	}
}

// TestSnapshotsScaleWithTheDatabase: a snapshot by log size is taken once
// the entries since the last one hold SnapshotBytes or as many bytes as
// the newest snapshot, whichever is more, so that a database much larger
// than SnapshotBytes is not written out whole for every SnapshotBytes of
// entries.
func TestSnapshotsScaleWithTheDatabase(t *testing.T) {
	t.Parallel()
	const limit = 128 << 10
	n, err := openSolo(t, t.TempDir(), func(c *replica.Config) {
		c.SnapshotBytes, c.TrailingBytes, c.SnapshotThreshold = limit, limit, 1<<40
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	value := strings.Repeat("v", 32<<10)
	snapshotAt := func() string { return replica.RaftOf(n).Stats()["last_snapshot_index"] }
	// A database of 2 MiB: 64 keys of 32 KiB.
	for i := range 64 {
		mustApply(t, n, put(fmt.Sprintf("k%02d", i), value))
	}
	// A snapshot of all of it, so that the newest one is of 2 MiB.
	if err := replica.RaftOf(n).Snapshot().Error(); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		t.Fatal(err)
	}
	settled := snapshotAt()
	// 1 MiB of overwrites, eight times SnapshotBytes but half the
	// database: no snapshot.
	for range 32 {
		mustApply(t, n, put("k00", value))
	}
	if got := snapshotAt(); got != settled {
		t.Fatalf("a snapshot at entry %s after 1 MiB of entries, with a database of 2 MiB (SnapshotBytes %d KiB)", got, limit>>10)
	}
	// 3 MiB more: now one is due.
	for range 96 {
		mustApply(t, n, put("k00", value))
	}
	wait.For(t, waitLimit, "a snapshot once the entries outweigh the database", func() bool { return snapshotAt() != settled })
}

// TestRevokesSplitIntoEntries: revocations of TTL leases that each hold
// as many keys as a lease may, applied in one batch, go into entries of
// their own, each within what a transaction takes; in one entry their
// deletes would exceed it, and the state machine would stop on every
// node, again at every restart.
func TestRevokesSplitIntoEntries(t *testing.T) {
	t.Parallel()
	n, err := openSolo(t, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	const leases = 12
	var ids []uint64
	for range leases {
		rs := mustApply(t, n, store.Command{Op: store.OpGrantTTL, Term: time.Minute})
		ids = append(ids, rs[0].Lease)
	}
	key := func(l, i int) string { return fmt.Sprintf("%02d/%04d/%s", l, i, strings.Repeat("k", 200)) }
	for l, id := range ids {
		var cmds []store.Command
		for i := range store.MaxTTLKeys {
			cmds = append(cmds, store.Command{Op: store.OpPut, Key: []byte(key(l, i)), Value: []byte("v"), Lease: id})
		}
		for _, r := range mustApply(t, n, cmds...) {
			if r.Err != nil {
				t.Fatalf("put with lease %d: %v", id, r.Err)
			}
		}
	}
	var revokes []store.Command
	for _, id := range ids {
		revokes = append(revokes, store.Command{Op: store.OpRevokeTTL, Lease: id})
	}
	rs := mustApply(t, n, revokes...)
	for i, r := range rs {
		if r.Err != nil || len(r.Keys) != store.MaxTTLKeys {
			t.Fatalf("revoke %d: %d keys, %v", ids[i], len(r.Keys), r.Err)
		}
	}
	if r, err := n.Get([]byte(key(leases-1, 0))); err != nil || r.Found {
		t.Fatalf("a key of the last lease after its revocation: %+v, %v", r, err)
	}
}
