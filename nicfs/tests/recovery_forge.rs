//! A restart's recovery judges a dead session's unpublished entries by meaning, not by its
//! write leases only. The attack: an unprivileged process (the test binary re-run as uid
//! and gid 65534, see `recovery_forger`, speaking the protocol and the log format itself)
//! may read root's 0644 file, so nicfs grants it the file's write lease; it logs a
//! legitimate entry (a file of its own), then a well-formed WRITE of root's file, then
//! another entry of its own, and never announces them; nicfs is killed (SIGKILL: an
//! operator's kill, a power loss). At the restart, recovery must refuse the forged write
//! (root's file byte for byte unchanged), replay the legitimate entry before it, drop what
//! follows it, and say so in its log. The same with an entry that does not hold together
//! (a file named as a directory) in place of the forged write: dropped likewise (lease-only
//! recovery replayed past it), and the node starts.

mod support;

use linefs_pm::public::PublicReader;
use linefs_pm::record::{dtype, EntryBuilder, InodeImage};
use std::collections::BTreeMap;
use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use support::*;

const NOBODY: u32 = 65534;

fn image(ino: u64, parent: u64, mode: u32, uid: u32) -> InodeImage {
    let nlink = if mode & libc::S_IFMT == libc::S_IFDIR { 2 } else { 1 };
    InodeImage { ino, parent, mode, uid, gid: uid, nlink, ..Default::default() }
}

fn file_as(b: &mut EntryBuilder, dir: u64, ino: u64, name: &[u8], uid: u32, data: &[u8]) {
    b.inode(&InodeImage { size: data.len() as u64, ..image(ino, dir, libc::S_IFREG | 0o644, uid) }, true);
    b.dirent(dir, name, ino, dtype::REG);
    b.write(ino, 0, data);
}

/// Every inode's attributes, every directory's names and every file's bytes.
type Seen = (InodeImage, Vec<(Vec<u8>, u64)>, Vec<u8>);

fn snapshot(p: &PublicReader) -> BTreeMap<u64, Seen> {
    let loaded = p.load().unwrap();
    loaded
        .inodes
        .iter()
        .map(|(&ino, i)| {
            let mut names: Vec<(Vec<u8>, u64)> =
                loaded.dirs.get(&ino).map(|d| d.iter().map(|e| (e.name.clone(), e.ino)).collect()).unwrap_or_default();
            names.sort();
            let mut data = vec![0u8; if i.img.mode & libc::S_IFMT == libc::S_IFREG { i.img.size as usize } else { 0 }];
            p.read_file(ino, 0, &mut data).unwrap();
            (ino, (i.img, names, data))
        })
        .collect()
}

const ROOT_DATA: &[u8] = b"root's data, 0644";

#[test]
fn a_forged_write_under_a_read_granted_lease_is_refused_at_recovery() {
    attack("write");
}

/// The same with an entry that does not hold together (a regular file the suffix made,
/// named as a directory), under leases the forger holds. Lease-only recovery replayed the
/// suffix past it (validation tolerates what the suffix creates, since the area may be
/// ahead for it: the entry after it was replayed — this test failed so). Judged strictly
/// now, it is dropped with what follows it, and the node starts.
#[test]
fn an_invalid_entry_left_by_a_crash_does_not_stop_the_restart() {
    attack("invalid");
}

