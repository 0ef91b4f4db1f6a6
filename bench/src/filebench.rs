//! `linefs bench filebench --personality varmail|fileserver|webserver`: Filebench's three
//! classic personalities, re-expressed in Rust (our code, from Filebench's documented
//! workload model), run for `--duration` seconds on each target.
//!
//! Filebench's model: a *file set* of `nfiles` files spread over directories of
//! `meandirwidth` entries, a share of them pre-allocated before the timed run; `nthreads`
//! threads each repeat the personality's list of *flowops* until time is up. A flowop that
//! needs an existing file takes one that exists and that no other thread is using, one that
//! creates takes one that does not exist (so threads never collide on a file). Every flowop
//! counts as one operation (open, read, write, append, fsync, close, delete, stat), as
//! Filebench counts them; ops/s and MB/s (bytes read + written) are over the timed run.
//!
//! Filebench's defaults (its `.f` workload files), which ours follow:
//!
//! | personality | nfiles | mean file size | threads | dir width | pre-allocated |
//! |-------------|--------|----------------|---------|-----------|---------------|
//! | varmail     | 1000   | 16 KiB         | 16      | 1 000 000 | 80%           |
//! | fileserver  | 10000  | 128 KiB        | 50      | 20        | 80%           |
//! | webserver   | 1000   | 16 KiB         | 100     | 20        | 100%          |
//!
//! I/O size 1 MiB for whole-file reads and writes, 16 KiB appends (`meanappendsize`).
//!
//! Loops per thread:
//! - varmail (mail server): delete a file; create one, append 16 KiB, fsync, close; open
//!   one, read it whole, append 16 KiB, fsync, close; open one, read it whole, close.
//! - fileserver: create a file and write it whole (its planned size), close; open one,
//!   append 16 KiB, close; open one, read it whole, close; delete one; stat one.
//! - webserver: 10 times open a file, read it whole, close; then append 16 KiB to the one
//!   shared log file.
//!
//! Differences from Filebench, for simplicity: file sizes are uniform in [mean/2, 3·mean/2]
//! (Filebench draws them from a gamma distribution with the same mean); appends are 16 KiB
//! each (Filebench's `appendfilerand` draws a size up to 16 KiB); caches are not dropped
//! after pre-allocation. `--nfiles` and `--threads` scale a personality down. The RNG is
//! seeded (thread i uses [`SEED`] + i).

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use linefs_ops::cluster;
use linefs_ops::clusterdir::ClusterDir;
use linefs_ops::util::{fail, human_size, CliResult, Context};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use super::{pending_json, pending_table, BenchArgs, Header, Target, Testbed};

const SEED: u64 = 0xf11e_be4c;
const IO_SIZE: usize = 1 << 20;
const APPEND_SIZE: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Personality {
    /// Mail server: delete, create+append+fsync, read+append+fsync, read.
    Varmail,
    /// File server: create+write, append, read, delete, stat.
    Fileserver,
    /// Web server: 10 whole-file reads, then an append to a shared log.
    Webserver,
}

/// A personality's Filebench defaults.
#[derive(Debug, Clone, Copy)]
struct Profile {
    nfiles: usize,
    mean_size: u64,
    threads: usize,
    dir_width: usize,
    prealloc_percent: usize,
}

impl Personality {
    fn as_str(self) -> &'static str {
        match self {
            Personality::Varmail => "varmail",
            Personality::Fileserver => "fileserver",
            Personality::Webserver => "webserver",
        }
    }
    fn defaults(self) -> Profile {
        match self {
            Personality::Varmail => {
                Profile { nfiles: 1000, mean_size: 16 << 10, threads: 16, dir_width: 1_000_000, prealloc_percent: 80 }
            }
            Personality::Fileserver => {
                Profile { nfiles: 10_000, mean_size: 128 << 10, threads: 50, dir_width: 20, prealloc_percent: 80 }
            }
            Personality::Webserver => {
                Profile { nfiles: 1000, mean_size: 16 << 10, threads: 100, dir_width: 20, prealloc_percent: 100 }
            }
        }
    }
}

/// Which files exist and are free to take; a taken file belongs to one thread until given back.
struct Lists {
    present: Vec<usize>,
    absent: Vec<usize>,
}

struct FileSet {
    root: PathBuf,
    dir_width: usize,
    /// Each file's planned size (what create + write-whole writes, and pre-allocation).
    sizes: Vec<u64>,
    lists: Mutex<Lists>,
}

impl FileSet {
    fn path(&self, i: usize) -> PathBuf {
        self.root.join(format!("d{}", i / self.dir_width)).join(format!("f{i}"))
    }

