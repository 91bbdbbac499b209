package leasefs

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// typeKnown says whether mode's type bits are one that DecodeInode accepts.
func typeKnown(mode uint32) bool {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, syscall.S_IFDIR, syscall.S_IFLNK, syscall.S_IFIFO, syscall.S_IFCHR, syscall.S_IFBLK, syscall.S_IFSOCK:
		return true
	}
	return false
}

// sampleInodes are records of every type leasefs makes, with zero, small
// and extreme values.
func sampleInodes() []struct {
	name string
	n    Inode
} {
	return []struct {
		name string
		n    Inode
	}{
		{"regular", Inode{Mode: syscall.S_IFREG | 0o644, UID: 1000, GID: 1000, Nlink: 1, Size: 12345,
			Atime: 1_700_000_000_000_000_000, Mtime: 1_700_000_000_000_000_001, Ctime: 1_700_000_000_000_000_002, Obj: 0x1234_5678_9abc_def0}},
		{"regular empty no object", Inode{Mode: syscall.S_IFREG | 0o600, Nlink: 1}},
		{"root dir", Inode{Mode: syscall.S_IFDIR | 0o755, Nlink: 2, Parent: RootIno}},
		{"dir", Inode{Mode: syscall.S_IFDIR | 0o1777, UID: 0, GID: 0, Nlink: 17, Size: 4096,
			Atime: 1, Mtime: 2, Ctime: 3, Parent: 0xfedc_ba98_7654_3210}},
		{"symlink", Inode{Mode: syscall.S_IFLNK | 0o777, Nlink: 1, Size: uint64(len("../target/file")), Target: "../target/file"}},
		{"symlink unicode target", Inode{Mode: syscall.S_IFLNK | 0o777, Nlink: 1, Target: "/tmp/\u00e9t\u00e9/\U0001F600\x00\xff"}},
		{"symlink long target", Inode{Mode: syscall.S_IFLNK | 0o777, Nlink: 1, Size: 4095, Target: strings.Repeat("a/", 2047) + "b"}},
		{"char device", Inode{Mode: syscall.S_IFCHR | 0o620, Nlink: 1, Rdev: 0x0501}},
		{"block device", Inode{Mode: syscall.S_IFBLK | 0o660, Nlink: 1, Rdev: math.MaxUint32}},
		{"fifo", Inode{Mode: syscall.S_IFIFO | 0o600, Nlink: 1}},
		{"socket", Inode{Mode: syscall.S_IFSOCK | 0o755, Nlink: 1}},
		{"setuid setgid sticky", Inode{Mode: syscall.S_IFREG | syscall.S_ISUID | syscall.S_ISGID | syscall.S_ISVTX | 0o777, Nlink: 1}},
		{"large values", Inode{Mode: syscall.S_IFREG | 0o7777, UID: math.MaxUint32, GID: math.MaxUint32, Nlink: math.MaxUint32,
			Size: math.MaxUint64, Atime: math.MaxInt64, Mtime: math.MaxInt64, Ctime: math.MaxInt64,
			Rdev: math.MaxUint32, Target: "t", Obj: math.MaxUint64, Parent: math.MaxUint64}},
		{"negative times", Inode{Mode: syscall.S_IFREG, Atime: math.MinInt64, Mtime: -1, Ctime: -1_000_000_000}},
		{"all optional fields zero", Inode{Mode: syscall.S_IFREG | 0o644, UID: 1, GID: 2, Nlink: 3, Size: 4, Atime: 5, Mtime: 6, Ctime: 7}},
	}
}

func sampleEntries() []struct {
	name string
	e    Entry
} {
	return []struct {
		name string
		e    Entry
	}{
		{"root", Entry{Ino: RootIno, Mode: syscall.S_IFDIR}},
		{"regular", Entry{Ino: 0x1234_5678_9abc_def0, Mode: syscall.S_IFREG}},
		{"symlink", Entry{Ino: 42, Mode: syscall.S_IFLNK}},
		{"char device", Entry{Ino: 7, Mode: syscall.S_IFCHR}},
		{"block device", Entry{Ino: 8, Mode: syscall.S_IFBLK}},
		{"fifo", Entry{Ino: 9, Mode: syscall.S_IFIFO}},
		{"socket", Entry{Ino: 10, Mode: syscall.S_IFSOCK}},
		{"max ino", Entry{Ino: math.MaxUint64, Mode: syscall.S_IFREG}},
		{"socket", Entry{Ino: 3, Mode: syscall.S_IFSOCK}},
		{"top ino", Entry{Ino: 1 << 63, Mode: syscall.S_IFBLK}},
	}
}

