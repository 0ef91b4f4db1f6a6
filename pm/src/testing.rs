//! Entries that tests of pm and of its users (nicfs) build again and again: compiled for
//! pm's own tests and, with the `testing` feature, for the dev-builds of crates that enable
//! it. Nothing in a daemon uses them.

use crate::record::{dtype, EntryBuilder, InodeImage, ROOT_INO};

/// An entry creating regular file `name` (inode `ino`, mode 0644, root's) in the root
/// directory, holding `data`.
pub fn create_file(ino: u64, name: &[u8], data: &[u8]) -> EntryBuilder {
    create_file_in(ROOT_INO, ino, name, data)
}

/// An entry creating regular file `name` (inode `ino`, mode 0644, root's) in directory
/// `dir`, holding `data`.
pub fn create_file_in(dir: u64, ino: u64, name: &[u8], data: &[u8]) -> EntryBuilder {
    let mut b = EntryBuilder::new();
    let img = InodeImage {
        ino,
        size: data.len() as u64,
        parent: dir,
        mode: libc::S_IFREG | 0o644,
        nlink: 1,
        ..Default::default()
    };
    b.inode(&img, true);
    b.dirent(dir, name, ino, dtype::REG);
    b.write(ino, 0, data);
    b
}
