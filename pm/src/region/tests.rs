//! Tests of the region module.

use super::method::mountinfo_is_dax;
use super::*;

const MIB: u64 = 1 << 20;

fn env_forced() -> bool {
    std::env::var_os(PERSIST_ENV).is_some()
}

fn fs_is_tmpfs(dir: &Path) -> bool {
    let f = File::open(dir).unwrap();
    detect_backing(&f, dir) == Backing::Tmpfs
}

/// Write, persist, fence, read back, reopen and read back.
fn roundtrip(path: &Path) -> PmRegion {
    let r = PmRegion::create(path, 2 * MIB).unwrap();
    assert_eq!(r.len(), 2 * MIB);
    assert_eq!(r.path(), Some(path));
    r.write(10, b"linefs").unwrap();
    r.write_u64(4096, 0xdead_beef_0123_4567).unwrap();
    r.write_u64(5003, u64::MAX - 1).unwrap(); // unaligned
    r.zero(8192, 100).unwrap();
    r.write(2 * MIB - 3, b"end").unwrap();
    r.persist(10, 6).unwrap();
    r.persist(4096, 8).unwrap();
    r.persist(5003, 8).unwrap();
    r.persist_now(2 * MIB - 3, 3).unwrap();
    r.fence();
    let mut b = [0u8; 6];
    r.read(10, &mut b).unwrap();
    assert_eq!(&b, b"linefs");
    assert_eq!(r.read_u64(4096).unwrap(), 0xdead_beef_0123_4567);
    assert_eq!(r.read_u64(5003).unwrap(), u64::MAX - 1);
    let s = r.stats();
    assert_eq!(s.persist_calls, 4);
    assert_eq!(s.fences, 2);
    assert_eq!(s.bytes_persisted, 6 + 8 + 8 + 3);
    assert_eq!(s.bytes_written, 6 + 8 + 8 + 100 + 3);
    drop(r);
    let r = PmRegion::open(path).unwrap();
    assert_eq!(r.len(), 2 * MIB);
    r.read(10, &mut b).unwrap();
    assert_eq!(&b, b"linefs");
    assert_eq!(r.read_u64(4096).unwrap(), 0xdead_beef_0123_4567);
    let mut e = [0u8; 3];
    r.read(2 * MIB - 3, &mut e).unwrap();
    assert_eq!(&e, b"end");
    // Little-endian on the medium.
    let mut raw = [0u8; 8];
    r.read(4096, &mut raw).unwrap();
    assert_eq!(raw, 0xdead_beef_0123_4567u64.to_le_bytes());
    r
}

#[test]
fn disk_file_uses_msync() {
    // /var/tmp is normally on disk even where /tmp is tmpfs.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    if fs_is_tmpfs(dir.path()) {
        eprintln!("skipping: /var/tmp is tmpfs");
        return;
    }
    let r = roundtrip(&dir.path().join("node.pm"));
    if detect_backing(&File::open(dir.path()).unwrap(), dir.path()) == Backing::Dax {
        return;
    }
    assert_eq!(r.backing(), Backing::File);
    if !env_forced() {
        assert_eq!(r.persist_method(), PersistMethod::Msync);
    }
    // Persist of a range not page aligned, and of the whole region.
    r.write(4090, &[7; 20]).unwrap();
    r.persist_now(4090, 20).unwrap();
    r.persist_now(0, r.len()).unwrap();
    r.persist_now(r.len(), 0).unwrap();
}

#[test]
fn shm_file_uses_cache_line_flushes() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() || !fs_is_tmpfs(shm) {
        eprintln!("skipping: no tmpfs /dev/shm");
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let r = roundtrip(&dir.path().join("node.pm"));
    assert_eq!(r.backing(), Backing::Tmpfs);
    if !env_forced() {
        assert_eq!(r.persist_method(), PersistMethod::best_flush());
        #[cfg(target_arch = "x86_64")]
        if flush::features().clwb {
            assert_eq!(r.persist_method(), PersistMethod::Clwb);
        }
    }
    // Unaligned ranges spanning lines; the last line of the region.
    r.write(63, &[1; 130]).unwrap();
    r.persist_now(63, 130).unwrap();
    r.persist_now(r.len() - 1, 1).unwrap();
    r.persist_now(0, r.len()).unwrap();
}

