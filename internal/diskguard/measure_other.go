//go:build !unix

package diskguard

import (
	"io/fs"
	"os"
	"path/filepath"
)

// Measure measures dir: the sizes of its files. Where there is no statfs,
// the free space is not known, and reported as the most an int64 holds, so
// that only the quota applies.
func Measure(dir string) (Usage, error) {
	u := Usage{Free: 1<<63 - 1}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if info, err := d.Info(); err == nil {
			u.Used += info.Size()
		}
		return nil
	})
	return u, err
}

// lockFile opens, creating it if needed, the lock file at path. Where
// there is no flock, it is not locked.
func lockFile(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}

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
