//! `linefs bench datapath`: linefs's data path against the strongest baselines a user has,
//! all over the same node-local (tmpfs) directory: the directory itself (no FUSE), the
//! project's fuser passthrough, Debian's bindfs with its best options ([`super::bindfs`]), and
//! linefs both host-only and with nicfs offload (the default mode of `linefs up`; a node of
//! its own with its nicfs and kworker, the mount one nicfs client).
//!
//! Workloads ([`Workload`]), each target using files of its own (`<target>-seq.dat`, ...):
//! - seqwrite: 16 KiB sequential writes of a `--size` file, fsync at the end (timed); MB/s.
//! - seqread: the same file read sequentially in 16 KiB reads; MB/s.
//! - randread: `size / 16 KiB` reads of 16 KiB at seeded random aligned offsets; MB/s, IOPS.
//! - randwrite: as many 16 KiB writes at seeded random offsets, fsync at the end; MB/s, IOPS.
//! - hotread: a 16 MiB file written and read once (untimed), then `4 × --ops` reads of 4 KiB
//!   at seeded random offsets; IOPS.
//! - fsync: `--ops` times append 16 KiB + fsync; latency avg, p50, p99, p99.9 (hdrhistogram).
//!
//! Caches before seqread and randread: the file is fsynced and its cached pages dropped with
//! `posix_fadvise(POSIX_FADV_DONTNEED)` through the target's own mount, which empties the
//! FUSE mount's page cache for it (the next reads go to the daemon). Nothing can be dropped
//! under that: the directory (and linefs's PM file) are tmpfs, i.e. memory. On the local
//! target the advice is a no-op, as it is on tmpfs.
//!
//! Fairness (ENVIRONMENT-NOTES, "Benchmarking"): before the first run every target writes and
//! deletes its working set once (first writes to fresh tmpfs pages cost far more than later
//! ones, and linefs's PM file is prefaulted). The targets are interleaved per workload
//! (A, B, C, D, A, B, C, D, ...) within each of `--runs` runs, and the report gives medians
//! (of each figure separately for latency).
//!
//! Ratios are *speed* ratios over the faster passthrough, >1 meaning faster than it: a
//! target's figure over the faster passthrough's for throughput, the faster passthrough's mean
//! latency over the target's for fsync; every row has one, and the summary gives both linefs
//! rows'. The goal column is the (report only), judged for each linefs row: every read
//! workload ≥ 1.2× the faster passthrough, sequential 16 KiB writes ≥ 2× (meant with the
//! writeback cache on), and for write+fsync linefs's own p99.9 ≤ 3× its p50; random writes
//! have no goal.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use hdrhistogram::Histogram;
use linefs_ops::cluster;
use linefs_ops::clusterdir::ClusterDir;
use linefs_ops::util::{fail, human_size, CliResult, Context};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::{bindfs, median, pending_json, BenchArgs, Header, Target, Testbed};

const SEED: u64 = 0xda7a_9a7e;
const BLOCK: usize = 16 * 1024;
const HOT_BLOCK: usize = 4 * 1024;
const HOT_SIZE: u64 = 16 << 20;
/// The goal for a workload.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Goal {
    /// linefs's speed over the faster passthrough's at least this.
    Speed(f64),
    /// linefs's own p99.9 latency at most this many times its p50.
    Tail(f64),
}

