package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/leasefs"
	"github.com/leased/leased/protocol"
	"github.com/leased/leased/server"
)

// FSConfig configures the leasefs scenario (RunFS): a tree unpacked with
// tar in one mount, then found and stat-ed again and again from other
// mounts while the first keeps changing a few of its files, at each lease
// term, and again with the kernel's attribute cache kept for a fixed time
// instead of by leases.
type FSConfig struct {
	// Files is about how many paths the tree holds; 0 means 2,000.
	Files int
	// Readers is how many mounts find and stat the tree; 0 means 2. One
	// more mount unpacks it and changes it.
	Readers int
	// Terms are the lease terms, real time. Term 0, no caching, is always
	// run first: the baseline of the relative load.
	Terms []time.Duration
	// TTLs are the times the kernel keeps entries and attributes in the
	// runs of a cache by time (leasefs --kernel-ttl), whose leases have
	// term 0: none means no such run.
	TTLs []time.Duration
	// Measure is the measuring time of each point; 0 means 10 s.
	Measure time.Duration
	// ChangeEvery is the writer's pace; 0 means 100 ms.
	ChangeEvery time.Duration
	// Seed seeds the tree and the writer's choices.
	Seed uint64
	// OutDir receives fs.json, fs-points.csv and the plots; empty means
	// none.
	OutDir string `json:"-"`
	// Progress, if set, receives a line as each point starts.
	Progress io.Writer `json:"-"`
	// Logger receives the server's logs; nil means none.
	Logger *slog.Logger `json:"-"`
	// Mounter is the command, and its first arguments, that serves one
	// mount in a process of its own (MountMain), such as leasebench's
	// hidden fs-mount command: each mount is its own process, as leasefs
	// mounts are, and a program that mounts must not reach into its own
	// mount from a forked child (it waits on itself).
	Mounter []string `json:"-"`
}

// QuickFS returns the default leasefs scenario: terms 0 to 30 s and a
// 1-second TTL cache, about 3 min on a 2-core machine.
func QuickFS() FSConfig {
	s := time.Second
	return FSConfig{
		Files: 2000, Readers: 2,
		Terms:   []time.Duration{0, s / 2, 2 * s, 10 * s, 30 * s},
		TTLs:    []time.Duration{s},
		Measure: 10 * s, ChangeEvery: 100 * time.Millisecond, Seed: 1,
	}
}

func (c FSConfig) validate() (FSConfig, error) {
	if c.Files == 0 {
		c.Files = 2000
	}
	if c.Readers == 0 {
		c.Readers = 2
	}
	if c.Measure == 0 {
		c.Measure = 10 * time.Second
	}
	if c.ChangeEvery == 0 {
		c.ChangeEvery = 100 * time.Millisecond
	}
	var errs []error
	if c.Files < 10 || c.Files > 100_000 {
		errs = append(errs, fmt.Errorf("--files %d: want 10 to 100,000", c.Files))
	}
	if c.Readers < 1 || c.Readers > 16 {
		errs = append(errs, fmt.Errorf("--readers %d: want 1 to 16", c.Readers))
	}
	if c.Measure < time.Second {
		errs = append(errs, fmt.Errorf("--measure %v: want at least 1s", c.Measure))
	}
	if c.ChangeEvery < time.Millisecond {
		errs = append(errs, fmt.Errorf("--change-every %v: want at least 1ms", c.ChangeEvery))
	}
	for _, t := range append(c.Terms, c.TTLs...) {
		if t < 0 || t > time.Hour {
			errs = append(errs, fmt.Errorf("a term or TTL of %v: want 0 to 1h", t))
		}
	}
	for _, t := range c.TTLs {
		if t == 0 {
			errs = append(errs, errors.New("a TTL of 0 is term 0 itself: give positive TTLs"))
		}
	}
	c.Terms = withZero(c.Terms)
	c.TTLs = sortedUnique(c.TTLs)
	if err := errors.Join(errs...); err != nil {
		return c, &ConfigError{err}
	}
	return c, nil
}

