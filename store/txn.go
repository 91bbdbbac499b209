// Multi-key transactions (OpTxn, DESIGN §4.7): compares on several keys, and two branches of puts and
// deletes, of which one is applied, whole, at one revision.

package store

import (
	"bytes"
	"errors"
	"fmt"
)

// MaxTxnOps bounds the compares of one transaction, and the ops of each of
// its branches. The server refuses more before they reach the log
// (ErrTooLarge); a command past it is refused here with ErrInvalidCommand.
const MaxTxnOps = 128

// CompareOp says what a Compare checks of its key.
type CompareOp uint8

// Compares. A key's version is the revision of its last write, 0 if it is
// absent (never written, or deleted): so VersionEqual with Version 0 holds
// exactly when Absent does, as a compare-and-swap's Expect 0 matches an
// absent key. A value compare never holds for an absent key.
const (
	CmpExists CompareOp = iota + 1
	CmpAbsent
	CmpVersionEqual
	CmpVersionNotEqual
	CmpVersionGreater
	CmpVersionLess
	CmpValueEqual
	CmpValueNotEqual
)

func (o CompareOp) String() string {
	switch o {
	case CmpExists:
		return "exists"
	case CmpAbsent:
		return "absent"
	case CmpVersionEqual:
		return "version ="
	case CmpVersionNotEqual:
		return "version !="
	case CmpVersionGreater:
		return "version >"
	case CmpVersionLess:
		return "version <"
	case CmpValueEqual:
		return "value ="
	case CmpValueNotEqual:
		return "value !="
	}
	return fmt.Sprintf("compare %d", uint8(o))
}

// Compare is one condition of a transaction, on the committed state of Key
// when the transaction is applied.
type Compare struct {
	Key     []byte    `msgpack:"k"`
	Op      CompareOp `msgpack:"o"`
	Version uint64    `msgpack:"v,omitempty"`
	Value   []byte    `msgpack:"val,omitempty"`
}

// holds reports whether c holds of rec, its key's record.
func (c Compare) holds(rec Record) bool {
	version := uint64(0)
	if rec.Found {
		version = rec.Version
	}
	switch c.Op {
	case CmpExists:
		return rec.Found
	case CmpAbsent:
		return !rec.Found
	case CmpVersionEqual:
		return version == c.Version
	case CmpVersionNotEqual:
		return version != c.Version
	case CmpVersionGreater:
		return version > c.Version
	case CmpVersionLess:
		return version < c.Version
	case CmpValueEqual:
		return rec.Found && bytes.Equal(rec.Value, c.Value)
	case CmpValueNotEqual:
		return rec.Found && !bytes.Equal(rec.Value, c.Value)
	}
	return false
}

// TxnOp is one write of a transaction's branch: OpPut of Key to Value,
// attaching Key to the TTL lease Lease (0: detaching it from any), as an
// OpPut command does; or OpDelete of Key, which detaches it, and which
// changes nothing if Key is absent.
type TxnOp struct {
	Op    Op     `msgpack:"o"`
	Key   []byte `msgpack:"k"`
	Value []byte `msgpack:"val,omitempty"`
	Lease uint64 `msgpack:"ls,omitempty"`
}

// Txn is what an OpTxn does: if every compare of If holds (an empty If
// holds), the ops of Then, else those of Else.
type Txn struct {
	If   []Compare `msgpack:"if,omitempty"`
	Then []TxnOp   `msgpack:"then,omitempty"`
	Else []TxnOp   `msgpack:"else,omitempty"`
}

// Keys returns the keys that t may write, in either branch, each once, in
// the order they first appear (Then's, then Else's).
func (t *Txn) Keys() [][]byte {
	if t == nil {
		return nil
	}
	seen := make(map[string]bool, len(t.Then)+len(t.Else))
	var keys [][]byte
	for _, ops := range [2][]TxnOp{t.Then, t.Else} {
		for _, op := range ops {
			if !seen[string(op.Key)] {
				seen[string(op.Key)] = true
				keys = append(keys, op.Key)
			}
		}
	}
	return keys
}

// Check returns why t is not a transaction a store applies, or nil (a
// store refuses such a command with ErrInvalidCommand, and the core a
// request with ErrInvalidArgument): more than MaxTxnOps compares or ops in a
// branch, an empty key, a compare or op of no known kind, a delete with a
// value or a lease, or a key written twice in one branch.
func (t *Txn) Check() error {
	if t == nil {
		return errors.New("a transaction command without its transaction")
	}
	if len(t.If) > MaxTxnOps || len(t.Then) > MaxTxnOps || len(t.Else) > MaxTxnOps {
		return fmt.Errorf("a transaction of %d compares, %d and %d ops; at most %d of each", len(t.If), len(t.Then), len(t.Else), MaxTxnOps)
	}
	for i, c := range t.If {
		switch {
		case len(c.Key) == 0:
			return fmt.Errorf("compare %d has an empty key", i)
		case c.Op < CmpExists || c.Op > CmpValueNotEqual:
			return fmt.Errorf("compare %d is of unknown kind %d", i, c.Op)
		}
	}
	for b, ops := range [2][]TxnOp{t.Then, t.Else} {
		branch := [2]string{"then", "else"}[b]
		seen := make(map[string]bool, len(ops))
		for i, op := range ops {
			switch {
			case len(op.Key) == 0:
				return fmt.Errorf("%s op %d has an empty key", branch, i)
			case op.Op != OpPut && op.Op != OpDelete:
				return fmt.Errorf("%s op %d is a %v; a transaction puts and deletes (a compare-and-swap is a put under a compare)", branch, i, op.Op)
			case op.Op == OpDelete && (len(op.Value) > 0 || op.Lease != 0):
				return fmt.Errorf("%s op %d deletes %q with a value or a lease", branch, i, op.Key)
			case seen[string(op.Key)]:
				return fmt.Errorf("%s writes %q twice", branch, op.Key)
			}
			seen[string(op.Key)] = true
		}
	}
	return nil
}

