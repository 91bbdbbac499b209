package leasefs

import (
	"context"
	"errors"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/leased/leased/client"
)

// Lookup answers a name's lookup from the mount's leases: the entry, then
// the child's inode.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	f := n.fsys
	for attempt := 0; ; attempt++ {
		e, _, errno := f.getEntry(ctx, n.ino, name)
		if errno != 0 {
			return nil, errno
		}
		in, it, errno := f.readInode(ctx, e.Ino)
		if again(ctx, errno, attempt) {
			continue // the name was replaced between the two reads: read it again
		}
		if errno != 0 {
			return nil, errno
		}
		f.entryOut(e.Ino, in, it.Lease, out)
		return n.child(ctx, e.Ino, in.Mode), 0
	}
}

// again says whether an operation that read a name's entry and then found
// the inode it names gone (errno ENOENT) should read both again: another
// mount replaced or removed the name between the two reads. It waits a
// little before the next attempt, and gives up after maxAttempts.
func again(ctx context.Context, errno syscall.Errno, attempt int) bool {
	return errno == syscall.ENOENT && attempt < maxAttempts && backoff(ctx, attempt) == 0
}

// Getattr answers from the mount's lease on the inode's record.
func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	ctx = detach(ctx)
	f := n.fsys
	in, it, errno := f.readInode(ctx, n.ino)
	if errno != 0 {
		return errno
	}
	f.fillAttr(n.ino, in, &out.Attr)
	out.SetTimeout(f.attrTimeout(n.ino, it.Lease))
	return 0
}

// Setattr changes the mode, owner, times or size.
func (n *node) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	ctx = detach(ctx)
	f := n.fsys
	if size, ok := in.GetSize(); ok {
		if errno := f.truncate(ctx, n.ino, size); errno != 0 {
			return errno
		}
	}
	mtime, setM := in.GetMTime()
	if setM {
		f.mu.Lock()
		open := f.files[n.ino]
		f.mu.Unlock()
		if open != nil {
			open.setMtime(mtime.UnixNano())
		}
	}
	rec, errno := f.update(ctx, n.ino, func(r *Inode) syscall.Errno {
		if mode, ok := in.GetMode(); ok {
			r.Mode = r.Mode&syscall.S_IFMT | mode&^syscall.S_IFMT
		}
		if uid, ok := in.GetUID(); ok {
			r.UID = uid
		}
		if gid, ok := in.GetGID(); ok {
			r.GID = gid
		}
		if t, ok := in.GetATime(); ok {
			r.Atime = t.UnixNano()
		}
		if setM {
			r.Mtime = mtime.UnixNano()
		}
		r.Ctime = now()
		return 0
	})
	if errno != 0 {
		return errno
	}
	f.fillAttr(n.ino, rec, &out.Attr)
	out.SetTimeout(0) // the write dropped this mount's lease on the record
	return 0
}

// update changes ino's record with change, and writes it if nobody
// changed it meanwhile, trying again otherwise: a compare-and-swap loop.
func (f *FS) update(ctx context.Context, ino uint64, change func(*Inode) syscall.Errno) (*Inode, syscall.Errno) {
	for attempt := 0; ; attempt++ {
		rec, ver, errno := f.getInode(ctx, ino)
		if errno != 0 {
			return nil, errno
		}
		if errno := change(rec); errno != 0 {
			return nil, errno
		}
		err := f.retry(ctx, func() error {
			_, err := f.c.CompareAndSwap(ctx, f.k.inode(ino), ver, EncodeInode(rec))
			return err
		})
		switch {
		case err == nil:
			return rec, 0
		case !isMismatch(err) || attempt >= maxAttempts:
			return nil, f.errno("updating an inode", err)
		}
		if errno := backoff(ctx, attempt); errno != 0 {
			return nil, errno
		}
	}
}

