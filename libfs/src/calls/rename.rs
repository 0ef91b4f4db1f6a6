//! rename(2) with its flags (RENAME_NOREPLACE, RENAME_EXCHANGE, RENAME_WHITEOUT): the
//! checks Linux makes, in Linux's order, and one log entry for the whole move.

use crate::api::*;
use crate::calls::namespace::{check_name, child_need};
use crate::error::{FsError, FsResult};
use crate::leases::Need;
use crate::perm;
use crate::state::Fs;
use crate::time::now;
use linefs_pm::public::dtype_of_mode;
use linefs_pm::record::EntryBuilder;

impl Fs {
    pub fn rename(
        &self,
        cred: &Cred,
        parent: Ino,
        name: &[u8],
        newparent: Ino,
        newname: &[u8],
        flags: u32,
    ) -> FsResult<()> {
        if flags & !(RENAME_NOREPLACE | RENAME_EXCHANGE | RENAME_WHITEOUT) != 0 {
            return Err(FsError::Invalid("unsupported rename flags"));
        }
        if flags & RENAME_NOREPLACE != 0 && flags & RENAME_EXCHANGE != 0 {
            return Err(FsError::Invalid("RENAME_NOREPLACE with RENAME_EXCHANGE"));
        }
        if flags & RENAME_WHITEOUT != 0 && flags & RENAME_EXCHANGE != 0 {
            return Err(FsError::Invalid("RENAME_WHITEOUT with RENAME_EXCHANGE"));
        }
        // The kernel has checked CAP_MKNOD; a whiteout is a device node all the same.
        if flags & RENAME_WHITEOUT != 0 && cred.uid != 0 {
            return Err(FsError::Perm);
        }
        check_name(name)?;
        check_name(newname)?;
        // Both directories and both names' inodes change; the subtree check reads the
        // directories above the target directory.
        let _l = self.leased_with(&[Need::write(parent), Need::write(newparent)], |f| {
            let mut need = child_need(f, parent, name, true);
            need.extend(child_need(f, newparent, newname, true));
            let mut up = newparent;
            for _ in 0..256 {
                match f.node(up) {
                    Ok(n) if n.img.parent != 0 && n.img.parent != up => {
                        up = n.img.parent;
                        need.push(Need::read(up));
                    }
                    _ => break,
                }
            }
            need
        })?;
        let mut front = self.wlock();
        // The checks run in the order Linux makes them (do_renameat2, vfs_rename), so that a
        // call with several faults reports the same errno: lookups (search permission,
        // ENOENT), the flags, the subtree traps, same inode, then write permission and the
        // sticky bit on each side, the types, write permission on a moved directory, and
        // last an occupied target directory.
        let src = front.child(cred, parent, name)?;
        let dst = match front.child(cred, newparent, newname) {
            Ok(ino) => Some(ino),
            Err(FsError::NotFound) => None,
            Err(e) => return Err(e),
        };
        let exchange = flags & RENAME_EXCHANGE != 0;
        if exchange && dst.is_none() {
            return Err(FsError::NotFound);
        }
        if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
            return Err(FsError::Exists);
        }
        let s = front.node(src)?.clone();
        let d = match dst {
            Some(d) => Some(front.node(d)?.clone()),
            None => None,
        };
        // A directory may not move into its own subtree.
        if s.is_dir() && parent != newparent && front.view.is_ancestor(src, newparent) {
            return Err(FsError::Invalid("directory moved into its own subtree"));
        }
        // The target is an ancestor of the source: Linux refuses to replace it (ENOTEMPTY:
        // it holds the source), and to exchange them (EINVAL).
        if let Some(d) = d.as_ref().filter(|d| d.is_dir() && parent != newparent) {
            if front.view.is_ancestor(d.img.ino, parent) {
                if exchange {
                    return Err(FsError::Invalid("directory moved into its own subtree"));
                }
                return Err(FsError::NotEmpty);
            }
        }
        if dst == Some(src) {
            // Two names of one inode: POSIX says do nothing.
            return Ok(());
        }
        let sp = front.writable_dir(cred, parent)?.img;
        if !perm::sticky_allows(cred, &sp, &s.img) {
            return Err(FsError::Perm);
        }
        let dp = front.writable_dir(cred, newparent)?.img;
        if let Some(d) = &d {
            if !perm::sticky_allows(cred, &dp, &d.img) {
                return Err(FsError::Perm);
            }
            if !exchange {
                match (s.is_dir(), d.is_dir()) {
                    (true, false) => return Err(FsError::NotDir),
                    (false, true) => return Err(FsError::IsDir),
                    _ => {}
                }
            }
        }
        // Moving a directory to another parent rewrites its "..": needs write access to it.
        if parent != newparent {
            if s.is_dir() && !perm::may(cred, &s.img, W_OK) {
                return Err(FsError::Access);
            }
            if exchange && d.as_ref().is_some_and(|d| d.is_dir() && !perm::may(cred, &d.img, W_OK)) {
                return Err(FsError::Access);
            }
        }
        if !exchange && d.as_ref().is_some_and(|d| d.is_dir() && d.dir.as_ref().expect("dir").len() > 0) {
            return Err(FsError::NotEmpty);
        }
        let t = now();
        let mut b = EntryBuilder::by(&cred.caller());
        let mut simg = s.img;
        simg.ctime = t;
        let same = parent == newparent;
        // Parent images: one when both names are in the same directory.
        let mut pimgs = vec![sp];
        if !same {
            pimgs.push(dp);
        }
        let (si, di) = (0, if same { 0 } else { 1 });
        for p in pimgs.iter_mut() {
            p.mtime = t;
            p.ctime = t;
        }
        let s_dir = s.is_dir();
        let mut whiteout = None;
        if exchange {
            let d = d.expect("exchange target");
            let mut dimg = d.img;
            dimg.ctime = t;
            b.dirent(parent, name, dimg.ino, dtype_of_mode(dimg.mode));
            b.dirent(newparent, newname, src, dtype_of_mode(simg.mode));
            if !same {
                if s_dir {
                    simg.parent = newparent;
                    pimgs[si].nlink -= 1;
                    pimgs[di].nlink += 1;
                }
                if d.is_dir() {
                    dimg.parent = parent;
                    pimgs[di].nlink -= 1;
                    pimgs[si].nlink += 1;
                }
            }
            b.inode(&simg, false);
            b.inode(&dimg, false);
        } else {
            if flags & RENAME_WHITEOUT != 0 {
                // The source's name now holds a whiteout, in the same entry as the move.
                let wimg = front.new_inode(cred, &pimgs[si], libc::S_IFCHR, 0)?;
                whiteout = Some(wimg.ino);
                b.inode(&wimg, true);
                b.dirent(parent, name, wimg.ino, dtype_of_mode(wimg.mode));
            } else {
                b.dirent(parent, name, 0, 0);
                pimgs[si].size = pimgs[si].size.saturating_sub(32);
            }
            match &d {
                Some(d) => {
                    // The replaced inode loses a name (a replaced directory is empty).
                    let mut vimg = d.img;
                    vimg.ctime = t;
                    if d.is_dir() {
                        vimg.nlink = 0;
                        pimgs[di].nlink -= 1;
                    } else {
                        vimg.nlink -= 1;
                    }
                    if vimg.nlink == 0 && d.lookups == 0 && d.opens == 0 {
                        b.free_inode(vimg.ino);
                    } else {
                        b.inode(&vimg, false);
                    }
                }
                None => pimgs[di].size += 32,
            }
            b.dirent(newparent, newname, src, dtype_of_mode(simg.mode));
            if s_dir && !same {
                simg.parent = newparent;
                pimgs[si].nlink -= 1;
                pimgs[di].nlink += 1;
            }
            b.inode(&simg, false);
        }
        for p in &pimgs {
            b.inode(p, false);
        }
        if let Err(e) = front.commit(&b, 1) {
            if let Some(ino) = whiteout {
                front.give_back_ino(ino);
            }
            return Err(e);
        }
        if let Some(ino) = whiteout {
            front.created_here(ino);
        }
        self.kick(&front);
        Ok(())
    }
}
