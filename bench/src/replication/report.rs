//! The report of `linefs bench replication` ([`super`] measures): per table the medians of
//! the runs, then each goal of issue 23 item 7 beside the measured ratio with MET or NOT MET
//! and what the figure is made of. A table, or JSON.

use linefs_ops::util::{command_line, human_size, unix_now, utc_date};
use serde_json::{json, Value};

use super::{cpu_list, CompSample, Plan, SeqCase, SeqSample, Sys, HOPS, IO, MODES, PCTS};
use crate::median;

/// Sequential writes through node 0's FUSE mount at least this times the passthrough's.
const SEQ_GOAL: f64 = 1.0;
/// With the co-runner, offload at least this times host-only replication.
const CORUN_GOAL: f64 = 1.3;
/// write+fsync average at most this times (bare chain + one FUSE round trip).
const AVG_GOAL: f64 = 2.0;
/// write+fsync p99.9 at most this (µs).
const P999_GOAL_US: f64 = 1000.0;
/// On 80 % compressible data, lz4 saves at least this share of the network bytes...
const SAVE_GOAL: f64 = 0.70;
/// ...losing at most this share of the throughput.
const LOSS_GOAL: f64 = 0.10;

/// The latency statistics shown: (key in loadgen's `latency_us`, heading).
const LAT: [(&str, &str); 5] = [("avg", "avg"), ("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max")];

struct SeqRow {
    case: SeqCase,
    mb_s: f64,
    range: (f64, f64),
    client: f64,
    nicfs: Option<f64>,
    wire: Option<u64>,
    runs: Vec<SeqSample>,
}

struct CompRow {
    pct: u8,
    mode: &'static str,
    mb_s: f64,
    net: f64,
    cpu_per_gib: f64,
    adaptive: Value,
}

/// One goal, measured.
struct Goal {
    goal: String,
    case: String,
    value: f64,
    /// How the value reads ("1.23×", "850 µs").
    shown: String,
    met: bool,
    note: String,
}

pub(super) struct Report {
    date: String,
    command: String,
    bytes: u64,
    count: u64,
    runs: u64,
    host_cpus: String,
    nic_cpu: usize,
    pm_dir: String,
    replication: Option<Value>,
    seq: Vec<SeqRow>,
    lat: Vec<(Sys, Vec<f64>)>,
    comp: Vec<CompRow>,
    goals: Vec<Goal>,
}

fn met(b: bool) -> &'static str {
    if b {
        "MET"
    } else {
        "NOT MET"
    }
}