// Readdir lists the directory: its entries' prefix, under a prefix lease
// when it fits one listing.
func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ctx = detach(ctx)
	f := n.fsys
	parent := n.ino
	if _, p := n.Parent(); p != nil {
		parent = p.StableAttr().Ino
	}
	list := []fuse.DirEntry{
		{Name: ".", Ino: n.ino, Mode: syscall.S_IFDIR},
		{Name: "..", Ino: parent, Mode: syscall.S_IFDIR},
	}
	prefix := f.k.dir(n.ino)
	opts := []client.ListOption{client.Leased()}
	for {
		var r client.ListResult
		err := f.retry(ctx, func() (err error) {
			r, err = f.c.List(ctx, prefix, opts...)
			return err
		})
		if err != nil {
			return nil, f.errno("listing a directory", err)
		}
		for _, kv := range r.KVs {
			e, err := DecodeEntry(kv.Value)
			if err != nil {
				f.log.Error("leasefs: a damaged directory entry", "key", kv.Key, "err", err)
				return nil, syscall.EIO
			}
			list = append(list, fuse.DirEntry{Name: kv.Key[len(prefix):], Ino: e.Ino, Mode: e.Mode})
		}
		if !r.More || len(r.KVs) == 0 {
			return fs.NewListDirStream(list), 0
		}
		opts = []client.ListOption{client.StartAfter(r.KVs[len(r.KVs)-1].Key)}
	}
}

// Mkdir makes a directory.
func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	uid, gid := caller(ctx)
	return n.create(ctx, name, &Inode{Mode: syscall.S_IFDIR | mode&07777, UID: uid, GID: gid, Nlink: 2, Parent: n.ino}, out)
}

// Mknod makes a regular file, a named pipe, a socket or a device node.
func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	uid, gid := caller(ctx)
	return n.create(ctx, name, &Inode{Mode: mode, UID: uid, GID: gid, Nlink: 1, Rdev: dev}, out)
}

// Symlink makes a symbolic link to target.
func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	uid, gid := caller(ctx)
	return n.create(ctx, name, &Inode{Mode: syscall.S_IFLNK | 0o777, UID: uid, GID: gid, Nlink: 1, Size: uint64(len(target)), Target: target}, out)
}

// Readlink reads a symbolic link's target.
func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx = detach(ctx)
	in, _, errno := n.fsys.getInode(ctx, n.ino)
	if errno != 0 {
		return nil, errno
	}
	if in.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		return nil, syscall.EINVAL
	}
	return []byte(in.Target), 0
}

// create adds name to the directory as a new inode rec, in one
// transaction with the inode and the directory's times (and link count,
// for a subdirectory); EEXIST if the name is taken.
func (n *node) create(ctx context.Context, name string, rec *Inode, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	f := n.fsys
	ino := newIno()
	t := now()
	rec.Atime, rec.Mtime, rec.Ctime = t, t, t
	entryKey := f.k.entry(n.ino, name)
	entry := EncodeEntry(Entry{Ino: ino, Mode: rec.Mode & syscall.S_IFMT})
	for attempt := 0; ; attempt++ {
		dir, dirVer, errno := f.getInode(ctx, n.ino)
		if errno != 0 {
			return nil, errno
		}
		if !dir.IsDir() {
			return nil, syscall.ENOTDIR
		}
		dir.Mtime, dir.Ctime = t, t
		if rec.IsDir() {
			dir.Nlink++
		}
		r, err := f.txn(ctx, f.c.Txn(ctx).
			If(client.Absent(entryKey), client.VersionIs(f.k.inode(n.ino), dirVer), client.Absent(f.k.inode(ino))).
			Then(client.PutOp(f.k.inode(ino), EncodeInode(rec)), client.PutOp(entryKey, entry), client.PutOp(f.k.inode(n.ino), EncodeInode(dir))))
		if err != nil {
			return nil, f.errno("creating "+name, err)
		}
		if !r.Succeeded {
			retry, errno := n.refused(ctx, name, ino, attempt)
			if errno != 0 {
				return nil, errno
			}
			if retry {
				continue
			}
		}
		f.entryOut(ino, rec, 0, out) // the write dropped this mount's lease on the record
		return n.child(ctx, ino, rec.Mode), 0
	}
}

