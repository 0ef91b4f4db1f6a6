//! The deeper model check, by command:
//!
//! ```text
//! cargo run --release -p linefs-minos --example check -- [--mode all|synch|strict|renf|event|scope]
//!     [--workload all|pair|small|standard|contended|faulty] [--depth N] [--dups N] [--drops N]
//!     [--crashes N] [--fifo] [--threads N]
//! ```
//!
//! Without `--depth` every workload is explored to the end. Prints, per mode and workload,
//! the states explored and any violation with its trace; exits 1 on a violation.

use linefs_minos::check::{run, ModelCfg};
use linefs_minos::Mode;

fn main() {
    let mut modes = Mode::ALL.to_vec();
    let mut workloads = vec!["standard", "contended"];
    let (mut depth, mut dups, mut threads, mut fifo) = (None, 1u8, 2usize, false);
    let (mut drops, mut crashes) = (0u8, 0u8);
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
            "--workload" => {
                let v = val();
                if v != "all" {
                    workloads = vec![ModelCfg::WORKLOADS
                        .into_iter()
                        .find(|w| *w == v)
                        .unwrap_or_else(|| panic!("unknown workload {v}"))];
                }
            }
            "--depth" => depth = Some(val().parse().expect("--depth N")),
            "--dups" => dups = val().parse().expect("--dups N"),
            "--drops" => drops = val().parse().expect("--drops N"),
            "--crashes" => crashes = val().parse().expect("--crashes N"),
            "--fifo" => fifo = true,
            "--threads" => threads = val().parse().expect("--threads N"),
            other => panic!("unknown argument {other}"),
        }
    }
    let mut failed = false;
    let mut total = 0;
    for mode in modes {
        for w in &workloads {
            let cfg = ModelCfg::named(w, mode).expect("known workload");
            let outcome =
                run(cfg.with_duplicates(dups).with_drops(drops).with_crashes(crashes).with_fifo(fifo), depth, threads);
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
