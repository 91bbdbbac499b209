package leasefs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/leased/leased/client"
)

// DefaultPrefix is the prefix of a file system's keys when Options.Prefix
// is empty.
const DefaultPrefix = "fs/"

// Options configure a file system.
type Options struct {
	// Client is the mount's leased client. Its Config.OnInvalidate must
	// call FS.Invalidated (New's caller dials it so; see cmd/leasefs).
	Client *client.Client
	// Data is the folder of the file data objects, shared by every mount
	// of the file system. It must keep a removed file readable through the
	// descriptors open on it, as a local file system does.
	Data string
	// Prefix is the prefix of the file system's keys; empty means
	// DefaultPrefix. Two file systems on one leased have different ones.
	Prefix string
	// Logger receives the mount's logs; nil means slog.Default().
	Logger *slog.Logger
	// KernelTTL, if positive, lets the kernel keep entries and attributes
	// for this long whatever the leases say, and the mount's caller does
	// not wire Invalidated: a cache by time-to-live, as NFS keeps
	// attributes, which answers from the kernel without asking the mount
	// and may be stale for up to KernelTTL after another mount's change.
	// For comparisons only (leasebench); 0 keeps every answer coherent.
	KernelTTL time.Duration
}

// FS is one mount's view of a file system: the FUSE nodes, the inodes the
// kernel knows, and the files open in this mount. Mount creates it.
type FS struct {
	c    *client.Client
	k    keys
	data string
	log  *slog.Logger
	ttl  time.Duration // Options.KernelTTL

	mu    sync.Mutex
	nodes map[uint64]*fs.Inode // the inodes the kernel knows, for invalidations
	files map[uint64]*file     // the regular files open in this mount
}

