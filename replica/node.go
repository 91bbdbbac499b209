package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"

	"github.com/leased/leased/internal/clock"
	"github.com/leased/leased/internal/layout"
	"github.com/leased/leased/store"
)

// Defaults of Config, for nodes on one LAN.
const (
	DefaultHeartbeatTimeout   = 200 * time.Millisecond
	DefaultElectionTimeout    = 200 * time.Millisecond
	DefaultLeaderLeaseTimeout = 100 * time.Millisecond
	DefaultCommitTimeout      = 10 * time.Millisecond
	DefaultApplyTimeout       = 10 * time.Second
	DefaultSnapshotThreshold  = 8192
	DefaultTrailingLogs       = 10240
	// DefaultSnapshotBytes and DefaultTrailingBytes bound the log in
	// bytes beside the counts above, so that a few large values
	// overwritten many times do not fill the disk: a snapshot is taken
	// once the entries applied since the last one pass DefaultSnapshotBytes,
	// and it keeps behind it about DefaultTrailingBytes of entries.
	DefaultSnapshotBytes = 64 << 20
	DefaultTrailingBytes = 64 << 20
	// DefaultSnapshotRetain is how many snapshots are kept on disk.
	DefaultSnapshotRetain = 2
	// DefaultMaxEntryBytes bounds the commands of one log entry, as raft
	// suggests (raft.SuggestedMaxDataSize); a batch larger than it is split
	// into several entries. A single command larger than it goes alone.
	DefaultMaxEntryBytes = raft.SuggestedMaxDataSize
)

// Bounds of Config's durations, checked by Validate. The lower ones are
// raft's own; the upper ones are far longer than a cluster on any network
// needs, and keep raft's randomized timers (a timeout plus up to as much
// again) far from time.Duration's limit.
const (
	// MinRaftTimeout is the least HeartbeatTimeout, ElectionTimeout and
	// LeaderLeaseTimeout, and MinCommitTimeout the least CommitTimeout.
	MinRaftTimeout   = 5 * time.Millisecond
	MinCommitTimeout = time.Millisecond
	// MaxRaftTimeout is the longest HeartbeatTimeout, ElectionTimeout,
	// LeaderLeaseTimeout and CommitTimeout: a leader that crashed is
	// replaced only after them, and clients wait that long.
	MaxRaftTimeout = time.Minute
	// MaxApplyTimeout is the longest ApplyTimeout.
	MaxApplyTimeout = 10 * time.Minute
	// MinSnapshotInterval and MaxSnapshotInterval bound SnapshotInterval
	// when it is set.
	MinSnapshotInterval = 5 * time.Millisecond
	MaxSnapshotInterval = 24 * time.Hour
)

