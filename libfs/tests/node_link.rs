//! libfs in the offload mode against an in-process fake node (`libfs::testing`), with no
//! nicfs process: what an application sees through libfs's public API when the node
//! answers a certain way — inode numbers, leases and blocks granted, publication on sync,
//! the node full, every refusal the wire has, a grant over the caller's quota, a node that
//! refuses everything for a while (shutting down, fenced, asked to try again), a node
//! fenced while a long write needs log space, and a node gone between two calls.
//!
//! What nicfs itself decides — its accounting of space and inode numbers, several clients
//! sharing a node, a nicfs that dies and the next one's recovery, its checks of hostile
//! or unprivileged clients — is tested against the real nicfs (`offload.rs`,
//! `refusals.rs`, `reftest.rs`).

use libfs::testing::{fake_node, Call, Faults, RemoteError};
use libfs::*;
use linefs_pm::layout::FormatParams;
use std::time::Duration;

fn root() -> Cred {
    Cred::root()
}

fn small() -> FormatParams {
    FormatParams { size: 32 << 20, log_size: 4 << 20, log_slots: 2, inodes: 1024 }
}

/// A client of a fake node of `params`; `background`: the publisher thread reports chunks
/// every 20 ms (else publication happens only on sync, a full log or unmount).
fn client(params: &FormatParams, background: bool) -> (Fs, Faults) {
    let opts =
        FsOptions { background_publish: background, publish_interval: Duration::from_millis(20), ..Default::default() };
    fake_node(params, opts).unwrap()
}

/// Creates `name` in the root, open for reading and writing.
fn create(fs: &Fs, name: &[u8]) -> FsResult<(Ino, u64)> {
    fs.create(&root(), ROOT_INO, name, 0o644, 0o022, libc::O_RDWR).map(|(a, fh)| (a.ino, fh))
}

/// The offload client's whole path against the fake node: inode numbers and blocks
/// granted, leases taken, the log published on sync, the public area read back.
#[test]
fn an_offload_client_writes_syncs_and_reads_back() {
    let (fs, _) = client(&small(), true);
    assert!(fs.offloaded());
    assert!(fs.status().offload);
    let before = fs.statfs();
    let (ino, fh) = create(&fs, b"f").unwrap();
    let data: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    fs.write(&root(), ino, 0, &data).unwrap();
    fs.sync_all().unwrap();
    let s = fs.status();
    assert_eq!(s.published_lsn, s.tail_lsn, "everything published on sync");
    assert_eq!(fs.read(ino, 0, data.len() as u32).unwrap(), data);
    assert!(fs.statfs().bfree + 256 <= before.bfree, "{:?} then {:?}", before, fs.statfs());
    assert_eq!(fs.statfs().ffree + 1, before.ffree, "one inode number used");
    fs.release(ino, fh);
}

/// A node full of data: the writer gets ENOSPC from the node's refusal, and space
/// comes back once the file is deleted and the delete published.
#[test]
fn the_node_full_is_enospc_and_a_delete_gives_the_space_back() {
    let (fs, _) = client(&FormatParams { size: 8 << 20, log_size: 2 << 20, log_slots: 2, inodes: 256 }, true);
    let (ino, fh) = create(&fs, b"big").unwrap();
    let chunk = vec![1u8; 64 << 10];
    let mut off = 0;
    let e = loop {
        match fs.write(&root(), ino, off, &chunk) {
            Ok(_) => off += chunk.len() as u64,
            Err(e) => break e,
        }
        assert!(off < 16 << 20, "an 8 MiB node took {off} bytes");
    };
    assert_eq!(e.errno(), libc::ENOSPC, "{e}");
    fs.release(ino, fh);
    fs.forget(ino, 1);
    fs.unlink(&root(), ROOT_INO, b"big").unwrap();
    fs.sync_all().unwrap();
    let (again, fh) = create(&fs, b"again").unwrap();
    fs.write(&root(), again, 0, &chunk).unwrap();
    fs.release(again, fh);
}

