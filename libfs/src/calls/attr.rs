//! Attributes: getattr, setattr (mode, owner, size, times), access times as the mount's
//! atime policy says, access(2) and statfs.

use crate::api::*;
use crate::commit::data_capacity;
use crate::error::{FsError, FsResult};
use crate::leases::Need;
use crate::perm;
use crate::state::Fs;
use crate::time::{now, to_ts};
use linefs_pm::layout::BLOCK_SIZE;
use linefs_pm::record::{EntryBuilder, InodeImage, Timespec, MAX_FILE_SIZE};

/// `relatime` also updates an access time older than this, however it compares with
/// mtime and ctime (as Linux does).
const RELATIME_SECS: i64 = 24 * 3600;

/// Whether changing a regular file's mode from `old` to `new` only clears setuid and/or
/// setgid. After a write, truncate or fallocate by someone else, the kernel drops those bits
/// (of regular files only); a FUSE kernel that leaves privilege killing to it (no
/// FUSE_HANDLE_KILLPRIV) asks for exactly this change in the writer's name, so whoever may
/// write the file may make it; a chmod(2) by a non-owner never reaches here (the kernel
/// refuses it first under default_permissions).
fn drops_only_privs(old: u32, new: u32) -> bool {
    if old & libc::S_IFMT != libc::S_IFREG {
        return false;
    }
    let (old, new) = (old & 0o7777, new & 0o7777);
    let dropped = old & !new;
    new & !old == 0 && dropped != 0 && dropped & !(libc::S_ISUID | libc::S_ISGID) == 0
}

/// Whether an access at `t` updates the access time of `img` under `policy`.
fn atime_due(img: &InodeImage, policy: AtimePolicy, t: Timespec) -> bool {
    match policy {
        AtimePolicy::Never => false,
        AtimePolicy::Strict => img.atime != t,
        AtimePolicy::Relative => {
            img.atime <= img.mtime || img.atime <= img.ctime || img.atime.sec + RELATIME_SECS <= t.sec
        }
    }
}

impl Fs {
    /// Whether a read of `ino` now would update its access time under `policy` (what
    /// [`Fs::touch_atime`] would do). A front end that serves reads from a cache of its own
    /// (the kernel's page cache) must send such a read to libfs.
    pub fn atime_due(&self, ino: Ino, policy: AtimePolicy) -> FsResult<bool> {
        if policy == AtimePolicy::Never {
            return Ok(false);
        }
        let _l = self.leased(&[Need::read(ino)])?;
        Ok(atime_due(&self.rlock().node(ino)?.img, policy, now()))
    }

    pub fn getattr(&self, ino: Ino) -> FsResult<Attr> {
        let _l = self.leased(&[Need::read(ino)])?;
        self.rlock().attr_of(ino)
    }

    /// Records an access to `ino` (a read of its data or a listing of a directory) in its
    /// access time, as the mount's atime option says; changes nothing else (not ctime).
    /// Returns whether the access time changed. Under `Relative`, the common case (a file
    /// read again after its access time was set) only takes the read lock.
    pub fn touch_atime(&self, ino: Ino, policy: AtimePolicy) -> FsResult<bool> {
        let t = now();
        let due = |img: &InodeImage| atime_due(img, policy, t);
        {
            let _l = self.leased(&[Need::read(ino)])?;
            if !due(&self.rlock().node(ino)?.img) {
                return Ok(false);
            }
        }
        let _l = self.leased(&[Need::write(ino)])?;
        let mut front = self.wlock();
        let mut img = front.node(ino)?.img;
        // Checked again: another access may have updated it meanwhile.
        if !due(&img) {
            return Ok(false);
        }
        img.atime = t;
        let mut b = EntryBuilder::new();
        b.inode(&img, false);
        front.commit(&b, 0)?;
        self.kick(&front);
        Ok(true)
    }

