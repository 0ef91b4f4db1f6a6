//! The adversarial property test of issue 21: a node holding root's and another user's
//! (uid 1000) files, and an unprivileged client process (the test binary re-run as uid
//! 65534, `hostile`) logging random well-formed, correctly checksummed entries and sending
//! random lease requests and hand-backs — random records of every kind over inode numbers
//! drawn from the existing ones, its own range and out of range, with random names, modes,
//! owners, link counts and parents, and entries that look like what libfs logs (creates,
//! mkdirs, links, unlinks, renames, chmods, chowns, writes) computed on the current public
//! state, for any inode. The hostile process only writes bytes into its log and frames on
//! its socket (it never reads the public area): the test (root) makes every entry and sends
//! it over a pipe.
//!
//! Oracle after every step, read from the root side: everything the user may not change —
//! root's and uid 1000's inodes (all but their access and change times; a directory's link
//! count, size and mtime move with names others may add), their data and extended
//! attributes, the names that lead to them, every name of a directory the user may not
//! write — is unchanged, and pm's fsck finds the node consistent (link counts equal
//! the names, the tree acyclic and connected, no block in two files).
//!
//! `PROPTEST_CASES` sets how many sequences run (default 6; each starts a node).

mod support;

use linefs_pm::fsck::{self, Problem};
use linefs_pm::public::PublicReader;
use linefs_pm::record::{dtype, Caller, EntryBuilder, InodeImage};
use linefs_proto::*;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use support::*;

const NOBODY: u32 = 65534;
const OTHER: u32 = 1000;
const NAMES: [&[u8]; 5] = [b"a", b"b", b"secret", b"prog", b"x"];
const MODES: [u32; 8] = [
    libc::S_IFREG | 0o644,
    libc::S_IFREG | 0o4755,
    libc::S_IFREG | 0o2755,
    libc::S_IFREG | 0o666,
    libc::S_IFDIR | 0o755,
    libc::S_IFDIR | 0o1777,
    libc::S_IFLNK | 0o777,
    libc::S_IFCHR | 0o600,
];
const UIDS: [u32; 3] = [NOBODY, 0, OTHER];

/// The node before the hostile client comes.
struct Node {
    /// Every inode number of interest: root's and uid 1000's, then the hostile user's.
    protected: Vec<u64>,
    /// /pub, the hostile user's directory, and /pub/mine, its file.
    pub_dir: u64,
    mine: u64,
}

fn img(ino: u64, parent: u64, mode: u32, uid: u32, nlink: u32, size: u64) -> InodeImage {
    InodeImage { ino, parent, mode, uid, gid: uid, nlink, size, generation: 7, ..Default::default() }
}