impl Goal {
    fn text(self) -> String {
        match self {
            Goal::Speed(r) => format!("speed >= {r:.1}"),
            Goal::Tail(k) => format!("p99.9 <= {k:.0} x p50"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    SeqWrite,
    SeqRead,
    RandRead,
    RandWrite,
    HotRead,
    Fsync,
}

/// Run order (each step needs the file the earlier ones left).
const ALL: [Workload; 6] = [
    Workload::SeqWrite,
    Workload::SeqRead,
    Workload::RandRead,
    Workload::RandWrite,
    Workload::HotRead,
    Workload::Fsync,
];

impl Workload {
    fn key(self) -> &'static str {
        match self {
            Workload::SeqWrite => "seqwrite",
            Workload::SeqRead => "seqread",
            Workload::RandRead => "randread",
            Workload::RandWrite => "randwrite",
            Workload::HotRead => "hotread",
            Workload::Fsync => "fsync",
        }
    }
    fn describe(self, size: u64, ops: u64) -> String {
        let s = human_size(size);
        match self {
            Workload::SeqWrite => format!("16 KiB sequential writes, {s}, fsync at the end (timed)"),
            Workload::SeqRead => format!("16 KiB sequential reads of the {s} file, its cache dropped first"),
            Workload::RandRead => {
                format!(
                    "{} 16 KiB reads at random offsets in the {s} file, its cache dropped first",
                    size / BLOCK as u64
                )
            }
            Workload::RandWrite => {
                format!("{} 16 KiB writes at random offsets in the {s} file, fsync at the end", size / BLOCK as u64)
            }
            Workload::HotRead => format!("{} 4 KiB reads at random offsets of a hot 16 MiB file", hot_ops(ops)),
            Workload::Fsync => format!("16 KiB append + fsync, {ops} times; latency of each pair (µs)"),
        }
    }
    /// The figure compared: MB/s, IOPS, or mean latency (µs).
    fn unit(self) -> &'static str {
        match self {
            Workload::HotRead => "IOPS",
            Workload::Fsync => "avg µs",
            _ => "MB/s",
        }
    }
    fn higher_is_better(self) -> bool {
        self != Workload::Fsync
    }
    /// The goal (none for random writes).
    fn goal(self) -> Option<Goal> {
        match self {
            Workload::SeqRead | Workload::RandRead | Workload::HotRead => Some(Goal::Speed(1.2)),
            Workload::SeqWrite => Some(Goal::Speed(2.0)),
            Workload::Fsync => Some(Goal::Tail(3.0)),
            Workload::RandWrite => None,
        }
    }
}

fn hot_ops(ops: u64) -> u64 {
    ops.saturating_mul(4)
}

/// One measurement.
#[derive(Debug, Clone, Copy, Default)]
struct Sample {
    mb_s: f64,
    iops: f64,
    /// fsync only (µs).
    avg: f64,
    p50: f64,
    p99: f64,
    p999: f64,
}

impl Sample {
    fn io(bytes: u64, ops: u64, secs: f64) -> Sample {
        let secs = secs.max(1e-9);
        Sample { mb_s: bytes as f64 / 1e6 / secs, iops: ops as f64 / secs, ..Sample::default() }
    }
    fn headline(&self, w: Workload) -> f64 {
        match w {
            Workload::HotRead => self.iops,
            Workload::Fsync => self.avg,
            _ => self.mb_s,
        }
    }
}

/// Medians of each figure over the runs.
fn med(samples: &[Sample]) -> Sample {
    let m = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
    Sample {
        mb_s: m(|s| s.mb_s),
        iops: m(|s| s.iops),
        avg: m(|s| s.avg),
        p50: m(|s| s.p50),
        p99: m(|s| s.p99),
        p999: m(|s| s.p999),
    }
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 + 1).collect()
}

/// Drops the file's cached pages through this mount (see the module notes).
fn drop_cache(path: &Path) -> CliResult<()> {
    let f = File::open(path).ctx(|| format!("{}: open", path.display()))?;
    f.sync_all().ctx(|| format!("{}: fsync", path.display()))?;
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)
        .ctx(|| format!("{}: posix_fadvise(DONTNEED)", path.display()))
}

/// Writes `bytes` to `path` in 1 MiB writes, fsyncs, deletes it: warms fresh pages.
fn warm(dir: &Path, key: &str, bytes: u64) -> CliResult<()> {
    let path = dir.join(format!("{key}-warm.dat"));
    let what = || format!("warm-up on {}", path.display());
    let buf = pattern(1 << 20);
    let mut f = File::create(&path).ctx(what)?;
    let mut left = bytes;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        f.write_all(&buf[..n]).ctx(what)?;
        left -= n as u64;
    }
    f.sync_all().ctx(what)?;
    drop(f);
    fs::remove_file(&path).ctx(what)
}