// Config configures a Node. The zero value of every field but ID and
// Transport means its default.
type Config struct {
	// Dir is the data folder: the applied state in Dir/db (badger), the
	// log in Dir/raft/wal, snapshots in Dir/raft/snapshots.
	Dir string
	// ID names the node in the cluster. It must not change across
	// restarts.
	ID string
	// Network is the node's peer port, over which raft's messages travel
	// to the other nodes (Open builds raft's transport on it). Nil, with
	// no Transport, means a cluster of this node alone, which talks to no
	// peer.
	Network *Network
	// Transport, if set instead of Network, carries raft's messages to
	// the other nodes (tests: raft.NewInmemTransport). The Node closes it
	// in Close if it is an io.Closer.
	Transport raft.Transport
	// Bootstrap is the initial cluster, used only when the node starts
	// with no log: every node of a new cluster gets the same list, and
	// every member of it votes. Nil means a cluster of this node alone.
	Bootstrap []Member
	// Join means that a node with no log bootstraps nothing: it waits, in
	// no configuration, until the leader of a running cluster adds it.
	// Bootstrap must then be nil.
	Join bool
	// Raft's timeouts; see raft.Config. Defaults for a LAN:
	// DefaultHeartbeatTimeout and the rest. Each is from MinRaftTimeout
	// (MinCommitTimeout for CommitTimeout) to MaxRaftTimeout, and as
	// raft wants them against each other: LeaderLeaseTimeout and
	// CommitTimeout at most HeartbeatTimeout, ElectionTimeout at least
	// HeartbeatTimeout. A CommitTimeout longer than the heartbeat would
	// let up-to-date followers learn of commits more slowly than they
	// hear from the leader.
	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	// ApplyTimeout bounds the wait for one batch to be committed and
	// applied, at most MaxApplyTimeout. Default DefaultApplyTimeout.
	ApplyTimeout time.Duration
	// SnapshotThreshold and TrailingLogs: a snapshot is taken after
	// SnapshotThreshold new entries, and the log keeps TrailingLogs entries
	// behind it for followers that lag. Defaults DefaultSnapshotThreshold
	// and DefaultTrailingLogs.
	SnapshotThreshold uint64
	TrailingLogs      uint64
	// SnapshotInterval is how often raft checks whether to take one,
	// from MinSnapshotInterval to MaxSnapshotInterval. Default raft's
	// (120 s).
	SnapshotInterval time.Duration
	// SnapshotBytes: a snapshot is also taken once the entries applied
	// since the last one hold this many bytes (or as many as the newest
	// snapshot, if it is larger: see compact.go), and TrailingBytes bounds
	// in bytes, beside TrailingLogs, the entries kept behind it. So the
	// log on disk holds at most about SnapshotBytes (or the snapshot's
	// size) + TrailingBytes of entries, plus up to two segments
	// (WALSegmentSize): it drops whole segments only. Defaults DefaultSnapshotBytes and
	// DefaultTrailingBytes.
	SnapshotBytes uint64
	TrailingBytes uint64
	// SnapshotRetain is how many snapshots are kept on disk, the newest.
	// Default DefaultSnapshotRetain.
	SnapshotRetain int
	// GCInterval and GCDiscardRatio schedule the garbage collection of
	// the database's value log (store.Badger.StartGC). Zero means
	// store.DefaultGCInterval and store.DefaultGCDiscardRatio.
	GCInterval     time.Duration
	GCDiscardRatio float64
	// StoreOptions are given to store.Open for the database, after the
	// node's own (tests shrink the value-log files).
	StoreOptions []store.Option
	// WALSegmentSize is the size in bytes of one segment file of the log
	// on disk. The log drops compacted entries only a whole segment at a
	// time, so tests that need a leader to have dropped them (and send a
	// lagging follower a snapshot) make it small. Zero means raft-wal's
	// default, 64 MiB. Unused with LogStore.
	WALSegmentSize int
	// MaxEntryBytes bounds the commands of one log entry. Default
	// DefaultMaxEntryBytes.
	MaxEntryBytes int
	// LogStore and StableStore, if set, replace the log on disk (for
	// tests, raft.NewInmemStore). Both or neither.
	LogStore    raft.LogStore
	StableStore raft.StableStore
	// Clock stamps the horizon entries the node applies (see
	// store.State.HorizonApplied). Nil means the system clock; it must be
	// the clock of the core that applies through the node.
	Clock clock.Clock
	// Logger receives the node's and raft's logs. Nil means slog.Default().
	Logger *slog.Logger
	// Refuse, if set, is asked before the node, while it does not lead,
	// appends entries to its log, drops the log's tail, or creates a
	// snapshot (refuse.go): an error refuses them, raft rejects what the
	// leader sent, and the leader sends it again later; the log keeps
	// every entry it had. A follower whose disk is nearly full refuses so
	// (DESIGN §7). Raft's goroutines call it, often: it must be cheap.
	// Nil refuses nothing.
	Refuse func() error
}

