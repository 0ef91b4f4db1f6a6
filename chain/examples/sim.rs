//! More simulation seeds, by command:
//!
//! ```text
//! cargo run --release -p linefs-chain --example sim -- [--seeds N] [--first-seed S]
//!     [--ops N] [--nodes N] [--replicas N] [--mutation NAME]
//! ```
//!
//! Prints what the seeds did in all and every failing seed with its replay command; exits 1
//! if any failed.

use clap::Parser;
use linefs_chain::sim::{simulate, SimCfg};
use linefs_chain::Mutation;

#[derive(Parser)]
#[command(about = "Run the chain replication simulation over many seeds")]
struct Args {
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    #[arg(long, default_value_t = 1)]
    first_seed: u64,
    #[arg(long, default_value_t = 5000)]
    ops: usize,
    #[arg(long, default_value_t = 5)]
    nodes: u32,
    #[arg(long, default_value_t = 2)]
    replicas: usize,
    /// A deliberate bug to plant (its name as in `Mutation`), to see it caught.
    #[arg(long)]
    mutation: Option<String>,
}

fn main() {
    let args = Args::parse();
    let mutation = match &args.mutation {
        None => Mutation::None,
        Some(name) => *Mutation::ALL
            .iter()
            .find(|m| format!("{m:?}") == *name)
            .unwrap_or_else(|| panic!("mutations: {:?}", Mutation::ALL)),
    };
    let (mut failed, mut fsyncs, mut steps) = (0, 0, 0);
    for seed in args.first_seed..args.first_seed + args.seeds {
        let cfg = SimCfg { nodes: args.nodes, replicas: args.replicas, mutation, ..SimCfg::new(args.ops, seed) };
        match simulate(&cfg) {
            Ok(r) => {
                fsyncs += r.fsyncs_done;
                steps += r.steps;
            }
            Err(e) => {
                failed += 1;
                println!(
                    "FAILED {e}\n  replay: cargo run --release -p linefs-chain --example sim -- --seeds 1 --first-seed {seed} --ops {} --nodes {} --replicas {}",
                    args.ops, args.nodes, args.replicas
                );
            }
        }
    }
    println!(
        "{} seeds from {}, {} ops each, {} nodes, {} replicas: {steps} steps, {fsyncs} fsyncs completed, {failed} failed",
        args.seeds, args.first_seed, args.ops, args.nodes, args.replicas
    );
    std::process::exit(i32::from(failed > 0));
}
