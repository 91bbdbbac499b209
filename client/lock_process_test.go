//go:build linux

package client_test

// Locks, elections and task queues (DESIGN §5.1) with real processes: a
// lock holder killed with SIGKILL, or stopped with SIGSTOP past its TTL;
// campaigners of an election on a cluster whose leader is killed; queue
// workers, one of which is killed mid-task. The holders, campaigners and
// workers are helper processes (helperproc) that print what they do, with
// the wall-clock times of their view, on lines the test reads.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/client"
	"github.com/leased/leased/internal/testkit"
	"github.com/leased/leased/internal/testkit/clitest"
	"github.com/leased/leased/internal/testkit/helperproc"
	"github.com/leased/leased/internal/testkit/proccluster"
	"github.com/leased/leased/internal/testkit/wait"
)

const (
	helperLockHolder  = "lock-holder"
	helperCampaigner  = "campaigner"
	helperQueueWorker = "queue-worker"
	// lpEnvName names a campaigner or worker; lpEnvWork is how long a
	// worker works on each task.
	lpEnvName = "LEASED_E2E_NAME"
	lpEnvWork = "LEASED_E2E_WORK"
	// lpDataKey is the key the lock guards (WithGuard) in the lock tests.
	lpDataKey = "data/guarded"
	// lpEffectPrefix prefixes the key of a task's effect on the resource
	// of the queue test.
	lpEffectPrefix = "effect/"
)

// lpLine is a line of a helper: a kind, then positional words, then
// key=value words, and last, if any, msg= and free text to the end.
type lpLine struct {
	kind string
	args []string
	kv   map[string]string
}

func parseLP(l string) lpLine {
	kind, rest, _ := strings.Cut(l, " ")
	out := lpLine{kind: kind, kv: map[string]string{}}
	for rest != "" {
		if m, ok := strings.CutPrefix(rest, "msg="); ok {
			out.kv["msg"] = m
			break
		}
		var f string
		f, rest, _ = strings.Cut(rest, " ")
		if k, v, ok := strings.Cut(f, "="); ok {
			out.kv[k] = v
		} else {
			out.args = append(out.args, f)
		}
	}
	return out
}

func (l lpLine) u64(k string) uint64 {
	v, _ := strconv.ParseUint(l.kv[k], 10, 64)
	return v
}

func (l lpLine) time(k string) time.Time {
	n, err := strconv.ParseInt(l.kv[k], 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.Unix(0, n)
}

func (l lpLine) arg(i int) string {
	if i < len(l.args) {
		return l.args[i]
	}
	return ""
}

// lpErr names an error for a helper's line: none, fenced, notleader,
// canceled, deadline or other.
func lpErr(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, client.ErrFenced):
		return "fenced"
	case errors.Is(err, client.ErrNotLeader):
		return "notleader"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	}
	return "other"
}

// lpCommands returns the lines of the helper's stdin; the helper exits
// when it closes (the parent is gone).
func lpCommands() <-chan string {
	ch := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			ch <- sc.Text()
		}
		os.Exit(0)
	}()
	return ch
}

// lpDial dials the endpoints the parent gave the helper.
func lpDial(ctx context.Context, name string) (*client.Client, error) {
	return client.Dial(ctx, os.Getenv(helperAddr), client.Config{CAFile: os.Getenv(helperCA), Name: name,
		MaxReconnectDelay: 200 * time.Millisecond, Logger: testkit.Discard()})
}

// lpEvent is a line of one of several helper processes, or the end of
// its stdout (eof), as the test received it.
type lpEvent struct {
	who  string
	line string
	at   time.Time
	eof  bool
}

// lpForward passes the lines of p to out as events of who, and then its
// end, until the test ends.
func lpForward(t *testing.T, p *helperproc.Proc, who string, out chan<- lpEvent) {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		for l := range p.Lines() {
			select {
			case out <- lpEvent{who: who, line: l, at: time.Now()}:
			case <-stop:
				return
			}
		}
		select {
		case out <- lpEvent{who: who, at: time.Now(), eof: true}:
		case <-stop:
		}
	}()
}

// TestHelperLockHolder is not a test: it is the body of the lock holder
// process of TestProcessLockHolderKilled and TestProcessLockHolderStopped.
// It takes a Mutex on the key helperKey under a session of the TTL
// helperTTL and prints "locked token=T sent=NS"; then, for each keep-alive
// of the session answered, "renewed sent=NS acked=NS": the send time of the
// keep-alive (the lock's safe deadline, Context().Deadline(), is that plus
// TTL − TTL/10) and when the holder learnt of its answer. For each line
// "write V" of its stdin it reports its lock's Context (whether Done was
// closed, then Err) and writes V to lpDataKey guarded by its token:
// "wrote done=B ctxerr=E version=N err=E msg=...".
func TestHelperLockHolder(t *testing.T) {
	if os.Getenv(helperEnv) != helperLockHolder {
		t.Skip("helper process for the lock process tests")
	}
	err := func() error {
		ttl, err := time.ParseDuration(os.Getenv(helperTTL))
		if err != nil {
			return err
		}
		key := os.Getenv(helperKey)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		c, err := lpDial(ctx, "lock-holder")
		if err != nil {
			return err
		}
		defer c.Close()
		s, err := client.NewSession(ctx, c, ttl)
		if err != nil {
			return err
		}
		m := client.NewMutex(s, key)
		if err := m.Lock(ctx); err != nil {
			return err
		}
		token := m.Token()
		lc := m.Context()
		sent := func() (time.Time, bool) {
			d, ok := lc.Deadline()
			return d.Add(s.TTL()/10 - s.TTL()), ok
		}
		// A second subscription to the session's lease: it shares the
		// session's keep-alives, and hears of each one answered.
		renewals, err := c.KeepAlive(context.Background(), s.Lease())
		if err != nil {
			return err
		}
		at, ok := sent()
		if !ok {
			return errors.New("the held lock has no deadline")
		}
		cmds := lpCommands()
		fmt.Printf("locked token=%d sent=%d\n", token, at.UnixNano())
		go func() {
			for range renewals {
				acked := time.Now()
				if at, ok := sent(); ok {
					fmt.Printf("renewed sent=%d acked=%d\n", at.UnixNano(), acked.UnixNano())
				}
			}
		}()
		for l := range cmds {
			v, ok := strings.CutPrefix(l, "write ")
			if !ok {
				return fmt.Errorf("unknown command %q", l)
			}
			// First the context, as soon as the line is read: after a
			// pause past the deadline, Err must say so by itself.
			lctx := m.Context()
			done := false
			select {
			case <-lctx.Done():
				done = true
			default:
			}
			cerr := lctx.Err()
			wctx, wcancel := context.WithTimeout(context.Background(), testTimeout)
			ver, err := c.Put(wctx, lpDataKey, []byte(v), client.WithGuard(key, token))
			wcancel()
			fmt.Printf("wrote done=%v ctxerr=%s version=%d err=%s msg=%v\n", done, lpErr(cerr), ver, lpErr(err), err)
		}
		return nil
	}()
	fmt.Printf("error %v\n", err)
	os.Exit(1)
}

