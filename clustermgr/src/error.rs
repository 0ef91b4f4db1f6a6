//! The driver's errors: each one line, saying what to do where it can.

use std::time::Duration;

use crate::format::{FormatError, NodeId};

/// Why a clustermgr call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "ZooKeeper at {connect} unreachable after {waited:?} ({last}); start it or name a live ensemble with --zk"
    )]
    Unreachable { connect: String, waited: Duration, last: String },
    #[error("ZooKeeper session expired: this node is out of the cluster until it joins again")]
    SessionExpired,
    #[error("ZooKeeper session closed")]
    Closed,
    #[error("ZooKeeper did not answer {op} within {waited:?} (last: {last})")]
    Timeout { op: &'static str, waited: Duration, last: String },
    #[error("znode {path} holds data this build refuses: {err}")]
    Format { path: String, err: FormatError },
    #[error("ZooKeeper {op} {path}: {err}")]
    Zk { op: &'static str, path: String, err: zookeeper_client::Error },
    #[error("inode numbers exhausted")]
    Exhausted,
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    #[error("node {0} is not in the current view")]
    NotMember(NodeId),
}