#[test]
fn every_available_flush_method_runs() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let path = dir.path().join("m.pm");
    let mut r = PmRegion::create(&path, MIB).unwrap();
    for m in [PersistMethod::Clwb, PersistMethod::ClflushOpt, PersistMethod::Clflush, PersistMethod::Msync] {
        if !m.is_available() {
            continue;
        }
        r.method = m;
        r.write(1000, &[m as u8; 200]).unwrap();
        r.persist_now(1000, 200).unwrap();
        let mut b = [0u8; 200];
        r.read(1000, &mut b).unwrap();
        assert_eq!(b, [m as u8; 200]);
    }
}

#[test]
fn out_of_bounds_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mapped = PmRegion::create(&dir.path().join("oob.pm"), MIB).unwrap();
    for r in [&mapped, &PmRegion::traced(MIB)] {
        let size = r.len();
        let mut b = [0u8; 8];
        assert!(matches!(
            r.read(size - 4, &mut b),
            Err(PmError::OutOfBounds { off, len: 8, size: s }) if off == size - 4 && s == size
        ));
        assert!(r.read(u64::MAX, &mut b).is_err());
        assert!(r.write(size, b"x").is_err());
        assert!(r.write(u64::MAX - 1, b"xyz").is_err());
        assert!(r.zero(size - 10, 11).is_err());
        assert!(r.zero(1, u64::MAX).is_err());
        assert!(r.read_u64(size - 7).is_err());
        assert!(r.write_u64(size, 1).is_err());
        assert!(r.write_u64(u64::MAX, 1).is_err());
        assert!(r.persist(size - 1, 2).is_err());
        assert!(r.persist(u64::MAX, u64::MAX).is_err());
        assert!(r.persist_now(size + 64, 0).is_err());
        // Edges are fine.
        r.write(size - 8, &b).unwrap();
        r.read(size, &mut []).unwrap();
        r.write_u64(size - 8, 3).unwrap();
        assert_eq!(r.read_u64(size - 8).unwrap(), 3);
        r.persist_now(size, 0).unwrap();
        let msg = r.read(size, &mut b).unwrap_err().to_string();
        assert!(msg.contains("out of bounds"), "{msg}");
    }
}

#[test]
fn create_rejects_bad_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.pm");
    for size in [0, 4096, MIN_REGION_SIZE - 4096, MIB + 1, 3 * MIB + 512] {
        assert!(matches!(PmRegion::create(&p, size), Err(PmError::BadSize { .. })));
    }
    assert!(matches!(PmRegion::create(dir.path(), MIB), Err(PmError::Io { .. } | PmError::NotRegularFile { .. })));
    assert!(PmRegion::create(&dir.path().join("no/such/dir.pm"), MIB).is_err());
}

#[test]
fn create_truncates_or_extends() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("grow.pm");
    let r = PmRegion::create(&p, 2 * MIB).unwrap();
    r.write(100, b"keep").unwrap();
    r.persist_now(100, 4).unwrap();
    drop(r);
    let r = PmRegion::create(&p, MIB).unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), MIB);
    let mut b = [0u8; 4];
    r.read(100, &mut b).unwrap();
    assert_eq!(&b, b"keep");
    drop(r);
    let r = PmRegion::create(&p, 4 * MIB).unwrap();
    assert_eq!(r.len(), 4 * MIB);
    assert_eq!(r.read_u64(4 * MIB - 8).unwrap(), 0);
}

#[test]
fn create_new_makes_a_private_file_and_never_reuses_one() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("fresh.pm");
    assert!(matches!(PmRegion::create_new(&p, 4096, 0o600), Err(PmError::BadSize { .. })));
    assert!(!p.exists(), "a bad size creates nothing");
    let (r, file) = PmRegion::create_new(&p, MIB, 0o600).unwrap();
    assert_eq!((r.len(), file.metadata().unwrap().len()), (MIB, MIB));
    assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(r.read_u64(MIB - 8).unwrap(), 0);
    // The descriptor returned is the mapped file's.
    r.write(0, b"same").unwrap();
    let mut b = [0u8; 4];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut b, 0).unwrap();
    assert_eq!(&b, b"same");
    let exists = PmRegion::create_new(&p, MIB, 0o600).err().unwrap();
    assert!(matches!(&exists, PmError::Io { source, .. } if source.kind() == io::ErrorKind::AlreadyExists));
}

