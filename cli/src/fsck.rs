//! `linefs fsck`: checks a node's public area with pm's [`linefs_pm::fsck`] and reports
//! every problem in one line each (exit 1 if any, 0 if clean). Read-only: the public file
//! is mapped read-only and nothing is written, so it runs on a node at rest or on a live
//! one (nicfs or a host-only mount holding it).
//!
//! Which node: `--pm-dir PMDIR` names the PM directory holding `node<I>` (as `up
//! --pm-dir`); otherwise the cluster description in `--dir` says where node I lives.
//!
//! Live or at rest: a node is live when its lock file (`nicfs.lock`) is locked (nicfs, or a
//! host-only mount, holds an exclusive `flock` of it for its life; fsck only probes the lock) or the
//! cluster's nicfs of the node runs. On a live node an orphan (a file with no name and no
//! link) may be open, so it is a note, not a problem; and a snapshot may be
//! mid-publication, so problems found are checked again a moment later and only those both
//! checks agree on are reported (live fsck is best-effort; at rest it is exact).

use std::path::{Path, PathBuf};
use std::time::Duration;

use linefs_ops::clusterdir::ClusterDir;
use linefs_ops::daemons::{self, Role};
use linefs_ops::util::{fail, CliResult};
use linefs_pm::fsck::{self, Options, Problem, Report};
use rustix::fs::FlockOperation;
use serde_json::{json, Value};

/// The options of `fsck`.
pub struct Args {
    pub node: usize,
    pub pm_dir: Option<PathBuf>,
    pub json: bool,
}

/// What `fsck` prints, and whether the node is clean.
pub struct Outcome {
    pub text: String,
    pub problems: usize,
}

/// How long a live node's second check waits.
const RECHECK: Duration = Duration::from_millis(500);

pub fn run(dir: &ClusterDir, args: &Args) -> CliResult<Outcome> {
    let path = match &args.pm_dir {
        Some(p) => p.join(format!("node{}", args.node)),
        None => {
            let desc = dir.load()?;
            let n = desc
                .nodes
                .get(args.node)
                .ok_or_else(|| fail(format!("node {} out of range ({} nodes)", args.node, desc.nodes.len())))?;
            n.pm_path.clone()
        }
    };
    let live = locked(&path) || (args.pm_dir.is_none() && daemons::running(dir, Role::Nicfs, args.node).is_some());
    let report = check(&path, live)?;
    Ok(Outcome { problems: report.problems.len(), text: render(args, &path, live, &report) })
}

/// Checks the node at `path`; a live node's problems are checked twice.
pub fn check(path: &Path, live: bool) -> CliResult<Report> {
    let opts = Options { live };
    let once = || fsck::check_dir(path, &opts).map_err(|e| fail(format!("{}: {e}", path.display())));
    let first = once()?;
    if !live || first.is_clean() {
        return Ok(first);
    }
    std::thread::sleep(RECHECK);
    let second = once()?;
    Ok(second.agreeing_with(&first))
}

/// Whether another process holds the node's lock (nicfs, a host-only mount: the `flock` of
/// pm's `node::LOCK_FILE`).
fn locked(node: &Path) -> bool {
    let Ok(f) = std::fs::File::open(node.join(linefs_pm::node::LOCK_FILE)) else { return false };
    match rustix::fs::flock(&f, FlockOperation::NonBlockingLockShared) {
        Ok(()) => {
            let _ = rustix::fs::flock(&f, FlockOperation::Unlock);
            false
        }
        Err(_) => true,
    }
}

fn one(p: &Problem) -> Value {
    json!({ "kind": p.kind.name(), "inode": p.ino, "detail": p.detail })
}

fn render(args: &Args, path: &Path, live: bool, r: &Report) -> String {
    if args.json {
        return json!({
            "node": args.node,
            "path": path.display().to_string(),
            "live": live,
            "clean": r.is_clean(),
            "problems": r.problems.iter().map(one).collect::<Vec<_>>(),
            "notes": r.notes.iter().map(one).collect::<Vec<_>>(),
            "inodes": r.inodes,
            "dirs": r.dirs,
            "blocks_used": r.blocks_used,
            "data_blocks": r.data_blocks,
        })
        .to_string();
    }
    let mut out = String::new();
    for p in &r.problems {
        out.push_str(&format!("{p}\n"));
    }
    for n in &r.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    let verdict = if r.is_clean() { "clean".to_string() } else { format!("{} problems", r.problems.len()) };
    out.push_str(&format!(
        "node {} ({}{}): {} inodes, {} directories, {} of {} data blocks in use: {verdict}",
        args.node,
        path.display(),
        if live { ", live" } else { "" },
        r.inodes,
        r.dirs,
        r.blocks_used,
        r.data_blocks
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_node_is_clean_and_a_damaged_one_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        let params = linefs_pm::layout::FormatParams { size: 8 << 20, log_size: 1 << 20, log_slots: 2, inodes: 256 };
        let node = tmp.path().join("node0");
        linefs_pm::mkfs::format_dir(&node, &params).unwrap();
        let dir = ClusterDir::new(tmp.path()).unwrap();
        let args = Args { node: 0, pm_dir: Some(tmp.path().to_path_buf()), json: false };
        let out = run(&dir, &args).unwrap();
        assert_eq!(out.problems, 0, "{}", out.text);
        assert!(out.text.ends_with(": clean"), "{}", out.text);
        let json: Value = serde_json::from_str(&run(&dir, &Args { json: true, ..args }).unwrap().text).unwrap();
        assert_eq!(json["clean"], true);
        // The root's link count made wrong (its checksum kept right).
        let public = node.join(linefs_pm::node::PUBLIC_FILE);
        let region = std::sync::Arc::new(linefs_pm::PmRegion::open(&public).unwrap());
        let geo = linefs_pm::layout::Superblock::read(&region).unwrap().geometry;
        let reader = linefs_pm::public::PublicReader::new(region.clone(), geo);
        let mut root = reader.read_inode(1).unwrap();
        root.img.nlink = 7;
        region.write(geo.inode_off(1), &root.encode()).unwrap();
        let args = Args { node: 0, pm_dir: Some(tmp.path().to_path_buf()), json: false };
        let out = run(&dir, &args).unwrap();
        assert_eq!(out.problems, 1, "{}", out.text);
        assert!(out.text.starts_with("inode 1: link-count: nlink 7"), "{}", out.text);
    }
}