// lockHolder is a running lock holder process.
type lockHolder struct {
	proc  *helperproc.Proc
	token uint64
	mu    sync.Mutex
	// sent and acked are the times of the last keep-alive answered (or
	// the grant); renewals counts the keep-alives.
	sent, acked time.Time
	renewals    int
	replies     chan string   // the lines that are not renewals
	done        chan struct{} // closed when its stdout ends
}

// startLockHolder starts a holder of the lock on key under a session of
// ttl, and waits until it holds it.
func startLockHolder(t *testing.T, srv *clitest.Server, ttl time.Duration, key string) *lockHolder {
	t.Helper()
	p := helperproc.Start(t, "TestHelperLockHolder", helperEnv+"="+helperLockHolder, helperAddr+"="+srv.Addr,
		helperCA+"="+srv.CA, helperTTL+"="+ttl.String(), helperKey+"="+key)
	p.Name = "lock holder"
	l := parseLP(p.Next(2 * testTimeout))
	if l.kind != "locked" || l.u64("token") == 0 {
		t.Fatalf("lock holder: %+v", l)
	}
	h := &lockHolder{proc: p, token: l.u64("token"), sent: l.time("sent"), acked: time.Now(),
		replies: make(chan string, 16), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for l := range p.Lines() {
			if pl := parseLP(l); pl.kind == "renewed" {
				h.mu.Lock()
				h.sent, h.acked = pl.time("sent"), pl.time("acked")
				h.renewals++
				h.mu.Unlock()
				continue
			}
			select {
			case h.replies <- l:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		p.Cmd.Process.Kill()
		<-h.done
	})
	return h
}

// waitRenewals waits until n more keep-alives of the holder were answered.
func (h *lockHolder) waitRenewals(t *testing.T, n int, within time.Duration) {
	t.Helper()
	h.mu.Lock()
	want := h.renewals + n
	h.mu.Unlock()
	wait.For(t, within, fmt.Sprintf("%d keep-alives of the holder", n), func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.renewals >= want
	})
}

func (h *lockHolder) last() (sent, acked time.Time, renewals int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent, h.acked, h.renewals
}

// write asks the holder for a guarded write of v, and returns its report.
func (h *lockHolder) write(t *testing.T, v string, within time.Duration) lpLine {
	t.Helper()
	h.proc.Say("write " + v)
	return h.wrote(t, within)
}

// wrote returns the holder's report of the write it was asked for.
func (h *lockHolder) wrote(t *testing.T, within time.Duration) lpLine {
	t.Helper()
	l, ok := wait.Recv(h.replies, within)
	if !ok {
		t.Fatalf("the holder did not report its write within %v", within)
	}
	pl := parseLP(l)
	if pl.kind != "wrote" {
		t.Fatalf("the holder says %q", l)
	}
	return pl
}

// lockResult is the outcome of a waiter's Lock.
type lockResult struct {
	at  time.Time
	err error
}

// lockInBackground starts m.Lock and returns the channel of its outcome.
func lockInBackground(ctx context.Context, m *client.Mutex) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		err := m.Lock(ctx)
		ch <- lockResult{time.Now(), err}
	}()
	return ch
}

