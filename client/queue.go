package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Queue is a queue of tasks that workers claim, after the database task
// tables of the documents leased comes from (DESIGN §5.1), without the
// database and without polling. A task is a key under name + "/tasks/";
// a worker claims the oldest one nobody holds by acquiring its write lease
// under the worker's Session (a lock), and keeps it while its session
// lives; Complete deletes the task under that lock, Fail puts it back. A
// worker that dies loses its tasks when its session's lease ends, and the
// next worker to claim takes them over: the dead worker's fenced writes
// fail from then on. Delivery is at least once; a resource that checks
// each task's token (WithGuard, CheckToken) applies its effect at most
// once.
//
// A task's record holds its attempt (a uvarint) and then its value. Tasks
// that fail MaxAttempts times move under name + "/dead/".
//
// A Queue is safe for concurrent use.
type Queue struct {
	c    *Client
	name string
	// MaxAttempts bounds how many times a task is claimed and failed
	// before Fail moves it to the dead letters: 5 unless set before use;
	// 0 or less means never.
	MaxAttempts int
}

// NewQueue returns the queue name of client c.
func NewQueue(c *Client, name string) *Queue { return &Queue{c: c, name: name, MaxAttempts: 5} }

// Prefix returns the prefix of the queue's tasks.
func (q *Queue) Prefix() string { return q.name + "/tasks/" }

// DeadPrefix returns the prefix of the tasks that failed MaxAttempts times.
func (q *Queue) DeadPrefix() string { return q.name + "/dead/" }

// Task is a task of a queue: its key and value, its attempt (1 the first
// time it is claimed after Enqueue), and, once claimed, the token of its
// lock, which fences its worker's writes.
type Task struct {
	Key     string
	Value   []byte
	Attempt int
	Version uint64
	q       *Queue
	wl      *WriteLease
	// claimCtx is the context of the claim (Context).
	claimCtx *lockContext
}

// Token returns the fencing token of the claim, 0 if the task is not
// claimed by this worker.
func (t *Task) Token() uint64 {
	if t.wl == nil {
		return 0
	}
	return t.wl.Token()
}

// Context returns a context cancelled when the claim is lost or at its
// safe deadline, as Mutex.Context.
func (t *Task) Context() context.Context {
	if t.wl == nil {
		lc := &lockContext{done: make(chan struct{})}
		lc.end(context.Canceled)
		return lc
	}
	return t.claimCtx
}

func encodeTask(attempt int, value []byte) []byte {
	b := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+len(value)), uint64(attempt))
	return append(b, value...)
}

func decodeTask(b []byte) (attempt int, value []byte, err error) {
	a, n := binary.Uvarint(b)
	if n <= 0 || a > 1<<31 {
		return 0, nil, fmt.Errorf("%w: not a task record (%d bytes)", ErrInvalidArgument, len(b))
	}
	return int(a), b[n:], nil
}

// Enqueue adds a task of value at the end of the queue, and returns its
// key. Tasks are claimed in the order their last Enqueue, claim or Fail
// committed: a task taken over from a worker that died comes after those
// enqueued before it was claimed.
func (q *Queue) Enqueue(ctx context.Context, value []byte) (string, error) {
	var id [12]byte
	rand.Read(id[:]) // never fails (crypto/rand)
	key := q.Prefix() + hex.EncodeToString(id[:])
	_, err := q.c.Put(ctx, key, encodeTask(0, value))
	return key, err
}

// List returns the queue's tasks, oldest first, with whether each is
// claimed now (by anyone) and, if so, its token.
func (q *Queue) List(ctx context.Context) ([]TaskStatus, error) {
	tasks, err := q.tasks(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]TaskStatus, len(tasks))
	for i, t := range tasks {
		r, err := q.c.Lock(ctx, t.Key)
		if err != nil {
			return nil, err
		}
		out[i] = TaskStatus{Key: t.Key, Value: t.Value, Attempt: t.Attempt, Version: t.Version, Claimed: r.Held, Token: r.Token}
	}
	return out, nil
}

// TaskStatus is a task as Queue.List reports it.
type TaskStatus struct {
	Key     string
	Value   []byte
	Attempt int
	Version uint64
	Claimed bool
	Token   uint64
}

// tasks reads the queue's tasks, under a prefix lease when the server
// grants one, oldest first: by the version of their record, the commit of
// their last Enqueue or Fail.
func (q *Queue) tasks(ctx context.Context) ([]Task, error) {
	tasks, _, err := q.tasksAt(ctx)
	return tasks, err
}

