//! The command line, and pinning the process to the CPUs it names (`--cpus`: the SmartNIC's
//! own cores in the emulation).

use clap::Parser;
use rustix::thread::{sched_setaffinity, CpuSet};
use std::path::PathBuf;

/// nicfs: owns a node's PM, attaches its clients and publishes their logs.
#[derive(Debug, Parser)]
#[command(name = "nicfs", version)]
pub struct Args {
    /// The node's PM directory (public.pm and log-NN.pm, formatted by `linefs up` or mkfs).
    #[arg(long)]
    pub node: PathBuf,
    /// The Unix socket clients connect to (a stale file there is replaced).
    #[arg(long)]
    pub socket: PathBuf,
    /// CPUs to run on, e.g. `2,3` or `0-1,4`.
    #[arg(long, value_parser = parse_cpus)]
    pub cpus: Option<CpuList>,
    /// A JSON status file, rewritten every second and at exit.
    #[arg(long)]
    pub status_file: Option<PathBuf>,
    /// The kworker's heartbeat interval in ms (kworker's `--heartbeat-ms`). Three missed
    /// beats isolate the node; at most 300 so that a dead host is noticed within a second.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(10..=300))]
    pub kworker_heartbeat_ms: u64,
    /// Most bytes of log one fetched chunk (one publication batch) covers; 4 MiB by default
    /// (LineFS's chunk). Smaller chunks pipeline a log in more, smaller steps.
    #[arg(long, default_value_t = crate::node::CHUNK_BYTES, value_parser = clap::value_parser!(u64).range(4096..))]
    pub chunk_bytes: u64,
    /// Publish every record as logged: no coalescing stage.
    #[arg(long)]
    pub no_coalesce: bool,
}

/// CPU numbers, sorted, without duplicates. (A newtype: clap reads `Option<Vec<_>>` as a
/// repeated argument.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// Parses a CPU list: comma-separated numbers and inclusive ranges.
pub fn parse_cpus(s: &str) -> Result<CpuList, String> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        let num = |t: &str| t.trim().parse::<usize>().map_err(|_| format!("bad CPU number {t:?} in {s:?}"));
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if lo > hi {
            return Err(format!("empty CPU range {part:?}"));
        }
        if hi >= CpuSet::MAX_CPU {
            return Err(format!("CPU {hi} is beyond the {} this system call can name", CpuSet::MAX_CPU));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(CpuList(cpus))
}

/// Pins the calling thread — call it before starting any other, which inherit it — to `cpus`.
pub fn pin(cpus: &CpuList) -> std::io::Result<()> {
    let mut set = CpuSet::new();
    for &c in &cpus.0 {
        set.set(c);
    }
    sched_setaffinity(None, &set)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line() {
        use clap::CommandFactory;
        Args::command().debug_assert();
        let a = Args::try_parse_from(["nicfs", "--node", "n", "--socket", "s", "--cpus", "1,0"]).unwrap();
        assert_eq!(a.cpus, Some(CpuList(vec![0, 1])));
        assert_eq!(a.status_file, None);
        assert_eq!(a.kworker_heartbeat_ms, 100);
        assert!(
            Args::try_parse_from(["nicfs", "--node", "n", "--socket", "s", "--kworker-heartbeat-ms", "301"]).is_err()
        );
        assert!(Args::try_parse_from(["nicfs", "--node", "n"]).is_err());
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpus("3").unwrap().0, vec![3]);
        assert_eq!(parse_cpus("0-2,5, 1").unwrap().0, vec![0, 1, 2, 5]);
        assert!(parse_cpus("2-1").is_err());
        assert!(parse_cpus("x").is_err());
        assert!(parse_cpus("").is_err());
        assert!(parse_cpus("99999").is_err());
    }
}
