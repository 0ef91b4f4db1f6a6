//! Coalescing (LineFS §3.3.1, after Strata's digest): within one batch, work whose effect
//! a later record of the same batch overwrites is not done. A batch is published — and
//! checkpointed — as a whole, so only its end state is ever visible or durable; what it
//! must equal is the state publishing its records one by one leaves.
//!
//! [`plan`] walks the batch's records backwards, remembering per inode what the records
//! after the current one will do to it, and keeps of each record only what survives them:
//!
//! * **a file freed or recreated later** (`FREE_INODE`, or a fresh `INODE` of the same
//!   number): every earlier record of that inode is dropped — attributes, data, truncates,
//!   punches, allocations, xattrs, and the entries of a directory — since the later record
//!   releases whatever they built. Directory entries that *name* it stay (they live in their
//!   directory, which survives), and so does every `FREE_INODE`;
//! * **data overwritten later**: the bytes of a WRITE that a later WRITE rewrites, or a
//!   later TRUNCATE (every byte at or past its size) or PUNCH zeroes, are not copied. The
//!   blocks the WRITE would have mapped stay mapped ([`Step::Map`]: allocated and
//!   zero-filled if new, not copied into), so that the block maps end the same — unless a
//!   later record frees the block anyway, then it is not allocated at all, or a later
//!   WRITE rewrites the whole block, then that WRITE maps and fills it; the same goes for
//!   the blocks of an ALLOC;
//! * **attributes and xattrs set again later**: an earlier non-fresh `INODE` record (a blind
//!   post-image of every attribute) and an earlier `XATTRS` record (the whole set) are
//!   dropped.
//!
//! Everything else is kept, in order (OPEN_WRITE too, which changes nothing). The resulting
//! state is the same as publishing the records one by one: the same inodes with the same
//! attributes and xattrs, the same directory entries in the same slots, the same file
//! blocks mapped holding the same bytes (`pm/tests/coalesce.rs` checks it on random
//! batches). What may differ is which physical blocks hold them, and that the coalesced
//! batch can need fewer blocks (an indirect block for data that is freed later in the
//! batch is never allocated).
//!
//! Crash safety is unchanged: the log is not changed, recovery replays its records from the
//! checkpoint, and a coalesced batch is a sequence of valid records (or restrictions of
//! them) that leaves the public area in states publication of the whole records converges
//! from (`pm/tests/publish_crash.rs` crashes coalesced batches too).

use crate::layout::BLOCK_SIZE;
use crate::record::Record;
use std::collections::HashMap;

/// One step of a coalesced batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Apply this record (one of the batch's, or a WRITE or ALLOC restricted to a part).
    Apply(Record),
    /// Map the blocks of bytes `[off, off+len)` of a file as a WRITE there would (new ones
    /// zero-filled), without copying anything: a later record rewrites those bytes.
    Map { ino: u64, off: u64, len: u64 },
}

/// What coalescing left out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Saved {
    /// Bytes of WRITE data not copied.
    pub data_bytes: u64,
    /// Blocks a WRITE or ALLOC would have mapped and a later record frees: not allocated.
    pub blocks: u64,
    /// Records dropped whole.
    pub records: u64,
}

impl Saved {
    pub fn add(&mut self, o: Saved) {
        self.data_bytes += o.data_bytes;
        self.blocks += o.blocks;
        self.records += o.records;
    }
}

/// A coalesced batch: the steps that replace the records of its first `entries` entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub entries: usize,
    pub steps: Vec<Step>,
    pub saved: Saved,
}

/// Disjoint, sorted half-open ranges.
#[derive(Debug, Clone, Default)]
struct Ranges(Vec<(u64, u64)>);

impl Ranges {
    fn add(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let (mut s, mut e) = (start, end);
        self.0.retain(|&(a, b)| {
            if b < s || a > e {
                return true;
            }
            s = s.min(a);
            e = e.max(b);
            false
        });
        let at = self.0.partition_point(|&(a, _)| a < s);
        self.0.insert(at, (s, e));
    }

    /// The parts of `[start, end)` not covered, in order.
    fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut at = start;
        for &(a, b) in &self.0 {
            if b <= at {
                continue;
            }
            if a >= end {
                break;
            }
            if a > at {
                out.push((at, a));
            }
            at = at.max(b);
        }
        if at < end {
            out.push((at, end));
        }
        out
    }

    fn covers(&self, start: u64, end: u64) -> bool {
        self.gaps(start, end).is_empty()
    }

    /// The blocks these byte ranges cover whole.
    fn whole_blocks(&self) -> Ranges {
        let mut out = Ranges::default();
        for &(a, b) in &self.0 {
            out.add(a.div_ceil(BLOCK_SIZE), b / BLOCK_SIZE);
        }
        out
    }
}

