//! The report of `linefs bench offload` ([`super`] measures): per case the medians of
//! the runs — MB/s, the clients' mean write phase and drain, CPU seconds per GiB written of
//! the clients, kworker, nicfs and the host (clients + kworker), the co-runner's share of the
//! host CPUs — then offload over host-only for each client count, alone and with the
//! co-runner, against the goals: client CPU per GiB with offload ≤ 0.6× host-only
//! (every pair), and with the co-runner MB/s with offload ≥ 1.3× host-only. A table, or JSON.

use linefs_ops::util::{command_line, human_size, unix_now, utc_date};
use serde_json::{json, Value};

use super::{cpu_list, Case, Mode, Plan, Sample, IO};
use crate::median;

/// Client CPU per GiB with offload at most this times host-only's.
const CPU_GOAL: f64 = 0.6;
/// With the co-runner, MB/s with offload at least this times host-only's.
const MBS_GOAL: f64 = 1.3;

/// The medians of a case's runs, each figure separately.
#[derive(Debug, Clone)]
struct Medians {
    mb_s: f64,
    wall_s: f64,
    write_s: f64,
    drain_s: f64,
    client: f64,
    kworker: Option<f64>,
    nicfs: Option<f64>,
    /// Clients + kworker: what runs on the host CPUs.
    host: f64,
    /// The co-runner's CPU time over the timed phase / (wall time × host CPUs).
    corunner_share: Option<f64>,
    /// MB/s of the slowest and fastest run.
    range: (f64, f64),
}

fn medians(ss: &[Sample], host_cpus: usize) -> Medians {
    let m = |f: &dyn Fn(&Sample) -> f64| median(ss.iter().map(f).collect());
    let opt = |f: &dyn Fn(&Sample) -> Option<f64>| {
        let v: Vec<f64> = ss.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| median(v))
    };
    let mbs: Vec<f64> = ss.iter().map(Sample::mb_s).collect();
    Medians {
        mb_s: median(mbs.clone()),
        wall_s: m(&|s| s.wall_s),
        write_s: m(&|s| s.write_s),
        drain_s: m(&|s| s.drain_s),
        client: m(&|s| s.per_gib(s.client_cpu_s)),
        kworker: opt(&|s| s.kworker_cpu_s.map(|c| s.per_gib(c))),
        nicfs: opt(&|s| s.nicfs_cpu_s.map(|c| s.per_gib(c))),
        host: m(&|s| s.per_gib(s.client_cpu_s + s.kworker_cpu_s.unwrap_or(0.0))),
        corunner_share: opt(&|s| s.corunner_cpu_s.map(|c| c / (s.wall_s * host_cpus as f64).max(1e-9))),
        range: (
            mbs.iter().copied().fold(f64::INFINITY, f64::min),
            mbs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ),
    }
}

/// Offload over host-only for one client count, alone or with the co-runner.
struct Pair {
    clients: usize,
    corunner: bool,
    mb_s: f64,
    client_cpu: f64,
    host_cpu: f64,
}

impl Pair {
    fn cpu_met(&self) -> bool {
        self.client_cpu <= CPU_GOAL
    }
    /// Only with the co-runner.
    fn mbs_met(&self) -> Option<bool> {
        self.corunner.then_some(self.mb_s >= MBS_GOAL)
    }
}

pub(super) struct Report {
    date: String,
    command: String,
    bytes: u64,
    runs: u64,
    log_size: u64,
    host_cpus: Vec<usize>,
    nic_cpu: usize,
    corunner_threads: usize,
    pm_parent: String,
    backing: String,
    persist: String,
    cases: Vec<(Case, Vec<Sample>, Medians)>,
    pairs: Vec<Pair>,
    /// The 1-minute load average before the first case and after the last.
    load: [Option<f64>; 2],
}

fn yes(b: bool) -> &'static str {
    if b {
        "met"
    } else {
        "NOT met"
    }
}

impl Report {
    pub(super) fn new(plan: &Plan, samples: Vec<(Case, Vec<Sample>)>, load: [Option<f64>; 2]) -> Report {
        let first = samples.iter().flat_map(|(_, ss)| ss).flat_map(|s| &s.clients).next();
        let field = |k: &str| first.and_then(|v| v[k].as_str()).unwrap_or("unknown").to_string();
        let (backing, persist) = (field("backing"), field("persist_method"));
        let cases: Vec<(Case, Vec<Sample>, Medians)> = samples
            .into_iter()
            .map(|(c, ss)| {
                let m = medians(&ss, plan.cpus.host.len());
                (c, ss, m)
            })
            .collect();
        let find = |n: usize, co: bool, mode: Mode| {
            cases.iter().find(|(c, _, _)| c.clients == n && c.corunner == co && c.mode == mode).map(|(_, _, m)| m)
        };
        let mut pairs = Vec::new();
        for &n in &plan.clients {
            for corunner in [false, true] {
                if let (Some(o), Some(h)) = (find(n, corunner, Mode::Offload), find(n, corunner, Mode::HostOnly)) {
                    pairs.push(Pair {
                        clients: n,
                        corunner,
                        mb_s: o.mb_s / h.mb_s,
                        client_cpu: o.client / h.client,
                        host_cpu: o.host / h.host,
                    });
                }
            }
        }
        Report {
            date: utc_date(unix_now()),
            command: command_line(),
            bytes: plan.bytes,
            runs: plan.runs,
            log_size: plan.log_size,
            host_cpus: plan.cpus.host.clone(),
            nic_cpu: plan.cpus.nic,
            corunner_threads: plan.corunner_threads(),
            pm_parent: plan.pm_parent.display().to_string(),
            backing,
            persist,
            cases,
            pairs,
            load,
        }
    }