/// Root's client makes: / (0755) holding /root (root's, 0755: secret 0600, prog 04755, ro
/// 0644 with an xattr, link a symbolic link), /other (uid 1000's, 0755: file 0644), /tmp (root's, 01777: root's
/// file kept 0644) and /pub (the hostile user's, with its file mine).
fn build(root: &mut Client) -> Node {
    let f = root.attached.inodes.first;
    let (rootdir, secret, prog, ro, other, ofile, tmp, kept, pub_dir, mine, link) =
        (f, f + 1, f + 2, f + 3, f + 4, f + 5, f + 6, f + 7, f + 8, f + 9, f + 10);
    let dir = |ino, parent, mode, uid| img(ino, parent, libc::S_IFDIR | mode, uid, 2, 0);
    let file = |ino, parent, mode, uid, data: &[u8]| img(ino, parent, libc::S_IFREG | mode, uid, 1, data.len() as u64);
    let mut e = EntryBuilder::new();
    let mkdir = |e: &mut EntryBuilder, parent: u64, ino: u64, name: &[u8], mode: u32, uid: u32| {
        e.inode(&dir(ino, parent, mode, uid), true);
        e.dirent(parent, name, ino, dtype::DIR);
    };
    mkdir(&mut e, 1, rootdir, b"root", 0o755, 0);
    mkdir(&mut e, 1, other, b"other", 0o755, OTHER);
    mkdir(&mut e, 1, tmp, b"tmp", 0o1777, 0);
    mkdir(&mut e, 1, pub_dir, b"pub", 0o755, NOBODY);
    for (parent, ino, name, mode, uid, data) in [
        (rootdir, secret, &b"secret"[..], 0o600, 0, &b"root's secret"[..]),
        (rootdir, prog, b"prog", 0o4755, 0, b"#!/bin/true"),
        (rootdir, ro, b"ro", 0o644, 0, b"read only"),
        (other, ofile, b"file", 0o644, OTHER, b"uid 1000's"),
        (tmp, kept, b"kept", 0o644, 0, b"in /tmp"),
        (pub_dir, mine, b"mine", 0o644, NOBODY, b"the hostile user's"),
    ] {
        e.inode(&file(ino, parent, mode, uid, data), true);
        e.dirent(parent, name, ino, dtype::REG);
        e.write(ino, 0, data);
    }
    e.xattrs(ro, [(&b"user.tag"[..], &b"root's"[..]), (&b"trusted.t"[..], &b"x"[..])]);
    // /root/link, root's symbolic link (mode 0777, like every link) to "secret".
    e.inode(&img(link, 0, libc::S_IFLNK | 0o777, 0, 1, 6), true);
    e.dirent(rootdir, b"link", link, dtype::LNK);
    e.write(link, 0, b"secret");
    let mut top = root.public().read_inode(1).unwrap().img;
    top.nlink += 4;
    e.inode(&top, false);
    root.append(&e);
    root.chunk_ready();
    assert_eq!(expect_published(root).published_lsn, root.tail);
    root.release_all();
    Node { protected: vec![1, rootdir, secret, prog, ro, other, ofile, tmp, kept, link], pub_dir, mine }
}

/// What must not change of one protected inode: its image but for the times others may
/// move (and, for a directory, what names others may add move), its xattrs, its data, and
/// its names (those that lead to protected inodes; all, if the user may not write it).
type Guarded = (InodeImage, Vec<(Vec<u8>, Vec<u8>)>, Vec<u8>, Vec<(Vec<u8>, u64)>);

fn guarded(p: &PublicReader, protected: &[u64]) -> BTreeMap<u64, Option<Guarded>> {
    let loaded = p.load().unwrap();
    protected
        .iter()
        .map(|&ino| {
            let Some(i) = loaded.inodes.get(&ino) else { return (ino, None) };
            let mut g = i.img;
            g.atime = Default::default();
            g.ctime = Default::default();
            let is_dir = g.mode & libc::S_IFMT == libc::S_IFDIR;
            let open_dir = is_dir && g.mode & 0o002 != 0;
            if is_dir {
                g.nlink = 0;
                g.size = 0;
                g.mtime = Default::default();
            }
            let mut names: Vec<(Vec<u8>, u64)> = loaded
                .dirs
                .get(&ino)
                .into_iter()
                .flatten()
                .filter(|d| !open_dir || protected.contains(&d.ino))
                .map(|d| (d.name.clone(), d.ino))
                .collect();
            names.sort();
            let kind = g.mode & libc::S_IFMT;
            let mut data = vec![0u8; if kind == libc::S_IFREG || kind == libc::S_IFLNK { g.size as usize } else { 0 }];
            p.read_file(ino, 0, &mut data).unwrap();
            (ino, Some((g, i.xattrs.clone(), data, names)))
        })
        .collect()
}

/// What fsck finds wrong with the live node (an orphan may be open: a note, not a problem).
fn broken(p: &PublicReader) -> Vec<Problem> {
    fsck::check(p, &fsck::Options { live: true }).problems
}

/// An inode number, as an index into the numbers of interest at the time (see `Run::ino`).
type Pick = u8;

#[derive(Debug, Clone)]
enum Rec {
    Inode { fresh: bool, ino: Pick, parent: Pick, mode: u8, uid: u8, nlink: u8, size: u16 },
    Dirent { dir: Pick, name: u8, target: Option<Pick>, dtype: u8 },
    Write { ino: Pick, off: u16, len: u8 },
    Truncate { ino: Pick, size: u16 },
    Punch { ino: Pick, off: u16, len: u16 },
    Free { ino: Pick },
    Xattr { ino: Pick, trusted: bool },
    OpenWrite { ino: Pick },
}