// FSPoint is what one term (or one TTL cache) measured.
type FSPoint struct {
	// Mode is "lease" (leases of Term, the kernel's copies dropped on
	// invalidation) or "ttl" (leases of term 0, the kernel's copies kept
	// for TTL whatever changes).
	Mode   string  `json:"mode"`
	TermMS float64 `json:"term_ms"`
	TTLMS  float64 `json:"ttl_ms,omitempty"`
	// UnpackS is how long tar -x of the tree took in the writing mount,
	// while the readers were idle.
	UnpackS float64 `json:"unpack_s"`
	// Find is the time of one pass of find -ls over the tree in a reading
	// mount, while the writer changes it.
	Find Latency `json:"find"`
	// Change is the latency of the writer's changes (a chmod, an append,
	// a new version renamed over the file), each a system call or two, or open–write–close.
	Change Latency `json:"change"`
	// Messages are every message leased received or sent while measuring;
	// Consistency those a cache causes: reads and listings that reached
	// it and their replies, renewals, invalidations, acknowledgements and
	// releases. Writes are not counted there: they reach the server with
	// or without caching.
	Messages        uint64  `json:"messages"`
	MessagesPerS    float64 `json:"messages_per_s"`
	Consistency     uint64  `json:"consistency"`
	ConsistencyPerS float64 `json:"consistency_per_s"`
	// RelLoad is ConsistencyPerS ÷ term 0's, and ModelRelLoad what Gray
	// and Cheriton's model predicts for it (FSReport.Model).
	RelLoad      float64 `json:"rel_load"`
	ModelRelLoad float64 `json:"model_rel_load"`
	// Checks counts the reading mounts' stats of each changed file right
	// after its change returned, and Stale those that did not show it.
	Checks int `json:"checks"`
	Stale  int `json:"stale"`
	// Errors counts failed operations of the workload.
	Errors int `json:"errors"`

	epsilon time.Duration // the server's ε
}

// FSReport is the leasefs scenario's result.
type FSReport struct {
	Started   time.Time `json:"started"`
	Finished  time.Time `json:"finished"`
	GoVersion string    `json:"go_version"`
	NumCPU    int       `json:"num_cpu"`
	Config    FSConfig  `json:"config"`
	Paths     int       `json:"paths"` // of the tree
	// Model is Gray and Cheriton's model with the workload's rates, as
	// measured at term 0: N mounts, S = N sharing every key, R and W per
	// mount per key.
	Model  Model     `json:"model"`
	Points []FSPoint `json:"points"`
}

// fsKeysPerPath is the keys a path of the tree costs in leased: its
// directory entry and its inode's record.
const fsKeysPerPath = 2

