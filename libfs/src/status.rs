//! What a client reports about itself: PM backing, log use, publication progress, space.
//! Serialised with serde (the mount daemon writes it as JSON to its status file, and
//! `linefs status` reads it back).

use crate::state::Fs;
use linefs_pm::region::{Backing, PersistMethod};
use serde::{Deserialize, Serialize};

/// What [`Fs::status`] reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsStatus {
    pub pm_path: String,
    pub pm_size: u64,
    pub backing: String,
    pub persist_method: String,
    /// The log slot of this client.
    pub client: u32,
    pub log_capacity: u64,
    /// Bytes of log between the published LSN and the tail.
    pub log_used: u64,
    pub unpublished_entries: u64,
    pub published_lsn: u64,
    pub tail_lsn: u64,
    pub data_blocks: u64,
    pub free_blocks: u64,
    pub inodes: u64,
    pub free_inodes: u64,
    pub entries_appended: u64,
    pub entries_published: u64,
    pub publish_batches: u64,
    pub recovered_entries: u64,
    pub publish_error: Option<String>,
    /// Whether nicfs publishes (offload) or this client does (host-only).
    #[serde(default)]
    pub offload: bool,
    /// Offload: leases held for reading and for writing.
    #[serde(default)]
    pub read_leases: u64,
    #[serde(default)]
    pub write_leases: u64,
}

impl Fs {
    pub fn status(&self) -> FsStatus {
        // The node's space and inode numbers (offload: nicfs's), asked before any lock is
        // taken (statfs takes the view's lock itself).
        let node = self.statfs();
        let link = &self.client.link;
        let front = self.rlock();
        let publication = &self.client.publication;
        // Before `public` is taken: a host-only link reads it for reading again, and a
        // publisher queued for writing between the two reads would deadlock all three (the
        // status thread, the publisher, and every call waiting for `front`).
        let publish_error = link.failure();
        let ps = publication.public.read();
        let region = &publication.public_region;
        FsStatus {
            pm_path: self.pm_path.clone(),
            pm_size: publication.geo.node_size(),
            backing: region.backing().to_string(),
            persist_method: region.persist_method().to_string(),
            client: self.slot,
            log_capacity: publication.log.ring_bytes(),
            log_used: front.tail - front.reclaimed,
            unpublished_entries: publication.pending.lock().iter().filter(|p| p.end > ps.published).count() as u64,
            published_lsn: ps.published,
            tail_lsn: front.tail,
            data_blocks: publication.geo.data_blocks,
            // The public area's free blocks where this client publishes into it; else the
            // node's as nicfs counts them (plus this client's unspent reservation), as statfs
            // reports them.
            free_blocks: ps.area().map_or(node.bfree, |a| a.free_blocks()),
            inodes: publication.geo.inode_count - 1,
            free_inodes: node.ffree,
            entries_appended: front.appended,
            entries_published: ps.entries,
            publish_batches: ps.batches,
            recovered_entries: front.recovered,
            publish_error,
            offload: link.shared(),
            read_leases: link.leases().counts().0,
            write_leases: link.leases().counts().1,
        }
    }

    /// The PM backing and persist method (for benchmarks and status).
    pub fn pm_info(&self) -> (Backing, PersistMethod) {
        let region = &self.client.publication.public_region;
        (region.backing(), region.persist_method())
    }
}
