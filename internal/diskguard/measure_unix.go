//go:build unix

package diskguard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// Measure measures dir: the blocks its files occupy, from a walk of the
// folder (a few dozen files for a server's database and log, so a walk is
// cheap enough every second), and the bytes its file system has available
// to an unprivileged writer (statfs).
func Measure(dir string) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Usage{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	u := Usage{Free: int64(st.Bavail) * int64(st.Bsize)}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed since it was listed: compaction
			}
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if s, ok := info.Sys().(*syscall.Stat_t); ok {
			u.Used += int64(s.Blocks) * 512
		} else {
			u.Used += info.Size()
		}
		return nil
	})
	return u, err
}

// lockFile opens, creating it if needed, the lock file at path and takes
// an exclusive flock on it, which the process holds until it closes the
// file or exits.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked", ErrLocked, path)
		}
		return nil, fmt.Errorf("lock file %s: %w", path, err)
	}
	return f, nil
}

func statID(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, nil
}

func fstatID(f *os.File) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileID{}, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, nil
}