// TestProcessLockHolderKilled: a process holds a Mutex under a session
// of 5 s and keeps it alive; a waiter in the test waits in Lock; the holder
// is killed with SIGKILL. The waiter gets the lock no sooner than TTL + ε
// after the send of the holder's last keep-alive it saw answered (the
// server counts the TTL from the keep-alive's arrival, later still, and a
// keep-alive the holder sent but did not live to see answered only moves
// the end later), and no later than TTL + ε after the kill plus a slack of
// 3 s for the expiry's commit and the grant; its token is larger, and the
// old token fences.
func TestProcessLockHolderKilled(t *testing.T) {
	const (
		ttl   = 5 * time.Second
		eps   = 100 * time.Millisecond
		slack = 3 * time.Second
		key   = "locks/job"
	)
	srv := clitest.StartServer(t, linBinaries(t), t.TempDir(), t.TempDir(), "--lease-term", "1s", "--epsilon", eps.String())
	h := startLockHolder(t, srv, ttl, key)
	cfg := srv.ClientConfig()
	cfg.Name = "waiter"
	w := dialAddr(t, srv.Addr, srv.CA, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*ttl+4*testTimeout)
	defer cancel()
	ws, err := client.NewSession(ctx, w, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	wm := client.NewMutex(ws, key)
	if err := wm.TryLock(ctx); !errors.Is(err, client.ErrLocked) {
		t.Fatalf("TryLock of the held lock = %v, want ErrLocked", err)
	}
	got := lockInBackground(ctx, wm)
	// The holder keeps its session alive past its first TTL/3 twice:
	// the lock is its as long as it does.
	h.waitRenewals(t, 2, ttl+testTimeout)
	select {
	case r := <-got:
		t.Fatalf("the waiter got the lock while its holder was alive (%v)", r.err)
	default:
	}
	if err := h.proc.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-h.done
	killed := time.Now() // the holder was dead by then
	sent, acked, renewals := h.last()
	if acked.Before(sent) || acked.Sub(sent) > ttl/3 {
		t.Fatalf("the holder's last keep-alive: sent %v, answer seen %v", sent.Format(time.StampMicro), acked.Format(time.StampMicro))
	}
	r, ok := wait.Recv(got, ttl+eps+slack+testTimeout)
	if !ok {
		t.Fatalf("the waiter did not get the lock within %v of the kill", time.Since(killed))
	}
	if r.err != nil {
		t.Fatalf("the waiter's Lock: %v", r.err)
	}
	t.Logf("%d keep-alives of the holder answered; the last sent %v before the kill; the waiter got the lock %v after the kill, %v after that keep-alive was sent (TTL %v + ε %v)",
		renewals, killed.Sub(sent), r.at.Sub(killed), r.at.Sub(sent), ttl, eps)
	if earliest := sent.Add(ttl + eps); r.at.Before(earliest) {
		t.Errorf("the waiter got the lock at %v, %v before TTL + ε after the send of the holder's last answered keep-alive", r.at.Format(time.StampMicro), earliest.Sub(r.at))
	}
	if latest := killed.Add(ttl + eps + slack); r.at.After(latest) {
		t.Errorf("the waiter got the lock %v after the kill, more than TTL + ε + %v", r.at.Sub(killed), slack)
	}
	if wm.Token() <= h.token {
		t.Errorf("tokens %d then %d: the new one is not larger", h.token, wm.Token())
	}
	if err := wm.Context().Err(); err != nil {
		t.Errorf("the new holder's lock context: %v", err)
	}
	if ok, err := w.CheckToken(ctx, key, h.token); err != nil || ok {
		t.Errorf("CheckToken of the dead holder's token = %v, %v", ok, err)
	}
	if ok, err := w.CheckToken(ctx, key, wm.Token()); err != nil || !ok {
		t.Errorf("CheckToken of the new holder's token = %v, %v", ok, err)
	}
	if _, err := w.Put(ctx, lpDataKey, []byte("stale"), client.WithGuard(key, h.token)); !errors.Is(err, client.ErrFenced) {
		t.Errorf("a write guarded by the dead holder's token = %v, want ErrFenced", err)
	}
	if _, err := w.Put(ctx, lpDataKey, []byte("new"), client.WithGuard(key, wm.Token())); err != nil {
		t.Errorf("a write guarded by the new token: %v", err)
	}
	if err := wm.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// TestProcessLockHolderStopped: a process holds a Mutex (TTL 2 s) and
// writes under its guard; it is stopped with SIGSTOP for longer than
// TTL + ε, meanwhile a waiter takes the lock and writes under its own
// token. Woken with SIGCONT, the holder finds its lock's Context ended as
// soon as it asks (Err checks the clock itself), and its guarded write
// fails with ErrFenced; the data keeps the waiter's value.
func TestProcessLockHolderStopped(t *testing.T) {
	const (
		ttl   = 2 * time.Second
		eps   = 100 * time.Millisecond
		slack = 3 * time.Second
		key   = "locks/db"
	)
	srv := clitest.StartServer(t, linBinaries(t), t.TempDir(), t.TempDir(), "--ttl-min", "1s", "--lease-term", "1s", "--epsilon", eps.String())
	h := startLockHolder(t, srv, ttl, key)
	if l := h.write(t, "holder-1", testTimeout); l.kv["err"] != "none" || l.kv["ctxerr"] != "none" || l.kv["done"] != "false" {
		t.Fatalf("the holder's first write: %+v", l)
	}
	cfg := srv.ClientConfig()
	cfg.Name = "waiter"
	w := dialAddr(t, srv.Addr, srv.CA, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*ttl+4*testTimeout)
	defer cancel()
	ws, err := client.NewSession(ctx, w, ttl)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	wm := client.NewMutex(ws, key)
	got := lockInBackground(ctx, wm)
	h.waitRenewals(t, 1, ttl+testTimeout)

	pid := h.proc.Cmd.Process.Pid
	if err := h.proc.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	clitest.WaitStopped(t, pid, testTimeout)
	stopped := time.Now()
	sent, _, _ := h.last()
	r, ok := wait.Recv(got, ttl+eps+slack+testTimeout)
	if !ok || r.err != nil {
		t.Fatalf("the waiter did not get the lock from the stopped holder: %v (%v)", r.err, ok)
	}
	if earliest := sent.Add(ttl + eps); r.at.Before(earliest) {
		t.Errorf("the waiter got the lock %v before TTL + ε after the send of the holder's last answered keep-alive", earliest.Sub(r.at))
	}
	if wm.Token() <= h.token {
		t.Fatalf("tokens %d then %d", h.token, wm.Token())
	}
	wver, err := w.Put(ctx, lpDataKey, []byte("waiter"), client.WithGuard(key, wm.Token()))
	if err != nil {
		t.Fatalf("the new holder's guarded write: %v", err)
	}
	// The holder stays stopped for longer than TTL + ε (it is already,
	// since the waiter got the lock; this only makes it plain).
	if d := ttl + eps + 100*time.Millisecond - time.Since(stopped); d > 0 {
		time.Sleep(d)
	}
	h.proc.Say("write holder-2") // read as soon as it runs again
	if err := h.proc.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	l := h.wrote(t, 2*testTimeout)
	t.Logf("stopped %v (TTL %v); the waiter got the lock %v after the stop, %v after the holder's last keep-alive was sent; the woken holder answered in %v: %+v",
		resumed.Sub(stopped), ttl, r.at.Sub(stopped), r.at.Sub(sent), time.Since(resumed), l.kv)
	if l.kv["ctxerr"] == "none" {
		t.Errorf("the woken holder's lock context has no error (Done closed: %s)", l.kv["done"])
	}
	if l.kv["err"] != "fenced" {
		t.Errorf("the woken holder's guarded write: %s (%s), want ErrFenced", l.kv["err"], l.kv["msg"])
	}
	it, err := w.Get(ctx, lpDataKey)
	if err != nil || string(it.Value) != "waiter" || it.Version != wver {
		t.Errorf("the data after the woken holder's write: %s, %v; want the waiter's %q at version %d", fmtItem(it), err, "waiter", wver)
	}
	// The woken holder keeps failing: its lock is gone for good.
	if l := h.write(t, "holder-3", testTimeout); l.kv["err"] != "fenced" || l.kv["ctxerr"] == "none" {
		t.Errorf("the woken holder's next write: %+v", l.kv)
	}
	if err := wm.Unlock(ctx); err != nil {
		t.Error(err)
	}
}

// TestHelperCampaigner is not a test: it is the body of a campaigner
// process of TestProcessElectionLeaderKilled. It campaigns on the election
// helperKey, under a new session of helperTTL each round, with the value
// lpEnvName; when Campaign returns it prints "leading token=T from=NS" and
// proclaims "NAME token=T". It leads until its leadership's Context ends,
// when it prints "lost token=T at=NS err=E", or until the parent says
// "resign T", when it prints "resigning token=T at=NS", resigns and prints
// "resigned token=T err=E". Then it closes the session and campaigns
// again. NS are Unix nanoseconds of its wall clock. A campaign that fails
// prints "campaign-failed".
func TestHelperCampaigner(t *testing.T) {
	if os.Getenv(helperEnv) != helperCampaigner {
		t.Skip("helper process for the election process tests")
	}
	err := func() error {
		ttl, err := time.ParseDuration(os.Getenv(helperTTL))
		if err != nil {
			return err
		}
		name, election := os.Getenv(lpEnvName), os.Getenv(helperKey)
		ctx, cancel := context.WithTimeout(context.Background(), 2*testTimeout)
		c, err := lpDial(ctx, name)
		cancel()
		if err != nil {
			return err
		}
		defer c.Close()
		cmds := lpCommands()
		fmt.Println("ready")
		for {
			if err := lpCampaign(c, ttl, name, election, cmds); err != nil {
				fmt.Printf("campaign-failed msg=%v\n", err)
				time.Sleep(100 * time.Millisecond) // a backoff, while the cluster fails over
			}
		}
	}()
	fmt.Printf("error %v\n", err)
	os.Exit(1)
}

// lpCampaign is one round of a campaigner: a session, a campaign, and the
// leadership until it ends.
func lpCampaign(c *client.Client, ttl time.Duration, name, election string, cmds <-chan string) error {
	sctx, scancel := context.WithTimeout(context.Background(), testTimeout)
	s, err := client.NewSession(sctx, c, ttl)
	scancel()
	if err != nil {
		return fmt.Errorf("session: %w", err)
	}
	defer s.Close()
	e := client.NewElection(s, election)
	// The campaign ends with the session: a lost session cannot win.
	cctx, ccancel := context.WithCancel(context.Background())
	defer ccancel()
	go func() {
		select {
		case <-s.Done():
			ccancel()
		case <-cctx.Done():
		}
	}()
	if err := e.Campaign(cctx, []byte(name)); err != nil {
		return fmt.Errorf("campaign (session ended: %v): %w", isClosed(s.Done()), err)
	}
	from := time.Now()
	token, lc := e.Token(), e.Context()
	fmt.Printf("leading token=%d from=%d\n", token, from.UnixNano())
	pctx, pcancel := context.WithTimeout(lc, testTimeout)
	err = e.Proclaim(pctx, []byte(fmt.Sprintf("%s token=%d", name, token)))
	pcancel()
	if err != nil {
		fmt.Printf("proclaim-failed token=%d err=%s msg=%v\n", token, lpErr(err), err)
	}
	for {
		select {
		case <-lc.Done():
			at := time.Now()
			fmt.Printf("lost token=%d at=%d err=%s\n", token, at.UnixNano(), lpErr(lc.Err()))
			return nil
		case cmd := <-cmds:
			if cmd != fmt.Sprintf("resign %d", token) {
				continue // for a leadership of before
			}
			at := time.Now()
			fmt.Printf("resigning token=%d at=%d\n", token, at.UnixNano())
			rctx, rcancel := context.WithTimeout(context.Background(), testTimeout)
			err := e.Resign(rctx)
			rcancel()
			fmt.Printf("resigned token=%d err=%s msg=%v\n", token, lpErr(err), err)
			return nil
		}
	}
}

// lpLeadership is one leadership of a campaigner, as it reported it.
type lpLeadership struct {
	who   string
	token uint64
	from  time.Time
	end   time.Time // zero while it lasts
	how   string    // lost, resigned or killed
	err   string    // its Context's error, if lost
}

// lpObserved is a leader the observer saw.
type lpObserved struct {
	at time.Time
	l  client.Leader
}

// lpElection follows the campaigners of an election and the observer.
type lpElection struct {
	t      *testing.T
	name   string
	ttl    time.Duration
	env    []string
	events chan lpEvent
	procs  map[string]*helperproc.Proc
	killed map[string]time.Time // campaigners killed, and when
	leads  []*lpLeadership
	cur    map[string]*lpLeadership // by campaigner
	failed map[string]int           // campaigns failed, by campaigner
	notes  []string                 // proclaims and resigns that failed

	omu      sync.Mutex
	observed []lpObserved
}

func (el *lpElection) start(who string) {
	el.t.Helper()
	p := helperproc.Start(el.t, "TestHelperCampaigner", append(el.env, lpEnvName+"="+who)...)
	p.Name = "campaigner " + who
	el.procs[who] = p
	lpForward(el.t, p, who, el.events)
}

// current returns the last leadership to begin, if it has not ended.
func (el *lpElection) current() *lpLeadership {
	if len(el.leads) == 0 {
		return nil
	}
	if l := el.leads[len(el.leads)-1]; l.end.IsZero() {
		return l
	}
	return nil
}

func (el *lpElection) handle(ev lpEvent) {
	t := el.t
	t.Helper()
	if ev.eof {
		at, ok := el.killed[ev.who]
		if !ok {
			t.Fatalf("campaigner %s exited", ev.who)
		}
		// Dead by the time its stdout closed: its leadership ended then
		// at the latest.
		if l := el.cur[ev.who]; l != nil {
			l.end, l.how = ev.at, "killed"
			delete(el.cur, ev.who)
			t.Logf("%s killed %v after it began leading with token %d; stdout closed %v after the SIGKILL", ev.who, at.Sub(l.from), l.token, ev.at.Sub(at))
		}
		return
	}
	t.Logf("%s: %s", ev.who, ev.line)
	l := parseLP(ev.line)
	switch l.kind {
	case "ready":
	case "error":
		t.Fatalf("campaigner %s: %q", ev.who, ev.line)
	case "campaign-failed":
		el.failed[ev.who]++
		el.notes = append(el.notes, ev.who+": "+ev.line)
	case "leading":
		if old := el.cur[ev.who]; old != nil {
			t.Fatalf("%s leads with token %d while its leadership of token %d has not ended", ev.who, l.u64("token"), old.token)
		}
		ld := &lpLeadership{who: ev.who, token: l.u64("token"), from: l.time("from")}
		el.leads = append(el.leads, ld)
		el.cur[ev.who] = ld
	case "proclaim-failed":
		el.notes = append(el.notes, ev.who+": "+ev.line)
	case "lost", "resigning":
		ld := el.cur[ev.who]
		if ld == nil || ld.token != l.u64("token") {
			t.Fatalf("%s: %q, for no leadership of its", ev.who, ev.line)
		}
		ld.end, ld.how, ld.err = l.time("at"), l.kind, l.kv["err"]
		if l.kind == "resigning" {
			ld.how = "resigned"
		}
		delete(el.cur, ev.who)
	case "resigned":
		if l.kv["err"] != "none" {
			el.notes = append(el.notes, ev.who+": "+ev.line)
		}
	default:
		t.Fatalf("campaigner %s: %q", ev.who, ev.line)
	}
}

// until handles the campaigners' lines until cond holds, for at most
// within.
func (el *lpElection) until(within time.Duration, what string, cond func() bool) {
	el.t.Helper()
	timer := time.NewTimer(within)
	defer timer.Stop()
	tick := time.NewTicker(20 * time.Millisecond) // for conditions on more than the lines
	defer tick.Stop()
	for !cond() {
		select {
		case ev := <-el.events:
			el.handle(ev)
		case <-tick.C:
		case <-timer.C:
			el.t.Fatalf("timed out after %v waiting for %s", within, what)
		}
	}
}

// run handles the campaigners' lines for d.
func (el *lpElection) run(d time.Duration) {
	el.t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case ev := <-el.events:
			el.handle(ev)
		case <-timer.C:
			return
		}
	}
}

