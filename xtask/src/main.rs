//! `xtask`: checks of the workspace's own code, run as `cargo run -p xtask -- <check>`.
//!
//! - `cycles`: no import cycle between the modules of any crate ([`cycles`]). A module `a`
//!   that names `crate::b::…` while `b` names `crate::a::…`, directly or through a chain, is
//!   a cycle. CI runs it (scripts/test.sh); it exits 1 and lists every cycle with the lines
//!   that close it.

mod cycles;
mod lexer;
mod modgraph;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "xtask", about = "Checks of the linefs workspace's own code")]
struct Cli {
    #[command(subcommand)]
    check: Check,
}

#[derive(Subcommand)]
enum Check {
    /// Report every import cycle between modules of a crate; exit 1 if there is one.
    Cycles {
        /// The workspace root (default: the one this xtask belongs to).
        #[arg(long, value_name = "DIR")]
        root: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    match Cli::parse().check {
        Check::Cycles { root } => {
            let root = root.unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".."));
            match cycles::check(&modgraph::Disk, &root) {
                Ok((report, found)) => {
                    print!("{report}");
                    if found {
                        eprintln!("xtask: cycles: import cycles found (see above)");
                        ExitCode::FAILURE
                    } else {
                        println!("xtask: cycles: no import cycle in any crate");
                        ExitCode::SUCCESS
                    }
                }
                Err(e) => {
                    eprintln!("xtask: cycles: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}
