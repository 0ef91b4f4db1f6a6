//! `linefs bench leveldb`: the real LevelDB engine (Debian's libleveldb 1.23 through its C
//! API, see [`ffi`]) running db_bench's basic workloads on each target, one after the other
//! in the same run.
//!
//! The workloads follow LevelDB's own `db_bench` (this is our code, written from its
//! documented behaviour):
//! - `fillseq`: `num` puts in key order into a fresh database;
//! - `fillsync`: `num / 1000` puts in random order into a fresh database, each with
//!   `sync = true` (LevelDB fdatasyncs its log before the put returns);
//! - `fillrandom`: `num` puts of random keys (drawn with repeats from `0..num`) into a fresh
//!   database;
//! - `readseq`: one iterator over the whole database (what fillrandom left), every entry;
//! - `readrandom`: `num` gets of random keys from `0..num` (some are absent after fillrandom,
//!   as in db_bench);
//! - `readhot`: `num` gets of random keys from the first 1% of the key space.
//!
//! They run in db_bench's order (fillseq, fillsync, fillrandom, then the reads on
//! fillrandom's database, still open) and are reported as listed in the issue.
//!
//! Keys are 16 bytes, `%016d` of the key number. Values are 1 KiB, cut in turn from a 1 MiB
//! pool made of 100-byte pieces: 50 random printable bytes then the same 50 bytes again,
//! so each value compresses to about half with Snappy (db_bench's default
//! `--compression_ratio=0.5` aims at the same). The RNG is seeded ([`SEED`]), so every target
//! gets the same keys and values. LevelDB's options are its defaults (4 MiB write buffer,
//! 8 MiB block cache, Snappy), plus create_if_missing.
//!
//! Figures: µs/op is the timed loop's wall time divided by its operations (open and close of
//! the database are not timed); MB/s counts key + value bytes of each put, of each entry the
//! iterator returned, and of each get (the key always, the value when found).
//!
//! `--num` defaults to 100 000; the LineFS paper's LevelDB runs used 1 M (`--num 1000000`).

mod ffi;

use std::path::Path;
use std::time::Instant;

use linefs_ops::cluster;
use linefs_ops::clusterdir::ClusterDir;
use linefs_ops::util::{fail, CliResult};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use self::ffi::{Db, WriteOptions};
use super::{pending_json, pending_table, BenchArgs, Header, Target, Testbed};

const KEY_SIZE: usize = 16;
const VALUE_SIZE: usize = 1024;
/// Seed of the key and value generators (the same on every target).
const SEED: u64 = 0x1e7e_1db0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Workload {
    FillSeq,
    FillRandom,
    FillSync,
    ReadSeq,
    ReadRandom,
    ReadHot,
}

/// Report order.
const REPORT: [Workload; 6] = [
    Workload::FillSeq,
    Workload::FillRandom,
    Workload::FillSync,
    Workload::ReadSeq,
    Workload::ReadRandom,
    Workload::ReadHot,
];
/// Run order (db_bench's): the reads see fillrandom's database.
const RUN: [Workload; 6] = [
    Workload::FillSeq,
    Workload::FillSync,
    Workload::FillRandom,
    Workload::ReadSeq,
    Workload::ReadRandom,
    Workload::ReadHot,
];

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Workload::FillSeq => "fillseq",
            Workload::FillRandom => "fillrandom",
            Workload::FillSync => "fillsync",
            Workload::ReadSeq => "readseq",
            Workload::ReadRandom => "readrandom",
            Workload::ReadHot => "readhot",
        }
    }
    fn fresh_db(self) -> bool {
        matches!(self, Workload::FillSeq | Workload::FillRandom | Workload::FillSync)
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    ops: u64,
    bytes: u64,
    secs: f64,
    /// Gets that found their key (reads only).
    found: u64,
}