    /// Takes a random free file that exists (`exists`) or does not.
    fn take(&self, exists: bool, rng: &mut StdRng) -> Option<usize> {
        let mut l = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        let v = if exists { &mut l.present } else { &mut l.absent };
        if v.is_empty() {
            return None;
        }
        let k = rng.random_range(0..v.len());
        Some(v.swap_remove(k))
    }

    fn give(&self, i: usize, exists: bool) {
        let mut l = self.lists.lock().unwrap_or_else(|e| e.into_inner());
        if exists {
            l.present.push(i)
        } else {
            l.absent.push(i)
        }
    }
}

/// One thread's tallies.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    ops: u64,
    loops: u64,
    read: u64,
    written: u64,
}

#[derive(Debug, Clone, Copy)]
struct Figures {
    tally: Tally,
    secs: f64,
    threads: usize,
    nfiles: usize,
}

impl Figures {
    fn ops_s(&self) -> f64 {
        self.tally.ops as f64 / self.secs.max(1e-9)
    }
    fn mb_s(&self) -> f64 {
        (self.tally.read + self.tally.written) as f64 / 1e6 / self.secs.max(1e-9)
    }
    fn to_json(self) -> Value {
        json!({
            "ops": self.tally.ops,
            "loops": self.tally.loops,
            "bytes_read": self.tally.read,
            "bytes_written": self.tally.written,
            "seconds": self.secs,
            "ops_per_s": self.ops_s(),
            "mb_per_s": self.mb_s(),
            "threads": self.threads,
            "nfiles": self.nfiles,
        })
    }
}

/// The worker's view: the file set, the data to write, and where the time limit is.
struct Worker<'a> {
    set: &'a FileSet,
    data: &'a [u8],
    deadline: Instant,
    stop: &'a AtomicBool,
    rng: StdRng,
    buf: Vec<u8>,
    t: Tally,
}

type IoResult<T> = Result<T, String>;