// RunFS runs the leasefs scenario on a server in this process, with every
// mount in this process too (each with a client of its own), and the
// tools as processes of their own. It needs root and /dev/fuse, tar and
// find.
func RunFS(ctx context.Context, cfg FSConfig) (*FSReport, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if err := leasefs.CheckFUSE(); err != nil {
		return nil, &ConfigError{err}
	}
	if len(cfg.Mounter) == 0 {
		return nil, &ConfigError{errors.New("FSConfig.Mounter is required: the command that serves a mount")}
	}
	for _, tool := range []string{"tar", "find"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, &ConfigError{fmt.Errorf("the leasefs scenario runs %s: %w", tool, err)}
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	dir, err := os.MkdirTemp("", "leasebench-fs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	rep := &FSReport{Started: time.Now(), GoVersion: runtime.Version(), NumCPU: runtime.NumCPU(), Config: cfg}
	src := filepath.Join(dir, "src")
	if rep.Paths, err = writeTree(src, cfg.Files, cfg.Seed); err != nil {
		return nil, err
	}
	archive := filepath.Join(dir, "tree.tar")
	if out, err := exec.CommandContext(ctx, "tar", "-cf", archive, "-C", src, ".").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tar -c: %v: %s", err, out)
	}
	type run struct {
		mode      string
		term, ttl time.Duration
	}
	var runs []run
	for _, t := range cfg.Terms {
		runs = append(runs, run{"lease", t, 0})
	}
	for _, t := range cfg.TTLs {
		runs = append(runs, run{"ttl", 0, t})
	}
	var prefixes []server.PrefixTerm
	for i, r := range runs {
		prefixes = append(prefixes, server.PrefixTerm{Prefix: fsPrefix(i), Term: r.term})
	}
	srv, err := server.New(server.Config{Dir: filepath.Join(dir, "leased"), Addr: "127.0.0.1:0", PrefixTerms: prefixes, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("in-process server: %w", err)
	}
	go srv.Serve(context.Background())
	defer srv.Close()
	ccfg := client.Config{CAFile: server.CAPath(filepath.Join(dir, "leased")), Logger: log}
	for i, r := range runs {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, "leasebench fs: %s term %v ttl %v (%d of %d)\n", r.mode, r.term, r.ttl, i+1, len(runs))
		}
		pt, err := fsPoint(ctx, cfg, fsRun{
			mounter: cfg.Mounter, addr: srv.Addr().String(), ccfg: ccfg, prefix: fsPrefix(i), ttl: r.ttl,
			dir: filepath.Join(dir, fmt.Sprintf("point%d", i)), archive: archive, log: log,
		})
		if err != nil {
			return nil, err
		}
		pt.Mode, pt.TermMS, pt.TTLMS = r.mode, ms(r.term), ms(r.ttl)
		rep.Points = append(rep.Points, pt)
	}
	rep.model()
	rep.Finished = time.Now()
	if cfg.OutDir != "" {
		if err := rep.WriteFiles(cfg.OutDir); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// fsPrefix is the file system prefix of the i-th run: each has its own,
// with its term.
func fsPrefix(i int) string { return "leasebench/fs-" + strconv.Itoa(i) + "/" }

// fsRun is one point's setting.
type fsRun struct {
	mounter []string
	addr    string
	ccfg    client.Config
	prefix  string
	ttl     time.Duration
	dir     string
	archive string
	log     *slog.Logger
}

// fsChange is one of the writer's changes, and what the readers must see
// once it returned.
type fsChange struct {
	rel  string
	mode uint32
	size int64
}

func fsPoint(ctx context.Context, cfg FSConfig, r fsRun) (FSPoint, error) {
	var pt FSPoint
	data := filepath.Join(r.dir, "data")
	var mounts []*fsMount
	defer func() {
		for _, m := range mounts {
			if err := m.stop(); err != nil {
				r.log.Error("leasebench fs: unmount", "dir", m.dir, "err", err)
			}
		}
	}()
	for i := range cfg.Readers + 1 {
		mdir := filepath.Join(r.dir, fmt.Sprintf("m%d", i))
		m, err := startFSMount(ctx, r, mdir, data)
		if err != nil {
			return pt, err
		}
		mounts = append(mounts, m)
	}
	c, err := client.Dial(ctx, r.addr, r.ccfg)
	if err != nil {
		return pt, err
	}
	defer c.Close()
	writer, readers := mounts[0], mounts[1:]
	tree := filepath.Join(writer.dir, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return pt, err
	}
	start := time.Now()
	if out, err := exec.CommandContext(ctx, "tar", "-xf", r.archive, "-C", tree).CombinedOutput(); err != nil {
		return pt, fmt.Errorf("tar -x: %v: %s", err, out)
	}
	pt.UnpackS = time.Since(start).Seconds()
	// The files the writer changes: the first few regular files.
	var hot []string
	filepath.WalkDir(tree, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && len(hot) < 20 {
			rel, _ := filepath.Rel(writer.dir, p)
			hot = append(hot, rel)
		}
		return nil
	})
	if len(hot) == 0 {
		return pt, errors.New("the tree has no files")
	}
	// One pass each first, so that every point starts with warm caches.
	for _, m := range readers {
		if out, err := exec.CommandContext(ctx, "find", filepath.Join(m.dir, "tree"), "-ls").CombinedOutput(); err != nil {
			return pt, fmt.Errorf("find: %v: %s", err, lastBytes(out, 500))
		}
	}
	st0, err := c.ServerStats(ctx)
	if err != nil {
		return pt, err
	}
	mctx, cancel := context.WithTimeout(ctx, cfg.Measure)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var finds, changes []time.Duration
	for _, m := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for mctx.Err() == nil {
				cmd := exec.Command("find", filepath.Join(m.dir, "tree"), "-ls")
				var stderr strings.Builder
				cmd.Stderr = &stderr
				t0 := time.Now()
				err := cmd.Run()
				d := time.Since(t0)
				mu.Lock()
				if err != nil && !onlyVanished(stderr.String()) {
					r.log.Error("leasebench fs: find", "err", err, "stderr", lastBytes([]byte(stderr.String()), 500))
					pt.Errors++
				} else if mctx.Err() == nil {
					finds = append(finds, d)
				}
				mu.Unlock()
			}
		}()
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 2))
	tick := time.NewTicker(cfg.ChangeEvery)
	for mctx.Err() == nil {
		select {
		case <-mctx.Done():
		case <-tick.C:
		}
		if mctx.Err() != nil {
			break
		}
		rel := hot[rng.IntN(len(hot))]
		t0 := time.Now()
		ch, err := fsChangeOne(writer.dir, rel, rng)
		d := time.Since(t0)
		if err != nil {
			r.log.Error("leasebench fs: change", "path", rel, "err", err)
			mu.Lock()
			pt.Errors++
			mu.Unlock()
			continue
		}
		changes = append(changes, d)
		for _, m := range readers {
			var st syscall.Stat_t
			stale := syscall.Lstat(filepath.Join(m.dir, ch.rel), &st) != nil || st.Mode&0o7777 != ch.mode || st.Size != ch.size
			mu.Lock() // the readers count their errors in pt too
			pt.Checks++
			if stale {
				pt.Stale++
			}
			mu.Unlock()
		}
	}
	tick.Stop()
	wg.Wait()
	st1, err := c.ServerStats(ctx)
	if err != nil {
		return pt, err
	}
	d := counters(st0, st1)
	secs := cfg.Measure.Seconds()
	pt.Messages, pt.MessagesPerS = d.total, float64(d.total)/secs
	pt.Consistency = d.consistency() + d.in[protocol.TypeList.String()] + d.out[protocol.TypeListReply.String()]
	pt.ConsistencyPerS = float64(pt.Consistency) / secs
	pt.Find, pt.Change = summarize(finds), summarize(changes)
	pt.epsilon = st1.Epsilon
	return pt, nil
}

