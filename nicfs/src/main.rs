//! The `nicfs` binary: see the crate docs of the `nicfs` library.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    linefs_logging::init("info");
    match nicfs::run(nicfs::Args::parse().into_config()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nicfs: {e}");
            ExitCode::FAILURE
        }
    }
}