// New returns a file system on o's client. Its root is created in leased
// if it does not exist yet.
func New(ctx context.Context, o Options) (*FS, error) {
	if o.Client == nil || o.Data == "" {
		return nil, errors.New("leasefs: Options.Client and Options.Data are required")
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if err := os.MkdirAll(filepath.Join(o.Data, tmpDir), 0o755); err != nil {
		return nil, fmt.Errorf("leasefs: data folder: %w", err)
	}
	f := &FS{
		c: o.Client, k: keys{prefix: o.Prefix}, data: o.Data, log: o.Logger, ttl: o.KernelTTL,
		nodes: make(map[uint64]*fs.Inode), files: make(map[uint64]*file),
	}
	if err := f.initRoot(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// initRoot creates the root directory's inode unless it exists.
func (f *FS) initRoot(ctx context.Context) error {
	it, err := f.c.Get(ctx, f.k.inode(RootIno))
	if err != nil {
		return fmt.Errorf("leasefs: reading the root: %w", err)
	}
	if it.Found {
		if _, err := DecodeInode(it.Value); err != nil {
			return err
		}
		return nil
	}
	now := time.Now().UnixNano()
	root := &Inode{Mode: syscall.S_IFDIR | 0o755, Nlink: 2, Atime: now, Mtime: now, Ctime: now, Parent: RootIno}
	_, err = f.c.Txn(ctx).If(client.Absent(f.k.inode(RootIno))).
		Then(client.PutOp(f.k.inode(RootIno), EncodeInode(root))).Commit()
	if err != nil {
		return fmt.Errorf("leasefs: creating the root: %w", err)
	}
	return nil
}

// Root returns the root directory's node, for fs.Mount.
func (f *FS) Root() fs.InodeEmbedder { return &node{fsys: f, ino: RootIno} }

// Invalidated drops the kernel's copies of what leased invalidated: the
// attributes of the inodes whose records are among keys, or of every inode
// for a prefix above the file system's records (a suspend drops every
// lease). It is the client's Config.OnInvalidate: it runs before the
// client acknowledges, so the kernel no longer answers from the old
// attributes once the write commits. Invalidating an inode's attributes
// takes no lock of the kernel's that a request of this mount may hold
// (unlike a directory entry's invalidation, which takes the directory's),
// so it cannot wait for a write that waits for this acknowledgement.
// Entries are never cached by the kernel (their timeout is 0): every
// lookup is answered by the mount, from its leases.
func (f *FS) Invalidated(keys, prefixes []string) {
	for _, p := range prefixes {
		if strings.HasPrefix(f.k.prefix+"i/", p) {
			f.mu.Lock()
			all := make([]*fs.Inode, 0, len(f.nodes))
			for _, in := range f.nodes {
				all = append(all, in)
			}
			f.mu.Unlock()
			for _, in := range all {
				in.NotifyContent(-1, 0)
			}
			return
		}
	}
	for _, key := range keys {
		ino, isDir := f.k.parse(key)
		if ino == 0 || isDir {
			continue
		}
		f.mu.Lock()
		in := f.nodes[ino]
		f.mu.Unlock()
		if in != nil {
			in.NotifyContent(-1, 0) // attributes only
		}
	}
}

// node is an inode of the kernel's: a file, directory or symlink.
type node struct {
	fs.Inode
	fsys *FS
	ino  uint64
}

var (
	_ fs.NodeLookuper      = (*node)(nil)
	_ fs.NodeGetattrer     = (*node)(nil)
	_ fs.NodeSetattrer     = (*node)(nil)
	_ fs.NodeReaddirer     = (*node)(nil)
	_ fs.NodeMkdirer       = (*node)(nil)
	_ fs.NodeMknoder       = (*node)(nil)
	_ fs.NodeCreater       = (*node)(nil)
	_ fs.NodeSymlinker     = (*node)(nil)
	_ fs.NodeReadlinker    = (*node)(nil)
	_ fs.NodeLinker        = (*node)(nil)
	_ fs.NodeUnlinker      = (*node)(nil)
	_ fs.NodeRmdirer       = (*node)(nil)
	_ fs.NodeRenamer       = (*node)(nil)
	_ fs.NodeOpener        = (*node)(nil)
	_ fs.NodeStatfser      = (*node)(nil)
	_ fs.NodeFsyncer       = (*node)(nil)
	_ fs.NodeOnForgetter   = (*node)(nil)
	_ fs.NodeOnAdder       = (*node)(nil)
	_ fs.NodeGetxattrer    = (*node)(nil)
	_ fs.NodeSetxattrer    = (*node)(nil)
	_ fs.NodeRemovexattrer = (*node)(nil)
	_ fs.NodeListxattrer   = (*node)(nil)
)

// child returns the kernel's inode for ino, made a child of n: the one
// the kernel knows already, if it does.
func (n *node) child(ctx context.Context, ino uint64, mode uint32) *fs.Inode {
	return n.NewInode(ctx, &node{fsys: n.fsys, ino: ino}, fs.StableAttr{Mode: mode & syscall.S_IFMT, Ino: ino})
}

// OnAdd is called when the node becomes the kernel's (the root at the
// mount): Invalidated finds it from then on.
func (n *node) OnAdd(ctx context.Context) {
	f := n.fsys
	f.mu.Lock()
	f.nodes[n.ino] = n.EmbeddedInode()
	f.mu.Unlock()
}

// OnForget is called when the kernel forgets the inode.
func (n *node) OnForget() {
	f := n.fsys
	f.mu.Lock()
	if in := f.nodes[n.ino]; in == n.EmbeddedInode() {
		delete(f.nodes, n.ino)
	}
	f.mu.Unlock()
}

// entryOut fills out for a lookup's answer: the entry is not cached by the
// kernel, the attributes for lease, the time left on the lease of the
// answer they come from (client.Item.Lease).
func (f *FS) entryOut(ino uint64, in *Inode, lease time.Duration, out *fuse.EntryOut) {
	out.NodeId = ino
	f.fillAttr(ino, in, &out.Attr)
	out.SetEntryTimeout(min(f.ttl, f.attrTimeout(ino, lease)))
	out.SetAttrTimeout(f.attrTimeout(ino, lease))
}

// attrTimeout is how long the kernel may keep ino's attributes, read from
// an answer whose lease had lease left: that long, and not at all while the
// file has changes in this mount that leased has not got yet. The lease
// must be the answer's own, not the key's at some other moment: an answer
// read from leased while a write of the key was pending has none, even if
// the committed write's value is in the cache by the time it is sent.
func (f *FS) attrTimeout(ino uint64, lease time.Duration) time.Duration {
	f.mu.Lock()
	open := f.files[ino]
	f.mu.Unlock()
	if open != nil && open.isDirty() {
		return 0
	}
	if f.ttl > 0 {
		return f.ttl
	}
	return lease
}

// fillAttr sets out from in, with the size and time of the changes this
// mount has not written back yet.
func (f *FS) fillAttr(ino uint64, in *Inode, out *fuse.Attr) {
	out.Ino = ino
	out.Mode = in.Mode
	out.Nlink = in.Nlink
	out.Owner = fuse.Owner{Uid: in.UID, Gid: in.GID}
	out.Size = in.Size
	out.Rdev = in.Rdev
	mtime := in.Mtime
	f.mu.Lock()
	open := f.files[ino]
	f.mu.Unlock()
	if open != nil {
		if size, t, ok := open.pending(); ok {
			out.Size, mtime = size, t
		}
	}
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 4096
	setTime := func(ns int64, sec *uint64, nsec *uint32) {
		*sec, *nsec = uint64(ns/1e9), uint32(ns%1e9)
	}
	setTime(in.Atime, &out.Atime, &out.Atimensec)
	setTime(mtime, &out.Mtime, &out.Mtimensec)
	setTime(in.Ctime, &out.Ctime, &out.Ctimensec)
}

// getInode reads ino's record, from the mount's lease cache while its
// lease lasts: the record and its version.
func (f *FS) getInode(ctx context.Context, ino uint64) (*Inode, uint64, syscall.Errno) {
	in, it, errno := f.readInode(ctx, ino)
	return in, it.Version, errno
}

// readInode is getInode, with the answer it decoded.
func (f *FS) readInode(ctx context.Context, ino uint64) (*Inode, client.Item, syscall.Errno) {
	var it client.Item
	err := f.retry(ctx, func() (err error) {
		it, err = f.c.Get(ctx, f.k.inode(ino))
		return err
	})
	if err != nil {
		return nil, it, f.errno("reading an inode", err)
	}
	if !it.Found {
		return nil, it, syscall.ENOENT
	}
	in, err := DecodeInode(it.Value)
	if err != nil {
		f.log.Error("leasefs: a damaged inode record", "ino", ino, "err", err)
		return nil, it, syscall.EIO
	}
	return in, it, 0
}

// getEntry reads name's entry in directory dir: the entry, its version, and
// ENOENT if there is none.
func (f *FS) getEntry(ctx context.Context, dir uint64, name string) (Entry, uint64, syscall.Errno) {
	var it client.Item
	err := f.retry(ctx, func() (err error) {
		it, err = f.c.Get(ctx, f.k.entry(dir, name))
		return err
	})
	if err != nil {
		return Entry{}, 0, f.errno("reading a directory entry", err)
	}
	if !it.Found {
		return Entry{}, 0, syscall.ENOENT
	}
	e, err := DecodeEntry(it.Value)
	if err != nil {
		f.log.Error("leasefs: a damaged directory entry", "dir", dir, "name", name, "err", err)
		return Entry{}, 0, syscall.EIO
	}
	return e, it.Version, 0
}

// detach returns a request's context without its cancellation. The
// kernel interrupts a request when the program that made it gets any
// signal it handles, and a Go program gets one every few milliseconds (to
// preempt its goroutines): failing a stat or a rename with EINTR then
// breaks programs that do not expect it. A fatal signal ends the
// program's wait in the kernel by itself, and the operations are bounded
// otherwise (unavailableFor, maxAttempts), as the interrupts libfuse
// ignores by default.
func detach(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }

// unavailableFor bounds how long an operation waits for leased to be
// reachable again (a failover, a restart) before it fails with EIO.
const unavailableFor = 2 * time.Minute

// retry runs op again while it fails with ErrUnavailable, for at most
// unavailableFor or until ctx ends: a failover shows as a pause.
func (f *FS) retry(ctx context.Context, op func() error) error {
	deadline := time.Now().Add(unavailableFor)
	wait := 20 * time.Millisecond
	for {
		err := op()
		if err == nil || !errors.Is(err, client.ErrUnavailable) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// errno turns a client error into the errno a program gets, logging the
// unexpected ones.
func (f *FS) errno(what string, err error) syscall.Errno {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, client.ErrPermissionDenied), errors.Is(err, client.ErrUnauthenticated):
		return syscall.EACCES
	case errors.Is(err, client.ErrTooLarge):
		return syscall.ENAMETOOLONG
	case errors.Is(err, client.ErrResourceExhausted):
		return syscall.ENOSPC
	case errors.Is(err, context.Canceled), errors.Is(err, client.ErrCanceled):
		return syscall.EINTR
	}
	f.log.Error("leasefs: "+what, "err", err)
	return syscall.EIO
}

// newIno returns a random inode number: above the root's, below 2^63.
func newIno() uint64 {
	for {
		if n := rand.Uint64() >> 1; n > RootIno {
			return n
		}
	}
}

// now is the time for inodes' timestamps, in nanoseconds since 1970.
func now() int64 { return time.Now().UnixNano() }

// caller returns the uid and gid of the process that made the request.
func caller(ctx context.Context) (uid, gid uint32) {
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

// maxAttempts bounds the retries of a transaction whose compares failed
// because another mount changed a record it read meanwhile.
const maxAttempts = 100

// backoff sleeps a little, more after each failed attempt, so that mounts
// that change one directory at once do not retry in step.
func backoff(ctx context.Context, attempt int) syscall.Errno {
	d := time.Duration(rand.Int64N(int64(time.Millisecond) << min(attempt, 6)))
	select {
	case <-ctx.Done():
		return syscall.EINTR
	case <-time.After(d):
		return 0
	}
}