func (c Config) withDefaults() Config {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&c.HeartbeatTimeout, DefaultHeartbeatTimeout)
	set(&c.ElectionTimeout, DefaultElectionTimeout)
	set(&c.LeaderLeaseTimeout, DefaultLeaderLeaseTimeout)
	set(&c.CommitTimeout, DefaultCommitTimeout)
	set(&c.ApplyTimeout, DefaultApplyTimeout)
	if c.SnapshotThreshold == 0 {
		c.SnapshotThreshold = DefaultSnapshotThreshold
	}
	if c.TrailingLogs == 0 {
		c.TrailingLogs = DefaultTrailingLogs
	}
	if c.SnapshotBytes == 0 {
		c.SnapshotBytes = DefaultSnapshotBytes
	}
	if c.TrailingBytes == 0 {
		c.TrailingBytes = DefaultTrailingBytes
	}
	if c.SnapshotRetain == 0 {
		c.SnapshotRetain = DefaultSnapshotRetain
	}
	if c.MaxEntryBytes == 0 {
		c.MaxEntryBytes = DefaultMaxEntryBytes
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks c's timeouts, where a zero value means its default,
// against their bounds and against each other as raft does, and returns
// an error that begins with the name of the first bad field. Open calls
// it before it opens anything; package server calls it at start.
func (c Config) Validate() error {
	c = c.withDefaults()
	for _, d := range []struct {
		field    string
		v        time.Duration
		min, max time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout, MinRaftTimeout, MaxRaftTimeout},
		{"ElectionTimeout", c.ElectionTimeout, MinRaftTimeout, MaxRaftTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout, MinRaftTimeout, MaxRaftTimeout},
		{"CommitTimeout", c.CommitTimeout, MinCommitTimeout, MaxRaftTimeout},
		{"ApplyTimeout", c.ApplyTimeout, time.Millisecond, MaxApplyTimeout},
	} {
		if d.v < d.min || d.v > d.max {
			return fmt.Errorf("%s %v is outside %v..%v", d.field, d.v, d.min, d.max)
		}
	}
	switch {
	case c.SnapshotInterval != 0 && (c.SnapshotInterval < MinSnapshotInterval || c.SnapshotInterval > MaxSnapshotInterval):
		return fmt.Errorf("SnapshotInterval %v is outside %v..%v (or 0, raft's default)", c.SnapshotInterval, MinSnapshotInterval, MaxSnapshotInterval)
	case c.LeaderLeaseTimeout > c.HeartbeatTimeout:
		return fmt.Errorf("LeaderLeaseTimeout %v is longer than HeartbeatTimeout %v: raft wants it no longer", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	case c.ElectionTimeout < c.HeartbeatTimeout:
		return fmt.Errorf("ElectionTimeout %v is shorter than HeartbeatTimeout %v: raft wants it no shorter", c.ElectionTimeout, c.HeartbeatTimeout)
	case c.CommitTimeout > c.HeartbeatTimeout:
		return fmt.Errorf("CommitTimeout %v is longer than HeartbeatTimeout %v: followers would learn of commits more slowly than they hear from the leader", c.CommitTimeout, c.HeartbeatTimeout)
	}
	return nil
}

// Node is one replica: raft, its log, and the state machine over badger.
// It implements store.Store for package core on the leader: Apply appends
// through raft and returns once the entries are committed and applied
// here; Get and State read the applied state. Its methods are safe for
// concurrent use.
type Node struct {
	cfg   Config
	raft  *raft.Raft
	fsm   *FSM
	db    *store.Badger
	wal   *wal.WAL // nil with Config.LogStore
	meta  *metadb.BoltMetaDB
	log   *slog.Logger
	close sync.Once
	err   error
	// clockname is drawn at random when the node's log is created and
	// kept in its stable store (Clockname).
	clockname string
	// compactor takes the snapshots that SnapshotBytes calls for
	// (compact.go); Close stops it.
	compactor compactor
}

var _ store.Store = (*Node)(nil)

// Open opens, or creates, the node's state in cfg.Dir and starts raft.
// A node with no log bootstraps the cluster of cfg.Bootstrap.
func Open(cfg Config) (_ *Node, err error) {
	if cfg.Network != nil {
		defer func() {
			if err != nil {
				cfg.Network.Listener.Close() // the node owns it from Open on
			}
		}()
	}
	if cfg.ID == "" {
		return nil, errors.New("replica: Config.ID is required")
	}
	if cfg.Network != nil && cfg.Transport != nil {
		return nil, errors.New("replica: set Config.Network or Config.Transport, not both")
	}
	if cfg.Join && cfg.Bootstrap != nil {
		return nil, errors.New("replica: a node that joins (Config.Join) takes no Config.Bootstrap")
	}
	if cfg.GCDiscardRatio < 0 || cfg.GCDiscardRatio >= 1 || cfg.SnapshotRetain < 0 {
		return nil, fmt.Errorf("replica: GCDiscardRatio %v must be in [0, 1) and SnapshotRetain %d not negative", cfg.GCDiscardRatio, cfg.SnapshotRetain)
	}
	if (cfg.LogStore == nil) != (cfg.StableStore == nil) {
		return nil, errors.New("replica: set both Config.LogStore and Config.StableStore, or neither")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	cfg = cfg.withDefaults()
	n := &Node{cfg: cfg, log: cfg.Logger.With("node", cfg.ID)}
	var closers []io.Closer
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i].Close()
			}
		}
	}()
	var routes *peerRoutes
	switch {
	case cfg.Network != nil:
		if n.cfg.Transport, routes, err = cfg.Network.transport(n.log); err != nil {
			return nil, fmt.Errorf("replica: %w", err)
		}
		closers = append(closers, n.cfg.Transport.(io.Closer))
	case cfg.Transport == nil:
		// A cluster of this node alone hears from no peer.
		_, n.cfg.Transport = raft.NewInmemTransport(raft.ServerAddress(cfg.ID))
	}
	cfg = n.cfg
	raftDir := filepath.Join(cfg.Dir, layout.RaftDir)
	for _, d := range []string{filepath.Join(raftDir, "wal"), filepath.Join(cfg.Dir, layout.DBDir)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("replica: %w", err)
		}
	}
	hlog := HCLogger(n.log)
	if n.db, err = store.Open(filepath.Join(cfg.Dir, layout.DBDir), cfg.Logger, append([]store.Option{store.NoSync()}, cfg.StoreOptions...)...); err != nil {
		return nil, damagedDB(cfg.Dir, fmt.Errorf("replica: %w", err))
	}
	closers = append(closers, n.db)
	snaps, err := raft.NewFileSnapshotStoreWithLogger(raftDir, cfg.SnapshotRetain, hlog)
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	replaced, err := replacedAtStart(n.db, snaps)
	if err != nil {
		return nil, damaged(cfg.Dir, fmt.Errorf("replica: %w", err))
	}
	if !replaced {
		if err := n.db.Check(); err != nil {
			return nil, damagedDB(cfg.Dir, fmt.Errorf("replica: %w", err))
		}
	}
	if n.fsm, err = NewFSM(n.db, cfg.Clock, n.log); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	logs, stable := cfg.LogStore, cfg.StableStore
	if logs == nil {
		// The WAL does not close a metadata store it opened itself, so
		// the node opens it and closes it after the WAL.
		n.meta = &metadb.BoltMetaDB{}
		closers = append(closers, n.meta)
		segment := wal.DefaultSegmentSize
		if cfg.WALSegmentSize > 0 {
			segment = cfg.WALSegmentSize
		}
		if n.wal, err = wal.Open(filepath.Join(raftDir, "wal"), wal.WithLogger(hlog.Named("wal")), wal.WithMetaStore(n.meta), wal.WithSegmentSize(segment)); err != nil {
			return nil, fmt.Errorf("replica: open the log: %w", err)
		}
		closers = append(closers, n.wal)
		logs, stable = n.wal, n.wal
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.ID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.TrailingLogs
	if cfg.SnapshotInterval > 0 {
		rc.SnapshotInterval = cfg.SnapshotInterval
	}
	rc.Logger = hlog
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	existing, err := raft.HasExistingState(logs, stable, snaps)
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	if !existing && !cfg.Join {
		// Written to the stores before raft starts, so that a peer's
		// message cannot reach the node between its start and its
		// bootstrap.
		servers := raftServers(cfg.Bootstrap)
		if servers == nil {
			servers = []raft.Server{{ID: raft.ServerID(cfg.ID), Address: cfg.Transport.LocalAddr()}}
		}
		if err := raft.BootstrapCluster(rc, logs, stable, snaps, cfg.Transport, raft.Configuration{Servers: servers}); err != nil {
			return nil, fmt.Errorf("replica: bootstrap: %w", err)
		}
	}
	if err := checkAgainstLog(n.db, logs, snaps); err != nil {
		return nil, damaged(cfg.Dir, err)
	}
	if n.clockname, err = clockname(stable); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	n.prepareCompactor(snaps)
	raftLogs, raftSnaps := logs, raft.SnapshotStore(snaps)
	var refused *refusal
	if cfg.Refuse != nil {
		refused = &refusal{refuse: cfg.Refuse}
		raftLogs, raftSnaps = refusingLog{LogStore: logs, r: refused}, refusingSnapshots{SnapshotStore: snaps, r: refused}
	}
	if n.raft, err = raft.NewRaft(rc, n.fsm, raftLogs, stable, raftSnaps, cfg.Transport); err != nil {
		return nil, fmt.Errorf("replica: start raft: %w", err)
	}
	if refused != nil {
		refused.started(n.raft)
	}
	if routes != nil {
		routes.raft.Store(n.raft)
	}
	n.fsm.SetTerm(n.raft.CurrentTerm)
	if err := n.db.StartGC(cfg.GCInterval, cfg.GCDiscardRatio); err != nil {
		n.raft.Shutdown()
		return nil, fmt.Errorf("replica: %w", err)
	}
	n.startCompactor()
	return n, nil
}

