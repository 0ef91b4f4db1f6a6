//! Publication through the pipeline with real processes: file data reaches the public area
//! as copy lists executed by the kworker (normal mode) or by nicfs itself (isolated mode).
//!
//! The kworker binary is the one cargo builds next to nicfs's (`cargo test -p kworker -p
//! nicfs` builds both).

mod support;

use linefs_pm::record::EntryBuilder;
use support::*;

/// Deterministic file contents.
fn pattern(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32).map(|i| (i.wrapping_mul(seed | 1).wrapping_add(seed) % 251) as u8).collect()
}

/// Waits until the status file says the node is in `mode`.
fn wait_mode(d: &Daemon, mode: &str) {
    d.wait_status(&format!("mode {mode}"), |s| s["host"]["mode"] == mode);
}

#[test]
fn publication_copies_file_data_through_the_kworker() {
    let d = Daemon::start(2);
    let klog = d.dir.path().join("kworker.log");
    let mut k = spawn_kworker_logged(&d.node, &d.socket, None, Some(&klog));
    wait_mode(&d, "normal");
    let mut c = Client::attach(&d.socket);
    let big = pattern(100_000, 7);
    c.append(&create_file(2, b"big", &big));
    c.append(&create_file(3, b"small", b"a few bytes"));
    // An unaligned overwrite in the middle of the big file.
    let mut b = EntryBuilder::new();
    b.write(2, 5000, &pattern(9000, 11));
    c.append(&b);
    c.chunk_ready();
    let p = expect_published(&c);
    assert_eq!(p.published_lsn, c.tail);

    let public = c.public();
    let mut want = big.clone();
    want[5000..14000].copy_from_slice(&pattern(9000, 11));
    assert_eq!(read_file(&public, 2, want.len()), want);
    assert_eq!(read_file(&public, 3, 11), b"a few bytes");

    let st = d.wait_status("the kworker's copies", |s| s["host"]["lists_by_kworker"].as_u64() > Some(0));
    let host = &st["host"];
    // Every data byte and the zero fill of the last blocks went through the kworker.
    assert!(host["bytes_by_kworker"].as_u64().unwrap() >= 100_000 + 11, "{st}");
    assert_eq!(host["bytes_by_nicfs"], 0, "{st}");
    assert_eq!(host["lists_by_nicfs"], 0, "{st}");
    // The chunk crossed into nicfs once: what the log holds, no more.
    assert_eq!(st["counters"]["bytes_fetched"], c.tail, "{st}");
    // kworker's own log shows the list it executed.
    let log = wait_for("kworker's log line", || {
        let log = std::fs::read_to_string(&klog).unwrap();
        log.contains("copy list done").then_some(log)
    });
    assert!(log.contains("entries") && log.contains("bytes"), "{log}");
    let _ = k.kill();
    let _ = k.wait();
}

#[test]
fn an_isolated_node_copies_file_data_itself() {
    let d = Daemon::start(1);
    // A kworker comes and is killed: nicfs is isolated again and publishes by itself.
    let mut k = spawn_kworker(&d.node, &d.socket, None);
    wait_mode(&d, "normal");
    signal(&k, libc::SIGKILL);
    let _ = k.wait();
    wait_mode(&d, "isolated");

    let mut c = Client::attach(&d.socket);
    let data = pattern(50_000, 3);
    c.append(&create_file(2, b"alone", &data));
    c.chunk_ready();
    assert_eq!(expect_published(&c).published_lsn, c.tail);
    assert_eq!(read_file(&c.public(), 2, data.len()), data);
    let st = d.wait_status("nicfs's copies", |s| s["host"]["lists_by_nicfs"].as_u64() > Some(0));
    assert!(st["host"]["bytes_by_nicfs"].as_u64().unwrap() >= 50_000, "{st}");
    assert_eq!(st["host"]["bytes_by_kworker"], 0, "{st}");
}
