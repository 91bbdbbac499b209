// Package diskguard watches the data folder of a leased server, so that a
// full disk or a deleted folder costs writes, never the process.
//
// A Guard measures, about once a second, how many bytes the folder's files
// occupy (against a quota) and how many bytes its file system has free
// (against a reserve). Past the quota or below the reserve it raises the
// NOSPACE alarm, as etcd's --quota-backend-bytes and NOSPACE alarm do:
// Admit then refuses value-changing writes with ErrNoSpace until a later
// measurement finds room again, which clears the alarm by itself. Between
// two measurements, Admit counts the bytes it let through, so that a burst
// of writes cannot run past the reserve before the next one. The alarm
// clears only once there is room clear of the limits by a margin.
//
// An entry of the folder that the walk cannot read (a root-owned
// lost+found, when the folder is the root of its own file system and the
// server runs as another user) is left out of the size, and named once in
// the log; it does not stop the measurement, whose free space comes from
// statfs. A server does not start on a folder whose first measurement
// failed (StartErr): its guard would be blind.
//
// The reserve exists because the database writes through memory maps into
// sparse, preallocated files: a write into such a file on a full file
// system is not an error but a SIGBUS, which kills the process. The reserve
// must therefore cover what the database and the log may touch before the
// next measurement; see DefaultReserve.
//
// A Guard also holds a lock file in the folder, and checks that the folder
// and the lock file are still the ones it opened (device and inode). When
// either is gone or replaced, the folder is lost: every later Admit fails
// with ErrFolderLost, and Lost is closed, so that the server stops. Any
// other error of that check (an EIO, an ENOMEM) says nothing of the
// folder: it is logged, and the check is made again at the next write or
// measurement.
//
// A folder in which the database or the log can no longer create files
// (its permissions taken away, or its file system remounted read-only
// after an error) raises the READONLY alarm, ErrNotWritable: badger, which
// creates a file for each new memtable, table and value-log file, fails
// its next write there and is left unable to read or write (its memtable
// is gone), so Admit refuses every write and delete before it reaches the
// log, until a check finds the folders writable again.
package diskguard

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Defaults of Config.
const (
	// DefaultQuota is the default quota on the bytes the data folder
	// occupies: the database, the raft log and its snapshots.
	DefaultQuota = 8 << 30
	// DefaultReserve is the default free space kept on the data folder's
	// file system. It covers what the database and the log may write
	// without asking, between two measurements, with the options that
	// store.Open and replica.Open set:
	//
	//   - memtables: badger maps each memtable's log file (.mem) at twice
	//     MemTableSize, 2 × 16 MiB, sparse, and keeps up to NumMemtables (5)
	//     of them besides the one it fills: 6 × 32 MiB = 192 MiB;
	//   - the value log: each file is mapped at twice ValueLogFileSize,
	//     2 × 64 MiB = 128 MiB, sparse;
	//   - tables: a memtable flushed to level 0 is written through a map
	//     of its final size (about 16 MiB each, 5 queued: 80 MiB), and a
	//     compaction writes its new tables before it deletes the old ones;
	//   - the raft log: raft-wal preallocates each segment (64 MiB) with
	//     fallocate, which fails cleanly when there is no room, but takes
	//     the room when there is.
	//
	// That is 464 MiB; the rest, up to 512 MiB, covers the horizon entries
	// that lease renewals need (about 200 bytes each, a few a second at
	// most) and the bytes of writes admitted before a measurement.
	DefaultReserve = 512 << 20
	// DefaultInterval is how often the folder is measured.
	DefaultInterval = time.Second
	// Amplification is how many bytes of disk Admit counts for each byte
	// of a write between two measurements. A value is written once into a
	// mapped file, the memtable's log or the value log; the raft log's
	// segments are preallocated, 64 MiB at a time, and the later flush of
	// a memtable to a table is covered by the reserve.
	Amplification = 1
	// LockFile is the name of the lock file the guard keeps in the data
	// folder.
	LockFile = "leased.lock"
)

// Errors of a Guard.
var (
	// ErrNoSpace is why a write is refused under the NOSPACE alarm.
	ErrNoSpace = errors.New("NOSPACE")
	// ErrFolderLost is why a write is refused once the data folder, or
	// its lock file, was deleted or replaced.
	ErrFolderLost = errors.New("data folder lost")
	// ErrLocked is returned by Open when another process holds the lock
	// file: another server runs on the folder.
	ErrLocked = errors.New("data folder in use by another process")
	// ErrNotMeasured is why StartErr refuses a folder whose first
	// measurement failed.
	ErrNotMeasured = errors.New("cannot measure the data folder")
	// ErrNotWritable is why a write is refused under the READONLY alarm:
	// a folder of Config.Writable cannot be written.
	ErrNotWritable = errors.New("READONLY")
)