impl Report {
    pub(super) fn new(
        plan: &Plan,
        seqs: Vec<(SeqCase, Vec<SeqSample>)>,
        lats: Vec<(Sys, Vec<Value>)>,
        comps: Vec<((u8, &'static str), Vec<CompSample>)>,
        replication: Option<Value>,
    ) -> Report {
        let seq: Vec<SeqRow> = seqs
            .into_iter()
            .map(|(case, runs)| {
                let mbs: Vec<f64> = runs.iter().map(SeqSample::mb_s).collect();
                let nic: Vec<f64> = runs.iter().filter_map(|s| s.nicfs_cpu_s.map(|c| s.per_gib(c))).collect();
                SeqRow {
                    case,
                    mb_s: median(mbs.clone()),
                    range: (mbs.iter().copied().fold(f64::INFINITY, f64::min), mbs.iter().copied().fold(0.0, f64::max)),
                    client: median(runs.iter().map(|s| s.per_gib(s.client_cpu_s)).collect()),
                    nicfs: (!nic.is_empty()).then(|| median(nic)),
                    wire: runs.first().and_then(|s| s.wire_bytes),
                    runs,
                }
            })
            .collect();
        let lat: Vec<(Sys, Vec<f64>)> = lats
            .into_iter()
            .map(|(s, vs)| {
                (
                    s,
                    LAT.iter()
                        .map(|(k, _)| median(vs.iter().map(|v| v[k].as_f64().unwrap_or(f64::NAN)).collect()))
                        .collect(),
                )
            })
            .collect();
        let comp: Vec<CompRow> = comps
            .into_iter()
            .map(|((pct, mode), cs)| CompRow {
                pct,
                mode,
                mb_s: median(cs.iter().map(|c| c.mb_s).collect()),
                net: median(cs.iter().map(|c| c.net_bytes as f64).collect()),
                cpu_per_gib: median(cs.iter().map(|c| crate::cpu_per_gib(c.cpu_s, c.bytes)).collect()),
                adaptive: cs.last().map_or(Value::Null, |c| c.adaptive.clone()),
            })
            .collect();
        let mut r = Report {
            date: utc_date(unix_now()),
            command: command_line(),
            bytes: plan.bytes,
            count: plan.count,
            runs: plan.runs,
            host_cpus: cpu_list(&plan.cpus.host),
            nic_cpu: plan.cpus.nic,
            pm_dir: plan.pm_dir.display().to_string(),
            replication,
            seq,
            lat,
            comp,
            goals: Vec::new(),
        };
        r.goals = r.measure_goals(&plan.clients);
        r
    }

    fn seq_mbs(&self, sys: Sys, clients: usize, corunner: bool) -> Option<f64> {
        self.seq
            .iter()
            .find(|r| r.case.sys == sys && r.case.clients == clients && r.case.corunner == corunner)
            .map(|r| r.mb_s)
    }

    fn lat(&self, sys: Sys, stat: &str) -> f64 {
        let i = LAT.iter().position(|(k, _)| *k == stat).unwrap_or(0);
        self.lat.iter().find(|(s, _)| *s == sys).map_or(f64::NAN, |(_, v)| v[i])
    }

    fn comp(&self, pct: u8, mode: &str) -> Option<&CompRow> {
        self.comp.iter().find(|c| c.pct == pct && c.mode == mode)
    }

    fn replicated(&self) -> bool {
        self.replication.is_some()
    }

    fn measure_goals(&self, clients: &[usize]) -> Vec<Goal> {
        let mut g = Vec::new();
        let unreplicated = if self.replicated() {
            String::new()
        } else {
            " — this build's nicfs does not replicate: the linefs figure is the unreplicated offload path".into()
        };
        for &n in clients {
            if let (Some(o), Some(p)) =
                (self.seq_mbs(Sys::OffloadFuse, n, false), self.seq_mbs(Sys::Passthrough, n, false))
            {
                let x = o / p;
                g.push(Goal {
                    goal: format!("sequential write ≥ {SEQ_GOAL}× the FUSE passthrough"),
                    case: format!("{n} client(s), node 0's FUSE mount"),
                    value: x,
                    shown: format!("{x:.2}×"),
                    met: x >= SEQ_GOAL,
                    note: format!("{o:.1} vs {p:.1} MB/s{unreplicated}"),
                });
            }
        }
        for &n in clients {
            if let (Some(o), Some(h)) =
                (self.seq_mbs(Sys::OffloadLibfs, n, true), self.seq_mbs(Sys::HostChain, n, true))
            {
                let x = o / h;
                g.push(Goal {
                    goal: format!("offload ≥ {CORUN_GOAL}× host-only replication, CPU-bound co-runner"),
                    case: format!("{n} client(s), libfs clients"),
                    value: x,
                    shown: format!("{x:.2}×"),
                    met: x >= CORUN_GOAL,
                    note: format!("{o:.1} vs {h:.1} MB/s{unreplicated}"),
                });
            }
        }
        let (avg, chain, pt) =
            (self.lat(Sys::OffloadFuse, "avg"), self.lat(Sys::BareChain, "avg"), self.lat(Sys::Passthrough, "avg"));
        // One FUSE round trip: half the passthrough's write+fsync (two requests, a write and
        // an fsync, to a directory in memory).
        let bound = chain + pt / 2.0;
        let x = avg / bound;
        g.push(Goal {
            goal: format!("write+fsync avg ≤ {AVG_GOAL}× (bare chain + one FUSE round trip)"),
            case: "node 0's FUSE mount".into(),
            value: x,
            shown: format!("{x:.2}×"),
            met: x <= AVG_GOAL,
            note: format!(
                "{avg:.1} µs vs {chain:.1} µs (chain) + {:.1} µs (FUSE round trip = passthrough write+fsync / 2){unreplicated}",
                pt / 2.0
            ),
        });
        let p999 = self.lat(Sys::OffloadFuse, "p999");
        g.push(Goal {
            goal: "write+fsync p99.9 ≤ 1 ms".into(),
            case: "node 0's FUSE mount".into(),
            value: p999,
            shown: format!("{p999:.0} µs"),
            met: p999 <= P999_GOAL_US,
            note: format!("p50 {:.1} µs{unreplicated}", self.lat(Sys::OffloadFuse, "p50")),
        });
        if let (Some(on), Some(off)) = (self.comp(80, "on"), self.comp(80, "off")) {
            let saved = 1.0 - on.net / off.net;
            let loss = 1.0 - on.mb_s / off.mb_s;
            g.push(Goal {
                goal: format!(
                    "lz4 saves ≥ {:.0} % of network bytes on 80 %-compressible data, ≤ {:.0} % throughput loss",
                    SAVE_GOAL * 100.0,
                    LOSS_GOAL * 100.0
                ),
                case: "bare chain, lz4 on vs off".into(),
                value: saved,
                shown: format!("{:.1} % saved, {:.1} % lost", saved * 100.0, loss * 100.0),
                met: saved >= SAVE_GOAL && loss <= LOSS_GOAL,
                note:
                    "the transport with the sender's lz4; nicfs's own compress stage comes with the replication driver"
                        .into(),
            });
        }
        g
    }

    fn setup_lines(&self) -> Vec<(&'static str, String)> {
        vec![
            (
                "workload",
                format!(
                    "sequential: each client writes {} in {} KiB writes to a file of its own, fsync at the end; \
                     latency: {} pairs of a {} KiB write and an fsync; compression: {} down the bare chain; \
                     medians of {} run(s)",
                    human_size(self.bytes),
                    IO >> 10,
                    self.count,
                    IO >> 10,
                    human_size(self.bytes),
                    self.runs
                ),
            ),
            (
                "linefs",
                format!(
                    "3 nodes as `linefs up --nodes 3` (ZooKeeper, nicfs + kworker each); replication: {}",
                    match &self.replication {
                        Some(_) => "on (node 0's nicfs status has a replication section)".to_string(),
                        None => "NOT in this build (no replication section in nicfs's status): every node is its own \
                                 file system, nothing is replicated"
                            .to_string(),
                    }
                ),
            ),
            ("host-only", "a fresh host-only node per client; the client sends its new log down the bare chain after every MiB and on fsync, and fsync waits for the acks (Assise's way)".into()),
            ("chain", format!("{HOPS} linefs-loadgen hop processes on loopback TCP: store in a PM file, persist, forward, ack once durable there and below")),
            (
                "CPUs",
                format!(
                    "clients and the co-runner on {}; every nicfs and hop on {} (the SmartNIC's core)",
                    self.host_cpus, self.nic_cpu
                ),
            ),
            ("PM", format!("{} (tmpfs when /dev/shm)", self.pm_dir)),
            (
                "figures",
                "MB/s = all bytes / the slowest writer's go → last fsync; CPU s/GiB per GiB written (clients: getrusage; \
                 nicfs: the three daemons' /proc/PID/stat); network bytes = what the sender put on the wire × 3 hops"
                    .into(),
            ),
        ]
    }

    pub(super) fn table(&self) -> String {
        let mut o = format!("linefs bench replication — {}\ncommand:   {}\n", self.date, self.command);
        for (k, v) in self.setup_lines() {
            o.push_str(&format!("{:<10} {v}\n", format!("{k}:")));
        }
        o.push_str("\nsequential 16 KiB writes\n");
        o.push_str(&format!(
            "{:>7} {:>9} {:<38} {:>8} {:>15} {:>11} {:>11} {:>10}\n",
            "clients", "co-runner", "system", "MB/s", "runs (min–max)", "client CPU", "nicfs CPU", "chain MB"
        ));
        o.push_str(&format!(
            "{:>7} {:>9} {:<38} {:>8} {:>15} {:>11} {:>11} {:>10}\n",
            "", "", "", "", "", "s/GiB", "s/GiB", "sent"
        ));
        for r in &self.seq {
            o.push_str(&format!(
                "{:>7} {:>9} {:<38} {:>8.1} {:>15} {:>11.3} {:>11} {:>10}\n",
                r.case.clients,
                if r.case.corunner { "yes" } else { "no" },
                r.case.sys.label(),
                r.mb_s,
                format!("{:.1}–{:.1}", r.range.0, r.range.1),
                r.client,
                r.nicfs.map_or("-".into(), |v| format!("{v:.3}")),
                r.wire.map_or("-".into(), |w| format!("{:.1}", w as f64 / 1e6)),
            ));
        }
        o.push_str("\n16 KiB write+fsync latency (µs)\n");
        o.push_str(&format!("{:<38}", "system"));
        for (_, h) in LAT {
            o.push_str(&format!(" {h:>9}"));
        }
        o.push('\n');
        for (s, v) in &self.lat {
            o.push_str(&format!("{:<38}", s.label()));
            for x in v {
                o.push_str(&format!(" {x:>9.1}"));
            }
            o.push('\n');
        }
        o.push_str(&format!("\ncompression on the bare chain ({} per case)\n", human_size(self.bytes)));
        o.push_str(&format!(
            "{:>13} {:<9} {:>8} {:>14} {:>12} {:>11} {:>11}  {}\n",
            "compressible",
            "lz4",
            "MB/s",
            "network MB",
            "saved vs off",
            "MB/s vs off",
            "CPU s/GiB",
            "adaptive (last run)"
        ));
        for c in &self.comp {
            let off = self.comp(c.pct, "off");
            let saved = off.map_or(f64::NAN, |o| 1.0 - c.net / o.net);
            let speed = off.map_or(f64::NAN, |o| c.mb_s / o.mb_s);
            let ad = if c.mode == "adaptive" {
                format!(
                    "on={} compressed {}/{} probes {} switches off {} on {}",
                    c.adaptive["on"],
                    c.adaptive["compressed"],
                    c.adaptive["chunks"],
                    c.adaptive["probes"],
                    c.adaptive["switches_off"],
                    c.adaptive["switches_on"]
                )
            } else {
                String::new()
            };
            o.push_str(&format!(
                "{:>12}% {:<9} {:>8.1} {:>14.1} {:>11.1}% {:>10.3}× {:>11.3}  {ad}\n",
                c.pct,
                c.mode,
                c.mb_s,
                c.net / 1e6,
                saved * 100.0,
                speed,
                c.cpu_per_gib
            ));
        }
        o.push_str("\ngoals (issue 23 item 7)\n");
        for g in &self.goals {
            o.push_str(&format!("{:<8} {} — {}: {} ({})\n", met(g.met), g.goal, g.case, g.shown, g.note));
        }
        o
    }

    pub(super) fn json(&self) -> Value {
        let seq: Vec<Value> = self
            .seq
            .iter()
            .map(|r| {
                json!({
                    "system": r.case.sys.key(),
                    "clients": r.case.clients,
                    "corunner": r.case.corunner,
                    "mb_per_s": r.mb_s,
                    "client_cpu_s_per_gib": r.client,
                    "nicfs_cpu_s_per_gib": r.nicfs,
                    "chain_bytes_sent": r.wire,
                    "runs": r.runs.iter().map(|s| json!({
                        "bytes": s.bytes, "write_s": s.write_s, "mb_per_s": s.mb_s(),
                        "client_cpu_s": s.client_cpu_s, "nicfs_cpu_s": s.nicfs_cpu_s, "wire_bytes": s.wire_bytes,
                    })).collect::<Vec<_>>(),
                })
            })
            .collect();
        let lat: Vec<Value> = self
            .lat
            .iter()
            .map(|(s, v)| {
                let mut m = serde_json::Map::new();
                m.insert("system".into(), json!(s.key()));
                for ((k, _), x) in LAT.iter().zip(v) {
                    m.insert(format!("{k}_us"), json!(x));
                }
                Value::Object(m)
            })
            .collect();
        let comp: Vec<Value> = self
            .comp
            .iter()
            .map(|c| {
                json!({
                    "compressible_pct": c.pct, "lz4": c.mode, "mb_per_s": c.mb_s, "network_bytes": c.net,
                    "cpu_s_per_gib": c.cpu_per_gib, "adaptive": c.adaptive,
                })
            })
            .collect();
        let goals: Vec<Value> = self
            .goals
            .iter()
            .map(|g| json!({ "goal": g.goal, "case": g.case, "value": g.value, "shown": g.shown, "met": g.met, "note": g.note }))
            .collect();
        let setup: serde_json::Map<String, Value> =
            self.setup_lines().into_iter().map(|(k, v)| (k.to_string(), Value::String(v))).collect();
        json!({
            "bench": "replication",
            "date": self.date,
            "command": self.command,
            "bytes_per_client": self.bytes,
            "io": IO,
            "count": self.count,
            "runs": self.runs,
            "compressible_pcts": PCTS,
            "lz4_modes": MODES,
            "replication": self.replication,
            "setup": setup,
            "sequential": seq,
            "latency": lat,
            "compression": comp,
            "goals": goals,
        })
    }
}