/// What the records after the current one do to one inode.
#[derive(Debug, Default)]
struct Later {
    /// A later record frees the inode or recreates it: everything before is void.
    killed: bool,
    /// Bytes a later record rewrites or zeroes.
    dead: Ranges,
    /// File blocks a later record frees.
    freed: Ranges,
    /// Bytes a later WRITE rewrites (a block wholly in it is mapped by that WRITE).
    rewritten: Ranges,
    /// A later non-fresh INODE record sets every attribute.
    attrs: bool,
    /// A later XATTRS record sets the whole set.
    xattrs: bool,
}

/// Coalesces the records of `entries` (one batch, in log order).
pub fn plan<'a>(entries: impl IntoIterator<Item = &'a [Record]>) -> Plan {
    let mut records = Vec::new();
    let mut n = 0;
    for e in entries {
        records.extend(e.iter());
        n += 1;
    }
    let mut later: HashMap<u64, Later> = HashMap::new();
    let mut saved = Saved::default();
    // Steps of each record, built backwards.
    let mut rev: Vec<Vec<Step>> = Vec::with_capacity(records.len());
    for rec in records.into_iter().rev() {
        let steps = match rec {
            Record::Inode { fresh, img } => {
                let l = later.entry(img.ino).or_default();
                let keep = !l.killed && (*fresh || !l.attrs);
                l.attrs = true;
                if *fresh {
                    *l = Later { killed: true, ..Later::default() };
                }
                keep.then(|| vec![Step::Apply(rec.clone())])
            }
            Record::FreeInode { ino } => {
                *later.entry(*ino).or_default() = Later { killed: true, ..Later::default() };
                Some(vec![Step::Apply(rec.clone())])
            }
            // Changes nothing, so nothing later makes it moot; kept as it is.
            Record::OpenWrite { .. } => Some(vec![Step::Apply(rec.clone())]),
            Record::Dirent { dir, .. } => {
                let killed = later.get(dir).is_some_and(|l| l.killed);
                (!killed).then(|| vec![Step::Apply(rec.clone())])
            }
            Record::Xattrs { ino, .. } => {
                let l = later.entry(*ino).or_default();
                let keep = !l.killed && !l.xattrs;
                l.xattrs = true;
                keep.then(|| vec![Step::Apply(rec.clone())])
            }
            Record::Write { ino, off, len, data_off } => {
                let l = later.entry(*ino).or_default();
                if l.killed {
                    saved.data_bytes += len;
                    None
                } else {
                    let (steps, s) = write_steps(l, *ino, *off, *len, *data_off);
                    saved.add(s);
                    l.dead.add(*off, off + len);
                    l.rewritten.add(*off, off + len);
                    (!steps.is_empty()).then_some(steps)
                }
            }
            Record::Truncate { ino, size } => {
                let l = later.entry(*ino).or_default();
                let keep = !l.killed;
                l.dead.add(*size, u64::MAX);
                l.freed.add(size.div_ceil(BLOCK_SIZE), u64::MAX);
                keep.then(|| vec![Step::Apply(rec.clone())])
            }
            Record::Punch { ino, off, len } => {
                let l = later.entry(*ino).or_default();
                let keep = !l.killed;
                l.dead.add(*off, off + len);
                l.freed.add(off.div_ceil(BLOCK_SIZE), (off + len) / BLOCK_SIZE);
                keep.then(|| vec![Step::Apply(rec.clone())])
            }
            Record::Alloc { ino, off, len } => {
                let l = later.entry(*ino).or_default();
                if l.killed {
                    None
                } else {
                    let first = off / BLOCK_SIZE;
                    let last = (off + len).div_ceil(BLOCK_SIZE);
                    // Blocks a later record frees, or a later WRITE maps whole, need not be.
                    let mut skip = l.rewritten.whole_blocks();
                    for &(a, b) in &l.freed.0 {
                        skip.add(a, b);
                    }
                    let kept = skip.gaps(first, last);
                    let not_freed: u64 = l.freed.gaps(first, last).iter().map(|(a, b)| b - a).sum();
                    saved.blocks += (last - first) - not_freed;
                    let steps: Vec<Step> = kept
                        .into_iter()
                        .map(|(a, b)| {
                            let s = (a * BLOCK_SIZE).max(*off);
                            let e = (b * BLOCK_SIZE).min(off + len);
                            Step::Apply(Record::Alloc { ino: *ino, off: s, len: e - s })
                        })
                        .collect();
                    (!steps.is_empty()).then_some(steps)
                }
            }
        };
        match steps {
            Some(s) => rev.push(s),
            None => saved.records += 1,
        }
    }
    Plan { entries: n, steps: rev.into_iter().rev().flatten().collect(), saved }
}

