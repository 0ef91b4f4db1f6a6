//! A reader of a public area that another mapping publishes into at the same time (a client
//! beside nicfs) never sees an inode half-written: `PublicReader::shared` re-reads until the
//! checksum matches, and gives up on an inode that is corrupt for good.

use linefs_pm::layout::FormatParams;
use linefs_pm::mkfs::format_dir;
use linefs_pm::node::PUBLIC_FILE;
use linefs_pm::public::{PmInode, PublicReader};
use linefs_pm::record::InodeImage;
use linefs_pm::PmRegion;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Two images of inode 5 that differ in every 8-byte word.
fn images() -> [PmInode; 2] {
    let mk = |k: u64| {
        let img = InodeImage {
            ino: 5,
            size: 0x1111_1111_1111 * k,
            parent: 0,
            mode: libc::S_IFREG | (0o600 + k as u32),
            uid: 1000 + k as u32,
            gid: 2000 + k as u32,
            nlink: k as u32,
            generation: 7 * k as u32,
            ..Default::default()
        };
        let mut roots = [0u64; 15];
        for (i, r) in roots.iter_mut().enumerate() {
            *r = 1000 * k + i as u64;
        }
        PmInode { img, xattr: 77 * k, roots }
    };
    [mk(1), mk(2)]
}

#[test]
fn a_shared_reader_never_sees_a_torn_inode() {
    let dir = tempfile::tempdir().unwrap();
    let node = format_dir(&dir.path().join("node"), &FormatParams::for_size(16 << 20)).unwrap();
    let geo = node.geometry;
    let public = dir.path().join("node").join(PUBLIC_FILE);
    let writer = PmRegion::open(&public).unwrap();
    let reader = PublicReader::shared(Arc::new(PmRegion::open_read_only(&public).unwrap()), geo);
    let [a, b] = images();
    writer.write(geo.inode_off(5), &a.encode()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let (ea, eb) = (a.encode(), b.encode());
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                writer.write(geo.inode_off(5), if n.is_multiple_of(2) { &eb } else { &ea }).unwrap();
                n += 1;
            }
            n
        })
    };
    let mut seen = [0u64; 2];
    for _ in 0..200_000 {
        let got = reader.read_inode(5).expect("a consistent inode within the retries");
        if got == a {
            seen[0] += 1;
        } else if got == b {
            seen[1] += 1;
        } else {
            panic!("torn inode read: {got:?}");
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 1000, "the writer ran ({flips} rewrites)");
    assert!(seen[0] > 0 && seen[1] > 0, "both images were read: {seen:?}");
}

#[test]
fn node_files_are_private_to_their_owner() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let node = format_dir(&dir.path().join("node"), &FormatParams::for_size(16 << 20)).unwrap();
    let mut files = vec![PUBLIC_FILE.to_string()];
    files.extend((0..node.geometry.log_slots).map(linefs_pm::node::log_file_name));
    for f in files {
        let mode = std::fs::metadata(dir.path().join("node").join(&f)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{f}");
    }
}

#[test]
fn a_shared_reader_reports_an_inode_that_stays_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let node = format_dir(&dir.path().join("node"), &FormatParams::for_size(16 << 20)).unwrap();
    let geo = node.geometry;
    let mut bytes = images()[0].encode();
    bytes[40] ^= 0xff;
    node.public.write(geo.inode_off(5), &bytes).unwrap();
    let public = dir.path().join("node").join(PUBLIC_FILE);
    let shared = PublicReader::shared(Arc::new(PmRegion::open_read_only(&public).unwrap()), geo);
    let err = shared.read_inode(5).unwrap_err().to_string();
    assert!(err.contains("checksum"), "{err}");
    // A free inode (all zeros) is not corruption.
    assert_eq!(shared.read_inode(6).unwrap().img.mode, 0);
    // The publisher's own reader takes the inode as it is (recovery rewrites torn ones).
    assert!(PublicReader::new(node.public.clone(), geo).read_inode(5).is_ok());
}
