//! Leases: single writer, many readers per inode.
//!
//! * [`table`]: the lease table, a pure state machine (inputs in, outputs out; no threads,
//!   sockets or clocks), simulated under a seeded scheduler in its tests;
//! * [`manager`]: the daemon's lease manager — the table behind a mutex, its outputs carried
//!   out to sessions (frames to their outboxes, `PublishTo` jobs to their sequencers) and to
//!   the lease record in PM ([`crate::node::lease_record`]);
//! * [`perms`]: who may do what — the caller a session's entry stands for, whether a
//!   session may take a write lease, and the permission view publication admits entries by.
//!
//! Imports: the node (its lease record, grants) and sessions; nothing of the pipeline or
//! the daemon.

pub(crate) mod manager;
pub(crate) mod perms;
// Not driven by the daemon yet (docs/ARCHITECTURE.md, "Leases across nodes").
#[allow(dead_code)]
pub(crate) mod cluster;
pub(crate) mod table;