// invalid returns Check's error as the outcome of an OpTxn: wrapping
// ErrInvalidCommand; nil if t is valid.
func (t *Txn) invalid() error {
	if err := t.Check(); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidCommand, err)
	}
	return nil
}

// execTxn applies the OpTxn c: it evaluates c.Txn.If on the committed
// state, and applies the branch it chose, all of it at one new revision
// (Result.Version), or none of it: a branch that would attach a key to a
// TTL lease that does not exist, or that it would overfill, changes
// nothing and fails with ErrLeaseNotFound or ErrLeaseFull. A branch that
// changes no key (no op, or deletes of absent keys) takes no revision:
// Result.Version is then the store's revision. Result.Succeeded says
// which branch it chose.
func execTxn(tx txn, ct *counters, c Command) (Result, error) {
	t := c.Txn
	if err := t.invalid(); err != nil {
		return Result{Err: err}, nil
	}
	if r, err := checkGuard(tx, c.Guard); err != nil || r.Err != nil {
		return r, err
	}
	succeeded := true
	for _, cmp := range t.If {
		rec, err := getRecord(tx, prefixed(dataPrefix, cmp.Key))
		if err != nil {
			return Result{}, err
		}
		if !cmp.holds(rec) {
			succeeded = false
			break
		}
	}
	ops := t.Then
	if !succeeded {
		ops = t.Else
	}
	if r, err := checkTxnLeases(tx, ops); err != nil || r.Err != nil {
		r.Succeeded = succeeded
		return r, err
	}
	// What each op finds, read before any is applied: a branch names
	// each key once.
	stored := make([]bool, len(ops))
	changes := false
	for i, op := range ops {
		dk := prefixed(dataPrefix, op.Key)
		if op.Op == OpPut {
			ok, err := tx.has(dk)
			if err != nil {
				return Result{}, err
			}
			stored[i], changes = ok, true
			continue
		}
		rec, err := getRecord(tx, dk)
		if err != nil {
			return Result{}, err
		}
		stored[i] = rec.Found // a delete of an absent key changes nothing
		changes = changes || rec.Found
	}
	if !changes {
		return Result{Version: ct.rev, Succeeded: succeeded}, nil
	}
	rev := ct.rev + 1
	for i, op := range ops {
		dk := prefixed(dataPrefix, op.Key)
		switch {
		case op.Op == OpDelete && !stored[i]:
			continue
		case op.Op == OpPut && !stored[i]:
			ct.records++
		}
		r := Record{Version: rev, Found: op.Op == OpPut, Value: op.Value}
		lease, kind := op.Lease, EventPut
		if op.Op == OpDelete {
			lease, kind = 0, EventDelete
		}
		if err := recordEvent(tx, ct, rev, kind, op.Key, r.Value, lease); err != nil {
			return Result{}, err
		}
		if err := tx.set(dk, encodeRecord(r)); err != nil {
			return Result{}, err
		}
		if err := attach(tx, op.Key, lease); err != nil {
			return Result{}, err
		}
		if op.Op == OpDelete {
			if err := noteDeletion(tx, rev, op.Key); err != nil {
				return Result{}, err
			}
		}
	}
	ct.rev = rev
	return Result{Version: rev, Succeeded: succeeded}, nil
}

// checkTxnLeases finds whether the puts of ops may attach their keys to
// the TTL leases they name: every lease exists, and holds room for the
// keys that would join it (keys it already holds do not count; keys that
// ops delete or move away are not counted out). Its Result's Err says why
// not; Version then names the lease, for the outcome a client's record
// keeps (failure.err).
func checkTxnLeases(tx txn, ops []TxnOp) (Result, error) {
	type room struct{ keys, bytes int }
	var joining map[uint64]*room
	for _, op := range ops {
		if op.Op != OpPut || op.Lease == 0 {
			continue
		}
		cur, err := keyLease(tx, op.Key)
		if err != nil {
			return Result{}, err
		}
		if joining == nil {
			joining = make(map[uint64]*room)
		}
		r := joining[op.Lease]
		if r == nil {
			r = &room{}
			joining[op.Lease] = r
		}
		if cur != op.Lease {
			r.keys++
			r.bytes += len(op.Key)
		}
	}
	// In the order the ops name the leases, so that every store reports
	// the same one.
	for _, op := range ops {
		r := joining[op.Lease]
		if op.Op != OpPut || op.Lease == 0 || r == nil {
			continue
		}
		delete(joining, op.Lease)
		l, ok, err := getTTLLease(tx, op.Lease)
		if err != nil {
			return Result{}, err
		}
		if !ok {
			return Result{Version: op.Lease, Err: leaseNotFound(op.Lease)}, nil
		}
		if l.Keys+r.keys > MaxTTLKeys || l.KeyBytes+r.bytes > MaxTTLKeyBytes {
			return Result{Version: op.Lease, Err: leaseFull(op.Lease)}, nil
		}
	}
	return Result{}, nil
}

// txnCost is Cost's bound for an OpTxn: the writes of both branches, as
// either may be applied, each as a write command costs, and its reads.
func txnCost(t *Txn, record int) int {
	n := 2 * record
	if t == nil {
		return n
	}
	for _, ops := range [2][]TxnOp{t.Then, t.Else} {
		for _, op := range ops {
			n += 5*(len(op.Key)+record) + len(op.Value)
		}
	}
	return n
}
