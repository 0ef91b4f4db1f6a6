//! `linefs bench seqwrite` and `linefs bench fsync`: 16 KiB writes through each target — the
//! node-local directory, the FUSE passthrough, bindfs, linefs host-only and linefs with nicfs
//! offload (the default mount of `linefs up`) — in `--runs` interleaved rounds (A, B, C, …,
//! A, B, C, …), each figure the median of the rounds.
//!
//! - `seqwrite`: one file, `--size` bytes in 16 KiB writes, fsync at the end (timed); MB/s.
//! - `fsync`: 16 KiB append + fsync, `--count` times, one file; each pair's latency in an HDR
//!   histogram (ns): mean, p50, p99, p99.9, p99.99 and max of each round, and the medians of
//!   those over the rounds.
//!
//! Ratios: each linefs mode's headline figure (MB/s; mean latency) divided by the target's.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use hdrhistogram::Histogram;
use linefs_ops::cluster;
use linefs_ops::clusterdir::ClusterDir;
use linefs_ops::util::{fail, human_size, CliResult, Context};
use serde_json::{json, Value};

use super::{median, pending_json, pending_table, BenchArgs, BenchName, Header, Target, Testbed, WRITE_SIZE};

/// One round's figures on one target.
#[derive(Debug, Clone)]
enum Figures {
    Seq { bytes: u64, secs: f64 },
    Lat { hist: Histogram<u64>, secs: f64 },
}

/// The statistics a report shows, in order: (JSON key, table heading).
const LAT_STATS: [(&str, &str); 7] = [
    ("avg_us", "avg"),
    ("p50_us", "p50"),
    ("p99_us", "p99"),
    ("p999_us", "p99.9"),
    ("p9999_us", "p99.99"),
    ("max_us", "max"),
    ("ops_per_s", "ops/s"),
];

impl Figures {
    fn stats(&self) -> Value {
        match self {
            Figures::Seq { bytes, secs } => {
                json!({ "bytes": bytes, "seconds": secs, "mb_per_s": *bytes as f64 / 1e6 / secs.max(1e-9) })
            }
            Figures::Lat { hist, secs } => {
                let us = |q: f64| hist.value_at_quantile(q) as f64 / 1000.0;
                json!({
                    "ops": hist.len(),
                    "seconds": secs,
                    "ops_per_s": hist.len() as f64 / secs.max(1e-9),
                    "avg_us": hist.mean() / 1000.0,
                    "p50_us": us(0.5),
                    "p99_us": us(0.99),
                    "p999_us": us(0.999),
                    "p9999_us": us(0.9999),
                    "max_us": hist.max() as f64 / 1000.0,
                })
            }
        }
    }
}

fn pattern() -> Vec<u8> {
    (0..WRITE_SIZE).map(|i| (i % 251) as u8 + 1).collect()
}

/// One file, 16 KiB sequential writes, `size` bytes, fsync at the end; timed from the first
/// write to the end of the fsync.
fn seqwrite(dir: &Path, size: u64) -> CliResult<Figures> {
    let path = dir.join("seqwrite.dat");
    let what = || format!("seqwrite on {}", path.display());
    let buf = pattern();
    let mut f = OpenOptions::new().create(true).write(true).truncate(true).open(&path).ctx(what)?;
    let start = Instant::now();
    let mut left = size;
    while left > 0 {
        let n = left.min(WRITE_SIZE as u64) as usize;
        f.write_all(&buf[..n]).ctx(what)?;
        left -= n as u64;
    }
    f.sync_all().ctx(what)?;
    let secs = start.elapsed().as_secs_f64();
    drop(f);
    std::fs::remove_file(&path).ctx(what)?;
    Ok(Figures::Seq { bytes: size, secs })
}

/// `count` times: append 16 KiB, fsync; each pair's latency in the histogram (ns).
fn fsync_latency(dir: &Path, count: u64) -> CliResult<Figures> {
    let path = dir.join("fsync.dat");
    let what = || format!("fsync bench on {}", path.display());
    let buf = pattern();
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).ctx(what)?;
    let mut f: File = OpenOptions::new().create(true).write(true).truncate(true).open(&path).ctx(what)?;
    let start = Instant::now();
    for _ in 0..count {
        let t = Instant::now();
        f.write_all(&buf).ctx(what)?;
        f.sync_all().ctx(what)?;
        let ns = t.elapsed().as_nanos().clamp(1, 60_000_000_000) as u64;
        hist.record(ns).ctx(what)?;
    }
    let secs = start.elapsed().as_secs_f64();
    drop(f);
    std::fs::remove_file(&path).ctx(what)?;
    Ok(Figures::Lat { hist, secs })
}

