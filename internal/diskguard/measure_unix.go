//go:build unix

package diskguard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Measure measures dir: the blocks its files occupy, from a walk of the
// folder (a few dozen files for a server's database and log, so a walk is
// cheap enough every second), and the bytes its file system has available
// to an unprivileged writer (statfs). Entries the walk cannot read are
// named in Usage.Skipped, and left out of Used; only a failed statfs fails
// the measurement.
func Measure(dir string) (Usage, error) { return measure(dir, os.DirFS(dir)) }

// measure is Measure, with the walk over fsys, the folder dir; tests
// inject its faults.
func measure(dir string, fsys fs.FS) (Usage, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Usage{}, fmt.Errorf("statfs %s: %w", dir, err)
	}
	u := walk(fsys)
	u.Free = int64(st.Bavail) * int64(st.Bsize)
	return u, nil
}

// allocated returns the bytes a file occupies on disk: its allocated
// blocks, so that a sparse file counts only what was written.
func allocated(info fs.FileInfo) int64 {
	if s, ok := info.Sys().(*syscall.Stat_t); ok {
		return int64(s.Blocks) * 512
	}
	return info.Size()
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

// gone reports whether err, from a stat of a path in the data folder, says
// that the path no longer leads to it: no such file, or a component of the
// path that is no longer a folder.
func gone(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ENOTDIR)
}

// statID returns the identity of the file at path.
func statID(path string) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fileID{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, nil
}

// fstatID returns the identity of the open file f.
func fstatID(f *os.File) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileID{}, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	return fileID{uint64(st.Dev), uint64(st.Ino)}, nil
}