impl Figures {
    fn us_per_op(&self) -> f64 {
        self.secs * 1e6 / (self.ops.max(1) as f64)
    }
    fn mb_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.secs.max(1e-9)
    }
    fn to_json(self) -> Value {
        json!({
            "ops": self.ops,
            "bytes": self.bytes,
            "seconds": self.secs,
            "found": self.found,
            "us_per_op": self.us_per_op(),
            "mb_per_s": self.mb_s(),
        })
    }
}

fn key(i: u64) -> [u8; KEY_SIZE] {
    let mut k = [0u8; KEY_SIZE];
    k.copy_from_slice(format!("{i:016}").as_bytes());
    k
}

/// Half-compressible 1 KiB values (see the module documentation).
struct Values {
    pool: Vec<u8>,
    pos: usize,
}

impl Values {
    fn new(rng: &mut StdRng) -> Values {
        let mut pool = Vec::with_capacity((1 << 20) + 100);
        while pool.len() < 1 << 20 {
            let piece: Vec<u8> = (0..50).map(|_| rng.random_range(b' '..=b'~')).collect();
            pool.extend_from_slice(&piece);
            pool.extend_from_slice(&piece);
        }
        Values { pool, pos: 0 }
    }
    fn next(&mut self) -> &[u8] {
        if self.pos + VALUE_SIZE > self.pool.len() {
            self.pos = 0;
        }
        let v = &self.pool[self.pos..self.pos + VALUE_SIZE];
        self.pos += VALUE_SIZE;
        v
    }
}

fn ldb(target: Target, w: Workload) -> impl Fn(ffi::Error) -> linefs_ops::util::CliError {
    move |e| fail(format!("{} on {}: {e}", w.name(), target.label()))
}

/// All workloads on one target's directory; the database is destroyed at the end.
fn run_target(target: Target, dir: &Path, num: u64) -> CliResult<Vec<(Workload, Figures)>> {
    let path = dir.join("leveldb-bench");
    let mut rng = StdRng::seed_from_u64(SEED);
    let mut values = Values::new(&mut rng);
    let mut db: Option<Db> = None;
    let mut out = Vec::new();
    for w in RUN {
        let e = ldb(target, w);
        if w.fresh_db() {
            drop(db.take());
            Db::destroy(&path).map_err(&e)?;
            db = Some(Db::open(&path).map_err(&e)?);
        }
        let d = db.as_ref().expect("opened above");
        let mut f = Figures::default();
        let start = Instant::now();
        match w {
            Workload::FillSeq | Workload::FillRandom | Workload::FillSync => {
                let sync = w == Workload::FillSync;
                let opts = WriteOptions::new(sync);
                let n = if sync { (num / 1000).max(1) } else { num };
                for i in 0..n {
                    let k = if w == Workload::FillSeq { i } else { rng.random_range(0..num) };
                    d.put(&opts, &key(k), values.next()).map_err(&e)?;
                    f.ops += 1;
                    f.bytes += (KEY_SIZE + VALUE_SIZE) as u64;
                }
            }
            Workload::ReadSeq => {
                let mut it = d.iter();
                while f.ops < num {
                    let Some((k, v)) = it.next_entry().map_err(&e)? else { break };
                    if k.len() != KEY_SIZE || v.len() != VALUE_SIZE {
                        return Err(fail(format!(
                            "readseq on {}: entry of {}+{} bytes, {KEY_SIZE}+{VALUE_SIZE} expected",
                            target.label(),
                            k.len(),
                            v.len()
                        )));
                    }
                    f.ops += 1;
                    f.found += 1;
                    f.bytes += (k.len() + v.len()) as u64;
                }
            }
            Workload::ReadRandom | Workload::ReadHot => {
                let range = if w == Workload::ReadHot { (num / 100).max(1) } else { num };
                for _ in 0..num {
                    let k = key(rng.random_range(0..range));
                    f.ops += 1;
                    f.bytes += KEY_SIZE as u64;
                    if let Some(v) = d.get(&k).map_err(&e)? {
                        if v.len() != VALUE_SIZE {
                            return Err(fail(format!(
                                "{} on {}: value of {} bytes, {VALUE_SIZE} expected",
                                w.name(),
                                target.label(),
                                v.len()
                            )));
                        }
                        f.found += 1;
                        f.bytes += v.len() as u64;
                    }
                }
            }
        }
        f.secs = start.elapsed().as_secs_f64();
        out.push((w, f));
    }
    drop(db);
    Db::destroy(&path).map_err(ldb(target, Workload::ReadHot))?;
    Ok(out)
}

