//! What a recovered file system is compared by: the whole tree, read through libfs, plus a
//! consistency check of link counts and parent pointers.

use libfs::{Cred, FileKind, Fs, FsResult, Ino, ROOT_INO};
use std::collections::{BTreeMap, HashMap};

/// One name in the tree, with everything a crash could get wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: FileKind,
    pub perm: u32,
    pub nlink: u32,
    pub size: u64,
    /// File contents or symlink target.
    pub data: Vec<u8>,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

/// Path → entry, for every name reachable from the root.
pub type Snapshot = BTreeMap<String, Entry>;

/// The namespace and contents, after checking that link counts match the names and that
/// every `..` names the parent. Any read error is reported as an inconsistency.
pub fn snapshot(fs: &Fs) -> Result<Snapshot, String> {
    let root = Cred::root();
    let mut out = Snapshot::new();
    let mut names: HashMap<Ino, u32> = HashMap::new();
    let mut subdirs: HashMap<Ino, u32> = HashMap::new();
    let mut kinds: HashMap<Ino, (FileKind, u32)> = HashMap::new();
    let mut stack = vec![(ROOT_INO, ROOT_INO, String::new())];
    while let Some((dir, parent, path)) = stack.pop() {
        let ents = fs.readdir(dir, 0).map_err(|e| format!("readdir {path}/: {e}"))?;
        for e in ents {
            if e.name == b"." {
                continue;
            }
            if e.name == b".." {
                if e.ino != parent {
                    return Err(format!("{path}/.. is inode {} instead of {parent}", e.ino));
                }
                continue;
            }
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let a = fs.getattr(e.ino).map_err(|err| format!("getattr {p}: {err}"))?;
            *names.entry(e.ino).or_default() += 1;
            kinds.insert(e.ino, (a.kind, a.nlink));
            let data = match a.kind {
                FileKind::File => fs.read(e.ino, 0, a.size as u32 + 1).map_err(|err| format!("read {p}: {err}"))?,
                FileKind::Symlink => fs.readlink(e.ino).map_err(|err| format!("readlink {p}: {err}"))?,
                _ => Vec::new(),
            };
            if a.kind == FileKind::File && data.len() as u64 != a.size {
                return Err(format!("{p}: read {} bytes of {}", data.len(), a.size));
            }
            let mut xattrs = Vec::new();
            let list = fs.listxattr(&root, e.ino).map_err(|err| format!("listxattr {p}: {err}"))?;
            for n in list.split(|&c| c == 0).filter(|n| !n.is_empty()) {
                let v = fs.getxattr(&root, e.ino, n).map_err(|err| format!("getxattr {p}: {err}"))?;
                xattrs.push((n.to_vec(), v));
            }
            if a.kind == FileKind::Dir {
                *subdirs.entry(dir).or_default() += 1;
                stack.push((e.ino, dir, p.clone()));
            }
            out.insert(p, Entry { kind: a.kind, perm: a.perm, nlink: a.nlink, size: a.size, data, xattrs });
        }
    }
    // Link counts: one per name for files, 2 + subdirectories for directories.
    for (ino, (kind, nlink)) in kinds {
        let expect = if kind == FileKind::Dir { 2 + subdirs.get(&ino).copied().unwrap_or(0) } else { names[&ino] };
        if nlink != expect {
            return Err(format!("inode {ino}: nlink {nlink}, expected {expect}"));
        }
    }
    let root_nlink = fs.getattr(ROOT_INO).map_err(|e| e.to_string())?.nlink;
    if root_nlink != 2 + subdirs.get(&ROOT_INO).copied().unwrap_or(0) {
        return Err(format!("root nlink {root_nlink}"));
    }
    Ok(out)
}

/// Split "a/b/c" into ("a/b", "c").
pub fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// Resolve a path from the root with `lookup` (no symlink following).
pub fn lookup_path(fs: &Fs, path: &str) -> FsResult<libfs::Attr> {
    let mut ino = ROOT_INO;
    let mut attr = fs.getattr(ROOT_INO)?;
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        attr = fs.lookup(&Cred::root(), ino, comp.as_bytes())?;
        fs.forget(attr.ino, 1);
        ino = attr.ino;
    }
    Ok(attr)
}

/// A short, readable difference between two snapshots.
pub fn diff(want: &Snapshot, got: &Snapshot) -> String {
    let mut out = Vec::new();
    for (p, w) in want {
        match got.get(p) {
            None => out.push(format!("{p} missing")),
            Some(g) if g != w => out.push(format!(
                "{p}: expected {:?} perm {:o} nlink {} size {} ({} xattrs), got {:?} perm {:o} nlink {} size {} ({} xattrs){}",
                w.kind,
                w.perm,
                w.nlink,
                w.size,
                w.xattrs.len(),
                g.kind,
                g.perm,
                g.nlink,
                g.size,
                g.xattrs.len(),
                if g.data != w.data { ", contents differ" } else { "" }
            )),
            _ => {}
        }
    }
    for p in got.keys().filter(|p| !want.contains_key(*p)) {
        out.push(format!("{p} unexpected"));
    }
    out.join("; ")
}
