//! The MINOS protocol core: Linearizable consistency with five persistency models
//! (papers/minos-offload.txt sections II-III; papers/distributed-data-persistency-micro21.txt
//! sections 4-5), as a pure state machine.
//!
//! Every node runs an [`Engine`]. It coordinates the writes of its own clients and follows
//! the writes of every other node: leaderless, every record replicated on every node,
//! concurrent writes ordered by their timestamps `<version, node_id>` ([`Ts`]). The engine
//! does no I/O, keeps no clock and starts no thread: a driver feeds it [`Input`]s (client
//! requests, received messages, completed persists, scope ends) and carries out its
//! [`Output`]s (messages to send, volatile updates, persists to start, client replies).
//!
//! Modules:
//! - [`ts`]: timestamps and node sets; [`record`]: per-record metadata;
//! - [`msg`]: messages, inputs, outputs; [`mode`]: the five modes and their differences;
//! - [`engine`]: the coordinator and follower algorithms;
//! - [`check`] (feature `check`): the stateright model of a cluster, its invariants and
//!   linearizability check; [`sim`]: the seeded deterministic simulation of large clusters;
//!   [`linearizability`]: the history checker the simulation uses.
//!
//! docs/MINOS.md describes the protocol as implemented, per mode.

pub mod engine;
pub mod mode;
pub mod msg;
pub mod record;
pub mod ts;

#[cfg(feature = "check")]
pub mod check;
pub mod linearizability;
#[cfg(feature = "check")]
pub mod sim;

pub use engine::{Config, Engine, Key};
pub use mode::{Mode, Mutation};
pub use msg::{Input, Message, OpId, Output, ScopeId, Value};
pub use record::Record;
pub use ts::{NodeId, NodeSet, Ts};
