//! `linefs-loadgen write`: one libfs client's sequential-write run, timed and costed.
//!
//! Phases: mount (or attach to nicfs) and create the run's directory — not measured; with
//! `--wait-go` a ready line, then the go byte — then the **write phase** (create each file,
//! `--io` writes at increasing offsets, an fsync every `--fsync-every` writes, release) and
//! the **drain** (`Fs::shutdown`: everything left in the log is published — by this process
//! in the host-only mode, by nicfs with offload — and the client detaches). Both phases are
//! part of the work: the result gives each one's wall time, and the CPU time (user + system,
//! from `getrusage(RUSAGE_SELF)`, every thread of the process) of the two together.
//!
//! Options for `linefs bench replication`:
//! * `--path DIR` instead of `--node`: the same writes through the kernel into a directory
//!   (a FUSE mount: the passthrough baseline, or a linefs mount), with `std::fs`; the drain
//!   is then nothing.
//! * `--chain ADDR` (host-only): the client replicates its own log, as Assise does — after
//!   every MiB it writes it reads the new entries of its log slot (pm's `LogSlot::fetch`, the
//!   bytes nicfs would ship) and sends them down a chain of hops ([`crate::chain`], pipelined
//!   under the flow-control watermark); every fsync sends the rest and waits until every hop
//!   has acknowledged it durable. The bytes a push reads are at most a MiB and a write past
//!   what was pushed, so the ring (tens of MiB) cannot have overwritten them.
//! * `--fsync-end`: an fsync after each file's last write (part of the write phase).
//! * `--latency`: each write (with its fsync, when one is due) is timed; percentiles in the
//!   result.
//! * `--remove`: the files and the directory are removed after the write phase (the drain
//!   then publishes the removal too), so that long benches do not fill the node.
//! * `--compressible PCT`: data generated to be PCT % lz4-compressible ([`crate::gen`])
//!   instead of a fixed pattern.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use libfs::{Cred, Fs, FsOptions, ROOT_INO};
use linefs_pm::layout::Geometry;
use linefs_pm::oplog::LogSlot;
use linefs_pm::region::PmRegion;
use serde_json::{json, Value};

use crate::chain::{Compress, Link};
use crate::gen::Gen;
use crate::pin;
use crate::util::{cpu_times, emit, latency_json, parse_size};
use linefs_pm::cpus::{self, CpuList};

/// A host-only client with `--chain` pushes its new log after this many bytes of writes.
const PUSH_EVERY: u64 = 1 << 20;
/// Largest message it sends.
const PUSH_MSG: usize = 1 << 20;

/// Exit status when stdin closes before the go byte (the driver is gone): nothing written.
const NO_GO: u8 = 3;

#[derive(Debug, Clone, clap::Args)]
pub struct WriteArgs {
    /// The node's PM directory (public.pm, log-NN.pm).
    #[arg(long, value_name = "NODEDIR", required_unless_present = "path", conflicts_with = "path")]
    node: Option<PathBuf>,
    /// Write through the kernel into this directory instead (no libfs).
    #[arg(long, value_name = "DIR")]
    path: Option<PathBuf>,
    /// Host-only: replicate the log down the chain whose first hop is at ADDR.
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["nicfs", "path"])]
    chain: Option<String>,
    /// Compression of the chain's messages.
    #[arg(long, value_enum, default_value = "off")]
    compress: Compress,
    /// fsync each file after its last write.
    #[arg(long)]
    fsync_end: bool,
    /// Time each write (with its fsync when one is due).
    #[arg(long)]
    latency: bool,
    /// Remove the files and the directory after the write phase (before the drain), so that
    /// a long bench does not fill the node.
    #[arg(long)]
    remove: bool,
    /// Data lz4 can shrink by this many percent (default: a fixed pattern).
    #[arg(long, value_name = "PCT", value_parser = clap::value_parser!(u8).range(0..=100))]
    compressible: Option<u8>,
    /// Offload: attach to the node's nicfs on this socket (else host-only: this process opens
    /// the node's PM and publishes its own log; one such client per node).
    #[arg(long, value_name = "SOCKET")]
    nicfs: Option<PathBuf>,
    /// Host-only: the log slot to use.
    #[arg(long, default_value_t = 0, value_name = "SLOT")]
    client: u32,
    /// Name of the directory (in the root) this client creates and writes its files in.
    #[arg(long, value_name = "NAME")]
    dir: String,
    /// Bytes to write in all (K, M, G units).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    bytes: u64,
    /// Size of each write.
    #[arg(long, default_value = "16384", value_name = "SIZE", value_parser = parse_size)]
    io: u64,
    /// fsync the file after every K writes (0: never).
    #[arg(long, default_value_t = 0, value_name = "K")]
    fsync_every: u64,
    /// Number of files the bytes are split into, written one after the other.
    #[arg(long, default_value_t = 1, value_name = "F")]
    files: u64,
    /// CPUs to run on (pinned before any thread starts).
    #[arg(long, value_parser = cpus::parse, value_name = "LIST")]
    cpus: Option<CpuList>,
    /// Print a ready line once mounted and wait for one byte on stdin before writing.
    #[arg(long)]
    wait_go: bool,
}