func TestInodeRoundTrip(t *testing.T) {
	for _, tc := range sampleInodes() {
		t.Run(tc.name, func(t *testing.T) {
			in := tc.n
			b := EncodeInode(&in)
			if !reflect.DeepEqual(in, tc.n) {
				t.Fatalf("EncodeInode changed its argument: %+v, want %+v", in, tc.n)
			}
			got, err := DecodeInode(b)
			if err != nil {
				t.Fatalf("DecodeInode(EncodeInode(%+v)) = %v", tc.n, err)
			}
			if !reflect.DeepEqual(*got, tc.n) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", *got, tc.n)
			}
			if got.IsDir() != (tc.n.Mode&syscall.S_IFMT == syscall.S_IFDIR) {
				t.Errorf("IsDir() = %v for mode %#o", got.IsDir(), tc.n.Mode)
			}
			// Encoding is deterministic: the decoded record encodes to the
			// same bytes.
			if b2 := EncodeInode(got); !bytes.Equal(b, b2) {
				t.Errorf("re-encoding differs:\n%x\n%x", b, b2)
			}
		})
	}
}

// TestInodeOmitEmpty checks that the optional fields are left out of a
// record when zero, and that a record without them decodes to zeros.
func TestInodeOmitEmpty(t *testing.T) {
	var m map[string]any
	if err := msgpack.Unmarshal(EncodeInode(&Inode{Mode: syscall.S_IFREG}), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"r", "l", "o", "p"} {
		if _, ok := m[k]; ok {
			t.Errorf("zero optional field %q encoded: %v", k, m)
		}
	}
	for _, k := range []string{"m", "u", "g", "n", "s", "a", "t", "c"} {
		if _, ok := m[k]; !ok {
			t.Errorf("field %q missing: %v", k, m)
		}
	}

	// A record that has only the type decodes, with everything else zero.
	b, err := msgpack.Marshal(map[string]any{"m": uint32(syscall.S_IFDIR | 0o755)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeInode(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Inode{Mode: syscall.S_IFDIR | 0o755}); *got != want {
		t.Fatalf("got %+v, want %+v", *got, want)
	}

	// Fields it does not know are ignored: a newer writer's record decodes.
	b, err = msgpack.Marshal(map[string]any{"m": uint32(syscall.S_IFREG), "s": 5, "zz": "future"})
	if err != nil {
		t.Fatal(err)
	}
	got, err = DecodeInode(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Inode{Mode: syscall.S_IFREG, Size: 5}); *got != want {
		t.Fatalf("got %+v, want %+v", *got, want)
	}
}

func TestEntryRoundTrip(t *testing.T) {
	for _, tc := range sampleEntries() {
		t.Run(tc.name, func(t *testing.T) {
			b := EncodeEntry(tc.e)
			got, err := DecodeEntry(b)
			if err != nil {
				t.Fatalf("DecodeEntry(EncodeEntry(%+v)) = %v", tc.e, err)
			}
			if got != tc.e {
				t.Fatalf("round trip: got %+v, want %+v", got, tc.e)
			}
			if b2 := EncodeEntry(got); !bytes.Equal(b, b2) {
				t.Errorf("re-encoding differs:\n%x\n%x", b, b2)
			}
		})
	}
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeRejects(t *testing.T) {
	validInode := EncodeInode(&Inode{Mode: syscall.S_IFREG | 0o644, Nlink: 1, Size: 3, Target: "x", Obj: 9})
	validEntry := EncodeEntry(Entry{Ino: 5, Mode: syscall.S_IFREG})

	// Inputs that are not a record of either kind.
	common := []struct {
		name string
		b    []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"reserved code 0xc1", []byte{0xc1}},
		{"text", []byte("hello, world")},
		{"json", []byte(`{"m":33188,"i":1}`)},
		{"msgpack nil", []byte{0xc0}},
		{"msgpack true", []byte{0xc3}},
		{"msgpack int", mustMarshal(t, 42)},
		{"msgpack negative int", mustMarshal(t, -1)},
		{"msgpack float", mustMarshal(t, 1.5)},
		{"msgpack string", mustMarshal(t, "fs/i/0000000000000001")},
		{"msgpack bin", mustMarshal(t, []byte{1, 2, 3})},
		{"msgpack empty map", mustMarshal(t, map[string]any{})},
		{"msgpack empty array", mustMarshal(t, []any{})},
		{"map header claims more", []byte{0x8f}},
		{"map32 header huge", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}},
		{"str32 key huge", []byte{0x81, 0xdb, 0xff, 0xff, 0xff, 0xff}},
		{"map with int key", []byte{0x81, 0x01, 0x01}},
	}

	inodeCases := append(append([]struct {
		name string
		b    []byte
	}{}, common...), []struct {
		name string
		b    []byte
	}{
		{"mode 0", mustMarshal(t, map[string]any{"m": 0, "n": 1})},
		{"permission bits only", mustMarshal(t, map[string]any{"m": 0o644})},
		{"no mode", mustMarshal(t, map[string]any{"u": 1, "g": 2, "n": 1, "s": 10})},
		{"type 0o030000", mustMarshal(t, map[string]any{"m": 0o030644})},
		{"type 0o050000", mustMarshal(t, map[string]any{"m": 0o050644})},
		{"type 0o070000", mustMarshal(t, map[string]any{"m": 0o070644})},
		{"type 0o110000", mustMarshal(t, map[string]any{"m": 0o110644})},
		{"type 0o170000", mustMarshal(t, map[string]any{"m": 0o170777})},
		{"an entry record with mode 0", EncodeEntry(Entry{Ino: 5})},
		{"mode is a string", mustMarshal(t, map[string]any{"m": "regular"})},
		{"mode is a bool", mustMarshal(t, map[string]any{"m": true})},
		{"mode is an array", mustMarshal(t, map[string]any{"m": []int{syscall.S_IFREG}})},
		{"mode is a map", mustMarshal(t, map[string]any{"m": map[string]int{"x": 1}})},
		{"size is a string", mustMarshal(t, map[string]any{"m": syscall.S_IFREG, "s": "big"})},
		{"mtime is a string", mustMarshal(t, map[string]any{"m": syscall.S_IFREG, "t": "2024-01-01"})},
		{"target is an int", mustMarshal(t, map[string]any{"m": syscall.S_IFLNK, "l": 42})},
		{"target is an array", mustMarshal(t, map[string]any{"m": syscall.S_IFLNK, "l": []string{"a"}})},
		{"obj is a string", mustMarshal(t, map[string]any{"m": syscall.S_IFREG, "o": "obj"})},
	}...)
	// Every strict prefix of a valid record is cut short.
	for i := 0; i < len(validInode); i++ {
		inodeCases = append(inodeCases, struct {
			name string
			b    []byte
		}{fmt.Sprintf("inode truncated to %d of %d", i, len(validInode)), validInode[:i]})
	}

	for _, tc := range inodeCases {
		t.Run("inode/"+tc.name, func(t *testing.T) {
			n, err := DecodeInode(tc.b)
			if err == nil {
				t.Fatalf("DecodeInode(%x) = %+v, want an error", tc.b, *n)
			}
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("DecodeInode(%x) error %v does not wrap errCorrupt", tc.b, err)
			}
			if n != nil {
				t.Fatalf("DecodeInode(%x) returned %+v with error %v", tc.b, *n, err)
			}
		})
	}

	entryCases := append(append([]struct {
		name string
		b    []byte
	}{}, common...), []struct {
		name string
		b    []byte
	}{
		{"ino 0", mustMarshal(t, map[string]any{"i": 0, "m": syscall.S_IFREG})},
		{"ino 0 encoded", EncodeEntry(Entry{Ino: 0, Mode: syscall.S_IFDIR})},
		{"no ino", mustMarshal(t, map[string]any{"m": syscall.S_IFREG})},
		{"ino nil", mustMarshal(t, map[string]any{"i": nil, "m": syscall.S_IFREG})},
		{"ino is a string", mustMarshal(t, map[string]any{"i": "1", "m": syscall.S_IFREG})},
		{"ino is a bool", mustMarshal(t, map[string]any{"i": true})},
		{"ino is an array", mustMarshal(t, map[string]any{"i": []int{1}})},
		{"ino is a map", mustMarshal(t, map[string]any{"i": map[string]int{"i": 1}})},
		{"mode is a string", mustMarshal(t, map[string]any{"i": 1, "m": "dir"})},
		{"an inode record without i", validInode},
	}...)
	for i := 0; i < len(validEntry); i++ {
		entryCases = append(entryCases, struct {
			name string
			b    []byte
		}{fmt.Sprintf("entry truncated to %d of %d", i, len(validEntry)), validEntry[:i]})
	}

	for _, tc := range entryCases {
		t.Run("entry/"+tc.name, func(t *testing.T) {
			e, err := DecodeEntry(tc.b)
			if err == nil {
				t.Fatalf("DecodeEntry(%x) = %+v, want an error", tc.b, e)
			}
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("DecodeEntry(%x) error %v does not wrap errCorrupt", tc.b, err)
			}
			if e != (Entry{}) {
				t.Fatalf("DecodeEntry(%x) returned %+v with error %v", tc.b, e, err)
			}
		})
	}
}

