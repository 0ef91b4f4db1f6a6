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

    let st = d.wait_status("the kworker's copies", |s| s["counters"]["copy_lists_by_kworker"] == 1);
    let n = &st["counters"];
    // Every data byte and the zero fill of the last blocks went through the kworker, in
    // one list.
    assert!(n["bytes_copied_by_kworker"].as_u64().unwrap() >= 100_000 + 11, "{st}");
    assert_eq!((n["copy_lists_sent"].as_u64(), n["copy_lists_by_nicfs"].as_u64()), (Some(1), Some(0)), "{st}");
    assert_eq!(n["bytes_copied_by_nicfs"], 0, "{st}");
    assert_eq!((n["chunks_fetched"].as_u64(), n["batches_published"].as_u64()), (Some(1), Some(1)), "{st}");
    assert_eq!(st["host"]["bytes_by_kworker"], n["bytes_copied_by_kworker"], "the host link saw the same");
    // The chunk crossed into nicfs once: what the log holds, plus each entry's header read
    // once more to find where the chunk ends.
    assert_eq!(st["counters"]["bytes_fetched"], c.tail + 3 * linefs_pm::oplog::ENTRY_HEADER, "{st}");
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
    let st = d.wait_status("nicfs's copies", |s| s["counters"]["copy_lists_by_nicfs"] == 1);
    assert!(st["counters"]["bytes_copied_by_nicfs"].as_u64().unwrap() >= 50_000, "{st}");
    assert_eq!(
        (st["counters"]["bytes_copied_by_kworker"].as_u64(), st["counters"]["copy_lists_sent"].as_u64()),
        (Some(0), Some(0)),
        "{st}"
    );
}

/// The stage named `name` in a status.
fn stage<'a>(st: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    st["stages"].as_array().unwrap().iter().find(|s| s["stage"] == name).unwrap()
}

#[test]
fn a_session_s_chunks_are_published_in_log_order() {
    // Small chunks: one ChunkReady covers many, checked in parallel, published in order.
    let d = Daemon::start_with(1, &["--chunk-bytes", "16384"]);
    let mut c = Client::attach(&d.socket);
    let mut files = Vec::new();
    for i in 0..40u64 {
        let data = pattern(6000 + i as usize * 100, i as u32);
        c.append(&create_file(2 + i, format!("f{i}").as_bytes(), &data));
        files.push(data);
    }
    // Every file but the first is rewritten by a later entry: order matters.
    for i in 1..40u64 {
        let mut b = EntryBuilder::new();
        b.write(2 + i, 10, &pattern(500, 1000 + i as u32));
        c.append(&b);
        files[i as usize][10..510].copy_from_slice(&pattern(500, 1000 + i as u32));
    }
    c.chunk_ready();
    let mut last = 0;
    let mut notices = 0;
    while last < c.tail {
        let p = expect_published(&c);
        assert!(p.published_lsn > last, "published LSNs only grow: {} after {last}", p.published_lsn);
        last = p.published_lsn;
        notices += 1;
    }
    assert!(notices > 10, "one notice per chunk: {notices}");
    let public = c.public();
    for (i, data) in files.iter().enumerate() {
        assert_eq!(read_file(&public, 2 + i as u64, data.len()), *data, "file {i}");
    }
    let st = d.wait_status("the stages' work", |s| stage(s, "publish")["handled"].as_u64() >= Some(notices));
    assert_eq!(stage(&st, "validate")["handled"], stage(&st, "publish")["handled"], "{st}");
}

/// Appends `n` files of a block and a half each (inodes from `first`): two copy-list
/// entries per file (the data, then the zero fill of the second block).
fn many_files(c: &mut Client, first: u64, n: u64) -> Vec<Vec<u8>> {
    many_files_in(c, 1, first, n)
}

/// [`many_files`] in directory `dir`.
fn many_files_in(c: &mut Client, dir: u64, first: u64, n: u64) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let data = pattern(6000, (first + i) as u32);
            c.append(&create_file_in(dir, first + i, format!("f{}", first + i).as_bytes(), &data));
            data
        })
        .collect()
}

