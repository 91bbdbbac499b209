package replica_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/leased/leased/replica"
	"github.com/leased/leased/store"
)

// Damaged data folders: each damage must end in a refusal at start that
// says how to recover, or in a correct recovery (raft applies the log
// again, or restores a snapshot): never in keys read as absent, old values,
// or version numbers handed out again.

// damageKeys is how many keys the damage tests write, each twice.
const damageKeys = 40

func damageValue(i, round int) string {
	return fmt.Sprintf("value-%02d-%d-%s", i, round, strings.Repeat("v", 200))
}

// written is what a damage test wrote: each key's value and version, and
// the revision.
type written struct {
	vals map[string]string
	vers map[string]uint64
	rev  uint64
}

// fillDamageFolder writes damageKeys keys into a node in dir, takes a
// snapshot, restarts the node (which flushes badger's memtable to a
// table), and overwrites the even keys, so that the state lies in tables, the
// log and a snapshot. With crash, it returns a copy of the folder made
// while the node runs, as a crash would leave it (badger's memtable log
// unflushed), instead of the folder after a clean close.
func fillDamageFolder(t *testing.T, crash bool) (string, written) {
	t.Helper()
	dir := t.TempDir()
	w := written{vals: map[string]string{}, vers: map[string]uint64{}}
	n, err := openSolo(t, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	write := func(round int) {
		for i := range damageKeys {
			if round > 0 && i%2 == 1 {
				continue // the odd keys keep their first value, in one table only
			}
			k := fmt.Sprintf("k%02d", i)
			rs := mustApply(t, n, put(k, damageValue(i, round)))
			w.vals[k], w.vers[k], w.rev = damageValue(i, round), rs[0].Version, rs[0].Version
		}
	}
	write(0)
	if err := replica.RaftOf(n).Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err = openSolo(t, dir, nil); err != nil {
		t.Fatal(err)
	}
	write(1)
	if crash {
		image := t.TempDir()
		if err := os.CopyFS(image, os.DirFS(dir)); err != nil {
			t.Fatal(err)
		}
		n.Close()
		return image, w
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, w
}

// wantRefusedOrWhole opens the node on dir: it must refuse with the
// damage and the way to recover, or hold every key as written, and number
// the next write after them.
// A refusal that finds the database damaged says to delete only its db
// folder, since the log and the snapshots rebuild it; then every key must
// come back (rebuilt).
func wantRefusedOrWhole(t *testing.T, dir string, w written) (refused bool) {
	t.Helper()
	n, err := openSolo(t, dir, nil)
	if err != nil {
		if !errors.Is(err, store.ErrDamaged) {
			t.Fatalf("open refused without store.ErrDamaged: %v", err)
		}
		for _, want := range []string{"is damaged", "leased restore", dir} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal does not say %q: %v", want, err)
			}
		}
		t.Logf("refused: %v", err)
		if strings.Contains(err.Error(), "delete the folder db of its data folder (keep raft and tls)") {
			if err := os.RemoveAll(filepath.Join(dir, "db")); err != nil {
				t.Fatal(err)
			}
			if wantRefusedOrWhole(t, dir, w) {
				t.Error("refused again after its database was deleted, as the refusal advised")
			} else {
				t.Log("rebuilt from the log and the snapshots after its database was deleted")
			}
		}
		return true
	}
	defer n.Close()
	for k, v := range w.vals {
		r, err := n.Get([]byte(k))
		if err != nil || !r.Found || string(r.Value) != v || r.Version != w.vers[k] {
			t.Errorf("opened, but %s reads as found=%v version %d (want %d), %v", k, r.Found, r.Version, w.vers[k], err)
		}
	}
	rs := mustApply(t, n, put("next", "x"))
	if rs[0].Version != w.rev+1 {
		t.Errorf("opened, but the next write got version %d, want %d", rs[0].Version, w.rev+1)
	}
	t.Logf("recovered: every key as written, next version %d", rs[0].Version)
	return false
}

// files lists the files of dir whose names end in suffix, largest first.
func files(t *testing.T, dir, suffix string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), suffix) {
			out = append(out, filepath.Join(dir, e.Name()))
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, _ := os.Stat(out[i])
		b, _ := os.Stat(out[j])
		return a.Size() > b.Size()
	})
	if len(out) == 0 {
		t.Fatalf("no %s file in %s", suffix, dir)
	}
	return out
}

// flipAt flips the bits of the byte at off of file.
func flipAt(t *testing.T, file string, off int64) {
	t.Helper()
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// flipIn flips a byte in the middle of the first occurrence of what in
// file.
func flipIn(t *testing.T, file string, what []byte) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, what)
	if i < 0 {
		t.Fatalf("%q not in %s", what, file)
	}
	flipAt(t, file, int64(i+len(what)/2))
}

