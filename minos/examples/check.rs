//! The deeper model check, by command:
//!
//! ```text
//! cargo run --release -p linefs-minos --example check -- [--mode all|synch|strict|renf|event|scope]
//!     [--workload all|pair|small|standard|contended|faulty|scoped] [--depth N] [--dups N]
//!     [--drops N] [--crashes N] [--fifo] [--threads N]
//! ```
//!
//! Without `--depth` every workload is explored to the end. Prints, per mode and workload,
//! the states explored and any violation with its trace; exits 1 on a violation.

use clap::Parser;
use linefs_minos::check::{run, ModelCfg};
use linefs_minos::Mode;

#[derive(Parser)]
#[command(name = "check", about = "Model-check the MINOS protocol core (stateright)")]
struct Args {
    /// The mode to check, or all.
    #[arg(long, default_value = "all", value_parser = parse_modes)]
    mode: Modes,
    /// The workload (repeatable), or all; default: standard and contended.
    #[arg(long, value_parser = parse_workload)]
    workload: Vec<&'static str>,
    /// Explore at most this deep (default: every workload to the end).
    #[arg(long, value_name = "N")]
    depth: Option<usize>,
    /// Deliveries that may keep their message for another delivery.
    #[arg(long, value_name = "N", default_value_t = 1)]
    dups: u8,
    /// Messages that may be lost.
    #[arg(long, value_name = "N", default_value_t = 0)]
    drops: u8,
    /// Node crashes.
    #[arg(long, value_name = "N", default_value_t = 0)]
    crashes: u8,
    /// Deliver the messages of each link in order.
    #[arg(long)]
    fifo: bool,
    /// Checker threads.
    #[arg(long, value_name = "N", default_value_t = 2)]
    threads: usize,
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

/// One of [`ModelCfg::WORKLOADS`], or `all` (the empty name, expanded in `main`).
fn parse_workload(s: &str) -> Result<&'static str, String> {
    if s == "all" {
        return Ok("");
    }
    ModelCfg::WORKLOADS
        .into_iter()
        .find(|w| *w == s)
        .ok_or_else(|| format!("unknown workload {s} (all, {})", ModelCfg::WORKLOADS.join(", ")))
}

fn main() {
    let args = Args::parse();
    let workloads: Vec<&str> = if args.workload.is_empty() {
        vec!["standard", "contended"]
    } else if args.workload.contains(&"") {
        ModelCfg::WORKLOADS.to_vec()
    } else {
        args.workload.clone()
    };
    let mut failed = false;
    let mut total = 0;
    for mode in args.mode.0 {
        for w in &workloads {
            let cfg = ModelCfg::named(w, mode).expect("known workload");
            let cfg =
                cfg.with_duplicates(args.dups).with_drops(args.drops).with_crashes(args.crashes).with_fifo(args.fifo);
            let outcome = run(cfg, args.depth, args.threads);
            println!("{w:>9} {outcome}");
            if !outcome.unseen.is_empty() {
                println!("          never seen: {:?}", outcome.unseen);
            }
            total += outcome.states;
            failed |= !outcome.ok();
        }
    }
    println!("total states explored: {total}");
    std::process::exit(i32::from(failed));
}
