//! Crash consistency: every state a power failure could leave, recovered and checked.
//!
//! Each workload is a short sequence of operations (1–3, optionally with a publication step
//! in between) over a small fixed tree, run on a traced PM region. The tracer records a crash
//! point before every fence and after every operation; for each point, every subset of the
//! cache lines not yet durable (bounded) gives a crash image. Each image is mounted — which
//! runs the real recovery — and must:
//!
//! * mount without error;
//! * hold exactly the state after the last acknowledged operation, or after the one in
//!   flight (operations are atomic, and durable once acknowledged: libfs persists before it
//!   returns, so fsync adds nothing here);
//! * be consistent (link counts match names, `..` names the parent);
//! * stay usable: a new file written after recovery survives another remount.
//!
//! `LINEFS_CRASH_EXHAUSTIVE` (default 5) bounds the exhaustive subset enumeration per point;
//! `LINEFS_CRASH_SAMPLES` (default 6) the random subsets beyond it.

use libfs::*;
use linefs_pm::layout::{FormatParams, Geometry};
use linefs_pm::trace::CrashOpts;
use linefs_pm::PmRegion;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: FileKind,
    perm: u32,
    nlink: u32,
    size: u64,
    data: Vec<u8>,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

type Snapshot = BTreeMap<String, Entry>;

fn opts() -> FsOptions {
    FsOptions { background_publish: false, ..Default::default() }
}

/// The namespace and contents, plus a consistency check of link counts and parents.
fn snapshot(fs: &Fs) -> Result<Snapshot, String> {
    let root = Cred::root();
    let mut out = Snapshot::new();
    let mut names: HashMap<Ino, u32> = HashMap::new();
    let mut subdirs: HashMap<Ino, u32> = HashMap::new();
    let mut stack = vec![(ROOT_INO, ROOT_INO, String::new())];
    while let Some((dir, parent, path)) = stack.pop() {
        let ents = fs.readdir(dir, 0).map_err(|e| format!("readdir {path}: {e}"))?;
        for e in ents {
            if e.name == b"." {
                continue;
            }
            if e.name == b".." {
                if e.ino != parent {
                    return Err(format!("{path}/.. is {} not {parent}", e.ino));
                }
                continue;
            }
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let a = fs.getattr(e.ino).map_err(|err| format!("getattr {p}: {err}"))?;
            *names.entry(e.ino).or_default() += 1;
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
                xattrs.push((n.to_vec(), fs.getxattr(&root, e.ino, n).map_err(|err| format!("getxattr {p}: {err}"))?));
            }
            if a.kind == FileKind::Dir {
                *subdirs.entry(dir).or_default() += 1;
                stack.push((e.ino, dir, p.clone()));
            }
            out.insert(p, Entry { kind: a.kind, perm: a.perm, nlink: a.nlink, size: a.size, data, xattrs });
        }
    }
    // Link counts: files have one per name, directories 2 + subdirectories.
    let mut by_ino: HashMap<Ino, (FileKind, u32)> = HashMap::new();
    let mut stack = vec![ROOT_INO];
    while let Some(dir) = stack.pop() {
        for e in fs.readdir(dir, 0).map_err(|e| e.to_string())? {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let a = fs.getattr(e.ino).map_err(|e| e.to_string())?;
            by_ino.insert(e.ino, (a.kind, a.nlink));
            if a.kind == FileKind::Dir {
                stack.push(e.ino);
            }
        }
    }
    for (ino, (kind, nlink)) in by_ino {
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

fn lookup_path(fs: &Fs, path: &str) -> FsResult<Attr> {
    let mut ino = ROOT_INO;
    let mut attr = fs.getattr(ROOT_INO)?;
    for comp in path.split('/').filter(|c| !c.is_empty()) {
        attr = fs.lookup(&Cred::root(), ino, comp.as_bytes())?;
        ino = attr.ino;
    }
    Ok(attr)
}

fn split(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => ("", path),
    }
}