// observed reports whether the observer has seen token.
func (el *lpElection) seen(token uint64) bool {
	el.omu.Lock()
	defer el.omu.Unlock()
	for _, o := range el.observed {
		if o.l.Token == token {
			return true
		}
	}
	return false
}

// reads reports whether c reads the election's record with token.
func (el *lpElection) reads(c *client.Client, token uint64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	it, err := c.Get(ctx, el.name)
	return err == nil && it.Found && len(it.Value) >= 8 && binary.BigEndian.Uint64(it.Value) == token
}

// leader waits until a campaigner leads and the observer has seen it,
// and returns its leadership. The observer must see every leader that
// lasts: within LeaderTimeout, for the cluster may be failing over.
func (el *lpElection) leader() *lpLeadership {
	el.t.Helper()
	var cur *lpLeadership
	el.until(proccluster.LeaderTimeout, "a leader, seen by the observer", func() bool {
		cur = el.current()
		return cur != nil && el.seen(cur.token)
	})
	return cur
}

// next waits until a campaigner leads with a token larger than prev's.
func (el *lpElection) next(prev *lpLeadership, why string) *lpLeadership {
	el.t.Helper()
	el.until(el.ttl+proccluster.LeaderTimeout, fmt.Sprintf("a leader after %s (token %d) %s", prev.who, prev.token, why), func() bool {
		l := el.current()
		return l != nil && l.token > prev.token
	})
	return el.current()
}