/// Whatever the node refuses a block reservation or an fsync with, the application's
/// write or sync fails with that refusal's errno — every code the wire has, including
/// those a real nicfs cannot be made to send on demand (fenced, shutting down, …).
#[test]
fn every_refusal_reaches_the_application_as_its_errno() {
    let (fs, faults) = client(&small(), false);
    let (ino, fh) = create(&fs, b"f").unwrap();
    for (i, code) in RemoteError::ALL.into_iter().enumerate() {
        let off = (2 * i as u64) << 16;
        faults.refuse(Call::ReserveBlocks, code, u32::MAX);
        let e = fs.write(&root(), ino, off, &[7u8; 4096]).unwrap_err();
        assert_eq!(e.errno(), code.errno(), "{code:?} on ReserveBlocks: {e}");
        faults.disarm(Call::ReserveBlocks);
        fs.write(&root(), ino, off, &[7u8; 4096]).unwrap();
        faults.refuse(Call::Fsync, code, 1);
        let e = fs.sync_all().unwrap_err();
        assert_eq!(e.errno(), code.errno(), "{code:?} on Fsync: {e}");
        fs.sync_all().unwrap();
    }
    fs.release(ino, fh);
    assert_eq!(fs.read(ino, 0, 4096).unwrap(), vec![7u8; 4096], "the writes that went through are there");
}

/// A refused lease fails the call that needed it with the refusal's errno; the node's
/// inode numbers refused, a create fails with it. Both go through once the node agrees.
#[test]
fn a_refused_lease_or_inode_grant_reaches_the_application() {
    let (fs, faults) = client(&small(), false);
    faults.refuse(Call::Lease, RemoteError::AccessDenied, 1);
    assert_eq!(fs.lookup(&root(), ROOT_INO, b"x").unwrap_err().errno(), libc::EACCES);
    faults.refuse(Call::AllocInodes, RemoteError::QuotaExceeded, 1);
    assert_eq!(fs.mkdir(&root(), ROOT_INO, b"d", 0o755, 0).unwrap_err().errno(), libc::EDQUOT);
    let d = fs.mkdir(&root(), ROOT_INO, b"d", 0o755, 0).unwrap();
    assert_eq!(fs.lookup(&root(), ROOT_INO, b"d").unwrap().ino, d.ino);
}

/// libfs reserves blocks a whole grant at a time; a grant over the caller's share of the
/// node (EDQUOT) is asked again for exactly what the write lacks, and only if that is
/// refused too does the application see EDQUOT. A statfs the node does not answer reports
/// this client's share instead of failing.
#[test]
fn a_grant_over_the_quota_is_asked_again_for_exactly_what_is_missing() {
    let (fs, faults) = client(&small(), false);
    let (ino, fh) = create(&fs, b"f").unwrap();
    faults.refuse(Call::ReserveBlocks, RemoteError::QuotaExceeded, 1);
    fs.write(&root(), ino, 0, &[1u8; 8192]).unwrap();
    // The credit is what that write needed: the next one asks again, and both asks fail.
    faults.refuse(Call::ReserveBlocks, RemoteError::QuotaExceeded, 2);
    let e = fs.write(&root(), ino, 1 << 20, &[2u8; 8192]).unwrap_err();
    assert_eq!(e.errno(), libc::EDQUOT, "{e}");
    faults.refuse(Call::StatFs, RemoteError::TryAgain, 1);
    let share = fs.statfs();
    assert!(share.bfree < fs.statfs().bfree, "{share:?}: this client's share, not the node's");
    fs.write(&root(), ino, 1 << 20, &[2u8; 8192]).unwrap();
    fs.sync_all().unwrap();
    fs.release(ino, fh);
    assert_eq!(fs.read(ino, 0, 8192).unwrap(), vec![1u8; 8192]);
    assert_eq!(fs.read(ino, 1 << 20, 8192).unwrap(), vec![2u8; 8192]);
}