/// Random aligned block offsets in a file of `size` bytes, seeded.
fn offsets(size: u64, block: usize, n: u64, seed: u64) -> Vec<u64> {
    let blocks = (size / block as u64).max(1);
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(0..blocks) * block as u64).collect()
}

/// One workload on one target's directory.
fn step(w: Workload, dir: &Path, key: &str, size: u64, ops: u64, run: u64) -> CliResult<Sample> {
    let seq = dir.join(format!("{key}-seq.dat"));
    let what = |p: &Path| format!("{} on {}", w.key(), p.display());
    let buf = pattern(BLOCK);
    let nblocks = size / BLOCK as u64;
    match w {
        Workload::SeqWrite => {
            let mut f = OpenOptions::new().create(true).write(true).truncate(true).open(&seq).ctx(|| what(&seq))?;
            let start = Instant::now();
            for _ in 0..nblocks {
                f.write_all(&buf).ctx(|| what(&seq))?;
            }
            f.sync_all().ctx(|| what(&seq))?;
            Ok(Sample::io(size, nblocks, start.elapsed().as_secs_f64()))
        }
        Workload::SeqRead => {
            drop_cache(&seq)?;
            let mut f = File::open(&seq).ctx(|| what(&seq))?;
            let mut rbuf = vec![0u8; BLOCK];
            let mut total = 0u64;
            let start = Instant::now();
            loop {
                let n = f.read(&mut rbuf).ctx(|| what(&seq))?;
                if n == 0 {
                    break;
                }
                total += n as u64;
            }
            let secs = start.elapsed().as_secs_f64();
            if total != size {
                return Err(fail(format!("{}: read {total} bytes, {size} expected", what(&seq))));
            }
            Ok(Sample::io(total, total.div_ceil(BLOCK as u64), secs))
        }
        Workload::RandRead => {
            drop_cache(&seq)?;
            let f = File::open(&seq).ctx(|| what(&seq))?;
            let offs = offsets(size, BLOCK, nblocks, SEED + run);
            let mut rbuf = vec![0u8; BLOCK];
            let start = Instant::now();
            for &o in &offs {
                f.read_exact_at(&mut rbuf, o).ctx(|| what(&seq))?;
            }
            Ok(Sample::io(nblocks * BLOCK as u64, nblocks, start.elapsed().as_secs_f64()))
        }
        Workload::RandWrite => {
            let f = OpenOptions::new().write(true).open(&seq).ctx(|| what(&seq))?;
            let offs = offsets(size, BLOCK, nblocks, SEED + 1000 + run);
            let start = Instant::now();
            for &o in &offs {
                f.write_all_at(&buf, o).ctx(|| what(&seq))?;
            }
            f.sync_all().ctx(|| what(&seq))?;
            let secs = start.elapsed().as_secs_f64();
            drop(f);
            fs::remove_file(&seq).ctx(|| what(&seq))?;
            Ok(Sample::io(nblocks * BLOCK as u64, nblocks, secs))
        }
        Workload::HotRead => {
            let hot = dir.join(format!("{key}-hot.dat"));
            let big = pattern(1 << 20);
            let mut f = File::create(&hot).ctx(|| what(&hot))?;
            for _ in 0..HOT_SIZE >> 20 {
                f.write_all(&big).ctx(|| what(&hot))?;
            }
            f.sync_all().ctx(|| what(&hot))?;
            drop(f);
            let f = File::open(&hot).ctx(|| what(&hot))?;
            let mut whole = vec![0u8; 1 << 20];
            for i in 0..HOT_SIZE >> 20 {
                f.read_exact_at(&mut whole, i << 20).ctx(|| what(&hot))?;
            }
            let n = hot_ops(ops);
            let offs = offsets(HOT_SIZE, HOT_BLOCK, n, SEED + 2000 + run);
            let mut rbuf = vec![0u8; HOT_BLOCK];
            let start = Instant::now();
            for &o in &offs {
                f.read_exact_at(&mut rbuf, o).ctx(|| what(&hot))?;
            }
            let secs = start.elapsed().as_secs_f64();
            drop(f);
            fs::remove_file(&hot).ctx(|| what(&hot))?;
            Ok(Sample::io(n * HOT_BLOCK as u64, n, secs))
        }
        Workload::Fsync => {
            let path = dir.join(format!("{key}-fsync.dat"));
            let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).ctx(|| what(&path))?;
            let mut f = File::create(&path).ctx(|| what(&path))?;
            let start = Instant::now();
            for _ in 0..ops {
                let t = Instant::now();
                f.write_all(&buf).ctx(|| what(&path))?;
                f.sync_all().ctx(|| what(&path))?;
                hist.record(t.elapsed().as_nanos().clamp(1, 60_000_000_000) as u64).ctx(|| what(&path))?;
            }
            let mut s = Sample::io(ops * BLOCK as u64, ops, start.elapsed().as_secs_f64());
            drop(f);
            fs::remove_file(&path).ctx(|| what(&path))?;
            let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
            s.avg = hist.mean() / 1000.0;
            s.p50 = us(0.5);
            s.p99 = us(0.99);
            s.p999 = us(0.999);
            Ok(s)
        }
    }
}