// fsChangeOne changes the file at rel under root: a chmod, an append, or
// a new version renamed over it; and returns what it must look like now.
func fsChangeOne(root, rel string, rng *rand.Rand) (fsChange, error) {
	p := filepath.Join(root, rel)
	switch rng.IntN(3) {
	case 0:
		mode := []uint32{0o600, 0o640, 0o644, 0o664}[rng.IntN(4)]
		if err := os.Chmod(p, os.FileMode(mode)); err != nil {
			return fsChange{}, err
		}
	case 1:
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fsChange{}, err
		}
		if _, err := f.WriteString("changed\n"); err != nil {
			f.Close()
			return fsChange{}, err
		}
		if err := f.Close(); err != nil {
			return fsChange{}, err
		}
	default:
		// Replace it whole, as an editor saves: a new file renamed over
		// it.
		old, err := os.ReadFile(p)
		if err != nil {
			return fsChange{}, err
		}
		if err := os.WriteFile(p+".new", append(old, "replaced\n"...), 0o644); err != nil {
			return fsChange{}, err
		}
		if err := os.Rename(p+".new", p); err != nil {
			return fsChange{}, err
		}
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return fsChange{}, err
	}
	return fsChange{rel: rel, mode: st.Mode & 0o7777, size: st.Size}, nil
}

