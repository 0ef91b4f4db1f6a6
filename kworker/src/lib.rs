//! kworker: the host-side publication worker of a linefs node. It stands for LineFS's host
//! kernel worker and its I/OAT DMA engine (DESIGN §1): nicfs sends it ordered *copy lists*
//! (copy these log bytes, or zeros, to these places of the public area), it executes them
//! and persists the result, and it heartbeats so that nicfs notices a dead host and
//! publishes by itself (isolated mode, LineFS §3.7).
//!
//! ```text
//! kworker --node DIR --socket PATH [--heartbeat-ms N (default 100)]
//! ```
//!
//! * the copy-list executor — checks, copies, persists, one fence per list — is the
//!   `linefs-copier` library crate ([`NodeFiles`]), so that nicfs runs *the same code* when
//!   it executes a list itself without depending on this daemon.
//! * [`daemon`]: the process — connect to nicfs (Hello on the kworker link), heartbeat
//!   every N ms, execute each `CopyList` and answer `CopyDone` or `CopyFailed`; reconnect
//!   with backoff when nicfs goes away; exit 0 on SIGTERM/SIGINT.
//!
//! kworker is stateless: it keeps nothing between lists but its open files, which it
//! reopens on every connection (and a slot's log file whenever nicfs has put a new one in
//! its place, see `linefs-copier`), so killing and restarting it at any moment loses nothing
//! (nicfs redoes a list that was in flight; lists are idempotent).
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod args;
pub mod daemon;

pub use linefs_copier::{ListFailure, NodeFiles, OpenError};