/// Every target's samples for one workload, in target order.
struct Row {
    w: Workload,
    samples: Vec<(Target, Vec<Sample>)>,
}

impl Row {
    fn median(&self, t: Target) -> Option<Sample> {
        self.samples.iter().find(|(x, _)| *x == t).map(|(_, s)| med(s))
    }
    /// The faster of the two passthroughs (by median headline).
    fn faster_passthrough(&self) -> Option<(Target, Sample)> {
        let w = self.w;
        [Target::Passthrough, Target::Bindfs].into_iter().filter_map(|t| self.median(t).map(|s| (t, s))).reduce(
            |a, b| {
                let (x, y) = (a.1.headline(w), b.1.headline(w));
                let b_faster = if w.higher_is_better() { y > x } else { y < x };
                if b_faster {
                    b
                } else {
                    a
                }
            },
        )
    }
    /// Sample `t`'s speed relative to `s` (>1: `t` faster).
    fn speed(&self, t: &Sample, s: &Sample) -> f64 {
        let (l, x) = (t.headline(self.w), s.headline(self.w));
        if self.w.higher_is_better() {
            l / x.max(1e-12)
        } else {
            x / l.max(1e-12)
        }
    }
    /// Target `t`'s speed over the faster passthrough (>1: `t` faster).
    fn speed_vs_passthrough(&self, t: Target) -> Option<f64> {
        let (_, p) = self.faster_passthrough()?;
        Some(self.speed(&self.median(t)?, &p))
    }
    /// Whether the goal for this workload is reached by linefs target `t`.
    fn goal_reached(&self, t: Target) -> Option<bool> {
        match self.w.goal()? {
            Goal::Speed(min) => self.speed_vs_passthrough(t).map(|r| r >= min),
            Goal::Tail(k) => self.median(t).map(|l| l.p999 <= k * l.p50),
        }
    }
}