// writeTree writes a tree of about files paths under dir: folders of up
// to 20 entries, nested, with files of 0 to 8 KiB and a few symlinks. It
// returns the number of paths.
func writeTree(dir string, files int, seed uint64) (int, error) {
	rng := rand.New(rand.NewPCG(seed, 1))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	dirs := []string{dir}
	paths := 0
	for i := 0; paths < files; i++ {
		parent := dirs[len(dirs)-1]
		if i%20 == 19 {
			parent = dirs[rng.IntN(len(dirs))]
			d := filepath.Join(parent, fmt.Sprintf("d%05d", i))
			if err := os.Mkdir(d, 0o755); err != nil {
				return paths, err
			}
			dirs = append(dirs, d)
			paths++
			continue
		}
		p := filepath.Join(parent, fmt.Sprintf("f%05d.c", i))
		if i%50 == 7 {
			if err := os.Symlink("../f00000.c", p); err != nil {
				return paths, err
			}
		} else {
			data := make([]byte, rng.IntN(8<<10))
			for j := range data {
				data[j] = byte('a' + rng.IntN(26))
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				return paths, err
			}
		}
		paths++
	}
	return paths, nil
}

// onlyVanished says whether find's complaints are all of paths that went
// between its listing and its stat: the writer's atomic replacements.
func onlyVanished(stderr string) bool {
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if !strings.HasSuffix(l, "No such file or directory") {
			return false
		}
	}
	return true
}

// lastBytes returns b's last n bytes, as text.
func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// model sets the report's model from the term-0 point's rates: every read
// and listing then reaches the server, one request and one reply each.
func (rep *FSReport) model() {
	if len(rep.Points) == 0 || rep.Points[0].Mode != "lease" || rep.Points[0].TermMS != 0 {
		return
	}
	base := rep.Points[0]
	n := rep.Config.Readers + 1
	keys := float64(rep.Paths * fsKeysPerPath)
	secs := rep.Config.Measure.Seconds()
	reads := float64(base.Consistency) / 2 / secs
	writes := float64(base.Change.N) / secs
	rep.Model = Model{
		N: n, S: n,
		R:       reads / float64(n) / keys,
		W:       writes / float64(n) / keys,
		MProp:   50 * time.Microsecond,
		MProc:   25 * time.Microsecond,
		Epsilon: base.epsilon,
	}
	for i := range rep.Points {
		pt := &rep.Points[i]
		if base.ConsistencyPerS > 0 {
			pt.RelLoad = pt.ConsistencyPerS / base.ConsistencyPerS
		}
		term := time.Duration(pt.TermMS * float64(time.Millisecond))
		pt.ModelRelLoad = rep.Model.RelativeLoad(term)
	}
}

// Files written by FSReport.WriteFiles.
const (
	FileFSJSON   = "fs.json"
	FileFSCSV    = "fs-points.csv"
	FileFSLoad   = "fs-load.png"
	FileFSFind   = "fs-find.png"
	FileFSChange = "fs-change.png"
)

// WriteFiles writes the report's JSON, CSV and plots into dir.
func (rep *FSReport) WriteFiles(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, FileFSJSON), append(js, '\n'), 0o644); err != nil {
		return err
	}
	rows := [][]string{{"mode", "term_ms", "ttl_ms", "unpack_s", "find_p50_ms", "find_passes", "change_p50_ms", "change_p99_ms", "changes",
		"messages_per_s", "consistency_per_s", "rel_load", "model_rel_load", "checks", "stale", "errors"}}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
	for _, p := range rep.Points {
		rows = append(rows, []string{p.Mode, f(p.TermMS), f(p.TTLMS), f(p.UnpackS), f(p.Find.P50MS), strconv.Itoa(p.Find.N),
			f(p.Change.P50MS), f(p.Change.P99MS), strconv.Itoa(p.Change.N), f(p.MessagesPerS), f(p.ConsistencyPerS),
			f(p.RelLoad), f(p.ModelRelLoad), strconv.Itoa(p.Checks), strconv.Itoa(p.Stale), strconv.Itoa(p.Errors)})
	}
	if err := writeCSV(filepath.Join(dir, FileFSCSV), rows); err != nil {
		return err
	}
	return rep.plot(dir)
}

