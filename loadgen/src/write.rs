//! `linefs-loadgen write`: one libfs client's sequential-write run, timed and costed.
//!
//! Phases: mount (or attach to nicfs) and create the run's directory — not measured; with
//! `--wait-go` a ready line, then the go byte — then the **write phase** (create each file,
//! `--io` writes at increasing offsets, an fsync every `--fsync-every` writes, release) and
//! the **drain** (`Fs::shutdown`: everything left in the log is published — by this process
//! in the host-only mode, by nicfs with offload — and the client detaches). Both phases are
//! part of the work: the result gives each one's wall time, and the CPU time (user + system,
//! from `getrusage(RUSAGE_SELF)`, every thread of the process) of the two together.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use libfs::{Cred, Fs, FsOptions, ROOT_INO};
use serde_json::{json, Value};

use crate::pin;
use linefs_pm::cpus::{self, CpuList};

/// Exit status when stdin closes before the go byte (the driver is gone): nothing written.
const NO_GO: u8 = 3;

#[derive(Debug, Clone, clap::Args)]
pub struct WriteArgs {
    /// The node's PM directory (public.pm, log-NN.pm).
    #[arg(long, value_name = "NODEDIR")]
    node: PathBuf,
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

/// Parses a size such as `16384`, `4M`, `1G` (binary units).
fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("bad size {s:?}"))?;
    let shift = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        _ => return Err(format!("bad size unit in {s:?} (K, M or G)")),
    };
    n.checked_mul(1 << shift).ok_or_else(|| format!("size {s:?} is too large"))
}

/// This process's CPU time so far: (user, system) seconds, all threads.
fn cpu_times() -> Result<(f64, f64), String> {
    // SAFETY: rusage is plain old data, for which all-zero bytes are a valid value, and
    // getrusage only writes the struct it is handed.
    let (rc, ru) = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        (libc::getrusage(libc::RUSAGE_SELF, &mut ru), ru)
    };
    if rc != 0 {
        return Err(format!("getrusage: {}", std::io::Error::last_os_error()));
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok((secs(ru.ru_utime), secs(ru.ru_stime)))
}

fn emit(v: &Value) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{v}").and_then(|()| out.flush()).map_err(|e| format!("stdout: {e}"))
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

/// Mounts, waits for the go (if asked), writes, shuts down. `None`: stdin closed before the
/// go byte. The result object: `bytes`, `files`, `io`, `writes`, `fsyncs`, `write_seconds`,
/// `drain_seconds`, `seconds` (their sum), `cpu_user_s`, `cpu_sys_s`, `cpu_s` (of the two
/// phases), `log_bytes` (log appended by the write phase), `published_all` (after the
/// drain the client's published LSN is its log's tail), `offload`, `backing` and
/// `persist_method` (of the PM), `slot`, `pid`, `dir`.
pub fn run(a: &WriteArgs) -> Result<Option<Value>, String> {
    if let Some(c) = &a.cpus {
        pin(c)?;
    }
    let opts = FsOptions { pm_path: a.node.clone(), nicfs: a.nicfs.clone(), client: a.client, ..Default::default() };
    let fs = Fs::mount(opts).map_err(|e| format!("mount {}: {e}", a.node.display()))?;
    let cred =
        Cred { uid: rustix::process::geteuid().as_raw(), gid: rustix::process::getegid().as_raw(), groups: vec![] };
    let dir = fs.mkdir(&cred, ROOT_INO, a.dir.as_bytes(), 0o755, 0o022).map_err(|e| format!("mkdir {}: {e}", a.dir))?;
    let st = fs.status();
    let pid = std::process::id();
    if a.wait_go {
        emit(&json!({ "ready": true, "pid": pid, "slot": st.client, "offload": st.offload }))?;
        let mut go = [0u8; 1];
        if !matches!(std::io::stdin().read(&mut go), Ok(1)) {
            tracing::warn!("standard input closed before the go byte: not writing");
            drop(fs);
            return Ok(None);
        }
    }
    let buf: Vec<u8> = (0..a.io).map(|i| (i % 251) as u8 + 1).collect();
    let (u0, s0) = cpu_times()?;
    let tail0 = st.tail_lsn;
    let start = Instant::now();
    let (mut writes, mut fsyncs) = (0u64, 0u64);
    let per_file = a.bytes / a.files;
    for f in 0..a.files {
        let size = if f + 1 == a.files { a.bytes - per_file * (a.files - 1) } else { per_file };
        let name = format!("f{f}");
        let (attr, fh) = fs
            .create(&cred, dir.ino, name.as_bytes(), 0o644, 0o022, libc::O_RDWR)
            .map_err(|e| format!("create {}/{name}: {e}", a.dir))?;
        let mut off = 0u64;
        while off < size {
            let n = (size - off).min(a.io) as usize;
            fs.write(&cred, attr.ino, off, &buf[..n]).map_err(|e| format!("write {}/{name} at {off}: {e}", a.dir))?;
            off += n as u64;
            writes += 1;
            if a.fsync_every > 0 && writes.is_multiple_of(a.fsync_every) {
                fs.fsync(attr.ino, false).map_err(|e| format!("fsync {}/{name}: {e}", a.dir))?;
                fsyncs += 1;
            }
        }
        fs.release(attr.ino, fh);
        fs.forget(attr.ino, 1);
    }
    let write_seconds = start.elapsed().as_secs_f64();
    let log_bytes = fs.status().tail_lsn - tail0;
    let drain = Instant::now();
    fs.forget(dir.ino, 1);
    fs.shutdown().map_err(|e| format!("shutdown (publishing the log): {e}"))?;
    let drain_seconds = drain.elapsed().as_secs_f64();
    let end = fs.status();
    let (u1, s1) = cpu_times()?;
    tracing::info!(writes, write_seconds, drain_seconds, "done");
    Ok(Some(json!({
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
        "published_all": end.published_lsn == end.tail_lsn,
        "offload": end.offload,
        "backing": end.backing,
        "persist_method": end.persist_method,
        "slot": end.client,
        "pid": pid,
        "dir": a.dir,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16384"), Ok(16384));
        assert_eq!(parse_size("4M"), Ok(4 << 20));
        assert_eq!(parse_size("1g"), Ok(1 << 30));
        assert!(parse_size("1T").is_err());
    }
}