// resign asks the current leader, once the observer has seen it, to
// resign, and waits for the next.
func (el *lpElection) resign() {
	el.t.Helper()
	cur := el.leader()
	el.procs[cur.who].Say(fmt.Sprintf("resign %d", cur.token)) // ignored if it lost meanwhile
	el.next(cur, "resigned")
}

// TestProcessElectionLeaderKilled: three campaigner processes on a
// cluster of three; the leader resigns twice, the cluster's leader node
// is killed, the leader resigns again, and then the leading campaigner is
// killed with SIGKILL (a fourth takes its place). An observer in the test
// follows the election. The leaderships, each from the return of
// Campaign to the end of its Context as its campaigner saw it (lost: at
// its safe deadline, or when its session was lost), its resignation, or
// its death, never overlap in wall time, with no slack: a Context ends
// before the server may grant the lock to another; their tokens increase.
// The observer sees tokens that increase, each a leader's with its value;
// it sees every leader that lasts (within LeaderTimeout: the test waits
// for it before it makes one resign or kills it, and at the end), and may
// miss only one lost in a failover, as Observe allows. The cluster may
// also fail over by itself on a loaded machine; the checks hold all the
// same.
func TestProcessElectionLeaderKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three leased processes and four campaigners")
	}
	const (
		ttl  = 3 * time.Second
		eps  = 100 * time.Millisecond
		name = "svc/leader"
	)
	start := time.Now()
	cl := proccluster.Start(t, proccluster.Config{Bins: linBinaries(t), Direct: true,
		Flags: []string{"--ttl-min", "1s", "--lease-term", "1s", "--epsilon", eps.String()}})
	cl.Leader()
	el := &lpElection{t: t, name: name, ttl: ttl, events: make(chan lpEvent, 1024), procs: map[string]*helperproc.Proc{},
		killed: map[string]time.Time{}, cur: map[string]*lpLeadership{}, failed: map[string]int{},
		env: []string{helperEnv + "=" + helperCampaigner, helperAddr + "=" + cl.Endpoints(), helperCA + "=" + cl.CAFile,
			helperTTL + "=" + ttl.String(), helperKey + "=" + name}}

	cfg := cl.ClientConfig()
	cfg.Name, cfg.MaxReconnectDelay = "observer", 200*time.Millisecond
	dctx, dcancel := context.WithTimeout(context.Background(), proccluster.LeaderTimeout)
	o, err := client.Dial(dctx, cl.Endpoints(), cfg)
	dcancel()
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	octx, ocancel := context.WithCancel(context.Background())
	defer ocancel()
	seen := client.Observe(octx, o, name)
	odone := make(chan struct{})
	go func() {
		defer close(odone)
		for l := range seen {
			t.Logf("observer: %q token %d version %d", l.Value, l.Token, l.Version)
			el.omu.Lock()
			el.observed = append(el.observed, lpObserved{time.Now(), l})
			el.omu.Unlock()
		}
	}()
	defer func() { ocancel(); <-odone }()

	for _, who := range []string{"c1", "c2", "c3"} {
		el.start(who)
	}
	el.until(proccluster.LeaderTimeout, "a first leader", func() bool { return el.current() != nil })
	for range 2 {
		el.run(1500 * time.Millisecond)
		el.resign()
	}

	// The cluster's leader node dies; the election goes on.
	el.run(time.Second)
	node := cl.Leader()
	failover := time.Now()
	cl.Kill(node.Name)
	cl.Leader()
	el.until(proccluster.LeaderTimeout+ttl, "a leader after the failover, seen by the observer, its record read", func() bool {
		l := el.current()
		return l != nil && el.seen(l.token) && el.reads(o, l.token)
	})
	t.Logf("node %s, the cluster's leader, killed; a campaigner leads, its record read, %v later (%d leaderships so far)", node.Name, time.Since(failover), len(el.leads))
	el.run(1500 * time.Millisecond)
	el.resign()

	// The leading campaigner dies; another takes its place in line.
	el.run(1500 * time.Millisecond)
	dead := el.leader()
	el.killed[dead.who] = time.Now()
	if err := el.procs[dead.who].Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	el.start("c4")
	next := el.next(dead, "was killed")
	// Its session's lease runs out TTL + ε after its last keep-alive,
	// unless the cluster fails over meanwhile (on a loaded machine it
	// may, by itself): a liveness figure, not checked.
	t.Logf("%s (token %d) killed; %s leads (token %d) %v later (TTL %v + ε %v)", dead.who, dead.token, next.who, next.token, next.from.Sub(el.killed[dead.who]), ttl, eps)

	// The observer sees the last leader; every other leadership has
	// ended.
	el.leader()
	el.until(ttl+testTimeout, "every leadership but the last to end", func() bool {
		for _, l := range el.leads[:len(el.leads)-1] {
			if l.end.IsZero() {
				return false
			}
		}
		return true
	})
	last := el.current()
	if last == nil {
		t.Fatal("nobody leads at the end")
	}
	ocancel()
	<-odone

	// The leaderships, in the order they began.
	leads := slices.Clone(el.leads)
	slices.SortStableFunc(leads, func(a, b *lpLeadership) int { return a.from.Compare(b.from) })
	minGap := map[string]time.Duration{} // by how the leadership before ended
	for i, l := range leads {
		end := "leads"
		if !l.end.IsZero() {
			end = fmt.Sprintf("%s after %v (%s)", l.how, l.end.Sub(l.from), l.err)
		}
		t.Logf("leadership %d: %s token %d from %v, %s", i+1, l.who, l.token, l.from.Sub(start), end)
		if i == 0 {
			continue
		}
		prev := leads[i-1]
		if prev.end.IsZero() {
			t.Errorf("%s (token %d) leads from %v while %s (token %d) has not stopped leading", l.who, l.token, l.from.Format(time.StampMicro), prev.who, prev.token)
			continue
		}
		if gap := l.from.Sub(prev.end); gap < 0 {
			t.Errorf("%s (token %d) leads from %v, %v before %s (token %d) stopped leading (%s)", l.who, l.token, l.from.Format(time.StampMicro), -gap, prev.who, prev.token, prev.how)
		} else if g, ok := minGap[prev.how]; !ok || gap < g {
			minGap[prev.how] = gap
		}
		if l.token <= prev.token {
			t.Errorf("tokens %d then %d", prev.token, l.token)
		}
	}
	// What the observer saw: tokens that increase, each a leadership's
	// (or a campaign's that failed after it proclaimed), with its value.
	byToken := map[uint64]*lpLeadership{}
	for _, l := range leads {
		byToken[l.token] = l
	}
	observedTokens := map[uint64]bool{}
	var prevToken uint64
	leaders, none := 0, 0
	for _, ob := range el.observed {
		if ob.l.Token == 0 {
			none++
			continue
		}
		leaders++
		who, rest, _ := strings.Cut(string(ob.l.Value), " ")
		if ob.l.Token < prevToken {
			t.Errorf("the observer saw token %d after %d", ob.l.Token, prevToken)
		}
		prevToken = ob.l.Token
		observedTokens[ob.l.Token] = true
		if rest != "" && rest != fmt.Sprintf("token=%d", ob.l.Token) {
			t.Errorf("observed value %q with token %d", ob.l.Value, ob.l.Token)
		}
		if l := byToken[ob.l.Token]; l == nil {
			if el.failed[who] == 0 {
				t.Errorf("the observer saw %q with token %d, which no campaigner reported leading with", ob.l.Value, ob.l.Token)
			}
		} else if l.who != who {
			t.Errorf("the observer saw %q with token %d, %s's", ob.l.Value, ob.l.Token, l.who)
		}
	}
	// The test waited for the observer to see each leader it made
	// resign or killed, and the last. A leadership that ended by itself
	// (lost: its Context ended at its safe deadline, in a failover) may
	// have come and gone while the observer could not read: Observe
	// misses intermediate leaders then, never the latest.
	missed := 0
	for _, l := range leads {
		if !observedTokens[l.token] {
			missed++
			if l.how != "lost" {
				t.Errorf("the observer never saw %s's leadership with token %d (%s after %v)", l.who, l.token, l.how, l.end.Sub(l.from))
			} else {
				t.Logf("the observer never saw %s's leadership with token %d, lost after %v", l.who, l.token, l.end.Sub(l.from))
			}
		}
	}
	t.Logf("%d leaderships, tokens %d to %d; shortest gap to the next after each way of ending %v; the observer saw %d records of a leader (%d tokens) and %d times none, missed %d; campaigns failed %v; notes %q",
		len(leads), leads[0].token, last.token, minGap, leaders, len(observedTokens), none, missed, el.failed, el.notes)
	if len(leads) < 5 {
		t.Errorf("%d leaderships, want at least 5 (the first, three resignations, a kill)", len(leads))
	}
}

