package protocol

import "time"

// Multi-key transactions (DESIGN §4.7): compares on several keys, and two
// branches of puts and deletes, of which the compares choose one, applied
// whole at one revision.
const (
	TypeTxn      Type = 43 // a transaction
	TypeTxnReply Type = 44 //
)

// CompareOp says what a Compare checks of its key.
type CompareOp uint8

// Compares. A key's version is the revision of its last write, 0 while it
// is absent (never written, or deleted). A value compare never holds for
// an absent key.
const (
	CmpExists          CompareOp = 1 // the key is present
	CmpAbsent          CompareOp = 2 // the key is absent
	CmpVersionEqual    CompareOp = 3 // its version is Version (0: absent)
	CmpVersionNotEqual CompareOp = 4
	CmpVersionGreater  CompareOp = 5
	CmpVersionLess     CompareOp = 6
	CmpValueEqual      CompareOp = 7 // it is present with the value Value
	CmpValueNotEqual   CompareOp = 8 // it is present with another value
)

// Compare is one condition of a Txn on the committed state of Key.
type Compare struct {
	Key     []byte    `msgpack:"k"`
	Op      CompareOp `msgpack:"o"`
	Version uint64    `msgpack:"v,omitempty"`
	Value   []byte    `msgpack:"val,omitempty"`
}

// TxnOp is one write of a branch: OpPut of Key to Value, attached to the
// TTL lease Lease (0: detached from any), or OpDelete of Key. Token, if
// not 0, is the fencing token of the writer's write lease on Key.
type TxnOp struct {
	Op    WriteOp `msgpack:"o"`
	Key   []byte  `msgpack:"k"`
	Value []byte  `msgpack:"val,omitempty"`
	Token uint64  `msgpack:"tok,omitempty"`
	Lease uint64  `msgpack:"ls,omitempty"`
}

// Txn applies Then if every compare of If holds (an empty If holds), and
// Else otherwise, atomically at one revision. Each key it may write, in
// either branch, goes through the lease rules of a write: its holders are
// invalidated or recalled, and the transaction commits once every one has
// let go or run out. A key is written at most once in a branch. Timeout
// and Acked are as for a Write.
type Txn struct {
	ID      uint64        `msgpack:"i"`
	If      []Compare     `msgpack:"if,omitempty"`
	Then    []TxnOp       `msgpack:"then,omitempty"`
	Else    []TxnOp       `msgpack:"else,omitempty"`
	Timeout time.Duration `msgpack:"to,omitempty"`
	Acked   uint64        `msgpack:"a,omitempty"`
	// Guard, as on a Write, makes the whole transaction apply only under
	// the lock's token.
	Guard *Guard `msgpack:"g,omitempty"`
	// Under, as on a Write, lets the ops with a Token write under locks
	// bound to that TTL lease.
	Under uint64 `msgpack:"u,omitempty"`
}

// TxnReply reports a committed transaction. Succeeded says that its
// compares held and it applied Then; false, Else. Revision is the version
// of every key it wrote, or the store's revision if its branch changed
// nothing. Waited and Holders are as for a WriteReply, over all its keys;
// Duplicate says that it was a retry of one that had committed, and this
// is that outcome.
type TxnReply struct {
	ID        uint64        `msgpack:"i"`
	Succeeded bool          `msgpack:"s,omitempty"`
	Revision  uint64        `msgpack:"rev"`
	Waited    time.Duration `msgpack:"w"`
	Holders   int           `msgpack:"h"`
	Duplicate bool          `msgpack:"d,omitempty"`
}

func (*Txn) Type() Type      { return TypeTxn }
func (*TxnReply) Type() Type { return TypeTxnReply }