// clocknameKey is the stable-store key of Node.Clockname.
var clocknameKey = []byte("leased-clockname")

// clockname reads the node's clock name from stable, or draws one and
// stores it there when there is none.
func clockname(stable raft.StableStore) (string, error) {
	// A missing key is an empty value or an error, by store; either way
	// a new name is drawn, and a read that failed for another reason only
	// costs the node the wait for its own horizons after a restart.
	if b, err := stable.Get(clocknameKey); err == nil && len(b) > 0 {
		return string(b), nil
	}
	b := make([]byte, 16)
	rand.Read(b)
	name := hex.EncodeToString(b)
	if err := stable.Set(clocknameKey, []byte(name)); err != nil {
		return "", fmt.Errorf("store the clock name: %w", err)
	}
	return name, nil
}

// Clockname names this node's clock (core.Config.Clockname): it is drawn
// at random when the node's log is created and kept with it, so it stays
// the same across restarts and differs between nodes, and between a node
// and a later one of the same ID with a new log.
func (n *Node) Clockname() string { return n.clockname }

// AppliedIndex is the index of the last log entry in the node's state.
func (n *Node) AppliedIndex() uint64 { return n.fsm.AppliedIndex() }

// IsLeader reports whether the node believes it leads the cluster.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// WaitLeading waits until this node leads the cluster and has applied
// every entry committed before it led, so that its state is the whole
// committed state: a cluster of one elects itself at start.
func (n *Node) WaitLeading(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for !n.IsLeader() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica: not leading: %w", ctx.Err())
		case <-t.C:
		}
	}
	return n.Reopen()
}

