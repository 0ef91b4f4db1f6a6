//! libfs in the offload mode against a real nicfs process: publication in the background
//! and on sync, the node's space and inode numbers handed out by nicfs (ENOSPC and their
//! return), statfs, what a client sees when nicfs dies, recovery by a new nicfs, and writes
//! through a descriptor opened for writing that the mode no longer allows, and a refusal
//! injected in front of nicfs (`libfs::testing`). What libfs does with an answer alone is
//! tested against a fake node, with no nicfs process (`node_link.rs`).
//! (The reference-model property runs through nicfs too: `reftest.rs`.)

#[path = "support/nicfs.rs"]
mod nicfs;

use libfs::*;
use linefs_pm::layout::FormatParams;
use nicfs::Nicfs;
use std::time::{Duration, Instant};

fn root() -> Cred {
    Cred::root()
}

/// Creates `name` in the root and closes it. The lookup that create returns is forgotten
/// at once, as the kernel would eventually, so that an unlink frees the inode.
fn create(fs: &Fs, name: &str) -> FsResult<Ino> {
    let (a, fh) = fs.create(&root(), ROOT_INO, name.as_bytes(), 0o644, 0o022, libc::O_RDWR)?;
    fs.release(a.ino, fh);
    fs.forget(a.ino, 1);
    Ok(a.ino)
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn nicfs_publishes_in_the_background_and_a_new_client_sees_it_all() {
    let n = Nicfs::start();
    let fs = n.attach(FsOptions { publish_interval: Duration::from_millis(100), ..Default::default() });
    assert!(fs.status().offload);
    let ino = create(&fs, "f").unwrap();
    let data: Vec<u8> = (0..5 << 20).map(|i| (i * 7 % 251) as u8).collect();
    for (i, chunk) in data.chunks(256 << 10).enumerate() {
        fs.write(&root(), ino, (i * (256 << 10)) as u64, chunk).unwrap();
    }
    // No sync: chunks (and the interval) make nicfs publish everything.
    wait_until("nicfs to publish the whole log", || {
        let s = fs.status();
        s.published_lsn == s.tail_lsn && s.log_used == 0
    });
    assert_eq!(fs.read(ino, 0, data.len() as u32).unwrap(), data);
    drop(fs);
    let fs = n.attach(FsOptions::default());
    let a = fs.lookup(&root(), ROOT_INO, b"f").unwrap();
    fs.forget(a.ino, 1);
    assert_eq!(a.size, data.len() as u64);
    assert_eq!(a.blocks, (5 << 20) / 512);
    assert_eq!(fs.read(a.ino, 0, data.len() as u32).unwrap(), data);
}

#[test]
fn space_is_the_nodes_and_comes_back_after_deletes() {
    let n = Nicfs::start_with(&FormatParams { size: 16 << 20, log_size: 4 << 20, log_slots: 2, inodes: 256 });
    let fs = n.attach(FsOptions::default());
    let before = fs.statfs();
    assert!(before.bfree > 1000, "{before:?}");
    let block = vec![0x5au8; 64 << 10];
    let mut names = Vec::new();
    let mut written = 0u64;
    'fill: for i in 0.. {
        let name = format!("f{i}");
        let ino = create(&fs, &name).unwrap();
        names.push(name);
        for k in 0..8u64 {
            match fs.write(&root(), ino, k * block.len() as u64, &block) {
                Ok(_) => written += block.len() as u64,
                Err(e) => {
                    assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                    break 'fill;
                }
            }
        }
    }
    let full = fs.statfs();
    assert!(written > (before.bfree * 4096) * 8 / 10, "wrote {written} of {} free", before.bfree * 4096);
    assert!(full.bfree < 64, "{full:?}");
    // The client is not failed by ENOSPC: deletes work, space comes back, writes again.
    for name in &names {
        fs.unlink(&root(), ROOT_INO, name.as_bytes()).unwrap();
    }
    fs.sync_all().unwrap();
    let after = fs.statfs();
    assert!(after.bfree + 16 >= before.bfree, "before {before:?} after {after:?}");
    let ino = create(&fs, "again").unwrap();
    fs.write(&root(), ino, 0, &block).unwrap();
}

