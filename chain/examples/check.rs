//! Deeper model checks than CI's, by command:
//!
//! ```text
//! cargo run --release -p linefs-chain --example check -- [--two-chunks] [--short-chains]
//!     [--drops N] [--duplicates N] [--crashes N] [--views N] [--mutation NAME] [--threads N]
//! ```
//!
//! Prints the states explored, the violations with their traces and the coverage not
//! reached; exits 1 on a violation.

use clap::Parser;
use linefs_chain::check::{run, ModelCfg};
use linefs_chain::Mutation;

#[derive(Parser)]
#[command(about = "Explore the chain replication model exhaustively")]
struct Args {
    /// Append 3 bytes with 2-byte chunks: a chunk shipped proactively and the fsync's
    /// remainder.
    #[arg(long)]
    two_chunks: bool,
    /// Chains of 2 on the 3 nodes (a removal brings a new member in).
    #[arg(long)]
    short_chains: bool,
    #[arg(long, default_value_t = 0)]
    drops: u8,
    #[arg(long, default_value_t = 0)]
    duplicates: u8,
    #[arg(long, default_value_t = 0)]
    crashes: u8,
    #[arg(long, default_value_t = 0)]
    views: u8,
    #[arg(long)]
    mutation: Option<String>,
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

fn main() {
    let a = Args::parse();
    let mut cfg = if a.two_chunks { ModelCfg::two_chunks() } else { ModelCfg::small() };
    if a.short_chains {
        cfg = cfg.short_chains();
    }
    cfg = cfg.with_drops(a.drops).with_duplicates(a.duplicates).with_crashes(a.crashes).with_views(a.views);
    if let Some(name) = &a.mutation {
        let m = *Mutation::ALL
            .iter()
            .find(|m| format!("{m:?}") == *name)
            .unwrap_or_else(|| panic!("mutations: {:?}", Mutation::ALL));
        cfg = cfg.with_mutation(m);
    }
    let o = run(cfg, a.threads);
    println!("{o}");
    if !o.unseen.is_empty() {
        println!("coverage not reached: {:?}", o.unseen);
    }
    std::process::exit(i32::from(!o.ok()));
}