// refused says what a create or a link of name to ino does after its
// transaction's compares failed: if name already names ino, an earlier try
// committed (a retry after a lost reply) and it is done; another inode
// there is EEXIST; no entry means the directory changed meanwhile, and it
// tries again (retry) after a backoff, at most maxAttempts times.
func (n *node) refused(ctx context.Context, name string, ino uint64, attempt int) (retry bool, errno syscall.Errno) {
	e, _, errno := n.fsys.getEntry(ctx, n.ino, name)
	switch {
	case errno == 0 && e.Ino == ino:
		return false, 0
	case errno == 0:
		return false, syscall.EEXIST
	case errno != syscall.ENOENT:
		return false, errno
	case attempt >= maxAttempts:
		return false, syscall.EAGAIN
	}
	return true, backoff(ctx, attempt)
}

// txn commits t, trying again while leased is unavailable.
func (f *FS) txn(ctx context.Context, t *client.Txn) (client.TxnResult, error) {
	var r client.TxnResult
	err := f.retry(ctx, func() (err error) {
		r, err = t.Commit()
		return err
	})
	return r, err
}

// Link adds name as another link to target.
func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ctx = detach(ctx)
	f := n.fsys
	ino := target.EmbeddedInode().StableAttr().Ino
	entryKey := f.k.entry(n.ino, name)
	for attempt := 0; ; attempt++ {
		rec, ver, errno := f.getInode(ctx, ino)
		if errno != 0 {
			return nil, errno
		}
		if rec.IsDir() {
			return nil, syscall.EPERM
		}
		dir, dirVer, errno := f.getInode(ctx, n.ino)
		if errno != 0 {
			return nil, errno
		}
		t := now()
		rec.Nlink++
		rec.Ctime = t
		dir.Mtime, dir.Ctime = t, t
		r, err := f.txn(ctx, f.c.Txn(ctx).
			If(client.Absent(entryKey), client.VersionIs(f.k.inode(ino), ver), client.VersionIs(f.k.inode(n.ino), dirVer)).
			Then(client.PutOp(entryKey, EncodeEntry(Entry{Ino: ino, Mode: rec.Mode & syscall.S_IFMT})),
				client.PutOp(f.k.inode(ino), EncodeInode(rec)), client.PutOp(f.k.inode(n.ino), EncodeInode(dir))))
		if err != nil {
			return nil, f.errno("linking "+name, err)
		}
		if !r.Succeeded {
			retry, errno := n.refused(ctx, name, ino, attempt)
			if errno != 0 {
				return nil, errno
			}
			if retry {
				continue
			}
		}
		f.entryOut(ino, rec, 0, out) // the write dropped this mount's lease on the record
		return n.child(ctx, ino, rec.Mode), 0
	}
}

// Unlink removes name, and its inode with its last link.
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ctx = detach(ctx)
	return n.remove(ctx, name, false)
}

// Rmdir removes the empty directory name.
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	ctx = detach(ctx)
	return n.remove(ctx, name, true)
}

// remove takes name out of the directory in one transaction with the
// child's inode (its link count, or its record with the last link) and the
// directory's times.
func (n *node) remove(ctx context.Context, name string, dir bool) syscall.Errno {
	f := n.fsys
	entryKey := f.k.entry(n.ino, name)
	for attempt := 0; ; attempt++ {
		e, entryVer, errno := f.getEntry(ctx, n.ino, name)
		if errno != 0 {
			return errno
		}
		rec, ver, errno := f.getInode(ctx, e.Ino)
		if again(ctx, errno, attempt) {
			continue
		}
		if errno != 0 {
			return errno
		}
		switch {
		case dir && !rec.IsDir():
			return syscall.ENOTDIR
		case !dir && rec.IsDir():
			return syscall.EISDIR
		}
		if dir {
			if errno := f.checkEmpty(ctx, e.Ino); errno != 0 {
				return errno
			}
		}
		parent, parentVer, errno := f.getInode(ctx, n.ino)
		if errno != 0 {
			return errno
		}
		t := now()
		parent.Mtime, parent.Ctime = t, t
		childOp := client.DeleteOp(f.k.inode(e.Ino))
		last := !dir && rec.Nlink <= 1 // the file's data goes with it
		if dir {
			parent.Nlink--
		} else if rec.Nlink > 1 {
			rec.Nlink--
			rec.Ctime = t
			childOp = client.PutOp(f.k.inode(e.Ino), EncodeInode(rec))
		}
		r, err := f.txn(ctx, f.c.Txn(ctx).
			If(client.VersionIs(entryKey, entryVer), client.VersionIs(f.k.inode(e.Ino), ver), client.VersionIs(f.k.inode(n.ino), parentVer)).
			Then(client.DeleteOp(entryKey), childOp, client.PutOp(f.k.inode(n.ino), EncodeInode(parent))))
		if err != nil {
			return f.errno("removing "+name, err)
		}
		if r.Succeeded {
			if last {
				f.dropData(e.Ino, rec.Obj)
			}
			return 0
		}
		if attempt >= maxAttempts {
			return syscall.EAGAIN
		}
		if errno := backoff(ctx, attempt); errno != 0 {
			return errno
		}
	}
}

