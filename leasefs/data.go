package leasefs

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// tmpDir is the data folder's folder of the copies being written.
const tmpDir = ".tmp"

// objPath is the path of inode ino's data object obj.
func (f *FS) objPath(ino, obj uint64) string {
	return filepath.Join(f.data, hex16(ino)+"."+hex16(obj))
}

// dropData removes inode ino's data object obj, after the inode's last
// link went. Descriptors open on it, in this mount or another, still read
// it.
func (f *FS) dropData(ino, obj uint64) {
	if obj == 0 {
		return
	}
	if err := os.Remove(f.objPath(ino, obj)); err != nil && !errors.Is(err, os.ErrNotExist) {
		f.log.Warn("leasefs: removing a data object", "ino", ino, "err", err)
	}
}

// file is a regular file open in this mount: its contents as this mount
// sees them, shared by its handles, so that a handle reads what another
// of this mount wrote. A file's changes reach leased and the other mounts
// when a handle of it is flushed (each close) or synced: close-to-open
// consistency.
type file struct {
	fsys *FS
	ino  uint64

	mu    sync.Mutex
	refs  int      // handles open; guarded by fsys.mu
	obj   uint64   // the object data was read from; 0: none
	data  *os.File // the object (read-only use), or the private copy at tmp; nil: empty
	tmp   string   // the private copy's path; "" while data is the object
	size  int64
	dirty bool  // the copy has changes leased does not know of
	mtime int64 // of the last change
}

// openFile returns ino's open file, opening it from rec if it is not open
// in this mount, or if its open copy is clean and older than rec. It
// rereads the inode if its object was replaced meanwhile.
func (f *FS) openFile(ctx context.Context, ino uint64, rec *Inode) (*file, syscall.Errno) {
	for attempt := 0; ; attempt++ {
		f.mu.Lock()
		fl := f.files[ino]
		if fl == nil {
			fl = &file{fsys: f, ino: ino}
			f.files[ino] = fl
		}
		fl.refs++
		f.mu.Unlock()
		fl.mu.Lock()
		errno := fl.refresh(rec)
		fl.mu.Unlock()
		if errno != syscall.ENOENT || attempt >= maxAttempts {
			if errno != 0 {
				fl.release()
				return nil, errno
			}
			return fl, 0
		}
		fl.release()
		// Another mount replaced the object after rec was read: read the
		// inode again. An inode that still names it has lost its data.
		missing := rec.Obj
		if rec, _, errno = f.getInode(ctx, ino); errno != 0 {
			return nil, errno
		}
		if rec.Obj == missing {
			f.log.Error("leasefs: a file's data object is missing from the data folder", "ino", ino, "object", f.objPath(ino, missing))
			return nil, syscall.EIO
		}
	}
}

// refresh makes a clean file read rec's object. fl.mu is held.
func (fl *file) refresh(rec *Inode) syscall.Errno {
	if fl.dirty || (fl.data != nil && fl.obj == rec.Obj && fl.tmp == "") || (fl.data == nil && fl.obj == 0 && rec.Obj == 0 && fl.size == int64(rec.Size)) {
		return 0
	}
	var data *os.File
	if rec.Obj != 0 {
		var err error
		if data, err = os.Open(fl.fsys.objPath(fl.ino, rec.Obj)); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return syscall.ENOENT
			}
			return fs.ToErrno(err)
		}
	}
	fl.closeData()
	fl.data, fl.obj, fl.size = data, rec.Obj, int64(rec.Size)
	return 0
}

// closeData closes the file's data and removes a private copy. fl.mu is
// held.
func (fl *file) closeData() {
	if fl.data != nil {
		fl.data.Close()
	}
	if fl.tmp != "" {
		os.Remove(fl.tmp)
	}
	fl.data, fl.tmp, fl.dirty = nil, "", false
}

// release drops a handle's reference, and closes the file with the last.
func (fl *file) release() {
	f := fl.fsys
	f.mu.Lock()
	fl.refs--
	last := fl.refs == 0
	if last && f.files[fl.ino] == fl {
		delete(f.files, fl.ino)
	}
	f.mu.Unlock()
	if last {
		fl.mu.Lock()
		fl.closeData()
		fl.mu.Unlock()
	}
}

// private makes data a private copy of the file's first keep bytes, to
// write. fl.mu is held.
func (fl *file) private(keep int64) syscall.Errno {
	if fl.tmp != "" {
		return 0
	}
	tmp, err := os.CreateTemp(filepath.Join(fl.fsys.data, tmpDir), hex16(fl.ino)+".*")
	if err != nil {
		return fs.ToErrno(err)
	}
	if n := min(keep, fl.size); fl.data != nil && n > 0 {
		if _, err := io.Copy(tmp, io.NewSectionReader(fl.data, 0, n)); err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			return fs.ToErrno(err)
		}
	}
	if fl.data != nil {
		fl.data.Close()
	}
	fl.data, fl.tmp = tmp, tmp.Name()
	return 0
}

// isDirty says whether the file has changes leased does not know of.
func (fl *file) isDirty() bool {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.dirty
}

// pending returns the size and time of the changes leased does not know
// of, if there are any.
func (fl *file) pending() (size uint64, mtime int64, ok bool) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return uint64(fl.size), fl.mtime, fl.dirty
}

// setMtime sets the time of the pending changes, for a utimes while the
// file has some: the flush writes it.
func (fl *file) setMtime(t int64) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.dirty {
		fl.mtime = t
	}
}