impl Worker<'_> {
    fn done(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || Instant::now() >= self.deadline
    }

    /// Takes a file in the wanted state, waiting while none is free; None once time is up.
    fn take(&mut self, exists: bool) -> Option<usize> {
        loop {
            if let Some(i) = self.set.take(exists, &mut self.rng) {
                return Some(i);
            }
            if self.done() {
                return None;
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    fn err(&self, what: &str, i: usize, e: std::io::Error) -> String {
        format!("{what} {}: {e}", self.set.path(i).display())
    }

    fn open(&mut self, i: usize, append: bool) -> IoResult<File> {
        let f =
            OpenOptions::new().read(true).append(append).open(self.set.path(i)).map_err(|e| self.err("open", i, e))?;
        self.t.ops += 1;
        Ok(f)
    }

    fn close(&mut self, f: File) {
        drop(f);
        self.t.ops += 1;
    }

    fn read_whole(&mut self, f: &mut File, i: usize) -> IoResult<()> {
        loop {
            let n = f.read(&mut self.buf).map_err(|e| self.err("read", i, e))?;
            if n == 0 {
                break;
            }
            self.t.read += n as u64;
        }
        self.t.ops += 1;
        Ok(())
    }

    fn write(&mut self, f: &mut File, i: usize, mut len: usize) -> IoResult<()> {
        while len > 0 {
            let n = len.min(IO_SIZE);
            let off = self.rng.random_range(0..=self.data.len() - n);
            f.write_all(&self.data[off..off + n]).map_err(|e| self.err("write", i, e))?;
            self.t.written += n as u64;
            len -= n;
        }
        self.t.ops += 1;
        Ok(())
    }

    fn fsync(&mut self, f: &File, i: usize) -> IoResult<()> {
        f.sync_all().map_err(|e| self.err("fsync", i, e))?;
        self.t.ops += 1;
        Ok(())
    }

    fn create(&mut self, i: usize) -> IoResult<File> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(self.set.path(i))
            .map_err(|e| self.err("create", i, e))?;
        self.t.ops += 1;
        Ok(f)
    }

    fn delete(&mut self, i: usize) -> IoResult<()> {
        fs::remove_file(self.set.path(i)).map_err(|e| self.err("delete", i, e))?;
        self.t.ops += 1;
        Ok(())
    }

    /// Deletes a random existing file.
    fn delete_one(&mut self) -> IoResult<()> {
        let Some(i) = self.take(true) else { return Ok(()) };
        let r = self.delete(i);
        self.set.give(i, r.is_err());
        r
    }

    /// Creates a random absent file, writes `len(i)` bytes (optionally fsync), closes it.
    fn create_one(&mut self, len: impl Fn(&FileSet, usize) -> usize, sync: bool) -> IoResult<()> {
        let Some(i) = self.take(false) else { return Ok(()) };
        let r = (|| {
            let mut f = self.create(i)?;
            self.write(&mut f, i, len(self.set, i))?;
            if sync {
                self.fsync(&f, i)?;
            }
            self.close(f);
            Ok(())
        })();
        self.set.give(i, true);
        r
    }

    /// Opens a random existing file; optionally reads it whole, appends 16 KiB, fsyncs; closes.
    fn open_one(&mut self, read: bool, append: bool, sync: bool) -> IoResult<()> {
        let Some(i) = self.take(true) else { return Ok(()) };
        let r = (|| {
            let mut f = self.open(i, append)?;
            if read {
                self.read_whole(&mut f, i)?;
            }
            if append {
                self.write(&mut f, i, APPEND_SIZE)?;
            }
            if sync {
                self.fsync(&f, i)?;
            }
            self.close(f);
            Ok(())
        })();
        self.set.give(i, true);
        r
    }

    fn stat_one(&mut self) -> IoResult<()> {
        let Some(i) = self.take(true) else { return Ok(()) };
        let r = fs::metadata(self.set.path(i)).map(|_| ()).map_err(|e| self.err("stat", i, e));
        self.t.ops += 1;
        self.set.give(i, true);
        r
    }

    fn run(&mut self, p: Personality, log: Option<&Path>) -> IoResult<()> {
        let mut log = match log {
            Some(path) => {
                Some(OpenOptions::new().append(true).open(path).map_err(|e| format!("open {}: {e}", path.display()))?)
            }
            None => None,
        };
        while !self.done() {
            match p {
                Personality::Varmail => {
                    self.delete_one()?;
                    self.create_one(|_, _| APPEND_SIZE, true)?;
                    self.open_one(true, true, true)?;
                    self.open_one(true, false, false)?;
                }
                Personality::Fileserver => {
                    self.create_one(|s, i| s.sizes[i] as usize, false)?;
                    self.open_one(false, true, false)?;
                    self.open_one(true, false, false)?;
                    self.delete_one()?;
                    self.stat_one()?;
                }
                Personality::Webserver => {
                    for _ in 0..10 {
                        self.open_one(true, false, false)?;
                    }
                    let f = log.as_mut().expect("webserver has a log");
                    let off = self.rng.random_range(0..=self.data.len() - APPEND_SIZE);
                    f.write_all(&self.data[off..off + APPEND_SIZE]).map_err(|e| format!("append to the log: {e}"))?;
                    self.t.written += APPEND_SIZE as u64;
                    self.t.ops += 1;
                }
            }
            self.t.loops += 1;
        }
        Ok(())
    }
}

/// Pre-allocates the file set in `root` (not timed), runs the threads for `duration`, then
/// removes the set.
fn run_target(target: Target, dir: &Path, p: Personality, prof: &Profile, duration: Duration) -> CliResult<Figures> {
    let root = dir.join(format!("filebench-{}", p.as_str()));
    let what = || format!("filebench {} on {}", p.as_str(), target.label());
    let mut rng = StdRng::seed_from_u64(SEED);
    let data: Vec<u8> = (0..2 * IO_SIZE).map(|_| rng.random()).collect();
    let sizes: Vec<u64> =
        (0..prof.nfiles).map(|_| rng.random_range(prof.mean_size / 2..=prof.mean_size * 3 / 2)).collect();
    let set = FileSet {
        root: root.clone(),
        dir_width: prof.dir_width,
        sizes,
        lists: Mutex::new(Lists { present: Vec::new(), absent: Vec::new() }),
    };
    for d in 0..prof.nfiles.div_ceil(prof.dir_width) {
        let p = root.join(format!("d{d}"));
        fs::create_dir_all(&p).ctx(|| format!("{}: {}: create", what(), p.display()))?;
    }
    let prealloc = prof.nfiles * prof.prealloc_percent / 100;
    {
        let mut l = set.lists.lock().unwrap_or_else(|e| e.into_inner());
        for i in 0..prof.nfiles {
            if i < prealloc {
                let path = set.path(i);
                let mut f = File::create(&path).ctx(|| format!("{}: {}: create", what(), path.display()))?;
                let mut left = set.sizes[i] as usize;
                while left > 0 {
                    let n = left.min(IO_SIZE);
                    f.write_all(&data[..n]).ctx(|| format!("{}: {}: write", what(), path.display()))?;
                    left -= n;
                }
                l.present.push(i);
            } else {
                l.absent.push(i);
            }
        }
    }
    let log = root.join("logfile");
    if p == Personality::Webserver {
        File::create(&log).ctx(|| format!("{}: {}: create", what(), log.display()))?;
    }

    let stop = AtomicBool::new(false);
    let first_error: Mutex<Option<String>> = Mutex::new(None);
    let start = Instant::now();
    let deadline = start + duration;
    let tallies: Vec<Tally> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..prof.threads)
            .map(|t| {
                let (set, data, stop, first_error, log) = (&set, &data[..], &stop, &first_error, &log);
                s.spawn(move || {
                    let mut w = Worker {
                        set,
                        data,
                        deadline,
                        stop,
                        rng: StdRng::seed_from_u64(SEED + 1 + t as u64),
                        buf: vec![0u8; IO_SIZE],
                        t: Tally::default(),
                    };
                    if let Err(e) = w.run(p, (p == Personality::Webserver).then_some(log.as_path())) {
                        stop.store(true, Ordering::Relaxed);
                        first_error.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                    }
                    w.t
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_default()).collect()
    });
    let secs = start.elapsed().as_secs_f64();
    if let Some(e) = first_error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        return Err(fail(format!("{}: {e}", what())));
    }
    let mut tally = Tally::default();
    for t in tallies {
        tally.ops += t.ops;
        tally.loops += t.loops;
        tally.read += t.read;
        tally.written += t.written;
    }
    fs::remove_dir_all(&root).ctx(|| format!("{}: {}: remove", what(), root.display()))?;
    Ok(Figures { tally, secs, threads: prof.threads, nfiles: prof.nfiles })
}

