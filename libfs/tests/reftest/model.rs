//! The reference model: a naive in-memory POSIX tree that is obviously right, with
//! Linux's checks in Linux's order.

use super::*;

pub(crate) fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(31).wrapping_add(seed as u32 * 7 + 1) as u8).collect()
}

// ---------------------------------------------------------------------------------------
// The model.

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MKind {
    File(Vec<u8>),
    Dir(BTreeMap<String, usize>),
    Symlink(Vec<u8>),
    Fifo,
}

#[derive(Debug, Clone)]
pub(crate) struct MNode {
    pub(crate) kind: MKind,
    /// Permission bits, setuid/setgid/sticky included.
    pub(crate) perm: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
}

pub(crate) type Res = Result<(), i32>;

/// The unprivileged user some sequences switch to.
pub(crate) const USER: u32 = 1000;

pub(crate) fn cred(user: bool) -> Cred {
    if user {
        Cred { uid: USER, gid: USER, groups: Vec::new() }
    } else {
        Cred::root()
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Model {
    /// Arena of nodes; index 0 is the root. Nodes are never removed (unreachable ones are
    /// simply not seen), so held handles keep theirs.
    pub(crate) nodes: Vec<MNode>,
}

pub(crate) fn split(path: &str) -> (Vec<&str>, &str) {
    let mut comps: Vec<&str> = path.split('/').collect();
    let name = comps.pop().expect("non-empty path");
    (comps, name)
}

/// Linux drops setuid, and setgid with group execute, when someone other than root writes.
pub(crate) fn killpriv(u: &Cred, perm: u32) -> u32 {
    if u.uid == 0 {
        return perm;
    }
    let p = perm & !0o4000;
    if p & 0o010 != 0 {
        p & !0o2000
    } else {
        p
    }
}

impl Model {
    pub(crate) fn new() -> Model {
        // The root is world-writable and sticky, like /tmp, so that both users work in it.
        let root = MNode { kind: MKind::Dir(BTreeMap::new()), perm: 0o1777, uid: 0, gid: 0, xattrs: BTreeMap::new() };
        Model { nodes: vec![root] }
    }

    pub(crate) fn children(&self, id: usize) -> Option<&BTreeMap<String, usize>> {
        match &self.nodes[id].kind {
            MKind::Dir(c) => Some(c),
            _ => None,
        }
    }

    pub(crate) fn children_mut(&mut self, id: usize) -> &mut BTreeMap<String, usize> {
        match &mut self.nodes[id].kind {
            MKind::Dir(c) => c,
            _ => panic!("not a directory"),
        }
    }

    /// POSIX access check (as root: everything but execute of a file without x bits).
    pub(crate) fn may(&self, u: &Cred, id: usize, mask: u32) -> bool {
        let n = &self.nodes[id];
        if u.uid == 0 {
            return mask & X_OK == 0 || n.perm & 0o111 != 0 || self.is_dir(id);
        }
        let bits = if u.uid == n.uid {
            n.perm >> 6
        } else if u.in_group(n.gid) {
            n.perm >> 3
        } else {
            n.perm
        } & 7;
        bits & mask == mask
    }

    pub(crate) fn owner_or_root(&self, u: &Cred, id: usize) -> bool {
        u.uid == 0 || u.uid == self.nodes[id].uid
    }

    /// The sticky-directory rule for removing `victim` from `dir`.
    pub(crate) fn sticky_allows(&self, u: &Cred, dir: usize, victim: usize) -> bool {
        self.nodes[dir].perm & 0o1000 == 0 || self.owner_or_root(u, dir) || self.owner_or_root(u, victim)
    }

    /// Path resolution of everything but the last component, as Linux does it: each
    /// directory must be one and be searchable, each component must exist; the directory
    /// holding the last component must be searchable too.
    pub(crate) fn parent<'p>(&self, u: &Cred, path: &'p str) -> Result<(usize, &'p str), i32> {
        let (comps, name) = split(path);
        let mut cur = 0;
        for c in comps {
            if !self.may(u, cur, X_OK) {
                return Err(libc::EACCES);
            }
            cur = *self.children(cur).expect("dir").get(c).ok_or(libc::ENOENT)?;
            self.children(cur).ok_or(libc::ENOTDIR)?;
        }
        if !self.may(u, cur, X_OK) {
            return Err(libc::EACCES);
        }
        Ok((cur, name))
    }

    pub(crate) fn lookup(&self, dir: usize, name: &str) -> Option<usize> {
        self.children(dir).and_then(|c| c.get(name).copied())
    }

    pub(crate) fn resolve(&self, u: &Cred, path: &str) -> Result<usize, i32> {
        let (dir, name) = self.parent(u, path)?;
        self.lookup(dir, name).ok_or(libc::ENOENT)
    }

    pub(crate) fn is_dir(&self, id: usize) -> bool {
        matches!(self.nodes[id].kind, MKind::Dir(_))
    }

    /// Whether `anc` is `id` or one of its ancestors in the tree.
    pub(crate) fn is_ancestor(&self, anc: usize, id: usize) -> bool {
        if anc == id {
            return true;
        }
        match self.children(anc) {
            Some(c) => c.values().any(|&ch| self.is_dir(ch) && self.is_ancestor(ch, id)),
            None => false,
        }
    }

    pub(crate) fn add(&mut self, u: &Cred, path: &str, kind: MKind, perm: u32) -> Res {
        let (dir, name) = self.parent(u, path)?;
        if self.lookup(dir, name).is_some() {
            return Err(libc::EEXIST);
        }
        if !self.may(u, dir, W_OK | X_OK) {
            return Err(libc::EACCES);
        }
        // In a setgid directory, new nodes take its group, and new directories are setgid.
        let p = &self.nodes[dir];
        let setgid = p.perm & 0o2000 != 0;
        let gid = if setgid { p.gid } else { u.gid };
        let perm = if setgid && matches!(kind, MKind::Dir(_)) { perm | 0o2000 } else { perm };
        self.nodes.push(MNode { kind, perm, uid: u.uid, gid, xattrs: BTreeMap::new() });
        let id = self.nodes.len() - 1;
        self.children_mut(dir).insert(name.to_string(), id);
        Ok(())
    }

    /// The regular file at `path`, opened for writing (`open`: write permission) unless the
    /// call checks permission itself (`truncate`).
    pub(crate) fn file(&mut self, u: &Cred, path: &str, open: bool) -> Result<usize, i32> {
        let id = self.resolve(u, path)?;
        let opened = |m: &Model| if open && !m.may(u, id, W_OK) { Err(libc::EACCES) } else { Ok(()) };
        match &self.nodes[id].kind {
            MKind::Dir(_) => return Err(libc::EISDIR),
            MKind::File(_) => opened(self)?,
            _ => {
                opened(self)?;
                return Err(libc::EINVAL);
            }
        }
        if !open && !self.may(u, id, W_OK) {
            return Err(libc::EACCES);
        }
        let n = &mut self.nodes[id];
        n.perm = killpriv(u, n.perm);
        Ok(id)
    }

    pub(crate) fn data(&mut self, id: usize) -> &mut Vec<u8> {
        match &mut self.nodes[id].kind {
            MKind::File(d) => d,
            k => panic!("data of {k:?}"),
        }
    }

    pub(crate) fn write(d: &mut Vec<u8>, off: u64, bytes: &[u8]) {
        let end = off as usize + bytes.len();
        if d.len() < end {
            d.resize(end, 0);
        }
        d[off as usize..end].copy_from_slice(bytes);
    }

    pub(crate) fn fallocate(d: &mut Vec<u8>, off: u64, len: u64, mode: i32) {
        let (off, end) = (off as usize, (off + len) as usize);
        let keep = mode & FALLOC_FL_KEEP_SIZE != 0;
        if mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE) != 0 {
            let pend = end.min(d.len());
            if off < pend {
                d[off..pend].fill(0);
            }
        }
        if !keep && end > d.len() {
            d.resize(end, 0);
        }
    }

    pub(crate) fn remove(&mut self, u: &Cred, path: &str, dir: bool) -> Res {
        let (parent, name) = self.parent(u, path)?;
        let id = self.lookup(parent, name).ok_or(libc::ENOENT)?;
        if !self.may(u, parent, W_OK | X_OK) {
            return Err(libc::EACCES);
        }
        if !self.sticky_allows(u, parent, id) {
            return Err(libc::EPERM);
        }
        match (dir, self.is_dir(id)) {
            (false, true) => return Err(libc::EISDIR),
            (true, false) => return Err(libc::ENOTDIR),
            (true, true) if !self.children(id).expect("dir").is_empty() => return Err(libc::ENOTEMPTY),
            _ => {}
        }
        self.children_mut(parent).remove(name);
        Ok(())
    }

    /// rename(2) with the checks in the order Linux makes them (do_renameat2, vfs_rename).
    pub(crate) fn rename(&mut self, u: &Cred, from: &str, to: &str, flags: u32) -> Res {
        let (sp, sname) = self.parent(u, from)?;
        let (dp, dname) = self.parent(u, to)?;
        let src = self.lookup(sp, sname).ok_or(libc::ENOENT)?;
        let dst = self.lookup(dp, dname);
        let exchange = flags & RENAME_EXCHANGE != 0;
        if exchange && dst.is_none() {
            return Err(libc::ENOENT);
        }
        if flags & RENAME_NOREPLACE != 0 && dst.is_some() {
            return Err(libc::EEXIST);
        }
        // Neither name may move into its own subtree; a name whose target is an ancestor
        // of the source cannot be replaced.
        if self.is_dir(src) && self.is_ancestor(src, dp) {
            return Err(libc::EINVAL);
        }
        if let Some(d) = dst.filter(|&d| self.is_dir(d) && self.is_ancestor(d, sp)) {
            let _ = d;
            return Err(if exchange { libc::EINVAL } else { libc::ENOTEMPTY });
        }
        if dst == Some(src) {
            return Ok(());
        }
        if !self.may(u, sp, W_OK | X_OK) {
            return Err(libc::EACCES);
        }
        if !self.sticky_allows(u, sp, src) {
            return Err(libc::EPERM);
        }
        if !self.may(u, dp, W_OK | X_OK) {
            return Err(libc::EACCES);
        }
        if let Some(d) = dst {
            if !self.sticky_allows(u, dp, d) {
                return Err(libc::EPERM);
            }
            if !exchange {
                match (self.is_dir(src), self.is_dir(d)) {
                    (true, false) => return Err(libc::ENOTDIR),
                    (false, true) => return Err(libc::EISDIR),
                    _ => {}
                }
            }
        }
        // A directory moving to another parent has its ".." rewritten.
        if sp != dp {
            if self.is_dir(src) && !self.may(u, src, W_OK) {
                return Err(libc::EACCES);
            }
            if exchange && dst.is_some_and(|d| self.is_dir(d) && !self.may(u, d, W_OK)) {
                return Err(libc::EACCES);
            }
        }
        if let Some(d) = dst {
            if !exchange && self.is_dir(d) && !self.children(d).expect("dir").is_empty() {
                return Err(libc::ENOTEMPTY);
            }
        }
        self.children_mut(sp).remove(sname);
        if exchange {
            let d = dst.expect("exchange target");
            self.children_mut(sp).insert(sname.to_string(), d);
        }
        self.children_mut(dp).insert(dname.to_string(), src);
        Ok(())
    }

    pub(crate) fn link(&mut self, u: &Cred, from: &str, to: &str) -> Res {
        let src = self.resolve(u, from)?;
        let (dp, dname) = self.parent(u, to)?;
        if self.lookup(dp, dname).is_some() {
            return Err(libc::EEXIST);
        }
        if !self.may(u, dp, W_OK | X_OK) {
            return Err(libc::EACCES);
        }
        if self.is_dir(src) {
            return Err(libc::EPERM);
        }
        // protected_hardlinks: another user's file only if regular, neither set-uid nor
        // executable set-gid, and readable and writable by the caller.
        let n = &self.nodes[src];
        let safe = matches!(n.kind, MKind::File(_))
            && n.perm & libc::S_ISUID == 0
            && n.perm & (libc::S_ISGID | 0o010) != (libc::S_ISGID | 0o010)
            && self.may(u, src, R_OK | W_OK);
        if u.uid != 0 && u.uid != n.uid && !safe {
            return Err(libc::EPERM);
        }
        self.children_mut(dp).insert(dname.to_string(), src);
        Ok(())
    }

    /// Who may set or remove attribute `name` (Linux's xattr_permission).
    pub(crate) fn xattr_allowed(&self, u: &Cred, id: usize, name: &[u8]) -> Res {
        if name.starts_with(b"user.") {
            if !matches!(self.nodes[id].kind, MKind::File(_) | MKind::Dir(_)) {
                return Err(libc::EPERM);
            }
            if !self.may(u, id, W_OK) {
                return Err(libc::EACCES);
            }
            let n = &self.nodes[id];
            if self.is_dir(id) && n.perm & libc::S_ISVTX != 0 && u.uid != 0 && u.uid != n.uid {
                return Err(libc::EPERM);
            }
        } else if u.uid != 0 {
            return Err(libc::EPERM);
        }
        Ok(())
    }

    pub(crate) fn setxattr(&mut self, u: &Cred, path: &str, name: &[u8], value: Vec<u8>, flags: i32) -> Res {
        let id = self.resolve(u, path)?;
        self.xattr_allowed(u, id, name)?;
        let x = &mut self.nodes[id].xattrs;
        if flags & XATTR_CREATE != 0 && x.contains_key(name) {
            return Err(libc::EEXIST);
        }
        if flags & XATTR_REPLACE != 0 && !x.contains_key(name) {
            return Err(libc::ENODATA);
        }
        x.insert(name.to_vec(), value);
        Ok(())
    }

    pub(crate) fn removexattr(&mut self, u: &Cred, path: &str, name: &[u8]) -> Res {
        let id = self.resolve(u, path)?;
        self.xattr_allowed(u, id, name)?;
        self.nodes[id].xattrs.remove(name).map(|_| ()).ok_or(libc::ENODATA)
    }

    pub(crate) fn chmod(&mut self, u: &Cred, path: &str, mode: u32) -> Res {
        let id = self.resolve(u, path)?;
        if !self.owner_or_root(u, id) && !self.drops_only_privs(u, id, mode) {
            return Err(libc::EPERM);
        }
        let n = &mut self.nodes[id];
        n.perm = mode & 0o7777;
        // Only members of the file's group may keep setgid.
        if u.uid != 0 && !u.in_group(n.gid) {
            n.perm &= !0o2000;
        }
        Ok(())
    }

    /// libfs's one exception to "only the owner changes the mode": whoever may write a regular
    /// file may clear its setuid/setgid bits and nothing else. That is the change a FUSE kernel
    /// asks for in a writer's name after another user's write; a chmod(2) by a non-owner is
    /// refused by the kernel before it reaches libfs.
    pub(crate) fn drops_only_privs(&self, u: &Cred, id: usize, mode: u32) -> bool {
        let (old, new) = (self.nodes[id].perm, mode & 0o7777);
        let dropped = old & !new;
        matches!(self.nodes[id].kind, MKind::File(_))
            && new & !old == 0
            && dropped != 0
            && dropped & !0o6000 == 0
            && self.may(u, id, W_OK)
    }

    /// chown to `owner:owner`. Only root gives a file away; an owner may change its group to
    /// one of theirs. A non-directory loses setuid (and setgid with group execute).
    pub(crate) fn chown(&mut self, u: &Cred, path: &str, owner: u32) -> Res {
        let id = self.resolve(u, path)?;
        let n = &self.nodes[id];
        if u.uid != 0 && (owner != n.uid || u.uid != n.uid || (owner != n.gid && !u.in_group(owner))) {
            return Err(libc::EPERM);
        }
        let is_dir = self.is_dir(id);
        let n = &mut self.nodes[id];
        n.uid = owner;
        n.gid = owner;
        // As Linux's chown: setuid, and setgid with group exec, go from a non-directory
        // whoever makes the call and whether or not the owner changes.
        if !is_dir {
            n.perm &= !0o4000;
            if n.perm & 0o010 != 0 {
                n.perm &= !0o2000;
            }
        }
        Ok(())
    }

    /// Names of each node reachable from the root (the link count of a non-directory).
    pub(crate) fn name_counts(&self) -> HashMap<usize, u32> {
        let mut counts = HashMap::new();
        let mut stack = vec![0];
        while let Some(d) = stack.pop() {
            for &ch in self.children(d).expect("dir").values() {
                *counts.entry(ch).or_default() += 1;
                if self.is_dir(ch) {
                    stack.push(ch);
                }
            }
        }
        counts
    }

    pub(crate) fn nlink(&self, id: usize, counts: &HashMap<usize, u32>) -> u32 {
        match self.children(id) {
            Some(c) => {
                let alive = id == 0 || counts.contains_key(&id);
                if alive {
                    2 + c.values().filter(|&&ch| self.is_dir(ch)).count() as u32
                } else {
                    0
                }
            }
            None => counts.get(&id).copied().unwrap_or(0),
        }
    }

    pub(crate) fn entry(&self, id: usize, counts: &HashMap<usize, u32>) -> Entry {
        let n = &self.nodes[id];
        let (kind, size, data) = match &n.kind {
            MKind::File(d) => (FileKind::File, d.len() as u64, d.clone()),
            MKind::Dir(_) => (FileKind::Dir, 0, Vec::new()),
            MKind::Symlink(t) => (FileKind::Symlink, t.len() as u64, t.clone()),
            MKind::Fifo => (FileKind::Fifo, 0, Vec::new()),
        };
        Entry {
            kind,
            perm: n.perm,
            uid: n.uid,
            gid: n.gid,
            nlink: self.nlink(id, counts),
            size,
            data,
            xattrs: n.xattrs.clone(),
            same_as: None,
        }
    }

    pub(crate) fn snapshot(&self) -> Snapshot {
        let counts = self.name_counts();
        let mut out = Snapshot::new();
        let mut first: HashMap<usize, String> = HashMap::new();
        let mut stack = vec![(0usize, String::new())];
        while let Some((d, path)) = stack.pop() {
            for (name, &ch) in self.children(d).expect("dir") {
                let p = if path.is_empty() { name.clone() } else { format!("{path}/{name}") };
                let mut e = self.entry(ch, &counts);
                e.same_as = first.get(&ch).cloned();
                first.entry(ch).or_insert_with(|| p.clone());
                if self.is_dir(ch) {
                    stack.push((ch, p.clone()));
                }
                out.insert(p, e);
            }
        }
        out
    }
}