// Apply appends cmds to the log, in as many entries as MaxEntryBytes takes,
// and returns their results once every entry is committed and applied on
// this node. Only the leader can append. If an entry fails, Apply returns
// the results of the entries before it and the error; the failed entry and
// those after it may still be committed (a new leader may commit them), so
// their outcome is unknown until Reopen. While the folder of the database
// or of the log cannot be written, it appends nothing and returns
// store.ErrNotWritable.
func (n *Node) Apply(cmds []store.Command) ([]store.Result, error) {
	if err := n.writable(); err != nil {
		return nil, err // nothing appended: the outcome is known
	}
	var futures []raft.ApplyFuture
	var sizes []int
	for rest := cmds; len(rest) > 0; {
		k := n.split(rest)
		data, err := encodeEntry(rest[:k])
		if err != nil {
			return nil, fmt.Errorf("replica: encode an entry: %w", err)
		}
		futures = append(futures, n.raft.Apply(data, n.cfg.ApplyTimeout))
		sizes = append(sizes, k)
		rest = rest[k:]
	}
	results := make([]store.Result, 0, len(cmds))
	for i, f := range futures {
		if err := f.Error(); err != nil {
			if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
				return results, fmt.Errorf("replica: %w: %w", store.ErrNotLeader, err)
			}
			return results, fmt.Errorf("replica: %w", err)
		}
		a, ok := f.Response().(Applied)
		if !ok {
			return results, fmt.Errorf("replica: entry answered %T", f.Response())
		}
		if a.Err != nil {
			return results, a.Err
		}
		if len(a.Results) != sizes[i] {
			return results, fmt.Errorf("replica: entry of %d commands applied %d", sizes[i], len(a.Results))
		}
		results = append(results, a.Results...)
	}
	return results, nil
}