func TestKeys(t *testing.T) {
	k := keys{prefix: "fs/"}

	formats := []struct{ got, want string }{
		{k.inode(1), "fs/i/0000000000000001"},
		{k.inode(RootIno), "fs/i/0000000000000001"},
		{k.inode(0), "fs/i/0000000000000000"},
		{k.inode(0xdeadbeef), "fs/i/00000000deadbeef"},
		{k.inode(0x0123456789abcdef), "fs/i/0123456789abcdef"},
		{k.inode(math.MaxUint64), "fs/i/ffffffffffffffff"},
		{k.dir(1), "fs/d/0000000000000001/"},
		{k.dir(0xabc), "fs/d/0000000000000abc/"},
		{k.dir(math.MaxUint64), "fs/d/ffffffffffffffff/"},
		{k.entry(1, "a.txt"), "fs/d/0000000000000001/a.txt"},
		{k.entry(0x10, "dir with space"), "fs/d/0000000000000010/dir with space"},
		{k.entry(2, ""), "fs/d/0000000000000002/"},
		{keys{prefix: ""}.inode(255), "i/00000000000000ff"},
		{keys{prefix: "vol/a/"}.entry(3, "x"), "vol/a/d/0000000000000003/x"},
	}
	for _, f := range formats {
		if f.got != f.want {
			t.Errorf("key %q, want %q", f.got, f.want)
		}
	}

	// The digits are %016x, and so keys sort as their inode numbers do.
	inos := []uint64{0, 1, 2, 9, 10, 15, 16, 255, 256, 0xdeadbeef, 1 << 32, 1<<63 - 1, 1 << 63, math.MaxUint64 - 1, math.MaxUint64}
	var ikeys, dkeys []string
	for _, ino := range inos {
		if got, want := k.inode(ino), fmt.Sprintf("fs/i/%016x", ino); got != want {
			t.Errorf("inode(%d) = %q, want %q", ino, got, want)
		}
		if got, want := k.dir(ino), fmt.Sprintf("fs/d/%016x/", ino); got != want {
			t.Errorf("dir(%d) = %q, want %q", ino, got, want)
		}
		ikeys = append(ikeys, k.inode(ino))
		dkeys = append(dkeys, k.dir(ino))
	}
	if !sort.StringsAreSorted(ikeys) || !sort.StringsAreSorted(dkeys) {
		t.Errorf("keys do not sort as inode numbers: %q %q", ikeys, dkeys)
	}

	// An entry is under its directory's prefix, and no other directory's.
	if e := k.entry(1, "x"); !strings.HasPrefix(e, k.dir(1)) || strings.HasPrefix(e, k.dir(0x10)) {
		t.Errorf("entry %q vs dir prefixes %q %q", e, k.dir(1), k.dir(0x10))
	}

	// parse round trips.
	for _, ino := range inos[1:] {
		for _, c := range []struct {
			key   string
			isDir bool
		}{
			{k.inode(ino), false},
			{k.dir(ino), true},
			{k.entry(ino, "name"), true},
			{k.entry(ino, "a/b"), true},
			{k.entry(ino, "\u00e9\x00"), true},
		} {
			gotIno, gotDir := k.parse(c.key)
			if gotIno != ino || gotDir != c.isDir {
				t.Errorf("parse(%q) = (%d, %v), want (%d, %v)", c.key, gotIno, gotDir, ino, c.isDir)
			}
		}
	}
	for _, p := range []string{"", "x", "fs/sub/", "a/b/c/"} {
		kp := keys{prefix: p}
		if ino, isDir := kp.parse(kp.inode(77)); ino != 77 || isDir {
			t.Errorf("prefix %q: parse(inode(77)) = (%d, %v)", p, ino, isDir)
		}
		if ino, isDir := kp.parse(kp.entry(78, "n")); ino != 78 || !isDir {
			t.Errorf("prefix %q: parse(entry(78)) = (%d, %v)", p, ino, isDir)
		}
	}

	// Keys that are not the file system's.
	notOurs := []string{
		"",
		"f",
		"fs",
		"fs/",
		"fs/i",
		"fs/i/",
		"fs/d/",
		"fs/i/000000000000001",     // 15 digits
		"fs/d/000000000000001/",    // 15 digits and the slash
		"fs/i/000000000000000g",    // not hex
		"fs/i/00000000000000-1",    // not hex
		"fs/i/-000000000000001",    // sign
		"fs/i/+000000000000001",    // sign
		"fs/i/0x00000000000001",    // base prefix
		"fs/i/0000_0000_0000_01",   // underscores
		"fs/i/ 000000000000001",    // space
		"fs/d/zzzzzzzzzzzzzzzz/a",  // not hex
		"fs/x/0000000000000001",    // another record kind
		"fs/I/0000000000000001",    // case of the kind
		"fs/id0000000000000001",    // no slash after the kind
		"fs/i/0000000000000000",    // inode 0
		"other/i/0000000000000001", // another prefix
		"FS/i/0000000000000001",
		"fs2/i/0000000000000001",
		"xfs/i/0000000000000001",
		"/fs/i/0000000000000001",
		"i/0000000000000001",                   // no prefix
		"fs/sub/i/0000000000000001",            // a nested file system's
		keys{prefix: "fs/sub/"}.entry(1, "a"),  // ditto
		keys{prefix: "other/"}.inode(RootIno),  // another file system's
		keys{prefix: "other/"}.entry(5, "ent"), // ditto
	}
	for _, key := range notOurs {
		if ino, _ := k.parse(key); ino != 0 {
			t.Errorf("parse(%q) = %d, want 0", key, ino)
		}
	}
}