// checkEmpty returns ENOTEMPTY unless directory ino has no entries. The
// caller read the directory's inode before: a later entry changes it.
func (f *FS) checkEmpty(ctx context.Context, ino uint64) syscall.Errno {
	var r client.ListResult
	err := f.retry(ctx, func() (err error) {
		r, err = f.c.List(ctx, f.k.dir(ino), client.Limit(1), client.KeysOnly())
		return err
	})
	if err != nil {
		return f.errno("listing a directory", err)
	}
	if len(r.KVs) > 0 {
		return syscall.ENOTEMPTY
	}
	return 0
}

// Rename moves name to newName in newParent, replacing what newName names
// (an empty directory by a directory, a non-directory by a
// non-directory), in one transaction: both directories change, or neither.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	ctx = detach(ctx)
	f := n.fsys
	if flags&^uint32(renameNoReplace) != 0 {
		return syscall.EINVAL // RENAME_EXCHANGE and RENAME_WHITEOUT are not supported
	}
	p1, p2 := n.ino, newParent.EmbeddedInode().StableAttr().Ino
	srcKey, dstKey := f.k.entry(p1, name), f.k.entry(p2, newName)
	for attempt := 0; ; attempt++ {
		se, seVer, errno := f.getEntry(ctx, p1, name)
		if errno != 0 {
			return errno
		}
		de, deVer, errno := f.getEntry(ctx, p2, newName)
		exists := errno == 0
		switch {
		case errno != 0 && errno != syscall.ENOENT:
			return errno
		case exists && de.Ino == se.Ino:
			return 0 // two links of one inode: nothing to do
		case exists && flags&renameNoReplace != 0:
			return syscall.EEXIST
		}
		src, srcVer, errno := f.getInode(ctx, se.Ino)
		if again(ctx, errno, attempt) {
			continue
		}
		if errno != 0 {
			return errno
		}
		t := now()
		ifs := []client.Compare{client.VersionIs(srcKey, seVer), client.VersionIs(f.k.inode(se.Ino), srcVer)}
		ops := []client.TxnOp{client.DeleteOp(srcKey), client.PutOp(dstKey, EncodeEntry(se))}
		var dropped *Inode // the inode whose last link the rename replaces
		if exists {
			dst, dstVer, errno := f.getInode(ctx, de.Ino)
			if again(ctx, errno, attempt) {
				continue
			}
			if errno != 0 {
				return errno
			}
			switch {
			case src.IsDir() && !dst.IsDir():
				return syscall.ENOTDIR
			case !src.IsDir() && dst.IsDir():
				return syscall.EISDIR
			case dst.IsDir():
				if errno := f.checkEmpty(ctx, de.Ino); errno != 0 {
					return errno
				}
			}
			ifs = append(ifs, client.VersionIs(dstKey, deVer), client.VersionIs(f.k.inode(de.Ino), dstVer))
			if dst.IsDir() || dst.Nlink <= 1 {
				ops = append(ops, client.DeleteOp(f.k.inode(de.Ino)))
				if !dst.IsDir() {
					dropped = dst
				}
			} else {
				dst.Nlink--
				dst.Ctime = t
				ops = append(ops, client.PutOp(f.k.inode(de.Ino), EncodeInode(dst)))
			}
		} else {
			ifs = append(ifs, client.Absent(dstKey))
		}
		dir1, dir1Ver, errno := f.getInode(ctx, p1)
		if errno != 0 {
			return errno
		}
		dir2, dir2Ver := dir1, dir1Ver
		if p2 != p1 {
			if dir2, dir2Ver, errno = f.getInode(ctx, p2); errno != 0 {
				return errno
			}
			if src.IsDir() {
				// Moving a directory under itself would cut a cycle off
				// the tree: walk up from the new parent, and compare every
				// directory on the way, whose parent a concurrent rename
				// could change.
				anc, errno := f.ancestors(ctx, p2, se.Ino)
				if errno != 0 {
					return errno
				}
				ifs = append(ifs, anc...)
				src.Parent = p2
				dir1.Nlink--
				dir2.Nlink++
			}
		}
		if exists && src.IsDir() {
			dir2.Nlink-- // the replaced directory's ".."
		}
		src.Ctime = t
		dir1.Mtime, dir1.Ctime, dir2.Mtime, dir2.Ctime = t, t, t, t
		ifs = append(ifs, client.VersionIs(f.k.inode(p1), dir1Ver))
		ops = append(ops, client.PutOp(f.k.inode(se.Ino), EncodeInode(src)), client.PutOp(f.k.inode(p1), EncodeInode(dir1)))
		if p2 != p1 {
			ifs = append(ifs, client.VersionIs(f.k.inode(p2), dir2Ver))
			ops = append(ops, client.PutOp(f.k.inode(p2), EncodeInode(dir2)))
		}
		r, err := f.txn(ctx, f.c.Txn(ctx).If(ifs...).Then(ops...))
		if err != nil {
			return f.errno("renaming "+name, err)
		}
		if r.Succeeded {
			if dropped != nil {
				f.dropData(de.Ino, dropped.Obj)
			}
			return 0
		}
		if attempt >= maxAttempts {
			return syscall.EAGAIN
		}
		if errno := backoff(ctx, attempt); errno != 0 {
			return errno
		}
	}
}

