//! The command line of the kworker daemon.

use clap::Parser;
use std::path::PathBuf;

/// kworker: executes nicfs's copy lists into the node's public PM file.
#[derive(Debug, Clone, Parser)]
#[command(name = "kworker", version)]
pub struct Args {
    /// The node's PM directory (public.pm and log-NN.pm).
    #[arg(long)]
    pub node: PathBuf,
    /// nicfs's Unix socket.
    #[arg(long)]
    pub socket: PathBuf,
    /// Milliseconds between heartbeats (nicfs must be started with the same interval).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub heartbeat_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line() {
        use clap::CommandFactory;
        Args::command().debug_assert();
        let a = Args::try_parse_from(["kworker", "--node", "n", "--socket", "s"]).unwrap();
        assert_eq!(a.heartbeat_ms, 100);
        assert!(Args::try_parse_from(["kworker", "--node", "n", "--socket", "s", "--heartbeat-ms", "0"]).is_err());
        assert!(Args::try_parse_from(["kworker", "--node", "n"]).is_err());
    }
}
