//! Chain replication of client logs (LineFS §3.3.2), as a pure state machine.
//!
//! Every node runs an [`Engine`]. It is the primary of its own client logs (streams named
//! `(node, slot)`) and a replica of other nodes' logs: chunks flow down each log's chain
//! (primary → replica 1 → replica 2), each replica persists its copy before it acknowledges,
//! forwards in parallel with its persist and publishes what it persisted; fsync waits until
//! every member of the chain has its targets durable; log space is reclaimed only below what
//! is both published locally and replicated. The cluster manager's view (epoch, ordered live
//! nodes) is an input; messages of another epoch are dropped at one entry point.
//!
//! The engine does no I/O, keeps no clock and starts no thread: a driver feeds it
//! [`Input`]s (views, appends, fsyncs, received messages, completed persists and
//! publications, timeouts) and carries out its [`Output`]s (messages to send, log ranges to
//! ship, persists, publications, state transfers, replicated and reclaim points, fsync
//! completions).
//!
//! Modules:
//! - [`types`]: nodes, LSNs, streams, the view and its chains, shared byte slices;
//! - [`msg`]: messages, inputs, outputs; [`ranges`]: contiguous prefixes from out-of-order
//!   completions;
//! - [`engine`]: the rules (its module doc lists them), primary and replica sides;
//! - [`world`] (feature `check`): a simulated cluster, its drivers and the invariants they
//!   check; [`sim`]: the seeded simulation over it, with lost, duplicated and reordered
//!   messages, crashes, restarts and view changes; [`check`]: the stateright model of a
//!   small cluster over it.
//!
//! Beside the engine, two pure controllers for the replication driver's pipeline:
//! [`flow`] (a memory watermark over chunks in flight: pause above high, resume at or under
//! low) and [`compress`] (whether to lz4 the next chunk: off while compression is the
//! bottleneck, back on when it pays). Neither keeps a clock: times come in as values.
//!
//! docs/ARCHITECTURE.md ("Chain replication core") argues the rules.

pub mod compress;
pub mod engine;
pub mod flow;
pub mod msg;
pub mod ranges;
pub mod types;

#[cfg(feature = "check")]
pub mod check;
#[cfg(feature = "check")]
pub mod sim;
#[cfg(feature = "check")]
pub mod world;

pub use engine::{Config, Engine, Mutation};
pub use msg::{Class, Input, Message, Output, Recovered};
pub use types::{Data, Epoch, Lsn, NodeId, OpId, StreamId, View};