// Usage is one measurement of a data folder.
type Usage struct {
	// Used is how many bytes the folder's files occupy on disk (their
	// allocated blocks, so a sparse file counts only what was written).
	Used int64
	// Free is how many bytes its file system has available.
	Free int64
	// Skipped names the entries of the folder that could not be read,
	// each with why ("open lost+found: permission denied"); Used does
	// not count what they hold.
	Skipped []string
}

// Meter measures a data folder. Measure is called from the guard's
// goroutine, and from whoever calls Guard.Check, one call at a time. An
// error means that it has no figures at all: the guard then keeps the
// last ones. A folder measured in part returns its figures, and names
// what it left out in Usage.Skipped.
type Meter interface {
	Measure() (Usage, error)
}

// folder is the Meter of a folder on this machine's file systems.
type folder string

func (f folder) Measure() (Usage, error) { return Measure(string(f)) }

// Config configures a Guard. The zero value of every field but Dir means
// its default.
type Config struct {
	// Dir is the data folder. It must exist.
	Dir string
	// Quota is the most bytes the folder may occupy. Zero means
	// DefaultQuota; negative means no quota.
	Quota int64
	// Reserve is how many bytes must stay free on the folder's file
	// system. Zero means DefaultReserve; negative means no reserve.
	Reserve int64
	// Interval is how often the folder is measured. Zero means
	// DefaultInterval.
	Interval time.Duration
	// Meter measures the folder. Nil means Measure(Dir): statfs and a
	// walk of the folder. Tests and embedders with their own accounting
	// set it.
	Meter Meter
	// Writable are the folders in which the database and the log create
	// files; the READONLY alarm is raised while one of them exists and
	// cannot be written (see Writable). Nil means Dir alone.
	Writable []string
	// Logger receives the alarm's changes. Nil means slog.Default().
	Logger *slog.Logger

	// writable checks one folder of Writable. Nil means Writable; tests
	// inject its faults.
	writable func(dir string) error

	// stat returns the identity of the file at path. Nil means statID;
	// tests inject its faults.
	stat func(path string) (fileID, error)
}

