//! The harness: applies an operation to libfs and to the model, snapshots both and
//! compares them after every step.

use super::*;
use crate::nicfs::Nicfs;

// ---------------------------------------------------------------------------------------
// What is compared.

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) kind: FileKind,
    pub(crate) perm: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) nlink: u32,
    /// Files and symlinks; directory sizes are not compared.
    pub(crate) size: u64,
    pub(crate) data: Vec<u8>,
    pub(crate) xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    /// The path seen first (in traversal order) that names the same inode, if any.
    pub(crate) same_as: Option<String>,
}

pub(crate) type Snapshot = BTreeMap<String, Entry>;

/// Walk the paths in a fixed order (sorted names, depth first) so that `same_as` agrees.
pub(crate) fn fs_snapshot(fs: &Fs) -> Result<Snapshot, String> {
    let mut out = Snapshot::new();
    let mut first: HashMap<Ino, String> = HashMap::new();
    let mut stack = vec![(ROOT_INO, ROOT_INO, String::new())];
    while let Some((dir, parent, path)) = stack.pop() {
        let mut ents = fs.readdir(dir, 0).map_err(|e| format!("readdir /{path}: {e}"))?;
        ents.sort_by(|a, b| a.name.cmp(&b.name));
        for e in ents {
            if e.name == b"." || e.name == b".." {
                let want = if e.name == b"." { dir } else { parent };
                if e.ino != want {
                    return Err(format!(
                        "/{path}/{}: inode {} instead of {want}",
                        String::from_utf8_lossy(&e.name),
                        e.ino
                    ));
                }
                continue;
            }
            let name = String::from_utf8_lossy(&e.name).into_owned();
            let p = if path.is_empty() { name } else { format!("{path}/{name}") };
            let a = fs.getattr(e.ino).map_err(|err| format!("getattr {p}: {err}"))?;
            if a.kind != e.kind {
                return Err(format!("{p}: readdir says {:?}, getattr {:?}", e.kind, a.kind));
            }
            let mut ent = fs_entry(fs, &a).map_err(|err| format!("{p}: {err}"))?;
            ent.same_as = first.get(&e.ino).cloned();
            first.entry(e.ino).or_insert_with(|| p.clone());
            if a.kind == FileKind::Dir {
                stack.push((e.ino, dir, p.clone()));
            }
            out.insert(p, ent);
        }
    }
    Ok(out)
}

pub(crate) fn fs_entry(fs: &Fs, a: &Attr) -> FsResult<Entry> {
    let root = Cred::root();
    let data = match a.kind {
        FileKind::File => fs.read(a.ino, 0, a.size as u32 + 4096)?,
        FileKind::Symlink => fs.readlink(a.ino)?,
        _ => Vec::new(),
    };
    let mut xattrs = BTreeMap::new();
    for n in fs.listxattr(&root, a.ino)?.split(|&c| c == 0).filter(|n| !n.is_empty()) {
        xattrs.insert(n.to_vec(), fs.getxattr(&root, a.ino, n)?);
    }
    let size = if a.kind == FileKind::Dir { 0 } else { a.size };
    Ok(Entry { kind: a.kind, perm: a.perm, uid: a.uid, gid: a.gid, nlink: a.nlink, size, data, xattrs, same_as: None })
}

// ---------------------------------------------------------------------------------------
// Driving libfs.

pub(crate) struct Held {
    /// The client that opened it.
    pub(crate) client: usize,
    pub(crate) model: usize,
    pub(crate) ino: Ino,
    pub(crate) fh: u64,
}

/// Where the file system under test lives.
pub(crate) enum Backend {
    /// Host-only: a traced region in memory, mounted directly.
    Region(Arc<PmRegion>),
    /// Offload: a node directory served by a real nicfs process; libfs attaches to it.
    Nicfs(Nicfs),
    /// Offload against an in-process fake node (`libfs::testing`): libfs's side of the
    /// offload mode (leases, inode numbers and space from the node, publication by the
    /// node, a remount re-attaching), with no nicfs process.
    Fake(libfs::testing::FakeNode),
}

impl Backend {
    pub(crate) fn mount(&self) -> Fs {
        match self {
            Backend::Region(region) => mount(region),
            // The harness states each caller's credentials, as a mount daemon does.
            Backend::Nicfs(n) => {
                n.attach(FsOptions { mount_daemon: true, background_publish: false, ..Default::default() })
            }
            Backend::Fake(node) => {
                node.attach(FsOptions { background_publish: false, ..Default::default() })
                    .expect("attach to the fake node")
                    .0
            }
        }
    }
}

