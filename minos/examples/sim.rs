//! More simulation seeds, by command:
//!
//! ```text
//! cargo run --release -p linefs-minos --example sim -- [--mode all|synch|...] [--nodes N]
//!     [--seeds N] [--first-seed S] [--ops N] [--keys N] [--mutation NAME] [--reliable]
//! ```
//!
//! Prints per mode the operations and messages simulated and every failing seed.

use clap::Parser;
use linefs_minos::sim::{simulate, SimCfg};
use linefs_minos::{Mode, Mutation};

#[derive(Parser)]
#[command(name = "sim", about = "Simulate the MINOS protocol core over many seeds")]
struct Args {
    /// The mode to simulate, or all.
    #[arg(long, default_value = "all", value_parser = parse_modes)]
    mode: Modes,
    /// Nodes in the simulated cluster.
    #[arg(long, value_name = "N", default_value_t = 5)]
    nodes: u32,
    /// Seeds to run.
    #[arg(long, value_name = "N", default_value_t = 20)]
    seeds: u64,
    /// The first seed.
    #[arg(long, value_name = "S", default_value_t = 1)]
    first_seed: u64,
    /// Operations per seed.
    #[arg(long, value_name = "N", default_value_t = 3000)]
    ops: usize,
    /// Keys the operations touch.
    #[arg(long, value_name = "N", default_value_t = 4)]
    keys: u32,
    /// A deliberate protocol bug the simulation must catch (by name, e.g. ValBeforeAllAcks).
    #[arg(long, value_name = "NAME", value_parser = parse_mutation)]
    mutation: Option<Mutation>,
    /// No message loss, duplication or crash.
    #[arg(long)]
    reliable: bool,
}

/// The modes `--mode` names.
#[derive(Clone)]
struct Modes(Vec<Mode>);

fn parse_modes(s: &str) -> Result<Modes, String> {
    if s == "all" {
        Ok(Modes(Mode::ALL.to_vec()))
    } else {
        Ok(Modes(vec![s.parse()?]))
    }
}

fn parse_mutation(s: &str) -> Result<Mutation, String> {
    Mutation::ALL
        .iter()
        .find(|m| format!("{m:?}") == s)
        .copied()
        .ok_or_else(|| format!("mutations: {:?}", Mutation::ALL))
}

fn main() {
    let a = Args::parse();
    let (nodes, seeds, first, ops) = (a.nodes, a.seeds, a.first_seed, a.ops);
    let mut failed = 0;
    for mode in a.mode.0 {
        let (mut w, mut r, mut msgs) = (0, 0, 0);
        for seed in first..first + seeds {
            let mut cfg = SimCfg {
                keys: a.keys,
                mutation: a.mutation.unwrap_or(Mutation::None),
                ..SimCfg::new(mode, nodes, ops, seed)
            };
            if a.reliable {
                cfg = cfg.reliable();
            }
            match simulate(&cfg) {
                Ok(rep) => {
                    w += rep.writes;
                    r += rep.reads;
                    msgs += rep.messages;
                }
                Err(e) => {
                    failed += 1;
                    println!("FAILED {e}");
                }
            }
        }
        println!(
            "{mode}: {nodes} nodes, {seeds} seeds from {first}, {ops} ops each: {w} writes, {r} reads, {msgs} messages"
        );
    }
    std::process::exit(i32::from(failed > 0));
}
