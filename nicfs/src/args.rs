//! The command line (`--cpus` names the SmartNIC's own cores in the emulation; the list
//! and the pinning are `linefs_pm::cpus`).

use clap::Parser;
use linefs_pm::cpus::{self, CpuList};
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
    #[arg(long, value_parser = cpus::parse)]
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
}
