//! `linefs crash-suite [--quick]`: runs the crash suite (crate `linefs-crash-suite`) and
//! prints its closing line; any violation makes the command fail, after each one is printed
//! with its workload id (`--only ID` reruns it).

use std::io::Write;

use linefs_crash_suite::workload::{self, Workload};
use linefs_ops::util::{fail, CliResult};
use serde_json::json;

pub struct Args {
    pub quick: bool,
    pub json: bool,
    pub seed: u64,
    pub threads: Option<usize>,
    pub only: Option<usize>,
    pub list: bool,
}

pub fn run(a: &Args) -> CliResult<String> {
    let all = if a.quick { workload::quick(a.seed) } else { workload::all(a.seed) };
    let chosen: Vec<Workload> = match a.only {
        Some(id) => {
            let w = workload::all(a.seed).into_iter().find(|w| w.id == id);
            vec![w.ok_or_else(|| fail(format!("no workload #{id} (ids go up to {})", all.len().saturating_sub(1))))?]
        }
        None => all,
    };
    if a.list {
        return Ok(chosen.iter().map(|w| w.to_string()).collect::<Vec<_>>().join("\n"));
    }
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    let crash = linefs_crash_suite::crash_opts(a.quick, a.seed);
    eprintln!(
        "crash-suite: {} workloads ({}), {threads} threads, crash images: exhaustive up to {} pending lines, \
         else {} random subsets + per-line images for {} lines; torn 8-byte words: {}",
        chosen.len(),
        if a.quick { "quick slice" } else { "full set" },
        crash.max_exhaustive,
        crash.samples,
        crash.line_cap,
        if crash.torn_words { "yes" } else { "no" },
    );
    let quiet = a.json;
    let report = linefs_crash_suite::run(&chosen, &crash, threads, &|done, total, r| {
        if !quiet && (done % 100 == 0 || done == total) {
            eprint!("\r  {done}/{total} workloads, {} crash states, {} violations ", r.states, r.violations.len());
            let _ = std::io::stderr().flush();
        }
    });
    if !quiet {
        eprintln!();
    }
    for v in &report.violations {
        eprintln!("VIOLATION in workload {}:\n  {}", v.workload, v.detail);
    }
    let out = if a.json {
        json!({
            "workloads": report.workloads,
            "crash_points": report.points,
            "crash_states": report.states,
            "violations": report.violations.iter().map(|v| json!({"id": v.id, "workload": v.workload, "detail": v.detail})).collect::<Vec<_>>(),
            "seconds": report.seconds,
            "quick": a.quick,
            "seed": a.seed,
        })
        .to_string()
    } else {
        format!("{} ({:.0} s)", report.summary(), report.seconds)
    };
    if report.violations.is_empty() {
        Ok(out)
    } else {
        println!("{out}");
        Err(fail(format!("{} violations (rerun one with --only ID)", report.violations.len())))
    }
}
