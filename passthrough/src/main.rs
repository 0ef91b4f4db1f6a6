//! `linefs-passthrough`: mounts a FUSE passthrough of a directory and serves it in the
//! foreground (the benchmarks' baseline). See [`linefs_passthrough::daemon`].

use std::process::ExitCode;

use clap::Parser;
use linefs_passthrough::daemon::{self, PassthroughArgs};

#[derive(Parser)]
#[command(name = "linefs-passthrough", version, about = "Serve a FUSE passthrough of a directory (benchmark baseline)")]
struct Cli {
    #[command(flatten)]
    args: PassthroughArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    linefs_logging::init("info");
    match daemon::run(cli.args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "linefs-passthrough failed");
            eprintln!("linefs-passthrough: {e}");
            ExitCode::FAILURE
        }
    }
}