    fn workload(&self) -> String {
        format!(
            "each client (a linefs-loadgen process: libfs, no FUSE) writes {} to one file of its own directory \
             in {} KiB sequential writes, then shuts down (publishes everything); medians of {} interleaved run(s)",
            human_size(self.bytes),
            IO >> 10,
            self.runs
        )
    }

    fn setup_lines(&self) -> Vec<(&'static str, String)> {
        let host = cpu_list(&self.host_cpus);
        vec![
            ("CPUs", format!("host {host} (clients, kworker, co-runner); nicfs alone on {} (the SmartNIC's core)", self.nic_cpu)),
            ("offload", "one node: its nicfs (publishes) and kworker, the N clients attached to nicfs".into()),
            ("host-only", "N nodes without daemons, one client each, publishing its own log on the host CPUs".into()),
            (
                "co-runner",
                format!(
                    "{} busy thread(s) pinned to CPUs {host}, a session of its own, default priority, during the timed phase",
                    self.corunner_threads
                ),
            ),
            (
                "PM",
                format!(
                    "{}/linefs-bench-offload-* (fresh per case; backing {}, persist {}); logs of {} per client",
                    self.pm_parent,
                    self.backing,
                    self.persist,
                    human_size(self.log_size)
                ),
            ),
            (
                "load",
                format!(
                    "1-minute load average {} before the first case, {} after the last (other work on the machine moves \
                     these figures)",
                    self.load[0].map_or("?".into(), |l| format!("{l:.2}")),
                    self.load[1].map_or("?".into(), |l| format!("{l:.2}"))
                ),
            ),
            (
                "figures",
                "MB/s = all bytes / wall time from the go to the last client's exit; CPU s/GiB per GiB written by all \
                 clients (clients: getrusage; nicfs, kworker, co-runner: /proc/PID/stat); host = clients + kworker"
                    .into(),
            ),
        ]
    }

