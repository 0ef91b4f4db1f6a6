//! clustermgr: membership, epochs, chain order, cluster-wide inode numbers and root-lease
//! delegation over a real ZooKeeper (LineFS paper §3.4–3.5), and the ZooKeeper server that
//! `linefs up` starts on loopback.
//!
//! Modules, each importing only those before it:
//! - [`format`](mod@format): every znode's path and byte layout (explicit little-endian, versioned);
//! - [`membership`], [`inodes`], [`lease`]: the pure cores (znode data in, decisions out);
//! - [`error`], [`driver`]: the async driver over `zookeeper-client` ([`Member`]);
//! - [`server`]: a standalone server or a 3-server ensemble from the Debian package.
//!
//! # Znodes
//!
//! Under the cluster's root (default `/linefs`):
//!
//! | znode | kind | data |
//! |-------|------|------|
//! | `members/m-<10 digits>` | ephemeral sequential, one per joined node | [`format::encode_member`] |
//! | `view` | persistent, compare-and-set on its version | [`format::encode_view`] |
//! | `inodes` | persistent, compare-and-set on its version | [`format::encode_counter`] |
//! | `leases/<16 hex digits>` | persistent, one per delegated subtree | [`format::encode_delegation`] |
//! | `inode-ranges/<16 hex digits>` | persistent, one per range cut, created with the counter's write | [`format::encode_range_owner`] |
//!
//! Every record starts with a 4-byte magic (`LFZM`, `LFZV`, `LFZI`, `LFZL`), a u16
//! layout version (1) and two reserved zero bytes; all integers are little-endian.
//!
//! Member record (`members/m-<seq>`):
//!
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0 | 4 | magic `"LFZM"` |
//! | 4 | 2 | version (1) |
//! | 6 | 2 | reserved, 0 |
//! | 8 | 4 | node id |
//! | 12 | 2 | low-latency address length L (≤ 255) |
//! | 14 | 2 | bulk address length B (≤ 255) |
//! | 16 | L | low-latency address (fsync, leases), UTF-8 `host:port` |
//! | 16+L | B | bulk address (chunks), UTF-8 |
//!
//! View (`view`): a 24-byte header then N entries in chain order, head first.
//!
//! | off | size | field |
//! |----:|-----:|-------|
//! | 0 | 4 | magic `"LFZV"` |
//! | 4 | 2 | version (1) |
//! | 6 | 2 | reserved, 0 |
//! | 8 | 8 | epoch (≥ 1, +1 per membership change) |
//! | 16 | 4 | member count N (≤ 1024) |
//! | 20 | 4 | reserved, 0 |
//!
//! View entry: node id (4) · low-latency length L (2) · bulk length B (2) · incarnation, the
//! member znode's sequence (8) · low-latency address (L) · bulk address (B).
//!
//! Inode counter (`inodes`): magic `"LFZI"` (4) · version (2) · reserved (2) · next inode
//! number never handed out (8) — 16 bytes.
//!
//! Delegation (`leases/<subtree inode, 16 hex digits>`): magic `"LFZL"` (4) · version (2) ·
//! reserved (2) · owner node id (4) · reserved (4) · owner incarnation (8) · epoch it was
//! granted in (8) · subtree root inode (8) — 40 bytes.
//!
//! Range owner (`inode-ranges/<range start, 16 hex digits>`): magic `"LFZR"` (4) · version (2) ·
//! reserved (2) · owner node id (4) · reserved (4) · start (8) · end (8) — 32 bytes.

pub mod driver;
pub mod error;
pub mod format;
pub mod inodes;
pub mod lease;
pub mod membership;
pub mod server;

pub use driver::{Config, Member, SessionStatus, DEFAULT_SESSION_TIMEOUT};
pub use error::Error;
pub use format::{Addrs, Delegation, MemberEntry, NodeId, View};
pub use inodes::InodeRange;
pub use server::{ServerError, ZkServer};
