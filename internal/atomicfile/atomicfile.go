// Package atomicfile writes small files so that a crash leaves either the
// old contents or the new ones, never a mix: the TLS files, the QUIC
// stateless reset key and the horizon's boot record. Any package of
// leased may use it.
package atomicfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
)

// Write replaces path with data: it writes a temporary file in the same
// folder with mode perm, syncs it, renames it over path and syncs the
// folder. Its errors name path.
func Write(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, false)
}

// WriteNew writes data to path as Write does, but only if path does not
// exist yet: it links the synced temporary file to path instead of renaming
// it, and a link never replaces a file. If path exists it leaves it alone
// and returns an error that matches fs.ErrExist.
func WriteNew(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, true)
}

func write(path string, data []byte, perm os.FileMode, exclusive bool) (err error) {
	dir, base := filepath.Split(path)
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	closed := false
	defer func() {
		if !closed {
			f.Close()
		}
		if err != nil || exclusive {
			os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	closed = true
	if err = f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if exclusive {
		if err = os.Link(tmp, path); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("write %s: %w", path, fs.ErrExist)
			}
			return fmt.Errorf("write %s: %w", path, err)
		}
	} else if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return SyncDir(dir)
}

// SyncDir fsyncs the folder dir ("" is the working directory) so that
// renames and removals in it are durable. Windows cannot sync a folder and
// does not need to.
func SyncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil
	}
	if dir == "" {
		dir = "."
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync folder: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync folder %s: %w", dir, err)
	}
	return nil
}
