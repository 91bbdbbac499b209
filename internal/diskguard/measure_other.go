//go:build !unix

package diskguard

import (
	"errors"
	"io/fs"
	"os"
)

// Measure measures dir: the sizes of its files. Where there is no statfs,
// the free space is not known, and reported as the most an int64 holds, so
// that only the quota applies. Entries the walk cannot read are named in
// Usage.Skipped, and left out of Used.
func Measure(dir string) (Usage, error) { return measure(dir, os.DirFS(dir)) }

// measure is Measure, with the walk over fsys, the folder dir; tests
// inject its faults.
func measure(_ string, fsys fs.FS) (Usage, error) {
	u := walk(fsys)
	u.Free = 1<<63 - 1
	return u, nil
}

// allocated returns the size of a file.
func allocated(info fs.FileInfo) int64 { return info.Size() }

// lockFile opens, creating it if needed, the lock file at path. Where
// there is no flock, it is not locked.
func lockFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

// gone reports whether err, from a stat of a path in the data folder, says
// that the path no longer leads to it.
func gone(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// statID checks that path exists. Where there are no inode numbers, a
// replaced file is not told from the original.
func statID(path string) (fileID, error) {
	_, err := os.Stat(path)
	return fileID{}, err
}

func fstatID(f *os.File) (fileID, error) {
	_, err := f.Stat()
	return fileID{}, err
}