/// One step of a workload.
#[derive(Debug, Clone)]
enum Op {
    Creat(&'static str),
    Mkdir(&'static str),
    Write(&'static str, u64, usize, u8),
    Append(&'static str, usize, u8),
    Truncate(&'static str, u64),
    Falloc(&'static str, u64, u64, i32),
    Link(&'static str, &'static str),
    Unlink(&'static str),
    Rename(&'static str, &'static str, u32),
    Rmdir(&'static str),
    Symlink(&'static str, &'static str),
    SetXattr(&'static str, &'static str, usize),
    RemoveXattr(&'static str, &'static str),
    /// Publish the whole log (crash points inside publication are checked too).
    Publish,
}

fn run(fs: &Fs, op: &Op) -> FsResult<()> {
    let root = Cred::root();
    let parent = |p: &str| lookup_path(fs, split(p).0).map(|a| a.ino);
    match op {
        Op::Creat(p) => {
            let (a, fh) = fs.create(&root, parent(p)?, split(p).1.as_bytes(), 0o644, 0, libc::O_RDWR)?;
            fs.release(a.ino, fh);
        }
        Op::Mkdir(p) => {
            fs.mkdir(&root, parent(p)?, split(p).1.as_bytes(), 0o755, 0)?;
        }
        Op::Write(p, off, len, byte) => {
            let a = lookup_path(fs, p)?;
            fs.write(&root, a.ino, *off, &vec![*byte; *len])?;
            fs.fsync(a.ino, false)?;
        }
        Op::Append(p, len, byte) => {
            let a = lookup_path(fs, p)?;
            fs.write(&root, a.ino, a.size, &vec![*byte; *len])?;
            fs.fsync(a.ino, true)?;
        }
        Op::Truncate(p, size) => {
            let a = lookup_path(fs, p)?;
            fs.setattr(&root, a.ino, &SetAttr { size: Some(*size), ..Default::default() })?;
        }
        Op::Falloc(p, off, len, mode) => {
            let a = lookup_path(fs, p)?;
            fs.fallocate(&root, a.ino, *off, *len, *mode)?;
        }
        Op::Link(from, to) => {
            let a = lookup_path(fs, from)?;
            fs.link(&root, a.ino, parent(to)?, split(to).1.as_bytes())?;
        }
        Op::Unlink(p) => fs.unlink(&root, parent(p)?, split(p).1.as_bytes())?,
        Op::Rmdir(p) => fs.rmdir(&root, parent(p)?, split(p).1.as_bytes())?,
        Op::Rename(from, to, flags) => {
            fs.rename(&root, parent(from)?, split(from).1.as_bytes(), parent(to)?, split(to).1.as_bytes(), *flags)?
        }
        Op::Symlink(p, target) => {
            fs.symlink(&root, parent(p)?, split(p).1.as_bytes(), target.as_bytes())?;
        }
        Op::SetXattr(p, name, len) => {
            let a = lookup_path(fs, p)?;
            fs.setxattr(&root, a.ino, name.as_bytes(), &vec![b'x'; *len], 0)?;
        }
        Op::RemoveXattr(p, name) => {
            let a = lookup_path(fs, p)?;
            fs.removexattr(&root, a.ino, name.as_bytes())?;
        }
        Op::Publish => fs.sync_all()?,
    }
    Ok(())
}

/// The fixed starting tree: /A (dir) with A/foo (8 KiB + 100 bytes, an xattr), /bar (3000
/// bytes), /B (empty dir). Part of it published, part still in the log.
fn setup(fs: &Fs) {
    for op in [
        Op::Mkdir("A"),
        Op::Mkdir("B"),
        Op::Creat("A/foo"),
        Op::Write("A/foo", 0, 8292, 1),
        Op::SetXattr("A/foo", "user.a", 10),
        Op::Publish,
        Op::Creat("bar"),
        Op::Write("bar", 0, 3000, 2),
    ] {
        run(fs, &op).unwrap();
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

struct Counts {
    points: usize,
    images: usize,
}

fn check_workload(ops: &[Op], crash: &CrashOpts) -> Result<Counts, String> {
    let params = FormatParams { size: 4 << 20, log_size: 512 << 10, log_slots: 1, inodes: 256 };
    let geo = Geometry::compute(&params).unwrap();
    let region = Arc::new(PmRegion::traced(params.size));
    Fs::format_region(&region, &geo).unwrap();
    let fs = Fs::mount_region(region.clone(), opts()).unwrap();
    setup(&fs);
    let tracer = region.tracer().expect("traced");
    let mut states = vec![snapshot(&fs)?];
    tracer.start_recording();
    for (i, op) in ops.iter().enumerate() {
        // An op that fails changes nothing: the state stays as it was.
        let _ = run(&fs, op);
        states.push(snapshot(&fs)?);
        tracer.checkpoint(&format!("op {i} done"));
    }
    let points = tracer.crash_points();
    drop(fs);
    let mut acked = 0usize;
    let mut images = 0usize;
    for point in &points {
        for img in point.images(crash) {
            images += 1;
            let r = Arc::new(PmRegion::traced_from_image(img.image));
            let ctx =
                || format!("workload {ops:?}, point {} ({}), image {}", point.index, point.label, img.description);
            let fs = Fs::mount_region(r.clone(), opts()).map_err(|e| format!("{}: mount failed: {e}", ctx()))?;
            let got = snapshot(&fs).map_err(|e| format!("{}: inconsistent: {e}", ctx()))?;
            let ok_states = &states[acked..(acked + 2).min(states.len())];
            if !ok_states.contains(&got) {
                return Err(format!(
                    "{}: recovered state matches neither the acknowledged state nor the next one\n got: {got:#?}\n expected one of: {ok_states:#?}",
                    ctx()
                ));
            }
            // The recovered file system must stay usable, and publishing it must not change it.
            if images.is_multiple_of(5) {
                let root = Cred::root();
                let (a, _) = fs
                    .create(&root, ROOT_INO, b"after", 0o600, 0, libc::O_RDWR)
                    .map_err(|e| format!("{}: create after recovery: {e}", ctx()))?;
                fs.write(&root, a.ino, 0, b"post-crash")
                    .map_err(|e| format!("{}: write after recovery: {e}", ctx()))?;
                fs.sync_all().map_err(|e| format!("{}: publish after recovery: {e}", ctx()))?;
                drop(fs);
                let fs = Fs::mount_region(r, opts()).map_err(|e| format!("{}: second mount: {e}", ctx()))?;
                let mut again = snapshot(&fs).map_err(|e| format!("{}: inconsistent after reuse: {e}", ctx()))?;
                let after =
                    again.remove("/after").ok_or_else(|| format!("{}: file written after recovery lost", ctx()))?;
                if after.data != b"post-crash" || again != got {
                    return Err(format!("{}: state changed across publication and remount", ctx()));
                }
            }
        }
        if point.label == format!("op {acked} done") {
            acked += 1;
        }
    }
    Ok(Counts { points: points.len(), images })
}

fn workloads() -> Vec<Vec<Op>> {
    use Op::*;
    let singles: Vec<Op> = vec![
        Creat("A/new"),
        Creat("B/x"),
        Mkdir("A/sub"),
        Write("A/foo", 0, 4096, 9),
        Write("A/foo", 5000, 20000, 9),
        Write("bar", 1, 10, 9),
        Append("bar", 5000, 7),
        Append("A/foo", 17, 7),
        Truncate("A/foo", 100),
        Truncate("bar", 10000),
        Truncate("A/foo", 0),
        Falloc("bar", 0, 16384, 0),
        Falloc("A/foo", 1000, 5000, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE),
        Falloc("bar", 2000, 4000, FALLOC_FL_ZERO_RANGE),
        Link("A/foo", "B/foo2"),
        Unlink("A/foo"),
        Unlink("bar"),
        Rename("bar", "A/bar", 0),
        Rename("bar", "A/foo", 0),
        Rename("A", "B/A", 0),
        Rename("A", "B", RENAME_EXCHANGE),
        Rename("bar", "A/foo", RENAME_NOREPLACE),
        Rmdir("B"),
        Symlink("B/ln", "../A/foo"),
        SetXattr("bar", "user.big", 3000),
        SetXattr("A/foo", "user.a", 20),
        RemoveXattr("A/foo", "user.a"),
        Publish,
    ];
    let mut w: Vec<Vec<Op>> = singles.iter().map(|o| vec![o.clone()]).collect();
    // Pairs: each op followed by publication, and a fixed set of interesting pairs.
    for o in &singles[..singles.len() - 1] {
        w.push(vec![o.clone(), Publish]);
    }
    w.extend([
        vec![Creat("A/new"), Write("A/new", 0, 6000, 3)],
        vec![Write("A/foo", 0, 9000, 3), Truncate("A/foo", 10)],
        vec![Unlink("A/foo"), Creat("A/foo")],
        vec![Rename("A/foo", "B/foo", 0), Rename("B/foo", "A/foo", 0)],
        vec![Mkdir("B/d"), Rename("bar", "B/d/bar", 0), Publish],
        vec![Link("bar", "A/bar2"), Unlink("bar"), Publish],
        vec![Truncate("bar", 0), Publish, Append("bar", 100, 5)],
        vec![SetXattr("bar", "user.q", 100), Publish, RemoveXattr("bar", "user.q")],
    ]);
    w
}

#[test]
fn every_crash_state_recovers_to_an_acknowledged_state() {
    let crash = CrashOpts {
        max_exhaustive: env_usize("LINEFS_CRASH_EXHAUSTIVE", 5),
        samples: env_usize("LINEFS_CRASH_SAMPLES", 6),
        seed: 7,
        torn_words: false,
    };
    let mut total_points = 0;
    let mut total_images = 0;
    let all = workloads();
    for ops in &all {
        match check_workload(ops, &crash) {
            Ok(c) => {
                total_points += c.points;
                total_images += c.images;
            }
            Err(e) => panic!("{e}"),
        }
    }
    println!(
        "crash test: {} workloads, {total_points} crash points, {total_images} crash states, 0 violations",
        all.len()
    );
    assert!(total_images > all.len() * 4, "too few crash states were generated");
}