// tasksAt is tasks, and the revision its first page was read at.
func (q *Queue) tasksAt(ctx context.Context) ([]Task, uint64, error) {
	var tasks []Task
	var rev uint64
	after := ""
	for {
		opts := []ListOption{Leased()}
		if after != "" {
			opts = append(opts, StartAfter(after))
		}
		r, err := q.c.List(ctx, q.Prefix(), opts...)
		if err != nil {
			return nil, 0, err
		}
		if rev == 0 {
			rev = r.Revision
		}
		for _, kv := range r.KVs {
			a, v, err := decodeTask(kv.Value)
			if err != nil {
				return nil, 0, fmt.Errorf("queue %q: task %q: %w", q.name, kv.Key, err)
			}
			tasks = append(tasks, Task{Key: kv.Key, Value: v, Attempt: a, Version: kv.Version, q: q})
		}
		if !r.More || len(r.KVs) == 0 {
			break
		}
		after = r.KVs[len(r.KVs)-1].Key
	}
	slices.SortFunc(tasks, func(a, b Task) int { return int64cmp(a.Version, b.Version) })
	return tasks, rev, nil
}

func int64cmp(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Claim claims the oldest task nobody holds, under session s: its lock is
// s's until Complete or Fail, or until s's lease ends. While no task is
// free it waits, until ctx ends (ErrCanceled) or s does (ErrSessionDone),
// for the server to say that one may be: a task enqueued or put back, or
// a claim that ended. The claimed task's Attempt counts this claim.
func (q *Queue) Claim(ctx context.Context, s *Session) (*Task, error) {
	return q.claim(ctx, s.Lease(), s.Done())
}

// ClaimUnder is Claim under TTL lease id, which this client need not keep
// alive: a shell worker's claim, left to the lease when the process exits
// and finished by another (Resume). The task's Context has ended at once:
// the client cannot vouch for a lease it does not keep alive.
func (q *Queue) ClaimUnder(ctx context.Context, id LeaseID) (*Task, error) {
	if err := id.check(); err != nil {
		return nil, err
	}
	return q.claim(ctx, id, nil)
}

// claim claims a task under TTL lease id, kept alive until sdone is
// closed (nil: never by this client).
//
// A claimer that waits hears of new tasks from a watch of the tasks'
// prefix (a task enqueued or put back is a put there), and of claims that
// ended from the invalidation of the lock records it read: a claimed
// task keeps the prefix from being leased, its holder's writes under it
// going at once.
func (q *Queue) claim(ctx context.Context, id LeaseID, sdone <-chan struct{}) (*Task, error) {
	c := q.c
	var quick backoff
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	var w *Watcher
	for {
		tasks, rev, err := q.tasksAt(ctx)
		if err != nil {
			return nil, err
		}
		records := make([]string, len(tasks))
		for i, t := range tasks {
			records[i] = lockRecordKey(t.Key)
		}
		wake, stop := c.waitFor(records, []string{q.Prefix()})
		t, err := q.claimFree(ctx, id, sdone, tasks)
		if t != nil || err != nil {
			stop()
			return t, err
		}
		if w == nil {
			w = c.Watch(wctx, q.Prefix(), WithPrefix(), FromRevision(rev+1))
		}
		timer := c.clock.NewTimer(q.wait(&quick, records))
		select {
		case <-wake:
			quick = 0 // a change is on its way: look again soon if it has not committed
		case _, ok := <-w.C:
			if !ok {
				w = nil // ended (compacted): watched again from the next listing
			}
		case <-timer.Chan():
		case <-ctx.Done():
		case <-sdone:
		case <-c.ctx.Done():
		}
		timer.Stop()
		stop()
		switch {
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%w: claim from queue %q: %w", ErrCanceled, q.name, ctx.Err())
		case isDone(sdone):
			return nil, fmt.Errorf("%w: claim from queue %q", ErrSessionDone, q.name)
		case c.ctx.Err() != nil:
			return nil, ErrClosed
		}
	}
}

// wait is how long Claim waits for a change before it lists the tasks
// again: until the first of the read leases on the tasks' lock records
// runs out (a read then renews it), or soon if one of them got no lease (a
// claim's end was pending: the invalidation that woke the claimer comes
// before that change commits), as renewWait does for a key; a term if
// there are no tasks.
func (q *Queue) wait(quick *backoff, records []string) time.Duration {
	c := q.c
	term := c.defaultTerm()
	left := term
	now := c.clock.Now()
	for _, r := range records {
		_, deadline, ok := c.cache.Peek(r)
		if !ok || !now.Before(deadline) {
			return quick.next(term)
		}
		left = min(left, deadline.Sub(now))
	}
	*quick = 0
	return max(left, term/10)
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// claimFree tries the tasks in order and claims the first it can; nil if
// none is free.
func (q *Queue) claimFree(ctx context.Context, id LeaseID, sdone <-chan struct{}, tasks []Task) (*Task, error) {
	c := q.c
	for _, t := range tasks {
		r, err := c.Lock(ctx, t.Key)
		if err != nil {
			return nil, err
		}
		if r.Held {
			continue
		}
		wl, err := c.AcquireWriteLease(ctx, t.Key, AcquireTry(), AcquireUnder(id))
		if errors.Is(err, ErrLocked) {
			continue
		}
		if err != nil {
			return nil, err
		}
		// The task as it is now, under the claim: it may have been
		// completed, or failed and put back, since it was listed.
		it, err := c.Get(ctx, t.Key)
		if err == nil && !it.Found {
			err = wl.Release(ctx)
			if err != nil {
				return nil, err
			}
			continue
		}
		var a int
		var v []byte
		if err == nil {
			a, v, err = decodeTask(it.Value)
		}
		if err == nil {
			a++
			_, err = wl.Put(ctx, encodeTask(a, v))
		}
		if err != nil {
			rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = wl.Release(rctx)
			cancel()
			return nil, err
		}
		t := &Task{Key: t.Key, Value: v, Attempt: a, q: q, wl: wl}
		t.claimCtx = newLockContext(c, id, sdone, wl)
		return t, nil
	}
	return nil, nil
}

// Resume returns the task key claimed with token under TTL lease id by
// another client (ResumeLock): a shell worker's claim, made by one
// leasectl and finished by another. It reads the task as it is now.
func (q *Queue) Resume(ctx context.Context, key string, token uint64, id LeaseID) (*Task, error) {
	if !strings.HasPrefix(key, q.Prefix()) {
		return nil, fmt.Errorf("%w: %q is not a task of queue %q (%s...)", ErrInvalidArgument, key, q.name, q.Prefix())
	}
	wl, err := q.c.ResumeLock(key, token, id)
	if err != nil {
		return nil, err
	}
	it, err := q.c.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	if !it.Found {
		return nil, fmt.Errorf("%w: task %q", ErrNotFound, key)
	}
	a, v, err := decodeTask(it.Value)
	if err != nil {
		return nil, err
	}
	return &Task{Key: key, Value: v, Attempt: a, Version: it.Version, q: q, wl: wl}, nil
}

// Complete deletes the task under its claim, and ends the claim. Once the
// claim is lost (its session ended, and another worker may hold the
// task), it fails with ErrFenced and changes nothing.
func (t *Task) Complete(ctx context.Context) error {
	if t.wl == nil {
		return fmt.Errorf("%w: task %q is not claimed", ErrInvalidArgument, t.Key)
	}
	if _, err := t.wl.Delete(ctx); err != nil {
		return err
	}
	return t.release(ctx)
}

// Fail gives the task up: after delay (the claim is kept meanwhile, so
// that no worker takes it sooner, unless this one's session ends), it is
// put back at the end of the queue, or, once it has failed MaxAttempts
// times, moved to the dead letters (DeadPrefix). Like Complete, it fails
// with ErrFenced once the claim is lost.
func (t *Task) Fail(ctx context.Context, delay time.Duration) error {
	if t.wl == nil {
		return fmt.Errorf("%w: task %q is not claimed", ErrInvalidArgument, t.Key)
	}
	if delay > 0 {
		timer := t.q.c.clock.NewTimer(delay)
		select {
		case <-timer.Chan():
		case <-ctx.Done():
			timer.Stop()
			return fmt.Errorf("%w: fail task %q: %w", ErrCanceled, t.Key, ctx.Err())
		}
	}
	rec := encodeTask(t.Attempt, t.Value)
	if max := t.q.MaxAttempts; max > 0 && t.Attempt >= max {
		dead := t.q.DeadPrefix() + strings.TrimPrefix(t.Key, t.q.Prefix())
		if _, err := t.q.c.Txn(ctx).Then(PutOp(dead, rec), DeleteOp(t.Key).Under(t.wl)).Commit(); err != nil {
			return err
		}
		return t.release(ctx)
	}
	if _, err := t.wl.Put(ctx, rec); err != nil {
		return err
	}
	return t.release(ctx)
}

// release ends the claim.
func (t *Task) release(ctx context.Context) error {
	if t.claimCtx != nil {
		t.claimCtx.end(context.Canceled)
	}
	return t.wl.Release(ctx)
}
