package leasefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/leased/leased/client"
)

// Mounted is a file system mounted on a folder: its FUSE server, its file
// system and its leased client.
type Mounted struct {
	Dir    string
	Server *fuse.Server
	FS     *FS
	Client *client.Client
}

// CheckFUSE says why this process cannot mount, if it cannot: leasefs
// mounts through /dev/fuse directly (no fusermount), which needs root.
func CheckFUSE() error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("FUSE is not available here: /dev/fuse: %w (load the fuse module, or give the container the device)", err)
	}
	if os.Geteuid() != 0 {
		return errors.New("leasefs mounts through /dev/fuse directly, which needs root (CAP_SYS_ADMIN): run it as root")
	}
	return nil
}

// Mount dials leased at endpoints with cfg, whose OnInvalidate it sets to
// the file system's Invalidated (unless o.KernelTTL is set), creates the
// root if it does not exist, and mounts the file system on dir. The
// kernel keeps no directory entry (every lookup asks the mount, which
// answers from its leases: an entry's invalidation would take the
// directory's lock in the kernel, which a request of this mount may hold
// while its write waits for that very acknowledgement), and keeps
// attributes only as long as the lease on them, dropping them when leased
// invalidates it (Invalidated). o.Client is ignored. debug logs every
// FUSE request. Unmount ends it.
func Mount(ctx context.Context, dir, endpoints string, cfg client.Config, o Options, debug bool) (*Mounted, error) {
	if err := CheckFUSE(); err != nil {
		return nil, err
	}
	// The kernel caches nothing of the file system before it exists.
	var fsys atomic.Pointer[FS]
	if o.KernelTTL == 0 {
		cfg.OnInvalidate = func(keys, prefixes []string) {
			if f := fsys.Load(); f != nil {
				f.Invalidated(keys, prefixes)
			}
		}
	}
	c, err := client.Dial(ctx, endpoints, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to leased at %s: %w", endpoints, err)
	}
	o.Client = c
	f, err := New(ctx, o)
	if err != nil {
		c.Close()
		return nil, err
	}
	fsys.Store(f)
	ttl := o.KernelTTL // 0 but for comparisons: every lookup asks the mount
	server, err := fs.Mount(dir, f.Root(), &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMount:       true,
			DirectMountStrict: true,
			AllowOther:        true,
			FsName:            "leasefs",
			Name:              "leasefs",
			Options:           []string{"default_permissions"},
			Debug:             debug,
			MaxBackground:     64,
		},
		EntryTimeout:    &ttl,
		NegativeTimeout: &ttl,
		AttrTimeout:     &ttl,
		RootStableAttr:  &fs.StableAttr{Ino: RootIno},
		NullPermissions: true,
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("mounting on %s: %w", dir, err)
	}
	return &Mounted{Dir: dir, Server: server, FS: f, Client: c}, nil
}

// Unmount unmounts the file system and closes its client. A mount in use
// fails with EBUSY and stays mounted, unless detach is set: it is then
// detached, and served until its last user lets go.
func (m *Mounted) Unmount(detach bool) error {
	err := m.Server.Unmount()
	if err != nil && detach {
		if derr := unmountDetach(m.Dir); derr != nil {
			return fmt.Errorf("unmounting %s: %v; detaching it: %w", m.Dir, err, derr)
		}
		err = nil
	}
	if err != nil {
		return err
	}
	m.Server.Wait()
	return m.Client.Close()
}

// UnmountStale unmounts what a leasefs that ended left on dir: a folder
// whose every access fails with ENOTCONN. It does nothing to a folder that
// answers.
func UnmountStale(dir string) error {
	// A stat may be answered from the kernel's cache; reading the folder
	// asks the mount.
	_, err := os.ReadDir(dir)
	if !errors.Is(err, errNotConnected) {
		return nil
	}
	if err := unmountDetach(dir); err != nil {
		return fmt.Errorf("%s was left mounted by a leasefs that ended, and unmounting it failed: %w", dir, err)
	}
	return nil
}