/// The write verb: see the module note. Prints the result line.
pub fn main(a: &WriteArgs) -> Result<ExitCode, String> {
    if a.io == 0 || a.files == 0 {
        return Err("--io and --files must be positive".into());
    }
    match run(a)? {
        Some(v) => emit(&v).map(|()| ExitCode::SUCCESS),
        None => Ok(ExitCode::from(NO_GO)),
    }
}

/// The data to write: `io` bytes, from a ring of generated buffers or the fixed pattern.
struct Data {
    bufs: Vec<Vec<u8>>,
    next: usize,
}

impl Data {
    fn new(io: u64, pct: Option<u8>) -> Data {
        let bufs = match pct {
            None => vec![(0..io).map(|i| (i % 251) as u8 + 1).collect()],
            Some(p) => {
                let mut g = Gen::new(u64::from(std::process::id()), p);
                (0..64)
                    .map(|_| {
                        let mut b = vec![0u8; io as usize];
                        g.fill(&mut b);
                        b
                    })
                    .collect()
            }
        };
        Data { bufs, next: 0 }
    }
    fn next(&mut self) -> &[u8] {
        self.next = (self.next + 1) % self.bufs.len();
        &self.bufs[self.next]
    }
}

/// The host-only client's own replication (`--chain`): reads its log's new entries and sends
/// them down the chain.
struct Pusher {
    link: Link,
    slot: LogSlot,
    /// Everything before it was sent.
    sent: u64,
    /// Bytes written since the last push.
    written: u64,
    buf: Vec<u8>,
    pushes: u64,
}