fn check_files(c: &Client, first: u64, files: &[Vec<u8>]) {
    let public = c.public();
    for (i, data) in files.iter().enumerate() {
        assert_eq!(read_file(&public, first + i as u64, data.len()), *data, "inode {}", first + i as u64);
    }
}

#[test]
fn a_kworker_killed_in_the_middle_of_a_list_has_nicfs_redo_it() {
    let d = Daemon::start(1);
    let klog = d.dir.path().join("kworker.log");
    // 150 ms before each entry: the list of 24 entries takes seconds.
    let mut k = spawn_kworker_logged(&d.node, &d.socket, Some(150), Some(&klog));
    wait_mode(&d, "normal");
    let mut c = Client::attach(&d.socket);
    let files = many_files(&mut c, 2, 12);
    c.chunk_ready();
    d.wait_status("the list at the kworker", |s| s["host"]["lists_in_flight"] == 1);
    std::thread::sleep(std::time::Duration::from_millis(400));
    signal(&k, libc::SIGKILL);
    let _ = k.wait();
    // nicfs redoes the whole list itself; the chunk is published once, completely.
    assert_eq!(expect_published(&c).published_lsn, c.tail);
    check_files(&c, 2, &files);
    let st = d.wait_status("the redone list", |s| s["counters"]["copy_lists_redone"] == 1);
    let n = &st["counters"];
    assert_eq!((n["copy_lists_sent"].as_u64(), n["copy_lists_by_kworker"].as_u64()), (Some(1), Some(0)), "{st}");
    assert_eq!(st["host"]["mode"], "isolated", "{st}");
    assert!(n["bytes_copied_by_nicfs"].as_u64().unwrap() >= 12 * 6000, "{st}");
    assert!(!std::fs::read_to_string(&klog).unwrap().contains("copy list done"), "the kworker finished nothing");
}

#[test]
fn a_client_is_fetched_and_checked_while_another_s_chunk_is_published() {
    let d = Daemon::start(2);
    let mut k = spawn_kworker(&d.node, &d.socket, Some(150));
    wait_mode(&d, "normal");
    let mut a = Client::attach(&d.socket);
    let mut b = Client::attach(&d.socket);
    // B writes in a directory of its own, which A made and handed over beforehand.
    let (ia, ib) = (a.attached.inodes.first, b.attached.inodes.first);
    a.append(&mkdir(&a.public().read_inode(1).unwrap().img, ia, b"b"));
    a.chunk_ready();
    expect_published(&a);
    a.release(ia);
    let fa = many_files(&mut a, ia + 1, 12);
    let fb = many_files_in(&mut b, ia, ib, 12);
    a.chunk_ready();
    // A's copy list is at the (slow) kworker, under the public area's lock.
    d.wait_status("A's list at the kworker", |s| s["host"]["lists_in_flight"] == 1);
    b.chunk_ready();
    // B's chunk is fetched and checked meanwhile, and waits for the public area.
    let st = d.wait_status("B checked while A publishes", |s| stage(s, "validate")["handled"] == 3);
    assert_eq!(stage(&st, "publish")["handled"], 1, "A is still being published: {st}");
    assert_eq!(stage(&st, "fetch")["handled"], 3, "{st}");
    assert_eq!(expect_published(&a).published_lsn, a.tail);
    assert_eq!(expect_published(&b).published_lsn, b.tail);
    check_files(&a, ia + 1, &fa);
    check_files(&b, ib, &fb);
    let st = d.wait_status("both published", |s| stage(s, "publish")["handled"] == 3);
    assert_eq!(st["counters"]["copy_lists_by_kworker"], 2, "{st}");
    let _ = k.kill();
    let _ = k.wait();
}

