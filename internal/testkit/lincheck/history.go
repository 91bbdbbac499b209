package lincheck

import (
	"fmt"
	"slices"
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

// EndListing records the return of a listing: calls are the calls of its
// reads (Input.Listed), one for each key it covers, begun one after the
// other just before it, and outs their outputs (each Cached if the listing
// was served from the client's cache). The reads are recorded
// with one call (the first's) and one return, which marks them as one
// listing: the model checks those of its keys that are in one part at one
// point (partition), as a listing is of one revision. Reads that failed
// are not recorded. The caller must call it just after the listing
// returns.
func (r *Recorder) EndListing(calls []Call, outs []Output) {
	ret := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, c := range calls {
		if outs[i].Outcome == OK {
			r.ops = append(r.ops, porcupine.Operation{ClientId: c.client, Input: c.in, Call: calls[0].call, Output: outs[i], Return: ret})
		}
	}
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
	Listings int // listings with a read recorded (Recorder.EndListing), of which
	// CachedListings were served from a client's cache (a listing
	// cached under a prefix lease: Output.Cached).
	CachedListings int
	Writes         int // writes and acquisitions that took effect
	Txns           int // transactions, of whatever outcome
	Refused        int // CAS mismatches, fenced writes, abandoned writes
	Unknown        int // operations of unknown outcome, of which
	Unneeded       int // were left out: writes never read (see History)
}

func (s Summary) String() string {
	return fmt.Sprintf("%d ops: %d reads (%d cached, %d listed in %d listings, %d of them cached), %d writes, %d refused, %d unknown (%d never read, left out), %d transactions",
		s.Ops, s.Reads, s.Cached, s.Listed, s.Listings, s.CachedListings, s.Writes, s.Refused, s.Unknown, s.Unneeded, s.Txns)
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
// value; and, likewise, one called before a transaction that compared its
// key returned, whichever branch the compares chose. No other outcome
// needs a write of unknown outcome to have taken effect. A transaction of
// unknown outcome is a write of each key it may write, in either branch:
// left out if it deletes none and no value it may put is needed.
func (r *Recorder) History() ([]porcupine.Operation, Summary) {
	r.mu.Lock()
	ops := append([]porcupine.Operation(nil), r.ops...)
	r.mu.Unlock()
	type kv struct{ key, value string }
	seen := make(map[kv]bool)
	leased := make(map[string]bool) // keys with TTL leases
	// compared: key → latest return of an operation whose outcome
	// compared the key's state without reading its value: a CAS that
	// mismatched, or a transaction that compared it.
	compared := make(map[string]int64)
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
			compared[in.Key] = max(compared[in.Key], op.Return)
		}
		if in.Kind == Txn && out.Outcome == OK {
			for _, c := range in.If {
				compared[c.Key] = max(compared[c.Key], op.Return)
			}
		}
	}
	// keep reports whether an operation of unknown outcome, in called at
	// call, must stay.
	keep := func(call int64, in Input) bool {
		switch in.Kind {
		case Delete, FencedDelete, Acquire, Revoke:
			return true
		case Put, CAS, FencedPut, LeasePut:
			return seen[kv{in.Key, in.Value}] || leased[in.Key] || compared[in.Key] > call
		case Txn:
			for _, op := range slices.Concat(in.Then, in.Else) {
				if op.Delete || seen[kv{op.Key, op.Value}] || leased[op.Key] || compared[op.Key] > call {
					return true
				}
			}
			return false
		}
		return seen[kv{in.Key, in.Value}] || compared[in.Key] > call
	}
	var s Summary
	// listings: the listings counted, by client, call and return, as
	// joinListings tells them apart.
	type listingID struct {
		client    int
		call, ret int64
	}
	listings := make(map[listingID]bool)
	kept := ops[:0]
	for _, op := range ops {
		in, out := op.Input.(Input), op.Output.(Output)
		if in.Kind == Txn {
			s.Txns++
		}
		switch {
		case in.Kind == Expire:
			op.Return = end + 1
			s.Writes++
		case out.Outcome == Unknown:
			s.Unknown++
			if !keep(op.Call, in) {
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
				if l := (listingID{op.ClientId, op.Call, op.Return}); !listings[l] {
					listings[l] = true
					s.Listings++
					if out.Cached {
						s.CachedListings++
					}
				}
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
