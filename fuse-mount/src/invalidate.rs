//! Kernel cache invalidation for a mount in the offload mode: when libfs loses a lease on
//! an inode (another client of the node will change it), the kernel's cached attributes and
//! pages of that inode, and the names it caches in it if it is a directory, are dropped, so
//! that the next call on this mount reaches libfs — which takes the lease again and reads
//! the other client's changes.
//!
//! libfs tells us from its revoke thread, which must not wait on the kernel: the kernel may
//! hold a directory's lock while it waits for a call of ours that needs the other client to
//! finish first. So the notifications go to a thread of their own, in order. A notification
//! about an inode the kernel does not know (ENOENT) is normal and ignored.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::mpsc;
use std::sync::Arc;

use fuser::{INodeNo, Notifier};
use libfs::Fs;
use tracing::debug;

/// Starts the invalidation thread of `fs`'s mount and registers it with libfs. The thread
/// ends when libfs drops its sender (the client is gone).
pub fn start(fs: &Fs, notifier: Notifier) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<(u64, Vec<Vec<u8>>)>();
    std::thread::Builder::new().name("fuse-invalidate".into()).spawn(move || {
        while let Ok((ino, names)) = rx.recv() {
            invalidate(&notifier, ino, &names);
        }
    })?;
    let tx = std::sync::Mutex::new(tx);
    fs.on_lease_lost(Arc::new(move |ino, names| {
        if let Ok(tx) = tx.lock() {
            let _ = tx.send((ino, names));
        }
    }));
    Ok(())
}

fn invalidate(notifier: &Notifier, ino: u64, names: &[Vec<u8>]) {
    let quiet = |what: &str, r: std::io::Result<()>| {
        if let Err(e) = r {
            if e.raw_os_error() != Some(libc::ENOENT) {
                debug!(ino, what, error = %e, "kernel cache invalidation failed");
            }
        }
    };
    // Attributes and every cached page.
    quiet("inode", notifier.inval_inode(INodeNo(ino), 0, 0));
    for name in names {
        quiet("entry", notifier.inval_entry(INodeNo(ino), OsStr::from_bytes(name)));
    }
}
