//! Names: lookup and forget, creating nodes of every kind (mknod, mkdir, create, symlink),
//! hard links, unlink and rmdir, and the inode lifecycle behind them (new inodes, freeing
//! an inode once no name, kernel reference or open handle is left).

use crate::api::*;
use crate::error::{FsError, FsResult};
use crate::leases::Need;
use crate::perm;
use crate::state::{Front, Fs};
use crate::time::now;
use crate::view::Node;
use linefs_pm::public::dtype_of_mode;
use linefs_pm::record::{valid_name, EntryBuilder, InodeImage, Timespec};
use std::sync::atomic::Ordering;

/// Most links one inode may have.
const LINK_MAX: u32 = 65000;

pub(crate) fn check_name(name: &[u8]) -> FsResult<()> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    if !valid_name(name) {
        return Err(FsError::Invalid("bad file name"));
    }
    Ok(())
}

/// The lease a call needs on the inode `name` names in `parent`, if it names one now.
pub(crate) fn child_need(f: &Front, parent: Ino, name: &[u8], write: bool) -> Vec<Need> {
    f.node(parent)
        .ok()
        .and_then(|p| p.dir.as_ref()?.get(name))
        .map(|(ino, _)| vec![Need { ino, write }])
        .unwrap_or_default()
}

impl Fs {
    /// The write lease that freeing `ino` needs if it is an orphan (its last name gone) —
    /// release and forget may free it. None otherwise, or if nicfs cannot be asked (the
    /// free then fails and recovery frees it later). Host-only: always held.
    ///
    /// Whether it is an orphan is decided on a current view of it: if another client
    /// unlinked it, this client lost its lease on it and re-reads it here (a read lease
    /// first). So the last client holding an inode open frees it, in its own log after
    /// whatever else it logged about it (nicfs keeps such orphans until then).
    pub(crate) fn orphan_lease(&self, ino: Ino) -> Option<crate::leases::Pinned<'_>> {
        if !self.rlock().view.nodes.contains_key(&ino) {
            return None;
        }
        let orphan = {
            let _current = self.leased(&[Need::read(ino)]).ok()?;
            self.rlock().node(ino).is_ok_and(|n| n.img.nlink == 0)
        };
        orphan.then(|| self.leased(&[Need::write(ino)]).ok()).flatten()
    }
}

impl Front {
    pub(crate) fn new_inode(&mut self, cred: &Cred, parent: &InodeImage, mode: u32, rdev: u32) -> FsResult<InodeImage> {
        let ino = self.alloc_ino()?;
        // Allocation is only committed with the entry; give it back if the entry fails
        // (`give_back_ino`).
        let t = now();
        let mut mode = mode;
        let gid = if parent.mode & libc::S_ISGID != 0 {
            if mode & libc::S_IFMT == libc::S_IFDIR {
                mode |= libc::S_ISGID;
            }
            parent.gid
        } else {
            cred.gid
        };
        if mode & libc::S_IFMT != libc::S_IFDIR && mode & libc::S_ISGID != 0 && cred.uid != 0 && !cred.in_group(gid) {
            mode &= !libc::S_ISGID;
        }
        self.next_generation = self.next_generation.wrapping_add(1);
        Ok(InodeImage {
            ino,
            size: 0,
            parent: 0,
            mode,
            uid: cred.uid,
            gid,
            nlink: 1,
            rdev,
            generation: self.next_generation,
            flags: 0,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: t,
        })
    }

    /// Create a new inode named `name` in `parent`: the shared part of mknod, mkdir,
    /// create and symlink.
    pub(crate) fn create_node(
        &mut self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        mode: u32,
        rdev: u32,
        symlink: Option<&[u8]>,
    ) -> FsResult<Ino> {
        check_name(name)?;
        // As Linux orders the checks: search permission, existence, write permission.
        if self.child(cred, parent, name).is_ok() {
            return Err(FsError::Exists);
        }
        let p = self.writable_dir(cred, parent)?;
        let mut pimg = p.img;
        let mut img = self.new_inode(cred, &pimg, mode, rdev)?;
        let is_dir = mode & libc::S_IFMT == libc::S_IFDIR;
        if is_dir {
            img.nlink = 2;
            img.parent = parent;
            img.size = 2 * 32;
            pimg.nlink += 1;
        }
        let t = img.ctime;
        pimg.mtime = t;
        pimg.ctime = t;
        pimg.size += 32;
        let mut b = EntryBuilder::by(&cred.caller());
        let mut est = 1;
        if let Some(target) = symlink {
            img.size = target.len() as u64;
            b.inode(&img, true);
            b.write(img.ino, 0, target);
            est += 1;
        } else {
            b.inode(&img, true);
        }
        b.dirent(parent, name, img.ino, dtype_of_mode(mode));
        b.inode(&pimg, false);
        if let Err(e) = self.commit(&b, est) {
            self.give_back_ino(img.ino);
            return Err(e);
        }
        self.created_here(img.ino);
        Ok(img.ino)
    }