// Guard watches one data folder. See the package comment. Its methods are
// safe for concurrent use.
type Guard struct {
	cfg  Config
	log  *slog.Logger
	lock *os.File
	dir  fileID // the folder as opened
	lf   fileID // the lock file as created

	checkMu sync.Mutex // serializes Check: one measurement at a time

	mu         sync.Mutex // guards the rest
	usage      Usage      // the last measurement
	measured   bool       // usage holds a measurement
	pending    int64      // bytes admitted since it began, times Amplification
	alarm      error      // the NOSPACE alarm, nil when clear
	lost       error      // why the folder is lost, nil while it is not
	measureErr error      // why the last measurement failed, nil if it did not
	statErr    error      // why the last identity check could not tell, nil if it could
	readonly   error      // the READONLY alarm, nil when clear
	skipped    string     // the entries the last measurement skipped, as logged

	lostCh chan struct{} // closed when the folder is lost
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// Open takes the lock file in cfg.Dir, records the identity of the folder
// and the lock file, measures the folder once, and starts measuring it
// every Interval until Close. It fails with ErrLocked if another process
// holds the lock.
func Open(cfg Config) (*Guard, error) {
	if cfg.Quota == 0 {
		cfg.Quota = DefaultQuota
	}
	if cfg.Reserve == 0 {
		cfg.Reserve = DefaultReserve
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Meter == nil {
		cfg.Meter = folder(cfg.Dir)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.stat == nil {
		cfg.stat = statID
	}
	if cfg.writable == nil {
		cfg.writable = Writable
	}
	if cfg.Writable == nil {
		cfg.Writable = []string{cfg.Dir}
	}
	g := &Guard{cfg: cfg, log: cfg.Logger, lostCh: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	lock, err := lockFile(filepath.Join(cfg.Dir, LockFile))
	if err != nil {
		return nil, err
	}
	g.lock = lock
	if g.dir, err = cfg.stat(cfg.Dir); err == nil {
		g.lf, err = fstatID(lock)
	}
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("data folder %s: %w", cfg.Dir, err)
	}
	g.Check()
	go g.run()
	return g, nil
}

// run measures the folder every Interval until Close.
func (g *Guard) run() {
	defer close(g.done)
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			g.Check()
		}
	}
}

// Close stops the measurements and releases the lock file.
func (g *Guard) Close() error {
	g.once.Do(func() {
		close(g.stop)
		<-g.done
		g.lock.Close()
	})
	return nil
}

// Check measures the folder now and checks its identity, raising or
// clearing the alarm, or noting that the folder is lost. The guard calls
// it every Interval; tests call it to see a change at once. Calls from
// several goroutines run one after the other.
func (g *Guard) Check() {
	g.checkMu.Lock()
	defer g.checkMu.Unlock()
	// The measurement clears the bytes admitted before it began: they
	// are on disk by then, or covered by the reserve. Those admitted
	// while it runs may be missing from it, and go on counting.
	g.mu.Lock()
	before := g.pending
	g.mu.Unlock()

	lost, unsure := g.identity(false)
	ro := g.unwritable()
	u, err := g.cfg.Meter.Measure()
	g.mu.Lock()
	defer g.mu.Unlock()
	if lost != nil {
		g.loseLocked(lost)
		return
	}
	g.noteStatLocked(unsure)
	g.noteWritableLocked(ro)
	if err != nil {
		// Keep the last figures: a measurement that failed says nothing
		// of the space left.
		if g.measureErr == nil || g.measureErr.Error() != err.Error() {
			g.log.Warn("cannot measure the data folder: the alarm keeps the last figures", "dir", g.cfg.Dir, "err", err)
		}
		g.measureErr = err
		return
	}
	if g.measureErr != nil {
		g.log.Info("the data folder is measured again", "dir", g.cfg.Dir)
		g.measureErr = nil
	}
	g.noteSkippedLocked(u.Skipped)
	g.usage, g.measured = u, true
	g.pending -= before
	g.evaluateLocked()
}

// identity returns why the folder is lost, or nil if the folder and the
// lock file are the ones Open found. With lockOnly, it looks at the lock
// file alone, one stat: enough to see the folder deleted, or replaced
// (the path then leads to another lock file, or to none). A stat that
// fails for another reason (an EIO, an ENOMEM) tells neither: identity
// returns it as unsure, and the folder is checked again next time.
func (g *Guard) identity(lockOnly bool) (lost, unsure error) {
	files := []struct {
		path string
		want fileID
	}{{filepath.Join(g.cfg.Dir, LockFile), g.lf}, {g.cfg.Dir, g.dir}}
	if lockOnly {
		files = files[:1]
	}
	for _, f := range files {
		id, err := g.cfg.stat(f.path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("%w: %s was deleted", ErrFolderLost, f.path), nil
		case gone(err):
			return fmt.Errorf("%w: %v", ErrFolderLost, err), nil
		case err != nil:
			return nil, err
		case id != f.want:
			return fmt.Errorf("%w: %s was replaced by another file", ErrFolderLost, f.path), nil
		}
	}
	return nil, nil
}

// unwritable returns the READONLY alarm if a folder of Config.Writable
// cannot be written, or nil.
func (g *Guard) unwritable() error {
	for _, d := range g.cfg.Writable {
		if err := g.cfg.writable(d); err != nil {
			return fmt.Errorf("%w: the data folder cannot be written (%v): writes and deletes are refused until it can; reads and renewals go on", ErrNotWritable, err)
		}
	}
	return nil
}

// noteWritableLocked raises the READONLY alarm with ro, or clears it when
// ro is nil, and logs the change. g.mu must be held.
func (g *Guard) noteWritableLocked(ro error) {
	switch {
	case ro != nil && g.readonly == nil:
		g.log.Error("alarm raised: writes are refused until the data folder can be written again; reads and renewals go on", "alarm", ro.Error())
	case ro == nil && g.readonly != nil:
		g.log.Info("alarm cleared: the data folder can be written again; writes resume", "dir", g.cfg.Dir)
	}
	g.readonly = ro
}

// noteStatLocked logs when the identity check starts failing for a reason
// that tells nothing (once for each new reason) and when it works again.
// g.mu must be held.
func (g *Guard) noteStatLocked(unsure error) {
	switch {
	case unsure != nil && (g.statErr == nil || g.statErr.Error() != unsure.Error()):
		g.log.Warn("cannot check that the data folder is still there: checking again at the next write or measurement", "dir", g.cfg.Dir, "err", unsure)
	case unsure == nil && g.statErr != nil:
		g.log.Info("the data folder can be checked again", "dir", g.cfg.Dir)
	}
	g.statErr = unsure
}

// maxSkippedLogged is how many skipped entries the log names.
const maxSkippedLogged = 10

// noteSkippedLocked logs the entries a measurement could not read when
// they differ from those of the last one, so that an unreadable entry is
// named once, not every second. g.mu must be held.
func (g *Guard) noteSkippedLocked(skipped []string) {
	key := strings.Join(skipped, "\n")
	if key == g.skipped {
		return
	}
	g.skipped = key
	if len(skipped) == 0 {
		g.log.Info("every entry of the data folder can be read again", "dir", g.cfg.Dir)
		return
	}
	g.log.Warn("entries of the data folder cannot be read: their contents are left out of its size against the quota; give the server access to them, or remove them",
		"dir", g.cfg.Dir, "count", len(skipped), "skipped", skipped[:min(len(skipped), maxSkippedLogged)])
}

// loseLocked notes that the folder is lost. g.mu must be held.
func (g *Guard) loseLocked(why error) {
	if g.lost != nil {
		return
	}
	g.lost = why
	g.log.Error("the data folder was deleted or replaced: writes are refused from now on", "dir", g.cfg.Dir, "err", why)
	close(g.lostCh)
}

// evaluateLocked raises the alarm if the last measurement, with the
// bytes admitted since, is past a limit, and clears it once a measurement
// finds room clear of both limits by a margin (hysteresis: a guard that
// lets writes through exactly up to the reserve would otherwise never see
// the disk below it, nor stay refused). g.mu must be held.
func (g *Guard) evaluateLocked() {
	if alarm := g.alarmFor(g.pending); alarm != nil {
		g.raiseLocked(alarm)
		return
	}
	if g.alarm == nil {
		return
	}
	u, q, r := g.usage, g.cfg.Quota, g.cfg.Reserve
	if (q <= 0 || u.Used <= q-q/clearMargin) && (r <= 0 || u.Free >= r+r/clearMargin) {
		g.log.Info("alarm cleared: writes resume", "used", u.Used, "free", u.Free, "quota", q, "reserve", r)
		g.alarm = nil
	}
}

// clearMargin: the alarm clears once the folder occupies a 1/clearMargin
// of its quota less than the quota, and the file system has a
// 1/clearMargin of the reserve more free than the reserve.
const clearMargin = 32

// raiseLocked raises the alarm, or updates its figures. g.mu must be held.
func (g *Guard) raiseLocked(alarm error) {
	if g.alarm == nil {
		g.log.Error("alarm raised: writes are refused until there is room again; reads, renewals and deletes go on", "alarm", alarm.Error(),
			"used", g.usage.Used, "free", g.usage.Free, "quota", g.cfg.Quota, "reserve", g.cfg.Reserve)
	}
	g.alarm = alarm
}

// alarmFor returns the NOSPACE alarm if pending more bytes would take the
// folder past the quota or its file system below the reserve, or nil.
func (g *Guard) alarmFor(pending int64) error {
	if !g.measured {
		return nil
	}
	u := g.usage
	if q := g.cfg.Quota; q > 0 && u.Used+pending > q {
		return fmt.Errorf("%w: the data folder uses %s, over its quota of %s (--quota-bytes)", ErrNoSpace, Bytes(u.Used+pending), Bytes(q))
	}
	if r := g.cfg.Reserve; r > 0 && u.Free-pending < r {
		return fmt.Errorf("%w: %s free on the data folder's file system, below the reserve of %s (--reserve-bytes)", ErrNoSpace, Bytes(max(u.Free-pending, 0)), Bytes(r))
	}
	return nil
}

// Admit decides whether a change of n bytes may be written now, and counts
// it if so. A delete (del) is let through under the NOSPACE alarm, as long
// as half the reserve is still free: it is how an operator makes room.
// Once the folder is lost, Admit refuses everything with ErrFolderLost.
// Admit with n == 0 only asks, and counts nothing.
func (g *Guard) Admit(n int64, del bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lost == nil && n > 0 {
		// A write acknowledged into a deleted folder is lost: look
		// again before letting one through. It costs one stat, about a
		// microsecond, against the fsync of the write's batch. A stat
		// that cannot tell lets the write through: the folder is not
		// known to be lost.
		lost, unsure := g.identity(true)
		if lost != nil {
			g.loseLocked(lost)
		} else {
			g.noteStatLocked(unsure)
		}
	}
	if g.lost != nil {
		return g.lost
	}
	if n > 0 || del {
		// A write into a folder that cannot take a new file may leave
		// the database unable to serve even reads: look again before
		// letting one through (an access call for each folder).
		g.noteWritableLocked(g.unwritable())
	}
	if g.readonly != nil {
		return g.readonly
	}
	pending := g.pending + n*Amplification
	if del {
		if r := g.cfg.Reserve; g.measured && r > 0 && g.usage.Free-pending < r/2 {
			return fmt.Errorf("%w: %s free on the data folder's file system, below half the reserve of %s (--reserve-bytes): even deletes are refused", ErrNoSpace, Bytes(max(g.usage.Free-pending, 0)), Bytes(r))
		}
		g.pending = pending
		return nil
	}
	if g.alarm != nil {
		return g.alarm
	}
	if err := g.alarmFor(pending); err != nil {
		// Past a limit with the bytes admitted since the last
		// measurement.
		g.raiseLocked(err)
		return err
	}
	g.pending = pending
	return nil
}

// Alarm returns the alarm that refuses writes: the folder lost, READONLY
// or NOSPACE, in that order; nil when none is raised.
func (g *Guard) Alarm() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lost != nil {
		return g.lost
	}
	if g.readonly != nil {
		return g.readonly
	}
	return g.alarm
}

