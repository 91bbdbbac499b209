package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestResetKey: the stateless reset key is made once, kept with mode 0600,
// reused on the next start, and a damaged one is refused with a clear
// error rather than replaced.
func TestResetKey(t *testing.T) {
	dir := t.TempDir()
	k1, err := loadOrCreateResetKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, resetKeyFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, mode %v", err, fi.Mode())
	}
	k2, err := loadOrCreateResetKey(dir)
	if err != nil || *k1 != *k2 {
		t.Fatalf("second load: %v; same key: %v", err, err == nil && *k1 == *k2)
	}
	if *k1 == [32]byte{} {
		t.Fatal("the key is all zeros")
	}
	if err := os.WriteFile(path, []byte("short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := loadOrCreateResetKey(dir); err == nil || !strings.Contains(err.Error(), "5 bytes") {
		t.Fatalf("damaged key: %v", err)
	}
}