    /// A free inode number, from the node: the lowest free one in the view (host-only),
    /// or one of the ranges nicfs granted this client (offload: the node's numbers are
    /// nicfs's to hand out). Pinned for writing until the create is logged
    /// ([`Front::created_here`]) or fails ([`Front::give_back_ino`]).
    pub(crate) fn alloc_ino(&mut self) -> FsResult<u64> {
        self.link.take_inode(&mut self.view.inos)
    }

    /// An inode this client just created is held for writing (offload: the number came
    /// from nicfs's grant, which is a write lease on it, or was freed here under one); the
    /// pin [`Front::alloc_ino`] took goes now that the creation is logged.
    pub(crate) fn created_here(&self, ino: u64) {
        let leases = self.link.leases();
        leases.created(ino);
        leases.unpin(&[Need::write(ino)]);
    }

    /// Returns a number taken by [`Front::alloc_ino`] whose entry failed.
    pub(crate) fn give_back_ino(&mut self, ino: u64) {
        self.view.inos.clear(ino);
        self.link.give_back_inode(ino);
    }

    /// One more open of `ino`. The first is told to the node (offload: nicfs then keeps
    /// the inode if another client frees it while it is open here; sent while the caller's
    /// lease is pinned, so before this client can answer a revoke of it).
    pub(crate) fn opened(&mut self, ino: Ino) {
        let Some(n) = self.view.node_mut(ino) else { return };
        n.opens += 1;
        if n.opens == 1 {
            self.link.opened(ino);
        }
    }

    /// One open of `ino` fewer; the last is told to the node.
    pub(crate) fn closed(&mut self, ino: Ino) {
        let Some(n) = self.view.node_mut(ino) else { return };
        if n.opens == 0 {
            return;
        }
        n.opens -= 1;
        if n.opens == 0 {
            self.link.closed(ino);
        }
    }

    /// Log freeing an inode once nothing refers to it (no name, no kernel reference, no open).
    pub(crate) fn maybe_free(&mut self, ino: Ino) -> FsResult<()> {
        let Some(n) = self.view.node(ino) else { return Ok(()) };
        if ino == ROOT_INO || n.img.nlink > 0 || n.lookups > 0 || n.opens > 0 {
            return Ok(());
        }
        let mut b = EntryBuilder::new();
        b.free_inode(ino);
        self.commit(&b, 0)?;
        Ok(())
    }

    /// Remove `name` (resolving to `ino`) from `parent`, as unlink and rmdir do.
    pub(crate) fn remove_entry(
        &mut self,
        b: &mut EntryBuilder,
        parent: &mut InodeImage,
        name: &[u8],
        victim: &Node,
        t: Timespec,
    ) {
        b.dirent(parent.ino, name, 0, 0);
        let mut v = victim.img;
        if victim.is_dir() {
            v.nlink = 0;
            parent.nlink = parent.nlink.saturating_sub(1);
        } else {
            v.nlink = v.nlink.saturating_sub(1);
        }
        v.ctime = t;
        parent.mtime = t;
        parent.ctime = t;
        parent.size = parent.size.saturating_sub(32);
        if v.nlink == 0 && victim.lookups == 0 && victim.opens == 0 {
            b.free_inode(v.ino);
        } else {
            b.inode(&v, false);
        }
    }
}

