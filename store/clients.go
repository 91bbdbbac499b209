package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"time"
)

// The write and grant outcomes kept per client, so that a retried write
// or OpGrantTTL is applied once (Command.Client). Each client has one record under clientPrefix and
// its ID: when it last wrote, and the outcomes of its writes that it may
// still retry, in request order. A client drops outcomes by raising
// Command.Acked; the leader drops idle clients with OpForgetClients.

var clientPrefix = []byte("c/")

// maxOutcomes bounds the outcomes kept per client, above any number of
// writes one client may have waiting (the server's in-flight limit). A
// client that never raises Acked loses its oldest outcomes first.
const maxOutcomes = 8192

// outcome is the kept result of one write or grant.
type outcome struct {
	request uint64
	version uint64  // the version written, or the id of a granted lease
	fail    failure // why the command did not apply, if it did not
}

// failure is why a command did not apply, as a client record keeps it,
// or, for a grant that did, grantedTTL.
type failure byte

const (
	applied        failure = iota
	failMismatch           // a compare-and-swap that did not match
	failNoLease            // its TTL lease does not exist (ErrLeaseNotFound)
	failLeaseFull          // its TTL lease is full (ErrLeaseFull)
	grantedTTL             // a TTL lease granted: version is its id
	failInvalid            // a grant refused (ErrInvalidCommand)
	deletedNothing         // a delete that found no key (Result.Unchanged): version is the key's
	txnThen                // a transaction that applied its Then branch: version is its revision
	txnElse                // one that applied its Else branch
	failFenced             // its guard failed (ErrFenced): version is the lock's token, 0 if not held
	failures               // the number of flags
)

// failureOf returns the failure that err, a write's outcome, is.
func failureOf(err error) failure {
	switch {
	case err == nil:
		return applied
	case errors.Is(err, ErrLeaseNotFound):
		return failNoLease
	case errors.Is(err, ErrLeaseFull):
		return failLeaseFull
	case errors.Is(err, ErrInvalidCommand):
		return failInvalid
	case errors.Is(err, ErrFenced):
		return failFenced
	}
	return failMismatch
}

// err rebuilds the outcome of the write c that failed with f, at version.
func (f failure) err(c Command, version uint64) error {
	switch f {
	case failMismatch:
		return mismatch(version, c.Expect)
	case failNoLease:
		if c.Op == OpTxn {
			return leaseNotFound(version) // Result.Version names the lease
		}
		return leaseNotFound(c.Lease)
	case failLeaseFull:
		if c.Op == OpTxn {
			return leaseFull(version)
		}
		return leaseFull(c.Lease)
	case failFenced:
		g := c.Guard
		if g == nil {
			g = &Guard{}
		}
		return fenced(g, version, version != 0)
	case failInvalid:
		if c.Op == OpTxn {
			return c.Txn.invalid()
		}
		return invalidTTL(c.Term)
	}
	return nil
}

// result rebuilds the Result of c, whose outcome o is, marked Duplicate.
func (o outcome) result(c Command) Result {
	switch o.fail {
	case grantedTTL:
		return Result{Lease: o.version, Duplicate: true}
	case deletedNothing:
		return Result{Version: o.version, Duplicate: true, Unchanged: true}
	case txnThen, txnElse:
		return Result{Version: o.version, Duplicate: true, Succeeded: o.fail == txnThen}
	}
	return Result{Version: o.version, Duplicate: true, Err: o.fail.err(c, o.version)}
}

// clientRecord is what the store keeps of one client.
type clientRecord struct {
	last int64 // Unix ns of its last write (Command.At)
	// acked is the highest Command.Acked the client sent: it has the
	// outcome of every request below it, so a copy of one that arrives
	// now is stale and must not be applied.
	acked    uint64
	outcomes []outcome
}

func clientKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte{}, clientPrefix...), id)
}

// find returns the outcome of request, if kept.
func (r *clientRecord) find(request uint64) (outcome, bool) {
	i := sort.Search(len(r.outcomes), func(i int) bool { return r.outcomes[i].request >= request })
	if i < len(r.outcomes) && r.outcomes[i].request == request {
		return r.outcomes[i], true
	}
	return outcome{}, false
}

// add keeps o, raises the record's acked to acked, forgets the outcomes
// below it, and keeps at most maxOutcomes.
func (r *clientRecord) add(o outcome, acked uint64) {
	r.acked = max(r.acked, acked)
	i := sort.Search(len(r.outcomes), func(i int) bool { return r.outcomes[i].request >= r.acked })
	r.outcomes = r.outcomes[i:]
	i = sort.Search(len(r.outcomes), func(i int) bool { return r.outcomes[i].request >= o.request })
	r.outcomes = append(r.outcomes, outcome{})
	copy(r.outcomes[i+1:], r.outcomes[i:])
	r.outcomes[i] = o
	if n := len(r.outcomes); n > maxOutcomes {
		r.outcomes = r.outcomes[n-maxOutcomes:]
	}
}

