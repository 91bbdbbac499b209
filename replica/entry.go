// The data of a log entry: a batch of commands, encoded with its format and a CRC-32C, and decoded and
// checked again by every replica that applies it (fsm.go).

package replica

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/leased/leased/store"
)

// The first byte of every log entry this package writes is the version of
// the encoding that follows. entryFormat, the one written, carries a
// CRC-32C of its commands, because the log on disk checks its records only
// at the tail it recovers after a crash: a bit flipped in an older entry
// would otherwise be applied as another command, or as none. Entries of
// entryFormatNoSum, written before, are still read.
const (
	entryFormatNoSum = 1
	entryFormat      = 2
)

// entry is the data of one log entry: a batch of commands applied together.
type entry struct {
	Cmds []store.Command `msgpack:"c"`
}

// encodeEntry lays out cmds as the data of one log entry: the format, the
// CRC-32C of the rest (4 bytes, big-endian), and the commands.
func encodeEntry(cmds []store.Command) ([]byte, error) {
	b, err := msgpack.Marshal(&entry{Cmds: cmds})
	if err != nil {
		return nil, err
	}
	head := binary.BigEndian.AppendUint32([]byte{entryFormat}, crc32.Checksum(b, castagnoli))
	return append(head, b...), nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checkEntry verifies the checksum of a log entry's data, if its format
// has one: ErrDamagedEntry if it does not match.
func checkEntry(data []byte) error {
	if len(data) == 0 || data[0] != entryFormat {
		return nil
	}
	if len(data) < 5 || binary.BigEndian.Uint32(data[1:5]) != crc32.Checksum(data[5:], castagnoli) {
		return fmt.Errorf("%w: checksum mismatch in %d bytes", ErrDamagedEntry, len(data))
	}
	return nil
}

// decodeEntry reads the commands of a log entry.
func decodeEntry(data []byte) ([]store.Command, error) {
	var body []byte
	switch {
	case len(data) == 0:
		return nil, fmt.Errorf("%w: empty entry", ErrBadEntry)
	case data[0] == entryFormatNoSum:
		body = data[1:]
	case data[0] == entryFormat:
		if err := checkEntry(data); err != nil {
			return nil, err
		}
		body = data[5:]
	default:
		return nil, fmt.Errorf("%w: unknown entry format", ErrBadEntry)
	}
	var e entry
	if err := msgpack.Unmarshal(body, &e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadEntry, err)
	}
	return e.Cmds, nil
}
