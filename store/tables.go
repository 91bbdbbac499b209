package store

// A check of badger's table files before badger opens them. badger opens
// its tables in goroutines of its own, where a table cut short (a disk that
// lost its end, a copy stopped half way) makes it read past the file's end
// and panic: out of reach of any recover, the process dies (badger v4.9.6,
// table.OpenTable). So every table's footer is read here first: the
// index's length and checksum, at the file's end, and the index they
// describe, whose checksum must match. A table that passes can be opened;
// its blocks are checked later, on every read (Check reads them all). A
// value-log file cut short within its header fails badger's open with an
// error that does not name damage; one cut later reads its lost values as
// errors, which Check finds.

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/badger/v4/y"
)

// vlogHeaderSize is the size of a value-log file's header in badger v4:
// a file shorter than it is cut short, and badger fails to open it with
// an error that does not say so.
const vlogHeaderSize = 20

// checkTables checks the footer and index of every table file (.sst) in
// dir, and that every value-log file (.vlog) holds at least its header.
// A failure is ErrDamaged and names the file.
func checkTables(dir string) error {
	vlogs, err := filepath.Glob(filepath.Join(dir, "*.vlog"))
	if err != nil {
		return err
	}
	for _, path := range vlogs {
		fi, err := os.Stat(path)
		if err != nil {
			return err
		}
		if fi.Size() < vlogHeaderSize {
			return fmt.Errorf("%w: value-log file %s is cut short: %d bytes, shorter than its header", ErrDamaged, path, fi.Size())
		}
	}
	ssts, err := filepath.Glob(filepath.Join(dir, "*.sst"))
	if err != nil {
		return err
	}
	for _, path := range ssts {
		if err := checkTable(path); err != nil {
			return fmt.Errorf("%w: table %s: %v", ErrDamaged, path, err)
		}
	}
	return nil
}

// checkTable reads the footer of the table file at path, as badger lays
// it out: the index, its length (4 bytes, big-endian), its checksum (a
// protocol buffer, badger's pb.Checksum), and the checksum's length (4
// bytes). It returns why the table cannot be opened, or nil.
func checkTable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	read := func(off, n int64) ([]byte, error) {
		if off < 0 || n < 0 || off+n > size {
			return nil, fmt.Errorf("cut short: its footer points to bytes %d to %d of its %d", off, off+n, size)
		}
		b := make([]byte, n)
		if _, err := f.ReadAt(b, off); err != nil && err != io.EOF {
			return nil, err
		}
		return b, nil
	}
	pos := size - 4
	b, err := read(pos, 4)
	if err != nil {
		return err
	}
	chkLen := int64(binary.BigEndian.Uint32(b))
	pos -= chkLen
	chkBytes, err := read(pos, chkLen)
	if err != nil {
		return err
	}
	chk, err := decodeChecksum(chkBytes)
	if err != nil {
		return err
	}
	pos -= 4
	if b, err = read(pos, 4); err != nil {
		return err
	}
	idxLen := int64(binary.BigEndian.Uint32(b))
	pos -= idxLen
	idx, err := read(pos, idxLen)
	if err != nil {
		return err
	}
	if idxLen == 0 {
		return fmt.Errorf("cut short: its index is empty")
	}
	if err := y.VerifyChecksum(idx, chk); err != nil {
		return fmt.Errorf("its index fails its checksum: %v", err)
	}
	return nil
}

// decodeChecksum decodes a pb.Checksum from its wire form: field 1, the
// algorithm, and field 2, the sum, both varints. It takes no other field.
func decodeChecksum(b []byte) (*pb.Checksum, error) {
	chk := &pb.Checksum{}
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("its index checksum does not decode")
		}
		b = b[n:]
		v, n := binary.Uvarint(b)
		if n <= 0 || tag&7 != 0 {
			return nil, fmt.Errorf("its index checksum does not decode")
		}
		b = b[n:]
		switch tag >> 3 {
		case 1:
			chk.Algo = pb.Checksum_Algorithm(v)
		case 2:
			chk.Sum = v
		default:
			return nil, fmt.Errorf("its index checksum does not decode")
		}
	}
	if _, ok := pb.Checksum_Algorithm_name[int32(chk.Algo)]; !ok {
		return nil, fmt.Errorf("its index checksum names no algorithm badger has (%d)", chk.Algo)
	}
	return chk, nil
}