pub(super) fn run(dir: &ClusterDir, args: &BenchArgs) -> CliResult<String> {
    let size = args.size / BLOCK as u64 * BLOCK as u64;
    if size < HOT_BLOCK as u64 * 4 || args.ops == 0 || args.runs == 0 {
        return Err(fail("--size must be at least 64K, --ops and --runs positive"));
    }
    let working = size + HOT_SIZE + args.ops * BLOCK as u64;
    // linefs's log holds the file, its random overwrites, the hot file and the appends.
    let pm_size = args.pm_size.unwrap_or_else(|| {
        working.saturating_add(size).saturating_mul(2).saturating_add(512 << 20).max(cluster::DEFAULT_PM_SIZE)
    });
    let bed = Testbed::new(dir, args.pm_dir.as_deref(), pm_size, true, &args.options)?;
    let header = Header::new(&bed);
    let say = |m: String| {
        if !args.json {
            eprintln!("linefs: bench datapath: {m}");
        }
    };
    for (t, path) in &bed.targets {
        say(format!("warming {} ({} written and deleted)", t.label(), human_size(working)));
        warm(path, t.key(), working)?;
    }
    let mut rows: Vec<Row> =
        ALL.iter().map(|&w| Row { w, samples: bed.targets.iter().map(|(t, _)| (*t, Vec::new())).collect() }).collect();
    for run in 0..args.runs {
        for row in rows.iter_mut() {
            say(format!("run {}/{}: {}", run + 1, args.runs, row.w.key()));
            for (i, (t, path)) in bed.targets.iter().enumerate() {
                let s = step(row.w, path, t.key(), size, args.ops, run)?;
                row.samples[i].1.push(s);
            }
        }
    }
    let skipped = bed.skipped.clone();
    drop(bed);
    let r = Report { args: args.clone(), size, header, rows, skipped };
    Ok(if args.json { r.json().to_string() } else { r.table() })
}

struct Report {
    args: BenchArgs,
    size: u64,
    header: Header,
    rows: Vec<Row>,
    skipped: Vec<(Target, String)>,
}

fn sample_json(w: Workload, s: &Sample) -> Value {
    match w {
        Workload::Fsync => json!({
            "avg_us": s.avg, "p50_us": s.p50, "p99_us": s.p99, "p999_us": s.p999,
            "ops_per_s": s.iops, "mb_per_s": s.mb_s,
        }),
        _ => json!({ "mb_per_s": s.mb_s, "iops": s.iops }),
    }
}

impl Report {
    fn json(&self) -> Value {
        let mut workloads = serde_json::Map::new();
        for row in &self.rows {
            let w = row.w;
            let mut results: Vec<Value> = row
                .samples
                .iter()
                .map(|(t, ss)| {
                    let mut v = sample_json(w, &med(ss));
                    v["target"] = json!(t.key());
                    v["status"] = json!("ok");
                    v["runs"] = ss.iter().map(|s| s.headline(w)).collect::<Vec<_>>().into();
                    v
                })
                .collect();
            for (t, why) in &self.skipped {
                results.push(json!({ "target": t.key(), "status": why }));
            }
            let fp = row.faster_passthrough();
            let goal = w.goal();
            workloads.insert(
                w.key().to_string(),
                json!({
                    "workload": w.describe(self.size, self.args.ops),
                    "figure": w.unit(),
                    "higher_is_better": w.higher_is_better(),
                    "results": results,
                    "faster_passthrough": fp.map(|(t, _)| t.key()),
                    "linefs_speed_vs_faster_passthrough": row.speed_vs_passthrough(Target::Linefs),
                    "linefs_offload_speed_vs_faster_passthrough": row.speed_vs_passthrough(Target::LinefsOffload),
                    "goal": goal.map(|g| g.text()),
                    "goal_reached": row.goal_reached(Target::Linefs),
                    "goal_reached_offload": row.goal_reached(Target::LinefsOffload),
                }),
            );
        }
        json!({
            "bench": "datapath",
            "date": self.header.date,
            "command": self.header.command,
            "size_bytes": self.size,
            "ops": self.args.ops,
            "runs": self.args.runs,
            "bindfs_options": bindfs::OPTIONS.join(" "),
            "ratio_meaning": "a target's speed / the faster passthrough's (>1: faster); \
                              for fsync the passthrough's mean latency / the target's; \
                              linefs is host-only, linefs_offload with nicfs offload",
            "pm": self.header.pm_json(),
            "workloads": workloads,
            "pending": pending_json(),
        })
    }