// split returns how many of cmds, at least one, go in the next entry.
func (n *Node) split(cmds []store.Command) int {
	size := 0
	for i, c := range cmds {
		size += store.Cost(c)
		if size > n.cfg.MaxEntryBytes && i > 0 {
			return i
		}
	}
	return len(cmds)
}

// Get returns the record of key in this node's applied state.
func (n *Node) Get(key []byte) (store.Record, error) { return n.db.Get(key) }

// Range returns the live keys opts names in this node's applied state,
// in key order, and the revision they were read at (store.Store.Range).
func (n *Node) Range(opts store.RangeOptions) (store.Range, error) { return n.db.Range(opts) }

// History reads a page of the event history of this node's applied state.
func (n *Node) History(opts store.HistoryOptions) (store.HistoryPage, error) {
	return n.db.History(opts)
}

// Kept returns the kept outcome of the write c in this node's applied
// state.
func (n *Node) Kept(c store.Command) (store.Result, bool, error) { return n.db.Kept(c) }

// Inherited returns the keys that writes of an earlier term than the
// node's changed when this node applied them, each with a bound on the
// leases their leader may have granted on the old value (FSM.Inherited).
func (n *Node) Inherited() map[string]time.Time { return n.fsm.Inherited() }

// WriteLease returns the write lease on key in this node's applied state
// (store.Store.WriteLease).
func (n *Node) WriteLease(key []byte) (store.WriteLease, bool, error) { return n.db.WriteLease(key) }

// TTLLease returns TTL lease id and its keys in this node's applied state
// (store.Store.TTLLease).
func (n *Node) TTLLease(id uint64) (store.TTLLease, []string, bool, error) {
	return n.db.TTLLease(id)
}

// TTLLeases calls fn with every TTL lease of this node's applied state, in
// id order (store.Store.TTLLeases).
func (n *Node) TTLLeases(fn func(store.TTLLease) error) error { return n.db.TTLLeases(fn) }

// IdleClients returns up to limit clients of this node's applied state
// whose last write was before cutoff.
func (n *Node) IdleClients(cutoff time.Time, limit int) ([]uint64, error) {
	return n.db.IdleClients(cutoff, limit)
}

// State returns the counters, horizon and write leases of this node's
// applied state, and when it applied the horizon (HorizonApplied).
func (n *Node) State() (store.State, error) {
	st, err := n.db.State()
	st.HorizonApplied = n.fsm.HorizonApplied()
	return st, err
}

// Failure returns why the node's state machine stopped applying the log
// (its database failed to apply a committed entry), or nil while it
// applies. A node whose state machine stopped can neither catch up nor
// serve as a leader; a restart applies the log again from the database's
// applied index.
func (n *Node) Failure() error { return n.fsm.stoppedErr() }

// Reopen settles the outcome of a failed Apply: it waits until every entry
// appended before it is applied here, which only a leader can do. It fails
// at once while the node's folders cannot be written (store.ErrNotWritable). After it,
// State and Get show every committed entry.
func (n *Node) Reopen() error {
	if err := n.writable(); err != nil {
		return err
	}
	if err := n.raft.Barrier(n.cfg.ApplyTimeout).Error(); err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	return n.fsm.stoppedErr()
}

// Close stops raft and closes the log, the state and the transport. It may
// be called more than once.
func (n *Node) Close() error {
	n.close.Do(func() {
		n.compactor.stop()
		errs := []error{n.raft.Shutdown().Error()}
		n.compactor.wait()
		if c, ok := n.cfg.Transport.(interface{ CloseStreams() }); ok {
			c.CloseStreams() // the pooled connections to the peers
		}
		if c, ok := n.cfg.Transport.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
		if n.wal != nil {
			errs = append(errs, n.wal.Close(), n.meta.Close())
		}
		errs = append(errs, n.db.Close())
		n.err = errors.Join(errs...)
	})
	return n.err
}
