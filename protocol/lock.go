package protocol

import (
	"encoding/binary"
	"fmt"
)

// Lock records (DESIGN §5.1). The record of the write lease on key K is
// read as the key LockRecordKey(K): found while K is held, its value the
// lease's token and the TTL lease it is bound to (0: none), 8 bytes each,
// big-endian, its version the token. A read of it takes a read lease like
// any read, which the server invalidates before the lock is granted or
// ends, so that a service that checks tokens answers from its cache. No
// key that begins with ReservedPrefix may be written.
const (
	ReservedPrefix   = "\xff\xff"
	LockRecordPrefix = ReservedPrefix + "lock\x00"
)

// LockRecordKey returns the key of the record of the write lease on key.
func LockRecordKey(key []byte) []byte {
	return append([]byte(LockRecordPrefix), key...)
}

// DecodeLockRecord returns the token and the TTL lease of a lock record's
// value.
func DecodeLockRecord(v []byte) (token, lease uint64, err error) {
	if len(v) != 16 {
		return 0, 0, fmt.Errorf("lock record of %d bytes, want 16", len(v))
	}
	return binary.BigEndian.Uint64(v), binary.BigEndian.Uint64(v[8:]), nil
}