/// A client that rewrites the same 32 KiB 15 times, writes a scratch file it deletes, and
/// truncates away most of another: run against a nicfs with or without coalescing.
fn overwrite_heavy(args: &[&str]) -> (serde_json::Value, Vec<u8>) {
    let d = Daemon::start_with(1, args);
    let mut k = spawn_kworker(&d.node, &d.socket, None);
    wait_mode(&d, "normal");
    let mut c = Client::attach(&d.socket);
    c.append(&create_file(2, b"hot", &pattern(32768, 0)));
    for i in 1..16 {
        let mut b = EntryBuilder::new();
        b.write(2, 0, &pattern(32768, i));
        c.append(&b);
    }
    c.append(&create_file(3, b"scratch", &pattern(100_000, 99)));
    let mut b = EntryBuilder::new();
    b.dirent(1, b"scratch", 0, 0);
    b.free_inode(3);
    c.append(&b);
    c.append(&create_file(4, b"cut", &pattern(80_000, 7)));
    let mut b = EntryBuilder::new();
    b.truncate(4, 1000);
    c.append(&b);
    c.chunk_ready();
    assert_eq!(expect_published(&c).published_lsn, c.tail);
    let public = c.public();
    assert_eq!(lookup(&public, b"scratch"), None);
    assert_eq!(read_file(&public, 4, 1000), pattern(80_000, 7)[..1000]);
    let hot = read_file(&public, 2, 32768);
    let st = d.wait_status("the copies", |s| s["counters"]["copy_lists_by_kworker"] == 1);
    let _ = k.kill();
    let _ = k.wait();
    (st, hot)
}

#[test]
fn coalescing_copies_only_what_survives_the_chunk() {
    let (st, hot) = overwrite_heavy(&[]);
    assert_eq!(hot, pattern(32768, 15));
    let saved = st["counters"]["bytes_saved_by_coalescing"].as_u64().unwrap();
    // 15 overwritten versions, the scratch file, all but 1000 bytes of the cut one.
    assert_eq!(saved, 15 * 32768 + 100_000 + 79_000, "{st}");
    let (plain, hot) = overwrite_heavy(&["--no-coalesce"]);
    assert_eq!(hot, pattern(32768, 15));
    assert_eq!(plain["counters"]["bytes_saved_by_coalescing"], 0);
    let copied = |s: &serde_json::Value| s["counters"]["bytes_copied_by_kworker"].as_u64().unwrap();
    eprintln!("coalesced: {} bytes copied, {saved} saved; not coalesced: {} copied", copied(&st), copied(&plain));
    assert!(
        copied(&st) + saved <= copied(&plain),
        "coalesced {} + saved {saved} vs plain {}",
        copied(&st),
        copied(&plain)
    );
    // What is left: the last version, the 1000 bytes kept, and zeros after them (the new
    // block's fill, then the truncate's).
    assert_eq!(copied(&st), 32768 + 1000 + 2 * 3096, "{st}");
    assert!(stage(&st, "coalesce")["handled"] == 1, "{st}");
    assert!(plain["stages"].as_array().unwrap().iter().all(|s| s["stage"] != "coalesce"), "{plain}");
}

#[test]
fn a_stopped_kworker_with_a_list_in_flight_is_killed_before_nicfs_redoes_the_list() {
    use std::os::unix::process::ExitStatusExt;
    let mut d = Daemon::start(1);
    let mut k = spawn_kworker(&d.node, &d.socket, Some(150));
    wait_mode(&d, "normal");
    let mut c = Client::attach(&d.socket);
    let files = many_files(&mut c, 2, 12);
    c.chunk_ready();
    d.wait_status("the list at the kworker", |s| s["host"]["lists_in_flight"] == 1);
    // A wedged host: no heartbeats, no answer, but the process could resume any time and
    // finish its list late. nicfs kills it before it redoes the list.
    signal(&k, libc::SIGSTOP);
    assert_eq!(expect_published(&c).published_lsn, c.tail);
    let status = wait_for("the kworker to be killed", || k.try_wait().unwrap());
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    check_files(&c, 2, &files);
    let st = d.wait_status("the redone list", |s| s["counters"]["copy_lists_redone"] == 1);
    assert!(st["host"]["mode_reason"].as_str().unwrap().contains("heartbeat"), "{st}");
    let (_, err) = d.stop(libc::SIGTERM);
    assert!(err.contains("killed") && err.contains("is gone"), "{err}");
}
