//! Directory streams: opendir, readdir with stable cookies, releasedir. A stream does not
//! return entries added after it was opened or rewound (its end cookie is fixed then).

use crate::api::*;
use crate::error::{FsError, FsResult};
use crate::leases::Need;
use crate::perm;
use crate::state::Fs;
use crate::view::FIRST_COOKIE;
use std::sync::atomic::Ordering;

impl Fs {
    pub fn opendir(&self, cred: &Cred, ino: Ino, _flags: i32) -> FsResult<u64> {
        let _l = self.leased(&[Need::read(ino)])?;
        let limit = {
            let front = self.rlock();
            let n = front.dir(ino)?;
            if !perm::may(cred, &n.img, R_OK) {
                return Err(FsError::Access);
            }
            n.dir.as_ref().expect("dir").next_cookie()
        };
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.dir_streams.lock().insert(fh, limit);
        Ok(fh)
    }

    /// All entries after `offset` (a cookie), as they are now.
    pub fn readdir(&self, ino: Ino, offset: u64) -> FsResult<Vec<DirEntry>> {
        let _l = self.leased(&[Need::read(ino)])?;
        self.readdir_upto(ino, offset, u64::MAX)
    }

    /// readdir through the stream `fh` of [`Fs::opendir`]: entries added after the stream
    /// was opened (or rewound, `offset` 0) are not returned. Otherwise a program that
    /// renames each entry it reads (away and back, as generic/736 does) meets it again at
    /// the end of the directory, forever.
    pub fn readdir_stream(&self, ino: Ino, fh: u64, offset: u64) -> FsResult<Vec<DirEntry>> {
        let _l = self.leased(&[Need::read(ino)])?;
        // Lock order: `dir_streams` is never held while waiting for the view's lock, nor the
        // other way round. Holding both in opposite orders here and in opendir deadlocked
        // the mount as soon as a writer queued for the view between them (xfstests 631).
        let limit = if offset == 0 {
            let now = self.rlock().dir(ino)?.dir.as_ref().expect("dir").next_cookie();
            self.dir_streams.lock().insert(fh, now);
            now
        } else {
            self.dir_streams.lock().get(&fh).copied().unwrap_or(u64::MAX)
        };
        self.readdir_upto(ino, offset, limit)
    }

    pub(crate) fn readdir_upto(&self, ino: Ino, offset: u64, limit: u64) -> FsResult<Vec<DirEntry>> {
        let front = self.rlock();
        let n = front.dir(ino)?;
        let d = n.dir.as_ref().expect("dir");
        let mut out = Vec::new();
        if offset < 1 {
            out.push(DirEntry { ino, offset: 1, kind: FileKind::Dir, name: b".".to_vec() });
        }
        if offset < 2 {
            out.push(DirEntry {
                ino: n.img.parent.max(ROOT_INO),
                offset: 2,
                kind: FileKind::Dir,
                name: b"..".to_vec(),
            });
        }
        let from = offset.max(FIRST_COOKIE - 1) + 1;
        for (&c, name) in d.order.range(from..limit.max(from)) {
            let (child, dtype) = d.get(name).expect("indexed");
            // The entry's own type: in the offload mode the child may not be in this
            // client's view yet (another client created it; no lease on it was needed).
            let kind = FileKind::from_mode(linefs_pm::record::dtype::mode_bits(dtype))
                .or_else(|| front.view.node(child).and_then(|c| FileKind::from_mode(c.img.mode)))
                .unwrap_or(FileKind::File);
            out.push(DirEntry { ino: child, offset: c, kind, name: name.clone() });
        }
        Ok(out)
    }

    pub fn releasedir(&self, _ino: Ino, fh: u64) {
        self.dir_streams.lock().remove(&fh);
    }
}