// encode lays the record out as the 8-byte time of the last write and
// the 8-byte acked, then per outcome its request and version (8 bytes
// each) and a flag byte, its failure (0: applied, 1: a compare-and-swap
// that did not match, 2: no such TTL lease, 3: a full TTL lease, 4: a TTL
// lease granted, whose id the version holds, 5: a grant refused as
// invalid, 6: a delete that found no key, 7 and 8: a transaction that
// applied its Then or its Else branch, at the revision the version
// holds).
func (r *clientRecord) encode() []byte {
	b := make([]byte, 0, 16+17*len(r.outcomes))
	b = binary.BigEndian.AppendUint64(b, uint64(r.last))
	b = binary.BigEndian.AppendUint64(b, r.acked)
	for _, o := range r.outcomes {
		b = binary.BigEndian.AppendUint64(b, o.request)
		b = binary.BigEndian.AppendUint64(b, o.version)
		b = append(b, byte(o.fail))
	}
	return b
}

func decodeClientRecord(b []byte) (clientRecord, error) {
	if len(b) < 16 || (len(b)-16)%17 != 0 {
		return clientRecord{}, fmt.Errorf("corrupt client record of %d bytes", len(b))
	}
	r := clientRecord{last: int64(binary.BigEndian.Uint64(b)), acked: binary.BigEndian.Uint64(b[8:])}
	for p := b[16:]; len(p) > 0; p = p[17:] {
		if f := failure(p[16]); f >= failures || f == grantedTTL && binary.BigEndian.Uint64(p[8:]) == 0 {
			return clientRecord{}, fmt.Errorf("corrupt client record: flag %d", p[16])
		}
		r.outcomes = append(r.outcomes, outcome{request: binary.BigEndian.Uint64(p), version: binary.BigEndian.Uint64(p[8:]), fail: failure(p[16])})
	}
	return r, nil
}

// kept returns the kept outcome of the write or grant c, whose Client is
// set, as
// its Result, marked Duplicate, and the client's record; for a request
// below what the client acknowledged, ErrAnswered.
func kept(tx txn, c Command) (Result, bool, clientRecord, error) {
	var rec clientRecord
	b, ok, err := tx.get(clientKey(c.Client))
	if err != nil || !ok {
		return Result{}, false, rec, err
	}
	if rec, err = decodeClientRecord(b); err != nil {
		return Result{}, false, rec, err
	}
	o, ok := rec.find(c.Request)
	if !ok && c.Request < rec.acked {
		// A copy that arrived after its client had the outcome, such
		// as a frame held up in the network past a retry: applied now,
		// it could undo the client's later writes.
		return Result{Err: fmt.Errorf("%w: request %d of client %d, which has the outcome of every request below %d", ErrAnswered, c.Request, c.Client, rec.acked)}, true, rec, nil
	}
	if !ok {
		return Result{}, false, rec, nil
	}
	return o.result(c), true, rec, nil
}

// execOnce applies the write or grant c, whose Client is set, at most
// once: a request whose outcome is kept gets it back, marked Duplicate,
// and one below what its client acknowledged is refused (kept).
func execOnce(tx txn, ct *counters, c Command) (Result, error) {
	r, ok, rec, err := kept(tx, c)
	if err != nil || ok {
		return r, err
	}
	key := clientKey(c.Client)
	o := outcome{request: c.Request}
	if c.Op == OpGrantTTL {
		r, err = execTTL(tx, ct, c)
		o.version, o.fail = r.Lease, failureOf(r.Err)
		if r.Err == nil {
			o.fail = grantedTTL
		}
	} else if c.Op == OpTxn {
		r, err = execTxn(tx, ct, c)
		o.version, o.fail = r.Version, failureOf(r.Err)
		switch {
		case r.Err == nil && r.Succeeded:
			o.fail = txnThen
		case r.Err == nil:
			o.fail = txnElse
		}
	} else {
		r, err = execWrite(tx, ct, c)
		o.version, o.fail = r.Version, failureOf(r.Err)
		if r.Unchanged {
			o.fail = deletedNothing
		}
	}
	if err != nil {
		return Result{}, err
	}
	rec.last = c.At.UnixNano()
	rec.add(o, c.Acked)
	return r, tx.set(key, rec.encode())
}

// forgetClients carries out an OpForgetClients.
func forgetClients(tx txn, c Command) error {
	for _, id := range c.Clients {
		key := clientKey(id)
		b, ok, err := tx.get(key)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		if len(b) < 8 {
			return fmt.Errorf("corrupt client record of %d bytes", len(b))
		}
		if int64(binary.BigEndian.Uint64(b)) < c.At.UnixNano() {
			if err := tx.del(key); err != nil {
				return err
			}
		}
	}
	return nil
}

// idleClient reports the ID of the client whose record is at key, if its
// last write was before cutoff.
func idleClient(key, value []byte, cutoff time.Time) (uint64, bool) {
	if len(key) != len(clientPrefix)+8 || len(value) < 8 {
		return 0, false
	}
	if int64(binary.BigEndian.Uint64(value)) >= cutoff.UnixNano() {
		return 0, false
	}
	return binary.BigEndian.Uint64(key[len(clientPrefix):]), true
}
