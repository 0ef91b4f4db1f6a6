//! `linefs-loadgen push`: the bare chain's workload — `--bytes` of generated data
//! (`--compressible PCT`) in `--io` messages down a chain of hops ([`crate::chain`]), with
//! acks and no file system: the transport's limit. Streaming (messages pipelined under the
//! flow-control watermark, then a wait for the last ack; MB/s), or `--sync` (each message
//! waits for its ack, as a write+fsync does; latency per message).
//!
//! Prints one JSON line: `bytes`, `messages`, `wire_bytes` (sent by this process, headers
//! included; each hop forwards as many), `lz4_messages`, `seconds`, `mb_per_s`, `cpu_s`
//! (getrusage), `flow_pauses`, `adaptive` (the controller's counters, `--compress adaptive`)
//! and with `--sync` `latency_us` (`avg`, `p50`, `p99`, `p999`, `max`).

use std::io::Read;
use std::time::Instant;

use serde_json::{json, Value};

use crate::chain::{Compress, Link};
use crate::gen::Gen;
use crate::pin;
use crate::util::{cpu_times, emit, latency_json, parse_size};
use linefs_pm::cpus::{self, CpuList};

#[derive(Debug, Clone, clap::Args)]
pub struct PushArgs {
    /// The first hop.
    #[arg(long, value_name = "ADDR")]
    to: String,
    /// Bytes to send in all (K, M, G units).
    #[arg(long, value_parser = parse_size)]
    bytes: u64,
    /// Size of each message.
    #[arg(long, default_value = "16384", value_parser = parse_size)]
    io: u64,
    /// Share of the data lz4 can remove, in percent.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100))]
    compressible: u8,
    #[arg(long, value_enum, default_value = "off")]
    compress: Compress,
    /// Wait for each message's ack before the next (latency).
    #[arg(long)]
    sync: bool,
    #[arg(long, value_parser = cpus::parse, value_name = "LIST")]
    cpus: Option<CpuList>,
    /// Print a ready line once connected and wait for one byte on stdin first.
    #[arg(long)]
    wait_go: bool,
}

pub fn run(a: &PushArgs) -> Result<Option<Value>, String> {
    if a.io == 0 || a.io as usize > crate::chain::MAX_MSG {
        return Err(format!("--io must be between 1 and {}", crate::chain::MAX_MSG));
    }
    if let Some(c) = &a.cpus {
        pin(c)?;
    }
    let mut link = Link::connect(&a.to, a.compress)?;
    if a.wait_go {
        emit(&json!({ "ready": true, "pid": std::process::id() }))?;
        let mut go = [0u8; 1];
        if !matches!(std::io::stdin().read(&mut go), Ok(1)) {
            return Ok(None);
        }
    }
    // Generated ahead of time (a ring of 64 messages): the generator is not measured.
    let mut g = Gen::new(u64::from(std::process::id()), a.compressible);
    let msgs: Vec<Vec<u8>> = (0..64)
        .map(|_| {
            let mut m = vec![0u8; a.io as usize];
            g.fill(&mut m);
            m
        })
        .collect();
    let mut hist = hdrhistogram::Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let (u0, s0) = cpu_times()?;
    let t0 = Instant::now();
    let (mut sent, mut n) = (0u64, 0usize);
    while sent < a.bytes {
        let len = (a.bytes - sent).min(a.io) as usize;
        let t = Instant::now();
        link.send(&msgs[n % msgs.len()][..len])?;
        if a.sync {
            link.wait_all()?;
            let _ = hist.record(t.elapsed().as_nanos() as u64);
        }
        sent += len as u64;
        n += 1;
    }
    link.wait_all()?;
    let seconds = t0.elapsed().as_secs_f64();
    let (u1, s1) = cpu_times()?;
    let (pauses, ad) = link.stats();
    let mut v = json!({
        "bytes": sent,
        "messages": n,
        "wire_bytes": link.wire_bytes,
        "lz4_messages": link.lz4_messages,
        "seconds": seconds,
        "mb_per_s": sent as f64 / 1e6 / seconds.max(1e-9),
        "cpu_s": (u1 - u0) + (s1 - s0),
        "flow_pauses": pauses,
        "compressible": a.compressible,
        "adaptive": json!({
            "on": ad.on, "chunks": ad.chunks, "compressed": ad.compressed, "probes": ad.probes,
            "switches_off": ad.switches_off, "switches_on": ad.switches_on,
        }),
    });
    if a.sync {
        v["latency_us"] = latency_json(&hist);
    }
    Ok(Some(v))
}