#[test]
fn inode_numbers_come_from_nicfs_and_return_once_freed() {
    let n = Nicfs::start_with(&FormatParams { size: 16 << 20, log_size: 4 << 20, log_slots: 2, inodes: 128 });
    let fs = n.attach(FsOptions::default());
    let mut made = Vec::new();
    loop {
        match create(&fs, &format!("i{}", made.len())) {
            Ok(ino) => made.push(ino),
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                break;
            }
        }
    }
    assert!(made.len() >= 100, "only {} inodes", made.len());
    let mut sorted = made.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), made.len(), "an inode number was handed out twice");
    assert_eq!(fs.statfs().ffree, 0);
    for i in 0..made.len() {
        fs.unlink(&root(), ROOT_INO, format!("i{i}").as_bytes()).unwrap();
    }
    fs.sync_all().unwrap();
    // The numbers freed by publication come back to nicfs's pool (once it runs out).
    for i in 0..10 {
        create(&fs, &format!("j{i}")).unwrap();
    }
    // And a second client after this one detaches gets numbers too.
    drop(fs);
    let fs = n.attach(FsOptions::default());
    create(&fs, "k").unwrap();
}

/// A client's leases end with its session: once nicfs is gone, a new nicfs may grant them to
/// other clients, so reads fail too (EIO) rather than serve what may be stale by then; the
/// log the client committed is recovered by the new nicfs.
#[test]
fn when_nicfs_dies_calls_fail_and_a_new_nicfs_recovers_the_log() {
    let mut n = Nicfs::start();
    let fs = n.attach(FsOptions { background_publish: false, ..Default::default() });
    let ino = create(&fs, "kept").unwrap();
    fs.write(&root(), ino, 0, b"committed before the crash").unwrap();
    // Nothing published yet: the entries are only in the log.
    assert!(fs.status().published_lsn < fs.status().tail_lsn);
    n.kill();
    // The client notices when its control connection ends (a call may fail on the closed
    // socket a moment before): from then on it holds no lease.
    let mut refused = None;
    wait_until("the client to notice", || {
        refused = fs.read(ino, 0, 100).err();
        refused.is_some()
    });
    assert_eq!(refused.unwrap().errno(), libc::EIO);
    assert_eq!(create(&fs, "after").unwrap_err().errno(), libc::EIO);
    drop(fs);
    n.restart();
    let fs = n.attach(FsOptions::default());
    let a = fs.lookup(&root(), ROOT_INO, b"kept").unwrap();
    assert_eq!(fs.read(a.ino, 0, 100).unwrap(), b"committed before the crash");
    assert_eq!(fs.lookup(&root(), ROOT_INO, b"after").unwrap_err().errno(), libc::ENOENT);
}

/// Two clients of one node at once: one rewrites a file whole, over and over (each version a
/// single write of one repeated byte), the other reads it whole meanwhile. Every read must
/// see one version entirely (a write is never split by a lease moving) and versions never go
/// back (what a reader saw stays published).
#[test]
fn a_reader_and_a_writer_on_two_clients_see_whole_versions_in_order() {
    let n = Nicfs::start();
    let a = std::sync::Arc::new(n.attach(FsOptions::default()));
    let b = std::sync::Arc::new(n.attach(FsOptions::default()));
    let ino = create(&a, "shared").unwrap();
    a.write(&root(), ino, 0, &[0u8; 8192]).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (a, stop) = (a.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut v = 0u8;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                v = v.wrapping_add(1).max(1);
                a.write(&root(), ino, 0, &[v; 8192]).unwrap();
            }
        })
    };
    let (mut reads, mut last, mut changes) = (0u64, 0u8, 0u64);
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        let data = b.read(ino, 0, 8192).unwrap();
        assert_eq!(data.len(), 8192);
        let v = data[0];
        assert!(data.iter().all(|&x| x == v), "read {reads}: a torn version (starts with {v})");
        // Versions wrap at 255; within a short run they only go forward.
        assert!(v >= last || last - v > 128, "read {reads}: version {v} after {last}");
        changes += u64::from(v != last);
        last = v;
        reads += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    assert!(changes > 3, "the reader saw only {changes} versions in {reads} reads");
}