    pub fn setattr(&self, cred: &Cred, ino: Ino, set: &SetAttr) -> FsResult<Attr> {
        let _l = self.leased(&[Need::write(ino)])?;
        let mut front = self.wlock();
        let n = front.node(ino)?;
        let mut img = n.img;
        let is_owner = perm::owner_or_root(cred, &img);
        let t = now();
        let mut b = EntryBuilder::by(&cred.caller());
        let mut est = 0;
        if let Some(mode) = set.mode {
            if !is_owner && !(drops_only_privs(img.mode, mode) && (set.via_handle || perm::may(cred, &img, W_OK))) {
                return Err(FsError::Perm);
            }
            let mut m = mode & 0o7777;
            if cred.uid != 0 && !cred.in_group(set.gid.unwrap_or(img.gid)) {
                m &= !libc::S_ISGID;
            }
            img.mode = (img.mode & libc::S_IFMT) | m;
        }
        if set.uid.is_some() || set.gid.is_some() {
            let new_uid = set.uid.unwrap_or(img.uid);
            let new_gid = set.gid.unwrap_or(img.gid);
            if cred.uid != 0 {
                if new_uid != img.uid || cred.uid != img.uid {
                    return Err(FsError::Perm);
                }
                if new_gid != img.gid && !cred.in_group(new_gid) {
                    return Err(FsError::Perm);
                }
            }
            img.uid = new_uid;
            img.gid = new_gid;
            // chown clears setuid/setgid on non-directories (setgid only with group exec),
            // whoever makes it and whether or not the owner changes, and their capabilities.
            // A kernel without FUSE_HANDLE_KILLPRIV_V2 sends the new mode with the chown.
            if set.mode.is_none() {
                img.mode = perm::chown_killpriv(img.mode);
            }
            if img.mode & libc::S_IFMT != libc::S_IFDIR {
                front.drop_caps(&mut b, ino);
            }
        }
        if let Some(size) = set.size {
            if n.is_dir() {
                return Err(FsError::IsDir);
            }
            if n.kind_bits() != libc::S_IFREG {
                return Err(FsError::Invalid("truncate of a special file"));
            }
            if !set.via_handle && !perm::may(cred, &img, W_OK) {
                return Err(FsError::Access);
            }
            if size > MAX_FILE_SIZE {
                return Err(FsError::TooBig);
            }
            front.truncate_records(&mut b, &mut img, size);
            img.mode = perm::killpriv(cred, &img);
            front.drop_caps(&mut b, ino);
            img.mtime = t;
            est = 1;
        }
        for (which, ts) in [(0, set.atime), (1, set.mtime)] {
            let Some(ts) = ts else { continue };
            let v = match ts {
                TimeSet::Now => {
                    if !is_owner && !perm::may(cred, &n.img, W_OK) {
                        return Err(FsError::Access);
                    }
                    t
                }
                TimeSet::At(at) => {
                    if !is_owner {
                        return Err(FsError::Perm);
                    }
                    to_ts(at)
                }
            };
            if which == 0 {
                img.atime = v;
            } else {
                img.mtime = v;
            }
        }
        img.ctime = set.ctime.map(to_ts).unwrap_or(t);
        b.inode(&img, false);
        front.commit(&b, est)?;
        let a = front.attr_of(ino)?;
        self.kick(&front);
        Ok(a)
    }

    pub fn access(&self, cred: &Cred, ino: Ino, mask: u32) -> FsResult<()> {
        let _l = self.leased(&[Need::read(ino)])?;
        let front = self.rlock();
        let n = front.node(ino)?;
        if mask != 0 && !perm::may(cred, &n.img, mask & 7) {
            return Err(FsError::Access);
        }
        Ok(())
    }

    pub fn statfs(&self) -> StatFs {
        let front = self.rlock();
        // What the node could still reserve, plus this client's unspent credit and its
        // unused inode numbers (host-only: the node's space is all the client's count).
        let link = &front.link;
        let (free, ffree) = match link.statfs(&front.view.inos) {
            Ok(s) => (s.free_blocks + front.space_available(), s.free_inodes + link.own_inodes()),
            Err(e) => {
                tracing::warn!(error = %e, "statfs: nicfs did not say; reporting this client's share");
                (front.space_available(), link.own_inodes())
            }
        };
        let bfree = data_capacity(free);
        StatFs {
            blocks: front.publication.geo.data_blocks,
            bfree,
            bavail: bfree,
            files: front.publication.geo.inode_count - 1,
            ffree,
            bsize: BLOCK_SIZE as u32,
            namelen: NAME_MAX as u32,
            frsize: BLOCK_SIZE as u32,
        }
    }
}