func FuzzDecodeInode(f *testing.F) {
	for _, tc := range sampleInodes() {
		b := EncodeInode(&tc.n)
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	for _, b := range [][]byte{
		nil, {0xc0}, {0xc1}, {0x80}, {0x90}, {0x8f}, {0xdf, 0xff, 0xff, 0xff, 0xff},
		[]byte("garbage"),
		mustMarshal(f, map[string]any{"m": 0}),
		mustMarshal(f, map[string]any{"m": "x"}),
		mustMarshal(f, map[string]any{"m": syscall.S_IFLNK, "l": 7}),
		mustMarshal(f, []any{uint32(syscall.S_IFREG), 1, 2, 3}),
		EncodeEntry(Entry{Ino: 1, Mode: syscall.S_IFDIR}),
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := DecodeInode(b)
		if err != nil {
			if n != nil {
				t.Fatalf("DecodeInode(%x) = %+v and error %v", b, *n, err)
			}
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("DecodeInode(%x) error %v does not wrap errCorrupt", b, err)
			}
			return
		}
		if n == nil {
			t.Fatalf("DecodeInode(%x) = nil, nil", b)
		}
		if !typeKnown(n.Mode) {
			t.Fatalf("DecodeInode(%x) accepted type %#o", b, n.Mode&syscall.S_IFMT)
		}
		b2 := EncodeInode(n)
		n2, err := DecodeInode(b2)
		if err != nil {
			t.Fatalf("re-decoding %+v (%x): %v", *n, b2, err)
		}
		if !reflect.DeepEqual(n, n2) {
			t.Fatalf("re-decoded %+v, want %+v", *n2, *n)
		}
		if b3 := EncodeInode(n2); !bytes.Equal(b2, b3) {
			t.Fatalf("re-encoding differs:\n%x\n%x", b2, b3)
		}
	})
}