// TestHelperQueueWorker is not a test: it is the body of a worker process
// of TestProcessQueueWorkerKilled. Under a session of helperTTL it claims
// tasks of the queue helperKey one after another, and for each prints
// "claimed KEY token=T attempt=A", works lpEnvWork, applies the task's
// effect and completes it. The effect is a transaction on the resource,
// guarded by the claim's token, that creates lpEffectPrefix + KEY if it
// does not exist: "applied KEY token=T rev=R" if it did, "already KEY
// token=T" if an earlier claim had, "effect-failed KEY ..." if the
// transaction failed (ErrFenced: the claim was lost). Then "done KEY
// token=T", or "complete-failed KEY ...". If its session is lost, it says
// "session-lost" and goes on under a new one.
func TestHelperQueueWorker(t *testing.T) {
	if os.Getenv(helperEnv) != helperQueueWorker {
		t.Skip("helper process for the queue process tests")
	}
	err := func() error {
		ttl, err := time.ParseDuration(os.Getenv(helperTTL))
		if err != nil {
			return err
		}
		work, err := time.ParseDuration(os.Getenv(lpEnvWork))
		if err != nil {
			return err
		}
		name := os.Getenv(lpEnvName)
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		c, err := lpDial(ctx, name)
		if err != nil {
			return err
		}
		defer c.Close()
		s, err := client.NewSession(ctx, c, ttl)
		if err != nil {
			return err
		}
		q := client.NewQueue(c, os.Getenv(helperKey))
		go func() {
			io.Copy(io.Discard, os.Stdin)
			os.Exit(0) // the parent is gone
		}()
		fmt.Println("ready")
		for {
			task, err := q.Claim(context.Background(), s)
			if err != nil {
				if !isClosed(s.Done()) {
					return fmt.Errorf("claim: %w", err)
				}
				// Its lease ran out on this client's clock (a process
				// starved of CPU for most of its TTL): its claims are
				// another's to take, and its writes under them are
				// fenced once the server has ended them. Go on under a
				// new session, as a worker would.
				fmt.Printf("session-lost msg=%v\n", err)
				s.Close()
				sctx, scancel := context.WithTimeout(context.Background(), testTimeout)
				s, err = client.NewSession(sctx, c, ttl)
				scancel()
				if err != nil {
					return err
				}
				continue
			}
			token := task.Token()
			fmt.Printf("claimed %s token=%d attempt=%d\n", task.Key, token, task.Attempt)
			time.Sleep(work) // the task's work
			eff := lpEffectPrefix + task.Key
			wctx, wcancel := context.WithTimeout(context.Background(), testTimeout)
			r, err := c.Txn(wctx).Guard(task.Key, token).If(client.Absent(eff)).
				Then(client.PutOp(eff, []byte(fmt.Sprintf("%s token=%d", name, token)))).Commit()
			switch {
			case err != nil:
				fmt.Printf("effect-failed %s token=%d err=%s msg=%v\n", task.Key, token, lpErr(err), err)
			case r.Succeeded:
				fmt.Printf("applied %s token=%d rev=%d\n", task.Key, token, r.Revision)
			default:
				fmt.Printf("already %s token=%d\n", task.Key, token)
			}
			if err == nil {
				if err := task.Complete(wctx); err != nil {
					fmt.Printf("complete-failed %s token=%d err=%s msg=%v\n", task.Key, token, lpErr(err), err)
				} else {
					fmt.Printf("done %s token=%d\n", task.Key, token)
				}
			}
			wcancel()
		}
	}()
	fmt.Printf("error %v\n", err)
	os.Exit(1)
}