pub(crate) struct Harness {
    pub(crate) backend: Backend,
    /// The clients of the node (one, or several attached to one nicfs), all mounted between
    /// remounts.
    pub(crate) fs: Vec<Fs>,
    /// The client the next calls go through (`Op::Client`).
    pub(crate) cur: usize,
    clients: usize,
    pub(crate) model: Model,
    pub(crate) held: Vec<Held>,
    /// Who makes the calls: root, or [`USER`] after `Su(true)`.
    pub(crate) cred: Cred,
}

pub(crate) fn errno(e: FsError) -> i32 {
    e.errno()
}

pub(crate) fn mount(region: &Arc<PmRegion>) -> Fs {
    Fs::mount_region(region.clone(), FsOptions { background_publish: false, ..Default::default() }).expect("mount")
}

impl Harness {
    pub(crate) fn new() -> Harness {
        let size = 64 << 20;
        let region = Arc::new(PmRegion::traced(size));
        let geo = Geometry::compute(&FormatParams::for_size(size)).expect("geometry");
        linefs_pm::mkfs::format_region(&region, &geo).expect("format");
        Harness::on(Backend::Region(region), 1)
    }

    /// The same, with the node served by a real nicfs (offload mode), through `clients`
    /// clients attached to it.
    pub(crate) fn offload(clients: usize) -> Harness {
        let params = FormatParams { size: 64 << 20, log_size: 8 << 20, log_slots: 4, inodes: 4096 };
        Harness::on(Backend::Nicfs(Nicfs::start_with(&params)), clients)
    }

    /// The same, with one client of an in-process fake node (offload mode, no nicfs).
    pub(crate) fn fake() -> Harness {
        let params = FormatParams { size: 64 << 20, log_size: 8 << 20, log_slots: 4, inodes: 4096 };
        Harness::on(Backend::Fake(libfs::testing::FakeNode::format(&params).expect("format a fake node")), 1)
    }

    fn on(backend: Backend, clients: usize) -> Harness {
        let fs: Vec<Fs> = (0..clients).map(|_| backend.mount()).collect();
        let sticky = SetAttr { mode: Some(0o1777), ..Default::default() };
        fs[0].setattr(&Cred::root(), ROOT_INO, &sticky).expect("chmod /");
        Harness { backend, fs, cur: 0, clients, model: Model::new(), held: Vec::new(), cred: Cred::root() }
    }

    pub(crate) fn fs(&self) -> &Fs {
        &self.fs[self.cur]
    }

