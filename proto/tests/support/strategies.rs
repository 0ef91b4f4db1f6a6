//! proptest strategies for arbitrary *valid* frames of every link (shared by the test
//! binaries through `#[path]`).
#![allow(dead_code)]

use linefs_proto::*;
use proptest::collection::vec;
use proptest::prelude::*;

/// Cases per property: `PROPTEST_CASES` if set, else `default`.
pub fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        "[ -~]{0,40}",
        // Multi-byte characters, up to the byte limit.
        "\\PC{0,64}".prop_map(|s| s
            .chars()
            .scan(0, |n, c| {
                *n += c.len_utf8();
                (*n <= MAX_TEXT).then_some(c)
            })
            .collect()),
        Just("é".repeat(MAX_TEXT / 2)),
    ]
}

pub fn errno_value() -> impl Strategy<Value = i32> {
    1..=errno::MAX
}

pub fn creds() -> impl Strategy<Value = Creds> {
    (any::<u32>(), any::<u32>(), prop_oneof![vec(any::<u32>(), 0..8), vec(any::<u32>(), 0..300)])
        .prop_map(|(uid, gid, groups)| Creds { uid, gid, groups })
}

pub fn mode() -> impl Strategy<Value = LeaseMode> {
    prop_oneof![Just(LeaseMode::Read), Just(LeaseMode::Write)]
}

pub fn hello() -> impl Strategy<Value = Hello> {
    let channel = prop_oneof![Just(Channel::Control), Just(Channel::Bulk), Just(Channel::Kworker)];
    let role = prop_oneof![Just(Role::MountDaemon), Just(Role::DirectApi), Just(Role::Kworker)];
    (channel, role, any::<u64>()).prop_map(|(channel, role, session)| Hello { channel, role, session })
}

/// Any refusal the wire carries.
pub fn remote_error() -> impl Strategy<Value = RemoteError> {
    proptest::sample::select(RemoteError::ALL.to_vec())
}

pub fn error_reply() -> impl Strategy<Value = ErrorReply> {
    (remote_error(), text()).prop_map(|(code, message)| ErrorReply { code, message })
}

/// A range whose end fits in a u64.
pub fn range() -> impl Strategy<Value = (u64, u64)> {
    any::<u64>().prop_flat_map(|first| (Just(first), 0..=u64::MAX - first))
}

pub fn attached() -> impl Strategy<Value = Attached> {
    (any::<u64>(), any::<u32>(), any::<bool>(), range(), any::<u64>(), any::<u64>(), range()).prop_map(
        |(session, slot, public, (ring_offset, ring_bytes), start_lsn, chunk_bytes, (first, count))| Attached {
            session,
            slot,
            public,
            log: LogGeometry { ring_offset, ring_bytes, start_lsn, chunk_bytes },
            inodes: InodeRange { first, count },
        },
    )
}

pub fn handback() -> impl Strategy<Value = LeaseHandback> {
    (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(inode, lease, covered_lsn)| LeaseHandback {
        inode,
        lease,
        covered_lsn,
    })
}

pub fn control() -> impl Strategy<Value = Control> {
    prop_oneof![
        hello().prop_map(Control::Hello),
        attached().prop_map(Control::Attached),
        (any::<u64>(), mode(), any::<u64>(), creds()).prop_map(|(inode, mode, log_tail, creds)| Control::LeaseRequest(
            LeaseRequest { inode, mode, log_tail, creds }
        )),
        (any::<u64>(), mode(), any::<u64>()).prop_map(|(inode, mode, lease)| Control::LeaseGranted(LeaseGranted {
            inode,
            mode,
            lease
        })),
        handback().prop_map(Control::LeaseRelease),
        (any::<u64>(), any::<u64>(), any::<bool>()).prop_map(|(inode, lease, keep_read)| Control::Revoke(Revoke {
            inode,
            lease,
            keep_read
        })),
        handback().prop_map(Control::RevokeDone),
        any::<u64>().prop_map(|lsn| Control::Fsync(Fsync { lsn })),
        any::<u64>().prop_map(|durable_lsn| Control::FsyncDone(FsyncDone { durable_lsn })),
        (1..=MAX_INODE_BATCH).prop_map(|count| Control::AllocInodes(AllocInodes { count })),
        range().prop_map(|(first, count)| Control::InodeRange(InodeRange { first, count })),
        any::<u64>().prop_map(|count| Control::ReserveBlocks(Blocks { count })),
        any::<u64>().prop_map(|count| Control::ReleaseBlocks(Blocks { count })),
        (any::<u64>(), remote_error(), text()).prop_map(|(lsn, code, reason)| Control::Rejected(Rejected {
            lsn,
            code,
            reason
        })),
        Just(Control::Detach),
        Just(Control::Ping),
        Just(Control::Pong),
        Just(Control::StatFs),
        any::<u64>().prop_map(|inode| Control::Opened(InodeRef { inode })),
        any::<u64>().prop_map(|inode| Control::Closed(InodeRef { inode })),
        (any::<u64>(), any::<u64>())
            .prop_map(|(free_blocks, free_inodes)| Control::Space(Space { free_blocks, free_inodes })),
        Just(Control::Ok),
        error_reply().prop_map(Control::Error),
    ]
}

