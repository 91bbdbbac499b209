//go:build unix

package diskguard

import (
	"io/fs"

	"golang.org/x/sys/unix"
)

// Writable returns nil if this process may create files in dir: access(2)
// with W_OK, which sees both a folder whose permissions were taken away
// and a file system mounted (or remounted, after an error) read-only. A
// folder that does not exist yet is writable as far as it can tell. One
// system call, about a microsecond.
func Writable(dir string) error {
	err := unix.Access(dir, unix.W_OK)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	return &fs.PathError{Op: "access", Path: dir, Err: err}
}