pub(super) fn run(dir: &ClusterDir, args: &BenchArgs) -> CliResult<String> {
    let p = args.personality;
    let mut prof = p.defaults();
    if let Some(n) = args.nfiles {
        prof.nfiles = n;
    }
    if let Some(n) = args.threads {
        prof.threads = n;
    }
    if prof.nfiles == 0 || prof.threads == 0 || args.duration == 0 {
        return Err(fail("--nfiles, --threads and --duration must be positive"));
    }
    // The set twice over, plus what the run adds (appends and re-created files).
    let need = (prof.nfiles as u64).saturating_mul(prof.mean_size * 3);
    let growth = args.duration.saturating_mul(64 << 20);
    let pm_size = args
        .pm_size
        .unwrap_or_else(|| need.saturating_add(growth).saturating_add(512 << 20).max(cluster::DEFAULT_PM_SIZE));
    let bed = Testbed::new(dir, args.pm_dir.as_deref(), pm_size, true, &args.options)?;
    let header = Header::new(&bed);
    let mut results = Vec::new();
    for (target, path) in &bed.targets {
        if !args.json {
            eprintln!("linefs: bench filebench {}: running on {} ...", p.as_str(), target.label());
        }
        results.push((*target, run_target(*target, path, p, &prof, Duration::from_secs(args.duration))?));
    }
    drop(bed);
    let workload = format!(
        "Filebench {} personality: {} files of mean size {} ({} dirs of {}), {}% pre-allocated, {} threads, {} s",
        p.as_str(),
        prof.nfiles,
        human_size(prof.mean_size),
        prof.nfiles.div_ceil(prof.dir_width),
        prof.dir_width.min(prof.nfiles),
        prof.prealloc_percent,
        prof.threads,
        args.duration
    );
    if args.json {
        let rows: Vec<Value> = results
            .iter()
            .map(|(t, f)| {
                let mut v = f.to_json();
                v["target"] = json!(t.key());
                v
            })
            .collect();
        return Ok(json!({
            "bench": "filebench",
            "personality": p.as_str(),
            "date": header.date,
            "command": header.command,
            "workload": workload,
            "pm": header.pm_json(),
            "results": rows,
            "pending": pending_json(),
        })
        .to_string());
    }
    let mut o = header.table(&format!("filebench {}", p.as_str()), &workload);
    o.push_str(&format!("{:<34} {:>10} {:>10} {:>10} {:>10}\n", "target", "ops/s", "MB/s", "ops", "loops"));
    for (t, f) in &results {
        o.push_str(&format!(
            "{:<34} {:>10.0} {:>10.1} {:>10} {:>10}\n",
            t.label(),
            f.ops_s(),
            f.mb_s(),
            f.tally.ops,
            f.tally.loops
        ));
    }
    o.push_str(&pending_table());
    o.push_str("\nops: every flowop (open, read, write, append, fsync, close, delete, stat) counts one; MB/s: read + written\n");
    Ok(o)
}