// Usage returns the last measurement.
func (g *Guard) Usage() Usage {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.usage
}

// BelowFloor reports whether the last measurement found less than half the
// reserve free: so little that what the database may touch by itself could
// fill the file system. A node that applies writes it cannot refuse (a
// follower) should stop.
func (g *Guard) BelowFloor() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.measured && g.cfg.Reserve > 0 && g.usage.Free < g.cfg.Reserve/2
}

// Lost returns a channel closed once the folder is lost; Err then says why.
func (g *Guard) Lost() <-chan struct{} { return g.lostCh }

// Err returns why the folder is lost, or nil.
func (g *Guard) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lost
}

// Bytes formats n bytes for a person: "12345 bytes (12.1 KiB)".
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	f, i := float64(n), -1
	for f >= unit && i < 4 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%d bytes (%.1f %ciB)", n, f, "KMGTP"[i])
}

// fileID is a file's identity: its device and inode.
type fileID struct{ dev, ino uint64 }

// walk adds up the bytes that the files of fsys occupy (see allocated).
// An entry that cannot be read is skipped, and named in Skipped, so that
// one unreadable folder does not blind the guard to the rest; an entry
// removed while the walk runs (by a compaction) is left out silently.
func walk(fsys fs.FS) Usage {
	var u Usage
	fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil {
			var info fs.FileInfo
			if info, err = d.Info(); err == nil {
				u.Used += allocated(info)
				return nil
			}
		}
		// A folder that cannot be listed comes here after its own entry
		// was counted; WalkDir then goes on past it.
		if !errors.Is(err, fs.ErrNotExist) {
			u.Skipped = append(u.Skipped, err.Error())
		}
		return nil
	})
	return u
}

// StartErr returns why a server should not start on the folder: its file
// system has less free than the reserve, so that opening the database and
// replaying its log could fill it, and a write into a mapped file would
// then kill the process; or no measurement has worked yet (ErrNotMeasured),
// so that the guard could not tell. Nil if there is room, or no limit.
// The server calls it after Open, before it opens its database.
func (g *Guard) StartErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.measured && g.measureErr != nil && (g.cfg.Quota > 0 || g.cfg.Reserve > 0) {
		return fmt.Errorf("%w %s: %w: without its free space the NOSPACE alarm cannot keep a full disk from crashing the server; fix the cause, or turn both limits off (--reserve-bytes 0 --quota-bytes 0) to start it without the guard",
			ErrNotMeasured, g.cfg.Dir, g.measureErr)
	}
	if r := g.cfg.Reserve; g.measured && r > 0 && g.usage.Free < r {
		return fmt.Errorf("%w: only %s free on the file system of the data folder %s, below the reserve of %s (--reserve-bytes): free some space, or lower the reserve, and start again",
			ErrNoSpace, Bytes(g.usage.Free), g.cfg.Dir, Bytes(r))
	}
	return nil
}