/// A client that keeps committing while nicfs fetches its chunks, then syncs: the fsync must
/// wait for everything committed (it was refused, "the log is committed only up to …", when
/// it raised the target while a fetch was in flight and the fetch's shorter end was taken
/// for the end of the log — found by `linefs bench offload`).
#[test]
fn fsync_during_background_publication_of_a_long_write() {
    let n = Nicfs::start_with(&FormatParams { size: 256 << 20, log_size: 32 << 20, log_slots: 2, inodes: 256 });
    let fs = n.attach(FsOptions { publish_interval: Duration::from_millis(20), ..Default::default() });
    let ino = create(&fs, "long").unwrap();
    let block = vec![0x6bu8; 16 << 10];
    for i in 0..(96u64 << 20) / block.len() as u64 {
        fs.write(&root(), ino, i * block.len() as u64, &block).unwrap();
        if i % 97 == 96 {
            fs.sync_all().unwrap();
        }
    }
    fs.sync_all().unwrap();
    let s = fs.status();
    assert_eq!(s.published_lsn, s.tail_lsn);
}

/// POSIX across clients: a file unlinked by one client while another holds it open stays
/// readable there, whole, until that client closes it; then nicfs frees it. A file open
/// nowhere is freed by its unlink's publication.
#[test]
fn a_file_unlinked_by_one_client_stays_readable_where_it_is_open() {
    let n = Nicfs::start();
    let a = n.attach(FsOptions::default());
    let b = n.attach(FsOptions::default());
    let data: Vec<u8> = (0..300_000).map(|i| (i % 253) as u8).collect();
    let ino = create(&a, "shared").unwrap();
    a.write(&root(), ino, 0, &data).unwrap();
    let scratch = create(&a, "scratch").unwrap();
    a.sync_all().unwrap();

    let found = b.lookup(&root(), ROOT_INO, b"shared").unwrap();
    assert_eq!(found.ino, ino);
    let fh = b.open(&root(), ino, libc::O_RDONLY).unwrap();
    let free_inodes = || a.statfs().ffree;
    let before = free_inodes();

    // Open nowhere: freed once published.
    a.unlink(&root(), ROOT_INO, b"scratch").unwrap();
    a.sync_all().unwrap();
    wait_until("the scratch file's number to come back", || free_inodes() == before + 1);
    let _ = scratch;

    // Open in B: A's unlink (and free) leave it in place for B.
    a.unlink(&root(), ROOT_INO, b"shared").unwrap();
    a.sync_all().unwrap();
    assert_eq!(a.lookup(&root(), ROOT_INO, b"shared").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(b.read(ino, 0, data.len() as u32).unwrap(), data, "B reads the unlinked file whole");
    assert_eq!(b.getattr(ino).unwrap().nlink, 0);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(free_inodes(), before + 1, "kept while B holds it open");

    // B's reads record access times (entries about the orphan, published later); B
    // closes it and the kernel forgets it: B frees it in its log, after them.
    assert!(b.touch_atime(ino, AtimePolicy::Strict).unwrap());
    b.release(ino, fh);
    b.forget(ino, 1);
    b.sync_all().unwrap();
    wait_until("the orphan to be freed", || free_inodes() == before + 2);
    // And B's session is sound.
    create(&b, "after").unwrap();
    b.sync_all().unwrap();
}

/// A number a client frees goes back to its own pool, held for writing, to be reused by its
/// next create. If another client asks for the number meanwhile (it still knew the inode),
/// the revoke takes it out of the first client's hands: a create there must not reuse it
/// behind the second client's back, whose read lease on the number covers a view without
/// that inode — it would list the new name and fail to look it up (ENOENT), for good.
/// Found by the FUSE two-mount load test (cli/tests/cluster.rs).
#[test]
fn a_freed_number_another_client_asked_for_is_not_reused_behind_its_back() {
    let n = Nicfs::start();
    let a = n.attach(FsOptions::default());
    let b = n.attach(FsOptions::default());
    for round in 0..20 {
        let ino = create(&a, &format!("f{round}")).unwrap();
        // b knows the number, as its kernel would after a lookup.
        let seen = b.lookup(&root(), ROOT_INO, format!("f{round}").as_bytes()).unwrap();
        assert_eq!(seen.ino, ino);
        b.forget(ino, 1);
        a.unlink(&root(), ROOT_INO, format!("f{round}").as_bytes()).unwrap();
        // b asks about the number again (a stale reference): the inode is gone.
        assert_eq!(b.getattr(ino).unwrap_err().errno(), libc::ENOENT);
        let new = create(&a, &format!("g{round}")).unwrap();
        let seen = b.lookup(&root(), ROOT_INO, format!("g{round}").as_bytes()).unwrap();
        assert_eq!(seen.ino, new, "round {round}");
        b.forget(new, 1);
    }
}

/// Far more written than a small log holds: the client reclaims its log as nicfs publishes
/// chunks and, whenever it outpaces nicfs and the log fills, waits until nicfs has
/// published the oldest part of it. Every byte arrives, in order, as another client reads
/// it after the writer detaches.
#[test]
fn writes_far_beyond_a_small_log_lose_nothing() {
    let n = Nicfs::start_with(&FormatParams { size: 128 << 20, log_size: 2 << 20, log_slots: 2, inodes: 256 });
    // A long interval: chunk notices and full-log waits drive publication, not the timer.
    let fs = n.attach(FsOptions { publish_interval: Duration::from_secs(5), ..Default::default() });
    let ino = create(&fs, "big").unwrap();
    let total = 48u64 << 20;
    let piece = 16u64 << 10;
    let content = |i: u64| -> Vec<u8> { (0..piece).map(|j| ((i * 31 + j * 7) % 253) as u8).collect() };
    for i in 0..total / piece {
        fs.write(&root(), ino, i * piece, &content(i)).unwrap();
    }
    // Once all is published, st_blocks counts each block once (it is counted again after
    // every publication that touched the file, on the next stat).
    fs.sync_all().unwrap();
    assert_eq!(fs.getattr(ino).unwrap().blocks, total / 512);
    drop(fs);
    let fs = n.attach(FsOptions::default());
    let a = fs.lookup(&root(), ROOT_INO, b"big").unwrap();
    assert_eq!(a.size, total);
    for i in 0..total / piece {
        let got = fs.read(a.ino, i * piece, piece as u32).unwrap();
        assert!(got == content(i), "piece {i} differs");
    }
    fs.forget(a.ino, 1);
}

const OWNER: u32 = 1000;
const OTHER: u32 = 2000;

fn user(uid: u32) -> Cred {
    Cred { uid, gid: uid, groups: Vec::new() }
}

/// A node with room for four clients at once.
fn node() -> Nicfs {
    Nicfs::start_with(&FormatParams { size: 64 << 20, log_size: 8 << 20, log_slots: 4, inodes: 4096 })
}

/// A client that states each call's caller, as a mount daemon does.
fn daemon(n: &Nicfs) -> Fs {
    n.attach(FsOptions { mount_daemon: true, background_publish: false, ..Default::default() })
}

/// `owner`'s file `name` in the root (made by root, given to `owner`), mode 0644,
/// published and closed.
fn file_of(fs: &Fs, owner: u32, name: &str) -> Ino {
    let (a, fh) = fs.create(&root(), ROOT_INO, name.as_bytes(), 0o644, 0, libc::O_RDWR).unwrap();
    fs.release(a.ino, fh);
    fs.setattr(&root(), a.ino, &SetAttr { uid: Some(owner), gid: Some(owner), ..Default::default() }).unwrap();
    fs.forget(a.ino, 1);
    fs.sync_all().unwrap();
    a.ino
}

/// Publishes everything `fs` logged, which must be accepted (the session stays healthy),
/// and checks that a new client of the node reads `want` at the start of `ino`.
fn published_whole(n: &Nicfs, fs: &Fs, ino: Ino, want: &[u8]) {
    fs.sync_all().unwrap_or_else(|e| panic!("publication refused: {e}"));
    let s = fs.status();
    assert_eq!((s.publish_error, s.published_lsn), (None, s.tail_lsn));
    let other = n.attach(FsOptions::default());
    assert_eq!(other.read(ino, 0, want.len() as u32).unwrap(), want);
}

/// POSIX: a file opened for writing stays writable through that descriptor whoever uses it
/// and whatever the mode says. A mount daemon's root opens another user's file (a session
/// that did not create it: after a remount) and passes the descriptor to a user the mode
/// does not let write: libfs accepts the write, and nicfs must publish it.
#[test]
fn a_write_through_roots_open_by_a_user_the_mode_refuses_is_published() {
    let n = node();
    let fs = daemon(&n);
    let ino = file_of(&fs, OWNER, "f");
    drop(fs);
    let fs = daemon(&n);
    let fh = fs.open(&root(), ino, libc::O_RDWR).unwrap();
    assert_eq!(fs.write(&user(OTHER), ino, 0, b"through root's open").unwrap(), 19);
    fs.release(ino, fh);
    published_whole(&n, &fs, ino, b"through root's open");
    // The session goes on: another write, by the owner this time.
    fs.write(&user(OWNER), ino, 0, b"THROUGH").unwrap();
    published_whole(&n, &fs, ino, b"THROUGH root's open");
}

/// The owner opens its file for writing, makes it read-only (chmod a-w) and writes through
/// the descriptor it had: in a client that did not create the file (another client of the
/// node, no remount), and in the creating client after a remount. The open and the chmod are
/// not published before the write.
#[test]
fn the_owner_writes_through_its_open_after_chmod_a_minus_w() {
    let n = node();
    let creator = daemon(&n);
    let ino = file_of(&creator, OWNER, "f");
    let read_only = SetAttr { mode: Some(0o444), ..Default::default() };
    for (round, fs) in [daemon(&n), {
        drop(creator);
        daemon(&n)
    }]
    .into_iter()
    .enumerate()
    {
        let writable = SetAttr { mode: Some(0o644), ..Default::default() };
        fs.setattr(&user(OWNER), ino, &writable).unwrap();
        fs.sync_all().unwrap();
        let fh = fs.open(&user(OWNER), ino, libc::O_WRONLY).unwrap();
        fs.setattr(&user(OWNER), ino, &read_only).unwrap();
        assert_eq!(fs.open(&user(OWNER), ino, libc::O_WRONLY).unwrap_err().errno(), libc::EACCES);
        let data = format!("round {round}");
        fs.write(&user(OWNER), ino, 0, data.as_bytes()).unwrap();
        fs.release(ino, fh);
        published_whole(&n, &fs, ino, data.as_bytes());
        assert_eq!(fs.getattr(ino).unwrap().perm, 0o444);
    }
}

/// A user the mode allows when it opens opens for writing while the client holds the
/// file's write lease with the owner's chmod a+w unpublished; the owner then takes write
/// away again and the user writes through its open. nicfs judged such an open on the
/// published mode, which still said no (and granted nothing): the write was refused.
#[test]
fn an_open_allowed_by_an_unpublished_chmod_stays_writable() {
    let n = node();
    let fs = daemon(&n);
    let ino = file_of(&fs, OWNER, "f");
    drop(fs);
    let fs = daemon(&n);
    fs.setattr(&user(OWNER), ino, &SetAttr { mode: Some(0o666), ..Default::default() }).unwrap();
    let fh = fs.open(&user(OTHER), ino, libc::O_RDWR | libc::O_TRUNC).unwrap();
    fs.setattr(&user(OWNER), ino, &SetAttr { mode: Some(0o644), ..Default::default() }).unwrap();
    fs.write(&user(OTHER), ino, 0, b"other's").unwrap();
    fs.release(ino, fh);
    published_whole(&n, &fs, ino, b"other's");
}

/// An open for writing takes no write lease: two clients reading a file both keep their read
/// leases when one of them opens it for writing, until a write through that open actually
/// needs the write lease; the write is then published under the grant its open's OPEN_WRITE
/// record left.
#[test]
fn an_open_for_writing_moves_no_lease_until_it_writes() {
    let n = Nicfs::start();
    let a = n.attach(FsOptions::default());
    let ino = create(&a, "shared").unwrap();
    a.write(&root(), ino, 0, b"from a").unwrap();
    let b = n.attach(FsOptions::default());
    assert_eq!(b.read(ino, 0, 6).unwrap(), b"from a");
    assert_eq!(a.read(ino, 0, 6).unwrap(), b"from a");
    let a_reads = a.status().read_leases;
    assert!(a_reads >= 1, "a and b both read the file");
    let fh = b.open(&root(), ino, libc::O_RDWR).unwrap();
    assert_eq!(b.status().write_leases, 0, "b opened for writing: no write lease yet");
    assert_eq!(a.status().read_leases, a_reads, "a's read lease was not taken");
    b.write(&user(OTHER), ino, 0, b"from b").unwrap();
    assert!(a.status().read_leases < a_reads, "b's write took it");
    b.release(ino, fh);
    drop(a);
    published_whole(&n, &b, ino, b"from b");
}

/// A client nicfs does not trust with the public file (here uid and gid 65534, no other
/// group: the test binary re-run as `nobody`) is refused by libfs with a message that says
/// why and what to do, and nicfs serves root's clients on (docs/SECURITY.md).
#[test]
fn an_untrusted_user_cannot_attach_through_libfs() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let n = Nicfs::start();
    let dir = n.socket.parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "untrusted_attach", "--nocapture", "--include-ignored"])
        .env("LIBFS_TEST_SOCKET", &n.socket)
        .env("LIBFS_TEST_NODE", &n.node)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("refused: "), "{stdout}");
    let fs = n.attach(FsOptions::default());
    create(&fs, "after").unwrap();
}