#[derive(Debug, Clone)]
enum Op {
    /// Random records; `caller`: 0 none stated, 1 its own, 2 root's (false).
    Raw {
        recs: Vec<Rec>,
        lease: bool,
        caller: u8,
    },
    /// What libfs would log, computed on the public state as it is, for any inodes.
    Create {
        dir: Pick,
        name: u8,
        mode: u8,
    },
    Link {
        ino: Pick,
        dir: Pick,
        name: u8,
    },
    Unlink {
        dir: Pick,
        name: u8,
        free: bool,
    },
    Rename {
        from: Pick,
        name: u8,
        to: Pick,
        to_name: u8,
    },
    Chmod {
        ino: Pick,
        mode: u16,
    },
    Chown {
        ino: Pick,
        uid: u8,
    },
    WriteData {
        ino: Pick,
    },
    Lease {
        ino: Pick,
        write: bool,
    },
    Release,
}

fn pick() -> impl Strategy<Value = Pick> {
    any::<u8>()
}

fn rec() -> impl Strategy<Value = Rec> {
    prop_oneof![
        (any::<bool>(), pick(), pick(), 0..8u8, 0..3u8, 0..4u8, 0..64u16).prop_map(
            |(fresh, ino, parent, mode, uid, nlink, size)| Rec::Inode { fresh, ino, parent, mode, uid, nlink, size }
        ),
        (pick(), 0..5u8, proptest::option::of(pick()), 0..8u8).prop_map(|(dir, name, target, dtype)| Rec::Dirent {
            dir,
            name,
            target,
            dtype
        }),
        (pick(), 0..8192u16, 1..64u8).prop_map(|(ino, off, len)| Rec::Write { ino, off, len }),
        (pick(), 0..8192u16).prop_map(|(ino, size)| Rec::Truncate { ino, size }),
        (pick(), 0..8192u16, 1..8192u16).prop_map(|(ino, off, len)| Rec::Punch { ino, off, len }),
        pick().prop_map(|ino| Rec::Free { ino }),
        (pick(), any::<bool>()).prop_map(|(ino, trusted)| Rec::Xattr { ino, trusted }),
        pick().prop_map(|ino| Rec::OpenWrite { ino }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (proptest::collection::vec(rec(), 1..5), any::<bool>(), 0..3u8)
            .prop_map(|(recs, lease, caller)| Op::Raw { recs, lease: lease || caller > 0, caller }),
        2 => (pick(), 0..5u8, 0..8u8).prop_map(|(dir, name, mode)| Op::Create { dir, name, mode }),
        1 => (pick(), pick(), 0..5u8).prop_map(|(ino, dir, name)| Op::Link { ino, dir, name }),
        2 => (pick(), 0..5u8, any::<bool>()).prop_map(|(dir, name, free)| Op::Unlink { dir, name, free }),
        1 => (pick(), 0..5u8, pick(), 0..5u8).prop_map(|(from, name, to, to_name)| Op::Rename { from, name, to, to_name }),
        1 => (pick(), 0..0o7777u16).prop_map(|(ino, mode)| Op::Chmod { ino, mode }),
        1 => (pick(), 0..3u8).prop_map(|(ino, uid)| Op::Chown { ino, uid }),
        1 => pick().prop_map(|ino| Op::WriteData { ino }),
        1 => (pick(), any::<bool>()).prop_map(|(ino, write)| Op::Lease { ino, write }),
        1 => Just(Op::Release),
    ]
}

/// The test's side of one sequence: the node, the public area as root reads it, the
/// hostile process and what it reported.
struct Run<'a> {
    node: &'a Node,
    root: &'a Client,
    /// The hostile session's first inode number (it changes when a refusal fails the session).
    own: u64,
    to: std::process::ChildStdin,
    from: BufReader<std::process::ChildStdout>,
    /// Where the hostile process's stderr goes.
    stderr: std::path::PathBuf,
}