impl Fs {
    pub fn lookup(&self, cred: &Cred, parent: Ino, name: &[u8]) -> FsResult<Attr> {
        if name.len() > NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        let _l = self.leased_with(&[Need::read(parent)], |f| match name {
            b"." => Vec::new(),
            b".." => f.node(parent).map(|p| vec![Need::read(p.img.parent.max(ROOT_INO))]).unwrap_or_default(),
            _ => child_need(f, parent, name, false),
        })?;
        let mut front = self.wlock();
        if name == b"." && !front.node(parent)?.is_dir() {
            // Only a file-handle lookup (the kernel's export support, open_by_handle_at)
            // asks for "." of a non-directory: it rebuilds an inode from its number. A file
            // with no name left is stale there, as on local file systems.
            if front.node(parent)?.img.nlink == 0 {
                return Err(FsError::NotFound);
            }
            let attr = front.attr_of(parent)?;
            if let Some(n) = front.view.node_mut(parent) {
                n.lookups += 1;
            }
            return Ok(attr);
        }
        let p = front.dir(parent)?;
        if !perm::may(cred, &p.img, X_OK) {
            return Err(FsError::Access);
        }
        let ino = match name {
            b"." => parent,
            b".." => p.img.parent.max(ROOT_INO),
            _ => p.dir.as_ref().expect("dir").get(name).ok_or(FsError::NotFound)?.0,
        };
        let attr = front.attr_of(ino)?;
        if let Some(n) = front.view.node_mut(ino) {
            n.lookups += 1;
        }
        Ok(attr)
    }

    pub fn forget(&self, ino: Ino, nlookup: u64) {
        let _l = self.orphan_lease(ino);
        let mut front = self.wlock();
        if let Some(n) = front.view.node_mut(ino) {
            n.lookups = n.lookups.saturating_sub(nlookup);
        }
        if let Err(e) = front.maybe_free(ino) {
            tracing::warn!(ino, error = %e, "could not free orphan inode now; it is freed at next mount");
        }
    }

    pub fn readlink(&self, ino: Ino) -> FsResult<Vec<u8>> {
        let _l = self.leased(&[Need::read(ino)])?;
        let front = self.rlock();
        let n = front.node(ino)?;
        if n.kind_bits() != libc::S_IFLNK {
            return Err(FsError::Invalid("not a symlink"));
        }
        front.read_data(ino, 0, n.img.size as u32)
    }

    pub fn mknod(&self, cred: &Cred, parent: Ino, name: &[u8], mode: u32, umask: u32, rdev: u32) -> FsResult<Attr> {
        let kind = mode & libc::S_IFMT;
        let kind = if kind == 0 { libc::S_IFREG } else { kind };
        match kind {
            libc::S_IFREG | libc::S_IFIFO | libc::S_IFSOCK => {}
            libc::S_IFCHR | libc::S_IFBLK => {
                if cred.uid != 0 {
                    return Err(FsError::Perm);
                }
            }
            libc::S_IFDIR => return self.mkdir(cred, parent, name, mode, umask),
            _ => return Err(FsError::Invalid("mknod of this file type")),
        }
        let _l = self.leased(&[Need::write(parent)])?;
        let mut front = self.wlock();
        let ino = front.create_node(cred, parent, name, kind | (mode & 0o7777 & !umask), rdev, None)?;
        self.finish_create(&mut front, ino)
    }

    pub(crate) fn finish_create(&self, front: &mut Front, ino: Ino) -> FsResult<Attr> {
        if let Some(n) = front.view.node_mut(ino) {
            n.lookups += 1;
        }
        let a = front.attr_of(ino)?;
        self.kick(front);
        Ok(a)
    }

    pub fn mkdir(&self, cred: &Cred, parent: Ino, name: &[u8], mode: u32, umask: u32) -> FsResult<Attr> {
        let _l = self.leased(&[Need::write(parent)])?;
        let mut front = self.wlock();
        let ino = front.create_node(cred, parent, name, libc::S_IFDIR | (mode & 0o7777 & !umask), 0, None)?;
        self.finish_create(&mut front, ino)
    }

    pub fn create(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        mode: u32,
        umask: u32,
        flags: i32,
    ) -> FsResult<(Attr, u64)> {
        let l = self.leased_with(&[Need::write(parent)], |f| child_need(f, parent, name, false))?;
        let mut front = self.wlock();
        let existing = match front.child(cred, parent, name) {
            Ok(ino) => Some(ino),
            Err(FsError::NotFound) => None,
            Err(e) => return Err(e),
        };
        let ino = match existing {
            Some(_) if flags & libc::O_EXCL != 0 => return Err(FsError::Exists),
            Some(ino) => {
                drop(front);
                // open takes its own leases; none may be pinned while it asks for them.
                drop(l);
                let fh = self.open(cred, ino, flags)?;
                let mut front = self.wlock();
                return Ok((self.finish_create(&mut front, ino)?, fh));
            }
            None => front.create_node(cred, parent, name, libc::S_IFREG | (mode & 0o7777 & !umask), 0, None)?,
        };
        front.opened(ino);
        let a = self.finish_create(&mut front, ino)?;
        Ok((a, self.next_fh.fetch_add(1, Ordering::Relaxed)))
    }

