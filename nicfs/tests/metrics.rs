//! `--metrics-addr`: a real nicfs serves Prometheus text on a loopback port it picks (port
//! 0), tells the port in its status file, and its counters and latency histograms move when
//! a client publishes and fsyncs; the status file shows the same latencies as quantiles.

mod support;

use linefs_proto::{Control, Fsync, FsyncDone};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use support::*;

/// Sends `GET path` to `addr`; returns the status line and the body.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(WAIT)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: application/openmetrics-text\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no head in {answer:?}"));
    (head.lines().next().unwrap_or_default().to_string(), body.to_string())
}

/// The samples of an exposition: `name{labels}` → value.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {l:?}"));
            (k.to_string(), v.parse().unwrap_or_else(|_| panic!("not a number: {l:?}")))
        })
        .collect()
}

fn scrape(addr: &str) -> HashMap<String, f64> {
    let (status, body) = get(addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK", "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    samples(&body)
}

fn value(m: &HashMap<String, f64>, key: &str) -> f64 {
    *m.get(key).unwrap_or_else(|| panic!("no {key} among {:?}", m.keys().collect::<Vec<_>>()))
}

#[test]
fn metrics_are_served_and_move_with_publication() {
    let d = Daemon::start_with(1, &["--metrics-addr", "127.0.0.1:0"]);
    let st = d.status();
    let addr = st["metrics_addr"].as_str().unwrap_or_else(|| panic!("no metrics_addr in {st}")).to_string();
    assert!(addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"), "the bound port: {addr}");

    let before = scrape(&addr);
    assert_eq!(value(&before, "linefs_nicfs_fetched_bytes_total"), 0.0);
    assert_eq!(value(&before, "linefs_nicfs_chunk_latency_seconds_count"), 0.0);
    assert_eq!(value(&before, "linefs_nicfs_mode"), 1.0, "no kworker: isolated");
    assert_eq!(value(&before, "linefs_nicfs_node_info{node=\"node0\",version=\"0.1.0\"}"), 1.0);

    // A client publishes a few files (one ChunkReady) and fsyncs.
    let mut c = Client::attach(&d.socket);
    for i in 0..5u64 {
        c.append(&create_file(2 + i, format!("m{i}").as_bytes(), &vec![i as u8; 10_000]));
    }
    c.chunk_ready();
    assert_eq!(expect_published(&c).published_lsn, c.tail);
    c.append(&create_file(9, b"synced", b"durable"));
    let lsn = c.tail;
    assert_eq!(c.request(Control::Fsync(Fsync { lsn })), Control::FsyncDone(FsyncDone { durable_lsn: lsn }));

    // A stage's service time is recorded when its handler returns, which may be just after
    // the client got its answer.
    let served = |m: &HashMap<String, f64>| {
        ["fetch", "validate", "coalesce", "publish"]
            .iter()
            .all(|stage| m.get(&format!("linefs_nicfs_stage_service_seconds_count{{stage=\"{stage}\"}}")) == Some(&2.0))
    };
    let m = wait_for("the stages' service times", || Some(scrape(&addr)).filter(served));
    assert!(value(&m, "linefs_nicfs_fetched_bytes_total") >= c.tail as f64, "{m:?}");
    assert!(value(&m, "linefs_nicfs_copied_bytes_total{by=\"nicfs\"}") >= 50_000.0, "isolated: nicfs copied");
    assert_eq!(value(&m, "linefs_nicfs_entries_published_total"), 6.0);
    assert_eq!(value(&m, "linefs_nicfs_chunks_ready_total"), 1.0);
    assert_eq!(value(&m, "linefs_nicfs_rejections_total"), 0.0);
    assert_eq!(value(&m, "linefs_nicfs_sessions"), 1.0);
    assert_eq!(value(&m, "linefs_nicfs_chunk_latency_seconds_count"), 1.0);
    assert_eq!(value(&m, "linefs_nicfs_fsync_latency_seconds_count"), 1.0);
    assert_eq!(value(&m, "linefs_nicfs_fsync_latency_seconds_bucket{le=\"+Inf\"}"), 1.0);
    assert!(value(&m, "linefs_nicfs_fsync_latency_seconds_sum") > 0.0);
    for stage in ["fetch", "validate", "coalesce", "publish"] {
        let count = |kind: &str| value(&m, &format!("linefs_nicfs_stage_{kind}_seconds_count{{stage=\"{stage}\"}}"));
        // Two fetch requests (the ChunkReady, the fsync) and two chunks after them.
        assert_eq!((count("wait"), count("service")), (2.0, 2.0), "{stage}");
        let handled = value(&m, &format!("linefs_nicfs_stage_items_handled_total{{stage=\"{stage}\"}}"));
        assert_eq!(handled, 2.0, "{stage}");
        assert!(m.contains_key(&format!("linefs_nicfs_stage_queue_length{{stage=\"{stage}\"}}")));
    }

    // The status file shows the same latencies as quantiles.
    let st = d.wait_status("the latencies in the status file", |s| {
        s["latency"]["fsync"]["count"] == 1
            && s["stages"].as_array().is_some_and(|v| v.iter().all(|s| s["service"]["count"] == 2))
    });
    let chunk = &st["latency"]["chunk"];
    assert_eq!(chunk["count"], 1, "{st}");
    let q = |v: &serde_json::Value, k: &str| v[k].as_u64().unwrap_or_else(|| panic!("no {k} in {v}"));
    assert!(q(chunk, "p50_us") > 0 && q(chunk, "p50_us") <= q(chunk, "p99_us"), "{chunk}");
    assert!(q(chunk, "p99_us") <= q(chunk, "p999_us") && q(chunk, "p999_us") <= q(chunk, "max_us"), "{chunk}");
    for s in st["stages"].as_array().unwrap() {
        assert_eq!((s["wait"]["count"].as_u64(), s["service"]["count"].as_u64()), (Some(2), Some(2)), "{s}");
        assert!(q(&s["service"], "max_us") >= q(&s["service"], "p50_us"), "{s}");
    }

    // Other paths and methods, and a connection that says nothing, do not disturb it.
    assert!(get(&addr, "/").0.starts_with("HTTP/1.1 404"));
    drop(TcpStream::connect(&addr).unwrap());
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"\x00\x01garbage\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    assert!(out.starts_with("HTTP/1.1 400"), "{out}");
    assert!(scrape(&addr).contains_key("linefs_nicfs_fetched_bytes_total"));
}

#[test]
fn a_metrics_address_off_the_loopback_or_in_use_is_refused() {
    // Refused by the argument parser, before anything else is looked at.
    let out = Command::new(nicfs_bin())
        .args(["--node", "/nonexistent", "--socket", "/nonexistent.sock", "--metrics-addr", "0.0.0.0:9100"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("not a loopback address"), "{err}");

    // A port another process listens on: nicfs says so on one line and exits 1.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("node0");
    let params = linefs_pm::layout::FormatParams { size: 8 << 20, log_size: 1 << 20, log_slots: 1, inodes: 64 };
    linefs_pm::mkfs::format_dir(&node, &params).unwrap();
    let mut child = Command::new(nicfs_bin())
        .arg("--node")
        .arg(&node)
        .arg("--socket")
        .arg(dir.path().join("s.sock"))
        .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_for("nicfs to exit", || child.try_wait().unwrap());
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("cannot listen for metrics on 127.0.0.1:{port}")), "{err}");
    assert!(!dir.path().join("s.sock").exists(), "nothing served");
    drop(taken);
}
