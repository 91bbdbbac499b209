package lincheck

import (
	"fmt"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Recorder records the operations of concurrent clients. It is safe for
// concurrent use. Times are read from the monotonic clock.
type Recorder struct {
	base time.Time

	mu  sync.Mutex // guards ops
	ops []porcupine.Operation
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{base: time.Now()} }

// Call is an operation that has been called and has not returned yet.
type Call struct {
	client int
	in     Input
	call   int64
}

// now returns the time since the recorder began, in nanoseconds.
func (r *Recorder) now() int64 { return int64(time.Since(r.base)) }

// Begin records the call of an operation by client (numbered from 0). The
// caller must call it just before the operation starts.
func (r *Recorder) Begin(client int, in Input) Call {
	return Call{client: client, in: in, call: r.now()}
}

// End records the return of c with out. The caller must call it just after
// the operation returns. Reads that failed are not recorded: they reveal
// nothing.
func (r *Recorder) End(c Call, out Output) {
	ret := r.now()
	if c.in.Kind == Get && out.Outcome != OK {
		return
	}
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: c.client, Input: c.in, Call: c.call, Output: out, Return: ret})
	r.mu.Unlock()
}

// Expiry records that TTL lease id, of key, may end from the moment from
// on (its TTL after the last keep-alive acknowledged was sent, on this
// process's clock) because its holder, client, stopped keeping it alive.
// In the history it is an Expire called then and returning after every
// other operation: the lease ends at some moment after from.
func (r *Recorder) Expiry(client int, key string, id uint64, from time.Time) {
	r.mu.Lock()
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: Input{Kind: Expire, Key: key, Lease: id},
		Call: int64(from.Sub(r.base)), Output: Output{Outcome: OK}})
	r.mu.Unlock()
}

// Summary counts the operations of a history.
type Summary struct {
	Ops      int // operations checked
	Reads    int // Gets that returned, of which
	Cached   int // were served from a client's cache, and
	Listed   int // were one key of a listing (Input.Listed)
	Writes   int // writes and acquisitions that took effect
	Refused  int // CAS mismatches, fenced writes, abandoned writes
	Unknown  int // operations of unknown outcome, of which
	Unneeded int // were left out: writes never read (see History)
}

func (s Summary) String() string {
	return fmt.Sprintf("%d ops: %d reads (%d cached, %d listed), %d writes, %d refused, %d unknown (%d never read, left out)",
		s.Ops, s.Reads, s.Cached, s.Listed, s.Writes, s.Refused, s.Unknown, s.Unneeded)
}

// History returns the operations recorded so far, as a porcupine history,
// and counts them.
//
// An operation of unknown outcome may take effect at any time after its
// call, so its return is put after every other event. A write of unknown
// outcome whose value no read returned is left out: leaving
// it out is the same as choosing that it never took effect, which the model
// always allows, and it spares the checker an operation concurrent with all
// that follow. Deletes, whose effect carries no value, are always kept, and
// so are the writes of a key with TTL leases: a write there also attaches
// the key to a lease or detaches it, which shows when the lease ends
// (the key deleted, or not, and the revocation's revision), though nobody
// read its value. So is a write called before a compare-and-swap on its
// key that mismatched returned: the mismatch may be the write's effect
// (the key exists, or moved past the version last read), seen without its
// value. No other outcome needs a write of unknown outcome to have taken
// effect.
func (r *Recorder) History() ([]porcupine.Operation, Summary) {
	r.mu.Lock()
	ops := append([]porcupine.Operation(nil), r.ops...)
	r.mu.Unlock()
	type kv struct{ key, value string }
	seen := make(map[kv]bool)
	leased := make(map[string]bool)      // keys with TTL leases
	mismatched := make(map[string]int64) // key → latest return of a CAS that mismatched
	var end int64
	for _, op := range ops {
		end = max(end, op.Return, op.Call)
		in, out := op.Input.(Input), op.Output.(Output)
		if out.Outcome == OK && out.Found && in.Kind == Get {
			seen[kv{in.Key, out.Value}] = true
		}
		if in.Kind >= Grant {
			leased[in.Key] = true
		}
		if in.Kind == CAS && out.Outcome == Mismatch {
			mismatched[in.Key] = max(mismatched[in.Key], op.Return)
		}
	}
	var s Summary
	kept := ops[:0]
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		switch {
		case in.Kind == Expire:
			op.Return = end + 1
			s.Writes++
		case out.Outcome == Unknown:
			s.Unknown++
			valued := in.Kind == Put || in.Kind == CAS || in.Kind == FencedPut || in.Kind == LeasePut
			if in.Kind != Delete && in.Kind != FencedDelete && in.Kind != Acquire && in.Kind != Revoke &&
				!seen[kv{in.Key, in.Value}] && !(valued && leased[in.Key]) && mismatched[in.Key] <= op.Call {
				s.Unneeded++
				continue
			}
			op.Return = end + 1
		case in.Kind == Get:
			s.Reads++
			if out.Cached {
				s.Cached++
			}
			if in.Listed {
				s.Listed++
			}
		case out.Outcome == OK:
			s.Writes++
		default:
			s.Refused++
		}
		kept = append(kept, op)
	}
	s.Ops = len(kept)
	return kept, s
}