#[test]
#[ignore = "run by an_untrusted_user_cannot_attach_through_libfs"]
fn untrusted_attach() {
    let Some(socket) = std::env::var_os("LIBFS_TEST_SOCKET") else { return };
    let node = std::path::PathBuf::from(std::env::var_os("LIBFS_TEST_NODE").unwrap());
    let opts = FsOptions { pm_path: node, nicfs: Some(socket.into()), ..Default::default() };
    let e = Fs::mount(opts).err().expect("an untrusted client does not attach");
    let text = e.to_string();
    assert!(text.contains("uid 65534 may not read the node's public area: use a mount"), "{text}");
    assert!(text.ends_with("Permission denied (os error 13)"), "{text}");
    println!("refused: {text}");
}

/// A refusal injected in front of a real nicfs (`libfs::testing::attach_with_faults`):
/// the sync that nicfs was not let answer fails with the injected errno, nothing the
/// client logged is lost, and once the link lets the fsync through nicfs publishes it all
/// — a second client reads it.
#[test]
fn an_fsync_refused_in_front_of_nicfs_is_published_once_let_through() {
    let n = Nicfs::start();
    let opts = FsOptions {
        pm_path: n.node.clone(),
        nicfs: Some(n.socket.clone()),
        background_publish: false,
        ..Default::default()
    };
    let (fs, faults) = libfs::testing::attach_with_faults(&n.socket, opts).unwrap();
    let ino = create(&fs, "f").unwrap();
    fs.write(&root(), ino, 0, b"kept through a refused sync").unwrap();
    faults.refuse(libfs::testing::Call::Fsync, libfs::testing::RemoteError::ShuttingDown, 1);
    assert_eq!(fs.sync_all().unwrap_err().errno(), libc::ESHUTDOWN);
    assert!(fs.status().published_lsn < fs.status().tail_lsn, "nothing published");
    fs.sync_all().unwrap();
    let s = fs.status();
    assert_eq!((s.publish_error, s.published_lsn), (None, s.tail_lsn));
    let other = n.attach(FsOptions::default());
    assert_eq!(other.read(ino, 0, 27).unwrap(), b"kept through a refused sync");
}