pub(super) fn run(dir: &ClusterDir, args: &BenchArgs) -> CliResult<String> {
    if args.num < 100 {
        return Err(fail("--num must be at least 100"));
    }
    // fillseq and fillrandom each write num × ~1 KiB, and compactions rewrite it: leave room
    // for several copies.
    let need = args.num.saturating_mul((KEY_SIZE + VALUE_SIZE) as u64 * 8);
    let pm_size = args.pm_size.unwrap_or_else(|| need.saturating_add(512 << 20).max(cluster::DEFAULT_PM_SIZE));
    let bed = Testbed::new(dir, args.pm_dir.as_deref(), pm_size, true, &args.options)?;
    let header = Header::new(&bed);
    let mut results = Vec::new();
    for (target, path) in &bed.targets {
        if !args.json {
            eprintln!("linefs: bench leveldb: running on {} ...", target.label());
        }
        results.push((*target, run_target(*target, path, args.num)?));
    }
    drop(bed);
    let workload = format!(
        "LevelDB 1.23 (C API), db_bench workloads, --num {}: {KEY_SIZE}-byte keys, {VALUE_SIZE}-byte values \
         (half compressible), fillsync {} synced puts",
        args.num,
        (args.num / 1000).max(1)
    );
    Ok(if args.json {
        json_report(&header, &workload, args.num, &results)
    } else {
        table(&header, &workload, &results)
    })
}

type Results = [(Target, Vec<(Workload, Figures)>)];

fn json_report(header: &Header, workload: &str, num: u64, results: &Results) -> String {
    let results: Vec<Value> = results
        .iter()
        .map(|(t, ws)| {
            let mut m = serde_json::Map::new();
            for w in REPORT {
                if let Some((_, f)) = ws.iter().find(|(x, _)| *x == w) {
                    m.insert(w.name().to_string(), f.to_json());
                }
            }
            json!({ "target": t.key(), "workloads": m })
        })
        .collect();
    json!({
        "bench": "leveldb",
        "date": header.date,
        "command": header.command,
        "workload": workload,
        "num": num,
        "key_size": KEY_SIZE,
        "value_size": VALUE_SIZE,
        "pm": header.pm_json(),
        "results": results,
        "pending": pending_json(),
    })
    .to_string()
}

fn table(header: &Header, workload: &str, results: &Results) -> String {
    let mut o = header.table("leveldb", workload);
    o.push_str(&format!("{:<12}", "workload"));
    for (t, _) in results {
        o.push_str(&format!(" | {:<30}", t.label()));
    }
    o.push('\n');
    o.push_str(&format!("{:<12}", ""));
    for _ in results {
        o.push_str(&format!(" | {:>14} {:>15}", "µs/op", "MB/s"));
    }
    o.push('\n');
    for w in REPORT {
        o.push_str(&format!("{:<12}", w.name()));
        for (_, ws) in results {
            match ws.iter().find(|(x, _)| *x == w) {
                Some((_, f)) => o.push_str(&format!(" | {:>14.2} {:>15.1}", f.us_per_op(), f.mb_s())),
                None => o.push_str(&format!(" | {:>30}", "-")),
            }
        }
        o.push('\n');
    }
    o.push('\n');
    o.push_str(&pending_table());
    o.push_str("\nreadrandom/readhot MB/s count the key of every get and the value of each found one\n");
    o
}