    pub fn symlink(&self, cred: &Cred, parent: Ino, name: &[u8], target: &[u8]) -> FsResult<Attr> {
        if target.len() > SYMLINK_MAX {
            return Err(FsError::NameTooLong);
        }
        if target.is_empty() {
            return Err(FsError::NotFound);
        }
        let _l = self.leased(&[Need::write(parent)])?;
        let mut front = self.wlock();
        let ino = front.create_node(cred, parent, name, libc::S_IFLNK | 0o777, 0, Some(target))?;
        self.finish_create(&mut front, ino)
    }

    pub fn link(&self, cred: &Cred, ino: Ino, newparent: Ino, newname: &[u8]) -> FsResult<Attr> {
        check_name(newname)?;
        let _l = self.leased(&[Need::write(ino), Need::write(newparent)])?;
        let mut front = self.wlock();
        front.node(ino)?;
        // As Linux: the new name is checked first (search permission, EEXIST), then write
        // permission, then the source (EPERM for a directory).
        if front.child(cred, newparent, newname).is_ok() {
            return Err(FsError::Exists);
        }
        let mut pimg = front.writable_dir(cred, newparent)?.img;
        let n = front.node(ino)?;
        if n.is_dir() {
            return Err(FsError::Perm);
        }
        if n.img.nlink == 0 {
            return Err(FsError::NotFound);
        }
        if n.img.nlink >= LINK_MAX {
            return Err(FsError::TooManyLinks);
        }
        // protected_hardlinks (nicfs refuses the others): another user's file only if it is
        // regular, neither set-uid nor executable set-gid, and the caller may read and
        // write it.
        let m = n.img.mode;
        let safe = m & libc::S_IFMT == libc::S_IFREG
            && m & libc::S_ISUID == 0
            && m & (libc::S_ISGID | libc::S_IXGRP) != (libc::S_ISGID | libc::S_IXGRP)
            && perm::may(cred, &n.img, R_OK | W_OK);
        if !perm::owner_or_root(cred, &n.img) && !safe {
            return Err(FsError::Perm);
        }
        let mut img = n.img;
        let t = now();
        img.nlink += 1;
        img.ctime = t;
        pimg.mtime = t;
        pimg.ctime = t;
        pimg.size += 32;
        let mut b = EntryBuilder::by(&cred.caller());
        b.dirent(newparent, newname, ino, dtype_of_mode(img.mode));
        b.inode(&img, false);
        b.inode(&pimg, false);
        front.commit(&b, 1)?;
        self.finish_create(&mut front, ino)
    }

    pub(crate) fn remove(&self, cred: &Cred, parent: Ino, name: &[u8], dir: bool) -> FsResult<()> {
        if name.len() > NAME_MAX {
            return Err(FsError::NameTooLong);
        }
        if dir && name == b"." {
            return Err(FsError::Invalid("rmdir ."));
        }
        if dir && name == b".." {
            return Err(FsError::NotEmpty);
        }
        let _l = self.leased_with(&[Need::write(parent)], |f| child_need(f, parent, name, true))?;
        let mut front = self.wlock();
        // As Linux: lookup (search permission, ENOENT), then write permission, sticky bit,
        // and the victim's type.
        let ino = front.child(cred, parent, name)?;
        let mut pimg = front.writable_dir(cred, parent)?.img;
        let victim = front.node(ino)?.clone();
        if !perm::sticky_allows(cred, &pimg, &victim.img) {
            return Err(FsError::Perm);
        }
        match (dir, victim.is_dir()) {
            (false, true) => return Err(FsError::IsDir),
            (true, false) => return Err(FsError::NotDir),
            (true, true) if victim.dir.as_ref().expect("dir").len() > 0 => return Err(FsError::NotEmpty),
            _ => {}
        }
        let mut b = EntryBuilder::by(&cred.caller());
        front.remove_entry(&mut b, &mut pimg, name, &victim, now());
        b.inode(&pimg, false);
        front.commit(&b, 0)?;
        self.kick(&front);
        Ok(())
    }

    pub fn unlink(&self, cred: &Cred, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.remove(cred, parent, name, false)
    }

    pub fn rmdir(&self, cred: &Cred, parent: Ino, name: &[u8]) -> FsResult<()> {
        self.remove(cred, parent, name, true)
    }
}
