//! Running one workload on traced PM and checking every crash state it can leave — once
//! with the client publishing directly (host-only), once by nicfs's publication steps (so
//! that nicfs's fetch, coalescing and kworker's copy-list execution are crashed at every
//! fence too).
//!
//! The oracle. Every call linefs acknowledges is durable when it returns (the log entry is
//! persisted and fenced first), whatever persistence point follows it. So the expected
//! states are the sequence S0 (the starting tree), S1 … Sn, where Sk is the tree after step
//! k (operation and persistence point) returned, read live from the traced file system. A
//! crash image taken while step k+1 was running must recover to exactly Sk or Sk+1 —
//! nothing acknowledged is lost, nothing half-done is visible, and the recovered state is
//! that of a prefix of the steps. That is stronger than POSIX asks (which lets a step
//! without fsync vanish). The live states themselves are checked against an independent
//! model of POSIX by libfs's reference-model test.
//!
//! Every recovered image must pass pm's fsck (`linefs_pm::fsck`: link counts, parents, the
//! tree, every block owned once, checksums, no orphan) and be consistent
//! ([`crate::snapshot::snapshot`]: link
//! counts, parents, readable data and attributes), and, for a share of the images, usable:
//! a file created after recovery survives publication and another mount, and nothing else
//! changes on the way.

use crate::snapshot::{diff, lookup_path, snapshot, split, Snapshot};
use crate::workload::{Op, Persist, Step, Workload};
use libfs::{Cred, Fs, FsOptions, FsResult, SetAttr, ROOT_INO};
use linefs_pm::layout::{FormatParams, Geometry};
use linefs_pm::trace::CrashOpts;
use linefs_pm::PmRegion;
use std::sync::Arc;

/// Geometry of the traced PM: small, so that images are cheap to copy.
pub(crate) const PM: FormatParams = FormatParams { size: 4 << 20, log_size: 512 << 10, log_slots: 1, inodes: 256 };

pub(crate) fn opts() -> FsOptions {
    FsOptions { background_publish: false, ..Default::default() }
}

/// The workload's client publishes by nicfs's steps or by pm's direct publisher.
fn workload_opts(nicfs_steps: bool) -> FsOptions {
    FsOptions { nicfs_steps, ..opts() }
}

fn apply(fs: &Fs, op: &Op) -> FsResult<()> {
    let root = Cred::root();
    let parent = |p: &str| lookup_path(fs, split(p).0).map(|a| a.ino);
    let name = |p: &'static str| split(p).1.as_bytes();
    match op {
        Op::Creat(p) => {
            let (a, fh) = fs.create(&root, parent(p)?, name(p), 0o644, 0, libc::O_RDWR | libc::O_CREAT)?;
            fs.release(a.ino, fh);
            fs.forget(a.ino, 1);
        }
        Op::Mkdir(p) => {
            let a = fs.mkdir(&root, parent(p)?, name(p), 0o755, 0)?;
            fs.forget(a.ino, 1);
        }
        Op::Write(p, off, len, byte) => {
            let a = lookup_path(fs, p)?;
            fs.write(&root, a.ino, *off, &vec![*byte; *len])?;
        }
        Op::Append(p, len, byte) => {
            let a = lookup_path(fs, p)?;
            fs.write(&root, a.ino, a.size, &vec![*byte; *len])?;
        }
        Op::Falloc(p, off, len, mode) => {
            let a = lookup_path(fs, p)?;
            fs.fallocate(&root, a.ino, *off, *len, *mode)?;
        }
        Op::Truncate(p, size) => {
            let a = lookup_path(fs, p)?;
            fs.setattr(&root, a.ino, &SetAttr { size: Some(*size), ..Default::default() })?;
        }
        Op::Link(from, to) => {
            let a = lookup_path(fs, from)?;
            let l = fs.link(&root, a.ino, parent(to)?, name(to))?;
            fs.forget(l.ino, 1);
        }
        Op::Unlink(p) => fs.unlink(&root, parent(p)?, name(p))?,
        Op::Rmdir(p) => fs.rmdir(&root, parent(p)?, name(p))?,
        Op::Rename(from, to, flags) => fs.rename(&root, parent(from)?, name(from), parent(to)?, name(to), *flags)?,
        Op::Symlink(p, target) => {
            let a = fs.symlink(&root, parent(p)?, name(p), target.as_bytes())?;
            fs.forget(a.ino, 1);
        }
        Op::SetXattr(p, attr, len) => {
            let a = lookup_path(fs, p)?;
            fs.setxattr(&root, a.ino, attr.as_bytes(), &vec![b'x'; *len], 0)?;
        }
        Op::RemoveXattr(p, attr) => {
            let a = lookup_path(fs, p)?;
            fs.removexattr(&root, a.ino, attr.as_bytes())?;
        }
    }
    Ok(())
}

/// Run a step: the operation (a failing one changes nothing), then its persistence point.
pub(crate) fn run_step(fs: &Fs, step: &Step) {
    let _ = apply(fs, &step.op);
    let target = || lookup_path(fs, step.op.target()).map(|a| a.ino);
    let _ = match step.persist {
        Persist::Fsync => target().and_then(|ino| fs.fsync(ino, false)),
        Persist::Fdatasync => target().and_then(|ino| fs.fsync(ino, true)),
        Persist::Sync => fs.sync_all(),
        Persist::None => Ok(()),
    };
}