// truncate changes the size of the private copy.
func (fl *file) truncate(size int64) syscall.Errno {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if errno := fl.private(size); errno != 0 {
		return errno
	}
	if err := fl.data.Truncate(size); err != nil {
		return fs.ToErrno(err)
	}
	fl.size, fl.dirty, fl.mtime = size, true, now()
	return 0
}

// flush writes the file's changes back: the private copy becomes a new
// object, synced, and the inode names it; the object it replaces is
// removed. Nothing changes in leased if writing the object fails.
func (fl *file) flush(ctx context.Context) syscall.Errno {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if !fl.dirty {
		return 0
	}
	f := fl.fsys
	if err := fl.data.Sync(); err != nil {
		return fs.ToErrno(err)
	}
	obj := rand.Uint64() | 1
	path := f.objPath(fl.ino, obj)
	if err := os.Rename(fl.tmp, path); err != nil {
		return fs.ToErrno(err)
	}
	if errno := syncDir(f.data); errno != 0 {
		os.Rename(path, fl.tmp)
		return errno
	}
	var replaced uint64
	_, errno := f.update(ctx, fl.ino, func(r *Inode) syscall.Errno {
		replaced = r.Obj
		r.Obj, r.Size, r.Mtime, r.Ctime = obj, uint64(fl.size), fl.mtime, now()
		return 0
	})
	switch errno {
	case 0:
		f.dropData(fl.ino, replaced)
	case syscall.ENOENT:
		// The file's last link went meanwhile: its data goes with it.
		os.Remove(path)
	default:
		os.Rename(path, fl.tmp)
		return errno
	}
	fl.tmp, fl.obj, fl.dirty = "", obj, false
	return 0
}

// syncDir makes the names in dir durable.
func syncDir(dir string) syscall.Errno {
	d, err := os.Open(dir)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fs.ToErrno(err)
	}
	return 0
}

// truncate sets ino's size and writes it back at once, as truncate(2)
// does without an open descriptor.
func (f *FS) truncate(ctx context.Context, ino uint64, size uint64) syscall.Errno {
	rec, _, errno := f.getInode(ctx, ino)
	if errno != 0 {
		return errno
	}
	switch rec.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
	case syscall.S_IFDIR:
		return syscall.EISDIR
	default:
		return syscall.EINVAL
	}
	fl, errno := f.openFile(ctx, ino, rec)
	if errno != 0 {
		return errno
	}
	defer fl.release()
	if errno := fl.truncate(int64(size)); errno != 0 {
		return errno
	}
	return fl.flush(ctx)
}

// handle is an open file descriptor's state: the file it reads and writes.
type handle struct {
	fl *file
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileFlusher  = (*handle)(nil)
	_ fs.FileFsyncer  = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

// Open opens a regular file: it reads the object the inode names now.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ctx = detach(ctx)
	f := n.fsys
	rec, _, errno := f.getInode(ctx, n.ino)
	if errno != 0 {
		return nil, 0, errno
	}
	if rec.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil, 0, syscall.EINVAL
	}
	return f.open(ctx, n.ino, rec, flags)
}

// open returns a handle of ino, truncated for O_TRUNC.
func (f *FS) open(ctx context.Context, ino uint64, rec *Inode, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fl, errno := f.openFile(ctx, ino, rec)
	if errno != 0 {
		return nil, 0, errno
	}
	if flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		if errno := fl.truncate(0); errno != 0 {
			fl.release()
			return nil, 0, errno
		}
	}
	return &handle{fl: fl}, 0, 0
}

// Create makes a regular file and opens it; an existing one is opened,
// unless O_EXCL.
func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	ctx = detach(ctx)
	f := n.fsys
	uid, gid := caller(ctx)
	rec := &Inode{Mode: syscall.S_IFREG | mode&07777, UID: uid, GID: gid, Nlink: 1}
	in, errno := n.create(ctx, name, rec, out)
	if errno == syscall.EEXIST && flags&syscall.O_EXCL == 0 {
		if in, errno = n.Lookup(ctx, name, out); errno == 0 {
			if rec, _, errno = f.getInode(ctx, in.StableAttr().Ino); errno == 0 && rec.IsDir() {
				errno = syscall.EISDIR
			}
		}
	}
	if errno != 0 {
		return nil, nil, 0, errno
	}
	fh, fuseFlags, errno := f.open(ctx, in.StableAttr().Ino, rec, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return in, fh, fuseFlags, 0
}

// Read reads the file as this mount sees it.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	fl := h.fl
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.data == nil || off >= fl.size {
		return fuse.ReadResultData(nil), 0
	}
	n, err := fl.data.ReadAt(dest[:min(int64(len(dest)), fl.size-off)], off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

// Write writes to the file's private copy in this mount.
func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	fl := h.fl
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if errno := fl.private(fl.size); errno != 0 {
		return 0, errno
	}
	n, err := fl.data.WriteAt(data, off)
	if end := off + int64(n); end > fl.size {
		fl.size = end
	}
	if n > 0 {
		fl.dirty, fl.mtime = true, now()
	}
	if err != nil {
		return uint32(n), fs.ToErrno(err)
	}
	return uint32(n), 0
}

// Flush writes the file back: each close(2) of a descriptor calls it.
func (h *handle) Flush(ctx context.Context) syscall.Errno { return h.fl.flush(detach(ctx)) }

// Fsync writes the file back.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.fl.flush(detach(ctx))
}

// Release ends the handle; the file closes with its last handle.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	ctx = detach(ctx)
	errno := h.fl.flush(ctx)
	h.fl.release()
	return errno
}