/// A node that answers but refuses everything for a while (shutting down, fenced, asking
/// to try again): updates under the leases and the credit already held still go into the
/// log, durably; an fsync fails with the node's errno, and so does a call that needs a
/// lease not held. Once the node answers again, the same client syncs what it logged
/// meanwhile and goes on.
#[test]
fn a_node_that_refuses_everything_for_a_while_loses_nothing() {
    // Room for a whole grant of blocks: the credit covers the writes made meanwhile.
    let params = FormatParams { size: 96 << 20, log_size: 4 << 20, log_slots: 2, inodes: 1024 };
    for code in [RemoteError::ShuttingDown, RemoteError::Fenced, RemoteError::TryAgain] {
        let (fs, faults) = client(&params, false);
        let (ino, fh) = create(&fs, b"f").unwrap();
        fs.write(&root(), ino, 0, b"before").unwrap();
        faults.refuse_all(code);
        fs.write(&root(), ino, 6, b" during").unwrap();
        assert_eq!(fs.sync_all().unwrap_err().errno(), code.errno(), "{code:?}");
        assert_eq!(fs.lookup(&root(), ROOT_INO, b"unknown").unwrap_err().errno(), libc::ENOENT, "root is held");
        // A number beyond the grant of free numbers this client holds.
        assert_eq!(fs.getattr(1000).unwrap_err().errno(), code.errno(), "{code:?}: a lease not held");
        assert_eq!(fs.read(ino, 0, 13).unwrap(), b"before during");
        assert_eq!(fs.status().publish_error, None, "{code:?}: the session has not failed");
        faults.heal();
        fs.sync_all().unwrap();
        let s = fs.status();
        assert_eq!(s.published_lsn, s.tail_lsn, "{code:?}");
        fs.write(&root(), ino, 13, b" after").unwrap();
        fs.release(ino, fh);
        assert_eq!(fs.read(ino, 0, 19).unwrap(), b"before during after");
    }
}

/// The node fenced while a long write fills a small log: the write that needs log space
/// waits for the node to publish, which it refuses, and fails with the node's errno
/// (ETIMEDOUT for a fenced client); everything written before it reads back, and once the
/// node publishes again the writes go on.
#[test]
fn fenced_in_the_middle_of_a_long_write() {
    let (fs, faults) = client(&FormatParams { size: 64 << 20, log_size: 2 << 20, log_slots: 2, inodes: 256 }, false);
    let (ino, fh) = create(&fs, b"long").unwrap();
    let piece = vec![0x3cu8; 64 << 10];
    faults.refuse(Call::Fsync, RemoteError::Fenced, u32::MAX);
    let mut written = 0u64;
    let e = loop {
        match fs.write(&root(), ino, written, &piece) {
            Ok(n) => written += n as u64,
            Err(e) => break e,
        }
        assert!(written < 8 << 20, "a 2 MiB log took {written} bytes unpublished");
    };
    assert_eq!(e.errno(), libc::ETIMEDOUT, "{e}");
    assert!(written >= 1 << 20, "only {written} bytes before the log was full");
    assert_eq!(fs.getattr(ino).unwrap().size, written);
    assert_eq!(fs.read(ino, written - 4096, 4096).unwrap(), vec![0x3cu8; 4096]);
    faults.disarm(Call::Fsync);
    for _ in 0..32 {
        written += fs.write(&root(), ino, written, &piece).unwrap() as u64;
    }
    fs.sync_all().unwrap();
    fs.release(ino, fh);
    assert_eq!(fs.getattr(ino).unwrap().size, written);
    assert_eq!(fs.read(ino, 0, 4096).unwrap(), vec![0x3cu8; 4096]);
}

/// The node gone between two calls (nicfs died): the session has failed, its leases are
/// gone with it, so reads and updates fail with EIO rather than serve or log under leases
/// the node may have passed on; a sync fails too, statfs still answers this client's
/// share, status says why, and unmounting does not hang.
#[test]
fn a_node_gone_between_two_calls_fails_every_call_with_eio() {
    let (fs, faults) = client(&small(), false);
    let (ino, fh) = create(&fs, b"f").unwrap();
    fs.write(&root(), ino, 0, b"committed").unwrap();
    faults.cut();
    assert_eq!(fs.read(ino, 0, 9).unwrap_err().errno(), libc::EIO);
    assert_eq!(fs.write(&root(), ino, 0, b"x").unwrap_err().errno(), libc::EIO);
    assert_eq!(create(&fs, b"g").unwrap_err().errno(), libc::EIO);
    assert_eq!(fs.sync_all().unwrap_err().errno(), libc::EIO);
    let _ = fs.statfs();
    assert!(fs.status().publish_error.is_some());
    fs.release(ino, fh);
    drop(fs);
}