// lpClaim is a claim of a task, as its worker reported it.
type lpClaim struct {
	who     string
	token   uint64
	attempt int
	at      time.Time // when the test read the line
}

// TestProcessQueueWorkerKilled: three worker processes work through 30
// tasks; one is killed with SIGKILL just after it claimed a task. Every
// task completes, once, under its last claim; the dead worker's task is
// taken over by another worker, with a larger token and the next attempt,
// once the dead one's session has run out (within TTL + ε + 3 s of the
// kill). Delivery is at least once (that task is claimed twice), so
// exactly once can only be the resource's doing: it takes an effect only
// under the task's current claim (the guard: a claim that was taken over
// cannot write) and only if the task has none yet (Absent: a claim that
// takes over does not write it again). Then every task ends with exactly
// one effect, made under one of its claims: its key under lpEffectPrefix
// exists, at the revision of the one transaction that reported creating
// it (or, if the dead worker created it without living to say so, none
// reported it and the taker found it there), and its value names a claim
// of that task. The dead worker's token no longer passes the guard.
func TestProcessQueueWorkerKilled(t *testing.T) {
	const (
		ttl   = 2 * time.Second
		eps   = 100 * time.Millisecond
		slack = 3 * time.Second
		tasks = 30
		work  = 150 * time.Millisecond
		queue = "jobs"
	)
	srv := clitest.StartServer(t, linBinaries(t), t.TempDir(), t.TempDir(), "--ttl-min", "1s", "--lease-term", "1s", "--epsilon", eps.String())
	cfg := srv.ClientConfig()
	cfg.Name = "producer"
	p := dialAddr(t, srv.Addr, srv.CA, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 4*testTimeout)
	defer cancel()
	q := client.NewQueue(p, queue)
	enqueued := map[string]bool{}
	for i := range tasks {
		k, err := q.Enqueue(ctx, []byte(strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		enqueued[k] = true
	}

	events := make(chan lpEvent, 1024)
	procs := map[string]*helperproc.Proc{}
	for _, who := range []string{"w1", "w2", "w3"} {
		wp := helperproc.Start(t, "TestHelperQueueWorker", helperEnv+"="+helperQueueWorker, helperAddr+"="+srv.Addr, helperCA+"="+srv.CA,
			helperTTL+"="+ttl.String(), helperKey+"="+queue, lpEnvName+"="+who, lpEnvWork+"="+work.String())
		wp.Name = "worker " + who
		procs[who] = wp
		lpForward(t, wp, who, events)
	}

	claims := map[string][]lpClaim{} // by task
	applied := map[string][]string{} // by task: who applied its effect
	appliedAt := map[string]uint64{} // by task: the revision of its effect
	already := map[string][]string{}
	done := map[string][]lpClaim{} // by task: the claims that completed it
	perWorker := map[string]int{}  // tasks done
	var victim string              // the worker killed
	var victimTask string
	var victimToken uint64
	var killed time.Time
	var failures []lpEvent
	sessionsLost := map[string]int{}
	timer := time.NewTimer(tasks*work + ttl + eps + slack + 2*testTimeout)
	defer timer.Stop()
	for len(done) < tasks {
		var ev lpEvent
		select {
		case ev = <-events:
		case <-timer.C:
			t.Fatalf("%d of %d tasks done; claims %d", len(done), tasks, len(claims))
		}
		if ev.eof {
			if ev.who != victim {
				t.Fatalf("worker %s exited", ev.who)
			}
			continue
		}
		l := parseLP(ev.line)
		key, token := l.arg(0), l.u64("token")
		switch l.kind {
		case "ready":
		case "error":
			t.Fatalf("worker %s: %q", ev.who, ev.line)
		case "claimed":
			if !enqueued[key] {
				t.Fatalf("worker %s claimed %q, not a task enqueued", ev.who, key)
			}
			attempt, _ := strconv.Atoi(l.kv["attempt"])
			claims[key] = append(claims[key], lpClaim{ev.who, token, attempt, ev.at})
			if victim == "" && len(done) >= 5 {
				victim, victimTask, victimToken = ev.who, key, token
				if err := procs[victim].Cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
				killed = time.Now()
			}
		case "applied":
			applied[key] = append(applied[key], ev.who)
			appliedAt[key] = l.u64("rev")
		case "already":
			already[key] = append(already[key], ev.who)
		case "done":
			done[key] = append(done[key], lpClaim{who: ev.who, token: token, at: ev.at})
			perWorker[ev.who]++
		case "effect-failed", "complete-failed":
			failures = append(failures, ev)
		case "session-lost":
			sessionsLost[ev.who]++
		default:
			t.Fatalf("worker %s: %q", ev.who, ev.line)
		}
	}
	if victim == "" {
		t.Fatal("no worker was killed")
	}
	wait.For(t, testTimeout, "the queue to be empty", func() bool {
		ls, err := q.List(ctx)
		return err == nil && len(ls) == 0
	})

	// Every task done once, by its last claim.
	claimCount, retaken := 0, 0
	for k := range enqueued {
		cs := claims[k]
		claimCount += len(cs)
		if len(cs) > 1 {
			retaken++
		}
		if len(done[k]) != 1 {
			t.Errorf("task %s completed %d times: %+v", k, len(done[k]), done[k])
			continue
		}
		if d, last := done[k][0], cs[len(cs)-1]; d.who != last.who || d.token != last.token {
			t.Errorf("task %s completed by %s under token %d, its last claim %s's under %d", k, d.who, d.token, last.who, last.token)
		}
		for i := 1; i < len(cs); i++ {
			if cs[i].token <= cs[i-1].token || cs[i].attempt != cs[i-1].attempt+1 {
				t.Errorf("task %s claimed with token %d (attempt %d) then %d (attempt %d)", k, cs[i-1].token, cs[i-1].attempt, cs[i].token, cs[i].attempt)
			}
		}
	}
	// The dead worker's task, taken over.
	vc := claims[victimTask]
	vi := slices.IndexFunc(vc, func(c lpClaim) bool { return c.who == victim && c.token == victimToken })
	if vi < 0 || vi == len(vc)-1 {
		t.Errorf("the claims of the dead worker's task %s: %+v; want the dead worker's, then another's", victimTask, vc)
	} else {
		take := vc[vi+1]
		if take.who == victim || take.token <= victimToken {
			t.Errorf("the dead worker's task %s claimed again by %s with token %d (the dead one's %d)", victimTask, take.who, take.token, victimToken)
		}
		delay := take.at.Sub(killed)
		t.Logf("%s killed after claiming %s (token %d); %s took it over %v later (token %d, attempt %d)", victim, victimTask, victimToken, take.who, delay, take.token, take.attempt)
		if delay > ttl+eps+slack {
			t.Errorf("the takeover came %v after the kill, more than TTL + ε + %v", delay, slack)
		}
		if d := done[victimTask]; len(d) == 1 && d[0].who == victim {
			t.Errorf("the dead worker completed its task")
		}
	}
	// The resource: one effect per task, under one of its claims.
	effects, err := p.List(ctx, lpEffectPrefix, client.Limit(tasks+10))
	if err != nil {
		t.Fatal(err)
	}
	if len(effects.KVs) != tasks {
		t.Errorf("%d effects, want %d", len(effects.KVs), tasks)
	}
	for _, kv := range effects.KVs {
		k := strings.TrimPrefix(kv.Key, lpEffectPrefix)
		if !enqueued[k] {
			t.Errorf("effect %s of no task", kv.Key)
			continue
		}
		who, tok, _ := strings.Cut(string(kv.Value), " token=")
		tokv, _ := strconv.ParseUint(tok, 10, 64)
		if !slices.ContainsFunc(claims[k], func(c lpClaim) bool { return c.who == who && c.token == tokv }) {
			t.Errorf("effect %s = %q: no claim of the task", kv.Key, kv.Value)
		}
		switch a := applied[k]; {
		case len(a) > 1:
			t.Errorf("the effect of %s applied %d times, by %v", k, len(a), a)
		case len(a) == 1 && (a[0] != who || appliedAt[k] != kv.Version):
			t.Errorf("the effect of %s applied by %s at %d, but it says %q at %d", k, a[0], appliedAt[k], kv.Value, kv.Version)
		case len(a) == 0 && who != victim:
			t.Errorf("the effect of %s, %q, applied by nobody who said so", k, kv.Value)
		}
	}
	// A worker whose session was lost may find its claim fenced; no
	// other may fail.
	for _, f := range failures {
		if sessionsLost[f.who] == 0 || parseLP(f.line).kv["err"] != "fenced" {
			t.Errorf("%s: %s", f.who, f.line)
		} else {
			t.Logf("%s, whose session was lost: %s", f.who, f.line)
		}
	}
	// The dead worker's token no longer passes the task's guard.
	if _, err := p.Put(ctx, lpEffectPrefix+victimTask, []byte("late"), client.WithGuard(victimTask, victimToken)); !errors.Is(err, client.ErrFenced) {
		t.Errorf("a write guarded by the dead worker's claim = %v, want ErrFenced", err)
	}
	t.Logf("%d tasks, %d claims, %d taken over; done per worker %v; effects found already there: %v; sessions lost %v", tasks, claimCount, retaken, perWorker, already, sessionsLost)
}