impl Run<'_> {
    /// Half the picks are the user's own inodes (so that sequences also build and change a
    /// tree of its own), half any number of interest.
    fn ino(&self, p: Pick) -> u64 {
        let n = &self.node;
        let own = [n.pub_dir, n.mine, self.own, self.own + 1, self.own + 2, self.own + 3];
        if p < 128 {
            return own[p as usize % own.len()];
        }
        let mut all = n.protected.clone();
        all.extend(own);
        all.extend([0, 1 << 40, 999]);
        all[p as usize % all.len()]
    }

    fn image(&self, ino: u64) -> Option<InodeImage> {
        let p = self.root.public();
        p.read_inode(ino).ok().map(|i| i.img).filter(|i| i.mode != 0)
    }

    fn lookup(&self, dir: u64, name: &[u8]) -> Option<u64> {
        let p = self.root.public();
        let loaded = p.load().ok()?;
        loaded.dirs.get(&dir)?.iter().find(|d| d.name == name).map(|d| d.ino)
    }

    /// The entry `op` stands for (None: a lease step).
    fn entry(&self, op: &Op) -> Option<(EntryBuilder, bool)> {
        let me = Caller { uid: NOBODY, gid: NOBODY, groups: Vec::new() };
        let mut e = EntryBuilder::by(&me);
        let name = |i: u8| NAMES[i as usize % NAMES.len()];
        match op {
            Op::Raw { recs, lease, caller } => {
                e = match caller {
                    0 => EntryBuilder::new(),
                    1 => EntryBuilder::by(&me),
                    _ => EntryBuilder::by(&Caller::default()),
                };
                for r in recs {
                    match *r {
                        Rec::Inode { fresh, ino, parent, mode, uid, nlink, size } => {
                            let m = MODES[mode as usize % MODES.len()];
                            let u = UIDS[uid as usize % UIDS.len()];
                            let i = img(self.ino(ino), self.ino(parent), m, u, nlink.into(), size.into());
                            e.inode(&i, fresh);
                        }
                        Rec::Dirent { dir, name: n, target, dtype: t } => {
                            let target = target.map(|t| self.ino(t)).unwrap_or(0);
                            let t = if target == 0 {
                                0
                            } else {
                                [dtype::REG, dtype::DIR, dtype::LNK, dtype::CHR][t as usize % 4]
                            };
                            e.dirent(self.ino(dir), name(n), target, t);
                        }
                        Rec::Write { ino, off, len } => e.write(self.ino(ino), off.into(), &vec![0x5a; len as usize]),
                        Rec::Truncate { ino, size } => e.truncate(self.ino(ino), size.into()),
                        Rec::Punch { ino, off, len } => e.punch(self.ino(ino), off.into(), len.into()),
                        Rec::Free { ino } => e.free_inode(self.ino(ino)),
                        Rec::Xattr { ino, trusted } => {
                            let n: &[u8] = if trusted { b"trusted.x" } else { b"user.x" };
                            e.xattrs(self.ino(ino), [(n, &b"hostile"[..])]);
                        }
                        Rec::OpenWrite { ino } => e.open_write(self.ino(ino)),
                    }
                }
                return Some((e, *lease));
            }
            Op::Create { dir, name: n, mode } => {
                let d = self.ino(*dir);
                let pimg = self.image(d)?;
                let m = MODES[*mode as usize % MODES.len()];
                let isdir = m & libc::S_IFMT == libc::S_IFDIR;
                let ino = (self.own..self.own + 4).find(|&i| self.image(i).is_none())?;
                let gid = if pimg.mode & libc::S_ISGID != 0 { pimg.gid } else { NOBODY };
                let i =
                    InodeImage { gid, ..img(ino, if isdir { d } else { 0 }, m, NOBODY, if isdir { 2 } else { 1 }, 0) };
                e.inode(&i, true);
                e.dirent(d, name(*n), ino, dtype::of_mode(m));
                if isdir {
                    e.inode(&InodeImage { nlink: pimg.nlink + 1, ..pimg }, false);
                }
            }
            Op::Link { ino, dir, name: n } => {
                let (i, d) = (self.ino(*ino), self.ino(*dir));
                let f = self.image(i)?;
                e.dirent(d, name(*n), i, dtype::of_mode(f.mode));
                e.inode(&InodeImage { nlink: f.nlink + 1, ..f }, false);
            }
            Op::Unlink { dir, name: n, free } => {
                let d = self.ino(*dir);
                let victim = self.lookup(d, name(*n))?;
                let v = self.image(victim)?;
                let pimg = self.image(d)?;
                e.dirent(d, name(*n), 0, 0);
                let isdir = v.mode & libc::S_IFMT == libc::S_IFDIR;
                let left = if isdir { 0 } else { v.nlink.saturating_sub(1) };
                if isdir {
                    e.inode(&InodeImage { nlink: pimg.nlink - 1, ..pimg }, false);
                }
                if left == 0 && *free {
                    e.free_inode(victim);
                } else {
                    e.inode(&InodeImage { nlink: left, ..v }, false);
                }
            }
            Op::Rename { from, name: n, to, to_name } => {
                let (sd, dd) = (self.ino(*from), self.ino(*to));
                let src = self.lookup(sd, name(*n))?;
                let s = self.image(src)?;
                if self.lookup(dd, name(*to_name)).is_some() {
                    return None;
                }
                e.dirent(sd, name(*n), 0, 0);
                e.dirent(dd, name(*to_name), src, dtype::of_mode(s.mode));
                if s.mode & libc::S_IFMT == libc::S_IFDIR && sd != dd {
                    e.inode(&InodeImage { parent: dd, ..s }, false);
                    let (sp, dp) = (self.image(sd)?, self.image(dd)?);
                    e.inode(&InodeImage { nlink: sp.nlink - 1, ..sp }, false);
                    e.inode(&InodeImage { nlink: dp.nlink + 1, ..dp }, false);
                }
            }
            Op::Chmod { ino, mode } => {
                let i = self.image(self.ino(*ino))?;
                e.inode(&InodeImage { mode: (i.mode & libc::S_IFMT) | u32::from(*mode), ..i }, false);
            }
            Op::Chown { ino, uid } => {
                let i = self.image(self.ino(*ino))?;
                e.inode(&InodeImage { uid: UIDS[*uid as usize % 3], ..i }, false);
            }
            Op::WriteData { ino } => {
                let i = self.image(self.ino(*ino))?;
                e.write(i.ino, 0, b"HOSTILE");
                e.inode(&InodeImage { size: i.size.max(7), ..i }, false);
            }
            Op::Lease { .. } | Op::Release => return None,
        }
        Some((e, true))
    }

    /// Sends one line to the hostile process; returns its answer.
    fn say(&mut self, line: &str) -> String {
        let sent = writeln!(self.to, "{line}").and_then(|_| self.to.flush());
        let mut answer = String::new();
        let read = sent.and_then(|_| self.from.read_line(&mut answer));
        if read.is_err() || answer.is_empty() {
            let err = std::fs::read_to_string(&self.stderr).unwrap_or_default();
            panic!("the hostile process died ({read:?}) at {line:?}; its stderr:\n{err}");
        }
        let answer = answer.trim().to_string();
        if let Some((_, first)) = answer.split_once(" | attached ") {
            self.own = first.parse().unwrap();
        }
        answer
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// The hostile process, ended and reaped however the sequence ends.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn run_sequence(ops: &[Op]) -> Result<(), TestCaseError> {
    // Three slots: root's client, the one root keeps in reserve (--root-reserved-slots), the
    // hostile user's.
    let d = Daemon::start(3);
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut root = Client::attach(&d.socket);
    let node = build(&mut root);
    let before = guarded(&root.public(), &node.protected);
    prop_assert_eq!(broken(&root.public()), Vec::new());
    let mut child = Reaped(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "hostile", "--nocapture", "--include-ignored", "-q"])
            .env("NICFS_TEST_SOCKET", &d.socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(d.dir.path().join("hostile.err")).unwrap())
            .uid(NOBODY)
            .gid(NOBODY)
            .spawn()
            .unwrap(),
    );
    let mut run = Run {
        node: &node,
        root: &root,
        own: 0,
        to: child.0.stdin.take().unwrap(),
        from: BufReader::new(child.0.stdout.take().unwrap()),
        stderr: d.dir.path().join("hostile.err"),
    };
    // The first line says where its range starts.
    let mut hello = String::new();
    while !hello.starts_with("attached ") {
        hello.clear();
        run.from.read_line(&mut hello).unwrap();
        assert!(!hello.is_empty(), "the hostile process did not attach");
    }
    run.own = hello.trim()["attached ".len()..].split(' ').next().unwrap().parse().unwrap();
    for (step, op) in ops.iter().enumerate() {
        let answer = match op {
            Op::Lease { ino, write } => {
                let ino = run.ino(*ino);
                run.say(&format!("lease {ino} {}", if *write { "w" } else { "r" }))
            }
            Op::Release => run.say("release"),
            _ => match run.entry(op) {
                Some((e, lease)) => run.say(&format!("entry {} {}", lease as u8, hex(e.payload()))),
                None => continue,
            },
        };
        if std::env::var_os("ADVERSARY_TRACE").is_some() {
            eprintln!("step {step}: {op:?} -> {answer}");
        }
        let public = root.public();
        let now = guarded(&public, &node.protected);
        for ino in &node.protected {
            prop_assert_eq!(
                &now[ino],
                &before[ino],
                "step {} ({:?}: {}) changed protected inode {}",
                step,
                op,
                answer,
                ino
            );
        }
        let problems = broken(&public);
        prop_assert!(
            problems.is_empty(),
            "step {} ({:?}: {}) left the node inconsistent: {:?}",
            step,
            op,
            answer,
            problems
        );
    }
    run.say("quit");
    drop(run);
    drop(child);
    prop_assert!(d.status()["counters"].is_object(), "nicfs answers");
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 200,
        // Failures are kept as named regression tests, not in a file.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn an_unprivileged_client_changes_nothing_it_may_not_and_keeps_the_node_consistent(
        ops in proptest::collection::vec(op(), 1..40)
    ) {
        run_sequence(&ops)?;
    }
}