/// The starting tree, part published and part in the log.
pub(crate) fn setup(fs: &Fs) -> FsResult<()> {
    apply(fs, &Op::Mkdir("A"))?;
    apply(fs, &Op::Mkdir("B"))?;
    apply(fs, &Op::Creat("A/foo"))?;
    apply(fs, &Op::Write("A/foo", 0, 8292, 1))?;
    apply(fs, &Op::SetXattr("A/foo", "user.a", 10))?;
    fs.sync_all()?;
    apply(fs, &Op::Creat("bar"))?;
    apply(fs, &Op::Write("bar", 0, 3000, 2))?;
    Ok(())
}

/// What checking one workload found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// Crash points recorded (fences and step ends).
    pub points: usize,
    /// Crash images recovered and checked.
    pub states: usize,
    /// The first violation, if any.
    pub violation: Option<String>,
}

/// Check one workload twice — published by pm's direct publisher (the host-only mode's),
/// then by nicfs's steps (a fetched copy, coalescing, a deferred copy list executed as
/// kworker does) — at every crash point, with the images `crash` allows for each.
pub fn check(w: &Workload, crash: &CrashOpts) -> Outcome {
    let mut out = Outcome::default();
    for nicfs_steps in [false, true] {
        if let Err(e) = check_into(w, crash, nicfs_steps, &mut out) {
            let how = if nicfs_steps { "published by nicfs's steps" } else { "published directly" };
            out.violation = Some(format!("{how}: {e}"));
            break;
        }
    }
    out
}

fn check_into(w: &Workload, crash: &CrashOpts, nicfs_steps: bool, out: &mut Outcome) -> Result<(), String> {
    let geo = Geometry::compute(&PM).map_err(|e| e.to_string())?;
    let region = Arc::new(PmRegion::traced(PM.size));
    linefs_pm::mkfs::format_region(&region, &geo).map_err(|e| format!("format: {e}"))?;
    let fs = Fs::mount_region(region.clone(), workload_opts(nicfs_steps)).map_err(|e| format!("mount: {e}"))?;
    setup(&fs).map_err(|e| format!("setup: {e}"))?;
    let tracer = region.tracer().ok_or("region is not traced")?;
    let mut states: Vec<Snapshot> = vec![snapshot(&fs).map_err(|e| format!("before step 0: {e}"))?];
    tracer.start_recording();
    for (i, step) in w.steps.iter().enumerate() {
        run_step(&fs, step);
        states.push(snapshot(&fs).map_err(|e| format!("live, after step {i}: {e}"))?);
        tracer.checkpoint(&format!("step {i} done"));
    }
    let points = tracer.crash_points();
    drop(fs);
    out.points += points.len();
    let mut acked = 0usize;
    for point in &points {
        for img in point.images(crash) {
            out.states += 1;
            let r = Arc::new(PmRegion::traced_from_image(img.image));
            let at = || format!("crash point {} ({}), image {}", point.index, point.label, img.description);
            let fs = Fs::mount_region(r.clone(), opts()).map_err(|e| format!("{}: recovery failed: {e}", at()))?;
            fsck(&r).map_err(|e| format!("{}: fsck after recovery: {e}", at()))?;
            let got = snapshot(&fs).map_err(|e| format!("{}: inconsistent after recovery: {e}", at()))?;
            let ok = &states[acked..(acked + 2).min(states.len())];
            if !ok.contains(&got) {
                let want = ok.last().expect("a state");
                return Err(format!(
                    "{}: recovered a state that is neither S{acked} nor S{} (diff against S{}: {})",
                    at(),
                    acked + 1,
                    acked + ok.len() - 1,
                    diff(want, &got)
                ));
            }
            if out.states.is_multiple_of(7) {
                still_usable(fs, &r, &got).map_err(|e| format!("{}: {e}", at()))?;
            }
        }
        if point.label == format!("step {acked} done") {
            acked += 1;
        }
    }
    Ok(())
}

/// pm's fsck of a recovered image (at rest: recovery has freed every orphan): any problem
/// is a violation.
pub(crate) fn fsck(r: &Arc<PmRegion>) -> Result<(), String> {
    let report =
        linefs_pm::fsck::check_packed(r, &linefs_pm::fsck::Options { live: false }).map_err(|e| e.to_string())?;
    if report.is_clean() {
        return Ok(());
    }
    let lines: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    Err(lines.join("; "))
}

/// A recovered file system keeps working: a new file survives publication and a remount,
/// and nothing else changes.
fn still_usable(fs: Fs, r: &Arc<PmRegion>, got: &Snapshot) -> Result<(), String> {
    let root = Cred::root();
    let (a, fh) = fs.create(&root, ROOT_INO, b"after", 0o600, 0, libc::O_RDWR).map_err(|e| format!("create: {e}"))?;
    fs.write(&root, a.ino, 0, b"post-crash").map_err(|e| format!("write after recovery: {e}"))?;
    fs.release(a.ino, fh);
    fs.sync_all().map_err(|e| format!("publish after recovery: {e}"))?;
    drop(fs);
    let fs = Fs::mount_region(r.clone(), opts()).map_err(|e| format!("second mount: {e}"))?;
    let mut again = snapshot(&fs).map_err(|e| format!("inconsistent after reuse: {e}"))?;
    let after = again.remove("/after").ok_or("file written after recovery was lost")?;
    if after.data != b"post-crash" {
        return Err("file written after recovery has the wrong contents".into());
    }
    if &again != got {
        return Err(format!("state changed across publication and remount: {}", diff(got, &again)));
    }
    Ok(())
}