    fn table(&self) -> String {
        let workload = format!(
            "{} file, 16 KiB I/O, hot 16 MiB file, {} write+fsync pairs; medians of {} interleaved runs",
            human_size(self.size),
            self.args.ops,
            self.args.runs
        );
        let mut o = self.header.table("datapath", &workload);
        o.push_str(&format!("bindfs options: {}\n", bindfs::OPTIONS.join(" ")));
        o.push_str("caches: fsync + posix_fadvise(DONTNEED) through each mount before seqread and randread\n\n");
        for row in &self.rows {
            let w = row.w;
            o.push_str(&format!("{} — {}\n", w.key(), w.describe(self.size, self.args.ops)));
            if w == Workload::Fsync {
                o.push_str(&format!(
                    "{:<34} {:>9} {:>9} {:>9} {:>9} {:>9} {:>12}\n",
                    "target (µs)", "avg", "p50", "p99", "p99.9", "ops/s", "speed vs pt"
                ));
            } else {
                o.push_str(&format!(
                    "{:<34} {:>10} {:>10} {:>22} {:>12}\n",
                    "target", "MB/s", "IOPS", "runs (min–max)", "speed vs pt"
                ));
            }
            for (t, ss) in &row.samples {
                let m = med(ss);
                let ratio = row.speed_vs_passthrough(*t).unwrap_or(f64::NAN);
                if w == Workload::Fsync {
                    o.push_str(&format!(
                        "{:<34} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.0} {:>12.3}\n",
                        t.label(),
                        m.avg,
                        m.p50,
                        m.p99,
                        m.p999,
                        m.iops,
                        ratio
                    ));
                } else {
                    let hs: Vec<f64> = ss.iter().map(|s| s.headline(w)).collect();
                    let lo = hs.iter().copied().fold(f64::INFINITY, f64::min);
                    let hi = hs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    o.push_str(&format!(
                        "{:<34} {:>10.1} {:>10.0} {:>22} {:>12.3}\n",
                        t.label(),
                        m.mb_s,
                        m.iops,
                        if w == Workload::HotRead {
                            format!("{lo:.0}–{hi:.0} IOPS")
                        } else {
                            format!("{lo:.1}–{hi:.1} MB/s")
                        },
                        ratio
                    ));
                }
            }
            for (t, why) in &self.skipped {
                o.push_str(&format!("{:<34} {why}\n", t.label()));
            }
            o.push('\n');
        }
        o.push_str(&self.summary());
        o
    }

    /// Side by side: every target's headline figure, each linefs row's speed and goal.
    fn summary(&self) -> String {
        let mut o = String::from(
            "summary (medians; speed = the target's / the faster passthrough's, >1: faster; \
             host = linefs host-only, offload = linefs + nicfs offload)\n",
        );
        let targets: Vec<Target> =
            self.rows.first().map(|r| r.samples.iter().map(|(t, _)| *t).collect()).unwrap_or_default();
        o.push_str(&format!("{:<10} {:>7}", "workload", "figure"));
        for t in &targets {
            o.push_str(&format!(" {:>15}", t.key()));
        }
        o.push_str(&format!(
            " {:>16} {:>10} {:>13} {:>18} {:>14}\n",
            "faster pt", "host speed", "offload speed", "goal", "reached h/o"
        ));
        let yes_no = |r: Option<bool>| match r {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        for row in &self.rows {
            o.push_str(&format!("{:<10} {:>7}", row.w.key(), row.w.unit()));
            for t in &targets {
                let v = row.median(*t).map_or(f64::NAN, |s| s.headline(row.w));
                o.push_str(&format!(" {v:>15.1}"));
            }
            match row.faster_passthrough() {
                Some((t, _)) => {
                    let speed = |x: Target| row.speed_vs_passthrough(x).unwrap_or(f64::NAN);
                    let goal = row.w.goal().map_or("-".to_string(), |g| g.text());
                    let reached = format!(
                        "{}/{}",
                        yes_no(row.goal_reached(Target::Linefs)),
                        yes_no(row.goal_reached(Target::LinefsOffload))
                    );
                    o.push_str(&format!(
                        " {:>16} {:>10.3} {:>13.3} {goal:>18} {reached:>14}\n",
                        t.key(),
                        speed(Target::Linefs),
                        speed(Target::LinefsOffload)
                    ));
                }
                None => o.push_str(&format!(" {:>16}\n", "-")),
            }
        }
        o
    }
}