func TestDamagedDataFolder(t *testing.T) {
	t.Parallel()
	db := func(dir string) string { return filepath.Join(dir, "db") }
	wal := func(dir string) string { return filepath.Join(dir, "raft", "wal") }
	for _, tc := range []struct {
		name   string
		crash  bool
		damage func(t *testing.T, dir string)
		// refuse: the node must refuse to start; otherwise it must
		// recover every key (wantRefusedOrWhole checks both).
		refuse bool
	}{
		// The tables left are an older state, and its applied index
		// with it: raft restores the snapshot and applies the log.
		{"MANIFEST truncated", false, func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(db(dir), "MANIFEST"), 20)
		}, false},
		// badger drops the tables the MANIFEST no longer lists, but
		// replays its memtable log, newest applied index included: the
		// odd keys, in the lost table, would read as absent.
		{"MANIFEST truncated after a crash", true, func(t *testing.T, dir string) {
			os.Truncate(filepath.Join(db(dir), "MANIFEST"), 20)
		}, true},
		{"MANIFEST missing", false, func(t *testing.T, dir string) {
			os.Remove(filepath.Join(db(dir), "MANIFEST"))
		}, true},
		{"memtable log damaged after a crash", true, func(t *testing.T, dir string) {
			flipIn(t, files(t, db(dir), ".mem")[0], []byte(damageValue(20, 1)))
		}, false},
		{"table block bits flipped", false, func(t *testing.T, dir string) {
			flipAt(t, files(t, db(dir), ".sst")[0], 500)
		}, true},
		{"table index bits flipped", false, func(t *testing.T, dir string) {
			sst := files(t, db(dir), ".sst")[0]
			fi, err := os.Stat(sst)
			if err != nil {
				t.Fatal(err)
			}
			flipAt(t, sst, fi.Size()-200)
		}, true},
		{"log segment bits flipped", false, func(t *testing.T, dir string) {
			flipIn(t, files(t, wal(dir), ".wal")[0], []byte(damageValue(30, 1)))
		}, true},
		// A snapshot's restore, cut short by a crash: the database holds
		// the first keys of the snapshot, and neither its counters nor an
		// applied index, which are written last. raft restores the
		// snapshot again, and applies the log.
		{"restore cut short by a crash", false, func(t *testing.T, dir string) {
			restoreCutShort(t, db(dir))
		}, false},
		{"log tail lost after a crash", true, func(t *testing.T, dir string) {
			seg := files(t, wal(dir), ".wal")[0]
			b, _ := os.ReadFile(seg)
			i := bytes.Index(b, []byte(damageValue(30, 1)))
			if i < 0 {
				t.Fatal("entry not found")
			}
			// Zero the log from that entry on, as a disk that lost
			// the writes after it.
			f, _ := os.OpenFile(seg, os.O_RDWR, 0)
			f.WriteAt(make([]byte, len(b)-i+200), int64(i-200))
			f.Close()
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, w := fillDamageFolder(t, tc.crash)
			tc.damage(t, dir)
			if refused := wantRefusedOrWhole(t, dir, w); refused != tc.refuse {
				t.Errorf("refused = %v, want %v", refused, tc.refuse)
			}
		})
	}
}

// restoreCutShort leaves in the database folder dir what a restore of its
// own state leaves when the process dies half way: everything dropped,
// then the first half of the snapshot's keys written, in the stream's
// (key) order, the counters and the applied index not yet.
func restoreCutShort(t *testing.T, dir string) {
	t.Helper()
	st, err := store.Open(dir, quiet())
	if err != nil {
		t.Fatal(err)
	}
	snap, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var stream bytes.Buffer
	_, err = snap.WriteTo(&stream)
	snap.Release()
	st.Close()
	if err != nil {
		t.Fatal(err)
	}
	// The stream: a magic line, the applied index, then (key length + 1,
	// key, value length, value) pairs up to a 0, then a checksum.
	r := bufio.NewReader(&stream)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	if _, err := binary.ReadUvarint(r); err != nil {
		t.Fatal(err)
	}
	var pairs [][2][]byte
	for {
		kl, err := binary.ReadUvarint(r)
		if err != nil {
			t.Fatal(err)
		}
		if kl == 0 {
			break
		}
		k := make([]byte, kl-1)
		io.ReadFull(r, k)
		vl, _ := binary.ReadUvarint(r)
		v := make([]byte, vl)
		if _, err := io.ReadFull(r, v); err != nil {
			t.Fatal(err)
		}
		pairs = append(pairs, [2][]byte{k, v})
	}
	if len(pairs) < damageKeys {
		t.Fatalf("the snapshot holds %d keys, want at least %d", len(pairs), damageKeys)
	}
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.DropAll(); err != nil {
		t.Fatal(err)
	}
	wb := db.NewWriteBatch()
	for _, p := range pairs[:len(pairs)/2] {
		if bytes.HasPrefix(p[0], []byte("m/")) {
			t.Fatalf("a counter (%q) among the first half of the snapshot's keys: the case needs data keys only", p[0])
		}
		if err := wb.Set(p[0], p[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
}