// WriteTable prints the report as a table.
func (rep *FSReport) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "leasefs: tar -x of %d paths in one mount, then find -ls in %d mounts while the first changes a file every %v, for %v a point\n",
		rep.Paths, rep.Config.Readers, rep.Config.ChangeEvery, rep.Config.Measure)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cache\tterm\tunpack s\tfind p50 ms\tpasses\tchange p50 ms\tp99 ms\tmsgs/s\tconsistency/s\t÷ term 0\tmodel\tstale / checks\t")
	for _, p := range rep.Points {
		cache := "leases"
		if p.Mode == "ttl" {
			cache = fmt.Sprintf("TTL %v", time.Duration(p.TTLMS*float64(time.Millisecond)))
		}
		fmt.Fprintf(tw, "%s\t%v\t%.1f\t%.0f\t%d\t%.2f\t%.2f\t%.0f\t%.0f\t%.3f\t%.3f\t%d / %d\t\n", cache,
			time.Duration(p.TermMS*float64(time.Millisecond)), p.UnpackS, p.Find.P50MS, p.Find.N, p.Change.P50MS, p.Change.P99MS,
			p.MessagesPerS, p.ConsistencyPerS, p.RelLoad, p.ModelRelLoad, p.Stale, p.Checks)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	m := rep.Model
	_, err := fmt.Fprintf(w, "model: N = S = %d mounts, R = %.4f reads/s and W = %.5f writes/s per mount per key (from term 0), ε = %v\n", m.N, m.R, m.W, m.Epsilon)
	return err
}

// fsMount is a mount served by a process of its own (FSConfig.Mounter).
type fsMount struct {
	dir  string
	cmd  *exec.Cmd
	done chan error
}

// startFSMount starts a mount of r's file system on dir and waits until
// it serves.
func startFSMount(ctx context.Context, r fsRun, dir, data string) (*fsMount, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	args := append(r.mounter[1:len(r.mounter):len(r.mounter)], "--mount", dir, "--endpoint", r.addr, "--cacert", r.ccfg.CAFile,
		"--data", data, "--prefix", r.prefix, "--kernel-ttl", r.ttl.String())
	cmd := exec.Command(r.mounter[0], args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	m := &fsMount{dir: dir, cmd: cmd, done: make(chan error, 1)}
	ready := make(chan bool, 1)
	go func() {
		line := make([]byte, len(MountReady))
		_, err := io.ReadFull(out, line)
		ready <- err == nil && string(line) == MountReady
		io.Copy(io.Discard, out)
		m.done <- cmd.Wait()
	}()
	select {
	case ok := <-ready:
		if ok {
			return m, nil
		}
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	m.cmd.Process.Kill()
	return nil, fmt.Errorf("the mount on %s did not start: %s", dir, stderr.String())
}

// stop unmounts: SIGTERM, and the process's exit.
func (m *fsMount) stop() error {
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-m.done:
		return err
	case <-time.After(30 * time.Second):
		m.cmd.Process.Kill()
		return fmt.Errorf("the mount on %s did not stop within 30 s of SIGTERM", m.dir)
	}
}

// MountReady is what MountMain prints once its mount serves.
const MountReady = "mounted\n"

// MountMain serves one mount of the scenario until SIGTERM or SIGINT, for
// FSConfig.Mounter: it mounts the file system on dir, prints MountReady,
// and unmounts when a signal comes.
func MountMain(ctx context.Context, dir, endpoint, caFile, data, prefix string, kernelTTL time.Duration, stdout io.Writer, log *slog.Logger) error {
	m, err := leasefs.Mount(ctx, dir, endpoint, client.Config{CAFile: caFile, Name: "leasebench-fs", Logger: log},
		leasefs.Options{Data: data, Prefix: prefix, Logger: log, KernelTTL: kernelTTL}, false)
	if err != nil {
		return err
	}
	fmt.Fprint(stdout, MountReady)
	<-ctx.Done()
	return m.Unmount(true)
}

// lockedBuffer is a buffer that a process's output goroutine writes and
// another reads.
type lockedBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
