//! Clients whose node is faked or fails on demand, for tests of libfs and of its users
//! (feature `testing`): what an application sees through the public API when the node
//! answers a certain way, without a nicfs process ([`fake_node`]), or with a real nicfs
//! behind a link that refuses chosen calls ([`attach_with_faults`]).
//!
//! The client's calls go through a fault link ([`Faults`]) in front of the node's link:
//! a test arms a refusal of one kind of call (or of all) with any [`RemoteError`] the wire
//! has — the node fenced, shutting down, timing out — or cuts the link (the node died
//! between two calls).

use crate::error::{FsError, FsResult};
use crate::link::fake::{self, FakeLink, NodeDir};
use crate::link::fault::FaultLink;
use crate::options::FsOptions;
use crate::state::Fs;
use linefs_pm::layout::FormatParams;
use std::path::Path;
use std::sync::Arc;

pub use crate::link::fault::Call;
pub use linefs_proto::RemoteError;

/// The fault link a test client's calls go through.
#[derive(Clone)]
pub struct Faults(Arc<FaultLink>);

impl Faults {
    /// The next `times` calls of `call` are refused with `code` (`u32::MAX`: every one).
    pub fn refuse(&self, call: Call, code: RemoteError, times: u32) {
        self.0.refuse(call, code, times)
    }

    /// `call` goes through again.
    pub fn disarm(&self, call: Call) {
        self.0.disarm(call)
    }

    /// Every call of every kind is refused with `code` (the node answers, but refuses
    /// everything: fenced, shutting down), until [`Faults::heal`].
    pub fn refuse_all(&self, code: RemoteError) {
        for call in Call::ALL {
            self.0.refuse(call, code, u32::MAX);
        }
    }

    /// Every call goes through again.
    pub fn heal(&self) {
        for call in Call::ALL {
            self.0.disarm(call);
        }
    }

    /// From now on the node is gone, as when nicfs dies: every call fails as on a closed
    /// connection (EIO), the session counts as failed (updates are refused) and its
    /// leases are dropped.
    pub fn cut(&self) {
        self.0.cut()
    }
}

/// An in-process fake node formatted in a temporary directory, which outlives its
/// clients: one client at a time attaches to it ([`FakeNode::attach`]), and each attach
/// recovers the node first, as a restarted nicfs would. The node grants leases at once,
/// hands out inode numbers and blocks from the public area's counts, and publishes the
/// client's log with pm's publisher when the client reports a chunk, syncs or detaches.
/// Nothing that nicfs checks across clients is faked (see `docs/ARCHITECTURE.md`, "Tests
/// of the node link").
pub struct FakeNode {
    dir: NodeDir,
}

impl FakeNode {
    pub fn format(params: &FormatParams) -> FsResult<FakeNode> {
        Ok(FakeNode { dir: fake::format(params)? })
    }

    /// A client of the node (its slot 0), its calls going through a fault link. EBUSY
    /// while an earlier client lives.
    pub fn attach(&self, opts: FsOptions) -> FsResult<(Fs, Faults)> {
        if Arc::strong_count(&self.dir) > 1 {
            return Err(FsError::Busy("the fake node's one client is attached".into()));
        }
        let (fake, session) = FakeLink::open(self.dir.clone())?;
        let fault = Arc::new(FaultLink::new(Arc::new(fake)));
        let fs = Fs::offload(session, fault.clone(), "(fake node)".into(), opts)?;
        Ok((fs, Faults(fault)))
    }
}

/// A client of a fresh [`FakeNode`] of `params` (which lives as long as the client).
pub fn fake_node(params: &FormatParams, opts: FsOptions) -> FsResult<(Fs, Faults)> {
    FakeNode::format(params)?.attach(opts)
}

/// A client attached to the nicfs listening on `socket` (as [`Fs::mount`] with
/// [`FsOptions::nicfs`] does), its calls going through a fault link.
pub fn attach_with_faults(socket: &Path, opts: FsOptions) -> FsResult<(Fs, Faults)> {
    let mut faults = None;
    let fs = Fs::attach_through(socket, opts, |link| {
        let fault = Arc::new(FaultLink::new(link));
        faults = Some(Faults(fault.clone()));
        fault
    })?;
    match faults {
        Some(faults) => Ok((fs, faults)),
        None => Err(FsError::Invalid("attaching made no link")),
    }
}
