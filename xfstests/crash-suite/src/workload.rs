//! The workloads, generated in the manner of ACE (CrashMonkey's workload generator): a fixed
//! small file set, a bounded menu of operations over it (each kind with a few argument
//! choices: aligned and unaligned overwrites, appends, every fallocate mode, renames that
//! replace, exchange or move directories, …), and after each operation one of four
//! persistence points. Sequences of one and two steps are enumerated exhaustively; sequences
//! of three are sampled with a seed.

use libfs::{FALLOC_FL_KEEP_SIZE, FALLOC_FL_PUNCH_HOLE, FALLOC_FL_ZERO_RANGE, RENAME_EXCHANGE, RENAME_NOREPLACE};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fmt;

/// What follows an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persist {
    /// fsync of the file (or directory) the operation changed.
    Fsync,
    /// fdatasync of it.
    Fdatasync,
    /// sync: every log entry published into the public area.
    Sync,
    /// Nothing.
    None,
}

pub const PERSISTS: [Persist; 4] = [Persist::Fsync, Persist::Fdatasync, Persist::Sync, Persist::None];

/// One file-system operation over the fixed tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Creat(&'static str),
    Mkdir(&'static str),
    /// Overwrite (or extend) `len` bytes of `byte` at `off`.
    Write(&'static str, u64, usize, u8),
    /// Append `len` bytes of `byte`.
    Append(&'static str, usize, u8),
    Falloc(&'static str, u64, u64, i32),
    Truncate(&'static str, u64),
    Link(&'static str, &'static str),
    Unlink(&'static str),
    Rename(&'static str, &'static str, u32),
    Rmdir(&'static str),
    Symlink(&'static str, &'static str),
    SetXattr(&'static str, &'static str, usize),
    RemoveXattr(&'static str, &'static str),
}

impl Op {
    /// The path whose inode the persistence point syncs.
    pub fn target(&self) -> &'static str {
        match self {
            Op::Creat(p)
            | Op::Mkdir(p)
            | Op::Write(p, ..)
            | Op::Append(p, ..)
            | Op::Falloc(p, ..)
            | Op::Truncate(p, _)
            | Op::Symlink(p, _)
            | Op::SetXattr(p, ..)
            | Op::RemoveXattr(p, _) => p,
            Op::Link(_, to) | Op::Rename(_, to, _) => to,
            Op::Unlink(p) | Op::Rmdir(p) => crate::snapshot::split(p).0,
        }
    }
}

/// The starting tree (see [`crate::check`]): `A/` holding `A/foo` (8292 bytes, xattr
/// `user.a`), `B/` empty, both published; `bar` (3000 bytes) still only in the log.
pub fn menu() -> Vec<Op> {
    use Op::*;
    vec![
        Creat("A/new"),
        Creat("B/x"),
        Mkdir("A/sub"),
        Mkdir("B/d"),
        Write("A/foo", 0, 4096, 9),
        Write("A/foo", 5000, 6000, 8),
        Write("bar", 1, 10, 7),
        Append("bar", 5000, 6),
        Append("A/foo", 17, 5),
        Falloc("bar", 0, 16384, 0),
        Falloc("A/foo", 1000, 5000, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE),
        Falloc("bar", 2000, 4000, FALLOC_FL_ZERO_RANGE),
        Falloc("bar", 0, 20000, FALLOC_FL_KEEP_SIZE),
        Truncate("A/foo", 100),
        Truncate("bar", 10000),
        Truncate("A/foo", 0),
        Link("A/foo", "B/foo2"),
        Link("bar", "A/bar2"),
        Unlink("A/foo"),
        Unlink("bar"),
        Rename("bar", "A/bar", 0),
        Rename("bar", "A/foo", 0),
        Rename("A", "B/A", 0),
        Rename("A", "B", RENAME_EXCHANGE),
        Rename("bar", "A/foo", RENAME_NOREPLACE),
        Rmdir("B"),
        Symlink("B/ln", "../A/foo"),
        // Spans three xattr blocks: crash states tear the chain between its blocks.
        SetXattr("bar", "user.big", 10000),
        SetXattr("A/foo", "user.a", 20),
        RemoveXattr("A/foo", "user.a"),
    ]
}

/// An operation and its persistence point.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub op: Op,
    pub persist: Persist,
}

/// A numbered workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Stable for a given seed: singles first, then pairs, then the sampled triples.
    pub id: usize,
    pub steps: Vec<Step>,
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} [", self.id)?;
        for (i, s) in self.steps.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{:?} + {:?}", s.op, s.persist)?;
        }
        write!(f, "]")
    }
}

/// Every step: each operation with each persistence point.
pub fn steps() -> Vec<Step> {
    menu().into_iter().flat_map(|op| PERSISTS.map(|persist| Step { op: op.clone(), persist })).collect()
}

/// How many sequences of three the full suite samples.
pub const TRIPLES: usize = 2000;

/// The whole enumeration: all singles, all pairs, `TRIPLES` sampled triples.
pub fn all(seed: u64) -> Vec<Workload> {
    let s = steps();
    let mut out = Vec::new();
    for a in &s {
        out.push(vec![a.clone()]);
    }
    for a in &s {
        for b in &s {
            out.push(vec![a.clone(), b.clone()]);
        }
    }
    let mut rng = StdRng::seed_from_u64(seed);
    for _ in 0..TRIPLES {
        out.push((0..3).map(|_| s[rng.random_range(0..s.len())].clone()).collect());
    }
    out.into_iter().enumerate().map(|(id, steps)| Workload { id, steps }).collect()
}

/// The bounded slice: every single, every 48th pair, the first 40 triples.
pub fn quick(seed: u64) -> Vec<Workload> {
    let n = steps().len();
    all(seed)
        .into_iter()
        .filter(|w| match w.steps.len() {
            1 => true,
            2 => (w.id - n).is_multiple_of(48),
            _ => w.id < n + n * n + 40,
        })
        .collect()
}
