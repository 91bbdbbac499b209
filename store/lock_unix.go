//go:build unix

package store

import (
	"errors"
	"os"
	"syscall"
)

// lockedByOther reports whether another open of the database folder dir
// holds badger's exclusive lock on it, by taking the shared lock that a
// read-only open takes, and releasing it at once.
func lockedByOther(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return false, syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
