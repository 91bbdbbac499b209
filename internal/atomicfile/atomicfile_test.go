package atomicfile

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "secret.key")
	for _, data := range [][]byte{[]byte("first"), []byte("second, longer"), {}} {
		if err := Write(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s holds %q, want %q", path, got, data)
		}
		if runtime.GOOS != "windows" {
			info, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if mode := info.Mode().Perm(); mode != 0o600 {
				t.Errorf("%s has mode %#o, want 0600", path, mode)
			}
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 {
			t.Errorf("folder holds %d files after the write, want only %s", len(entries), filepath.Base(path))
		}
	}

	missing := filepath.Join(dir, "no such folder", "f")
	if err := Write(missing, []byte("x"), 0o600); err == nil || !strings.HasPrefix(err.Error(), "write "+missing) {
		t.Errorf("write into a missing folder: err = %v, want one naming %s", err, missing)
	}
}

func TestWriteNewNeverReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	if err := WriteNew(path, []byte("first"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := WriteNew(path, []byte("second"), 0o600)
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second WriteNew: err = %v, want one matching fs.ErrExist", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "first" {
		t.Errorf("%s holds %q after a refused WriteNew, want %q", path, got, "first")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("folder holds %d files, want only %s: the temporary file must go", len(entries), filepath.Base(path))
	}
}