#[test]
fn open_errors_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pm");
    let e = PmRegion::open(&missing).unwrap_err();
    assert!(matches!(e, PmError::Io { .. }));
    assert!(e.to_string().contains("missing.pm"), "{e}");

    let empty = dir.path().join("empty.pm");
    File::create(&empty).unwrap();
    let e = PmRegion::open(&empty).unwrap_err();
    assert!(matches!(e, PmError::BadSize { size: 0, .. }), "{e}");
    assert!(e.to_string().contains("empty"), "{e}");

    let odd = dir.path().join("odd.pm");
    std::fs::write(&odd, vec![0u8; 4096 + 100]).unwrap();
    let e = PmRegion::open(&odd).unwrap_err();
    assert!(matches!(e, PmError::BadSize { size: 4196, .. }), "{e}");
    assert!(e.to_string().contains("4096"), "{e}");

    let e = PmRegion::open(dir.path()).unwrap_err();
    assert!(matches!(e, PmError::Io { .. } | PmError::NotRegularFile { .. }), "{e}");

    // A small but page-multiple file opens fine.
    let small = dir.path().join("small.pm");
    std::fs::write(&small, vec![3u8; 8192]).unwrap();
    let r = PmRegion::open(&small).unwrap();
    assert_eq!(r.read_u64(0).unwrap(), 0x0303_0303_0303_0303);
}

#[test]
fn method_selection() {
    assert_eq!(select_method(Backing::File, None).unwrap(), PersistMethod::Msync);
    assert_eq!(select_method(Backing::Tmpfs, None).unwrap(), PersistMethod::best_flush());
    assert_eq!(select_method(Backing::Dax, Some("")).unwrap(), PersistMethod::best_flush());
    assert_eq!(select_method(Backing::Tmpfs, Some("msync")).unwrap(), PersistMethod::Msync);
    assert!(matches!(select_method(Backing::Tmpfs, Some("magic")), Err(PmError::Unsupported { .. })));
    for name in ["clwb", "clflushopt", "CLFLUSH"] {
        let m = PersistMethod::from_name(name).unwrap();
        assert_eq!(select_method(Backing::File, Some(name)).is_ok(), m.is_available());
    }
    assert_eq!(PersistMethod::Clwb.to_string(), "clwb+sfence");
    assert_eq!(PersistMethod::ClflushOpt.to_string(), "clflushopt+sfence");
    assert_eq!(PersistMethod::Clflush.to_string(), "clflush");
    assert_eq!(PersistMethod::Msync.to_string(), "msync");
    assert_eq!(PersistMethod::Traced.to_string(), "traced");
    assert_eq!(Backing::Memory.to_string(), "memory(traced)");
    assert_eq!(Backing::Dax.to_string(), "dax");
}

#[test]
fn dax_detection_from_mountinfo() {
    let info = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 259:0 / /mnt/pmem rw,relatime shared:5 - ext4 /dev/pmem0 rw,dax=always
31 22 259:1 / /mnt/pm\\040old rw,relatime - xfs /dev/pmem1 rw,attr2,dax
32 30 0:50 / /mnt/pmem/sub rw - tmpfs tmpfs rw
33 22 259:2 / /mnt/never rw - ext4 /dev/pmem2 rw,dax=never
";
    assert!(!mountinfo_is_dax(info, Path::new("/home/x.pm")));
    assert!(mountinfo_is_dax(info, Path::new("/mnt/pmem/node.pm")));
    assert!(mountinfo_is_dax(info, Path::new("/mnt/pm old/node.pm")));
    assert!(!mountinfo_is_dax(info, Path::new("/mnt/pmemx/node.pm")));
    assert!(!mountinfo_is_dax(info, Path::new("/mnt/pmem/sub/node.pm")));
    assert!(!mountinfo_is_dax(info, Path::new("/mnt/never/node.pm")));
    assert!(!mountinfo_is_dax("garbage\n\n1 2 3 - x", Path::new("/a")));
}