    /// Resolve the directory holding `path`'s last component, as the kernel would: one
    /// lookup per component, each balanced by a forget; the result must be a directory the
    /// caller may search.
    pub(crate) fn parent<'p>(&self, path: &'p str) -> Result<(Ino, &'p str), i32> {
        let (comps, name) = split(path);
        let mut cur = ROOT_INO;
        for c in comps {
            let a = self.fs().lookup(&self.cred, cur, c.as_bytes()).map_err(errno)?;
            self.fs().forget(a.ino, 1);
            cur = a.ino;
        }
        if self.fs().getattr(cur).map_err(errno)?.kind != FileKind::Dir {
            return Err(libc::ENOTDIR);
        }
        self.fs().access(&self.cred, cur, X_OK).map_err(errno)?;
        Ok((cur, name))
    }

    pub(crate) fn resolve(&self, path: &str) -> Result<Attr, i32> {
        let (dir, name) = self.parent(path)?;
        let a = self.fs().lookup(&self.cred, dir, name.as_bytes()).map_err(errno)?;
        // The caller uses the inode right away, as the kernel does between lookup and forget.
        self.fs().forget(a.ino, 1);
        Ok(a)
    }

    /// Open `path` for writing, run `f` on the inode, close: write and fallocate come
    /// through a handle, whose open checked permission.
    pub(crate) fn through_handle(&self, path: &str, f: impl FnOnce(Ino) -> Res) -> Res {
        let a = self.resolve(path)?;
        let fh = self.fs().open(&self.cred, a.ino, libc::O_WRONLY).map_err(errno)?;
        let res = f(a.ino);
        self.fs().release(a.ino, fh);
        res
    }

    /// Apply `op` to libfs; the result as an errno.
    pub(crate) fn fs_apply(&mut self, op: &Op) -> Res {
        let u = self.cred.clone();
        let fs = self.fs();
        match op {
            Op::Create(p) => {
                let (dir, name) = self.parent(PATHS[*p])?;
                let flags = libc::O_CREAT | libc::O_EXCL | libc::O_RDWR;
                let (a, fh) = fs.create(&u, dir, name.as_bytes(), 0o644, 0o022, flags).map_err(errno)?;
                fs.release(a.ino, fh);
                fs.forget(a.ino, 1);
                Ok(())
            }
            Op::Mkdir(p) => {
                let (dir, name) = self.parent(PATHS[*p])?;
                let a = fs.mkdir(&u, dir, name.as_bytes(), 0o777, 0o022).map_err(errno)?;
                fs.forget(a.ino, 1);
                Ok(())
            }
            Op::Mkfifo(p) => {
                let (dir, name) = self.parent(PATHS[*p])?;
                let a = fs.mknod(&u, dir, name.as_bytes(), libc::S_IFIFO | 0o640, 0, 0).map_err(errno)?;
                fs.forget(a.ino, 1);
                Ok(())
            }
            Op::Symlink(p, t) => {
                let (dir, name) = self.parent(PATHS[*p])?;
                let a = fs.symlink(&u, dir, name.as_bytes(), PATHS[*t].as_bytes()).map_err(errno)?;
                fs.forget(a.ino, 1);
                Ok(())
            }
            Op::Write { path, off, len, seed } => self.through_handle(PATHS[*path], |ino| {
                let n = fs.write(&u, ino, *off, &data(*len, *seed)).map_err(errno)?;
                assert_eq!(n as usize, *len, "short write");
                Ok(())
            }),
            Op::Truncate { path, size } => {
                let a = self.resolve(PATHS[*path])?;
                let set = SetAttr { size: Some(*size), ..Default::default() };
                fs.setattr(&u, a.ino, &set).map(|_| ()).map_err(errno)
            }
            Op::Fallocate { path, off, len, mode } => self.through_handle(PATHS[*path], |ino| {
                fs.fallocate(&u, ino, *off, *len, FALLOC_MODES[*mode]).map_err(errno)
            }),
            Op::Unlink(p) => {
                let (dir, name) = self.parent(PATHS[*p])?;
                fs.unlink(&u, dir, name.as_bytes()).map_err(errno)
            }
            Op::Rmdir(p) => {
                let (dir, name) = self.parent(PATHS[*p])?;
                fs.rmdir(&u, dir, name.as_bytes()).map_err(errno)
            }
            Op::Rename { from, to, flags } => {
                let (sdir, sname) = self.parent(PATHS[*from])?;
                let (ddir, dname) = self.parent(PATHS[*to])?;
                fs.rename(&u, sdir, sname.as_bytes(), ddir, dname.as_bytes(), RENAME_FLAGS[*flags]).map_err(errno)
            }
            Op::Link { from, to } => {
                let a = self.resolve(PATHS[*from])?;
                let (ddir, dname) = self.parent(PATHS[*to])?;
                let l = fs.link(&u, a.ino, ddir, dname.as_bytes()).map_err(errno)?;
                fs.forget(l.ino, 1);
                Ok(())
            }
            Op::SetXattr { path, name, len, flags } => {
                let a = self.resolve(PATHS[*path])?;
                let v = data(*len, *name as u8);
                fs.setxattr(&u, a.ino, XATTR_NAMES[*name], &v, XATTR_FLAGS[*flags]).map_err(errno)
            }
            Op::RemoveXattr { path, name } => {
                let a = self.resolve(PATHS[*path])?;
                fs.removexattr(&u, a.ino, XATTR_NAMES[*name]).map_err(errno)
            }
            Op::Chmod { path, mode } => {
                let a = self.resolve(PATHS[*path])?;
                let set = SetAttr { mode: Some(*mode), ..Default::default() };
                fs.setattr(&u, a.ino, &set).map(|_| ()).map_err(errno)
            }
            Op::Chown { path, user } => {
                let a = self.resolve(PATHS[*path])?;
                let owner = if *user { USER } else { 0 };
                let set = SetAttr { uid: Some(owner), gid: Some(owner), ..Default::default() };
                fs.setattr(&u, a.ino, &set).map(|_| ()).map_err(errno)
            }
            Op::Open(_)
            | Op::WriteHeld { .. }
            | Op::Close(_)
            | Op::Su(_)
            | Op::Publish
            | Op::Remount
            | Op::Client(_) => {
                unreachable!("handled by step")
            }
        }
    }

    pub(crate) fn model_apply(&mut self, op: &Op) -> Res {
        let u = &self.cred;
        let m = &mut self.model;
        match op {
            Op::Create(p) => m.add(u, PATHS[*p], MKind::File(Vec::new()), 0o644),
            Op::Mkdir(p) => m.add(u, PATHS[*p], MKind::Dir(BTreeMap::new()), 0o755),
            Op::Mkfifo(p) => m.add(u, PATHS[*p], MKind::Fifo, 0o640),
            Op::Symlink(p, t) => m.add(u, PATHS[*p], MKind::Symlink(PATHS[*t].as_bytes().to_vec()), 0o777),
            Op::Write { path, off, len, seed } => {
                let id = m.file(u, PATHS[*path], true)?;
                Model::write(m.data(id), *off, &data(*len, *seed));
                Ok(())
            }
            Op::Truncate { path, size } => {
                let id = m.file(u, PATHS[*path], false)?;
                m.data(id).resize(*size as usize, 0);
                Ok(())
            }
            Op::Fallocate { path, off, len, mode } => {
                let id = m.file(u, PATHS[*path], true)?;
                Model::fallocate(m.data(id), *off, *len, FALLOC_MODES[*mode]);
                Ok(())
            }
            Op::Unlink(p) => m.remove(u, PATHS[*p], false),
            Op::Rmdir(p) => m.remove(u, PATHS[*p], true),
            Op::Rename { from, to, flags } => m.rename(u, PATHS[*from], PATHS[*to], RENAME_FLAGS[*flags]),
            Op::Link { from, to } => m.link(u, PATHS[*from], PATHS[*to]),
            Op::SetXattr { path, name, len, flags } => {
                m.setxattr(u, PATHS[*path], XATTR_NAMES[*name], data(*len, *name as u8), XATTR_FLAGS[*flags])
            }
            Op::RemoveXattr { path, name } => m.removexattr(u, PATHS[*path], XATTR_NAMES[*name]),
            Op::Chmod { path, mode } => m.chmod(u, PATHS[*path], *mode),
            Op::Chown { path, user } => m.chown(u, PATHS[*path], if *user { USER } else { 0 }),
            Op::Open(_)
            | Op::WriteHeld { .. }
            | Op::Close(_)
            | Op::Su(_)
            | Op::Publish
            | Op::Remount
            | Op::Client(_) => {
                unreachable!("handled by step")
            }
        }
    }

    /// Apply one operation to both sides and compare.
    pub(crate) fn step(&mut self, i: usize, op: &Op) -> Result<(), String> {
        match op {
            Op::Open(p) => {
                let u = self.cred.clone();
                let (m, f) = (self.model.resolve(&u, PATHS[*p]), self.resolve(PATHS[*p]));
                match (m, f) {
                    (Ok(id), Ok(a)) if matches!(self.model.nodes[id].kind, MKind::File(_)) => {
                        if self.held.len() < MAX_HELD {
                            let want = if self.model.may(&u, id, R_OK | W_OK) { Ok(()) } else { Err(libc::EACCES) };
                            match (want, self.fs().open(&u, a.ino, libc::O_RDWR)) {
                                (Ok(()), Ok(fh)) => {
                                    self.held.push(Held { client: self.cur, model: id, ino: a.ino, fh })
                                }
                                (Err(w), Err(g)) if w == g.errno() => {}
                                (w, g) => return Err(format!("step {i} {op:?}: model {w:?}, libfs {g:?}")),
                            }
                        }
                    }
                    (Ok(_), Ok(_)) => {}
                    (Err(me), Err(fe)) if me == fe => {}
                    (m, f) => return Err(format!("step {i} {op:?}: model {m:?}, libfs {:?}", f.map(|a| a.ino))),
                }
            }
            Op::WriteHeld { h, off, len, seed } => {
                if let Some(held) = self.held.get(*h) {
                    let bytes = data(*len, *seed);
                    let n =
                        self.fs[held.client].write(&self.cred, held.ino, *off, &bytes).map_err(|e| e.to_string())?;
                    if n as usize != *len {
                        return Err(format!("step {i} {op:?}: short write {n}"));
                    }
                    let id = held.model;
                    let perm = killpriv(&self.cred, self.model.nodes[id].perm);
                    self.model.nodes[id].perm = perm;
                    Model::write(self.model.data(id), *off, &bytes);
                }
            }
            Op::Close(h) => {
                if *h < self.held.len() {
                    let held = self.held.remove(*h);
                    self.fs[held.client].release(held.ino, held.fh);
                }
            }
            Op::Su(user) => self.cred = cred(*user),
            Op::Client(c) => self.cur = c % self.fs.len(),
            Op::Publish => self.fs().sync_all().map_err(|e| format!("step {i}: publish: {e}"))?,
            Op::Remount => {
                // Held files close with the process; unlinked ones are freed.
                self.held.clear();
                self.fs.clear();
                self.fs = (0..self.clients).map(|_| self.backend.mount()).collect();
                self.cur = 0;
            }
            _ => {
                let want = self.model_apply(op);
                let got = self.fs_apply(op);
                if want != got {
                    return Err(format!("step {i} {op:?} as uid {}: model {want:?}, libfs {got:?}", self.cred.uid));
                }
            }
        }
        self.compare(i, op)
    }

    pub(crate) fn compare(&self, i: usize, op: &Op) -> Result<(), String> {
        let want = self.model.snapshot();
        for (k, fs) in self.fs.iter().enumerate() {
            self.compare_tree(i, op, k, fs, &want)?;
        }
        let counts = self.model.name_counts();
        for h in &self.held {
            let fs = &self.fs[h.client];
            let w = self.model.entry(h.model, &counts);
            let a = fs.getattr(h.ino).map_err(|e| format!("after step {i}: held inode {}: {e}", h.ino))?;
            let g = fs_entry(fs, &a).map_err(|e| format!("after step {i}: held inode {}: {e}", h.ino))?;
            if (w.nlink, w.size, &w.data, w.perm) != (g.nlink, g.size, &g.data, g.perm) {
                return Err(format!(
                    "after step {i} {op:?}: held inode {} (client {}): model {}, libfs {}",
                    h.ino,
                    h.client,
                    brief(&w),
                    brief(&g)
                ));
            }
        }
        Ok(())
    }

    /// Client `k`'s whole tree against the model's.
    fn compare_tree(&self, i: usize, op: &Op, k: usize, fs: &Fs, want: &Snapshot) -> Result<(), String> {
        let got = fs_snapshot(fs).map_err(|e| format!("after step {i} {op:?}: client {k}: {e}"))?;
        if *want != got {
            let mut diff = String::new();
            for (p, w) in want {
                match got.get(p) {
                    Some(g) if g == w => {}
                    Some(g) => diff.push_str(&format!("\n  {p}: model {}, libfs {}", brief(w), brief(g))),
                    None => diff.push_str(&format!("\n  {p}: missing in libfs")),
                }
            }
            for p in got.keys().filter(|p| !want.contains_key(*p)) {
                diff.push_str(&format!("\n  {p}: only in libfs"));
            }
            return Err(format!("after step {i} {op:?}, client {k}'s tree differs:{diff}"));
        }
        Ok(())
    }
}

pub(crate) fn brief(e: &Entry) -> String {
    let first_diff = |d: &[u8]| d.iter().take(16).map(|b| format!("{b:02x}")).collect::<String>();
    format!(
        "{:?} perm {:o} owner {}:{} nlink {} size {} data[..16] {} xattrs {} same_as {:?}",
        e.kind,
        e.perm,
        e.uid,
        e.gid,
        e.nlink,
        e.size,
        first_diff(&e.data),
        e.xattrs.len(),
        e.same_as
    )
}

pub(crate) fn run(ops: &[Op]) -> Result<(), String> {
    run_on(Harness::new(), ops)
}

pub(crate) fn run_on(mut h: Harness, ops: &[Op]) -> Result<(), String> {
    for (i, op) in ops.iter().enumerate() {
        h.step(i, op)?;
    }
    // Whatever the sequence left, it must survive an unmount and a mount.
    h.step(ops.len(), &Op::Remount)
}
