//! The `kworker` binary: see the crate docs of the `kworker` library.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    linefs_logging::init("info");
    match kworker::daemon::run(kworker::args::Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kworker: {e}");
            ExitCode::FAILURE
        }
    }
}