/// Found by the property test: a user attribute set on root's sticky /tmp by another user
/// (who may write the directory) was published; Linux lets only a sticky directory's owner
/// change its user attributes. (Pick 140 is /tmp: the eighth protected inode, 140 % 19.)
#[test]
fn regression_user_xattr_on_a_sticky_directory() {
    let ops = [Op::Raw { recs: vec![Rec::Xattr { ino: 140, trusted: false }], lease: true, caller: 1 }];
    run_sequence(&ops).unwrap();
}

/// Found by the property test (500 cases): a truncation of root's world-writable sticky
/// directory (which anyone may write) was published, and dropped every name in it; only a
/// regular file's data may be truncated or punched. (Pick 159 is that directory.)
#[test]
fn regression_truncate_of_a_directory() {
    let ops = [Op::Raw { recs: vec![Rec::Truncate { ino: 159, size: 0 }], lease: true, caller: 0 }];
    run_sequence(&ops).unwrap();
}

/// The hostile process: reads lines from the test — `entry LEASE HEX` (append the entry,
/// taking write leases on what it changes first if LEASE is 1, announce it, and say
/// `published` or `refused WHY`), `lease INO w|r`, `release`, `quit` — and speaks to nicfs
/// itself, one line per command. A refusal fails its session: it attaches again and adds
/// ` | attached FIRST` to that line.
#[test]
#[ignore = "run by an_unprivileged_client_changes_nothing_it_may_not_and_keeps_the_node_consistent"]
fn hostile() {
    let Some(socket) = std::env::var_os("NICFS_TEST_SOCKET") else { return };
    let socket = std::path::PathBuf::from(socket);
    assert_eq!(rustix::process::geteuid().as_raw(), NOBODY, "run as an unprivileged user");
    let attach = || wait_for("a slot", || Client::try_attach(&socket).ok());
    let mut c = attach();
    println!("attached {} {}", c.attached.inodes.first, c.attached.inodes.count);
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.unwrap();
        let mut w = line.split(' ');
        let failed = match w.next().unwrap() {
            "entry" => {
                let lease = w.next() == Some("1");
                let payload = unhex(w.next().unwrap_or(""));
                append_and_wait(&mut c, &payload, lease)
            }
            "lease" => {
                let ino: u64 = w.next().unwrap().parse().unwrap();
                let mode = if w.next() == Some("w") { LeaseMode::Write } else { LeaseMode::Read };
                let r = LeaseRequest { inode: ino, mode, log_tail: c.tail, creds: creds() };
                match ask(&mut c, Control::LeaseRequest(r)) {
                    Ok(Control::LeaseGranted(g)) => {
                        if mode == LeaseMode::Write {
                            c.leases.insert(ino, g.lease);
                        }
                        print!("granted");
                        false
                    }
                    Ok(other) => {
                        print!("not granted: {other:?}");
                        false
                    }
                    Err(why) => {
                        print!("{why}");
                        true
                    }
                }
            }
            "release" => {
                let mut failed = false;
                for (inode, lease) in std::mem::take(&mut c.leases) {
                    let h = LeaseHandback { inode, lease, covered_lsn: c.tail };
                    if let Err(why) = ask(&mut c, Control::LeaseRelease(h)) {
                        print!("{why}; ");
                        failed = true;
                        break;
                    }
                }
                print!("released");
                failed
            }
            _ => {
                println!("bye");
                // Nothing more on the pipe, which the test closes: not even the harness's summary.
                std::process::exit(0);
            }
        };
        // One line per command: a new session's range goes on the refusal's line.
        if failed {
            drop(c);
            c = attach();
            print!(" | attached {}", c.attached.inodes.first);
        }
        println!();
    }
}