fn attack(case: &str) {
    let mut d = Daemon::start(4);
    // The forger must reach the socket (nicfs makes it 0666).
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut root = Client::attach(&d.socket);
    let first = root.attached.inodes.first;
    let (public_dir, rootfile) = (first, first + 1);
    // /pub (the forger's directory) and /rootfile (root's, 0644: the forger may read it).
    let mut e = EntryBuilder::new();
    e.inode(&image(public_dir, 1, libc::S_IFDIR | 0o755, NOBODY), true);
    e.dirent(1, b"pub", public_dir, dtype::DIR);
    file_as(&mut e, 1, rootfile, b"rootfile", 0, ROOT_DATA);
    let mut top = root.public().read_inode(1).unwrap().img;
    top.nlink += 1;
    e.inode(&top, false);
    root.append(&e);
    root.chunk_ready();
    assert_eq!(expect_published(&root).published_lsn, root.tail);
    root.release_all();
    let before = snapshot(&root.public());
    drop(root);

    let mut forger = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "recovery_forger", "--nocapture", "--include-ignored"])
        .env("NICFS_TEST_SOCKET", &d.socket)
        .env("NICFS_TEST_INODES", format!("{public_dir} {rootfile}"))
        .env("NICFS_TEST_CASE", case)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the forger has logged everything (and holds its leases, unannounced).
    let out = std::io::BufReader::new(forger.stdout.take().unwrap());
    let mut own = None;
    for line in out.lines() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("logged ") {
            own = Some(rest.trim().parse::<u64>().unwrap());
            break;
        }
    }
    let own = own.expect("the forger logged its entries");

    // nicfs dies with the three entries committed and unpublished.
    let (status, _) = d.stop(libc::SIGKILL);
    assert!(!status.success());
    let _ = forger.kill();
    let _ = forger.wait();

    d.launch();
    let root = Client::attach(&d.socket);
    let mut now = snapshot(&root.public());
    assert_eq!(now[&rootfile].2, ROOT_DATA, "root's file changed by the forged write");
    // The legitimate entry before the forged one is replayed; the one after it is dropped.
    let pub_names = &mut now.get_mut(&public_dir).unwrap().1;
    assert!(!pub_names.iter().any(|(n, _)| n == b"after"), "what follows the forged entry is dropped");
    let at = pub_names.iter().position(|(n, _)| n == b"legit").expect("the forger's legitimate file is replayed");
    let (_, legit) = pub_names.remove(at);
    assert_eq!(legit, own);
    let (img, _, data) = now.remove(&legit).unwrap();
    assert_eq!((img.uid, &data[..]), (NOBODY, &b"by the rules"[..]));
    assert_eq!(now, before, "anything but the forger's own file changed");
    drop(root);
    let (_, log) = d.stop(libc::SIGTERM);
    assert!(log.contains("refused at recovery (judged by meaning)"), "{log}");
}

/// The forger (run as uid 65534 by the tests above).
#[test]
#[ignore = "run by a_forged_write_under_a_read_granted_lease_is_refused_at_recovery and its sibling"]
fn recovery_forger() {
    let Some(socket) = std::env::var_os("NICFS_TEST_SOCKET") else { return };
    let socket = std::path::PathBuf::from(socket);
    let inos: Vec<u64> = std::env::var("NICFS_TEST_INODES").unwrap().split(' ').map(|s| s.parse().unwrap()).collect();
    let (public_dir, rootfile) = (inos[0], inos[1]);
    assert_eq!(rustix::process::geteuid().as_raw(), NOBODY, "run as an unprivileged user");
    let mut c = Client::attach(&socket);
    assert!(c.public_fd.is_none(), "an unprivileged client has no public file");
    let own = c.attached.inodes.first;
    // Every lease first (a lease request names the log's tail: nothing logged yet).
    // Root's 0644 file: granted, since the forger may read it.
    for ino in [public_dir, own, own + 1, rootfile] {
        c.write_lease(ino);
    }
    let mut legit = EntryBuilder::new();
    file_as(&mut legit, public_dir, own, b"legit", NOBODY, b"by the rules");
    c.append(&legit);
    let mut forged = EntryBuilder::new();
    match std::env::var("NICFS_TEST_CASE").unwrap().as_str() {
        "write" => forged.write(rootfile, 0, b"FORGED BY NOBODY!"),
        _ => forged.dirent(public_dir, b"wrong", own, dtype::DIR),
    }
    c.append(&forged);
    let mut after = EntryBuilder::new();
    file_as(&mut after, public_dir, own + 1, b"after", NOBODY, b"follows the forged entry");
    c.append(&after);
    // No ChunkReady: nicfs is killed with all three committed and unpublished.
    println!("logged {own}");
    std::thread::sleep(std::time::Duration::from_secs(60));
}
