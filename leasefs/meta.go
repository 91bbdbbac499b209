// Package leasefs is a file system whose metadata lives in leased and
// whose file data lives in a folder that every mount shares: the FUSE file
// system that cmd/leasefs mounts.
//
// # Keys
//
// Under the file system's root prefix R (Options.Prefix, "fs/" by default):
//
//	R i/<ino>           an inode's attributes (Inode, msgpack): type and mode, owner,
//	                    link count, size, times, a symlink's target, its data object
//	R d/<dir>/<name>    a directory entry (Entry, msgpack): the child's inode and type
//
// <ino> and <dir> are 16 hex digits. A directory's listing is the prefix
// listing R d/<dir>/, which a mount reads under a prefix lease. Inode
// numbers are random (the root's is 1): no counter key that every create
// would write. Every change of a directory's entries also writes the
// directory's inode (its times, and its link count for subdirectories), in
// the same transaction, so that the directory's version orders them: an
// rmdir or a rename over a directory compares it to know the directory is
// still empty.
//
// # Data
//
// A regular file's data is one object in the data folder,
// <data>/<ino>.<obj>, written whole by the mount that closes the file and
// never changed after: a new version of the file is a new object, and the
// inode names it (Inode.Obj). A reader opens the object the inode names
// when it opens the file (close-to-open consistency, as AFS and NFS give).
package leasefs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/vmihailenco/msgpack/v5"
)

// RootIno is the root directory's inode number.
const RootIno = 1

// Inode is an inode's record: the value of R i/<ino>.
type Inode struct {
	Mode   uint32 `msgpack:"m"`           // type and permission bits (syscall.S_IF*)
	UID    uint32 `msgpack:"u"`           // owner
	GID    uint32 `msgpack:"g"`           // group
	Nlink  uint32 `msgpack:"n"`           // links: entries, and 2 + subdirectories for a directory
	Size   uint64 `msgpack:"s"`           // bytes of data, or of a symlink's target
	Atime  int64  `msgpack:"a"`           // nanoseconds since 1970
	Mtime  int64  `msgpack:"t"`           // nanoseconds since 1970
	Ctime  int64  `msgpack:"c"`           // nanoseconds since 1970
	Rdev   uint32 `msgpack:"r,omitempty"` // a device node's number
	Target string `msgpack:"l,omitempty"` // a symlink's target
	Obj    uint64 `msgpack:"o,omitempty"` // a regular file's data object; 0: no data
	Parent uint64 `msgpack:"p,omitempty"` // a directory's parent directory
}

// IsDir says whether the inode is a directory.
func (n *Inode) IsDir() bool { return n.Mode&syscall.S_IFMT == syscall.S_IFDIR }

// Entry is a directory entry's record: the value of R d/<dir>/<name>.
type Entry struct {
	Ino  uint64 `msgpack:"i"`
	Mode uint32 `msgpack:"m"` // the child's type bits (syscall.S_IFMT)
}

// errCorrupt marks a record that does not decode.
var errCorrupt = errors.New("leasefs: corrupt record")

// EncodeInode returns n's record.
func EncodeInode(n *Inode) []byte {
	b, err := msgpack.Marshal(n)
	if err != nil {
		panic(err) // a struct of numbers and a string always encodes
	}
	return b
}

// DecodeInode decodes an inode's record, and checks that its type is one
// leasefs makes.
func DecodeInode(b []byte) (*Inode, error) {
	var n Inode
	if err := decode(b, &n); err != nil {
		return nil, fmt.Errorf("%w: inode: %v", errCorrupt, err)
	}
	if !knownType(n.Mode) {
		return nil, fmt.Errorf("%w: inode of type %#o", errCorrupt, n.Mode&syscall.S_IFMT)
	}
	return &n, nil
}

// knownType says whether mode's type is one leasefs makes.
func knownType(mode uint32) bool {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, syscall.S_IFDIR, syscall.S_IFLNK, syscall.S_IFIFO, syscall.S_IFCHR, syscall.S_IFBLK, syscall.S_IFSOCK:
		return true
	}
	return false
}

// decode decodes the one msgpack value b holds into v. It uses a decoder
// of its own: a pooled one (msgpack.Unmarshal) keeps the buffer a bad
// record's length claim grew, for the next record. Bytes past the value
// are refused.
func decode(b []byte, v any) error {
	r := bytes.NewReader(b)
	if err := msgpack.NewDecoder(r).Decode(v); err != nil {
		return err
	}
	if r.Len() > 0 {
		return fmt.Errorf("%d bytes past the record", r.Len())
	}
	return nil
}

// EncodeEntry returns e's record.
func EncodeEntry(e Entry) []byte {
	b, err := msgpack.Marshal(&e)
	if err != nil {
		panic(err)
	}
	return b
}

// DecodeEntry decodes a directory entry's record.
func DecodeEntry(b []byte) (Entry, error) {
	var e Entry
	if err := decode(b, &e); err != nil {
		return Entry{}, fmt.Errorf("%w: entry: %v", errCorrupt, err)
	}
	if e.Ino == 0 {
		return Entry{}, fmt.Errorf("%w: entry of inode 0", errCorrupt)
	}
	if !knownType(e.Mode) {
		return Entry{}, fmt.Errorf("%w: entry of type %#o", errCorrupt, e.Mode&syscall.S_IFMT)
	}
	return e, nil
}

// keys names the records of one file system, under its prefix.
type keys struct{ prefix string }

func hex16(n uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], n)
	const digits = "0123456789abcdef"
	out := make([]byte, 16)
	for i, c := range b {
		out[2*i], out[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(out)
}

// inode is the key of inode ino's record.
func (k keys) inode(ino uint64) string { return k.prefix + "i/" + hex16(ino) }

// dir is the prefix of directory ino's entries.
func (k keys) dir(ino uint64) string { return k.prefix + "d/" + hex16(ino) + "/" }

// entry is the key of name's entry in directory dir.
func (k keys) entry(dir uint64, name string) string { return k.dir(dir) + name }

// parse says which inode's record key is, or which directory's listing
// prefix is: ino > 0 and isDir for a listing or an entry.
func (k keys) parse(key string) (ino uint64, isDir bool) {
	rest, ok := strings.CutPrefix(key, k.prefix)
	if !ok || len(rest) < 2+16 {
		return 0, false
	}
	num := rest[2:18]
	if strings.ToLower(num) != num {
		return 0, false // not as hex16 writes it
	}
	n, err := strconv.ParseUint(num, 16, 64)
	if err != nil || n == 0 {
		return 0, false
	}
	switch {
	case rest[:2] == "i/" && len(rest) == 18:
		return n, false
	case rest[:2] == "d/" && len(rest) > 18 && rest[18] == '/':
		return n, true
	}
	return 0, false
}
