//! Extended attributes: the namespace rules (user, trusted, security, system) and the
//! calls. An inode's attributes are logged whole in one XATTRS record (a blind post-image).

use crate::api::*;
use crate::error::{FsError, FsResult};
use crate::leases::Need;
use crate::perm;
use crate::state::{Front, Fs};
use crate::time::now;
use crate::view::Node;
use linefs_pm::public::{xattr_chain_blocks, XATTR_SPACE};
use linefs_pm::record::{xattrs_len, EntryBuilder, XATTR_VALUE_MAX};

/// The attribute holding a file's capabilities (setcap(8)).
const XATTR_CAPS: &[u8] = b"security.capability";

/// What an extended-attribute call does, for its permission check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum XattrOp {
    Read,
    Set,
    Remove,
}

impl Front {
    /// Drops the file's capabilities (`security.capability`), if it has any, in entry `b`:
    /// Linux does so on every write, truncate and fallocate, whoever the writer
    /// (`file_remove_privs`). A FUSE kernel without `FUSE_HANDLE_KILLPRIV_V2` removes them
    /// itself before it sends the call (a removexattr, after asking for them before every
    /// write); with it, as linefs mounts, that is the file system's job.
    pub(crate) fn drop_caps(&self, b: &mut EntryBuilder, ino: Ino) {
        let Some(n) = self.view.node(ino) else { return };
        if !n.xattrs.contains_key(XATTR_CAPS) {
            return;
        }
        let rest = n.xattrs.iter().filter(|(k, _)| k.as_slice() != XATTR_CAPS);
        b.xattrs(ino, rest.map(|(k, v)| (k.as_slice(), v.as_slice())));
    }
}

impl Fs {
    fn xattr_check(cred: &Cred, n: &Node, name: &[u8], op: XattrOp) -> FsResult<()> {
        let write = op != XattrOp::Read;
        if name.is_empty() {
            return Err(FsError::Invalid("empty attribute name"));
        }
        if name.len() > NAME_MAX {
            return Err(FsError::Range);
        }
        if name.starts_with(b"user.") {
            let k = n.kind_bits();
            if k != libc::S_IFREG && k != libc::S_IFDIR {
                return Err(if write { FsError::Perm } else { FsError::NoAttr });
            }
            let mask = if write { W_OK } else { R_OK };
            if !perm::may(cred, &n.img, mask) {
                return Err(FsError::Access);
            }
            // As Linux: a sticky directory's user attributes are its owner's.
            if write && k == libc::S_IFDIR && n.img.mode & libc::S_ISVTX != 0 && !perm::owner_or_root(cred, &n.img) {
                return Err(FsError::Perm);
            }
        } else if name.starts_with(b"trusted.") {
            if cred.uid != 0 {
                return Err(if write { FsError::Perm } else { FsError::NoAttr });
            }
        } else if name.starts_with(b"security.") {
            // Removing file capabilities is what every write does (Linux's file_remove_privs,
            // which the kernel performs as the writer, through a removexattr, before it sends
            // a write or fallocate to a FUSE file system): whoever may write the file may
            // remove them.
            let killpriv = op == XattrOp::Remove && name == XATTR_CAPS && perm::may(cred, &n.img, W_OK);
            if write && cred.uid != 0 && !perm::owner_or_root(cred, &n.img) && !killpriv {
                return Err(FsError::Perm);
            }
            // File capabilities are set by root only (Linux: CAP_SETFCAP); nicfs refuses
            // anyone else's.
            if op == XattrOp::Set && name == XATTR_CAPS && cred.uid != 0 {
                return Err(FsError::Perm);
            }
        } else {
            return Err(FsError::NotSupported("attribute namespace"));
        }
        Ok(())
    }

    pub fn setxattr(&self, cred: &Cred, ino: Ino, name: &[u8], value: &[u8], flags: i32) -> FsResult<()> {
        let _l = self.leased(&[Need::write(ino)])?;
        let mut front = self.wlock();
        let n = front.node(ino)?;
        Fs::xattr_check(cred, n, name, XattrOp::Set)?;
        if value.len() > XATTR_VALUE_MAX {
            return Err(FsError::AttrTooBig);
        }
        let exists = n.xattrs.contains_key(name);
        if flags & XATTR_CREATE != 0 && exists {
            return Err(FsError::Exists);
        }
        if flags & XATTR_REPLACE != 0 && !exists {
            return Err(FsError::NoAttr);
        }
        let mut attrs = n.xattrs.clone();
        attrs.insert(name.to_vec(), value.to_vec());
        let len = xattrs_len(attrs.iter().map(|(k, v)| (&k[..], &v[..])));
        if len > XATTR_SPACE {
            return Err(FsError::NoSpace("extended attributes exceed 254 KiB per inode"));
        }
        let mut img = n.img;
        img.ctime = now();
        let mut b = EntryBuilder::by(&cred.caller());
        b.xattrs(ino, attrs.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
        b.inode(&img, false);
        // Publication writes the whole chain; blocks it reuses are counted too (an upper bound,
        // like every reservation), so that a full file system refuses the call here rather
        // than leaving publication without space for an acknowledged entry.
        front.commit(&b, xattr_chain_blocks(len))?;
        Ok(())
    }

    pub fn getxattr(&self, cred: &Cred, ino: Ino, name: &[u8]) -> FsResult<Vec<u8>> {
        let _l = self.leased(&[Need::read(ino)])?;
        let front = self.rlock();
        let n = front.node(ino)?;
        Fs::xattr_check(cred, n, name, XattrOp::Read)?;
        n.xattrs.get(name).cloned().ok_or(FsError::NoAttr)
    }

    pub fn listxattr(&self, cred: &Cred, ino: Ino) -> FsResult<Vec<u8>> {
        let _l = self.leased(&[Need::read(ino)])?;
        let front = self.rlock();
        let n = front.node(ino)?;
        let mut out = Vec::new();
        for k in n.xattrs.keys() {
            if k.starts_with(b"trusted.") && cred.uid != 0 {
                continue;
            }
            out.extend_from_slice(k);
            out.push(0);
        }
        Ok(out)
    }

    pub fn removexattr(&self, cred: &Cred, ino: Ino, name: &[u8]) -> FsResult<()> {
        let _l = self.leased(&[Need::write(ino)])?;
        let mut front = self.wlock();
        let n = front.node(ino)?;
        Fs::xattr_check(cred, n, name, XattrOp::Remove)?;
        if !n.xattrs.contains_key(name) {
            return Err(FsError::NoAttr);
        }
        let mut attrs = n.xattrs.clone();
        attrs.remove(name);
        let mut img = n.img;
        img.ctime = now();
        let mut b = EntryBuilder::by(&cred.caller());
        b.xattrs(ino, attrs.iter().map(|(k, v)| (k.as_slice(), v.as_slice())));
        b.inode(&img, false);
        front.commit(&b, 0)?;
        Ok(())
    }
}
