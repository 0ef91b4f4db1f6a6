//! `linefs-fuse`: mounts one linefs node (`--pm NODEDIR`, or through its nicfs with `--nicfs
//! SOCKET`) and serves it in the foreground. See [`fuse_mount::daemon`]. (The benchmarks'
//! passthrough of a directory is `linefs-passthrough`, a crate of its own.)

use std::process::ExitCode;

use clap::Parser;
use fuse_mount::daemon::{self, DaemonArgs};

#[derive(Parser)]
#[command(name = "linefs-fuse", version, about = "Serve a linefs node over FUSE")]
struct Cli {
    #[command(flatten)]
    args: DaemonArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    linefs_logging::init("info");
    match daemon::run(cli.args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "linefs-fuse failed");
            eprintln!("linefs-fuse: {e}");
            ExitCode::FAILURE
        }
    }
}