#[test]
fn traced_region_basics() {
    let r = PmRegion::traced(MIB);
    assert_eq!(r.backing(), Backing::Memory);
    assert_eq!(r.persist_method(), PersistMethod::Traced);
    assert!(r.path().is_none());
    r.write_u64(8, 42).unwrap();
    assert_eq!(r.read_u64(8).unwrap(), 42);
    r.persist_now(8, 8).unwrap();
    let t = r.tracer().unwrap();
    assert_eq!(t.fence_count(), 1);
    assert_eq!(t.durable_image()[8], 42);
    assert_eq!(r.stats().fences, 1);
}

#[test]
fn windows_share_the_parents_bytes_and_tracer() {
    let parent = Arc::new(PmRegion::traced(64 << 10));
    let a = PmRegion::window(parent.clone(), 0, 16 << 10).unwrap();
    let b = PmRegion::window(parent.clone(), 16 << 10, 48 << 10).unwrap();
    assert!(PmRegion::window(parent.clone(), 60 << 10, 8 << 10).is_err(), "beyond the parent");
    assert_eq!((a.len(), b.len()), (16 << 10, 48 << 10));
    b.write(100, b"window b").unwrap();
    b.write_u64(8, 0x1122_3344_5566_7788).unwrap();
    a.write(0, b"window a").unwrap();
    assert!(matches!(a.write((16 << 10) - 4, b"too long"), Err(PmError::OutOfBounds { .. })));
    let mut got = [0u8; 8];
    parent.read((16 << 10) + 100, &mut got).unwrap();
    assert_eq!(&got, b"window b");
    assert_eq!(parent.read_u64((16 << 10) + 8).unwrap(), 0x1122_3344_5566_7788);
    // Only what a window persisted and fenced is in the parent's durable image.
    b.persist(100, 8).unwrap();
    b.fence();
    let durable = a.tracer().expect("the parent's tracer").durable_image();
    assert_eq!(&durable[(16 << 10) + 100..(16 << 10) + 108], b"window b");
    assert_eq!(&durable[0..8], &[0u8; 8], "a's store was never persisted");
    assert_eq!(b.stats().fences, 1);
}

#[test]
fn region_is_send_sync_and_concurrent_disjoint_writes_work() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<PmRegion>();
    let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
    let r = PmRegion::create(&dir.path().join("c.pm"), MIB).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let r = &r;
            s.spawn(move || {
                for i in 0..1000u64 {
                    let off = (t * 1000 + i) * 8;
                    r.write_u64(off, t << 32 | i).unwrap();
                    r.persist(off, 8).unwrap();
                }
                r.fence();
            });
        }
    });
    for t in 0..4u64 {
        for i in 0..1000u64 {
            assert_eq!(r.read_u64((t * 1000 + i) * 8).unwrap(), t << 32 | i);
        }
    }
}

#[test]
fn read_only_regions_refuse_every_store() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ro.pm");
    let rw = PmRegion::create(&p, MIB).unwrap();
    rw.write(100, b"hello").unwrap();
    rw.persist_now(100, 5).unwrap();
    for ro in [
        PmRegion::open_read_only(&p).unwrap(),
        PmRegion::from_file(std::fs::File::open(&p).unwrap(), &p, false).unwrap(),
    ] {
        assert!(!ro.is_writable());
        let mut got = [0u8; 5];
        ro.read(100, &mut got).unwrap();
        assert_eq!(&got, b"hello");
        assert!(matches!(ro.write(0, b"x"), Err(PmError::ReadOnly { .. })));
        assert!(matches!(ro.zero(0, 64), Err(PmError::ReadOnly { .. })));
        assert!(matches!(ro.write_u64(8, 1), Err(PmError::ReadOnly { .. })));
        assert!(matches!(ro.persist(0, 64), Err(PmError::ReadOnly { .. })));
        assert!(matches!(ro.write_persist(0, &[1; 4096]), Err(PmError::ReadOnly { .. })));
        assert!(matches!(ro.zero_persist(0, 4096), Err(PmError::ReadOnly { .. })));
        let w = PmRegion::window(Arc::new(ro), 0, 4096).unwrap();
        assert!(matches!(w.write(0, b"x"), Err(PmError::ReadOnly { .. })));
        // Stores through the writable mapping show through the read-only one.
        rw.write(100, b"HELLO").unwrap();
        w.read(100, &mut got).unwrap();
        assert_eq!(&got, b"HELLO");
        rw.write(100, b"hello").unwrap();
    }
    // A read-only descriptor cannot be mapped for writing.
    assert!(PmRegion::from_file(std::fs::File::open(&p).unwrap(), &p, true).is_err());
}

