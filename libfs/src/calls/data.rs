//! File data: open and release, read (overlay of unpublished log data, then the public
//! area), write (split into entries a log can hold), fsync, fallocate in every mode, lseek
//! with SEEK_DATA/SEEK_HOLE.

use crate::api::*;
use crate::error::{FsError, FsResult};
use crate::leases::Need;
use crate::perm;
use crate::state::{Front, Fs};
use crate::time::now;
use crate::view::Src;
use linefs_pm::record::{EntryBuilder, InodeImage, MAX_FILE_SIZE};
use std::sync::atomic::Ordering;

impl Front {
    /// Writes `data` at `off`; returns the bytes written and whether the mode changed
    /// (setuid/setgid dropped, [`perm::killpriv`]). `stamp`: set mtime and ctime to now
    /// (not for a kernel's writeback, whose times arrive by their own setattr).
    pub(crate) fn write_data(
        &mut self,
        cred: &Cred,
        ino: Ino,
        off: u64,
        data: &[u8],
        stamp: bool,
    ) -> FsResult<(u32, bool)> {
        let n = self.node(ino)?;
        if n.is_dir() {
            return Err(FsError::IsDir);
        }
        if n.kind_bits() != libc::S_IFREG {
            return Err(FsError::Invalid("write to a special file"));
        }
        let end = off.checked_add(data.len() as u64).ok_or(FsError::TooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(FsError::TooBig);
        }
        if data.is_empty() {
            return Ok((0, false));
        }
        let max = (self.publication.log.max_payload() as usize).saturating_sub(1024).min(1 << 20);
        let mut done = 0usize;
        let mut mode_changed = false;
        while done < data.len() {
            let piece = &data[done..(done + max).min(data.len())];
            let pos = off + done as u64;
            let n = self.node(ino)?;
            let mut img = n.img;
            img.size = img.size.max(pos + piece.len() as u64);
            if stamp {
                let t = now();
                img.mtime = t;
                img.ctime = t;
            }
            img.mode = perm::killpriv(cred, &img);
            let dropped = img.mode != n.img.mode;
            let est = self.estimate_blocks(ino, pos, piece.len() as u64)?;
            let mut b = EntryBuilder::by(&cred.caller());
            self.drop_caps(&mut b, ino);
            b.write(ino, pos, piece);
            b.inode(&img, false);
            match self.commit(&b, est) {
                Ok(_) => {
                    done += piece.len();
                    mode_changed |= dropped;
                }
                // A short write is success for what was written.
                Err(e) if done > 0 => {
                    tracing::debug!(error = %e, "short write");
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok((done as u32, mode_changed))
    }

    pub(crate) fn read_data(&self, ino: Ino, off: u64, size: u32) -> FsResult<Vec<u8>> {
        let n = self.node(ino)?;
        if n.is_dir() {
            return Err(FsError::IsDir);
        }
        let fsize = n.img.size;
        if off >= fsize {
            return Ok(Vec::new());
        }
        let end = fsize.min(off + size as u64);
        let mut buf = vec![0u8; (end - off) as usize];
        let mut pos = off;
        for (a, b, src) in n.overlay.overlapping(off, end) {
            if a > pos {
                self.publication.public.read().reader().read_file(
                    ino,
                    pos,
                    &mut buf[(pos - off) as usize..(a - off) as usize],
                )?;
            }
            let dst = &mut buf[(a - off) as usize..(b - off) as usize];
            match src {
                Src::Log(at) => self.publication.log.region().read(at, dst)?,
                Src::Zero => dst.fill(0),
            }
            pos = b;
        }
        if pos < end {
            self.publication.public.read().reader().read_file(ino, pos, &mut buf[(pos - off) as usize..])?;
        }
        Ok(buf)
    }

    pub(crate) fn truncate_records(&self, b: &mut EntryBuilder, img: &mut InodeImage, size: u64) {
        if size < img.size {
            b.truncate(img.ino, size);
        }
        img.size = size;
    }
}

impl Fs {
    pub fn open(&self, cred: &Cred, ino: Ino, flags: i32) -> FsResult<u64> {
        self.open_noting_mode(cred, ino, flags).map(|(fh, _)| fh)
    }

    /// [`Fs::open`], also telling whether an `O_TRUNC` dropped setuid/setgid (see
    /// [`Fs::write_noting_mode`]).
    ///
    /// Offload: an open of a regular file for writing, by any caller, root included, logs an
    /// OPEN_WRITE record for the caller (with the truncation of an `O_TRUNC`, in one entry)
    /// before it returns — unless one was logged under the lease held ([`crate::leases`]).
    /// A read lease is enough (the write lease only for `O_TRUNC`), so a file opened for
    /// writing but only read moves no lease: while this client holds any lease on the file
    /// nobody else changes it, and nicfs, checking the record in log order, judges the open
    /// on the state libfs judged it on here. From then on nicfs lets this session write the
    /// file whatever its mode becomes: a descriptor opened for writing stays writable,
    /// whoever writes through it (a mount daemon's root opens for a user it then serves).
    pub fn open_noting_mode(&self, cred: &Cred, ino: Ino, flags: i32) -> FsResult<(u64, bool)> {
        let mut mode_changed = false;
        let mask = perm::open_mask(flags);
        let write = mask & W_OK != 0;
        let _l = self.leased(&[Need { ino, write: flags & libc::O_TRUNC != 0 }])?;
        let mut front = self.wlock();
        let n = front.node(ino)?;
        if n.is_dir() && write {
            return Err(FsError::IsDir);
        }
        if !perm::may(cred, &n.img, mask) {
            return Err(FsError::Access);
        }
        let regular = n.kind_bits() == libc::S_IFREG;
        let mut b = EntryBuilder::by(&cred.caller());
        let link = front.link.clone();
        // Offload: nicfs checks an open for writing once per lease (the sole client of a
        // host-only node logs none).
        let log_open = write && regular && !link.leases().open_logged(ino);
        if log_open {
            b.open_write(ino);
        }
        if flags & libc::O_TRUNC != 0 && regular && n.img.size > 0 {
            let mut img = n.img;
            front.truncate_records(&mut b, &mut img, 0);
            let t = now();
            img.mtime = t;
            img.ctime = t;
            img.mode = perm::killpriv(cred, &img);
            mode_changed = img.mode != n.img.mode;
            front.drop_caps(&mut b, ino);
            b.inode(&img, false);
        }
        if !b.is_empty() {
            front.commit(&b, 0)?;
        }
        if log_open {
            link.leases().note_open_logged(ino);
        }
        front.opened(ino);
        Ok((self.next_fh.fetch_add(1, Ordering::Relaxed), mode_changed))
    }

    pub fn release(&self, ino: Ino, _fh: u64) {
        let _l = self.orphan_lease(ino);
        let mut front = self.wlock();
        front.closed(ino);
        if let Err(e) = front.maybe_free(ino) {
            tracing::warn!(ino, error = %e, "could not free orphan inode now; it is freed at next mount");
        }
    }

    pub fn read(&self, ino: Ino, off: u64, size: u32) -> FsResult<Vec<u8>> {
        let _l = self.leased(&[Need::read(ino)])?;
        self.rlock().read_data(ino, off, size)
    }

    pub fn write(&self, cred: &Cred, ino: Ino, off: u64, data: &[u8]) -> FsResult<u32> {
        self.write_noting_mode(cred, ino, off, data).map(|(n, _)| n)
    }

    /// [`Fs::write`], also telling whether the write dropped setuid/setgid: a front end
    /// that caches attributes (the kernel, which leaves that to libfs) must forget the mode.
    pub fn write_noting_mode(&self, cred: &Cred, ino: Ino, off: u64, data: &[u8]) -> FsResult<(u32, bool)> {
        self.write_with(cred, ino, off, data, true)
    }

    /// [`Fs::write_noting_mode`] for a kernel's writeback cache pushing dirty pages: the
    /// modification and change times are left alone. The kernel keeps them and sends them
    /// with a setattr of their own — which may reach libfs before the last write it covers
    /// (a FUSE server answers requests on several threads), so a write stamping "now" would
    /// overwrite the kernel's time with a later one.
    pub fn writeback_noting_mode(&self, cred: &Cred, ino: Ino, off: u64, data: &[u8]) -> FsResult<(u32, bool)> {
        self.write_with(cred, ino, off, data, false)
    }

    fn write_with(&self, cred: &Cred, ino: Ino, off: u64, data: &[u8], stamp: bool) -> FsResult<(u32, bool)> {
        let _l = self.leased(&[Need::write(ino)])?;
        let mut front = self.wlock();
        let done = front.write_data(cred, ino, off, data, stamp)?;
        self.kick(&front);
        Ok(done)
    }

    /// Every update is durable in the log when its call returns, so fsync has nothing left
    /// to persist in the host-only mode or on a node on its own; it checks the inode
    /// exists. In a replicated cluster the node is asked
    /// ([`crate::link::NodeLink::fsync_asks_node`]): it publishes the log through
    /// everything appended so far and answers once every replica holds it durable — an
    /// fsync that returned survives the loss of this node (the whole log up to the call:
    /// the log is a prefix history).
    pub fn fsync(&self, ino: Ino, _datasync: bool) -> FsResult<()> {
        let (link, publication, tail) = {
            let front = self.rlock();
            front.node(ino)?;
            if !front.link.fsync_asks_node() {
                return Ok(());
            }
            (front.link.clone(), front.publication.clone(), front.tail)
        };
        link.publish(&publication, tail, u64::MAX).map(|_| ())
    }

    /// Publish everything that is in the log.
    pub fn sync_all(&self) -> FsResult<()> {
        self.wlock().publish_all()
    }

    /// fallocate through an open handle: the open checked write permission.
    pub fn fallocate(&self, cred: &Cred, ino: Ino, off: u64, len: u64, mode: i32) -> FsResult<()> {
        self.fallocate_noting_mode(cred, ino, off, len, mode).map(|_| ())
    }

    /// [`Fs::fallocate`], also telling whether it dropped setuid/setgid (see
    /// [`Fs::write_noting_mode`]).
    pub fn fallocate_noting_mode(&self, cred: &Cred, ino: Ino, off: u64, len: u64, mode: i32) -> FsResult<bool> {
        if len == 0 {
            return Err(FsError::Invalid("fallocate of zero bytes"));
        }
        let end = off.checked_add(len).ok_or(FsError::TooBig)?;
        if end > MAX_FILE_SIZE {
            return Err(FsError::TooBig);
        }
        let keep = mode & FALLOC_FL_KEEP_SIZE != 0;
        let punch = mode & FALLOC_FL_PUNCH_HOLE != 0;
        let zero = mode & FALLOC_FL_ZERO_RANGE != 0;
        if mode & !(FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 {
            return Err(FsError::NotSupported("fallocate mode"));
        }
        if punch && (!keep || zero) {
            return Err(FsError::NotSupported("PUNCH_HOLE needs KEEP_SIZE alone"));
        }
        let _l = self.leased(&[Need::write(ino)])?;
        let mut front = self.wlock();
        let n = front.node(ino)?;
        if n.is_dir() {
            return Err(FsError::IsDir);
        }
        if n.kind_bits() != libc::S_IFREG {
            return Err(FsError::Invalid("fallocate of a special file"));
        }
        let mut img = n.img;
        // Like a write, fallocate by someone other than root drops setuid/setgid (Linux's
        // file_modified).
        img.mode = perm::killpriv(cred, &img);
        let mode_changed = img.mode != n.img.mode;
        let t = now();
        let mut b = EntryBuilder::by(&cred.caller());
        front.drop_caps(&mut b, ino);
        let mut est = 0;
        if punch || zero {
            // Only what lies inside the file needs zeroing.
            let pend = end.min(img.size);
            if off < pend {
                b.punch(ino, off, pend - off);
            }
            img.mtime = t;
            img.ctime = t;
        }
        if !punch {
            est = front.estimate_blocks(ino, off, len)?;
            b.alloc(ino, off, len);
            if !keep && end > img.size {
                img.size = end;
                img.ctime = t;
                if zero {
                    img.mtime = t;
                }
            }
        }
        b.inode(&img, false);
        front.commit(&b, est)?;
        self.kick(&front);
        Ok(mode_changed)
    }

    /// SEEK_DATA / SEEK_HOLE: linefs reports the whole file as data (allowed by POSIX).
    pub fn lseek(&self, ino: Ino, off: u64, whence: i32) -> FsResult<u64> {
        let _l = self.leased(&[Need::read(ino)])?;
        let front = self.rlock();
        let size = front.node(ino)?.img.size;
        match whence {
            libc::SEEK_DATA if off < size => Ok(off),
            libc::SEEK_HOLE if off < size => Ok(size),
            libc::SEEK_DATA | libc::SEEK_HOLE => Err(FsError::NoData),
            _ => Err(FsError::Invalid("lseek whence")),
        }
    }
}
