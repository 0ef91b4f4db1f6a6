//! Node-level leases: which *node* of the cluster may write (or read) an inode, as a pure
//! state machine per node — inputs in, outputs out, no threads, sockets or clocks — in the
//! manner of the local [`crate::lease::table`] one level up (LineFS §3.5: lease management
//! rooted in the cluster manager, delegated to the nicfs lease managers).
//!
//! * [`core`]: [`core::ClusterLeases`], one per node. It is both a *holder* (the node's own
//!   node-level leases, which bound what its local lease table may grant its clients) and
//!   the *manager* of the shards clustermgr delegated to it (`Delegated`: clustermgr's
//!   root-lease delegation, `clustermgr::lease`).
//! * [`admit`]: [`admit::RemoteAdmission`], the admission of replicated chunks
//!   (`admit_remote(origin, batch)`): every inode an entry of `origin` changes must be one
//!   `origin` holds the node-level write lease of, or a number of `origin`'s inode ranges no
//!   other node holds a lease on (a new inode made by `origin`).
//! * `sim` (tests): a seeded simulation of a cluster of cores with lost, reordered and
//!   duplicated messages, crashes, view changes and manager take-overs, with the checks the
//!   core promises and mutations each check catches.
//!
//! # The protocol
//!
//! Inode `ino` belongs to shard `ino % shards`; each shard's manager is the node clustermgr
//! delegated it to. A node that wants `ino` in a mode it does not hold sends `Acquire` to
//! the manager (again on every retry tick until granted). The manager serves each inode's
//! queue in order like the local table: the head is granted (`Granted`, a fresh lease id)
//! when no other node's lease conflicts; otherwise each conflicting holder is sent `Recall`
//! (`keep_read` when a writer may keep reading), again on every retry tick. The holder
//! A first revokes its local clients (`RevokeLocal`; the local table's revocation path: the
//! clients flush their logs, drop their DRAM views and kernel caches) and is told how far
//! each of its log streams covers their updates (`LocalRevoked`); then it waits until the
//! replication driver reports those LSNs *published on every member of the view*
//! (`Published`), and only then answers `Released`. So the manager's next grant to B comes
//! after A's updates are in B's public area: B's clients held no lease on the inode (a node's
//! clients hold leases only under its node-level lease), so they read it afresh from a public
//! area that has every update of A — a reader on B never sees a stale attribute after a
//! write on A returned and its lease was taken.
//!
//! A `Recall` of a lease the node does not hold (it crashed and restarted, or the grant was
//! lost) is answered after everything the node has logged is published on every member, and
//! that lease id is *retired*: a late `Granted` of it is refused. Lease ids are
//! `manager epoch << 32 | counter`, so a later manager's ids are higher than an earlier one's.
//!
//! **Manager change.** A node that becomes a shard's manager (delegated, or after its own
//! restart, in a newer epoch) grants nothing until every member of the view has told it what
//! it holds in that shard (`Sync` → `Holdings`); a member removed from the view counts as
//! answered only once its lease timeout has passed. Every node drops a `Granted` from a
//! manager epoch older than the newest `Sync` it answered for that shard.
//!
//! **Views.** Every message carries the sender's view epoch; one older than the receiver's is
//! dropped at the one entry point ([`ClusterLeases::step`]'s `Receive`), before any handler
//! (retries carry the new epoch). A node removed from the view loses its leases at the
//! manager once its lease timeout has passed since the removal (issue 24 makes the node stop
//! using them by then; here the removed node is one that is gone).
//!
//! # What the simulation checks
//!
//! Never two nodes whose local tables may let a client write one inode at one time, nor a
//! writer and a reader of another node; a node's local table is granted an inode last
//! written by another live node only after that write is published on every live member;
//! and, once the network is quiet, every request is granted.

pub(crate) mod admit;
pub(crate) mod core;
#[cfg(test)]
mod sim;

/// A node of the cluster (clustermgr's node id).
pub(crate) type NodeId = u32;
pub(crate) type Ino = u64;
/// A node-level lease id: the manager's epoch in the high 32 bits, a counter below.
pub(crate) type LeaseId = u64;
pub(crate) type Lsn = u64;
/// A log stream: `(origin node, log slot)`.
pub(crate) type StreamId = (NodeId, u32);

/// Read or write, as the local table's.
pub(crate) use linefs_proto::LeaseMode as Mode;