/// Durable stores at every alignment and length around the streaming thresholds leave the
/// same bytes as plain stores, on every flush method this CPU has and with msync, and are
/// counted as written and persisted.
#[test]
fn durable_stores_match_plain_stores() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return;
    }
    let dir = tempfile::tempdir_in(shm).unwrap();
    let mut r = PmRegion::create(&dir.path().join("d.pm"), MIB).unwrap();
    let data: Vec<u8> = (0..24_000u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut want = vec![0u8; MIB as usize];
    let mut got = vec![0u8; MIB as usize];
    for m in [PersistMethod::Clwb, PersistMethod::ClflushOpt, PersistMethod::Clflush, PersistMethod::Msync] {
        if !m.is_available() {
            continue;
        }
        r.method = m;
        let mut at = 0u64;
        for start in [0usize, 1, 63, 64, 65, 4095] {
            for len in [0usize, 1, 64, 255, 256, 257, 319, 4096, 16_384 + 17] {
                at = (at + 64 * 1024 + start as u64) % (MIB - 24_000);
                let before = r.stats();
                let src = &data[start..start + len];
                r.write_persist(at, src).unwrap();
                want[at as usize..at as usize + len].copy_from_slice(src);
                let z = (len / 3) as u64;
                r.zero_persist(at + 7, z).unwrap();
                want[at as usize + 7..(at + 7 + z) as usize].fill(0);
                let after = r.stats();
                assert_eq!(after.bytes_written - before.bytes_written, len as u64 + z, "{m} {start} {len}");
                assert_eq!(after.bytes_persisted - before.bytes_persisted, len as u64 + z, "{m} {start} {len}");
            }
        }
        r.fence();
        r.read(0, &mut got).unwrap();
        assert!(got == want, "{m}: durable stores left different bytes than plain stores");
    }
    assert!(matches!(r.write_persist(MIB - 10, &[1; 11]), Err(PmError::OutOfBounds { .. })));
    assert!(matches!(r.zero_persist(MIB - 10, 11), Err(PmError::OutOfBounds { .. })));
}

/// On a traced region a durable store is a store and a write-back: durable only after the
/// next fence, line by line as the crash tests model it; through a window, in the parent.
#[test]
fn durable_stores_on_traced_regions_wait_for_the_fence() {
    let parent = Arc::new(PmRegion::traced(64 << 10));
    let w = PmRegion::window(parent.clone(), 4096, 32 << 10).unwrap();
    for r in [&*parent, &w] {
        let base = if std::ptr::eq(r, &*parent) { 0 } else { 4096 };
        r.write_persist(100, &[9; 1000]).unwrap();
        r.zero_persist(2000, 1000).unwrap();
        let t = r.tracer().unwrap();
        assert!(t.durable_image()[base + 100..base + 1100].iter().all(|&b| b == 0), "durable before the fence");
        assert!(t.pending_lines().len() >= 16, "the stores are written back, waiting for the fence");
        r.fence();
        assert!(t.durable_image()[base + 100..base + 1100].iter().all(|&b| b == 9));
        assert_eq!(r.stats().bytes_persisted, 2000);
        parent.zero_persist(0, 64 << 10).unwrap();
        parent.fence();
    }
}
