//! The Prometheus exposition of nicfs: what `GET /metrics` answers (served by [`http`] on
//! the loopback address of `--metrics-addr`).
//!
//! Nothing here counts anything. Each scrape takes a [`Sample`] of what the daemon already
//! keeps — the publication counters ([`crate::observe::counters`]), each stage's status and its
//! wait/service histograms ([`crate::pipeline::stage`]), the end-to-end chunk and fsync histograms
//! ([`crate::observe::latency::EndToEnd`]), sessions, lease counts, the mode and, with `--zk`, the
//! cluster membership (`cluster_epoch`, `cluster_persisted_epoch`, `cluster_session`,
//! `cluster_joins_total`) and chain replication (`replication_*`: chunks, bytes, acks,
//! retransmissions, stale frames dropped, memory held, fsyncs waiting, the largest member
//! lag in bytes and ms, per `member` label `slot<S>_node<N>` its lag, and the stages: raw and
//! saved bytes, chunks by compression, the controller's state and switches, the watermark's
//! pause, per `peer` its queues and p50/p99 latencies) — and encodes it with
//! `prometheus-client`'s text encoder as a [`Collector`], so the status file and `/metrics`
//! always tell the same story. The output is OpenMetrics text (`# EOF` at the end, content
//! type [`http::CONTENT_TYPE`]), which Prometheus scrapes as is.
//!
//! Names: prefix `linefs_nicfs_`; units in the names (`_bytes`, `_seconds`); counters end in
//! `_total`; durations are histograms in seconds with the buckets of
//! [`crate::observe::latency::BUCKETS_SECONDS`]; a `stage` label (fetch, validate, coalesce,
//! publish) on per-stage metrics and a `by` label (kworker, nicfs) on copy work. The node
//! is named once, by `linefs_nicfs_node_info{node, version}`; a scrape config tells nodes
//! apart by their address (each nicfs serves its own port).

pub(crate) mod http;

use crate::daemon::ctx::Ctx;
use crate::host::link::Mode;
use crate::lease::table::Counts;
use crate::observe::counters::CounterSnapshot;
use crate::observe::latency::Latency;
use crate::pipeline::stage::StageStatus;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::fmt;

/// The prefix of every metric name.
pub(crate) const PREFIX: &str = "linefs_nicfs";

/// A stage at the moment of a scrape.
#[derive(Debug, Clone)]
pub(crate) struct StageSample {
    pub(crate) status: StageStatus,
    pub(crate) wait: Latency,
    pub(crate) service: Latency,
}

/// What one scrape exports.
#[derive(Debug, Clone)]
pub(crate) struct Sample {
    /// The node directory's name (`node0` for `linefs up`'s first node).
    pub(crate) node: String,
    pub(crate) counters: CounterSnapshot,
    pub(crate) stages: Vec<StageSample>,
    pub(crate) sessions: u64,
    pub(crate) leases: Counts,
    pub(crate) mode: Mode,
    pub(crate) mode_switches: u64,
    pub(crate) chunk: Latency,
    pub(crate) fsync: Latency,
    /// What the per-user limits refused ([`crate::limits`]).
    pub(crate) refusals: crate::limits::RefusalCounts,
    /// The node's cluster membership (`--zk`), if it is in one.
    pub(crate) cluster: Option<crate::daemon::cluster::ClusterStatus>,
    /// Chain replication (`--zk`).
    pub(crate) replication: Option<crate::daemon::replication::status::ReplicationStatus>,
}

impl Sample {
    /// The daemon's numbers now.
    pub(super) fn take(ctx: &Ctx) -> Sample {
        let statuses = ctx.pipeline.stages();
        let stages = ctx
            .pipeline
            .stage_latencies()
            .into_iter()
            .filter_map(|(name, wait, service)| {
                let status = statuses.iter().find(|s| s.stage == name)?.clone();
                Some(StageSample { status, wait, service })
            })
            .collect();
        let host = ctx.host.status();
        Sample {
            node: ctx
                .node
                .dir
                .file_name()
                .map_or_else(|| ctx.node.dir.display().to_string(), |n| n.to_string_lossy().into_owned()),
            counters: ctx.node.counters.snapshot(),
            stages,
            sessions: ctx.sessions.all().len() as u64,
            leases: ctx.leases.counts(),
            mode: host.mode,
            mode_switches: host.mode_switches,
            chunk: ctx.latency.chunk.clone(),
            fsync: ctx.latency.fsync.clone(),
            refusals: crate::daemon::status::refusals(ctx),
            cluster: ctx.cluster.as_ref().map(|c| c.status()),
            replication: ctx.replication.as_ref().map(|r| r.status()),
        }
    }