/// Appends `payload` as an entry, announces it, and waits for its publication or refusal
/// (printing which); true if refused (the session failed).
fn append_and_wait(c: &mut Client, payload: &[u8], lease: bool) -> bool {
    if lease {
        let Ok(records) = linefs_pm::record::decode_records(payload, 0) else { return false };
        for r in records {
            let ino = r.target();
            if c.leases.contains_key(&ino) {
                continue;
            }
            let req = LeaseRequest { inode: ino, mode: LeaseMode::Write, log_tail: c.tail, creds: creds() };
            match ask(c, Control::LeaseRequest(req)) {
                Ok(Control::LeaseGranted(g)) => {
                    c.leases.insert(ino, g.lease);
                }
                Ok(_) => {}
                Err(why) => {
                    print!("{why}");
                    return true;
                }
            }
        }
    }
    let published = c.log.published_lsn().unwrap();
    let Ok(loc) = c.log.append(c.tail, published, payload) else {
        print!("log full");
        return true;
    };
    c.tail = loc.end;
    c.chunk_ready();
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline {
        // Only a whole frame is read, with the full deadline, and only once its first bytes
        // are there: a read that times out half way would lose the stream's framing.
        let (control, bulk) = readable(c);
        if control {
            match c.try_recv(WAIT).map(|f| f.msg) {
                Some(Control::Rejected(r)) => {
                    print!("refused {}", r.reason.replace('\n', " "));
                    return true;
                }
                Some(_) => {}
                None => break,
            }
        }
        if bulk {
            match linefs_proto::read_frame::<Bulk>(&c.bulk, Party::Nicfs, Some(WAIT)) {
                Ok(f) => {
                    if let Bulk::Published(p) = f.msg {
                        if p.published_lsn >= c.tail {
                            print!("published");
                            return false;
                        }
                    }
                }
                Err(e) => {
                    print!("refused: the bulk connection ended: {e}");
                    return true;
                }
            }
        }
    }
    print!("refused: no answer");
    true
}