    pub(super) fn table(&self) -> String {
        let mut o = format!(
            "linefs bench offload — {}\ncommand:   {}\nworkload:  {}\n",
            self.date,
            self.command,
            self.workload()
        );
        for (k, v) in self.setup_lines() {
            o.push_str(&format!("{:<10} {v}\n", format!("{k}:")));
        }
        o.push('\n');
        o.push_str(&format!(
            "{:>7} {:>9} {:<9} {:>8} {:>17} {:>8} {:>8} {:>11} {:>11} {:>11} {:>11} {:>10}\n",
            "clients",
            "co-runner",
            "mode",
            "MB/s",
            "runs (min–max)",
            "write s",
            "drain s",
            "client CPU",
            "kworker CPU",
            "nicfs CPU",
            "host CPU",
            "co-runner"
        ));
        o.push_str(&format!(
            "{:>7} {:>9} {:<9} {:>8} {:>17} {:>8} {:>8} {:>11} {:>11} {:>11} {:>11} {:>10}\n",
            "", "", "", "", "", "", "", "s/GiB", "s/GiB", "s/GiB", "s/GiB", "% host"
        ));
        let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.3}"));
        for (c, _, m) in &self.cases {
            o.push_str(&format!(
                "{:>7} {:>9} {:<9} {:>8.1} {:>17} {:>8.3} {:>8.3} {:>11.3} {:>11} {:>11} {:>11.3} {:>10}\n",
                c.clients,
                if c.corunner { "yes" } else { "no" },
                c.mode.key(),
                m.mb_s,
                format!("{:.1}–{:.1}", m.range.0, m.range.1),
                m.write_s,
                m.drain_s,
                m.client,
                opt(m.kworker),
                opt(m.nicfs),
                m.host,
                m.corunner_share.map_or("-".to_string(), |s| format!("{:.1}", s * 100.0)),
            ));
        }
        o.push_str("\noffload / host-only (ratios of the medians)\n");
        o.push_str(&format!(
            "{:>7} {:>9} {:>10} {:>16} {:>14} {:>22} {:>22}\n",
            "clients",
            "co-runner",
            "MB/s",
            "client CPU/GiB",
            "host CPU/GiB",
            format!("client CPU ≤ {CPU_GOAL}×"),
            format!("MB/s ≥ {MBS_GOAL}× (co-run)")
        ));
        for p in &self.pairs {
            o.push_str(&format!(
                "{:>7} {:>9} {:>10.3} {:>16.3} {:>14.3} {:>22} {:>22}\n",
                p.clients,
                if p.corunner { "yes" } else { "no" },
                p.mb_s,
                p.client_cpu,
                p.host_cpu,
                yes(p.cpu_met()),
                p.mbs_met().map_or("-", yes)
            ));
        }
        o.push('\n');
        o.push_str(&self.verdict());
        o
    }

    /// One line per goal: met in how many of its cases, and which not.
    fn verdict(&self) -> String {
        let cpu_missed: Vec<String> = self
            .pairs
            .iter()
            .filter(|p| !p.cpu_met())
            .map(|p| format!("{} client(s){}", p.clients, if p.corunner { " + co-runner" } else { "" }))
            .collect();
        let co: Vec<&Pair> = self.pairs.iter().filter(|p| p.corunner).collect();
        let mbs_missed: Vec<String> =
            co.iter().filter(|p| p.mbs_met() == Some(false)).map(|p| format!("{} client(s)", p.clients)).collect();
        let line = |goal: String, total: usize, missed: &[String]| {
            let met = total - missed.len();
            if missed.is_empty() {
                format!("goal {goal}: met in all {total} case(s)\n")
            } else {
                format!("goal {goal}: met in {met} of {total}; not met with {}\n", missed.join(", "))
            }
        };
        line(format!("client CPU/GiB with offload ≤ {CPU_GOAL}× host-only"), self.pairs.len(), &cpu_missed)
            + &line(format!("with the co-runner, MB/s with offload ≥ {MBS_GOAL}× host-only"), co.len(), &mbs_missed)
    }

    pub(super) fn json(&self) -> Value {
        let cases: Vec<Value> = self
            .cases
            .iter()
            .map(|(c, ss, m)| {
                let runs: Vec<Value> = ss
                    .iter()
                    .map(|s| {
                        json!({
                            "wall_s": s.wall_s,
                            "bytes": s.bytes,
                            "mb_per_s": s.mb_s(),
                            "client_cpu_s": s.client_cpu_s,
                            "kworker_cpu_s": s.kworker_cpu_s,
                            "nicfs_cpu_s": s.nicfs_cpu_s,
                            "corunner_cpu_s": s.corunner_cpu_s,
                            "write_s": s.write_s,
                            "drain_s": s.drain_s,
                            "clients": s.clients,
                        })
                    })
                    .collect();
                json!({
                    "clients": c.clients,
                    "corunner": c.corunner,
                    "mode": c.mode.key(),
                    "bytes": ss.first().map_or(0, |s| s.bytes),
                    "mb_per_s": m.mb_s,
                    "wall_s": m.wall_s,
                    "write_s": m.write_s,
                    "drain_s": m.drain_s,
                    "client_cpu_s_per_gib": m.client,
                    "kworker_cpu_s_per_gib": m.kworker,
                    "nicfs_cpu_s_per_gib": m.nicfs,
                    "host_cpu_s_per_gib": m.host,
                    "corunner_host_share": m.corunner_share,
                    "runs": runs,
                })
            })
            .collect();
        let pairs: Vec<Value> = self
            .pairs
            .iter()
            .map(|p| {
                json!({
                    "clients": p.clients,
                    "corunner": p.corunner,
                    "mb_per_s_ratio": p.mb_s,
                    "client_cpu_per_gib_ratio": p.client_cpu,
                    "host_cpu_per_gib_ratio": p.host_cpu,
                    "client_cpu_goal_met": p.cpu_met(),
                    "corunner_mb_per_s_goal_met": p.mbs_met(),
                })
            })
            .collect();
        let setup: serde_json::Map<String, Value> =
            self.setup_lines().into_iter().map(|(k, v)| (k.to_string(), Value::String(v))).collect();
        json!({
            "bench": "offload",
            "date": self.date,
            "command": self.command,
            "workload": self.workload(),
            "bytes_per_client": self.bytes,
            "io": IO,
            "runs": self.runs,
            "log_size": self.log_size,
            "load_average": { "before": self.load[0], "after": self.load[1] },
            "cpus": { "host": self.host_cpus, "nic": self.nic_cpu, "corunner_threads": self.corunner_threads },
            "pm": { "dir": self.pm_parent, "backing": self.backing, "persist_method": self.persist },
            "setup": setup,
            "goals": {
                "client_cpu_per_gib_ratio_max": CPU_GOAL,
                "corunner_mb_per_s_ratio_min": MBS_GOAL,
            },
            "ratio_meaning": "offload figure / host-only figure, from the medians",
            "cases": cases,
            "comparisons": pairs,
            "verdict": self.verdict().lines().collect::<Vec<_>>(),
        })
    }
}