pub fn published() -> impl Strategy<Value = Published> {
    let changed = prop_oneof![
        1 => Just(InodeSet::All),
        8 => vec(any::<u64>(), 0..64).prop_map(InodeSet::Listed),
        // Now and then a list at the frame's limit.
        1 => (MAX_PUBLISHED_INODES - 2..=MAX_PUBLISHED_INODES).prop_map(|n| InodeSet::Listed((0..n as u64).collect())),
    ];
    (any::<u64>(), any::<u64>(), changed).prop_map(|(a, b, changed)| Published {
        published_lsn: a.max(b),
        reclaim_lsn: a.min(b),
        changed,
    })
}

pub fn bulk() -> impl Strategy<Value = Bulk> {
    prop_oneof![
        hello().prop_map(Bulk::Hello),
        any::<u64>().prop_map(|committed_lsn| Bulk::ChunkReady(ChunkReady { committed_lsn })),
        published().prop_map(Bulk::Published),
        Just(Bulk::Ok),
        error_reply().prop_map(Bulk::Error),
    ]
}

pub fn copy_entry() -> impl Strategy<Value = CopyEntry> {
    let source = prop_oneof![(0..u32::MAX).prop_map(CopySource::Slot), Just(CopySource::Zero)];
    (source, any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(source, src, dst, len)| {
        let src_offset = if source == CopySource::Zero { 0 } else { src };
        // Both extents must fit in a u64.
        let len = len.min(u64::MAX - src_offset).min(u64::MAX - dst);
        CopyEntry { source, src_offset, dst_offset: dst, len }
    })
}

pub fn kworker() -> impl Strategy<Value = Kworker> {
    // Now and then a list at the frame's limit (one entry repeated: cheap to generate).
    let entries = prop_oneof![9 => vec(copy_entry(), 0..40), 1 => copy_entry().prop_map(|e| vec![e; MAX_COPY_ENTRIES])];
    prop_oneof![
        hello().prop_map(Kworker::Hello),
        any::<u32>().prop_map(|lists_in_flight| Kworker::Heartbeat(Heartbeat { lists_in_flight })),
        (any::<u64>(), entries).prop_map(|(list_id, entries)| Kworker::CopyList(CopyList { list_id, entries })),
        any::<u64>().prop_map(|list_id| Kworker::CopyDone(CopyDone { list_id })),
        (any::<u64>(), any::<u32>(), errno_value())
            .prop_map(|(list_id, entry, errno)| Kworker::CopyFailed(CopyFailed { list_id, entry, errno })),
        Just(Kworker::Ok),
        error_reply().prop_map(Kworker::Error),
    ]
}

/// An id valid for the kind: never 0, except that an Error may answer "no id".
pub fn id_for(kind: Kind) -> BoxedStrategy<u64> {
    if kind == Kind::Error {
        prop_oneof![Just(0u64), any::<u64>()].boxed()
    } else {
        (1..=u64::MAX).boxed()
    }
}

/// A valid frame of a link, with a party allowed to send it.
pub fn frame<M: Codec + std::fmt::Debug + Clone + 'static>(
    msg: impl Strategy<Value = M> + 'static,
) -> impl Strategy<Value = (Frame<M>, Party)> {
    msg.prop_flat_map(|msg| {
        let kind = msg.kind();
        let senders: Vec<Party> = kind.senders().collect();
        (id_for(kind), proptest::sample::select(senders))
            .prop_map(move |(id, from)| (Frame { id, msg: msg.clone() }, from))
    })
}