/// A control request and its answer, whatever else arrives meanwhile (revokes are left
/// unanswered: a hostile client need not); Err if the session was refused or ended, or
/// nothing answered in time.
fn ask(c: &mut Client, msg: Control) -> Result<Control, String> {
    let id = c.send(msg);
    let deadline = std::time::Instant::now() + WAIT;
    while std::time::Instant::now() < deadline {
        if !readable(c).0 {
            continue;
        }
        let f = match linefs_proto::read_frame::<Control>(&c.control, Party::Nicfs, Some(WAIT)) {
            Ok(f) => f,
            Err(e) => return Err(format!("refused: the control connection ended: {e}")),
        };
        match f.msg {
            Control::Rejected(r) => return Err(format!("refused {}", r.reason.replace('\n', " "))),
            m if f.id == id => return Ok(m),
            _ => {}
        }
    }
    Err("refused: no answer".into())
}

/// Whether the control and the bulk connection have something to read (waits up to 50 ms).
fn readable(c: &Client) -> (bool, bool) {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(&c.control, PollFlags::IN), PollFd::new(&c.bulk, PollFlags::IN)];
    let _ = poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 50_000_000 }));
    let ready = |f: &PollFd| !f.revents().is_empty();
    (ready(&fds[0]), ready(&fds[1]))
}