impl Pusher {
    fn open(node: &std::path::Path, slot: u32, from: u64, addr: &str, compress: Compress) -> Result<Pusher, String> {
        let path = node.join(linefs_pm::node::log_file_name(slot));
        let region = PmRegion::open_read_only(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        // LogSlot takes its ring size from the geometry's log_blocks; nothing else of it is
        // used (a reader of one log file needs no more).
        let geo = Geometry {
            total_blocks: 0,
            log_slots: 0,
            log_blocks: region.len() / linefs_pm::layout::BLOCK_SIZE,
            itable_start: 0,
            inode_count: 0,
            data_start: 0,
            data_blocks: 0,
        };
        let slot = LogSlot::new(std::sync::Arc::new(region), &geo, slot);
        Ok(Pusher { link: Link::connect(addr, compress)?, slot, sent: from, written: 0, buf: Vec::new(), pushes: 0 })
    }

    /// Sends the log's entries past what was sent; with `wait`, until the chain acks them.
    fn push(&mut self, wait: bool) -> Result<(), String> {
        let (copy, _) = self
            .slot
            .fetch_into(self.sent, u64::MAX, u64::MAX, std::mem::take(&mut self.buf))
            .map_err(|e| format!("read the log: {e}"))?;
        for m in copy.bytes.chunks(PUSH_MSG) {
            self.link.send(m)?;
        }
        self.sent = copy.end();
        self.buf = copy.bytes;
        self.written = 0;
        self.pushes += 1;
        if wait {
            self.link.wait_all()?;
        }
        Ok(())
    }

    /// After a write of `n` bytes.
    fn wrote(&mut self, n: u64) -> Result<(), String> {
        self.written += n;
        if self.written >= PUSH_EVERY {
            self.push(false)?;
        }
        Ok(())
    }

    fn json(&self) -> Value {
        let (pauses, _) = self.link.stats();
        json!({
            "raw_bytes": self.link.raw_bytes,
            "wire_bytes": self.link.wire_bytes,
            "lz4_messages": self.link.lz4_messages,
            "pushes": self.pushes,
            "flow_pauses": pauses,
        })
    }
}

/// Where the writes go: libfs, or a directory through the kernel.
enum Target {
    Libfs { fs: Box<Fs>, cred: Cred, dir: libfs::Attr, pusher: Option<Box<Pusher>> },
    Kernel { dir: PathBuf },
}

/// Mounts, waits for the go (if asked), writes, shuts down. `None`: stdin closed before the
/// go byte. The result object: `bytes`, `files`, `io`, `writes`, `fsyncs`, `write_seconds`,
/// `drain_seconds`, `seconds` (their sum), `cpu_user_s`, `cpu_sys_s`, `cpu_s` (of the two
/// phases), `log_bytes` (log appended by the write phase), `published_all` (after the
/// drain the client's published LSN is its log's tail), `offload`, `backing` and
/// `persist_method` (of the PM), `slot`, `pid`, `dir`; with `--latency`, `latency_us`;
/// with `--chain`, `chain` (bytes sent, raw and on the wire, pushes). With `--path`,
/// `log_bytes` and `slot` are 0, `published_all` true and `backing` "kernel".
pub fn run(a: &WriteArgs) -> Result<Option<Value>, String> {
    if let Some(c) = &a.cpus {
        pin(c)?;
    }
    let pid = std::process::id();
    let (mut target, slot, offload, tail0) = match (&a.node, &a.path) {
        (Some(node), _) => {
            let opts =
                FsOptions { pm_path: node.clone(), nicfs: a.nicfs.clone(), client: a.client, ..Default::default() };
            let fs = Fs::mount(opts).map_err(|e| format!("mount {}: {e}", node.display()))?;
            let cred = Cred {
                uid: rustix::process::geteuid().as_raw(),
                gid: rustix::process::getegid().as_raw(),
                groups: vec![],
            };
            let dir = fs
                .mkdir(&cred, ROOT_INO, a.dir.as_bytes(), 0o755, 0o022)
                .map_err(|e| format!("mkdir {}: {e}", a.dir))?;
            let st = fs.status();
            let pusher = match &a.chain {
                Some(addr) => Some(Box::new(Pusher::open(node, st.client, st.tail_lsn, addr, a.compress)?)),
                None => None,
            };
            (Target::Libfs { fs: Box::new(fs), cred, dir, pusher }, st.client, st.offload, st.tail_lsn)
        }
        (None, Some(path)) => {
            let dir = path.join(&a.dir);
            std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
            (Target::Kernel { dir }, 0, false, 0)
        }
        (None, None) => return Err("--node or --path".into()),
    };
    if a.wait_go {
        emit(&json!({ "ready": true, "pid": pid, "slot": slot, "offload": offload }))?;
        let mut go = [0u8; 1];
        if !matches!(std::io::stdin().read(&mut go), Ok(1)) {
            tracing::warn!("standard input closed before the go byte: not writing");
            drop(target);
            return Ok(None);
        }
    }
    let mut data = Data::new(a.io, a.compressible);
    let mut hist = hdrhistogram::Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let (u0, s0) = cpu_times()?;
    let start = Instant::now();
    let (mut writes, mut fsyncs) = (0u64, 0u64);
    let per_file = a.bytes / a.files;
    for f in 0..a.files {
        let size = if f + 1 == a.files { a.bytes - per_file * (a.files - 1) } else { per_file };
        let name = format!("f{f}");
        let mut file = open_file(&mut target, &name, &a.dir)?;
        let mut off = 0u64;
        while off < size {
            let n = (size - off).min(a.io) as usize;
            let t = Instant::now();
            file.write(&mut target, off, &data.next()[..n])
                .map_err(|e| format!("write {}/{name} at {off}: {e}", a.dir))?;
            off += n as u64;
            writes += 1;
            let due = a.fsync_every > 0 && writes.is_multiple_of(a.fsync_every);
            if due || (a.fsync_end && off >= size) {
                file.fsync(&mut target).map_err(|e| format!("fsync {}/{name}: {e}", a.dir))?;
                fsyncs += 1;
            }
            if a.latency {
                let _ = hist.record(t.elapsed().as_nanos() as u64);
            }
        }
        file.close(&mut target);
    }
    let write_seconds = start.elapsed().as_secs_f64();
    if a.remove {
        remove(&target, a)?;
    }
    let drain = Instant::now();
    let (log_bytes, published_all, end_offload, backing, persist, chain) = match target {
        Target::Libfs { fs, dir, pusher, .. } => {
            let log_bytes = fs.status().tail_lsn - tail0;
            fs.forget(dir.ino, 1);
            fs.shutdown().map_err(|e| format!("shutdown (publishing the log): {e}"))?;
            let end = fs.status();
            (
                log_bytes,
                end.published_lsn == end.tail_lsn,
                end.offload,
                end.backing,
                end.persist_method,
                pusher.as_deref().map(Pusher::json),
            )
        }
        Target::Kernel { .. } => (0, true, false, "kernel".to_string(), "fsync".to_string(), None),
    };
    let drain_seconds = drain.elapsed().as_secs_f64();
    let (u1, s1) = cpu_times()?;
    tracing::info!(writes, write_seconds, drain_seconds, "done");
    let mut v = json!({
        "bytes": a.bytes,
        "files": a.files,
        "io": a.io,
        "writes": writes,
        "fsyncs": fsyncs,
        "write_seconds": write_seconds,
        "drain_seconds": drain_seconds,
        "seconds": write_seconds + drain_seconds,
        "cpu_user_s": u1 - u0,
        "cpu_sys_s": s1 - s0,
        "cpu_s": (u1 - u0) + (s1 - s0),
        "log_bytes": log_bytes,
        "published_all": published_all,
        "offload": end_offload,
        "backing": backing,
        "persist_method": persist,
        "slot": slot,
        "pid": pid,
        "dir": a.dir,
    });
    if a.latency {
        v["latency_us"] = latency_json(&hist);
    }
    if let Some(c) = chain {
        v["chain"] = c;
    }
    Ok(Some(v))
}

/// `--remove`: the files and their directory.
fn remove(t: &Target, a: &WriteArgs) -> Result<(), String> {
    match t {
        Target::Libfs { fs, cred, dir, .. } => {
            for f in 0..a.files {
                let name = format!("f{f}");
                fs.unlink(cred, dir.ino, name.as_bytes()).map_err(|e| format!("unlink {}/{name}: {e}", a.dir))?;
            }
            fs.rmdir(cred, ROOT_INO, a.dir.as_bytes()).map_err(|e| format!("rmdir {}: {e}", a.dir))
        }
        Target::Kernel { dir } => std::fs::remove_dir_all(dir).map_err(|e| format!("remove {}: {e}", dir.display())),
    }
}

/// A file being written.
enum File {
    Libfs { ino: u64, fh: u64 },
    Kernel(std::fs::File),
}

fn open_file(t: &mut Target, name: &str, dir_name: &str) -> Result<File, String> {
    match t {
        Target::Libfs { fs, cred, dir, .. } => {
            let (attr, fh) = fs
                .create(cred, dir.ino, name.as_bytes(), 0o644, 0o022, libc::O_RDWR)
                .map_err(|e| format!("create {dir_name}/{name}: {e}"))?;
            Ok(File::Libfs { ino: attr.ino, fh })
        }
        Target::Kernel { dir } => {
            let p = dir.join(name);
            std::fs::File::create(&p).map(File::Kernel).map_err(|e| format!("create {}: {e}", p.display()))
        }
    }
}

impl File {
    fn write(&mut self, t: &mut Target, off: u64, data: &[u8]) -> Result<(), String> {
        use std::os::unix::fs::FileExt;
        match (self, t) {
            (File::Libfs { ino, .. }, Target::Libfs { fs, cred, pusher, .. }) => {
                fs.write(cred, *ino, off, data).map_err(|e| e.to_string())?;
                match pusher {
                    Some(p) => p.wrote(data.len() as u64),
                    None => Ok(()),
                }
            }
            (File::Kernel(f), _) => f.write_all_at(data, off).map_err(|e| e.to_string()),
            _ => Err("file and target disagree".into()),
        }
    }

    fn fsync(&mut self, t: &mut Target) -> Result<(), String> {
        match (self, t) {
            (File::Libfs { ino, .. }, Target::Libfs { fs, pusher, .. }) => {
                fs.fsync(*ino, false).map_err(|e| e.to_string())?;
                match pusher {
                    Some(p) => p.push(true),
                    None => Ok(()),
                }
            }
            (File::Kernel(f), _) => f.sync_all().map_err(|e| e.to_string()),
            _ => Err("file and target disagree".into()),
        }
    }

    fn close(self, t: &mut Target) {
        if let (File::Libfs { ino, fh }, Target::Libfs { fs, .. }) = (self, t) {
            fs.release(ino, fh);
            fs.forget(ino, 1);
        }
    }
}
