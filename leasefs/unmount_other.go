//go:build !linux

package leasefs

import (
	"errors"
	"syscall"
)

// errNotConnected is what a folder whose FUSE server ended answers.
const errNotConnected = syscall.ENOTCONN

// unmountDetach would detach the mount on dir; only Linux can.
func unmountDetach(dir string) error {
	return errors.New("detaching a mount is supported on Linux only")
}
