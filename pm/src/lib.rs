//! linefs-pm: the layer every linefs component shares.
//!
//! * [`region`]: a PM region over a memory-mapped file with explicit `persist`/`fence`
//!   primitives, plus the tracing backend the crash tests use ([`trace`]).
//! * [`mountinfo`]: the parser of `/proc/self/mountinfo` (DAX detection, the CLI's mounts).
//! * [`layout`]: the persisted format of a node's PM files (superblock and geometry).
//! * [`record`]: operation-log records (the unit libfs appends and publishers apply).
//! * [`oplog`]: the operation-log ring: entry framing, append, scan of the committed prefix.
//! * [`public`]: the public area: its persisted structures, a read-only view any process can
//!   use ([`public::PublicReader`]), and the publisher's state that validates and applies
//!   records ([`public::PublicArea`]).
//! * [`batch`]: a slot's committed entries decoded, what a publisher publishes as one.
//! * [`publish`]: publication of one log slot from its checkpoint, scanned in PM, or of a
//!   batch a publisher decoded itself from a copy of the log.
//! * [`coalesce`]: what of a batch a later record of the same batch overwrites, and so
//!   need not be published.
//! * [`recovery`]: recovery of a node from PM alone (every slot re-published, orphans freed).
//! * [`replica`]: a node's copies of other nodes' client logs (`replicas/`), in the log-slot
//!   format, written by chain replication and published like the node's own logs.
//! * [`node`]: a node's PM as files (public file, one log file per slot), or packed in one
//!   region for tests.
//! * [`slotfile`]: replacing a settled slot's log file with a fresh one, so that an old
//!   writer's descriptor writes into a file nobody reads.
//! * [`mkfs`]: formatting a node.
//! * [`fsck`]: the read-only consistency check of a node's public area (`linefs fsck`, and
//!   the crash suite's and the soak's check after every recovery).
//! * [`bitmap`]: the DRAM bitmap allocator (data blocks, inode numbers).
//! * [`signals`], [`cpus`]: what every linefs process shares besides PM: signals taken
//!   synchronously, CPU lists and pinning.
//!
//! Publication, recovery and formatting live here, not in the client, so that any process
//! holding a node's PM (libfs in the host-only mode, nicfs) runs the same code.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod batch;
pub mod bitmap;
pub mod coalesce;
pub mod cpus;
pub mod fsck;
pub mod layout;
pub mod mkfs;
pub mod mountinfo;
pub mod node;
pub mod noderecord;
pub mod oplog;
pub mod public;
pub mod publish;
pub mod record;
pub mod recovery;
pub mod region;
pub mod replica;
pub mod signals;
pub mod slotfile;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod trace;
pub mod upgrade;

pub use region::{Backing, PersistMethod, PmError, PmRegion, PmStats};
