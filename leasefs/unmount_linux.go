package leasefs

import "syscall"

// errNotConnected is what a folder whose FUSE server ended answers.
const errNotConnected = syscall.ENOTCONN

// unmountDetach detaches the mount on dir (umount -l).
func unmountDetach(dir string) error { return syscall.Unmount(dir, syscall.MNT_DETACH) }