func FuzzDecodeEntry(f *testing.F) {
	for _, tc := range sampleEntries() {
		b := EncodeEntry(tc.e)
		f.Add(b)
		f.Add(b[:len(b)/2])
	}
	for _, b := range [][]byte{
		nil, {0xc0}, {0xc1}, {0x80}, {0x90}, {0x8f}, {0xdf, 0xff, 0xff, 0xff, 0xff},
		[]byte("garbage"),
		EncodeEntry(Entry{}),
		mustMarshal(f, map[string]any{"i": "1"}),
		mustMarshal(f, map[string]any{"i": -1, "m": 1}),
		mustMarshal(f, []any{1, syscall.S_IFREG}),
		EncodeInode(&Inode{Mode: syscall.S_IFREG, Nlink: 1}),
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := DecodeEntry(b)
		if err != nil {
			if e != (Entry{}) {
				t.Fatalf("DecodeEntry(%x) = %+v and error %v", b, e, err)
			}
			if !errors.Is(err, errCorrupt) {
				t.Fatalf("DecodeEntry(%x) error %v does not wrap errCorrupt", b, err)
			}
			return
		}
		if e.Ino == 0 {
			t.Fatalf("DecodeEntry(%x) accepted inode 0", b)
		}
		b2 := EncodeEntry(e)
		e2, err := DecodeEntry(b2)
		if err != nil {
			t.Fatalf("re-decoding %+v (%x): %v", e, b2, err)
		}
		if e2 != e {
			t.Fatalf("re-decoded %+v, want %+v", e2, e)
		}
		if b3 := EncodeEntry(e2); !bytes.Equal(b2, b3) {
			t.Fatalf("re-encoding differs:\n%x\n%x", b2, b3)
		}
	})
}