/// The steps of a WRITE that the records after it (`l`) partly overwrite: its live bytes
/// copied, the blocks holding only dead bytes mapped (or skipped if freed later).
fn write_steps(l: &Later, ino: u64, off: u64, len: u64, data_off: u64) -> (Vec<Step>, Saved) {
    let mut saved = Saved::default();
    let end = off + len;
    let live = l.dead.gaps(off, end);
    if live == [(off, end)] {
        return (vec![Step::Apply(Record::Write { ino, off, len, data_off })], saved);
    }
    saved.data_bytes = len - live.iter().map(|(a, b)| b - a).sum::<u64>();
    let mut steps: Vec<Step> = Vec::new();
    let mut push = |step: Step| {
        // Contiguous pieces of the same kind become one step.
        match (steps.last_mut(), &step) {
            (
                Some(Step::Apply(Record::Write { len: l1, off: o1, .. })),
                Step::Apply(Record::Write { off: o2, len: l2, .. }),
            ) if *o1 + *l1 == *o2 => *l1 += l2,
            (Some(Step::Map { off: o1, len: l1, .. }), Step::Map { off: o2, len: l2, .. }) if *o1 + *l1 == *o2 => {
                *l1 += l2
            }
            _ => steps.push(step),
        }
    };
    for idx in off / BLOCK_SIZE..end.div_ceil(BLOCK_SIZE) {
        let (bs, be) = ((idx * BLOCK_SIZE).max(off), ((idx + 1) * BLOCK_SIZE).min(end));
        let pieces: Vec<(u64, u64)> =
            live.iter().map(|&(a, b)| (a.max(bs), b.min(be))).filter(|(a, b)| a < b).collect();
        if pieces.is_empty() {
            if l.freed.covers(idx, idx + 1) {
                // A later record frees it: never allocated.
                saved.blocks += 1;
            } else if !l.rewritten.covers(idx * BLOCK_SIZE, (idx + 1) * BLOCK_SIZE) {
                push(Step::Map { ino, off: bs, len: be - bs });
            }
            // (A block a later WRITE rewrites whole is mapped, and filled, by that WRITE.)
            continue;
        }
        // A live piece maps the block; the dead bytes around it need nothing.
        for (a, b) in pieces {
            push(Step::Apply(Record::Write { ino, off: a, len: b - a, data_off: data_off + (a - off) }));
        }
    }
    (steps, saved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::InodeImage;

    const B: u64 = BLOCK_SIZE;

    fn write(ino: u64, off: u64, len: u64) -> Record {
        Record::Write { ino, off, len, data_off: 1_000_000 + off }
    }

    fn steps(recs: &[Record]) -> (Vec<Step>, Saved) {
        let p = plan(recs.iter().map(std::slice::from_ref));
        assert_eq!(p.entries, recs.len());
        (p.steps, p.saved)
    }

    #[test]
    fn ranges_merge_and_gaps() {
        let mut r = Ranges::default();
        r.add(10, 20);
        r.add(30, 40);
        r.add(15, 32);
        r.add(50, 50);
        assert_eq!(r.0, vec![(10, 40)]);
        r.add(40, 45);
        assert_eq!(r.0, vec![(10, 45)]);
        assert_eq!(r.gaps(0, 100), vec![(0, 10), (45, 100)]);
        assert_eq!(r.gaps(12, 44), vec![]);
        assert!(r.covers(10, 45) && !r.covers(9, 11));
    }

    #[test]
    fn an_overwritten_write_keeps_its_blocks_mapped_but_copies_nothing() {
        let (s, saved) = steps(&[write(5, 0, 2 * B), write(5, 100, B)]);
        assert_eq!(
            s,
            vec![
                Step::Apply(write(5, 0, 100)),
                Step::Apply(Record::Write { ino: 5, off: B + 100, len: B - 100, data_off: 1_000_000 + B + 100 }),
                Step::Apply(write(5, 100, B)),
            ]
        );
        assert_eq!(saved, Saved { data_bytes: B, blocks: 0, records: 0 });
        // Wholly overwritten: the block is still mapped by the first write.
        let (s, saved) = steps(&[write(5, 0, 10), write(5, 0, 10)]);
        assert_eq!(s, vec![Step::Map { ino: 5, off: 0, len: 10 }, Step::Apply(write(5, 0, 10))]);
        assert_eq!(saved.data_bytes, 10);
    }

    #[test]
    fn truncated_and_punched_data_is_not_copied_and_freed_blocks_not_allocated() {
        let (s, saved) = steps(&[
            write(5, 0, 3 * B),
            Record::Punch { ino: 5, off: 10, len: 20 },
            Record::Truncate { ino: 5, size: B + 7 },
        ]);
        assert_eq!(
            s,
            vec![
                Step::Apply(write(5, 0, 10)),
                Step::Apply(Record::Write { ino: 5, off: 30, len: B + 7 - 30, data_off: 1_000_030 }),
                Step::Apply(Record::Punch { ino: 5, off: 10, len: 20 }),
                Step::Apply(Record::Truncate { ino: 5, size: B + 7 }),
            ]
        );
        assert_eq!(saved, Saved { data_bytes: 2 * B - 7 + 20, blocks: 1, records: 0 });
        // An allocation the truncate frees again.
        let (s, saved) = steps(&[Record::Alloc { ino: 5, off: 0, len: 4 * B }, Record::Truncate { ino: 5, size: 1 }]);
        assert_eq!(s[0], Step::Apply(Record::Alloc { ino: 5, off: 0, len: B }));
        assert_eq!(saved.blocks, 3);
    }

    #[test]
    fn a_file_created_and_deleted_in_the_batch_leaves_only_its_names_and_its_free() {
        let img = InodeImage { ino: 9, mode: libc::S_IFREG | 0o644, nlink: 1, ..Default::default() };
        let recs = [
            Record::Inode { fresh: true, img },
            Record::Dirent { dir: 1, ino: 9, dtype: 8, name: b"tmp".to_vec() },
            write(9, 0, 5 * B),
            Record::Xattrs { ino: 9, attrs: vec![(b"user.a".to_vec(), b"v".to_vec())] },
            Record::Inode { fresh: false, img: InodeImage { size: 5 * B, ..img } },
            Record::Dirent { dir: 1, ino: 0, dtype: 0, name: b"tmp".to_vec() },
            Record::FreeInode { ino: 9 },
        ];
        let (s, saved) = steps(&recs);
        assert_eq!(s, vec![Step::Apply(recs[1].clone()), Step::Apply(recs[5].clone()), Step::Apply(recs[6].clone())]);
        assert_eq!(saved, Saved { data_bytes: 5 * B, blocks: 0, records: 4 });
    }

    #[test]
    fn attributes_and_xattrs_set_again_keep_only_the_last_and_the_fresh() {
        let img = InodeImage { ino: 3, mode: libc::S_IFREG | 0o644, nlink: 1, ..Default::default() };
        let x = |v: &[u8]| Record::Xattrs { ino: 3, attrs: vec![(b"user.a".to_vec(), v.to_vec())] };
        let recs = [
            Record::Inode { fresh: false, img },
            x(b"1"),
            Record::Inode { fresh: false, img: InodeImage { size: 1, ..img } },
            x(b"2"),
        ];
        let (s, saved) = steps(&recs);
        assert_eq!(s, vec![Step::Apply(recs[2].clone()), Step::Apply(recs[3].clone())]);
        assert_eq!(saved.records, 2);
        // A fresh inode resets what came before it, so it stays.
        let recs =
            [Record::Inode { fresh: true, img }, Record::Inode { fresh: false, img: InodeImage { size: 1, ..img } }];
        assert_eq!(steps(&recs).0.len(), 2);
    }

    #[test]
    fn entries_of_a_directory_removed_later_are_dropped() {
        let dir = InodeImage { ino: 4, mode: libc::S_IFDIR | 0o755, nlink: 2, parent: 1, ..Default::default() };
        let recs = [
            Record::Inode { fresh: true, img: dir },
            Record::Dirent { dir: 1, ino: 4, dtype: 4, name: b"d".to_vec() },
            Record::Dirent { dir: 4, ino: 7, dtype: 8, name: b"x".to_vec() },
            Record::Dirent { dir: 4, ino: 0, dtype: 0, name: b"x".to_vec() },
            Record::Dirent { dir: 1, ino: 0, dtype: 0, name: b"d".to_vec() },
            Record::FreeInode { ino: 4 },
        ];
        let (s, saved) = steps(&recs);
        assert_eq!(s, vec![Step::Apply(recs[1].clone()), Step::Apply(recs[4].clone()), Step::Apply(recs[5].clone())]);
        assert_eq!(saved.records, 3);
    }
}
