//! The `nicfs` binary: see the crate docs of the `nicfs` library.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colours only on a terminal: `linefs up` sends the output to a log file.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()))
        .init();
    match nicfs::run(nicfs::Args::parse().into_config()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nicfs: {e}");
            ExitCode::FAILURE
        }
    }
}
