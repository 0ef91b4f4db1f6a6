//! linefs-ops: what the `linefs` command does to a cluster directory (DESIGN section 9), as
//! a library, so that the operator CLI (`cli`, the verbs and their flags) and the benchmarks
//! (`bench`, which set up temporary clusters of their own) share one implementation.
//!
//! - [`clusterdir`]: the cluster directory's layout and files (description, registry, locks).
//! - [`cluster`]: `up`, `down`, `upgrade`, and the creation of a cluster's nodes.
//! - [`mounts`]: starting and stopping mount daemons (`mount`, `umount`).
//! - [`daemons`]: a node's nicfs and kworker; [`nodes`]: `kill-host` and the like.
//! - [`procs`]: spawning, readiness, pid files, liveness, mounts left behind.
//! - [`tempcluster`]: a cluster that lives as long as a command, torn down on
//!   Ctrl-C/SIGTERM too ([`interrupt`]).
//! - [`zookeeper`]: the cluster's ZooKeeper: the local servers `up` starts and `down`
//!   stops (`zk stop`/`zk start`: an outage on demand), or the ensemble `up --zk` names; the
//!   connection string nicfs is given.
//! - [`util`]: the error type of the verbs, sizes, dates, private files.
#![deny(clippy::undocumented_unsafe_blocks)]

pub mod cluster;
pub mod clusterdir;
pub mod daemons;
pub mod interrupt;
pub mod mounts;
pub mod nodes;
pub mod procs;
pub mod tempcluster;
pub mod util;
pub mod zookeeper;