func FuzzKeysParse(f *testing.F) {
	f.Add("fs/", "fs/i/0000000000000001", uint64(1), "name")
	f.Add("fs/", "fs/d/0000000000000001/a", uint64(0xdeadbeef), "a b")
	f.Add("fs/", "fs/d/ffffffffffffffff/", uint64(math.MaxUint64), "")
	f.Add("", "i/000000000000000g", uint64(0), "x")
	f.Add("other/", "fs/i/0000000000000001", uint64(1<<63), "\u00e9")
	f.Add("fs/", "fs/i/00", uint64(2), "a/b")
	f.Add("fs/", "", uint64(3), "..")
	f.Fuzz(func(t *testing.T, prefix, key string, ino uint64, name string) {
		k := keys{prefix: prefix}

		// parse never panics, and claims only keys under its prefix.
		if got, _ := k.parse(key); got != 0 && !strings.HasPrefix(key, prefix) {
			t.Fatalf("prefix %q: parse(%q) = %d for a key outside the prefix", prefix, key, got)
		}

		if ino == 0 {
			// Inode 0 is no inode: its keys are not the file system's.
			for _, key := range []string{k.inode(0), k.dir(0), k.entry(0, name)} {
				if got, _ := k.parse(key); got != 0 {
					t.Fatalf("prefix %q: parse(%q) = %d, want 0", prefix, key, got)
				}
			}
			return
		}
		if got, isDir := k.parse(k.inode(ino)); got != ino || isDir {
			t.Fatalf("prefix %q: parse(inode(%d)) = (%d, %v)", prefix, ino, got, isDir)
		}
		if got, isDir := k.parse(k.dir(ino)); got != ino || !isDir {
			t.Fatalf("prefix %q: parse(dir(%d)) = (%d, %v)", prefix, ino, got, isDir)
		}
		if !strings.Contains(name, "/") {
			key := k.entry(ino, name)
			if got, isDir := k.parse(key); got != ino || !isDir {
				t.Fatalf("prefix %q: parse(entry(%d, %q)) = (%d, %v)", prefix, ino, name, got, isDir)
			}
			if !strings.HasPrefix(key, k.dir(ino)) || key[len(k.dir(ino)):] != name {
				t.Fatalf("entry(%d, %q) = %q is not dir(%d) + name", ino, name, key, ino)
			}
		}
	})
}

// TestDecodeRefusesTrailingBytes: a record followed by anything is not a
// record.
func TestDecodeRefusesTrailingBytes(t *testing.T) {
	in := EncodeInode(&Inode{Mode: syscall.S_IFREG | 0o644, Nlink: 1})
	if _, err := DecodeInode(append(in, 0)); !errors.Is(err, errCorrupt) {
		t.Errorf("an inode with a byte past it: %v", err)
	}
	e := EncodeEntry(Entry{Ino: 2, Mode: syscall.S_IFREG})
	if _, err := DecodeEntry(append(e, e...)); !errors.Is(err, errCorrupt) {
		t.Errorf("two entries in one record: %v", err)
	}
}

// TestDecodeHugeClaimStaysSmall: a record of a few bytes that claims a
// string of 4 GB fails, again and again, without the memory it claims.
func TestDecodeHugeClaimStaysSmall(t *testing.T) {
	bad := []byte{0x81, 0xa1, 'l', 0xdb, 0xf0, 0, 0, 0}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 50 {
		if _, err := DecodeInode(bad); !errors.Is(err, errCorrupt) {
			t.Fatalf("DecodeInode(%x) = %v", bad, err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 64<<20 {
		t.Fatalf("50 decodes of an 8-byte record left the heap %d MiB larger", grew>>20)
	}
}