    /// The OpenMetrics text of this sample, `# EOF` included.
    pub(crate) fn encode(self) -> Result<String, fmt::Error> {
        let mut registry = Registry::with_prefix(PREFIX);
        registry.register_collector(Box::new(self));
        let mut out = String::with_capacity(16 << 10);
        prometheus_client::encoding::text::encode(&mut out, &registry)?;
        Ok(out)
    }
}

/// Encodes one metric without labels.
fn one(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric: &impl EncodeMetric,
) -> fmt::Result {
    let m = enc.encode_descriptor(name, help, unit, metric.metric_type())?;
    metric.encode(m)
}

/// Encodes one metric family: a `label` with one value per member.
fn family<M: EncodeMetric>(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    metric_type: MetricType,
    label: &str,
    members: &[(&str, M)],
) -> fmt::Result {
    let mut m = enc.encode_descriptor(name, help, unit, metric_type)?;
    for (value, metric) in members {
        let labels = [(label, *value)];
        metric.encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn counter(v: u64) -> ConstCounter<u64> {
    ConstCounter::new(v)
}

fn gauge(v: u64) -> ConstGauge<i64> {
    ConstGauge::new(i64::try_from(v).unwrap_or(i64::MAX))
}

/// The replication metrics (a node of a cluster).
fn replication(e: &mut DescriptorEncoder, r: &crate::daemon::replication::status::ReplicationStatus) -> fmt::Result {
    let bytes = Some(&Unit::Bytes);
    let c = &r.counters;
    one(e, "replication_chunks_sent", "Chunks of log sent down the chain", None, &counter(c.chunks_sent))?;
    one(e, "replication_sent", "Chunk payload bytes sent (after compression)", bytes, &counter(c.bytes_sent))?;
    one(e, "replication_log_sent", "Log bytes sent in chunks (before compression)", bytes, &counter(c.log_bytes_sent))?;
    one(e, "replication_retransmits", "Chunks sent again", None, &counter(c.retransmits))?;
    one(e, "replication_acks_received", "Acknowledgements received", None, &counter(c.acks_received))?;
    one(e, "replication_acks_sent", "Acknowledgements sent", None, &counter(c.acks_sent))?;
    one(e, "replication_chunks_received", "Chunks received", None, &counter(c.chunks_received))?;
    one(e, "replication_received", "Replication payload bytes received", bytes, &counter(c.bytes_received))?;
    let help = "Replication frames dropped for another epoch than the engine's";
    one(e, "replication_stale_dropped", help, None, &counter(c.stale_dropped))?;
    let help = "Replication frames not sent (queue full, no link); resent on a tick";
    one(e, "replication_send_dropped", help, None, &counter(c.send_dropped))?;
    let help = "Replicated entries this node's admission refused";
    one(e, "replication_refused_entries", help, None, &counter(c.refused_entries))?;
    one(e, "replication_memory", "Log bytes held in memory for the chain", bytes, &gauge(r.memory_bytes))?;
    one(e, "replication_fsyncs_waiting", "Fsyncs waiting for the chain", None, &gauge(r.fsyncs_waiting as u64))?;
    let members: Vec<_> = r.logs.iter().flat_map(|l| l.members.iter().map(move |m| (l.slot, m))).collect();
    let max_bytes = members.iter().map(|(_, m)| m.lag_bytes).max().unwrap_or(0);
    let max_ms = members.iter().map(|(_, m)| m.lag_ms).max().unwrap_or(0);
    let help = "The largest lag of a chain member behind an own log, in bytes";
    one(e, "replication_max_lag", help, bytes, &gauge(max_bytes))?;
    let help = "The age of the oldest append some chain member has not acknowledged, in ms";
    one(e, "replication_max_lag_ms", help, None, &gauge(max_ms))?;
    let names: Vec<String> = members.iter().map(|(s, m)| format!("slot{s}_node{}", m.node)).collect();
    let lag: Vec<_> = names.iter().zip(&members).map(|(n, (_, m))| (n.as_str(), gauge(m.lag_bytes))).collect();
    let help = "Bytes of an own log a chain member has not acknowledged";
    family(e, "replication_member_lag", help, bytes, MetricType::Gauge, "member", &lag)?;
    replication_stages(e, r)
}

/// Labels of a metric with several.
type Labels = Vec<(&'static str, String)>;

/// The replication stages: compression, the memory watermark, per-peer queues and latencies.
fn replication_stages(
    e: &mut DescriptorEncoder,
    r: &crate::daemon::replication::status::ReplicationStatus,
) -> fmt::Result {
    let bytes = Some(&Unit::Bytes);
    let c = &r.counters;
    let help = "Chunk payload bytes as they would have been sent uncompressed";
    one(e, "replication_raw_sent", help, bytes, &counter(c.raw_bytes_sent))?;
    one(e, "replication_saved", "Chunk payload bytes lz4 saved on the wire", bytes, &counter(c.saved_bytes))?;
    let chunks = [("yes", counter(c.chunks_compressed)), ("no", counter(c.chunks_uncompressed))];
    let help = "Chunks sent, lz4-compressed or not";
    family(e, "replication_chunks_by_compression", help, None, MetricType::Counter, "compressed", &chunks)?;
    let z = &r.compression;
    let help = "Whether the compression controller has lz4 on (1) or off (0)";
    one(e, "replication_compression_on", help, None, &gauge(u64::from(z.on)))?;
    let switches = [("on", counter(z.switches_on)), ("off", counter(z.switches_off))];
    let help = "Switches of the compression controller";
    family(e, "replication_compression_switches", help, None, MetricType::Counter, "to", &switches)?;
    let f = &r.flow;
    let help = "Whether replication is paused above the memory high watermark (1) or not (0)";
    one(e, "replication_flow_paused", help, None, &gauge(u64::from(f.paused)))?;
    let help = "Times replication paused above the memory high watermark";
    one(e, "replication_flow_pauses", help, None, &counter(f.pauses))?;
    let node = |n: u32| format!("node{n}");
    let queues: Vec<(Labels, ConstGauge<i64>)> = r
        .peers
        .iter()
        .flat_map(|p| {
            [
                (vec![("peer", node(p.node)), ("stage", "compress".to_string())], gauge(p.compress_queue)),
                (vec![("peer", node(p.node)), ("stage", "send".to_string())], gauge(p.send_queue)),
            ]
        })
        .collect();
    let mut m = e.encode_descriptor(
        "replication_peer_queue_length",
        "Frames waiting in a peer's replication stage",
        None,
        MetricType::Gauge,
    )?;
    for (labels, g) in &queues {
        g.encode(m.encode_family(labels)?)?;
    }
    let mut lat = Vec::new();
    for p in &r.peers {
        for (path, l) in [("append_to_send", p.append_to_send), ("send_to_ack", p.send_to_ack)] {
            for (q, us) in [("0.5", l.p50_us), ("0.99", l.p99_us)] {
                let labels = vec![("peer", node(p.node)), ("path", path.to_string()), ("quantile", q.to_string())];
                lat.push((labels, ConstGauge::new(us as f64 / 1e6)));
            }
        }
    }
    let mut m = e.encode_descriptor(
        "replication_peer_latency",
        "Replication latency to a peer (recent window): append to send, send to ack",
        Some(&Unit::Seconds),
        MetricType::Gauge,
    )?;
    for (labels, g) in &lat {
        g.encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

impl Collector for Sample {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let e = &mut enc;
        let c = &self.counters;
        let bytes = Some(&Unit::Bytes);
        let seconds = Some(&Unit::Seconds);
        let info = Info::new([("node", self.node.as_str()), ("version", env!("CARGO_PKG_VERSION"))]);
        one(e, "node", "The node this nicfs serves, and its version", None, &info)?;

        // The publication counters.
        one(e, "chunks_ready", "ChunkReady notices received", None, &counter(c.chunks))?;
        one(
            e,
            "fetched",
            "Bytes copied out of clients' logs into nicfs (the PCIe crossing)",
            bytes,
            &counter(c.bytes_fetched),
        )?;
        one(e, "chunks_fetched", "Chunks fetched from clients' logs", None, &counter(c.chunks_fetched))?;
        one(e, "batches_published", "Chunks published, each as one batch", None, &counter(c.batches_published))?;
        one(e, "entries_published", "Log entries published", None, &counter(c.entries_published))?;
        one(e, "published", "Log bytes the published entries span", bytes, &counter(c.bytes_published))?;
        one(e, "rejections", "Entries refused and publications that failed", None, &counter(c.rejections))?;
        one(e, "copy_lists_sent", "Copy lists sent to the kworker", None, &counter(c.copy_lists_sent))?;
        one(
            e,
            "copy_lists_redone",
            "Copy lists a lost kworker had, redone by nicfs",
            None,
            &counter(c.copy_lists_redone),
        )?;
        let by = [("kworker", counter(c.copy_lists_by_kworker)), ("nicfs", counter(c.copy_lists_by_nicfs))];
        family(e, "copy_lists", "Copy lists executed, by executor", None, MetricType::Counter, "by", &by)?;
        let by = [("kworker", counter(c.bytes_copied_by_kworker)), ("nicfs", counter(c.bytes_copied_by_nicfs))];
        family(e, "copied", "Bytes of copy-list entries executed, by executor", bytes, MetricType::Counter, "by", &by)?;
        let saved = counter(c.bytes_saved_by_coalescing);
        one(e, "coalescing_saved", "WRITE bytes coalescing left uncopied", bytes, &saved)?;
        let blocks = counter(c.blocks_saved_by_coalescing);
        one(e, "coalescing_saved_blocks", "Blocks coalescing left unallocated", None, &blocks)?;
        let records = counter(c.records_dropped_by_coalescing);
        one(e, "coalescing_dropped_records", "Records coalescing dropped whole", None, &records)?;

        // The stages.
        let per_stage = |f: &dyn Fn(&StageSample) -> u64| -> Vec<(&str, u64)> {
            self.stages.iter().map(|s| (s.status.stage, f(s))).collect()
        };
        let gauges = |v: Vec<(&'static str, u64)>| v.into_iter().map(|(s, n)| (s, gauge(n))).collect::<Vec<_>>();
        let counters = |v: Vec<(&'static str, u64)>| v.into_iter().map(|(s, n)| (s, counter(n))).collect::<Vec<_>>();
        let queue = gauges(per_stage(&|s| s.status.queue as u64));
        family(
            e,
            "stage_queue_length",
            "Work items waiting in each stage's queue",
            None,
            MetricType::Gauge,
            "stage",
            &queue,
        )?;
        let threads = gauges(per_stage(&|s| s.status.threads as u64));
        family(e, "stage_threads", "Threads of each stage now", None, MetricType::Gauge, "stage", &threads)?;
        let handled = counters(per_stage(&|s| s.status.handled));
        family(
            e,
            "stage_items_handled",
            "Work items each stage handled",
            None,
            MetricType::Counter,
            "stage",
            &handled,
        )?;
        let grown = counters(per_stage(&|s| s.status.grown));
        family(
            e,
            "stage_threads_added",
            "Extra threads each stage started",
            None,
            MetricType::Counter,
            "stage",
            &grown,
        )?;
        let wait: Vec<_> = self.stages.iter().map(|s| (s.status.stage, s.wait.prometheus().clone())).collect();
        let help = "Time work items waited in each stage's queue";
        family(e, "stage_wait", help, seconds, MetricType::Histogram, "stage", &wait)?;
        let service: Vec<_> = self.stages.iter().map(|s| (s.status.stage, s.service.prometheus().clone())).collect();
        let help = "Time each stage's handler took per work item";
        family(e, "stage_service", help, seconds, MetricType::Histogram, "stage", &service)?;

        // End to end.
        let help = "From a ChunkReady received to the Published that covers it sent";
        one(e, "chunk_latency", help, seconds, self.chunk.prometheus())?;
        one(e, "fsync_latency", "From an Fsync received to its FsyncDone sent", seconds, self.fsync.prometheus())?;

        // Sessions, mode, leases.
        one(e, "sessions", "Attached client sessions", None, &gauge(self.sessions))?;
        let mode = match self.mode {
            Mode::Normal => 0,
            Mode::Isolated => 1,
        };
        one(e, "mode", "The node's mode: 0 normal (kworker copies), 1 isolated (nicfs copies)", None, &gauge(mode))?;
        one(e, "mode_switches", "Switches between normal and isolated mode", None, &counter(self.mode_switches))?;
        if let Some(c) = &self.cluster {
            one(e, "cluster_epoch", "The cluster view's epoch (0: none yet)", None, &gauge(c.epoch))?;
            one(e, "cluster_persisted_epoch", "The epoch the node record holds", None, &gauge(c.persisted_epoch))?;
            let session = match c.session {
                "connected" => 0,
                "suspended" => 1,
                _ => 2,
            };
            let help = "The ZooKeeper session: 0 connected, 1 suspended (ZooKeeper lost), 2 joining, expired or closed";
            one(e, "cluster_session", help, None, &gauge(session))?;
            one(e, "cluster_joins", "Joins completed since start", None, &counter(c.joins))?;
        }
        if let Some(r) = &self.replication {
            replication(e, r)?;
        }
        let r = &self.refusals;
        let kinds = [
            ("connections", counter(r.connections)),
            ("slots", counter(r.slots)),
            ("kworker", counter(r.kworker)),
            ("fenced", counter(r.fenced)),
            ("inodes", counter(r.inodes)),
            ("blocks", counter(r.blocks)),
            ("log_resized", counter(r.log_resized)),
        ];
        family(
            e,
            "refusals",
            "Requests refused by the per-user limits, by kind",
            None,
            MetricType::Counter,
            "kind",
            &kinds,
        )?;
        let l = &self.leases;
        one(
            e,
            "leased_inodes",
            "Inodes with a lease entry (held, waited for, or awaiting a publication)",
            None,
            &gauge(l.inodes),
        )?;
        one(e, "lease_readers", "Read leases held", None, &gauge(l.readers))?;
        one(e, "lease_writers", "Write leases held", None, &gauge(l.writers))?;
        one(e, "lease_waiting_requests", "Lease requests waiting", None, &gauge(l.waiting))?;
        one(e, "lease_revokes_in_flight", "Revokes sent and not answered", None, &gauge(l.revokes_in_flight))?;
        one(e, "lease_grants", "Leases granted", None, &counter(l.grants))?;
        one(e, "lease_revokes", "Revokes sent", None, &counter(l.revokes))?;
        one(e, "lease_refused", "Lease requests refused", None, &counter(l.refused))?;
        let help = "Sessions expired: a revoke not answered within the lease timeout";
        one(e, "lease_expired_sessions", help, None, &counter(l.expired))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    fn stage(name: &'static str, queue: usize) -> StageSample {
        let status = StageStatus {
            stage: name,
            queue,
            threads: 1,
            min_threads: 1,
            max_threads: 4,
            handled: 7,
            grown: 0,
            peak_threads: 1,
            wait: Default::default(),
            service: Default::default(),
        };
        StageSample { status, wait: Latency::new(), service: Latency::new() }
    }

    fn sample() -> Sample {
        let stages = vec![stage("fetch", 2), stage("validate", 0), stage("publish", 0)];
        stages[0].wait.record(Duration::from_micros(30));
        stages[2].service.record(Duration::from_millis(3));
        let s = Sample {
            node: "node0".into(),
            counters: CounterSnapshot { bytes_fetched: 4128, bytes_copied_by_kworker: 99, ..Default::default() },
            stages,
            sessions: 1,
            leases: Counts { writers: 2, grants: 5, ..Default::default() },
            mode: Mode::Isolated,
            mode_switches: 1,
            chunk: Latency::new(),
            fsync: Latency::new(),
            refusals: crate::limits::RefusalCounts { connections: 3, ..Default::default() },
            cluster: Some(crate::daemon::cluster::ClusterStatus {
                node_id: 0,
                zk: "127.0.0.1:2181".into(),
                session: "suspended",
                may_be_expired: false,
                epoch: 4,
                chain: vec![0],
                chain_pos: Some(0),
                persisted_epoch: 4,
                joins: 2,
                session_timeout_ms: 1500,
                last_error: None,
            }),
            replication: Some(replication_sample()),
        };
        s.fsync.record(Duration::from_micros(800));
        s
    }

    fn replication_sample() -> crate::daemon::replication::status::ReplicationStatus {
        use crate::daemon::replication::status::*;
        let member = |node, lag_bytes, lag_ms| MemberStatus { node, lag_bytes, lag_ms, ..MemberStatus::default() };
        ReplicationStatus {
            epoch: 4,
            logs: vec![LogStatus {
                slot: 1,
                members: vec![member(1, 0, 0), member(2, 4096, 30)],
                ..LogStatus::default()
            }],
            memory_bytes: 8192,
            flow: FlowStatus { paused: true, pauses: 3, ..FlowStatus::default() },
            compression: CompressionStatus {
                on: true,
                switches_off: 2,
                switches_on: 2,
                ..CompressionStatus::default()
            },
            peers: vec![PeerStage {
                node: 1,
                compress_queue: 5,
                send_queue: 2,
                send_to_ack: Latency { samples: 9, p50_us: 250, p99_us: 1500 },
                ..PeerStage::default()
            }],
            counters: CounterSnapshot {
                saved_bytes: 7000,
                raw_bytes_sent: 9000,
                chunks_compressed: 4,
                chunks_uncompressed: 2,
                chunks_sent: 6,
                retransmits: 1,
                acks_received: 9,
                ..CounterSnapshot::default()
            },
            ..ReplicationStatus::default()
        }
    }

    /// `name{labels} value` lines of an exposition, by name and labels as written.
    pub(crate) fn samples(text: &str) -> HashMap<String, f64> {
        text.lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .filter_map(|l| {
                let (k, v) = l.rsplit_once(' ')?;
                Some((k.to_string(), v.parse().ok()?))
            })
            .collect()
    }

    #[test]
    fn a_sample_is_exported_under_prometheus_names() {
        let text = sample().encode().unwrap();
        assert!(text.ends_with("# EOF\n"), "{text}");
        let m = samples(&text);
        let get = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in\n{text}"));
        assert_eq!(get("linefs_nicfs_fetched_bytes_total"), 4128.0);
        assert_eq!(get("linefs_nicfs_copied_bytes_total{by=\"kworker\"}"), 99.0);
        assert_eq!(get("linefs_nicfs_copied_bytes_total{by=\"nicfs\"}"), 0.0);
        assert_eq!(get("linefs_nicfs_stage_queue_length{stage=\"fetch\"}"), 2.0);
        assert_eq!(get("linefs_nicfs_stage_items_handled_total{stage=\"publish\"}"), 7.0);
        assert_eq!(get("linefs_nicfs_stage_wait_seconds_count{stage=\"fetch\"}"), 1.0);
        assert_eq!(get("linefs_nicfs_stage_wait_seconds_count{stage=\"publish\"}"), 0.0);
        assert_eq!(get("linefs_nicfs_stage_service_seconds_bucket{le=\"0.005\",stage=\"publish\"}"), 1.0);
        assert_eq!(get("linefs_nicfs_stage_service_seconds_bucket{le=\"0.0025\",stage=\"publish\"}"), 0.0);
        assert_eq!(get("linefs_nicfs_fsync_latency_seconds_count"), 1.0);
        assert_eq!(get("linefs_nicfs_chunk_latency_seconds_count"), 0.0);
        assert_eq!((get("linefs_nicfs_mode"), get("linefs_nicfs_sessions")), (1.0, 1.0));
        assert_eq!((get("linefs_nicfs_lease_writers"), get("linefs_nicfs_lease_grants_total")), (2.0, 5.0));
        assert_eq!(get("linefs_nicfs_refusals_total{kind=\"connections\"}"), 3.0);
        assert_eq!(get("linefs_nicfs_refusals_total{kind=\"log_resized\"}"), 0.0);
        assert_eq!((get("linefs_nicfs_cluster_epoch"), get("linefs_nicfs_cluster_persisted_epoch")), (4.0, 4.0));
        assert_eq!((get("linefs_nicfs_cluster_session"), get("linefs_nicfs_cluster_joins_total")), (1.0, 2.0));
        assert_eq!(get("linefs_nicfs_replication_chunks_sent_total"), 6.0);
        assert_eq!(get("linefs_nicfs_replication_retransmits_total"), 1.0);
        assert_eq!(get("linefs_nicfs_replication_acks_received_total"), 9.0);
        assert_eq!(get("linefs_nicfs_replication_memory_bytes"), 8192.0);
        assert_eq!(get("linefs_nicfs_replication_max_lag_bytes"), 4096.0);
        assert_eq!(get("linefs_nicfs_replication_max_lag_ms"), 30.0);
        assert_eq!(get("linefs_nicfs_replication_member_lag_bytes{member=\"slot1_node2\"}"), 4096.0);
        assert_eq!(get("linefs_nicfs_replication_member_lag_bytes{member=\"slot1_node1\"}"), 0.0);
        assert_eq!(get("linefs_nicfs_replication_saved_bytes_total"), 7000.0);
        assert_eq!(get("linefs_nicfs_replication_raw_sent_bytes_total"), 9000.0);
        assert_eq!(get("linefs_nicfs_replication_chunks_by_compression_total{compressed=\"yes\"}"), 4.0);
        assert_eq!(get("linefs_nicfs_replication_chunks_by_compression_total{compressed=\"no\"}"), 2.0);
        assert_eq!(get("linefs_nicfs_replication_compression_on"), 1.0);
        assert_eq!(get("linefs_nicfs_replication_compression_switches_total{to=\"off\"}"), 2.0);
        assert_eq!(
            (get("linefs_nicfs_replication_flow_paused"), get("linefs_nicfs_replication_flow_pauses_total")),
            (1.0, 3.0)
        );
        assert_eq!(get("linefs_nicfs_replication_peer_queue_length{peer=\"node1\",stage=\"compress\"}"), 5.0);
        assert_eq!(get("linefs_nicfs_replication_peer_queue_length{peer=\"node1\",stage=\"send\"}"), 2.0);
        let p99 =
            "linefs_nicfs_replication_peer_latency_seconds{peer=\"node1\",path=\"send_to_ack\",quantile=\"0.99\"}";
        assert_eq!(get(p99), 0.0015);
        let alone = Sample { cluster: None, replication: None, ..sample() }.encode().unwrap();
        assert!(!alone.contains("cluster_"), "a node on its own exports no cluster metrics");
        assert!(!alone.contains("replication_"), "nor replication metrics");
        assert_eq!(
            get(&format!("linefs_nicfs_node_info{{node=\"node0\",version=\"{}\"}}", env!("CARGO_PKG_VERSION"))),
            1.0
        );
        // One HELP and TYPE per family, whatever its labels.
        for family in ["linefs_nicfs_stage_wait_seconds", "linefs_nicfs_copied_bytes"] {
            assert_eq!(text.matches(&format!("# TYPE {family} ")).count(), 1, "{text}");
        }
        assert!(text.contains("# TYPE linefs_nicfs_stage_wait_seconds histogram"), "{text}");
        assert!(text.contains("# TYPE linefs_nicfs_fetched_bytes counter"), "{text}");
        assert!(text.contains("# UNIT linefs_nicfs_fsync_latency_seconds seconds"), "{text}");
    }
}