// ancestors returns compares of the versions of dir and of every directory
// above it up to the root, or EINVAL if moved is one of them.
func (f *FS) ancestors(ctx context.Context, dir, moved uint64) ([]client.Compare, syscall.Errno) {
	var ifs []client.Compare
	for depth := 0; ; depth++ {
		if dir == moved {
			return nil, syscall.EINVAL
		}
		if dir == RootIno {
			return ifs, 0
		}
		if depth > 1000 || len(ifs) >= maxCompares {
			return nil, syscall.ELOOP
		}
		rec, ver, errno := f.getInode(ctx, dir)
		if errno != 0 {
			return nil, errno
		}
		ifs = append(ifs, client.VersionIs(f.k.inode(dir), ver))
		dir = rec.Parent
	}
}

// maxCompares bounds the directories a rename of a directory compares: a
// transaction holds at most 128 compares, and the rename's own take 8.
const maxCompares = 120

// Statfs answers from the data folder's file system.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var st syscall.Statfs_t
	if err := syscall.Statfs(n.fsys.data, &st); err != nil {
		return fs.ToErrno(err)
	}
	out.FromStatfsT(&st)
	out.NameLen = 255
	return 0
}

// Fsync of a directory has nothing to do: every change of metadata has
// committed in leased before its call returned.
func (n *node) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	ctx = detach(ctx)
	if h, ok := fh.(*handle); ok {
		return h.Fsync(ctx, flags)
	}
	return 0
}

// isMismatch says that a compare-and-swap found another version.
func isMismatch(err error) bool { return errors.Is(err, client.ErrVersionMismatch) }

// Extended attributes (and so ACLs) are not kept: their calls fail with
// ENOTSUP, which cp -a, tar and rsync read as a file system without them,
// and a listing of them is empty.

// Getxattr fails with ENOTSUP.
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	return 0, syscall.ENOTSUP
}

// Setxattr fails with ENOTSUP.
func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return syscall.ENOTSUP
}

// Removexattr fails with ENOTSUP.
func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return syscall.ENOTSUP
}

// Listxattr lists none.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	return 0, 0
}

// renameNoReplace is RENAME_NOREPLACE, the flag of FUSE's rename (Linux's
// renameat2): fail with EEXIST rather than replace the target.
const renameNoReplace = 0x1