/// Runs `seqwrite` or `fsync`.
pub(super) fn run(dir: &ClusterDir, args: &BenchArgs) -> CliResult<String> {
    if args.size == 0 || args.count == 0 || args.runs == 0 {
        return Err(fail("--size, --count and --runs must be positive"));
    }
    let pm_size = args.pm_size.unwrap_or_else(|| {
        let need = match args.name {
            BenchName::Seqwrite => args.size,
            _ => args.count * WRITE_SIZE as u64,
        };
        need.saturating_mul(2).saturating_add(512 << 20).max(cluster::DEFAULT_PM_SIZE)
    });
    let bed = Testbed::new(dir, args.pm_dir.as_deref(), pm_size, true, &args.options)?;
    let header = Header::new(&bed);

    // Every target is warmed once (a first write to fresh tmpfs pages costs far more than
    // later ones; the PM file was prefaulted at format), then measured round by round.
    let mut results: Vec<(Target, Vec<Figures>)> = bed.targets.iter().map(|(t, _)| (*t, Vec::new())).collect();
    for (_, path) in &bed.targets {
        match args.name {
            BenchName::Seqwrite => drop(seqwrite(path, args.size.min(64 << 20))?),
            _ => drop(fsync_latency(path, (args.count / 10).clamp(1, 1000))?),
        }
    }
    for round in 0..args.runs {
        for (i, (target, path)) in bed.targets.iter().enumerate() {
            if !args.json {
                eprintln!(
                    "linefs: bench {}: round {}/{} on {} ...",
                    args.name.as_str(),
                    round + 1,
                    args.runs,
                    target.label()
                );
            }
            let figures = match args.name {
                BenchName::Seqwrite => seqwrite(path, args.size)?,
                _ => fsync_latency(path, args.count)?,
            };
            results[i].1.push(figures);
        }
    }
    let skipped = bed.skipped.clone();
    drop(bed);

    let report = Report { name: args.name, args: args.clone(), header, results, skipped };
    Ok(if args.json { report.json().to_string() } else { report.table() })
}

struct Report {
    name: BenchName,
    args: BenchArgs,
    header: Header,
    results: Vec<(Target, Vec<Figures>)>,
    skipped: Vec<(Target, String)>,
}

impl Report {
    /// The median over the rounds of statistic `key` on `target`.
    fn stat(&self, target: Target, key: &str) -> f64 {
        let Some((_, runs)) = self.results.iter().find(|(t, _)| *t == target) else { return f64::NAN };
        median(runs.iter().map(|f| f.stats()[key].as_f64().unwrap_or(f64::NAN)).collect())
    }

    /// The statistic the ratios compare.
    fn headline_key(&self) -> &'static str {
        match self.name {
            BenchName::Seqwrite => "mb_per_s",
            _ => "avg_us",
        }
    }

    /// `mode`'s headline figure divided by `target`'s.
    fn ratio(&self, mode: Target, target: Target) -> f64 {
        let k = self.headline_key();
        self.stat(mode, k) / self.stat(target, k).max(1e-12)
    }

    fn workload(&self) -> String {
        let what = match self.name {
            BenchName::Seqwrite => format!(
                "one file, 16 KiB sequential writes, {} total, fsync at the end (timed)",
                human_size(self.args.size)
            ),
            _ => format!("16 KiB append + fsync, {} times, one file; latency of each pair", self.args.count),
        };
        format!("{what}; {} interleaved rounds, medians", self.args.runs)
    }

    fn keys(&self) -> Vec<(&'static str, &'static str)> {
        match self.name {
            BenchName::Seqwrite => vec![("mb_per_s", "MB/s")],
            _ => LAT_STATS.to_vec(),
        }
    }

    fn json(&self) -> Value {
        let results: Vec<Value> = self
            .results
            .iter()
            .map(|(t, runs)| {
                let mut v = json!({ "target": t.key(), "label": t.label() });
                for (k, _) in self.keys() {
                    v[k] = json!(self.stat(*t, k));
                }
                v["rounds"] = runs.iter().map(Figures::stats).collect::<Vec<_>>().into();
                v["offload_ratio"] = json!(self.ratio(Target::LinefsOffload, *t));
                v["host_only_ratio"] = json!(self.ratio(Target::Linefs, *t));
                v
            })
            .collect();
        let skipped: Vec<Value> = self.skipped.iter().map(|(t, why)| json!({"target": t.key(), "why": why})).collect();
        json!({
            "bench": self.name.as_str(),
            "date": self.header.date,
            "command": self.header.command,
            "workload": self.workload(),
            "rounds": self.args.runs,
            "ratio_meaning": match self.name {
                BenchName::Seqwrite => "linefs MB/s / target MB/s (offload: the default mount; host-only)",
                _ => "linefs mean latency / target mean latency (offload: the default mount; host-only)",
            },
            "pm": self.header.pm_json(),
            "results": results,
            "skipped": skipped,
            "pending": pending_json(),
        })
    }

    fn table(&self) -> String {
        let mut o = self.header.table(self.name.as_str(), &self.workload());
        let unit = if self.name == BenchName::Seqwrite { "" } else { " (µs)" };
        o.push_str(&format!("{:<34}", format!("target{unit}")));
        for (_, h) in self.keys() {
            o.push_str(&format!(" {h:>9}"));
        }
        o.push_str(&format!(" {:>9} {:>10}\n", "offload/", "host-only/"));
        for (t, _) in &self.results {
            o.push_str(&format!("{:<34}", t.label()));
            for (k, _) in self.keys() {
                let prec = if k == "ops_per_s" { 0 } else { 1 };
                o.push_str(&format!(" {:>9.*}", prec, self.stat(*t, k)));
            }
            o.push_str(&format!(
                " {:>9.3} {:>10.3}\n",
                self.ratio(Target::LinefsOffload, *t),
                self.ratio(Target::Linefs, *t)
            ));
        }
        for (t, why) in &self.skipped {
            o.push_str(&format!("{:<34} skipped: {why}\n", t.label()));
        }
        o.push_str(&pending_table());
        o.push_str(match self.name {
            BenchName::Seqwrite => {
                "\noffload/, host-only/: that linefs mode's MB/s divided by the target's (>1: linefs faster)\n"
            }
            _ => {
                "\noffload/, host-only/: that linefs mode's mean latency divided by the target's (<1: linefs faster)\n"
            }
        });
        o
    }
}
