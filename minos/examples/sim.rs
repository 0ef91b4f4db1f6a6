//! More simulation seeds, by command:
//!
//! ```text
//! cargo run --release -p linefs-minos --example sim -- [--mode all|synch|...] [--nodes N]
//!     [--seeds N] [--first-seed S] [--ops N] [--keys N] [--mutation NAME] [--reliable]
//! ```
//!
//! Prints per mode the operations and messages simulated and every failing seed.

use linefs_minos::sim::{simulate, SimCfg};
use linefs_minos::{Mode, Mutation};

fn main() {
    let mut modes = Mode::ALL.to_vec();
    let (mut nodes, mut seeds, mut first, mut ops, mut keys) = (5u32, 20u64, 1u64, 3000usize, 4u32);
    let mut mutation = Mutation::None;
    let mut reliable = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || -> String { args.next().unwrap_or_else(|| panic!("{a} needs a value")) };
        match a.as_str() {
            "--mode" => {
                let v = val();
                if v != "all" {
                    modes = vec![v.parse().unwrap_or_else(|e: String| panic!("{e}"))];
                }
            }
            "--nodes" => nodes = val().parse().expect("--nodes N"),
            "--seeds" => seeds = val().parse().expect("--seeds N"),
            "--first-seed" => first = val().parse().expect("--first-seed S"),
            "--ops" => ops = val().parse().expect("--ops N"),
            "--keys" => keys = val().parse().expect("--keys N"),
            "--reliable" => reliable = true,
            "--mutation" => {
                let v = val();
                mutation = *Mutation::ALL
                    .iter()
                    .find(|m| format!("{m:?}") == v)
                    .unwrap_or_else(|| panic!("mutations: {:?}", Mutation::ALL));
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let mut failed = 0;
    for mode in modes {
        let (mut w, mut r, mut msgs) = (0, 0, 0);
        for seed in first..first + seeds {
            let mut cfg = SimCfg { keys, mutation, ..SimCfg::new(mode, nodes, ops, seed) };
            if reliable {
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
